/*
 * pt_recfile unit tests: recordings written here with the pt_fb builders, then
 * read back whole, truncated at every offset (and grown back, as a follower
 * sees a file being written), with every byte flipped, with damaged headers
 * and size prefixes, and with messages larger than the read cache.
 */
#include "../check.h"
#include "viewer/core/recfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* ---- building recordings ---------------------------------------------------- */

#define MAX_MSGS 64

typedef struct recording {
    uint8_t *bytes;
    size_t len, cap;
    size_t nmsg;
    size_t msg_off[MAX_MSGS];   /* file offset of each message */
    size_t msg_len[MAX_MSGS];   /* size prefix + 4 (no padding) */
    uint32_t msg_type[MAX_MSGS];
} recording_t;

static void rec_reserve(recording_t *r, size_t more)
{
    if (r->len + more <= r->cap)
        return;
    size_t cap = r->cap ? r->cap : 4096;
    while (cap < r->len + more)
        cap *= 2;
    r->bytes = realloc(r->bytes, cap);
    if (!r->bytes)
        abort();
    r->cap = cap;
}

static void rec_header(recording_t *r, uint16_t major, uint32_t flags)
{
    uint8_t h[16] = {'P', 'Y', 'T', 'R', 'R', 'E', 'C', 0, (uint8_t)major, (uint8_t)(major >> 8), 0, 0,
                     (uint8_t)flags, (uint8_t)(flags >> 8), (uint8_t)(flags >> 16), (uint8_t)(flags >> 24)};
    rec_reserve(r, 16);
    memcpy(r->bytes + r->len, h, 16);
    r->len += 16;
}

static void rec_append(recording_t *r, uint32_t type, const uint8_t *msg, size_t len)
{
    CHECK(len >= 12);
    CHECK(r->nmsg < MAX_MSGS);
    size_t padded = (len + 7) & ~(size_t)7;
    rec_reserve(r, padded);
    r->msg_off[r->nmsg] = r->len;
    r->msg_len[r->nmsg] = len;
    r->msg_type[r->nmsg] = type;
    r->nmsg++;
    memcpy(r->bytes + r->len, msg, len);
    memset(r->bytes + r->len + len, 0, padded - len);
    r->len += padded;
}

static uint8_t scratch[1 << 22];

static pt_fb_str_t str(const char *s) { return (pt_fb_str_t){s, (uint32_t)strlen(s)}; }

/* A small complete recording: ProcessInfo, symbols, a thread with events, and
 * its end. Sizes vary so that paddings of several lengths occur. */
static void rec_sample(recording_t *r, int end_state)
{
    rec_header(r, 1, 0x1);
    pt_fb_process_info_t pi = {.pid = 4242, .command_line = str("python work.py --n 3"),
                               .python_version = str("3.12.1"), .segment = str("/pytrace-4242-0"),
                               .abi_major = 1, .ticks_per_second = 1000000000ull, .ring_count = 4,
                               .ring_capacity_events = 4096, .drop_policy = 1};
    size_t n = pt_fb_build_process_info(scratch, sizeof scratch, &pi);
    rec_append(r, PT_MSG_PROCESS_INFO, scratch, n);
    const char *names[] = {"main", "work3", "work1", "a_rather_longer_qualified.<locals>.name"};
    for (uint32_t i = 0; i < 4; i++) {
        pt_fb_symbol_t s = {.id = i + 1, .kind = PT_SYM_PY_FUNCTION, .name = str(names[i]), .file = str("work.py"),
                            .line = 10 * (i + 1)};
        n = pt_fb_build_symbol(scratch, sizeof scratch, &s);
        rec_append(r, PT_MSG_SYMBOL, scratch, n);
    }
    pt_fb_thread_start_t ts = {.thread = 1, .ring = 0, .os_tid = 777, .name = str("MainThread"), .ticks = 100};
    n = pt_fb_build_thread_start(scratch, sizeof scratch, &ts);
    rec_append(r, PT_MSG_THREAD_START, scratch, n);
    pt_event_t ev[8];
    uint64_t t = 100;
    uint64_t first = 0;
    for (int chunk = 0; chunk < 3; chunk++) {
        int k = 0;
        ev[k++] = (pt_event_t){.ticks = t += 10, .id = 2, .kind = PT_EV_CALL};
        ev[k++] = (pt_event_t){.ticks = t += 30, .id = 2, .kind = PT_EV_RETURN};
        ev[k++] = (pt_event_t){.ticks = t += 1, .id = 3, .kind = PT_EV_CALL};
        ev[k++] = (pt_event_t){.ticks = t += 10, .id = 3, .kind = PT_EV_RETURN};
        n = pt_fb_build_event_chunk(scratch, sizeof scratch, 1, first, ev, (uint32_t)(k - chunk % 2));
        first += (uint64_t)(k - chunk % 2);
        rec_append(r, PT_MSG_EVENT_CHUNK, scratch, n);
    }
    pt_fb_lost_count_t lc = {.thread = 1, .dropped_total = 0};
    n = pt_fb_build_lost_count(scratch, sizeof scratch, &lc);
    rec_append(r, PT_MSG_LOST_COUNT, scratch, n);
    pt_fb_thread_end_t te = {.thread = 1, .ticks = t, .events_written = first};
    n = pt_fb_build_thread_end(scratch, sizeof scratch, &te);
    rec_append(r, PT_MSG_THREAD_END, scratch, n);
    pt_fb_producer_status_t ps = {.state = (uint8_t)end_state, .heartbeat_ns = 5, .events_written = first};
    n = pt_fb_build_producer_status(scratch, sizeof scratch, &ps);
    rec_append(r, PT_MSG_PRODUCER_STATUS, scratch, n);
}

/* ---- files ------------------------------------------------------------------ */

static char path[512];

static void write_file(const uint8_t *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK_EQ(fwrite(bytes, 1, len, f), len);
    fclose(f);
}

static void append_file(const uint8_t *bytes, size_t len)
{
    FILE *f = fopen(path, "ab");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK_EQ(fwrite(bytes, 1, len, f), len);
    fclose(f);
}

static pt_recfile_t *open_rf(void)
{
    pt_recfile_t *rf = NULL;
    char err[256] = "";
    int rc = pt_recfile_open(path, &rf, err, sizeof err);
    CHECK_EQ(rc, 0);
    if (rc)
        fprintf(stderr, "open: %s\n", err);
    return rf;
}

typedef struct read_result {
    int rc;            /* last pt_recfile_next result (0 or negative) */
    size_t count;      /* messages read */
    size_t intact;     /* leading messages byte-identical to the original */
} read_result_t;

/* Read until next() returns <= 0; compare with the original recording. */
static read_result_t read_all(pt_recfile_t *rf, const recording_t *orig, size_t already)
{
    read_result_t res = {0, already, already};
    int all_intact = 1;
    for (;;) {
        const uint8_t *msg = NULL;
        size_t len = 0;
        pt_fb_msg_t m;
        int rc = pt_recfile_next(rf, &msg, &len, &m);
        if (rc <= 0) {
            res.rc = rc;
            break;
        }
        CHECK(((uintptr_t)msg & 7) == 0);
        size_t i = res.count++;
        if (all_intact && i < orig->nmsg && len == orig->msg_len[i] &&
            !memcmp(msg, orig->bytes + orig->msg_off[i], len) && m.type == orig->msg_type[i])
            res.intact++;
        else
            all_intact = 0;
        if (res.count > 100000)
            break;
    }
    return res;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_whole_file(void)
{
    recording_t r = {0};
    rec_sample(&r, PT_STATE_EXITED);
    write_file(r.bytes, r.len);
    pt_recfile_t *rf = open_rf();
    read_result_t res = read_all(rf, &r, 0);
    CHECK_EQ(res.rc, 0);
    CHECK_EQ(res.count, r.nmsg);
    CHECK_EQ(res.intact, r.nmsg);
    CHECK_EQ(pt_recfile_pending(rf), 0);
    CHECK_EQ(pt_recfile_finish(rf), 0);
    CHECK_EQ(pt_recfile_ended(rf), 1);
    CHECK_EQ(pt_recfile_last_state(rf), PT_STATE_EXITED);
    CHECK_EQ(pt_recfile_flags(rf), PT_RECFILE_FLAG_LOSSLESS);
    CHECK_EQ(pt_recfile_offset(rf), r.len);
    CHECK_EQ(pt_recfile_file_size(rf), r.len);
    CHECK_EQ(pt_recfile_messages(rf), r.nmsg);
    CHECK_EQ(pt_recfile_events(rf), 4 + 3 + 4);
    CHECK_EQ(pt_recfile_error_offset(rf), -1);
    CHECK_EQ(pt_recfile_error(rf)[0], 0);
    pt_recfile_close(rf);
    free(r.bytes);
}

static void test_dead_ends_and_running_does_not(void)
{
    recording_t r = {0};
    rec_sample(&r, PT_STATE_DEAD);
    write_file(r.bytes, r.len);
    pt_recfile_t *rf = open_rf();
    read_all(rf, &r, 0);
    CHECK_EQ(pt_recfile_ended(rf), 1);
    CHECK_EQ(pt_recfile_last_state(rf), PT_STATE_DEAD);
    pt_recfile_close(rf);
    free(r.bytes);

    recording_t s = {0};
    rec_sample(&s, PT_STATE_RUNNING);
    write_file(s.bytes, s.len);
    rf = open_rf();
    read_result_t res = read_all(rf, &s, 0);
    CHECK_EQ(res.count, s.nmsg);
    CHECK_EQ(pt_recfile_ended(rf), 0);
    /* the writer closes the file: FINISHED flag set afterwards ends it */
    s.bytes[12] |= PT_RECFILE_FLAG_FINISHED;
    write_file(s.bytes, s.len);
    CHECK_EQ(pt_recfile_ended(rf), 1);
    CHECK(pt_recfile_flags(rf) & PT_RECFILE_FLAG_FINISHED);
    pt_recfile_close(rf);
    free(s.bytes);
}

/* Expected outcome of reading the first L bytes. */
static void expect_prefix(const recording_t *r, size_t L, size_t *count, size_t *next_off)
{
    size_t k = 0, off = 16;
    while (k < r->nmsg && r->msg_off[k] + r->msg_len[k] <= L) {
        off = r->msg_off[k] + ((r->msg_len[k] + 7) & ~(size_t)7);
        k++;
    }
    *count = k;
    *next_off = off;
}

static void test_truncated_at_every_offset(void)
{
    recording_t r = {0};
    rec_sample(&r, PT_STATE_EXITED);
    for (size_t L = 0; L < r.len; L++) {
        write_file(r.bytes, L);
        size_t want_count, next_off;
        expect_prefix(&r, L, &want_count, &next_off);
        int ends_exited = want_count == r.nmsg;

        /* not following: finish() makes the incomplete tail damage */
        pt_recfile_t *rf = open_rf();
        read_result_t res = read_all(rf, &r, 0);
        CHECK_EQ(res.rc, 0);
        CHECK_EQ(res.count, want_count);
        CHECK_EQ(res.intact, want_count);
        CHECK_EQ(pt_recfile_ended(rf), ends_exited);
        int rc = pt_recfile_finish(rf);
        if (L < 16) {
            CHECK_EQ(rc, -EBADMSG);
            CHECK_EQ(pt_recfile_error_offset(rf), (long long)L);
        } else if (L > next_off) {
            CHECK_EQ(pt_recfile_pending(rf), L - next_off);
            CHECK_EQ(rc, -EBADMSG);
            CHECK_EQ(pt_recfile_error_offset(rf), (long long)next_off);
            CHECK(strstr(pt_recfile_error(rf), "truncated") != NULL);
        } else {
            CHECK_EQ(rc, 0); /* a clean boundary, or only padding missing */
            CHECK_EQ(pt_recfile_pending(rf), 0);
        }
        if (rc) {
            char want[64];
            snprintf(want, sizeof want, "byte offset %lld", (long long)pt_recfile_error_offset(rf));
            CHECK(strstr(pt_recfile_error(rf), want) != NULL);
            CHECK_EQ(pt_recfile_next(rf, NULL, NULL, NULL), -EBADMSG); /* sticky */
        }
        pt_recfile_close(rf);

        /* following: the tail is "not written yet"; the rest arrives later */
        rf = open_rf();
        res = read_all(rf, &r, 0);
        CHECK_EQ(res.count, want_count);
        append_file(r.bytes + L, r.len - L);
        res = read_all(rf, &r, res.count);
        CHECK_EQ(res.rc, 0);
        CHECK_EQ(res.count, r.nmsg);
        CHECK_EQ(res.intact, r.nmsg);
        CHECK_EQ(pt_recfile_finish(rf), 0);
        CHECK_EQ(pt_recfile_ended(rf), 1);
        pt_recfile_close(rf);
    }
    free(r.bytes);
}

/* Index of the message holding file byte `at` (nmsg if none: header or padding). */
static size_t message_at(const recording_t *r, size_t at)
{
    for (size_t i = 0; i < r->nmsg; i++)
        if (at >= r->msg_off[i] && at < r->msg_off[i] + ((r->msg_len[i] + 7) & ~(size_t)7))
            return i;
    return r->nmsg;
}

static void test_flipped_bytes(void)
{
    recording_t r = {0};
    rec_sample(&r, PT_STATE_EXITED);
    uint8_t *copy = malloc(r.len);
    static const uint8_t patterns[] = {0xff, 0x01, 0x80};
    size_t damaged_runs = 0;
    for (size_t p = 0; p < sizeof patterns; p++) {
        for (size_t at = 0; at < r.len; at++) {
            memcpy(copy, r.bytes, r.len);
            copy[at] ^= patterns[p];
            write_file(copy, r.len);
            pt_recfile_t *rf = open_rf();
            read_result_t res = read_all(rf, &r, 0);
            int rc = res.rc ? res.rc : pt_recfile_finish(rf);
            size_t hit = message_at(&r, at);
            if (at < 8) { /* magic */
                CHECK_EQ(rc, -EBADMSG);
                CHECK_EQ(pt_recfile_error_offset(rf), 0);
                CHECK_EQ(res.count, 0);
            } else if (at < 10) { /* major version */
                CHECK_EQ(rc, -EBADMSG);
                CHECK_EQ(pt_recfile_error_offset(rf), 8);
                CHECK(strstr(pt_recfile_error(rf), "unsupported recording format") != NULL);
            } else if (at < 16) { /* minor and flags are not checked */
                CHECK_EQ(rc, 0);
                CHECK_EQ(res.intact, r.nmsg);
            } else {
                /* everything before the hit message is read, unchanged */
                CHECK(res.intact >= hit);
                if (rc) {
                    damaged_runs++;
                    CHECK_EQ(rc, -EBADMSG);
                    CHECK(pt_recfile_error_offset(rf) >= (long long)r.msg_off[hit]);
                    if (res.count == hit) /* damage found in the hit message itself */
                        CHECK_EQ(pt_recfile_error_offset(rf), (long long)r.msg_off[hit]);
                } else {
                    /* a flip the verifier cannot see: inside a string or a scalar, or
                     * a size prefix grown so that the message swallows the next ones
                     * (a FlatBuffer may carry trailing bytes) */
                    CHECK(res.count >= hit + 1 && res.count <= r.nmsg);
                }
                /* a flip in the identifier or the padding is always caught at that
                 * message (one in the size prefix may be absorbed by the padding) */
                size_t in_msg = at - r.msg_off[hit];
                if (in_msg >= r.msg_len[hit] || (in_msg >= 8 && in_msg < 12)) {
                    CHECK_EQ(rc, -EBADMSG);
                    CHECK_EQ(res.count, hit);
                    CHECK_EQ(pt_recfile_error_offset(rf), (long long)r.msg_off[hit]);
                }
            }
            pt_recfile_close(rf);
        }
    }
    CHECK(damaged_runs > r.len / 4);
    free(copy);
    free(r.bytes);
}

static void test_bad_headers(void)
{
    /* a file that is not a recording, shorter than a header: damage at once */
    write_file((const uint8_t *)"{\"x\"", 4);
    pt_recfile_t *rf = open_rf();
    CHECK_EQ(pt_recfile_next(rf, NULL, NULL, NULL), -EBADMSG);
    CHECK_EQ(pt_recfile_error_offset(rf), 0);
    CHECK(strstr(pt_recfile_error(rf), "bad magic") != NULL);
    pt_recfile_close(rf);

    /* the start of a header that is being written: wait */
    write_file((const uint8_t *)"PYTR", 4);
    rf = open_rf();
    CHECK_EQ(pt_recfile_next(rf, NULL, NULL, NULL), 0);
    CHECK_EQ(pt_recfile_pending(rf), 4);
    CHECK_EQ(pt_recfile_header_read(rf), 0);
    pt_recfile_close(rf);

    /* an empty file is not a recording once nothing more comes */
    write_file((const uint8_t *)"", 0);
    rf = open_rf();
    CHECK_EQ(pt_recfile_next(rf, NULL, NULL, NULL), 0);
    CHECK_EQ(pt_recfile_finish(rf), -EBADMSG);
    CHECK_EQ(pt_recfile_error_offset(rf), 0);
    pt_recfile_close(rf);

    /* major 3 is refused, minor 7 of major 1 is accepted */
    recording_t r = {0};
    rec_sample(&r, PT_STATE_EXITED);
    r.bytes[8] = 3;
    write_file(r.bytes, r.len);
    rf = open_rf();
    CHECK_EQ(pt_recfile_next(rf, NULL, NULL, NULL), -EBADMSG);
    CHECK_EQ(pt_recfile_error_offset(rf), 8);
    pt_recfile_close(rf);
    r.bytes[8] = 1;
    r.bytes[10] = 7;
    write_file(r.bytes, r.len);
    rf = open_rf();
    read_result_t res = read_all(rf, &r, 0);
    CHECK_EQ(res.count, r.nmsg);
    CHECK_EQ(pt_recfile_format_minor(rf), 7);
    pt_recfile_close(rf);

    /* opening a missing file fails with a message */
    char err[256] = "";
    pt_recfile_t *none = NULL;
    CHECK_EQ(pt_recfile_open("/nonexistent/dir/x.pytrace", &none, err, sizeof err), -ENOENT);
    CHECK(none == NULL);
    CHECK(strstr(err, "/nonexistent/dir/x.pytrace") != NULL);
    free(r.bytes);
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void test_bad_size_prefixes(void)
{
    recording_t r = {0};
    rec_sample(&r, PT_STATE_EXITED);
    const size_t victim = 3;
    static const uint32_t sizes[] = {0, 4, 7, 0xffffffffu, PT_RECFILE_MAX_MESSAGE_BYTES + 1};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        recording_t c = r;
        c.bytes = malloc(r.len);
        memcpy(c.bytes, r.bytes, r.len);
        put32(c.bytes + r.msg_off[victim], sizes[i]);
        write_file(c.bytes, c.len);
        pt_recfile_t *rf = open_rf();
        read_result_t res = read_all(rf, &r, 0);
        CHECK_EQ(res.rc, -EBADMSG);
        CHECK_EQ(res.count, victim);
        CHECK_EQ(pt_recfile_error_offset(rf), (long long)r.msg_off[victim]);
        CHECK(strstr(pt_recfile_error(rf), "implausible message size") != NULL);
        pt_recfile_close(rf);
        free(c.bytes);
    }
    /* a plausible size past the end of the file: truncation once finished */
    put32(r.bytes + r.msg_off[victim], 1u << 20);
    write_file(r.bytes, r.len);
    pt_recfile_t *rf = open_rf();
    read_result_t res = read_all(rf, &r, 0);
    CHECK_EQ(res.rc, 0);
    CHECK_EQ(res.count, victim);
    CHECK_EQ(pt_recfile_finish(rf), -EBADMSG);
    CHECK_EQ(pt_recfile_error_offset(rf), (long long)r.msg_off[victim]);
    pt_recfile_close(rf);
    free(r.bytes);
}

/* Messages larger than the read cache, and many messages across refills. */
static void test_large_messages(void)
{
    recording_t r = {0};
    rec_header(&r, 1, 0);
    enum { BIG = 150000 }; /* 2.4 MB: more than the initial 1 MiB cache */
    pt_event_t *ev = calloc(BIG, sizeof *ev);
    for (uint32_t i = 0; i < BIG; i++)
        ev[i] = (pt_event_t){.ticks = i + 1, .id = 1, .kind = (uint8_t)(i % 2 ? PT_EV_RETURN : PT_EV_CALL)};
    uint64_t events = 0;
    for (int round = 0; round < 40; round++) {
        uint32_t count = round % 10 == 3 ? BIG : (uint32_t)(round * 997 % 5000 + 1);
        size_t n = pt_fb_build_event_chunk(scratch, sizeof scratch, 1, events, ev, count);
        CHECK(n > 0);
        rec_append(&r, PT_MSG_EVENT_CHUNK, scratch, n);
        events += count;
    }
    write_file(r.bytes, r.len);
    pt_recfile_t *rf = open_rf();
    read_result_t res = read_all(rf, &r, 0);
    CHECK_EQ(res.rc, 0);
    CHECK_EQ(res.count, r.nmsg);
    CHECK_EQ(res.intact, r.nmsg);
    CHECK_EQ(pt_recfile_events(rf), events);
    CHECK_EQ(pt_recfile_finish(rf), 0);
    CHECK_EQ(pt_recfile_ended(rf), 0);
    pt_recfile_close(rf);
    free(ev);
    free(r.bytes);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/test_recfile_%ld.pytrace", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    test_whole_file();
    test_dead_ends_and_running_does_not();
    test_truncated_at_every_offset();
    test_flipped_bytes();
    test_bad_headers();
    test_bad_size_prefixes();
    test_large_messages();
    unlink(path);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("recfile: all tests passed\n");
    return 0;
}
