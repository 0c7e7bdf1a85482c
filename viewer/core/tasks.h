/*
 * pt_tasks: asyncio tasks as the stream shows them (issue 23): per task its
 * state, steps, running and waiting time, what it awaits now, and its own
 * table of LOGICAL calls. Fed from the walk's callbacks (walk.h, TASKS: the
 * walk checks the records' order; this module keeps the totals). agg.c owns
 * one; every view reads it through pt_agg_tasks. No Python.
 *
 * The rules:
 *   - A step runs from TaskStep to its TaskSuspend on one thread: its wall
 *     time is the task's run time. The frames entered during the step above
 *     the depth the step began at (the loop's run_forever -> ... -> Context.run
 *     stay below) are the task's: its own tree is rooted at its coroutine.
 *     The thread's whole-program tree is unchanged (task frames stay under
 *     the loop's frames there, as cProfile and pstats show them).
 *   - Waiting: from a Pending TaskSuspend to the task's next TaskStep, charged
 *     to the kind of its first TaskAwait record (PT_AWAIT_*), or to "other"
 *     when it named none. The TaskAwait records of the last suspend are the
 *     task's current awaits (the await graph's edges), cleared by its next step.
 *   - Logical calls: a coroutine (or generator) resumed where the task's last
 *     Yield left it is the same call: the task keeps the chain of frames its
 *     Yields suspended (outermost first; at a step's end, the whole suspended
 *     stack); a Resume at task depth k of the id the chain holds at k, under
 *     the activation it was suspended under (the same frame within a step, a
 *     frame that itself continued across steps), continues that call and counts
 *     none; any other entry counts one call, and cuts the chain at k. So a
 *     generator its caller resumes within a step is one call, unless the
 *     caller called something else at its depth in between (then each
 *     resumption counts: the task's stack stays a stack). Inclusive
 *     time of a function is the sum of its running pieces (not the time it
 *     was suspended), counted for its outermost activation in the task's
 *     stack only; exclusive time is the ticks between two callbacks of the
 *     thread that go to the task's top frame.
 *   - A Synthetic TaskStep (tracing began inside a step, or after a gap) starts
 *     a step whose frames are reported by Frame records: its time counts as
 *     running, but nothing of that step enters the task's table (where its
 *     coroutine starts among the reported frames is unknown); the chain is
 *     reset, so its next step's Resume counts one call (a logical call open
 *     across a gap counts twice). It counts as a step, except right after the
 *     walk ended the same task's step at a Lost record (a Synthetic Pending
 *     suspend, nothing in between): then it is that step going on.
 *   - The step's coroutine frame (task depth 0) enters and leaves once a step;
 *     what the step runs after it left (asyncio's bookkeeping: call_soon of a
 *     task that yielded, the WeakSet.add after an eager step) is not the
 *     task's: untracked, it neither counts calls nor cuts the chain.
 *   - Memory: tasks that are done (Done, Cancelled, Failed) are kept whole up
 *     to done_kept of them; past it the oldest done task is folded: its
 *     steps, run and wait time and its count go to pt_tasks_counters (folded_*)
 *     and its table is freed. Live tasks are all kept.
 *   - A task's tree (pt_tasks_node_t): each tracked frame of a step is a node,
 *     the child of its caller's node by function (a Resume that continues the
 *     chain is the same node: its parent is the same activation's node). The
 *     fns table's calls and own ticks go to the node too. Past the node budget
 *     (all kept tasks' nodes together) a new path goes to an [other] node under
 *     its parent, and the frames above it with it (tree_folded counts those
 *     calls of the kept tasks); a folded task's nodes go back to the budget and
 *     its [other] calls leave tree_folded with it.
 *   - Timelines (pt_tasks_set_observer): the same rules, as they happen. A
 *     task's logical calls form a stack (depth 0: its coroutine): call_begin
 *     when an entry at task depth d counts a call (or continues a span under
 *     a new parent: PT_WALK_CONTINUED), call_end (innermost first, one per
 *     call) when a call at depth d returned, when an entry at d does not
 *     continue the chain (the suspended calls at d and deeper are gone), when
 *     a step ends with calls open past the chain its Yields left (or the task
 *     is done: all of them), and when a Synthetic step resets the chain. A
 *     Resume that continues the chain reports nothing: one call spans all
 *     its resumptions. step, suspend and await report the task records this
 *     module accepted (not those it ignores and counts), in stream order.
 * Threading: one thread at a time. Errors: 0 or -ENOMEM.
 */
#ifndef PT_VIEWER_TASKS_H
#define PT_VIEWER_TASKS_H

#include <stddef.h>
#include <stdint.h>

#include "walk.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PT_TASKS_DEFAULT_DONE_KEPT 4096u
#define PT_TASKS_WAIT_OTHER PT_AWAIT_KIND_COUNT /* wait_ticks index: no TaskAwait record named it */
#define PT_TASKS_STATE_RUNNING 4u               /* pt_tasks_task_t.state while a step runs */

typedef struct pt_tasks pt_tasks_t;

typedef struct pt_tasks_counters {
    uint64_t tasks;            /* tasks seen (kept and folded) */
    uint64_t folded_tasks;     /* done tasks folded (memory budget) */
    uint64_t folded_steps;
    uint64_t folded_run_ticks;
    uint64_t folded_wait_ticks;
    uint64_t not_task_symbols; /* task records whose id is not a Task symbol: ignored */
    uint64_t tree_nodes;       /* nodes of the kept tasks' trees now */
    uint64_t tree_folded;      /* logical calls in the kept tasks' [other] nodes (the node budget) */
} pt_tasks_counters_t;

typedef struct pt_tasks_fn {
    uint32_t symbol;
    uint64_t calls;      /* logical calls */
    uint64_t incl_ticks; /* its running pieces, outermost activations only */
    uint64_t excl_ticks;
} pt_tasks_fn_t;

/* One node of a task's own call tree: a path of logical calls from its
 * coroutine (depth 0: parent PT_TASKS_NO_NODE). Nodes are in creation order, a
 * parent before its children. fn: index in the task's fns, or PT_TASKS_OTHER_FN
 * for an [other] node (calls below its parent past the node budget, no
 * children). calls: logical calls (as the fns table counts them; an [other]
 * node: the calls folded into it, its frames' and those above them); self_ticks:
 * the ticks that went to the task's top frame while it was this node (its
 * inclusive time is its subtree's self: running pieces only). */
#define PT_TASKS_NO_NODE UINT32_MAX
#define PT_TASKS_OTHER_FN UINT32_MAX
#define PT_TASKS_DEFAULT_NODE_BUDGET (1u << 19) /* nodes of all kept tasks' trees together */

typedef struct pt_tasks_node {
    uint32_t fn;
    uint32_t parent;
    uint64_t calls;
    uint64_t self_ticks;
} pt_tasks_node_t;

typedef struct pt_tasks_await {
    uint32_t symbol; /* the awaited task's Task symbol (PT_AWAIT_TASK), else a Label */
    uint8_t kind;    /* enum pt_await_kind */
} pt_tasks_await_t;

typedef struct pt_tasks_task {
    uint32_t symbol;       /* its Task symbol: name, coroutine (file), serial (line) */
    uint8_t state;         /* enum pt_task_state, or PT_TASKS_STATE_RUNNING */
    uint64_t steps;
    uint64_t run_ticks;
    uint64_t wait_ticks[PT_AWAIT_KIND_COUNT + 1]; /* by kind; [PT_TASKS_WAIT_OTHER]: none named */
    uint64_t first_ticks;  /* its first step began */
    const pt_tasks_await_t *awaits; /* current (valid until the next feed) */
    uint32_t await_count;
    const pt_tasks_fn_t *fns; /* its logical-call table, unordered (valid until the next feed) */
    uint32_t fn_count;
    const pt_tasks_node_t *nodes; /* its call tree (valid until the next feed) */
    uint32_t node_count;
} pt_tasks_task_t;

/* What happens to tasks, for a timeline (the rules above). `task` is the
 * Task symbol; ticks are raw, as fed. Any op may be NULL; a non-zero return
 * is returned by the feeding call. */
typedef struct pt_tasks_observer {
    int (*call_begin)(void *ctx, const pt_walk_thread_t *th, uint32_t task, uint32_t depth, uint32_t id,
                      uint64_t ticks, unsigned flags);
    int (*call_end)(void *ctx, const pt_walk_thread_t *th, uint32_t task, uint32_t depth, uint64_t ticks);
    /* flags: the TaskStep's (PT_EVF_SYNTHETIC: tracing began inside it, or after a gap) */
    int (*step)(void *ctx, const pt_walk_thread_t *th, uint32_t task, uint64_t ticks, unsigned flags);
    /* state: enum pt_task_state (Pending: it waits; the others: it is done); flags: the
     * record's (PT_EVF_SYNTHETIC: an implicit end of the step, walk.h) */
    int (*suspend)(void *ctx, const pt_walk_thread_t *th, uint32_t task, uint8_t state, uint64_t ticks,
                   unsigned flags);
    /* after a Pending suspend: what it awaits (kind: enum pt_await_kind; id: the awaited
     * task's Task symbol for PT_AWAIT_TASK, else a Label symbol) */
    int (*await)(void *ctx, const pt_walk_thread_t *th, uint32_t task, uint8_t kind, uint32_t id,
                 uint64_t ticks);
} pt_tasks_observer_t;

int pt_tasks_create(uint32_t done_kept, pt_tasks_t **out); /* done_kept 0: the default */
/* The node budget of the kept tasks' trees (0: the default); before the first feed. */
void pt_tasks_set_node_budget(pt_tasks_t *t, uint32_t nodes);
/* Report to `ops` from now on (NULL: stop). ops must outlive t. */
void pt_tasks_set_observer(pt_tasks_t *t, const pt_tasks_observer_t *ops, void *ctx);

void pt_tasks_destroy(pt_tasks_t *t);

/* The walk's callbacks, after the walk's own checks. is_task_symbol: the
 * caller's symbol table says id (of a TaskStep / TaskSuspend, or of a TaskAwait
 * of kind Task) is a Task symbol (else the record is counted and ignored). */
int pt_tasks_on_task(pt_tasks_t *t, const pt_walk_thread_t *th, uint8_t kind, uint32_t id, uint16_t aux,
                     uint64_t ticks, unsigned flags, int is_task_symbol);
int pt_tasks_on_enter(pt_tasks_t *t, const pt_walk_thread_t *th, uint32_t id, uint64_t ticks, unsigned flags);
int pt_tasks_on_exit(pt_tasks_t *t, const pt_walk_thread_t *th, uint32_t id, uint64_t ticks, unsigned flags);
/* any other callback of the thread (instant, cpu): time moves on */
void pt_tasks_on_tick(pt_tasks_t *t, const pt_walk_thread_t *th, uint64_t ticks);

/* Kept tasks in order of first sight; a pending task's wait so far counts up to now_ticks. */
size_t pt_tasks_count(const pt_tasks_t *t);
int pt_tasks_at(const pt_tasks_t *t, size_t index, uint64_t now_ticks, pt_tasks_task_t *out);
void pt_tasks_counters(const pt_tasks_t *t, pt_tasks_counters_t *out);

/* Names for JSON and tables: "pending", "running", ...; "future", "task", ... "other". */
const char *pt_tasks_state_name(unsigned state);
const char *pt_tasks_await_name(unsigned kind);

#ifdef __cplusplus
}
#endif

#endif /* PT_VIEWER_TASKS_H */
