/*
 * _pytrace.HubClient(target, lossless=False, any_user=False, socket=None):
 * the same face as _pytrace.Reader (poll, stats, finished, error, segment,
 * release, close) over a hub's socket instead of a segment. poll() releases
 * the GIL while it receives; messages are handed out as (type, bytes).
 * release() is a no-op: the hub holds the ring (README, "Many readers").
 */
#include "hubclient_type.h"

#include "drain.h"
#include "pt_tracer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "viewer/hub/autohub.h"
#include "viewer/hub/client.h"

typedef struct {
    PyObject_HEAD
    pt_hub_client_t *client;
    int busy;
    pt_drain_t drain;
} hubclient_obj_t;

static PyObject *hubclient_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"target", "lossless", "any_user", "socket", "queue_kib", NULL};
    const char *target, *sock = NULL;
    int lossless = 0, any_user = 0;
    unsigned int queue_kib = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|ppzI:HubClient", kwlist, &target, &lossless, &any_user, &sock,
                                     &queue_kib))
        return NULL;
    hubclient_obj_t *self = (hubclient_obj_t *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    unsigned flags = (lossless ? PT_HUB_CLIENT_LOSSLESS : 0) | (any_user ? PT_HUB_CLIENT_ANY_USER : 0);
    char err[512] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    if (sock)
        rc = pt_hub_client_open(sock, 0, flags, queue_kib, &self->client, err, sizeof err);
    else
        rc = pt_hub_client_connect(target, flags, &self->client, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        Py_DECREF(self);
        return pt_oserror(rc, err[0] ? err : strerror(-rc));
    }
    return (PyObject *)self;
}

static void hubclient_dealloc(hubclient_obj_t *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    pt_hub_client_close(self->client);
    pt_drain_free(&self->drain);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int check_open(hubclient_obj_t *self)
{
    return pt_drain_check_open(self->client, self->busy, "hub client");
}

static PyObject *hubclient_poll(hubclient_obj_t *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"max_events", "timeout", NULL};
    unsigned long long max_events = 0;
    double timeout = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|Kd:poll", kwlist, &max_events, &timeout))
        return NULL;
    if (pt_drain_begin(&self->drain, self->client, self->busy, "hub client") < 0)
        return NULL;
    long rc;
    int timeout_ms = timeout > 0 ? (int)(timeout * 1000 + 0.5) : 0;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = pt_hub_client_poll(self->client, pt_drain_collect, &self->drain, max_events, timeout_ms);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    return pt_drain_list(&self->drain, rc, rc < 0 ? pt_hub_client_error(self->client) : NULL);
}

static PyObject *hubclient_stats(hubclient_obj_t *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) < 0)
        return NULL;
    pt_reader_stats_t s;
    pt_hub_client_stats(self->client, &s);
    const pt_hub_welcome_t *w = pt_hub_client_welcome(self->client);
    return Py_BuildValue(
        "{sKsKsKsKsKsKsKsKsKsKsKsKsKsIsIsKsKsOsK}", "events_read", (unsigned long long)s.events_read, "chunks_read",
        (unsigned long long)s.chunks_read, "messages", (unsigned long long)s.messages, "symbols_read",
        (unsigned long long)s.symbols_read, "threads_seen", (unsigned long long)s.threads_seen, "threads_active",
        (unsigned long long)s.threads_active, "producer_events_written", (unsigned long long)s.producer_events_written,
        "producer_events_dropped", (unsigned long long)s.producer_events_dropped, "hook_errors",
        (unsigned long long)s.hook_errors, "symbols_dropped", (unsigned long long)s.symbols_dropped,
        "threads_untraced", (unsigned long long)s.threads_untraced, "tracing_displaced",
        (unsigned long long)s.tracing_displaced, "events_untraced", (unsigned long long)s.events_untraced,
        "producer_state", (unsigned int)s.producer_state, "corrupt_rings", 0u, "pid", (unsigned long long)s.pid,
        "hub_pid", (unsigned long long)w->hub_pid, "lossless",
        (w->flags & PT_HUB_WELCOME_LOSSLESS) ? Py_True : Py_False, "events_missed",
        (unsigned long long)pt_hub_client_missed(self->client));
}

static PyObject *hubclient_release(hubclient_obj_t *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *hubclient_close(hubclient_obj_t *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"unlink_if_finished", NULL};
    int unused = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:close", kwlist, &unused))
        return NULL;
    if (pt_drain_check_idle(self->busy, "hub client") < 0)
        return NULL;
    pt_hub_client_close(self->client);
    self->client = NULL;
    Py_RETURN_NONE;
}

static PyObject *hubclient_get_finished(hubclient_obj_t *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->client ? pt_hub_client_finished(self->client) &&
                                              !pt_hub_client_disconnected(self->client)
                                        : 1);
}

static PyObject *hubclient_get_disconnected(hubclient_obj_t *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->client ? pt_hub_client_disconnected(self->client) : 0);
}

static PyObject *hubclient_get_error(hubclient_obj_t *self, void *closure)
{
    (void)closure;
    const char *e = self->client ? pt_hub_client_error(self->client) : "";
    return PyUnicode_DecodeUTF8(e, (Py_ssize_t)strlen(e), "replace");
}

static PyObject *hubclient_get_segment(hubclient_obj_t *self, void *closure)
{
    (void)closure;
    const char *s = self->client ? pt_hub_client_segment(self->client) : "";
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

static PyObject *hubclient_get_fd(hubclient_obj_t *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->client ? pt_hub_client_fd(self->client) : -1);
}

static PyMethodDef hubclient_methods[] = {
    {"poll", (PyCFunction)(void (*)(void))hubclient_poll, METH_VARARGS | METH_KEYWORDS,
     "poll(max_events=0, timeout=0) -> list[tuple[int, bytes]]: the messages that arrived (waiting at most "
     "timeout seconds for the first)."},
    {"stats", (PyCFunction)hubclient_stats, METH_NOARGS, "stats() -> dict (as Reader.stats, from the stream)"},
    {"release", (PyCFunction)hubclient_release, METH_NOARGS, "release(): nothing to do (the hub holds the ring)"},
    {"close", (PyCFunction)(void (*)(void))hubclient_close, METH_VARARGS | METH_KEYWORDS, "close()"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef hubclient_getset[] = {
    {"finished", (getter)hubclient_get_finished, NULL, "the hub ended the stream (the job ended)", NULL},
    {"disconnected", (getter)hubclient_get_disconnected, NULL,
     "the hub closed the stream before the job's end (poll raises ConnectionResetError): not the job's "
     "death, the job may still run",
     NULL},
    {"error", (getter)hubclient_get_error, NULL, "last error, one line ('' if none)", NULL},
    {"segment", (getter)hubclient_get_segment, NULL, "the job's segment (from its ProcessInfo)", NULL},
    {"fileno", (getter)hubclient_get_fd, NULL, "the socket's fd (for select)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot hubclient_slots[] = {
    {Py_tp_new, __extension__(void *) hubclient_new},
    {Py_tp_dealloc, __extension__(void *) hubclient_dealloc},
    {Py_tp_methods, hubclient_methods},
    {Py_tp_getset, hubclient_getset},
    {Py_tp_doc, "HubClient(target, lossless=False, any_user=False, socket=None, queue_kib=0): read a job "
                "through its hub (pytrace-hub)."},
    {0, NULL},
};

static PyType_Spec hubclient_spec = {
    .name = "pytrace._pytrace.HubClient",
    .basicsize = sizeof(hubclient_obj_t),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = hubclient_slots,
};

/* ---- the auto-hub policy (viewer/hub/autohub.h), for reader.py's auto_hub ---- */

static PyObject *py_start_auto_hub(PyObject *module, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"target", "hub", NULL};
    const char *target, *hub = NULL;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|z:start_auto_hub", kwlist, &target, &hub))
        return NULL;
    char segment[128] = "", sock[PT_HUB_PATH_MAX] = "", err[512] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS /* it waits for the hub to listen */
    rc = pt_autohub_start(target, hub, segment, sizeof segment, sock, sizeof sock, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return pt_oserror(rc, rc == -ENOENT ? "no running job of yours that no one reads" : err[0] ? err : strerror(-rc));
    return Py_BuildValue("(NN)", PyUnicode_DecodeFSDefault(segment), PyUnicode_DecodeFSDefault(sock));
}

static PyMethodDef autohub_methods[] = {
    {"start_auto_hub", (PyCFunction)(void (*)(void))py_start_auto_hub, METH_VARARGS | METH_KEYWORDS,
     "start_auto_hub(target, hub=None) -> (segment, socket path): a running job of yours that no one "
     "reads gets a hub of its own (pytrace-hub --hold 1 --idle-exit 5; hub: its path, None: beside "
     "this program, else on PATH), returned once it listens. OSError ENOENT: no such job (read it "
     "directly); another errno: the hub did not start."},
    {NULL, NULL, 0, NULL},
};

int pt_hubclient_type_add(PyObject *module)
{
    if (PyModule_AddFunctions(module, autohub_methods) < 0)
        return -1;
    return pt_add_type(module, &hubclient_spec);
}
