/*
 * pt_session: the process-wide tracer behind _pytrace -- its sessions, options,
 * counters and errors, the heartbeat thread, fork and exit, and the registry of
 * hook adapters.
 *
 * Design summary
 *
 *   One tracing session at a time per process, so the tracer is a static
 *   singleton (`g` here, `pt_core` for what pt_threads.c and pt_symbols.c
 *   share): hooks, pthread-key destructors and Py_AtExit handlers have no
 *   module object to find state through. The module keeps only Python objects
 *   (labels, callbacks) in its module state.
 *
 *   Sessions are numbered by `pt_hot.epoch` (0 = not tracing). Every cached fact is
 *   tagged with the epoch it belongs to, so a new start() (new segment, new
 *   symbol ids) invalidates all caches at once without visiting them:
 *     - a code object's co_extra slot holds epoch<<33 | filtered<<32 | id;
 *     - a C function's rculfhash node, and each thread's cache of C function ids
 *       in front of it, hold epoch<<32 | id (pt_symbols.c);
 *     - a thread context's ok_epoch says its ring belongs to this session
 *       (pt_threads.c).
 *
 *   Concurrency. Hooks run with the GIL held, and so do start(), stop() and the
 *   fork handler; that is what makes the hot path lock-free and lets stop()
 *   write closing records into other threads' rings (their owners cannot be
 *   inside a hook while we hold the GIL, and with the epoch reset they never
 *   touch those rings again). Free-threaded (3.14t) there is no GIL to hold: stop()
 *   resets the epoch first and stops the world (stop_the_world), which waits for every
 *   hook that read the old epoch to finish its write; interning on first sight takes
 *   pt_intern_mutex (pt_tracer_internal.h); co_extra is read with acquire loads as
 *   CPython's own GetExtra does. Code that runs without the GIL -- the thread
 *   destructor, the Py_AtExit handler, the heartbeat thread -- takes
 *   pt_core.lock, as do the GIL holders when they touch the thread list or the
 *   segment's lifetime. A record source outside the hooks (pt_foreign_enter, the
 *   ITT collector) may write without the GIL, from threads that never ran Python:
 *   it holds its thread's writer flag while it writes, and stop() / counters() take
 *   that flag before they touch the thread's ring (pt_threads.c).
 *
 *   The cold paths (first sight of a code object or thread) call the Python
 *   C API, and a GC run there may execute arbitrary Python, even stop(). So
 *   every cold path does its Python work first, then re-checks the epoch,
 *   then writes to the ring with no Python call in between.
 *
 *   Hooks. The core never calls an adapter by name: each adapter registers a
 *   pt_hook_ops_t (pt_tracer.h), start() installs the first that accepts, and
 *   an adapter that cannot go on hands the session to the next one
 *   (pt_tracer_hook_fall_back).
 *
 *   The hot path is inline, in pt_tracer_inline.h; its slow paths are in
 *   pt_threads.c. The heartbeat thread (every 100 ms, no GIL) also serves
 *   readers' stack requests (shm/ring.h): it only lowers the ring limit of the
 *   thread concerned, whose next event writes the stack. Every 10 ms it asks
 *   each traced thread for a CPU sample the same way (a CpuTime record at
 *   the thread's next event; shm/ring.h "CPU time").
 */
#include "pt_tracer_internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PT_HEARTBEAT_NS 100000000ull   /* 100 ms: liveness, stack requests, the hook check */
#define PT_CPU_SAMPLE_NS 10000000ull   /* 10 ms: CPU samples asked of every traced thread */
#define PT_HOOK_ADAPTERS_MAX 4

static struct {
    uint32_t last_epoch;            /* last one handed out */
    _Atomic int first_error_set;
    char first_error[256];
    /* heartbeat */
    pthread_t hb_thread;
    int hb_running;
    pthread_mutex_t hb_lock;
    pthread_cond_t hb_cond;
    int hb_stop;
    _Atomic int hook_lost;          /* a replaced hook was reported this session */
    int initialised;
    /* fork: the child was tracing when fork() returned (set by the C atfork
     * child handler, consumed by the Python after_in_child hook) */
    int fork_resume;
    /* hook adapters, in the order start() tries them */
    const pt_hook_ops_t *hooks[PT_HOOK_ADAPTERS_MAX];
    size_t hook_count;
    /* the session's adapter (also read by the heartbeat thread: pt_tracer_check_hook) */
    _Atomic(const pt_hook_ops_t *) hook;
    PyObject *hook_module;          /* strong: what install was given, for a fall back */
    int hook_c_calls;
    char hook_name[192];            /* "A, then B (why)" after a fall back, else "" */
} g = {
    .hb_lock = PTHREAD_MUTEX_INITIALIZER,
    .hb_cond = PTHREAD_COND_INITIALIZER,
};

pt_core_t pt_core = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};
pt_hot_t pt_hot;

/* ---- errors -------------------------------------------------------------- */

void pt_tracer_set_first_error(const char *fmt, ...)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong_explicit(&g.first_error_set, &expected, 1,
                                                 memory_order_acq_rel, memory_order_relaxed))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g.first_error, sizeof g.first_error, fmt, ap);
    va_end(ap);
    /* release: the text is complete before readers see 2; pairs with the
     * acquire in copy_counters() */
    atomic_store_explicit(&g.first_error_set, 2, memory_order_release);
}

void pt_tracer_fail(const char *what)
{
    pt_segment_t *seg = pt_core.seg;
    if (seg)
        /* relaxed: a statistic */
        atomic_fetch_add_explicit(&pt_segment_header(seg)->hook_errors, 1, memory_order_relaxed);
    pt_tracer_set_first_error("%s", what);
}

void pt_tracer_displaced(const char *how, int this_thread)
{
    pt_thread_t *t = pt_tls_thread;
    uint32_t epoch = pt_epoch_now();
    /* the owner, with the GIL, outside any hook: its ring is ours to write */
    if (this_thread && t != NULL && epoch != 0 && pt_ok_epoch(t) == epoch)
        pt_close_synthetic_above(t, 0);
    pt_segment_t *seg = pt_core.seg;
    if (seg)
        /* relaxed: a statistic */
        atomic_fetch_add_explicit(&pt_segment_header(seg)->tracing_displaced, 1, memory_order_relaxed);
    pt_tracer_set_first_error("%s", how);
}

void pt_tracer_check_hook(void)
{
    const pt_hook_ops_t *ops = atomic_load_explicit(&g.hook, memory_order_acquire); /* see session_hook */
    if (ops == NULL || ops->intact == NULL || ops->intact())
        return;
    /* relaxed: only makes the report once per session */
    if (atomic_exchange_explicit(&g.hook_lost, 1, memory_order_relaxed) == 0)
        pt_tracer_fail(ops->replaced_error);
}

/* ---- hook adapters ------------------------------------------------------- */

int pt_tracer_hook_register(const pt_hook_ops_t *ops)
{
    for (size_t i = 0; i < g.hook_count; i++)
        if (g.hooks[i] == ops)
            return 0;
    if (g.hook_count == PT_HOOK_ADAPTERS_MAX)
        return -ENOSPC;
    g.hooks[g.hook_count++] = ops;
    return 0;
}

static const pt_hook_ops_t *session_hook(void)
{
    /* acquire: pairs with the release in set_session_hook (the tables are
     * constant; this only keeps the heartbeat thread's read well defined) */
    return atomic_load_explicit(&g.hook, memory_order_acquire);
}

static void set_session_hook(const pt_hook_ops_t *ops)
{
    atomic_store_explicit(&g.hook, ops, memory_order_release);
}

/* Install the adapters from index `first` on until one accepts (the session's
 * adapter is then that one). 1, 0 (none accepted), or -1 (exception set). */
static int install_from(size_t first)
{
    for (size_t i = first; i < g.hook_count; i++) {
        set_session_hook(g.hooks[i]);
        int rc = g.hooks[i]->install(g.hook_module, g.hook_c_calls);
        if (rc != 0)
            return rc;
    }
    set_session_hook(NULL);
    return 0;
}

int pt_tracer_hooks_install(PyObject *module, int c_calls)
{
    Py_XSETREF(g.hook_module, Py_NewRef(module));
    g.hook_c_calls = c_calls;
    g.hook_name[0] = '\0';
    int rc = install_from(0);
    if (rc == 0)
        PyErr_SetString(PyExc_RuntimeError, "no hook adapter can trace this interpreter");
    return rc > 0 ? 0 : -1;
}

void pt_tracer_hooks_uninstall(void)
{
    const pt_hook_ops_t *ops = session_hook();
    if (ops != NULL)
        ops->uninstall();
}

const char *pt_tracer_hook_name(void)
{
    const pt_hook_ops_t *ops = session_hook();
    if (ops == NULL || !ops->active())
        return NULL;
    return g.hook_name[0] ? g.hook_name : ops->name;
}

int pt_tracer_hook_fall_back(const char *why)
{
    const pt_hook_ops_t *from = session_hook();
    size_t next = g.hook_count;
    for (size_t i = 0; i < g.hook_count; i++)
        if (g.hooks[i] == from)
            next = i + 1;
    if (from == NULL || next >= g.hook_count)
        return -1;
    from->uninstall();
    snprintf(g.hook_name, sizeof g.hook_name, "%s, then %s (%s)", from->name, g.hooks[next]->name, why);
    PT_EXC_SAVE; /* a frame may be entered with an exception (throw) */
    int rc = install_from(next);
    if (rc < 0)
        PyErr_Clear();
    PT_EXC_RESTORE;
    return rc > 0 ? 0 : -1;
}

const void *pt_tracer_frame_key(PyFrameObject *frame)
{
    const pt_hook_ops_t *ops = session_hook();
    if (ops != NULL && ops->frame_key != NULL)
        return ops->frame_key(frame);
    return frame;
}

/* ---- heartbeat --------------------------------------------------------------- */

static void *heartbeat_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g.hb_lock);
    uint64_t now = pt_monotonic_ns();
    uint64_t next_sample = now + PT_CPU_SAMPLE_NS, next_beat = now + PT_HEARTBEAT_NS;
    while (!g.hb_stop) {
        uint64_t wake = next_sample < next_beat ? next_sample : next_beat;
        struct timespec ts = {.tv_sec = (time_t)(wake / 1000000000ull), .tv_nsec = (long)(wake % 1000000000ull)};
        pthread_cond_timedwait(&g.hb_cond, &g.hb_lock, &ts);
        if (g.hb_stop)
            break;
        now = pt_monotonic_ns();
        if (now >= next_sample) {
            if (pt_core.seg)
                pt_threads_request_cpu_samples(pt_epoch_now());
            next_sample += PT_CPU_SAMPLE_NS;
            if (next_sample <= now) /* fell behind (a stopped process): no burst */
                next_sample = now + PT_CPU_SAMPLE_NS;
        }
        if (now < next_beat)
            continue;
        next_beat += PT_HEARTBEAT_NS;
        if (next_beat <= now)
            next_beat = now + PT_HEARTBEAT_NS;
        if (pt_core.seg) {
            pt_segment_heartbeat(pt_core.seg); /* seg is replaced only after we are joined */
            pt_threads_serve_stack_requests(pt_epoch_now());
        }
        pt_tracer_check_hook();
    }
    pthread_mutex_unlock(&g.hb_lock);
    return NULL;
}

/* (Re)initialise the heartbeat's lock and condition variable: once at
 * startup and in a fork child, where the parent's copies may have a waiter
 * (the parent's heartbeat thread) recorded in them. Never destroy them there:
 * pthread_cond_destroy would wait for that waiter forever. */
static void heartbeat_sync_init(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    memset(&g.hb_cond, 0, sizeof g.hb_cond);
    pthread_cond_init(&g.hb_cond, &attr);
    pthread_condattr_destroy(&attr);
    memset(&g.hb_lock, 0, sizeof g.hb_lock);
    pthread_mutex_init(&g.hb_lock, NULL);
}

static int heartbeat_start(void)
{
    g.hb_stop = 0;
    /* block all signals in the helper: they belong to the Python main thread */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&g.hb_thread, NULL, heartbeat_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return -rc;
    g.hb_running = 1;
    return 0;
}

static void heartbeat_stop(void)
{
    if (!g.hb_running)
        return;
    pthread_mutex_lock(&g.hb_lock);
    g.hb_stop = 1;
    pthread_cond_signal(&g.hb_cond);
    pthread_mutex_unlock(&g.hb_lock);
    pthread_join(g.hb_thread, NULL);
    g.hb_running = 0;
}

/* ---- SIGTERM from the parent ------------------------------------------------------ */

/* multiprocessing ends its workers with SIGTERM: Pool.terminate() (and a `with
 * Pool` block's end) of idle workers, Process.terminate(). Its default action
 * ends the process at once, no exit handler runs, and the segment would read as
 * "died" -- a crash. A traced process whose SIGTERM is still the default gets a
 * handler that, when the signal comes from its parent, marks the segment as ended
 * by that signal (end_signal, end_signal_pid) and EXITED: what it published is
 * all there is; open frames are closed by the reader at the last record, as for a
 * process that died. Then the default action is back (SA_RESETHAND) and the signal
 * raised again: the process ends by SIGTERM as it would have (same exit status
 * for its parent). A SIGTERM from anyone else is left a death. Async-signal-safe:
 * atomic stores, clock_gettime (the heartbeat), getppid, raise. Python never sees
 * the handler (signal.getsignal still says SIG_DFL), and a program that sets its
 * own SIGTERM handler replaces it. */
static _Atomic(pt_segment_t *) g_term_seg; /* the session's segment, NULL when none */

static void term_handler(int sig, siginfo_t *info, void *uctx)
{
    (void)uctx;
    int saved = errno;
    /* relaxed: a pointer published before the handler could run (same thread or
     * the sigaction's own barrier); cleared before the segment is closed */
    pt_segment_t *seg = atomic_load_explicit(&g_term_seg, memory_order_relaxed);
    if (seg && info && info->si_code == SI_USER && info->si_pid == getppid()) {
        pt_seg_header_t *h = pt_segment_header(seg);
        /* relaxed: published by the release store of the state below */
        atomic_store_explicit(&h->end_signal, (uint32_t)sig, memory_order_relaxed);
        atomic_store_explicit(&h->end_signal_pid, (uint64_t)info->si_pid, memory_order_relaxed);
        pt_segment_set_state(seg, PT_STATE_EXITED);
    }
    errno = saved;
    raise(sig); /* SA_RESETHAND: the default action now */
}

static void term_watch(pt_segment_t *seg)
{
    atomic_store_explicit(&g_term_seg, seg, memory_order_relaxed);
    if (seg == NULL)
        return;
    struct sigaction old, sa;
    if (sigaction(SIGTERM, NULL, &old) < 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
        return; /* the program's own handler (or ours already) */
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = term_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGTERM, &sa, NULL);
}

/* ---- segment lifetime ---------------------------------------------------------- */

static int consumer_alive(pt_seg_header_t *h)
{
    /* acquire: pairs with the reader's CAS that takes the lock */
    uint64_t pid = atomic_load_explicit(&h->consumer_pid, memory_order_acquire);
    if (pid == 0)
        return 0;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* Drop the previous (stopped) segment before a new session or at exit:
 * unlink it if no reader is attached, else leave it to the reader. */
static void segment_release_locked(int exiting)
{
    if (pt_core.seg == NULL)
        return;
    term_watch(NULL);
    if (exiting)
        pt_segment_set_state(pt_core.seg, PT_STATE_EXITED);
    pt_seg_header_t *h = pt_segment_header(pt_core.seg);
    int unlink_it = !consumer_alive(h);
    if (!exiting && !unlink_it) {
        /* a reader is attached: it reads to the end of this (stopped) session
         * and unlinks; tell it nothing more will come */
        pt_segment_set_state(pt_core.seg, PT_STATE_EXITED);
    }
    pt_segment_close(pt_core.seg, unlink_it);
    pt_core.seg = NULL;
}

static void free_opts(pt_options_t *o)
{
    free(o->cmdline);
    for (char **p = o->include; p && *p; p++)
        free(*p);
    for (char **p = o->exclude; p && *p; p++)
        free(*p);
    for (char **p = o->hide; p && *p; p++)
        free(*p);
    free(o->include);
    free(o->exclude);
    free(o->hide);
    memset(o, 0, sizeof *o);
}

static void stop_locked(void)
{
    /* free-threaded: pt_tracer_stop reset it already and waited for the hooks */
    atomic_store_explicit(&pt_hot.epoch, 0, memory_order_relaxed);
    pt_threads_finish_locked(g.last_epoch);
}

/* Runs inside fork() in the child, before any Python after-fork hook: from
 * here on the child must not write a byte into the parent's rings (they are
 * still mapped and live in the parent), so tracing is switched off at once.
 * Python hooks registered before ours (random, threading) run next, untraced;
 * our after_in_child hook then gives the child its own segment. */
static void atfork_child(void)
{
    g.fork_resume = pt_epoch_now() != 0;
    /* relaxed: the parent's segment is not the child's to mark */
    atomic_store_explicit(&g_term_seg, NULL, memory_order_relaxed);
    /* relaxed: the child has one thread */
    atomic_store_explicit(&pt_hot.epoch, 0, memory_order_relaxed);
}

/* exit_wait (a child in a process tree that a hub reads): the hub finds a child
 * only once it runs, and a child that ends first would unlink its segment, no
 * reader holding it, with everything it wrote. So a segment with events that no
 * reader holds waits, bounded, for one; a reader that comes takes it over (it
 * reads it to the end and unlinks it). No Python API: runs in at_exit. */
static void copy_counters(pt_counters_t *out);

static void exit_wait_locked(void)
{
    if (pt_core.opts.exit_wait_ns == 0)
        return;
    pt_segment_set_state(pt_core.seg, PT_STATE_EXITED); /* the reader sees the end is there */
    pt_seg_header_t *h = pt_segment_header(pt_core.seg);
    pt_counters_t c;
    copy_counters(&c);
    if (c.events_written == 0)
        return; /* nothing to read: the hub does not take such a segment */
    uint64_t deadline = pt_monotonic_ns() + pt_core.opts.exit_wait_ns;
    while (!consumer_alive(h) && pt_monotonic_ns() < deadline) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Does a live reader that reads our process tree (a hub with --subprocesses)
 * hold the segment? Then our dead children's segments are its to read. */
static int tree_reader_holds(pt_seg_header_t *h)
{
    /* acquire: pairs with the reader's release store of the flag */
    return atomic_load_explicit(&h->consumer_reads_children, memory_order_acquire) != 0 && consumer_alive(h);
}

/* End the session as the process ends (exit, exec): closed frames, state
 * Exited, the bounded wait for a hub (exit_wait), the segment removed unless a
 * reader holds it. No Python API. Returns whether it was tracing; *tree_held
 * (may be NULL): whether a reader of the process tree held it at the end. */
static int end_for_exit(int *tree_held)
{
    heartbeat_stop();
    pthread_mutex_lock(&pt_core.lock);
    int traced = pt_core.seg != NULL;
    if (traced) {
        if (pt_epoch_now() != 0)
            stop_locked();
        exit_wait_locked();
        if (tree_held)
            *tree_held = tree_reader_holds(pt_segment_header(pt_core.seg));
        segment_release_locked(1);
    }
    pthread_mutex_unlock(&pt_core.lock);
    return traced;
}

static void at_exit(void)
{
    /* Runs after the interpreter is gone: no Python API here. */
    int tree_held = 0;
    int traced = end_for_exit(&tree_held);
    /* Fork children that left with _exit() (multiprocessing workers do), or were
     * killed (a Pool's terminate()), and that no reader holds would otherwise
     * stay in /dev/shm for good. Not while a reader of the tree holds us: it
     * reads them to the end and removes them, and one it has not found yet
     * (a worker killed just after it started) would be lost, uncounted. */
    if (traced && !tree_held)
        (void)pt_segment_collect_children((uint64_t)getpid());
}

/* exec() replaces the process image: no exit handler runs, and the segment of a
 * `pytrace run` job (no reader to unlink it) would stay in /dev/shm for good. The
 * "os.exec" audit event (os.execv/os.execve, so every os.exec*) comes just before:
 * end the session as at exit -- closed frames, state Exited, the bounded wait for a
 * hub (exit_wait), removed unless a reader holds it. An audit hook changes nothing
 * the program sees (os.execv stays what it was). If the exec fails, the program goes
 * on untraced. Runs with the GIL held; must not raise. */
static int g_exec_hook_added;

static int exec_audit_hook(const char *event, PyObject *args, void *data)
{
    (void)args;
    (void)data;
    if (event[0] != 'o' || strcmp(event, "os.exec") != 0)
        return 0;
    (void)end_for_exit(NULL);
    return 0;
}

/* ---- public --------------------------------------------------------------------- */

int pt_tracer_set_role(const char *role)
{
    pthread_mutex_lock(&pt_core.lock);
    int traced = pt_core.seg != NULL;
    if (traced)
        pt_segment_set_role(pt_core.seg, role);
    pthread_mutex_unlock(&pt_core.lock);
    return traced ? 0 : -ENOENT;
}

void pt_tracer_exit_now(void)
{
    /* os._exit() runs no Py_AtExit handler: finish as at_exit does, the process
     * leaving on purpose (EXITED), not vanished (DEAD). */
    at_exit();
}

int pt_tracer_global_init(char *err, size_t errlen)
{
    if (g.initialised)
        return 0;
    heartbeat_sync_init();
    int rc = pt_symbols_init(err, errlen); /* also liburcu's fork handlers, first */
    if (rc < 0)
        return rc;
    rc = pt_threads_init(err, errlen);
    if (rc < 0)
        return rc;
    pthread_atfork(NULL, NULL, atfork_child);
    if (Py_AtExit(at_exit) < 0) {
        snprintf(err, errlen, "cannot register the exit handler (Py_AtExit table full)");
        return -ENOSPC;
    }
    g.initialised = 1;
    return 0;
}

static int create_segment(char *err, size_t errlen)
{
    pt_segment_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.ring_count = pt_core.opts.ring_count;
    cfg.chunk_bytes = pt_core.opts.chunk_bytes;
    cfg.chunks_per_ring = pt_core.opts.chunks_per_ring;
    cfg.symlog_bytes = pt_core.opts.symlog_bytes;
    cfg.drop_policy = pt_core.opts.policy;
    cfg.wait_timeout_ns = pt_core.opts.wait_timeout_ns;
    cfg.cmdline = pt_core.opts.cmdline;
    char version[PT_PYVERSION_BYTES];
    snprintf(version, sizeof version, "%s", Py_GetVersion());
    char *sp = strchr(version, ' ');
    if (sp)
        *sp = '\0';
    cfg.python_version = version;
    cfg.clock_kind = pt_core.clock.kind;
    cfg.ticks_per_second = pt_core.clock.ticks_per_second;
    cfg.base_ticks = pt_core.clock.base_ticks;
    cfg.base_monotonic_ns = pt_core.clock.base_monotonic_ns;
    cfg.base_realtime_ns = pt_core.clock.base_realtime_ns;
    return pt_segment_create(&cfg, &pt_core.seg, err, errlen);
}

static int begin_session(char *err, size_t errlen)
{
    int rc = create_segment(err, errlen);
    if (rc < 0)
        return rc;
    pt_core.retired_written = pt_core.retired_dropped = pt_core.threads_seen = 0;
    atomic_store_explicit(&g.hook_lost, 0, memory_order_relaxed);
    atomic_store_explicit(&g.first_error_set, 0, memory_order_relaxed);
    g.first_error[0] = '\0';
    if (++g.last_epoch >= (1u << 31) || g.last_epoch == 0)
        g.last_epoch = 1; /* 31 bits in co_extra; wrapping after 2^31 sessions is harmless
                             only if no code object survived them all -- accepted */
    rc = heartbeat_start();
    if (rc < 0) {
        snprintf(err, errlen, "cannot start the heartbeat thread: %s", strerror(-rc));
        pt_segment_close(pt_core.seg, 1);
        pt_core.seg = NULL;
        return rc;
    }
    atomic_store_explicit(&pt_hot.epoch, g.last_epoch, memory_order_relaxed);
    term_watch(pt_core.seg);
    return 0;
}

int pt_tracer_start(pt_options_t *opts, char *err, size_t errlen)
{
    if (pt_epoch_now() != 0) {
        free_opts(opts);
        snprintf(err, errlen, "already tracing into %s; call stop() first",
                 pt_core.seg ? pt_segment_name(pt_core.seg) : "?");
        return -EALREADY;
    }
    if (!g_exec_hook_added) {
        /* once for the process (audit hooks cannot be removed); a program's own
         * audit hook may refuse it: then exec leaves the segment, as before */
        if (PySys_AddAuditHook(exec_audit_hook, NULL) == 0)
            g_exec_hook_added = 1;
        PyErr_Clear();
    }
    int rc = pt_clock_init(&pt_core.clock, opts->clock_kind);
    pt_hot.clock_kind = pt_core.clock.kind;
    pt_hot.filtering = opts->include != NULL || opts->exclude != NULL;
    if (rc < 0) {
        free_opts(opts);
        snprintf(err, errlen, "cannot initialise the clock: %s", strerror(-rc));
        return rc;
    }
    pthread_mutex_lock(&pt_core.lock);
    segment_release_locked(0);
    pthread_mutex_unlock(&pt_core.lock);
    free_opts(&pt_core.opts);
    pt_core.opts = *opts;
    memset(opts, 0, sizeof *opts);
    return begin_session(err, errlen);
}

static void copy_counters(pt_counters_t *out)
{
    memset(out, 0, sizeof *out);
    if (pt_core.seg == NULL)
        return;
    pt_seg_header_t *h = pt_segment_header(pt_core.seg);
    snprintf(out->segment, sizeof out->segment, "%s", pt_segment_name(pt_core.seg));
    out->events_written = pt_core.retired_written;
    out->events_dropped = pt_core.retired_dropped;
    uint32_t epoch = pt_epoch_now();
    pt_threads_add_counters_locked(epoch, &out->events_written, &out->events_dropped);
    /* relaxed: statistics */
    out->hook_errors = atomic_load_explicit(&h->hook_errors, memory_order_relaxed);
    out->symbols = atomic_load_explicit(&h->symbol_count, memory_order_relaxed);
    out->symbols_dropped = atomic_load_explicit(&h->symbols_dropped, memory_order_relaxed);
    out->threads_untraced = atomic_load_explicit(&h->threads_untraced, memory_order_relaxed);
    out->tracing_displaced = atomic_load_explicit(&h->tracing_displaced, memory_order_relaxed);
    out->events_untraced = atomic_load_explicit(&h->events_untraced, memory_order_relaxed);
    out->threads = pt_core.threads_seen;
    /* acquire: pairs with the release in pt_tracer_set_first_error */
    if (atomic_load_explicit(&g.first_error_set, memory_order_acquire) == 2)
        snprintf(out->first_error, sizeof out->first_error, "%s", g.first_error);
}

#ifdef Py_GIL_DISABLED
/* Free-threaded: wait until no other thread is inside a hook's ring write. Called with the
 * epoch already reset (seq_cst). A stop-the-world returns only once every other thread is
 * detached, i.e. outside the stretch of a hook between its last epoch check and the end of its
 * ring write (that stretch calls no Python: no detach point inside); a hook that runs after it
 * sees the reset epoch (stopping and starting the world synchronise). CPython has no public
 * call for it; sys.monitoring.set_local_events stops the world before it looks at the tool
 * (3.14's Python/instrumentation.c, monitoring_set_local_events_impl), so it is called with no
 * events on a code object of our own that nothing runs: harmless whether tool 0 is in use (it
 * sets nothing anyone sees) or not (ValueError "tool 0 is not in use", after the world was
 * stopped and started). 0, or -1 if it could not run. */
static int stop_the_world(void)
{
    static PyObject *private_code; /* compiled once, never run */
    int done = 0;
    PT_EXC_SAVE;
    if (private_code == NULL)
        private_code = Py_CompileString("pass", "<pytrace stop>", Py_file_input);
    PyObject *sys_mod = private_code ? PyImport_ImportModule("sys") : NULL;
    PyObject *mon = sys_mod ? PyObject_GetAttrString(sys_mod, "monitoring") : NULL;
    Py_XDECREF(sys_mod);
    PyObject *r = mon ? PyObject_CallMethod(mon, "set_local_events", "iOi", 0, private_code, 0) : NULL;
    done = r != NULL || PyErr_ExceptionMatches(PyExc_ValueError);
    Py_XDECREF(r);
    Py_XDECREF(mon);
    PyErr_Clear();
    PT_EXC_RESTORE;
    return done ? 0 : -1;
}
#endif

int pt_tracer_stop(pt_counters_t *out)
{
    if (pt_epoch_now() == 0)
        return -ENOENT;
    heartbeat_stop();
#ifdef Py_GIL_DISABLED
    /* Hooks run at once on other threads: reset the epoch, then wait for any hook that read
     * it before the reset to finish its write; from then on none touches its ring, and
     * stop_locked may write the closing records into every ring. */
    atomic_store_explicit(&pt_hot.epoch, 0, memory_order_seq_cst);
    if (stop_the_world() < 0)
        pt_tracer_set_first_error("stop: could not stop the world; the last events of other "
                                  "threads may be cut");
#endif
    pthread_mutex_lock(&pt_core.lock);
    stop_locked();
    pt_segment_set_state(pt_core.seg, PT_STATE_STOPPED);
    copy_counters(out);
    pthread_mutex_unlock(&pt_core.lock);
    /* The segment stays (state STOPPED) until the next start() or exit, so a
     * reader that attaches late still reads the whole session. */
    return 0;
}

int pt_tracer_release(void)
{
    if (pt_epoch_now() != 0)
        return -EBUSY;
    pthread_mutex_lock(&pt_core.lock);
    int had = pt_core.seg != NULL;
    segment_release_locked(0);
    pthread_mutex_unlock(&pt_core.lock);
    return had ? 0 : -ENOENT;
}

int pt_tracer_is_tracing(void)
{
    return pt_epoch_now() != 0;
}

const char *pt_tracer_segment_name(void)
{
    return pt_epoch_now() != 0 && pt_core.seg ? pt_segment_name(pt_core.seg) : NULL;
}

void pt_tracer_counters(pt_counters_t *out)
{
    pthread_mutex_lock(&pt_core.lock);
    copy_counters(out);
    pthread_mutex_unlock(&pt_core.lock);
}

int pt_tracer_fork_pending(void)
{
    return g.fork_resume;
}

/* The heartbeat thread is stopped around fork(): a fork child inherits no
 * threads anyway, and 3.12+ warns about fork() in a multi-threaded process
 * (it counts threads after fork() returns, before the after_in_parent hooks,
 * which restart it). */
void pt_tracer_before_fork(void)
{
    heartbeat_stop();
}

void pt_tracer_after_fork_parent(void)
{
    if (pt_epoch_now() != 0 && !g.hb_running && heartbeat_start() != 0)
        pt_tracer_fail("fork: cannot restart the heartbeat thread");
}

const pt_options_t *pt_tracer_options(void)
{
    return &pt_core.opts;
}

void pt_tracer_after_fork_child(void)
{
    /* Only the forking thread exists; other threads' contexts are garbage and
     * the parent's segment must not be touched (its rings are live in the
     * parent): unmap it without changing a byte. */
    memset(&pt_core.lock, 0, sizeof pt_core.lock);
    pthread_mutex_init(&pt_core.lock, NULL);
#ifdef Py_GIL_DISABLED
    memset(&pt_intern_mutex, 0, sizeof pt_intern_mutex); /* its holder did not come along */
#endif
    heartbeat_sync_init();
    g.hb_running = 0;
    pt_threads_after_fork_child();
    int was_tracing = g.fork_resume;
    g.fork_resume = 0;
    pt_core.opts.stack_skip_thread = 0; /* the child's stack is the program's, from the fork down */
    atomic_store_explicit(&pt_hot.epoch, 0, memory_order_relaxed);
    if (pt_core.seg) {
        term_watch(NULL);
        pt_segment_close(pt_core.seg, 0);
        pt_core.seg = NULL;
    }
    if (!was_tracing || pt_core.opts.fork_untraced)
        return; /* not tracing: py_after_fork_child removes the hooks */
    char err[256];
    if (begin_session(err, sizeof err) < 0) {
        pt_tracer_set_first_error("fork: the child could not create its segment: %s", err);
        return;
    }
    /* Claim now so the child's stream starts with this thread's stack. */
    (void)pt_thread_current(NULL);
}
