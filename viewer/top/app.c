/*
 * pytrace-top's App: what the views show, whatever draws it (view.c: the live
 * view; headless.c: --once). It reads the Source into one aggregation per
 * process (pt_aggset), keeps each process's CPU meters, and refreshes the
 * snapshots (table, tree, counters) the views draw: the table of every
 * process added up for --once, the losses in one table.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "schema/pt_fb.h"
#include "shm/base/grow.h"
#include "shm/clock.h"
#include "text.h"

#define CPU_READ_NS 300000000ull
#define POLL_MAX_EVENTS 4000000u

const char *const App_sortNames[PT_AGG_SORT_COUNT] = {"own", "total", "calls", "prim", "name", "file"};

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
void App_showProcess(App *app, size_t i)
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
int App_selectPid(App *app, uint64_t pid)
{
    for (size_t i = 0; i < pt_aggset_count(app->set); i++)
        if (pt_agg_process_info(pt_aggset_agg(app->set, i))->pid == pid) {
            App_showProcess(app, i);
            return 0;
        }
    return -ENOENT;
}

const char *App_procState(const pt_agg_t *agg)
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
long App_poll(App *app)
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
void App_sampleCpu(App *app, int force)
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

static int App_sortKey, App_sortDesc, App_sortCpu;

static int App_rowOrder(const void *x, const void *y)
{
    const pt_agg_row_t *a = x, *b = y;
    uint64_t u = 0, v = 0;
    int c = 0;
    switch (App_sortKey) {
    case PT_AGG_SORT_TOTAL:
        u = App_sortCpu ? a->total_cpu_ns : a->total_ns;
        v = App_sortCpu ? b->total_cpu_ns : b->total_ns;
        break;
    case PT_AGG_SORT_CALLS: u = a->calls; v = b->calls; break;
    case PT_AGG_SORT_PRIM_CALLS: u = a->prim_calls; v = b->prim_calls; break;
    case PT_AGG_SORT_NAME: c = strcmp(a->name, b->name); break;
    case PT_AGG_SORT_FILE: c = strcmp(a->file, b->file); break;
    default:
        u = App_sortCpu ? a->self_cpu_ns : a->self_ns;
        v = App_sortCpu ? b->self_cpu_ns : b->self_ns;
        break;
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
        if (pt_grow_size((void **)&rows, &cap, sizeof *rows, n + t.count, 64)) {
            pt_agg_table_free(&t);
            continue;
        }
        memcpy(rows + n, t.rows, t.count * sizeof *rows);
        n += t.count;
        if (t.span_ns > out->span_ns)
            out->span_ns = t.span_ns;
        out->unobserved_ns += t.unobserved_ns;
        out->unobserved_cpu_ns += t.unobserved_cpu_ns;
        out->unobserved_lost += t.unobserved_lost;
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
            r->self_cpu_ns += rows[i].self_cpu_ns;
            r->total_cpu_ns += rows[i].total_cpu_ns;
            r->self_pct += rows[i].self_pct;
            r->total_pct += rows[i].total_pct;
        } else {
            rows[w++] = rows[i];
        }
    }
    App_sortKey = app->sort;
    App_sortDesc = app->sort_desc;
    App_sortCpu = app->time_cpu;
    qsort(rows, w, sizeof *rows, App_rowOrder);
    out->rows = rows;
    out->count = w;
}

void App_refresh(App *app)
{
    pt_agg_query_t tq = {.thread = app->thread, .window_seconds = app->table_window ? app->window_seconds : 0,
                         .last_step = app->step_mode};
    pt_agg_query_t fq = {.thread = app->thread, .window_seconds = app->window_seconds, .hide_idle = app->hide_idle,
                         .last_step = app->step_mode};
    if (app->want_pid && pt_agg_process_info(app->agg)->pid != app->want_pid)
        (void)App_selectPid(app, app->want_pid);
    pt_agg_table_free(&app->table);
    pt_agg_tree_free(&app->tree);
    if (app->merged && pt_aggset_count(app->set) > 1)
        App_mergedTable(app, &tq, &app->table);
    else
        pt_agg_table(app->agg, &tq, app->sort, app->sort_desc, app->filter, &app->table);
    if (app->time_cpu && app->table.count &&
        (app->sort == PT_AGG_SORT_SELF || app->sort == PT_AGG_SORT_TOTAL)) { /* by the CPU figures */
        App_sortKey = app->sort;
        App_sortDesc = app->sort_desc;
        App_sortCpu = 1;
        qsort(app->table.rows, app->table.count, sizeof *app->table.rows, App_rowOrder);
    }
    if (app->panel == &FlamePanel_class && app->task_flame)
        pt_agg_task_tree(app->agg, app->task_flame_of, &app->tree);
    else if (app->panel == &FlamePanel_class)
        pt_agg_tree(app->agg, &fq, &app->tree);
    pt_agg_tasks_free(&app->tasks);
    if (app->panel == &TasksPanel_class && pt_agg_tasks(app->agg, &app->tasks))
        snprintf(app->error, sizeof app->error, "out of memory while listing the tasks; the task table is empty");
    if (pt_agg_steps(app->agg, app->thread, &app->steps))
        memset(&app->steps, 0, sizeof app->steps);
    pt_agg_counters(app->agg, &app->counters);
    if (app->merged && pt_aggset_count(app->set) > 1) { /* the counts of every process, added up */
        pt_agg_counters_t *t = &app->counters;
        for (size_t i = 0; i < pt_aggset_count(app->set); i++) {
            if (i == app->proc)
                continue;
            pt_agg_counters_t c;
            pt_agg_counters(pt_aggset_agg(app->set, i), &c);
#define APP_SUM(field) t->field += c.field
            APP_SUM(events_seen); APP_SUM(events_per_second); APP_SUM(dropped); APP_SUM(dropped_lost_records);
            APP_SUM(dropped_lost_counts); APP_SUM(dropped_producer); APP_SUM(missed_in_hub);
            if (!t->dropped_cause[0])
                t->dropped_cause = c.dropped_cause;
            if (!t->missed_cause[0])
                t->missed_cause = c.missed_cause;
            APP_SUM(unmatched_closes); APP_SUM(unannounced); APP_SUM(threads_seen); APP_SUM(threads_active);
            APP_SUM(hook_errors); APP_SUM(symbols); APP_SUM(nodes); APP_SUM(folded_calls); APP_SUM(other_nodes);
#undef APP_SUM
            if (c.span_ns > t->span_ns)
                t->span_ns = c.span_ns;
        }
    }
    Source_stats(app->source, &app->stats);
    App_sampleCpu(app, 0);
}

const char *App_stateName(const App *app)
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

uint64_t App_dropped(const App *app)
{
    /* the job's drops (agg.h): this view's gaps in a hub are counted apart (missed_in_hub) */
    uint64_t d = app->counters.dropped;
    return app->stats.producer_events_dropped > d ? app->stats.producer_events_dropped : d;
}

/* Losses other than events dropped (shown on their own): one line each, as in
 * runtime/pytrace/losses.py. key: the name in --json and every other tool. */
const AppLoss App_losses[] = {
    {"symbols_dropped", "symbols dropped", offsetof(pt_reader_stats_t, symbols_dropped)},
    {"hook_errors", "hook errors", offsetof(pt_reader_stats_t, hook_errors)},
    {"threads_untraced", "threads without a ring", offsetof(pt_reader_stats_t, threads_untraced)},
    {"events_untraced", "events of threads without a ring", offsetof(pt_reader_stats_t, events_untraced)},
    {"tracing_displaced", "threads displaced", offsetof(pt_reader_stats_t, tracing_displaced)},
    {"unrecorded_events", "events not recorded (disk full)", offsetof(pt_reader_stats_t, unrecorded_events)},
};
const size_t App_lossCount = sizeof App_losses / sizeof App_losses[0];

uint64_t App_loss(const App *app, size_t i)
{
    uint64_t v;
    memcpy(&v, (const char *)&app->stats + App_losses[i].offset, sizeof v);
    return v;
}

/* "symbols dropped 25325<sep>hook errors 1" for the non-zero ones ("" if
 * none); returns the number of non-zero counters. */
int App_lossText(const App *app, const char *sep, char *out, size_t cap)
{
    int n = 0;
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < App_lossCount; i++) {
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

int App_start(App *app, uint64_t want_pid, uint64_t tree_budget)
{
    if (!app->source->cls->replay) { /* the CPU figures of a live job; a recording has none */
        pt_reader_stats_t st;
        Source_stats(app->source, &st);
        Cpu_init(&app->cpu, st.pid, CPU_PERIOD_NS);
    }
    app->want_pid = want_pid;
    pt_aggset_config_t set_cfg = {.agg = {.tree_budget = tree_budget}};
    if (pt_aggset_create(&set_cfg, &app->set) ||
        !(app->cpus = calloc(pt_aggset_max_processes(app->set), sizeof *app->cpus)))
        return -ENOMEM;
    app->agg = pt_aggset_agg(app->set, 0);
    return 0;
}

void App_done(App *app)
{
    pt_agg_table_free(&app->table);
    pt_agg_tree_free(&app->tree);
    pt_agg_tasks_free(&app->tasks);
    Source_close(app->source);
    for (size_t i = 0; i < pt_aggset_count(app->set); i++)
        if (i != app->proc)
            Cpu_done(&app->cpus[i]);
    pt_aggset_destroy(app->set);
    free(app->cpus);
    Cpu_done(&app->cpu);
}

void App_stepsLine(const App *app, char *line, size_t cap)
{
    const pt_agg_steps_t *st = &app->steps;
    line[0] = 0;
    if (!st->count) {
        if (app->step_mode)
            snprintf(line, cap, " STEP MODE (s): no step has ended yet%s: pytrace.step() or --torch's "
                     "Optimizer.step mark them", app->thread ? " on this thread" : "");
        return;
    }
    char last[32], med[32], p10[32], p90[32], slow[32], mean[32], sd[32], label[96], esc[200];
    Text_duration(st->last_ns, last, sizeof last);
    Text_duration(st->median_ns, med, sizeof med);
    Text_duration(st->p10_ns, p10, sizeof p10);
    Text_duration(st->p90_ns, p90, sizeof p90);
    Text_duration(st->max_ns, slow, sizeof slow);
    Text_duration(st->mean_ns, mean, sizeof mean);
    Text_duration(st->stdev_ns, sd, sizeof sd);
    Text_escape(pt_agg_symbol(app->agg, st->label).name, esc, sizeof esc);
    Text_fit(esc, 24, 0, label, sizeof label);
    char folded[64] = "";
    if (st->folded)
        snprintf(folded, sizeof folded, " (percentiles of the last %llu)", (unsigned long long)st->kept);
    snprintf(line, cap,
             " %ssteps (s): %llu on thread %llu [%s]  last #%llu %s  median %s  p10-p90 %s-%s%s  mean %s sd %s  "
             "slowest #%llu %s%s%s",
             app->step_mode ? "STEP MODE: the last step alone  " : "", (unsigned long long)st->count,
             (unsigned long long)st->thread, label, (unsigned long long)st->count, last, med, p10, p90, folded, mean,
             sd, (unsigned long long)st->slowest, slow, st->last_lost ? "  (events lost inside the last step)" : "",
             app->step_mode && app->time_cpu ? "  (a step shows wall time only)" : "");
}
