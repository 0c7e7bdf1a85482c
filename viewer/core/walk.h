/*
 * pt_walk: the one set of rules that turns a pytrace stream into stacks.
 * pytrace-top (agg.c), every exporter (export.c) and the Python API (through
 * the extension) are fed by it, so they all see the same trees. No Python.
 *
 * The walk keeps, per thread, the stack of open entries (symbol ids, each a
 * frame or a span) and calls back on every change: enter, exit, instant (a
 * mark) and gap (a Lost record). It never reads symbols or keeps totals; the
 * callbacks do that.
 *
 * The rules, per thread (schema/pytrace.fbs names the event kinds):
 *   - Call, CCall, Resume enter a frame of their id on top of the stack.
 *     Return, CReturn, Unwind, CUnwind, Yield close the innermost open frame of
 *     their id: if it is not on top, the entries above it are closed first, at
 *     the same tick (their returns were missed). A close of an id with no open
 *     frame (the function was running before the stream began: a reader that
 *     starts mid-stream, or the frame that started tracing) is ignored and
 *     counted (pt_walk_counters.unmatched). A per-thread count of open frames
 *     per id answers that in O(1), so any stream costs time linear in its
 *     events.
 *   - Calls: every activation the walk sees counts ONE call, whether its call
 *     event was seen or a Frame record reported it (a frame already running
 *     when tracing or the reader started, or called during a gap). Enter has
 *     PT_WALK_REPORTED for the latter, so a consumer may tell them apart, but
 *     every reader of this library counts them (pytrace-top, pstats,
 *     collapsed, speedscope, Chrome, Perfetto agree).
 *   - Frame records (outermost first) report the whole stack: at thread start,
 *     after a Lost record, or anywhere. Position by position, reported ids that
 *     equal the open stack's frames are kept open (the same calls still
 *     running; spans are skipped over when matching). At the first difference
 *     the rest of the old stack is closed, at the tick of the Lost record if
 *     the run follows one, else at the first Frame record's tick, and the
 *     remaining Frame records enter frames (PT_WALK_REPORTED) at their ticks.
 *     At the first event after the run that is not a Frame record, old frames
 *     beyond the reported stack are closed at the same tick as above. A Frame
 *     record with aux (depth) 0 while a run is going starts a new run.
 *   - Lost: a gap of N events (48 bits: id | aux << 32). gap() is called, and
 *     the Frame records that follow rebuild the stack as above; a Lost record
 *     with no Frame records after it closes every frame (at its tick) at the
 *     next event. Open spans outlive gaps (rule 1 below).
 *   - Mark: instant() on the thread with the record's flags, the stack
 *     unchanged. A Mark with PT_EVF_STEP ends a step of the thread's loop: the
 *     step runs from the thread's previous Step mark (or its first event) to
 *     it; the frames open at the mark go on into the next step.
 *   - CpuTime: cpu() with the thread's CPU ns, the stack unchanged. Right
 *     after a Lost record it waits for the Frame run that follows (the tracer
 *     writes Lost, CpuTime, the stack); after a Frame run it ends the run, as
 *     any other event does, before cpu() is called.
 *
 * THE RULE FOR SPANS. A user span (SpanBegin/SpanEnd, its id a Label symbol)
 * is an entry of the thread's stack like a frame: SpanBegin enters it on top
 * (one call) and everything entered while it is open nests under it. A span is
 * an interval of the code that opened it, not of the helper frames that wrote
 * its begin and end (pytrace.span's __enter__ and the C function span_begin
 * return while the span stays open; __exit__ and span_end are called inside
 * it), so:
 *   (1) when a frame below an open span is closed (by its return, a missed
 *       return or a resync after a gap), the spans above it are not closed
 *       for good: they exit and, at the same tick, re-enter on top of what
 *       remains, with PT_WALK_CONTINUED (not a new call), in their order;
 *   (2) SpanEnd closes the innermost open span of its id; the entries above it
 *       (normally __exit__ and span_end) exit and re-enter, at the same tick,
 *       on top of the span's parent with PT_WALK_CONTINUED, and then return
 *       normally. A SpanEnd with no open span of its id is ignored and counted
 *       (unmatched_spans).
 *   (3) ThreadEnd and the end of the stream close spans like frames.
 * So every enter has exactly one exit, entries nest strictly (a timeline
 * format can draw them as slices), each span counts one call and its time is
 * from SpanBegin to SpanEnd, and a frame's time is never counted twice: a
 * continued entry is the same activation in a new context (pstats counts its
 * calls once, cumulative time per outermost piece).
 *
 * TASKS (asyncio, issue 23; the rules for a task's own tree are in tasks.h).
 * TaskStep, TaskSuspend and TaskAwait change no stack. The walk keeps, per
 * thread, the task whose step runs (pub.task, 0: none) and checks the order:
 * TaskStep with a step running ends that step first (an implicit suspend,
 * state Pending, counted in task_malformed); TaskSuspend of another task or
 * with no step running, TaskAwait not right after a Pending TaskSuspend (or
 * its TaskAwait records), and unknown TaskState / AwaitKind values are
 * ignored and counted (task_malformed). A Lost record ends the thread's step
 * (its suspend was maybe lost: the producer writes a Synthetic TaskStep after
 * the gap if the step goes on), as does ThreadEnd. task() gets only records
 * that passed these checks: kind, id, aux and flags as in the record.
 *
 * Ticks are passed as the events carry them (raw). A consumer that needs
 * non-decreasing time per thread (durations, slices) clamps to the largest
 * tick it has seen on the thread; self time is "the ticks between two
 * callbacks of a thread go to the entry on top" and a tick below the largest
 * seen adds nothing (agg.c and export.c both do exactly this).
 *
 * Threads are known by their segment-unique thread number. pt_walk_thread_end
 * closes what is still open (ThreadEnd); events after it reopen the thread (a
 * reused number). pt_walk_finish closes every thread still open, at its last
 * tick, in order of first sight.
 *
 * PROCESSES. A stream may hold several processes (a job's process tree read by
 * the hub, a merged recording): every message carries Message.process, the
 * stream-unique process number (0 = the stream's only process, every older
 * recording), and each process's ProcessInfo, with the same number, comes
 * before its other messages. Thread numbers and symbol ids are per process, so
 * a thread is the pair (process, number) (the pt_walk_proc_* calls; the plain
 * calls are process 0) and a symbol the pair (process, id) (the consumer's
 * table). Ticks are per process too: events of process p are in p's own clock.
 *
 * THE TIME AXIS of a stream (every consumer: export.c, agg.c). A tick t of
 * process p is at
 *     ns(p, t) = p.base_monotonic_ns + (t - p.base_ticks) * 1e9 / p.ticks_per_second
 * on one CLOCK_MONOTONIC axis shared by all the stream's processes: processes
 * of one machine share CLOCK_MONOTONIC, so this is exact for a hub's stream.
 * Recordings made on different machines (whose monotonic clocks are
 * unrelated) are put on one axis by `pytrace merge`, which rewrites each
 * input's base_monotonic_ns so that base_realtime_ns - base_monotonic_ns is
 * the same for every process (alignment by wall clock; README, "Merging
 * recordings", states the error). Durations within a process use only its own
 * ticks_per_second, never another process's.
 *
 * SYMBOLS NEVER ANNOUNCED. Symbol ids are per process, and a stream holds the
 * Symbol message of an id before any event that uses it (DESIGN.md, Symbols:
 * a live reader reads the symbols up to the published watermark after the
 * events; a recording holds them in that order; a hub or a reader that
 * attaches late sends every Symbol before the stacks). A consumer that keeps
 * the symbol table calls pt_walk_check_symbols once and pt_walk_proc_symbol
 * for every Symbol message; from then on the walk counts each event that
 * names an id (Call ... Mark, Frame; not Lost, whose id is a count) that its
 * process never announced: damage, counted in pt_walk_counters.unannounced
 * and the thread's pub.unannounced, and walked as any event (the consumer
 * names it "<unknown #id>"). Id 0 is not counted: it is the producer's
 * "unknown" when its symbol log was full, counted there (symbols_dropped).
 * This is the one place of the rule; agg.c and export.c only report it.
 *
 * Any callback may be NULL. Callbacks may return non-zero to stop the walk; that value is returned by
 * the feeding call (the stack is then unspecified; destroy the walk).
 * Threading: one thread at a time. Errors: 0, a callback's value, or -ENOMEM.
 */
#ifndef PT_VIEWER_WALK_H
#define PT_VIEWER_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "schema/pt_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* enter/exit flags */
#define PT_WALK_SPAN 0x1u      /* the entry is a user span (SpanBegin) */
#define PT_WALK_REPORTED 0x2u  /* enter: opened by a Frame record (the call was not seen) */
#define PT_WALK_CONTINUED 0x4u /* enter: the same activation moved under a new parent (no call);
                                  exit: the entry will re-enter at once */
#define PT_WALK_RESUME 0x8u    /* enter: a Resume record (a generator or coroutine goes on) */
#define PT_WALK_YIELD 0x10u    /* exit: its own Yield record closed it (suspended, not returned) */

typedef struct pt_walk_thread {
    uint64_t number;       /* segment-unique thread number */
    uint32_t process;      /* Message.process of its messages (0: the stream's only process) */
    uint32_t index;        /* 0, 1, ... in order of first sight */
    uint32_t depth;        /* open entries (after the change being reported) */
    uint64_t last_ticks;   /* largest tick seen on the thread */
    int have_ticks;
    uint64_t events;
    uint64_t lost;         /* sum of its Lost record counts (dropped: not LostNoRing) */
    uint64_t lost_no_ring; /* sum of its LostNoRing counts (events before it had a ring) */
    uint8_t lost_flags;    /* Event.flags of its last Lost record: the gap's cause (gap callback) */
    uint64_t lost_missed;  /* the part of `lost` in synthetic Lost records (PT_EVF_SYNTHETIC): a
                              hub's, for events this reader missed in its queue -- not the job's drops */
    /* 1: the open entries are the thread's whole stack. The walk cannot know it
     * for a thread it meets mid-stream, so it starts at 0 and the consumer sets
     * it when it knows the thread's stream is read from its first event
     * (EventChunk.first_event 0: nothing was open before it). A Frame record
     * sets it (a run reports the whole stack), a Lost record clears it (until
     * the Frame records that follow), ThreadEnd sets it (nothing is open). */
    int stack_known;
    uint64_t unannounced;  /* its events that named a symbol never announced (pt_walk_check_symbols) */
    uint32_t task;         /* Task symbol of the step running on the thread (TASKS), 0: none */
    uint32_t task_depth;   /* open entries when that step began (the loop's frames below it) */
    uint8_t task_awaits;   /* 1: right after a Pending TaskSuspend (TaskAwait records may follow) */
    void *user;            /* the consumer's per-thread state */
} pt_walk_thread_t;

typedef struct pt_walk_ops {
    /* a thread is seen for the first time (set th->user here) */
    int (*thread_new)(void *ctx, pt_walk_thread_t *th);
    int (*enter)(void *ctx, pt_walk_thread_t *th, uint32_t id, uint64_t ticks, unsigned flags);
    int (*exit)(void *ctx, pt_walk_thread_t *th, uint32_t id, uint64_t ticks, unsigned flags);
    /* Mark: flags are its Event.flags (PT_EVF_STEP: it ends a step of the thread's loop) */
    int (*instant)(void *ctx, pt_walk_thread_t *th, uint32_t id, uint64_t ticks, unsigned flags);
    int (*gap)(void *ctx, pt_walk_thread_t *th, uint64_t ticks, uint64_t lost);  /* Lost */
    /* CpuTime: the thread's CPU ns (modulo 2^48, PT_CPU_MASK) at ticks; the stack unchanged */
    int (*cpu)(void *ctx, pt_walk_thread_t *th, uint64_t ticks, uint64_t cpu_ns);
    /* TaskStep, TaskSuspend, TaskAwait that passed the checks (TASKS): kind is
     * PT_EV_TASK_*; a TaskStep's th->task is set before the call, a
     * TaskSuspend's cleared after it. An implicit end of a step (a nested
     * TaskStep, a Lost record, ThreadEnd) comes as a TaskSuspend with aux
     * Pending and flags PT_EVF_SYNTHETIC. */
    int (*task)(void *ctx, pt_walk_thread_t *th, uint8_t kind, uint32_t id, uint16_t aux, uint64_t ticks,
                unsigned flags);
} pt_walk_ops_t;

typedef struct pt_walk pt_walk_t;

typedef struct pt_walk_counters {
    uint64_t events;
    uint64_t lost;             /* sum of Lost record counts: events dropped (not LostNoRing) */
    uint64_t lost_wait_timeout; /* ... of them LostWaitTimeout (policy wait, the bound ran out) */
    uint64_t lost_no_room;     /* ... of them LostNoRoom (no room in /dev/shm for a chunk) */
    uint64_t lost_no_ring;     /* LostNoRing counts: events of threads without a ring (not in lost) */
    uint64_t unmatched;        /* closes with no open frame of their id */
    uint64_t unmatched_spans;  /* SpanEnd with no open span of its id */
    uint64_t bad_events;       /* unknown kinds */
    uint64_t task_malformed;   /* task records out of order or with unknown values (TASKS) */
    uint64_t unannounced;      /* events that named a symbol never announced (pt_walk_check_symbols) */
    uint32_t threads;
} pt_walk_counters_t;

int pt_walk_create(const pt_walk_ops_t *ops, void *ctx, pt_walk_t **out);
void pt_walk_destroy(pt_walk_t *w);

/* The thread's state (created, with thread_new, on first sight); NULL if out
 * of memory. *rc gets the callback's value if thread_new failed. */
pt_walk_thread_t *pt_walk_thread(pt_walk_t *w, uint64_t number, int *rc);
size_t pt_walk_thread_count(const pt_walk_t *w);
pt_walk_thread_t *pt_walk_thread_at(pt_walk_t *w, size_t index);

/* The same for thread `number` of process `process` (pt_walk_thread is process 0). */
pt_walk_thread_t *pt_walk_proc_thread(pt_walk_t *w, uint32_t process, uint64_t number, int *rc);

/* Count the events that name a symbol never announced (SYMBOLS NEVER
 * ANNOUNCED above); then announce each Symbol message's id with
 * pt_walk_proc_symbol before feeding the events that follow it. 0 or -ENOMEM. */
void pt_walk_check_symbols(pt_walk_t *w);
int pt_walk_proc_symbol(pt_walk_t *w, uint32_t process, uint32_t id);

/* Events of one thread, in stream order (an EventChunk). */
int pt_walk_events(pt_walk_t *w, uint64_t thread, const pt_event_t *events, size_t count);
int pt_walk_proc_events(pt_walk_t *w, uint32_t process, uint64_t thread, const pt_event_t *events, size_t count);
/* ThreadEnd at ticks (0 = the thread's last tick): close everything open. */
int pt_walk_thread_end(pt_walk_t *w, uint64_t thread, uint64_t ticks);
int pt_walk_proc_thread_end(pt_walk_t *w, uint32_t process, uint64_t thread, uint64_t ticks);
/* End of the stream: pt_walk_thread_end for every thread with entries open. */
int pt_walk_finish(pt_walk_t *w);

/* Open entries of a thread, outermost first: ids[i] and (if flags) whether
 * entry i is a span. Returns the depth; fills at most cap. */
uint32_t pt_walk_stack(const pt_walk_t *w, const pt_walk_thread_t *th, uint32_t *ids, uint8_t *span_flags,
                       uint32_t cap);

/* ---- the current stack, for a reader that shows it (pytrace dump, Profile.stacks) ----
 * What kind of entry: a Python frame (entered by Call or Resume, or a Frame
 * record without the CFunction flag), a C function (CCall, or a Frame record
 * with it), a user span (SpanBegin). */
enum pt_walk_frame_kind { PT_WALK_FRAME_PYTHON = 0, PT_WALK_FRAME_C = 1, PT_WALK_FRAME_SPAN = 2 };

typedef struct pt_walk_frame {
    uint32_t id;           /* symbol id (a Label symbol for a span) */
    uint8_t kind;          /* enum pt_walk_frame_kind */
    uint8_t reported;      /* 1: opened by a Frame record; its call was not seen, so start_ticks is
                              the tick it was reported at, not when it began */
    uint8_t reserved[2];
    uint64_t start_ticks;  /* raw tick of its Call/CCall/Resume/SpanBegin (a span that moved under a
                              new parent keeps its SpanBegin tick) */
} pt_walk_frame_t;

/* The thread's current stack, outermost first: the open entries as the walk
 * holds them, into out[0 .. cap). Inside a Frame run (or after a Lost record,
 * before its Frame records) it is the stack as the run will leave it if it
 * ends here: the reported frames, the spans that survive, and not the old
 * frames the run has not confirmed. Returns the depth (which may exceed cap:
 * only cap are written; out may be NULL with cap 0 to ask for the depth).
 * th->stack_known says whether it is the whole stack. Any time between
 * feeding calls; does not change the walk. */
uint32_t pt_walk_frames(const pt_walk_t *w, const pt_walk_thread_t *th, pt_walk_frame_t *out, uint32_t cap);

/* Open entries of id on the thread, frames and spans together: in an enter
 * callback the entry being entered counts, in an exit callback the one being
 * exited no longer does. O(1). */
uint32_t pt_walk_open(const pt_walk_t *w, const pt_walk_thread_t *th, uint32_t id);

void pt_walk_counters(const pt_walk_t *w, pt_walk_counters_t *out);

#ifdef __cplusplus
}
#endif

#endif /* PT_VIEWER_WALK_H */
