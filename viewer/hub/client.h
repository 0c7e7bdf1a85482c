/*
 * pt_hub_client: read a job's message stream from its hub (pytrace-hub).
 *
 * The same messages, in the same callback shape, as pt_reader_poll (shm/reader.h):
 * size-prefixed FlatBuffers with root Message, each verified by the caller as
 * usual. The hub is another process of the same user (checked with
 * SO_PEERCRED) but its bytes are still input: the client bounds every size
 * prefix (PT_HUB_MAX_MESSAGE) and checks the welcome's magic and version.
 *
 * The client keeps the pt_reader_stats view of the stream (events read,
 * producer counters from ProducerStatus, threads from ThreadStart/End), so a
 * tool shows the same figures whether it reads a segment or a hub.
 *
 * Errors: 0 or negative errno, one line in pt_hub_client_error():
 *   -ENOENT     no hub serves that segment (no socket)
 *   -ECONNREFUSED  a socket is there but no hub listens (a stale one)
 *   -EACCES     the hub refused us (another uid), or we refused it
 *   -EPROTO     not a hub, or another protocol major
 *   -ECONNRESET disconnected: the hub closed the stream before the job's end
 *               (it was stopped, or it could not keep this reader); NOT the
 *               job's death: pt_hub_client_disconnected() is 1 and the job's
 *               state stays the last one the stream said
 *   -EUSERS     the hub serves its most readers at once (--max-readers)
 *   -EBADMSG    a size prefix out of bounds (the stream cannot go on)
 * Threading: one thread at a time per client.
 */
#ifndef PT_HUB_CLIENT_H
#define PT_HUB_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "shm/reader.h"
#include "viewer/hub/proto.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pt_hub_client pt_hub_client_t;

#define PT_HUB_CLIENT_LOSSLESS 0x1u  /* ask for lossless (a recorder of a Wait-policy job) */
#define PT_HUB_CLIENT_ANY_USER 0x2u  /* accept a target segment of another uid (the hub itself
                                        must still be ours) */

/* Find the hub holding `target` (a pid or a segment name, as pt_reader_attach
 * takes it): its socket path and pid. 0, -ENOENT (no such segment, or it is
 * not held by a live reader), -ENXIO (held by pid N, which serves no socket:
 * a plain reader, not a hub). */
int pt_hub_client_find(const char *target, unsigned flags, char *sock, size_t cap, uint64_t *hub_pid,
                       char *err, size_t errlen);

/* Connect to the hub at socket path `sock` (expect_pid: the peer must be that
 * pid; 0 = any of our uid), say hello, read the welcome. */
int pt_hub_client_open(const char *sock, uint64_t expect_pid, unsigned flags, uint32_t queue_kib,
                       pt_hub_client_t **out, char *err, size_t errlen);

/* pt_hub_client_find + pt_hub_client_open. */
int pt_hub_client_connect(const char *target, unsigned flags, pt_hub_client_t **out, char *err, size_t errlen);

/* Hand out the messages that have arrived (waiting at most timeout_ms for
 * the first bytes; 0 = do not wait), at most about max_events events (0 = no
 * limit). Returns events handed out (>= 0) or a negative errno; a callback's
 * non-zero value stops the poll and is returned. After the hub closed the
 * stream at the job's end it returns 0 and pt_hub_client_finished() is 1. */
long pt_hub_client_poll(pt_hub_client_t *c, pt_reader_msg_fn fn, void *ctx, uint64_t max_events, int timeout_ms);

int pt_hub_client_finished(const pt_hub_client_t *c);
/* 1 once the hub closed the stream before the job's end (see -ECONNRESET). */
int pt_hub_client_disconnected(const pt_hub_client_t *c);
void pt_hub_client_stats(const pt_hub_client_t *c, pt_reader_stats_t *out);
/* Events this reader missed because its queue in the hub overflowed (the sum
 * of the synthetic Lost records it was sent); not in events_read, not in the
 * producer's drops. events_read + missed + the producer's drops after the
 * reader joined account for every event. */
uint64_t pt_hub_client_missed(const pt_hub_client_t *c);
const pt_hub_welcome_t *pt_hub_client_welcome(const pt_hub_client_t *c);
const char *pt_hub_client_error(const pt_hub_client_t *c);
const char *pt_hub_client_segment(const pt_hub_client_t *c); /* from the first ProcessInfo ("" before) */
int pt_hub_client_fd(const pt_hub_client_t *c);
void pt_hub_client_close(pt_hub_client_t *c);

#ifdef __cplusplus
}
#endif

#endif /* PT_HUB_CLIENT_H */
