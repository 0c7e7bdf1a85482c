/*
 * RecFileReader, RecFileWriter, verify_message: thin wrappers of pt_recfile /
 * pt_recwriter (viewer/core/recfile.h), so that recordings are read, verified,
 * compressed and written by one implementation, the C one that pytrace-top
 * uses too. Follow mode, file creation and naming stay in recording.py.
 *
 * Damage is raised as ValueError(offset, reason); I/O errors as OSError. The
 * GIL is released around file I/O and (de)compression; an object is used by
 * one thread at a time (a second one gets RuntimeError, not a race).
 */
#define PY_SSIZE_T_CLEAN
#include "runtime/_pytrace/recfile_type.h"

#include <errno.h>
#include <string.h>

#include "runtime/_pytrace/pt_tracer.h"
#include "viewer/core/recfile.h"

/* ---- helpers ----------------------------------------------------------------------- */

static PyObject *raise_errno(int err_neg, const char *what)
{
    errno = -err_neg;
    PyObject *msg = PyUnicode_FromFormat("%s: %s", what, strerror(-err_neg));
    if (msg) {
        PyObject *exc = PyObject_CallFunction(PyExc_OSError, "iO", -err_neg, msg);
        if (exc) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        Py_DECREF(msg);
    }
    return NULL;
}

static int enter(int *busy)
{
    if (*busy) {
        PyErr_SetString(PyExc_RuntimeError, "a recording file object is used by two threads at once");
        return -1;
    }
    *busy = 1;
    return 0;
}

/* ---- RecFileReader ----------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    pt_recfile_t *rf;
    int busy;
} reader_obj_t;

static PyObject *damage_error(pt_recfile_t *rf)
{
    PyObject *args = Py_BuildValue("(Ls)", (long long)pt_recfile_error_offset(rf), pt_recfile_error_reason(rf));
    if (args) {
        PyErr_SetObject(PyExc_ValueError, args);
        Py_DECREF(args);
    }
    return NULL;
}

static PyObject *rreader_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"path", NULL};
    PyObject *path_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&", kwlist, PyUnicode_FSConverter, &path_obj))
        return NULL;
    reader_obj_t *self = (reader_obj_t *)type->tp_alloc(type, 0);
    if (!self) {
        Py_DECREF(path_obj);
        return NULL;
    }
    char err[512] = "";
    int rc;
    const char *path = PyBytes_AS_STRING(path_obj);
    Py_BEGIN_ALLOW_THREADS
    rc = pt_recfile_open(path, &self->rf, err, sizeof err);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    if (rc < 0) {
        Py_DECREF(self);
        PyObject *exc = Py_BuildValue("(is)", -rc, err);
        if (exc) {
            PyErr_SetObject(PyExc_OSError, exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    return (PyObject *)self;
}

static void rreader_dealloc(reader_obj_t *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    pt_recfile_close(self->rf);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int rreader_check(reader_obj_t *self)
{
    if (!self->rf) {
        PyErr_SetString(PyExc_ValueError, "the recording is closed");
        return -1;
    }
    return enter(&self->busy);
}

static PyObject *rreader_next(reader_obj_t *self, PyObject *unused)
{
    (void)unused;
    if (rreader_check(self) < 0)
        return NULL;
    const uint8_t *msg = NULL;
    size_t len = 0;
    pt_fb_msg_t m;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pt_recfile_next(self->rf, &msg, &len, &m);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc == 1) {
        PyObject *data = PyBytes_FromStringAndSize((const char *)msg, (Py_ssize_t)len);
        if (!data)
            return NULL;
        return Py_BuildValue("(IN)", m.type, data);
    }
    if (rc == 0)
        Py_RETURN_NONE;
    if (rc == -EBADMSG)
        return damage_error(self->rf);
    return raise_errno(rc, pt_recfile_error(self->rf));
}

static PyObject *rreader_finish(reader_obj_t *self, PyObject *unused)
{
    (void)unused;
    if (rreader_check(self) < 0)
        return NULL;
    int rc = pt_recfile_finish(self->rf);
    self->busy = 0;
    if (rc == -EBADMSG)
        return damage_error(self->rf);
    Py_RETURN_NONE;
}

static PyObject *rreader_ended(reader_obj_t *self, PyObject *unused)
{
    (void)unused;
    if (!self->rf)
        Py_RETURN_FALSE;
    return PyBool_FromLong(pt_recfile_ended(self->rf));
}

static PyObject *rreader_unrecorded(reader_obj_t *self, PyObject *unused)
{
    (void)unused;
    pt_fb_producer_status_t st;
    if (!self->rf || !pt_recfile_unrecorded(self->rf, &st))
        Py_RETURN_NONE;
    return Py_BuildValue("{sKsKsk}", "events", (unsigned long long)st.unrecorded_events, "messages",
                         (unsigned long long)st.unrecorded_messages, "errno", (unsigned long)st.unrecorded_errno);
}

static PyObject *rreader_close(reader_obj_t *self, PyObject *unused)
{
    (void)unused;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the recording is being read by another thread");
        return NULL;
    }
    pt_recfile_close(self->rf);
    self->rf = NULL;
    Py_RETURN_NONE;
}

#define RGET(name, expr)                                                                    \
    static PyObject *rreader_get_##name(reader_obj_t *self, void *closure)                  \
    {                                                                                       \
        (void)closure;                                                                      \
        pt_recfile_t *rf = self->rf;                                                        \
        return rf ? (expr) : PyLong_FromLong(0);                                            \
    }
RGET(offset, PyLong_FromUnsignedLongLong(pt_recfile_offset(rf)))
RGET(pending, PyLong_FromUnsignedLongLong(pt_recfile_pending(rf)))
RGET(flags, PyLong_FromUnsignedLong(pt_recfile_flags(rf)))
RGET(header_read, PyBool_FromLong(pt_recfile_header_read(rf)))
RGET(major, PyLong_FromLong(pt_recfile_format_major(rf)))
RGET(minor, PyLong_FromLong(pt_recfile_format_minor(rf)))
RGET(messages, PyLong_FromUnsignedLongLong(pt_recfile_messages(rf)))
RGET(events, PyLong_FromUnsignedLongLong(pt_recfile_events(rf)))
RGET(compressed_chunks, PyLong_FromUnsignedLongLong(pt_recfile_compressed_chunks(rf)))
RGET(last_state, PyLong_FromUnsignedLong(pt_recfile_last_state(rf)))

static PyGetSetDef rreader_getset[] = {
    {"offset", (getter)rreader_get_offset, NULL, "file offset of the next message", NULL},
    {"pending", (getter)rreader_get_pending, NULL, "bytes of an incomplete tail (0 at a boundary)", NULL},
    {"flags", (getter)rreader_get_flags, NULL, "header flags as last read", NULL},
    {"header_read", (getter)rreader_get_header_read, NULL, "the header was read", NULL},
    {"major", (getter)rreader_get_major, NULL, "format major", NULL},
    {"minor", (getter)rreader_get_minor, NULL, "format minor", NULL},
    {"messages", (getter)rreader_get_messages, NULL, "messages handed out", NULL},
    {"events", (getter)rreader_get_events, NULL, "events handed out", NULL},
    {"compressed_chunks", (getter)rreader_get_compressed_chunks, NULL, "CompressedChunks read", NULL},
    {"last_state", (getter)rreader_get_last_state, NULL, "state of the last ProducerStatus", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef rreader_methods[] = {
    {"next", (PyCFunction)rreader_next, METH_NOARGS,
     "next() -> (msg_type, bytes) | None: the next verified message (a CompressedChunk comes out as the "
     "EventChunk it stands for); None: no complete message now. Damage: ValueError(offset, reason)."},
    {"finish", (PyCFunction)rreader_finish, METH_NOARGS,
     "finish(): nothing more will be written; an incomplete tail raises ValueError(offset, reason)."},
    {"unrecorded", (PyCFunction)rreader_unrecorded, METH_NOARGS,
     "unrecorded() -> None, or {events, messages, errno} when the header says INCOMPLETE (its writer "
     "could not write everything, e.g. a full disk): the loss slot's counts, read again."},
    {"ended", (PyCFunction)rreader_ended, METH_NOARGS,
     "ended() -> bool: a ProducerStatus Exited/Dead was read, or the FINISHED flag is set (re-read)."},
    {"close", (PyCFunction)rreader_close, METH_NOARGS, "close()"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot rreader_slots[] = {
    {Py_tp_new, __extension__(void *) rreader_new},
    {Py_tp_dealloc, __extension__(void *) rreader_dealloc},
    {Py_tp_methods, rreader_methods},
    {Py_tp_getset, rreader_getset},
    {Py_tp_doc, (void *)"RecFileReader(path): reads a recording message by message (viewer/core/recfile.h)."},
    {0, NULL},
};

static PyType_Spec rreader_spec = {
    .name = "pytrace._pytrace.RecFileReader",
    .basicsize = sizeof(reader_obj_t),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = rreader_slots,
};

/* ---- RecFileWriter ----------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    pt_recwriter_t *w;
    int busy;
} writer_obj_t;

static PyObject *rwriter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fd", "flags", "compress", "level", "buffer_bytes", "loss_slot", NULL};
    int fd = -1, compress = 1, level = PT_RECFILE_DEFAULT_LEVEL;
    unsigned int flags = 0;
    Py_ssize_t buffer_bytes = 1 << 20;
    int loss_slot = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|Ipinp", kwlist, &fd, &flags, &compress, &level, &buffer_bytes,
                                     &loss_slot))
        return NULL;
    if (buffer_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "buffer_bytes must be >= 0");
        return NULL;
    }
    writer_obj_t *self = (writer_obj_t *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    int rc = pt_recwriter_open(fd, flags, compress, level, (size_t)buffer_bytes, &self->w);
    if (rc < 0) {
        Py_DECREF(self);
        if (rc == -EINVAL)
            return PyErr_Format(PyExc_ValueError, "cannot start a recording on fd %d (compression level %d)", fd,
                                level);
        return raise_errno(rc, "cannot start a recording");
    }
    if (loss_slot)
        pt_recwriter_keep_loss_slot(self->w);
    return (PyObject *)self;
}

static void rwriter_dealloc(writer_obj_t *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    pt_recwriter_free(self->w);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *rwriter_append(writer_obj_t *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (enter(&self->busy) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    char why[256] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pt_recwriter_append(self->w, view.buf, (size_t)view.len, why, sizeof why);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyBuffer_Release(&view);
    if (rc == -EINVAL)
        return PyErr_Format(PyExc_ValueError, "%s", why[0] ? why : "not a message");
    if (rc < 0)
        return raise_errno(rc, "writing the recording failed");
    Py_RETURN_NONE;
}

static PyObject *rwriter_flush(writer_obj_t *self, PyObject *unused)
{
    (void)unused;
    if (enter(&self->busy) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pt_recwriter_flush(self->w);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc < 0)
        return raise_errno(rc, "writing the recording failed");
    Py_RETURN_NONE;
}

static PyObject *rwriter_set_flags(writer_obj_t *self, PyObject *arg)
{
    unsigned long flags = PyLong_AsUnsignedLong(arg);
    if (PyErr_Occurred())
        return NULL;
    int rc = pt_recwriter_set_flags(self->w, (uint32_t)flags);
    if (rc < 0)
        return raise_errno(rc, "writing the recording's flags failed");
    Py_RETURN_NONE;
}

static PyObject *rwriter_close(writer_obj_t *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"finished", NULL};
    int finished = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &finished))
        return NULL;
    if (enter(&self->busy) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pt_recwriter_close(self->w, finished);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc < 0)
        return raise_errno(rc, "writing the recording failed");
    Py_RETURN_NONE;
}

static PyObject *rwriter_stats(writer_obj_t *self, PyObject *unused)
{
    (void)unused;
    pt_recwriter_stats_t st;
    pt_recwriter_stats(self->w, &st);
    return Py_BuildValue("{sKsKsKsKsKsKsKsksKsKsk}", "bytes_written", (unsigned long long)st.bytes_written, "committed",
                         (unsigned long long)st.committed, "plain_bytes", (unsigned long long)st.plain_bytes,
                         "messages", (unsigned long long)st.messages, "events", (unsigned long long)st.events,
                         "lost_events", (unsigned long long)st.lost_events, "compressed_chunks",
                         (unsigned long long)st.compressed_chunks, "flags",
                         (unsigned long)pt_recwriter_flags(self->w), "unrecorded_events",
                         (unsigned long long)st.unrecorded_events, "unrecorded_messages",
                         (unsigned long long)st.unrecorded_messages, "write_errno", (unsigned long)st.write_errno);
}

static PyMethodDef rwriter_methods[] = {
    {"append", (PyCFunction)rwriter_append, METH_O,
     "append(message): one size-prefixed message as the reader hands it out (verified; an EventChunk is "
     "compressed when that is smaller). ValueError: not a message; OSError: the flush it caused failed."},
    {"flush", (PyCFunction)rwriter_flush, METH_NOARGS,
     "flush(): write the buffer; on failure the file is cut back to its last whole message (OSError)."},
    {"set_flags", (PyCFunction)rwriter_set_flags, METH_O, "set_flags(flags): replace the header flags."},
    {"close", (PyCFunction)(void (*)(void))rwriter_close, METH_VARARGS | METH_KEYWORDS,
     "close(finished=True): flush and, if finished, set the FINISHED flag. The fd stays open."},
    {"stats", (PyCFunction)rwriter_stats, METH_NOARGS,
     "stats() -> dict: bytes_written, committed, plain_bytes, messages, events, lost_events, "
     "compressed_chunks, flags, and after a failed write unrecorded_events, unrecorded_messages, "
     "write_errno (nothing is written after it; appends are counted)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot rwriter_slots[] = {
    {Py_tp_new, __extension__(void *) rwriter_new},
    {Py_tp_dealloc, __extension__(void *) rwriter_dealloc},
    {Py_tp_methods, rwriter_methods},
    {Py_tp_doc, (void *)"RecFileWriter(fd, flags=0, compress=True, level=1, buffer_bytes=1 MiB): writes a "
                        "recording to fd (viewer/core/recfile.h)."},
    {0, NULL},
};

static PyType_Spec rwriter_spec = {
    .name = "pytrace._pytrace.RecFileWriter",
    .basicsize = sizeof(writer_obj_t),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = rwriter_slots,
};

/* ---- verify_message ---------------------------------------------------------------- */

/* Parse one size-prefixed message with the C parser; 0, or -1 with ValueError set. */
static int parse_message_arg(PyObject *arg, pt_fb_msg_t *m)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return -1;
    char why[192] = "";
    const uint8_t *b = view.buf;
    const size_t len = (size_t)view.len;
    int rc = -1;
    if (len < 4) {
        PyErr_Format(PyExc_ValueError, "message of %zu bytes is too short", len);
    } else {
        const size_t size = pt_fb_message_size(b, len) - 4;
        if (size + 4 > len)
            PyErr_Format(PyExc_ValueError, "size prefix %zu exceeds the %zu bytes given", size, len);
        else if (pt_fb_parse(b, size + 4, m, why, sizeof why))
            PyErr_Format(PyExc_ValueError, "%s", why[0] ? why : "invalid message");
        else
            rc = 0;
    }
    PyBuffer_Release(&view);
    return rc;
}

static PyObject *py_verify_message(PyObject *module, PyObject *arg)
{
    (void)module;
    pt_fb_msg_t m;
    if (parse_message_arg(arg, &m) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(m.type);
}

/* The recorder's one question about a message, answered by the C parser: the
 * flatc-generated Python tables import the flatbuffers package, which imports
 * numpy when it is installed (80 ms and a BLAS thread pool in the recorder,
 * beside the job it records). */
static PyObject *py_message_drop_policy(PyObject *module, PyObject *arg)
{
    (void)module;
    pt_fb_msg_t m;
    if (parse_message_arg(arg, &m) < 0)
        return NULL;
    if (m.type != PT_MSG_PROCESS_INFO)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(m.u.process_info.drop_policy);
}

/* ---- merge_recordings ---------------------------------------------------------------- */

static PyObject *py_merge_recordings(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *paths_obj;
    int fd;
    if (!PyArg_ParseTuple(args, "Oi", &paths_obj, &fd))
        return NULL;
    PyObject *seq = PySequence_Fast(paths_obj, "inputs must be a sequence of paths");
    if (!seq)
        return NULL;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **bytes = calloc((size_t)(n ? n : 1), sizeof *bytes);
    const char **paths = calloc((size_t)(n ? n : 1), sizeof *paths);
    pt_recmerge_input_t *res = calloc((size_t)(n ? n : 1), sizeof *res);
    PyObject *result = NULL;
    if (!bytes || !paths || !res) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(seq, i), &bytes[i]))
            goto done;
        paths[i] = PyBytes_AS_STRING(bytes[i]);
    }
    if (!n) {
        PyErr_SetString(PyExc_ValueError, "nothing to merge");
        goto done;
    }
    char err[640] = "";
    pt_recwriter_stats_t st = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pt_recfile_merge(paths, (size_t)n, fd, res, &st, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc) {
        errno = -rc;
        if (err[0])
            PyErr_SetString(rc == -ENOMEM ? PyExc_MemoryError : PyExc_OSError, err);
        else
            PyErr_SetFromErrno(rc == -ENOMEM ? PyExc_MemoryError : PyExc_OSError);
        goto done;
    }
    PyObject *list = PyList_New(n);
    if (!list)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        const pt_recmerge_input_t *r = &res[i];
        PyObject *d = Py_BuildValue(
            "{s:I,s:K,s:K,s:K,s:K,s:O,s:K,s:L,s:L,s:O,s:L,s:s}", "processes", r->processes, "messages",
            (unsigned long long)r->messages, "events", (unsigned long long)r->events, "orphans",
            (unsigned long long)r->orphans, "clamped", (unsigned long long)r->clamped, "have_realtime",
            r->have_realtime ? Py_True : Py_False, "realtime_ns", (unsigned long long)r->realtime_ns,
            "clock_diff_ns", (long long)r->clock_diff_ns, "shift_ns", (long long)r->shift_ns, "damaged",
            r->damaged ? Py_True : Py_False, "error_offset", (long long)r->error_offset, "error", r->error);
        if (!d) {
            Py_DECREF(list);
            goto done;
        }
        PyList_SET_ITEM(list, i, d);
    }
    result = Py_BuildValue("(N{s:K,s:K,s:K})", list, "bytes", (unsigned long long)st.bytes_written, "messages",
                           (unsigned long long)st.messages, "events", (unsigned long long)st.events);
done:
    if (bytes)
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(bytes[i]);
    free(bytes);
    free(paths);
    free(res);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef recfile_functions[] = {
    {"merge_recordings", py_merge_recordings, METH_VARARGS,
     "merge_recordings(paths, fd) -> ([per input dict], totals): write one recording of every "
     "process of the recordings `paths` to the empty file fd (viewer/core/recfile.h, merge)."},
    {"verify_message", py_verify_message, METH_O,
     "verify_message(data) -> int: verify one size-prefixed message (the verifier every reader of "
     "pytrace uses); returns its MessageBody type, raises ValueError saying what is wrong."},
    {"message_drop_policy", py_message_drop_policy, METH_O,
     "message_drop_policy(data) -> int | None: the DropPolicy a ProcessInfo message states (None for "
     "another message); ValueError if it is not a valid message."},
    {NULL, NULL, 0, NULL},
};

int pt_recfile_types_add(PyObject *module)
{
    if (pt_add_type(module, &rreader_spec) < 0 || pt_add_type(module, &rwriter_spec) < 0)
        return -1;
    if (PyModule_AddFunctions(module, recfile_functions) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "RECORDING_FORMAT_MAJOR", PT_RECFILE_FORMAT_MAJOR) < 0 ||
        PyModule_AddIntConstant(module, "RECORDING_FORMAT_MINOR", PT_RECFILE_FORMAT_MINOR) < 0 ||
        PyModule_AddIntConstant(module, "RECORDING_DEFAULT_LEVEL", PT_RECFILE_DEFAULT_LEVEL) < 0)
        return -1;
    return 0;
}
