/*
 * _pytrace internal API: the process-wide tracer (the core) as seen by the
 * module glue (module.c), the hook adapters and the Reader type (reader_type.c).
 *
 * The core behind it is split by concern: pt_session.c (start/stop, options,
 * counters, errors, heartbeat, fork, the hook adapters' registry), pt_threads.c
 * (thread contexts, ring claim, shadow stack, the hot path's slow paths) and
 * pt_symbols.c (code and C-function interning, co_extra, labels); what they share
 * is in pt_tracer_internal.h, the hot path in pt_tracer_inline.h.
 *
 * Everything here is called with the GIL held unless a comment says otherwise.
 * Functions return 0 or a negative errno; on failure `err` holds one line a
 * person can act on.
 */
#ifndef PT_RUNTIME_TRACER_H
#define PT_RUNTIME_TRACER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>

#include "shm/layout.h"

#if defined(__GNUC__)
#define PT_HIDDEN __attribute__((visibility("hidden")))
#else
#define PT_HIDDEN
#endif

#define PT_HAVE_MONITORING (PY_VERSION_HEX >= 0x030C0000)

/* Free-threaded builds (Py_GIL_DISABLED, 3.14t) are supported: pt_session.c's design summary
 * and the README's "Free-threaded Python" say what protects each shared structure there. */

/* Options of start(); strings are owned by the tracer after pt_tracer_start. */
typedef struct pt_options {
    int c_calls;
    uint32_t policy;            /* enum pt_drop_policy */
    uint32_t ring_count;
    uint32_t chunk_bytes;
    uint32_t chunks_per_ring;
    uint64_t symlog_bytes;
    uint64_t wait_timeout_ns;
    int clock_kind;             /* -1 auto, else enum pt_clock_kind */
    char *cmdline;              /* malloc'd, may be NULL */
    char **include;             /* malloc'd NULL-terminated vectors, may be NULL */
    char **exclude;
    char **hide;                /* files (path prefixes) that never produce events, whatever
                                   include says: pytrace's own runtime (launcher, API) */
    unsigned long stack_skip_thread; /* ident of the thread whose frames running at start
                                   are not recorded (0: none): a launcher's own caller chain */
    int fork_untraced;          /* a fork() child is not traced (its hooks are removed): no
                                   reader would take its segment, and under policy wait its
                                   threads would wait on full rings */
    uint64_t exit_wait_ns;      /* at exit, a segment with events that no reader holds waits
                                   up to this long for one (0: not at all): the hub of a
                                   process tree, which finds a child only once it runs */
} pt_options_t;

typedef struct pt_counters {
    uint64_t events_written, events_dropped, hook_errors, symbols, symbols_dropped, threads,
        threads_untraced, tracing_displaced, events_untraced;
    char segment[96];
    char first_error[256];      /* "" if none */
} pt_counters_t;

/* One-time process setup (atexit, fork handlers, C-function table). Called by
 * the module's exec slot; idempotent. */
PT_HIDDEN int pt_tracer_global_init(char *err, size_t errlen);

/* Start tracing into a new segment. Takes ownership of opts' strings (also on
 * failure). -EALREADY if tracing; segment errors as in shm/segment.h. The
 * hook is installed by the caller through pt_tracer_hooks_install after this
 * returns 0. */
PT_HIDDEN int pt_tracer_start(pt_options_t *opts, char *err, size_t errlen);

/* Close every open frame on every thread (synthetic records), retire rings,
 * state = STOPPED. Hooks must already be removed. -ENOENT if not tracing. */
PT_HIDDEN int pt_tracer_stop(pt_counters_t *out);

/* After stop: let the stopped session's segment go now rather than at the
 * next start or at exit (pytrace detach). Unlinked at once; with a reader
 * attached it is marked EXITED instead, so the reader ends its stream and
 * unlinks it. -EBUSY while tracing, -ENOENT if there is no segment. */
PT_HIDDEN int pt_tracer_release(void);

PT_HIDDEN int pt_tracer_is_tracing(void);
PT_HIDDEN const char *pt_tracer_segment_name(void); /* NULL if no segment */
PT_HIDDEN void pt_tracer_counters(pt_counters_t *out);
PT_HIDDEN const pt_options_t *pt_tracer_options(void);

/* Labels and user records (no-ops when not tracing). pt_tracer_intern_label may
 * also be called without the GIL between pt_foreign_enter and pt_foreign_leave
 * (the symbol log takes its own lock). */
PT_HIDDEN int pt_tracer_intern_label(const char *name, uint32_t *id_out);
PT_HIDDEN void pt_tracer_user_event(uint32_t label_id, uint8_t kind);
/* The same with Event.flags (a Mark with PT_EVF_STEP ends a step of the program's loop). */
PT_HIDDEN void pt_tracer_user_event_flags(uint32_t label_id, uint8_t kind, uint8_t flags);

/* Records from threads that may not hold the GIL (pt_threads.c): a record source
 * outside the interpreter's hooks (the ITT collector, pt_itt.c), on any thread --
 * a Python thread inside a call that released the GIL, or a thread that never ran
 * Python. pt_foreign_enter returns the calling thread's context with its ring in
 * the current session, claiming one on the thread's first record (a thread without
 * Python is named from its OS name and said to be native), and holds the thread's
 * writer flag: stop() and counters() wait for it before they touch the ring from
 * another thread, and once stop() has begun the flag is refused. NULL: not tracing,
 * or no ring (counted as for any thread). Between enter and leave: ring writes
 * (pt_emit) and pt_tracer_intern_label only -- no Python, no pt_core.lock. */
struct pt_thread;
PT_HIDDEN struct pt_thread *pt_foreign_enter(void);
PT_HIDDEN void pt_foreign_leave(struct pt_thread *t);

/* Before the process leaves through _exit() (os._exit: no exit handler runs):
 * stop, publish everything, mark the segment EXITED and let it go, as the
 * Py_AtExit handler does. Holding the GIL; nothing may be traced after it. */
PT_HIDDEN void pt_tracer_exit_now(void);
/* The process's role in its job (multiprocessing name, DataLoader worker) into
 * the segment header; 0, or -ENOENT when not tracing. */
PT_HIDDEN int pt_tracer_set_role(const char *role);

/* Fork: the child drops the parent's segment and starts its own. */
PT_HIDDEN void pt_tracer_after_fork_child(void);
/* 1 between fork() in a traced child and pt_tracer_after_fork_child(). */
PT_HIDDEN int pt_tracer_fork_pending(void);
/* os.register_at_fork(before=...) / (after_in_parent=...) */
PT_HIDDEN void pt_tracer_before_fork(void);
PT_HIDDEN void pt_tracer_after_fork_parent(void);

/* Record a hook failure (sticky; first text kept). Safe from any thread. */
PT_HIDDEN void pt_tracer_fail(const char *what);
/* The program took the profile hook of one thread over (sys.setprofile,
 * cProfile), or held it when tracing started: that thread is not traced from
 * here on. Counted in the header (tracing_displaced); `how` is kept as the
 * first error if none came before. this_thread: it is the calling thread,
 * whose open frames are closed now (synthetic records), so none of them runs
 * on in the picture after its returns stopped being seen. GIL held. */
PT_HIDDEN void pt_tracer_displaced(const char *how, int this_thread);
/* If another tool took the session's hook over (pt_hook_ops_t.intact), report
 * it (once per session). Called by the heartbeat thread (no GIL) and by stop(). */
PT_HIDDEN void pt_tracer_check_hook(void);

/* ---- hook adapters ---------------------------------------------------------
 *
 * How the interpreter's events reach the core entries (pt_py_open, pt_py_close,
 * pt_c_event in pt_tracer_inline.h). An adapter (pt_monitoring.c: sys.monitoring,
 * 3.12+; pt_evalframe.c: frame evaluation, 3.11 without C calls; pt_profile.c:
 * PyEval_SetProfile, 3.10/3.11) registers one table with the core; the core (this
 * header, pt_session.c, pt_threads.c, pt_symbols.c) calls an adapter only through
 * it and never names an adapter's function (tests/unit/layers checks that). */
typedef struct pt_hook_ops {
    /* What the hook is called in counters()["hook"] while it is in place. */
    const char *name;
    /* Take the interpreter's hook for the session that just started (GIL held).
     * 1: done (also when it could trace nothing: it said so through pt_tracer_fail);
     * 0: not possible here (another tool owns the hook, or c_calls asks for events this
     * hook does not see): the next adapter is tried; -1: error, a Python exception is
     * set and nothing of the adapter stays installed that uninstall would not remove. */
    int (*install)(PyObject *module, int c_calls);
    /* Remove what install set (GIL held); never raises, keeps a pending exception. */
    void (*uninstall)(void);
    /* 1 while the hook is in place (events flow), else 0. */
    int (*active)(void);
    /* NULL if the hook cannot be taken over; else 0 once another tool replaced it while
     * tracing. Called without the GIL (heartbeat thread): a stale answer is fine. */
    int (*intact)(void);
    /* first_error when intact() says 0 (one line: what happened, what to do). */
    const char *replaced_error;
    /* NULL, or what identifies a running frame to this adapter (pt_prior_frame_t.frame);
     * NULL: the frame object itself. */
    const void *(*frame_key)(PyFrameObject *frame);
} pt_hook_ops_t;

/* Add an adapter; start() tries them in the order they were registered. Called by
 * the module's exec slot (GIL held); registering one table twice is a no-op.
 * 0, or -ENOSPC (table full). */
PT_HIDDEN int pt_tracer_hook_register(const pt_hook_ops_t *ops);
/* After pt_tracer_start: install the first registered adapter that accepts. 0, or -1
 * with a Python exception set (the caller stops the session). */
PT_HIDDEN int pt_tracer_hooks_install(PyObject *module, int c_calls);
/* Remove the session's adapter (GIL held). */
PT_HIDDEN void pt_tracer_hooks_uninstall(void);
/* The hook tracing runs on (an adapter's name; after a fall back, both and why), or
 * NULL if none is in place. The string stays valid until the next install. */
PT_HIDDEN const char *pt_tracer_hook_name(void);
/* Called by the session's adapter from inside its hook (GIL held) when it cannot go
 * on: it is uninstalled and the next registered adapter takes the session over (with
 * the session's c_calls); `why` is shown in the hook's name. The pending exception is
 * kept. 0, or -1 if no adapter could take over (the caller reports it). */
PT_HIDDEN int pt_tracer_hook_fall_back(const char *why);

/* co_extra slot of code objects that holds their symbol id (pt_tracer_inline.h). */
PT_HIDDEN extern Py_ssize_t pt_code_extra_index;

/* Result of pt_code_lookup: PT_CODE_FILTERED, or the symbol id. */
#define PT_CODE_FILTERED UINT64_MAX

/* Symbol id of `code` in this session, interned on first sight (may run
 * Python: call it where that is safe, never between two ring writes). */
PT_HIDDEN uint64_t pt_code_lookup(PyCodeObject *code);

/* The core entries the adapters call (pt_py_open, pt_py_close, pt_c_event)
 * are inline, in pt_tracer_inline.h. */

/* Reader type (reader_type.c). */
PT_HIDDEN PyObject *pt_reader_type_create(PyObject *module);
PT_HIDDEN PyObject *pt_list_segments(PyObject *module, PyObject *unused);
PT_HIDDEN PyObject *pt_collect_stale(PyObject *module, PyObject *unused);
PT_HIDDEN PyObject *pt_oserror(int err_neg, const char *msg);
/* Make the heap type of spec and add it to module under the last part of its
 * name ("pytrace._pytrace.HubClient": HubClient). 0, or -1 with an exception. */
PT_HIDDEN int pt_add_type(PyObject *module, PyType_Spec *spec);

#endif /* PT_RUNTIME_TRACER_H */
