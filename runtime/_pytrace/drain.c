#include "drain.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pt_tracer.h"
#include "shm/base/grow.h"

/* A burst's buffer past this is not kept between polls. */
#define DRAIN_KEEP_BYTES (8u << 20)

int pt_drain_check_open(const void *handle, int busy, const char *what)
{
    if (handle == NULL) {
        PyErr_Format(PyExc_ValueError, "%s is closed", what);
        return -1;
    }
    return pt_drain_check_idle(busy, what);
}

int pt_drain_check_idle(int busy, const char *what)
{
    if (busy) {
        PyErr_Format(PyExc_RuntimeError, "%s is being polled by another thread", what);
        return -1;
    }
    return 0;
}

/* Raise the error a poll kept (and forget it): -1 with OSError set; 0 if none. */
static int drain_pending(pt_drain_t *d)
{
    if (!d->pending_err)
        return 0;
    int e = d->pending_err;
    d->pending_err = 0;
    pt_oserror(e, d->pending_msg);
    return -1;
}

int pt_drain_begin(pt_drain_t *d, const void *handle, int busy, const char *what)
{
    if (pt_drain_check_open(handle, busy, what) < 0 || drain_pending(d) < 0)
        return -1;
    d->len = d->count = 0;
    return 0;
}

int pt_drain_collect(void *ctx, uint32_t type, const uint8_t *msg, size_t len)
{
    pt_drain_t *d = ctx;
    if (len > UINT32_MAX)
        return -EMSGSIZE;
    size_t need = 8 + ((len + 7) & ~(size_t)7);
    if (pt_grow_size((void **)&d->buf, &d->cap, 1, d->len + need, 1u << 16) < 0)
        return -ENOMEM;
    uint32_t hdr[2] = {type, (uint32_t)len};
    memcpy(d->buf + d->len, hdr, sizeof hdr);
    memcpy(d->buf + d->len + 8, msg, len);
    d->len += need;
    d->count++;
    return 0;
}

PyObject *pt_drain_list(pt_drain_t *d, long rc, const char *error)
{
    const char *why = error && error[0] ? error : (rc < 0 ? strerror((int)-rc) : "");
    if (rc < 0 && d->count == 0)
        return pt_oserror((int)rc, why);
    if (rc < 0) { /* hand out what was drained; raise on the next poll */
        d->pending_err = (int)rc;
        snprintf(d->pending_msg, sizeof d->pending_msg, "%s", why);
    }
    PyObject *list = PyList_New((Py_ssize_t)d->count);
    if (list == NULL)
        return NULL;
    size_t off = 0;
    for (size_t i = 0; i < d->count; i++) {
        uint32_t hdr[2];
        memcpy(hdr, d->buf + off, sizeof hdr);
        PyObject *item = Py_BuildValue("(Iy#)", hdr[0], (const char *)d->buf + off + 8, (Py_ssize_t)hdr[1]);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
        off += 8 + ((hdr[1] + 7u) & ~7u);
    }
    if (d->cap > DRAIN_KEEP_BYTES) { /* do not keep a burst's buffer forever */
        free(d->buf);
        d->buf = NULL;
        d->cap = 0;
    }
    return list;
}

void pt_drain_free(pt_drain_t *d)
{
    free(d->buf);
    d->buf = NULL;
    d->cap = d->len = d->count = 0;
}
