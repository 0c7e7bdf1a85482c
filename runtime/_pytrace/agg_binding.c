/*
 * _pytrace.Aggregator: the one aggregation of pytrace (viewer/core/agg.h) for
 * Python. pytrace.Profile (runtime/pytrace/profile.py) is its public face; the
 * web viewer and the HTML report are built on it, so every picture comes from
 * the same C rules as pytrace-top and the exporters.
 *
 * A pt_agg_t is used by one thread at a time; here a lock per object makes it
 * safe to feed from one thread (the web server's reader) and query from
 * others. Feeding and queries run without the GIL (the lock is taken with the
 * GIL released when it is contended), so a server thread that reads a job at
 * millions of events per second does not stall the request handlers.
 *
 * A stream may hold several processes (Message.process: a hub that follows a
 * job's children, a recorded process tree): feeding routes each message to its
 * process's aggregation (viewer/core/aggset.h, pytrace-top's rule), and every
 * query takes a process index (0: the first process seen, the job's root).
 *
 * Strings from the stream are untrusted bytes: they are decoded as UTF-8 with
 * "replace" (never raise on a bad name) and handed out as str.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

#include "py_dict_set.h"
#include "viewer/core/agg.h"
#include "viewer/core/aggset.h"

#include <errno.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    pt_aggset_t *set;
    PyThread_type_lock lock;
    uint64_t messages;   /* fed, for the caller's progress */
    uint64_t bad;        /* refused by the verifier */
} agg_obj_t;

static void agg_lock(agg_obj_t *self)
{
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
}

static void agg_unlock(agg_obj_t *self) { PyThread_release_lock(self->lock); }

static PyObject *raise_rc(int rc)
{
    if (rc == -ENOMEM)
        return PyErr_NoMemory();
    errno = -rc;
    return PyErr_SetFromErrno(PyExc_OSError);
}

/* Process `index`'s aggregation, under the lock; NULL if there is none. */
static pt_agg_t *agg_at(agg_obj_t *self, Py_ssize_t index)
{
    return index < 0 ? NULL : pt_aggset_agg(self->set, (size_t)index);
}

static PyObject *no_process(Py_ssize_t index)
{
    PyErr_Format(PyExc_IndexError, "no process %zd in the stream (processes() lists them)", index);
    return NULL;
}

/* Take the lock and return process `index`'s aggregation, the lock held; NULL
 * with IndexError set and the lock released if there is no such process. */
static pt_agg_t *agg_lock_process(agg_obj_t *self, Py_ssize_t index)
{
    agg_lock(self);
    pt_agg_t *agg = agg_at(self, index);
    if (!agg) {
        agg_unlock(self);
        no_process(index);
    }
    return agg;
}

/* The methods whose one argument is process=0 (fmt "|n:NAME"): parse it and
 * take the lock, as agg_lock_process; NULL with an exception set otherwise. */
static pt_agg_t *agg_lock_process_arg(agg_obj_t *self, PyObject *args, PyObject *kw, const char *fmt)
{
    static char *kwlist[] = {"process", NULL};
    Py_ssize_t process = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &process))
        return NULL;
    return agg_lock_process(self, process);
}

/* agg_lock_process_arg, and a new empty list in *list (NULL, unlocked, when
 * that fails): the methods that list something of a process. */
static pt_agg_t *agg_lock_list(agg_obj_t *self, PyObject *args, PyObject *kw, const char *fmt, PyObject **list)
{
    pt_agg_t *agg = agg_lock_process_arg(self, args, kw, fmt);
    if (agg && !(*list = PyList_New(0))) {
        agg_unlock(self);
        return NULL;
    }
    return agg;
}

/* Append t (a new reference; NULL: an error is set) to list, the lock held;
 * on an error the lock and the list go: -1. */
static int append_locked(agg_obj_t *self, PyObject *list, PyObject *t)
{
    if (!t || PyList_Append(list, t) < 0) {
        Py_XDECREF(t);
        agg_unlock(self);
        Py_DECREF(list);
        return -1;
    }
    Py_DECREF(t);
    return 0;
}

/* Slice headers (32 bytes each) every process may hold, all processes together:
 * a stream that invents processes stops being read past max_processes. */
#define SLICE_BUDGET (32u * 1024u * 1024u)

static PyObject *str_of(const char *s)
{
    return PyUnicode_DecodeUTF8(s ? s : "", s ? (Py_ssize_t)strlen(s) : 0, "replace");
}

static PyObject *agg_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"slice_ns", "slice_count", "max_processes", "tree_budget", NULL};
    unsigned long long slice_ns = 0, tree_budget = 0;
    unsigned int slice_count = 0, max_processes = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|KIIK:Aggregator", kwlist, &slice_ns, &slice_count, &max_processes,
                                     &tree_budget))
        return NULL;
    if (slice_count > 2000000u) { /* 64 MiB of slice headers */
        PyErr_SetString(PyExc_ValueError, "slice_count must be at most 2000000");
        return NULL;
    }
    if (max_processes > 65536u) {
        PyErr_SetString(PyExc_ValueError, "max_processes must be at most 65536");
        return NULL;
    }
    if (!max_processes) { /* the default: as many as the slice budget allows, at most 1024 */
        uint32_t slices = slice_count ? slice_count : 6000u;
        max_processes = SLICE_BUDGET / slices;
        if (max_processes > PT_AGGSET_DEFAULT_MAX_PROCESSES)
            max_processes = PT_AGGSET_DEFAULT_MAX_PROCESSES;
        if (!max_processes)
            max_processes = 1;
    }
    agg_obj_t *self = (agg_obj_t *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->lock = PyThread_allocate_lock();
    pt_aggset_config_t cfg = {.agg = {.slice_ns = slice_ns, .slice_count = slice_count, .tree_budget = tree_budget},
                              .max_processes = max_processes};
    if (!self->lock || pt_aggset_create(&cfg, &self->set)) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void agg_dealloc(agg_obj_t *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    pt_aggset_destroy(self->set);
    if (self->lock)
        PyThread_free_lock(self->lock);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* ---- feeding -------------------------------------------------------------------- */

/* The bytes of one item: a bytes-like object, or a (msg_type, bytes) pair as
 * pytrace.Reader.raw() and the recording reader give. 0 or -1 (exception). */
static int item_buffer(PyObject *item, Py_buffer *view)
{
    if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2)
        item = PyTuple_GET_ITEM(item, 1);
    return PyObject_GetBuffer(item, view, PyBUF_SIMPLE);
}

PyDoc_STRVAR(feed_doc, "feed(data) -> None: one size-prefixed message (bytes, or a (msg_type, bytes) pair).\n"
                       "ValueError if the verifier refuses it (nothing of it is used).");

static PyObject *agg_feed(agg_obj_t *self, PyObject *item)
{
    Py_buffer view;
    if (item_buffer(item, &view) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    rc = pt_aggset_feed_bytes(self->set, view.buf, (size_t)view.len);
    self->messages++;
    if (rc == -EBADMSG)
        self->bad++;
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc == -EBADMSG) {
        PyErr_SetString(PyExc_ValueError, "not a valid pytrace message (the FlatBuffers verifier refused it)");
        return NULL;
    }
    if (rc && rc != -ENOSPC) /* past max_processes: not read, counted (counters()) */
        return raise_rc(rc);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(feed_many_doc,
             "feed_many(items) -> int: feed every message of a sequence (bytes or (msg_type, bytes)), in "
             "order, with the GIL released once; messages the verifier refuses are skipped and counted "
             "(the return value).");

static PyObject *agg_feed_many(agg_obj_t *self, PyObject *items)
{
    PyObject *seq = PySequence_Fast(items, "feed_many() takes a sequence of messages");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_buffer *views = PyMem_Calloc(n ? (size_t)n : 1, sizeof *views);
    if (!views) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    Py_ssize_t got = 0;
    for (; got < n; got++)
        if (item_buffer(PySequence_Fast_GET_ITEM(seq, got), &views[got]) < 0)
            break;
    int rc = 0;
    Py_ssize_t refused = 0;
    if (got == n) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        for (Py_ssize_t i = 0; i < n && !rc; i++) {
            int r = pt_aggset_feed_bytes(self->set, views[i].buf, (size_t)views[i].len);
            self->messages++;
            if (r == -EBADMSG) {
                refused++;
                self->bad++;
            } else if (r != -ENOSPC) { /* past max_processes: counted by the set */
                rc = r;
            }
        }
        PyThread_release_lock(self->lock);
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    Py_DECREF(seq);
    if (got != n)
        return NULL;
    if (rc)
        return raise_rc(rc);
    return PyLong_FromSsize_t(refused);
}

/* ---- queries ------------------------------------------------------------------------ */

static int parse_query(PyObject *args, PyObject *kw, const char *fmt, char **kwlist, pt_agg_query_t *q,
                       void *extra1, void *extra2, void *extra3, void *extra4, void *extra5, void *extra6)
{
    unsigned long long thread = 0;
    double window = 0;
    memset(q, 0, sizeof *q); /* hide_idle 0: every thread */
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &thread, &window, extra1, extra2, extra3, extra4,
                                     extra5, extra6))
        return -1;
    if (!(window >= 0)) {
        PyErr_SetString(PyExc_ValueError, "window must be a number of seconds >= 0 (0: the whole run)");
        return -1;
    }
    q->thread = thread;
    q->window_seconds = window;
    return 0;
}

#define SET PT_DICT_SET
#define U64(v) PyLong_FromUnsignedLongLong((unsigned long long)(v))

PyDoc_STRVAR(counters_doc, "counters(process=0) -> dict: pt_agg_counters of that process (events, rates, drops, "
                           "threads, ...), and of the stream: messages, refused_messages, processes, "
                           "process_limit, messages_past_process_limit.");

static PyObject *agg_counters(agg_obj_t *self, PyObject *args, PyObject *kw)
{
    pt_agg_counters_t c;
    pt_agg_t *agg = agg_lock_process_arg(self, args, kw, "|n:counters");
    if (!agg)
        return NULL;
    pt_agg_counters(agg, &c);
    const pt_fb_process_info_t *pi = pt_agg_process_info(agg);
    uint64_t pid = pi->pid, tps = pt_agg_ticks_per_second(agg);
    uint64_t processes = pt_aggset_count(self->set), past = pt_aggset_refused(self->set);
    uint64_t limit = pt_aggset_max_processes(self->set);
    uint64_t messages = self->messages, bad = self->bad; /* written by feed, under the lock */
    agg_unlock(self);
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    SET(d, "events", U64(c.events_seen));
    SET(d, "events_per_second", PyFloat_FromDouble(c.events_per_second));
    SET(d, "dropped", U64(c.dropped));
    SET(d, "dropped_lost_records", U64(c.dropped_lost_records));
    SET(d, "dropped_lost_counts", U64(c.dropped_lost_counts));
    SET(d, "dropped_producer", U64(c.dropped_producer));
    SET(d, "missed_in_hub", U64(c.missed_in_hub));
    SET(d, "dropped_cause", PyUnicode_FromString(c.dropped_cause));
    SET(d, "missed_cause", PyUnicode_FromString(c.missed_cause));
    SET(d, "unmatched", U64(c.unmatched_closes));
    SET(d, "unannounced", U64(c.unannounced));
    SET(d, "producer_state", U64(c.producer_state));
    SET(d, "threads_seen", U64(c.threads_seen));
    SET(d, "threads_active", U64(c.threads_active));
    SET(d, "hook_errors", U64(c.hook_errors));
    SET(d, "symbols_dropped", U64(c.symbols_dropped));
    SET(d, "threads_untraced", U64(c.threads_untraced));
    SET(d, "events_untraced", U64(c.events_untraced));
    SET(d, "tracing_displaced", U64(c.tracing_displaced));
    SET(d, "unrecorded_events", U64(c.unrecorded_events));
    SET(d, "symbols", U64(c.symbols));
    SET(d, "nodes", U64(c.nodes));
    SET(d, "tree_budget", U64(c.tree_budget));
    SET(d, "folded_calls", U64(c.folded_calls));
    SET(d, "other_nodes", U64(c.other_nodes));
    SET(d, "span_ns", U64(c.span_ns));
    SET(d, "window_max_seconds", PyFloat_FromDouble(c.window_max_seconds));
    SET(d, "pid", U64(pid));
    SET(d, "ticks_per_second", U64(tps));
    SET(d, "messages", U64(messages));
    SET(d, "refused_messages", U64(bad));
    SET(d, "processes", U64(processes));
    SET(d, "process_limit", U64(limit));
    SET(d, "messages_past_process_limit", U64(past));
    return d;
err:
    Py_DECREF(d);
    return NULL;
}

PyDoc_STRVAR(process_doc, "process_info(process=0) -> dict: that process's ProcessInfo (pid 0 until received).");

static PyObject *agg_process_info(agg_obj_t *self, PyObject *args, PyObject *kw)
{
    pt_agg_t *agg = agg_lock_process_arg(self, args, kw, "|n:process_info");
    if (!agg)
        return NULL;
    PyObject *d = PyDict_New();
    if (!d) {
        agg_unlock(self);
        return NULL;
    }
    const pt_fb_process_info_t *pi = pt_agg_process_info(agg);
    /* strings are copies owned by the aggregator; read them under the lock */
    PyObject *cmd = PyUnicode_DecodeUTF8(pi->command_line.ptr ? pi->command_line.ptr : "",
                                         pi->command_line.ptr ? pi->command_line.len : 0, "replace");
    PyObject *ver = PyUnicode_DecodeUTF8(pi->python_version.ptr ? pi->python_version.ptr : "",
                                         pi->python_version.ptr ? pi->python_version.len : 0, "replace");
    PyObject *seg = PyUnicode_DecodeUTF8(pi->segment.ptr ? pi->segment.ptr : "",
                                         pi->segment.ptr ? pi->segment.len : 0, "replace");
    uint64_t pid = pi->pid, ppid = pi->ppid, tps = pi->ticks_per_second, rt = pi->base_realtime_ns;
    unsigned policy = pi->drop_policy;
    agg_unlock(self);
    SET(d, "command_line", cmd);
    SET(d, "python_version", ver);
    SET(d, "segment", seg);
    SET(d, "pid", U64(pid));
    SET(d, "ppid", U64(ppid));
    SET(d, "ticks_per_second", U64(tps));
    SET(d, "base_realtime_ns", U64(rt));
    SET(d, "drop_policy", PyLong_FromUnsignedLong(policy));
    return d;
err:
    Py_DECREF(d);
    return NULL;
}

PyDoc_STRVAR(threads_doc, "threads(process=0) -> list[(thread, os_tid, name, ended, events, depth)] of that "
                          "process, in order of first sight.");

static PyObject *agg_threads(agg_obj_t *self, PyObject *args, PyObject *kw)
{
    PyObject *list;
    pt_agg_t *agg = agg_lock_list(self, args, kw, "|n:threads", &list);
    if (!agg)
        return NULL;
    size_t n = pt_agg_thread_count(agg);
    for (size_t i = 0; i < n; i++) {
        pt_agg_thread_info_t ti;
        if (pt_agg_thread_at(agg, i, &ti))
            continue;
        PyObject *name = str_of(ti.name);
        PyObject *t = name ? Py_BuildValue("(KKNiKI)", (unsigned long long)ti.thread, (unsigned long long)ti.os_tid,
                                           name, ti.ended, (unsigned long long)ti.events, ti.depth)
                           : NULL;
        if (append_locked(self, list, t))
            return NULL;
    }
    agg_unlock(self);
    return list;
}

PyDoc_STRVAR(stacks_doc,
             "stacks(process=0) -> list[(thread, os_tid, name, ended, known, frames)] in order of first sight: each "
             "thread of that process: its's current stack as the walk holds it (viewer/core/walk.h), frames outermost first as "
             "(symbol id, kind, reported, start_ns); kind 0 Python, 1 C, 2 span; reported: opened by a Frame "
             "record (its call was not seen; start_ns is when it was reported); start_ns: ns since the first "
             "tick seen. known: the frames are the thread's whole stack (its stream was read from its start, "
             "or a Frame run reported it since the last Lost record); an ended thread has none.");

static PyObject *agg_stacks(agg_obj_t *self, PyObject *args, PyObject *kw)
{
    pt_agg_frame_t *frames = NULL;
    uint32_t cap = 0;
    PyObject *list;
    pt_agg_t *agg = agg_lock_list(self, args, kw, "|n:stacks", &list);
    if (!agg)
        return NULL;
    size_t n = pt_agg_thread_count(agg);
    for (size_t i = 0; i < n; i++) {
        pt_agg_thread_info_t ti;
        uint32_t depth = 0;
        int known = 0, rc;
        if (pt_agg_thread_at(agg, i, &ti))
            continue;
        while ((rc = pt_agg_stack(agg, i, frames, cap, &depth, &known)) == 0 && depth > cap) {
            pt_agg_frame_t *grown = PyMem_RawRealloc(frames, (size_t)depth * sizeof *frames);
            if (!grown) {
                rc = -ENOMEM;
                break;
            }
            frames = grown;
            cap = depth;
        }
        PyObject *fl = NULL, *name = NULL, *t = NULL;
        if (rc == 0 && (fl = PyList_New((Py_ssize_t)depth)) != NULL) {
            for (uint32_t k = 0; k < depth; k++) {
                PyObject *f = Py_BuildValue("(IiOK)", frames[k].symbol, frames[k].kind,
                                            frames[k].reported ? Py_True : Py_False,
                                            (unsigned long long)frames[k].start_ns);
                if (!f) {
                    Py_CLEAR(fl);
                    break;
                }
                PyList_SET_ITEM(fl, (Py_ssize_t)k, f);
            }
        }
        if (fl && (name = str_of(ti.name)) != NULL)
            t = Py_BuildValue("(KKNOON)", (unsigned long long)ti.thread, (unsigned long long)ti.os_tid, name,
                              ti.ended ? Py_True : Py_False, known ? Py_True : Py_False, fl);
        else
            Py_XDECREF(fl);
        if (!t || PyList_Append(list, t) < 0) {
            Py_XDECREF(t);
            agg_unlock(self);
            PyMem_RawFree(frames);
            Py_DECREF(list);
            return rc ? raise_rc(rc) : NULL;
        }
        Py_DECREF(t);
    }
    agg_unlock(self);
    PyMem_RawFree(frames);
    return list;
}

PyDoc_STRVAR(symbols_doc, "symbols(start=0, process=0) -> list[(id, kind, known, name, file, line)]: that "
                          "process's symbols in order of first sight, from index start (so a caller can ask "
                          "only for new ones).");

static PyObject *agg_symbols(agg_obj_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"start", "process", NULL};
    Py_ssize_t start = 0, process = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|nn:symbols", kwlist, &start, &process))
        return NULL;
    if (start < 0)
        start = 0;
    /* copied under the lock (a feed may grow the table); the strings stay valid until the
     * aggregator is destroyed, so the objects are built after unlocking */
    pt_agg_t *agg = agg_lock_process(self, process);
    if (!agg)
        return NULL;
    size_t n = pt_agg_symbol_count(agg);
    size_t from = (size_t)start < n ? (size_t)start : n;
    pt_agg_symbol_t *syms = PyMem_RawMalloc((n - from ? n - from : 1) * sizeof *syms);
    for (size_t i = from; syms && i < n; i++)
        syms[i - from] = pt_agg_symbol_at(agg, i);
    agg_unlock(self);
    if (!syms)
        return PyErr_NoMemory();
    PyObject *list = PyList_New((Py_ssize_t)(n - from));
    for (size_t i = 0; list && i < n - from; i++) {
        const pt_agg_symbol_t *sy = &syms[i];
        PyObject *name = str_of(sy->name), *file = str_of(sy->file);
        PyObject *t = name && file ? Py_BuildValue("(IiiNNI)", sy->id, sy->kind, sy->known, name, file, sy->line)
                                   : NULL;
        if (!t) {
            if (!name || !file) {
                Py_XDECREF(name);
                Py_XDECREF(file);
            }
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    PyMem_RawFree(syms);
    return list;
}

static const char *const sort_names[PT_AGG_SORT_COUNT] = {"self", "total", "calls", "prim_calls", "name", "file"};

PyDoc_STRVAR(table_doc,
             "table(thread=0, window=0.0, sort='self', descending=True, filter=None, process=0) -> (span_ns, rows): the "
             "function table (pytrace-top's columns); a row is (id, kind, name, file, line, calls, prim_calls, "
             "self_ns, total_ns, self_pct, total_pct). thread 0: all threads; window 0: the whole run. cpu=True: each "
             "row also has (self_cpu_ns, total_cpu_ns) at its end (the parts of self_ns and total_ns the thread was on "
             "a CPU: viewer/core/cct.h, THE RULE FOR CPU TIME), and the answer is (span_ns, rows, not_observed) with "
             "not_observed = {'ns', 'cpu_ns', 'lost_events'}: the time of the view nobody saw (Lost gaps), in no row "
             "and not in span_ns (the observed time the percentages are of).");

static PyObject *agg_table(agg_obj_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"thread", "window", "sort", "descending", "filter", "process", "cpu", "last_step", NULL};
    pt_agg_query_t q;
    const char *sort = "self", *filter = NULL;
    int descending = 1, cpu = 0, last_step = 0;
    Py_ssize_t process = 0;
    if (parse_query(args, kw, "|Kdspznpp:table", kwlist, &q, &sort, &descending, &filter, &process, &cpu,
                    &last_step) < 0)
        return NULL;
    q.last_step = last_step;
    int key = -1;
    for (int i = 0; i < PT_AGG_SORT_COUNT; i++)
        if (!strcmp(sort, sort_names[i]))
            key = i;
    if (key < 0) {
        PyErr_Format(PyExc_ValueError, "unknown sort key %s (self, total, calls, prim_calls, name, file)", sort);
        return NULL;
    }
    /* the filter is copied: the GIL is released while the table is built */
    char *filt = filter ? PyMem_RawMalloc(strlen(filter) + 1) : NULL;
    if (filter && !filt)
        return PyErr_NoMemory();
    if (filt)
        strcpy(filt, filter);
    pt_agg_table_t t;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    pt_agg_t *agg = agg_at(self, process);
    rc = agg ? pt_agg_table(agg, &q, key, descending, filt, &t) : -ESRCH;
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(filt);
    if (rc == -ESRCH)
        return no_process(process);
    if (rc)
        return raise_rc(rc);
    /* the row strings are the aggregator's symbol strings, valid until it is destroyed */
    PyObject *rows = PyList_New((Py_ssize_t)t.count);
    for (size_t i = 0; rows && i < t.count; i++) {
        const pt_agg_row_t *r = &t.rows[i];
        PyObject *name = str_of(r->name), *file = str_of(r->file);
        PyObject *row = !name || !file ? NULL
                        : cpu ? Py_BuildValue("(IiNNIKKKKddKK)", r->symbol, r->kind, name, file, r->line,
                                              (unsigned long long)r->calls, (unsigned long long)r->prim_calls,
                                              (unsigned long long)r->self_ns, (unsigned long long)r->total_ns,
                                              r->self_pct, r->total_pct, (unsigned long long)r->self_cpu_ns,
                                              (unsigned long long)r->total_cpu_ns)
                              : Py_BuildValue("(IiNNIKKKKdd)", r->symbol, r->kind, name, file, r->line,
                                              (unsigned long long)r->calls, (unsigned long long)r->prim_calls,
                                              (unsigned long long)r->self_ns, (unsigned long long)r->total_ns,
                                              r->self_pct, r->total_pct);
        if (!row) {
            if (!name || !file) {
                Py_XDECREF(name);
                Py_XDECREF(file);
            }
            Py_CLEAR(rows);
            break;
        }
        PyList_SET_ITEM(rows, (Py_ssize_t)i, row);
    }
    uint64_t span = t.span_ns, unobs = t.unobserved_ns, unobs_cpu = t.unobserved_cpu_ns, lost = t.unobserved_lost;
    pt_agg_table_free(&t);
    if (!rows)
        return NULL;
    if (cpu)
        return Py_BuildValue("(KN{sKsKsK})", (unsigned long long)span, rows, "ns", (unsigned long long)unobs,
                             "cpu_ns", (unsigned long long)unobs_cpu, "lost_events", (unsigned long long)lost);
    return Py_BuildValue("(KN)", (unsigned long long)span, rows);
}

/* (span_ns, nodes) of tree() from a tree the core made (freed here), in depth-first
 * order with parents renumbered; subtrees below min_fraction of the root left out. */
static PyObject *tree_result(pt_agg_tree_t *tp, double min_fraction, int cpu)
{
    pt_agg_tree_t t = *tp;
    double min_ns = t.count ? min_fraction * (double)t.nodes[0].incl_ns : 0;
    /* preorder over first_child / next_sibling, parents renumbered */
    uint32_t *order = PyMem_Malloc((t.count ? t.count : 1) * sizeof *order);
    uint32_t *newidx = PyMem_Malloc((t.count ? t.count : 1) * sizeof *newidx);
    PyObject *nodes = order && newidx ? PyList_New((Py_ssize_t)t.count) : NULL;
    if (!nodes) {
        PyMem_Free(order);
        PyMem_Free(newidx);
        pt_agg_tree_free(&t);
        return order && newidx ? NULL : PyErr_NoMemory();
    }
    size_t k = 0;
    uint32_t n = t.count ? 0 : PT_AGG_NONE;
    while (n != PT_AGG_NONE) {
        int keep = n == 0 || min_ns <= 0 || (double)t.nodes[n].incl_ns >= min_ns;
        if (keep) {
            newidx[n] = (uint32_t)k;
            order[k++] = n;
        }
        if (keep && t.nodes[n].first_child != PT_AGG_NONE) {
            n = t.nodes[n].first_child;
            continue;
        }
        while (n != PT_AGG_NONE && t.nodes[n].next_sibling == PT_AGG_NONE)
            n = t.nodes[n].parent;
        if (n != PT_AGG_NONE)
            n = t.nodes[n].next_sibling;
    }
    for (size_t i = 0; i < k; i++) {
        const pt_agg_tnode_t *x = &t.nodes[order[i]];
        /* the root by its parent: a stream's symbol id may be PT_AGG_NONE too */
        long long sym = x->parent == PT_AGG_NONE ? -1 : x->other ? -2 : (long long)x->symbol;
        long long parent = x->parent == PT_AGG_NONE ? -1 : (long long)newidx[x->parent];
        PyObject *node = cpu ? Py_BuildValue("(LLIKKKKK)", sym, parent, x->depth, (unsigned long long)x->calls,
                                             (unsigned long long)x->self_ns, (unsigned long long)x->incl_ns,
                                             (unsigned long long)x->self_cpu_ns, (unsigned long long)x->incl_cpu_ns)
                             : Py_BuildValue("(LLIKKK)", sym, parent, x->depth, (unsigned long long)x->calls,
                                             (unsigned long long)x->self_ns, (unsigned long long)x->incl_ns);
        if (!node) {
            Py_CLEAR(nodes);
            break;
        }
        PyList_SET_ITEM(nodes, (Py_ssize_t)i, node);
    }
    uint64_t span = t.span_ns;
    PyMem_Free(order);
    PyMem_Free(newidx);
    pt_agg_tree_free(&t);
    if (!nodes)
        return NULL;
    if ((size_t)k != (size_t)PyList_GET_SIZE(nodes) && PyList_SetSlice(nodes, (Py_ssize_t)k, PY_SSIZE_T_MAX, NULL) < 0) {
        Py_DECREF(nodes);
        return NULL;
    }
    return Py_BuildValue("(KN)", (unsigned long long)span, nodes);
}

PyDoc_STRVAR(tree_doc,
             "tree(thread=0, window=0.0, min_fraction=0.0, process=0) -> (span_ns, nodes): the calling-context tree in "
             "depth-first order, children by name; a node is (symbol id, parent index, depth, calls, self_ns, "
             "total_ns); node 0 is the root (symbol and parent -1), whose self time is time with nothing on the "
             "stack; symbol -2 is an [other] node: the calls below its parent folded past the tree budget "
             "(counters()['folded_calls']), after its siblings. Subtrees whose total is below min_fraction of the root's are left out (a flame graph "
             "could not show them). cpu=True: each node also has (self_cpu_ns, total_cpu_ns) at its end (the parts "
             "of self_ns and total_ns on a CPU); the tree holds observed time only.");

static PyObject *agg_tree(agg_obj_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"thread", "window", "min_fraction", "process", "cpu", "last_step", NULL};
    pt_agg_query_t q;
    double min_fraction = 0;
    Py_ssize_t process = 0;
    int cpu = 0, last_step = 0;
    if (parse_query(args, kw, "|Kddnpp:tree", kwlist, &q, &min_fraction, &process, &cpu, &last_step, NULL, NULL) < 0)
        return NULL;
    q.last_step = last_step;
    if (!(min_fraction >= 0 && min_fraction <= 1)) {
        PyErr_SetString(PyExc_ValueError, "min_fraction must be between 0 and 1");
        return NULL;
    }
    pt_agg_tree_t t;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    pt_agg_t *agg = agg_at(self, process);
    rc = agg ? pt_agg_tree(agg, &q, &t) : -ESRCH;
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    if (rc == -ESRCH)
        return no_process(process);
    if (rc)
        return raise_rc(rc);
    return tree_result(&t, min_fraction, cpu);
}

PyDoc_STRVAR(steps_doc,
             "steps(thread=0, process=0, list=False) -> dict: pt_agg_steps of the thread (0: the stepping thread, "
             "whose last step ended last): count, thread, threads, label (the last Step mark's), last_ns, "
             "last_start_ns, last_end_ns, last_lost_events, median_ns, p10_ns, p90_ns, min_ns, max_ns, mean_ns, "
             "stdev_ns, slowest_index, total_ns, running_ns, kept, folded, tree_missed; list=True adds 'list': "
             "[(number, end_ns, dur_ns)] of the kept steps, oldest first. table()/tree() with last_step=True show "
             "the last complete step alone (viewer/core/agg.h, STEPS).");

static PyObject *agg_steps(agg_obj_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"thread", "process", "list", NULL};
    unsigned long long thread = 0;
    Py_ssize_t process = 0;
    int want_list = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Knp:steps", kwlist, &thread, &process, &want_list))
        return NULL;
    pt_agg_t *agg = agg_lock_process(self, process);
    if (!agg)
        return NULL;
    pt_agg_steps_t st;
    int rc = pt_agg_steps(agg, thread, &st);
    pt_agg_step_t *list = NULL;
    size_t n = 0;
    if (!rc && want_list && st.kept) {
        list = PyMem_RawMalloc((size_t)st.kept * sizeof *list);
        rc = list ? pt_agg_step_list(agg, thread, list, (size_t)st.kept, &n) : -ENOMEM;
        if (n > st.kept)
            n = (size_t)st.kept;
    }
    const char *label = st.count ? pt_agg_symbol(agg, st.label).name : "";
    PyObject *d = rc ? NULL : PyDict_New();
    PyObject *name = d ? str_of(label) : NULL;
    agg_unlock(self);
    if (rc) {
        PyMem_RawFree(list);
        return raise_rc(rc);
    }
    if (!d || !name) {
        Py_XDECREF(d);
        PyMem_RawFree(list);
        return NULL;
    }
    int bad = PyDict_SetItemString(d, "label", name) < 0;
    Py_DECREF(name);
    if (bad)
        goto err;
#define STEP_SET(key, v) SET(d, key, U64(v))
    STEP_SET("count", st.count);
    STEP_SET("thread", st.thread);
    STEP_SET("threads", st.threads);
    STEP_SET("last_ns", st.last_ns);
    STEP_SET("last_start_ns", st.last_start_ns);
    STEP_SET("last_end_ns", st.last_end_ns);
    STEP_SET("last_lost_events", st.last_lost);
    STEP_SET("median_ns", st.median_ns);
    STEP_SET("p10_ns", st.p10_ns);
    STEP_SET("p90_ns", st.p90_ns);
    STEP_SET("min_ns", st.min_ns);
    STEP_SET("max_ns", st.max_ns);
    STEP_SET("mean_ns", st.mean_ns);
    STEP_SET("stdev_ns", st.stdev_ns);
    STEP_SET("slowest_index", st.slowest);
    STEP_SET("total_ns", st.total_ns);
    STEP_SET("running_ns", st.running_ns);
    STEP_SET("kept", st.kept);
    STEP_SET("folded", st.folded);
    STEP_SET("tree_missed", st.tree_missed);
#undef STEP_SET
    if (want_list) {
        PyObject *l = PyList_New((Py_ssize_t)n);
        for (size_t i = 0; l && i < n; i++) {
            PyObject *t = Py_BuildValue("(KKK)", (unsigned long long)list[i].number, (unsigned long long)list[i].end_ns,
                                        (unsigned long long)list[i].dur_ns);
            if (!t) {
                Py_CLEAR(l);
                break;
            }
            PyList_SET_ITEM(l, (Py_ssize_t)i, t);
        }
        bad = !l || PyDict_SetItemString(d, "list", l) < 0;
        Py_XDECREF(l);
    }
    if (bad)
        goto err;
    PyMem_RawFree(list);
    return d;
err:
    PyMem_RawFree(list);
    Py_DECREF(d);
    return NULL;
}

PyDoc_STRVAR(tasks_doc,
             "tasks(process=0, functions=True, functions_of=-1) -> dict: pt_agg_tasks of that process (viewer/core/tasks.h holds the rules): seen, "
             "folded, folded_steps, folded_run_ns, folded_wait_ns, malformed, tree_nodes, tree_folded (task_tree()), and "
             "'tasks': the kept tasks in order "
             "of first sight, each (symbol, name, coroutine, serial, state, steps, run_ns, wait_ns, wait_by, awaits, "
             "functions): state a name (pending, running, done, cancelled, failed); wait_by {kind name: ns} over "
             "every await kind and 'other'; awaits ((kind name, name, awaited task's symbol or None), ...) of a "
             "pending task; functions ((symbol, name, file, line, logical calls, self_ns, total_ns), ...) "
             "by total time, then own time, then symbol; empty unless functions, or the task's serial is "
             "functions_of.");

/* One task of pt_agg_tasks as the tuple tasks_doc describes; NULL with an exception set. */
static PyObject *task_tuple(const pt_agg_task_t *k, int with_fns)
{
    uint32_t fn_count = with_fns ? k->fn_count : 0;
    PyObject *wait_by = PyDict_New(), *awaits = PyTuple_New((Py_ssize_t)k->await_count);
    PyObject *fns = PyTuple_New((Py_ssize_t)fn_count);
    if (!wait_by || !awaits || !fns)
        goto err;
    for (unsigned w = 0; w <= PT_TASKS_WAIT_OTHER; w++)
        SET(wait_by, pt_tasks_await_name(w), U64(k->wait_by_ns[w]));
    for (uint32_t j = 0; j < k->await_count; j++) {
        const pt_agg_task_await_t *a = &k->awaits[j];
        PyObject *task = a->kind == PT_AWAIT_TASK ? PyLong_FromUnsignedLong(a->symbol) : Py_NewRef(Py_None);
        PyObject *name = str_of(a->name);
        if (!task || !name) {
            Py_XDECREF(task);
            Py_XDECREF(name);
            goto err;
        }
        PyObject *t = Py_BuildValue("(sNN)", pt_tasks_await_name(a->kind), name, task); /* N: taken even on failure */
        if (!t)
            goto err;
        PyTuple_SET_ITEM(awaits, (Py_ssize_t)j, t);
    }
    for (uint32_t j = 0; j < fn_count; j++) {
        const pt_agg_task_fn_t *f = &k->fns[j];
        PyObject *name = str_of(f->name), *file = str_of(f->file);
        if (!name || !file) {
            Py_XDECREF(name);
            Py_XDECREF(file);
            goto err;
        }
        PyObject *t = Py_BuildValue("(INNIKKK)", f->symbol, name, file, f->line, (unsigned long long)f->calls,
                                    (unsigned long long)f->excl_ns, (unsigned long long)f->incl_ns);
        if (!t)
            goto err;
        PyTuple_SET_ITEM(fns, (Py_ssize_t)j, t);
    }
    PyObject *name = str_of(k->name), *coro = name ? str_of(k->coro) : NULL;
    if (!name || !coro) {
        Py_XDECREF(name);
        goto err;
    }
    return Py_BuildValue("(INNIsKKKNNN)", k->symbol, name, coro, k->serial, pt_tasks_state_name(k->state),
                         (unsigned long long)k->steps, (unsigned long long)k->run_ns,
                         (unsigned long long)k->wait_ns, wait_by, awaits, fns);
err:
    Py_XDECREF(wait_by);
    Py_XDECREF(awaits);
    Py_XDECREF(fns);
    return NULL;
}

static PyObject *agg_tasks(agg_obj_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"process", "functions", "functions_of", NULL};
    Py_ssize_t process = 0;
    int functions = 1;
    long long functions_of = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|npL:tasks", kwlist, &process, &functions, &functions_of))
        return NULL;
    pt_agg_t *agg = agg_lock_process(self, process);
    if (!agg)
        return NULL;
    pt_agg_tasks_t ts;
    int rc = pt_agg_tasks(agg, &ts);
    if (rc) {
        agg_unlock(self);
        return raise_rc(rc);
    }
    /* the tuples are built under the lock: the names are the aggregation's */
    PyObject *list = PyList_New((Py_ssize_t)ts.count), *d = NULL;
    for (size_t i = 0; list && i < ts.count; i++) {
        PyObject *t = task_tuple(&ts.tasks[i], functions || (long long)ts.tasks[i].serial == functions_of);
        if (!t) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    agg_unlock(self);
    if (!list || !(d = PyDict_New()))
        goto err;
    SET(d, "seen", U64(ts.seen));
    SET(d, "folded", U64(ts.folded));
    SET(d, "folded_steps", U64(ts.folded_steps));
    SET(d, "folded_run_ns", U64(ts.folded_run_ns));
    SET(d, "folded_wait_ns", U64(ts.folded_wait_ns));
    SET(d, "malformed", U64(ts.malformed));
    SET(d, "tree_nodes", U64(ts.tree_nodes));
    SET(d, "tree_folded", U64(ts.tree_folded));
    SET(d, "tasks", Py_NewRef(list));
    Py_DECREF(list);
    pt_agg_tasks_free(&ts);
    return d;
err:
    Py_XDECREF(list);
    Py_XDECREF(d);
    pt_agg_tasks_free(&ts);
    return NULL;
}

PyDoc_STRVAR(task_tree_doc,
             "task_tree(serial=-1, process=0, min_fraction=0.0) -> (span_ns, nodes): the call tree of the kept "
             "asyncio task with that serial (tasks()), or of every kept task side by side (-1), as tree() gives "
             "nodes: under the root one node per task (its Task symbol; no calls, no time of its own), above it "
             "its logical calls from its coroutine; times are running time (not the time it was suspended), "
             "span_ns the shown tasks' running time; symbol -2: an [other] node past the core's node budget "
             "(tasks()['tree_folded'] counts its calls). An unknown serial: the root alone.");

static PyObject *agg_task_tree(agg_obj_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"serial", "process", "min_fraction", NULL};
    long long serial = -1;
    Py_ssize_t process = 0;
    double min_fraction = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Lnd:task_tree", kwlist, &serial, &process, &min_fraction))
        return NULL;
    if (!(min_fraction >= 0 && min_fraction <= 1)) {
        PyErr_SetString(PyExc_ValueError, "min_fraction must be between 0 and 1");
        return NULL;
    }
    pt_agg_t *agg = agg_lock_process(self, process);
    if (!agg)
        return NULL;
    uint32_t task = PT_AGG_NONE; /* every task */
    if (serial >= 0 && (task = pt_agg_task_of_serial(agg, (uint64_t)serial)) == PT_AGG_NONE)
        task = PT_AGG_OTHER; /* no such task: the root alone (no task has symbol PT_AGG_OTHER) */
    pt_agg_tree_t t;
    int rc = pt_agg_task_tree(agg, task, &t);
    agg_unlock(self);
    if (rc)
        return raise_rc(rc);
    return tree_result(&t, min_fraction, 0);
}

PyDoc_STRVAR(timeline_doc,
             "timeline(thread=0, window=0.0, since=0, group=1, process=0) -> dict(slice_ns, group, first_slice, last_slice, "
             "origin_ns, cells): per cell of `group` slices and thread, (first slice, thread, top symbol id or "
             "-1, top_ns, busy_ns, calls), for the slices >= since in the window (0: all the ring holds).");

static PyObject *agg_timeline(agg_obj_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"thread", "window", "since", "group", "process", NULL};
    pt_agg_query_t q;
    unsigned long long since = 0;
    unsigned int group = 1;
    Py_ssize_t process = 0;
    if (parse_query(args, kw, "|KdKIn:timeline", kwlist, &q, &since, &group, &process, NULL, NULL, NULL) < 0)
        return NULL;
    pt_agg_timeline_t t;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    pt_agg_t *agg = agg_at(self, process);
    rc = agg ? pt_agg_timeline(agg, &q, since, group, &t) : -ESRCH;
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    if (rc == -ESRCH)
        return no_process(process);
    if (rc)
        return raise_rc(rc);
    PyObject *cells = PyList_New((Py_ssize_t)t.count), *d = NULL;
    for (size_t i = 0; cells && i < t.count; i++) {
        const pt_agg_tl_cell_t *c = &t.cells[i];
        long long sym = c->symbol == PT_AGG_NONE ? -1 : (long long)c->symbol;
        PyObject *cell = Py_BuildValue("(KKLKKK)", (unsigned long long)c->slice, (unsigned long long)c->thread, sym,
                                       (unsigned long long)c->top_ns, (unsigned long long)c->busy_ns,
                                       (unsigned long long)c->calls);
        if (!cell) {
            Py_CLEAR(cells);
            break;
        }
        PyList_SET_ITEM(cells, (Py_ssize_t)i, cell);
    }
    if (cells)
        d = Py_BuildValue("{sKsIsKsKsKsN}", "slice_ns", (unsigned long long)t.slice_ns, "group", t.group,
                          "first_slice",
                          (unsigned long long)t.first_slice, "last_slice", (unsigned long long)t.last_slice,
                          "origin_ns", (unsigned long long)t.origin_ns, "cells", cells);
    pt_agg_timeline_free(&t);
    return d;
}

PyDoc_STRVAR(processes_doc,
             "processes() -> list[(index, tag, pid, ppid, command_line, producer_state, threads_active, events, "
             "role, label)]: the processes of the stream in order of first sight (index 0: the first, the job's "
             "root); tag is Message.process, pid 0 until its ProcessInfo came; role: None until the process "
             "said it (a multiprocessing child); label: how every view names it (pt_process_label).");

static PyObject *agg_processes(agg_obj_t *self, PyObject *unused)
{
    (void)unused;
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    agg_lock(self);
    size_t n = pt_aggset_count(self->set);
    for (size_t i = 0; i < n; i++) {
        pt_agg_t *agg = pt_aggset_agg(self->set, i);
        const pt_fb_process_info_t *pi = pt_agg_process_info(agg);
        pt_agg_counters_t c;
        pt_agg_counters(agg, &c);
        PyObject *cmd = PyUnicode_DecodeUTF8(pi->command_line.ptr ? pi->command_line.ptr : "",
                                             pi->command_line.ptr ? pi->command_line.len : 0, "replace");
        char label[1400];
        size_t label_len = pt_process_label(pi->role.ptr, pi->command_line.ptr, label, sizeof label);
        PyObject *lab = PyUnicode_DecodeUTF8(label, (Py_ssize_t)label_len, "replace");
        PyObject *role = pi->role.ptr ? PyUnicode_DecodeUTF8(pi->role.ptr, pi->role.len, "replace") : Py_NewRef(Py_None);
        PyObject *t = cmd && lab && role
                          ? Py_BuildValue("(nIKKNIIKNN)", (Py_ssize_t)i, pt_aggset_tag(self->set, i),
                                          (unsigned long long)pi->pid, (unsigned long long)pi->ppid, cmd,
                                          c.producer_state, c.threads_active, (unsigned long long)c.events_seen, role,
                                          lab)
                          : NULL;
        if (t == NULL) {
            Py_XDECREF(cmd);
            Py_XDECREF(lab);
            Py_XDECREF(role);
        }
        if (append_locked(self, list, t))
            return NULL;
    }
    agg_unlock(self);
    return list;
}

static PyMethodDef agg_methods[] = {
    {"feed", (PyCFunction)agg_feed, METH_O, feed_doc},
    {"feed_many", (PyCFunction)agg_feed_many, METH_O, feed_many_doc},
    {"processes", (PyCFunction)agg_processes, METH_NOARGS, processes_doc},
    {"counters", (PyCFunction)(void (*)(void))agg_counters, METH_VARARGS | METH_KEYWORDS, counters_doc},
    {"process_info", (PyCFunction)(void (*)(void))agg_process_info, METH_VARARGS | METH_KEYWORDS, process_doc},
    {"threads", (PyCFunction)(void (*)(void))agg_threads, METH_VARARGS | METH_KEYWORDS, threads_doc},
    {"symbols", (PyCFunction)(void (*)(void))agg_symbols, METH_VARARGS | METH_KEYWORDS, symbols_doc},
    {"stacks", (PyCFunction)(void (*)(void))agg_stacks, METH_VARARGS | METH_KEYWORDS, stacks_doc},
    {"table", (PyCFunction)(void (*)(void))agg_table, METH_VARARGS | METH_KEYWORDS, table_doc},
    {"tree", (PyCFunction)(void (*)(void))agg_tree, METH_VARARGS | METH_KEYWORDS, tree_doc},
    {"timeline", (PyCFunction)(void (*)(void))agg_timeline, METH_VARARGS | METH_KEYWORDS, timeline_doc},
    {"steps", (PyCFunction)(void (*)(void))agg_steps, METH_VARARGS | METH_KEYWORDS, steps_doc},
    {"tasks", (PyCFunction)(void (*)(void))agg_tasks, METH_VARARGS | METH_KEYWORDS, tasks_doc},
    {"task_tree", (PyCFunction)(void (*)(void))agg_task_tree, METH_VARARGS | METH_KEYWORDS, task_tree_doc},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot agg_slots[] = {
    {Py_tp_new, __extension__(void *) agg_new},
    {Py_tp_dealloc, __extension__(void *) agg_dealloc},
    {Py_tp_methods, agg_methods},
    {Py_tp_doc, (void *)"Aggregator(slice_ns=0, slice_count=0, max_processes=0): pytrace's aggregation "
                        "(viewer/core/agg.h), one per process of the stream (viewer/core/aggset.h); the "
                        "window keeps slice_count slices of slice_ns (defaults: 6000 x 100 ms); at most "
                        "max_processes processes (default: 1024, fewer for long windows) are read."},
    {0, NULL},
};

static PyType_Spec agg_spec = {
    .name = "pytrace._pytrace.Aggregator",
    .basicsize = sizeof(agg_obj_t),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = agg_slots,
};

int pt_agg_type_add(PyObject *module)
{
    PyObject *type = PyType_FromModuleAndSpec(module, &agg_spec, NULL);
    if (!type)
        return -1;
    if (PyModule_AddObject(module, "Aggregator", type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}
