/*
 * pt_export implementation: recording -> walk -> one format writer.
 *
 * Design summary
 *   - The driver reads messages with recfile, keeps the processes, threads
 *     (their names, clocks and open stacks) and feeds events to the walk
 *     (walk.h: the rules every reader shares). It calls the format's writer
 *     (ex_writer_t, export_internal.h) from the walk's callbacks; each writer
 *     is a file with its own state: export_tree.c (the symbol table, the
 *     calling-context tree, collapsed and pstats), export_chrome.c,
 *     export_speedscope.c, export_perfetto.c; export_out.c is the output
 *     buffer and escaping they share.
 *   - A thread's clock: ticks below the largest seen count as it; the ticks
 *     between two callbacks go to the tree writers' self time (the agg.c
 *     rule); threads without ThreadEnd are closed at the latest tick of the
 *     stream, as pytrace-top counts open frames.
 *   - The timeline formats (chrome, speedscope, perfetto) keep the open
 *     symbols on each thread's stack; a call's slice opens and closes through
 *     the writer. With opts.from_ns/to_ns/min_duration_ns, a call that does
 *     not pass is left out (counted); speedscope and perfetto defer each open
 *     until a call that passes closes, then write the opens of its callers
 *     and itself at their own start times, so a filtered stream still nests.
 *   - Processes (walk.h, PROCESSES and THE TIME AXIS): a stream may hold
 *     several, each message tagged with Message.process. Each has its own
 *     ProcessInfo (pid, command line, clock), threads (keyed (process,
 *     number) in the walk) and symbols (keyed (process, id)), and its ticks
 *     convert with its own clock. Chrome and Perfetto give each process its
 *     own track (pid = its real pid; one that another process of the stream
 *     already has gets (number << 22) | pid, above Linux's pid_max);
 *     speedscope has a profile per (process, thread); collapsed and pstats
 *     add all processes together, or only those opts.pids selects. An
 *     untagged stream is process 0 and exports exactly as before processes
 *     existed.
 */
#define _POSIX_C_SOURCE 200809L
#include "export_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agg.h"
#include "recfile.h"
#include "grow_internal.h"

#define OUT_BUF_BYTES (1u << 20)
#define PROGRESS_EVERY 1024u

/* Filtering speedscope/perfetto: a stack level whose open is deferred keeps
 * Perfetto's "continued" flag (walk.h) in its top bit. */
#define STACK_CONTINUED 0x80000000u
#define STACK_SYM(v) ((v) & ~STACK_CONTINUED)

static const ex_writer_t *const writers[] = {
    [PT_EXPORT_COLLAPSED] = &pt_ex_collapsed, [PT_EXPORT_PSTATS] = &pt_ex_pstats,
    [PT_EXPORT_SPEEDSCOPE] = &pt_ex_speedscope, [PT_EXPORT_CHROME] = &pt_ex_chrome,
    [PT_EXPORT_PERFETTO] = &pt_ex_perfetto};

/* ---- processes -------------------------------------------------------------- */

static int pid_selected(const ex_t *e, uint64_t pid)
{
    if (!e->o.npids)
        return 1;
    for (size_t i = 0; i < e->o.npids; i++)
        if (e->o.pids[i] == pid)
            return 1;
    return 0;
}

/* The process of Message.process `tag` (created on first sight, with a
 * nanosecond clock until its ProcessInfo comes); NULL if out of memory. */
static proc_t *proc_for(ex_t *e, uint32_t tag)
{
    uint32_t *slot = pt_u64map_slot(&e->proc_map, tag, NONE);
    if (!slot)
        return NULL;
    if (*slot != NONE)
        return &e->procs[*slot];
    if (pt_grow((void **)&e->procs, &e->cap_procs, sizeof *e->procs, e->nprocs + 1))
        return NULL;
    uint32_t i = e->nprocs;
    proc_t *p = &e->procs[i];
    memset(p, 0, sizeof *p);
    p->tag = tag;
    p->pinfo.ticks_per_second = 1000000000ull;
    p->ns_per_tick = 1.0;
    p->selected = !e->o.npids;
    if (e->w->proc_new && e->w->proc_new(e, i))
        return NULL;
    *pt_u64map_slot(&e->proc_map, tag, NONE) = i;
    e->nprocs++;
    return p;
}

const proc_t *pt_ex_first_selected(const ex_t *e)
{
    for (uint32_t i = 0; i < e->nprocs; i++)
        if (e->procs[i].selected && e->procs[i].have_pinfo)
            return &e->procs[i];
    return NULL;
}

/* ---- threads ---------------------------------------------------------------- */

static int on_thread_new(void *ctx, pt_walk_thread_t *wt)
{
    ex_t *e = ctx;
    if (pt_grow((void **)&e->thr, &e->cap_thr, sizeof *e->thr, wt->index + 1))
        return -ENOMEM;
    thr_t *t = &e->thr[wt->index];
    memset(t, 0, sizeof *t);
    e->nthr = wt->index + 1;
    t->number = wt->number;
    proc_t *p = proc_for(e, wt->process);
    if (!p)
        return -ENOMEM;
    t = &e->thr[wt->index];
    t->proc = proc_index(e, p);
    return e->w->thread ? e->w->thread(e, wt->index) : 0;
}

const char *pt_ex_thread_name(const thr_t *t, char *buf, size_t n)
{
    if (t->name && t->name[0])
        return t->name;
    snprintf(buf, n, "thread %llu", (unsigned long long)t->number);
    return buf;
}

/* ---- time filter ------------------------------------------------------------ */

/* ns since the recording's start (--from/--to are relative to it) */
static int64_t rel_ns(const ex_t *e, const proc_t *p, uint64_t ticks)
{
    int64_t a = chrome_ns(p, ticks), r;
    if (__builtin_sub_overflow(a, e->t0, &r)) /* a hostile clock (fuzz_export found it) */
        return a < 0 ? INT64_MIN : INT64_MAX;
    return r;
}

/* Does the call from start to end pass opts.from_ns/to_ns/min_duration_ns?
 * Both tests hold for every caller of a call that passes (a caller lasts at
 * least as long and overlaps whatever its callees overlap), so a filtered
 * stream still nests. */
int pt_ex_passes(const ex_t *e, const proc_t *p, uint64_t start, uint64_t end)
{
    if ((double)(end - start) * p->ns_per_tick < (double)e->o.min_duration_ns)
        return 0;
    if (rel_ns(e, p, end) < e->o.from_ns)
        return 0;
    return e->o.to_ns <= 0 || rel_ns(e, p, start) <= e->o.to_ns;
}

/* A mark or a gap: written when it falls in [from_ns, to_ns]. */
static int in_range(const ex_t *e, const proc_t *p, uint64_t at)
{
    int64_t r = rel_ns(e, p, at);
    return r >= e->o.from_ns && (e->o.to_ns <= 0 || r <= e->o.to_ns);
}

/* ---- walk callbacks --------------------------------------------------------- */

static int on_enter(void *ctx, pt_walk_thread_t *wt, uint32_t id, uint64_t ticks, unsigned flags)
{
    ex_t *e = ctx;
    if (e->w->enter) /* the tree: its clock gives its self time */
        return e->w->enter(e, wt, id, ticks, flags);
    thr_t *t = thr_of(e, wt);
    uint64_t now = ex_now(e, t, ticks);
    uint32_t s = pt_cct_sym(e->cct, t->proc, id);
    if (s == NONE)
        return -ENOMEM;
    if (e->filter) /* the open is written when a call that passes closes (on_leave) */
        return ex_push(t, s | (flags & PT_WALK_CONTINUED ? STACK_CONTINUED : 0), now);
    if (e->w->open) {
        int rc = e->w->open(e, wt, s, now, (flags & PT_WALK_CONTINUED) != 0);
        if (rc)
            return rc;
        t = thr_of(e, wt);
    }
    int rc = ex_push(t, s, now);
    return rc || !e->tasks ? rc : pt_tasks_on_enter(e->tasks, wt, id, ticks, flags);
}

/* Filtering speedscope/perfetto: the call at stack level d (just popped)
 * closes at now. One that passes writes the deferred opens of its callers and
 * itself first (at their own start times), then its close. */
static int leave_filtered(ex_t *e, pt_walk_thread_t *wt, uint32_t d, uint64_t now)
{
    thr_t *t = thr_of(e, wt);
    const proc_t *p = &e->procs[t->proc];
    if (t->emitted <= d && !pt_ex_passes(e, p, t->starts[d], now)) {
        e->left_out++;
        /* no open deferred any more: the instants that waited go out */
        return t->emitted >= d && e->w->resume ? e->w->resume(e, wt) : 0;
    }
    for (uint32_t i = t->emitted; i <= d; i++) {
        t = thr_of(e, wt);
        int rc = e->w->open(e, wt, STACK_SYM(t->stack[i]), t->starts[i], (t->stack[i] & STACK_CONTINUED) != 0);
        if (rc)
            return rc;
    }
    t = thr_of(e, wt);
    t->emitted = d;
    return e->w->close(e, wt, STACK_SYM(t->stack[d]), t->starts[d], now);
}

static int on_leave(void *ctx, pt_walk_thread_t *wt, uint32_t id, uint64_t ticks, unsigned flags)
{
    (void)id;
    (void)flags;
    ex_t *e = ctx;
    if (e->w->exit) /* the tree: its clock gives its self time; its own stack */
        return e->w->exit(e, wt, ticks);
    thr_t *t = thr_of(e, wt);
    uint64_t now = ex_now(e, t, ticks);
    if (!t->depth)
        return 0;
    t->depth--;
    if (e->filter && e->w->defers)
        return leave_filtered(e, wt, t->depth, now);
    int rc = e->w->close(e, wt, STACK_SYM(t->stack[t->depth]), t->starts[t->depth], now);
    return rc || !e->tasks ? rc : pt_tasks_on_exit(e->tasks, wt, id, ticks, flags);
}

/* A mark (id) or a gap (of `lost` events): written when it falls in [from_ns, to_ns]. */
static int mark_or_gap(ex_t *e, pt_walk_thread_t *wt, uint32_t id, uint64_t ticks, uint64_t lost, int gap,
                       unsigned flags)
{
    thr_t *t = thr_of(e, wt);
    uint64_t now = ex_now(e, t, ticks);
    if (flags & PT_EVF_STEP)
        t->steps++; /* counted before the filter: a step keeps its number in a time range */
    int rc = 0;
    if (e->filter && !in_range(e, &e->procs[t->proc], now))
        ;
    else if (gap && e->w->gap)
        rc = e->w->gap(e, wt, now, lost);
    else if (!gap && e->w->instant)
        rc = e->w->instant(e, wt, id, now, flags);
    if (flags & PT_EVF_STEP)
        thr_of(e, wt)->step_last = now; /* the next step starts here */
    return rc ? rc : e->out.err;
}

static int on_instant(void *ctx, pt_walk_thread_t *wt, uint32_t id, uint64_t ticks, unsigned flags)
{
    ex_t *e = ctx;
    if (e->tasks)
        pt_tasks_on_tick(e->tasks, wt, ticks);
    return mark_or_gap(ctx, wt, id, ticks, 0, 0, flags);
}

/* Task records (walk.h, TASKS), for a writer that shows tasks: the ids that
 * must name a Task symbol are checked against the symbol table (as agg.c does). */
static int on_task(void *ctx, pt_walk_thread_t *wt, uint8_t kind, uint32_t id, uint16_t aux, uint64_t ticks,
                   unsigned flags)
{
    ex_t *e = ctx;
    if (!e->tasks) /* the other writers: as before task records existed */
        return 0;
    thr_t *t = thr_of(e, wt);
    (void)ex_now(e, t, ticks);
    int is_task = 1;
    if (kind != PT_EV_TASK_AWAIT || aux == PT_AWAIT_TASK) {
        uint32_t s = pt_cct_sym(e->cct, t->proc, id);
        if (s == NONE)
            return -ENOMEM;
        is_task = ex_sym(e, s)->known && ex_sym(e, s)->kind == PT_SYM_TASK;
    }
    int rc = pt_tasks_on_task(e->tasks, wt, kind, id, aux, ticks, flags, is_task);
    return rc ? rc : e->out.err;
}

static int on_gap(void *ctx, pt_walk_thread_t *wt, uint64_t ticks, uint64_t lost)
{
    ex_t *e = ctx;
    if (e->tasks)
        pt_tasks_on_tick(e->tasks, wt, ticks);
    if (e->w->tree) /* its clock: the gap's time is nobody's (cct.h, pt_cct_gap), not the top frame's */
        return e->w->gap ? e->w->gap(e, wt, ticks, lost) : 0;
    return mark_or_gap(ctx, wt, NONE, ticks, lost, 1, 0);
}

/* Does [from, to] (ticks) overlap opts.from_ns/to_ns? */
static int overlaps(const ex_t *e, const proc_t *p, uint64_t from, uint64_t to)
{
    return rel_ns(e, p, to) >= e->o.from_ns && (e->o.to_ns <= 0 || rel_ns(e, p, from) <= e->o.to_ns);
}

/* CpuTime: the tree formats give the CPU share of the ticks given since the
 * thread's last record (cct.h, pt_cct_cpu); the timeline formats get the rate
 * between the two records, from the same rule (pt_cct_cpu on a thread given
 * no ticks), for the interval that began at the earlier one. */
static int on_cpu(void *ctx, pt_walk_thread_t *wt, uint64_t ticks, uint64_t cpu_ns)
{
    ex_t *e = ctx;
    e->cpu_records++;
    if (e->tasks)
        pt_tasks_on_tick(e->tasks, wt, ticks);
    thr_t *t = thr_of(e, wt);
    uint64_t now = ex_now(e, t, ticks); /* the tree: accounted up to the record first */
    if (e->w->cpu)
        return e->w->cpu(e, wt, now, cpu_ns);
    if (!e->w->cpu_rate)
        return 0;
    const proc_t *p = &e->procs[t->proc];
    const int had = t->cpu_clock.have_cpu;
    const uint64_t from = t->cpu_clock.cpu_ticks;
    double r;
    pt_cct_cpu(e->cct, &t->cpu_clock, now, cpu_ns, p->pinfo.ticks_per_second, &r);
    if (!had || r < 0 || (e->filter && !overlaps(e, p, from, now)))
        return 0;
    t->cpu_shown = 1;
    int rc = e->w->cpu_rate(e, wt->index, from, now, r);
    return rc ? rc : e->out.err;
}

static const pt_walk_ops_t ex_ops = {.thread_new = on_thread_new,
                                     .enter = on_enter,
                                     .exit = on_leave,
                                     .instant = on_instant,
                                     .gap = on_gap,
                                     .cpu = on_cpu,
                                     .task = on_task};

/* ---- messages --------------------------------------------------------------- */

static void note_latest(proc_t *p, uint64_t t)
{
    if (!p->have_latest || t > p->latest) {
        p->latest = t;
        p->have_latest = 1;
    }
}

/* The output's beginning, at the first message that counts (p's). */
static void start(ex_t *e, proc_t *p)
{
    if (e->started)
        return;
    e->started = 1;
    e->first = proc_index(e, p);
    if (e->w->begin)
        e->start_rc = e->w->begin(e, p);
}

static thr_t *thread_for(ex_t *e, const proc_t *p, uint64_t number, int *rc)
{
    pt_walk_thread_t *wt = pt_walk_proc_thread(e->walk, p->tag, number, rc);
    return wt ? thr_of(e, wt) : NULL;
}

/* A process's ProcessInfo: its clock, names and the pid its tracks show. */
void pt_ex_process_label(const proc_t *p, char *out, size_t cap)
{
    pt_process_label(p->role, p->command_line, out, cap);
}

static int feed_process_info(ex_t *e, proc_t *p, const pt_fb_process_info_t *in)
{
    if (in->role.ptr && (!p->role || strlen(p->role) != in->role.len ||
                         memcmp(p->role, in->role.ptr, in->role.len) != 0)) {
        /* the role, learnt after the process started: named again where it shows */
        char *role = pt_ex_dup_str(in->role);
        if (!role)
            return -ENOMEM;
        free(p->role);
        p->role = role;
        if (p->have_pinfo && p->described && p->selected && e->started && e->w->process)
            return e->w->process(e, p);
    }
    if (p->have_pinfo)
        return 0; /* the first one counts, as before processes existed */
    char *cl = pt_ex_dup_str(in->command_line), *pv = pt_ex_dup_str(in->python_version);
    if (!cl || !pv) {
        free(cl);
        free(pv);
        return -ENOMEM;
    }
    p->have_pinfo = 1;
    p->pinfo = *in;
    if (!e->have_t0) {
        e->have_t0 = 1;
        e->t0 = (int64_t)in->base_monotonic_ns;
    }
    p->command_line = cl;
    p->python_version = pv;
    p->base_ticks = in->base_ticks;
    uint64_t tps = in->ticks_per_second ? in->ticks_per_second : 1000000000ull;
    p->pinfo.ticks_per_second = tps;
    p->ns_per_tick = 1e9 / (double)tps;
    p->shown_pid = (int64_t)in->pid;
    for (uint32_t i = 0; i < e->nprocs; i++) /* a pid another process of the stream shows already */
        if (&e->procs[i] != p && e->procs[i].have_pinfo && e->procs[i].shown_pid == p->shown_pid) {
            p->shown_pid = (int64_t)((uint64_t)p->tag << 22 | (in->pid & 0x3fffff));
            break;
        }
    int sel = pid_selected(e, in->pid);
    p->selected = sel;
    if (!e->started || !sel || p->described)
        return 0;
    return e->w->process ? e->w->process(e, p) : 0;
}

static int feed(ex_t *e, const pt_fb_msg_t *m, pt_export_result_t *res)
{
    int rc = 0;
    proc_t *p = proc_for(e, m->process);
    if (!p)
        return -ENOMEM;
    p->seen = 1;
    if (m->type == PT_MSG_PROCESS_INFO) {
        rc = feed_process_info(e, p, &m->u.process_info);
        if (rc)
            return rc;
        if (p->selected || !e->o.npids)
            start(e, p);
        return 0;
    }
    if (!p->selected) /* --pid: another process */
        return 0;
    switch (m->type) {
    case PT_MSG_SYMBOL: {
        start(e, p);
        if (pt_walk_proc_symbol(e->walk, p->tag, m->u.symbol.id))
            return -ENOMEM;
        uint32_t s = pt_cct_sym_set(e->cct, proc_index(e, p), &m->u.symbol);
        if (s == NONE)
            return -ENOMEM;
        if (e->w->symbol) /* what a writer derived from it */
            e->w->symbol(e, s);
        return 0;
    }
    case PT_MSG_THREAD_START: {
        start(e, p);
        const pt_fb_thread_start_t *in = &m->u.thread_start;
        thr_t *t = thread_for(e, p, in->thread, &rc);
        if (!t)
            return rc ? rc : -ENOMEM;
        p = &e->procs[t->proc];
        if (in->name.ptr && in->name.len) {
            char *n = pt_ex_dup_str(in->name);
            if (!n)
                return -ENOMEM;
            if ((!t->name || strcmp(t->name, n)) && e->w->named)
                e->w->named(e, (uint32_t)(t - e->thr));
            free(t->name);
            t->name = n;
        }
        if (in->os_tid)
            t->os_tid = in->os_tid;
        if (t->ended) { /* a new thread under a reused number: its clocks are its own */
            t->ended = 0;
            t->have_last = 0;
            t->cpu_clock.have_cpu = 0;
            t->cpu_shown = 0;
        }
        if (in->ticks) {
            note_latest(p, in->ticks);
            ex_now(e, t, in->ticks);
        }
        return 0;
    }
    case PT_MSG_THREAD_END: {
        start(e, p);
        const pt_fb_thread_end_t *in = &m->u.thread_end;
        thr_t *t = thread_for(e, p, in->thread, &rc);
        if (!t)
            return rc ? rc : -ENOMEM;
        p = &e->procs[t->proc];
        const uint32_t tag = p->tag;
        if (in->ticks) {
            note_latest(p, in->ticks);
            ex_now(e, t, in->ticks);
        }
        rc = pt_walk_proc_thread_end(e->walk, tag, in->thread, in->ticks);
        int rc2;
        t = thread_for(e, &e->procs[*pt_u64map_slot(&e->proc_map, tag, NONE)], in->thread, &rc2); /* arrays may have moved */
        if (!t)
            return rc;
        t->ended = 1;
        const uint32_t index = (uint32_t)(t - e->thr);
        if (!rc && t->cpu_shown && e->w->cpu_rate) /* no CPU after its end: the rate's step ends */
            rc = e->w->cpu_rate(e, index, t->last, t->last, -1.0);
        t = &e->thr[index];
        t->cpu_shown = 0;
        pt_cct_cpu_forget(NULL, &t->cpu_clock); /* its clock ends with it: a reused number starts anew */
        if (e->w->thread_end)
            e->w->thread_end(e, index);
        return rc;
    }
    case PT_MSG_EVENT_CHUNK: {
        start(e, p);
        const pt_fb_event_chunk_t *c = &m->u.event_chunk;
        for (uint32_t i = 0; i < c->count; i++)
            note_latest(p, c->events[i].ticks);
        const uint32_t tag = p->tag;
        thr_t *t = thread_for(e, p, c->thread, &rc);
        if (!t)
            return rc ? rc : -ENOMEM;
        t->ended = 0;
        return pt_walk_proc_events(e->walk, tag, c->thread, c->events, c->count);
    }
    case PT_MSG_PRODUCER_STATUS:
        p->have_status = 1;
        p->status = m->u.producer_status;
        res->have_status = 1;
        return 0;
    default:
        return 0;
    }
}

/* ---- driver ----------------------------------------------------------------- */

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void ex_free(ex_t *e)
{
    pt_walk_destroy(e->walk);
    pt_tasks_destroy(e->tasks);
    if (e->ws && e->w->destroy)
        e->w->destroy(e);
    free(e->ws);
    pt_cct_destroy(e->cct);
    for (uint32_t i = 0; i < e->nthr; i++) {
        free(e->thr[i].name);
        free(e->thr[i].stack);
        free(e->thr[i].starts);
    }
    free(e->thr);
    for (uint32_t i = 0; i < e->nprocs; i++) {
        free(e->procs[i].command_line);
        free(e->procs[i].python_version);
        free(e->procs[i].role);
    }
    free(e->procs);
    pt_u64map_free(&e->proc_map);
    free(e->out.buf);
}

int pt_export_file(const char *recording, int out_fd, const pt_export_opts_t *opts, pt_export_result_t *res)
{
    memset(res, 0, sizeof *res);
    res->error_offset = -1;
    if (opts->format < PT_EXPORT_COLLAPSED || opts->format > PT_EXPORT_PERFETTO)
        return -EINVAL;
    ex_t ex = {.o = *opts, .w = writers[opts->format]};
    ex_t *e = &ex;
    pt_recfile_t *rf = NULL;
    int rc = -ENOMEM;
    e->out.fd = out_fd;
    e->out.cap = OUT_BUF_BYTES;
    e->out.max_bytes = opts->max_bytes;
    e->filter = !e->w->tree && (opts->from_ns > 0 || opts->to_ns > 0 || opts->min_duration_ns > 0);
    e->out.buf = malloc(OUT_BUF_BYTES);
    pt_cct_config_t tree = {.budget = opts->tree_budget, .key_of = e->w->tree_key, .ctx = e};
    if (!e->out.buf || pt_cct_create(&tree, &e->cct) || pt_u64map_init(&e->proc_map, 16) ||
        pt_walk_create(&ex_ops, e, &e->walk))
        goto out;
    pt_walk_check_symbols(e->walk); /* events naming ids never announced are damage (walk.h) */
    if (e->w->tasks && !e->filter) {
        if (pt_tasks_create(0, &e->tasks))
            goto out;
        pt_tasks_set_observer(e->tasks, e->w->tasks, e);
    }
    if (e->w->init && (rc = e->w->init(e)) != 0)
        goto out;
    rc = -ENOMEM;
    if (!proc_for(e, 0)) /* process 0: an untagged stream's, also when it is empty */
        goto out;
    char err[512];
    rc = pt_recfile_open(recording, &rf, err, sizeof err);
    if (rc) {
        snprintf(res->error, sizeof res->error, "%s", err);
        res->damaged = 0;
        goto out;
    }
    double last_data = mono_now();
    uint64_t since_progress = 0;
    for (;;) {
        const uint8_t *msg;
        size_t len;
        pt_fb_msg_t m;
        int r = pt_recfile_next(rf, &msg, &len, &m);
        if (r == 1) {
            res->messages++;
            last_data = mono_now();
            if ((rc = feed(e, &m, res)) != 0 || (rc = e->start_rc) != 0)
                goto out;
            if (e->out.err) {
                rc = e->out.err;
                goto out;
            }
            if (++since_progress >= PROGRESS_EVERY) {
                since_progress = 0;
                if (e->o.progress && e->o.progress(e->o.progress_ctx)) {
                    rc = -EINTR;
                    goto out;
                }
                last_data = mono_now();
            }
            continue;
        }
        if (r == -EBADMSG)
            break;
        if (r < 0 && r != -EINTR && r != -EAGAIN) {
            rc = r;
            goto out;
        }
        /* r == 0: nothing complete now */
        if (e->o.follow && !pt_recfile_ended(rf)) {
            if (mono_now() - last_data >= e->o.timeout) {
                res->timed_out = 1;
                break;
            }
            if (e->o.progress && e->o.progress(e->o.progress_ctx)) {
                rc = -EINTR;
                goto out;
            }
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (r == 0 && !res->timed_out)
            pt_recfile_finish(rf);
        break;
    }
    if (pt_recfile_error_offset(rf) >= 0) {
        const char *why = pt_recfile_error(rf);
        const char *colon = strstr(why, ": ");
        res->damaged = 1;
        res->error_offset = pt_recfile_error_offset(rf);
        snprintf(res->error, sizeof res->error, "%s", colon && !strncmp(why, "damaged at", 10) ? colon + 2 : why);
    }
    start(e, &e->procs[0]);
    if ((rc = e->start_rc) != 0)
        goto out;
    /* threads with no ThreadEnd: their open entries count up to the latest
     * tick of the stream (pytrace-top does the same) */
    for (uint32_t i = 0; i < e->nthr; i++) {
        const proc_t *p = &e->procs[e->thr[i].proc];
        if (!e->thr[i].ended && p->have_latest) {
            uint64_t number = e->thr[i].number;
            if ((rc = pt_walk_proc_thread_end(e->walk, p->tag, number, p->latest)) != 0)
                goto out;
        }
    }
    /* the job's counters: each process's last ProducerStatus, added up */
    uint32_t with_status = 0;
    for (uint32_t i = 0; i < e->nprocs; i++) {
        const proc_t *p = &e->procs[i];
        if (!p->selected || !p->have_status)
            continue;
        pt_fb_producer_status_t *st = &res->status;
        if (!with_status++) {
            *st = p->status;
            continue;
        }
        if (p->status.state < st->state)
            st->state = p->status.state; /* the least advanced: running before exited */
        st->events_written += p->status.events_written;
        st->events_dropped += p->status.events_dropped;
        st->hook_errors += p->status.hook_errors;
        st->symbols_dropped += p->status.symbols_dropped;
        st->threads_untraced += p->status.threads_untraced;
        st->tracing_displaced += p->status.tracing_displaced;
        st->events_untraced += p->status.events_untraced;
        st->unrecorded_events += p->status.unrecorded_events;
        st->unrecorded_messages += p->status.unrecorded_messages;
        if (!st->unrecorded_errno)
            st->unrecorded_errno = p->status.unrecorded_errno;
    }
    res->have_status = with_status > 0;
    int64_t first_ns = 0, last_ns = 0;
    int have_span = 0;
    for (uint32_t i = 0; i < e->nprocs; i++) {
        const proc_t *p = &e->procs[i];
        if (!p->selected || !p->have_pinfo || !p->have_latest)
            continue;
        int64_t a = (int64_t)p->pinfo.base_monotonic_ns, b = chrome_ns(p, p->latest);
        if (!have_span || a < first_ns)
            first_ns = a;
        if (!have_span || b > last_ns)
            last_ns = b;
        have_span = 1;
    }
    res->span_ns = have_span && last_ns > first_ns ? (uint64_t)last_ns - (uint64_t)first_ns : 0;
    res->processes = 0;
    for (uint32_t i = 0; i < e->nprocs; i++) {
        res->processes += e->procs[i].seen;
        res->selected_processes += e->procs[i].seen && e->procs[i].selected;
    }
    for (uint32_t i = 0; i < e->nprocs && res->npids < PT_EXPORT_MAX_PIDS; i++)
        if (e->procs[i].have_pinfo)
            res->pids[res->npids++] = e->procs[i].pinfo.pid;
    if ((rc = pt_walk_finish(e->walk)) != 0)
        goto out;
    pt_walk_counters_t wc;
    pt_walk_counters(e->walk, &wc);
    res->events = wc.events;
    res->lost = wc.lost;
    res->lost_wait_timeout = wc.lost_wait_timeout;
    res->lost_no_room = wc.lost_no_room;
    res->lost_no_ring = wc.lost_no_ring;
    res->unmatched = wc.unmatched + wc.unmatched_spans;
    res->unannounced = wc.unannounced;
    res->threads = wc.threads;
    res->symbols = e->cct->sym_count;
    res->cpu_records = e->cpu_records;
    rc = e->w->end ? e->w->end(e, &wc) : 0;
    res->unobserved_ns = e->unobserved_ns;
    res->unobserved_cpu_ns = e->unobserved_cpu_ns;
    res->unobserved_lost = e->unobserved_lost;
    res->unobserved_no_ring = e->unobserved_no_ring;
    if (!rc) {
        pt_ob_flush(&e->out);
        rc = e->out.err;
    }
out:
    res->bytes_written = e->out.written;
    res->size_limited = e->out.limited;
    res->calls_left_out = e->left_out;
    res->stacks_folded = e->stacks_folded;
    res->deepest = e->deepest;
    if (e->cct) {
        res->tree_budget = e->cct->cfg.budget;
        res->folded_calls = e->cct->folded_calls;
    }
    pt_recfile_close(rf);
    ex_free(e);
    return rc;
}
