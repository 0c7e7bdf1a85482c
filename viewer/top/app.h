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
extern const PanelClass TasksPanel_class;   /* asyncio tasks (taskview.c), opened by A */

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
    int time_cpu;            /* time shown: 0 wall, 1 CPU (waiting hidden): key c, --time */
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
    /* the flame panel shows asyncio tasks' own trees (f / F in task mode, pt_agg_task_tree):
     * task_flame_of is the one task's Task symbol, or PT_AGG_NONE for every task side by side */
    int task_flame;
    uint32_t task_flame_of;

    /* thread list (threads.c): the panel it returns to, the thread under the cursor
     * (0: the "all threads" row), its scroll */
    const PanelClass *threads_back;
    uint64_t threads_cursor;
    int threads_scroll;

    /* task mode (taskview.c, A): the shown process's asyncio tasks (viewer/core/tasks.h),
     * refreshed while the panel is shown; the panel it returns to; the task under the
     * cursor (its Task symbol, so it stays on its task while the order changes); the
     * task whose logical calls are shown (tasks_open), or the table of tasks */
    pt_agg_tasks_t tasks;
    const PanelClass *tasks_back;
    int tasks_by_wait;       /* sort: 0 by running time, 1 by waiting time */
    int tasks_have_cursor, tasks_open;
    uint32_t tasks_cursor;
    int tasks_scroll, tasks_fn_scroll;

    int help;                /* the help screen is shown over the panel (?); any key closes it */

    /* steps (agg.h STEPS): the summary of the shown thread's steps (all threads: the
     * stepping thread's), and step mode (s): the table and the flame graph show the
     * last complete step alone */
    int step_mode;
    pt_agg_steps_t steps;

    char error[256];         /* the view's own error (aggregating), shown when the source has none */
} App;

/* The main loop reads the source every POLL_MS (getch's timeout; --once's sleep
 * while it waits for more). CPU use is shown over the last second (as top does):
 * the kernel counts it in clock ticks (usually 100 a second), so a third of a
 * second would show it in steps of 3%. It is read at the draw rate all the same,
 * so a thread that lives less than a second gets a figure (its average since it
 * started). */
#define POLL_MS 10
#define CPU_PERIOD_NS 1000000000ull

/* Sort keys by name (--sort, the status line), by enum pt_agg_sort. */
extern const char *const App_sortNames[PT_AGG_SORT_COUNT];

/* Losses other than events dropped, one line each (as runtime/pytrace/losses.py):
 * key is the name in --json and every other tool. */
typedef struct AppLoss {
    const char *key, *label;
    size_t offset; /* of a uint64_t in pt_reader_stats_t */
} AppLoss;
extern const AppLoss App_losses[];
extern const size_t App_lossCount;

/* Once the source is open (app->source): the CPU meters of a live job, the
 * aggregation set (--tree-budget), --pid to show. 0, or -ENOMEM. */
int App_start(App *app, uint64_t want_pid, uint64_t tree_budget);
/* Free what App_start made, the snapshots, and close the source. */
void App_done(App *app);
/* Read once (bounded, so keys stay live): events read, or a negative errno
 * (the source's error line says what). */
long App_poll(App *app);
/* Read the job's CPU use from /proc, at most every CPU_READ_NS unless forced. */
void App_sampleCpu(App *app, int force);
/* Show process i of the stream. */
void App_showProcess(App *app, size_t i);
/* --pid: show the process with this pid; -ENOENT if it was not seen. */
int App_selectPid(App *app, uint64_t pid);
/* A process's state in words ("running", "exited", ...). */
const char *App_procState(const pt_agg_t *agg);
/* The stream's state for the header and --once ("RUNNING", "ENDED", ...). */
const char *App_stateName(const App *app);
/* The job's events dropped (this view's gaps in a hub are counted apart). */
uint64_t App_dropped(const App *app);
/* Loss i of App_losses, from the stats. */
uint64_t App_loss(const App *app, size_t i);
/* The non-zero losses as "label n<sep>label n" ("" if none); their number. */
int App_lossText(const App *app, const char *sep, char *out, size_t cap);
/* Draw text on line y over the whole width (curses). */
void App_drawLine(int y, int attr, const char *text);
/* The live view's loop (curses started), until q or a signal. */
int App_run(App *app);

/* The error line to show: the source's, else the view's own ("" if none). */
const char *App_error(const App *app);
/* Refresh snapshots (table, tree, counters); in CPU mode the table is sorted
 * by the CPU figures. */
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
/* Open the task mode over the current panel (A). */
void TasksPanel_open(App *app);
/* Open the thread list over the current panel (T). */
void ThreadsPanel_open(App *app);
/* The time a row or tree node shows in the current time mode (app->time_cpu):
 * wall time, or its CPU part (viewer/core/cct.h, THE RULE FOR CPU TIME).
 * Percentages are of the table's span_ns (observed wall time) in both modes;
 * <not observed> time is in no row and not in that base. */
static inline uint64_t App_rowSelf(const App *app, const pt_agg_row_t *r)
{
    return app->time_cpu ? r->self_cpu_ns : r->self_ns;
}
static inline uint64_t App_rowTotal(const App *app, const pt_agg_row_t *r)
{
    return app->time_cpu ? r->total_cpu_ns : r->total_ns;
}
static inline double App_rowSelfPct(const App *app, const pt_agg_row_t *r)
{
    if (!app->time_cpu)
        return r->self_pct;
    return app->table.span_ns ? 100.0 * (double)r->self_cpu_ns / (double)app->table.span_ns : 0;
}
static inline double App_rowTotalPct(const App *app, const pt_agg_row_t *r)
{
    if (!app->time_cpu)
        return r->total_pct;
    return app->table.span_ns ? 100.0 * (double)r->total_cpu_ns / (double)app->table.span_ns : 0;
}
static inline uint64_t App_nodeIncl(const App *app, const pt_agg_tnode_t *n)
{
    return app->time_cpu ? n->incl_cpu_ns : n->incl_ns;
}
static inline uint64_t App_nodeSelf(const App *app, const pt_agg_tnode_t *n)
{
    return app->time_cpu ? n->self_cpu_ns : n->self_ns;
}
/* Waiting (off-CPU) share of a row's own wall time, in %: self wall less self CPU. */
static inline double App_rowWaitPct(const pt_agg_row_t *r)
{
    if (!r->self_ns || r->self_cpu_ns >= r->self_ns)
        return 0;
    return 100.0 * (double)(r->self_ns - r->self_cpu_ns) / (double)r->self_ns;
}
/* A flame frame that mostly waits: more than half of its inclusive wall time off a CPU. */
static inline int App_nodeWaits(const pt_agg_tnode_t *n)
{
    return n->incl_ns && n->incl_cpu_ns < n->incl_ns && n->incl_ns - n->incl_cpu_ns > n->incl_ns / 2;
}
/* "time: wall" / "time: CPU, waiting hidden": the header's words for the mode. */
static inline const char *App_timeName(const App *app)
{
    return app->time_cpu ? "time: CPU, waiting hidden" : "time: wall";
}
/* " steps (s): 30 on thread 1 [SGD.step]  last 12.3 ms  median ..." for the header
 * (app->steps); "" when there are none and step mode is off. */
void App_stepsLine(const App *app, char *line, size_t cap);
/* Draw the help screen (every key of every mode) over rows [top, top + rows). */
void Help_draw(int top, int rows, int cols);

#endif
