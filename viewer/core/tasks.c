/*
 * pt_tasks implementation; the rules are in tasks.h.
 *
 *   - Tasks are allocated one by one (a thread's step points at its task) and
 *     listed in first-sight order; a map from Task symbol to list index finds
 *     them. Folding runs in batches: when the done tasks reach twice
 *     done_kept, the oldest fold until done_kept remain, the list is compacted
 *     and the map rebuilt, so 1M short tasks cost O(1) amortized each and a
 *     reader's memory stays bounded by the live tasks plus 2 * done_kept.
 *   - Per thread (the walk's thread index): the running step's task, the depth
 *     it began at, and the task's part of the stack (at most MAX_TASK_DEPTH
 *     entries are tracked; deeper ones are counted so pops stay matched).
 */
#include "tasks.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shm/base/grow.h"
#include "u64map_internal.h"

#define MAX_TASK_DEPTH 4096u

typedef struct task {
    pt_tasks_task_t pub;
    int waiting;
    uint8_t wait_kind;
    uint64_t wait_since;
    uint64_t step_start;
    uint32_t *chain;   /* ids its Yields suspended, outermost first */
    uint64_t *chain_self;   /* the activation each of them is (tframe.serial) */
    uint64_t *chain_parent; /* the activation it was suspended under (its parent's serial; 0 at depth 0) */
    uint32_t chain_len, chain_cap;
    pt_tasks_fn_t *fns;
    uint32_t fn_count, fn_cap;
    pt_u64map_t fn_map; /* symbol -> fns index */
    pt_tasks_await_t *awaits;
    uint32_t await_count, await_cap;
    uint32_t open_calls; /* logical calls open (the observer's stack): never below chain_len */
    pt_tasks_node_t *nodes; /* its tree (tasks.h) */
    uint32_t node_count, node_cap;
    pt_u64map_t node_map; /* (parent << 32) | fn -> nodes index; [other]: fn PT_TASKS_OTHER_FN */
} task_t;

typedef struct tframe {
    uint32_t fn;    /* index in the task's fns */
    uint32_t node;  /* its node in the task's tree */
    uint8_t outer;  /* no other activation of fn below it in the task's stack */
    uint8_t cont;   /* it continues the chain's call at its depth */
    uint64_t serial; /* its activation: a new number per logical call, kept by a Resume that continues it */
    uint64_t start; /* tick it (re)entered */
} tframe_t;

typedef struct tthread {
    task_t *task;     /* the step running, NULL: none (or ignored) */
    task_t *suspended; /* the task its last Pending TaskSuspend ended (its TaskAwait records follow) */
    task_t *cut;       /* the task whose step a Lost record just ended (the walk's Synthetic Pending
                        * TaskSuspend): a Synthetic TaskStep of it next, before any frame, is that
                        * step going on after the gap, not a new one */
    int tracking;     /* 0: a synthetic step, its frames are not the task's table */
    int yielding;     /* the last change was a Yield exit */
    int left;         /* the step's coroutine frame (depth 0) has left: what the step runs
                       * after it (asyncio's own bookkeeping: call_soon, an eager step's
                       * WeakSet.add) is not the task's and keeps its suspended chain */
    uint32_t base;    /* walk depth at TaskStep */
    uint32_t untracked; /* entries past MAX_TASK_DEPTH, or entered while not tracking */
    uint64_t last;
    int have_last;
    tframe_t *stack;
    uint32_t depth, cap;
} tthread_t;

struct pt_tasks {
    uint32_t done_kept;
    task_t **tasks;
    uint32_t count, cap;
    uint32_t done;   /* done tasks among them */
    pt_u64map_t map; /* symbol -> tasks index */
    tthread_t *threads;
    uint32_t thread_cap;
    pt_tasks_counters_t c;
    const pt_tasks_observer_t *obs;
    void *obs_ctx;
    uint64_t serial; /* the last activation number given (tframe.serial) */
    uint32_t node_budget;
};

int pt_tasks_create(uint32_t done_kept, pt_tasks_t **out)
{
    pt_tasks_t *t = calloc(1, sizeof *t);
    if (!t || pt_u64map_init(&t->map, 64)) {
        free(t);
        return -ENOMEM;
    }
    t->done_kept = done_kept ? done_kept : PT_TASKS_DEFAULT_DONE_KEPT;
    t->node_budget = PT_TASKS_DEFAULT_NODE_BUDGET;
    *out = t;
    return 0;
}

void pt_tasks_set_node_budget(pt_tasks_t *t, uint32_t nodes)
{
    t->node_budget = nodes ? nodes : PT_TASKS_DEFAULT_NODE_BUDGET;
}

void pt_tasks_set_observer(pt_tasks_t *t, const pt_tasks_observer_t *ops, void *ctx)
{
    t->obs = ops;
    t->obs_ctx = ctx;
}

/* The task's logical calls at depth >= depth end at ticks, innermost first. */
static int calls_end(pt_tasks_t *t, const pt_walk_thread_t *th, task_t *k, uint32_t depth, uint64_t ticks)
{
    while (k->open_calls > depth) {
        k->open_calls--;
        if (t->obs && t->obs->call_end) {
            int rc = t->obs->call_end(t->obs_ctx, th, k->pub.symbol, k->open_calls, ticks);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* The chain's three arrays share chain_cap (pt_grow gives each the same capacity from the same start). */
static int chain_grow(task_t *k, uint32_t need)
{
    uint32_t c1 = k->chain_cap, c2 = c1, c3 = c1;
    if (pt_grow((void **)&k->chain, &c1, sizeof *k->chain, need) ||
        pt_grow((void **)&k->chain_self, &c2, sizeof *k->chain_self, need) ||
        pt_grow((void **)&k->chain_parent, &c3, sizeof *k->chain_parent, need))
        return -ENOMEM;
    k->chain_cap = c1 < c2 ? (c1 < c3 ? c1 : c3) : (c2 < c3 ? c2 : c3);
    return 0;
}

static void task_free(task_t *k)
{
    free(k->chain);
    free(k->chain_self);
    free(k->chain_parent);
    free(k->fns);
    pt_u64map_free(&k->fn_map);
    free(k->awaits);
    free(k->nodes);
    pt_u64map_free(&k->node_map);
    free(k);
}

void pt_tasks_destroy(pt_tasks_t *t)
{
    if (!t)
        return;
    for (uint32_t i = 0; i < t->count; i++)
        task_free(t->tasks[i]);
    free(t->tasks);
    pt_u64map_free(&t->map);
    for (uint32_t i = 0; i < t->thread_cap; i++)
        free(t->threads[i].stack);
    free(t->threads);
    free(t);
}

static inline uint64_t since(uint64_t now, uint64_t then) { return now > then ? now - then : 0; }

static inline int is_done(const task_t *k)
{
    return k->pub.state != PT_TASK_PENDING && k->pub.state != PT_TASKS_STATE_RUNNING;
}

static tthread_t *thread_of(pt_tasks_t *t, const pt_walk_thread_t *th)
{
    if (th->index >= t->thread_cap) {
        size_t cap = t->thread_cap;
        if (pt_grow_zeroed((void **)&t->threads, &cap, sizeof *t->threads, (size_t)th->index + 1, 8) < 0)
            return NULL;
        t->thread_cap = (uint32_t)cap;
    }
    return &t->threads[th->index];
}

/* Fold the oldest done tasks down to done_kept (tasks.h, Memory). */
static int fold_done(pt_tasks_t *t)
{
    uint32_t to_fold = t->done - t->done_kept, kept = 0;
    for (uint32_t i = 0; i < t->count; i++) {
        task_t *k = t->tasks[i];
        if (to_fold && is_done(k)) {
            to_fold--;
            t->done--;
            t->c.folded_tasks++;
            t->c.folded_steps += k->pub.steps;
            t->c.folded_run_ticks += k->pub.run_ticks;
            for (unsigned w = 0; w <= PT_TASKS_WAIT_OTHER; w++)
                t->c.folded_wait_ticks += k->pub.wait_ticks[w];
            t->c.tree_nodes -= k->node_count;
            for (uint32_t j = 0; j < k->node_count; j++) /* its [other] calls go with it */
                if (k->nodes[j].fn == PT_TASKS_OTHER_FN)
                    t->c.tree_folded -= k->nodes[j].calls;
            for (uint32_t j = 0; j < t->thread_cap; j++) /* a hostile stream's other step of it */
            {
                if (t->threads[j].task == k)
                    t->threads[j].task = NULL;
                else if (t->threads[j].suspended == k)
                    t->threads[j].suspended = NULL;
                if (t->threads[j].cut == k)
                    t->threads[j].cut = NULL;
            }
            task_free(k);
            continue;
        }
        t->tasks[kept++] = k;
    }
    t->count = kept;
    pt_u64map_t m;
    if (pt_u64map_init(&m, (size_t)kept * 2 + 64)) /* rounded up to a power of two */
        return -ENOMEM;
    for (uint32_t i = 0; i < kept; i++)
        if (pt_u64map_put(&m, t->tasks[i]->pub.symbol, i)) {
            pt_u64map_free(&m);
            return -ENOMEM;
        }
    pt_u64map_free(&t->map);
    t->map = m;
    return 0;
}

static task_t *task_get(pt_tasks_t *t, uint32_t symbol, int create)
{
    uint32_t i = pt_u64map_get(&t->map, symbol);
    if (i != PT_U64MAP_EMPTY)
        return t->tasks[i];
    if (!create)
        return NULL;
    task_t *k = calloc(1, sizeof *k);
    if (!k || pt_grow((void **)&t->tasks, &t->cap, sizeof *t->tasks, t->count + 1) ||
        pt_u64map_put(&t->map, symbol, t->count)) {
        free(k);
        return NULL;
    }
    k->pub.symbol = symbol;
    k->pub.state = PT_TASK_PENDING;
    t->tasks[t->count++] = k;
    t->c.tasks++;
    return k;
}

static uint32_t fn_index(task_t *k, uint32_t symbol)
{
    if (!k->fn_map.cap && pt_u64map_init(&k->fn_map, 16))
        return PT_U64MAP_EMPTY;
    uint32_t i = pt_u64map_get(&k->fn_map, symbol);
    if (i != PT_U64MAP_EMPTY)
        return i;
    if (pt_grow((void **)&k->fns, &k->fn_cap, sizeof *k->fns, k->fn_count + 1) ||
        pt_u64map_put(&k->fn_map, symbol, k->fn_count))
        return PT_U64MAP_EMPTY;
    k->fns[k->fn_count] = (pt_tasks_fn_t){.symbol = symbol};
    return k->fn_count++;
}

/* The node of fn under parent in k's tree (parent PT_TASKS_NO_NODE: the root
 * level), made if new; past the budget, the [other] node under parent (a frame
 * under an [other] node stays in it). *real: 1 for a node of its own, 0 for an
 * [other]. PT_TASKS_NO_NODE: out of memory. */
static uint32_t node_of(pt_tasks_t *t, task_t *k, uint32_t parent, uint32_t fn, int *real)
{
    *real = 1;
    if (parent != PT_TASKS_NO_NODE && k->nodes[parent].fn == PT_TASKS_OTHER_FN) {
        *real = 0;
        return parent;
    }
    if (!k->node_map.cap && pt_u64map_init(&k->node_map, 16))
        return PT_TASKS_NO_NODE;
    uint64_t key = ((uint64_t)parent << 32) | fn;
    uint32_t i = pt_u64map_get(&k->node_map, key);
    if (i != PT_U64MAP_EMPTY)
        return i;
    if (t->c.tree_nodes >= t->node_budget) {
        *real = 0;
        key = ((uint64_t)parent << 32) | PT_TASKS_OTHER_FN;
        fn = PT_TASKS_OTHER_FN;
        if ((i = pt_u64map_get(&k->node_map, key)) != PT_U64MAP_EMPTY)
            return i; /* (one [other] per parent: made past the budget, at most one per node) */
    }
    if (pt_grow((void **)&k->nodes, &k->node_cap, sizeof *k->nodes, k->node_count + 1) ||
        pt_u64map_put(&k->node_map, key, k->node_count))
        return PT_TASKS_NO_NODE;
    k->nodes[k->node_count] = (pt_tasks_node_t){.fn = fn, .parent = parent};
    t->c.tree_nodes++;
    return k->node_count++;
}

/* Time moves to now: the ticks since the thread's last callback go to the
 * task's top frame (its function and its node). */
static void advance(tthread_t *tt, uint64_t now)
{
    if (tt->task && tt->tracking && tt->depth && tt->have_last) {
        const tframe_t *f = &tt->stack[tt->depth - 1];
        uint64_t d = since(now, tt->last);
        tt->task->fns[f->fn].excl_ticks += d;
        tt->task->nodes[f->node].self_ticks += d;
    }
    if (!tt->have_last || now > tt->last) {
        tt->last = now;
        tt->have_last = 1;
    }
}

void pt_tasks_on_tick(pt_tasks_t *t, const pt_walk_thread_t *th, uint64_t ticks)
{
    tthread_t *tt = thread_of(t, th);
    if (tt)
        advance(tt, ticks);
}

int pt_tasks_on_enter(pt_tasks_t *t, const pt_walk_thread_t *th, uint32_t id, uint64_t ticks, unsigned flags)
{
    tthread_t *tt = thread_of(t, th);
    if (!tt)
        return -ENOMEM;
    advance(tt, ticks);
    tt->yielding = 0;
    tt->cut = NULL;
    if (!tt->task || th->depth <= tt->base)
        return 0;
    task_t *k = tt->task;
    if (!tt->tracking || tt->untracked || tt->left || tt->depth >= MAX_TASK_DEPTH) {
        tt->untracked++;
        return 0;
    }
    uint32_t d = tt->depth;
    if (d == tt->cap && pt_grow((void **)&tt->stack, &tt->cap, sizeof *tt->stack, d + 1))
        return -ENOMEM;
    uint32_t fn = fn_index(k, id);
    if (fn == PT_U64MAP_EMPTY)
        return -ENOMEM;
    /* a Resume continues the suspended call at d when the frame under it is the activation
     * it was suspended under: the same one within a step (a generator its caller resumes),
     * or one that itself continued (the chain a task's next step resumes) */
    int cont = (flags & PT_WALK_RESUME) && d < k->chain_len && k->chain[d] == id &&
               (d == 0 || tt->stack[d - 1].serial == k->chain_parent[d]);
    int real;
    uint32_t node = node_of(t, k, d ? tt->stack[d - 1].node : PT_TASKS_NO_NODE, fn, &real);
    if (node == PT_TASKS_NO_NODE)
        return -ENOMEM;
    if (!cont && !(flags & PT_WALK_CONTINUED)) {
        k->fns[fn].calls++;
        k->nodes[node].calls++; /* (an [other] node counts the calls folded into it) */
        if (!real)
            t->c.tree_folded++;
    }
    if (!cont && k->chain_len > d)
        k->chain_len = d; /* the suspended chain below here is gone */
    if (!cont) { /* a new call (or a span moved here): what was open at d and past is gone */
        int rc = calls_end(t, th, k, d, ticks);
        if (rc)
            return rc;
        k->open_calls = d + 1;
        if (t->obs && t->obs->call_begin &&
            (rc = t->obs->call_begin(t->obs_ctx, th, k->pub.symbol, d, id, ticks, flags & PT_WALK_CONTINUED)) != 0)
            return rc;
    }
    int outer = 1;
    for (uint32_t i = 0; i < d; i++)
        if (tt->stack[i].fn == fn) {
            outer = 0;
            break;
        }
    tt->stack[d] = (tframe_t){.fn = fn, .node = node, .outer = (uint8_t)outer, .cont = (uint8_t)cont,
                              .serial = cont ? k->chain_self[d] : ++t->serial, .start = ticks};
    tt->depth = d + 1;
    return 0;
}

int pt_tasks_on_exit(pt_tasks_t *t, const pt_walk_thread_t *th, uint32_t id, uint64_t ticks, unsigned flags)
{
    tthread_t *tt = thread_of(t, th);
    if (!tt)
        return -ENOMEM;
    advance(tt, ticks);
    int was_yielding = tt->yielding;
    tt->yielding = 0;
    tt->cut = NULL;
    if (!tt->task)
        return 0;
    if (th->depth < tt->base) { /* a loop frame under the step closed: the task's part is gone */
        tt->base = th->depth;
        tt->depth = 0;
        tt->untracked = 0;
        return 0;
    }
    if (tt->untracked) {
        tt->untracked--;
        return 0;
    }
    if (!tt->depth)
        return 0;
    task_t *k = tt->task;
    uint32_t d = --tt->depth;
    const tframe_t *f = &tt->stack[d];
    if (d == 0 && !(flags & PT_WALK_CONTINUED))
        tt->left = 1;
    if (f->outer)
        k->fns[f->fn].incl_ticks += since(ticks, f->start);
    if (flags & PT_WALK_YIELD) {
        if (d >= k->chain_cap && chain_grow(k, d + 1))
            return -ENOMEM;
        k->chain[d] = id;
        k->chain_self[d] = f->serial;
        k->chain_parent[d] = d ? tt->stack[d - 1].serial : 0;
        if (!was_yielding || k->chain_len <= d)
            k->chain_len = d + 1; /* the innermost of the yields that end the step */
        tt->yielding = 1;
        return calls_end(t, th, k, k->chain_len, ticks); /* suspended calls past the chain are gone */
    }
    if (!(flags & PT_WALK_CONTINUED) && k->chain_len > d)
        k->chain_len = d; /* it returned: nothing at or past d is suspended */
    return calls_end(t, th, k, d, ticks); /* it returned (or a span moves: it re-enters at once) */
}

static int step_begin(pt_tasks_t *t, tthread_t *tt, const pt_walk_thread_t *th, uint32_t id, uint64_t now,
                      unsigned flags, const task_t *cut)
{
    task_t *k = task_get(t, id, 1);
    if (!k)
        return -ENOMEM;
    if (is_done(k))
        t->done--; /* stepped again after its end (damage): live again */
    int goes_on = (flags & PT_EVF_SYNTHETIC) && k == cut; /* the step a Lost record cut */
    if (k->waiting && goes_on)
        k->pub.run_ticks += since(now, k->wait_since); /* it never stopped running */
    else if (k->waiting)
        k->pub.wait_ticks[k->wait_kind] += since(now, k->wait_since);
    k->waiting = 0;
    if (!k->pub.steps)
        k->pub.first_ticks = now;
    if (!goes_on)
        k->pub.steps++;
    k->pub.state = PT_TASKS_STATE_RUNNING;
    k->step_start = now;
    k->await_count = 0;
    tt->task = k;
    tt->base = th->depth;
    tt->depth = 0;
    tt->untracked = 0;
    tt->yielding = 0;
    tt->left = 0;
    tt->tracking = !(flags & PT_EVF_SYNTHETIC);
    if (t->obs && t->obs->step) {
        int rc = t->obs->step(t->obs_ctx, th, id, now, flags);
        if (rc)
            return rc;
    }
    if (!tt->tracking) {
        k->chain_len = 0;
        return calls_end(t, th, k, 0, now);
    }
    return 0;
}

int pt_tasks_on_task(pt_tasks_t *t, const pt_walk_thread_t *th, uint8_t kind, uint32_t id, uint16_t aux,
                     uint64_t ticks, unsigned flags, int is_task_symbol)
{
    tthread_t *tt = thread_of(t, th);
    if (!tt)
        return -ENOMEM;
    advance(tt, ticks);
    tt->yielding = 0;
    task_t *suspended = tt->suspended;
    tt->suspended = NULL;
    task_t *cut = tt->cut;
    tt->cut = NULL;
    if (kind == PT_EV_TASK_STEP) {
        tt->task = NULL;
        if (!is_task_symbol) {
            t->c.not_task_symbols++;
            return 0;
        }
        return step_begin(t, tt, th, id, ticks, flags, cut);
    }
    if (kind == PT_EV_TASK_SUSPEND) {
        task_t *k = tt->task;
        if (!k || k->pub.symbol != id)
            return 0; /* its step was ignored (counted there) */
        tt->task = NULL;
        tt->depth = 0;
        k->pub.run_ticks += since(ticks, k->step_start);
        k->pub.state = (uint8_t)(aux < PT_TASK_STATE_COUNT ? aux : PT_TASK_PENDING);
        /* calls past the chain its Yields left ended with the step; a done task's all did */
        int rc = calls_end(t, th, k, k->pub.state == PT_TASK_PENDING ? k->chain_len : 0, ticks);
        if (!rc && t->obs && t->obs->suspend)
            rc = t->obs->suspend(t->obs_ctx, th, id, k->pub.state, ticks, flags);
        if (rc)
            return rc;
        if (k->pub.state == PT_TASK_PENDING) {
            k->waiting = 1;
            k->wait_since = ticks;
            k->wait_kind = PT_TASKS_WAIT_OTHER;
            tt->suspended = k;
            if (flags & PT_EVF_SYNTHETIC)
                tt->cut = k;
        } else if (++t->done >= 2 * t->done_kept) {
            return fold_done(t);
        }
        return 0;
    }
    /* TaskAwait: the walk passes it only right after a Pending suspend of this thread */
    if (aux == PT_AWAIT_TASK && !is_task_symbol) {
        t->c.not_task_symbols++;
        return 0;
    }
    tt->suspended = suspended;
    if (!suspended)
        return 0; /* its suspend was ignored */
    task_t *k = suspended;
    if (!k->await_count)
        k->wait_kind = (uint8_t)aux; /* the wait is charged to the first thing it awaits */
    if (pt_grow((void **)&k->awaits, &k->await_cap, sizeof *k->awaits, k->await_count + 1))
        return -ENOMEM;
    k->awaits[k->await_count++] = (pt_tasks_await_t){.symbol = id, .kind = (uint8_t)aux};
    if (t->obs && t->obs->await)
        return t->obs->await(t->obs_ctx, th, k->pub.symbol, (uint8_t)aux, id, ticks);
    return 0;
}

size_t pt_tasks_count(const pt_tasks_t *t) { return t->count; }

int pt_tasks_at(const pt_tasks_t *t, size_t index, uint64_t now_ticks, pt_tasks_task_t *out)
{
    if (index >= t->count)
        return -EINVAL;
    const task_t *k = t->tasks[index];
    *out = k->pub;
    if (k->waiting)
        out->wait_ticks[k->wait_kind] += since(now_ticks, k->wait_since);
    out->awaits = k->awaits;
    out->await_count = k->await_count;
    out->fns = k->fns;
    out->fn_count = k->fn_count;
    out->nodes = k->nodes;
    out->node_count = k->node_count;
    return 0;
}

void pt_tasks_counters(const pt_tasks_t *t, pt_tasks_counters_t *out) { *out = t->c; }

const char *pt_tasks_state_name(unsigned state)
{
    static const char *const names[] = {"pending", "done", "cancelled", "failed", "running"};
    return state < 5 ? names[state] : "unknown";
}

const char *pt_tasks_await_name(unsigned kind)
{
    static const char *const names[] = {"future", "task", "sleep", "io", "thread", "sync", "other"};
    return kind <= PT_TASKS_WAIT_OTHER ? names[kind] : "unknown";
}
