/*
 * pt_agg implementation.
 *
 * Design summary
 *   - The calling-context tree, its symbols, the self-time rule, the tree
 *     budget and the walk that gives primitive calls and total times are
 *     pt_cct's (cct.h); one tree holds every thread (a root per thread).
 *     pt_agg adds the threads, the window, the counters and the queries.
 *   - Per event we only add ticks to the top frame's self time (and to the
 *     slice entry of that node), push or pop. Inclusive time, primitive calls
 *     and the pstats "total time of outermost activations" are derived from
 *     the tree at query time (pt_cct_walk). That keeps the hot path short and
 *     makes recursion exact by construction.
 *   - Window: a ring of slices; each slice holds (node, calls, self) entries.
 *     A node caches the absolute slice number of its last entry and the entry
 *     index, so the steady path appends at most once per node per slice and
 *     otherwise adds in place. Slice arrays keep their capacity when reused.
 *   - Tree budget (cct.h): past it, new paths go to [other] nodes and a
 *     folded activation is kept in a fold record per (thread, symbol); the
 *     window has the same per slice (fentries). A fold record's inclusive
 *     ticks are flushed to the slice they were given in when the thread's
 *     slice changes or the activation exits (cct's fold_flushed hook): O(1)
 *     per event, O(open ones) per slice change.
 *   - A node's aux64/aux32 (cct.h) are its window cache: the absolute slice
 *     of its last entry and the entry's index; a fold record's the same.
 */
#define _POSIX_C_SOURCE 200809L /* strndup */
#include "agg.h"

#include "cct.h"
#include "grow_internal.h"
#include "u64map_internal.h"
#include "tasks.h"
#include "walk.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SLICE_NS 100000000ull
#define DEFAULT_SLICE_COUNT 6000u
#define INITIAL_SLICE_CAP 256u /* slots a new aggregation allocates (slice_ring_fit grows them) */
#define NO_SLICE UINT64_MAX

/* Ticks come from untrusted input and may sit anywhere up to 2^64 - 1: every
 * sum or product of them saturates, so a border never wraps below a tick. */
static inline uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static inline uint64_t sat_mul(uint64_t a, uint64_t b)
{
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* double -> u64 without undefined behaviour (NaN and negatives give 0,
 * anything past 2^64 saturates). */
static inline uint64_t u64_of_double(double v)
{
    if (!(v > 0.0))
        return 0;
    if (v >= 18446744073709551616.0)
        return UINT64_MAX;
    return (uint64_t)v;
}

/* Node, symbol and thread indices share "none" with the maps' and the tree's. */
_Static_assert(PT_AGG_NONE == PT_U64MAP_EMPTY && PT_AGG_NONE == PT_CCT_NONE, "pt_agg's none is the tree's");
_Static_assert(PT_AGG_OTHER == PT_CCT_OTHER, "an [other] node's symbol is the tree's");
_Static_assert(PT_AGG_DEFAULT_TREE_BUDGET == PT_CCT_DEFAULT_BUDGET && PT_AGG_NODE_BYTES == PT_CCT_NODE_BYTES,
               "the tree budget is the tree's");
_Static_assert(NO_SLICE == UINT64_MAX, "a new node's and fold record's aux64 (UINT64_MAX) is no slice");

/* ---- state ---------------------------------------------------------------- */

/* STEPS. A Mark with PT_EVF_STEP ends a step of its thread's loop (walk.h).
 * Per thread: every step's duration is in the summary (count, sum, sum of
 * squares, the slowest); the last PT_AGG_STEPS_KEPT (end, duration) pairs are
 * kept in a ring for the percentiles and the list. The last complete step's
 * call tree: from its thread's first Step mark on, the ticks and calls the
 * thread gives its nodes are also added to `cur`, one entry per node (a node
 * belongs to one thread: agg.c makes a root per thread), found through
 * pt_agg.step_slot[node] and checked as a slice entry is (the index is below
 * the count and the entry names the node); a Step mark freezes `cur` as
 * `last` and starts `cur` empty, O(1). The first step (from the thread's first
 * event to its first Step mark) is the thread's whole tree then: copied from
 * the nodes once. Frames open at a mark go on into the next step (their call
 * is counted in the step that entered them), as a window's slices do. */
typedef struct step_entry {
    uint32_t node;
    uint32_t calls;        /* saturating */
    uint64_t self;         /* ticks */
} step_entry_t;

typedef struct step_set {
    step_entry_t *e;
    uint32_t n, cap;
    uint64_t lost;         /* events lost in its gaps */
} step_set_t;

typedef struct steps {
    uint64_t count;        /* steps ended (its Step marks) */
    uint64_t start;        /* tick the running step began at */
    uint64_t sum, min, max, max_index; /* ticks; max_index: 1-based number of the slowest */
    double sumsq;
    uint64_t last_end, last_dur;
    uint32_t label;        /* symbol id of its last Step mark */
    struct { uint64_t end, dur; } *ring; /* the last kept steps: step k (1-based) in slot (k-1) % cap */
    uint32_t ring_cap;
    int ring_fixed;        /* growing it failed: it stays this size (its slots were reused) */
    step_set_t cur, last;  /* the running step's nodes; the last complete step's */
    uint64_t last_start;   /* ticks of the last complete step */
    uint64_t set_lost;     /* entries that found no memory (the step tree misses them): counted */
} steps_t;

typedef struct thread {
    uint64_t number;
    uint64_t os_tid;
    char *name;
    int ended;
    uint64_t events;
    uint64_t dropped_reported; /* LostCount / ThreadEnd */
    pt_walk_thread_t *wt;  /* the walk's state of it (NULL until its first event) */
    pt_cct_thread_t cur;   /* its place in the tree: the nodes of the walk's open entries, its clock */
    uint64_t acc_slice;    /* the slice cur.acc's ticks were last given in (NO_SLICE: none yet) */
    /* slice cache: ticks [slice_start, slice_end) are slice slice_no */
    uint64_t slice_no, slice_start, slice_end;
    uint32_t slice_slot;   /* slice_no % slice_cap when it was cached (checked against sl->no) */
    /* slice entries given ticks since its last CpuTime record (marked PT_CCT_DIRTY) */
    struct sdirty *sdirty;
    uint32_t nsdirty, sdirty_cap;
    uint64_t first_tick;   /* its first tick: ThreadStart's or its first event's (where its first step starts) */
    int have_first;
    steps_t *steps;        /* its steps (NULL until its first Step mark) */
} thread_t;

struct sdirty {
    uint64_t no;           /* the slice */
    uint32_t idx;          /* the entry */
    uint32_t folded;       /* 1: a fentry */
    uint64_t self0;        /* its self ticks before */
};

/* A slice entry's self ticks and its CPU part in one word (the window is the
 * reader's biggest store: an entry stays 16 bytes): bits 0..47 self ticks (at
 * most a slice's ticks: saturating), 48..62 CPU in the slice's units of
 * slice.q ticks (q = the slice's ticks / 32767, so the CPU part, at most the
 * self ticks, fits), 63 PT_CCT_DIRTY (given ticks since its thread's last
 * CpuTime record). */
#define SC_SELF_MAX ((UINT64_C(1) << 48) - 1)
#define SC_CPU_MAX UINT64_C(0x7fff)

static inline uint64_t sc_self(uint64_t sc) { return sc & SC_SELF_MAX; }
/* the CPU part, never above the self ticks (a unit rounds up to q / 2) */
static inline uint64_t sc_cpu(uint64_t sc, uint64_t q)
{
    uint64_t c = ((sc >> 48) & SC_CPU_MAX) * q;
    return c < sc_self(sc) ? c : sc_self(sc);
}

static inline void sc_add_self(uint64_t *sc, uint64_t d)
{
    uint64_t s = sc_self(*sc);
    s = d > SC_SELF_MAX - s ? SC_SELF_MAX : s + d;
    *sc = (*sc & ~SC_SELF_MAX) | s;
}

static inline void sc_add_cpu(uint64_t *sc, uint64_t cpu, uint64_t q)
{
    uint64_t u = ((*sc >> 48) & SC_CPU_MAX) + (cpu + q / 2) / q;
    if (u > SC_CPU_MAX)
        u = SC_CPU_MAX;
    *sc = (*sc & ~(SC_CPU_MAX << 48)) | (u << 48);
}

typedef struct slice_entry {
    uint32_t node;
    uint32_t calls;
    uint64_t sc;           /* self ticks and CPU part (above) */
} slice_entry_t;

typedef struct fentry {
    uint32_t frec;         /* the tree's fold record */
    uint32_t calls;
    uint32_t prim;
    uint32_t total_cpu;    /* in units of the slice's q ticks (saturating) */
    uint64_t sc;           /* self ticks and CPU part (above) */
    uint64_t total;
} fentry_t;

typedef struct slice {
    uint64_t no; /* absolute slice number held, NO_SLICE if none */
    uint64_t events;
    uint64_t lost;         /* events lost in gaps (Lost records) in it */
    uint64_t q;            /* its CPU unit (ticks): its ticks / 32767, at least 1 */
    slice_entry_t *entries;
    uint32_t count, cap;
    fentry_t *fentries;    /* folded records' calls and ticks in this slice */
    uint32_t fcount, fcap;
} slice_t;

struct pt_agg {
    pt_fb_process_info_t pinfo;
    int have_pinfo;
    uint64_t tps;          /* ticks per second */
    uint64_t slice_ns;
    uint64_t slice_ticks;
    uint32_t slice_count;  /* the window's slices at most */
    uint32_t slice_cap;    /* slots allocated: grows to slice_count as the span of the
                              stream's slices does, so a short-lived process of a long
                              window (a pool worker in an hour's report) holds few */
    slice_t *slices;       /* slice no is in slot no % slice_cap */
    uint64_t max_slice;    /* NO_SLICE until the first event */
    uint64_t min_slice;    /* the first slice made current */
    uint64_t origin;       /* tick of slice 0 */
    int have_ticks;
    uint64_t min_tick, latest;

    pt_cct_t *cct;               /* the tree and its symbols (one process: process 0) */

    thread_t *threads;
    uint32_t thread_count, thread_cap;
    pt_u64map_t thread_map;      /* number -> index */
    pt_walk_t *walk;       /* the stream rules (walk.h) */
    pt_tasks_t *tasks;     /* asyncio tasks (tasks.h) */
    uint32_t last_thread;  /* lookup cache */

    uint64_t events_seen, unmatched, bad_events;
    uint64_t lost_records;
    uint64_t producer_dropped, hook_errors;
    uint64_t symbols_dropped, threads_untraced, events_untraced, tracing_displaced;
    uint64_t unrecorded_events;   /* max ProducerStatus.unrecorded_events (recordings) */
    uint32_t producer_state;
    uint32_t *step_slot;          /* per node: its entry in its thread's running step (STEPS) */
    uint32_t step_slot_cap;
    uint32_t end_signal;
    uint64_t end_signal_pid;
};

static const pt_walk_ops_t agg_walk_ops; /* defined with the callbacks below */

static void recompute_slice_ticks(pt_agg_t *a)
{
    double t = (double)a->tps * (double)a->slice_ns / 1e9;
    a->slice_ticks = t < 1.0 ? 1 : u64_of_double(t + 0.5);
}

static void fold_flushed(void *ctx, pt_cct_thread_t *cur, uint32_t fold, uint64_t ticks, uint64_t cpu);

int pt_agg_create(const pt_agg_config_t *cfg, pt_agg_t **out)
{
    pt_agg_t *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    a->slice_ns = cfg && cfg->slice_ns ? cfg->slice_ns : DEFAULT_SLICE_NS;
    a->slice_count = cfg && cfg->slice_count ? cfg->slice_count : DEFAULT_SLICE_COUNT;
    a->tps = 1000000000ull;
    a->pinfo.ticks_per_second = a->tps;
    recompute_slice_ticks(a);
    a->max_slice = NO_SLICE;
    a->slice_cap = a->slice_count < INITIAL_SLICE_CAP ? a->slice_count : INITIAL_SLICE_CAP;
    a->slices = calloc(a->slice_cap, sizeof *a->slices);
    if (!a->slices)
        goto err;
    for (uint32_t i = 0; i < a->slice_cap; i++)
        a->slices[i].no = NO_SLICE;
    pt_cct_config_t cc = {.budget = cfg ? cfg->tree_budget : 0, .fold_flushed = fold_flushed, .ctx = a};
    if (pt_cct_create(&cc, &a->cct) || pt_u64map_init(&a->thread_map, 16))
        goto err;
    if (pt_walk_create(&agg_walk_ops, a, &a->walk) || pt_tasks_create(0, &a->tasks))
        goto err;
    pt_tasks_set_node_budget(a->tasks, cfg ? cfg->task_nodes : 0);
    pt_walk_check_symbols(a->walk); /* events naming ids never announced are damage (walk.h) */
    *out = a;
    return 0;
err:
    pt_agg_destroy(a);
    return -ENOMEM;
}

void pt_agg_destroy(pt_agg_t *a)
{
    if (!a)
        return;
    if (a->slices)
        for (uint32_t i = 0; i < a->slice_cap; i++) {
            free(a->slices[i].entries);
            free(a->slices[i].fentries);
        }
    free(a->slices);
    pt_cct_destroy(a->cct);
    free(a->step_slot);
    for (uint32_t i = 0; i < a->thread_count; i++) {
        steps_t *s = a->threads[i].steps;
        if (s) {
            free(s->ring);
            free(s->cur.e);
            free(s->last.e);
            free(s);
        }
        free(a->threads[i].name);
        pt_cct_thread_free(&a->threads[i].cur);
        free(a->threads[i].sdirty);
    }
    free(a->threads);
    pt_u64map_free(&a->thread_map);
    pt_walk_destroy(a->walk);
    pt_tasks_destroy(a->tasks);
    free((void *)a->pinfo.command_line.ptr);
    free((void *)a->pinfo.python_version.ptr);
    free((void *)a->pinfo.segment.ptr);
    free((void *)a->pinfo.role.ptr);
    free(a);
}

/* ---- symbols ---------------------------------------------------------------- */

static pt_agg_symbol_t symbol_out(const pt_agg_t *a, uint32_t sym)
{
    const pt_cct_symbol_t *s = pt_cct_sym_at(a->cct, sym);
    return (pt_agg_symbol_t){.id = s->id, .kind = s->kind, .known = s->known, .name = s->name, .file = s->file,
                             .line = s->line};
}

pt_agg_symbol_t pt_agg_symbol(pt_agg_t *a, uint32_t id)
{
    uint32_t idx = pt_cct_sym(a->cct, 0, id);
    if (idx == PT_AGG_NONE)
        return (pt_agg_symbol_t){.id = id, .name = "<unknown>", .file = ""};
    return symbol_out(a, idx);
}

/* ---- slices ----------------------------------------------------------------- */

/* Make slice `no` current if it is newer than every slice seen; returns the
 * slot, or NULL if `no` fell out of the ring. */
/* Room for the slices [lo, no] (at most slice_count of them): the ring grows,
 * doubling, and each slice held moves to its slot in the larger ring (they are
 * consecutive numbers, so no two meet). Out of memory: the ring stays as it is
 * and the window holds the last slice_cap slices. */
static void slice_ring_fit(pt_agg_t *a, uint64_t lo, uint64_t no)
{
    uint64_t span = no - lo + 1;
    if (span > a->slice_count)
        span = a->slice_count;
    if (span <= a->slice_cap)
        return;
    uint64_t ncap = a->slice_cap;
    while (ncap < span)
        ncap *= 2;
    if (ncap > a->slice_count)
        ncap = a->slice_count;
    slice_t *n = calloc((size_t)ncap, sizeof *n);
    if (!n)
        return;
    for (uint64_t i = 0; i < ncap; i++)
        n[i].no = NO_SLICE;
    for (uint32_t i = 0; i < a->slice_cap; i++) {
        const slice_t *old = &a->slices[i];
        if (old->no != NO_SLICE)
            n[old->no % ncap] = *old;
        else {
            free(old->entries);
            free(old->fentries);
        }
    }
    free(a->slices);
    a->slices = n;
    a->slice_cap = (uint32_t)ncap;
}

static slice_t *slice_get(pt_agg_t *a, uint64_t no)
{
    if (a->max_slice == NO_SLICE || no > a->max_slice) {
        if (a->max_slice == NO_SLICE)
            a->min_slice = no;
        slice_ring_fit(a, a->min_slice, no);
        uint64_t from = a->max_slice == NO_SLICE ? no : a->max_slice + 1;
        if (no - from >= a->slice_cap)
            from = no - a->slice_cap + 1;
        for (uint64_t s = from; s <= no; s++) {
            slice_t *sl = &a->slices[s % a->slice_cap];
            sl->no = s;
            sl->count = 0;
            sl->fcount = 0;
            sl->events = 0;
            sl->lost = 0;
            sl->q = a->slice_ticks / SC_CPU_MAX + 1;
        }
        a->max_slice = no;
    }
    if (a->max_slice - no >= a->slice_cap) /* no <= max_slice here */
        return NULL;
    slice_t *sl = &a->slices[no % a->slice_cap];
    return sl->no == no ? sl : NULL;
}

static inline uint64_t slice_of_ticks(const pt_agg_t *a, uint64_t t)
{
    uint64_t no = t <= a->origin ? 0 : (t - a->origin) / a->slice_ticks;
    /* NO_SLICE is a sentinel, and loops run up to max_slice inclusive */
    return no < NO_SLICE - 1 ? no : NO_SLICE - 2;
}

/* Slice number of tick t for thread th (cached per thread). */
static inline uint64_t thread_slice(pt_agg_t *a, thread_t *th, uint64_t t)
{
    if (t >= th->slice_start && t < th->slice_end)
        return th->slice_no;
    uint64_t no = slice_of_ticks(a, t);
    th->slice_no = no;
    th->slice_slot = (uint32_t)(no % a->slice_cap);
    th->slice_start = no == 0 ? 0 : sat_add(a->origin, sat_mul(no, a->slice_ticks));
    /* saturates at 2^64 - 1: the last slice then ends at the last tick, and
     * account() treats an end that does not move forward as the end */
    th->slice_end = sat_add(a->origin, sat_mul(no + 1, a->slice_ticks));
    return no;
}

/* An entry given ticks whose CPU share the thread's next CpuTime record tells. */
static void sdirty_add(thread_t *th, uint64_t no, uint32_t idx, uint32_t folded, uint64_t *sc, uint64_t self0)
{
    if (th->nsdirty >= PT_CCT_PENDING_MAX ||
        pt_grow((void **)&th->sdirty, &th->sdirty_cap, sizeof *th->sdirty, th->nsdirty + 1)) {
        th->cur.cpu_lost++;
        return;
    }
    th->sdirty[th->nsdirty++] = (struct sdirty){.no = no, .idx = idx, .folded = folded, .self0 = self0};
    *sc |= PT_CCT_DIRTY;
}

/* self ticks to an entry's word; its CPU share pending when its thread has a CpuTime baseline */
static inline void entry_self(thread_t *th, uint64_t *sc, uint64_t no, uint32_t idx, uint32_t folded, uint64_t self)
{
    uint64_t self0 = sc_self(*sc);
    sc_add_self(sc, self);
    if (!th || !th->cur.have_cpu || !self)
        return; /* before the thread's first CpuTime record: no CPU share, ever */
    if (!(*sc & PT_CCT_DIRTY))
        sdirty_add(th, no, idx, folded, sc, self0);
}

static inline void slice_add(pt_agg_t *a, thread_t *th, uint32_t node, uint64_t no, uint32_t slot, uint32_t calls,
                      uint64_t self)
{
    pt_cct_node_t *n = &a->cct->nodes[node]; /* aux64: the slice of its last entry, aux32: the entry */
    if (n->aux64 == no) {
        slice_t *sl = &a->slices[slot];
        if (sl->no == no && n->aux32 < sl->count && sl->entries[n->aux32].node == node) {
            sl->entries[n->aux32].calls += calls;
            entry_self(th, &sl->entries[n->aux32].sc, no, n->aux32, 0, self);
            return;
        }
    }
    slice_t *sl = slice_get(a, no);
    if (!sl)
        return; /* older than the window ring: whole run only */
    if (sl->count == sl->cap &&
        pt_grow((void **)&sl->entries, &sl->cap, sizeof *sl->entries, sl->count + 1))
        return;
    sl->entries[sl->count] = (slice_entry_t){.node = node, .calls = calls};
    entry_self(th, &sl->entries[sl->count].sc, no, sl->count, 0, self);
    n->aux64 = no;
    n->aux32 = sl->count++;
}

/* ---- fold records in the window ------------------------------------------- */

/* Add to folded record f's entry in slice no (nothing if it fell out of the ring). */
static void fslice_add(pt_agg_t *a, thread_t *th, uint32_t f, uint64_t no, uint32_t calls, uint32_t prim,
                       uint64_t self, uint64_t total, uint64_t total_cpu)
{
    if (no == NO_SLICE)
        return;
    pt_cct_fold_t *r = &a->cct->folds[f]; /* aux64: the slice of its last entry, aux32: the entry */
    slice_t *sl = NULL;
    if (r->aux64 == no) {
        sl = &a->slices[no % a->slice_cap];
        if (sl->no != no || r->aux32 >= sl->fcount || sl->fentries[r->aux32].frec != f)
            sl = NULL;
    }
    if (!sl) {
        sl = slice_get(a, no);
        if (!sl)
            return; /* older than the window ring: whole run only */
        if (sl->fcount == sl->fcap &&
            pt_grow((void **)&sl->fentries, &sl->fcap, sizeof *sl->fentries, sl->fcount + 1))
            return;
        sl->fentries[sl->fcount] = (fentry_t){.frec = f};
        r->aux64 = no;
        r->aux32 = sl->fcount++;
    }
    fentry_t *e = &sl->fentries[r->aux32];
    e->calls += calls;
    e->prim += prim;
    entry_self(th, &e->sc, no, r->aux32, 1, self);
    e->total += total;
    uint64_t u = e->total_cpu + (total_cpu + sl->q / 2) / sl->q;
    e->total_cpu = u > UINT32_MAX ? UINT32_MAX : (uint32_t)u;
}

/* ---- threads ---------------------------------------------------------------- */

static thread_t *thread_get(pt_agg_t *a, uint64_t number)
{
    if (a->last_thread < a->thread_count && a->threads[a->last_thread].number == number)
        return &a->threads[a->last_thread];
    uint32_t idx = pt_u64map_get(&a->thread_map, number);
    if (idx == PT_AGG_NONE) {
        if (pt_grow((void **)&a->threads, &a->thread_cap, sizeof *a->threads, a->thread_count + 1))
            return NULL;
        idx = a->thread_count;
        thread_t *th = &a->threads[idx];
        memset(th, 0, sizeof *th);
        th->number = number;
        uint32_t root = pt_cct_root(a->cct, PT_AGG_NONE, idx);
        if (root == PT_AGG_NONE || pt_u64map_put(&a->thread_map, number, idx))
            return NULL;
        pt_cct_thread_init(&th->cur, root, idx);
        th->slice_no = NO_SLICE;
        th->acc_slice = NO_SLICE;
        a->thread_count++;
    }
    a->last_thread = idx;
    return &a->threads[idx];
}

static void note_tick(pt_agg_t *a, uint64_t t)
{
    if (!a->have_ticks) {
        a->have_ticks = 1;
        a->min_tick = a->latest = t;
        a->origin = a->have_pinfo && a->pinfo.base_ticks && a->pinfo.base_ticks <= t ? a->pinfo.base_ticks : t;
        return;
    }
    if (t < a->min_tick)
        a->min_tick = t;
    if (t > a->latest)
        a->latest = t;
}

/* cct's hook: ticks of an open outermost folded activation were counted as
 * its inclusive time; they go to the slice they were given in. */
static void fold_flushed(void *ctx, pt_cct_thread_t *cur, uint32_t fold, uint64_t ticks, uint64_t cpu)
{
    pt_agg_t *a = ctx;
    thread_t *th = &a->threads[cur->owner];
    fslice_add(a, th, fold, th->acc_slice, 0, 0, 0, ticks, cpu);
}

/* Give the ticks since the thread's last event to the frame on top (the
 * tree's rule), and to the window's slices they fall in. */
static inline void spread(pt_agg_t *a, thread_t *th, uint64_t t, uint64_t now, uint64_t given, uint32_t top, uint32_t fr,
                   int flush);

/* calls and ticks to node in th's running step (STEPS) */
static void step_add(pt_agg_t *a, thread_t *th, uint32_t node, uint32_t calls, uint64_t self)
{
    steps_t *s = th->steps;
    if (node >= a->step_slot_cap) {
        uint32_t cap = a->step_slot_cap;
        if (pt_grow((void **)&a->step_slot, &cap, sizeof *a->step_slot, a->cct->node_count > node ? a->cct->node_count : node + 1)) {
            s->set_lost++;
            return;
        }
        a->step_slot_cap = cap;
    }
    uint32_t i = a->step_slot[node];
    if (i < s->cur.n && s->cur.e[i].node == node) {
        step_entry_t *e = &s->cur.e[i];
        e->calls = e->calls > UINT32_MAX - calls ? UINT32_MAX : e->calls + calls;
        e->self += self;
        return;
    }
    if (pt_grow((void **)&s->cur.e, &s->cur.cap, sizeof *s->cur.e, s->cur.n + 1)) {
        s->set_lost++;
        return;
    }
    a->step_slot[node] = s->cur.n;
    s->cur.e[s->cur.n++] = (step_entry_t){.node = node, .calls = calls, .self = self};
}

static void account(pt_agg_t *a, thread_t *th, uint64_t now)
{
    uint64_t t = th->cur.last;
    uint64_t given = pt_cct_account(a->cct, &th->cur, now);
    if (!given)
        return;
    spread(a, th, t, now, given, pt_cct_top(&th->cur), pt_cct_top_fold(&th->cur), 1);
    if (th->steps)
        step_add(a, th, pt_cct_top(&th->cur), 0, given);
}

/* A gap (Lost record): the ticks since the last event are nobody's -- the
 * thread's <not observed> node's (cct.h), in the window too. */
static void account_gap(pt_agg_t *a, thread_t *th, uint64_t now, uint64_t lost)
{
    uint64_t t = th->cur.last;
    uint64_t given = pt_cct_gap(a->cct, &th->cur, now, lost);
    uint64_t no = thread_slice(a, th, now);
    slice_t *sl = &a->slices[th->slice_slot];
    if (sl->no != no)
        sl = slice_get(a, no);
    if (sl)
        sl->lost += lost;
    if (given && th->cur.unobserved != PT_AGG_NONE)
        spread(a, th, t, now, given, th->cur.unobserved, PT_AGG_NONE, 0);
    if (th->steps) {
        th->steps->cur.lost += lost;
        if (given && th->cur.unobserved != PT_AGG_NONE)
            step_add(a, th, th->cur.unobserved, 0, given);
    }
}

/* The window's part of `given` ticks [t, now) of node top (fold record fr):
 * split at slice borders. flush: the thread's clock acc moved with them (the
 * folded totals per slice). */
static inline void spread(pt_agg_t *a, thread_t *th, uint64_t t, uint64_t now, uint64_t given, uint32_t top, uint32_t fr,
                   int flush)
{
    /* the thread's clock acc as it was at tick t (folded totals per slice) */
    const uint64_t acc0 = th->cur.acc - given, t0 = t;
    /* window: split the interval at slice borders; parts older than the
     * ring are only in the whole run */
    uint64_t ring_ticks = sat_mul(a->slice_count, a->slice_ticks);
    if (now - t > ring_ticks)
        t = now - ring_ticks;
    /* at most slice_count + 1 rounds: each one ends at a slice border (or
     * at now), and the interval spans at most the ring */
    while (t < now) {
        uint64_t no = thread_slice(a, th, t);
        uint64_t end = th->slice_end < now && th->slice_end > t ? th->slice_end : now;
        slice_add(a, th, top, no, th->slice_slot, 0, end - t);
        if (fr != PT_AGG_NONE)
            fslice_add(a, th, fr, no, 0, 0, end - t, 0, 0);
        if (flush && no != th->acc_slice) {
            pt_cct_fold_flush(a->cct, &th->cur, 0, acc0 + (t - t0));
            th->acc_slice = no;
        }
        t = end;
    }
}

/* ---- the walk's callbacks (the rules are in walk.h) ------------------------ */

static thread_t *walk_thread(pt_agg_t *a, pt_walk_thread_t *wt)
{
    return &a->threads[(uintptr_t)wt->user - 1];
}

static int agg_thread_new(void *ctx, pt_walk_thread_t *wt)
{
    pt_agg_t *a = ctx;
    thread_t *th = thread_get(a, wt->number);
    if (!th)
        return -ENOMEM;
    wt->user = (void *)(uintptr_t)(th - a->threads + 1);
    th->wt = wt; /* the walk's threads stay put */
    return 0;
}

static int agg_enter(void *ctx, pt_walk_thread_t *wt, uint32_t id, uint64_t now, unsigned flags)
{
    pt_agg_t *a = ctx;
    thread_t *th = walk_thread(a, wt);
    account(a, th, now);
    int counted = !(flags & PT_WALK_CONTINUED); /* one call per activation, seen or reported */
    pt_cct_entered_t in;
    if (pt_cct_enter(a->cct, &th->cur, 0, id, counted, a->walk, wt, &in))
        return -ENOMEM;
    if (pt_tasks_on_enter(a->tasks, wt, id, now, flags))
        return -ENOMEM;
    if (counted) {
        uint64_t no = thread_slice(a, th, now);
        slice_add(a, th, in.node, no, th->slice_slot, 1, 0);
        if (in.fold != PT_AGG_NONE)
            fslice_add(a, th, in.fold, no, 1, (uint32_t)in.outermost, 0, 0, 0);
        if (th->steps)
            step_add(a, th, in.node, 1, 0);
    }
    return 0;
}

static int agg_exit(void *ctx, pt_walk_thread_t *wt, uint32_t id, uint64_t now, unsigned flags)
{
    pt_agg_t *a = ctx;
    thread_t *th = walk_thread(a, wt);
    account(a, th, now);
    pt_cct_exit(a->cct, &th->cur); /* an outermost folded one that ends is flushed */
    return pt_tasks_on_exit(a->tasks, wt, id, now, flags);
}

/* The first step of th: its whole tree so far (STEPS). */
static int step_first(pt_agg_t *a, thread_t *th, steps_t *s)
{
    const pt_cct_t *t = a->cct;
    uint32_t idx = (uint32_t)(th - a->threads);
    for (uint32_t i = 0; i < t->node_count; i++) {
        const pt_cct_node_t *n = &t->nodes[i];
        if (n->owner != idx || (!n->calls && !n->self))
            continue;
        if (pt_grow((void **)&s->last.e, &s->last.cap, sizeof *s->last.e, s->last.n + 1))
            return -ENOMEM;
        s->last.e[s->last.n++] = (step_entry_t){.node = i, .calls = n->calls > UINT32_MAX ? UINT32_MAX : (uint32_t)n->calls,
                                                .self = n->self};
    }
    s->last.lost = th->cur.gap_lost;
    return 0;
}

/* A Step mark at now ends th's running step (STEPS). */
static int step_end(pt_agg_t *a, thread_t *th, uint32_t label, uint64_t now)
{
    steps_t *s = th->steps;
    if (!s) {
        s = th->steps = calloc(1, sizeof *s);
        if (!s)
            return -ENOMEM;
        s->start = th->have_first && th->first_tick <= now ? th->first_tick : now;
        s->min = UINT64_MAX;
        if (step_first(a, th, s))
            return -ENOMEM;
    } else { /* the running step is the last one now; the old last is reused for the next */
        step_set_t old = s->last;
        s->last = s->cur;
        s->cur = old;
        s->cur.n = 0;
        s->cur.lost = 0;
    }
    uint64_t dur = now > s->start ? now - s->start : 0;
    s->count++;
    s->sum = sat_add(s->sum, dur);
    s->sumsq += (double)dur * (double)dur;
    if (dur < s->min)
        s->min = dur;
    if (dur > s->max || s->count == 1) {
        s->max = dur;
        s->max_index = s->count;
    }
    s->last_start = s->start;
    s->last_end = now;
    s->last_dur = dur;
    s->label = label;
    if (s->count > s->ring_cap && s->ring_cap < PT_AGG_STEPS_KEPT && !s->ring_fixed) {
        uint32_t cap = s->ring_cap;
        uint32_t want = s->count < PT_AGG_STEPS_KEPT ? (uint32_t)s->count : PT_AGG_STEPS_KEPT;
        if (!pt_grow((void **)&s->ring, &cap, sizeof *s->ring, want))
            s->ring_cap = cap > PT_AGG_STEPS_KEPT ? PT_AGG_STEPS_KEPT : cap;
        else
            s->ring_fixed = 1; /* out of memory: it keeps the last ring_cap steps from now on */
    }
    /* step k in slot (k-1) % ring_cap: the ring grows only while no slot was reused */
    if (s->ring_cap) {
        s->ring[(s->count - 1) % s->ring_cap].end = now;
        s->ring[(s->count - 1) % s->ring_cap].dur = dur;
    }
    s->start = now;
    return 0;
}

static int agg_instant(void *ctx, pt_walk_thread_t *wt, uint32_t id, uint64_t now, unsigned flags)
{
    pt_agg_t *a = ctx;
    thread_t *th = walk_thread(a, wt);
    account(a, th, now);
    pt_tasks_on_tick(a->tasks, wt, now);
    if (flags & PT_EVF_STEP)
        return step_end(a, th, id, now);
    return 0;
}

static int agg_gap(void *ctx, pt_walk_thread_t *wt, uint64_t now, uint64_t lost)
{
    pt_agg_t *a = ctx;
    account_gap(a, walk_thread(a, wt), now, lost);
    if (!(wt->lost_flags & PT_EVF_LOST_NO_RING)) /* events of a thread without a ring: not dropped */
        a->lost_records += lost;
    return 0;
}

/* The window's entries given ticks since th's last CpuTime record get their
 * CPU share at rate r (r < 0: none, unknown); then none is pending. */
static void settle_cpu(pt_agg_t *a, thread_t *th, double r)
{
    for (uint32_t i = 0; i < th->nsdirty; i++) {
        const struct sdirty *d = &th->sdirty[i];
        slice_t *sl = &a->slices[d->no % a->slice_cap];
        if (sl->no != d->no)
            continue; /* gone from the ring */
        uint64_t *sc;
        if (d->folded && d->idx < sl->fcount)
            sc = &sl->fentries[d->idx].sc;
        else if (!d->folded && d->idx < sl->count)
            sc = &sl->entries[d->idx].sc;
        else
            continue;
        *sc &= ~PT_CCT_DIRTY;
        if (r >= 0)
            sc_add_cpu(sc, (uint64_t)((double)(sc_self(*sc) - d->self0) * r + 0.5), sl->q);
    }
    th->nsdirty = 0;
}

/* CpuTime: the tree's rule (cct.h) gives the CPU share of the ticks given
 * since the last one; the window's entries get theirs at the same rate. */
static int agg_cpu(void *ctx, pt_walk_thread_t *wt, uint64_t now, uint64_t cpu_ns)
{
    pt_agg_t *a = ctx;
    thread_t *th = walk_thread(a, wt);
    account(a, th, now);
    double r;
    pt_cct_cpu(a->cct, &th->cur, now, cpu_ns, a->tps, &r);
    settle_cpu(a, th, r);
    pt_tasks_on_tick(a->tasks, wt, now);
    return 0;
}

/* Task records (walk.h, TASKS): the time moves on as for any event; the ids
 * that must name a Task symbol are checked against the symbol table here. */
static int agg_task(void *ctx, pt_walk_thread_t *wt, uint8_t kind, uint32_t id, uint16_t aux, uint64_t now,
                    unsigned flags)
{
    pt_agg_t *a = ctx;
    account(a, walk_thread(a, wt), now);
    int is_task = 1;
    if (kind != PT_EV_TASK_AWAIT || aux == PT_AWAIT_TASK) {
        pt_agg_symbol_t s = pt_agg_symbol(a, id);
        is_task = s.known && s.kind == PT_SYM_TASK;
    }
    return pt_tasks_on_task(a->tasks, wt, kind, id, aux, now, flags, is_task);
}

static const pt_walk_ops_t agg_walk_ops = {
    .thread_new = agg_thread_new,
    .enter = agg_enter,
    .exit = agg_exit,
    .instant = agg_instant,
    .gap = agg_gap,
    .cpu = agg_cpu,
    .task = agg_task,
};

int pt_agg_feed_events(pt_agg_t *a, uint64_t thread, const pt_event_t *events, size_t count)
{
    thread_t *th = thread_get(a, thread);
    if (!th)
        return -ENOMEM;
    if (th->ended)
        th->ended = 0; /* events after ThreadEnd: the slot was reused; keep going */
    a->events_seen += count;
    th->events += count;
    if (count && !th->have_first) {
        th->have_first = 1;
        th->first_tick = events[0].ticks;
    }
    /* clock range and events per slice; the stacks are the walk's */
    for (size_t i = 0; i < count; i++) {
        uint64_t now = events[i].ticks;
        note_tick(a, now);
        uint64_t no = thread_slice(a, th, now);
        slice_t *sl = &a->slices[th->slice_slot];
        if (sl->no != no)
            sl = slice_get(a, no);
        if (sl)
            sl->events++;
    }
    pt_walk_counters_t before;
    pt_walk_counters(a->walk, &before);
    int rc = pt_walk_events(a->walk, thread, events, count);
    pt_walk_counters_t after;
    pt_walk_counters(a->walk, &after);
    a->unmatched += (after.unmatched - before.unmatched) + (after.unmatched_spans - before.unmatched_spans);
    a->bad_events += after.bad_events - before.bad_events;
    return rc;
}

static int close_thread(pt_agg_t *a, thread_t *th, uint64_t ticks)
{
    if (ticks) {
        note_tick(a, ticks);
        account(a, th, ticks);
    }
    int rc = pt_walk_thread_end(a->walk, th->number, ticks);
    pt_cct_thread_close(&th->cur); /* their exits flushed them */
    /* its CPU clock ends with it: what its last CpuTime record did not cover stays unknown */
    settle_cpu(a, th, -1.0);
    pt_cct_cpu_forget(a->cct, &th->cur);
    th->ended = 1;
    return rc;
}

/* A C string of s (a NUL inside ends it). */
static char *str_copy(pt_fb_str_t s)
{
    return strndup(s.ptr ? s.ptr : "", s.ptr ? s.len : 0);
}

int pt_agg_feed_msg(pt_agg_t *a, const pt_fb_msg_t *m)
{
    switch (m->type) {
    case PT_MSG_PROCESS_INFO: {
        free((void *)a->pinfo.command_line.ptr);
        free((void *)a->pinfo.python_version.ptr);
        free((void *)a->pinfo.segment.ptr);
        /* the role, learnt late, holds until a newer one comes */
        const char *old_role = a->pinfo.role.ptr;
        int new_role = m->u.process_info.role.ptr != NULL;
        a->pinfo = m->u.process_info;
        char *c = str_copy(m->u.process_info.command_line);
        char *v = str_copy(m->u.process_info.python_version);
        char *s = str_copy(m->u.process_info.segment);
        char *r = new_role ? str_copy(m->u.process_info.role) : (char *)old_role;
        if (new_role)
            free((void *)old_role);
        a->pinfo.command_line = (pt_fb_str_t){c, c ? (uint32_t)strlen(c) : 0};
        a->pinfo.python_version = (pt_fb_str_t){v, v ? (uint32_t)strlen(v) : 0};
        a->pinfo.segment = (pt_fb_str_t){s, s ? (uint32_t)strlen(s) : 0};
        a->pinfo.role = (pt_fb_str_t){r, r ? (uint32_t)strlen(r) : 0};
        a->have_pinfo = 1;
        if (!a->have_ticks && a->pinfo.ticks_per_second) {
            a->tps = a->pinfo.ticks_per_second;
            recompute_slice_ticks(a);
        }
        a->pinfo.ticks_per_second = a->tps;
        return (c && v && s) ? 0 : -ENOMEM;
    }
    case PT_MSG_THREAD_START: {
        const pt_fb_thread_start_t *in = &m->u.thread_start;
        thread_t *th = thread_get(a, in->thread);
        if (!th)
            return -ENOMEM;
        if (th->ended) { /* a new thread under a reused number: start clean */
            th->ended = 0;
            th->cur.have_last = 0;
        }
        th->os_tid = in->os_tid;
        free(th->name);
        th->name = str_copy(in->name);
        if (in->ticks) {
            note_tick(a, in->ticks);
            account(a, th, in->ticks);
            if (!th->have_first) { /* its first step starts here (as an export's clock does) */
                th->have_first = 1;
                th->first_tick = in->ticks;
            }
        }
        return th->name ? 0 : -ENOMEM;
    }
    case PT_MSG_THREAD_END: {
        const pt_fb_thread_end_t *in = &m->u.thread_end;
        thread_t *th = thread_get(a, in->thread);
        if (!th)
            return -ENOMEM;
        if (in->events_dropped > th->dropped_reported)
            th->dropped_reported = in->events_dropped;
        return close_thread(a, th, in->ticks);
    }
    case PT_MSG_SYMBOL:
        if (pt_walk_proc_symbol(a->walk, 0, m->u.symbol.id))
            return -ENOMEM;
        return pt_cct_sym_set(a->cct, 0, &m->u.symbol) == PT_AGG_NONE ? -ENOMEM : 0;
    case PT_MSG_EVENT_CHUNK:
        if (m->u.event_chunk.first_event == 0) {
            /* the thread's stream from its first event: nothing was open before it
             * (walk.h, stack_known) */
            int rc;
            pt_walk_thread_t *wt = pt_walk_thread(a->walk, m->u.event_chunk.thread, &rc);
            if (!wt)
                return rc ? rc : -ENOMEM;
            if (wt->events == 0)
                wt->stack_known = 1;
        }
        return pt_agg_feed_events(a, m->u.event_chunk.thread, m->u.event_chunk.events, m->u.event_chunk.count);
    case PT_MSG_LOST_COUNT: {
        thread_t *th = thread_get(a, m->u.lost_count.thread);
        if (!th)
            return -ENOMEM;
        if (m->u.lost_count.dropped_total > th->dropped_reported)
            th->dropped_reported = m->u.lost_count.dropped_total;
        return 0;
    }
    case PT_MSG_PRODUCER_STATUS:
        a->producer_state = m->u.producer_status.state;
        a->end_signal = m->u.producer_status.end_signal;
        a->end_signal_pid = m->u.producer_status.end_signal_pid;
        if (m->u.producer_status.events_dropped > a->producer_dropped)
            a->producer_dropped = m->u.producer_status.events_dropped;
        a->hook_errors = m->u.producer_status.hook_errors;
        /* counters of the job that only grow: the largest seen */
        if (m->u.producer_status.symbols_dropped > a->symbols_dropped)
            a->symbols_dropped = m->u.producer_status.symbols_dropped;
        if (m->u.producer_status.threads_untraced > a->threads_untraced)
            a->threads_untraced = m->u.producer_status.threads_untraced;
        if (m->u.producer_status.events_untraced > a->events_untraced)
            a->events_untraced = m->u.producer_status.events_untraced;
        if (m->u.producer_status.tracing_displaced > a->tracing_displaced)
            a->tracing_displaced = m->u.producer_status.tracing_displaced;
        if (m->u.producer_status.unrecorded_events > a->unrecorded_events)
            a->unrecorded_events = m->u.producer_status.unrecorded_events;
        return 0;
    default:
        return 0; /* unknown message types from a newer minor: ignore */
    }
}

int pt_agg_feed_bytes(pt_agg_t *a, const uint8_t *buf, size_t len)
{
    pt_fb_msg_t m;
    if (pt_fb_parse(buf, len, &m, NULL, 0))
        return -EBADMSG;
    return pt_agg_feed_msg(a, &m);
}

/* ---- info ----------------------------------------------------------------- */

size_t pt_agg_thread_count(const pt_agg_t *a) { return a->thread_count; }

int pt_agg_thread_at(const pt_agg_t *a, size_t index, pt_agg_thread_info_t *out)
{
    if (index >= a->thread_count)
        return -EINVAL;
    const thread_t *th = &a->threads[index];
    out->thread = th->number;
    out->os_tid = th->os_tid;
    out->name = th->name ? th->name : "";
    out->ended = th->ended;
    out->events = th->events;
    out->depth = th->cur.depth;
    return 0;
}

const pt_fb_process_info_t *pt_agg_process_info(const pt_agg_t *a) { return &a->pinfo; }

static uint64_t ticks_ns(const pt_agg_t *a, uint64_t ticks)
{
    return u64_of_double((double)ticks * 1e9 / (double)a->tps + 0.5); /* a 2^40 s call is not 0 ns */
}

uint64_t pt_agg_ticks_to_ns(const pt_agg_t *a, uint64_t ticks)
{
    return ticks <= a->min_tick ? 0 : ticks_ns(a, ticks - a->min_tick);
}

int pt_agg_stack(const pt_agg_t *a, size_t index, pt_agg_frame_t *out, uint32_t cap, uint32_t *depth, int *known)
{
    *depth = 0;
    if (known)
        *known = 0;
    if (index >= a->thread_count)
        return -EINVAL;
    const thread_t *th = &a->threads[index];
    if (!th->wt)
        return 0; /* no event yet: nothing is known of its stack */
    uint32_t d = pt_walk_frames(a->walk, th->wt, NULL, 0);
    uint32_t n = d < cap ? d : cap;
    pt_walk_frame_t *wf = n ? malloc(n * sizeof *wf) : NULL;
    if (n && !wf)
        return -ENOMEM;
    if (n)
        pt_walk_frames(a->walk, th->wt, wf, n);
    for (uint32_t i = 0; i < n; i++)
        out[i] = (pt_agg_frame_t){.symbol = wf[i].id, .kind = wf[i].kind, .reported = wf[i].reported,
                                  .start_ns = pt_agg_ticks_to_ns(a, wf[i].start_ticks)};
    free(wf);
    *depth = d;
    if (known)
        *known = th->wt->stack_known;
    return 0;
}

void pt_agg_counters(const pt_agg_t *a, pt_agg_counters_t *out)
{
    memset(out, 0, sizeof *out);
    out->events_seen = a->events_seen;
    uint64_t reported = 0, missed = 0;
    uint32_t active = 0;
    for (uint32_t i = 0; i < a->thread_count; i++) {
        reported += a->threads[i].dropped_reported;
        active += !a->threads[i].ended;
        if (a->threads[i].wt)
            missed += a->threads[i].wt->lost_missed;
    }
    /* a reader's own gaps in a hub are not the job's drops (agg.h) */
    out->missed_in_hub = missed;
    out->dropped_lost_records = a->lost_records > missed ? a->lost_records - missed : 0;
    reported = reported > missed ? reported - missed : 0;
    out->dropped_lost_counts = reported;
    out->dropped_producer = a->producer_dropped;
    out->dropped = out->dropped_lost_records;
    if (reported > out->dropped)
        out->dropped = reported;
    if (a->producer_dropped > out->dropped)
        out->dropped = a->producer_dropped;
    out->dropped_cause = !out->dropped ? ""
                         : a->pinfo.drop_policy == PT_POLICY_WAIT
                             ? "the job's rings stayed full past its wait bound (policy wait)"
                             : "the job's rings were full (policy drop)";
    out->missed_cause = missed ? "this view read too slowly: the hub cut it (its queue or budget was full)" : "";
    out->unmatched_closes = a->unmatched;
    pt_walk_counters_t wc;
    pt_walk_counters(a->walk, &wc);
    out->unannounced = wc.unannounced;
    out->producer_state = a->producer_state;
    out->end_signal = a->end_signal;
    out->end_signal_pid = a->end_signal_pid;
    out->threads_seen = a->thread_count;
    out->threads_active = active;
    out->hook_errors = a->hook_errors;
    out->symbols_dropped = a->symbols_dropped;
    out->threads_untraced = a->threads_untraced;
    out->events_untraced = a->events_untraced;
    out->tracing_displaced = a->tracing_displaced;
    out->unrecorded_events = a->unrecorded_events;
    out->symbols = a->cct->sym_count;
    out->nodes = a->cct->node_count;
    out->tree_budget = a->cct->cfg.budget;
    out->folded_calls = a->cct->folded_calls;
    out->other_nodes = a->cct->other_count;
    out->span_ns = a->have_ticks ? ticks_ns(a, a->latest - a->min_tick) : 0;
    out->window_max_seconds = (double)a->slice_ns * a->slice_count / 1e9;
    out->window_slots = a->slice_cap;
    if (a->max_slice != NO_SLICE) {
        uint64_t k = 1000000000ull / a->slice_ns;
        if (k < 1)
            k = 1;
        uint64_t first = a->max_slice + 1 >= k ? a->max_slice + 1 - k : 0;
        uint64_t ev = 0;
        for (uint64_t s = first; s <= a->max_slice; s++) {
            const slice_t *sl = &a->slices[s % a->slice_cap];
            if (sl->no == s)
                ev += sl->events;
        }
        uint64_t start = a->origin + first * a->slice_ticks;
        if (start < a->min_tick)
            start = a->min_tick;
        if (a->latest > start)
            out->events_per_second = (double)ev * (double)a->tps / (double)(a->latest - start);
    }
}

/* ---- steps ------------------------------------------------------------------ */

/* The index of thread `number` with steps, or with 0 the stepping thread (the
 * one whose last step ended last); PT_AGG_NONE when none. */
static uint32_t step_thread(const pt_agg_t *a, uint64_t number, uint32_t *stepping)
{
    uint32_t best = PT_AGG_NONE, n = 0;
    for (uint32_t i = 0; i < a->thread_count; i++) {
        const steps_t *s = a->threads[i].steps;
        if (!s)
            continue;
        n++;
        if (number ? a->threads[i].number == number
                   : best == PT_AGG_NONE || s->last_end > a->threads[best].steps->last_end)
            best = i;
    }
    if (stepping)
        *stepping = n;
    return best;
}

static int cmp_u64p(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* nearest rank: the smallest value with at least p of the sorted values at or below it */
static uint64_t rank_of(const uint64_t *sorted, size_t n, double p)
{
    size_t k = (size_t)(p * (double)n + 0.999999);
    return sorted[k ? k - 1 : 0];
}

int pt_agg_steps(pt_agg_t *a, uint64_t thread, pt_agg_steps_t *out)
{
    memset(out, 0, sizeof *out);
    uint32_t stepping = 0;
    uint32_t i = step_thread(a, thread, &stepping);
    out->threads = stepping;
    if (i == PT_AGG_NONE) {
        if (!thread)
            return 0;
        uint32_t t = pt_u64map_get(&a->thread_map, thread);
        return t == PT_AGG_NONE ? -ENOENT : 0;
    }
    const steps_t *s = a->threads[i].steps;
    out->thread = a->threads[i].number;
    out->label = pt_cct_sym_at(a->cct, pt_cct_sym(a->cct, 0, s->label))->id;
    out->count = s->count;
    out->kept = s->count < s->ring_cap ? s->count : s->ring_cap;
    out->folded = s->count - out->kept;
    out->last_ns = ticks_ns(a, s->last_dur);
    out->last_start_ns = pt_agg_ticks_to_ns(a, s->last_start);
    out->last_end_ns = pt_agg_ticks_to_ns(a, s->last_end);
    out->last_lost = s->last.lost;
    out->min_ns = ticks_ns(a, s->min);
    out->max_ns = ticks_ns(a, s->max);
    out->slowest = s->max_index;
    out->total_ns = ticks_ns(a, s->sum);
    double mean = (double)s->sum / (double)s->count;
    double var = s->sumsq / (double)s->count - mean * mean;
    out->mean_ns = ticks_ns(a, u64_of_double(mean + 0.5));
    out->stdev_ns = ticks_ns(a, u64_of_double(var > 0 ? sqrt(var) + 0.5 : 0));
    const thread_t *th = &a->threads[i];
    if (!th->ended && a->latest > s->start)
        out->running_ns = ticks_ns(a, a->latest - s->start);
    out->tree_missed = s->set_lost;
    if (out->kept) {
        uint64_t *d = malloc((size_t)out->kept * sizeof *d);
        if (!d)
            return -ENOMEM;
        for (uint64_t k = 0; k < out->kept; k++)
            d[k] = s->ring[k].dur;
        qsort(d, (size_t)out->kept, sizeof *d, cmp_u64p);
        out->median_ns = ticks_ns(a, rank_of(d, (size_t)out->kept, 0.5));
        out->p10_ns = ticks_ns(a, rank_of(d, (size_t)out->kept, 0.1));
        out->p90_ns = ticks_ns(a, rank_of(d, (size_t)out->kept, 0.9));
        free(d);
    }
    return 0;
}

int pt_agg_step_list(pt_agg_t *a, uint64_t thread, pt_agg_step_t *out, size_t cap, size_t *n)
{
    *n = 0;
    uint32_t i = step_thread(a, thread, NULL);
    if (i == PT_AGG_NONE)
        return thread && pt_u64map_get(&a->thread_map, thread) == PT_AGG_NONE ? -ENOENT : 0;
    const steps_t *s = a->threads[i].steps;
    uint64_t kept = s->count < s->ring_cap ? s->count : s->ring_cap;
    *n = (size_t)kept;
    for (uint64_t k = 0; k < kept && k < cap; k++) {
        uint64_t number = s->count - kept + 1 + k;
        const uint64_t slot = (number - 1) % s->ring_cap;
        out[k] = (pt_agg_step_t){.number = number, .end_ns = pt_agg_ticks_to_ns(a, s->ring[slot].end),
                                .dur_ns = ticks_ns(a, s->ring[slot].dur)};
    }
    return 0;
}

/* ---- queries -------------------------------------------------------------- */

/* Per-node calls and self ticks of the view, open frames included. */
typedef struct view {
    uint64_t *calls;
    uint64_t *self;
    uint64_t *incl;
    uint64_t *sub_calls;
    uint64_t *cpu;
    uint64_t *incl_cpu;
    uint64_t lost;          /* events lost in the view's gaps */
    uint64_t span_ticks;
    uint64_t wstart;        /* ticks before it are not in the view */
    uint64_t first_slice;   /* a window's first slice */
    int window;
    int step;               /* the last complete step alone (query last_step) */
} view_t;

static int thread_selected(const pt_agg_t *a, const pt_agg_query_t *q, uint32_t t);

static void view_free(view_t *v)
{
    free(v->calls);
    free(v->self);
    free(v->incl);
    free(v->sub_calls);
    free(v->cpu);
    free(v->incl_cpu);
}

static int view_build(pt_agg_t *a, const pt_agg_query_t *q, view_t *v)
{
    const pt_cct_t *t = a->cct;
    size_t n = t->node_count ? t->node_count : 1;
    v->calls = calloc(n, sizeof *v->calls);
    v->self = calloc(n, sizeof *v->self);
    v->incl = calloc(n, sizeof *v->incl);
    v->sub_calls = calloc(n, sizeof *v->sub_calls);
    v->cpu = calloc(n, sizeof *v->cpu);
    v->incl_cpu = calloc(n, sizeof *v->incl_cpu);
    if (!v->calls || !v->self || !v->incl || !v->sub_calls || !v->cpu || !v->incl_cpu) {
        view_free(v);
        return -ENOMEM;
    }
    uint64_t wstart = a->min_tick;
    int window = q && q->window_seconds > 0 && a->max_slice != NO_SLICE && !q->last_step;
    if (q && q->last_step) { /* the frozen entries of the thread's last step (STEPS) */
        uint32_t ti = step_thread(a, q->thread, NULL);
        const steps_t *s = ti != PT_AGG_NONE ? a->threads[ti].steps : NULL;
        if (s && s->count) {
            for (uint32_t i = 0; i < s->last.n; i++) {
                const step_entry_t *e = &s->last.e[i];
                if (e->node < t->node_count) {
                    v->calls[e->node] += e->calls;
                    v->self[e->node] += e->self;
                }
            }
            v->lost = s->last.lost;
            v->span_ticks = s->last_dur;
        }
        pt_cct_sum_up(t, v->self, v->calls, v->incl, v->sub_calls);
        v->step = 1;
        return 0;
    }
    if (window) {
        double want = q->window_seconds * 1e9 / (double)a->slice_ns;
        uint64_t ns = want < 1 ? 1 : u64_of_double(want + 0.999999);
        if (ns > a->slice_count)
            ns = a->slice_count;
        uint64_t first = a->max_slice + 1 >= ns ? a->max_slice + 1 - ns : 0;
        for (uint64_t s = first; s <= a->max_slice; s++) {
            const slice_t *sl = &a->slices[s % a->slice_cap];
            if (sl->no != s)
                continue;
            v->lost += sl->lost;
            for (uint32_t i = 0; i < sl->count; i++) {
                v->calls[sl->entries[i].node] += sl->entries[i].calls;
                v->self[sl->entries[i].node] += sc_self(sl->entries[i].sc);
                v->cpu[sl->entries[i].node] += sc_cpu(sl->entries[i].sc, sl->q);
            }
        }
        uint64_t ws = sat_add(a->origin, sat_mul(first, a->slice_ticks));
        if (ws > wstart)
            wstart = ws;
        v->first_slice = first;
    } else {
        for (uint32_t i = 0; i < t->node_count; i++) {
            v->calls[i] = t->nodes[i].calls;
            v->self[i] = t->nodes[i].self;
            v->cpu[i] = PT_CCT_CPU(t->nodes[i].cpu);
        }
        for (uint32_t i = 0; i < a->thread_count; i++)
            if (thread_selected(a, q, i))
                v->lost += a->threads[i].cur.gap_lost;
    }
    /* frames still open count up to the latest tick seen */
    for (uint32_t i = 0; i < a->thread_count; i++) {
        const pt_cct_thread_t *cur = &a->threads[i].cur;
        if (a->threads[i].ended || !cur->have_last || a->latest <= cur->last)
            continue;
        uint64_t from = cur->last > wstart ? cur->last : wstart;
        if (a->latest > from)
            v->self[pt_cct_top(cur)] += a->latest - from;
    }
    pt_cct_sum_up(t, v->self, v->calls, v->incl, v->sub_calls);
    pt_cct_sum_up_cpu(t, v->cpu, v->incl_cpu);
    v->span_ticks = a->have_ticks && a->latest > wstart ? a->latest - wstart : 0;
    v->wstart = wstart;
    v->window = window;
    return 0;
}

static int thread_selected(const pt_agg_t *a, const pt_agg_query_t *q, uint32_t t)
{
    return !q || !q->thread || a->threads[t].number == q->thread;
}

int pt_agg_name_matches(const char *hay, const char *needle)
{
    if (!needle || !*needle)
        return 1;
    size_t nl = strlen(needle);
    for (const char *h = hay; *h; h++) {
        size_t i = 0;
        while (i < nl && h[i]) {
            char x = h[i], y = needle[i];
            if (x >= 'A' && x <= 'Z')
                x = (char)(x - 'A' + 'a');
            if (y >= 'A' && y <= 'Z')
                y = (char)(y - 'A' + 'a');
            if (x != y)
                break;
            i++;
        }
        if (i == nl)
            return 1;
    }
    return 0;
}

/* qsort has no context argument in C11: per thread, for two aggregations' tables are
 * made at once (the Python binding builds them without the GIL). */
static _Thread_local int g_sort_key, g_sort_desc;

static int cmp_u64(uint64_t x, uint64_t y) { return x < y ? -1 : x > y; }

static int row_cmp(const void *pa, const void *pb)
{
    const pt_agg_row_t *x = pa, *y = pb;
    int c = 0;
    switch (g_sort_key) {
    case PT_AGG_SORT_SELF: c = cmp_u64(x->self_ns, y->self_ns); break;
    case PT_AGG_SORT_TOTAL: c = cmp_u64(x->total_ns, y->total_ns); break;
    case PT_AGG_SORT_CALLS: c = cmp_u64(x->calls, y->calls); break;
    case PT_AGG_SORT_PRIM_CALLS: c = cmp_u64(x->prim_calls, y->prim_calls); break;
    case PT_AGG_SORT_NAME: c = strcmp(x->name, y->name); break;
    case PT_AGG_SORT_FILE:
        c = strcmp(x->file, y->file);
        if (!c)
            c = cmp_u64(x->line, y->line);
        break;
    default: break;
    }
    if (g_sort_desc)
        c = -c;
    if (!c)
        c = strcmp(x->name, y->name);
    if (!c)
        c = cmp_u64(x->symbol, y->symbol);
    return c;
}

/* The folded records' part of the table rows (per dense symbol). */
static int table_add_folded(const pt_agg_t *a, const pt_agg_query_t *q, const view_t *v, pt_cct_sums_t *sums)
{
    const pt_cct_fold_t *folds = a->cct->folds;
    size_t nf = a->cct->fold_count;
    uint64_t *fc = calloc(nf, sizeof *fc), *fp = calloc(nf, sizeof *fp);
    uint64_t *fs = calloc(nf, sizeof *fs), *ft = calloc(nf, sizeof *ft);
    uint64_t *fcpu = calloc(nf, sizeof *fcpu), *ftc = calloc(nf, sizeof *ftc);
    int rc = -ENOMEM;
    if (!fc || !fp || !fs || !ft || !fcpu || !ftc)
        goto out;
    if (v->window) {
        for (uint64_t s = v->first_slice; s <= a->max_slice; s++) {
            const slice_t *sl = &a->slices[s % a->slice_cap];
            if (sl->no != s)
                continue;
            for (uint32_t i = 0; i < sl->fcount; i++) {
                const fentry_t *e = &sl->fentries[i];
                fc[e->frec] += e->calls;
                fp[e->frec] += e->prim;
                fs[e->frec] += sc_self(e->sc);
                ft[e->frec] += e->total;
                fcpu[e->frec] += sc_cpu(e->sc, sl->q);
                ftc[e->frec] += (uint64_t)e->total_cpu * sl->q;
            }
        }
    } else {
        for (uint32_t f = 0; f < nf; f++) {
            fc[f] = folds[f].calls;
            fp[f] = folds[f].prim;
            fs[f] = folds[f].self;
            ft[f] = folds[f].total;
            fcpu[f] = PT_CCT_CPU(folds[f].cpu);
            ftc[f] = folds[f].total_cpu;
        }
    }
    /* open activations: ticks not flushed yet, and (as view_build) up to the latest tick */
    for (uint32_t t = 0; t < a->thread_count; t++) {
        const thread_t *th = &a->threads[t];
        const pt_cct_thread_t *cur = &th->cur;
        if (!thread_selected(a, q, t))
            continue;
        uint64_t tail = 0;
        if (!th->ended && cur->have_last && a->latest > cur->last) {
            uint64_t from = cur->last > v->wstart ? cur->last : v->wstart;
            tail = a->latest > from ? a->latest - from : 0;
        }
        if (tail && pt_cct_top_fold(cur) != PT_AGG_NONE)
            fs[pt_cct_top_fold(cur)] += tail;
        int pending_in = !v->window || (th->acc_slice != NO_SLICE && th->acc_slice >= v->first_slice);
        for (uint32_t i = 0; i < cur->fo_count; i++) {
            ft[cur->fo[i].fold] += tail + (pending_in ? cur->acc - cur->fo[i].mark : 0);
            ftc[cur->fo[i].fold] += pending_in ? cur->acc_cpu - cur->fo[i].mark_cpu : 0;
        }
    }
    for (uint32_t f = 0; f < nf; f++) {
        const pt_cct_fold_t *r = &folds[f];
        if (!thread_selected(a, q, r->owner) || !(fc[f] || fs[f] || ft[f]))
            continue;
        pt_cct_sums_t *row = &sums[r->sym];
        row->nodes++;
        row->calls += fc[f];
        row->prim += fp[f];
        row->self += fs[f];
        row->total += ft[f];
        row->self_cpu += fcpu[f];
        row->total_cpu += ftc[f];
    }
    rc = 0;
out:
    free(fc);
    free(fp);
    free(fs);
    free(ft);
    free(fcpu);
    free(ftc);
    return rc;
}

/* A last-step query of thread 0 is of the stepping thread: q with its number
 * (its copy in *local); no step yet: a thread number no thread has (an empty view). */
static const pt_agg_query_t *step_query(const pt_agg_t *a, const pt_agg_query_t *q, pt_agg_query_t *local)
{
    if (!q || !q->last_step || q->thread)
        return q;
    *local = *q;
    uint32_t i = step_thread(a, 0, NULL);
    local->thread = i != PT_AGG_NONE ? a->threads[i].number : UINT64_MAX;
    return local;
}

int pt_agg_table(pt_agg_t *a, const pt_agg_query_t *q, int sort, int descending, const char *filter,
                 pt_agg_table_t *out)
{
    memset(out, 0, sizeof *out);
    pt_agg_query_t local;
    q = step_query(a, q, &local);
    view_t v = {0};
    int rc = view_build(a, q, &v);
    if (rc)
        return rc;
    const pt_cct_t *t = a->cct;
    pt_cct_sums_t *sums = calloc(t->sym_count ? t->sym_count : 1, sizeof *sums);
    uint32_t *roots = malloc((a->thread_count ? a->thread_count : 1) * sizeof *roots);
    rc = -ENOMEM;
    if (!sums || !roots)
        goto out;
    size_t nroots = 0;
    for (uint32_t i = 0; i < a->thread_count; i++)
        if (thread_selected(a, q, i))
            roots[nroots++] = a->threads[i].cur.root;
    /* a node with no time and no calls in its subtree is left out whole */
    const pt_cct_view_t cv = {.calls = v.calls, .self = v.self, .incl = v.incl, .sub_calls = v.sub_calls,
                              .cpu = v.cpu, .incl_cpu = v.incl_cpu};
    if (pt_cct_walk(t, roots, nroots, &cv, sums, NULL, NULL))
        goto out;
    if (t->fold_count && !v.step && table_add_folded(a, q, &v, sums))
        goto out;
    size_t count = 0;
    for (uint32_t s = 0; s < t->sym_count; s++)
        count += sums[s].nodes && pt_agg_name_matches(t->syms[s].name, filter);
    out->rows = calloc(count ? count : 1, sizeof *out->rows);
    if (!out->rows)
        goto out;
    /* time nobody saw: the <not observed> rows of the selected threads; the
     * percentages are of the time some thread was observed (the span less the
     * least unobserved time of a thread in the view) */
    uint64_t unobs = 0, unobs_cpu = 0, least = UINT64_MAX;
    for (uint32_t i = 0; i < a->thread_count; i++) {
        if (!thread_selected(a, q, i))
            continue;
        uint32_t u = a->threads[i].cur.unobserved;
        uint64_t us = u != PT_AGG_NONE ? v.self[u] : 0;
        if (u != PT_AGG_NONE) {
            unobs += us;
            unobs_cpu += v.cpu[u];
        }
        if (v.incl[a->threads[i].cur.root] || us)
            least = us < least ? us : least;
    }
    if (least == UINT64_MAX)
        least = 0;
    uint64_t observed = v.span_ticks > least ? v.span_ticks - least : 0;
    out->unobserved_ns = ticks_ns(a, unobs);
    out->unobserved_cpu_ns = ticks_ns(a, unobs_cpu);
    out->unobserved_lost = v.lost;
    double span_ns = (double)ticks_ns(a, observed);
    for (uint32_t s = 0; s < t->sym_count; s++) {
        const pt_cct_symbol_t *sym = &t->syms[s];
        if (!sums[s].nodes || !pt_agg_name_matches(sym->name, filter))
            continue;
        pt_agg_row_t *r = &out->rows[out->count++];
        r->symbol = sym->id;
        r->kind = sym->kind;
        r->name = sym->name;
        r->file = sym->file;
        r->line = sym->line;
        r->calls = sums[s].calls;
        r->prim_calls = sums[s].prim;
        r->self_ns = ticks_ns(a, sums[s].self);
        r->total_ns = ticks_ns(a, sums[s].total);
        r->self_cpu_ns = ticks_ns(a, sums[s].self_cpu);
        r->total_cpu_ns = ticks_ns(a, sums[s].total_cpu);
        r->self_pct = span_ns > 0 ? 100.0 * (double)r->self_ns / span_ns : 0;
        r->total_pct = span_ns > 0 ? 100.0 * (double)r->total_ns / span_ns : 0;
    }
    out->span_ns = u64_of_double(span_ns);
    g_sort_key = sort;
    g_sort_desc = sort == PT_AGG_SORT_NAME || sort == PT_AGG_SORT_FILE ? !descending ? 0 : 1 : descending;
    qsort(out->rows, out->count, sizeof *out->rows, row_cmp);
    rc = 0;
out:
    free(sums);
    free(roots);
    view_free(&v);
    return rc;
}

void pt_agg_table_free(pt_agg_table_t *t)
{
    free(t->rows);
    memset(t, 0, sizeof *t);
}

/* ---- tree ------------------------------------------------------------------- */

/* tnode_cmp's context (qsort has none): per thread, for two aggregations' trees are
 * made at once (the Python binding builds them without the GIL). */
static _Thread_local const pt_agg_t *g_tree_agg;
static _Thread_local const pt_agg_tnode_t *g_tree_nodes;

static int tnode_cmp(const void *pa, const void *pb)
{
    uint32_t x = *(const uint32_t *)pa, y = *(const uint32_t *)pb;
    const pt_agg_tnode_t *nx = &g_tree_nodes[x], *ny = &g_tree_nodes[y];
    if (nx->other || ny->other) /* [other] last (a node has one at most) */
        return (int)nx->other - (int)ny->other;
    uint32_t sx = pt_u64map_get(&g_tree_agg->cct->sym_map, nx->symbol);
    uint32_t sy = pt_u64map_get(&g_tree_agg->cct->sym_map, ny->symbol);
    int c = strcmp(g_tree_agg->cct->syms[sx].name, g_tree_agg->cct->syms[sy].name);
    return c ? c : cmp_u64(nx->symbol, ny->symbol);
}

/* The tree's threads: the selected ones, less the idle ones when asked (a
 * thread's calls in the view are its root's sub_calls). */
static int tree_thread_shown(const pt_agg_t *a, const pt_agg_query_t *q, const view_t *v, uint32_t t)
{
    if (!thread_selected(a, q, t))
        return 0;
    return !q || q->thread || !q->hide_idle || v->sub_calls[a->threads[t].cur.root] > 0;
}

/* A tree made in ticks (self_ns and self_cpu_ns hold ticks; nodes in index
 * order, parents first, node 0 the root): inclusive times summed up, every
 * time in ns, children linked in the tree's order (by name, then symbol). */
static int tree_finish(pt_agg_t *a, pt_agg_tnode_t *nodes, uint32_t count)
{
    int rc = -ENOMEM;
    uint32_t *kids = NULL;
    uint64_t *self_t = NULL;
    self_t = malloc(count * sizeof *self_t);
    kids = malloc(count * sizeof *kids);
    if (!self_t || !kids)
        goto out;
    for (uint32_t i = 0; i < count; i++)
        self_t[i] = nodes[i].self_ns;
    /* inclusive in ticks, then convert */
    for (uint32_t i = count; i-- > 0;) {
        nodes[i].incl_ns += self_t[i];
        nodes[i].incl_cpu_ns += nodes[i].self_cpu_ns;
        if (nodes[i].parent != PT_AGG_NONE) {
            nodes[nodes[i].parent].incl_ns += nodes[i].incl_ns;
            nodes[nodes[i].parent].incl_cpu_ns += nodes[i].incl_cpu_ns;
        }
    }
    for (uint32_t i = 0; i < count; i++) {
        nodes[i].self_ns = ticks_ns(a, self_t[i]);
        nodes[i].incl_ns = ticks_ns(a, nodes[i].incl_ns);
        nodes[i].self_cpu_ns = ticks_ns(a, nodes[i].self_cpu_ns);
        nodes[i].incl_cpu_ns = ticks_ns(a, nodes[i].incl_cpu_ns);
    }
    /* children lists sorted by name: bucket children by parent via counting */
    {
        uint32_t *start = calloc((size_t)count + 1, sizeof *start);
        if (!start)
            goto out;
        for (uint32_t i = 1; i < count; i++)
            start[nodes[i].parent + 1]++;
        for (uint32_t i = 0; i < count; i++)
            start[i + 1] += start[i];
        uint32_t *fill = malloc((size_t)count * sizeof *fill);
        if (!fill) {
            free(start);
            goto out;
        }
        memcpy(fill, start, (size_t)count * sizeof *fill);
        for (uint32_t i = 1; i < count; i++)
            kids[fill[nodes[i].parent]++] = i;
        free(fill);
        g_tree_agg = a;
        g_tree_nodes = nodes;
        for (uint32_t p = 0; p < count; p++) {
            uint32_t b = start[p], e = start[p + 1];
            if (e - b > 1)
                qsort(kids + b, e - b, sizeof *kids, tnode_cmp);
            nodes[p].first_child = e > b ? kids[b] : PT_AGG_NONE;
            for (uint32_t k = b; k < e; k++)
                nodes[kids[k]].next_sibling = k + 1 < e ? kids[k + 1] : PT_AGG_NONE;
        }
        free(start);
    }
    rc = 0;
out:
    free(kids);
    free(self_t);
    return rc;
}

int pt_agg_tree(pt_agg_t *a, const pt_agg_query_t *q, pt_agg_tree_t *out)
{
    memset(out, 0, sizeof *out);
    pt_agg_query_t local;
    q = step_query(a, q, &local);
    view_t v = {0};
    int rc = view_build(a, q, &v);
    if (rc)
        return rc;
    uint32_t *map_to = NULL;
    pt_u64map_t out_map = {0}, out_other = {0};
    pt_agg_tnode_t *nodes = NULL;
    uint32_t count = 0, cap = 0;
    rc = -ENOMEM;
    const pt_cct_t *t = a->cct;
    map_to = malloc((t->node_count ? t->node_count : 1) * sizeof *map_to);
    if (!map_to || pt_u64map_init(&out_map, 1024) || pt_u64map_init(&out_other, 16) ||
        pt_grow((void **)&nodes, &cap, sizeof *nodes, 1))
        goto out;
    nodes[0] = (pt_agg_tnode_t){.symbol = PT_AGG_NONE, .parent = PT_AGG_NONE, .first_child = PT_AGG_NONE,
                                .next_sibling = PT_AGG_NONE};
    count = 1;
    /* nodes come in index order, parents before children */
    for (uint32_t i = 0; i < t->node_count; i++) {
        const pt_cct_node_t *n = &t->nodes[i];
        map_to[i] = PT_AGG_NONE;
        if (n->parent == PT_AGG_NONE) {
            if (tree_thread_shown(a, q, &v, n->owner))
                map_to[i] = 0;
            continue;
        }
        uint32_t op = map_to[n->parent];
        if (op == PT_AGG_NONE || (!v.incl[i] && !v.sub_calls[i]) || n->sym == PT_CCT_UNOBSERVED)
            continue; /* <not observed>: nobody's time, in the table's count, not in the tree */
        int other = n->sym == PT_CCT_OTHER;
        uint32_t id = other ? PT_AGG_OTHER : t->syms[n->sym].id;
        pt_u64map_t *m = other ? &out_other : &out_map;
        uint64_t key = other ? op : ((uint64_t)op << 32) | id;
        uint32_t o = pt_u64map_get(m, key);
        if (o == PT_AGG_NONE) {
            if (pt_grow((void **)&nodes, &cap, sizeof *nodes, count + 1))
                goto out;
            o = count++;
            nodes[o] = (pt_agg_tnode_t){.symbol = id, .parent = op, .first_child = PT_AGG_NONE,
                                        .next_sibling = PT_AGG_NONE, .depth = nodes[op].depth + 1,
                                        .other = (uint32_t)other};
            if (pt_u64map_put(m, key, o))
                goto out;
        }
        nodes[o].calls += v.calls[i];
        nodes[o].self_ns += v.self[i]; /* ticks for now */
        nodes[o].self_cpu_ns += v.cpu[i];
        map_to[i] = o;
    }
    /* root self: time with nothing on the stack */
    for (uint32_t t = 0; t < a->thread_count; t++)
        if (tree_thread_shown(a, q, &v, t)) {
            nodes[0].self_ns += v.self[a->threads[t].cur.root];
            nodes[0].self_cpu_ns += v.cpu[a->threads[t].cur.root];
        }
    if (tree_finish(a, nodes, count))
        goto out;
    out->nodes = nodes;
    out->count = count;
    out->span_ns = ticks_ns(a, v.span_ticks);
    nodes = NULL;
    rc = 0;
out:
    free(nodes);
    free(map_to);
    pt_u64map_free(&out_map);
    pt_u64map_free(&out_other);
    view_free(&v);
    return rc;
}

void pt_agg_tree_free(pt_agg_tree_t *t)
{
    free(t->nodes);
    memset(t, 0, sizeof *t);
}

/* ---- timeline (web viewer) -------------------------------------------------
 * Kept apart from the queries above: it reads the slice ring and the thread
 * stacks, nothing else. Per cell, (thread index, symbol) -> self ticks is
 * summed in a small open-addressing table cleared through its list of used
 * slots, so a cell costs time linear in its slice entries. */

uint64_t pt_agg_ticks_per_second(const pt_agg_t *a) { return a->tps; }

size_t pt_agg_symbol_count(const pt_agg_t *a) { return a->cct->sym_count; }

pt_agg_symbol_t pt_agg_symbol_at(const pt_agg_t *a, size_t index)
{
    if (index >= a->cct->sym_count)
        return (pt_agg_symbol_t){.id = PT_AGG_NONE, .name = "", .file = ""};
    return symbol_out(a, (uint32_t)index);
}

typedef struct tl_sum {
    uint64_t *keys;     /* thread index << 32 | dense symbol; UINT64_MAX = empty */
    uint64_t *self;
    uint32_t *used;     /* slots in use, for clearing */
    uint32_t used_count;
    uint32_t cap;       /* power of two */
} tl_sum_t;

static void tl_sum_free(tl_sum_t *m)
{
    free(m->keys);
    free(m->self);
    free(m->used);
    memset(m, 0, sizeof *m);
}

static int tl_sum_init(tl_sum_t *m, uint32_t cap)
{
    m->keys = malloc((size_t)cap * sizeof *m->keys);
    m->self = calloc(cap, sizeof *m->self);
    m->used = malloc((size_t)cap * sizeof *m->used);
    m->cap = cap;
    m->used_count = 0;
    if (!m->keys || !m->self || !m->used) {
        tl_sum_free(m);
        return -ENOMEM;
    }
    memset(m->keys, 0xff, (size_t)cap * sizeof *m->keys);
    return 0;
}

static int tl_sum_add(tl_sum_t *m, uint64_t key, uint64_t self)
{
    if ((m->used_count + 1) * 2 > m->cap) { /* keep the load <= 1/2 */
        if (m->cap > UINT32_MAX / 4)
            return -ENOMEM;
        tl_sum_t big;
        if (tl_sum_init(&big, m->cap * 2))
            return -ENOMEM;
        for (uint32_t i = 0; i < m->used_count; i++)
            tl_sum_add(&big, m->keys[m->used[i]], m->self[m->used[i]]);
        tl_sum_free(m);
        *m = big;
    }
    uint32_t mask = m->cap - 1;
    for (uint32_t i = (uint32_t)pt_u64map_mix(key) & mask;; i = (i + 1) & mask) {
        if (m->keys[i] == key) {
            m->self[i] = sat_add(m->self[i], self);
            return 0;
        }
        if (m->keys[i] == UINT64_MAX) {
            m->keys[i] = key;
            m->self[i] = self;
            m->used[m->used_count++] = i;
            return 0;
        }
    }
}

static void tl_sum_clear(tl_sum_t *m)
{
    for (uint32_t i = 0; i < m->used_count; i++) {
        m->keys[m->used[i]] = UINT64_MAX;
        m->self[m->used[i]] = 0;
    }
    m->used_count = 0;
}

static int tl_push(pt_agg_timeline_t *out, size_t *cap, const pt_agg_tl_cell_t *cell)
{
    if (out->count == *cap) {
        size_t ncap = *cap ? *cap * 2 : 64;
        pt_agg_tl_cell_t *p = realloc(out->cells, ncap * sizeof *p);
        if (!p)
            return -ENOMEM;
        out->cells = p;
        *cap = ncap;
    }
    out->cells[out->count++] = *cell;
    return 0;
}

int pt_agg_timeline(pt_agg_t *a, const pt_agg_query_t *q, uint64_t since_slice, uint32_t group,
                    pt_agg_timeline_t *out)
{
    memset(out, 0, sizeof *out);
    if (!group)
        group = 1;
    out->slice_ns = a->slice_ns;
    out->group = group;
    out->origin_ns = pt_agg_ticks_to_ns(a, a->origin);
    if (a->max_slice == NO_SLICE)
        return 0;
    uint64_t want = a->slice_count;
    if (q && q->window_seconds > 0) {
        double w = q->window_seconds * 1e9 / (double)a->slice_ns;
        want = w < 1 ? 1 : u64_of_double(w + 0.999999);
        if (want > a->slice_count)
            want = a->slice_count;
    }
    uint64_t first = a->max_slice + 1 >= want ? a->max_slice + 1 - want : 0;
    out->first_slice = first;
    out->last_slice = a->max_slice;
    if (since_slice > first)
        first = since_slice;
    first -= first % group;
    if (first > a->max_slice)
        return 0;

    int rc = -ENOMEM;
    size_t cap = 0;
    uint32_t nthreads = a->thread_count;
    tl_sum_t sum = {0};
    uint64_t *busy = calloc((size_t)nthreads + 1, sizeof *busy);
    uint64_t *calls = calloc((size_t)nthreads + 1, sizeof *calls);
    uint64_t *best = calloc((size_t)nthreads + 1, sizeof *best);
    uint32_t *best_sym = malloc(((size_t)nthreads + 1) * sizeof *best_sym);
    if (!busy || !calls || !best || !best_sym || tl_sum_init(&sum, 1024))
        goto out;
    /* the ring holds no slice below held_lo (slice_get): a cell's slices are read from
     * there, not from its group's first (a group of 2^32 slices is not 2^32 steps) */
    const uint64_t held_lo = a->max_slice >= a->slice_cap - 1 ? a->max_slice - (a->slice_cap - 1) : 0;
    for (uint64_t g = first;; g += group) {
        /* slice numbers may reach 2^64 - 3 (hostile ticks, a tick per slice): no sum wraps */
        uint64_t g_end = a->max_slice - g > group - 1 ? g + group - 1 : a->max_slice;
        const uint64_t s_lo = g > held_lo ? g : held_lo;
        for (uint64_t s = s_lo; s <= g_end; s++) {
            const slice_t *sl = &a->slices[s % a->slice_cap];
            if (sl->no != s)
                continue;
            for (uint32_t i = 0; i < sl->count; i++) {
                const slice_entry_t *e = &sl->entries[i];
                const pt_cct_node_t *n = &a->cct->nodes[e->node];
                if (!thread_selected(a, q, n->owner))
                    continue;
                calls[n->owner] += e->calls;
                const uint64_t eself = sc_self(e->sc);
                if (n->sym == PT_AGG_NONE || n->sym == PT_CCT_UNOBSERVED || !eself)
                    continue;
                busy[n->owner] = sat_add(busy[n->owner], eself);
                if (n->sym == PT_CCT_OTHER) /* its symbols come from the folded entries below */
                    continue;
                if (tl_sum_add(&sum, (uint64_t)n->owner << 32 | n->sym, eself))
                    goto out;
            }
        }
        for (uint64_t s = s_lo; s <= g_end; s++) {
            const slice_t *sl = &a->slices[s % a->slice_cap];
            if (sl->no != s)
                continue;
            for (uint32_t i = 0; i < sl->fcount; i++) {
                const fentry_t *e = &sl->fentries[i];
                const pt_cct_fold_t *r = &a->cct->folds[e->frec];
                if (!sc_self(e->sc) || !thread_selected(a, q, r->owner))
                    continue;
                if (tl_sum_add(&sum, (uint64_t)r->owner << 32 | r->sym, sc_self(e->sc)))
                    goto out;
            }
        }
        /* a frame still open runs up to the latest tick (as view_build counts it) */
        uint64_t c_start = sat_add(a->origin, sat_mul(g, a->slice_ticks));
        uint64_t c_end = sat_add(a->origin, sat_mul(g_end + 1, a->slice_ticks));
        for (uint32_t t = 0; t < nthreads; t++) {
            const thread_t *th = &a->threads[t];
            const pt_cct_thread_t *cur = &th->cur;
            if (!thread_selected(a, q, t) || th->ended || !cur->have_last || a->latest <= cur->last || !cur->depth)
                continue;
            uint64_t from = cur->last > c_start ? cur->last : c_start;
            uint64_t to = a->latest < c_end ? a->latest : c_end;
            if (to > from) {
                busy[t] = sat_add(busy[t], to - from);
                uint32_t top_sym = a->cct->nodes[pt_cct_top(cur)].sym;
                if (top_sym == PT_CCT_OTHER)
                    top_sym = a->cct->folds[pt_cct_top_fold(cur)].sym;
                if (tl_sum_add(&sum, (uint64_t)t << 32 | top_sym, to - from))
                    goto out;
            }
        }
        for (uint32_t t = 0; t < nthreads; t++) {
            best[t] = 0;
            best_sym[t] = PT_AGG_NONE;
        }
        for (uint32_t i = 0; i < sum.used_count; i++) {
            uint32_t slot = sum.used[i];
            uint32_t t = (uint32_t)(sum.keys[slot] >> 32), sym = (uint32_t)sum.keys[slot];
            uint64_t v = sum.self[slot];
            /* ties go to the lower symbol id, so the answer does not depend on order */
            if (v > best[t] || (v == best[t] && best_sym[t] != PT_AGG_NONE && a->cct->syms[sym].id < a->cct->syms[best_sym[t]].id)) {
                best[t] = v;
                best_sym[t] = sym;
            }
        }
        tl_sum_clear(&sum);
        for (uint32_t t = 0; t < nthreads; t++) {
            if (busy[t] || calls[t]) {
                pt_agg_tl_cell_t cell = {.slice = g, .thread = a->threads[t].number, .symbol = PT_AGG_NONE,
                                         .busy_ns = ticks_ns(a, busy[t]), .calls = calls[t]};
                if (best_sym[t] != PT_AGG_NONE) {
                    cell.symbol = a->cct->syms[best_sym[t]].id;
                    cell.top_ns = ticks_ns(a, best[t]);
                }
                if (tl_push(out, &cap, &cell))
                    goto out;
            }
            busy[t] = calls[t] = 0;
        }
        if (g_end == a->max_slice)
            break;
    }
    rc = 0;
out:
    if (rc)
        pt_agg_timeline_free(out);
    tl_sum_free(&sum);
    free(busy);
    free(calls);
    free(best);
    free(best_sym);
    return rc;
}

void pt_agg_timeline_free(pt_agg_timeline_t *t)
{
    free(t->cells);
    t->cells = NULL;
    t->count = 0;
}

/* One rule for how every view names a process. */
size_t pt_process_label(const char *role, const char *command_line, char *out, size_t cap)
{
    if (cap == 0)
        return 0;
    const char *cl = command_line ? command_line : "";
    /* argv[0] without its directory: "python", not /home/u/.venv/bin/python */
    const char *sp = strchr(cl, ' ');
    size_t first = sp ? (size_t)(sp - cl) : strlen(cl);
    const char *base = cl;
    for (size_t i = 0; i < first; i++)
        if (cl[i] == '/')
            base = cl + i + 1;
    size_t base_len = (size_t)(cl + first - base);
    const char *rest = cl + first;
    /* what multiprocessing runs in a child it starts by exec (spawn, forkserver, its
     * resource tracker): "python -c from multiprocessing.spawn import spawn_main; ..."
     * reads "python -m multiprocessing.spawn" */
    char runs[96] = "";
    const char *from = strstr(rest, " -c from multiprocessing.");
    if (from) {
        const char *mod = from + strlen(" -c from ");
        size_t n = strcspn(mod, " ;");
        if (n < sizeof runs - 4) {
            snprintf(runs, sizeof runs, " -m %.*s", (int)n, mod);
            rest = runs;
        }
    }
    int w;
    if (role && role[0])
        w = snprintf(out, cap, "%s: %.*s%s", role, (int)base_len, base, rest);
    else
        w = snprintf(out, cap, "%.*s%s", (int)base_len, base, rest);
    return w < 0 ? 0 : (size_t)w < cap ? (size_t)w : cap - 1;
}

/* ---- tasks (tasks.h) ---------------------------------------------------------- */

/* A task's functions by total time, then own time, then symbol: every view's order. */
static int agg_task_fn_order(const void *x, const void *y)
{
    const pt_agg_task_fn_t *a = x, *b = y;
    if (a->incl_ns != b->incl_ns)
        return a->incl_ns < b->incl_ns ? 1 : -1;
    if (a->excl_ns != b->excl_ns)
        return a->excl_ns < b->excl_ns ? 1 : -1;
    return a->symbol < b->symbol ? -1 : a->symbol > b->symbol;
}

int pt_agg_tasks(pt_agg_t *a, pt_agg_tasks_t *out)
{
    memset(out, 0, sizeof *out);
    pt_tasks_counters_t c;
    pt_tasks_counters(a->tasks, &c);
    pt_walk_counters_t wc;
    pt_walk_counters(a->walk, &wc);
    out->seen = c.tasks;
    out->folded = c.folded_tasks;
    out->folded_steps = c.folded_steps;
    out->folded_run_ns = ticks_ns(a, c.folded_run_ticks);
    out->folded_wait_ns = ticks_ns(a, c.folded_wait_ticks);
    out->malformed = wc.task_malformed + c.not_task_symbols;
    out->tree_nodes = c.tree_nodes;
    out->tree_folded = c.tree_folded;
    size_t n = pt_tasks_count(a->tasks), fns = 0, aws = 0;
    uint64_t now = 0;
    for (size_t i = 0; i < pt_walk_thread_count(a->walk); i++) {
        const pt_walk_thread_t *wt = pt_walk_thread_at(a->walk, i);
        if (wt->have_ticks && wt->last_ticks > now)
            now = wt->last_ticks;
    }
    pt_tasks_task_t k;
    for (size_t i = 0; i < n; i++)
        if (!pt_tasks_at(a->tasks, i, now, &k)) {
            fns += k.fn_count;
            aws += k.await_count;
        }
    out->tasks = n ? calloc(n, sizeof *out->tasks) : NULL;
    out->fns = fns ? calloc(fns, sizeof *out->fns) : NULL;
    out->awaits = aws ? calloc(aws, sizeof *out->awaits) : NULL;
    if ((n && !out->tasks) || (fns && !out->fns) || (aws && !out->awaits)) {
        pt_agg_tasks_free(out);
        return -ENOMEM;
    }
    size_t fat = 0, aat = 0;
    for (size_t i = 0; i < n; i++) {
        if (pt_tasks_at(a->tasks, i, now, &k))
            continue;
        pt_agg_task_t *o = &out->tasks[out->count++];
        pt_agg_symbol_t s = pt_agg_symbol(a, k.symbol);
        *o = (pt_agg_task_t){.symbol = k.symbol, .name = s.name, .coro = s.file, .serial = s.line, .state = k.state,
                             .steps = k.steps, .run_ns = ticks_ns(a, k.run_ticks)};
        for (unsigned w = 0; w <= PT_TASKS_WAIT_OTHER; w++) {
            o->wait_by_ns[w] = ticks_ns(a, k.wait_ticks[w]);
            o->wait_ns += o->wait_by_ns[w];
        }
        o->awaits = out->awaits ? out->awaits + aat : NULL; /* (no awaits at all: no array) */
        o->await_count = k.await_count;
        for (uint32_t j = 0; j < k.await_count; j++) {
            pt_agg_symbol_t as = pt_agg_symbol(a, k.awaits[j].symbol);
            out->awaits[aat++] = (pt_agg_task_await_t){.symbol = k.awaits[j].symbol, .kind = k.awaits[j].kind,
                                                      .name = as.name};
        }
        o->fns = out->fns ? out->fns + fat : NULL;
        o->fn_count = k.fn_count;
        for (uint32_t j = 0; j < k.fn_count; j++) {
            pt_agg_symbol_t fs = pt_agg_symbol(a, k.fns[j].symbol);
            out->fns[fat++] = (pt_agg_task_fn_t){.symbol = k.fns[j].symbol, .name = fs.name, .file = fs.file,
                                                 .line = fs.line, .calls = k.fns[j].calls,
                                                 .incl_ns = ticks_ns(a, k.fns[j].incl_ticks),
                                                 .excl_ns = ticks_ns(a, k.fns[j].excl_ticks)};
        }
        if (o->fn_count > 1)
            qsort(out->fns + (fat - o->fn_count), o->fn_count, sizeof *out->fns, agg_task_fn_order);
    }
    return 0;
}

uint32_t pt_agg_task_of_serial(pt_agg_t *a, uint64_t serial)
{
    pt_tasks_task_t k;
    for (size_t i = 0, n = pt_tasks_count(a->tasks); i < n; i++)
        if (!pt_tasks_at(a->tasks, i, 0, &k) && pt_agg_symbol(a, k.symbol).line == serial)
            return k.symbol;
    return PT_AGG_NONE;
}

int pt_agg_task_tree(pt_agg_t *a, uint32_t task, pt_agg_tree_t *out)
{
    memset(out, 0, sizeof *out);
    size_t n = pt_tasks_count(a->tasks);
    pt_tasks_task_t k;
    uint64_t count = 1, span = 0;
    for (size_t i = 0; i < n; i++)
        if (!pt_tasks_at(a->tasks, i, 0, &k) && (task == PT_AGG_NONE || k.symbol == task))
            count += 1 + (uint64_t)k.node_count;
    if (count > UINT32_MAX - 1u)
        return -ENOMEM;
    pt_agg_tnode_t *nodes = malloc(count * sizeof *nodes);
    if (!nodes)
        return -ENOMEM;
    nodes[0] = (pt_agg_tnode_t){.symbol = PT_AGG_NONE, .parent = PT_AGG_NONE, .first_child = PT_AGG_NONE,
                                .next_sibling = PT_AGG_NONE};
    uint32_t at = 1;
    for (size_t i = 0; i < n; i++) {
        if (pt_tasks_at(a->tasks, i, 0, &k) || (task != PT_AGG_NONE && k.symbol != task))
            continue;
        uint32_t tn = at++; /* the task's own node: its name, no calls, no time of its own */
        nodes[tn] = (pt_agg_tnode_t){.symbol = k.symbol, .parent = 0, .first_child = PT_AGG_NONE,
                                     .next_sibling = PT_AGG_NONE, .depth = 1};
        span += k.run_ticks;
        for (uint32_t j = 0; j < k.node_count; j++) { /* parents come first: indexes map one to one */
            const pt_tasks_node_t *m = &k.nodes[j];
            uint32_t parent = m->parent == PT_TASKS_NO_NODE || m->parent >= j ? tn : tn + 1 + m->parent;
            int other = m->fn == PT_TASKS_OTHER_FN || m->fn >= k.fn_count;
            nodes[at++] = (pt_agg_tnode_t){.symbol = other ? PT_AGG_OTHER : k.fns[m->fn].symbol, .parent = parent,
                                           .first_child = PT_AGG_NONE, .next_sibling = PT_AGG_NONE,
                                           .depth = nodes[parent].depth + 1, .other = (uint32_t)other,
                                           .calls = m->calls, .self_ns = m->self_ticks};
        }
    }
    if (tree_finish(a, nodes, at)) {
        free(nodes);
        return -ENOMEM;
    }
    out->nodes = nodes;
    out->count = at;
    out->span_ns = ticks_ns(a, span);
    return 0;
}

void pt_agg_tasks_free(pt_agg_tasks_t *t)
{
    free(t->tasks);
    free(t->fns);
    free(t->awaits);
    memset(t, 0, sizeof *t);
}
