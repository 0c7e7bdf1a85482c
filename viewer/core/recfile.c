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
    snprintf(rf->err, sizeof rf->err, "damaged at byte offset %llu: %s", (unsigned long long)offset, why);
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
    if (need > rf->cap) {
        size_t cap = rf->cap ? rf->cap : INITIAL_CAP;
        while (cap < need)
            cap *= 2;
        uint8_t *nb = realloc(rf->buf, cap);
        if (!nb)
            return -ENOMEM;
        rf->buf = nb;
        rf->cap = cap;
    }
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
    if (n >= 10 && le16(h + 8) != PT_RECFILE_FORMAT_MAJOR)
        return damage(rf, 8, "unsupported recording format %u.%u (this pytrace-top reads %u.x)", le16(h + 8),
                      n >= 12 ? le16(h + 10) : 0, PT_RECFILE_FORMAT_MAJOR);
    if (!r) {
        rf->pending = n;
        rf->pending_need = PT_RECFILE_HEADER_BYTES;
        return 0;
    }
    rf->minor = le16(h + 10);
    rf->flags = le32(h + 12);
    rf->header_done = 1;
    rf->off = PT_RECFILE_HEADER_BYTES;
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
    if (m.type == PT_MSG_PRODUCER_STATUS) {
        rf->last_state = m.u.producer_status.state;
        if (rf->last_state == PT_STATE_EXITED || rf->last_state == PT_STATE_DEAD)
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
        return damage(rf, rf->off, "truncated: the file ends inside a size prefix (%llu of 4 bytes)",
                      (unsigned long long)rf->pending);
    return damage(rf, rf->off, "truncated: the file ends %llu bytes into a message of %llu bytes",
                  (unsigned long long)rf->pending, (unsigned long long)rf->pending_need);
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
int64_t pt_recfile_error_offset(const pt_recfile_t *rf) { return rf ? rf->err_off : -1; }

uint64_t pt_recfile_file_size(const pt_recfile_t *rf)
{
    struct stat st;
    if (!rf || fstat(rf->fd, &st) != 0 || st.st_size < 0)
        return 0;
    return (uint64_t)st.st_size;
}
