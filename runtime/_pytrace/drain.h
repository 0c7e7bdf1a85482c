/*
 * The poll of _pytrace.Reader and _pytrace.HubClient: one drain for both.
 *
 * A reader (shm/reader.h) or hub client (viewer/hub/client.h) hands its
 * messages to pt_drain_collect while the GIL is released; pt_drain_list then
 * builds the list of (type, bytes) with the GIL held. An error that follows
 * some messages does not lose them: they are handed out, and the error is
 * kept and raised by the next poll (pt_drain_begin) before anything else.
 */
#ifndef PT_RUNTIME_DRAIN_H
#define PT_RUNTIME_DRAIN_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#include <stdint.h>

typedef struct pt_drain {
    uint8_t *buf;          /* drained messages: [u32 type][u32 len][bytes, 8-aligned] */
    size_t len, cap, count;
    int pending_err;       /* negative errno to raise on the next poll */
    char pending_msg[256];
} pt_drain_t;

/* A poller's object may be used: its handle (reader, client) is open (else
 * ValueError "<what> is closed") and no poll of another thread drains it now
 * (else RuntimeError). 0, or -1 with the exception set. check_idle: the second
 * half alone (close()). */
int pt_drain_check_open(const void *handle, int busy, const char *what);
int pt_drain_check_idle(int busy, const char *what);

/* Before a poll (GIL held): pt_drain_check_open, then the error the last poll
 * kept, raised (and forgotten), if any; then an empty buffer. 0, or -1 with
 * the exception set. */
int pt_drain_begin(pt_drain_t *d, const void *handle, int busy, const char *what);

/* The pt_reader_msg_fn both pollers call, ctx a pt_drain_t (no GIL needed):
 * 0, or -ENOMEM / -EMSGSIZE. */
int pt_drain_collect(void *ctx, uint32_t type, const uint8_t *msg, size_t len);

/* After the poll returned rc (error: the poller's last error line, may be
 * NULL or ""): with nothing drained, rc < 0 raises OSError; with messages,
 * rc < 0 is kept for the next poll. Returns the new list, or NULL with an
 * exception. A burst's large buffer is freed. */
PyObject *pt_drain_list(pt_drain_t *d, long rc, const char *error);

void pt_drain_free(pt_drain_t *d);

#endif /* PT_RUNTIME_DRAIN_H */
