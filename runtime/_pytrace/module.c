/*
 * _pytrace: module definition (multi-phase init, module state) and the
 * tracing API: start, stop, release, is_tracing, segment_name, counters, label,
 * span_begin, span_end, mark, list_segments, collect_stale, Reader.
 */
#include "pt_adapters.h"
#include "pt_tasks.h"
#include "pt_tracer.h"
#include "hubclient_type.h"
#include "recfile_type.h"
#include "shm/base/procstat.h"
#include "shm/segment.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct pt_module_state {
    PyObject *reader_type;
    PyObject *labels;       /* str -> int; the GIL, or free-threaded a critical section on it
                             * (py_label) guards it and labels_segment; cleared per session */
    char labels_segment[96];
} pt_module_state_t;

static inline pt_module_state_t *get_state(PyObject *module)
{
    return (pt_module_state_t *)PyModule_GetState(module);
}

PyObject *pt_oserror(int err_neg, const char *msg)
{
    PyObject *exc = PyObject_CallFunction(PyExc_OSError, "is", -err_neg, msg);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

int pt_add_type(PyObject *module, PyType_Spec *spec)
{
    PyObject *type = PyType_FromModuleAndSpec(module, spec, NULL);
    if (type == NULL)
        return -1;
    const char *dot = strrchr(spec->name, '.');
    if (PyModule_AddObject(module, dot ? dot + 1 : spec->name, type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

/* ---- start() ----------------------------------------------------------------- */

static char *dup_utf8(PyObject *s)
{
    const char *u = PyUnicode_AsUTF8(s);
    if (u == NULL)
        return NULL;
    char *d = strdup(u);
    if (d == NULL)
        PyErr_NoMemory();
    return d;
}

/* None -> NULL; iterable of str/os.PathLike -> NULL-terminated vector. */
static int str_vector(PyObject *obj, const char *what, char ***out)
{
    *out = NULL;
    if (obj == NULL || obj == Py_None)
        return 0;
    if (PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list of strings, not a string", what);
        return -1;
    }
    PyObject *seq = PySequence_Fast(obj, "include/exclude must be a list of strings");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    char **v = calloc((size_t)n + 1, sizeof *v);
    if (v == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyOS_FSPath(PySequence_Fast_GET_ITEM(seq, i));
        if (item == NULL || !PyUnicode_Check(item)) {
            if (item && !PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s entries must be strings", what);
            Py_XDECREF(item);
            goto err;
        }
        v[i] = dup_utf8(item);
        Py_DECREF(item);
        if (v[i] == NULL)
            goto err;
    }
    Py_DECREF(seq);
    *out = v;
    return 0;
err:
    for (Py_ssize_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
    Py_DECREF(seq);
    return -1;
}

static char *default_cmdline(void)
{
    PyObject *argv = PySys_GetObject("orig_argv"); /* borrowed */
    if (argv == NULL)
        argv = PySys_GetObject("argv");
    if (argv == NULL || !PyList_Check(argv))
        return NULL;
    PyObject *sep = PyUnicode_FromString(" ");
    if (sep == NULL)
        return NULL;
    PyObject *joined = PyUnicode_Join(sep, argv);
    Py_DECREF(sep);
    if (joined == NULL) {
        PyErr_Clear();
        return NULL;
    }
    char *s = dup_utf8(joined);
    Py_DECREF(joined);
    if (s == NULL)
        PyErr_Clear();
    return s;
}

static void free_vector(char **v)
{
    for (char **p = v; p && *p; p++)
        free(*p);
    free(v);
}

static void patch_os_exit(void); /* below, with os._exit's wrapper */

static PyObject *start_impl(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"c_calls", "include", "exclude", "policy", "ring_count", "chunk_bytes",
                             "chunks_per_ring", "symlog_bytes", "wait_timeout", "clock", "cmdline",
                             "hide", "caller_stack", "exit_wait", "fork_children", NULL};
    int c_calls = 1, caller_stack = 1, fork_children = 1;
    PyObject *include = Py_None, *exclude = Py_None, *cmdline = Py_None, *hide = Py_None;
    const char *policy = "drop", *clock = "auto";
    unsigned long ring_count = 0, chunk_bytes = 0, chunks_per_ring = 0;
    unsigned long long symlog_bytes = 0;
    double wait_timeout = 1.0, exit_wait = 0.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$pOOskkkKdsOOpdp:start", kwlist, &c_calls, &include,
                                     &exclude, &policy, &ring_count, &chunk_bytes, &chunks_per_ring,
                                     &symlog_bytes, &wait_timeout, &clock, &cmdline, &hide,
                                     &caller_stack, &exit_wait, &fork_children))
        return NULL;
    if (pt_tracer_is_tracing()) {
        PyErr_Format(PyExc_RuntimeError, "already tracing into %s; call stop() first",
                     pt_tracer_segment_name());
        return NULL;
    }
    pt_options_t opts;
    memset(&opts, 0, sizeof opts);
    opts.c_calls = c_calls;
    if (strcmp(policy, "drop") == 0)
        opts.policy = PT_POLICY_DROP;
    else if (strcmp(policy, "wait") == 0)
        opts.policy = PT_POLICY_WAIT;
    else {
        PyErr_Format(PyExc_ValueError, "policy must be 'drop' or 'wait', not '%s'", policy);
        return NULL;
    }
    if (strcmp(clock, "auto") == 0)
        opts.clock_kind = -1;
    else if (strcmp(clock, "tsc") == 0)
        opts.clock_kind = PT_CLOCK_TSC;
    else if (strcmp(clock, "monotonic") == 0)
        opts.clock_kind = PT_CLOCK_MONOTONIC;
    else {
        PyErr_SetString(PyExc_ValueError, "clock must be 'auto', 'tsc' or 'monotonic'");
        return NULL;
    }
    if (ring_count > UINT32_MAX || chunk_bytes > UINT32_MAX || chunks_per_ring > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "ring_count, chunk_bytes and chunks_per_ring must fit 32 bits");
        return NULL;
    }
    if (!(wait_timeout >= 0.0) || wait_timeout > 3600.0) {
        PyErr_SetString(PyExc_ValueError, "wait_timeout must be between 0 and 3600 seconds");
        return NULL;
    }
    if (!(exit_wait >= 0.0) || exit_wait > 60.0) {
        PyErr_SetString(PyExc_ValueError, "exit_wait must be between 0 and 60 seconds");
        return NULL;
    }
    opts.exit_wait_ns = (uint64_t)(exit_wait * 1e9);
    opts.fork_untraced = !fork_children;
    opts.ring_count = (uint32_t)ring_count;
    opts.chunk_bytes = (uint32_t)chunk_bytes;
    opts.chunks_per_ring = (uint32_t)chunks_per_ring;
    opts.symlog_bytes = symlog_bytes;
    opts.wait_timeout_ns = (uint64_t)(wait_timeout * 1e9);
    if (opts.wait_timeout_ns == 0 && opts.policy == PT_POLICY_WAIT)
        opts.wait_timeout_ns = 1; /* 0 means "default" to the segment */
    if (str_vector(include, "include", &opts.include) < 0)
        return NULL;
    if (str_vector(exclude, "exclude", &opts.exclude) < 0) {
        free_vector(opts.include);
        return NULL;
    }
    if (str_vector(hide, "hide", &opts.hide) < 0) {
        free_vector(opts.include);
        free_vector(opts.exclude);
        return NULL;
    }
    if (!caller_stack)
        opts.stack_skip_thread = PyThread_get_thread_ident();
    if (cmdline != Py_None) {
        if (!PyUnicode_Check(cmdline)) {
            PyErr_SetString(PyExc_TypeError, "cmdline must be a string or None");
            free_vector(opts.include);
            free_vector(opts.exclude);
            free_vector(opts.hide);
            return NULL;
        }
        opts.cmdline = dup_utf8(cmdline);
        if (opts.cmdline == NULL) {
            free_vector(opts.include);
            free_vector(opts.exclude);
            free_vector(opts.hide);
            return NULL;
        }
    } else {
        opts.cmdline = default_cmdline();
    }

    char err[512] = "";
    int rc = pt_tracer_start(&opts, err, sizeof err); /* owns opts now */
    if (rc == -EALREADY) {
        PyErr_SetString(PyExc_RuntimeError, err);
        return NULL;
    }
    if (rc < 0)
        return pt_oserror(rc, err[0] ? err : strerror(-rc));
    patch_os_exit();
    pt_module_state_t *st = get_state(module);
    PyDict_Clear(st->labels);
    if (pt_tracer_hooks_install(module, c_calls) < 0) {
        pt_counters_t c;
        pt_tracer_stop(&c);
        return NULL;
    }
    return PyUnicode_FromString(pt_tracer_segment_name());
}

/* ---- stop(), counters() -------------------------------------------------------- */

static PyObject *counters_dict(const pt_counters_t *c, const char *hook)
{
    PyObject *first = c->first_error[0] ? PyUnicode_DecodeUTF8(c->first_error, (Py_ssize_t)strlen(c->first_error), "replace")
                                        : Py_NewRef(Py_None);
    if (first == NULL)
        return NULL;
    PyObject *seg = c->segment[0] ? PyUnicode_FromString(c->segment) : Py_NewRef(Py_None);
    if (seg == NULL) {
        Py_DECREF(first);
        return NULL;
    }
    return Py_BuildValue("{sNsKsKsKsKsKsKsKsKsKsNsz}", "segment", seg, "events_written",
                         (unsigned long long)c->events_written, "events_dropped",
                         (unsigned long long)c->events_dropped, "hook_errors",
                         (unsigned long long)c->hook_errors, "symbols", (unsigned long long)c->symbols,
                         "symbols_dropped", (unsigned long long)c->symbols_dropped, "threads",
                         (unsigned long long)c->threads, "threads_untraced",
                         (unsigned long long)c->threads_untraced, "tracing_displaced",
                         (unsigned long long)c->tracing_displaced, "events_untraced",
                         (unsigned long long)c->events_untraced, "first_error", first, "hook", hook);
}

static PyObject *stop_impl(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    if (!pt_tracer_is_tracing()) {
        PyErr_SetString(PyExc_RuntimeError, "not tracing; call start() first");
        return NULL;
    }
    const char *hook = pt_tracer_hook_name();
    pt_tracer_check_hook();
    pt_tracer_hooks_uninstall();
    pt_counters_t c;
    pt_tracer_stop(&c);
    return counters_dict(&c, hook);
}

/* pytrace detach: once stopped, nothing of the session should stay behind;
 * the segment would otherwise wait for the next start() or the exit. */
static PyObject *release_impl(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    int rc = pt_tracer_release();
    if (rc == -EBUSY) {
        PyErr_SetString(PyExc_RuntimeError, "still tracing; call stop() first");
        return NULL;
    }
    return PyBool_FromLong(rc == 0);
}

/* ---- one session change at a time ------------------------------------------------ */

/* start(), stop() and release() check the session's state and then change it (hooks, epoch,
 * heartbeat, segment). With the GIL nothing else ran between the check and the change; on a
 * free-threaded build two threads would both pass the check (two stops: the heartbeat joined
 * twice, the segment closed twice). session_lock serialises them. It is re-entrant on its own
 * thread, as the GIL was: a change may run Python (a GC run on a cold path, a hook install),
 * which may call start() or stop() again, and finds the state it then sees. A PyMutex parks
 * detached, so a thread waiting here never holds up a stop-the-world. Reset in a fork child:
 * its holder, if another thread, did not come along. */
#ifdef Py_GIL_DISABLED
static PyMutex session_mutex;
static _Atomic unsigned long session_owner; /* PyThread_get_thread_ident of the holder, or 0 */
static unsigned session_depth;              /* under session_mutex */

static void session_lock(void)
{
    unsigned long me = PyThread_get_thread_ident();
    if (atomic_load_explicit(&session_owner, memory_order_relaxed) != me) {
        PyMutex_Lock(&session_mutex);
        atomic_store_explicit(&session_owner, me, memory_order_relaxed);
    }
    session_depth++;
}

static void session_unlock(void)
{
    if (--session_depth == 0) {
        atomic_store_explicit(&session_owner, 0, memory_order_relaxed);
        PyMutex_Unlock(&session_mutex);
    }
}

static void session_lock_after_fork_child(void)
{
    memset(&session_mutex, 0, sizeof session_mutex);
    atomic_store_explicit(&session_owner, 0, memory_order_relaxed);
    session_depth = 0;
}
#else
static void session_lock(void) {}
static void session_unlock(void) {}
static void session_lock_after_fork_child(void) {}
#endif

static PyObject *py_start(PyObject *module, PyObject *args, PyObject *kwargs)
{
    session_lock();
    PyObject *r = start_impl(module, args, kwargs);
    session_unlock();
    return r;
}

static PyObject *py_stop(PyObject *module, PyObject *unused)
{
    session_lock();
    PyObject *r = stop_impl(module, unused);
    session_unlock();
    return r;
}

static PyObject *py_release(PyObject *module, PyObject *unused)
{
    session_lock();
    PyObject *r = release_impl(module, unused);
    session_unlock();
    return r;
}

static PyObject *py_counters(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    pt_counters_t c;
    pt_tracer_counters(&c);
    return counters_dict(&c, pt_tracer_hook_name());
}

static PyObject *py_is_tracing(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyBool_FromLong(pt_tracer_is_tracing());
}

static PyObject *py_segment_name(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    const char *name = pt_tracer_segment_name();
    if (name == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(name);
}

/* ---- labels and user records -------------------------------------------------- */

/* The label cache is a dict and a segment name, shared by every thread. With the GIL the body
 * ran alone; free-threaded (3.14t), a critical section on the dict keeps the segment check, the
 * lookup, the interning and the insert together, so two threads asking for one new name at once
 * intern it once (one id, one symbol) and no thread reads a value another thread's clear just
 * dropped (PyDict_GetItemWithError's result is borrowed). The UTF-8 form is taken before it; a
 * str key runs no Python inside (a str subclass with its own __hash__/__eq__ could, and would
 * suspend the section there, as any critical section is). */
static PyObject *py_label(PyObject *module, PyObject *name)
{
    if (!PyUnicode_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "label name must be a string");
        return NULL;
    }
    pt_module_state_t *st = get_state(module);
    const char *utf8 = PyUnicode_AsUTF8(name);
    if (utf8 == NULL)
        return NULL;
    PyObject *result = NULL;
#ifdef Py_GIL_DISABLED
    Py_BEGIN_CRITICAL_SECTION(st->labels);
#endif
    /* read inside: waiting for the section detaches this thread, and a stop() on another
     * thread may close the segment (and free its name) meanwhile */
    const char *seg = pt_tracer_segment_name();
    if (seg == NULL) {
        result = PyLong_FromLong(0); /* not tracing: span/mark with 0 are no-ops anyway */
    } else {
        if (strcmp(seg, st->labels_segment) != 0) {
            PyDict_Clear(st->labels);
            snprintf(st->labels_segment, sizeof st->labels_segment, "%s", seg);
        }
        PyObject *cached = PyDict_GetItemWithError(st->labels, name); /* borrowed: dict held */
        if (cached) {
            result = Py_NewRef(cached);
        } else if (!PyErr_Occurred()) {
            uint32_t id = 0;
            int rc = pt_tracer_intern_label(utf8, &id);
            if (rc < 0 && rc != -ENOSPC) {
                pt_tracer_fail("label interning failed");
                id = 0;
            }
            result = PyLong_FromUnsignedLong(id);
            if (result != NULL && PyDict_SetItem(st->labels, name, result) < 0)
                Py_CLEAR(result);
        }
    }
#ifdef Py_GIL_DISABLED
    Py_END_CRITICAL_SECTION();
#endif
    return result;
}

static PyObject *user_event_flags(PyObject *arg, uint8_t kind, uint8_t flags)
{
    unsigned long id = PyLong_AsUnsignedLong(arg);
    if (id == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    if (id > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "label id out of range");
        return NULL;
    }
    pt_tracer_user_event_flags((uint32_t)id, kind, flags);
    Py_RETURN_NONE;
}

static PyObject *user_event(PyObject *arg, uint8_t kind)
{
    return user_event_flags(arg, kind, 0);
}

static PyObject *py_span_begin(PyObject *module, PyObject *arg)
{
    (void)module;
    return user_event(arg, PT_EV_SPAN_BEGIN);
}

static PyObject *py_span_end(PyObject *module, PyObject *arg)
{
    (void)module;
    return user_event(arg, PT_EV_SPAN_END);
}

static PyObject *py_set_role(PyObject *module, PyObject *arg)
{
    (void)module;
    const char *role = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (role == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "set_role() takes a str");
        return NULL;
    }
    return PyBool_FromLong(pt_tracer_set_role(role) == 0);
}

static PyObject *py_mark(PyObject *module, PyObject *arg)
{
    (void)module;
    return user_event(arg, PT_EV_MARK);
}

/* A Mark that ends a step of the program's loop on this thread (PT_EVF_STEP). */
static PyObject *py_step(PyObject *module, PyObject *arg)
{
    (void)module;
    return user_event_flags(arg, PT_EV_MARK, PT_EVF_STEP);
}

/* ---- fork ----------------------------------------------------------------------- */

/* os._exit: it runs no exit handler, so a process that leaves by it -- every
 * multiprocessing fork and forkserver worker (Process, Pool, DataLoader), a
 * program's own os._exit(0) -- would end its segment without EXITED and read as
 * "died". Setting os._exit to a function of ours is not enough: a reference taken
 * before (Process(target=os._exit), `from os import _exit`) calls the real one.
 * So the one posix._exit object itself is changed in place, once per process
 * (fork children inherit it): its method definition becomes ours, with the same
 * name, flags and doc, which finishes the segment as a normal exit does and then
 * calls the real function with the same arguments. The object, its identity,
 * name, signature and behaviour stay what the program knows. */
typedef PyObject *(*pt_fastkw_fn)(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);

static pt_fastkw_fn real_os_exit;
static PyMethodDef exit_def;

static PyObject *py_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t given = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    /* only a call that will exit: one int that fits a C int, as _exit's own converter
     * takes it (a wrong call -- os._exit(2**40): OverflowError -- raises, and goes on
     * traced) */
    if (given == 1 && PyLong_Check(args[0])) {
        int overflow = 0;
        long status = PyLong_AsLongAndOverflow(args[0], &overflow);
        if (status == -1 && PyErr_Occurred())
            PyErr_Clear(); /* the real function says what is wrong */
        else if (!overflow && status >= INT_MIN && status <= INT_MAX)
            pt_tracer_exit_now();
    }
    return real_os_exit(self, args, nargs, kwnames);
}

static void patch_os_exit(void)
{
    if (real_os_exit)
        return;
    PyObject *posix = PyImport_ImportModule("posix");
    PyObject *f = posix ? PyObject_GetAttrString(posix, "_exit") : NULL;
    int ok = 0;
    if (f && PyCFunction_Check(f)) {
        PyCFunctionObject *fn = (PyCFunctionObject *)f;
        const PyMethodDef *def = fn->m_ml;
        if (def->ml_flags == (METH_FASTCALL | METH_KEYWORDS) && strcmp(def->ml_name, "_exit") == 0) {
            exit_def = *def;
            real_os_exit = (pt_fastkw_fn)(void (*)(void))def->ml_meth;
            exit_def.ml_meth = (PyCFunction)(void (*)(void))py_exit;
            fn->m_ml = &exit_def; /* the vectorcall entry stays right: same flags */
            ok = 1;
        }
    }
    if (!ok) {
        PyErr_Clear();
        pt_tracer_fail("cannot wrap os._exit: a process that leaves by it reads as died");
    }
    Py_XDECREF(f);
    Py_XDECREF(posix);
}

static PyObject *py_after_fork_child(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    session_lock_after_fork_child();
    pt_tasks_after_fork_child(); /* the task records' lock (free-threaded) */
    int was = pt_tracer_fork_pending();
    pt_tracer_after_fork_child();
    if (was && !pt_tracer_is_tracing()) {
        /* the child could not get a segment: remove the hooks */
        pt_tracer_hooks_uninstall();
    }
    Py_RETURN_NONE;
}

static PyObject *py_before_fork(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    pt_tracer_before_fork();
    Py_RETURN_NONE;
}

static PyObject *py_after_fork_parent(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    pt_tracer_after_fork_parent();
    Py_RETURN_NONE;
}

/* ---- module ----------------------------------------------------------------------- */

/* export_binding.c: the C exporters (viewer/core/export.h) */
PyObject *pt_py_export(PyObject *module, PyObject *args, PyObject *kw);
/* agg_binding.c: the aggregation (viewer/core/agg.h) as the type Aggregator */
int pt_agg_type_add(PyObject *module);

/* The one /proc/PID/stat reader (shm/base/procstat.h), for the Python side. */
static PyObject *py_proc_stat(PyObject *module, PyObject *args)
{
    (void)module;
    unsigned long long pid, tid = 0; /* K: a negative id wraps past PT_PROC_ID_MAX and is refused */
    if (!PyArg_ParseTuple(args, "K|K:proc_stat", &pid, &tid))
        return NULL;
    pt_proc_stat_t st;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pt_proc_stat_read(pid, tid, &st);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        Py_RETURN_NONE;
    return Py_BuildValue("{sCsKsKsKsK}", "state", st.state, "ppid", (unsigned long long)st.ppid, "utime",
                         (unsigned long long)st.utime, "stime", (unsigned long long)st.stime, "start",
                         (unsigned long long)st.start);
}

static PyMethodDef pt_methods[] = {
    {"start", (PyCFunction)(void (*)(void))py_start, METH_VARARGS | METH_KEYWORDS,
     "start(*, c_calls=True, include=None, exclude=None, policy='drop', ring_count=0, chunk_bytes=0, "
     "chunks_per_ring=0, symlog_bytes=0, wait_timeout=1.0, clock='auto', cmdline=None, hide=None, "
     "caller_stack=True) -> str\n"
     "Start tracing into a new shared-memory segment; returns its name. hide: files (path "
     "prefixes) whose code never produces events, nor its C calls, whatever include says. "
     "caller_stack=False: the frames running on the calling thread are not recorded as roots."},
    {"stop", py_stop, METH_NOARGS, "stop() -> dict: close open frames, stop tracing, return counters."},
    {"release", py_release, METH_NOARGS,
     "release() -> bool: after stop(), let the stopped session's segment go now (removed, or marked "
     "exited for the reader attached to it); False if there was none."},
    {"is_tracing", py_is_tracing, METH_NOARGS, "is_tracing() -> bool"},
    {"segment_name", py_segment_name, METH_NOARGS, "segment_name() -> str | None"},
    {"counters", py_counters, METH_NOARGS, "counters() -> dict (live)"},
    {"label", py_label, METH_O, "label(name) -> int: intern a span/mark label."},
    {"span_begin", py_span_begin, METH_O, "span_begin(label_id)"},
    {"span_end", py_span_end, METH_O, "span_end(label_id)"},
    {"mark", py_mark, METH_O, "mark(label_id)"},
    {"step", py_step, METH_O, "step(label_id): a Mark with the Step flag: ends a step of the loop on this thread"},
    {"set_role", py_set_role, METH_O,
     "set_role(role) -> bool: what this process is in its job (its multiprocessing name, DataLoader "
     "worker N), into the segment; readers send its ProcessInfo again with it. False: not tracing."},
    {"list_segments", pt_list_segments, METH_NOARGS, "list_segments() -> list[dict]"},
    {"proc_stat", py_proc_stat, METH_VARARGS,
     "proc_stat(pid, tid=0) -> dict | None: /proc/PID/stat (or /proc/PID/task/TID/stat): state (one letter), "
     "ppid, utime and stime (clock ticks), start (clock ticks since boot); None if it is gone or unreadable."},
    {"collect_stale", pt_collect_stale, METH_NOARGS,
     "collect_stale() -> int: unlink segments of dead processes."},
    {"export", (PyCFunction)(void (*)(void))pt_py_export, METH_VARARGS | METH_KEYWORDS,
     "export(recording, format, fd, weight_calls=False, per_thread=False, qualnames=False, follow=False, "
     "timeout=30.0, tmp_dir=None) -> dict\n"
     "Export a recording to fd in format collapsed|pstats|speedscope|chrome (viewer/core/export.c); "
     "returns the counts, the damage (offset, reason) if any and the last ProducerStatus."},
    {"_itt_set", pt_itt_py_set, METH_O, "_itt_set(on): record PyTorch's ITT tasks as spans (pytrace._torch)."},
    {"_tasks_set", pt_tasks_py_set, METH_O, "_tasks_set(on): asyncio task records on (default) or off."},
    {"_tasks_stats", pt_tasks_py_stats, METH_NOARGS, "_tasks_stats() -> dict: asyncio task record counts."},
    {"_itt_stats", pt_itt_py_stats, METH_NOARGS, "_itt_stats() -> dict: the ITT collector's counts."},
    {"_exec_then", pt_itt_py_exec_then, METH_VARARGS,
     "_exec_then(loader, after, module): loader.exec_module(module), then after(module) (pytrace._torch)."},
    {"_after_fork_child", py_after_fork_child, METH_NOARGS, NULL},
    {"_before_fork", py_before_fork, METH_NOARGS, NULL},
    {"_after_fork_parent", py_after_fork_parent, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static int pt_exec(PyObject *module)
{
    static int fork_registered;
    pt_module_state_t *st = get_state(module);
    char err[256] = "";
    if (pt_tracer_global_init(err, sizeof err) < 0) {
        PyErr_SetString(PyExc_ImportError, err);
        return -1;
    }
    /* The hook adapters, in the order start() tries them; each registers only
     * where it works (sys.monitoring: 3.12+; frame evaluation: 3.11 without C
     * calls; PyEval_SetProfile: 3.10/3.11). */
    if (pt_monitoring_register() < 0 || pt_evalframe_register() < 0 || pt_profile_register() < 0) {
        PyErr_SetString(PyExc_ImportError, "cannot register pytrace's hook adapters (table full)");
        return -1;
    }
    if (pt_itt_init() < 0) {
        PyErr_SetString(PyExc_ImportError, "cannot set up pytrace's ITT collector (pthread_atfork failed)");
        return -1;
    }
    st->labels = PyDict_New();
    if (st->labels == NULL)
        return -1;
    st->reader_type = pt_reader_type_create(module);
    if (st->reader_type == NULL)
        return -1;
    if (PyModule_AddObject(module, "Reader", Py_NewRef(st->reader_type)) < 0) {
        Py_DECREF(st->reader_type);
        return -1;
    }
    if (pt_recfile_types_add(module) < 0) /* RecFileReader, RecFileWriter, verify_message */
        return -1;
    if (pt_agg_type_add(module) < 0) /* Aggregator */
        return -1;
    if (pt_hubclient_type_add(module) < 0) /* HubClient */
        return -1;
    /* the segment's defaults, for help texts (never retyped in Python) */
    if (PyModule_AddIntConstant(module, "DEFAULT_RING_COUNT", PT_DEFAULT_RING_COUNT) < 0 ||
        PyModule_AddIntConstant(module, "DEFAULT_RING_BYTES",
                                (long)PT_DEFAULT_CHUNK_BYTES * PT_DEFAULT_CHUNKS_PER_RING) < 0 ||
        PyModule_AddIntConstant(module, "DEFAULT_SYMLOG_BYTES", (long)PT_DEFAULT_SYMLOG_BYTES) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "HAVE_MONITORING", PT_HAVE_MONITORING) < 0)
        return -1;
    if (!fork_registered) {
        /* os.register_at_fork(before=..., after_in_parent=..., after_in_child=...) */
        PyObject *os = PyImport_ImportModule("os");
        PyObject *fn = os ? PyObject_GetAttrString(module, "_after_fork_child") : NULL;
        PyObject *fb = os ? PyObject_GetAttrString(module, "_before_fork") : NULL;
        PyObject *fp = os ? PyObject_GetAttrString(module, "_after_fork_parent") : NULL;
        PyObject *reg = os ? PyObject_GetAttrString(os, "register_at_fork") : NULL;
        PyObject *kw = (fn && fb && fp)
                           ? Py_BuildValue("{sOsOsO}", "after_in_child", fn, "before", fb, "after_in_parent", fp)
                           : NULL;
        PyObject *empty = PyTuple_New(0);
        PyObject *r = (reg && kw && empty) ? PyObject_Call(reg, empty, kw) : NULL;
        Py_XDECREF(os);
        Py_XDECREF(fn);
        Py_XDECREF(fb);
        Py_XDECREF(fp);
        Py_XDECREF(reg);
        Py_XDECREF(kw);
        Py_XDECREF(empty);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        fork_registered = 1;
    }
    return 0;
}

static int pt_traverse(PyObject *module, visitproc visit, void *arg)
{
    pt_module_state_t *st = get_state(module);
    Py_VISIT(st->reader_type);
    Py_VISIT(st->labels);
    return 0;
}

static int pt_clear(PyObject *module)
{
    pt_module_state_t *st = get_state(module);
    Py_CLEAR(st->reader_type);
    Py_CLEAR(st->labels);
    return 0;
}

static void pt_free(void *module)
{
    pt_clear((PyObject *)module);
}

static PyModuleDef_Slot pt_slots[] = {
    {Py_mod_exec, __extension__(void *) pt_exec},
#if PY_VERSION_HEX >= 0x030C0000
    /* the tracer is process-wide (hooks, TLS, one segment): one interpreter */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#ifdef Py_GIL_DISABLED
#if PY_VERSION_HEX < 0x030E0000
#error "pytrace supports free-threaded CPython from 3.14 (3.14t): 3.13t's co_extra is not safe to read without the GIL (docs/python-versions.md)"
#endif
    /* free-threaded: nothing here needs the GIL (README, "Free-threaded Python") */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#elif PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef pt_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pytrace._pytrace",
    .m_doc = "pytrace native core: hooks, per-thread shared-memory rings, segment reader.",
    .m_size = sizeof(pt_module_state_t),
    .m_methods = pt_methods,
    .m_slots = pt_slots,
    .m_traverse = pt_traverse,
    .m_clear = pt_clear,
    .m_free = pt_free,
};

PyMODINIT_FUNC PyInit__pytrace(void)
{
    return PyModuleDef_Init(&pt_module);
}
