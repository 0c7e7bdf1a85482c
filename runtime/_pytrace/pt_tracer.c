/*
 * pt_tracer: the process-wide tracer behind _pytrace.
 *
 * Design summary
 *
 *   One tracing session at a time per process, so the tracer is a static
 *   singleton (`g`): hooks, pthread-key destructors and Py_AtExit handlers have
 *   no module object to find state through. The module keeps only Python
 *   objects (labels, callbacks) in its module state.
 *
 *   Sessions are numbered by `pt_hot.epoch` (0 = not tracing). Every cached fact is
 *   tagged with the epoch it belongs to, so a new start() (new segment, new
 *   symbol ids) invalidates all caches at once without visiting them:
 *     - a code object's co_extra slot holds epoch<<33 | filtered<<32 | id;
 *     - a C function's rculfhash node, and each thread's cache of C function ids
 *       in front of it, hold epoch<<32 | id;
 *     - a thread context's ok_epoch says its ring belongs to this session.
 *
 *   Thread contexts (pt_thread_t) are malloc'd on a thread's first event,
 *   reached through an initial-exec TLS pointer (one load), kept on a list
 *   under g.lock, and freed by the pthread-key destructor when the thread
 *   ends. A context outlives sessions: the thread reclaims a ring into it on
 *   its first event of the next session.
 *
 *   Concurrency. Hooks run with the GIL held, and so do start(), stop() and the
 *   fork handler; that is what makes the hot path lock-free and lets stop()
 *   write closing records into other threads' rings (their owners cannot be
 *   inside a hook while we hold the GIL, and with the epoch reset they never
 *   touch those rings again). Code that runs without the GIL -- the thread
 *   destructor, the Py_AtExit handler, the heartbeat thread -- takes g.lock,
 *   as do the GIL holders when they touch the thread list or the segment's
 *   lifetime. Not supported: free-threaded builds (3.13t).
 *
 *   The cold paths (first sight of a code object or thread) call the Python
 *   C API, and a GC run there may execute arbitrary Python, even stop(). So
 *   every cold path does its Python work first, then re-checks the epoch,
 *   then writes to the ring with no Python call in between.
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
 *   thread's ring was claimed (Frame records), kept with their frame and code
 *   for the frame-evaluation adapter, which never sees them return
 *   (pt_evalframe.c).
 *
 *   The hot path is inline, in pt_tracer_inline.h; this file holds its slow
 *   paths and everything else. The heartbeat thread (every 100 ms, no GIL)
 *   also serves readers' stack requests (shm/ring.h): it only lowers the ring
 *   limit of the thread concerned, whose next event writes the stack.
 */
#include "pt_tracer_inline.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define _LGPL_SOURCE /* inline read-side lock (liburcu is LGPL; header inlines are allowed) */
#include <urcu/urcu-bp.h>
#include <urcu/rculfhash.h>

#include "shm/clock.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "shm/symlog.h"

#if PY_VERSION_HEX < 0x030A0000
#error "_pytrace needs CPython 3.10 or newer"
#endif
#if PY_VERSION_HEX < 0x030B0000
#include <frameobject.h> /* PyFrame_GetBack */
#endif
#if PY_VERSION_HEX >= 0x030C0000
#define pt_code_set_extra PyUnstable_Code_SetExtra
#define pt_request_code_extra_index PyUnstable_Eval_RequestCodeExtraIndex
#else
#define pt_code_set_extra _PyCode_SetExtra
#define pt_request_code_extra_index _PyEval_RequestCodeExtraIndex
#endif

#define PT_CLOSE_SEARCH 16u            /* entries searched for an out-of-order close */
#define PT_HEARTBEAT_NS 100000000ull   /* 100 ms */

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

typedef struct pt_cnode {
    struct cds_lfht_node node;
    const PyMethodDef *def;
    _Atomic uint64_t value; /* epoch << 32 | id */
} pt_cnode_t;

static struct {
    uint32_t last_epoch;            /* last one handed out */
    pt_segment_t *seg;              /* current or last session's segment */
    pt_clock_t clock;
    pt_options_t opts;
    pthread_mutex_t lock;           /* threads list, seg lifetime, counters below */
    pt_thread_t *threads;
    pthread_key_t key;
    uint64_t retired_written, retired_dropped, threads_seen;
    _Atomic int first_error_set;
    char first_error[256];
    /* heartbeat */
    pthread_t hb_thread;
    int hb_running;
    pthread_mutex_t hb_lock;
    pthread_cond_t hb_cond;
    int hb_stop;
    _Atomic int hook_lost;          /* a replaced hook was reported this session */
    /* C functions by PyMethodDef; entries never removed (no call_rcu needed) */
    struct cds_lfht *cfuncs;
    int initialised;
    /* fork: the child was tracing when fork() returned (set by the C atfork
     * child handler, consumed by the Python after_in_child hook) */
    int fork_resume;
} g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .hb_lock = PTHREAD_MUTEX_INITIALIZER,
    .hb_cond = PTHREAD_COND_INITIALIZER,
};

Py_ssize_t pt_code_extra_index = -1;
pt_hot_t pt_hot;
__thread pt_thread_t *pt_tls_thread __attribute__((tls_model("initial-exec")));

/* ---- errors -------------------------------------------------------------- */

static void set_first_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_first_error(const char *fmt, ...)
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
    pt_segment_t *seg = g.seg;
    if (seg)
        /* relaxed: a statistic */
        atomic_fetch_add_explicit(&pt_segment_header(seg)->hook_errors, 1, memory_order_relaxed);
    set_first_error("%s", what);
}

void pt_tracer_displaced(const char *how, int this_thread)
{
    pt_thread_t *t = pt_tls_thread;
    uint32_t epoch = pt_epoch_now();
    /* the owner, with the GIL, outside any hook: its ring is ours to write */
    if (this_thread && t != NULL && epoch != 0 && pt_ok_epoch(t) == epoch)
        pt_close_synthetic_above(t, 0);
    pt_segment_t *seg = g.seg;
    if (seg)
        /* relaxed: a statistic */
        atomic_fetch_add_explicit(&pt_segment_header(seg)->tracing_displaced, 1, memory_order_relaxed);
    set_first_error("%s", how);
}

void pt_tracer_check_hook(void)
{
    if (pt_hooks_intact())
        return;
    /* relaxed: only makes the report once per session */
    if (atomic_exchange_explicit(&g.hook_lost, 1, memory_order_relaxed) == 0)
        pt_tracer_fail("another tool replaced pytrace's frame-evaluation hook (PEP 523): "
                       "Python calls after that are not traced; trace with C calls on "
                       "(PyEval_SetProfile) alongside that tool");
}

/* ---- clock and emit ------------------------------------------------------ */

static inline uint64_t now_ticks(void)
{
    return pt_now();
}

static inline uint32_t current_epoch(void)
{
    return pt_epoch_now();
}

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
    if (room == 0 || (whole && n > room - 1))
        return -EAGAIN;
    if (n > room - 1)
        n = room - 1; /* outermost frames first; the rest is lost with the gap */
    uint64_t ticks = now_ticks();
    for (uint32_t level = 0; level < n; level++) {
        uint32_t e = shadow_at(t, level);
        pt_ring_push_frame(ring, ticks, e & ~PT_SHADOW_C_BIT, level > 0xFFFFu ? 0xFFFFu : (uint16_t)level,
                           (e & PT_SHADOW_C_BIT) ? PT_EVF_C_FUNCTION : 0);
    }
    return 0;
}

/* ---- filters and code interning ----------------------------------------- */

static int prefix_match(const char *s, const char *pat, int module)
{
    size_t n = strlen(pat);
    if (strncmp(s, pat, n) != 0)
        return 0;
    /* a module pattern "a.b" matches "a.b" and "a.b.c", not "a.bc" */
    return !module || s[n] == '\0' || s[n] == '.' || pat[n ? n - 1 : 0] == '.';
}

static int list_matches(char **pats, const char *file, const char *module)
{
    for (; pats && *pats; pats++) {
        if (file && prefix_match(file, *pats, 0))
            return 1;
        if (module && prefix_match(module, *pats, 1))
            return 1;
    }
    return 0;
}

static const char *utf8_or(PyObject *s, const char *fallback)
{
    if (s == NULL || !PyUnicode_Check(s))
        return fallback;
    const char *u = PyUnicode_AsUTF8(s);
    if (u == NULL) {
        PyErr_Clear();
        return fallback;
    }
    return u;
}

/* Module name of the frame running `code`, if it is the current frame. */
static const char *module_of(PyCodeObject *code)
{
    PyFrameObject *f = PyEval_GetFrame(); /* borrowed */
    if (f == NULL)
        return NULL;
    PyCodeObject *fc = PyFrame_GetCode(f);
    Py_DECREF(fc);
    if (fc != code)
        return NULL;
    PyObject *globals = PyEval_GetGlobals(); /* borrowed */
    if (globals == NULL || !PyDict_Check(globals))
        return NULL;
    return utf8_or(PyDict_GetItemString(globals, "__name__"), NULL);
}

static uint64_t code_intern(PyCodeObject *code, uint32_t epoch)
{
    uint64_t value;
    PT_EXC_SAVE;
    const char *file = utf8_or(code->co_filename, "");
    int filtered = 0;
    if (g.opts.hide && list_matches(g.opts.hide, file, NULL)) {
        filtered = 1; /* pytrace's own code: never in the picture, nor its C calls */
    } else if (g.opts.include || g.opts.exclude) {
        const char *module = module_of(code);
        if (g.opts.include && !list_matches(g.opts.include, file, module))
            filtered = 1;
        if (g.opts.exclude && list_matches(g.opts.exclude, file, module))
            filtered = 1;
    }
    uint32_t id = 0;
    if (!filtered) {
        /* cProfile keys code by (co_filename, co_firstlineno, co_name) */
        const char *profile_name = utf8_or(code->co_name, "?");
#if PY_VERSION_HEX >= 0x030B0000
        const char *name = utf8_or(code->co_qualname, "?");
#else
        const char *name = profile_name;
#endif
        if (current_epoch() != epoch || g.seg == NULL) {
            PT_EXC_RESTORE;
            return PT_CODE_FILTERED;
        }
        int rc = pt_symlog_append_named(g.seg, PT_SYM_PY_FUNCTION, name, file,
                                        (uint32_t)(code->co_firstlineno > 0 ? code->co_firstlineno : 0),
                                        profile_name, &id);
        if (rc == -ENOSPC)
            set_first_error("symbol log full: %s and later functions show as <unknown>; "
                            "start with a larger symlog_bytes", name);
        else if (rc < 0)
            pt_tracer_fail("symbol log append failed");
        if (rc < 0)
            id = 0;
    }
    value = ((uint64_t)epoch << 33) | (filtered ? PT_XTRA_FILTERED : 0) | id;
    /* the id was published by pt_symlog_append before we cache it */
    if (pt_code_set_extra((PyObject *)code, pt_code_extra_index, (void *)(uintptr_t)value) < 0) {
        PyErr_Clear();
        pt_tracer_fail("cannot cache a symbol id on a code object");
    }
    PT_EXC_RESTORE;
    return filtered ? PT_CODE_FILTERED : id;
}

__attribute__((noinline)) uint64_t pt_code_lookup(PyCodeObject *code)
{
    uint64_t v = pt_code_extra(code);
    uint32_t epoch = current_epoch();
    if (PT_LIKELY((v >> 33) == epoch && epoch != 0))
        return (v & PT_XTRA_FILTERED) ? PT_CODE_FILTERED : (uint32_t)v;
    if (epoch == 0)
        return PT_CODE_FILTERED;
    return code_intern(code, epoch);
}

/* ---- C functions ---------------------------------------------------------- */

static unsigned long hash_ptr(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    return (unsigned long)x;
}

static int cnode_match(struct cds_lfht_node *node, const void *key)
{
    return caa_container_of(node, pt_cnode_t, node)->def == key;
}

static void type_names(PyTypeObject *tp, const char **name, char *module, size_t modlen)
{
    const char *full = tp->tp_name;
    const char *dot = strrchr(full, '.');
    *name = full;
    if (dot) {
        size_t n = (size_t)(dot - full);
        if (n >= modlen)
            n = modlen - 1;
        memcpy(module, full, n);
        module[n] = '\0';
    } else {
        snprintf(module, modlen, "builtins");
    }
}

static int defines(PyTypeObject *tp, const PyMethodDef *def)
{
    for (const PyMethodDef *m = tp->tp_methods; m && m->ml_name; m++)
        if (m == def)
            return 1;
    return 0;
}

/* The type on tp's MRO whose method table holds `def`, or NULL. A C function is
 * interned once per PyMethodDef, so it is named after the type that defines it,
 * not the (sub)type of the object it was first called on. */
static PyTypeObject *defining_type(PyTypeObject *tp, const PyMethodDef *def)
{
    PyObject *mro = tp->tp_mro;
    if (mro == NULL || !PyTuple_Check(mro))
        return defines(tp, def) ? tp : NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
        PyObject *base = PyTuple_GET_ITEM(mro, i);
        if (PyType_Check(base) && defines((PyTypeObject *)base, def))
            return (PyTypeObject *)base;
    }
    return NULL;
}

/* Objects whose repr runs no Python code (cProfile calls repr() on whatever the
 * lookup finds; we must not run the program's own __repr__ from a hook). */
static int repr_is_safe(PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    return tp == &PyMethodDescr_Type || tp == &PyClassMethodDescr_Type || tp == &PyWrapperDescr_Type ||
           tp == &PyMemberDescr_Type || tp == &PyGetSetDescr_Type || tp == &PyCFunction_Type ||
           tp == &PyCMethod_Type || tp == &PyFunction_Type || tp->tp_repr == PyBaseObject_Type.tp_repr;
}

/* s into out, cut (if it must be) before a UTF-8 sequence, never inside one. */
static void copy_utf8(PyObject *s, char *out, size_t len)
{
    const char *u = utf8_or(s, NULL);
    if (u == NULL || len == 0)
        return;
    size_t n = strlen(u);
    if (n >= len) {
        n = len - 1;
        while (n > 0 && ((unsigned char)u[n] & 0xC0u) == 0x80u)
            n--;
    }
    memcpy(out, u, n);
    out[n] = '\0';
}

/* The label cProfile gives a C function in this call: normalizeUserObj() of
 * CPython's Modules/_lsprof.c (the same in 3.10 to 3.13), applied to the bound
 * builtin method that CPython (3.10/3.11) or cProfile (3.12+, for a method
 * descriptor and its first argument) hands it:
 *   no self:   "<NAME>", or "<MODULE.NAME>" when the module is not builtins;
 *   with self: repr(lookup of NAME on type(self)), e.g. "<method 'append' of
 *              'list' objects>", else "<built-in method MODULE.NAME>" or
 *              "<built-in method NAME>" (module functions: self is the module).
 * cProfile keys its entries by the PyMethodDef and names one on first sight, as
 * we intern, so the first call's label is the label of every call. Where the
 * lookup finds an object whose repr would run Python code (a class attribute of
 * the program's own type with its own __repr__) the last form stands in. */
static void cprofile_label(PyObject *callable, PyObject *self_arg, const PyMethodDef *def, char *out,
                           size_t len)
{
    PyObject *self = NULL, *module = NULL;
    snprintf(out, len, "<built-in method %s>", def->ml_name);
    if (PyCFunction_Check(callable)) {
        PyCFunctionObject *f = (PyCFunctionObject *)callable;
        self = f->m_self;
        module = f->m_module;
        if (self == NULL) {
            PyObject *modname = NULL;
            if (module && PyUnicode_Check(module)) {
                modname = module;
                Py_INCREF(modname);
            } else if (module && PyModule_Check(module)) {
                modname = PyModule_GetNameObject(module);
                if (modname == NULL)
                    PyErr_Clear();
            }
            const char *m = utf8_or(modname, NULL);
            if (m && strcmp(m, "builtins") != 0)
                snprintf(out, len, "<%s.%s>", m, def->ml_name);
            else
                snprintf(out, len, "<%s>", def->ml_name);
            Py_XDECREF(modname);
            return;
        }
    } else {
        /* A method descriptor: cProfile binds it to the first argument (a method
         * bound this way has no module), and records nothing when it cannot
         * (no argument, or one of another type); the descriptor's own repr
         * names it then. */
        PyTypeObject *owner = PyDescr_TYPE(callable);
        if (self_arg == NULL || !PyObject_TypeCheck(self_arg, owner)) {
            snprintf(out, len, "<method '%s' of '%s' objects>", def->ml_name, owner->tp_name);
            return;
        }
        self = self_arg;
    }
    PyObject *name = PyUnicode_FromString(def->ml_name);
    PyObject *found = name ? _PyType_Lookup(Py_TYPE(self), name) : NULL; /* borrowed */
    Py_XINCREF(found);
    Py_XDECREF(name);
    PyObject *repr = found && repr_is_safe(found) ? PyObject_Repr(found) : NULL;
    Py_XDECREF(found);
    if (repr) {
        copy_utf8(repr, out, len);
        Py_DECREF(repr);
        return;
    }
    PyErr_Clear();
    const char *m = module && PyUnicode_Check(module) ? utf8_or(module, NULL) : NULL;
    if (m)
        snprintf(out, len, "<built-in method %s.%s>", m, def->ml_name);
}

static uint32_t cfunc_intern(PyObject *callable, PyObject *self_arg, const PyMethodDef *def,
                             pt_cnode_t *node, unsigned long hash, uint32_t epoch)
{
    char name[512], module[256], label[1024];
    const char *owner = NULL;
    PT_EXC_SAVE;
    module[0] = '\0';
    if (PyCFunction_Check(callable)) {
        PyCFunctionObject *f = (PyCFunctionObject *)callable;
        PyObject *self = f->m_self;
        if (self && PyModule_Check(self)) {
            owner = PyModule_GetName(self);
            if (owner == NULL) {
                PyErr_Clear();
                owner = utf8_or(f->m_module, "");
            }
            snprintf(module, sizeof module, "%s", owner);
        } else if (self) {
            /* a method of type(self), or a class or static method of self */
            PyTypeObject *tp = defining_type(Py_TYPE(self), def);
            if (tp == NULL && PyType_Check(self))
                tp = defining_type((PyTypeObject *)self, def);
            if (tp == NULL)
                tp = PyType_Check(self) ? (PyTypeObject *)self : Py_TYPE(self);
            type_names(tp, &owner, module, sizeof module);
        } else {
            owner = utf8_or(f->m_module, "");
            snprintf(module, sizeof module, "%s", owner);
        }
    } else {
        type_names(PyDescr_TYPE(callable), &owner, module, sizeof module);
    }
    if (owner && owner[0])
        snprintf(name, sizeof name, "%s.%s", owner, def->ml_name);
    else
        snprintf(name, sizeof name, "%s", def->ml_name);
    cprofile_label(callable, self_arg, def, label, sizeof label);

    uint32_t id = 0;
    if (current_epoch() != epoch || g.seg == NULL) {
        PT_EXC_RESTORE;
        return 0;
    }
    int rc = pt_symlog_append_named(g.seg, PT_SYM_C_FUNCTION, name, module, 0, label, &id);
    if (rc < 0) {
        id = 0;
        if (rc != -ENOSPC)
            pt_tracer_fail("symbol log append failed");
    }
    uint64_t value = ((uint64_t)epoch << 32) | id;
    if (node) {
        /* release: the symbol is published; pairs with the acquire in cfunc_id */
        atomic_store_explicit(&node->value, value, memory_order_release);
    } else {
        node = calloc(1, sizeof *node);
        if (node == NULL) {
            pt_tracer_fail("out of memory interning a C function");
        } else {
            cds_lfht_node_init(&node->node);
            node->def = def;
            atomic_store_explicit(&node->value, value, memory_order_relaxed);
            urcu_bp_read_lock();
            struct cds_lfht_node *got = cds_lfht_add_unique(g.cfuncs, hash, cnode_match, def, &node->node);
            if (got != &node->node) { /* someone else added it: update theirs */
                atomic_store_explicit(&caa_container_of(got, pt_cnode_t, node)->value, value,
                                      memory_order_release);
                urcu_bp_read_unlock();
                free(node);
            } else {
                urcu_bp_read_unlock();
            }
        }
    }
    PT_EXC_RESTORE;
    return id;
}

static inline uint32_t cfunc_id(PyObject *callable, PyObject *self_arg, const PyMethodDef *def, uint32_t epoch)
{
    struct cds_lfht_iter iter;
    unsigned long hash = hash_ptr(def);
    urcu_bp_read_lock();
    cds_lfht_lookup(g.cfuncs, hash, cnode_match, def, &iter);
    struct cds_lfht_node *n = cds_lfht_iter_get_node(&iter);
    pt_cnode_t *node = n ? caa_container_of(n, pt_cnode_t, node) : NULL;
    /* acquire: pairs with the release store of the value in cfunc_intern */
    uint64_t v = node ? atomic_load_explicit(&node->value, memory_order_acquire) : 0;
    urcu_bp_read_unlock();
    if (PT_LIKELY(node && (v >> 32) == epoch))
        return (uint32_t)v;
    return cfunc_intern(callable, self_arg, def, node, hash, epoch);
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
            snprintf(out, len, "%s", utf8_or(name, ""));
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
        PyObject *thr = ident ? PyDict_GetItem(active, ident) : NULL; /* borrowed */
        Py_XDECREF(ident);
        if (thr)
            thread_object_name(threading, thr, out, len);
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
    pt_segment_t *seg = g.seg;
    if (seg == NULL)
        return;
    t->missed++;
    /* relaxed: a statistic */
    atomic_fetch_add_explicit(&pt_segment_header(seg)->events_untraced, 1, memory_order_relaxed);
}

/* First event of this thread in the session: claim a ring and write the
 * frames already running as Frame records. `opening`: the code whose opening
 * triggers this, if that frame is already the innermost one on the stack (the
 * profile and monitoring hooks; the frame-evaluation hook runs before the
 * frame is linked, so it passes NULL); it is not recorded as a Frame. */
static pt_thread_t *thread_attach(PyCodeObject *opening)
{
    uint32_t epoch = current_epoch();
    pt_thread_t *t = pt_tls_thread;
    if (epoch == 0)
        return NULL;
    /* This thread already failed to get a ring in this session. If every ring
     * was taken, try again now and then: a reader frees the rings of threads
     * that ended, and a long-running thread should show up once it does. */
    if (t && t->attaching)
        return NULL; /* our own Python calls below (thread name, frames) */
    if (t && t->seen_epoch == epoch && (t->retry_ticks == 0 || now_ticks() < t->retry_ticks)) {
        if (t->retry_ticks != 0)
            count_untraced_event(t); /* waiting for a ring: the program's event is lost, counted */
        return NULL;
    }
    if (t == NULL) {
        t = calloc(1, sizeof *t);
        if (t == NULL) {
            pt_tracer_fail("out of memory for a thread context");
            return NULL;
        }
        pthread_mutex_lock(&g.lock);
        t->next = g.threads;
        if (g.threads)
            g.threads->prev = t;
        g.threads = t;
        pthread_mutex_unlock(&g.lock);
        pthread_setspecific(g.key, t);
        pt_tls_thread = t;
    }
    if (t->seen_epoch != epoch)
        t->missed = 0; /* an earlier session's count went with its segment */
    t->seen_epoch = epoch;

    /* Python work first: name, and the ids of the frames already running
     * (innermost first), skipping the frame whose opening triggers us. */
    char name[PT_THREAD_NAME_BYTES];
    uint32_t *ids = NULL;
    pt_prior_frame_t *frames = NULL;
    size_t n = 0, cap = 0;
    PT_EXC_SAVE;
    t->attaching = 1;
    thread_name(name, sizeof name);
    /* A launcher's thread starts its picture empty: what runs below the
     * launcher (site, a sitecustomize) is not the program's. */
    int skip_stack = g.opts.stack_skip_thread != 0 && g.opts.stack_skip_thread == PyThread_get_thread_ident();
    PyFrameObject *f = skip_stack ? NULL : PyEval_GetFrame();
    Py_XINCREF(f);
    int first = 1;
    while (f) {
        PyCodeObject *code = PyFrame_GetCode(f);
        if (!(first && code == opening)) {
            uint64_t id = pt_code_lookup(code);
            if (id != PT_CODE_FILTERED) {
                if (n == cap) {
                    size_t ncap = cap ? cap * 2 : 64;
                    uint32_t *nids = realloc(ids, ncap * sizeof *ids);
                    if (nids == NULL)
                        break;
                    ids = nids;
                    pt_prior_frame_t *nframes = realloc(frames, ncap * sizeof *frames);
                    if (nframes == NULL)
                        break;
                    frames = nframes;
                    cap = ncap;
                }
                frames[n].frame = pt_frame_key(f);
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
    if (current_epoch() != epoch || g.seg == NULL) {
        free(ids);
        free(frames);
        return NULL;
    }
    uint64_t tid = (uint64_t)syscall(SYS_gettid);
    int rc = pt_segment_claim_ring(g.seg, tid, name, now_ticks(), &t->ring);
    if (rc < 0) {
        free(ids);
        free(frames);
        t->retry_ticks = 0;
        if (rc == -EAGAIN || rc == -ENOSPC) {
            if (t->untraced_epoch != epoch) {
                t->untraced_epoch = epoch;
                /* relaxed: a statistic */
                atomic_fetch_add_explicit(&pt_segment_header(g.seg)->threads_untraced, 1, memory_order_relaxed);
                if (rc == -EAGAIN)
                    set_first_error("no free ring for thread %llu (%s): it runs untraced until one frees; "
                                    "start with a larger ring_count (--rings)",
                                    (unsigned long long)tid, name);
                else
                    set_first_error("no room in /dev/shm for the ring of thread %llu (%s): it runs untraced "
                                    "until room returns; free space in /dev/shm or lower --ring-size",
                                    (unsigned long long)tid, name);
            }
            t->retry_ticks = now_ticks() + g.clock.ticks_per_second / 10; /* 100 ms */
            count_untraced_event(t);
        } else {
            pt_tracer_fail("cannot claim a ring");
        }
        return NULL;
    }
    t->retry_ticks = 0;
    if (skip_stack)
        g.opts.stack_skip_thread = 0; /* once: the ident may be reused by a later thread */
    if (t->missed) {
        /* What the thread did without a ring becomes a gap of its stream:
         * counted as dropped, a Lost record, then its stack (below). */
        /* relaxed: a statistic, moved from one counter to the other */
        atomic_fetch_sub_explicit(&pt_segment_header(g.seg)->events_untraced, t->missed, memory_order_relaxed);
        pt_ring_count_missed(&t->ring, t->missed);
        t->missed = 0;
    }
    pt_ring_set_stack_writer(&t->ring, stack_writer, t);
    t->depth = 0;
    /* release: publishes the ring handle to the heartbeat thread; pairs with
     * its acquire load in serve_stack_requests */
    atomic_store_explicit(&t->ok_epoch, epoch, memory_order_release);
    pthread_mutex_lock(&g.lock);
    g.threads_seen++;
    pthread_mutex_unlock(&g.lock);
    uint64_t ticks = now_ticks();
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
    if (PT_LIKELY(t != NULL && pt_ok_epoch(t) == current_epoch()))
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
        id = cfunc_id(callable, self_arg, def, epoch);
        if (PT_UNLIKELY(pt_ok_epoch(t) != current_epoch()))
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
    if (current_epoch() == 0)
        return;
    pt_thread_t *t = thread_get(NULL);
    if (t)
        pt_emit(t, label_id, kind, 0);
}

int pt_tracer_intern_label(const char *name, uint32_t *id_out)
{
    if (current_epoch() == 0 || g.seg == NULL)
        return -ENOENT;
    return pt_symlog_append(g.seg, PT_SYM_LABEL, name, "", 0, id_out);
}

/* ---- closing and retiring (g.lock held) ----------------------------------- */

/* Close every open frame of t, publish counters, retire its ring. The caller
 * either holds the GIL (so t's owner is not in a hook) or is t's own thread
 * after it stopped running Python (destructor) or the exit handler. */
static void thread_finish_locked(pt_thread_t *t)
{
    pt_close_synthetic_above(t, 0);
    pt_ring_flush_counters(&t->ring);
    g.retired_written += pt_ring_written(&t->ring);
    /* relaxed: counters only */
    g.retired_dropped += atomic_load_explicit(&t->ring.slot->events_dropped, memory_order_relaxed);
    pt_segment_retire_ring(g.seg, &t->ring, now_ticks());
    atomic_store_explicit(&t->ok_epoch, 0, memory_order_relaxed); /* g.lock held */
}

static void thread_destructor(void *arg)
{
    pt_thread_t *t = arg;
    pthread_mutex_lock(&g.lock);
    uint32_t epoch = current_epoch();
    if (epoch != 0 && pt_ok_epoch(t) == epoch && g.seg)
        thread_finish_locked(t);
    if (t->prev)
        t->prev->next = t->next;
    else if (g.threads == t)
        g.threads = t->next;
    if (t->next)
        t->next->prev = t->prev;
    pthread_mutex_unlock(&g.lock);
    free(t->prior_frames);
    free(t);
}

/* ---- heartbeat --------------------------------------------------------------- */

/* A reader that started in the middle of a thread's stream asked for its
 * stack: send the owner's next event to the ring's slow path, which writes it.
 * Without the GIL: the thread list and the contexts are held by g.lock. */
static void serve_stack_requests(uint32_t epoch)
{
    if (epoch == 0)
        return;
    pthread_mutex_lock(&g.lock);
    for (pt_thread_t *t = g.threads; t; t = t->next) {
        /* acquire: pairs with the release store of ok_epoch in thread_attach,
         * after which the ring handle is complete */
        if (atomic_load_explicit(&t->ok_epoch, memory_order_acquire) != epoch)
            continue;
        /* relaxed: the request carries no data (ring.h) */
        if (atomic_load_explicit(&t->ring.slot->stack_request, memory_order_relaxed) != 0)
            pt_ring_request_slow_path(&t->ring);
    }
    pthread_mutex_unlock(&g.lock);
}

static void *heartbeat_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g.hb_lock);
    while (!g.hb_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (long)PT_HEARTBEAT_NS;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec += 1;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g.hb_cond, &g.hb_lock, &ts);
        if (!g.hb_stop && g.seg) {
            pt_segment_heartbeat(g.seg); /* seg is replaced only after we are joined */
            serve_stack_requests(current_epoch());
        }
        if (!g.hb_stop)
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
    if (g.seg == NULL)
        return;
    if (exiting)
        pt_segment_set_state(g.seg, PT_STATE_EXITED);
    pt_seg_header_t *h = pt_segment_header(g.seg);
    int unlink_it = !consumer_alive(h);
    if (!exiting && !unlink_it) {
        /* a reader is attached: it reads to the end of this (stopped) session
         * and unlinks; tell it nothing more will come */
        pt_segment_set_state(g.seg, PT_STATE_EXITED);
    }
    pt_segment_close(g.seg, unlink_it);
    g.seg = NULL;
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
    atomic_store_explicit(&pt_hot.epoch, 0, memory_order_relaxed);
    for (pt_thread_t *t = g.threads; t; t = t->next)
        if (pt_ok_epoch(t) != 0 && pt_ok_epoch(t) == g.last_epoch)
            thread_finish_locked(t);
}

/* Runs inside fork() in the child, before any Python after-fork hook: from
 * here on the child must not write a byte into the parent's rings (they are
 * still mapped and live in the parent), so tracing is switched off at once.
 * Python hooks registered before ours (random, threading) run next, untraced;
 * our after_in_child hook then gives the child its own segment. */
static void atfork_child(void)
{
    g.fork_resume = current_epoch() != 0;
    /* relaxed: the child has one thread */
    atomic_store_explicit(&pt_hot.epoch, 0, memory_order_relaxed);
}

static void at_exit(void)
{
    /* Runs after the interpreter is gone: no Python API here. */
    heartbeat_stop();
    pthread_mutex_lock(&g.lock);
    int traced = g.seg != NULL;
    if (g.seg) {
        if (current_epoch() != 0)
            stop_locked();
        segment_release_locked(1);
    }
    pthread_mutex_unlock(&g.lock);
    /* Fork children that left with _exit() (multiprocessing workers do) and
     * that no reader holds would otherwise stay in /dev/shm for good. */
    if (traced)
        (void)pt_segment_collect_children((uint64_t)getpid());
}

/* ---- public --------------------------------------------------------------------- */

int pt_tracer_global_init(char *err, size_t errlen)
{
    if (g.initialised)
        return 0;
    heartbeat_sync_init();
    pt_code_extra_index = pt_request_code_extra_index(NULL);
    if (pt_code_extra_index < 0) {
        snprintf(err, errlen, "no free co_extra slot on code objects (too many tools loaded)");
        return -ENOSPC;
    }
    int rc = pthread_key_create(&g.key, thread_destructor);
    if (rc != 0) {
        snprintf(err, errlen, "pthread_key_create failed: %s", strerror(rc));
        return -rc;
    }
    /* Fixed size, no auto-resize and no removal: lookups are lock-free, and
     * nothing ever needs call_rcu (whose worker threads would not survive a
     * fork). 2^14 buckets keep chains short for tens of thousands of C
     * functions. */
    g.cfuncs = cds_lfht_new_flavor(1u << 14, 1u << 14, 1u << 14, 0, &urcu_bp_flavor, NULL);
    if (g.cfuncs == NULL) {
        snprintf(err, errlen, "cannot allocate the C function table");
        return -ENOMEM;
    }
    pthread_atfork(urcu_bp_before_fork, urcu_bp_after_fork_parent, urcu_bp_after_fork_child);
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
    cfg.ring_count = g.opts.ring_count;
    cfg.chunk_bytes = g.opts.chunk_bytes;
    cfg.chunks_per_ring = g.opts.chunks_per_ring;
    cfg.symlog_bytes = g.opts.symlog_bytes;
    cfg.drop_policy = g.opts.policy;
    cfg.wait_timeout_ns = g.opts.wait_timeout_ns;
    cfg.cmdline = g.opts.cmdline;
    char version[PT_PYVERSION_BYTES];
    snprintf(version, sizeof version, "%s", Py_GetVersion());
    char *sp = strchr(version, ' ');
    if (sp)
        *sp = '\0';
    cfg.python_version = version;
    cfg.clock_kind = g.clock.kind;
    cfg.ticks_per_second = g.clock.ticks_per_second;
    cfg.base_ticks = g.clock.base_ticks;
    cfg.base_monotonic_ns = g.clock.base_monotonic_ns;
    cfg.base_realtime_ns = g.clock.base_realtime_ns;
    return pt_segment_create(&cfg, &g.seg, err, errlen);
}

static int begin_session(char *err, size_t errlen)
{
    int rc = create_segment(err, errlen);
    if (rc < 0)
        return rc;
    g.retired_written = g.retired_dropped = g.threads_seen = 0;
    atomic_store_explicit(&g.hook_lost, 0, memory_order_relaxed);
    atomic_store_explicit(&g.first_error_set, 0, memory_order_relaxed);
    g.first_error[0] = '\0';
    if (++g.last_epoch >= (1u << 31) || g.last_epoch == 0)
        g.last_epoch = 1; /* 31 bits in co_extra; wrapping after 2^31 sessions is harmless
                             only if no code object survived them all -- accepted */
    rc = heartbeat_start();
    if (rc < 0) {
        snprintf(err, errlen, "cannot start the heartbeat thread: %s", strerror(-rc));
        pt_segment_close(g.seg, 1);
        g.seg = NULL;
        return rc;
    }
    atomic_store_explicit(&pt_hot.epoch, g.last_epoch, memory_order_relaxed);
    return 0;
}

int pt_tracer_start(pt_options_t *opts, char *err, size_t errlen)
{
    if (current_epoch() != 0) {
        free_opts(opts);
        snprintf(err, errlen, "already tracing into %s; call stop() first",
                 g.seg ? pt_segment_name(g.seg) : "?");
        return -EALREADY;
    }
    int rc = pt_clock_init(&g.clock, opts->clock_kind);
    pt_hot.clock_kind = g.clock.kind;
    pt_hot.filtering = opts->include != NULL || opts->exclude != NULL;
    if (rc < 0) {
        free_opts(opts);
        snprintf(err, errlen, "cannot initialise the clock: %s", strerror(-rc));
        return rc;
    }
    pthread_mutex_lock(&g.lock);
    segment_release_locked(0);
    pthread_mutex_unlock(&g.lock);
    free_opts(&g.opts);
    g.opts = *opts;
    memset(opts, 0, sizeof *opts);
    return begin_session(err, errlen);
}

static void copy_counters(pt_counters_t *out)
{
    memset(out, 0, sizeof *out);
    if (g.seg == NULL)
        return;
    pt_seg_header_t *h = pt_segment_header(g.seg);
    snprintf(out->segment, sizeof out->segment, "%s", pt_segment_name(g.seg));
    out->events_written = g.retired_written;
    out->events_dropped = g.retired_dropped;
    uint32_t epoch = current_epoch();
    for (pt_thread_t *t = g.threads; t; t = t->next) {
        if (epoch == 0 || pt_ok_epoch(t) != epoch)
            continue;
        pt_ring_flush_counters(&t->ring); /* GIL held: the owner is not in a hook */
        out->events_written += pt_ring_written(&t->ring);
        out->events_dropped += atomic_load_explicit(&t->ring.slot->events_dropped, memory_order_relaxed);
    }
    /* relaxed: statistics */
    out->hook_errors = atomic_load_explicit(&h->hook_errors, memory_order_relaxed);
    out->symbols = atomic_load_explicit(&h->symbol_count, memory_order_relaxed);
    out->symbols_dropped = atomic_load_explicit(&h->symbols_dropped, memory_order_relaxed);
    out->threads_untraced = atomic_load_explicit(&h->threads_untraced, memory_order_relaxed);
    out->tracing_displaced = atomic_load_explicit(&h->tracing_displaced, memory_order_relaxed);
    out->events_untraced = atomic_load_explicit(&h->events_untraced, memory_order_relaxed);
    out->threads = g.threads_seen;
    /* acquire: pairs with the release in set_first_error */
    if (atomic_load_explicit(&g.first_error_set, memory_order_acquire) == 2)
        snprintf(out->first_error, sizeof out->first_error, "%s", g.first_error);
}

int pt_tracer_stop(pt_counters_t *out)
{
    if (current_epoch() == 0)
        return -ENOENT;
    heartbeat_stop();
    pthread_mutex_lock(&g.lock);
    stop_locked();
    pt_segment_set_state(g.seg, PT_STATE_STOPPED);
    copy_counters(out);
    pthread_mutex_unlock(&g.lock);
    /* The segment stays (state STOPPED) until the next start() or exit, so a
     * reader that attaches late still reads the whole session. */
    return 0;
}

int pt_tracer_release(void)
{
    if (current_epoch() != 0)
        return -EBUSY;
    pthread_mutex_lock(&g.lock);
    int had = g.seg != NULL;
    segment_release_locked(0);
    pthread_mutex_unlock(&g.lock);
    return had ? 0 : -ENOENT;
}

int pt_tracer_is_tracing(void)
{
    return current_epoch() != 0;
}

const char *pt_tracer_segment_name(void)
{
    return current_epoch() != 0 && g.seg ? pt_segment_name(g.seg) : NULL;
}

void pt_tracer_counters(pt_counters_t *out)
{
    pthread_mutex_lock(&g.lock);
    copy_counters(out);
    pthread_mutex_unlock(&g.lock);
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
    if (current_epoch() != 0 && !g.hb_running && heartbeat_start() != 0)
        pt_tracer_fail("fork: cannot restart the heartbeat thread");
}

const pt_options_t *pt_tracer_options(void)
{
    return &g.opts;
}

void pt_tracer_after_fork_child(void)
{
    /* Only the forking thread exists; other threads' contexts are garbage and
     * the parent's segment must not be touched (its rings are live in the
     * parent): unmap it without changing a byte. */
    memset(&g.lock, 0, sizeof g.lock);
    pthread_mutex_init(&g.lock, NULL);
    heartbeat_sync_init();
    g.hb_running = 0;
    pt_thread_t *me = pt_tls_thread;
    pt_thread_t *t = g.threads;
    while (t) {
        pt_thread_t *next = t->next;
        if (t != me) {
            free(t->prior_frames);
            free(t);
        }
        t = next;
    }
    g.threads = me;
    if (me) {
        me->next = me->prev = NULL;
        atomic_store_explicit(&me->ok_epoch, 0, memory_order_relaxed); /* one thread left */
        me->seen_epoch = 0;
        me->depth = 0;
        me->prior = 0;
    }
    int was_tracing = g.fork_resume;
    g.fork_resume = 0;
    g.opts.stack_skip_thread = 0; /* the child's stack is the program's, from the fork down */
    atomic_store_explicit(&pt_hot.epoch, 0, memory_order_relaxed);
    if (g.seg) {
        pt_segment_close(g.seg, 0);
        g.seg = NULL;
    }
    if (!was_tracing)
        return;
    char err[256];
    if (begin_session(err, sizeof err) < 0) {
        set_first_error("fork: the child could not create its segment: %s", err);
        return;
    }
    /* Claim now so the child's stream starts with this thread's stack. */
    (void)thread_get(NULL);
}
