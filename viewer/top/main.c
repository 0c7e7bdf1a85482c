/*
 * pytrace-top: the live terminal view of a traced job.
 *
 *   pytrace-top                      pick a live segment (arrows + Enter)
 *   pytrace-top PID|SEGMENT          attach and show it live
 *   pytrace-top PID --once [--json]  print the table once and exit
 *   pytrace-top --file REC [--follow] [--once [--json]]
 *                                    show a recording (viewer/core/recfile.h) the
 *                                    same way; a file still being written is
 *                                    followed while it grows (or, with
 *                                    --follow, until the recording ends)
 *
 * The stream comes from a Source (source.h: a live segment or a recording).
 * The main loop reads it every ~10 ms (getch timeout) so the job's rings
 * never fill, and re-queries the aggregation / redraws at ~3 Hz. The
 * picture can be paused (space) while reading goes on.
 */
#include <curses.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "crt.h"
#include "schema/pt_fb.h"
#include "shm/clock.h"
#include "text.h"

#define POLL_MS 10
/* CPU use is shown over the last second (as top does): the kernel counts it in
 * clock ticks (usually 100 a second), so a third of a second would show it in
 * steps of 3%. It is read at the draw rate all the same, so a thread that
 * lives less than a second gets a figure (its average since it started). */
#define CPU_PERIOD_NS 1000000000ull
#define CPU_READ_NS 300000000ull
#define DRAW_NS 333000000ull
#define POLL_MAX_EVENTS 4000000u

static const double App_windows[] = {1, 2, 5, 10, 30, 60, 120, 300, 600};
#define N_WINDOWS (int)(sizeof App_windows / sizeof App_windows[0])

static const char *const App_sortNames[PT_AGG_SORT_COUNT] = {"own", "total", "calls", "prim", "name", "file"};

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
            "  --limit N         with --once: at most N rows\n"
            "  --tree-budget MIB memory for each process's call tree (default 256): past it, new call paths fold\n"
            "                    into [other] nodes (counted: \"folded\"); the function table stays exact\n"
            "  --follow          with --file: wait for the recording's end however long it is idle\n"
            "  --all             the job list shows ended and invalid segments too (as pytrace ls --all)\n"
            "  --no-hub          read the job's segment directly: no hub is started for a job that has\n"
            "                    none (by default one is, so that other readers can join) nor joined\n"
            "  -V, --version     print the version;  -h, --help: this help\n"
            "\n"
            "OWN%%WALL and TOT%%WALL are shares of wall time (a sleeping or waiting frame counts; threads add\n"
            "up to more than 100%%); CPU%% is what the kernel counted (100%% = one core), n/a for a recording.\n"
            "Keys: ? help (every key), q quit, space pause, Tab table/flame, o/t/c/n/f sort, r reverse, T thread list,\n"
            "P process, / filter, +/- window, w table window/run, i flame: hide idle threads.\n");
}

/* ---- reading ------------------------------------------------------------ */

/* The aggregation of m's process (pt_aggset's rule: made on first sight, the
 * first tag seen takes the one made before anything was read); NULL if the
 * process is past the set's limit or out of memory (the set counts it). A new
 * process gets its CPU meters here (they stay in top). */
static pt_agg_t *App_aggOf(App *app, const pt_fb_msg_t *m)
{
    size_t i;
    int rc = pt_aggset_route(app->set, m->process, &i);
    if (rc < 0)
        return NULL;
    if (rc == 1) { /* cpus has a place for every process the set may hold */
        /* a live stream's process: its CPU from /proc by its own pid */
        uint64_t pid = m->type == PT_MSG_PROCESS_INFO && !app->source->cls->replay ? m->u.process_info.pid : 0;
        Cpu_init(&app->cpus[i], pid, CPU_PERIOD_NS);
    }
    return pt_aggset_agg(app->set, i);
}

static void App_onMessage(void *ctx, const pt_fb_msg_t *m)
{
    App *app = ctx;
    pt_agg_t *agg = App_aggOf(app, m);
    if (!agg) {
        if (pt_aggset_count(app->set) >= pt_aggset_max_processes(app->set))
            snprintf(app->error, sizeof app->error,
                     "more than %u processes in the stream; the messages of the others (%llu) are not shown",
                     pt_aggset_max_processes(app->set), (unsigned long long)pt_aggset_refused(app->set));
        else
            snprintf(app->error, sizeof app->error, "out of memory while aggregating; the picture is incomplete");
    } else if (pt_agg_feed_msg(agg, m) == -ENOMEM) {
        snprintf(app->error, sizeof app->error, "out of memory while aggregating; the picture is incomplete");
    }
}

/* Show process i (its aggregation, its CPU meters; all its threads). */
static void App_showProcess(App *app, size_t i)
{
    if (i >= pt_aggset_count(app->set) || i == app->proc)
        return;
    app->cpus[app->proc] = app->cpu;
    app->cpu = app->cpus[i];
    app->proc = i;
    app->agg = pt_aggset_agg(app->set, i);
    app->thread = 0;
}

/* --pid: the process with this pid, if it was seen. */
static int App_selectPid(App *app, uint64_t pid)
{
    for (size_t i = 0; i < pt_aggset_count(app->set); i++)
        if (pt_agg_process_info(pt_aggset_agg(app->set, i))->pid == pid) {
            App_showProcess(app, i);
            return 0;
        }
    return -ENOENT;
}

static const char *App_procState(const pt_agg_t *agg)
{
    pt_agg_counters_t c;
    pt_agg_counters(agg, &c);
    switch (c.producer_state) {
    case PT_STATE_RUNNING: return "running";
    case PT_STATE_STOPPED: return "stopped";
    case PT_STATE_EXITED: return "exited";
    case PT_STATE_DEAD: return "died";
    default: return c.threads_active ? "running" : "?";
    }
}

/* Read once (bounded, so keys stay live). Returns events read or a negative
 * errno (the source's error line says what). */
static long App_poll(App *app)
{
    long n = Source_poll(app->source, App_onMessage, app, POLL_MAX_EVENTS);
    Source_status(app->source, &app->status);
    return n;
}

const char *App_error(const App *app)
{
    const char *e = Source_error(app->source);
    return e[0] ? e : app->error;
}

const char *App_symbolName(App *app, uint32_t id) { return pt_agg_symbol(app->agg, id).name; }

void App_threadName(const pt_agg_thread_info_t *ti, char *out, size_t cap)
{
    char esc[256];
    Text_escape(ti->name, esc, sizeof esc);
    Text_fit(esc, 24, 0, out, cap);
}

void App_threadLabel(App *app, char *out, size_t cap)
{
    if (!app->thread) {
        snprintf(out, cap, "all threads");
        return;
    }
    pt_agg_thread_info_t ti;
    for (size_t i = 0; i < pt_agg_thread_count(app->agg); i++) {
        if (pt_agg_thread_at(app->agg, i, &ti) || ti.thread != app->thread || !ti.name[0])
            continue;
        char name[128];
        App_threadName(&ti, name, sizeof name);
        snprintf(out, cap, "thread %llu (%s)", (unsigned long long)app->thread, name);
        return;
    }
    snprintf(out, cap, "thread %llu", (unsigned long long)app->thread);
}

/* Read the job's CPU use from /proc (the process and each thread that has not
 * ended): at most every CPU_READ_NS unless forced. Nothing once the job ended
 * (its pid may belong to another process by then) or for a recording. */
static void App_sampleCpu(App *app, int force)
{
    if (!app->cpu.pid || app->status.ended || app->status.died)
        return;
    uint64_t now = pt_monotonic_ns();
    if (!force && app->cpu.last_sample_ns && now - app->cpu.last_sample_ns < CPU_READ_NS)
        return;
    size_t n = pt_agg_thread_count(app->agg), k = 0;
    uint64_t *threads = malloc((n ? n : 1) * 2 * sizeof *threads);
    if (!threads)
        return;
    uint64_t *tids = threads + n;
    for (size_t i = 0; i < n; i++) {
        pt_agg_thread_info_t ti;
        if (pt_agg_thread_at(app->agg, i, &ti) || ti.ended)
            continue;
        threads[k] = ti.thread;
        tids[k++] = ti.os_tid;
    }
    (void)Cpu_sample(&app->cpu, threads, tids, k, now); /* a meter it could not keep shows "-" */
    free(threads);
    for (size_t i = 0; i < pt_aggset_count(app->set); i++) /* the other processes: their process figure */
        if (i != app->proc && app->cpus[i].pid)
            (void)Cpu_sample(&app->cpus[i], NULL, NULL, 0, now);
}

void App_cpuText(const App *app, const CpuMeter *m, char *out, size_t cap)
{
    double pct = CpuMeter_periodPct(m);
    if (!app->cpu.pid || (m && m->reads == 0 && m->gone))
        snprintf(out, cap, "n/a");
    else if (pct < 0)
        snprintf(out, cap, "-");
    else
        snprintf(out, cap, "%.1f%%", pct);
}

/* The table of every process added up: rows of one function (kind, name,
 * file, line) in several processes are one row; percentages add up (each is
 * of its own process's span). */
static int App_rowKey(const void *x, const void *y)
{
    const pt_agg_row_t *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    if (!c)
        c = strcmp(a->file, b->file);
    if (!c)
        c = a->line < b->line ? -1 : a->line > b->line;
    if (!c)
        c = a->kind < b->kind ? -1 : a->kind > b->kind;
    return c;
}

static int App_sortKey, App_sortDesc;

static int App_rowOrder(const void *x, const void *y)
{
    const pt_agg_row_t *a = x, *b = y;
    uint64_t u = 0, v = 0;
    int c = 0;
    switch (App_sortKey) {
    case PT_AGG_SORT_TOTAL: u = a->total_ns; v = b->total_ns; break;
    case PT_AGG_SORT_CALLS: u = a->calls; v = b->calls; break;
    case PT_AGG_SORT_PRIM_CALLS: u = a->prim_calls; v = b->prim_calls; break;
    case PT_AGG_SORT_NAME: c = strcmp(a->name, b->name); break;
    case PT_AGG_SORT_FILE: c = strcmp(a->file, b->file); break;
    default: u = a->self_ns; v = b->self_ns; break;
    }
    if (!c)
        c = u < v ? -1 : u > v;
    if (App_sortDesc)
        c = -c;
    return c ? c : App_rowKey(a, b);
}

static void App_mergedTable(App *app, const pt_agg_query_t *q, pt_agg_table_t *out)
{
    memset(out, 0, sizeof *out);
    size_t n = 0, cap = 0;
    pt_agg_row_t *rows = NULL;
    for (size_t i = 0; i < pt_aggset_count(app->set); i++) {
        pt_agg_table_t t;
        if (pt_agg_table(pt_aggset_agg(app->set, i), q, app->sort, app->sort_desc, app->filter, &t))
            continue;
        if (n + t.count > cap) {
            size_t nc = cap ? cap : 64;
            while (nc < n + t.count)
                nc *= 2;
            pt_agg_row_t *r = realloc(rows, nc * sizeof *r);
            if (!r) {
                pt_agg_table_free(&t);
                continue;
            }
            rows = r;
            cap = nc;
        }
        memcpy(rows + n, t.rows, t.count * sizeof *rows);
        n += t.count;
        if (t.span_ns > out->span_ns)
            out->span_ns = t.span_ns;
        pt_agg_table_free(&t);
    }
    if (!rows)
        return;
    qsort(rows, n, sizeof *rows, App_rowKey);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (w && !App_rowKey(&rows[w - 1], &rows[i])) {
            pt_agg_row_t *r = &rows[w - 1];
            r->calls += rows[i].calls;
            r->prim_calls += rows[i].prim_calls;
            r->self_ns += rows[i].self_ns;
            r->total_ns += rows[i].total_ns;
            r->self_pct += rows[i].self_pct;
            r->total_pct += rows[i].total_pct;
        } else {
            rows[w++] = rows[i];
        }
    }
    App_sortKey = app->sort;
    App_sortDesc = app->sort_desc;
    qsort(rows, w, sizeof *rows, App_rowOrder);
    out->rows = rows;
    out->count = w;
}

void App_refresh(App *app)
{
    pt_agg_query_t tq = {.thread = app->thread, .window_seconds = app->table_window ? app->window_seconds : 0};
    pt_agg_query_t fq = {.thread = app->thread, .window_seconds = app->window_seconds, .hide_idle = app->hide_idle};
    if (app->want_pid && pt_agg_process_info(app->agg)->pid != app->want_pid)
        (void)App_selectPid(app, app->want_pid);
    pt_agg_table_free(&app->table);
    pt_agg_tree_free(&app->tree);
    if (app->merged && pt_aggset_count(app->set) > 1)
        App_mergedTable(app, &tq, &app->table);
    else
        pt_agg_table(app->agg, &tq, app->sort, app->sort_desc, app->filter, &app->table);
    if (app->panel == &FlamePanel_class)
        pt_agg_tree(app->agg, &fq, &app->tree);
    pt_agg_counters(app->agg, &app->counters);
    if (app->merged && pt_aggset_count(app->set) > 1) { /* the counts of every process, added up */
        pt_agg_counters_t *t = &app->counters;
        for (size_t i = 0; i < pt_aggset_count(app->set); i++) {
            if (i == app->proc)
                continue;
            pt_agg_counters_t c;
            pt_agg_counters(pt_aggset_agg(app->set, i), &c);
            t->events_seen += c.events_seen;
            t->events_per_second += c.events_per_second;
            t->dropped += c.dropped;
            t->dropped_lost_records += c.dropped_lost_records;
            t->dropped_lost_counts += c.dropped_lost_counts;
            t->dropped_producer += c.dropped_producer;
            t->missed_in_hub += c.missed_in_hub;
            if (!t->dropped_cause[0])
                t->dropped_cause = c.dropped_cause;
            if (!t->missed_cause[0])
                t->missed_cause = c.missed_cause;
            t->unmatched_closes += c.unmatched_closes;
            t->unannounced += c.unannounced;
            t->threads_seen += c.threads_seen;
            t->threads_active += c.threads_active;
            t->hook_errors += c.hook_errors;
            t->symbols += c.symbols;
            t->nodes += c.nodes;
            t->folded_calls += c.folded_calls;
            t->other_nodes += c.other_nodes;
            if (c.span_ns > t->span_ns)
                t->span_ns = c.span_ns;
        }
    }
    Source_stats(app->source, &app->stats);
    App_sampleCpu(app, 0);
}

static const char *App_stateName(const App *app)
{
    if (app->status.disconnected)
        return "DISCONNECTED"; /* from the hub: the job's state is not known any more */
    if (app->status.died)
        return "DIED";
    if (app->status.ended)
        return "ENDED";
    if (app->status.damaged)
        return "DAMAGED";
    if (app->status.stalled)
        return "INCOMPLETE";
    switch (app->stats.producer_state) {
    case PT_STATE_RUNNING: return "RUNNING";
    case PT_STATE_STOPPED: return "STOPPED";
    case PT_STATE_EXITED: return "EXITED";
    case PT_STATE_DEAD: return "DIED";
    default: return "?";
    }
}

static uint64_t App_dropped(const App *app)
{
    /* the job's drops (agg.h): this view's gaps in a hub are counted apart (missed_in_hub) */
    uint64_t d = app->counters.dropped;
    return app->stats.producer_events_dropped > d ? app->stats.producer_events_dropped : d;
}

/* Losses other than events dropped (shown on their own): one line each, as in
 * runtime/pytrace/losses.py. key: the name in --json and every other tool. */
static const struct {
    const char *key, *label;
    size_t offset; /* of a uint64_t in pt_reader_stats_t */
} App_losses[] = {
    {"symbols_dropped", "symbols dropped", offsetof(pt_reader_stats_t, symbols_dropped)},
    {"hook_errors", "hook errors", offsetof(pt_reader_stats_t, hook_errors)},
    {"threads_untraced", "threads without a ring", offsetof(pt_reader_stats_t, threads_untraced)},
    {"events_untraced", "events of threads without a ring", offsetof(pt_reader_stats_t, events_untraced)},
    {"tracing_displaced", "threads displaced", offsetof(pt_reader_stats_t, tracing_displaced)},
    {"unrecorded_events", "events not recorded (disk full)", offsetof(pt_reader_stats_t, unrecorded_events)},
};
#define APP_LOSS_COUNT (sizeof App_losses / sizeof App_losses[0])

static uint64_t App_loss(const App *app, size_t i)
{
    uint64_t v;
    memcpy(&v, (const char *)&app->stats + App_losses[i].offset, sizeof v);
    return v;
}

/* "symbols dropped 25325<sep>hook errors 1" for the non-zero ones ("" if
 * none); returns the number of non-zero counters. */
static int App_lossText(const App *app, const char *sep, char *out, size_t cap)
{
    int n = 0;
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < APP_LOSS_COUNT; i++) {
        uint64_t v = App_loss(app, i);
        if (v == 0)
            continue;
        int w = snprintf(out + used, cap - used, "%s%s %llu", n ? sep : "", App_losses[i].label,
                         (unsigned long long)v);
        n++;
        if (w < 0 || (size_t)w >= cap - used)
            break;
        used += (size_t)w;
    }
    return n;
}

/* ---- interactive -------------------------------------------------------- */

static void App_fillLine(int y, int attr)
{
    attrset(attr);
    move(y, 0);
    for (int i = 0; i < COLS; i++)
        addch(' ');
}

static void App_drawLine(int y, int attr, const char *text)
{
    char buf[2048];
    App_fillLine(y, attr);
    Text_fit(text, COLS, 0, buf, sizeof buf);
    mvaddstr(y, 0, buf);
    attrset(A_NORMAL);
}

typedef struct ThreadCpu {
    pt_agg_thread_info_t info;
    double pct;
} ThreadCpu;

static int ThreadCpu_byPct(const void *a, const void *b)
{
    const ThreadCpu *x = a, *y = b;
    if (x->pct != y->pct)
        return x->pct < y->pct ? 1 : -1;
    return x->info.thread < y->info.thread ? -1 : x->info.thread > y->info.thread;
}

/* " threads (cpu): 2 side 98.7%  1 MainThread 0.2%": the threads running now,
 * busiest first (as top orders them); all of them once the job ended or for a
 * recording (first seen first; its cpu is n/a). The selected one is [marked]. */
static void App_threadsLine(App *app, char *line, size_t cap)
{
    size_t n = pt_agg_thread_count(app->agg), k = 0, running = 0;
    ThreadCpu *list = calloc(n ? n : 1, sizeof *list);
    int live = app->cpu.pid != 0;
    size_t used = (size_t)snprintf(line, cap, live ? " threads (cpu):" : " threads (cpu n/a in a recording):");
    if (!list)
        return;
    for (size_t i = 0; i < n; i++)
        if (!pt_agg_thread_at(app->agg, i, &list[k].info)) {
            running += !list[k].info.ended;
            k++;
        }
    size_t m = 0;
    for (size_t i = 0; i < k; i++) { /* keep the running ones, when there are any */
        if (running && list[i].info.ended)
            continue;
        list[i].pct = live ? CpuMeter_periodPct(Cpu_thread(&app->cpu, list[i].info.thread)) : 0;
        list[m++] = list[i];
    }
    if (live)
        qsort(list, m, sizeof *list, ThreadCpu_byPct);
    for (size_t i = 0; i < m && used < cap; i++) {
        char name[128], pct[32] = "";
        App_threadName(&list[i].info, name, sizeof name);
        if (live)
            App_cpuText(app, Cpu_thread(&app->cpu, list[i].info.thread), pct, sizeof pct);
        int sel = app->thread == list[i].info.thread;
        int w = snprintf(line + used, cap - used, " %s%llu%s%s%s%s%s", sel ? "[" : " ",
                         (unsigned long long)list[i].info.thread, name[0] ? " " : "", name, live ? " " : "", pct,
                         sel ? "]" : "");
        if (w < 0)
            break;
        used += (size_t)w;
    }
    free(list);
}

/* " processes (P): [4101 running 98.7% python job.py]  4102 exited 0.0% ...": each
 * process of the stream, its pid, state and CPU% (n/a in a recording); the
 * shown one [marked]. */
static void App_processesLine(App *app, char *line, size_t cap)
{
    size_t used = (size_t)snprintf(line, cap, " processes (P):");
    for (size_t i = 0; i < pt_aggset_count(app->set) && used < cap; i++) {
        const pt_fb_process_info_t *pi = pt_agg_process_info(pt_aggset_agg(app->set, i));
        const Cpu *c = i == app->proc ? &app->cpu : &app->cpus[i];
        char pct[32] = "n/a", cmd[64] = "", esc[200];
        if (c->pid) {
            double v = CpuMeter_periodPct(&c->process);
            if (v >= 0)
                snprintf(pct, sizeof pct, "%.1f%%", v);
            else
                snprintf(pct, sizeof pct, "-");
        }
        Text_escape(pi->command_line.ptr ? pi->command_line.ptr : "", esc, sizeof esc);
        Text_fit(esc, 24, 0, cmd, sizeof cmd);
        int sel = i == app->proc;
        int w = snprintf(line + used, cap - used, " %s%llu %s %s %s%s", sel ? "[" : " ",
                         (unsigned long long)pi->pid, App_procState(pt_aggset_agg(app->set, i)), pct, cmd, sel ? "]" : "");
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

static void App_draw(App *app)
{
    erase();
    char line[2048], rate[32], cmd[300], win[160], losses[256], cpu[32];
    const pt_fb_process_info_t *pi = pt_agg_process_info(app->agg);
    Text_escape(pi->command_line.ptr ? pi->command_line.ptr : "", cmd, sizeof cmd);
    Text_count(app->read_rate, rate, sizeof rate);
    uint64_t dropped = App_dropped(app);
    unsigned threads = app->counters.threads_active;
    App_threadLabel(app, win, sizeof win);
    App_cpuText(app, &app->cpu.process, cpu, sizeof cpu);
    const char *state = App_stateName(app);
    char source[300] = "", speed[64];
    int replay = app->source->cls->replay;
    Source_describe(app->source, source, sizeof source);
    if (replay) {
        Text_count((double)app->stats.events_read, rate, sizeof rate);
        snprintf(speed, sizeof speed, "%s events", rate);
    } else {
        snprintf(speed, sizeof speed, "%s ev/s", rate);
    }
    int other_losses = App_lossText(app, "  ", losses, sizeof losses);
    snprintf(line, sizeof line, " pytrace-top  %spid %llu  [%s]%s  cpu %s  %s  dropped %llu%s%s  threads %u  window %gs  %s  %s: %s  %s",
             source, (unsigned long long)(pt_aggset_count(app->set) > 1 ? pi->pid : app->stats.pid), state, app->paused ? " PAUSED" : "", cpu, speed,
             (unsigned long long)dropped, other_losses ? "  " : "", losses, threads, app->window_seconds, win, app->panel->name,
             app->panel == &TablePanel_class ? (app->table_window ? "window" : "whole run") : "window", cmd);
    App_drawLine(0, CRT_attr(app->status.ended || app->status.died ? CRT_C_ENDED : CRT_C_HEADER) | A_BOLD, line);
    int top = 1;
    if (dropped) {
        snprintf(line, sizeof line,
                 " WARNING: the job dropped %llu events (%s); counts are incomplete - "
                 "use a larger ring (pytrace run --ring-size) or the lossless policy",
                 (unsigned long long)dropped, app->counters.dropped_cause);
        App_drawLine(top++, CRT_attr(CRT_C_WARNING) | A_BOLD, line);
    }
    if (app->counters.missed_in_hub) {
        snprintf(line, sizeof line, " this view missed %llu events (%s); not the job's drops",
                 (unsigned long long)app->counters.missed_in_hub, app->counters.missed_cause);
        App_drawLine(top++, CRT_attr(CRT_C_WARNING), line);
    }
    if (other_losses) {
        char list[256];
        App_lossText(app, ", ", list, sizeof list);
        snprintf(line, sizeof line,
                 " WARNING: the job lost more than events (%s); the picture is incomplete - "
                 "pytrace.stop() and the job's stderr say why", list);
        App_drawLine(top++, CRT_attr(CRT_C_WARNING) | A_BOLD, line);
    }
    if (App_error(app)[0]) {
        char esc[600];
        Text_escape(App_error(app), esc, sizeof esc);
        snprintf(line, sizeof line, " error: %s", esc);
        App_drawLine(top++, CRT_attr(CRT_C_WARNING), line);
    }
    if (app->counters.unannounced) { /* damage (walk.h): the same words as pytrace export's */
        snprintf(line, sizeof line, " DAMAGE: %llu events name symbols never announced: shown as <unknown #id>",
                 (unsigned long long)app->counters.unannounced);
        App_drawLine(top++, CRT_attr(CRT_C_WARNING) | A_BOLD, line);
    }
    if (app->counters.folded_calls && app->panel == &FlamePanel_class) {
        char n[32];
        Text_count((double)app->counters.folded_calls, n, sizeof n);
        snprintf(line, sizeof line,
                 " call tree: budget %llu MiB reached; %s calls folded into [other] (the table is exact; "
                 "--tree-budget MIB)", (unsigned long long)(app->counters.tree_budget >> 20), n);
        App_drawLine(top++, CRT_attr(CRT_C_WARNING), line);
    }
    if (app->status.disconnected) {
        snprintf(line, sizeof line, " %s: disconnected from the hub; the job may still run (pytrace top PID "
                 "reads it again); this is the last picture (q to quit)", state);
        App_drawLine(top++, CRT_attr(CRT_C_ENDED) | A_BOLD, line);
    } else if (app->status.ended || app->status.died) {
        const char *how = app->status.died ? "died without a clean exit" : "exited";
        if (app->status.cut_short && !app->status.died)
            how = "was still running when the recording stopped";
        snprintf(line, sizeof line, " %s: %s %s; this is its last picture%s (q to quit)", state,
                 replay ? "the recording ended: the job" : "the job", how,
                 replay ? ", the window is its last seconds" : "");
        App_drawLine(top++, CRT_attr(CRT_C_ENDED) | A_BOLD, line);
    } else if (app->status.stalled && !app->status.damaged) {
        App_drawLine(top++, CRT_attr(CRT_C_WARNING),
                     " INCOMPLETE: the recording has no end mark and is not growing (its writer stopped or is idle); "
                     "watching the file");
    }
    if (pt_aggset_count(app->set) > 1) {
        App_processesLine(app, line, sizeof line);
        App_drawLine(top++, A_NORMAL, line);
    }
    if (pt_agg_thread_count(app->agg)) {
        App_threadsLine(app, line, sizeof line);
        App_drawLine(top++, A_NORMAL, line);
    }
    if (app->filter_editing || app->filter[0]) {
        char esc[300];
        Text_escape(app->filter, esc, sizeof esc);
        snprintf(line, sizeof line, " filter: %s%s", esc, app->filter_editing ? "_  (Enter: done, Esc: clear)" : "");
        App_drawLine(top++, A_BOLD, line);
    }
    int rows = LINES - top - 1;
    if (rows > 0)
        app->panel->draw(app, top, rows, COLS);
    if (rows > 0 && app->help)
        Help_draw(top, rows, COLS);
    snprintf(line, sizeof line, " ?:help q:quit space:pause Tab:%s T:threads%s /:filter +/-:window  %s  [sort %s %s]",
             app->panel == &TablePanel_class ? "flame" : "table", pt_aggset_count(app->set) > 1 ? " P:process" : "",
             app->panel->help, App_sortNames[app->sort],
             app->sort_desc ? "desc" : "asc");
    App_drawLine(LINES - 1, CRT_attr(CRT_C_HELP_KEY), line);
    refresh();
}

static PanelResult App_onFilterKey(App *app, int ch)
{
    size_t len = strlen(app->filter);
    if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) {
        app->filter_editing = 0;
    } else if (ch == 27) {
        app->filter_editing = 0;
        app->filter[0] = 0;
    } else if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
        if (len)
            app->filter[len - 1] = 0;
    } else if (ch >= 0x20 && ch < 0x7f && len + 1 < sizeof app->filter) {
        app->filter[len] = (char)ch;
        app->filter[len + 1] = 0;
    } else {
        return PANEL_HANDLED;
    }
    app->table_selected = app->table_scroll = 0;
    return PANEL_HANDLED | PANEL_REFRESH;
}

static PanelResult App_onKey(App *app, int ch)
{
    if (app->help && ch != KEY_RESIZE) { /* any key closes the help screen, and does nothing else */
        app->help = 0;
        return PANEL_HANDLED | PANEL_REDRAW;
    }
    if (app->filter_editing)
        return App_onFilterKey(app, ch);
    PanelResult r = app->panel->onKey(app, ch);
    if (r & PANEL_HANDLED)
        return r;
    switch (ch) {
    case 'q': case 'Q': return PANEL_QUIT;
    case ' ':
        app->paused = !app->paused;
        return PANEL_REFRESH;
    case '\t': case 'v':
        app->panel = app->panel == &TablePanel_class ? &FlamePanel_class : &TablePanel_class;
        return PANEL_REFRESH;
    case 'T': /* the thread list (threads.c); Enter there picks one */
        ThreadsPanel_open(app);
        return PANEL_REFRESH;
    case '?':
        app->help = 1;
        return PANEL_REDRAW;
    case 'P': /* the next process of a multi-process stream */
        if (pt_aggset_count(app->set) > 1) {
            app->want_pid = 0;
            App_showProcess(app, (app->proc + 1) % pt_aggset_count(app->set));
            app->sel_len = app->zoom_len = app->flame_scroll = 0;
            app->table_selected = app->table_scroll = 0;
        }
        return PANEL_REFRESH;
    case '/':
        app->filter_editing = 1;
        return PANEL_REDRAW;
    case '+': case '=': case '-': case '_': {
        int i = 0;
        while (i < N_WINDOWS - 1 && App_windows[i] < app->window_seconds)
            i++;
        if (ch == '+' || ch == '=')
            i = i + 1 < N_WINDOWS ? i + 1 : i;
        else
            i = i > 0 ? i - 1 : 0;
        app->window_seconds = App_windows[i];
        return PANEL_REFRESH;
    }
    case KEY_RESIZE:
        return PANEL_REDRAW;
    default:
        return PANEL_IGNORED;
    }
}

static int App_run(App *app)
{
    uint64_t last_draw = 0, rate_t0 = pt_monotonic_ns(), next_retry = 0;
    uint64_t rate_events0 = 0;
    int need_refresh = 1;
    timeout(POLL_MS);
    while (!CRT_quit) {
        uint64_t now = pt_monotonic_ns();
        if (!App_error(app)[0] || now >= next_retry) {
            long n = App_poll(app);
            if (n < 0 && n != -EPIPE && n != -ECONNRESET)
                next_retry = now + 1000000000ull; /* keep trying, slowly */
            else
                next_retry = 0;
        }
        if (now - rate_t0 >= 1000000000ull) {
            pt_reader_stats_t st;
            Source_stats(app->source, &st);
            app->read_rate = (double)(st.events_read - rate_events0) * 1e9 / (double)(now - rate_t0);
            rate_events0 = st.events_read;
            rate_t0 = now;
        }
        if (CRT_syncSize())
            last_draw = 0; /* draw the new size now */
        if (now - last_draw >= DRAW_NS) {
            if (!app->paused || need_refresh)
                App_refresh(app);
            else
                Source_stats(app->source, &app->stats);
            need_refresh = 0;
            App_draw(app);
            last_draw = now;
        }
        int ch = getch();
        if (ch == ERR)
            continue;
        PanelResult r = App_onKey(app, ch);
        if (r & PANEL_QUIT)
            break;
        if (r & PANEL_REFRESH)
            App_refresh(app);
        if (r & (PANEL_REDRAW | PANEL_REFRESH)) {
            App_draw(app);
            last_draw = pt_monotonic_ns();
        }
    }
    return 0;
}

/* ---- picker ------------------------------------------------------------- */

typedef struct PickerRow {
    pt_segment_info_t info;
    double rate;
} PickerRow;

static const char *Picker_stateName(const pt_segment_info_t *s)
{
    if (!s->valid)
        return "INVALID";
    switch (s->state) {
    case PT_STATE_RUNNING: return "RUNNING";
    case PT_STATE_STOPPED: return "STOPPED";
    case PT_STATE_EXITED: return "EXITED";
    case PT_STATE_DEAD: return "DEAD";
    default: return "?";
    }
}

static void Picker_format(const PickerRow *r, char *line, size_t cap)
{
    char cmd[600], rate[32], name[300];
    /* the name is another user's choice too (any file under /dev/shm) */
    Text_escape(r->info.valid ? r->info.cmdline : r->info.error, cmd, sizeof cmd);
    Text_escape(r->info.name, name, sizeof name);
    Text_count(r->rate, rate, sizeof rate);
    snprintf(line, cap, " %-8llu %-8s %7u %9s %10llu  %-18s %s", (unsigned long long)r->info.pid, Picker_stateName(&r->info),
             r->info.threads_active, rate, (unsigned long long)r->info.events_dropped, name, cmd);
}

/* The list hides what `pytrace ls` hides (runtime/pytrace/cli.py cmd_ls):
 * segments whose producer is gone and files that are not valid segments,
 * unless --all. Keeps the shown ones at the front; returns their number. */
static size_t Picker_filter(pt_segment_info_t *infos, size_t count, int all)
{
    size_t kept = 0;
    for (size_t i = 0; i < count; i++)
        if (all || (infos[i].alive && infos[i].valid))
            infos[kept++] = infos[i];
    return kept;
}

/* Returns 0 with the chosen name, 1 if the user quit. */
static int Picker_run(char *chosen, size_t cap, int all)
{
    enum { MAXSEG = 128 };
    static PickerRow rows[MAXSEG], prev[MAXSEG];
    size_t count = 0, prev_count = 0;
    int selected = 0;
    uint64_t last = 0, prev_t = 0;
    timeout(100);
    while (!CRT_quit) {
        uint64_t now = pt_monotonic_ns();
        if (!last || now - last >= 1000000000ull) {
            pt_segment_info_t infos[MAXSEG];
            size_t found = 0;
            if (pt_segment_list(infos, MAXSEG, &found) < 0)
                found = 0;
            count = Picker_filter(infos, found < MAXSEG ? found : MAXSEG, all);
            for (size_t i = 0; i < count; i++) {
                rows[i].info = infos[i];
                rows[i].rate = 0;
                for (size_t j = 0; j < prev_count; j++)
                    if (!strcmp(prev[j].info.name, infos[i].name) && prev_t && now > prev_t &&
                        infos[i].events_written >= prev[j].info.events_written)
                        rows[i].rate = (double)(infos[i].events_written - prev[j].info.events_written) * 1e9 /
                                       (double)(now - prev_t);
            }
            memcpy(prev, rows, count * sizeof *rows);
            prev_count = count;
            prev_t = now;
            last = now;
        }
        if (selected >= (int)count)
            selected = count ? (int)count - 1 : 0;
        (void)CRT_syncSize();
        erase();
        App_drawLine(0, CRT_attr(CRT_C_HEADER) | A_BOLD, " pytrace-top: pick a traced job (arrows + Enter, q to quit)");
        char line[1200];
        snprintf(line, sizeof line, " %-8s %-8s %7s %9s %10s  %-18s %s", "PID", "STATE", "THREADS", "EV/S", "DROPS",
                 "SEGMENT", "COMMAND");
        App_drawLine(1, A_BOLD | A_UNDERLINE, line);
        if (!count)
            mvaddstr(3, 1, all ? "no pytrace segments: start a job with `pytrace run script.py` (refreshing every second)"
                               : "no live pytrace segments: start a job with `pytrace run script.py` (refreshing every "
                                 "second; --all lists ended ones too)");
        for (size_t i = 0; i < count && (int)i + 2 < LINES - 1; i++) {
            Picker_format(&rows[i], line, sizeof line);
            App_drawLine(2 + (int)i, (int)i == selected ? CRT_attr(CRT_C_SELECTED) : (int)A_NORMAL, line);
        }
        App_drawLine(LINES - 1, CRT_attr(CRT_C_HELP_KEY), " Up/Down:select  Enter:attach  q:quit");
        refresh();
        int ch = getch();
        switch (ch) {
        case 'q': case 'Q': return 1;
        case KEY_UP: case 'k': if (selected > 0) selected--; break;
        case KEY_DOWN: case 'j': if (selected + 1 < (int)count) selected++; break;
        case '\n': case '\r': case KEY_ENTER:
            if (count) {
                snprintf(chosen, cap, "%s", rows[selected].info.name);
                return 0;
            }
            break;
        default: break;
        }
    }
    return 1;
}

static int Picker_print(int all)
{
    pt_segment_info_t infos[128];
    size_t found = 0;
    int rc = pt_segment_list(infos, 128, &found);
    if (rc < 0) {
        fprintf(stderr, "pytrace-top: cannot list segments: %s\n", strerror(-rc));
        return 1;
    }
    found = Picker_filter(infos, found < 128 ? found : 128, all);
    if (!found) {
        printf("no %spytrace segments\n", all ? "" : "live ");
        return 0;
    }
    printf(" %-8s %-8s %7s %9s %10s  %-18s %s\n", "PID", "STATE", "THREADS", "EV/S", "DROPS", "SEGMENT", "COMMAND");
    for (size_t i = 0; i < found; i++) {
        PickerRow r = {.info = infos[i]};
        char line[1200];
        Picker_format(&r, line, sizeof line);
        printf("%s\n", line);
    }
    return 0;
}

/* ---- headless ------------------------------------------------------------ */

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
} Options;

/* A live stream: what is there now, then --duration seconds more (or until
 * the job ends), sampling the job's CPU meanwhile. */
static void Headless_drainLive(App *app, double duration)
{
    uint64_t end = pt_monotonic_ns() + (uint64_t)(duration * 1e9);
    for (int i = 0; i < 1000000; i++) { /* drain what is there */
        long n = App_poll(app);
        if (n <= 0)
            break;
    }
    App_sampleCpu(app, 1); /* the threads are known now: the start of the CPU measure */
    while (duration > 0 && pt_monotonic_ns() < end && !CRT_quit && !app->status.ended && !app->status.died &&
           !app->status.disconnected) {
        App_poll(app);
        App_sampleCpu(app, 0); /* every CPU_READ_NS, so a thread that ends keeps its figures */
        struct timespec ts = {0, POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < 1000000; i++) {
        long n = App_poll(app);
        if (n <= 0)
            break;
    }
    App_sampleCpu(app, 1);
}

/* --once measures CPU over what it read for (--duration); with less than this
 * to go on, it gives each task's average since it started (as ps does). */
#define HEADLESS_CPU_MEASURE_NS 500000000ull

typedef enum { CPU_NONE, CPU_MEASURED, CPU_SINCE_START } CpuBasis;

static CpuBasis Headless_cpuBasis(const App *app)
{
    if (!app->cpu.pid || !app->cpu.process.reads)
        return CPU_NONE;
    return CpuMeter_measuredSeconds(&app->cpu.process) * 1e9 >= (double)HEADLESS_CPU_MEASURE_NS ? CPU_MEASURED
                                                                                                 : CPU_SINCE_START;
}

static double Headless_cpuPct(const App *app, const CpuMeter *m)
{
    switch (Headless_cpuBasis(app)) {
    case CPU_MEASURED: return CpuMeter_measuredPct(m);
    case CPU_SINCE_START: return CpuMeter_sinceStartPct(m);
    default: return -1;
    }
}

/* A JSON number, or null when unknown (< 0). */
static void Headless_jsonNumber(double v, char *out, size_t cap)
{
    if (v < 0)
        snprintf(out, cap, "null");
    else
        snprintf(out, cap, "%.3f", v);
}

/* A recording: read it to its end. Without --follow, stop when it has not
 * ended but has stalled (what is there is shown, a torn tail is truncation);
 * with --follow, wait for its end (or --duration). */
static void Headless_drainReplay(App *app, double duration, int follow)
{
    uint64_t start = pt_monotonic_ns();
    while (!CRT_quit && !SourceStatus_finished(&app->status)) {
        long n = App_poll(app);
        if (n < 0 && !follow)
            break; /* an I/O error: report it rather than spin */
        if (SourceStatus_finished(&app->status) || app->status.stalled)
            break;
        if (Source_pending(app->source) == 0 && n > 0)
            continue; /* more may be there at once */
        if (duration > 0 && pt_monotonic_ns() - start >= (uint64_t)(duration * 1e9))
            break;
        struct timespec ts = {0, POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void Headless_json(App *app, const Options *o)
{
    char a[2048], b[2048];
    const pt_fb_process_info_t *pi = pt_agg_process_info(app->agg);
    Text_json(pi->command_line.ptr, a, sizeof a);
    Text_json(pi->segment.ptr, b, sizeof b);
    printf("{\n  \"pid\": %llu,\n  \"segment\": \"%s\",\n  \"command\": \"%s\",\n  \"state\": \"%s\",\n",
           (unsigned long long)(pt_aggset_count(app->set) > 1 ? pi->pid : app->stats.pid), b, a, App_stateName(app));
    printf("  \"events_read\": %llu,\n  \"events_seen\": %llu,\n  \"events_per_second\": %.1f,\n"
           "  \"events_dropped\": %llu,\n  \"span_ns\": %llu,\n  \"window_seconds\": %g,\n  \"thread\": %llu,\n",
           (unsigned long long)app->stats.events_read, (unsigned long long)app->counters.events_seen,
           app->counters.events_per_second, (unsigned long long)App_dropped(app),
           (unsigned long long)app->table.span_ns, o->window, (unsigned long long)o->thread);
    /* why (agg.h: one definition for every view); this view's own gaps in a hub are
     * events_missed_in_hub (the hub source's), never in events_dropped */
    printf("  \"events_dropped_cause\": \"%s\",\n  \"events_missed_cause\": \"%s\",\n",
           app->counters.dropped_cause, app->counters.missed_cause);
    for (size_t i = 0; i < APP_LOSS_COUNT; i++)
        printf("  \"%s\": %llu,\n", App_losses[i].key, (unsigned long long)App_loss(app, i));
    /* the call tree's budget: calls past it are in [other] nodes (the table is exact) */
    printf("  \"tree_budget_bytes\": %llu,\n  \"tree_nodes\": %llu,\n  \"folded_calls\": %llu,\n",
           (unsigned long long)app->counters.tree_budget, (unsigned long long)app->counters.nodes,
           (unsigned long long)app->counters.folded_calls);
    /* events naming a symbol never announced: damage (walk.h), shown as <unknown #id> */
    printf("  \"unannounced_events\": %llu,\n", (unsigned long long)app->counters.unannounced);
    {
        CpuBasis basis = Headless_cpuBasis(app);
        char pct[32], secs[32], measured[32];
        Headless_jsonNumber(Headless_cpuPct(app, &app->cpu.process), pct, sizeof pct);
        Headless_jsonNumber(basis == CPU_NONE ? -1 : CpuMeter_seconds(&app->cpu.process), secs, sizeof secs);
        Headless_jsonNumber(basis == CPU_MEASURED ? CpuMeter_measuredSeconds(&app->cpu.process) : -1, measured,
                            sizeof measured);
        printf("  \"cpu_pct\": %s,\n  \"cpu_seconds\": %s,\n  \"cpu_basis\": %s,\n  \"cpu_measured_seconds\": %s,\n",
               pct, secs,
               basis == CPU_MEASURED ? "\"measured\"" : basis == CPU_SINCE_START ? "\"since_start\"" : "null",
               measured);
    }
    if (App_error(app)[0]) {
        Text_json(App_error(app), a, sizeof a);
        printf("  \"error\": \"%s\",\n", a);
    }
    Source_json(app->source, stdout);
    /* every process of the stream (one for a plain segment or recording); "process":
     * the one whose threads follow, or null when the functions add them all up */
    if (app->merged && pt_aggset_count(app->set) > 1)
        printf("  \"process\": null,\n");
    else
        printf("  \"process\": %u,\n", pt_aggset_tag(app->set, app->proc));
    printf("  \"processes\": [");
    for (size_t i = 0; i < pt_aggset_count(app->set); i++) {
        const pt_fb_process_info_t *pi = pt_agg_process_info(pt_aggset_agg(app->set, i));
        pt_agg_counters_t c;
        pt_agg_counters(pt_aggset_agg(app->set, i), &c);
        Text_json(pi->command_line.ptr, a, sizeof a);
        printf("%s\n    {\"process\": %u, \"pid\": %llu, \"ppid\": %llu, \"command\": \"%s\", \"state\": \"%s\", "
               "\"events_seen\": %llu, \"threads\": %u, \"events_dropped\": %llu}",
               i ? "," : "", pt_aggset_tag(app->set, i), (unsigned long long)pi->pid, (unsigned long long)pi->ppid, a,
               App_procState(pt_aggset_agg(app->set, i)), (unsigned long long)c.events_seen, c.threads_seen,
               (unsigned long long)c.dropped);
    }
    printf("\n  ],\n");
    printf("  \"threads\": [");
    /* the shown process's threads; every process's when the table adds them up */
    int first = 1;
    for (size_t p = 0; p < pt_aggset_count(app->set); p++) {
        if (p != app->proc && !(app->merged && pt_aggset_count(app->set) > 1))
            continue;
        pt_agg_t *agg = pt_aggset_agg(app->set, p);
        const Cpu *cpu = p == app->proc ? &app->cpu : &app->cpus[p];
        for (size_t i = 0; i < pt_agg_thread_count(agg); i++) {
            pt_agg_thread_info_t ti;
            pt_agg_thread_at(agg, i, &ti);
            Text_json(ti.name, a, sizeof a);
            const CpuMeter *m = Cpu_thread(cpu, ti.thread);
            char pct[32], secs[32];
            Headless_jsonNumber(m ? Headless_cpuPct(app, m) : -1, pct, sizeof pct);
            Headless_jsonNumber(m ? CpuMeter_seconds(m) : -1, secs, sizeof secs);
            printf("%s\n    {\"thread\": %llu, \"os_tid\": %llu, \"name\": \"%s\", \"ended\": %s, \"events\": %llu, "
                   "\"cpu_pct\": %s, \"cpu_seconds\": %s, \"process\": %u}",
                   first ? "" : ",", (unsigned long long)ti.thread, (unsigned long long)ti.os_tid, a,
                   ti.ended ? "true" : "false", (unsigned long long)ti.events, pct, secs, pt_aggset_tag(app->set, p));
            first = 0;
        }
    }
    printf("\n  ],\n  \"functions\": [");
    for (size_t i = 0; i < app->table.count && (o->limit <= 0 || (int)i < o->limit); i++) {
        const pt_agg_row_t *r = &app->table.rows[i];
        Text_json(r->name, a, sizeof a);
        Text_json(r->file, b, sizeof b);
        printf("%s\n    {\"name\": \"%s\", \"file\": \"%s\", \"line\": %u, \"calls\": %llu, \"prim_calls\": %llu, "
               "\"self_ns\": %llu, \"total_ns\": %llu, \"self_wall_pct\": %.3f, \"total_wall_pct\": %.3f}",
               i ? "," : "", a, b, r->line, (unsigned long long)r->calls, (unsigned long long)r->prim_calls,
               (unsigned long long)r->self_ns, (unsigned long long)r->total_ns, r->self_pct, r->total_pct);
    }
    printf("\n  ]\n}\n");
}

/* "98.7% over 3.0 s", "12.0% since it started", "n/a (a recording has no
 * CPU figures)", for the first line of --once. */
static void Headless_cpuLine(const App *app, char *out, size_t cap)
{
    double pct = Headless_cpuPct(app, &app->cpu.process);
    switch (Headless_cpuBasis(app)) {
    case CPU_MEASURED:
        snprintf(out, cap, "cpu %.1f%% over %.1f s", pct, CpuMeter_measuredSeconds(&app->cpu.process));
        break;
    case CPU_SINCE_START: snprintf(out, cap, "cpu %.1f%% since it started (--duration S measures)", pct); break;
    default:
        snprintf(out, cap, "cpu n/a%s", app->source->cls->replay ? " (a recording has no CPU figures)" : "");
        break;
    }
}

enum { HEADLESS_THREAD_ROWS = 8 }; /* --once text: ended threads listed before the rest are summed up */

static void Headless_text(App *app, const Options *o)
{
    char rate[32], cpu[96];
    Text_count(app->counters.events_per_second, rate, sizeof rate);
    Headless_cpuLine(app, cpu, sizeof cpu);
    const int all = app->merged && pt_aggset_count(app->set) > 1;
    char who[48];
    if (all)
        snprintf(who, sizeof who, "processes %zu", pt_aggset_count(app->set));
    else
        snprintf(who, sizeof who, "pid %llu",
                 (unsigned long long)(pt_aggset_count(app->set) > 1 ? pt_agg_process_info(app->agg)->pid : app->stats.pid));
    printf("%s  [%s]  events read %llu  %s ev/s  dropped %llu  threads %u  %s\n", who, App_stateName(app),
           (unsigned long long)app->stats.events_read, rate, (unsigned long long)App_dropped(app),
           app->counters.threads_seen, cpu);
    if (pt_aggset_count(app->set) > 1) { /* a stream of several processes */
        printf("processes %zu:", pt_aggset_count(app->set));
        for (size_t i = 0; i < pt_aggset_count(app->set); i++)
            printf("%s pid %llu %s", i ? "," : "", (unsigned long long)pt_agg_process_info(pt_aggset_agg(app->set, i))->pid,
                   App_procState(pt_aggset_agg(app->set, i)));
        if (app->merged)
            printf("; the table adds them up (--pid PID: one of them)\n");
        else
            printf("; shown: pid %llu\n", (unsigned long long)pt_agg_process_info(app->agg)->pid);
    }
    char losses[256];
    if (App_lossText(app, ", ", losses, sizeof losses))
        printf("lost: %s\n", losses);
    if (app->counters.unannounced)
        printf("damage: %llu events name symbols never announced: shown as <unknown #id>\n",
               (unsigned long long)app->counters.unannounced);
    if (app->counters.folded_calls)
        printf("call tree: budget %llu MiB reached, %llu calls folded into [other] (the table is exact)\n",
               (unsigned long long)(app->counters.tree_budget >> 20), (unsigned long long)app->counters.folded_calls);
    if (App_error(app)[0]) {
        char esc[600];
        Text_escape(App_error(app), esc, sizeof esc);
        printf("error: %s\n", esc);
    }
    printf("%7s %8s %6s %9s %10s  %s\n", "THREAD", "OS_TID", "CPU%", "CPU TIME", "EVENTS", "NAME");
    /* The function table is what the user came for: a job of many short-lived threads
     * lists the running ones and at most a few ended ones; --json lists every thread. */
    size_t shown = 0, skipped = 0;
    for (size_t p = 0; p < pt_aggset_count(app->set); p++) {
        if (p != app->proc && !all)
            continue; /* the shown process's threads; every process's when the table adds them up */
        pt_agg_t *agg = pt_aggset_agg(app->set, p);
        const Cpu *cpu_of = p == app->proc ? &app->cpu : &app->cpus[p];
        size_t threads = pt_agg_thread_count(agg);
        for (size_t i = 0; i < threads; i++) {
            pt_agg_thread_info_t ti;
            if (pt_agg_thread_at(agg, i, &ti))
                continue;
            if (ti.ended && shown >= HEADLESS_THREAD_ROWS) {
                skipped++;
                continue;
            }
            shown++;
            const CpuMeter *m = Cpu_thread(cpu_of, ti.thread);
            double pct = m ? Headless_cpuPct(app, m) : -1, secs = m ? CpuMeter_seconds(m) : -1;
            char pct_s[32] = "n/a", secs_s[32] = "n/a", name[300];
            if (pct >= 0)
                snprintf(pct_s, sizeof pct_s, "%.1f", pct);
            if (secs >= 0)
                snprintf(secs_s, sizeof secs_s, "%.2fs", secs);
            Text_escape(ti.name, name, sizeof name);
            char of[40] = "";
            if (all)
                snprintf(of, sizeof of, " (pid %llu)", (unsigned long long)pt_agg_process_info(agg)->pid);
            printf("%7llu %8llu %6s %9s %10llu  %s%s%s\n", (unsigned long long)ti.thread, (unsigned long long)ti.os_tid,
                   pct_s, secs_s, (unsigned long long)ti.events, name, of, ti.ended ? " (ended)" : "");
        }
    }
    if (skipped)
        printf("%7s  and %zu more ended threads (--json lists every thread)\n", "", skipped);
    printf("%8s %8s %10s %10s %16s  %s\n", "OWN%WALL", "TOT%WALL", "OWN", "TOTAL", "CALLS", "FUNCTION  FILE:LINE");
    for (size_t i = 0; i < app->table.count && (o->limit <= 0 || (int)i < o->limit); i++) {
        const pt_agg_row_t *r = &app->table.rows[i];
        char self[32], total[32], calls[64], name[1024], file[1024];
        Text_duration(r->self_ns, self, sizeof self);
        Text_duration(r->total_ns, total, sizeof total);
        if (r->calls != r->prim_calls)
            snprintf(calls, sizeof calls, "%llu/%llu", (unsigned long long)r->calls, (unsigned long long)r->prim_calls);
        else
            snprintf(calls, sizeof calls, "%llu", (unsigned long long)r->calls);
        Text_escape(r->name, name, sizeof name);
        Text_escape(r->file, file, sizeof file);
        if (r->line) /* C functions have no line: "builtins", not "builtins:0" */
            printf("%8.1f %8.1f %10s %10s %16s  %s  %s:%u\n", r->self_pct, r->total_pct, self, total, calls, name,
                   file, r->line);
        else
            printf("%8.1f %8.1f %10s %10s %16s  %s  %s\n", r->self_pct, r->total_pct, self, total, calls, name,
                   file);
    }
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

static int parse_args(int argc, char **argv, Options *o)
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

int main(int argc, char **argv)
{
    Options o = {.sort = PT_AGG_SORT_SELF};
    if (parse_args(argc, argv, &o))
        return 2;
    CRT_setLocale();
    if (o.once)
        CRT_utf8 = 1; /* output is UTF-8 text / JSON, whatever the locale */

    char chosen[128];
    int interactive_started = 0;
    if (!o.target && !o.file) {
        if (o.once || !isatty(STDOUT_FILENO))
            return Picker_print(o.all);
        if (CRT_init()) {
            fprintf(stderr, "pytrace-top: not a terminal; pass a pid with --once for a text table\n");
            return 1;
        }
        interactive_started = 1;
        if (Picker_run(chosen, sizeof chosen, o.all)) {
            CRT_done();
            return 0;
        }
        o.target = chosen;
    }

    App app = {.window_seconds = 10, .table_window = 0, .sort = o.sort, .sort_desc = 1, .panel = &TablePanel_class};
    if (o.sort == PT_AGG_SORT_NAME || o.sort == PT_AGG_SORT_FILE)
        app.sort_desc = 0;
    if (o.window > 0) {
        app.window_seconds = o.window;
        app.table_window = 1;
    }
    app.thread = o.thread;
    char err[512] = "";
    int rc = -ENOENT;
    if (!o.file && !o.no_hub && !(o.once && o.duration <= 0)) {
        /* a view that follows a job reads it through its hub: the one that holds it, or
         * one started now for a running job that no one reads, so that other readers
         * (record, pytrace.Reader, another view) can join; a one-shot table of what is
         * there now (--once without --duration) takes it directly */
        char herr[512] = "";
        rc = HubSource_open(o.target, &app.source, herr, sizeof herr);
        if (rc == -ENOENT && HubSource_startHub(o.target, herr, sizeof herr) == 0)
            rc = HubSource_open(o.target, &app.source, herr, sizeof herr);
    }
    if (rc != 0)
        rc = o.file ? FileSource_open(o.file, o.follow, &app.source, err, sizeof err)
                    : LiveSource_open(o.target, &app.source, err, sizeof err);
    /* held: by a hub, read through it (any number of readers may); a hub that let the
     * segment go meanwhile (its last reader left) leaves it to be read directly */
    for (int tries = 0; rc == -EBUSY && !o.file && !o.no_hub && tries < 3; tries++) {
        char herr[512] = "";
        int hrc = HubSource_open(o.target, &app.source, herr, sizeof herr);
        if (hrc == 0)
            rc = 0;
        else if (hrc == -ENOENT)
            rc = LiveSource_open(o.target, &app.source, err, sizeof err);
        else if (hrc != -ENXIO)
            snprintf(err, sizeof err, "%s", herr);
        if (hrc != -ENOENT)
            break;
    }
    if (rc) {
        if (interactive_started)
            CRT_done();
        fprintf(stderr, "pytrace-top: %s\n", err[0] ? err : strerror(-rc));
        return 1;
    }
    int replay = app.source->cls->replay;
    if (!replay) { /* the CPU figures of a live job; a recording has none */
        pt_reader_stats_t st;
        Source_stats(app.source, &st);
        Cpu_init(&app.cpu, st.pid, CPU_PERIOD_NS);
    }
    app.want_pid = o.pid;
    pt_aggset_config_t set_cfg = {.agg = {.tree_budget = o.tree_budget}};
    if (pt_aggset_create(&set_cfg, &app.set) ||
        !(app.cpus = calloc(pt_aggset_max_processes(app.set), sizeof *app.cpus))) {
        if (interactive_started)
            CRT_done();
        fprintf(stderr, "pytrace-top: out of memory\n");
        Source_close(app.source);
        return 1;
    }
    app.agg = pt_aggset_agg(app.set, 0);
    int status = 0;
    if (o.once) {
        if (replay)
            Headless_drainReplay(&app, o.duration, o.follow);
        else
            Headless_drainLive(&app, o.duration);
        if (o.pid && App_selectPid(&app, o.pid)) {
            fprintf(stderr, "pytrace-top: no process with pid %llu in the stream (its processes:",
                    (unsigned long long)o.pid);
            for (size_t i = 0; i < pt_aggset_count(app.set); i++)
                fprintf(stderr, "%s pid %llu", i ? "," : "",
                        (unsigned long long)pt_agg_process_info(pt_aggset_agg(app.set, i))->pid);
            fprintf(stderr, ")\n");
            status = 1;
            goto done;
        }
        app.merged = !o.pid;
        App_refresh(&app);
        if (o.json)
            Headless_json(&app, &o);
        else
            Headless_text(&app, &o);
        fflush(stdout);
        if (replay) {
            /* the table of what was read first, then the damage as one line */
            if (App_error(&app)[0]) {
                char esc[600];
                Text_escape(App_error(&app), esc, sizeof esc);
                fprintf(stderr, "pytrace-top: %s\n", esc);
                status = 1;
            }
        } else {
            status = App_error(&app)[0] && !app.counters.events_seen ? 1 : 0;
        }
    } else {
        if (!interactive_started && CRT_init()) {
            fprintf(stderr, "pytrace-top: not a terminal; use --once [--json] for a table on stdout\n");
            status = 1;
        } else {
            App_run(&app);
            CRT_done();
        }
    }
done:
    pt_agg_table_free(&app.table);
    pt_agg_tree_free(&app.tree);
    Source_close(app.source);
    for (size_t i = 0; i < pt_aggset_count(app.set); i++)
        if (i != app.proc)
            Cpu_done(&app.cpus[i]);
    pt_aggset_destroy(app.set);
    free(app.cpus);
    Cpu_done(&app.cpu);
    return status;
}
