/*
 * Hot path of the tracer: what every hook callback runs, inlined into the
 * adapters (pt_monitoring.c, pt_evalframe.c, pt_profile.c).
 *
 * Every entry has a fast path for the common case -- this thread holds a ring
 * in the current session and the code object (or C function) already has its
 * symbol id for this session -- made of a handful of loads, one timestamp, one
 * ring push and one shadow-stack update. Everything else (first sight of a
 * thread or a function, a filtered function, an out-of-order close) goes to an
 * out-of-line slow path in pt_threads.c, so the fast path keeps no registers
 * saved and makes no call.
 *
 * Callers hold the GIL; the thread context they touch is their own.
 */
#ifndef PT_RUNTIME_TRACER_INLINE_H
#define PT_RUNTIME_TRACER_INLINE_H

#include "pt_tracer.h"

#include <stdatomic.h>

#include "shm/clock.h"
#include "shm/ring.h"

#define PT_SHADOW_CAPACITY 8192u
#define PT_CCACHE_SIZE 256u /* power of two */
#define PT_SHADOW_C_BIT 0x80000000u

/* A code object's co_extra slot: epoch << 33 | filtered << 32 | symbol id. */
#define PT_XTRA_FILTERED (UINT64_C(1) << 32)

typedef struct pt_ccache_entry {
    const PyMethodDef *def;
    uint64_t value; /* epoch << 32 | id */
} pt_ccache_entry_t;

/* A frame that was already running when the thread's ring was claimed (a
 * Frame record at the bottom of the shadow): its frame and code, so the
 * frame-evaluation adapter, which never sees such a frame leave, can tell
 * whether it is still on the stack. */
typedef struct pt_prior_frame {
    const void *frame;
    const PyCodeObject *code;
} pt_prior_frame_t;

/* Per-thread context: malloc'd on a thread's first event, reached through the
 * initial-exec TLS pointer pt_tls_thread. Hot fields first. */
typedef struct pt_thread {
    pt_ring_t ring;                 /* hot: first */
    _Atomic uint32_t ok_epoch;      /* ring claimed in this session (0: none); also read by
                                       the heartbeat thread, see pt_ok_epoch */
    uint32_t depth;                 /* logical depth (may exceed the capacity) */
    uint32_t prior;                 /* shadow levels [0, prior) are prior frames */
    uint32_t seen_epoch;            /* attach attempted in this session */
    pt_prior_frame_t *prior_frames; /* [prior] (malloc'd at attach) */
    uint64_t retry_ticks;           /* no free ring: try again from this tick (0 = never) */
    uint64_t missed;                /* events made without a ring in this session (in the header's
                                       events_untraced until a ring takes them as dropped) */
    uint32_t untraced_epoch;        /* session in which threads_untraced counted this thread */
    int attaching;                  /* inside thread_attach: events of its own Python calls are
                                       pytrace's, not the program's (not recorded, not counted) */
    /* C function ids seen by this thread: a direct-mapped cache in front of the
     * shared rculfhash, so the hot path needs no RCU read-side section. */
    pt_ccache_entry_t ccache[PT_CCACHE_SIZE];
    struct pt_thread *next, *prev;  /* the tracer's thread list, under its lock */
    uint32_t shadow[PT_SHADOW_CAPACITY];
    /* cold, last: the hot fields above keep their offsets */
    _Atomic uint32_t writer;        /* a writer that may run without the GIL (pt_foreign_enter)
                                       holds it 1; stop() and counters() hold it 2 while they
                                       touch this ring from another thread; 0 free */
    uint32_t task;                  /* the Task symbol whose asyncio step runs on this thread (0:
                                       none), set and cleared by the task records (pt_tasks.c)
                                       on this thread; the stack writer puts a Synthetic
                                       TaskStep of it before the Frame run */
    uint32_t task_switches;         /* pt_task_switches when task was set: a step begun before
                                       task records were last switched is not known to run */
} pt_thread_t;

/* What the fast path reads of the tracer's state. Written by pt_session.c with
 * the GIL held (or in a fork child / at exit, with one thread left). */
typedef struct pt_hot {
    _Atomic uint32_t epoch;   /* current session; 0 = not tracing */
    uint32_t clock_kind;      /* enum pt_clock_kind of the session's clock */
    uint32_t filtering;       /* the session has include/exclude filters */
} pt_hot_t;

PT_HIDDEN extern pt_hot_t pt_hot;
/* Bumped by pt_tasks.c at every _tasks_set: a thread's task (above) set before it is
 * stale (switched off, its step's end is not watched). */
PT_HIDDEN extern uint32_t pt_task_switches;
/* initial-exec: one %fs-relative load (the module is loaded with dlopen,
 * which has static TLS surplus for a pointer). */
PT_HIDDEN extern __thread pt_thread_t *pt_tls_thread __attribute__((tls_model("initial-exec")));

/* Slow paths (pt_threads.c). Same contracts as the fast entries below.
 * pt_py_open_slow: `linked` = the frame being opened is already the innermost
 * frame of the thread (profile and monitoring hooks), not yet (frame
 * evaluation hook). */
PT_HIDDEN int pt_py_open_slow(PyCodeObject *code, uint8_t kind, uint8_t flags, int linked);
PT_HIDDEN int pt_py_close_slow(PyCodeObject *code, uint8_t kind);
PT_HIDDEN void pt_close_slow(pt_thread_t *t, uint32_t entry, uint8_t kind);
PT_HIDDEN int pt_c_event_slow(PyCodeObject *caller, PyObject *callable, PyObject *self_arg,
                              const PyMethodDef *def, uint8_t kind);
/* This thread's context if it holds a ring in the current session, after
 * attaching it if this is its first event (may run Python). `opening` as in
 * pt_py_open_slow (NULL: nothing is skipped). NULL if not tracing or no ring. */
PT_HIDDEN pt_thread_t *pt_thread_current(PyCodeObject *opening);
/* Close every frame above `level` with synthetic records. */
PT_HIDDEN void pt_close_synthetic_above(pt_thread_t *t, uint32_t level);

static inline uint32_t pt_epoch_now(void)
{
    /* relaxed: the epoch changes only with the GIL held (or with one thread
     * left, in a fork child or at exit), and hooks run with the GIL; the GIL
     * orders them. Free-threaded: stop() resets it and then stops the world
     * (pt_session.c), which orders every hook after it against the reset */
    return atomic_load_explicit(&pt_hot.epoch, memory_order_relaxed);
}

/* The session this thread's ring belongs to (0: none). relaxed: written by
 * the owner or with the GIL held, which is how hooks read it; the heartbeat
 * thread, which reads it without the GIL, uses an acquire load of its own
 * (pairs with the release store in thread_attach that publishes the ring). */
static inline uint32_t pt_ok_epoch(const pt_thread_t *t)
{
    return atomic_load_explicit(&t->ok_epoch, memory_order_relaxed);
}

static inline uint64_t pt_now(void)
{
#if defined(__x86_64__) || defined(__i386__)
    if (PT_LIKELY(pt_hot.clock_kind == PT_CLOCK_TSC))
        return __rdtsc();
#endif
    return pt_monotonic_ns();
}

typedef struct pt_code_extra { /* CPython's _PyCodeObjectExtra (Objects/codeobject.c), 3.10..3.15 */
    Py_ssize_t ce_size;
    void *ce_extras[1];
} pt_code_extra_t;

/* The code object's co_extra value for us (0 if none). Same as
 * _PyCode_GetExtra without the call: the layout has been stable since 3.6. */
static inline uint64_t pt_code_extra(PyCodeObject *code)
{
#ifdef Py_GIL_DISABLED
    /* Free-threaded: as PyUnstable_Code_GetExtra of 3.14t (acquire loads, pairing with the
     * release stores of PyUnstable_Code_SetExtra, which grows the array by swapping in a new
     * one and frees the old through QSBR, so a hook, attached, never reads freed memory).
     * Plain moves on x86-64 and aarch64 loads-acquire: nothing shared is written. */
    const pt_code_extra_t *ex = __atomic_load_n((pt_code_extra_t *const *)&code->co_extra, __ATOMIC_ACQUIRE);
    if (ex == NULL || pt_code_extra_index >= ex->ce_size)
        return 0;
    return (uint64_t)(uintptr_t)__atomic_load_n(&ex->ce_extras[pt_code_extra_index], __ATOMIC_ACQUIRE);
#else
    const pt_code_extra_t *ex = (const pt_code_extra_t *)code->co_extra;
    if (ex == NULL || pt_code_extra_index >= ex->ce_size)
        return 0;
    return (uint64_t)(uintptr_t)ex->ce_extras[pt_code_extra_index];
#endif
}

/* The thread context, if it holds a ring in session `epoch` and `extra` (a
 * co_extra value) belongs to that session too; else NULL (slow path). */
static inline pt_thread_t *pt_fast_thread(uint32_t epoch, uint64_t extra)
{
    pt_thread_t *t = pt_tls_thread;
    if (PT_LIKELY(epoch != 0 && (uint32_t)(extra >> 33) == epoch && t != NULL && pt_ok_epoch(t) == epoch))
        return t;
    return NULL;
}

static inline void pt_emit(pt_thread_t *t, uint32_t id, uint8_t kind, uint8_t flags)
{
    /* -ENOBUFS (dropped) is counted by the ring itself */
    (void)pt_ring_push(&t->ring, pt_now(), id, kind, flags, 0);
}

/* Open a frame: record `kind` and push `entry` (id | C bit) on the shadow. */
static inline void pt_open(pt_thread_t *t, uint32_t entry, uint8_t kind, uint8_t flags)
{
    pt_emit(t, entry & ~PT_SHADOW_C_BIT, kind, flags);
    uint32_t d = t->depth;
    if (PT_LIKELY(d < PT_SHADOW_CAPACITY))
        t->shadow[d] = entry;
    t->depth = d + 1;
}

/* Close the frame `entry` (id | C bit) with record `kind`. The frame is
 * normally on top of the shadow; anything else goes to pt_close_slow. */
static inline void pt_close(pt_thread_t *t, uint32_t entry, uint8_t kind)
{
    uint32_t d = t->depth;
    if (PT_LIKELY(d - 1u < PT_SHADOW_CAPACITY && t->shadow[d - 1u] == entry)) {
        pt_emit(t, entry & ~PT_SHADOW_C_BIT, kind, 0);
        t->depth = d - 1u; /* `prior` is kept by the frame-evaluation adapter, its only reader */
        return;
    }
    pt_close_slow(t, entry, kind);
}

/* A Python frame of `code` was entered (kind Call or Resume). Returns 1 if the
 * code is filtered out (3.12+: the callback may return DISABLE), else 0. */
static inline int pt_py_open(PyCodeObject *code, uint8_t kind, uint8_t flags)
{
    uint64_t extra = pt_code_extra(code);
    pt_thread_t *t = pt_fast_thread(pt_epoch_now(), extra);
    if (PT_LIKELY(t != NULL && !(extra & PT_XTRA_FILTERED))) {
        pt_open(t, (uint32_t)extra, kind, flags);
        return 0;
    }
    return pt_py_open_slow(code, kind, flags, 1);
}

/* A Python frame of `code` was left (Return, Yield, Unwind). Returns 1 if the
 * code is filtered out. */
static inline int pt_py_close(PyCodeObject *code, uint8_t kind)
{
    uint64_t extra = pt_code_extra(code);
    pt_thread_t *t = pt_fast_thread(pt_epoch_now(), extra);
    if (PT_LIKELY(t != NULL && !(extra & PT_XTRA_FILTERED))) {
        pt_close(t, (uint32_t)extra, kind);
        return 0;
    }
    return pt_py_close_slow(code, kind);
}

/* The PyMethodDef of a C callable we trace, or NULL. Exact type tests, not
 * PyCFunction_Check (a subtype walk for every Python callee): the builtin
 * function type cannot be subclassed, and PyCMethod_Type is its only subtype. */
static inline const PyMethodDef *pt_cfunc_def(PyObject *callable)
{
    PyTypeObject *tp = Py_TYPE(callable);
    if (tp == &PyCFunction_Type || tp == &PyCMethod_Type)
        return ((PyCFunctionObject *)callable)->m_ml;
    if (tp == &PyMethodDescr_Type)
        return ((PyMethodDescrObject *)callable)->d_method;
    return NULL;
}

static inline uint32_t pt_ccache_slot(const PyMethodDef *def)
{
    /* PyMethodDef tables are arrays of 32-byte entries */
    uintptr_t p = (uintptr_t)def;
    return (uint32_t)((p >> 5) ^ (p >> 13)) & (PT_CCACHE_SIZE - 1u);
}

/* A C function `callable` (with PyMethodDef `def`) was called (CCall) or left
 * (CReturn, CUnwind) from Python code `caller`. `self_arg`: the call's first
 * argument when `callable` is a method descriptor (sys.monitoring's arg0), else
 * NULL; used only to name the function on first sight. Returns 1 if the caller
 * is filtered out (its C calls are not recorded), else 0. */
static inline int pt_c_event(PyCodeObject *caller, PyObject *callable, PyObject *self_arg,
                             const PyMethodDef *def, uint8_t kind)
{
    uint32_t epoch = pt_epoch_now();
    uint64_t extra = pt_code_extra(caller);
    pt_thread_t *t = pt_fast_thread(epoch, extra);
    if (PT_LIKELY(t != NULL && !(extra & PT_XTRA_FILTERED))) {
        const pt_ccache_entry_t *e = &t->ccache[pt_ccache_slot(def)];
        if (PT_LIKELY(e->def == def && (uint32_t)(e->value >> 32) == epoch)) {
            uint32_t entry = (uint32_t)e->value | PT_SHADOW_C_BIT;
            if (kind == PT_EV_CCALL)
                pt_open(t, entry, kind, 0);
            else
                pt_close(t, entry, kind);
            return 0;
        }
    }
    return pt_c_event_slow(caller, callable, self_arg, def, kind);
}

#endif /* PT_RUNTIME_TRACER_INLINE_H */
