/*
 * _pytrace.export(): the C exporters (viewer/core/export.h) for `pytrace
 * export`. The GIL is released while the recording is read; every few
 * thousand messages (and while following a file) the GIL is taken back to run
 * signal handlers, so Ctrl-C stops the export with KeyboardInterrupt.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "py_dict_set.h"
#include "viewer/core/export.h"

#include <errno.h>
#include <string.h>

typedef struct progress_ctx {
    PyThreadState *saved;
    int interrupted;
} progress_ctx_t;

static int export_progress(void *p)
{
    progress_ctx_t *c = p;
    PyEval_RestoreThread(c->saved);
    int stop = PyErr_CheckSignals() < 0;
    c->saved = PyEval_SaveThread();
    if (stop)
        c->interrupted = 1;
    return stop;
}

static const struct {
    const char *name;
    int format;
} formats[] = {
    {"collapsed", PT_EXPORT_COLLAPSED},
    {"pstats", PT_EXPORT_PSTATS},
    {"speedscope", PT_EXPORT_SPEEDSCOPE},
    {"chrome", PT_EXPORT_CHROME},
    {"perfetto", PT_EXPORT_PERFETTO},
};

#define SET_U64(d, key, v) PT_DICT_SET(d, key, PyLong_FromUnsignedLongLong((unsigned long long)(v)))

PyObject *pt_py_export(PyObject *module, PyObject *args, PyObject *kw)
{
    (void)module;
    static char *kwlist[] = {"recording", "format", "fd", "weight_calls", "per_thread", "qualnames",
                             "follow", "timeout", "tmp_dir", "uncompressed", "pids", "max_bytes", "max_depth",
                             "from_ns", "to_ns", "min_duration_ns", "tree_budget", "cpu_time", NULL};
    PyObject *path_obj = NULL, *pids_obj = NULL;
    uint64_t pids[PT_EXPORT_MAX_PIDS];
    const char *fmt = NULL, *tmp_dir = NULL;
    int fd = -1, weight_calls = 0, per_thread = 0, qualnames = 0, follow = 0, uncompressed = 0, cpu_time = 0;
    double timeout = 30.0;
    unsigned long long max_bytes = 0, tree_budget = 0;
    unsigned int max_depth = 0;
    long long from_ns = 0, to_ns = 0, min_duration_ns = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&si|ppppdzpOKILLLKp", kwlist, PyUnicode_FSConverter, &path_obj,
                                     &fmt, &fd, &weight_calls, &per_thread, &qualnames, &follow, &timeout,
                                     &tmp_dir, &uncompressed, &pids_obj, &max_bytes, &max_depth, &from_ns, &to_ns,
                                     &min_duration_ns, &tree_budget, &cpu_time))
        return NULL;
    size_t npids = 0;
    if (pids_obj && pids_obj != Py_None) { /* pids: a sequence of ints, the processes to export */
        PyObject *seq = PySequence_Fast(pids_obj, "pids must be a sequence of process ids");
        if (!seq) {
            Py_DECREF(path_obj);
            return NULL;
        }
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (n > PT_EXPORT_MAX_PIDS) {
            Py_DECREF(seq);
            Py_DECREF(path_obj);
            PyErr_Format(PyExc_ValueError, "at most %d pids", PT_EXPORT_MAX_PIDS);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            unsigned long long v = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
            if (v == (unsigned long long)-1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                Py_DECREF(path_obj);
                return NULL;
            }
            pids[npids++] = v;
        }
        Py_DECREF(seq);
    }
    pt_export_opts_t o = {.weight_calls = weight_calls, .per_thread = per_thread, .qualnames = qualnames,
                          .follow = follow, .timeout = timeout, .tmp_dir = tmp_dir,
                          .pf_uncompressed = uncompressed, .pids = npids ? pids : NULL, .npids = npids,
                          .max_bytes = max_bytes, .max_depth = max_depth, .from_ns = from_ns, .to_ns = to_ns,
                          .min_duration_ns = min_duration_ns, .tree_budget = tree_budget, .cpu_time = cpu_time};
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (!strcmp(fmt, formats[i].name))
            o.format = formats[i].format;
    if (!o.format) {
        Py_DECREF(path_obj);
        PyErr_Format(PyExc_ValueError, "unknown export format %R", PyTuple_GET_ITEM(args, 1));
        return NULL;
    }
    progress_ctx_t pc = {0};
    o.progress = export_progress;
    o.progress_ctx = &pc;
    pt_export_result_t res;
    pc.saved = PyEval_SaveThread();
    int rc = pt_export_file(PyBytes_AS_STRING(path_obj), fd, &o, &res);
    PyEval_RestoreThread(pc.saved);
    Py_DECREF(path_obj);
    if (rc == -EINTR && pc.interrupted)
        return NULL; /* the signal handler's exception (KeyboardInterrupt) */
    if (rc == -EFBIG && res.size_limited) { /* opts.max_bytes, not the file system */
        PyObject *e = PyObject_CallFunction(PyExc_OSError, "is", EFBIG, "output size limit reached");
        if (e) {
            PyErr_SetObject(PyExc_OSError, e);
            Py_DECREF(e);
        }
        return NULL;
    }
    if (rc) {
        if (res.error[0] && !res.damaged) { /* the recording could not be opened */
            errno = -rc;
            PyErr_SetString(PyExc_OSError, res.error);
            return NULL;
        }
        errno = -rc;
        return PyErr_SetFromErrno(rc == -ENOMEM ? PyExc_MemoryError : PyExc_OSError);
    }
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    SET_U64(d, "events", res.events);
    SET_U64(d, "lost_events", res.lost);
    SET_U64(d, "lost_wait_timeout", res.lost_wait_timeout);
    SET_U64(d, "lost_no_room", res.lost_no_room);
    SET_U64(d, "lost_no_ring", res.lost_no_ring);
    SET_U64(d, "unmatched", res.unmatched);
    SET_U64(d, "unannounced", res.unannounced);
    SET_U64(d, "threads", res.threads);
    SET_U64(d, "symbols", res.symbols);
    SET_U64(d, "messages", res.messages);
    SET_U64(d, "bytes", res.bytes_written);
    SET_U64(d, "calls_left_out", res.calls_left_out);
    SET_U64(d, "stacks_folded", res.stacks_folded);
    SET_U64(d, "deepest", res.deepest);
    SET_U64(d, "tree_budget", res.tree_budget);
    SET_U64(d, "folded_calls", res.folded_calls);
    SET_U64(d, "span_ns", res.span_ns);
    SET_U64(d, "unobserved_ns", res.unobserved_ns);
    SET_U64(d, "unobserved_cpu_ns", res.unobserved_cpu_ns);
    SET_U64(d, "unobserved_lost", res.unobserved_lost);
    SET_U64(d, "unobserved_no_ring", res.unobserved_no_ring);
    SET_U64(d, "cpu_records", res.cpu_records);
    SET_U64(d, "timed_out", res.timed_out);
    SET_U64(d, "processes", res.processes);
    SET_U64(d, "selected_processes", res.selected_processes);
    {
        PyObject *l = PyList_New(0);
        if (!l || PyDict_SetItemString(d, "pids", l) < 0) {
            Py_XDECREF(l);
            goto err;
        }
        Py_DECREF(l);
        for (uint32_t i = 0; i < res.npids; i++) {
            PyObject *v = PyLong_FromUnsignedLongLong(res.pids[i]);
            if (!v || PyList_Append(l, v) < 0) {
                Py_XDECREF(v);
                goto err;
            }
            Py_DECREF(v);
        }
    }
    if (res.damaged) {
        PyObject *t = Py_BuildValue("(Ls)", (long long)res.error_offset, res.error);
        if (!t || PyDict_SetItemString(d, "damage", t) < 0) {
            Py_XDECREF(t);
            goto err;
        }
        Py_DECREF(t);
    }
    if (res.have_status) {
        PyObject *s = PyDict_New();
        if (!s || PyDict_SetItemString(d, "status", s) < 0) {
            Py_XDECREF(s);
            goto err;
        }
        Py_DECREF(s);
        SET_U64(s, "state", res.status.state);
        SET_U64(s, "events_written", res.status.events_written);
        SET_U64(s, "events_dropped", res.status.events_dropped);
        SET_U64(s, "hook_errors", res.status.hook_errors);
        SET_U64(s, "symbols_dropped", res.status.symbols_dropped);
        SET_U64(s, "threads_untraced", res.status.threads_untraced);
        SET_U64(s, "tracing_displaced", res.status.tracing_displaced);
        SET_U64(s, "events_untraced", res.status.events_untraced);
        SET_U64(s, "unrecorded_events", res.status.unrecorded_events);
        SET_U64(s, "unrecorded_messages", res.status.unrecorded_messages);
        SET_U64(s, "unrecorded_errno", res.status.unrecorded_errno);
    }
    return d;
err:
    Py_DECREF(d);
    return NULL;
}
