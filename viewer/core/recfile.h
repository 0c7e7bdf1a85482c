/*
 * pt_recfile: read and write pytrace recording files (the reader's message
 * stream on disk). Reading treats the file as untrusted input, message by
 * message, with bounded memory. No Python (runtime/_pytrace/recfile_type.c
 * wraps it for runtime/pytrace/recording.py).
 *
 * The file format (header, padding, compression, the loss slot, the end of a
 * recording, what is damage) is specified once, in docs/stream-format.md ("The
 * recording file"). What this API adds:
 *
 * - Writing: the loss slot is written when asked (pt_recwriter_keep_loss_slot);
 *   an EventChunk of at least PT_RECFILE_COMPRESS_MIN_EVENTS events is stored
 *   as a CompressedChunk when that is smaller.
 * - Reading: pt_recfile_next hands out the EventChunk a CompressedChunk stands
 *   for, never the CompressedChunk; at the clean end of an INCOMPLETE file it
 *   hands out one more ProducerStatus (not in the file): the last untagged
 *   status read, with the slot's unrecorded_* counts (read again).
 * - Damage is sticky: every message before it was handed out, and from then on
 *   pt_recfile_next returns -EBADMSG; pt_recfile_error() says what and where in
 *   one line, pt_recfile_error_offset() is the byte offset of the damage.
 * - Files still being written (follow): a file that ends inside the header or
 *   inside a message is not damaged yet. pt_recfile_next then returns 0 with
 *   pt_recfile_pending() > 0; the caller waits and calls again. Once the caller
 *   knows nothing more will come (the recording ended: pt_recfile_ended, the
 *   writer is gone, or it is not following), pt_recfile_finish turns an
 *   incomplete tail into damage.
 *
 * Threading: a pt_recfile_t is used by one thread at a time.
 * Errors: 0 or a negative errno (-ENOMEM, -EBADMSG, -EINVAL, or what open(2)
 * and pread(2) return).
 */
#ifndef PT_VIEWER_RECFILE_H
#define PT_VIEWER_RECFILE_H

#include <stddef.h>
#include <stdint.h>

#include "schema/pt_fb.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PT_RECFILE_MAGIC "PYTRREC" /* plus its NUL: 8 bytes */
#define PT_RECFILE_HEADER_BYTES 16u
#define PT_RECFILE_FORMAT_MAJOR 2u /* written with compression; 1 without */
#define PT_RECFILE_FORMAT_MINOR 1u /* 1: the loss slot and INCOMPLETE (below) */
#define PT_RECFILE_FORMAT_MAJOR_PLAIN 1u
#define PT_RECFILE_COMPRESS_MIN_EVENTS 16u
#define PT_RECFILE_DEFAULT_LEVEL 1
#define PT_RECFILE_FLAG_LOSSLESS 0x1u
#define PT_RECFILE_FLAG_FINISHED 0x2u
#define PT_RECFILE_FLAG_INCOMPLETE 0x4u
/* Largest size prefix accepted: a ring chunk is at most PT_MAX_CHUNK_BYTES
 * (16 MiB); anything far bigger is a damaged prefix (same bound as recording.py). */
#define PT_RECFILE_MAX_MESSAGE_BYTES (64u << 20)

typedef struct pt_recfile pt_recfile_t;

/* Open a recording for reading. Nothing is read yet (a bad header shows up as
 * damage from the first pt_recfile_next). Fails only if the file cannot be
 * opened (-errno, with a one-line message in err). */
int pt_recfile_open(const char *path, pt_recfile_t **out, char *err, size_t errlen);
void pt_recfile_close(pt_recfile_t *rf);

/* Read the next message.
 *   1        a verified message: *msg, *len: the size-prefixed FlatBuffer
 *            without padding (8-aligned, valid until the next call on rf),
 *            *decoded (may be NULL) its pt_fb_parse result (pointers into *msg)
 *   0        no complete message now: clean end of what is written
 *            (pt_recfile_pending() == 0) or an incomplete tail (> 0)
 *   -EBADMSG damage (sticky), see pt_recfile_error
 *   -errno   I/O error; may be retried */
int pt_recfile_next(pt_recfile_t *rf, const uint8_t **msg, size_t *len, pt_fb_msg_t *decoded);

/* Bytes after the last message handed out that do not yet form a complete
 * header or message (0 at a clean boundary). */
uint64_t pt_recfile_pending(const pt_recfile_t *rf);

/* Nothing more will be written: an incomplete tail becomes damage. Returns 0
 * (clean end; reading may still go on if the file grows after all) or
 * -EBADMSG. */
int pt_recfile_finish(pt_recfile_t *rf);

/* 1 once an untagged ProducerStatus with state Exited or Dead was read, or the header's
 * FINISHED flag is set (re-read from the file on each call). */
int pt_recfile_ended(pt_recfile_t *rf);

/* 1 if the header says INCOMPLETE (re-read): *out (may be NULL) is then the
 * last untagged status read with the slot's unrecorded_* counts (0 if there is
 * no slot); 0 otherwise. */
int pt_recfile_unrecorded(pt_recfile_t *rf, pt_fb_producer_status_t *out);

/* enum pt_producer_state of the last ProducerStatus read (0 if none). */
uint32_t pt_recfile_last_state(const pt_recfile_t *rf);

/* Header fields (valid once the header was read; pt_recfile_header_read). */
int pt_recfile_header_read(const pt_recfile_t *rf);
uint32_t pt_recfile_flags(const pt_recfile_t *rf);
uint16_t pt_recfile_format_minor(const pt_recfile_t *rf);

/* File offset of the next message (= bytes consumed so far). */
uint64_t pt_recfile_offset(const pt_recfile_t *rf);
/* Size of the file now (fstat), or 0 if it cannot be known. */
uint64_t pt_recfile_file_size(const pt_recfile_t *rf);
/* Messages and events (EventChunk lengths) handed out so far. */
uint64_t pt_recfile_messages(const pt_recfile_t *rf);
uint64_t pt_recfile_events(const pt_recfile_t *rf);

/* The damage or last I/O error as one line ("" if none), and the damage's
 * byte offset (-1 if none). pt_recfile_error_reason is the line without its
 * "damaged at byte offset N: " part. */
const char *pt_recfile_error(const pt_recfile_t *rf);
const char *pt_recfile_error_reason(const pt_recfile_t *rf);
int64_t pt_recfile_error_offset(const pt_recfile_t *rf);
/* Format major of the file (0 before the header was read). */
uint16_t pt_recfile_format_major(const pt_recfile_t *rf);
/* CompressedChunk messages read, and the bytes they took in the file. */
uint64_t pt_recfile_compressed_chunks(const pt_recfile_t *rf);

/* ---- writing ------------------------------------------------------------
 *
 * pt_recwriter appends verified messages to a recording through its own buffer,
 * so that a write that fails part way (a full disk) is undone: flush then cuts
 * the file back to the last whole message (`committed` bytes), drops the
 * buffer (its messages are not in the file, the counters go back to what the
 * file holds) and returns the error; the file stays a readable recording.
 * After that failure the writer writes nothing more: append counts what it is
 * given (stats unrecorded_*) and returns 0, flush and close rewrite the loss slot
 * (see the top of this file) and return 0; close still sets FINISHED.
 * The writer writes to an fd it does not own (the caller creates the file,
 * opens it and closes it after pt_recwriter_close). One thread at a time.
 */
typedef struct pt_recwriter pt_recwriter_t;

typedef struct pt_recwriter_stats {
    uint64_t bytes_written;  /* header + messages appended (committed + buffered) */
    uint64_t committed;      /* bytes on file, all whole messages */
    uint64_t plain_bytes;    /* what bytes_written would be without compression */
    uint64_t messages, events;
    uint64_t lost_events;    /* sum of the producer's Lost records */
    uint64_t compressed_chunks;
    /* after a failed write (flush returned -errno once): nothing more is written */
    uint64_t unrecorded_events, unrecorded_messages; /* given and not in the file */
    uint32_t write_errno;    /* that write's errno; 0: none */
} pt_recwriter_stats_t;

/* Start a recording on fd (at offset 0, empty). compress: 1 = format 2.0 with
 * EventChunks compressed at zstd level `level`; 0 = format 1.0, every message
 * as given. The header is buffered: pt_recwriter_flush writes it. */
int pt_recwriter_open(int fd, uint32_t flags, int compress, int level, size_t buffer_bytes,
                      pt_recwriter_t **out);
/* Append one size-prefixed message of exactly len bytes as the reader hands
 * them out (types 1..7). -EINVAL: not a verifiable message (why says so, one
 * line). When the buffer reaches buffer_bytes it is flushed: the flush's error. */
int pt_recwriter_append(pt_recwriter_t *w, const uint8_t *msg, size_t len, char *why, size_t whylen);
/* Put the loss slot (top of this file) after the first untagged ProcessInfo
 * appended from now on: a writer of a live stream (pytrace record) calls it, so
 * that a full disk leaves its count in the file. Without it the file holds
 * exactly the messages appended (a failed write then sets INCOMPLETE only). */
void pt_recwriter_keep_loss_slot(pt_recwriter_t *w);
/* Write the buffer; 0 or -errno (the file is cut back, see above). */
int pt_recwriter_flush(pt_recwriter_t *w);
/* Replace the header flags (in the file if the header is written). */
int pt_recwriter_set_flags(pt_recwriter_t *w, uint32_t flags);
uint32_t pt_recwriter_flags(const pt_recwriter_t *w);
void pt_recwriter_stats(const pt_recwriter_t *w, pt_recwriter_stats_t *out);
/* Flush and, if finished and the header is on file, set FINISHED. The writer
 * stays valid (stats) until pt_recwriter_free. 0 or -errno. */
int pt_recwriter_close(pt_recwriter_t *w, int finished);
void pt_recwriter_free(pt_recwriter_t *w);

/* ---- merge --------------------------------------------------------------
 *
 * pt_recfile_merge writes to out_fd (at offset 0, empty) one recording of
 * every process of the n input recordings (the ranks of one job recorded on
 * several machines): each input's processes get new Message.process numbers
 * 1, 2, ... in input order (an untagged input is one process), and the
 * messages are copied in input order, re-tagged (pt_fb_tag; the same bytes
 * otherwise, so event chunks are compressed again). Time alignment (walk.h,
 * THE TIME AXIS): every process of input i has its base_monotonic_ns moved by
 * shift_i = (realtime - monotonic of input i's first ProcessInfo) - (the same
 * of the input whose wall-clock base is earliest), so base_realtime_ns -
 * base_monotonic_ns is one value for the whole file and the processes are
 * placed by their wall clocks. An input without a wall-clock base
 * (base_realtime_ns 0) is not moved. Ticks, and so every duration, are
 * unchanged. The output is format 2.0, lossless if every input is, FINISHED.
 *
 * res (n entries) says per input what was taken; damage in an input is not an
 * error of the call: what was before it is merged (res[i].damaged). Errors: 0,
 * -ENOMEM, an input that cannot be opened or read (-errno, err says which), a
 * write error of the output (-errno; the output is cut back to whole messages).
 */
typedef struct pt_recmerge_input {
    uint32_t processes;        /* its ProcessInfo messages (processes) */
    uint64_t messages, events; /* copied */
    uint64_t orphans;          /* messages of a process without a ProcessInfo before them: left out */
    uint64_t clamped;          /* ProcessInfo whose moved base would be below 0 (set to 0) */
    int have_realtime;         /* its first ProcessInfo has a wall-clock base */
    uint64_t realtime_ns;      /* that base */
    int64_t clock_diff_ns;     /* base_realtime_ns - base_monotonic_ns of it */
    int64_t shift_ns;          /* added to its processes' base_monotonic_ns */
    int damaged;
    int64_t error_offset;
    char error[512];
} pt_recmerge_input_t;

int pt_recfile_merge(const char *const *inputs, size_t n, int out_fd, pt_recmerge_input_t *res,
                     pt_recwriter_stats_t *out_stats, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* PT_VIEWER_RECFILE_H */
