/*
 * pt_threads: the core's threads -- one context per thread, the ring it claims
 * in each session, its shadow stack, and the slow paths of the hot path.
 *
 *   Thread contexts (pt_thread_t) are malloc'd on a thread's first event,
 *   reached through an initial-exec TLS pointer (one load), kept on a list
 *   under pt_core.lock, and freed by the pthread-key destructor when the
 *   thread ends. A context outlives sessions: the thread reclaims a ring into
 *   it on its first event of the next session (ok_epoch says which session its
 *   ring belongs to). A thread that finds no free ring runs untraced, counted,
 *   and tries again every 100 ms.
 *
 *   Shadow stack: per thread, PT_SHADOW_CAPACITY entries of (id | C bit).
 *   Deeper frames still produce events; the shadow only counts them, so the
 *   stack written after a Lost record and the synthetic closes at stop() use
 *   id 0 ("<unknown>") for levels beyond the capacity.
 *   A close whose frame is not on top (a C return or Python return we never
 *   saw the opening of, e.g. start() itself, or os.fork() in the child) is
 *   matched against the top few entries: frames above the match are closed
 *   synthetically, a close that matches nothing is not written. So every
 *   thread's stream stays balanced whatever the interpreter reports.
 *   The bottom `prior` levels are the frames that were running when the
 *   thread's ring was claimed (Frame records), kept with the key the session's
 *   hook adapter gives them (pt_hook_ops_t.frame_key) and their code, for the
 *   frame-evaluation adapter, which never sees them return (pt_evalframe.c).
 *
 *   stop() writes closing records into other threads' rings: it holds the
 *   GIL, so their owners are not inside a hook, and with the epoch reset they
 *   never touch those rings again. A writer outside the hooks (pt_foreign_enter:
 *   the ITT collector, on threads that released the GIL or never ran Python)
 *   holds its thread's `writer` flag around its writes and checks the epoch
 *   only once it holds it; stop() and counters() take the same flag of every
 *   thread before touching its ring (writer_exclude), so they wait for a write
 *   in progress, and a writer that comes after stop() finds the epoch reset.
 *   Such a thread claims its ring under pt_core.lock (foreign_claim), never
 *   while it holds its flag, so stop() (pt_core.lock, then the flags) cannot
 *   wait on a writer that waits on it.
 */
#include "pt_tracer_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shm/base/grow.h"
#include "shm/ring.h"

#if PY_VERSION_HEX < 0x030B0000
#include <frameobject.h> /* PyFrame_GetBack */
#endif

#define PT_CLOSE_SEARCH 16u            /* entries searched for an out-of-order close */

static pt_thread_t *threads;           /* every context, under pt_core.lock */
static pthread_key_t thread_key;       /* its destructor retires an ending thread's ring */

uint32_t pt_task_switches;
__thread pt_thread_t *pt_tls_thread __attribute__((tls_model("initial-exec")));

/* ---- shadow stack -------------------------------------------------------- */

static inline uint32_t shadow_at(const pt_thread_t *t, uint32_t level)
{
    return level < PT_SHADOW_CAPACITY ? t->shadow[level] : 0;
}

/* Lower the depth; prior frames above it are gone. */
static inline void set_depth(pt_thread_t *t, uint32_t depth)
{
    t->depth = depth;
    if (t->prior > depth)
        t->prior = depth;
}

void pt_close_synthetic_above(pt_thread_t *t, uint32_t level)
{
    while (t->depth > level) {
        uint32_t e = shadow_at(t, t->depth - 1);
        int is_c = (e & PT_SHADOW_C_BIT) != 0;
        pt_emit(t, e & ~PT_SHADOW_C_BIT, is_c ? PT_EV_CRETURN : PT_EV_RETURN, PT_EVF_SYNTHETIC);
        set_depth(t, t->depth - 1);
    }
}

/* The frame `entry` (id | C bit) is not on top of the shadow (pt_close). */
void pt_close_slow(pt_thread_t *t, uint32_t entry, uint8_t kind)
{
    uint32_t d = t->depth;
    if (d > PT_SHADOW_CAPACITY) { /* beyond the shadow: trust the interpreter */
        pt_emit(t, entry & ~PT_SHADOW_C_BIT, kind, 0);
        set_depth(t, d - 1);
        return;
    }
    /* out of order: find it among the top entries */
    uint32_t floor = d > PT_CLOSE_SEARCH ? d - PT_CLOSE_SEARCH : 0;
    for (uint32_t level = d; level-- > floor;) {
        if (t->shadow[level] == entry) {
            pt_close_synthetic_above(t, level + 1);
            pt_emit(t, entry & ~PT_SHADOW_C_BIT, kind, 0);
            set_depth(t, level);
            return;
        }
    }
    /* nothing matches: its opening was never recorded; writing it would
     * unbalance the stream */
}

/* Ring callback: write the current stack (after a Lost record, or for a
 * reader that started in the middle of the stream; ring.h). */
static int stack_writer(pt_ring_t *ring, void *ctx, uint32_t room, int whole)
{
    pt_thread_t *t = ctx;
    uint32_t n = t->depth;
    /* inside an asyncio task's step: a Synthetic TaskStep first; not for a step begun
     * before task records were switched (off: its end was not seen, it may be long over) */
    uint32_t task = t->task_switches == __atomic_load_n(&pt_task_switches, __ATOMIC_RELAXED) ? t->task : 0;
    if (room == 0 || (whole && n + (task != 0) > room - 1))
        return -EAGAIN;
    uint64_t ticks = pt_now();
    if (task != 0 && room > 1) {
        pt_ring_push_stack_record(ring, ticks, task, 0, PT_EV_TASK_STEP, PT_EVF_SYNTHETIC);
        room--;
    }
    if (n > room - 1)
        n = room - 1; /* outermost frames first; the rest is lost with the gap */
    for (uint32_t level = 0; level < n; level++) {
        uint32_t e = shadow_at(t, level);
        pt_ring_push_frame(ring, ticks, e & ~PT_SHADOW_C_BIT, level > 0xFFFFu ? 0xFFFFu : (uint16_t)level,
                           (e & PT_SHADOW_C_BIT) ? PT_EVF_C_FUNCTION : 0);
    }
    return 0;
}

/* ---- thread contexts ------------------------------------------------------ */

/* The name of a threading.Thread object into out ("" if it is not one). */
static void thread_object_name(PyObject *threading, PyObject *thr, char *out, size_t len)
{
    PyObject *cls = PyObject_GetAttrString(threading, "Thread");
    int is_thread = cls ? PyObject_IsInstance(thr, cls) : 0;
    Py_XDECREF(cls);
    if (is_thread == 1) {
        PyObject *name = PyObject_GetAttrString(thr, "name");
        if (name && PyUnicode_Check(name))
            snprintf(out, len, "%s", pt_utf8_or(name, ""));
        Py_XDECREF(name);
    }
    PyErr_Clear();
}

static void thread_name_of_threading(char *out, size_t len);

/* The thread's name as threading knows it; the main thread is "MainThread" also
 * in a program that has not imported threading (yet). */
static void thread_name(char *out, size_t len)
{
    thread_name_of_threading(out, len);
    if (out[0] == '\0' && syscall(SYS_gettid) == (long)getpid())
        snprintf(out, len, "MainThread");
}

static void thread_name_of_threading(char *out, size_t len)
{
    out[0] = '\0';
    PyObject *threading;
    PyObject *modname = PyUnicode_FromString("threading");
    if (modname == NULL) {
        PyErr_Clear();
        return;
    }
    threading = PyImport_GetModule(modname); /* new ref or NULL, never imports */
    Py_DECREF(modname);
    if (threading == NULL) {
        PyErr_Clear();
        return;
    }
    /* threading._active[get_ident()].name: no side effects (current_thread()
     * would create a _DummyThread for foreign threads) */
    PyObject *active = PyObject_GetAttrString(threading, "_active");
    if (active != NULL && PyDict_Check(active)) {
        PyObject *ident = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
#if PY_VERSION_HEX >= 0x030D0000
        /* a strong reference: free-threaded, another thread may change _active meanwhile */
        PyObject *thr = NULL;
        if (ident != NULL && PyDict_GetItemRef(active, ident, &thr) < 0)
            thr = NULL;
#else
        PyObject *thr = ident ? PyDict_GetItem(active, ident) : NULL; /* borrowed */
        Py_XINCREF(thr);
#endif
        Py_XDECREF(ident);
        if (thr)
            thread_object_name(threading, thr, out, len);
        Py_XDECREF(thr);
    }
    Py_XDECREF(active);
    PyErr_Clear();
#if PY_VERSION_HEX >= 0x030B0000
    /* 3.12+ report a new thread's first event on entry to Thread._bootstrap,
     * before the thread is in _active: its frame's `self` is the Thread. */
    PyFrameObject *frame = out[0] ? NULL : PyEval_GetFrame(); /* borrowed */
    if (frame != NULL) {
        PyObject *locals = PyFrame_GetLocals(frame);
        PyObject *self = locals ? PyMapping_GetItemString(locals, "self") : NULL;
        if (self)
            thread_object_name(threading, self, out, len);
        Py_XDECREF(self);
        Py_XDECREF(locals);
        PyErr_Clear();
    }
#endif
    Py_DECREF(threading);
}

/* An event of a thread that has no ring (slow path: such threads only). */
static void count_untraced_event(pt_thread_t *t)
{
    pt_segment_t *seg = pt_core.seg;
    if (seg == NULL)
        return;
    t->missed++;
    /* relaxed: a statistic */
    atomic_fetch_add_explicit(&pt_segment_header(seg)->events_untraced, 1, memory_order_relaxed);
}

/* The calling thread's new context, on the thread list (takes pt_core.lock;
 * not while holding the thread's writer flag). NULL: out of memory (said). */
static pt_thread_t *context_new(void)
{
    pt_thread_t *t = calloc(1, sizeof *t);
    if (t == NULL) {
        pt_tracer_fail("out of memory for a thread context");
        return NULL;
    }
    pthread_mutex_lock(&pt_core.lock);
    t->next = threads;
    if (threads)
        threads->prev = t;
    threads = t;
    pthread_mutex_unlock(&pt_core.lock);
    pthread_setspecific(thread_key, t);
    pt_tls_thread = t;
    return t;
}

/* pt_segment_claim_ring failed with rc: count the thread untraced (and retry in
 * 100 ms when rings may free), or record the failure. */
static void claim_failed(pt_thread_t *t, int rc, uint32_t epoch, uint64_t tid, const char *name)
{
    t->retry_ticks = 0;
    if (rc == -EAGAIN || rc == -ENOSPC) {
        if (t->untraced_epoch != epoch) {
            t->untraced_epoch = epoch;
            /* relaxed: a statistic */
            atomic_fetch_add_explicit(&pt_segment_header(pt_core.seg)->threads_untraced, 1, memory_order_relaxed);
            if (rc == -EAGAIN)
                pt_tracer_set_first_error("no free ring for thread %llu (%s): it runs untraced until one frees; "
                                "start with a larger ring_count (--rings)",
                                (unsigned long long)tid, name);
            else
                pt_tracer_set_first_error("no room in /dev/shm for the ring of thread %llu (%s): it runs untraced "
                                "until room returns; free space in /dev/shm or lower --ring-size",
                                (unsigned long long)tid, name);
        }
        t->retry_ticks = pt_now() + pt_core.clock.ticks_per_second / 10; /* 100 ms */
        count_untraced_event(t);
    } else {
        pt_tracer_fail("cannot claim a ring");
    }
}

/* A ring was just claimed into t: the gap of what it did without one, the stack
 * writer, the CPU clock, an empty shadow. */
static void ring_setup(pt_thread_t *t, uint64_t tid, const char *name)
{
    t->retry_ticks = 0;
    if (t->missed) {
        /* What the thread did without a ring becomes a gap of its stream: a
         * Lost record that says so (LostNoRing), then its stack. The
         * events stay counted where they were, in events_untraced: they were
         * not dropped by a full ring, and under policy wait nothing waited. */
        pt_ring_count_missed(&t->ring, t->missed);
        t->missed = 0;
    }
    pt_ring_set_stack_writer(&t->ring, stack_writer, t);
    /* CpuTime records (ring.h): the first push below writes the thread's CPU
     * baseline, then every chunk change and every heartbeat request one more */
    int rc = pt_ring_set_cpu_clock(&t->ring);
    if (rc < 0)
        pt_tracer_set_first_error("thread %llu (%s): no CPU clock (%s): its CPU time is not recorded",
                                  (unsigned long long)tid, name, strerror(-rc));
    t->depth = 0;
    t->task = 0; /* a step of an earlier session is not this one's */
}

/* First event of this thread in the session: claim a ring and write the
 * frames already running as Frame records. `opening`: the code whose opening
 * triggers this, if that frame is already the innermost one on the stack (the
 * profile and monitoring hooks; the frame-evaluation hook runs before the
 * frame is linked, so it passes NULL); it is not recorded as a Frame. */
static pt_thread_t *thread_attach(PyCodeObject *opening)
{
    uint32_t epoch = pt_epoch_now();
    pt_thread_t *t = pt_tls_thread;
    if (epoch == 0)
        return NULL;
    /* This thread already failed to get a ring in this session. If every ring
     * was taken, try again now and then: a reader frees the rings of threads
     * that ended, and a long-running thread should show up once it does. */
    if (t && t->attaching)
        return NULL; /* our own Python calls below (thread name, frames) */
    if (t && t->seen_epoch == epoch && (t->retry_ticks == 0 || pt_now() < t->retry_ticks)) {
        if (t->retry_ticks != 0)
            count_untraced_event(t); /* waiting for a ring: the program's event is lost, counted */
        return NULL;
    }
    if (t == NULL && (t = context_new()) == NULL)
        return NULL;
    if (t->seen_epoch != epoch)
        t->missed = 0; /* an earlier session's count went with its segment */
    t->seen_epoch = epoch;

    /* Python work first: name, and the ids of the frames already running
     * (innermost first), skipping the frame whose opening triggers us. */
    char name[PT_THREAD_NAME_BYTES];
    uint32_t *ids = NULL;
    pt_prior_frame_t *frames = NULL;
    size_t n = 0, cap_ids = 0, cap_frames = 0;
    PT_EXC_SAVE;
    t->attaching = 1;
    thread_name(name, sizeof name);
    /* A launcher's thread starts its picture empty: what runs below the
     * launcher (site, a sitecustomize) is not the program's. */
    /* relaxed atomics: free-threaded, other threads attach at the same time (the one that
     * matches clears it below) */
    unsigned long skip_ident = __atomic_load_n(&pt_core.opts.stack_skip_thread, __ATOMIC_RELAXED);
    int skip_stack = skip_ident != 0 && skip_ident == PyThread_get_thread_ident();
    PyFrameObject *f = skip_stack ? NULL : PyEval_GetFrame();
    Py_XINCREF(f);
    int first = 1;
    while (f) {
        PyCodeObject *code = PyFrame_GetCode(f);
        if (!(first && code == opening)) {
            uint64_t id = pt_code_lookup(code);
            if (id != PT_CODE_FILTERED) {
                if (pt_grow_size((void **)&ids, &cap_ids, sizeof *ids, n + 1, 64) < 0 ||
                    pt_grow_size((void **)&frames, &cap_frames, sizeof *frames, n + 1, 64) < 0)
                    break;
                frames[n].frame = pt_tracer_frame_key(f);
                frames[n].code = code; /* compared, never dereferenced */
                ids[n++] = (uint32_t)id;
            }
        }
        first = 0;
        Py_DECREF(code);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);
    t->attaching = 0;
    PT_EXC_RESTORE;

    /* No Python call below this line. */
    if (pt_epoch_now() != epoch || pt_core.seg == NULL) {
        free(ids);
        free(frames);
        return NULL;
    }
    uint64_t tid = (uint64_t)syscall(SYS_gettid);
    int rc = pt_segment_claim_ring(pt_core.seg, tid, name, pt_now(), &t->ring);
    if (rc < 0) {
        free(ids);
        free(frames);
        claim_failed(t, rc, epoch, tid, name);
        return NULL;
    }
    if (skip_stack)
        __atomic_store_n(&pt_core.opts.stack_skip_thread, 0UL, __ATOMIC_RELAXED); /* once: the ident may be reused by a later thread */
    ring_setup(t, tid, name);
    /* release: publishes the ring handle to the heartbeat thread; pairs with
     * its acquire load in pt_threads_serve_stack_requests */
    atomic_store_explicit(&t->ok_epoch, epoch, memory_order_release);
    pthread_mutex_lock(&pt_core.lock);
    pt_core.threads_seen++;
    pthread_mutex_unlock(&pt_core.lock);
    uint64_t ticks = pt_now();
    for (size_t i = n; i-- > 0;) {
        uint32_t level = t->depth;
        (void)pt_ring_push(&t->ring, ticks, ids[i], PT_EV_FRAME, 0,
                           level > 0xFFFFu ? 0xFFFFu : (uint16_t)level);
        if (t->depth < PT_SHADOW_CAPACITY)
            t->shadow[t->depth] = ids[i];
        t->depth++;
    }
    free(ids);
    /* prior frames, outermost first, as the shadow */
    for (size_t lo = 0, hi = n; lo + 1 < hi; lo++, hi--) {
        pt_prior_frame_t tmp = frames[lo];
        frames[lo] = frames[hi - 1];
        frames[hi - 1] = tmp;
    }
    free(t->prior_frames);
    t->prior_frames = frames;
    t->prior = n < PT_SHADOW_CAPACITY ? (uint32_t)n : PT_SHADOW_CAPACITY;
    return t;
}

static inline pt_thread_t *thread_get(PyCodeObject *opening)
{
    pt_thread_t *t = pt_tls_thread;
    if (PT_LIKELY(t != NULL && pt_ok_epoch(t) == pt_epoch_now()))
        return t;
    return thread_attach(opening);
}

pt_thread_t *pt_thread_current(PyCodeObject *opening)
{
    return thread_get(opening);
}

/* ---- slow paths of the core entries (pt_tracer_inline.h) ------------------- */

int pt_py_open_slow(PyCodeObject *code, uint8_t kind, uint8_t flags, int linked)
{
    uint64_t id = pt_code_lookup(code);
    if (id == PT_CODE_FILTERED)
        return 1;
    pt_thread_t *t = thread_get(linked ? code : NULL);
    if (PT_UNLIKELY(t == NULL))
        return 0;
    pt_open(t, (uint32_t)id, kind, flags);
    return 0;
}

int pt_py_close_slow(PyCodeObject *code, uint8_t kind)
{
    uint64_t id = pt_code_lookup(code);
    if (id == PT_CODE_FILTERED)
        return 1;
    pt_thread_t *t = thread_get(NULL);
    if (PT_UNLIKELY(t == NULL))
        return 0;
    pt_close(t, (uint32_t)id, kind);
    return 0;
}

/* Not in the fast path: the caller's code or this thread is new to the
 * session, or the C function is not in this thread's cache (its id then
 * comes from the shared table, or is interned). */
int pt_c_event_slow(PyCodeObject *caller, PyObject *callable, PyObject *self_arg, const PyMethodDef *def,
                    uint8_t kind)
{
    if (pt_code_lookup(caller) == PT_CODE_FILTERED)
        return 1;
    pt_thread_t *t = thread_get(NULL);
    if (PT_UNLIKELY(t == NULL))
        return 0;
    uint32_t epoch = pt_ok_epoch(t);
    pt_ccache_entry_t *e = &t->ccache[pt_ccache_slot(def)];
    uint32_t id;
    if (e->def == def && (uint32_t)(e->value >> 32) == epoch) {
        id = (uint32_t)e->value;
    } else {
        id = pt_symbols_cfunc_id(callable, self_arg, def, epoch);
        if (PT_UNLIKELY(pt_ok_epoch(t) != pt_epoch_now()))
            return 0; /* stopped during interning */
        if (id != 0) { /* 0: interning failed (counted); try again next time */
            e->def = def;
            e->value = ((uint64_t)epoch << 32) | id;
        }
    }
    if (kind == PT_EV_CCALL)
        pt_open(t, id | PT_SHADOW_C_BIT, kind, 0);
    else
        pt_close(t, id | PT_SHADOW_C_BIT, kind);
    return 0;
}

void pt_tracer_user_event(uint32_t label_id, uint8_t kind)
{
    pt_tracer_user_event_flags(label_id, kind, 0);
}

void pt_tracer_user_event_flags(uint32_t label_id, uint8_t kind, uint8_t flags)
{
    if (pt_epoch_now() == 0)
        return;
    pt_thread_t *t = thread_get(NULL);
    if (t)
        pt_emit(t, label_id, kind, flags);
}

/* ---- writers without the GIL (pt_tracer.h, pt_foreign_enter) ------------------------ */

/* Another thread (stop, counters: pt_core.lock held) takes t's writer flag: it
 * waits for a write in progress. acquire: pairs with the release in
 * pt_foreign_leave (the owner's writes to the ring are ours to see). */
static void writer_exclude(pt_thread_t *t)
{
    uint32_t expected = 0;
    while (!atomic_compare_exchange_weak_explicit(&t->writer, &expected, 2, memory_order_acquire,
                                                  memory_order_relaxed)) {
        expected = 0;
        sched_yield();
    }
}

static void writer_allow(pt_thread_t *t)
{
    /* release: what we wrote into t's ring (closing records, counters) and the
     * epoch reset before it reach the owner's next acquire in pt_foreign_enter */
    atomic_store_explicit(&t->writer, 0, memory_order_release);
}

/* First record of a thread from a foreign writer in session `epoch`. With the GIL
 * (a Python thread): as for a hook (its name, its running frames). Without: named
 * from the OS, no frames; "(native)" if the thread never ran Python. 0 or -1. */
static int foreign_claim(pt_thread_t *t, uint32_t epoch)
{
    if (t->attaching)
        return -1;
    if (PyGILState_Check())
        return thread_attach(NULL) ? 0 : -1;
    pthread_mutex_lock(&pt_core.lock);
    int rc = -1;
    if (pt_epoch_now() != epoch || pt_core.seg == NULL)
        goto out;
    if (t->seen_epoch == epoch && (t->retry_ticks == 0 || pt_now() < t->retry_ticks)) {
        if (t->retry_ticks != 0)
            count_untraced_event(t);
        goto out;
    }
    if (t->seen_epoch != epoch)
        t->missed = 0;
    t->seen_epoch = epoch;
    char os_name[16] = "", name[PT_THREAD_NAME_BYTES];
    if (pthread_getname_np(pthread_self(), os_name, sizeof os_name) != 0 || os_name[0] == '\0')
        snprintf(os_name, sizeof os_name, "thread");
    /* a Python thread outside the GIL (its first record comes from inside a call
     * that released it) keeps its OS name; a thread that never ran Python says so */
    if (PyGILState_GetThisThreadState() != NULL)
        snprintf(name, sizeof name, "%s", os_name);
    else
        snprintf(name, sizeof name, "%s (native)", os_name);
    uint64_t tid = (uint64_t)syscall(SYS_gettid);
    int claim = pt_segment_claim_ring(pt_core.seg, tid, name, pt_now(), &t->ring);
    if (claim < 0) {
        claim_failed(t, claim, epoch, tid, name);
        goto out;
    }
    ring_setup(t, tid, name);
    free(t->prior_frames);
    t->prior_frames = NULL;
    t->prior = 0;
    /* release: publishes the ring handle (as in thread_attach) */
    atomic_store_explicit(&t->ok_epoch, epoch, memory_order_release);
    pt_core.threads_seen++;
    rc = 0;
out:
    pthread_mutex_unlock(&pt_core.lock);
    return rc;
}

pt_thread_t *pt_foreign_enter(void)
{
    uint32_t epoch = atomic_load_explicit(&pt_hot.epoch, memory_order_acquire);
    if (epoch == 0)
        return NULL;
    pt_thread_t *t = pt_tls_thread;
    if (t == NULL && (t = context_new()) == NULL)
        return NULL;
    if (atomic_load_explicit(&t->ok_epoch, memory_order_relaxed) != epoch && foreign_claim(t, epoch) < 0)
        return NULL;
    uint32_t expected = 0;
    /* acquire: pairs with writer_allow (a stop() that ran before us is seen
     * whole: its epoch reset and what it wrote into our ring) */
    while (!atomic_compare_exchange_weak_explicit(&t->writer, &expected, 1, memory_order_acquire,
                                                  memory_order_relaxed)) {
        expected = 0;
        sched_yield();
    }
    /* relaxed: ordered by the acquire above; stop() resets the epoch before it
     * takes any thread's flag */
    uint32_t now = atomic_load_explicit(&pt_hot.epoch, memory_order_relaxed);
    if (now == 0 || now != pt_ok_epoch(t)) {
        pt_foreign_leave(t);
        return NULL;
    }
    return t;
}

void pt_foreign_leave(pt_thread_t *t)
{
    /* release: our ring writes happen before stop()'s or counters()' acquire in
     * writer_exclude */
    atomic_store_explicit(&t->writer, 0, memory_order_release);
}

/* ---- closing and retiring (pt_core.lock held) ----------------------------------- */

/* Close every open frame of t, publish counters, retire its ring. The caller
 * either holds the GIL (so t's owner is not in a hook) or is t's own thread
 * after it stopped running Python (destructor) or the exit handler. */
static void thread_finish_locked(pt_thread_t *t)
{
    /* The last CPU sample closes the thread's last interval; the owner is
     * alive (its destructor, which removes it from the list, has not run) so
     * its CPU clock can be read from here too. */
    (void)pt_ring_write_cpu(&t->ring, pt_now());
    pt_close_synthetic_above(t, 0);
    pt_ring_flush_counters(&t->ring);
    pt_core.retired_written += pt_ring_written(&t->ring);
    /* relaxed: counters only */
    pt_core.retired_dropped += atomic_load_explicit(&t->ring.slot->events_dropped, memory_order_relaxed);
    pt_segment_retire_ring(pt_core.seg, &t->ring, pt_now());
    atomic_store_explicit(&t->ok_epoch, 0, memory_order_relaxed); /* pt_core.lock held */
}

static void thread_destructor(void *arg)
{
    pt_thread_t *t = arg;
    pthread_mutex_lock(&pt_core.lock);
    uint32_t epoch = pt_epoch_now();
    if (epoch != 0 && pt_ok_epoch(t) == epoch && pt_core.seg)
        thread_finish_locked(t);
    if (t->prev)
        t->prev->next = t->next;
    else if (threads == t)
        threads = t->next;
    if (t->next)
        t->next->prev = t->prev;
    pthread_mutex_unlock(&pt_core.lock);
    free(t->prior_frames);
    free(t);
}

/* A reader that started in the middle of a thread's stream asked for its
 * stack: send the owner's next event to the ring's slow path, which writes it.
 * Without the GIL: the thread list and the contexts are held by pt_core.lock. */
void pt_threads_serve_stack_requests(uint32_t epoch)
{
    if (epoch == 0)
        return;
    pthread_mutex_lock(&pt_core.lock);
    for (pt_thread_t *t = threads; t; t = t->next) {
        /* acquire: pairs with the release store of ok_epoch in thread_attach,
         * after which the ring handle is complete */
        if (atomic_load_explicit(&t->ok_epoch, memory_order_acquire) != epoch)
            continue;
        /* relaxed: the request carries no data (ring.h) */
        if (atomic_load_explicit(&t->ring.slot->stack_request, memory_order_relaxed) != 0)
            pt_ring_request_slow_path(&t->ring);
    }
    pthread_mutex_unlock(&pt_core.lock);
}

/* Ask every traced thread for a CPU sample (a CpuTime record at its next
 * push; ring.h "CPU time"). Heartbeat thread, without the GIL, as above. */
void pt_threads_request_cpu_samples(uint32_t epoch)
{
    if (epoch == 0)
        return;
    pthread_mutex_lock(&pt_core.lock);
    for (pt_thread_t *t = threads; t; t = t->next) {
        /* acquire: as in pt_threads_serve_stack_requests (cpu_on is set before) */
        if (atomic_load_explicit(&t->ok_epoch, memory_order_acquire) == epoch)
            pt_ring_request_cpu_sample(&t->ring);
    }
    pthread_mutex_unlock(&pt_core.lock);
}

/* ---- for the session (pt_session.c) ------------------------------------------ */

int pt_threads_init(char *err, size_t errlen)
{
    int rc = pthread_key_create(&thread_key, thread_destructor);
    if (rc != 0) {
        snprintf(err, errlen, "pthread_key_create failed: %s", strerror(rc));
        return -rc;
    }
    return 0;
}

void pt_threads_finish_locked(uint32_t epoch)
{
    for (pt_thread_t *t = threads; t; t = t->next) {
        writer_exclude(t); /* the epoch is reset: a foreign writer finishes, none starts */
        if (pt_ok_epoch(t) != 0 && pt_ok_epoch(t) == epoch)
            thread_finish_locked(t);
        writer_allow(t);
    }
}

void pt_threads_add_counters_locked(uint32_t epoch, uint64_t *written, uint64_t *dropped)
{
    for (pt_thread_t *t = threads; t; t = t->next) {
        if (epoch == 0 || pt_ok_epoch(t) != epoch)
            continue;
#ifdef Py_GIL_DISABLED
        if (t != pt_tls_thread) {
            /* Free-threaded: the owner may be in a hook now, writing its ring; read what it
             * published at its last chunk change (a snapshot, as a reader sees it), never
             * its private cursor. stop() counts exactly, once every hook is out. */
            *written += atomic_load_explicit(&t->ring.slot->events_written, memory_order_relaxed);
            *dropped += atomic_load_explicit(&t->ring.slot->events_dropped, memory_order_relaxed);
            continue;
        }
#endif
        writer_exclude(t); /* GIL held: the owner is not in a hook, nor in a foreign write now */
        pt_ring_flush_counters(&t->ring);
        *written += pt_ring_written(&t->ring);
        *dropped += atomic_load_explicit(&t->ring.slot->events_dropped, memory_order_relaxed);
        writer_allow(t);
    }
}

void pt_threads_after_fork_child(void)
{
    /* Only the forking thread exists; other threads' contexts are garbage. */
    pt_thread_t *me = pt_tls_thread;
    pt_thread_t *t = threads;
    while (t) {
        pt_thread_t *next = t->next;
        if (t != me) {
            free(t->prior_frames);
            free(t);
        }
        t = next;
    }
    threads = me;
    if (me) {
        me->next = me->prev = NULL;
        atomic_store_explicit(&me->ok_epoch, 0, memory_order_relaxed); /* one thread left */
        atomic_store_explicit(&me->writer, 0, memory_order_relaxed);
        me->seen_epoch = 0;
        me->depth = 0;
        me->prior = 0;
    }
}
