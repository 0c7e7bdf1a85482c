/*
 * _pytrace.Reader: a heap type over the reader library (shm/reader.h), plus
 * list_segments() and collect_stale().
 *
 * poll() releases the GIL while the library drains the segment (drain.h, as
 * HubClient's), then builds the Python list with the GIL held. A Reader is not for concurrent use from two
 * threads: a second poll() while one is draining raises RuntimeError.
 */
#include "drain.h"
#include "pt_tracer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shm/reader.h"
#include "shm/segment.h"

typedef struct {
    PyObject_HEAD
    pt_reader_t *reader;
    PyObject *segment;      /* str */
    int busy;               /* a poll is draining without the GIL */
    pt_drain_t drain;
} pt_reader_obj_t;

static PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"target", "any_user", "lock", "defer_release", NULL};
    const char *target;
    int any_user = 0, lock = 1, defer_release = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|ppp:Reader", kwlist, &target, &any_user, &lock,
                                     &defer_release))
        return NULL;
    pt_reader_obj_t *self = (pt_reader_obj_t *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    unsigned flags = (any_user ? PT_ATTACH_ANY_USER : 0) | (lock ? 0 : PT_READER_NO_LOCK) |
                     (defer_release ? PT_READER_DEFER_RELEASE : 0);
    char err[512] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pt_reader_attach(target, flags, &self->reader, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        Py_DECREF(self);
        return pt_oserror(rc, err[0] ? err : strerror(-rc));
    }
    self->segment = PyUnicode_FromString(pt_segment_name(pt_reader_segment(self->reader)));
    if (self->segment == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void reader_dealloc(pt_reader_obj_t *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    /* A finished segment (producer gone, everything read) has no other use:
     * remove it so /dev/shm does not fill up with spent segments. */
    if (self->reader)
        pt_reader_detach(self->reader, 1);
    Py_XDECREF(self->segment);
    pt_drain_free(&self->drain);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int check_open(pt_reader_obj_t *self)
{
    return pt_drain_check_open(self->reader, self->busy, "reader");
}

static PyObject *reader_poll(pt_reader_obj_t *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"max_events", NULL};
    unsigned long long max_events = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|K:poll", kwlist, &max_events))
        return NULL;
    if (pt_drain_begin(&self->drain, self->reader, self->busy, "reader") < 0)
        return NULL;
    long rc;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = pt_reader_poll(self->reader, pt_drain_collect, &self->drain, max_events);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    return pt_drain_list(&self->drain, rc, rc < 0 ? pt_reader_error(self->reader) : NULL);
}

static PyObject *reader_release(pt_reader_obj_t *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pt_reader_release(self->reader);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        const char *e = pt_reader_error(self->reader);
        return pt_oserror(rc, e && *e ? e : strerror(-rc));
    }
    Py_RETURN_NONE;
}

static PyObject *reader_stats(pt_reader_obj_t *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) < 0)
        return NULL;
    pt_reader_stats_t s;
    pt_reader_stats(self->reader, &s);
    return Py_BuildValue(
        "{sKsKsKsKsKsKsKsKsKsKsKsKsKsIsIsK}", "events_read", (unsigned long long)s.events_read, "chunks_read",
        (unsigned long long)s.chunks_read, "messages", (unsigned long long)s.messages, "symbols_read",
        (unsigned long long)s.symbols_read, "threads_seen", (unsigned long long)s.threads_seen,
        "threads_active", (unsigned long long)s.threads_active, "producer_events_written",
        (unsigned long long)s.producer_events_written, "producer_events_dropped",
        (unsigned long long)s.producer_events_dropped, "hook_errors", (unsigned long long)s.hook_errors,
        "symbols_dropped", (unsigned long long)s.symbols_dropped, "threads_untraced",
        (unsigned long long)s.threads_untraced, "tracing_displaced", (unsigned long long)s.tracing_displaced,
        "events_untraced", (unsigned long long)s.events_untraced, "producer_state",
        (unsigned int)s.producer_state, "corrupt_rings", (unsigned int)s.corrupt_rings, "pid",
        (unsigned long long)s.pid);
}

static PyObject *reader_close(pt_reader_obj_t *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"unlink_if_finished", NULL};
    int unlink_it = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:close", kwlist, &unlink_it))
        return NULL;
    if (pt_drain_check_idle(self->busy, "reader") < 0)
        return NULL;
    if (self->reader) {
        pt_reader_detach(self->reader, unlink_it);
        self->reader = NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *reader_enter(pt_reader_obj_t *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) < 0)
        return NULL;
    return Py_NewRef(self);
}

static PyObject *reader_exit(pt_reader_obj_t *self, PyObject *args)
{
    (void)args;
    if (self->reader && !self->busy) {
        pt_reader_detach(self->reader, 1);
        self->reader = NULL;
    }
    Py_RETURN_FALSE;
}

static PyObject *reader_get_finished(pt_reader_obj_t *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->reader ? pt_reader_finished(self->reader) : 1);
}

static PyObject *reader_get_error(pt_reader_obj_t *self, void *closure)
{
    (void)closure;
    const char *e = self->reader ? pt_reader_error(self->reader) : "";
    return PyUnicode_DecodeUTF8(e ? e : "", e ? (Py_ssize_t)strlen(e) : 0, "replace");
}

static PyObject *reader_get_segment(pt_reader_obj_t *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->segment);
}

static PyMethodDef reader_methods[] = {
    {"poll", (PyCFunction)(void (*)(void))reader_poll, METH_VARARGS | METH_KEYWORDS,
     "poll(max_events=0) -> list[tuple[int, bytes]]: drain published messages (type, size-prefixed "
     "FlatBuffer) in stream order."},
    {"stats", (PyCFunction)reader_stats, METH_NOARGS, "stats() -> dict"},
    {"release", (PyCFunction)reader_release, METH_NOARGS,
     "release(): with Reader(..., defer_release=True), everything polled so far is kept (written "
     "out): let the producer reuse it. Until then a reader taking over reads it again."},
    {"close", (PyCFunction)(void (*)(void))reader_close, METH_VARARGS | METH_KEYWORDS,
     "close(unlink_if_finished=True)"},
    {"__enter__", (PyCFunction)reader_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)reader_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef reader_getset[] = {
    {"finished", (getter)reader_get_finished, NULL, "producer exited and everything was read", NULL},
    {"error", (getter)reader_get_error, NULL, "last error, one line ('' if none)", NULL},
    {"segment", (getter)reader_get_segment, NULL, "segment name", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot reader_slots[] = {
    {Py_tp_new, __extension__(void *) reader_new},
    {Py_tp_dealloc, __extension__(void *) reader_dealloc},
    {Py_tp_methods, reader_methods},
    {Py_tp_getset, reader_getset},
    {Py_tp_doc, "Reader(target, any_user=False, lock=True): drain a pytrace segment."},
    {0, NULL},
};

static PyType_Spec reader_spec = {
    .name = "pytrace._pytrace.Reader",
    .basicsize = sizeof(pt_reader_obj_t),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = reader_slots,
};

PyObject *pt_reader_type_create(PyObject *module)
{
    return PyType_FromModuleAndSpec(module, &reader_spec, NULL);
}

/* ---- discovery ------------------------------------------------------------------ */

PyObject *pt_list_segments(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    size_t count = 0;
    pt_segment_info_t *infos = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pt_segment_list_alloc(&infos, &count);
    Py_END_ALLOW_THREADS
    if (rc == -ENOMEM)
        return PyErr_NoMemory();
    if (rc < 0)
        return pt_oserror(rc, "cannot list /dev/shm");
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list && i < count; i++) {
        const pt_segment_info_t *s = &infos[i];
        PyObject *d = Py_BuildValue(
            "{sssKsKsIsIsOsOsIsKsKsKsKsKsKsKsKsKsNsN}", "name", s->name, "pid", (unsigned long long)s->pid, "ppid",
            (unsigned long long)s->ppid, "uid",
            (unsigned int)s->uid, "state", (unsigned int)s->state, "alive", s->alive ? Py_True : Py_False,
            "valid", s->valid ? Py_True : Py_False, "threads_active", (unsigned int)s->threads_active,
            "events_written", (unsigned long long)s->events_written, "events_dropped",
            (unsigned long long)s->events_dropped, "hook_errors", (unsigned long long)s->hook_errors,
            "symbols_dropped", (unsigned long long)s->symbols_dropped, "threads_untraced",
            (unsigned long long)s->threads_untraced, "tracing_displaced", (unsigned long long)s->tracing_displaced,
            "events_untraced", (unsigned long long)s->events_untraced, "segment_bytes", (unsigned long long)s->segment_bytes,
            "consumer_pid", (unsigned long long)s->consumer_pid, "cmdline",
            PyUnicode_DecodeUTF8(s->cmdline, (Py_ssize_t)strnlen(s->cmdline, sizeof s->cmdline), "replace"),
            "error", PyUnicode_DecodeUTF8(s->error, (Py_ssize_t)strnlen(s->error, sizeof s->error), "replace"));
        if (d == NULL || PyList_Append(list, d) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(list);
            break;
        }
        Py_DECREF(d);
    }
    free(infos);
    return list;
}

PyObject *pt_collect_stale(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pt_segment_collect_stale();
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return pt_oserror(rc, "cannot collect stale segments in /dev/shm");
    return PyLong_FromLong(rc);
}
