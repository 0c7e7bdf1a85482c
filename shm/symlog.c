/*
 * pt_symlog: the segment's append-only symbol log (see symlog.h).
 *
 * Producer: one in-process mutex serialises appenders. Under it the appender
 * takes id = symbol_count + 1, builds the record in place at the published
 * watermark (bytes past the watermark are private to the holder of the
 * mutex: no reader looks at them), then stores symbol_count and release-stores
 * the new watermark. Ids are therefore dense and appear in the log in order
 * 1, 2, 3, ...; a record that does not fit consumes no id.
 *
 * Reader: walks records in [cursor, published) where `published` came from an
 * acquire load of header.symlog_published (done by the caller, pairs with the
 * release store below). Each record is copied out of shared memory before it
 * is verified with pt_fb_parse and handed on, so a producer that rewrites the
 * log cannot change a record between its check and its use.
 */
#include "symlog.h"
#include "shm_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema/pt_fb.h"

/* One lock for all segments of the process: appends are rare (first sight of
 * a function) and a process normally has one segment. */
static pthread_mutex_t symlog_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t symlog_atfork_once = PTHREAD_ONCE_INIT;

/* A fork while another thread appends must not leave the child's copy of the
 * lock held forever: hold it across fork() and release it on both sides. */
static void symlog_prefork(void) { pthread_mutex_lock(&symlog_lock); }
static void symlog_postfork(void) { pthread_mutex_unlock(&symlog_lock); }
static void symlog_register_atfork(void)
{
    (void)pthread_atfork(symlog_prefork, symlog_postfork, symlog_postfork);
}

void pt_symlog_register_atfork(void)
{
    pthread_once(&symlog_atfork_once, symlog_register_atfork);
}

/* Room left for the strings in a record of PT_MAX_SYMBOL_RECORD_BYTES: the
 * fixed part of a Symbol message is at most 80 bytes (vtable of 6 fields) + 3
 * string headers (4 + 1 each) + alignment padding (3 per string, 7 at the end),
 * 111 in all. */
#define SYMLOG_STRING_BUDGET (PT_MAX_SYMBOL_RECORD_BYTES - 128u)
#define SYMLOG_STRINGS 3

static uint32_t cut_utf8(const char *s, size_t len, size_t max)
{
    if (len <= max)
        return (uint32_t)len;
    size_t n = max;
    /* do not cut a UTF-8 sequence in half */
    while (n > 0 && ((unsigned char)s[n] & 0xC0u) == 0x80u)
        n--;
    return (uint32_t)n;
}

/* Cut the strings to fit `budget` together: strings shorter than an equal share
 * stay whole and leave their room to the others (water filling). */
static void fit_strings(const char *const s[SYMLOG_STRINGS], size_t len[SYMLOG_STRINGS], size_t budget)
{
    size_t total = 0;
    for (int i = 0; i < SYMLOG_STRINGS; i++)
        total += len[i];
    if (total <= budget)
        return;
    int done[SYMLOG_STRINGS] = {0};
    size_t left = budget;
    for (int pass = 0; pass < SYMLOG_STRINGS; pass++) {
        int open = 0;
        for (int i = 0; i < SYMLOG_STRINGS; i++)
            open += !done[i];
        if (open == 0)
            return;
        size_t share = left / (size_t)open;
        int kept = 0;
        for (int i = 0; i < SYMLOG_STRINGS; i++) {
            if (!done[i] && len[i] <= share) {
                done[i] = 1;
                left -= len[i];
                kept = 1;
            }
        }
        if (!kept) { /* every open string is longer than its share: cut them all to it */
            for (int i = 0; i < SYMLOG_STRINGS; i++)
                if (!done[i])
                    len[i] = cut_utf8(s[i], len[i], share);
            return;
        }
    }
}

int pt_symlog_append(pt_segment_t *seg, uint32_t kind, const char *name, const char *file,
                     uint32_t line, uint32_t *id_out)
{
    return pt_symlog_append_named(seg, kind, name, file, line, NULL, id_out);
}

int pt_symlog_append_named(pt_segment_t *seg, uint32_t kind, const char *name, const char *file,
                           uint32_t line, const char *profile_name, uint32_t *id_out)
{
    if (id_out)
        *id_out = 0;
    if (!seg || !id_out || kind > PT_SYM_TASK)
        return -EINVAL;
    pt_seg_header_t *h = pt_segment_header(seg);
    uint8_t *log = pt_segment_symlog(seg);

    const char *const strs[SYMLOG_STRINGS] = {name, file, profile_name};
    size_t lens[SYMLOG_STRINGS];
    for (int i = 0; i < SYMLOG_STRINGS; i++)
        lens[i] = strs[i] ? strlen(strs[i]) : 0;
    fit_strings(strs, lens, SYMLOG_STRING_BUDGET);
    pt_fb_symbol_t sym = {
        .id = 0,
        .kind = (uint8_t)kind,
        .name = {name, (uint32_t)lens[0]},
        .file = {file, (uint32_t)lens[1]},
        .line = line,
        .profile_name = {profile_name, (uint32_t)lens[2]},
    };

    pthread_once(&symlog_atfork_once, symlog_register_atfork);
    pthread_mutex_lock(&symlog_lock);
    /* relaxed: symlog_published and symbol_count are written only under
     * symlog_lock, which orders them among appenders */
    const uint64_t off = atomic_load_explicit(&h->symlog_published, memory_order_relaxed);
    const uint64_t last_id = atomic_load_explicit(&h->symbol_count, memory_order_relaxed);
    uint64_t cap = h->symlog_bytes;
    if (off <= cap) { /* the pages a record here may use, reserved as the log grows */
        uint64_t reserved = pt_segment_reserve_symlog(seg, off + PT_MAX_SYMBOL_RECORD_BYTES);
        if (reserved < cap)
            cap = reserved;
    }
    size_t n = 0;
    if (off <= cap && off % 8 == 0 && last_id < UINT32_MAX) {
        sym.id = (uint32_t)(last_id + 1);
        size_t room = (size_t)(cap - off);
        if (room > PT_MAX_SYMBOL_RECORD_BYTES)
            room = PT_MAX_SYMBOL_RECORD_BYTES;
        n = pt_fb_build_symbol(log + off, room, &sym); /* a multiple of 8 */
    }
    if (n == 0) {
        pthread_mutex_unlock(&symlog_lock);
        /* relaxed: a statistic */
        atomic_fetch_add_explicit(&h->symbols_dropped, 1, memory_order_relaxed);
        return -ENOSPC;
    }
    atomic_store_explicit(&h->symbol_count, sym.id, memory_order_relaxed);
    /* release: publishes the record written above; pairs with the reader's
     * acquire load of symlog_published (pt_reader_poll) before it reads the
     * log. The id is returned only after this store, so no ring can hold an id
     * whose record is not yet published. */
    atomic_store_explicit(&h->symlog_published, off + n, memory_order_release);
    pthread_mutex_unlock(&symlog_lock);
    *id_out = sym.id;
    return 0;
}


static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* The walk, with the log capacity given by the caller (the reader passes the
 * size it validated at attach, so a producer that rewrites the header later
 * cannot make it read past the mapping). Hidden: not part of the public API. */
__attribute__((visibility("hidden"))) int pt_symlog_read_bounded(const pt_segment_t *seg, uint64_t cap,
                                                                 uint64_t *cursor, uint64_t published,
                                                                 pt_symlog_visit_fn fn, void *ctx, char *err,
                                                                 size_t errlen);

int pt_symlog_read_bounded(const pt_segment_t *seg, uint64_t cap, uint64_t *cursor, uint64_t published,
                           pt_symlog_visit_fn fn, void *ctx, char *err, size_t errlen)
{
    if (!seg || !cursor)
        return -EINVAL;
    const uint8_t *log = pt_segment_symlog(seg);
    if (published > cap) {
        pt_set_err(err, errlen, "symbol log: published watermark %llu is beyond the log size %llu (corrupt segment)",
                (unsigned long long)published, (unsigned long long)cap);
        return -EBADMSG;
    }
    if (*cursor >= published)
        return 0;
    uint8_t *copy = malloc(PT_MAX_SYMBOL_RECORD_BYTES);
    if (!copy)
        return -ENOMEM;
    int rc = 0;
    char why[128];
    while (*cursor < published) {
        const uint64_t off = *cursor;
        if (off % 8 || published - off < 12) {
            pt_set_err(err, errlen, "symbol log: truncated record at offset %llu (corrupt segment)",
                    (unsigned long long)off);
            rc = -EBADMSG;
            break;
        }
        const uint64_t size = (uint64_t)rd32(log + off) + 4;
        if (size < 12 || size > PT_MAX_SYMBOL_RECORD_BYTES || size > published - off) {
            pt_set_err(err, errlen, "symbol log: record at offset %llu has bad size %llu (corrupt segment)",
                    (unsigned long long)off, (unsigned long long)size);
            rc = -EBADMSG;
            break;
        }
        memcpy(copy, log + off, (size_t)size);
        pt_fb_msg_t m;
        if (pt_fb_parse(copy, (size_t)size, &m, why, sizeof why) != 0 || m.type != PT_MSG_SYMBOL) {
            if (m.type != PT_MSG_SYMBOL && !why[0])
                snprintf(why, sizeof why, "not a Symbol message (type %u)", m.type);
            pt_set_err(err, errlen, "symbol log: record at offset %llu is malformed: %s (corrupt segment)",
                    (unsigned long long)off, why);
            rc = -EBADMSG;
            break;
        }
        uint64_t next = off + ((size + 7) & ~UINT64_C(7));
        if (next > published)
            next = published;
        int r = fn ? fn(ctx, copy, (size_t)size) : 0;
        if (r != 0) {
            /* the record was handed out: move past it before stopping */
            *cursor = next;
            rc = r;
            break;
        }
        *cursor = next;
    }
    free(copy);
    return rc;
}

int pt_symlog_read(const pt_segment_t *seg, uint64_t *cursor, uint64_t published, pt_symlog_visit_fn fn,
                   void *ctx, char *err, size_t errlen)
{
    if (!seg)
        return -EINVAL;
    const pt_seg_header_t *h = pt_segment_header(seg);
    /* The header's size, re-checked against the header's own extents; the
     * reader library uses the size it validated at attach instead. */
    uint64_t cap = h->symlog_bytes;
    if (h->symlog_offset > h->segment_bytes || cap > h->segment_bytes - h->symlog_offset) {
        pt_set_err(err, errlen, "symbol log: size %llu does not fit the segment (corrupt segment)",
                (unsigned long long)cap);
        return -EBADMSG;
    }
    return pt_symlog_read_bounded(seg, cap, cursor, published, fn, ctx, err, errlen);
}
