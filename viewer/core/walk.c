/*
 * pt_walk implementation. The rules are in walk.h; this file says how.
 *
 *   - A thread's stack is an array of entries {id, span, kind, start tick}
 *     (pt_walk_frames hands them out). Per thread and id, a
 *     count of open frames (and separately of open spans) lives in one hash
 *     map keyed (thread index, span bit, id), so "is there an open frame of
 *     this id?" costs O(1) and a search only runs when it will pop what it
 *     passes: time stays linear in the events whatever the stream holds.
 *   - truncate() closes entries down to a depth. With `lift`, spans among them
 *     re-enter on top afterwards (rule 1 of walk.h); the scratch array that
 *     holds them is per walk and grows like the stacks.
 *   - Recovery (a run of Frame records, or a Lost record waiting for them)
 *     keeps a position in the old stack while the reported frames match it.
 */
#include "walk.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shm/base/grow.h"
#include "u64map_internal.h"

#define MAX_STACK_DEPTH (1u << 20)

typedef struct entry {
    uint32_t id;
    uint8_t span;     /* 1: a user span (the open counts key on it) */
    uint8_t kind;     /* enum pt_walk_frame_kind */
    uint8_t reported; /* opened by a Frame record: start is when it was reported */
    uint8_t reserved;
    uint64_t start;   /* tick of its call (kept when a span re-enters as a continuation) */
} entry_t;

typedef struct wthread {
    pt_walk_thread_t pub;
    uint32_t chain;       /* next thread index with the same (process, number) hash, or EMPTY */
    entry_t *stack;
    uint32_t cap;
    int recovering;       /* inside a Frame run, or after a Lost record */
    int prefix_intact;    /* the reported frames so far matched the old stack */
    int have_close_ticks;
    uint32_t recover_pos; /* stack position the next reported frame is matched at */
    uint64_t close_ticks; /* old frames that differ are closed at this tick */
    uint32_t symset;      /* its process's index in symsets, or EMPTY (not looked up, or none yet) */
} wthread_t;

/* The ids one process announced: a bit per id for the dense ids (the
 * producer numbers them 1, 2, ...), the others in the walk's `sym_sparse`
 * map, so a hostile id (0xFFFFFFFF) costs an entry, not a bitmap. */
typedef struct symset {
    uint32_t process;
    uint32_t count;  /* ids announced */
    uint64_t *bits;
    uint32_t words;
} symset_t;

struct pt_walk {
    pt_walk_ops_t ops;
    void *ctx;
    wthread_t **threads;  /* pointers: pt_walk_thread_t handed out stays put */
    uint32_t thread_count, thread_cap;
    pt_u64map_t thread_map; /* hash of (process, number) -> first thread index of its chain */
    uint32_t last_thread;
    pt_u64map_t open;     /* (thread index << 33 | span << 32 | id) -> open entries */
    entry_t *scratch;
    uint32_t scratch_cap;
    pt_walk_counters_t c;
    int check_symbols;      /* pt_walk_check_symbols was called */
    symset_t *symsets;
    uint32_t symset_count, symset_cap;
    pt_u64map_t symset_map; /* process -> symsets index */
    pt_u64map_t sym_sparse; /* (process << 32 | id) -> 1, ids past a process's bitmap */
};

int pt_walk_create(const pt_walk_ops_t *ops, void *ctx, pt_walk_t **out)
{
    pt_walk_t *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    w->ops = *ops;
    w->ctx = ctx;
    if (pt_u64map_init(&w->thread_map, 16) || pt_u64map_init(&w->open, 256)) {
        pt_walk_destroy(w);
        return -ENOMEM;
    }
    *out = w;
    return 0;
}

void pt_walk_destroy(pt_walk_t *w)
{
    if (!w)
        return;
    for (uint32_t i = 0; i < w->thread_count; i++) {
        free(w->threads[i]->stack);
        free(w->threads[i]);
    }
    free(w->threads);
    pt_u64map_free(&w->thread_map);
    pt_u64map_free(&w->open);
    free(w->scratch);
    for (uint32_t i = 0; i < w->symset_count; i++)
        free(w->symsets[i].bits);
    free(w->symsets);
    pt_u64map_free(&w->symset_map);
    pt_u64map_free(&w->sym_sparse);
    free(w);
}

/* ---- symbols never announced (walk.h) --------------------------------------- */

void pt_walk_check_symbols(pt_walk_t *w) { w->check_symbols = 1; }

#define SYM_DENSE_SLACK 4096u /* ids below count * 2 + this are kept in the bitmap */

int pt_walk_proc_symbol(pt_walk_t *w, uint32_t process, uint32_t id)
{
    if (!w->check_symbols)
        return 0;
    if (!w->symset_map.cap && (pt_u64map_init(&w->symset_map, 16) || pt_u64map_init(&w->sym_sparse, 16)))
        return -ENOMEM;
    uint32_t si = pt_u64map_get(&w->symset_map, process);
    if (si == PT_U64MAP_EMPTY) {
        if (pt_grow((void **)&w->symsets, &w->symset_cap, sizeof *w->symsets, w->symset_count + 1) ||
            pt_u64map_put(&w->symset_map, process, w->symset_count))
            return -ENOMEM;
        si = w->symset_count++;
        w->symsets[si] = (symset_t){.process = process};
    }
    symset_t *ss = &w->symsets[si];
    if ((uint64_t)id < (uint64_t)ss->count * 2 + SYM_DENSE_SLACK) {
        uint32_t word = id / 64;
        if (word >= ss->words) {
            size_t words = ss->words; /* < 2^26: id / 64 of a uint32_t id, doubled */
            if (pt_grow_zeroed((void **)&ss->bits, &words, sizeof *ss->bits, (size_t)word + 1, 64) < 0)
                return -ENOMEM;
            ss->words = (uint32_t)words;
        }
        if (!(ss->bits[word] >> (id % 64) & 1)) {
            ss->bits[word] |= 1ull << (id % 64);
            ss->count++;
        }
        return 0;
    }
    const uint64_t key = (uint64_t)process << 32 | id;
    if (pt_u64map_get(&w->sym_sparse, key) == PT_U64MAP_EMPTY) {
        if (pt_u64map_put(&w->sym_sparse, key, 1))
            return -ENOMEM;
        ss->count++;
    }
    return 0;
}

/* The event names id: count it if its process never announced it. */
static void check_symbol(pt_walk_t *w, wthread_t *t, uint32_t id)
{
    if (!w->check_symbols || id == 0)
        return;
    if (t->symset == PT_U64MAP_EMPTY && w->symset_map.cap)
        t->symset = pt_u64map_get(&w->symset_map, t->pub.process);
    if (t->symset != PT_U64MAP_EMPTY) {
        const symset_t *ss = &w->symsets[t->symset];
        if (id / 64 < ss->words && (ss->bits[id / 64] >> (id % 64) & 1))
            return;
        if (pt_u64map_get(&w->sym_sparse, (uint64_t)t->pub.process << 32 | id) != PT_U64MAP_EMPTY)
            return;
    }
    t->pub.unannounced++;
    w->c.unannounced++;
}

/* Threads are keyed by (process, number), both untrusted: the map holds a hash
 * of the pair and each thread the next index with the same hash, so a
 * collision costs a step, never a wrong thread. */
static inline uint64_t thread_key(uint32_t process, uint64_t number)
{
    return process ? number ^ pt_u64map_mix((uint64_t)process | 1ull << 63) : number;
}

pt_walk_thread_t *pt_walk_proc_thread(pt_walk_t *w, uint32_t process, uint64_t number, int *rc)
{
    *rc = 0;
    if (w->last_thread < w->thread_count && w->threads[w->last_thread]->pub.number == number &&
        w->threads[w->last_thread]->pub.process == process)
        return &w->threads[w->last_thread]->pub;
    const uint64_t key = thread_key(process, number);
    uint32_t head = pt_u64map_get(&w->thread_map, key), idx = head;
    while (idx != PT_U64MAP_EMPTY && (w->threads[idx]->pub.number != number || w->threads[idx]->pub.process != process))
        idx = w->threads[idx]->chain;
    if (idx == PT_U64MAP_EMPTY) {
        if (w->thread_count >= (UINT32_MAX >> 2) ||
            pt_grow((void **)&w->threads, &w->thread_cap, sizeof *w->threads, w->thread_count + 1)) {
            *rc = -ENOMEM;
            return NULL;
        }
        wthread_t *t = calloc(1, sizeof *t);
        uint32_t *slot = t ? pt_u64map_slot(&w->thread_map, key, w->thread_count) : NULL;
        if (!slot) {
            free(t);
            *rc = -ENOMEM;
            return NULL;
        }
        idx = w->thread_count++;
        t->chain = head; /* PT_U64MAP_EMPTY, or the chain so far */
        *slot = idx;
        w->threads[idx] = t;
        t->pub.number = number;
        t->pub.process = process;
        t->symset = PT_U64MAP_EMPTY;
        t->pub.index = idx;
        w->c.threads = w->thread_count;
        if (w->ops.thread_new && (*rc = w->ops.thread_new(w->ctx, &t->pub)) != 0)
            return NULL;
    }
    w->last_thread = idx;
    return &w->threads[idx]->pub;
}

pt_walk_thread_t *pt_walk_thread(pt_walk_t *w, uint64_t number, int *rc)
{
    return pt_walk_proc_thread(w, 0, number, rc);
}

size_t pt_walk_thread_count(const pt_walk_t *w) { return w->thread_count; }

pt_walk_thread_t *pt_walk_thread_at(pt_walk_t *w, size_t index)
{
    return index < w->thread_count ? &w->threads[index]->pub : NULL;
}

static inline uint64_t open_key(const wthread_t *t, uint32_t span, uint32_t id)
{
    return (uint64_t)t->pub.index << 33 | (uint64_t)span << 32 | id;
}

static inline int do_enter(pt_walk_t *w, wthread_t *t, entry_t e, uint64_t ticks, unsigned flags)
{
    const uint32_t id = e.id, span = e.span;
    if (t->pub.depth >= MAX_STACK_DEPTH)
        return -ENOMEM;
    if (t->pub.depth == t->cap && pt_grow((void **)&t->stack, &t->cap, sizeof *t->stack, t->pub.depth + 1))
        return -ENOMEM;
    uint32_t *open = pt_u64map_slot(&w->open, open_key(t, span, id), 0);
    if (!open)
        return -ENOMEM;
    (*open)++;
    t->stack[t->pub.depth++] = e;
    return w->ops.enter ? w->ops.enter(w->ctx, &t->pub, id, ticks, flags | (span ? PT_WALK_SPAN : 0)) : 0;
}

/* Pop the top entry and report its exit. */
static inline int do_exit(pt_walk_t *w, wthread_t *t, uint64_t ticks, unsigned flags)
{
    entry_t e = t->stack[--t->pub.depth];
    uint32_t *open = pt_u64map_slot(&w->open, open_key(t, e.span, e.id), 0);
    if (open && *open)
        (*open)--;
    return w->ops.exit ? w->ops.exit(w->ctx, &t->pub, e.id, ticks, flags | (e.span ? PT_WALK_SPAN : 0)) : 0;
}

/* Close entries down to `depth`. With lift, the spans among them re-enter on
 * top afterwards, in order, as continuations (rule 1). */
static int truncate_to(pt_walk_t *w, wthread_t *t, uint32_t depth, uint64_t ticks, int lift)
{
    uint32_t nspans = 0;
    if (lift) {
        for (uint32_t i = depth; i < t->pub.depth; i++)
            nspans += t->stack[i].span;
        if (nspans && pt_grow((void **)&w->scratch, &w->scratch_cap, sizeof *w->scratch, nspans))
            return -ENOMEM;
        nspans = 0;
        for (uint32_t i = depth; i < t->pub.depth; i++)
            if (t->stack[i].span)
                w->scratch[nspans++] = t->stack[i];
    }
    int rc;
    while (t->pub.depth > depth) {
        unsigned f = lift && t->stack[t->pub.depth - 1].span ? PT_WALK_CONTINUED : 0;
        if ((rc = do_exit(w, t, ticks, f)) != 0)
            return rc;
    }
    /* scratch is not touched by enter: copy out first only if a callback
     * could re-enter the walk, which the contract forbids */
    for (uint32_t i = 0; i < nspans; i++)
        if ((rc = do_enter(w, t, w->scratch[i], ticks, PT_WALK_CONTINUED)) != 0)
            return rc;
    return 0;
}

static inline uint32_t open_count(pt_walk_t *w, wthread_t *t, uint32_t span, uint32_t id)
{
    uint32_t v = pt_u64map_get(&w->open, open_key(t, span, id));
    return v == PT_U64MAP_EMPTY ? 0 : v;
}

static int close_frame(pt_walk_t *w, wthread_t *t, uint32_t id, uint64_t ticks, unsigned flags)
{
    uint32_t d = t->pub.depth;
    if (d && t->stack[d - 1].id == id && !t->stack[d - 1].span)
        return do_exit(w, t, ticks, flags);
    if (!open_count(w, t, 0, id)) {
        w->c.unmatched++;
        return 0;
    }
    for (uint32_t i = d; i-- > 0;)
        if (t->stack[i].id == id && !t->stack[i].span) {
            /* the entries above it missed their returns; it keeps the close's flag
             * (a Yield) unless spans above it must be lifted over it */
            int spans = 0;
            for (uint32_t j = i + 1; j < d; j++)
                spans |= t->stack[j].span;
            if (spans)
                return truncate_to(w, t, i, ticks, 1);
            int rc = truncate_to(w, t, i + 1, ticks, 0);
            return rc ? rc : do_exit(w, t, ticks, flags);
        }
    w->c.unmatched++; /* not reached while the counts are right */
    return 0;
}

/* Rule 2: SpanEnd closes the innermost open span of its id; what is above it
 * moves under the span's parent. */
static int close_span(pt_walk_t *w, wthread_t *t, uint32_t id, uint64_t ticks)
{
    if (!open_count(w, t, 1, id)) {
        w->c.unmatched_spans++;
        return 0;
    }
    uint32_t d = t->pub.depth, pos = d;
    for (uint32_t i = d; i-- > 0;)
        if (t->stack[i].id == id && t->stack[i].span) {
            pos = i;
            break;
        }
    if (pos == d) {
        w->c.unmatched_spans++;
        return 0;
    }
    uint32_t above = d - pos - 1;
    if (above && pt_grow((void **)&w->scratch, &w->scratch_cap, sizeof *w->scratch, above))
        return -ENOMEM;
    if (above)
        memcpy(w->scratch, t->stack + pos + 1, above * sizeof *w->scratch);
    int rc;
    while (t->pub.depth > pos + 1)
        if ((rc = do_exit(w, t, ticks, PT_WALK_CONTINUED)) != 0)
            return rc;
    if ((rc = do_exit(w, t, ticks, 0)) != 0)
        return rc;
    for (uint32_t i = 0; i < above; i++)
        if ((rc = do_enter(w, t, w->scratch[i], ticks, PT_WALK_CONTINUED)) != 0)
            return rc;
    return 0;
}

static inline uint32_t skip_spans(const wthread_t *t, uint32_t pos)
{
    while (pos < t->pub.depth && t->stack[pos].span)
        pos++;
    return pos;
}

static void begin_recovery(wthread_t *t)
{
    t->recovering = 1;
    t->prefix_intact = 1;
    t->recover_pos = 0;
    t->have_close_ticks = 0;
}

static int end_recovery(pt_walk_t *w, wthread_t *t, uint64_t ticks)
{
    t->recovering = 0;
    if (!t->prefix_intact)
        return 0;
    /* old frames beyond the reported stack are gone */
    uint32_t pos = skip_spans(t, t->recover_pos);
    return pos < t->pub.depth ? truncate_to(w, t, pos, t->have_close_ticks ? t->close_ticks : ticks, 1) : 0;
}

static int on_frame(pt_walk_t *w, wthread_t *t, const pt_event_t *ev)
{
    int rc;
    if (t->recovering && ev->aux == 0 && t->recover_pos > 0) { /* a new run */
        if ((rc = end_recovery(w, t, ev->ticks)) != 0)
            return rc;
    }
    if (!t->recovering)
        begin_recovery(t);
    if (!t->have_close_ticks) {
        t->have_close_ticks = 1;
        t->close_ticks = ev->ticks;
    }
    if (t->prefix_intact) {
        uint32_t pos = skip_spans(t, t->recover_pos);
        if (pos < t->pub.depth && t->stack[pos].id == ev->id) {
            t->recover_pos = pos + 1; /* the same call, still running */
            t->pub.stack_known = 1;
            return 0;
        }
        t->prefix_intact = 0;
        if (pos < t->pub.depth && (rc = truncate_to(w, t, pos, t->close_ticks, 1)) != 0)
            return rc;
    }
    t->recover_pos = t->pub.depth + 1;
    t->pub.stack_known = 1; /* a Frame run reports the whole stack */
    entry_t e = {.id = ev->id,
                 .kind = ev->flags & PT_EVF_C_FUNCTION ? PT_WALK_FRAME_C : PT_WALK_FRAME_PYTHON,
                 .reported = 1,
                 .start = ev->ticks};
    return do_enter(w, t, e, ev->ticks, PT_WALK_REPORTED);
}

/* The thread's step ends without its TaskSuspend (TASKS). */
static int task_end_implicit(pt_walk_t *w, wthread_t *t, uint64_t ticks)
{
    t->pub.task_awaits = 0;
    if (!t->pub.task)
        return 0;
    uint32_t id = t->pub.task;
    int rc = w->ops.task ? w->ops.task(w->ctx, &t->pub, PT_EV_TASK_SUSPEND, id, PT_TASK_PENDING, ticks,
                                       PT_EVF_SYNTHETIC)
                         : 0;
    t->pub.task = 0;
    return rc;
}

static int on_task(pt_walk_t *w, wthread_t *t, const pt_event_t *ev)
{
    int rc;
    switch (ev->kind) {
    case PT_EV_TASK_STEP:
        t->pub.task_awaits = 0;
        if (ev->id == 0) {
            w->c.task_malformed++;
            return 0;
        }
        if (t->pub.task) { /* nested: the running step ends first */
            w->c.task_malformed++;
            if ((rc = task_end_implicit(w, t, ev->ticks)) != 0)
                return rc;
        }
        t->pub.task = ev->id;
        t->pub.task_depth = t->pub.depth;
        return w->ops.task ? w->ops.task(w->ctx, &t->pub, ev->kind, ev->id, ev->aux, ev->ticks, ev->flags) : 0;
    case PT_EV_TASK_SUSPEND:
        t->pub.task_awaits = 0;
        if (!t->pub.task || t->pub.task != ev->id || ev->aux >= PT_TASK_STATE_COUNT) {
            w->c.task_malformed++;
            return 0;
        }
        rc = w->ops.task ? w->ops.task(w->ctx, &t->pub, ev->kind, ev->id, ev->aux, ev->ticks, ev->flags) : 0;
        t->pub.task = 0;
        t->pub.task_awaits = ev->aux == PT_TASK_PENDING;
        return rc;
    default: /* PT_EV_TASK_AWAIT */
        if (!t->pub.task_awaits || ev->aux >= PT_AWAIT_KIND_COUNT) {
            w->c.task_malformed++;
            return 0;
        }
        return w->ops.task ? w->ops.task(w->ctx, &t->pub, ev->kind, ev->id, ev->aux, ev->ticks, ev->flags) : 0;
    }
}

static int feed_event(pt_walk_t *w, wthread_t *t, const pt_event_t *ev)
{
    int rc;
    uint64_t now = ev->ticks;
    if (!t->pub.have_ticks || now > t->pub.last_ticks) {
        t->pub.last_ticks = now;
        t->pub.have_ticks = 1;
    }
    if (!PT_EV_ID_IS_VALUE(ev->kind) && ev->kind - 1u < PT_EV_KIND_COUNT - 1u)
        check_symbol(w, t, ev->id);
    if (ev->kind == PT_EV_CPU_TIME) {
        /* changes no stack; after a Frame run it ends the run as any event does
         * (the old frames it did not report close at the gap's tick, before the
         * consumer's clock moves to this record's), but right after a Lost
         * record (the tracer writes it before the stack) it waits for the run */
        if (t->recovering && t->recover_pos > 0 && (rc = end_recovery(w, t, now)) != 0)
            return rc;
        return w->ops.cpu ? w->ops.cpu(w->ctx, &t->pub, now, (uint64_t)ev->id | ((uint64_t)ev->aux << 32)) : 0;
    }
    if (ev->kind == PT_EV_FRAME)
        return on_frame(w, t, ev);
    if (ev->kind == PT_EV_LOST) {
        if (t->recovering && (rc = end_recovery(w, t, now)) != 0)
            return rc;
        uint64_t lost = (uint64_t)ev->id | ((uint64_t)ev->aux << 32);
        t->pub.lost_flags = ev->flags;
        if (ev->flags & PT_EVF_LOST_NO_RING) { /* untraced, not dropped */
            t->pub.lost_no_ring += lost;
            w->c.lost_no_ring += lost;
        } else {
            t->pub.lost += lost;
            if (ev->flags & PT_EVF_SYNTHETIC)
                t->pub.lost_missed += lost; /* a hub's: this reader's gap, not the job's drops */
            w->c.lost += lost;
            if (ev->flags & PT_EVF_LOST_WAIT_TIMEOUT)
                w->c.lost_wait_timeout += lost;
            else if (ev->flags & PT_EVF_LOST_NO_ROOM)
                w->c.lost_no_room += lost;
        }
        if ((rc = task_end_implicit(w, t, now)) != 0)
            return rc;
        begin_recovery(t);
        t->have_close_ticks = 1;
        t->close_ticks = now;
        t->pub.stack_known = 0; /* until the Frame records that follow */
        return w->ops.gap ? w->ops.gap(w->ctx, &t->pub, now, lost) : 0;
    }
    if (ev->kind >= PT_EV_TASK_STEP && ev->kind <= PT_EV_TASK_AWAIT) {
        /* as CpuTime: right after a Lost record (the producer writes a Synthetic
         * TaskStep before the stack) it waits for the Frame run */
        if (t->recovering && t->recover_pos > 0 && (rc = end_recovery(w, t, now)) != 0)
            return rc;
        return on_task(w, t, ev);
    }
    if (t->recovering && (rc = end_recovery(w, t, now)) != 0)
        return rc;
    if (ev->kind != PT_EV_CPU_TIME)
        t->pub.task_awaits = 0; /* TaskAwait records follow their TaskSuspend at once */
    switch (ev->kind) {
    case PT_EV_CALL:
        return do_enter(w, t, (entry_t){.id = ev->id, .kind = PT_WALK_FRAME_PYTHON, .start = now}, now, 0);
    case PT_EV_RESUME:
        return do_enter(w, t, (entry_t){.id = ev->id, .kind = PT_WALK_FRAME_PYTHON, .start = now}, now,
                        PT_WALK_RESUME);
    case PT_EV_CCALL:
        return do_enter(w, t, (entry_t){.id = ev->id, .kind = PT_WALK_FRAME_C, .start = now}, now, 0);
    case PT_EV_SPAN_BEGIN:
        return do_enter(w, t, (entry_t){.id = ev->id, .span = 1, .kind = PT_WALK_FRAME_SPAN, .start = now}, now, 0);
    case PT_EV_YIELD:
        return close_frame(w, t, ev->id, now, PT_WALK_YIELD);
    case PT_EV_RETURN:
    case PT_EV_UNWIND:
    case PT_EV_CRETURN:
    case PT_EV_CUNWIND:
        return close_frame(w, t, ev->id, now, 0);
    case PT_EV_SPAN_END:
        return close_span(w, t, ev->id, now);
    case PT_EV_MARK:
        return w->ops.instant ? w->ops.instant(w->ctx, &t->pub, ev->id, now, ev->flags) : 0;
    default:
        w->c.bad_events++;
        return 0;
    }
}

int pt_walk_events(pt_walk_t *w, uint64_t thread, const pt_event_t *events, size_t count)
{
    return pt_walk_proc_events(w, 0, thread, events, count);
}

int pt_walk_proc_events(pt_walk_t *w, uint32_t process, uint64_t thread, const pt_event_t *events, size_t count)
{
    int rc;
    pt_walk_thread_t *pub = pt_walk_proc_thread(w, process, thread, &rc);
    if (!pub)
        return rc ? rc : -ENOMEM;
    wthread_t *t = (wthread_t *)pub;
    w->c.events += count;
    for (size_t i = 0; i < count; i++) {
        t->pub.events++;
        if ((rc = feed_event(w, t, &events[i])) != 0)
            return rc;
    }
    return 0;
}

int pt_walk_thread_end(pt_walk_t *w, uint64_t thread, uint64_t ticks)
{
    return pt_walk_proc_thread_end(w, 0, thread, ticks);
}

int pt_walk_proc_thread_end(pt_walk_t *w, uint32_t process, uint64_t thread, uint64_t ticks)
{
    int rc;
    pt_walk_thread_t *pub = pt_walk_proc_thread(w, process, thread, &rc);
    if (!pub)
        return rc ? rc : -ENOMEM;
    wthread_t *t = (wthread_t *)pub;
    if (ticks && (!t->pub.have_ticks || ticks > t->pub.last_ticks)) {
        t->pub.last_ticks = ticks;
        t->pub.have_ticks = 1;
    }
    uint64_t at = ticks ? ticks : t->pub.last_ticks;
    t->recovering = 0;
    if ((rc = task_end_implicit(w, t, at)) != 0)
        return rc;
    t->pub.stack_known = 1; /* nothing is open */
    return truncate_to(w, t, 0, at, 0);
}

int pt_walk_finish(pt_walk_t *w)
{
    for (uint32_t i = 0; i < w->thread_count; i++) {
        wthread_t *t = w->threads[i];
        t->recovering = 0;
        int trc = task_end_implicit(w, t, t->pub.last_ticks);
        if (trc)
            return trc;
        if (t->pub.depth) {
            int rc = truncate_to(w, t, 0, t->pub.last_ticks, 0);
            if (rc)
                return rc;
        }
    }
    return 0;
}

uint32_t pt_walk_stack(const pt_walk_t *w, const pt_walk_thread_t *th, uint32_t *ids, uint8_t *span_flags,
                       uint32_t cap)
{
    (void)w;
    const wthread_t *t = (const wthread_t *)th;
    for (uint32_t i = 0; i < t->pub.depth && i < cap; i++) {
        if (ids)
            ids[i] = t->stack[i].id;
        if (span_flags)
            span_flags[i] = (uint8_t)t->stack[i].span;
    }
    return t->pub.depth;
}

uint32_t pt_walk_frames(const pt_walk_t *w, const pt_walk_thread_t *th, pt_walk_frame_t *out, uint32_t cap)
{
    (void)w;
    const wthread_t *t = (const wthread_t *)th;
    /* Inside a Frame run whose frames so far matched the old stack (or after a
     * Lost record, before any Frame record), the old entries past the match
     * are still on t->stack; end_recovery would close them and lift their
     * spans: show that outcome, not the entries about to go. */
    uint32_t keep = t->pub.depth;
    if (t->recovering && t->prefix_intact)
        keep = skip_spans(t, t->recover_pos);
    if (keep > t->pub.depth)
        keep = t->pub.depth;
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->pub.depth; i++) {
        const entry_t *e = &t->stack[i];
        if (i >= keep && !e->span)
            continue;
        if (n < cap && out)
            out[n] = (pt_walk_frame_t){.id = e->id, .kind = e->kind, .reported = e->reported, .start_ticks = e->start};
        n++;
    }
    return n;
}

void pt_walk_counters(const pt_walk_t *w, pt_walk_counters_t *out) { *out = w->c; }

uint32_t pt_walk_open(const pt_walk_t *w, const pt_walk_thread_t *th, uint32_t id)
{
    const wthread_t *t = (const wthread_t *)th; /* pub is its first member */
    uint32_t f = pt_u64map_get(&w->open, open_key(t, 0, id)), s = pt_u64map_get(&w->open, open_key(t, 1, id));
    return (f == PT_U64MAP_EMPTY ? 0 : f) + (s == PT_U64MAP_EMPTY ? 0 : s);
}
