/*
 * pytrace-top's command line: Options_parse fills Options (top.h) or says
 * what is wrong in one line; -h and -V print and exit.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "top.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pytrace-top [--all]                      pick a live traced job (a list when not on a terminal)\n"
            "       pytrace-top PID | SEGMENT [options]      attach to a traced job and show it live\n"
            "       pytrace-top --file REC [--follow] [options]\n"
            "                                                show a recording (pytrace record -o REC)\n"
            "\n"
            "options:\n"
            "  --once            print the table once (text) and exit, instead of the live view\n"
            "  --json            with --once: print JSON instead of text\n"
            "  --duration S      with --once: read for S seconds first (default 0: what is there now;\n"
            "                    a live job's CPU%% is then the average since each thread started)\n"
            "  --window S        table of the last S seconds instead of the whole run (live view: start there)\n"
            "  --thread N        only thread N (its number in the segment; 0 = all threads)\n"
            "  --pid PID         a stream of several processes (a process tree, pytrace merge): show the\n"
            "                    process PID (keys: P cycles processes); --once without it adds them all up\n"
            "  --sort KEY        own (default), total, calls, prim, name or file\n"
            "  --time wall|cpu   the time shown (key c switches): wall (default; WAIT%% is the off-CPU part of\n"
            "                    each function's own time) or cpu (CPU time only: waiting hidden)\n"
            "  --last-step       the table (and flame) of the last complete step alone (key s: step mode);\n"
            "                    steps end at pytrace.step() and, under --torch, at Optimizer.step\n"
            "  --limit N         with --once: at most N rows\n"
            "  --tree-budget MIB memory for each process's call tree (default 256): past it, new call paths fold\n"
            "                    into [other] nodes (counted: \"folded\"); the function table stays exact\n"
            "  --follow          with --file: wait for the recording's end however long it is idle\n"
            "  --all             the job list shows ended and invalid segments too (as pytrace ls --all)\n"
            "  --no-hub          read the job's segment directly: no hub is started for a job that has\n"
            "                    none (by default one is, so that other readers can join) nor joined\n"
            "  -V, --version     print the version;  -h, --help: this help\n"
            "\n"
            "OWN%%WALL and TOT%%WALL are shares of the observed wall time (a sleeping or waiting frame counts;\n"
            "threads add up to more than 100%%); with --time cpu (OWN%%CPU, TOT%%CPU) of CPU time over the same\n"
            "base. <not observed>: time inside gaps (events lost), in no function and in no percentage.\n"
            "CPU%% is what the kernel counted (100%% = one core), n/a for a recording.\n"
            "Keys: ? help (every key), q quit, space pause, Tab table/flame, c wall/CPU time, o/t/#/n/f sort,\n"
            "r reverse, T thread list, P process, / filter, +/- window, w table window/run, i flame: hide idle threads,\n"
            "s step mode (the last step alone).\n");
}

static int parse_sort(const char *s)
{
    for (int i = 0; i < PT_AGG_SORT_COUNT; i++)
        if (!strcmp(s, App_sortNames[i]))
            return i;
    if (!strcmp(s, "self"))
        return PT_AGG_SORT_SELF;
    return -1;
}

int Options_parse(int argc, char **argv, Options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--once")) {
            o->once = 1;
        } else if (!strcmp(a, "--no-hub")) {
            o->no_hub = 1;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
            printf("pytrace-top %s (segment ABI %u.%u)\n", PYTRACE_VERSION, PT_ABI_MAJOR, PT_ABI_MINOR);
            exit(0);
        } else if (!strcmp(a, "--file")) {
            if (!val) {
                fprintf(stderr, "pytrace-top: --file needs a recording file (pytrace record -o FILE ...)\n");
                return -1;
            }
            o->file = val;
            i++;
        } else if (!strcmp(a, "--follow")) {
            o->follow = 1;
        } else if (!strcmp(a, "--all")) {
            o->all = 1;
        } else if (!strcmp(a, "--last-step")) {
            o->last_step = 1;
        } else if (!strcmp(a, "--duration") && val) {
            o->duration = atof(val);
            i++;
        } else if (!strcmp(a, "--window") && val) {
            o->window = atof(val);
            i++;
        } else if (!strcmp(a, "--thread") && val) {
            o->thread = strtoull(val, NULL, 10);
            i++;
        } else if (!strcmp(a, "--pid") && val) {
            char *end;
            o->pid = strtoull(val, &end, 10);
            if (!*val || *end || !o->pid) {
                fprintf(stderr, "pytrace-top: --pid needs a process id, not '%s'\n", val);
                return -1;
            }
            i++;
        } else if (!strcmp(a, "--tree-budget") && val) {
            char *end;
            unsigned long long mib = strtoull(val, &end, 10);
            if (!*val || *end || !mib || mib > (1ull << 24)) {
                fprintf(stderr, "pytrace-top: --tree-budget needs a size in MiB (1 to 16777216), not '%s'\n", val);
                return -1;
            }
            o->tree_budget = mib << 20;
            i++;
        } else if (!strcmp(a, "--time")) {
            if (!val || (strcmp(val, "wall") && strcmp(val, "cpu"))) {
                fprintf(stderr, "pytrace-top: --time needs wall or cpu, not '%s'\n", val ? val : "");
                return -1;
            }
            o->time_cpu = !strcmp(val, "cpu");
            i++;
        } else if (!strcmp(a, "--limit") && val) {
            o->limit = atoi(val);
            i++;
        } else if (!strcmp(a, "--sort") && val) {
            o->sort = parse_sort(val);
            if (o->sort < 0) {
                fprintf(stderr, "pytrace-top: unknown sort key '%s' (own, total, calls, prim, name, file)\n", val);
                return -1;
            }
            i++;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "pytrace-top: unknown option '%s'\n", a);
            usage(stderr);
            return -1;
        } else if (!o->target) {
            o->target = a;
        } else {
            fprintf(stderr, "pytrace-top: one target only (a pid or a segment name)\n");
            return -1;
        }
    }
    if (o->file && o->target) {
        fprintf(stderr, "pytrace-top: give a pid/segment or --file FILE, not both\n");
        return -1;
    }
    if (o->follow && !o->file) {
        fprintf(stderr, "pytrace-top: --follow is for recordings (--file FILE); a live job is always followed\n");
        return -1;
    }
    return 0;
}
