/*
 * pytrace-top --once: read what is there (a live job: what is there now, then
 * --duration seconds more; a recording: to its end), then print the table once,
 * as text or --json, and exit. The text and JSON are what scripts and tests
 * read: their fields and words do not change.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "crt.h"
#include "shm/clock.h"
#include "text.h"
#include "top.h"
#include "viewer/core/tasks.h"

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

/* "steps": the summary of the shown thread's steps (all threads: the stepping
 * thread's) in the shown process (agg.h STEPS); "functions" are the last step's
 * with --last-step. */
static void Headless_jsonSteps(App *app)
{
    const pt_agg_steps_t *st = &app->steps;
    char label[512];
    Text_json(st->count ? pt_agg_symbol(app->agg, st->label).name : "", label, sizeof label);
    printf("  \"steps\": {\"count\": %llu, \"thread\": %llu, \"threads\": %u, \"label\": \"%s\", "
           "\"last_ns\": %llu, \"last_index\": %llu, \"last_start_ns\": %llu, \"last_end_ns\": %llu, "
           "\"last_lost_events\": %llu, \"median_ns\": %llu, \"p10_ns\": %llu, \"p90_ns\": %llu, "
           "\"min_ns\": %llu, \"max_ns\": %llu, \"mean_ns\": %llu, \"stdev_ns\": %llu, \"slowest_index\": %llu, "
           "\"slowest_ns\": %llu, \"total_ns\": %llu, \"running_ns\": %llu, \"kept\": %llu, \"folded\": %llu, "
           "\"tree_missed\": %llu, \"functions_are_last_step\": %s},\n",
           (unsigned long long)st->count, (unsigned long long)st->thread, st->threads, label,
           (unsigned long long)st->last_ns, (unsigned long long)st->count, (unsigned long long)st->last_start_ns,
           (unsigned long long)st->last_end_ns, (unsigned long long)st->last_lost, (unsigned long long)st->median_ns,
           (unsigned long long)st->p10_ns, (unsigned long long)st->p90_ns, (unsigned long long)st->min_ns,
           (unsigned long long)st->max_ns, (unsigned long long)st->mean_ns, (unsigned long long)st->stdev_ns,
           (unsigned long long)st->slowest, (unsigned long long)st->max_ns, (unsigned long long)st->total_ns,
           (unsigned long long)st->running_ns, (unsigned long long)st->kept, (unsigned long long)st->folded,
           (unsigned long long)st->tree_missed, app->step_mode ? "true" : "false");
}

/* "tasks": the asyncio tasks (viewer/core/tasks.h) of the shown process, of every
 * process when the functions add them all up ("process" says whose), in order of
 * first sight; each one's logical calls by total time (agg.h: ns, as every figure
 * here). [] for a job without tasks, as "steps" has count 0. "tasks_summary": seen
 * = kept + folded (done tasks past the core's budget: their rows are gone, their
 * totals in folded_*), malformed: task records ignored as damage, tree_nodes: the
 * nodes of the kept tasks' trees (the f / F flame graphs), tree_folded: logical calls
 * in their [other] nodes past the core's node budget. */
static void Headless_jsonTasks(App *app)
{
    char a[2048], b[2048], c[2048];
    uint64_t seen = 0, kept = 0, folded = 0, malformed = 0, f_steps = 0, f_run = 0, f_wait = 0, nodes = 0,
             tree_folded = 0;
    int first = 1, failed = 0;
    printf("  \"tasks\": [");
    for (size_t p = 0; p < pt_aggset_count(app->set); p++) {
        if (p != app->proc && !(app->merged && pt_aggset_count(app->set) > 1))
            continue;
        pt_agg_tasks_t ts;
        if (pt_agg_tasks(pt_aggset_agg(app->set, p), &ts)) {
            failed = 1;
            continue;
        }
        seen += ts.seen;
        kept += ts.count;
        folded += ts.folded;
        malformed += ts.malformed;
        nodes += ts.tree_nodes;
        tree_folded += ts.tree_folded;
        f_steps += ts.folded_steps;
        f_run += ts.folded_run_ns;
        f_wait += ts.folded_wait_ns;
        for (size_t i = 0; i < ts.count; i++) {
            const pt_agg_task_t *t = &ts.tasks[i];
            Text_json(t->name ? t->name : "", a, sizeof a);
            Text_json(t->coro ? t->coro : "", b, sizeof b);
            printf("%s\n    {\"name\": \"%s\", \"id\": %u, \"coroutine\": \"%s\", \"process\": %u, \"state\": \"%s\", "
                   "\"steps\": %llu, \"run_ns\": %llu, \"wait_ns\": %llu, \"wait_by\": {",
                   first ? "" : ",", a, t->serial, b, pt_aggset_tag(app->set, p), pt_tasks_state_name(t->state),
                   (unsigned long long)t->steps, (unsigned long long)t->run_ns, (unsigned long long)t->wait_ns);
            first = 0;
            for (unsigned k = 0; k <= PT_TASKS_WAIT_OTHER; k++) /* every kind: they add up to wait_ns */
                printf("%s\"%s\": %llu", k ? ", " : "", pt_tasks_await_name(k), (unsigned long long)t->wait_by_ns[k]);
            printf("}, \"awaits\": [");
            for (uint32_t j = 0; j < t->await_count; j++) {
                Text_json(t->awaits[j].name ? t->awaits[j].name : "", a, sizeof a);
                printf("%s{\"kind\": \"%s\", \"name\": \"%s\"}", j ? ", " : "", pt_tasks_await_name(t->awaits[j].kind),
                       a);
            }
            printf("], \"functions\": [");
            const pt_agg_task_fn_t *fns = t->fns; /* by total time (agg.h) */
            for (uint32_t j = 0; j < t->fn_count; j++) {
                Text_json(fns[j].name ? fns[j].name : "", a, sizeof a);
                Text_json(fns[j].file ? fns[j].file : "", c, sizeof c);
                printf("%s\n      {\"name\": \"%s\", \"file\": \"%s\", \"line\": %u, \"calls\": %llu, "
                       "\"self_ns\": %llu, \"total_ns\": %llu}",
                       j ? "," : "", a, c, fns[j].line, (unsigned long long)fns[j].calls,
                       (unsigned long long)fns[j].excl_ns, (unsigned long long)fns[j].incl_ns);
            }
            printf("%s]}", t->fn_count ? "\n    " : "");
        }
        pt_agg_tasks_free(&ts);
    }
    printf("%s],\n", first ? "" : "\n  ");
    printf("  \"tasks_summary\": {\"seen\": %llu, \"kept\": %llu, \"folded\": %llu, \"malformed\": %llu, "
           "\"folded_steps\": %llu, \"folded_run_ns\": %llu, \"folded_wait_ns\": %llu, \"tree_nodes\": %llu, "
           "\"tree_folded\": %llu, \"complete\": %s},\n",
           (unsigned long long)seen, (unsigned long long)kept, (unsigned long long)folded,
           (unsigned long long)malformed, (unsigned long long)f_steps, (unsigned long long)f_run,
           (unsigned long long)f_wait, (unsigned long long)nodes, (unsigned long long)tree_folded,
           failed ? "false" : "true");
}

static void Headless_json(App *app, const Options *o)
{
    char a[2048], b[2048], label[1300], c[2800], d[400];
    const pt_fb_process_info_t *pi = pt_agg_process_info(app->agg);
    Text_json(pi->command_line.ptr, a, sizeof a);
    Text_json(pi->segment.ptr, b, sizeof b);
    pt_process_label(pi->role.ptr, pi->command_line.ptr, label, sizeof label);
    Text_json(label, c, sizeof c);
    Text_json(pi->role.ptr, d, sizeof d);
    printf("{\n  \"pid\": %llu,\n  \"segment\": \"%s\",\n  \"command\": \"%s\",\n  \"state\": \"%s\",\n",
           (unsigned long long)(pt_aggset_count(app->set) > 1 ? pi->pid : app->stats.pid), b, a, App_stateName(app));
    /* role: null until the process says it (a multiprocessing child, after it started);
     * label: how every view names the process (pt_process_label) */
    printf(pi->role.ptr ? "  \"role\": \"%s\",\n" : "  \"role\": null,\n", d);
    printf("  \"label\": \"%s\",\n", c);
    printf("  \"events_read\": %llu,\n  \"events_seen\": %llu,\n  \"events_per_second\": %.1f,\n"
           "  \"events_dropped\": %llu,\n  \"span_ns\": %llu,\n  \"window_seconds\": %g,\n  \"thread\": %llu,\n",
           (unsigned long long)app->stats.events_read, (unsigned long long)app->counters.events_seen,
           app->counters.events_per_second, (unsigned long long)App_dropped(app),
           (unsigned long long)app->table.span_ns, o->window, (unsigned long long)o->thread);
    /* why (agg.h: one definition for every view); this view's own gaps in a hub are
     * events_missed_in_hub (the hub source's), never in events_dropped */
    /* the time shown (--time; the order of "functions" follows it) and the time of the view nobody
     * saw (Lost gaps): in no function and not in span_ns, the base of every percentage */
    printf("  \"time\": \"%s\",\n  \"not_observed\": {\"ns\": %llu, \"cpu_ns\": %llu, \"lost_events\": %llu},\n",
           app->time_cpu ? "cpu" : "wall", (unsigned long long)app->table.unobserved_ns,
           (unsigned long long)app->table.unobserved_cpu_ns, (unsigned long long)app->table.unobserved_lost);
    printf("  \"events_dropped_cause\": \"%s\",\n  \"events_missed_cause\": \"%s\",\n",
           app->counters.dropped_cause, app->counters.missed_cause);
    for (size_t i = 0; i < App_lossCount; i++)
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
        char plabel[1300], jlabel[2800], jrole[400] = "null";
        pt_process_label(pi->role.ptr, pi->command_line.ptr, plabel, sizeof plabel);
        Text_json(plabel, jlabel, sizeof jlabel);
        if (pi->role.ptr) {
            char r[380];
            Text_json(pi->role.ptr, r, sizeof r);
            snprintf(jrole, sizeof jrole, "\"%s\"", r);
        }
        /* ended_by: the signal that ended an exited process, and who sent it ("SIGTERM
         * from its parent": multiprocessing's terminate()); null when not by a signal */
        char ended[96] = "null";
        if (c.end_signal)
            snprintf(ended, sizeof ended, "\"%s from %s\"", c.end_signal == 15 ? "SIGTERM" : "a signal",
                     c.end_signal_pid == pi->ppid ? "its parent" : "another process");
        printf("%s\n    {\"process\": %u, \"pid\": %llu, \"ppid\": %llu, \"command\": \"%s\", \"role\": %s, "
               "\"label\": \"%s\", \"state\": \"%s\", \"ended_by\": %s, "
               "\"events_seen\": %llu, \"threads\": %u, \"events_dropped\": %llu}",
               i ? "," : "", pt_aggset_tag(app->set, i), (unsigned long long)pi->pid, (unsigned long long)pi->ppid, a,
               jrole, jlabel, App_procState(pt_aggset_agg(app->set, i)), ended, (unsigned long long)c.events_seen,
               c.threads_seen, (unsigned long long)c.dropped);
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
    printf("\n  ],\n");
    Headless_jsonSteps(app);
    Headless_jsonTasks(app);
    printf("  \"functions\": [");
    for (size_t i = 0; i < app->table.count && (o->limit <= 0 || (int)i < o->limit); i++) {
        const pt_agg_row_t *r = &app->table.rows[i];
        Text_json(r->name, a, sizeof a);
        Text_json(r->file, b, sizeof b);
        printf("%s\n    {\"name\": \"%s\", \"file\": \"%s\", \"line\": %u, \"calls\": %llu, \"prim_calls\": %llu, "
               "\"self_ns\": %llu, \"total_ns\": %llu, \"self_wall_pct\": %.3f, \"total_wall_pct\": %.3f, "
               "\"self_cpu_ns\": %llu, \"total_cpu_ns\": %llu, \"self_cpu_pct\": %.3f, \"total_cpu_pct\": %.3f}",
               i ? "," : "", a, b, r->line, (unsigned long long)r->calls, (unsigned long long)r->prim_calls,
               (unsigned long long)r->self_ns, (unsigned long long)r->total_ns, r->self_pct, r->total_pct,
               (unsigned long long)r->self_cpu_ns, (unsigned long long)r->total_cpu_ns,
               app->table.span_ns ? 100.0 * (double)r->self_cpu_ns / (double)app->table.span_ns : 0.0,
               app->table.span_ns ? 100.0 * (double)r->total_cpu_ns / (double)app->table.span_ns : 0.0);
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
    if (app->steps.count || app->step_mode) {
        char line[1024];
        App_stepsLine(app, line, sizeof line);
        printf("%s\n", line + 1);
    }
    printf("%s\n", App_timeName(app));
    if (app->time_cpu)
        printf("%8s %8s %10s %10s %16s  %s\n", "OWN%CPU", "TOT%CPU", "OWN CPU", "TOT CPU", "CALLS",
               "FUNCTION  FILE:LINE");
    else
        printf("%8s %8s %6s %10s %10s %16s  %s\n", "OWN%WALL", "TOT%WALL", "WAIT%", "OWN", "TOTAL", "CALLS",
               "FUNCTION  FILE:LINE");
    for (size_t i = 0; i < app->table.count && (o->limit <= 0 || (int)i < o->limit); i++) {
        const pt_agg_row_t *r = &app->table.rows[i];
        char self[32], total[32], calls[64], name[1024], file[1024], wait[16] = "";
        Text_duration(App_rowSelf(app, r), self, sizeof self);
        Text_duration(App_rowTotal(app, r), total, sizeof total);
        if (!app->time_cpu && app->step_mode) /* a step has no CPU parts: its waiting is unknown */
            snprintf(wait, sizeof wait, " %6s", "-");
        else if (!app->time_cpu)
            snprintf(wait, sizeof wait, " %6.1f", App_rowWaitPct(r));
        if (r->calls != r->prim_calls)
            snprintf(calls, sizeof calls, "%llu/%llu", (unsigned long long)r->calls, (unsigned long long)r->prim_calls);
        else
            snprintf(calls, sizeof calls, "%llu", (unsigned long long)r->calls);
        Text_escape(r->name, name, sizeof name);
        Text_escape(r->file, file, sizeof file);
        if (r->line) /* C functions have no line: "builtins", not "builtins:0" */
            printf("%8.1f %8.1f%s %10s %10s %16s  %s  %s:%u\n", App_rowSelfPct(app, r), App_rowTotalPct(app, r),
                   wait, self, total, calls, name, file, r->line);
        else
            printf("%8.1f %8.1f%s %10s %10s %16s  %s  %s\n", App_rowSelfPct(app, r), App_rowTotalPct(app, r), wait,
                   self, total, calls, name, file);
    }
    if (app->table.unobserved_ns || app->table.unobserved_lost) { /* in no function, not in the % */
        char t[32];
        Text_duration(app->time_cpu ? app->table.unobserved_cpu_ns : app->table.unobserved_ns, t, sizeof t);
        printf("%8s %8s%s %10s %10s %16s  <not observed>  %llu events lost (time in gaps: in no function nor %%)\n",
               "-", "-", app->time_cpu ? "" : "      -", t, "-", "-", (unsigned long long)app->table.unobserved_lost);
    }
}

int Headless_run(App *app, const Options *o)
{
    int replay = app->source->cls->replay;
    if (replay)
        Headless_drainReplay(app, o->duration, o->follow);
    else
        Headless_drainLive(app, o->duration);
    if (o->pid && App_selectPid(app, o->pid)) {
        fprintf(stderr, "pytrace-top: no process with pid %llu in the stream (its processes:",
                (unsigned long long)o->pid);
        for (size_t i = 0; i < pt_aggset_count(app->set); i++)
            fprintf(stderr, "%s pid %llu", i ? "," : "",
                    (unsigned long long)pt_agg_process_info(pt_aggset_agg(app->set, i))->pid);
        fprintf(stderr, ")\n");
        return 1;
    }
    app->merged = !o->pid;
    App_refresh(app);
    if (o->json)
        Headless_json(app, o);
    else
        Headless_text(app, o);
    fflush(stdout);
    if (replay) {
        /* the table of what was read first, then the damage as one line */
        if (App_error(app)[0]) {
            char esc[600];
            Text_escape(App_error(app), esc, sizeof esc);
            fprintf(stderr, "pytrace-top: %s\n", esc);
            return 1;
        }
        return 0;
    }
    return App_error(app)[0] && !app->counters.events_seen ? 1 : 0;
}
