/*
 * pytrace-top's entry points, called from main.c: the command line
 * (options.c), the job list (picker.c) and --once (headless.c). The live view
 * is App_run (app.h, view.c).
 */
#ifndef PT_TOP_TOP_H
#define PT_TOP_TOP_H

#include <stddef.h>
#include <stdint.h>

#include "app.h"

typedef struct Options {
    const char *target;
    int once, json;
    double duration, window;
    uint64_t thread;
    int sort, limit;
    const char *file;
    int follow;
    int all;
    uint64_t pid; /* --pid: the process of a multi-process stream to show */
    int no_hub;   /* --no-hub: read the segment directly, never through a hub */
    uint64_t tree_budget; /* --tree-budget MIB, in bytes; 0: the default */
    int time_cpu; /* --time cpu: CPU time shown (waiting hidden); the key c switches */
    int last_step; /* --last-step: the table is the last complete step alone (step mode, key s) */
} Options;

/* Parse argv into o (o->sort set to the default first). 0, or -1 once the
 * reason is on stderr (exit status 2). -h and -V print and exit(0). */
int Options_parse(int argc, char **argv, Options *o);

/* The curses job list (CRT_init done): 0 with the chosen segment's name in
 * chosen, 1 if the user quit. */
int Picker_run(char *chosen, size_t cap, int all);
/* The job list as text on stdout; the exit status. */
int Picker_print(int all);

/* --once: read (to the end of a recording, or --duration more of a live job),
 * then print the table as text or --json. Returns the exit status. */
int Headless_run(App *app, const Options *o);

#endif /* PT_TOP_TOP_H */
