/*
 * pt_recfile: reading recordings (format in recfile.h).
 *
 * The file is read through one cache buffer that always starts at a message
 * boundary, so every message sits 8-aligned in memory (file offsets of
 * messages are multiples of 8 and malloc aligns to at least 8), which is what
 * pt_fb_parse and the Event vector need. The buffer grows to the largest
 * message seen (bounded by PT_RECFILE_MAX_MESSAGE_BYTES), never to the file.
 *
 * Reads use pread at explicit offsets, so a file that grows between calls is
 * simply read further next time; nothing is remembered about EOF.
 *
 * Compression (format 2). Events of one thread are nearly sorted ticks and a
 * few ids, kinds and flags: delta-coding the ticks and shuffling the 16-byte
 * records into 16 byte planes (so zstd sees runs of small deltas, of equal
 * kind bytes, of ids) made the bench recordings 23-35x smaller than plain
 * 16-byte records at zstd level 1, where zstd alone gave 4.5-5.4x, and made
 * compression 2-4x faster (about 1 GB/s of records on the bench machine).
 * Each chunk is one independent zstd frame, so damage stays in its chunk and
 * a file being written can be followed chunk by chunk.
 */
#include "viewer/core/recfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "shm/base/grow.h"

#define INITIAL_CAP (1u << 20)

struct pt_recfile {
    int fd;
    /* cache: file bytes [buf_off, buf_off + have) are in buf[0, have) */
    uint8_t *buf;
    size_t cap, have;
    uint64_t buf_off;

    uint64_t off;          /* file offset of the next message (or 0: header) */
    uint64_t pending;      /* bytes of an incomplete tail seen by the last next() */
    uint64_t pending_need; /* bytes the incomplete tail needs to be whole */

    int header_done;
    uint32_t flags;
    uint16_t minor;

    int damaged;
    int64_t err_off;
    char err[320];

    uint64_t messages, events;
    uint32_t last_state;
    int ended;

    uint16_t major;
    char *reason;                 /* into err: the line without its offset part */
    /* decompression: the EventChunk a CompressedChunk stands for is built here */
    ZSTD_DCtx *dctx;
    uint8_t *plain, *scratch;
    size_t plain_cap, scratch_cap;
    uint64_t compressed_chunks;
    /* the recorder's loss (format x.1): the unrecorded_* slot, and the last untagged
     * status, which the trailer handed out at the end repeats (pt_recfile_next) */
    uint64_t slot_off;             /* 0: no slot seen */
    uint32_t slot_len;
    pt_fb_producer_status_t last_status;
    uint64_t trailer_events, trailer_messages; /* what the last trailer said */
    int trailer_given;
    uint64_t trailer[32]; /* 8-aligned, as every message handed out */
};

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int damage(pt_recfile_t *rf, uint64_t offset, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    rf->damaged = 1;
    rf->err_off = (int64_t)offset;
    int head = snprintf(rf->err, sizeof rf->err, "damaged at byte offset %llu: ", (unsigned long long)offset);
    snprintf(rf->err + head, sizeof rf->err - (size_t)head, "%s", why);
    rf->reason = rf->err + head;
    return -EBADMSG;
}

int pt_recfile_open(const char *path, pt_recfile_t **out, char *err, size_t errlen)
{
    if (!path || !out)
        return -EINVAL;
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (err && errlen)
            snprintf(err, errlen, "cannot open the recording %s: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        close(fd);
        if (err && errlen)
            snprintf(err, errlen, "%s is a directory, not a recording", path);
        return -EISDIR;
    }
    pt_recfile_t *rf = calloc(1, sizeof *rf);
    if (!rf) {
        close(fd);
        if (err && errlen)
            snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    rf->fd = fd;
    rf->err_off = -1;
    *out = rf;
    return 0;
}

void pt_recfile_close(pt_recfile_t *rf)
{
    if (!rf)
        return;
    if (rf->fd >= 0)
        close(rf->fd);
    ZSTD_freeDCtx(rf->dctx);
    free(rf->plain);
    free(rf->scratch);
    free(rf->buf);
    free(rf);
}

/* Bytes of the file known from rf->off on (after a fill). */
static uint64_t avail(const pt_recfile_t *rf)
{
    uint64_t end = rf->buf_off + rf->have;
    return end > rf->off && rf->off >= rf->buf_off ? end - rf->off : 0;
}

/* Make file bytes [off, off + need) present in the cache. 1: present;
 * 0: the file has fewer bytes now; -errno on I/O error or -ENOMEM. */
static int fill(pt_recfile_t *rf, size_t need)
{
    if (rf->off < rf->buf_off || rf->off > rf->buf_off + rf->have) {
        rf->buf_off = rf->off; /* e.g. skipped padding that is not in the file yet */
        rf->have = 0;
    }
    if (rf->off + need <= rf->buf_off + rf->have)
        return 1;
    if (rf->off > rf->buf_off) { /* keep the buffer starting at the message */
        size_t skip = (size_t)(rf->off - rf->buf_off);
        memmove(rf->buf, rf->buf + skip, rf->have - skip);
        rf->have -= skip;
        rf->buf_off = rf->off;
    }
    if (pt_grow_size((void **)&rf->buf, &rf->cap, 1, need, INITIAL_CAP) < 0)
        return -ENOMEM;
    while (rf->have < need) {
        ssize_t n = pread(rf->fd, rf->buf + rf->have, rf->cap - rf->have, (off_t)(rf->buf_off + rf->have));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return 0;
        rf->have += (size_t)n;
    }
    return 1;
}

static int io_error(pt_recfile_t *rf, int rc)
{
    if (rc == -ENOMEM)
        snprintf(rf->err, sizeof rf->err, "out of memory reading the recording at byte offset %llu",
                 (unsigned long long)rf->off);
    else
        snprintf(rf->err, sizeof rf->err, "cannot read the recording at byte offset %llu: %s",
                 (unsigned long long)rf->off, strerror(-rc));
    return rc;
}

static int read_header(pt_recfile_t *rf)
{
    static const uint8_t magic[8] = {'P', 'Y', 'T', 'R', 'R', 'E', 'C', 0};
    rf->off = 0;
    int r = fill(rf, PT_RECFILE_HEADER_BYTES);
    if (r < 0)
        return io_error(rf, r);
    uint64_t n = r ? PT_RECFILE_HEADER_BYTES : avail(rf);
    const uint8_t *h = rf->buf;
    /* What is there must already be right, even if the rest is not written yet. */
    if (n && memcmp(h, magic, n < 8 ? (size_t)n : 8))
        return damage(rf, 0, "bad magic: not a pytrace recording (expected \"PYTRREC\")");
    if (n >= 10 && le16(h + 8) != PT_RECFILE_FORMAT_MAJOR && le16(h + 8) != PT_RECFILE_FORMAT_MAJOR_PLAIN)
        return damage(rf, 8,
                      "unsupported recording format %u.%u (this pytrace reads 1.x and 2.x): "
                      "it was written by another version of pytrace",
                      le16(h + 8), n >= 12 ? le16(h + 10) : 0);
    if (!r) {
        rf->pending = n;
        rf->pending_need = PT_RECFILE_HEADER_BYTES;
        return 0;
    }
    rf->major = le16(h + 8);
    rf->minor = le16(h + 10);
    rf->flags = le32(h + 12);
    rf->header_done = 1;
    rf->off = PT_RECFILE_HEADER_BYTES;
    return 1;
}

/* Room for need bytes in *buf (kept), from 64 KiB doubling; 0 or -ENOMEM.
 * realloc, like malloc, is 8-aligned, as the Event vector needs. */
static int reserve(uint8_t **buf, size_t *cap, size_t need)
{
    return pt_grow_size((void **)buf, cap, 1, need, 64u << 10);
}

/* The ZstdDeltaShuffle transform works on blocks of SHUFFLE_BLOCK records through
 * a small local buffer: writing (or reading) the 16 planes directly, 16 streams
 * about count bytes apart, made them alias in the cache and cost 22 ns an event;
 * by blocks it is about 7. */
#define SHUFFLE_BLOCK 128u

/* Undo the ZstdDeltaShuffle transform: planes -> records, deltas -> ticks. */
static void unshuffle(const uint8_t *planes, uint8_t *records, uint32_t count)
{
    uint8_t blk[16][SHUFFLE_BLOCK];
    uint64_t ticks = 0;
    for (uint32_t i = 0; i < count; i += SHUFFLE_BLOCK) {
        const uint32_t n = count - i < SHUFFLE_BLOCK ? count - i : SHUFFLE_BLOCK;
        for (unsigned k = 0; k < 16; k++)
            memcpy(blk[k], planes + (size_t)k * count + i, n);
        for (uint32_t j = 0; j < n; j++) {
            uint8_t *rec = records + (size_t)16 * (i + j);
            uint64_t delta = 0;
            for (unsigned k = 0; k < 8; k++)
                delta |= (uint64_t)blk[k][j] << (8 * k);
            ticks += delta;
            for (unsigned k = 0; k < 8; k++)
                rec[k] = (uint8_t)(ticks >> (8 * k));
            for (unsigned k = 8; k < 16; k++)
                rec[k] = blk[k][j];
        }
    }
}

/* Turn the CompressedChunk c (the message at rf->off) into the EventChunk it
 * stands for, in rf->plain: *p, *total and *m then describe that message. */
static int inflate_chunk(pt_recfile_t *rf, const pt_fb_compressed_chunk_t *chunk, const uint8_t **p,
                         size_t *total, pt_fb_msg_t *m)
{
    const pt_fb_compressed_chunk_t copy = *chunk, *c = &copy; /* *chunk lives in *m */
    const uint32_t process = m->process; /* Message.process: the EventChunk keeps the tag */
    const uint64_t max_events = (PT_RECFILE_MAX_MESSAGE_BYTES - PT_CHUNK_HEADER_BYTES) / sizeof(pt_event_t);
    if (c->codec != PT_CODEC_ZSTD_DELTA_SHUFFLE)
        return damage(rf, rf->off, "compressed chunk with unknown codec %u", c->codec);
    if (c->count > max_events)
        return damage(rf, rf->off, "compressed chunk of %u events is implausibly large", c->count);
    if ((uint64_t)c->raw_bytes != (uint64_t)c->count * sizeof(pt_event_t))
        return damage(rf, rf->off, "compressed chunk of %u events says it holds %u bytes, not %llu", c->count,
                      c->raw_bytes, (unsigned long long)c->count * sizeof(pt_event_t));
    if (!c->data)
        return damage(rf, rf->off, "compressed chunk without data");
    const unsigned long long content = ZSTD_getFrameContentSize(c->data, c->data_len);
    if (content == ZSTD_CONTENTSIZE_ERROR)
        return damage(rf, rf->off, "compressed chunk data is not a zstd frame");
    if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != c->raw_bytes)
        return damage(rf, rf->off, "compressed chunk's zstd frame holds %llu bytes, the chunk says %u", content,
                      c->raw_bytes);
    /* byte 4 of a frame is its header descriptor; bit 2 the checksum flag (RFC 8878) */
    if (c->data_len < 5 || !(c->data[4] & 0x04))
        return damage(rf, rf->off, "compressed chunk's zstd frame has no checksum (the writer always adds one)");
    const size_t frame = ZSTD_findFrameCompressedSize(c->data, c->data_len);
    if (ZSTD_isError(frame))
        return damage(rf, rf->off, "compressed chunk's zstd frame is cut short or damaged: %s",
                      ZSTD_getErrorName(frame));
    if (frame != c->data_len)
        return damage(rf, rf->off, "compressed chunk has %zu bytes after its zstd frame", c->data_len - frame);
    size_t out_total = PT_CHUNK_HEADER_BYTES + (size_t)c->raw_bytes;
    if (reserve(&rf->plain, &rf->plain_cap, out_total + 8) < 0 ||
        reserve(&rf->scratch, &rf->scratch_cap, c->raw_bytes + 1) < 0)
        return io_error(rf, -ENOMEM);
    if (!rf->dctx && !(rf->dctx = ZSTD_createDCtx()))
        return io_error(rf, -ENOMEM);
    /* one byte more than it may hold: a frame that decompresses to more is caught */
    const size_t got = ZSTD_decompressDCtx(rf->dctx, rf->scratch, c->raw_bytes + 1, c->data, c->data_len);
    if (ZSTD_isError(got))
        return damage(rf, rf->off, "compressed chunk does not decompress: %s", ZSTD_getErrorName(got));
    if (got != c->raw_bytes)
        return damage(rf, rf->off, "compressed chunk decompresses to %zu bytes, the chunk says %u", got,
                      c->raw_bytes);
    pt_fb_chunk_header(rf->plain, c->thread, c->first_event, c->count, (uint32_t)(out_total - 4));
    unshuffle(rf->scratch, rf->plain + PT_CHUNK_OFF_EVENTS, c->count);
    if (process) {
        /* the tagged EventChunk the writer was given (pt_wire.h, "Tagged messages") */
        const size_t tagged = pt_fb_tag(rf->plain, rf->plain_cap, rf->plain, out_total, process);
        if (!tagged)
            return damage(rf, rf->off, "compressed chunk of process %u cannot be tagged", process);
        out_total = tagged;
    }
    char why[192] = "";
    if (pt_fb_parse(rf->plain, out_total, m, why, sizeof why)) /* cannot fail: we built it */
        return damage(rf, rf->off, "decompressed chunk fails verification: %s", why);
    *p = rf->plain;
    *total = out_total;
    return 0;
}

int pt_recfile_unrecorded(pt_recfile_t *rf, pt_fb_producer_status_t *out)
{
    if (!rf)
        return 0;
    uint8_t f[4];
    if (pread(rf->fd, f, 4, 12) == 4 && rf->header_done)
        rf->flags = le32(f);
    if (!(rf->flags & PT_RECFILE_FLAG_INCOMPLETE))
        return 0;
    pt_fb_producer_status_t st = rf->last_status;
    st.has_unrecorded = 1;
    st.unrecorded_events = st.unrecorded_messages = 0;
    st.unrecorded_errno = 0;
    /* the slot is rewritten in place by its writer: read it again */
    uint8_t slot[256];
    pt_fb_msg_t m;
    if (rf->slot_off && rf->slot_len <= sizeof slot &&
        pread(rf->fd, slot, rf->slot_len, (off_t)rf->slot_off) == (ssize_t)rf->slot_len &&
        pt_fb_parse(slot, rf->slot_len, &m, NULL, 0) == 0 && m.type == PT_MSG_PRODUCER_STATUS &&
        m.u.producer_status.has_unrecorded) {
        st.unrecorded_events = m.u.producer_status.unrecorded_events;
        st.unrecorded_messages = m.u.producer_status.unrecorded_messages;
        st.unrecorded_errno = m.u.producer_status.unrecorded_errno;
    }
    if (out)
        *out = st;
    return 1;
}

/* At a clean end of a file whose writer lost messages (header flag INCOMPLETE):
 * hand out one ProducerStatus that repeats the last untagged one with the slot's
 * unrecorded_* counts, so every reader that keeps the last status (and the
 * aggregation's maxima) has the loss; again only if the counts grew since. */
static int unrecorded_trailer(pt_recfile_t *rf, const uint8_t **msg, size_t *len, pt_fb_msg_t *decoded)
{
    pt_fb_producer_status_t st;
    if (!pt_recfile_unrecorded(rf, &st))
        return 0;
    if (rf->trailer_given && st.unrecorded_events == rf->trailer_events &&
        st.unrecorded_messages == rf->trailer_messages)
        return 0;
    uint8_t *out = (uint8_t *)rf->trailer;
    size_t n = pt_fb_build_producer_status(out, sizeof rf->trailer, &st);
    pt_fb_msg_t m;
    if (!n || pt_fb_parse(out, n, &m, NULL, 0) != 0)
        return 0;
    rf->trailer_given = 1;
    rf->trailer_events = st.unrecorded_events;
    rf->trailer_messages = st.unrecorded_messages;
    if (msg)
        *msg = out;
    if (len)
        *len = n;
    if (decoded)
        *decoded = m;
    return 1;
}

int pt_recfile_next(pt_recfile_t *rf, const uint8_t **msg, size_t *len, pt_fb_msg_t *decoded)
{
    if (!rf)
        return -EINVAL;
    if (rf->damaged)
        return -EBADMSG;
    rf->err[0] = 0; /* an old I/O error is forgotten once we try again */
    if (!rf->header_done) {
        int r = read_header(rf);
        if (r <= 0)
            return r;
    }
    rf->pending = 0;
    int r = fill(rf, 4);
    if (r < 0)
        return io_error(rf, r);
    if (!r) {
        rf->pending = avail(rf);
        rf->pending_need = 4;
        if (!rf->pending)
            return unrecorded_trailer(rf, msg, len, decoded);
        return 0;
    }
    const uint8_t *p = rf->buf + (rf->off - rf->buf_off);
    uint32_t size = le32(p);
    if (size < 8 || size > PT_RECFILE_MAX_MESSAGE_BYTES)
        return damage(rf, rf->off, "implausible message size %u (a damaged size prefix)", size);
    size_t total = 4 + (size_t)size;
    size_t padded = (total + 7) & ~(size_t)7;
    r = fill(rf, padded);
    if (r < 0)
        return io_error(rf, r);
    uint64_t have = r ? padded : avail(rf);
    if (have < total) {
        rf->pending = have;
        rf->pending_need = total;
        return 0;
    }
    /* A complete message whose padding is not (all) there yet is accepted; the
     * padding that is there must be zero. */
    p = rf->buf + (rf->off - rf->buf_off);
    for (size_t i = total; i < have; i++)
        if (p[i])
            return damage(rf, rf->off, "non-zero padding after the message (its size prefix %u may be damaged)",
                          size);
    pt_fb_msg_t m;
    char why[192] = "";
    if (pt_fb_parse(p, total, &m, why, sizeof why))
        return damage(rf, rf->off, "message fails verification: %s", why[0] ? why : "invalid FlatBuffer");
    if (m.type == PT_MSG_COMPRESSED_CHUNK) {
        r = inflate_chunk(rf, &m.u.compressed_chunk, &p, &total, &m);
        if (r < 0)
            return r;
        rf->compressed_chunks++;
    }
    if (m.type == PT_MSG_PRODUCER_STATUS) {
        rf->last_state = m.u.producer_status.state;
        if (!m.process) {
            rf->last_status = m.u.producer_status;
            if (m.u.producer_status.has_unrecorded && !rf->slot_off) {
                rf->slot_off = rf->off;
                rf->slot_len = (uint32_t)total;
            }
        }
        /* one process of several (Message.process) ending is not the stream's end */
        if (!m.process && (rf->last_state == PT_STATE_EXITED || rf->last_state == PT_STATE_DEAD))
            rf->ended = 1;
    } else if (m.type == PT_MSG_EVENT_CHUNK) {
        rf->events += m.u.event_chunk.count;
    }
    rf->messages++;
    rf->off += padded;
    if (msg)
        *msg = p;
    if (len)
        *len = total;
    if (decoded)
        *decoded = m;
    return 1;
}

uint64_t pt_recfile_pending(const pt_recfile_t *rf) { return rf ? rf->pending : 0; }

/* Why a file may end inside a message: its writer never closed it. */
static const char *unfinished_note(pt_recfile_t *rf)
{
    uint8_t f[4];
    if (pread(rf->fd, f, 4, 12) == 4)
        rf->flags = le32(f);
    if (rf->flags & PT_RECFILE_FLAG_FINISHED)
        return "";
    return "; the file was never closed by its writer (a recorder killed while writing)";
}

int pt_recfile_finish(pt_recfile_t *rf)
{
    if (!rf)
        return -EINVAL;
    if (rf->damaged)
        return -EBADMSG;
    if (!rf->header_done) /* an empty file too: a recording has at least its header */
        return damage(rf, rf->pending, "the file ends inside the %u-byte header (%llu bytes)", PT_RECFILE_HEADER_BYTES,
                      (unsigned long long)rf->pending);
    if (!rf->pending)
        return 0;
    if (rf->pending_need == 4)
        return damage(rf, rf->off, "truncated: the file ends inside a size prefix (%llu of 4 bytes)%s",
                      (unsigned long long)rf->pending, unfinished_note(rf));
    return damage(rf, rf->off, "truncated: the file ends %llu bytes into a message of %llu bytes%s",
                  (unsigned long long)rf->pending, (unsigned long long)rf->pending_need, unfinished_note(rf));
}

int pt_recfile_ended(pt_recfile_t *rf)
{
    if (!rf)
        return 0;
    if (rf->ended)
        return 1;
    if (!rf->header_done)
        return 0;
    uint8_t f[4];
    if (pread(rf->fd, f, 4, 12) == 4)
        rf->flags = le32(f);
    return (rf->flags & PT_RECFILE_FLAG_FINISHED) != 0;
}

uint32_t pt_recfile_last_state(const pt_recfile_t *rf) { return rf ? rf->last_state : 0; }
int pt_recfile_header_read(const pt_recfile_t *rf) { return rf ? rf->header_done : 0; }
uint32_t pt_recfile_flags(const pt_recfile_t *rf) { return rf ? rf->flags : 0; }
uint16_t pt_recfile_format_minor(const pt_recfile_t *rf) { return rf ? rf->minor : 0; }
uint64_t pt_recfile_offset(const pt_recfile_t *rf) { return rf ? rf->off : 0; }
uint64_t pt_recfile_messages(const pt_recfile_t *rf) { return rf ? rf->messages : 0; }
uint64_t pt_recfile_events(const pt_recfile_t *rf) { return rf ? rf->events : 0; }
const char *pt_recfile_error(const pt_recfile_t *rf) { return rf ? rf->err : ""; }
const char *pt_recfile_error_reason(const pt_recfile_t *rf)
{
    return !rf ? "" : rf->reason && rf->damaged ? rf->reason : rf->err;
}
uint16_t pt_recfile_format_major(const pt_recfile_t *rf) { return rf ? rf->major : 0; }
uint64_t pt_recfile_compressed_chunks(const pt_recfile_t *rf) { return rf ? rf->compressed_chunks : 0; }
int64_t pt_recfile_error_offset(const pt_recfile_t *rf) { return rf ? rf->err_off : -1; }

uint64_t pt_recfile_file_size(const pt_recfile_t *rf)
{
    struct stat st;
    if (!rf || fstat(rf->fd, &st) != 0 || st.st_size < 0)
        return 0;
    return (uint64_t)st.st_size;
}

/* ---- writing ------------------------------------------------------------ */

struct pt_recwriter {
    int fd;
    int compress, level;
    uint32_t flags;
    size_t buffer_bytes;
    uint8_t *buf; /* bytes appended after `committed` */
    size_t have, cap;
    pt_recwriter_stats_t st, at_commit; /* now, and what the file holds */
    ZSTD_CCtx *cctx;
    uint8_t *planes, *frame; /* compression scratch */
    size_t planes_cap, frame_cap;
    /* the loss slot: a ProducerStatus with unrecorded_* after the first untagged
     * ProcessInfo, rewritten in place (pwrite) once a write failed */
    int want_slot;             /* pt_recwriter_keep_loss_slot */
    uint64_t slot_at;          /* its file offset; 0: none */
    int fail_errno;            /* the first failed write's errno; 0: none */
    uint64_t slot_events, slot_messages; /* what the slot on file says */
};

static int write_slot(pt_recwriter_t *w);

static int put(pt_recwriter_t *w, const uint8_t *bytes, size_t n)
{
    const size_t padded = (n + 7) & ~(size_t)7;
    if (reserve(&w->buf, &w->cap, w->have + padded) < 0)
        return -ENOMEM;
    memcpy(w->buf + w->have, bytes, n);
    memset(w->buf + w->have + n, 0, padded - n);
    w->have += padded;
    w->st.bytes_written += padded;
    return 0;
}

int pt_recwriter_open(int fd, uint32_t flags, int compress, int level, size_t buffer_bytes, pt_recwriter_t **out)
{
    if (fd < 0 || !out)
        return -EINVAL;
    *out = NULL;
    pt_recwriter_t *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    w->fd = fd;
    w->compress = compress != 0;
    w->level = level;
    w->flags = flags;
    w->buffer_bytes = buffer_bytes ? buffer_bytes : (1u << 20);
    if (w->compress) {
        /* the frame carries its content size and a checksum of it: a damaged
         * frame is detected, never decompressed into wrong events */
        if (!(w->cctx = ZSTD_createCCtx()) || ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, level)) ||
            ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1)) ||
            ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_contentSizeFlag, 1))) {
            ZSTD_freeCCtx(w->cctx);
            free(w);
            return -EINVAL;
        }
    }
    uint8_t h[PT_RECFILE_HEADER_BYTES] = {'P', 'Y', 'T', 'R', 'R', 'E', 'C', 0};
    const uint16_t major = w->compress ? PT_RECFILE_FORMAT_MAJOR : PT_RECFILE_FORMAT_MAJOR_PLAIN;
    h[8] = (uint8_t)major;
    h[9] = (uint8_t)(major >> 8);
    h[10] = (uint8_t)PT_RECFILE_FORMAT_MINOR;
    h[11] = (uint8_t)(PT_RECFILE_FORMAT_MINOR >> 8);
    if (put(w, h, sizeof h) < 0) {
        pt_recwriter_free(w);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < 4; i++)
        w->buf[12 + i] = (uint8_t)(flags >> (8 * i));
    w->st.plain_bytes = w->st.bytes_written;
    *out = w;
    return 0;
}

void pt_recwriter_free(pt_recwriter_t *w)
{
    if (!w)
        return;
    ZSTD_freeCCtx(w->cctx);
    free(w->buf);
    free(w->planes);
    free(w->frame);
    free(w);
}

/* The ZstdDeltaShuffle transform (undone by unshuffle; see SHUFFLE_BLOCK). */
static void shuffle(const uint8_t *records, uint8_t *planes, uint32_t count)
{
    uint8_t blk[16][SHUFFLE_BLOCK];
    uint64_t prev = 0;
    for (uint32_t i = 0; i < count; i += SHUFFLE_BLOCK) {
        const uint32_t n = count - i < SHUFFLE_BLOCK ? count - i : SHUFFLE_BLOCK;
        for (uint32_t j = 0; j < n; j++) {
            const uint8_t *rec = records + (size_t)16 * (i + j);
            uint64_t ticks = 0;
            for (unsigned k = 0; k < 8; k++)
                ticks |= (uint64_t)rec[k] << (8 * k);
            const uint64_t delta = ticks - prev;
            prev = ticks;
            for (unsigned k = 0; k < 8; k++)
                blk[k][j] = (uint8_t)(delta >> (8 * k));
            for (unsigned k = 8; k < 16; k++)
                blk[k][j] = rec[k];
        }
        for (unsigned k = 0; k < 16; k++)
            memcpy(planes + (size_t)k * count + i, blk[k], n);
    }
}

/* Append the EventChunk msg (c parsed; plain_len bytes with padding) compressed,
 * if smaller. Only a chunk in the reader library's layout (pt_fb_chunk_header)
 * is compressed: the reader rebuilds that layout, so what it hands out is byte
 * for byte what was appended. 1: appended; 0: append it plain; <0: -ENOMEM. */
static int put_compressed(pt_recwriter_t *w, const uint8_t *msg, size_t len, const pt_fb_event_chunk_t *c,
                          uint32_t process, size_t plain_len)
{
    uint8_t canonical[PT_CHUNK_HEADER_BYTES + 8];
    const size_t tag_bytes = process ? 8 : 0; /* Message.process moves the body 8 bytes on */
    if (len != PT_CHUNK_HEADER_BYTES + tag_bytes + (size_t)c->count * sizeof(pt_event_t))
        return 0;
    if (process) {
        /* the header as pt_fb_tag writes it for this chunk: tag a 0-event header,
         * then set the size prefix (the vector length is in the body, unmoved) */
        uint8_t untagged[PT_CHUNK_HEADER_BYTES];
        pt_fb_chunk_header(untagged, c->thread, c->first_event, c->count, PT_CHUNK_HEADER_BYTES - 4);
        if (pt_fb_tag(canonical, sizeof canonical, untagged, sizeof untagged, process) != sizeof canonical)
            return 0;
        canonical[0] = (uint8_t)(len - 4);
        canonical[1] = (uint8_t)((len - 4) >> 8);
        canonical[2] = (uint8_t)((len - 4) >> 16);
        canonical[3] = (uint8_t)((len - 4) >> 24);
    } else {
        pt_fb_chunk_header(canonical, c->thread, c->first_event, c->count, (uint32_t)(len - 4));
    }
    if (memcmp(canonical, msg, PT_CHUNK_HEADER_BYTES + tag_bytes) != 0)
        return 0;
    const size_t raw = (size_t)c->count * sizeof(pt_event_t);
    const size_t bound = ZSTD_compressBound(raw);
    if (reserve(&w->planes, &w->planes_cap, raw) < 0 || reserve(&w->frame, &w->frame_cap, bound) < 0)
        return -ENOMEM;
    shuffle((const uint8_t *)c->events, w->planes, c->count);
    const size_t n = ZSTD_compress2(w->cctx, w->frame, bound, w->planes, raw);
    if (ZSTD_isError(n) || n + 96 >= plain_len) /* 96: the CompressedChunk's own bytes, about */
        return 0;
    const pt_fb_compressed_chunk_t cc = {c->thread, c->first_event, c->count, PT_CODEC_ZSTD_DELTA_SHUFFLE,
                                         (uint32_t)raw, w->frame, (uint32_t)n};
    /* the message is about 100 bytes of FlatBuffer around the frame */
    if (reserve(&w->buf, &w->cap, w->have + 136 + n) < 0)
        return -ENOMEM;
    size_t out_len = pt_fb_build_compressed_chunk(w->buf + w->have, w->cap - w->have, &cc);
    if (out_len && process) /* the tag survives compression; the reader gives it back */
        out_len = pt_fb_tag(w->buf + w->have, w->cap - w->have, w->buf + w->have, out_len, process);
    if (!out_len || out_len >= plain_len)
        return 0;
    /* build_message pads to 8 with zeros already */
    w->have += out_len;
    w->st.bytes_written += out_len;
    w->st.compressed_chunks++;
    return 1;
}

int pt_recwriter_append(pt_recwriter_t *w, const uint8_t *msg, size_t len, char *why, size_t whylen)
{
    if (!w || !msg)
        return -EINVAL;
    if (why && whylen)
        why[0] = 0;
    if (len < 12 || len - 4 != pt_fb_message_size(msg, len) - 4 || len > PT_RECFILE_MAX_MESSAGE_BYTES + 4) {
        if (why && whylen) {
            if (len < 12)
                snprintf(why, whylen, "message of %zu bytes is too short", len);
            else
                snprintf(why, whylen, "size prefix %zu does not match the %zu-byte message",
                         pt_fb_message_size(msg, len) - 4, len);
        }
        return -EINVAL;
    }
    pt_fb_msg_t m;
    char reason[192] = "";
    if (pt_fb_parse(msg, len, &m, reason, sizeof reason)) {
        if (why && whylen)
            snprintf(why, whylen, "not a pytrace message: %s", reason);
        return -EINVAL;
    }
    if (m.type == PT_MSG_COMPRESSED_CHUNK) {
        if (why && whylen)
            snprintf(why, whylen, "a CompressedChunk is made by the writer, not appended");
        return -EINVAL;
    }
    if (w->fail_errno) {
        /* writing stopped at a failed write: counted, in the slot at the next flush */
        w->st.unrecorded_messages++;
        if (m.type == PT_MSG_EVENT_CHUNK)
            w->st.unrecorded_events += m.u.event_chunk.count;
        return 0;
    }
    const size_t padded = (len + 7) & ~(size_t)7;
    int r = 0;
    if (m.type == PT_MSG_EVENT_CHUNK) {
        const pt_fb_event_chunk_t *c = &m.u.event_chunk;
        const uint8_t *ev = (const uint8_t *)c->events;
        for (uint32_t i = 0; i < c->count; i++, ev += 16)
            if (ev[14] == PT_EV_LOST && !(ev[15] & PT_EVF_LOST_NO_RING)) /* dropped, not untraced */
                w->st.lost_events += (uint64_t)le32(ev + 8) | (uint64_t)le16(ev + 12) << 32;
        w->st.events += c->count;
        if (w->compress && c->count >= PT_RECFILE_COMPRESS_MIN_EVENTS)
            r = put_compressed(w, msg, len, c, m.process, padded);
    }
    if (r == 0)
        r = put(w, msg, len);
    if (r < 0)
        return r;
    w->st.plain_bytes += padded;
    w->st.messages++;
    if (w->want_slot && m.type == PT_MSG_PROCESS_INFO && !m.process && !w->slot_at) {
        /* the slot, right after the job's ProcessInfo: its bytes are on file from
         * the first flush, so a full disk later only overwrites them */
        uint8_t slot[256];
        const pt_fb_producer_status_t st = {.state = PT_STATE_RUNNING, .has_unrecorded = 1};
        size_t n = pt_fb_build_producer_status(slot, sizeof slot, &st);
        const uint64_t at = w->at_commit.committed + w->have;
        if (n && put(w, slot, n) == 0) {
            w->slot_at = at;
            w->st.plain_bytes += (n + 7) & ~(size_t)7;
            /* on file now, on its own: in a larger first batch, a full disk cut it
             * with the batch, and the file said INCOMPLETE with no count */
            return pt_recwriter_flush(w);
        }
    }
    if (w->have >= w->buffer_bytes)
        return pt_recwriter_flush(w);
    return 0;
}

/* Rewrite the slot with the counts now (same size: every field is present). */
static int write_slot(pt_recwriter_t *w)
{
    if (!w->slot_at || (w->slot_events == w->st.unrecorded_events && w->slot_messages == w->st.unrecorded_messages &&
                        w->slot_events + w->slot_messages != 0))
        return 0;
    uint8_t slot[256];
    const pt_fb_producer_status_t st = {.state = PT_STATE_RUNNING,
                                        .has_unrecorded = 1,
                                        .unrecorded_events = w->st.unrecorded_events,
                                        .unrecorded_messages = w->st.unrecorded_messages,
                                        .unrecorded_errno = (uint32_t)w->fail_errno};
    size_t n = pt_fb_build_producer_status(slot, sizeof slot, &st);
    if (!n || w->slot_at + n > w->st.committed)
        return -EINVAL;
    if (pwrite(w->fd, slot, n, (off_t)w->slot_at) != (ssize_t)n)
        return -errno;
    w->slot_events = st.unrecorded_events;
    w->slot_messages = st.unrecorded_messages;
    return 0;
}

void pt_recwriter_keep_loss_slot(pt_recwriter_t *w)
{
    if (w)
        w->want_slot = 1;
}

int pt_recwriter_flush(pt_recwriter_t *w)
{
    if (!w)
        return -EINVAL;
    if (w->fail_errno)
        return write_slot(w);
    size_t done = 0;
    while (done < w->have) {
        ssize_t n = pwrite(w->fd, w->buf + done, w->have - done, (off_t)(w->at_commit.committed + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : ENOSPC;
            /* cut back to the last whole message; what was buffered is gone */
            if (ftruncate(w->fd, (off_t)w->at_commit.committed) != 0) {
                /* nothing more to do: the reader reports the cut-short tail */
            }
            const uint64_t lost_messages = w->st.messages - w->at_commit.messages;
            const uint64_t lost_events = w->st.events - w->at_commit.events;
            const uint64_t unrec_m = w->st.unrecorded_messages, unrec_e = w->st.unrecorded_events;
            w->have = 0;
            w->st = w->at_commit;
            /* From now on nothing is written (a stream with a hole in the middle
             * would name symbols and threads it never had): the loss is counted
             * and said in the file itself, by overwriting bytes it already has. */
            w->st.unrecorded_messages = unrec_m + lost_messages;
            w->st.unrecorded_events = unrec_e + lost_events;
            w->fail_errno = e;
            w->st.write_errno = (uint32_t)e;
            if (w->slot_at >= w->st.committed)
                w->slot_at = 0; /* the slot itself was in the lost buffer */
            (void)pt_recwriter_set_flags(w, w->flags);
            (void)write_slot(w);
            return -e;
        }
        done += (size_t)n;
    }
    w->have = 0;
    w->st.committed += done;
    w->at_commit = w->st;
    return 0;
}

int pt_recwriter_set_flags(pt_recwriter_t *w, uint32_t flags)
{
    if (!w)
        return -EINVAL;
    if (w->fail_errno) /* a recording that lost messages is neither lossless nor complete */
        flags = (flags & ~PT_RECFILE_FLAG_LOSSLESS) | PT_RECFILE_FLAG_INCOMPLETE;
    w->flags = flags;
    uint8_t f[4] = {(uint8_t)flags, (uint8_t)(flags >> 8), (uint8_t)(flags >> 16), (uint8_t)(flags >> 24)};
    if (w->st.committed >= PT_RECFILE_HEADER_BYTES) {
        if (pwrite(w->fd, f, 4, 12) != 4)
            return -errno;
    } else if (w->have >= PT_RECFILE_HEADER_BYTES) {
        memcpy(w->buf + 12, f, 4);
    }
    return 0;
}

uint32_t pt_recwriter_flags(const pt_recwriter_t *w) { return w ? w->flags : 0; }

void pt_recwriter_stats(const pt_recwriter_t *w, pt_recwriter_stats_t *out)
{
    if (w && out)
        *out = w->st;
}

int pt_recwriter_close(pt_recwriter_t *w, int finished)
{
    if (!w)
        return -EINVAL;
    int r = pt_recwriter_flush(w);
    /* after a failed write the file is still closed normally: nothing more will
     * come, and the slot and INCOMPLETE say what is missing */
    if (finished && w->st.committed >= PT_RECFILE_HEADER_BYTES && (r == 0 || w->fail_errno)) {
        int f = pt_recwriter_set_flags(w, w->flags | PT_RECFILE_FLAG_FINISHED);
        if (r == 0)
            r = f;
    }
    return r;
}

/* ---- merge ---------------------------------------------------------------------- */

typedef struct merge_proc {
    uint32_t input, old_tag, new_tag;
} merge_proc_t;

/* The index of input's process tag in procs, or nprocs if it has none. */
static size_t merge_proc_find(const merge_proc_t *procs, size_t nprocs, size_t input, uint32_t tag)
{
    size_t k = 0;
    while (k < nprocs && !(procs[k].input == input && procs[k].old_tag == tag))
        k++;
    return k;
}

static void merge_note(pt_recmerge_input_t *in, const pt_recfile_t *rf)
{
    if (pt_recfile_error_offset(rf) >= 0) {
        in->damaged = 1;
        in->error_offset = pt_recfile_error_offset(rf);
        snprintf(in->error, sizeof in->error, "%s", pt_recfile_error_reason(rf));
    } else if (pt_recfile_error(rf)[0]) {
        snprintf(in->error, sizeof in->error, "%s", pt_recfile_error(rf));
    }
}

/* Read one input to its end (or its damage). */
static int merge_next(pt_recfile_t *rf, const uint8_t **msg, size_t *len, pt_fb_msg_t *m)
{
    int r = pt_recfile_next(rf, msg, len, m);
    if (r == 0 && !pt_recfile_pending(rf))
        return 0;
    if (r == 0) { /* an incomplete tail: nothing more will come */
        pt_recfile_finish(rf);
        return 0;
    }
    return r == -EBADMSG ? 0 : r;
}

int pt_recfile_merge(const char *const *inputs, size_t n, int out_fd, pt_recmerge_input_t *res,
                     pt_recwriter_stats_t *out_stats, char *err, size_t errlen)
{
    merge_proc_t *procs = NULL;
    size_t nprocs = 0, cap = 0;
    pt_recwriter_t *w = NULL;
    pt_recfile_t *rf = NULL;
    uint8_t *buf = NULL;
    size_t buf_cap = 0;
    int rc = 0;
    uint32_t lossless = 1;
    const uint8_t *msg; /* each input's messages, in both passes */
    size_t len;
    pt_fb_msg_t m;
    int r;
    if (err && errlen)
        err[0] = 0;
    if (!n)
        return -EINVAL;
    /* Pass 1: each input's processes and its clock shift (realtime - monotonic of its
     * first ProcessInfo: every process of one recording is of one machine). */
    for (size_t i = 0; i < n; i++) {
        pt_recmerge_input_t *in = &res[i];
        memset(in, 0, sizeof *in);
        in->error_offset = -1;
        if ((rc = pt_recfile_open(inputs[i], &rf, err, errlen)) != 0)
            goto out;
        while ((r = merge_next(rf, &msg, &len, &m)) == 1) {
            if (m.type != PT_MSG_PROCESS_INFO)
                continue;
            if (merge_proc_find(procs, nprocs, i, m.process) < nprocs)
                continue; /* a second ProcessInfo of one process: the first counts */
            if (pt_grow_size((void **)&procs, &cap, sizeof *procs, nprocs + 1, 16) < 0) {
                rc = -ENOMEM;
                goto out;
            }
            if (nprocs >= UINT32_MAX - 1) {
                rc = -E2BIG;
                goto out;
            }
            procs[nprocs] = (merge_proc_t){(uint32_t)i, m.process, (uint32_t)nprocs + 1};
            nprocs++;
            in->processes++;
            if (in->processes == 1) {
                in->have_realtime = m.u.process_info.base_realtime_ns != 0;
                in->realtime_ns = m.u.process_info.base_realtime_ns;
                in->clock_diff_ns = (int64_t)(m.u.process_info.base_realtime_ns - m.u.process_info.base_monotonic_ns);
            }
        }
        if (r < 0) {
            rc = r;
            snprintf(err, errlen, "%s: %s", inputs[i], pt_recfile_error(rf));
            goto out;
        }
        if (!(pt_recfile_flags(rf) & PT_RECFILE_FLAG_LOSSLESS))
            lossless = 0;
        pt_recfile_close(rf);
        rf = NULL;
    }
    /* The reference: the input that started first by the wall clock. */
    size_t ref = n;
    for (size_t i = 0; i < n; i++)
        if (res[i].have_realtime && (ref == n || res[i].realtime_ns < res[ref].realtime_ns))
            ref = i;
    for (size_t i = 0; i < n; i++)
        res[i].shift_ns = ref < n && res[i].have_realtime ? res[i].clock_diff_ns - res[ref].clock_diff_ns : 0;
    if ((rc = pt_recwriter_open(out_fd, lossless ? PT_RECFILE_FLAG_LOSSLESS : 0, 1, PT_RECFILE_DEFAULT_LEVEL,
                                4u << 20, &w)) != 0)
        goto out;
    /* Pass 2: every message, re-tagged; each ProcessInfo on the common axis. */
    for (size_t i = 0; i < n; i++) {
        pt_recmerge_input_t *in = &res[i];
        if ((rc = pt_recfile_open(inputs[i], &rf, err, errlen)) != 0)
            goto out;
        while ((r = merge_next(rf, &msg, &len, &m)) == 1) {
            size_t k = merge_proc_find(procs, nprocs, i, m.process);
            if (k == nprocs) { /* a message before (or without) its process's ProcessInfo */
                in->orphans++;
                continue;
            }
            if (m.type == PT_MSG_PROCESS_INFO) {
                int64_t mono = (int64_t)m.u.process_info.base_monotonic_ns + in->shift_ns;
                if (mono < 0) {
                    in->clamped++;
                    mono = 0;
                }
                m.u.process_info.base_monotonic_ns = (uint64_t)mono;
            }
            m.process = procs[k].new_tag;
            if (reserve(&buf, &buf_cap, len + 64 + 4096) < 0) {
                rc = -ENOMEM;
                goto out;
            }
            size_t out_len = 0;
            if (m.type != PT_MSG_PROCESS_INFO && len % 8 == 0 && len <= buf_cap)
                out_len = pt_fb_tag(buf, buf_cap, msg, len, m.process); /* the same bytes, tagged */
            if (!out_len)
                out_len = pt_fb_build(buf, buf_cap, &m);
            if (!out_len) {
                rc = -EOVERFLOW;
                snprintf(err, errlen, "%s: a message of %zu bytes could not be rebuilt", inputs[i], len);
                goto out;
            }
            char why[256];
            if ((rc = pt_recwriter_append(w, buf, out_len, why, sizeof why)) != 0) {
                if (rc == -EINVAL)
                    snprintf(err, errlen, "%s: %s", inputs[i], why);
                goto out;
            }
            in->messages++;
            if (m.type == PT_MSG_EVENT_CHUNK)
                in->events += m.u.event_chunk.count;
        }
        if (r < 0) {
            rc = r;
            snprintf(err, errlen, "%s: %s", inputs[i], pt_recfile_error(rf));
            goto out;
        }
        merge_note(in, rf);
        pt_recfile_close(rf);
        rf = NULL;
    }
    rc = pt_recwriter_close(w, 1);
out:
    if (w && out_stats)
        pt_recwriter_stats(w, out_stats);
    pt_recwriter_free(w);
    pt_recfile_close(rf);
    free(procs);
    free(buf);
    return rc;
}
