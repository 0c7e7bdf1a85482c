/*
 * libpytrace reader: attach to a live segment, drain it, hand out messages.
 *
 * Every message handed out is a size-prefixed FlatBuffer with root Message and
 * identifier "PYTR" (schema/pytrace.fbs) that the stock verifier accepts.
 * Order guarantees:
 *   - the first message after attach is ProcessInfo;
 *   - a thread's ThreadStart comes before its first EventChunk, its ThreadEnd
 *     after its last;
 *   - every symbol id used by an EventChunk was handed out in a Symbol message
 *     earlier in the stream (the reader snapshots the ring extents, then reads
 *     the symbol log up to its published watermark, emits the new symbols, then
 *     the events);
 *   - within one thread, events come in the order they were written, with no
 *     gap that is not announced by a Lost record (the producer's) or a
 *     LostCount message (the reader's view of the drop counter).
 *   - ProducerStatus is emitted when the producer state changes (EXITED last).
 *
 * The segment is untrusted: geometry, offsets, lengths, kinds and symbol ids are
 * all checked. A fault in one ring stops that ring (reported via the error
 * string and counters) and never crashes the reader.
 *
 * Streams and takeover: each attach starts a self-contained stream
 * (ProcessInfo, every Symbol from the start of the log, ThreadStart for every
 * live thread). Records continue exactly where the previous reader of the
 * segment stopped (the cursor lives in the slot): none repeated, none skipped,
 * except that a reader killed inside its callback lets the next reader hand
 * out that one message again (same EventChunk.first_event, so it can be
 * recognised).
 *
 * Symbol ids in records: 0 means "unknown" (the log was full) and is
 * accepted; any other id must already be in the log. Lost records carry a
 * count in id and are not checked against the log.
 *
 * Errors: 0 or negative errno as in segment.h, plus
 *   -EPIPE    the producer died (pid gone without EXITED); everything it
 *             published has been handed out before this is returned
 *   -EBADMSG  corrupt content (the error string says where); returned by the
 *             poll that found it, the faulty ring (or the symbol log) is then
 *             skipped and later polls go on with the rest
 *   -EPERM    pt_reader_poll on a reader attached with PT_READER_NO_LOCK
 */
#ifndef PT_SHM_READER_H
#define PT_SHM_READER_H

#include <stddef.h>
#include <stdint.h>

#include "segment.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pt_reader pt_reader_t;

/* Called once per message; msg is valid only during the call. type is the
 * MessageBody type (enum pt_msg_type). A non-zero return stops the poll and is
 * returned by pt_reader_poll. */
typedef int (*pt_reader_msg_fn)(void *ctx, uint32_t type, const uint8_t *msg, size_t len);

#define PT_READER_NO_LOCK 0x100u /* inspect only: do not take the consumer lock,
                                    do not drain (for `ls`-like tools) */

#define PT_READER_DEFER_RELEASE 0x200u /* the ring cursors advance only in pt_reader_release:
                                          a recorder releases what it has written, so a
                                          recorder killed before that leaves it to the next */

/* Attach by name or pid (see pt_segment_attach), validate, take the consumer
 * lock. flags: PT_ATTACH_ANY_USER, PT_READER_NO_LOCK, PT_READER_DEFER_RELEASE. */
int pt_reader_attach(const char *target, unsigned flags, pt_reader_t **out, char *err, size_t errlen);

/* Drain everything published so far (at most max_events events, 0 = no limit)
 * and hand it out. Returns the number of events handed out (>= 0), or a
 * negative errno. After the producer has EXITED and every ring is drained, it
 * returns 0 and pt_reader_finished() becomes 1. */
long pt_reader_poll(pt_reader_t *reader, pt_reader_msg_fn fn, void *ctx, uint64_t max_events);

/* 1 once the producer exited (or died) and everything it published was read. */
int pt_reader_finished(const pt_reader_t *reader);

typedef struct pt_reader_stats {
    uint64_t events_read;
    uint64_t chunks_read;
    uint64_t messages;
    uint64_t symbols_read;
    uint64_t threads_seen;
    uint64_t threads_active;
    uint64_t producer_events_written; /* sum over rings, as published, and of reused rings' earlier owners */
    uint64_t producer_events_dropped; /* likewise */
    uint64_t hook_errors;
    uint64_t symbols_dropped;
    uint64_t threads_untraced;
    uint64_t tracing_displaced;
    uint64_t events_untraced;
    uint64_t unrecorded_events;       /* a recording's writer could not write them (files only) */
    uint32_t producer_state;          /* enum pt_producer_state, DEAD if the pid is gone */
    uint32_t corrupt_rings;
    uint64_t pid;
} pt_reader_stats_t;

void pt_reader_stats(const pt_reader_t *reader, pt_reader_stats_t *out);

/* With PT_READER_DEFER_RELEASE: everything handed out so far is kept by the
 * caller (written to its file); advance the shared cursors past it, freeing
 * chunks for the producer and the slots of ended threads. Until then a reader
 * that takes over after this one died reads it again (so nothing read but not
 * kept is lost; what was kept may come twice, with the same first_event).
 * 0, or -EFAULT when the segment shrank. Without the flag: a no-op. */
int pt_reader_release(pt_reader_t *reader);

/* The last error as one line ("" if none). */
const char *pt_reader_error(const pt_reader_t *reader);

/* The segment (for tools that need the header). */
pt_segment_t *pt_reader_segment(const pt_reader_t *reader);

/* Release the consumer lock, unmap, free. If the producer is gone and the
 * reader drained everything, unlink_if_finished = 1 removes the segment. */
void pt_reader_detach(pt_reader_t *reader, int unlink_if_finished);

#ifdef __cplusplus
}
#endif

#endif /* PT_SHM_READER_H */
