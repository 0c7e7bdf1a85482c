/*
 * What the three files of the core share: pt_session.c (start/stop, options,
 * counters, errors, heartbeat, fork, hook registry), pt_threads.c (thread
 * contexts, ring claim, shadow stack, slow paths of the hot path) and
 * pt_symbols.c (interning of code objects, C functions and labels). Not for the
 * hook adapters or the module glue: they use pt_tracer.h and pt_tracer_inline.h.
 *
 * pt_core holds the state more than one of them touches; each file keeps the
 * rest static. Locking as in pt_session.c's design summary: the GIL, and
 * pt_core.lock for what runs without it.
 */
#ifndef PT_RUNTIME_TRACER_INTERNAL_H
#define PT_RUNTIME_TRACER_INTERNAL_H

#include "pt_tracer_inline.h"

#include <pthread.h>

#include "shm/clock.h"
#include "shm/segment.h"

#if PY_VERSION_HEX < 0x030A0000
#error "_pytrace needs CPython 3.10 or newer"
#endif

/* Exception save/restore around Python work inside a hook. */
#if PY_VERSION_HEX >= 0x030C0000
#define PT_EXC_SAVE PyObject *saved_exc_ = PyErr_GetRaisedException()
#define PT_EXC_RESTORE PyErr_SetRaisedException(saved_exc_)
#else
#define PT_EXC_SAVE                                                                                \
    PyObject *saved_t_, *saved_v_, *saved_tb_;                                                     \
    PyErr_Fetch(&saved_t_, &saved_v_, &saved_tb_)
#define PT_EXC_RESTORE PyErr_Restore(saved_t_, saved_v_, saved_tb_)
#endif

typedef struct pt_core {
    pt_segment_t *seg;              /* current or last session's segment (pt_session.c) */
    pt_clock_t clock;               /* the session's clock (pt_session.c) */
    pt_options_t opts;              /* the session's options (pt_session.c; pt_threads.c
                                       clears stack_skip_thread once used) */
    pthread_mutex_t lock;           /* thread list, seg lifetime, the counters below */
    uint64_t retired_written, retired_dropped; /* of rings retired this session (pt_threads.c) */
    uint64_t threads_seen;          /* threads that claimed a ring this session (pt_threads.c) */
} pt_core_t;

PT_HIDDEN extern pt_core_t pt_core;

/* Interning on first sight (pt_symbols.c): with the GIL, the GIL serialises it; free-threaded,
 * pt_intern_mutex does, so two threads seeing a code object or C function first at once append
 * one symbol, not two. A PyMutex parks detached (a stop-the-world never waits on a thread
 * blocked here); held only around C work (no Python call inside); reset in a fork child. */
#ifdef Py_GIL_DISABLED
PT_HIDDEN extern PyMutex pt_intern_mutex;
#define PT_INTERN_LOCK() PyMutex_Lock(&pt_intern_mutex)
#define PT_INTERN_UNLOCK() PyMutex_Unlock(&pt_intern_mutex)
#else
#define PT_INTERN_LOCK() ((void)0)
#define PT_INTERN_UNLOCK() ((void)0)
#endif

/* ---- pt_session.c ---- */

/* Keep the first error of the session (sticky; the first text wins). Any thread. */
PT_HIDDEN void pt_tracer_set_first_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* What identifies a running frame to the session's hook adapter (pt_prior_frame_t). */
PT_HIDDEN const void *pt_tracer_frame_key(PyFrameObject *frame);

/* ---- pt_threads.c ---- */

/* pthread key whose destructor retires an ending thread's ring. Once. */
PT_HIDDEN int pt_threads_init(char *err, size_t errlen);
/* Close every open frame of every thread holding a ring of session `epoch` and
 * retire the rings (pt_core.lock and the GIL held, or one thread left). */
PT_HIDDEN void pt_threads_finish_locked(uint32_t epoch);
/* Add the events written and dropped by the rings of session `epoch` that are
 * still held (pt_core.lock and the GIL held). */
PT_HIDDEN void pt_threads_add_counters_locked(uint32_t epoch, uint64_t *written, uint64_t *dropped);
/* Heartbeat (no GIL): send the owners of rings whose reader asked for the stack
 * to the ring's slow path. Takes pt_core.lock. */
PT_HIDDEN void pt_threads_serve_stack_requests(uint32_t epoch);
/* Heartbeat (no GIL), about every 10 ms: ask every thread holding a ring of
 * session `epoch` for a CPU sample at its next push. Takes pt_core.lock. */
PT_HIDDEN void pt_threads_request_cpu_samples(uint32_t epoch);
/* Fork child: free the contexts of the threads that did not come along and
 * reset the calling thread's (one thread left). */
PT_HIDDEN void pt_threads_after_fork_child(void);

/* ---- pt_symbols.c ---- */

/* co_extra index and the C-function table. Once. */
PT_HIDDEN int pt_symbols_init(char *err, size_t errlen);
/* The symbol id of a C function in session `epoch`, interned on first sight (may
 * run Python: see pt_code_lookup). 0 if interning failed (counted). */
PT_HIDDEN uint32_t pt_symbols_cfunc_id(PyObject *callable, PyObject *self_arg, const PyMethodDef *def,
                                       uint32_t epoch);
/* UTF-8 text of a str object, or `fallback` (no exception left behind). */
PT_HIDDEN const char *pt_utf8_or(PyObject *s, const char *fallback);

#endif /* PT_RUNTIME_TRACER_INTERNAL_H */
