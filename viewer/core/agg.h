/*
 * pt_agg: the aggregation shared by pytrace-top, the exporters and the web
 * viewer. Fed with the reader's messages, it rebuilds every thread's stack and
 * keeps a calling-context tree (CCT) per thread with call counts and self time,
 * plus a rolling window of per-time-slice deltas.
 *
 * Model (see agg.c for the why):
 *   - Each CCT node is (parent node, symbol id). A node keeps the calls that
 *     entered it and its self ticks. Inclusive time is the sum of self over
 *     the node's subtree, computed at query time; so recursion never double
 *     counts, and frames still open count up to the latest tick seen.
 *   - Self time: between two events of a thread, the elapsed ticks go to the
 *     frame on top of its stack (to the thread's root when the stack is empty).
 *   - Opening events: Call, Resume, CCall, SpanBegin (each counts one call, as
 *     cProfile counts every generator resume as a call). Closing events:
 *     Return, Yield, Unwind, CReturn, CUnwind, SpanEnd. A close whose id is not
 *     on top closes every frame above the matching one (missed returns); a
 *     close whose id is nowhere on the stack is ignored and counted.
 *   - Frame records (at thread start, after a Lost record, or anywhere): a run
 *     of Frame records describes the whole stack, outermost first. Frames whose
 *     ids match the current stack position by position (the common prefix) are
 *     kept open; at the first mismatch the rest of the old stack is closed and
 *     the remaining Frame records open new frames. Frames opened by a Frame
 *     record do not count a call (the call happened where we could not see it).
 *     At the first non-Frame event, old frames beyond the reported stack are
 *     closed. Time between the last event before a Lost record and the Lost
 *     record is nobody's: the thread's <not observed> time (cct.h), in no
 *     function, no tree and no percentage's base (the table counts it apart);
 *     time from the Lost record to the end of the Frame run goes to the top of
 *     the rebuilt common prefix.
 *   - CPU time: CpuTime records share the thread's CPU time among what ran
 *     between them (cct.h, THE RULE FOR CPU TIME); every row and tree node has
 *     its CPU part beside its wall time. Ticks after a thread's last CpuTime
 *     record have no CPU part yet.
 *   - Function rows follow pstats: calls, primitive calls (the function was
 *     not already on the stack), self time, and total time counted only for
 *     outermost activations.
 *   - Window: time is cut in slices (default 100 ms) kept in a ring (default
 *     6000 slices = 600 s). A window query of N seconds sums the last
 *     ceil(N / slice) slices, the current (partial) one included.
 *
 * Threading: a pt_agg_t is used by one thread at a time. No allocation per
 * event on the steady path: nodes, hash tables and slice entries live in
 * arrays that grow geometrically and are reused.
 *
 * Errors: 0 or a negative errno (-ENOMEM, -EINVAL, -EBADMSG).
 */
#ifndef PT_VIEWER_AGG_H
#define PT_VIEWER_AGG_H

#include <stddef.h>
#include <stdint.h>

#include "schema/pt_fb.h"
#include "schema/pt_wire.h"
#include "tasks.h"
#include "walk.h" /* enum pt_walk_frame_kind */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pt_agg pt_agg_t;

/* The call tree's memory budget. Past it, a path that would need a new node
 * is charged to its parent's [other] node instead (and everything called
 * below it too): the tree keeps the paths it already holds (those seen first,
 * which in a long run are the common ones) and stops growing. Every call and
 * tick is still counted, in [other]; the flat table stays exact (folded calls
 * are kept per thread and symbol). PT_AGG_NODE_BYTES is what one node costs a
 * reader at most (its slot in the node array and the hash table, and its copies
 * in a query and in a Python tree), charged against the budget; half of the
 * budget is kept for [other] nodes, at most one per node. */
#define PT_AGG_DEFAULT_TREE_BUDGET (256ull << 20)
#define PT_AGG_NODE_BYTES 512u

typedef struct pt_agg_config {
    uint64_t slice_ns;     /* 0 = 100 ms */
    uint32_t slice_count;  /* 0 = 6000 (600 s of 100 ms slices) */
    uint64_t tree_budget;  /* bytes; 0 = PT_AGG_DEFAULT_TREE_BUDGET */
    uint32_t task_nodes;   /* nodes of the kept asyncio tasks' trees; 0 = PT_TASKS_DEFAULT_NODE_BUDGET */
} pt_agg_config_t;

int pt_agg_create(const pt_agg_config_t *cfg, pt_agg_t **out);
void pt_agg_destroy(pt_agg_t *agg);

/* Feed one decoded message (pointers inside may be released after the call). */
int pt_agg_feed_msg(pt_agg_t *agg, const pt_fb_msg_t *msg);
/* Verify, decode and feed one size-prefixed message of exactly len bytes. */
int pt_agg_feed_bytes(pt_agg_t *agg, const uint8_t *buf, size_t len);
/* Feed a run of events of one thread (as in an EventChunk). */
int pt_agg_feed_events(pt_agg_t *agg, uint64_t thread, const pt_event_t *events, size_t count);

/* ---- symbols and threads ---------------------------------------------- */

typedef struct pt_agg_symbol {
    uint32_t id;
    uint8_t kind;        /* enum pt_symbol_kind */
    uint8_t known;       /* 0: never announced; name is "<unknown #id>" */
    const char *name;    /* raw bytes from the segment, NUL-terminated; escape before display */
    const char *file;
    uint32_t line;
} pt_agg_symbol_t;

/* The symbol (never NULL; unknown ids get "<unknown #id>"). The pointers stay
 * valid until pt_agg_destroy. */
pt_agg_symbol_t pt_agg_symbol(pt_agg_t *agg, uint32_t id);

typedef struct pt_agg_thread_info {
    uint64_t thread;     /* segment-unique thread number */
    uint64_t os_tid;
    const char *name;    /* "" if none */
    int ended;
    uint64_t events;
    uint32_t depth;      /* current stack depth */
} pt_agg_thread_info_t;

size_t pt_agg_thread_count(const pt_agg_t *agg);
/* Threads in order of first sight; index < pt_agg_thread_count. */
int pt_agg_thread_at(const pt_agg_t *agg, size_t index, pt_agg_thread_info_t *out);

/* ---- current stacks -------------------------------------------------------- */

typedef struct pt_agg_frame {
    uint32_t symbol;       /* symbol id (pt_agg_symbol); a Label symbol for a span */
    uint8_t kind;          /* enum pt_walk_frame_kind (walk.h): PT_WALK_FRAME_PYTHON, _C, _SPAN */
    uint8_t reported;      /* 1: opened by a Frame record (its call was not seen): start_ns is when it
                              was reported, not when it began */
    uint64_t start_ns;     /* its start, as pt_agg_ticks_to_ns of its tick */
} pt_agg_frame_t;

/* Thread `index`'s (as pt_agg_thread_at) current stack, outermost first, as
 * the walk holds it (pt_walk_frames: the one rule, so it is the stack
 * pytrace-top and the exporters are building on): at most cap frames into
 * out, the full depth into *depth. *known (may be NULL) is 1 when that is the
 * thread's whole stack: its stream was read from its first event, or a Frame
 * run reported it since the last Lost record, or it ended; 0 when frames
 * opened before the reader began may be missing (a thread met mid-stream). An
 * ended thread has depth 0. 0, -EINVAL (no such thread) or -ENOMEM. */
int pt_agg_stack(const pt_agg_t *agg, size_t index, pt_agg_frame_t *out, uint32_t cap, uint32_t *depth, int *known);

typedef struct pt_agg_counters {
    uint64_t events_seen;
    double events_per_second;    /* over the last second of trace time */
    /* Events lost, one definition for every view (top, web, exports), by cause:
     *   dropped        the job's: events its tracer could not write (a full ring under
     *                  policy drop, or policy wait past its bound) -- the same for every
     *                  reader of the job; best knowledge: max of the three below
     *   missed_in_hub  this reader's: events a hub did not send it because its queue was
     *                  full or the hub's budget cut it (synthetic Lost records); not in
     *                  `dropped` nor in the three below */
    uint64_t dropped;
    uint64_t dropped_lost_records;   /* sum of the job's Lost record counts */
    uint64_t dropped_lost_counts;    /* sum over threads of LostCount / ThreadEnd, less missed_in_hub
                                        (a hub's LostCount adds this reader's misses to the job's) */
    uint64_t dropped_producer;       /* ProducerStatus.events_dropped */
    uint64_t missed_in_hub;
    /* why, in words every view shows beside the number ("" when it is 0): static strings */
    const char *dropped_cause, *missed_cause;
    uint64_t unmatched_closes;   /* close events with no matching open frame */
    uint64_t unannounced;        /* events naming a symbol never announced: damage (walk.h), shown
                                    as "<unknown #id>" */
    uint32_t producer_state;     /* enum pt_producer_state (0 until known) */
    uint32_t end_signal;         /* Exited by this signal (its parent's SIGTERM); 0: not by a signal */
    uint64_t end_signal_pid;     /* who sent it */
    uint32_t threads_seen;
    uint32_t threads_active;
    uint64_t hook_errors;
    /* the job's other losses, from its ProducerStatus (pytrace/losses.py names them) */
    uint64_t symbols_dropped, threads_untraced, events_untraced, tracing_displaced;
    uint64_t unrecorded_events;  /* a recording's writer read and could not write (a full disk) */
    uint64_t symbols;
    uint64_t nodes;
    uint64_t tree_budget;        /* bytes (pt_agg_config_t.tree_budget) */
    uint64_t folded_calls;       /* calls charged to [other] nodes: the tree budget was reached */
    uint64_t other_nodes;        /* [other] nodes in the tree */
    uint64_t span_ns;            /* first to latest tick seen */
    double window_max_seconds;   /* slice_ns * slice_count */
    uint32_t window_slots;       /* slices allocated for the window: as many as the stream's span
                                    has needed (from 256), at most slice_count */
} pt_agg_counters_t;

void pt_agg_counters(const pt_agg_t *agg, pt_agg_counters_t *out);

/* ProcessInfo as received (zeroed until then; ticks_per_second defaults to 1e9). */
const pt_fb_process_info_t *pt_agg_process_info(const pt_agg_t *agg);

/* How every view names a process (pytrace-top, the web view, the report, every
 * export): its role in the job when known ("ForkPoolWorker-1", "DataLoader worker
 * 0"), then its command line with the interpreter's directory left out ("python
 * train.py --epochs 3"), and for a child multiprocessing starts by exec what it runs
 * ("python -m multiprocessing.spawn"). "ROLE: COMMAND" or "COMMAND" into out (cut
 * to cap - 1 bytes, NUL-terminated); returns the length written. role, command_line:
 * NULL reads as "". Not escaped: the caller escapes for its terminal or page. */
size_t pt_process_label(const char *role, const char *command_line, char *out, size_t cap);

/* Ticks (absolute) to ns since the first tick seen. */
uint64_t pt_agg_ticks_to_ns(const pt_agg_t *agg, uint64_t ticks);

/* ---- queries ------------------------------------------------------------ */

typedef struct pt_agg_query {
    uint64_t thread;        /* 0 = all threads merged */
    double window_seconds;  /* 0 = whole run; else the last N seconds (clamped) */
    int hide_idle;          /* with thread 0, pt_agg_tree leaves out the threads that started no
                               call in the view (idle: blocked or waiting in one call, or gone) */
    int last_step;          /* 1: the last complete step alone (STEPS below): of `thread`, or with
                               thread 0 of the stepping thread (pt_agg_steps); window_seconds is
                               ignored; wall time only (CPU parts 0), the tree budget's folded
                               activations are in [other] and not in the table's rows; no step yet:
                               an empty view */
} pt_agg_query_t;

enum pt_agg_sort {
    PT_AGG_SORT_SELF = 0,
    PT_AGG_SORT_TOTAL,
    PT_AGG_SORT_CALLS,
    PT_AGG_SORT_PRIM_CALLS,
    PT_AGG_SORT_NAME,
    PT_AGG_SORT_FILE,
    PT_AGG_SORT_COUNT
};

typedef struct pt_agg_row {
    uint32_t symbol;
    uint8_t kind;
    const char *name;
    const char *file;
    uint32_t line;
    uint64_t calls;
    uint64_t prim_calls;
    uint64_t self_ns;
    uint64_t total_ns;     /* outermost activations only (pstats cumtime) */
    uint64_t self_cpu_ns;  /* the part of self_ns the thread was on a CPU (CpuTime records) */
    uint64_t total_cpu_ns; /* the part of total_ns the thread was on a CPU */
    double self_pct;       /* of the observed time (wall time of the window or run, less <not observed>) */
    double total_pct;
} pt_agg_row_t;

typedef struct pt_agg_table {
    pt_agg_row_t *rows;
    size_t count;
    uint64_t span_ns;      /* wall time the percentages refer to: observed time */
    uint64_t unobserved_ns;     /* thread time nobody saw (inside Lost gaps): the <not observed> row's */
    uint64_t unobserved_cpu_ns;
    uint64_t unobserved_lost;   /* the events lost in those gaps */
} pt_agg_table_t;

/* Rows of the function table: one per symbol with any calls or time in the
 * view. sort: enum pt_agg_sort; descending for numbers (names ascending when
 * descending = 0). filter: case-insensitive substring of the name, NULL/""
 * for all. Free with pt_agg_table_free. */
int pt_agg_table(pt_agg_t *agg, const pt_agg_query_t *q, int sort, int descending, const char *filter,
                 pt_agg_table_t *out);
void pt_agg_table_free(pt_agg_table_t *t);
/* The table's filter rule, for every view that filters by name: needle is a part
 * of hay, ASCII letters in any case; NULL or "" matches everything. */
int pt_agg_name_matches(const char *hay, const char *needle);

#define PT_AGG_NONE UINT32_MAX
#define PT_AGG_OTHER (UINT32_MAX - 1u) /* pt_agg_tnode_t.symbol of an [other] node (other = 1 says so) */

typedef struct pt_agg_tnode {
    uint32_t symbol;       /* PT_AGG_NONE for the root */
    uint32_t parent;       /* PT_AGG_NONE for the root */
    uint32_t first_child;  /* children sorted by name, then symbol id */
    uint32_t next_sibling;
    uint32_t depth;        /* root = 0 */
    uint32_t other;        /* 1: an [other] node: calls below its parent folded past the tree budget
                              (symbol PT_AGG_OTHER; no children; sorted after its siblings) */
    uint64_t calls;
    uint64_t self_ns;
    uint64_t incl_ns;
    uint64_t self_cpu_ns;  /* the parts of self_ns and incl_ns on a CPU */
    uint64_t incl_cpu_ns;
} pt_agg_tnode_t;

typedef struct pt_agg_tree {
    pt_agg_tnode_t *nodes; /* nodes[0] is the root; nodes with no time and no calls are left out */
    size_t count;
    uint64_t span_ns;
} pt_agg_tree_t;

/* The CCT of the view (one thread, or all threads merged by path). */
int pt_agg_tree(pt_agg_t *agg, const pt_agg_query_t *q, pt_agg_tree_t *out);
void pt_agg_tree_free(pt_agg_tree_t *t);

/* ---- timeline (web viewer) -------------------------------------------------
 * Per thread and per cell of `group` consecutive window slices, what ran: the
 * symbol with the most self time in the cell (summed over every node of the
 * symbol), how much of the cell the thread spent in any frame, and the calls
 * started. Slices come from the window ring, so only the last
 * pt_agg_counters().window_max_seconds are there. */

typedef struct pt_agg_tl_cell {
    uint64_t slice;        /* first slice of the cell (a multiple of group) */
    uint64_t thread;       /* thread number */
    uint32_t symbol;       /* the top symbol's id; PT_AGG_NONE when no frame had time */
    uint32_t reserved;
    uint64_t top_ns;       /* self time of that symbol in the cell */
    uint64_t busy_ns;      /* self time of every frame (not the idle root) in the cell */
    uint64_t calls;        /* calls started in the cell */
} pt_agg_tl_cell_t;

typedef struct pt_agg_timeline {
    pt_agg_tl_cell_t *cells;  /* by cell, then by thread in order of first sight */
    size_t count;
    uint64_t slice_ns;        /* length of a slice */
    uint32_t group;           /* slices per cell */
    uint64_t first_slice;     /* the oldest slice in the window (slice 0 starts at the origin) */
    uint64_t last_slice;      /* the newest (current, partial) slice */
    uint64_t origin_ns;       /* ns since the first tick at which slice 0 starts (0 if before it) */
} pt_agg_timeline_t;

/* The cells in the last q->window_seconds (0 = all the ring holds) whose
 * slices are >= since_slice, for q->thread (0 = every thread); group slices
 * per cell (0 = 1), cells aligned to multiples of group. Threads with nothing
 * in a cell give no cell. Free with pt_agg_timeline_free. 0 or -ENOMEM. */
int pt_agg_timeline(pt_agg_t *agg, const pt_agg_query_t *q, uint64_t since_slice, uint32_t group,
                    pt_agg_timeline_t *out);
void pt_agg_timeline_free(pt_agg_timeline_t *t);

/* ---- steps ------------------------------------------------------------------
 * A Mark with PT_EVF_STEP (pytrace.step(), Optimizer.step under --torch) ends
 * a step of its thread's loop. The step runs from the thread's previous Step
 * mark, or for its first step from the thread's first event the reader saw
 * (the tracing start for a thread traced from its start: a reader that began
 * mid-stream sees a shorter first step), to the mark. Every step is in count,
 * mean, stdev, min, max and the slowest; the last PT_AGG_STEPS_KEPT are kept
 * for the percentiles and the list (older ones are `folded`, counted). The
 * last complete step's call tree is pt_agg_tree/pt_agg_table with
 * last_step = 1. */
#define PT_AGG_STEPS_KEPT 100000u

typedef struct pt_agg_steps {
    uint64_t thread;        /* the thread (number); 0 with count 0: no step seen */
    uint32_t threads;       /* threads of the process that ended a step */
    uint32_t label;         /* symbol id of the last Step mark's label (pt_agg_symbol) */
    uint64_t count;         /* steps ended on the thread; the last one is step number `count` */
    uint64_t kept;          /* the last `kept` of them are in the list and the percentiles */
    uint64_t folded;        /* count - kept: older steps, only in mean, stdev, min, max, slowest */
    uint64_t last_ns;       /* the last step's duration */
    uint64_t last_start_ns, last_end_ns; /* as pt_agg_ticks_to_ns */
    uint64_t last_lost;     /* events lost (Lost records) inside the last step */
    uint64_t median_ns, p10_ns, p90_ns;  /* of the kept steps (nearest rank) */
    uint64_t min_ns, max_ns, mean_ns, stdev_ns; /* of every step (population stdev) */
    uint64_t slowest;       /* number (1-based) of the slowest step (the first of equals); max_ns */
    uint64_t total_ns;      /* sum of every step */
    uint64_t running_ns;    /* the step running now: from the last mark to the latest tick seen */
    uint64_t tree_missed;   /* entries of a step's tree that found no memory (its tree misses them) */
} pt_agg_steps_t;

typedef struct pt_agg_step {
    uint64_t number;        /* 1-based */
    uint64_t end_ns;        /* as pt_agg_ticks_to_ns */
    uint64_t dur_ns;
} pt_agg_step_t;

/* The summary of thread's steps (0: the stepping thread, the one whose last
 * step ended last). 0, or -ENOENT when no such thread; no step: count 0. */
int pt_agg_steps(pt_agg_t *agg, uint64_t thread, pt_agg_steps_t *out);
/* The kept steps of thread (0: the stepping thread), oldest first, at most
 * cap into out; the number kept into *n. 0, -ENOENT or -ENOMEM. */
int pt_agg_step_list(pt_agg_t *agg, uint64_t thread, pt_agg_step_t *out, size_t cap, size_t *n);

/* Symbols in order of first sight (ids announced or only used): index <
 * pt_agg_symbol_count. The strings stay valid until pt_agg_destroy. */
size_t pt_agg_symbol_count(const pt_agg_t *agg);
pt_agg_symbol_t pt_agg_symbol_at(const pt_agg_t *agg, size_t index);

/* Ticks per second in use (ProcessInfo's, else 1e9). */
uint64_t pt_agg_ticks_per_second(const pt_agg_t *agg);

/* ---- asyncio tasks (tasks.h holds the rules) ---------------------------------- */

typedef struct pt_agg_task_fn {
    uint32_t symbol;
    const char *name, *file; /* raw bytes: escape before display */
    uint32_t line;
    uint64_t calls;          /* logical calls: one per coroutine call, however many resumptions */
    uint64_t incl_ns;        /* its running pieces (not its suspended time), outermost activations */
    uint64_t excl_ns;
} pt_agg_task_fn_t;

typedef struct pt_agg_task_await {
    uint32_t symbol;   /* the awaited task's Task symbol (kind PT_AWAIT_TASK), else a Label */
    uint8_t kind;      /* enum pt_await_kind (pt_tasks_await_name) */
    const char *name;  /* the awaited task's name, or the label ("asyncio.sleep") */
} pt_agg_task_await_t;

typedef struct pt_agg_task {
    uint32_t symbol;
    const char *name;  /* the task's name */
    const char *coro;  /* its coroutine's __qualname__ (the Task symbol's file) */
    uint32_t serial;   /* its serial number in the process (the Task symbol's line) */
    uint8_t state;     /* enum pt_task_state or PT_TASKS_STATE_RUNNING (pt_tasks_state_name) */
    uint64_t steps, run_ns, wait_ns;
    uint64_t wait_by_ns[PT_AWAIT_KIND_COUNT + 1]; /* by enum pt_await_kind; last: none named */
    const pt_agg_task_await_t *awaits; /* what it awaits now (pending tasks) */
    uint32_t await_count;
    const pt_agg_task_fn_t *fns;       /* its logical-call table, by total time, then own time, then symbol */
    uint32_t fn_count;
} pt_agg_task_t;

typedef struct pt_agg_tasks {
    pt_agg_task_t *tasks; /* kept tasks, in order of first sight */
    size_t count;
    uint64_t seen;        /* tasks seen: count + folded */
    uint64_t folded;      /* done tasks folded into the totals below (memory budget) */
    uint64_t folded_steps, folded_run_ns, folded_wait_ns;
    uint64_t malformed;   /* task records ignored as damage (walk.h TASKS; ids not Task symbols) */
    uint64_t tree_nodes;  /* nodes of the kept tasks' trees (pt_agg_task_tree) */
    uint64_t tree_folded; /* logical calls in their [other] nodes (the node budget) */
    pt_agg_task_fn_t *fns;
    pt_agg_task_await_t *awaits;
} pt_agg_tasks_t;

/* The tasks seen so far, whole run (pending waits count up to the latest
 * tick). Strings stay valid until pt_agg_destroy. 0 or -ENOMEM; free with
 * pt_agg_tasks_free. */
int pt_agg_tasks(pt_agg_t *agg, pt_agg_tasks_t *out);
void pt_agg_tasks_free(pt_agg_tasks_t *t);
/* The call tree of one kept task (task: its Task symbol) or of every kept task
 * side by side (PT_AGG_NONE), as tasks.h builds it: under the root one node
 * per task (symbol: its Task symbol; no calls, no time of its own), under it
 * the task's logical calls from its coroutine ([other]: past the node budget).
 * Times are running time (a task's suspended time is in no node); no CPU parts.
 * span_ns: the shown tasks' running time. Free with pt_agg_tree_free. 0 or
 * -ENOMEM (an unknown task: the root alone). */
int pt_agg_task_tree(pt_agg_t *agg, uint32_t task, pt_agg_tree_t *out);
/* The Task symbol of the kept task whose serial (its symbol's line) is `serial`;
 * PT_AGG_NONE when none is kept. No allocation. */
uint32_t pt_agg_task_of_serial(pt_agg_t *agg, uint64_t serial);

#ifdef __cplusplus
}
#endif

#endif /* PT_VIEWER_AGG_H */
