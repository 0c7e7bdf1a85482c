/*
 * pt_fb: the small FlatBuffers builder and verifying parser for
 * schema/pytrace.fbs (no C FlatBuffers library is packaged for our machines).
 *
 * Builders write one complete size-prefixed Message (identifier "PYTR") into a
 * caller buffer and return its length in bytes, or 0 if `cap` is too small.
 * Output is little-endian, aligned from the first byte of the size prefix the
 * way the stock verifier checks it, and byte-for-byte tested against what
 * flatc-generated code reads (tests/unit/schema).
 *
 * pt_fb_parse verifies one size-prefixed Message as untrusted input (every
 * offset, vtable, string and vector bounds-checked, strings NUL-terminated in
 * the buffer as FlatBuffers requires) and decodes it into pt_fb_msg_t, whose
 * pointers point into the buffer. Returns 0 or -EBADMSG (with a reason).
 */
#ifndef PT_SCHEMA_FB_H
#define PT_SCHEMA_FB_H

#include <stddef.h>
#include <stdint.h>

#include "pt_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pt_fb_str { const char *ptr; uint32_t len; } pt_fb_str_t; /* ptr NULL = absent */

typedef struct pt_fb_process_info {
    uint64_t pid, ppid;
    pt_fb_str_t command_line, python_version, segment;
    uint16_t abi_major, abi_minor;
    uint8_t clock;
    uint64_t ticks_per_second, base_ticks, base_monotonic_ns, base_realtime_ns;
    uint32_t ring_count;
    uint64_t ring_capacity_events;
    uint8_t drop_policy;
    pt_fb_str_t role; /* ptr NULL: absent (the message is then byte for byte the 15-field
                         ProcessInfo of streams made before the field) */
} pt_fb_process_info_t;

typedef struct pt_fb_thread_start {
    uint64_t thread; uint32_t ring; uint64_t os_tid; pt_fb_str_t name; uint64_t ticks;
} pt_fb_thread_start_t;

typedef struct pt_fb_thread_end {
    uint64_t thread, ticks, events_written, events_dropped;
} pt_fb_thread_end_t;

typedef struct pt_fb_symbol {
    uint32_t id; uint8_t kind; pt_fb_str_t name, file; uint32_t line;
    pt_fb_str_t profile_name; /* ptr NULL: absent (the message is then byte for byte the
                                 5-field Symbol of recordings made before the field) */
} pt_fb_symbol_t;

typedef struct pt_fb_event_chunk {
    uint64_t thread, first_event;
    const pt_event_t *events; /* points into the buffer (8-aligned if the buffer is) */
    uint32_t count;
} pt_fb_event_chunk_t;

typedef struct pt_fb_lost_count { uint64_t thread, dropped_total; } pt_fb_lost_count_t;

typedef struct pt_fb_producer_status {
    uint8_t state; uint64_t heartbeat_ns, events_written, events_dropped, hook_errors, symbols_dropped,
        threads_untraced, tracing_displaced, events_untraced;
    /* recording files only (schema: unrecorded_*); has_unrecorded: the fields are in
     * the message (built with them, or parsed from a message that has them) */
    uint8_t has_unrecorded;
    uint64_t unrecorded_events, unrecorded_messages;
    uint32_t unrecorded_errno;
    /* the signal that ended an Exited process (0: none) and who sent it; built only
     * when end_signal is not 0 */
    uint32_t end_signal;
    uint64_t end_signal_pid;
} pt_fb_producer_status_t;

/* CompressedChunk (recording files only): data decompresses, by codec, to the
 * events of the EventChunk {thread, first_event, count events} it stands for. */
typedef struct pt_fb_compressed_chunk {
    uint64_t thread, first_event;
    uint32_t count;
    uint8_t codec;       /* PT_CODEC_* (pt_wire.h) */
    uint32_t raw_bytes;
    const uint8_t *data; /* points into the buffer; NULL if absent */
    uint32_t data_len;
} pt_fb_compressed_chunk_t;

typedef struct pt_fb_msg {
    uint32_t type;    /* enum pt_msg_type */
    uint32_t process; /* Message.process: 0 = untagged (the stream's first process) */
    union {
        pt_fb_process_info_t process_info;
        pt_fb_thread_start_t thread_start;
        pt_fb_thread_end_t thread_end;
        pt_fb_symbol_t symbol;
        pt_fb_event_chunk_t event_chunk;
        pt_fb_lost_count_t lost_count;
        pt_fb_producer_status_t producer_status;
        pt_fb_compressed_chunk_t compressed_chunk;
    } u;
} pt_fb_msg_t;

size_t pt_fb_build_process_info(uint8_t *out, size_t cap, const pt_fb_process_info_t *in);
size_t pt_fb_build_thread_start(uint8_t *out, size_t cap, const pt_fb_thread_start_t *in);
size_t pt_fb_build_thread_end(uint8_t *out, size_t cap, const pt_fb_thread_end_t *in);
size_t pt_fb_build_symbol(uint8_t *out, size_t cap, const pt_fb_symbol_t *in);
size_t pt_fb_build_lost_count(uint8_t *out, size_t cap, const pt_fb_lost_count_t *in);
size_t pt_fb_build_producer_status(uint8_t *out, size_t cap, const pt_fb_producer_status_t *in);
/* The data vector is copied from in->data (in->data_len bytes). */
size_t pt_fb_build_compressed_chunk(uint8_t *out, size_t cap, const pt_fb_compressed_chunk_t *in);

/* EventChunk: write the fixed 72-byte header (pt_wire.h, PT_CHUNK_*) for n
 * events that the caller places at out + PT_CHUNK_OFF_EVENTS. total size is
 * 72 + 16n; the size prefix is set to that minus 4. Used both to initialise a
 * ring chunk (with size prefix = chunk_bytes - 4: pass n_for_prefix) and to
 * frame a reader's copy. */
void pt_fb_chunk_header(uint8_t out[PT_CHUNK_HEADER_BYTES], uint64_t thread, uint64_t first_event,
                        uint32_t count, uint32_t size_prefix);
size_t pt_fb_build_event_chunk(uint8_t *out, size_t cap, uint64_t thread, uint64_t first_event,
                               const pt_event_t *events, uint32_t count);

/* Message.process (pt_wire.h, "Tagged messages"): write into out the message
 * `msg` (len bytes, as one of the builders above wrote it: untagged, header
 * bytes 0..31 as they write them) tagged with process, or untagged again for
 * process 0. Returns the new length (len + 8 tagged, len untagged), or 0 if
 * msg is not a builder's untagged message or cap is too small. out and msg
 * may be the same buffer (cap >= len + 8). Any message from elsewhere goes
 * through pt_fb_parse and pt_fb_build first. */
size_t pt_fb_tag(uint8_t *out, size_t cap, const uint8_t *msg, size_t len, uint32_t process);

/* Build the message `m` describes (as pt_fb_parse fills it; pointers may point
 * into the parsed buffer) with the builders above, tagged with m->process.
 * Returns its length, or 0 if cap is too small. */
size_t pt_fb_build(uint8_t *out, size_t cap, const pt_fb_msg_t *m);

/* Verify and decode one size-prefixed Message of exactly `len` bytes.
 * `why` (may be NULL) receives a short reason on failure. */
int pt_fb_parse(const uint8_t *buf, size_t len, pt_fb_msg_t *out, char *why, size_t whylen);

/* Length of the size-prefixed message at buf (prefix + 4), or 0 if len < 4. */
size_t pt_fb_message_size(const uint8_t *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* PT_SCHEMA_FB_H */
