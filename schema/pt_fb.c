/*
 * pt_fb: hand-written FlatBuffers builder and verifying parser for
 * schema/pytrace.fbs (see pt_fb.h for the contract).
 *
 * Every message is laid out front to back, the same way the ring chunk header
 * is (pt_wire.h), so all offsets point forward except the table->vtable
 * soffsets (vtables precede their tables):
 *
 *    0  u32 size prefix (= total - 4)
 *    4  u32 root uoffset = 16           -> Message table at 20
 *    8  "PYTR"
 *   12  Message vtable {8, 12, 4, 8}
 *   20  Message table: soffset 8, body_type u8 at +4, body uoffset at +8
 *   32  body vtable (4 + 2 * field count bytes; every field of the table has
 *       an entry; strings given as NULL get 0 = absent)
 *   T   body table, T = 4 mod 8 so that T + 4 is 8-aligned: soffset, then the
 *       8-byte fields, then 4-byte fields and string/vector offsets, then
 *       2-byte, then 1-byte fields (each naturally aligned from byte 0)
 *   ..  strings (u32 length, bytes, NUL), 4-aligned
 *   ..  zero padding up to a multiple of 8, so messages written back to back
 *       (a stream, the symbol log) keep every message 8-aligned.
 *
 * Scalars that equal their default are still written (fixed layouts are easy
 * to check byte for byte); the parser accepts absent fields as default 0, as
 * any FlatBuffers reader must.
 *
 * The parser treats the input as hostile: it never reads outside [buf, buf+len),
 * checks alignment counted from byte 0 like the stock verifier, requires the
 * size prefix to equal len - 4, the identifier "PYTR", a known union type with
 * a body, NUL-terminated strings and in-bounds vectors. It is stricter than the
 * stock verifier in two places: a field must lie inside its table's declared
 * size, and the Event vector's elements must be 8-aligned.
 */
#include "schema/pt_fb.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- little-endian scalar helpers ------------------------------------- */

static inline void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void wr64(uint8_t *p, uint64_t v)
{
    wr32(p, (uint32_t)v);
    wr32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

/* FlatBuffers buffers are limited to 2 GiB (offsets are checked as signed). */
#define FB_MAX_BUFFER 0x7fffffffu

/* ---- builder ----------------------------------------------------------- */

enum fb_kind { FB_U8 = 1, FB_U16 = 2, FB_U32 = 4, FB_U64 = 8, FB_STR = 16, FB_BYTES = 32 };

typedef struct fb_field {
    uint8_t kind;      /* enum fb_kind */
    uint64_t value;    /* scalars */
    pt_fb_str_t str;   /* FB_STR, FB_BYTES ([ubyte], no NUL); ptr NULL = absent */
} fb_field_t;

#define FB_MAX_FIELDS 16

static size_t align_up(size_t v, size_t a) { return (v + a - 1) & ~(a - 1); }

/* Lay out and (if it fits) write Message{body_type: fields}. */
static size_t build_message(uint8_t *out, size_t cap, uint8_t body_type, const fb_field_t *f,
                            unsigned nf)
{
    size_t field_pos[FB_MAX_FIELDS] = {0};
    size_t str_pos[FB_MAX_FIELDS] = {0};
    static const uint8_t size_order[] = {8, 4, 2, 1};

    if (nf > FB_MAX_FIELDS)
        return 0;
    const size_t vt = 32;
    const size_t vsize = 4 + 2 * (size_t)nf;
    size_t table = vt + vsize;
    while (table % 8 != 4)
        table++;
    size_t pos = table + 4;
    for (unsigned s = 0; s < sizeof size_order; s++) {
        for (unsigned i = 0; i < nf; i++) {
            const int ref = f[i].kind == FB_STR || f[i].kind == FB_BYTES;
            unsigned sz = ref ? 4u : f[i].kind;
            if (sz != size_order[s] || (ref && !f[i].str.ptr))
                continue;
            field_pos[i] = pos; /* pos is aligned: sizes descend from an 8-aligned start */
            pos += sz;
        }
    }
    const size_t table_end = pos;
    for (unsigned i = 0; i < nf; i++) {
        if ((f[i].kind != FB_STR && f[i].kind != FB_BYTES) || !f[i].str.ptr)
            continue;
        pos = align_up(pos, 4);
        str_pos[i] = pos;
        pos += 4 + (size_t)f[i].str.len + (f[i].kind == FB_STR);
        if (pos > FB_MAX_BUFFER)
            return 0;
    }
    const size_t total = align_up(pos, 8);
    if (total > FB_MAX_BUFFER || !out || total > cap)
        return 0;

    memset(out, 0, total);
    wr32(out + 0, (uint32_t)(total - 4));
    wr32(out + 4, 16);
    memcpy(out + 8, PT_FILE_IDENTIFIER, 4);
    wr16(out + 12, 8);
    wr16(out + 14, 12);
    wr16(out + 16, 4);
    wr16(out + 18, 8);
    wr32(out + 20, 8);
    out[24] = body_type;
    wr32(out + 28, (uint32_t)(table - 28));

    wr16(out + vt, (uint16_t)vsize);
    wr16(out + vt + 2, (uint16_t)(table_end - table));
    wr32(out + table, (uint32_t)(table - vt));
    for (unsigned i = 0; i < nf; i++) {
        if (!field_pos[i])
            continue;
        wr16(out + vt + 4 + 2 * i, (uint16_t)(field_pos[i] - table));
        uint8_t *p = out + field_pos[i];
        switch (f[i].kind) {
        case FB_U8: p[0] = (uint8_t)f[i].value; break;
        case FB_U16: wr16(p, (uint16_t)f[i].value); break;
        case FB_U32: wr32(p, (uint32_t)f[i].value); break;
        case FB_U64: wr64(p, f[i].value); break;
        case FB_STR:
        case FB_BYTES:
            wr32(p, (uint32_t)(str_pos[i] - field_pos[i]));
            wr32(out + str_pos[i], f[i].str.len);
            if (f[i].str.len)
                memcpy(out + str_pos[i] + 4, f[i].str.ptr, f[i].str.len);
            /* NUL already there from memset */
            break;
        default: break;
        }
    }
    return total;
}

#define U8(v) {FB_U8, (v), {NULL, 0}}
#define U16(v) {FB_U16, (v), {NULL, 0}}
#define U32(v) {FB_U32, (v), {NULL, 0}}
#define U64(v) {FB_U64, (v), {NULL, 0}}
#define STR(s) {FB_STR, 0, (s)}
#define BYTES(p, n) {FB_BYTES, 0, {(const char *)(p), (n)}}

size_t pt_fb_build_process_info(uint8_t *out, size_t cap, const pt_fb_process_info_t *in)
{
    const fb_field_t f[] = {
        U64(in->pid), U64(in->ppid), STR(in->command_line), STR(in->python_version),
        STR(in->segment), U16(in->abi_major), U16(in->abi_minor), U8(in->clock),
        U64(in->ticks_per_second), U64(in->base_ticks), U64(in->base_monotonic_ns),
        U64(in->base_realtime_ns), U32(in->ring_count), U64(in->ring_capacity_events),
        U8(in->drop_policy), STR(in->role),
    };
    /* without a role the vtable stops at drop_policy: the bytes of before the field */
    unsigned nf = in->role.ptr ? 16u : 15u;
    return build_message(out, cap, PT_MSG_PROCESS_INFO, f, nf);
}

size_t pt_fb_build_thread_start(uint8_t *out, size_t cap, const pt_fb_thread_start_t *in)
{
    const fb_field_t f[] = {U64(in->thread), U32(in->ring), U64(in->os_tid), STR(in->name),
                            U64(in->ticks)};
    return build_message(out, cap, PT_MSG_THREAD_START, f, sizeof f / sizeof f[0]);
}

size_t pt_fb_build_thread_end(uint8_t *out, size_t cap, const pt_fb_thread_end_t *in)
{
    const fb_field_t f[] = {U64(in->thread), U64(in->ticks), U64(in->events_written),
                            U64(in->events_dropped)};
    return build_message(out, cap, PT_MSG_THREAD_END, f, sizeof f / sizeof f[0]);
}

size_t pt_fb_build_symbol(uint8_t *out, size_t cap, const pt_fb_symbol_t *in)
{
    const fb_field_t f[] = {U32(in->id), U8(in->kind), STR(in->name), STR(in->file),
                            U32(in->line), STR(in->profile_name)};
    /* Without a profile name the vtable stops at `line`, as a flatc builder trims
     * trailing absent fields: the same bytes as before the field existed. */
    unsigned nf = in->profile_name.ptr ? 6u : 5u;
    return build_message(out, cap, PT_MSG_SYMBOL, f, nf);
}

size_t pt_fb_build_lost_count(uint8_t *out, size_t cap, const pt_fb_lost_count_t *in)
{
    const fb_field_t f[] = {U64(in->thread), U64(in->dropped_total)};
    return build_message(out, cap, PT_MSG_LOST_COUNT, f, sizeof f / sizeof f[0]);
}

size_t pt_fb_build_producer_status(uint8_t *out, size_t cap, const pt_fb_producer_status_t *in)
{
    const fb_field_t f[] = {U8(in->state), U64(in->heartbeat_ns), U64(in->events_written),
                            U64(in->events_dropped), U64(in->hook_errors),
                            U64(in->symbols_dropped), U64(in->threads_untraced),
                            U64(in->tracing_displaced), U64(in->events_untraced),
                            U64(in->unrecorded_events), U64(in->unrecorded_messages),
                            U32(in->unrecorded_errno), U32(in->end_signal), U64(in->end_signal_pid)};
    /* Without has_unrecorded the vtable stops at events_untraced: the bytes every
     * reader and hub wrote before the fields existed. With it, every field is
     * there, so the message has one size whatever its values (rewritten in place).
     * An end signal adds its two fields (and the three before them). */
    unsigned nf = in->end_signal ? 14u : in->has_unrecorded ? 12u : 9u;
    return build_message(out, cap, PT_MSG_PRODUCER_STATUS, f, nf);
}

size_t pt_fb_build_compressed_chunk(uint8_t *out, size_t cap, const pt_fb_compressed_chunk_t *in)
{
    const fb_field_t f[] = {U64(in->thread), U64(in->first_event), U32(in->count), U8(in->codec),
                            U32(in->raw_bytes), BYTES(in->data, in->data_len)};
    return build_message(out, cap, PT_MSG_COMPRESSED_CHUNK, f, sizeof f / sizeof f[0]);
}

void pt_fb_chunk_header(uint8_t out[PT_CHUNK_HEADER_BYTES], uint64_t thread, uint64_t first_event,
                        uint32_t count, uint32_t size_prefix)
{
    wr32(out + 0, size_prefix);
    wr32(out + 4, 16);
    memcpy(out + 8, PT_FILE_IDENTIFIER, 4);
    wr16(out + 12, 8);   /* Message vtable: size */
    wr16(out + 14, 12);  /* table size */
    wr16(out + 16, 4);   /* body_type */
    wr16(out + 18, 8);   /* body */
    wr32(out + 20, 8);   /* Message table -> vtable (20 - 12) */
    out[24] = PT_MSG_EVENT_CHUNK;
    out[25] = out[26] = out[27] = 0;
    wr32(out + 28, 16);  /* -> EventChunk table at 44 */
    wr16(out + 32, 10);  /* EventChunk vtable: size */
    wr16(out + 34, 24);  /* table size */
    wr16(out + 36, 4);   /* thread */
    wr16(out + 38, 12);  /* first_event */
    wr16(out + 40, 20);  /* events */
    wr16(out + 42, 0);
    wr32(out + 44, 12);  /* EventChunk table -> vtable (44 - 32) */
    wr64(out + PT_CHUNK_OFF_THREAD, thread);
    wr64(out + PT_CHUNK_OFF_FIRST_EVENT, first_event);
    wr32(out + 64, 4);   /* -> vector at 68 */
    wr32(out + PT_CHUNK_OFF_LENGTH, count);
}

size_t pt_fb_build_event_chunk(uint8_t *out, size_t cap, uint64_t thread, uint64_t first_event,
                               const pt_event_t *events, uint32_t count)
{
    const size_t total = PT_CHUNK_HEADER_BYTES + (size_t)count * sizeof(pt_event_t);
    if (!out || total > cap || total > FB_MAX_BUFFER)
        return 0;
    pt_fb_chunk_header(out, thread, first_event, count, (uint32_t)(total - 4));
    uint8_t *dst = out + PT_CHUNK_OFF_EVENTS;
    for (uint32_t i = 0; i < count; i++, dst += sizeof(pt_event_t)) {
        wr64(dst, events[i].ticks);
        wr32(dst + 8, events[i].id);
        wr16(dst + 12, events[i].aux);
        dst[14] = events[i].kind;
        dst[15] = events[i].flags;
    }
    return total;
}

size_t pt_fb_message_size(const uint8_t *buf, size_t len)
{
    if (!buf || len < 4)
        return 0;
    return (size_t)rd32(buf) + 4;
}

/* ---- Message.process: tagged messages (pt_wire.h) ---------------------- */

static const uint8_t untagged_header[20] = {
    16, 0, 0, 0, 'P', 'Y', 'T', 'R', 8, 0, 12, 0, 4, 0, 8, 0, 8, 0, 0, 0};
static const uint8_t tagged_header[24] = {
    20, 0, 0, 0, 'P', 'Y', 'T', 'R', 10, 0, 16, 0, 4, 0, 8, 0, 12, 0, 0, 0, 12, 0, 0, 0};

size_t pt_fb_tag(uint8_t *out, size_t cap, const uint8_t *msg, size_t len, uint32_t process)
{
    size_t hdr, body_ref;
    if (!out || !msg || len % 8 != 0 || len > FB_MAX_BUFFER || rd32(msg) != len - 4)
        return 0;
    if (len >= PT_MSG_HEADER_BYTES + 4 && !memcmp(msg + 4, untagged_header, sizeof untagged_header)) {
        hdr = PT_MSG_HEADER_BYTES;
        body_ref = 28 + (size_t)rd32(msg + 28);
    } else if (len >= PT_MSG_TAGGED_HEADER_BYTES + 4 && !memcmp(msg + 4, tagged_header, sizeof tagged_header)) {
        hdr = PT_MSG_TAGGED_HEADER_BYTES;
        body_ref = 32 + (size_t)rd32(msg + 32);
    } else {
        return 0;
    }
    if (body_ref < hdr || body_ref >= len)
        return 0; /* the body must lie after the header, or moving it breaks it */
    const uint8_t type = msg[hdr == PT_MSG_HEADER_BYTES ? 24 : 28];
    const size_t body_len = len - hdr;
    const size_t new_hdr = process ? PT_MSG_TAGGED_HEADER_BYTES : PT_MSG_HEADER_BYTES;
    const size_t total = new_hdr + body_len;
    if (total > cap || total > FB_MAX_BUFFER)
        return 0;
    memmove(out + new_hdr, msg + hdr, body_len);
    const size_t body_at = new_hdr + (body_ref - hdr);
    memset(out, 0, new_hdr);
    wr32(out, (uint32_t)(total - 4));
    if (process) {
        memcpy(out + 4, tagged_header, sizeof tagged_header);
        out[28] = type;
        wr32(out + 32, (uint32_t)(body_at - 32));
        wr32(out + 36, process);
    } else {
        memcpy(out + 4, untagged_header, sizeof untagged_header);
        out[24] = type;
        wr32(out + 28, (uint32_t)(body_at - 28));
    }
    return total;
}

size_t pt_fb_build(uint8_t *out, size_t cap, const pt_fb_msg_t *m)
{
    size_t n = 0;
    if (!m)
        return 0;
    switch (m->type) {
    case PT_MSG_PROCESS_INFO: n = pt_fb_build_process_info(out, cap, &m->u.process_info); break;
    case PT_MSG_THREAD_START: n = pt_fb_build_thread_start(out, cap, &m->u.thread_start); break;
    case PT_MSG_THREAD_END: n = pt_fb_build_thread_end(out, cap, &m->u.thread_end); break;
    case PT_MSG_SYMBOL: n = pt_fb_build_symbol(out, cap, &m->u.symbol); break;
    case PT_MSG_EVENT_CHUNK:
        n = pt_fb_build_event_chunk(out, cap, m->u.event_chunk.thread, m->u.event_chunk.first_event,
                                    m->u.event_chunk.events, m->u.event_chunk.count);
        break;
    case PT_MSG_LOST_COUNT: n = pt_fb_build_lost_count(out, cap, &m->u.lost_count); break;
    case PT_MSG_PRODUCER_STATUS: n = pt_fb_build_producer_status(out, cap, &m->u.producer_status); break;
    case PT_MSG_COMPRESSED_CHUNK: n = pt_fb_build_compressed_chunk(out, cap, &m->u.compressed_chunk); break;
    default: return 0;
    }
    if (!n || !m->process)
        return n;
    return pt_fb_tag(out, cap, out, n, m->process);
}

/* ---- verifying parser -------------------------------------------------- */

typedef struct fb_in {
    const uint8_t *b;
    size_t len;
    char *why;
    size_t whylen;
} fb_in_t;

typedef struct fb_table {
    size_t pos;     /* table start */
    size_t vt;      /* vtable start */
    size_t nfields; /* entries in the vtable */
    size_t tsize;
} fb_table_t;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int bad(fb_in_t *in, const char *fmt, ...)
{
    if (in->why && in->whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(in->why, in->whylen, fmt, ap);
        va_end(ap);
    }
    return -EBADMSG;
}

/* [pos, pos + n) inside the buffer, without overflow */
static int in_bounds(const fb_in_t *in, size_t pos, size_t n) { return pos <= in->len && n <= in->len - pos; }

static int table_at(fb_in_t *in, size_t pos, fb_table_t *t, const char *what)
{
    if (pos % 4 || !in_bounds(in, pos, 4))
        return bad(in, "%s table at %zu out of bounds or misaligned", what, pos);
    const int64_t soff = (int32_t)rd32(in->b + pos);
    const int64_t vt = (int64_t)pos - soff;
    if (vt < 0 || (uint64_t)vt % 2 || !in_bounds(in, (size_t)vt, 4))
        return bad(in, "%s vtable at %lld out of bounds or misaligned", what, (long long)vt);
    const size_t vsize = rd16(in->b + vt);
    const size_t tsize = rd16(in->b + vt + 2);
    if (vsize < 4 || vsize % 2 || !in_bounds(in, (size_t)vt, vsize))
        return bad(in, "%s vtable size %zu invalid", what, vsize);
    if (tsize < 4 || !in_bounds(in, pos, tsize))
        return bad(in, "%s table size %zu exceeds buffer", what, tsize);
    t->pos = pos;
    t->vt = (size_t)vt;
    t->nfields = (vsize - 4) / 2;
    t->tsize = tsize;
    return 0;
}

/* 1 = present at *at, 0 = absent (default), <0 = malformed */
static int field_at(fb_in_t *in, const fb_table_t *t, unsigned id, size_t size, size_t *at,
                    const char *what)
{
    if (id >= t->nfields)
        return 0;
    const size_t voff = rd16(in->b + t->vt + 4 + 2 * id);
    if (!voff)
        return 0;
    if (voff < 4 || voff + size > t->tsize)
        return bad(in, "%s field %u outside its table", what, id);
    if ((t->pos + voff) % size)
        return bad(in, "%s field %u misaligned", what, id);
    *at = t->pos + voff;
    return 1;
}

static int get_uint(fb_in_t *in, const fb_table_t *t, unsigned id, size_t size, uint64_t *v,
                    const char *what)
{
    size_t at = 0;
    int r = field_at(in, t, id, size, &at, what);
    *v = 0;
    if (r <= 0)
        return r;
    switch (size) {
    case 1: *v = in->b[at]; break;
    case 2: *v = rd16(in->b + at); break;
    case 4: *v = rd32(in->b + at); break;
    default: *v = rd64(in->b + at); break;
    }
    return 0;
}

#define GET(in, t, id, dst, what)                                                    \
    do {                                                                             \
        uint64_t v_;                                                                 \
        int r_ = get_uint((in), (t), (id), sizeof(dst), &v_, (what));                \
        if (r_ < 0)                                                                  \
            return r_;                                                               \
        (dst) = v_;                                                 \
    } while (0)

/* Follow the uoffset stored at `at`: forward, non-zero, 4-aligned target in bounds. */
static int follow(fb_in_t *in, size_t at, size_t *target, const char *what)
{
    const uint32_t off = rd32(in->b + at);
    if (off == 0 || off > FB_MAX_BUFFER)
        return bad(in, "%s: bad offset %u", what, off);
    const size_t to = at + off;
    if (to % 4 || !in_bounds(in, to, 4))
        return bad(in, "%s: offset %u points outside the buffer or misaligned", what, off);
    *target = to;
    return 0;
}

static int get_str(fb_in_t *in, const fb_table_t *t, unsigned id, pt_fb_str_t *s, const char *what)
{
    size_t at = 0, to = 0;
    s->ptr = NULL;
    s->len = 0;
    int r = field_at(in, t, id, 4, &at, what);
    if (r <= 0)
        return r;
    if ((r = follow(in, at, &to, what)) < 0)
        return bad(in, "%s field %u: string offset %u points outside the buffer or misaligned", what, id,
                   rd32(in->b + at));
    const uint32_t n = rd32(in->b + to);
    if (!in_bounds(in, to + 4, (size_t)n + 1))
        return bad(in, "%s field %u: string of %u bytes exceeds buffer", what, id, n);
    if (in->b[to + 4 + n] != 0)
        return bad(in, "%s field %u: string not NUL-terminated", what, id);
    s->ptr = (const char *)(in->b + to + 4);
    s->len = n;
    return 0;
}

#define GETS(in, t, id, dst, what)                                                   \
    do {                                                                             \
        int r_ = get_str((in), (t), (id), &(dst), (what));                           \
        if (r_ < 0)                                                                  \
            return r_;                                                               \
    } while (0)

static int parse_event_chunk(fb_in_t *in, const fb_table_t *t, pt_fb_event_chunk_t *c)
{
    const char *w = "EventChunk";
    size_t at = 0, to = 0;
    GET(in, t, 0, c->thread, w);
    GET(in, t, 1, c->first_event, w);
    c->events = NULL;
    c->count = 0;
    int r = field_at(in, t, 2, 4, &at, w);
    if (r < 0)
        return r;
    if (r == 0)
        return 0;
    if ((r = follow(in, at, &to, "EventChunk.events")) < 0)
        return r;
    const uint32_t n = rd32(in->b + to);
    if ((to + 4) % 8)
        return bad(in, "EventChunk.events: elements not 8-aligned");
    if (!in_bounds(in, to + 4, (size_t)n * sizeof(pt_event_t)))
        return bad(in, "EventChunk.events: %u events exceed the buffer", n);
    c->events = (const pt_event_t *)(const void *)(in->b + to + 4);
    c->count = n;
    return 0;
}

int pt_fb_parse(const uint8_t *buf, size_t len, pt_fb_msg_t *out, char *why, size_t whylen)
{
    fb_in_t in = {buf, len, why, whylen};
    fb_table_t msg, body;
    size_t at = 0, root = 0, body_pos = 0;
    int r;

    if (why && whylen)
        why[0] = 0;
    if (!out)
        return -EINVAL;
    memset(out, 0, sizeof *out);
    if (!buf || len < 12)
        return bad(&in, "message of %zu bytes is too short", len);
    if (len > FB_MAX_BUFFER)
        return bad(&in, "message of %zu bytes is too large", len);
    if (rd32(buf) != len - 4)
        return bad(&in, "size prefix %u does not match length %zu", rd32(buf), len);
    if (memcmp(buf + 8, PT_FILE_IDENTIFIER, 4) != 0)
        return bad(&in, "file identifier is not \"PYTR\"");
    if ((r = follow(&in, 4, &root, "root")) < 0)
        return r;
    if ((r = table_at(&in, root, &msg, "Message")) < 0)
        return r;
    uint8_t type = 0;
    GET(&in, &msg, 0, type, "Message");
    if (type == PT_MSG_NONE)
        return bad(&in, "message has no body");
    if (type > PT_MSG_LAST)
        return bad(&in, "unknown body type %u", type);
    if ((r = field_at(&in, &msg, 1, 4, &at, "Message")) < 0)
        return r;
    if (r == 0)
        return bad(&in, "body type %u without a body", type);
    if ((r = follow(&in, at, &body_pos, "Message.body")) < 0)
        return r;
    GET(&in, &msg, 2, out->process, "Message");
    if ((r = table_at(&in, body_pos, &body, "body")) < 0)
        return r;

    out->type = type;
    switch (type) {
    case PT_MSG_PROCESS_INFO: {
        pt_fb_process_info_t *p = &out->u.process_info;
        const char *w = "ProcessInfo";
        GET(&in, &body, 0, p->pid, w);
        GET(&in, &body, 1, p->ppid, w);
        GETS(&in, &body, 2, p->command_line, w);
        GETS(&in, &body, 3, p->python_version, w);
        GETS(&in, &body, 4, p->segment, w);
        GET(&in, &body, 5, p->abi_major, w);
        GET(&in, &body, 6, p->abi_minor, w);
        GET(&in, &body, 7, p->clock, w);
        GET(&in, &body, 8, p->ticks_per_second, w);
        GET(&in, &body, 9, p->base_ticks, w);
        GET(&in, &body, 10, p->base_monotonic_ns, w);
        GET(&in, &body, 11, p->base_realtime_ns, w);
        GET(&in, &body, 12, p->ring_count, w);
        GET(&in, &body, 13, p->ring_capacity_events, w);
        GET(&in, &body, 14, p->drop_policy, w);
        GETS(&in, &body, 15, p->role, w);
        break;
    }
    case PT_MSG_THREAD_START: {
        pt_fb_thread_start_t *p = &out->u.thread_start;
        const char *w = "ThreadStart";
        GET(&in, &body, 0, p->thread, w);
        GET(&in, &body, 1, p->ring, w);
        GET(&in, &body, 2, p->os_tid, w);
        GETS(&in, &body, 3, p->name, w);
        GET(&in, &body, 4, p->ticks, w);
        break;
    }
    case PT_MSG_THREAD_END: {
        pt_fb_thread_end_t *p = &out->u.thread_end;
        const char *w = "ThreadEnd";
        GET(&in, &body, 0, p->thread, w);
        GET(&in, &body, 1, p->ticks, w);
        GET(&in, &body, 2, p->events_written, w);
        GET(&in, &body, 3, p->events_dropped, w);
        break;
    }
    case PT_MSG_SYMBOL: {
        pt_fb_symbol_t *p = &out->u.symbol;
        const char *w = "Symbol";
        GET(&in, &body, 0, p->id, w);
        GET(&in, &body, 1, p->kind, w);
        GETS(&in, &body, 2, p->name, w);
        GETS(&in, &body, 3, p->file, w);
        GET(&in, &body, 4, p->line, w);
        GETS(&in, &body, 5, p->profile_name, w);
        break;
    }
    case PT_MSG_EVENT_CHUNK:
        if ((r = parse_event_chunk(&in, &body, &out->u.event_chunk)) < 0)
            return r;
        break;
    case PT_MSG_LOST_COUNT: {
        pt_fb_lost_count_t *p = &out->u.lost_count;
        GET(&in, &body, 0, p->thread, "LostCount");
        GET(&in, &body, 1, p->dropped_total, "LostCount");
        break;
    }
    case PT_MSG_PRODUCER_STATUS: {
        pt_fb_producer_status_t *p = &out->u.producer_status;
        const char *w = "ProducerStatus";
        GET(&in, &body, 0, p->state, w);
        GET(&in, &body, 1, p->heartbeat_ns, w);
        GET(&in, &body, 2, p->events_written, w);
        GET(&in, &body, 3, p->events_dropped, w);
        GET(&in, &body, 4, p->hook_errors, w);
        GET(&in, &body, 5, p->symbols_dropped, w);
        GET(&in, &body, 6, p->threads_untraced, w);
        GET(&in, &body, 7, p->tracing_displaced, w);
        GET(&in, &body, 8, p->events_untraced, w);
        GET(&in, &body, 9, p->unrecorded_events, w);
        GET(&in, &body, 10, p->unrecorded_messages, w);
        GET(&in, &body, 11, p->unrecorded_errno, w);
        GET(&in, &body, 12, p->end_signal, w);
        GET(&in, &body, 13, p->end_signal_pid, w);
        p->has_unrecorded = field_at(&in, &body, 9, 8, &at, w) == 1;
        break;
    }
    case PT_MSG_COMPRESSED_CHUNK: {
        pt_fb_compressed_chunk_t *p = &out->u.compressed_chunk;
        const char *w = "CompressedChunk";
        GET(&in, &body, 0, p->thread, w);
        GET(&in, &body, 1, p->first_event, w);
        GET(&in, &body, 2, p->count, w);
        GET(&in, &body, 3, p->codec, w);
        GET(&in, &body, 4, p->raw_bytes, w);
        if ((r = field_at(&in, &body, 5, 4, &at, w)) < 0)
            return r;
        if (r) {
            size_t to = 0;
            if ((r = follow(&in, at, &to, "CompressedChunk.data")) < 0)
                return r;
            const uint32_t n = rd32(in.b + to);
            if (!in_bounds(&in, to + 4, n))
                return bad(&in, "CompressedChunk.data: %u bytes exceed the buffer", n);
            p->data = in.b + to + 4;
            p->data_len = n;
        }
        break;
    }
    default: break;
    }
    return 0;
}
