/*
 * tests/unit/schema: the C builder writes the bytes we derive by hand from the
 * FlatBuffers layout rules, round-trips through pt_fb_parse, and pt_fb_parse
 * survives hostile input (every truncation, random byte flips).
 *
 * Usage: test_schema [out-file]   (out-file receives one message of every type
 * with the known values below, for check_python.py)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "schema/pt_fb.h"


static pt_fb_str_t S(const char *s) { pt_fb_str_t r = {s, (uint32_t)strlen(s)}; return r; }

static int str_eq(pt_fb_str_t a, const char *b)
{
    return a.ptr && a.len == strlen(b) && memcmp(a.ptr, b, a.len) == 0 && a.ptr[a.len] == 0;
}

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, (uint16_t)v); put16(p + 2, (uint16_t)(v >> 16)); }
static void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }

static void dump_diff(const char *what, const uint8_t *got, const uint8_t *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "%s: byte %zu is 0x%02x, want 0x%02x\n", what, i, got[i], want[i]);
            failures++;
            return;
        }
}

/* Parse a copy in a buffer of exactly len bytes (so ASan sees any over-read). */
static int parse_exact(const uint8_t *msg, size_t len, pt_fb_msg_t *m, char *why, size_t whylen)
{
    uint8_t *copy = malloc(len ? len : 1);
    REQUIRE(copy);
    memcpy(copy, msg, len);
    int r = pt_fb_parse(copy, len, m, why, whylen);
    /* pointers in m point into copy: check sanity before freeing */
    if (r == 0) {
        const uint8_t *lo = copy, *hi = copy + len;
#define INSIDE(s) (!(s).ptr || ((const uint8_t *)(s).ptr >= lo && (const uint8_t *)(s).ptr + (s).len < hi && (s).ptr[(s).len] == 0))
        switch (m->type) {
        case PT_MSG_PROCESS_INFO:
            REQUIRE(INSIDE(m->u.process_info.command_line));
            REQUIRE(INSIDE(m->u.process_info.python_version));
            REQUIRE(INSIDE(m->u.process_info.segment));
            break;
        case PT_MSG_THREAD_START: REQUIRE(INSIDE(m->u.thread_start.name)); break;
        case PT_MSG_SYMBOL:
            REQUIRE(INSIDE(m->u.symbol.name));
            REQUIRE(INSIDE(m->u.symbol.file));
            REQUIRE(INSIDE(m->u.symbol.profile_name));
            break;
        case PT_MSG_EVENT_CHUNK:
            if (m->u.event_chunk.events) {
                const uint8_t *e = (const uint8_t *)m->u.event_chunk.events;
                REQUIRE(e >= lo && e + (size_t)m->u.event_chunk.count * 16 <= hi);
                volatile uint8_t sink = 0;
                for (uint32_t i = 0; i < m->u.event_chunk.count; i++)
                    sink ^= e[i * 16 + 14];
                (void)sink;
            } else {
                REQUIRE(m->u.event_chunk.count == 0);
            }
            break;
        case PT_MSG_COMPRESSED_CHUNK:
            if (m->u.compressed_chunk.data)
                REQUIRE(m->u.compressed_chunk.data >= lo &&
                        m->u.compressed_chunk.data + m->u.compressed_chunk.data_len <= hi);
            break;
        default:
            REQUIRE(m->type >= 1 && m->type <= PT_MSG_LAST);
            break;
        }
#undef INSIDE
    }
    free(copy);
    return r;
}

/* ---- golden bytes ------------------------------------------------------- */

/* shm/layout.h, PT_CHUNK_*: the 72-byte chunk header, byte for byte. */
static void test_chunk_header_golden(void)
{
    uint8_t want[72] = {0}, got[72];
    put32(want + 0, 72 + 16 * 3 - 4);
    put32(want + 4, 16);
    memcpy(want + 8, "PYTR", 4);
    put16(want + 12, 8);
    put16(want + 14, 12);
    put16(want + 16, 4);
    put16(want + 18, 8);
    put32(want + 20, 8);
    want[24] = 5;
    put32(want + 28, 16);
    put16(want + 32, 10);
    put16(want + 34, 24);
    put16(want + 36, 4);
    put16(want + 38, 12);
    put16(want + 40, 20);
    put16(want + 42, 0);
    put32(want + 44, 12);
    put64(want + 48, 0x1122334455667788ull);
    put64(want + 56, 0x0102030405060708ull);
    put32(want + 64, 4);
    put32(want + 68, 3);
    memset(got, 0xAA, sizeof got);
    pt_fb_chunk_header(got, 0x1122334455667788ull, 0x0102030405060708ull, 3, 72 + 16 * 3 - 4);
    dump_diff("chunk header", got, want, 72);
    CHECK(memcmp(got, want, 72) == 0);
    /* offsets named in layout.h */
    CHECK(PT_CHUNK_OFF_THREAD == 48 && PT_CHUNK_OFF_FIRST_EVENT == 56);
    CHECK(PT_CHUNK_OFF_LENGTH == 68 && PT_CHUNK_OFF_EVENTS == 72);

    /* the built chunk = header + raw little-endian events */
    pt_event_t ev[3] = {
        {0x0807060504030201ull, 0xdeadbeef, 0x1234, PT_EV_CALL, 0},
        {2, 7, 0, PT_EV_RETURN, PT_EVF_SYNTHETIC},
        {3, 0x01020304, 0xffff, PT_EV_LOST, 0},
    };
    uint8_t buf[72 + 48 + 8];
    size_t n = pt_fb_build_event_chunk(buf, sizeof buf, 0x1122334455667788ull,
                                       0x0102030405060708ull, ev, 3);
    CHECK(n == 72 + 48);
    dump_diff("event chunk header", buf, want, 72);
    uint8_t e0[16] = {1, 2, 3, 4, 5, 6, 7, 8, 0xef, 0xbe, 0xad, 0xde, 0x34, 0x12, 1, 0};
    dump_diff("event 0", buf + 72, e0, 16);
    CHECK(buf[72 + 16 + 14] == PT_EV_RETURN && buf[72 + 16 + 15] == PT_EVF_SYNTHETIC);
    CHECK(pt_fb_build_event_chunk(buf, 72 + 47, 1, 0, ev, 3) == 0); /* too small */

    pt_fb_msg_t m;
    char why[128];
    CHECK(parse_exact(buf, n, &m, why, sizeof why) == 0);
    CHECK(m.type == PT_MSG_EVENT_CHUNK);
    CHECK(m.u.event_chunk.thread == 0x1122334455667788ull);
    CHECK(m.u.event_chunk.first_event == 0x0102030405060708ull);
    CHECK(m.u.event_chunk.count == 3);
    CHECK(pt_fb_message_size(buf, n) == n);
}

/* ThreadEnd: four u64 fields.
 *   32 vtable {12, 36, 4, 12, 20, 28}; 44 table: soffset 12, u64 x4 at 48..80 */
static void test_thread_end_golden(void)
{
    uint8_t want[80] = {0}, got[96];
    put32(want + 0, 76);
    put32(want + 4, 16);
    memcpy(want + 8, "PYTR", 4);
    put16(want + 12, 8); put16(want + 14, 12); put16(want + 16, 4); put16(want + 18, 8);
    put32(want + 20, 8);
    want[24] = PT_MSG_THREAD_END;
    put32(want + 28, 16);
    put16(want + 32, 12); put16(want + 34, 36);
    put16(want + 36, 4); put16(want + 38, 12); put16(want + 40, 20); put16(want + 42, 28);
    put32(want + 44, 12);
    put64(want + 48, 9); put64(want + 56, 1000); put64(want + 64, 123456789012ull); put64(want + 72, 5);
    pt_fb_thread_end_t te = {9, 1000, 123456789012ull, 5};
    size_t n = pt_fb_build_thread_end(got, sizeof got, &te);
    CHECK(n == 80);
    dump_diff("ThreadEnd", got, want, 80);
    CHECK(pt_fb_build_thread_end(got, 79, &te) == 0);
}

/* Symbol{id 42, kind CFunction, name "f", file "a.py", line 7}:
 *   32 vtable {14, 21, id 4, kind 20, name 8, file 12, line 16}
 *   52 table soffset 20; 56 id; 60 name off 16; 64 file off 20; 68 line; 72 kind
 *   76 "f" (len 1); 84 "a.py" (len 4); total padded to 96 */
static void test_symbol_golden(void)
{
    uint8_t want[96] = {0}, got[128];
    put32(want + 0, 92);
    put32(want + 4, 16);
    memcpy(want + 8, "PYTR", 4);
    put16(want + 12, 8); put16(want + 14, 12); put16(want + 16, 4); put16(want + 18, 8);
    put32(want + 20, 8);
    want[24] = PT_MSG_SYMBOL;
    put32(want + 28, 52 - 28);
    put16(want + 32, 14); put16(want + 34, 21);
    put16(want + 36, 4); put16(want + 38, 20); put16(want + 40, 8); put16(want + 42, 12);
    put16(want + 44, 16);
    put32(want + 52, 20);
    put32(want + 56, 42);
    put32(want + 60, 16);
    put32(want + 64, 20);
    put32(want + 68, 7);
    want[72] = PT_SYM_C_FUNCTION;
    put32(want + 76, 1); want[80] = 'f';
    put32(want + 84, 4); memcpy(want + 88, "a.py", 4);
    pt_fb_symbol_t s = {42, PT_SYM_C_FUNCTION, S("f"), S("a.py"), 7, {NULL, 0}};
    size_t n = pt_fb_build_symbol(got, sizeof got, &s);
    CHECK(n == 96);
    dump_diff("Symbol", got, want, 96);

    /* absent strings: vtable entry 0, parsed as ptr NULL */
    pt_fb_symbol_t s2 = {1, 0, {NULL, 0}, S(""), 0, {NULL, 0}};
    n = pt_fb_build_symbol(got, sizeof got, &s2);
    REQUIRE(n > 0);
    pt_fb_msg_t m;
    CHECK(parse_exact(got, n, &m, NULL, 0) == 0);
    CHECK(m.u.symbol.name.ptr == NULL && m.u.symbol.file.ptr && m.u.symbol.file.len == 0);
    CHECK(m.u.symbol.profile_name.ptr == NULL);
}

/* The same Symbol with profile_name "<f>" (field 5, added at the end):
 *   32 vtable {16, 25, id 4, kind 24, name 8, file 12, line 16, profile_name 20}
 *   52 table soffset 20; 56 id; 60 name off 20; 64 file off 24; 68 line;
 *   72 profile_name off 28; 76 kind
 *   80 "f"; 88 "a.py"; 100 "<f>" (len 3); total padded to 112 */
/* ProcessInfo's role (field 15, added at the end): absent unless given (the
 * vtable then stops at drop_policy, as before the field), read back when given. */
static void test_process_info_role(void)
{
    uint8_t a[1024], b[1024];
    pt_fb_process_info_t pi = {.pid = 7, .ppid = 1, .command_line = S("python t.py"), .python_version = S("3.11"),
                               .segment = S("/pytrace-7-0"), .drop_policy = PT_POLICY_WAIT};
    size_t na = pt_fb_build_process_info(a, sizeof a, &pi);
    pi.role = S("ForkPoolWorker-3");
    size_t nb = pt_fb_build_process_info(b, sizeof b, &pi);
    REQUIRE(na > 0 && nb > na);
    pt_fb_msg_t m;
    CHECK(parse_exact(a, na, &m, NULL, 0) == 0 && parse_exact(b, nb, &m, NULL, 0) == 0);
    /* values: parsed in place (parse_exact's copy is gone) */
    CHECK(pt_fb_parse(a, na, &m, NULL, 0) == 0 && m.u.process_info.role.ptr == NULL);
    CHECK(pt_fb_parse(b, nb, &m, NULL, 0) == 0 && str_eq(m.u.process_info.role, "ForkPoolWorker-3") &&
          m.u.process_info.pid == 7 && m.u.process_info.drop_policy == PT_POLICY_WAIT &&
          str_eq(m.u.process_info.command_line, "python t.py"));
}

static void test_symbol_profile_name_golden(void)
{
    uint8_t want[112] = {0}, got[128];
    put32(want + 0, 108);
    put32(want + 4, 16);
    memcpy(want + 8, "PYTR", 4);
    put16(want + 12, 8); put16(want + 14, 12); put16(want + 16, 4); put16(want + 18, 8);
    put32(want + 20, 8);
    want[24] = PT_MSG_SYMBOL;
    put32(want + 28, 52 - 28);
    put16(want + 32, 16); put16(want + 34, 25);
    put16(want + 36, 4); put16(want + 38, 24); put16(want + 40, 8); put16(want + 42, 12);
    put16(want + 44, 16); put16(want + 46, 20);
    put32(want + 52, 20);
    put32(want + 56, 42);
    put32(want + 60, 20);
    put32(want + 64, 24);
    put32(want + 68, 7);
    put32(want + 72, 28);
    want[76] = PT_SYM_C_FUNCTION;
    put32(want + 80, 1); want[84] = 'f';
    put32(want + 88, 4); memcpy(want + 92, "a.py", 4);
    put32(want + 100, 3); memcpy(want + 104, "<f>", 3);
    pt_fb_symbol_t s = {42, PT_SYM_C_FUNCTION, S("f"), S("a.py"), 7, S("<f>")};
    size_t n = pt_fb_build_symbol(got, sizeof got, &s);
    CHECK(n == 112);
    dump_diff("Symbol with profile_name", got, want, 112);
    CHECK(pt_fb_build_symbol(got, 111, &s) == 0);
    pt_fb_msg_t m;
    CHECK(parse_exact(got, n, &m, NULL, 0) == 0);
    /* in place: m's strings point into the buffer parsed */
    CHECK(pt_fb_parse(got, n, &m, NULL, 0) == 0);
    CHECK(m.type == PT_MSG_SYMBOL && str_eq(m.u.symbol.profile_name, "<f>") && str_eq(m.u.symbol.name, "f"));
    /* the 5-field form (before the field existed) parses with the field absent */
    pt_fb_symbol_t old = {42, PT_SYM_C_FUNCTION, S("f"), S("a.py"), 7, {NULL, 0}};
    n = pt_fb_build_symbol(got, sizeof got, &old);
    CHECK(n == 96 && parse_exact(got, n, &m, NULL, 0) == 0 && m.u.symbol.profile_name.ptr == NULL);
    /* an empty profile name is present, not absent */
    pt_fb_symbol_t empty = {42, PT_SYM_C_FUNCTION, S("f"), S("a.py"), 7, S("")};
    n = pt_fb_build_symbol(got, sizeof got, &empty);
    CHECK(n > 0 && pt_fb_parse(got, n, &m, NULL, 0) == 0 && m.u.symbol.profile_name.ptr != NULL &&
          m.u.symbol.profile_name.len == 0);
}

/* ---- every message type: known values, round trip ---------------------- */

#define N_EVENTS 5

typedef struct sample { uint8_t buf[1024]; size_t len; } sample_t;
#define NSAMPLES 12 /* 8: a CompressedChunk (recording files only); 9..11 tagged (Message.process) */

static pt_event_t sample_events[N_EVENTS];

static void make_samples(sample_t out[NSAMPLES])
{
    pt_fb_process_info_t pi = {
        .pid = 4242, .ppid = 1, .command_line = S("python3 -m app --x \"y\""),
        .python_version = S("3.11.2"), .segment = S("/pytrace-4242-0"),
        .abi_major = 1, .abi_minor = 0, .clock = PT_CLOCK_TSC, /* sample values (check_python.py) */
        .ticks_per_second = 2999999999ull, .base_ticks = 123456789ull,
        .base_monotonic_ns = 987654321ull, .base_realtime_ns = 1700000000123456789ull,
        .ring_count = 64, .ring_capacity_events = 131040, .drop_policy = PT_POLICY_WAIT,
    };
    pt_fb_thread_start_t ts = {7, 3, 99999, S("MainThread"), 555};
    pt_fb_thread_end_t te = {7, 777, 1000000, 12};
    pt_fb_symbol_t sy = {17, PT_SYM_PY_FUNCTION, S("Klass.method"), S("/src/m\xc3\xa9.py"), 314, S("method")};
    pt_fb_lost_count_t lc = {7, 4096};
    pt_fb_producer_status_t ps = {PT_STATE_EXITED, 111, 222, 333, 444, 555, 666, 777, 888, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < N_EVENTS; i++) {
        sample_events[i].ticks = 1000 + (uint64_t)i;
        sample_events[i].id = 17 + (uint32_t)i;
        sample_events[i].aux = (uint16_t)(i * 3);
        sample_events[i].kind = (uint8_t)(1 + i);
        sample_events[i].flags = (uint8_t)(i & 1);
    }
    out[0].len = pt_fb_build_process_info(out[0].buf, sizeof out[0].buf, &pi);
    out[1].len = pt_fb_build_thread_start(out[1].buf, sizeof out[1].buf, &ts);
    out[2].len = pt_fb_build_thread_end(out[2].buf, sizeof out[2].buf, &te);
    out[3].len = pt_fb_build_symbol(out[3].buf, sizeof out[3].buf, &sy);
    out[4].len = pt_fb_build_event_chunk(out[4].buf, sizeof out[4].buf, 7, 1024, sample_events, N_EVENTS);
    out[5].len = pt_fb_build_lost_count(out[5].buf, sizeof out[5].buf, &lc);
    out[6].len = pt_fb_build_producer_status(out[6].buf, sizeof out[6].buf, &ps);
    out[7].len = pt_fb_build_event_chunk(out[7].buf, sizeof out[7].buf, 8, 0, NULL, 0);
    static const uint8_t frame[7] = {0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3}; /* any bytes: the schema does not look */
    const pt_fb_compressed_chunk_t cc = {9, 4096, 5, PT_CODEC_ZSTD_DELTA_SHUFFLE, 80, frame, sizeof frame};
    out[8].len = pt_fb_build_compressed_chunk(out[8].buf, sizeof out[8].buf, &cc);
    /* tagged: ProcessInfo and EventChunk of process 3 (pt_fb_tag), and the Symbol
     * rebuilt from its parse with the largest tag (pt_fb_build) */
    out[9].len = pt_fb_tag(out[9].buf, sizeof out[9].buf, out[0].buf, out[0].len, 3);
    out[10].len = pt_fb_tag(out[10].buf, sizeof out[10].buf, out[4].buf, out[4].len, 3);
    pt_fb_msg_t sym;
    REQUIRE(pt_fb_parse(out[3].buf, out[3].len, &sym, NULL, 0) == 0);
    sym.process = UINT32_MAX;
    out[11].len = pt_fb_build(out[11].buf, sizeof out[11].buf, &sym);
    for (int i = 0; i < NSAMPLES; i++) {
        REQUIRE(out[i].len > 0);
        REQUIRE(out[i].len % 8 == 0); /* streams stay 8-aligned */
    }
}

static void test_round_trip(const sample_t s[NSAMPLES])
{
    pt_fb_msg_t m;
    char why[128];
    for (int i = 0; i < NSAMPLES; i++) {
        int r = parse_exact(s[i].buf, s[i].len, &m, why, sizeof why);
        if (r)
            fprintf(stderr, "sample %d: %s\n", i, why);
        CHECK(r == 0);
        CHECK(pt_fb_message_size(s[i].buf, s[i].len) == s[i].len);
    }
    /* parse in place (pointers into s[i].buf) to check values */
    REQUIRE(pt_fb_parse(s[0].buf, s[0].len, &m, why, sizeof why) == 0);
    CHECK(m.type == PT_MSG_PROCESS_INFO);
    const pt_fb_process_info_t *pi = &m.u.process_info;
    CHECK(pi->pid == 4242 && pi->ppid == 1);
    CHECK(str_eq(pi->command_line, "python3 -m app --x \"y\""));
    CHECK(str_eq(pi->python_version, "3.11.2"));
    CHECK(str_eq(pi->segment, "/pytrace-4242-0"));
    CHECK(pi->abi_major == 1 && pi->abi_minor == 0 && pi->clock == PT_CLOCK_TSC);
    CHECK(pi->ticks_per_second == 2999999999ull && pi->base_ticks == 123456789ull);
    CHECK(pi->base_monotonic_ns == 987654321ull && pi->base_realtime_ns == 1700000000123456789ull);
    CHECK(pi->ring_count == 64 && pi->ring_capacity_events == 131040 && pi->drop_policy == PT_POLICY_WAIT);
    CHECK(pi->role.ptr == NULL); /* absent: the message of before the field */

    REQUIRE(pt_fb_parse(s[1].buf, s[1].len, &m, why, sizeof why) == 0);
    CHECK(m.type == PT_MSG_THREAD_START);
    CHECK(m.u.thread_start.thread == 7 && m.u.thread_start.ring == 3 && m.u.thread_start.os_tid == 99999);
    CHECK(str_eq(m.u.thread_start.name, "MainThread") && m.u.thread_start.ticks == 555);

    REQUIRE(pt_fb_parse(s[2].buf, s[2].len, &m, why, sizeof why) == 0);
    CHECK(m.type == PT_MSG_THREAD_END);
    CHECK(m.u.thread_end.thread == 7 && m.u.thread_end.ticks == 777);
    CHECK(m.u.thread_end.events_written == 1000000 && m.u.thread_end.events_dropped == 12);

    REQUIRE(pt_fb_parse(s[3].buf, s[3].len, &m, why, sizeof why) == 0);
    CHECK(m.type == PT_MSG_SYMBOL);
    CHECK(m.u.symbol.id == 17 && m.u.symbol.kind == PT_SYM_PY_FUNCTION && m.u.symbol.line == 314);
    CHECK(str_eq(m.u.symbol.name, "Klass.method") && str_eq(m.u.symbol.file, "/src/m\xc3\xa9.py"));
    CHECK(str_eq(m.u.symbol.profile_name, "method"));

    REQUIRE(pt_fb_parse(s[4].buf, s[4].len, &m, why, sizeof why) == 0);
    CHECK(m.type == PT_MSG_EVENT_CHUNK);
    CHECK(m.u.event_chunk.thread == 7 && m.u.event_chunk.first_event == 1024);
    CHECK(m.u.event_chunk.count == N_EVENTS);
    CHECK(memcmp(m.u.event_chunk.events, sample_events, sizeof sample_events) == 0);

    REQUIRE(pt_fb_parse(s[5].buf, s[5].len, &m, why, sizeof why) == 0);
    CHECK(m.type == PT_MSG_LOST_COUNT && m.u.lost_count.thread == 7 && m.u.lost_count.dropped_total == 4096);

    REQUIRE(pt_fb_parse(s[6].buf, s[6].len, &m, why, sizeof why) == 0);
    CHECK(m.type == PT_MSG_PRODUCER_STATUS);
    const pt_fb_producer_status_t *ps = &m.u.producer_status;
    CHECK(ps->state == PT_STATE_EXITED && ps->heartbeat_ns == 111 && ps->events_written == 222);
    CHECK(ps->events_dropped == 333 && ps->hook_errors == 444 && ps->symbols_dropped == 555);
    CHECK(ps->threads_untraced == 666 && ps->tracing_displaced == 777 && ps->events_untraced == 888);

    REQUIRE(pt_fb_parse(s[7].buf, s[7].len, &m, why, sizeof why) == 0);
    CHECK(m.type == PT_MSG_EVENT_CHUNK && m.u.event_chunk.count == 0 && m.u.event_chunk.thread == 8);

    REQUIRE(pt_fb_parse(s[8].buf, s[8].len, &m, why, sizeof why) == 0);
    const pt_fb_compressed_chunk_t *cc = &m.u.compressed_chunk;
    CHECK(m.type == PT_MSG_COMPRESSED_CHUNK && cc->thread == 9 && cc->first_event == 4096 && cc->count == 5);
    CHECK(cc->codec == PT_CODEC_ZSTD_DELTA_SHUFFLE && cc->raw_bytes == 80 && cc->data_len == 7);
    CHECK(cc->data && cc->data >= s[8].buf && cc->data + 7 <= s[8].buf + s[8].len);
    CHECK(cc->data && memcmp(cc->data, "\x28\xb5\x2f\xfd\x01\x02\x03", 7) == 0);

    /* every builder refuses a buffer one byte too small */
    uint8_t small[1024];
    pt_fb_symbol_t sy = {17, 0, S("Klass.method"), S("/src/m\xc3\xa9.py"), 314, S("method")};
    CHECK(pt_fb_build_symbol(small, s[3].len - 1, &sy) == 0);
    CHECK(pt_fb_build_symbol(small, s[3].len, &sy) == s[3].len);
}

/* ---- hostile input ------------------------------------------------------ */

static void test_specific_rejections(const sample_t s[NSAMPLES])
{
    uint8_t b[1024];
    pt_fb_msg_t m;
    char why[128];

    memcpy(b, s[3].buf, s[3].len);
    b[8] = 'X';
    CHECK(pt_fb_parse(b, s[3].len, &m, why, sizeof why) == -EBADMSG);
    CHECK(strstr(why, "identifier") != NULL);

    memcpy(b, s[3].buf, s[3].len);
    b[24] = PT_MSG_LAST + 1; /* union type out of range */
    CHECK(pt_fb_parse(b, s[3].len, &m, why, sizeof why) == -EBADMSG);
    CHECK(strstr(why, "body type") != NULL);

    memcpy(b, s[3].buf, s[3].len);
    b[24] = 0;
    CHECK(pt_fb_parse(b, s[3].len, &m, why, sizeof why) == -EBADMSG);

    memcpy(b, s[3].buf, s[3].len);
    put32(b, (uint32_t)s[3].len); /* prefix != len - 4 */
    CHECK(pt_fb_parse(b, s[3].len, &m, why, sizeof why) == -EBADMSG);
    CHECK(strstr(why, "prefix") != NULL);

    /* string not NUL-terminated: Symbol name "f" at 80, NUL at 81 */
    pt_fb_symbol_t sy = {42, 1, S("f"), S("a.py"), 7, {NULL, 0}};
    size_t n = pt_fb_build_symbol(b, sizeof b, &sy);
    REQUIRE(n == 96 && b[80] == 'f' && b[81] == 0);
    b[81] = 'x';
    CHECK(pt_fb_parse(b, n, &m, why, sizeof why) == -EBADMSG);
    CHECK(strstr(why, "NUL") != NULL);
    b[81] = 0;
    put32(b + 76, 1000); /* string length past the end */
    CHECK(pt_fb_parse(b, n, &m, why, sizeof why) == -EBADMSG);

    /* event vector longer than the buffer */
    memcpy(b, s[4].buf, s[4].len);
    put32(b + 68, N_EVENTS + 1);
    CHECK(pt_fb_parse(b, s[4].len, &m, why, sizeof why) == -EBADMSG);
    CHECK(strstr(why, "events") != NULL);
    put32(b + 68, 0xffffffffu);
    CHECK(pt_fb_parse(b, s[4].len, &m, why, sizeof why) == -EBADMSG);

    /* vtable pointing before the buffer / misaligned table */
    memcpy(b, s[4].buf, s[4].len);
    put32(b + 44, 1000);
    CHECK(pt_fb_parse(b, s[4].len, &m, why, sizeof why) == -EBADMSG);
    memcpy(b, s[4].buf, s[4].len);
    put32(b + 28, 17);
    CHECK(pt_fb_parse(b, s[4].len, &m, why, sizeof why) == -EBADMSG);
    memcpy(b, s[4].buf, s[4].len);
    put32(b + 28, 0x80000000u);
    CHECK(pt_fb_parse(b, s[4].len, &m, why, sizeof why) == -EBADMSG);

    CHECK(pt_fb_parse(NULL, 0, &m, why, sizeof why) == -EBADMSG);
    CHECK(pt_fb_parse(b, 3, &m, why, sizeof why) == -EBADMSG);
    CHECK(pt_fb_message_size(b, 3) == 0);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void test_truncations_and_flips(const sample_t s[NSAMPLES])
{
    pt_fb_msg_t m;
    char why[128];
    uint8_t b[1024];
    long accepted = 0, rejected = 0;
    for (int i = 0; i < NSAMPLES; i++) {
        const size_t len = s[i].len;
        for (size_t t = 0; t < len; t++) {
            /* plain truncation: the prefix no longer matches */
            CHECK(parse_exact(s[i].buf, t, &m, why, sizeof why) == -EBADMSG);
            /* truncation with the prefix fixed up: exercises every bound check */
            if (t >= 4) {
                memcpy(b, s[i].buf, t);
                put32(b, (uint32_t)(t - 4));
                int r = parse_exact(b, t, &m, why, sizeof why);
                CHECK(r == 0 || r == -EBADMSG);
                if (r == 0)
                    accepted++;
                else
                    rejected++;
            }
        }
        for (int round = 0; round < 20000; round++) {
            memcpy(b, s[i].buf, len);
            int flips = 1 + (int)(rnd() % 4);
            for (int k = 0; k < flips; k++) {
                size_t at = 4 + (size_t)(rnd() % (len - 4)); /* keep the prefix most of the time */
                if (rnd() % 16 == 0)
                    at = rnd() % len;
                b[at] = (rnd() % 3 == 0) ? (uint8_t)rnd() : (uint8_t)(b[at] ^ (1u << (rnd() % 8)));
            }
            int r = parse_exact(b, len, &m, why, sizeof why);
            CHECK(r == 0 || r == -EBADMSG);
            if (r == 0) {
                accepted++;
                CHECK(m.type >= PT_MSG_PROCESS_INFO && m.type <= PT_MSG_LAST);
            } else {
                rejected++;
                CHECK(why[0] != 0);
            }
        }
    }
    /* a sanity check that the fuzzing reaches both outcomes */
    CHECK(accepted > 0 && rejected > 0);
    printf("fuzz: %ld accepted, %ld rejected, none crashed\n", accepted, rejected);
}

/* Message.process: tagging moves the body 8 bytes and nothing in it changes;
 * untagging gives back the builder's bytes; only builder output is taken. */
static void test_tags(const sample_t s[NSAMPLES])
{
    pt_fb_msg_t a, b;
    char why[128];
    for (int i = 0; i < 9; i++) {
        uint8_t tagged[1100], back[1100];
        REQUIRE(pt_fb_parse(s[i].buf, s[i].len, &a, why, sizeof why) == 0);
        CHECK(a.process == 0); /* untagged: the only process */
        const size_t n = pt_fb_tag(tagged, sizeof tagged, s[i].buf, s[i].len, 77 + (uint32_t)i);
        CHECK(n == s[i].len + 8);
        if (pt_fb_parse(tagged, n, &b, why, sizeof why) != 0) {
            fprintf(stderr, "tagged sample %d: %s\n", i, why);
            failures++;
            continue;
        }
        CHECK(b.process == 77 + (uint32_t)i && b.type == a.type);
        /* the body is the same bytes, 8 on */
        CHECK(memcmp(tagged + PT_MSG_TAGGED_HEADER_BYTES, s[i].buf + PT_MSG_HEADER_BYTES,
                     s[i].len - PT_MSG_HEADER_BYTES) == 0);
        /* untag: the builder's bytes again; rebuild from the parse: the same tagged bytes */
        CHECK(pt_fb_tag(back, sizeof back, tagged, n, 0) == s[i].len);
        CHECK(memcmp(back, s[i].buf, s[i].len) == 0);
        CHECK(pt_fb_build(back, sizeof back, &b) == n);
        CHECK(memcmp(back, tagged, n) == 0);
        /* retag in place */
        CHECK(pt_fb_tag(tagged, sizeof tagged, tagged, n, 5) == n);
        CHECK(pt_fb_parse(tagged, n, &b, NULL, 0) == 0 && b.process == 5);
        /* too small a buffer */
        CHECK(pt_fb_tag(back, s[i].len + 7, s[i].buf, s[i].len, 1) == 0);
    }
    /* not a builder's message: refused rather than moved */
    uint8_t odd[1100];
    memcpy(odd, s[0].buf, s[0].len);
    odd[16] = 6; /* Message vtable: body_type at +6 */
    CHECK(pt_fb_tag(odd, sizeof odd, odd, s[0].len, 1) == 0);
    memcpy(odd, s[0].buf, s[0].len);
    odd[28] = 0; /* body uoffset 0: the body would be inside the header */
    CHECK(pt_fb_tag(odd, sizeof odd, odd, s[0].len, 1) == 0);
    CHECK(pt_fb_tag(odd, sizeof odd, s[0].buf, s[0].len - 8, 1) == 0); /* length != prefix */
}

int main(int argc, char **argv)
{
    static sample_t samples[NSAMPLES];
    test_chunk_header_golden();
    test_thread_end_golden();
    test_symbol_golden();
    test_symbol_profile_name_golden();
    test_process_info_role();
    make_samples(samples);
    test_round_trip(samples);
    test_tags(samples);
    test_specific_rejections(samples);
    test_truncations_and_flips(samples);

    if (argc > 1) {
        FILE *f = fopen(argv[1], "wb");
        REQUIRE(f);
        for (int i = 0; i < NSAMPLES; i++)
            REQUIRE(fwrite(samples[i].buf, 1, samples[i].len, f) == samples[i].len);
        REQUIRE(fclose(f) == 0);
    }
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("schema: all checks passed\n");
    return 0;
}
