/*
 * pt_export internals: what the driver (export.c) and the format writers
 * (export_chrome.c, export_perfetto.c, export_speedscope.c, export_tree.c)
 * share. Not a public API: hidden visibility, used only inside pt_export.
 *
 *   - the output buffer, JSON/UTF-8 escaping and number printing
 *     (export_out.c; its hot path static inline here);
 *   - the driver's state (ex_t): options, processes, threads with their open
 *     stacks, the symbol table (pt_cct's, cct.h: the tree formats keep their
 *     calling-context tree in the same pt_cct);
 *   - the writer table (ex_writer_t): what the driver calls a format's writer
 *     with. Each writer keeps its own state (per thread too) behind e->ws.
 */
#ifndef PT_VIEWER_EXPORT_INTERNAL_H
#define PT_VIEWER_EXPORT_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cct.h"
#include "tasks.h"
#include "export.h"
#include "walk.h"
#include "grow_internal.h"
#include "u64map_internal.h"

#define PT_EX_HIDDEN __attribute__((visibility("hidden")))

#define NONE UINT32_MAX

/* ---- output buffer (export_out.c) ------------------------------------------- */

typedef struct obuf {
    int fd;
    char *buf;
    size_t len, cap;
    int err;
    uint64_t written;
    uint64_t max_bytes; /* 0: no limit; past it err = -EFBIG and limited = 1 */
    int limited;
} obuf_t;

/* Write all n bytes at offset off, or at the file position (a pipe too)
 * when off < 0. 0 or -errno. */
PT_EX_HIDDEN int pt_ex_write_all(int fd, const char *p, size_t n, int64_t off);
/* Write out what the buffer holds (nothing once o->err is set). */
PT_EX_HIDDEN void pt_ob_flush(obuf_t *o);
/* ob_put when the n bytes do not fit what is left of the buffer. */
PT_EX_HIDDEN void pt_ob_put_slow(obuf_t *o, const void *p, size_t n);
/* A JSON string literal of s (quotes included; invalid UTF-8 becomes U+FFFD). */
PT_EX_HIDDEN void pt_ob_json(obuf_t *o, const char *s);
/* Length of the valid UTF-8 sequence at p (1..4), or 0 if invalid. */
PT_EX_HIDDEN size_t pt_utf8_len(const unsigned char *p, size_t n);
/* s made valid UTF-8 (invalid bytes -> U+FFFD), malloc'd. */
PT_EX_HIDDEN char *pt_utf8_clean(const char *s, size_t *out_len);
/* A NUL-terminated copy of s (a NUL inside ends it), malloc'd. */
PT_EX_HIDDEN char *pt_ex_dup_str(pt_fb_str_t s);
PT_EX_HIDDEN char *pt_ex_dup_c(const char *s);

static inline void ob_put(obuf_t *o, const void *p, size_t n)
{
    if (o->len + n > o->cap) {
        pt_ob_put_slow(o, p, n);
        return;
    }
    memcpy(o->buf + o->len, p, n);
    o->len += n;
}

static inline void ob_puts(obuf_t *o, const char *s) { ob_put(o, s, strlen(s)); }

static inline void ob_putc(obuf_t *o, char c)
{
    if (o->len == o->cap)
        pt_ob_flush(o);
    o->buf[o->len++] = c;
}

static inline char *u64_digits(char *end, uint64_t v)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

static inline void ob_u64(obuf_t *o, uint64_t v)
{
    char b[24], *e = b + sizeof b, *s = u64_digits(e, v);
    ob_put(o, s, (size_t)(e - s));
}

static inline void ob_i64(obuf_t *o, int64_t v)
{
    if (v < 0) {
        ob_putc(o, '-');
        ob_u64(o, (uint64_t)0 - (uint64_t)v);
    } else {
        ob_u64(o, (uint64_t)v);
    }
}

/* ns as microseconds with three decimals (what "%.3f" of ns/1000 gives) */
static inline void ob_us3(obuf_t *o, int64_t ns)
{
    uint64_t a = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    if (ns < 0)
        ob_putc(o, '-');
    ob_u64(o, a / 1000);
    char f[4] = {'.', (char)('0' + a % 1000 / 100), (char)('0' + a % 100 / 10), (char)('0' + a % 10)};
    ob_put(o, f, 4);
}

/* ---- the driver's state (export.c) ------------------------------------------ */

/* A thread of the walk (index = pt_walk_thread_t.index): what every format
 * reads. Its open stack holds what the writer pushed: nodes (the tree) or
 * symbol indexes (the timeline formats). */
typedef struct thr {
    uint64_t number, os_tid;
    uint32_t proc; /* index in ex_t.procs */
    char *name;
    int ended;
    uint32_t *stack;
    uint64_t *starts;
    uint32_t depth, cap;
    uint32_t emitted; /* filtering speedscope/perfetto: stack levels whose open is written */
    uint64_t last;
    int have_last;
    /* The timeline formats' CPU clock: its last CpuTime record (pt_cct_cpu on
     * a thread that is given no ticks: the rate between two records, only) */
    pt_cct_thread_t cpu_clock;
    int cpu_shown;    /* a CPU rate was written for it (cpu_rate) */
    uint64_t steps;   /* its Step marks so far (the driver counts them, filtered or not): the
                         number of the step a Step mark ends */
    uint64_t step_last; /* clamped tick of its last Step mark (its first event before one): in
                           a writer's instant of a Step mark, where the step ending began */
} thr_t;

/* One process of the stream (Message.process = tag). */
typedef struct proc {
    uint32_t tag;
    int seen, have_pinfo, selected, described;
    pt_fb_process_info_t pinfo;
    char *command_line, *python_version;
    char *role;           /* NULL until a ProcessInfo says it (it may come again, later) */
    double ns_per_tick;
    uint64_t base_ticks;
    uint64_t latest;      /* its latest tick (threads without ThreadEnd close there) */
    int have_latest;
    int64_t shown_pid;    /* chrome/perfetto pid */
    int have_status;
    pt_fb_producer_status_t status;
} proc_t;

/* The process's name in every export: pt_process_label (viewer/core/agg.h) of
 * its role and command line. */
PT_EX_HIDDEN void pt_ex_process_label(const proc_t *p, char *out, size_t cap);

typedef struct ex_writer ex_writer_t;

typedef struct ex {
    pt_export_opts_t o;
    const ex_writer_t *w;
    void *ws;             /* the writer's state */
    obuf_t out;
    pt_walk_t *walk;
    pt_tasks_t *tasks;    /* asyncio tasks (tasks.h), when the writer shows them (w->tasks) */
    int started;
    int start_rc;         /* the writer's begin() */
    uint32_t first;       /* the process whose message started the output */
    proc_t *procs;
    uint32_t nprocs, cap_procs;
    pt_u64map_t proc_map; /* tag -> index */

    pt_cct_t *cct;        /* the symbols, (process, id) -> dense index, and the tree formats' tree */

    thr_t *thr;
    uint32_t nthr, cap_thr;

    /* opts.from_ns/to_ns/min_duration_ns (timeline formats) */
    int filter;
    int have_t0;
    int64_t t0;           /* the recording's start: the first ProcessInfo's monotonic ns */
    uint64_t left_out;
    uint64_t stacks_folded; /* collapsed: calling contexts below opts.max_depth */
    uint32_t deepest;
    uint64_t cpu_records;   /* CpuTime records read */
    /* the tree formats: time nobody saw (pt_cct_gap), for the result */
    uint64_t unobserved_ns, unobserved_cpu_ns, unobserved_lost, unobserved_no_ring;
} ex_t;

/*
 * A format's writer. The driver calls, in this order:
 *   init          once, before the first message (allocate e->ws)
 *   proc_new      a process seen for the first time (its index)
 *   thread        a new thread of the walk (its index)
 *   begin         the output's beginning, at the first message that counts
 *   process       a process's ProcessInfo that came after begin
 *   named         a thread's name changed
 *   symbol        a symbol announced (drop what was derived from it)
 *   self          a thread's clock moved on by `ticks` with its stack as it is
 *   enter, exit   the tree formats: a call and a return, at raw ticks (the
 *                 writer keeps the clock, ex_clock, its self time and its
 *                 own stack, pt_cct's: the driver's stays empty);
 *                 NULL: the driver's timeline rule, which calls
 *   open, close   a call's slice opens at `at` / closes (start, end); with a
 *                 time filter and `defers`, opens wait until a call that
 *                 passes closes, and resume says none waits any more
 *   instant, gap  a mark (symbol id; flags: its Event.flags, PT_EVF_STEP for the
 *                 end of a step) or a gap of `lost` events; the tree
 *                 formats' gap gets raw ticks (its clock: the gap's time is
 *                 nobody's, pt_cct_gap)
 *   cpu           the tree formats: a CpuTime record (its clock accounted up
 *                 to `now` first): the thread's CPU ns (pt_cct_cpu)
 *   cpu_rate      the timeline formats: the thread ran on a CPU at `rate`
 *                 (0..1) from `from` to `to` (two CpuTime records, the driver's
 *                 pt_cct_cpu); rate < 0: the thread ended at `to` after a rate
 *                 was written (cpu_shown)
 *   thread_end    a thread's ThreadEnd (its number may be reused)
 *   end           the output's end (before the last flush)
 *   destroy       free what e->ws holds (also after a failed init; the
 *                 driver frees e->ws itself)
 * Every op may be NULL (nothing to do). Ticks are the thread's clock (ex_now)
 * but for enter and exit.
 */
struct ex_writer {
    int tree;   /* the calling-context tree (collapsed, pstats): no time filter */
    /* tree: the key a call's node is merged by (pt_cct_config_t.key_of); NULL: its id */
    uint32_t (*tree_key)(void *e, uint32_t proc, uint32_t id);
    int defers; /* filtering: opens are deferred (speedscope, perfetto) */
    /* the writer's view of asyncio tasks (tasks.h, Timelines; ctx: the ex_t), fed
     * without a time filter only; NULL: none */
    const pt_tasks_observer_t *tasks;
    int (*init)(ex_t *e);
    void (*destroy)(ex_t *e);
    int (*proc_new)(ex_t *e, uint32_t proc);
    int (*thread)(ex_t *e, uint32_t index);
    int (*begin)(ex_t *e, proc_t *first);
    int (*process)(ex_t *e, proc_t *p);
    void (*named)(ex_t *e, uint32_t index);
    void (*symbol)(ex_t *e, uint32_t s);
    void (*self)(ex_t *e, thr_t *t, uint64_t ticks);
    int (*enter)(ex_t *e, pt_walk_thread_t *wt, uint32_t id, uint64_t ticks, unsigned flags);
    int (*exit)(ex_t *e, pt_walk_thread_t *wt, uint64_t ticks);
    int (*open)(ex_t *e, pt_walk_thread_t *wt, uint32_t sym, uint64_t at, int continued);
    int (*close)(ex_t *e, pt_walk_thread_t *wt, uint32_t sym, uint64_t start, uint64_t end);
    int (*resume)(ex_t *e, pt_walk_thread_t *wt);
    int (*instant)(ex_t *e, pt_walk_thread_t *wt, uint32_t id, uint64_t now, unsigned flags);
    int (*gap)(ex_t *e, pt_walk_thread_t *wt, uint64_t now, uint64_t lost);
    int (*cpu)(ex_t *e, pt_walk_thread_t *wt, uint64_t now, uint64_t cpu_ns);
    int (*cpu_rate)(ex_t *e, uint32_t index, uint64_t from, uint64_t to, double rate);
    void (*thread_end)(ex_t *e, uint32_t index);
    int (*end)(ex_t *e, const pt_walk_counters_t *wc);
};

PT_EX_HIDDEN extern const ex_writer_t pt_ex_collapsed, pt_ex_pstats, pt_ex_speedscope, pt_ex_chrome,
    pt_ex_perfetto;

static inline thr_t *thr_of(ex_t *e, pt_walk_thread_t *wt) { return &e->thr[wt->index]; }

static inline uint32_t proc_index(const ex_t *e, const proc_t *p) { return (uint32_t)(p - e->procs); }

/* A thread's clock at `now` ticks: ticks below the largest seen count as it
 * (so slices nest and self time never goes back); *moved: how far it went on. */
static inline uint64_t ex_clock(thr_t *t, uint64_t now, uint64_t *moved)
{
    *moved = 0;
    if (!t->have_last) {
        t->have_last = 1;
        t->last = now;
        t->step_last = now; /* its first step starts at its first event (agg.h STEPS) */
        return now;
    }
    if (now <= t->last)
        return t->last;
    *moved = now - t->last;
    t->last = now;
    return now;
}

/* ex_clock, what the clock went on given to the writer's self. */
static inline uint64_t ex_now(ex_t *e, thr_t *t, uint64_t ticks)
{
    uint64_t moved, now = ex_clock(t, ticks, &moved);
    if (moved && e->w->self)
        e->w->self(e, t, moved);
    return now;
}

static inline int64_t ticks_ns_since_base(const proc_t *p, uint64_t ticks)
{
    double d = ticks >= p->base_ticks ? (double)(ticks - p->base_ticks) : -(double)(p->base_ticks - ticks);
    return (int64_t)(d * p->ns_per_tick); /* truncates, as int() did */
}

/* The stream's time axis (walk.h, THE TIME AXIS): CLOCK_MONOTONIC ns. */
static inline int64_t chrome_ns(const proc_t *p, uint64_t ticks)
{
    double d = ticks >= p->base_ticks ? (double)(ticks - p->base_ticks) : -(double)(p->base_ticks - ticks);
    return (int64_t)llround(d * p->ns_per_tick + (double)p->pinfo.base_monotonic_ns);
}

/* pt_grow, the new elements filled with `fill` bytes (0: zeroed). */
static inline int ex_grow_fill(void **arr, uint32_t *cap, size_t elem, uint32_t need, int fill)
{
    uint32_t old = *cap;
    if (need <= old)
        return 0;
    if (pt_grow(arr, cap, elem, need))
        return -ENOMEM;
    memset((char *)*arr + (size_t)old * elem, fill, (size_t)(*cap - old) * elem);
    return 0;
}

/* Push v (a node or a symbol index) that opened at `start`. 0 or -ENOMEM. */
static inline int ex_push(thr_t *t, uint32_t v, uint64_t start)
{
    if (t->depth == t->cap) {
        uint32_t cap = t->cap;
        if (pt_grow((void **)&t->stack, &cap, sizeof *t->stack, t->depth + 1))
            return -ENOMEM;
        uint32_t cap2 = t->cap;
        if (pt_grow((void **)&t->starts, &cap2, sizeof *t->starts, t->depth + 1))
            return -ENOMEM;
        t->cap = cap;
    }
    t->stack[t->depth] = v;
    t->starts[t->depth++] = start;
    return 0;
}

/* The thread's name, or "thread N" in buf. */
PT_EX_HIDDEN const char *pt_ex_thread_name(const thr_t *t, char *buf, size_t n);
/* Does the call from start to end pass opts.from_ns/to_ns/min_duration_ns? */
PT_EX_HIDDEN int pt_ex_passes(const ex_t *e, const proc_t *p, uint64_t start, uint64_t end);
/* The first selected process that has its ProcessInfo (NULL if none). */
PT_EX_HIDDEN const proc_t *pt_ex_first_selected(const ex_t *e);

/* Symbol s (a dense index of e->cct: pt_cct_sym). */
static inline const pt_cct_symbol_t *ex_sym(const ex_t *e, uint32_t s) { return pt_cct_sym_at(e->cct, s); }

#endif /* PT_VIEWER_EXPORT_INTERNAL_H */
