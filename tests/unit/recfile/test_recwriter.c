/*
 * pt_recwriter and compressed chunks (format 2.0): a recording written with
 * compression reads back message for message byte-identical to what was
 * appended; small chunks stay plain; a compressed chunk whose zstd frame is
 * damaged, or whose sizes lie, is damage at its own offset with everything
 * before it handed out; a compressed file cut at every offset reads as a
 * prefix; every byte flipped never crashes (this test runs under ASan+UBSan);
 * a write that fails part way (RLIMIT_FSIZE) cuts the file back to whole
 * messages.
 */
#include "../check.h"
#include "viewer/core/recfile.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_MSGS 64
#define BIG_EVENTS 3000

typedef struct msgs {
    size_t n;
    uint8_t *buf[MAX_MSGS];
    size_t len[MAX_MSGS];
} msgs_t;

static char path[512];

static pt_fb_str_t str(const char *s) { return (pt_fb_str_t){s, (uint32_t)strlen(s)}; }

static void add(msgs_t *m, const uint8_t *bytes, size_t len)
{
    REQUIRE(m->n < MAX_MSGS && len > 0);
    m->buf[m->n] = malloc(len);
    REQUIRE(m->buf[m->n]);
    memcpy(m->buf[m->n], bytes, len);
    m->len[m->n++] = len;
}

static void free_msgs(msgs_t *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->buf[i]);
    m->n = 0;
}

/* A recording as the reader hands it out: big chunks of a call-heavy thread
 * (they compress), a small one (stays plain), a Lost record. */
static void sample(msgs_t *m)
{
    static uint8_t scratch[PT_CHUNK_HEADER_BYTES + 16 * BIG_EVENTS];
    static pt_event_t ev[BIG_EVENTS];
    pt_fb_process_info_t pi = {.pid = 7, .command_line = str("python busy.py"), .python_version = str("3.12.1"),
                               .segment = str("/pytrace-7-0"), .abi_major = 1, .ticks_per_second = 1000000000ull,
                               .ring_count = 4, .ring_capacity_events = 4096, .drop_policy = 0};
    add(m, scratch, pt_fb_build_process_info(scratch, sizeof scratch, &pi));
    for (uint32_t i = 1; i <= 3; i++) {
        pt_fb_symbol_t s = {.id = i, .name = str(i == 1 ? "main" : "work"), .file = str("busy.py"), .line = i};
        add(m, scratch, pt_fb_build_symbol(scratch, sizeof scratch, &s));
    }
    pt_fb_thread_start_t ts = {.thread = 1, .os_tid = 99, .name = str("MainThread"), .ticks = 5};
    add(m, scratch, pt_fb_build_thread_start(scratch, sizeof scratch, &ts));
    uint64_t t = 1000000, first = 0, seed = 12345;
    for (int chunk = 0; chunk < 4; chunk++) {
        for (uint32_t i = 0; i < BIG_EVENTS; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            t += 20 + (seed >> 59);
            ev[i] = (pt_event_t){.ticks = t, .id = 2 + (uint32_t)((seed >> 40) & 1),
                                 .kind = (uint8_t)((i & 1) ? PT_EV_RETURN : PT_EV_CALL)};
        }
        if (chunk == 2) /* a gap: 70000 + (3 << 32) events dropped */
            ev[100] = (pt_event_t){.ticks = t, .id = 70000, .aux = 3, .kind = PT_EV_LOST};
        add(m, scratch, pt_fb_build_event_chunk(scratch, sizeof scratch, 1, first, ev, BIG_EVENTS));
        first += BIG_EVENTS;
    }
    add(m, scratch, pt_fb_build_event_chunk(scratch, sizeof scratch, 1, first, ev, 5)); /* small: plain */
    pt_fb_thread_end_t te = {.thread = 1, .ticks = t, .events_written = first + 5};
    add(m, scratch, pt_fb_build_thread_end(scratch, sizeof scratch, &te));
    pt_fb_producer_status_t ps = {.state = PT_STATE_EXITED, .events_written = first + 5};
    add(m, scratch, pt_fb_build_producer_status(scratch, sizeof scratch, &ps));
}

static int open_out(void)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    return fd;
}

/* Write m with compression; return the writer's stats. */
static pt_recwriter_stats_t write_msgs(const msgs_t *m, int compress)
{
    int fd = open_out();
    pt_recwriter_t *w = NULL;
    REQUIRE(pt_recwriter_open(fd, PT_RECFILE_FLAG_LOSSLESS, compress, PT_RECFILE_DEFAULT_LEVEL, 1 << 16, &w) == 0);
    char why[200];
    for (size_t i = 0; i < m->n; i++)
        CHECK_EQ(pt_recwriter_append(w, m->buf[i], m->len[i], why, sizeof why), 0);
    CHECK_EQ(pt_recwriter_close(w, 1), 0);
    pt_recwriter_stats_t st;
    pt_recwriter_stats(w, &st);
    pt_recwriter_free(w);
    close(fd);
    return st;
}

static uint8_t *slurp(size_t *len)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    REQUIRE(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void put_file(const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(fwrite(b, 1, len, f) == len);
    fclose(f);
}

typedef struct got {
    int rc;
    size_t count, intact;
    uint64_t offsets[MAX_MSGS + 1]; /* file offset of each message read */
} got_t;

static got_t read_back(const msgs_t *m)
{
    got_t g = {0};
    pt_recfile_t *rf = NULL;
    char err[256];
    REQUIRE(pt_recfile_open(path, &rf, err, sizeof err) == 0);
    int intact = 1;
    for (;;) {
        const uint8_t *msg;
        size_t len;
        pt_fb_msg_t d;
        uint64_t off = pt_recfile_offset(rf);
        if (off < PT_RECFILE_HEADER_BYTES) /* before the header is read */
            off = PT_RECFILE_HEADER_BYTES;
        int rc = pt_recfile_next(rf, &msg, &len, &d);
        if (rc <= 0) {
            g.rc = rc ? rc : pt_recfile_finish(rf);
            break;
        }
        CHECK(((uintptr_t)msg & 7) == 0);
        if (g.count <= MAX_MSGS)
            g.offsets[g.count] = off;
        if (intact && g.count < m->n && len == m->len[g.count] && !memcmp(msg, m->buf[g.count], len))
            g.intact++;
        else
            intact = 0;
        g.count++;
    }
    if (g.rc == -EBADMSG)
        g.offsets[MAX_MSGS] = (uint64_t)pt_recfile_error_offset(rf);
    pt_recfile_close(rf);
    return g;
}

static void test_round_trip(void)
{
    msgs_t m = {0};
    sample(&m);
    pt_recwriter_stats_t plain = write_msgs(&m, 0);
    size_t plain_len;
    uint8_t *pb = slurp(&plain_len);
    CHECK_EQ(plain_len, plain.committed);
    CHECK_EQ(pb[8], 1); /* format 1.0 without compression */
    free(pb);
    got_t g = read_back(&m);
    CHECK_EQ(g.rc, 0);
    CHECK_EQ(g.intact, m.n);

    pt_recwriter_stats_t st = write_msgs(&m, 1);
    size_t len;
    uint8_t *b = slurp(&len);
    CHECK_EQ(len, st.committed);
    CHECK_EQ(b[8], 2); /* format 2.0 */
    CHECK_EQ(b[12], PT_RECFILE_FLAG_LOSSLESS | PT_RECFILE_FLAG_FINISHED);
    CHECK_EQ(st.compressed_chunks, 4); /* the four big chunks, not the 5-event one */
    CHECK_EQ(st.events, 4 * BIG_EVENTS + 5);
    CHECK_EQ(st.lost_events, 70000 + (3ull << 32));
    CHECK_EQ(st.plain_bytes, plain.committed);
    CHECKF(len * 4 < plain_len, "compressed %zu bytes, plain %zu", len, plain_len);
    free(b);
    g = read_back(&m);
    CHECK_EQ(g.rc, 0);
    CHECK_EQ(g.count, m.n);
    CHECK_EQ(g.intact, m.n);
    free_msgs(&m);
}

/* Index of the first compressed chunk message in the file and its offset. */
static size_t find_compressed(const uint8_t *b, size_t len, size_t *body)
{
    size_t off = 16;
    while (off + 4 <= len) {
        uint32_t size = (uint32_t)b[off] | (uint32_t)b[off + 1] << 8 | (uint32_t)b[off + 2] << 16 |
                        (uint32_t)b[off + 3] << 24;
        pt_fb_msg_t d;
        if (pt_fb_parse(b + off, 4 + (size_t)size, &d, NULL, 0) == 0 && d.type == PT_MSG_COMPRESSED_CHUNK) {
            *body = (size_t)(d.u.compressed_chunk.data - b);
            return off;
        }
        off += (4 + (size_t)size + 7) & ~(size_t)7;
    }
    REQUIRE(0);
    return 0;
}

static void expect_damage_at(const msgs_t *m, size_t at, size_t before, const char *what)
{
    pt_recfile_t *rf = NULL;
    char err[256];
    REQUIRE(pt_recfile_open(path, &rf, err, sizeof err) == 0);
    size_t n = 0;
    int rc;
    const uint8_t *msg;
    size_t len;
    while ((rc = pt_recfile_next(rf, &msg, &len, NULL)) == 1) {
        CHECK(n < m->n && len == m->len[n] && !memcmp(msg, m->buf[n], len));
        n++;
    }
    CHECKF(rc == -EBADMSG, "%s: rc %d", what, rc);
    CHECKF(n == before, "%s: %zu messages before the damage, expected %zu", what, n, before);
    CHECKF(pt_recfile_error_offset(rf) == (int64_t)at, "%s: damage at %lld, expected %zu (%s)", what,
           (long long)pt_recfile_error_offset(rf), at, pt_recfile_error(rf));
    CHECKF(strstr(pt_recfile_error_reason(rf), "compressed chunk") != NULL, "%s: %s", what,
           pt_recfile_error_reason(rf));
    pt_recfile_close(rf);
}

static void test_damaged_compressed_chunks(void)
{
    msgs_t m = {0};
    sample(&m);
    write_msgs(&m, 1);
    size_t len, data;
    uint8_t *good = slurp(&len);
    const size_t at = find_compressed(good, len, &data);
    const size_t before = 5; /* ProcessInfo, 3 symbols, ThreadStart */
    uint8_t *b = malloc(len);
    REQUIRE(b);
    pt_fb_msg_t d;
    REQUIRE(pt_fb_parse(good + at, 4 + (size_t)(good[at] | good[at + 1] << 8 | good[at + 2] << 16), &d, NULL, 0) == 0);
    const size_t data_len = d.u.compressed_chunk.data_len;

    /* not a zstd frame */
    memcpy(b, good, len);
    b[data] ^= 0xff;
    put_file(b, len);
    expect_damage_at(&m, at, before, "bad frame magic");

    /* the frame body damaged: zstd's checks (block sizes, the content size) catch it */
    memcpy(b, good, len);
    for (size_t i = data + data_len / 2; i < data + data_len / 2 + 8; i++)
        b[i] ^= 0x5a;
    put_file(b, len);
    expect_damage_at(&m, at, before, "damaged frame body");

    /* size lies: raw_bytes and count disagree */
    const size_t raw_field = (size_t)((const uint8_t *)&d.u.compressed_chunk.raw_bytes - (const uint8_t *)&d);
    (void)raw_field;
    {
        /* find raw_bytes in the message: the u32 equal to 16 * BIG_EVENTS after the count */
        memcpy(b, good, len);
        size_t pos = 0;
        for (size_t i = at; i + 4 <= data; i += 4) {
            uint32_t v = (uint32_t)b[i] | (uint32_t)b[i + 1] << 8 | (uint32_t)b[i + 2] << 16 | (uint32_t)b[i + 3] << 24;
            if (v == 16u * BIG_EVENTS)
                pos = i;
        }
        REQUIRE(pos);
        b[pos] += 16; /* one event more than the frame holds */
        put_file(b, len);
        expect_damage_at(&m, at, before, "raw_bytes lies");
        b[pos] -= 16;
        /* count lies too (16 * count == raw_bytes, but the frame is smaller) */
        for (size_t i = at; i + 4 <= data; i += 4) {
            uint32_t v = (uint32_t)b[i] | (uint32_t)b[i + 1] << 8 | (uint32_t)b[i + 2] << 16 | (uint32_t)b[i + 3] << 24;
            if (v == BIG_EVENTS) {
                b[i] += 1;
                break;
            }
        }
        put_file(b, len);
        expect_damage_at(&m, at, before, "count lies");
    }

    /* the frame cut short inside a message whose size prefix still fits: the
     * vector says fewer bytes than the frame needs */
    memcpy(b, good, len);
    {
        uint8_t *vlen = (uint8_t *)b + data - 4;
        uint32_t v = (uint32_t)vlen[0] | (uint32_t)vlen[1] << 8 | (uint32_t)vlen[2] << 16 | (uint32_t)vlen[3] << 24;
        v -= 5;
        vlen[0] = (uint8_t)v;
        vlen[1] = (uint8_t)(v >> 8);
        vlen[2] = (uint8_t)(v >> 16);
        vlen[3] = (uint8_t)(v >> 24);
    }
    put_file(b, len);
    expect_damage_at(&m, at, before, "frame cut short");

    /* every byte flipped: never a crash, never a wrong message handed out */
    for (size_t i = 16; i < len; i++) {
        memcpy(b, good, len);
        b[i] ^= 0x41;
        put_file(b, len);
        got_t g = read_back(&m);
        CHECKF(g.rc == 0 || g.rc == -EBADMSG, "flip at %zu: rc %d", i, g.rc);
        if (g.rc == 0) /* padding or a value that is not checked, e.g. in a string */
            CHECK(g.count == m.n);
        else
            CHECK(g.intact == g.count);
        if (i > 4096 && i < len - 4096)
            i += 251; /* the middle of the frames: a sample is enough */
    }
    free(b);
    free(good);
    free_msgs(&m);
}

static void test_truncated_compressed_file(void)
{
    msgs_t m = {0};
    sample(&m);
    write_msgs(&m, 1);
    size_t len;
    uint8_t *good = slurp(&len);
    got_t whole = read_back(&m);
    REQUIRE(whole.rc == 0 && whole.count == m.n);
    for (size_t cut = 0; cut < len; cut += (cut < 64 || len - cut < 64) ? 1 : 41) {
        put_file(good, cut);
        got_t g = read_back(&m);
        CHECK_EQ(g.intact, g.count); /* a prefix of the messages, each whole */
        REQUIRE(g.count <= m.n);
        const uint64_t next = g.count < m.n ? whole.offsets[g.count] : len;
        if (g.rc == 0) /* a clean end: at a message boundary (or in its padding) */
            CHECKF(cut == 16 ? g.count == 0 : (cut <= next && cut + 8 > next), "cut %zu: clean end after %zu", cut,
                   g.count);
        else {
            CHECKF(g.rc == -EBADMSG, "cut %zu: rc %d", cut, g.rc);
            /* the cut is reported at the message it cuts (or in the header) */
            CHECKF(cut < 16 ? g.offsets[MAX_MSGS] <= 16 : g.offsets[MAX_MSGS] == next && cut > next,
                   "cut %zu: damage at %llu, next message at %llu", cut, (unsigned long long)g.offsets[MAX_MSGS],
                   (unsigned long long)next);
        }
    }
    free(good);
    free_msgs(&m);
}

static void test_follow_a_compressed_file(void)
{
    /* a follower reads what is flushed, message by message, while the writer goes on */
    msgs_t m = {0};
    sample(&m);
    int fd = open_out();
    pt_recwriter_t *w = NULL;
    REQUIRE(pt_recwriter_open(fd, 0, 1, 1, 1 << 20, &w) == 0);
    pt_recfile_t *rf = NULL;
    char err[256];
    REQUIRE(pt_recfile_open(path, &rf, err, sizeof err) == 0);
    size_t got = 0;
    for (size_t i = 0; i < m.n; i++) {
        CHECK_EQ(pt_recwriter_append(w, m.buf[i], m.len[i], err, sizeof err), 0);
        const uint8_t *msg;
        size_t len;
        CHECK_EQ(pt_recfile_next(rf, &msg, &len, NULL), 0); /* buffered: nothing yet */
        CHECK_EQ(pt_recwriter_flush(w), 0);
        int rc = pt_recfile_next(rf, &msg, &len, NULL);
        CHECKF(rc == 1, "message %zu: rc %d %s", i, rc, pt_recfile_error(rf));
        if (rc == 1 && len == m.len[i] && !memcmp(msg, m.buf[i], len))
            got++;
    }
    CHECK_EQ(got, m.n);
    CHECK_EQ(pt_recfile_compressed_chunks(rf), 4);
    CHECK_EQ(pt_recfile_format_major(rf), 2);
    CHECK_EQ(pt_recfile_ended(rf), 1); /* the ProducerStatus Exited */
    pt_recfile_close(rf);
    pt_recwriter_free(w);
    close(fd);
    free_msgs(&m);
}

static void test_write_fails_part_way(void)
{
    /* RLIMIT_FSIZE makes a write past the limit fail (EFBIG) as a full disk would */
    msgs_t m = {0};
    sample(&m);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    int fd = open_out();
    pt_recwriter_t *w = NULL;
    REQUIRE(pt_recwriter_open(fd, 0, 0, 1, 1 << 20, &w) == 0); /* plain: sizes are known */
    char why[200];
    for (size_t i = 0; i < 5; i++)
        CHECK_EQ(pt_recwriter_append(w, m.buf[i], m.len[i], why, sizeof why), 0);
    CHECK_EQ(pt_recwriter_flush(w), 0);
    pt_recwriter_stats_t st0;
    pt_recwriter_stats(w, &st0);
    struct rlimit lim = old;
    lim.rlim_cur = st0.committed + 1000; /* the next chunk (48 KiB) does not fit */
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    CHECK_EQ(pt_recwriter_append(w, m.buf[5], m.len[5], why, sizeof why), 0);
    CHECK_EQ(pt_recwriter_flush(w), -EFBIG);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &old) == 0);
    pt_recwriter_stats_t st1;
    pt_recwriter_stats(w, &st1);
    CHECK_EQ(st1.committed, st0.committed);
    CHECK_EQ(st1.bytes_written, st0.committed);
    CHECK_EQ(st1.messages, 5);
    CHECK_EQ(st1.events, 0);
    struct stat sb;
    CHECK(fstat(fd, &sb) == 0 && (uint64_t)sb.st_size == st0.committed);
    pt_recwriter_free(w);
    close(fd);
    got_t g = read_back(&m);
    CHECK_EQ(g.rc, 0);
    CHECK_EQ(g.count, 6); /* the 5 whole messages, then the reader's loss trailer (INCOMPLETE) */
    CHECK_EQ(g.intact, 5);
    free_msgs(&m);
}

/* A full disk (RLIMIT_FSIZE as a stand-in) during a recording with the loss slot:
 * nothing more is written, every message given after is counted, and the file
 * itself says so -- the slot (rewritten in place, no byte added), INCOMPLETE set,
 * LOSSLESS cleared, FINISHED still set at close -- and the reader hands the counts
 * out as a last ProducerStatus. */
static void test_full_disk_loss_in_file(void)
{
    msgs_t m = {0};
    sample(&m);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    int fd = open_out();
    pt_recwriter_t *w = NULL;
    REQUIRE(pt_recwriter_open(fd, PT_RECFILE_FLAG_LOSSLESS, 0, 1, 1 << 20, &w) == 0);
    pt_recwriter_keep_loss_slot(w);
    char why[200];
    for (size_t i = 0; i < 5; i++) /* ProcessInfo (then the slot), symbols, ThreadStart */
        CHECK_EQ(pt_recwriter_append(w, m.buf[i], m.len[i], why, sizeof why), 0);
    CHECK_EQ(pt_recwriter_flush(w), 0);
    pt_recwriter_stats_t st0;
    pt_recwriter_stats(w, &st0);
    struct rlimit lim = old;
    lim.rlim_cur = st0.committed; /* not one byte more: the disk is full */
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    uint64_t given_events = 0;
    CHECK_EQ(pt_recwriter_append(w, m.buf[5], m.len[5], why, sizeof why), 0);
    given_events += BIG_EVENTS;
    CHECK_EQ(pt_recwriter_flush(w), -EFBIG);
    for (size_t i = 6; i < m.n; i++) { /* the rest: counted, not written, no error */
        CHECK_EQ(pt_recwriter_append(w, m.buf[i], m.len[i], why, sizeof why), 0);
        pt_fb_msg_t d;
        if (pt_fb_parse(m.buf[i], m.len[i], &d, NULL, 0) == 0 && d.type == PT_MSG_EVENT_CHUNK)
            given_events += d.u.event_chunk.count;
    }
    CHECK_EQ(pt_recwriter_set_flags(w, PT_RECFILE_FLAG_LOSSLESS), 0); /* cannot make it lossless again */
    CHECK_EQ(pt_recwriter_close(w, 1), 0);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &old) == 0);
    pt_recwriter_stats_t st;
    pt_recwriter_stats(w, &st);
    CHECK_EQ(st.unrecorded_messages, m.n - 5);
    CHECK_EQ(st.unrecorded_events, given_events);
    CHECK_EQ(st.write_errno, EFBIG);
    struct stat sb;
    CHECK(fstat(fd, &sb) == 0 && (uint64_t)sb.st_size == st0.committed);
    pt_recwriter_free(w);
    close(fd);

    pt_recfile_t *rf = NULL;
    char err[256];
    REQUIRE(pt_recfile_open(path, &rf, err, sizeof err) == 0);
    const uint8_t *msg;
    size_t len;
    pt_fb_msg_t d;
    uint32_t n = 0, statuses = 0;
    pt_fb_producer_status_t last = {0};
    int rc;
    while ((rc = pt_recfile_next(rf, &msg, &len, &d)) == 1) {
        n++;
        if (d.type == PT_MSG_PRODUCER_STATUS) {
            statuses++;
            last = d.u.producer_status;
        }
    }
    CHECK_EQ(rc, 0);
    CHECK_EQ(pt_recfile_finish(rf), 0);
    CHECK_EQ(n, 5 + 1 + 1);   /* 5 messages, the slot, the trailer */
    CHECK_EQ(statuses, 2);
    CHECK_EQ(pt_recfile_flags(rf), PT_RECFILE_FLAG_INCOMPLETE | PT_RECFILE_FLAG_FINISHED);
    CHECK_EQ(pt_recfile_format_minor(rf), PT_RECFILE_FORMAT_MINOR);
    CHECK(last.has_unrecorded);
    CHECK_EQ(last.unrecorded_events, given_events);
    CHECK_EQ(last.unrecorded_messages, m.n - 5);
    CHECK_EQ(last.unrecorded_errno, EFBIG);
    pt_fb_producer_status_t u;
    CHECK_EQ(pt_recfile_unrecorded(rf, &u), 1);
    CHECK_EQ(u.unrecorded_events, given_events);
    CHECK_EQ(pt_recfile_next(rf, &msg, &len, &d), 0); /* the trailer comes once */
    pt_recfile_close(rf);
    free_msgs(&m);
}

/* The disk fills at the first flush (a first batch larger than the room left): the
 * slot went out with that batch and was cut with it, so the file said INCOMPLETE
 * with no count at all (record on a tmpfs with 8 KiB free: 600,034 events lost,
 * every reader said 0). The slot is flushed with its ProcessInfo, on its own, so
 * whatever fails after it is counted in it. */
static void test_full_disk_at_first_flush(void)
{
    msgs_t m = {0};
    sample(&m);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    int fd = open_out();
    pt_recwriter_t *w = NULL;
    REQUIRE(pt_recwriter_open(fd, PT_RECFILE_FLAG_LOSSLESS, 0, 1, 1 << 20, &w) == 0);
    pt_recwriter_keep_loss_slot(w);
    CHECK_EQ(pt_recwriter_flush(w), 0); /* the header */
    struct rlimit lim = old;
    lim.rlim_cur = PT_RECFILE_HEADER_BYTES + 1024; /* room for the ProcessInfo and the slot */
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    char why[200];
    uint64_t given_events = 0;
    int failed = 0;
    for (size_t i = 0; i < m.n; i++) {
        const int r = pt_recwriter_append(w, m.buf[i], m.len[i], why, sizeof why);
        CHECK(r == 0 || (r == -EFBIG && !failed++));
        pt_fb_msg_t d;
        if (pt_fb_parse(m.buf[i], m.len[i], &d, NULL, 0) == 0 && d.type == PT_MSG_EVENT_CHUNK)
            given_events += d.u.event_chunk.count;
    }
    const int closed = pt_recwriter_close(w, 1);
    CHECK(closed == 0 || (closed == -EFBIG && !failed));
    REQUIRE(setrlimit(RLIMIT_FSIZE, &old) == 0);
    pt_recwriter_free(w);
    close(fd);

    pt_recfile_t *rf = NULL;
    char err[256];
    REQUIRE(pt_recfile_open(path, &rf, err, sizeof err) == 0);
    const uint8_t *msg;
    size_t len;
    pt_fb_msg_t d;
    while (pt_recfile_next(rf, &msg, &len, &d) == 1) {
    }
    CHECK(pt_recfile_flags(rf) & PT_RECFILE_FLAG_INCOMPLETE);
    pt_fb_producer_status_t u = {0};
    CHECK_EQ(pt_recfile_unrecorded(rf, &u), 1);
    CHECK_EQ(u.unrecorded_events, given_events);
    CHECK_EQ(u.unrecorded_messages, m.n - 1); /* all but the ProcessInfo */
    CHECK_EQ(u.unrecorded_errno, EFBIG);
    pt_recfile_close(rf);
    free_msgs(&m);
}

static void test_rejects_non_messages(void)
{
    msgs_t m = {0};
    sample(&m);
    int fd = open_out();
    pt_recwriter_t *w = NULL;
    REQUIRE(pt_recwriter_open(fd, 0, 1, 1, 0, &w) == 0);
    char why[200] = "";
    uint8_t junk[64] = {0};
    CHECK_EQ(pt_recwriter_append(w, junk, 8, why, sizeof why), -EINVAL);
    CHECK(strstr(why, "too short") != NULL);
    memcpy(junk, m.buf[1], m.len[1] < 64 ? m.len[1] : 64);
    CHECK_EQ(pt_recwriter_append(w, junk, m.len[1] - 8, why, sizeof why), -EINVAL);
    CHECK(strstr(why, "size prefix") != NULL);
    memcpy(junk, m.buf[1], 64);
    junk[9] = 'X';
    CHECK_EQ(pt_recwriter_append(w, junk, m.len[1], why, sizeof why), -EINVAL);
    CHECK(strstr(why, "identifier") != NULL);
    pt_recwriter_stats_t st;
    pt_recwriter_stats(w, &st);
    CHECK_EQ(st.messages, 0);
    pt_recwriter_free(w);
    close(fd);
    free_msgs(&m);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/test_recwriter_%ld.pytrace", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    test_round_trip();
    test_damaged_compressed_chunks();
    test_truncated_compressed_file();
    test_follow_a_compressed_file();
    test_write_fails_part_way();
    test_full_disk_loss_in_file();
    test_full_disk_at_first_flush();
    test_rejects_non_messages();
    unlink(path);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("recwriter: all tests passed\n");
    return 0;
}
