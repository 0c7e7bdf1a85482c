/*
 * pytrace-top application state and the Panel vtable (htop's Panel.c shape):
 * each view is a Panel built with designated initializers; the main loop asks
 * the current panel to draw into the body area and hands it the keys it does
 * not handle itself. Key handlers return PanelResult flags.
 */
#ifndef PT_TOP_APP_H
#define PT_TOP_APP_H

#include <stdint.h>

#include "shm/reader.h"
#include "viewer/core/agg.h"
#include "viewer/core/aggset.h"

#include "cpu.h"
#include "source.h"

typedef enum PanelResult {
    PANEL_IGNORED = 0,
    PANEL_HANDLED = 1 << 0,
    PANEL_REDRAW = 1 << 1,   /* draw again now */
    PANEL_REFRESH = 1 << 2,  /* re-query the aggregation, then draw */
    PANEL_QUIT = 1 << 3,
} PanelResult;

struct App;

typedef struct PanelClass {
    const char *name;
    const char *help;        /* keys of this panel, shown in the help line */
    void (*draw)(struct App *app, int top, int rows, int cols);
    PanelResult (*onKey)(struct App *app, int ch);
} PanelClass;

extern const PanelClass TablePanel_class;
extern const PanelClass FlamePanel_class;
extern const PanelClass ThreadsPanel_class; /* the thread list (threads.c), opened by T */

#define APP_PATH_MAX 256
#define APP_FILTER_MAX 128

typedef struct App {
    Source *source;          /* where the stream comes from (source.h) */
    pt_agg_t *agg;           /* the shown process's aggregation (index proc of set) */
    /* A stream of several processes (Message.process: a job's process tree, a
     * merged recording) has one aggregation per process; an untagged stream one. */
    pt_aggset_t *set;
    Cpu *cpus;               /* each one's CPU meters while not shown (the shown one's are in cpu);
                              * room for the set's max_processes */
    size_t proc;
    int merged;              /* the table adds up every process (--once without --pid) */
    uint64_t want_pid;       /* --pid: show this process once it is seen */
    const PanelClass *panel;

    /* what is shown */
    int paused;              /* picture frozen (reading goes on) */
    double window_seconds;
    int table_window;        /* table shows the window (1) or the whole run (0) */
    uint64_t thread;         /* 0 = all threads */
    int sort;                /* enum pt_agg_sort */
    int sort_desc;
    char filter[APP_FILTER_MAX];
    int filter_editing;

    /* snapshots, refreshed at the draw rate unless paused */
    pt_agg_table_t table;
    pt_agg_tree_t tree;
    pt_agg_counters_t counters;
    pt_reader_stats_t stats;
    double read_rate;        /* events/s read, wall clock */
    Cpu cpu;                 /* the job's CPU use from /proc (live jobs only; pid 0 for a recording) */
    SourceStatus status;     /* the source's, after the last poll */

    /* table panel */
    int table_selected, table_scroll;
    /* flame panel: selection and zoom as symbol paths from the root, so they
     * survive the tree being rebuilt */
    uint32_t sel_path[APP_PATH_MAX];
    int sel_len;
    uint32_t zoom_path[APP_PATH_MAX];
    int zoom_len;

    int flame_scroll;        /* flame levels scrolled off the top (PgUp/PgDn) */
    int flame_follow;        /* the selection moved: scroll so that it is in view */
    int hide_idle;           /* flame: leave out threads that started no call in the window (i) */

    /* thread list (threads.c): the panel it returns to, the thread under the cursor
     * (0: the "all threads" row), its scroll */
    const PanelClass *threads_back;
    uint64_t threads_cursor;
    int threads_scroll;

    int help;                /* the help screen is shown over the panel (?); any key closes it */

    char error[256];         /* the view's own error (aggregating), shown when the source has none */
} App;

/* The error line to show: the source's, else the view's own ("" if none). */
const char *App_error(const App *app);
/* Refresh snapshots (table, tree, counters). */
void App_refresh(App *app);
/* Display name of a symbol id ("" if none). */
const char *App_symbolName(App *app, uint32_t id);
/* "thread 2 (worker)" / "all threads", escaped, for the status line and the flame root. */
void App_threadLabel(App *app, char *out, size_t cap);
/* The thread's name (escaped, at most 24 columns), "" if it has none. */
void App_threadName(const pt_agg_thread_info_t *ti, char *out, size_t cap);
/* A CPU meter as text: "98.7%", "n/a" (a recording, or nothing the kernel would
 * tell), "-" (no full period yet). */
void App_cpuText(const App *app, const CpuMeter *m, char *out, size_t cap);
/* Open the thread list over the current panel (T). */
void ThreadsPanel_open(App *app);
/* Draw the help screen (every key of every mode) over rows [top, top + rows). */
void Help_draw(int top, int rows, int cols);

#endif
