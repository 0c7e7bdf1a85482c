/*
 * Ring, single process: record order and content across many chunk wraps,
 * chunk headers (size prefix, length, first_event, the whole fixed header),
 * the consumer's copy as a FlatBuffer, the drop policy (exact capacity, drop
 * counters, Lost record + stack + record on recovery, saturation), the wait
 * policy's bound and "stop waiting until room returns", and misuse.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "schema/pt_fb.h"
#include "shm/ring.h"
#include "tc_consumer.h"


typedef struct layout {
    pt_ring_slot_t *slot;
    uint8_t *base;
    uint32_t chunk_bytes, chunks_per_ring;
} layout_t;

static layout_t make_layout(uint32_t chunk_bytes, uint32_t chunks_per_ring)
{
    layout_t l = {0};
    l.slot = aligned_alloc(64, sizeof(pt_ring_slot_t));
    l.base = aligned_alloc(4096, (size_t)chunk_bytes * chunks_per_ring);
    if (l.slot == NULL || l.base == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    memset(l.slot, 0, sizeof *l.slot);
    memset(l.base, 0xA5, (size_t)chunk_bytes * chunks_per_ring); /* garbage: the ring must write headers */
    l.chunk_bytes = chunk_bytes;
    l.chunks_per_ring = chunks_per_ring;
    return l;
}

static void free_layout(layout_t *l)
{
    free(l->slot);
    free(l->base);
}

/* The record derived from a sequence number. */
static void expected_record(uint64_t seq, uint32_t *id, uint16_t *aux, uint8_t *kind, uint8_t *flags)
{
    *id = (uint32_t)(seq * 2654435761u);
    *aux = (uint16_t)(seq >> 7);
    *kind = (uint8_t)(PT_EV_CALL + seq % 11); /* CALL..MARK */
    *flags = (uint8_t)(seq & 7);
}

static int push_seq(pt_ring_t *ring, uint64_t seq)
{
    uint32_t id;
    uint16_t aux;
    uint8_t kind, flags;
    expected_record(seq, &id, &aux, &kind, &flags);
    return pt_ring_push(ring, seq, id, kind, flags, aux);
}

static int record_matches(const pt_event_t *ev, uint64_t seq)
{
    uint32_t id;
    uint16_t aux;
    uint8_t kind, flags;
    expected_record(seq, &id, &aux, &kind, &flags);
    return ev->ticks == seq && ev->id == id && ev->aux == aux && ev->kind == kind && ev->flags == flags;
}

/* The consumer's copy of a chunk (header + n events, size prefix and length
 * set for n) must be a Message{EventChunk} that the verifying parser accepts. */
static void check_copy_parses(const tc_consumer_t *c, uint64_t chunk_seq, const pt_event_t *events, uint32_t n)
{
    static uint8_t buf[PT_CHUNK_HEADER_BYTES + 16 * 4096] __attribute__((aligned(8)));
    pt_fb_chunk_header(buf, c->thread, chunk_seq * c->events_per_chunk, n,
                       PT_CHUNK_HEADER_BYTES + 16u * n - 4u);
    memcpy(buf + PT_CHUNK_OFF_EVENTS, events, (size_t)n * 16);
    pt_fb_msg_t msg;
    char why[128] = "";
    int rc = pt_fb_parse(buf, PT_CHUNK_HEADER_BYTES + 16u * n, &msg, why, sizeof why);
    CHECKF(rc == 0, "copy of chunk %" PRIu64 " does not parse: %s", chunk_seq, why);
    if (rc == 0) {
        CHECKF(msg.type == PT_MSG_EVENT_CHUNK, "type %u", msg.type);
        CHECKF(msg.u.event_chunk.count == n, "count %u != %u", msg.u.event_chunk.count, n);
        CHECKF(msg.u.event_chunk.first_event == chunk_seq * c->events_per_chunk, "first_event");
        CHECKF(msg.u.event_chunk.thread == c->thread, "thread");
    }
}

/* Many wraps, varying batch sizes, every record and header checked. */
static void test_order_and_wraparound(uint32_t chunk_bytes, uint32_t chunks_per_ring, uint64_t total)
{
    layout_t l = make_layout(chunk_bytes, chunks_per_ring);
    pt_ring_t ring;
    CHECKF(pt_ring_init(&ring, l.slot, l.base, chunk_bytes, chunks_per_ring, PT_POLICY_DROP, 0, 0, 7) == 0, "init");
    tc_consumer_t c;
    tc_init(&c, l.slot, l.base, chunk_bytes, chunks_per_ring, 7);
    uint32_t epc = (uint32_t)PT_CHUNK_EVENTS(chunk_bytes);
    uint64_t capacity = (uint64_t)epc * chunks_per_ring;
    CHECKF(ring.events_per_chunk == epc, "events per chunk %u != %u", ring.events_per_chunk, epc);

    static pt_event_t buf[4096];
    uint64_t pushed = 0, read = 0, bad = 0, rng = 12345;
    while (pushed < total) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        /* batches up to the whole free capacity (the producer may fill up to
         * the end of chunk released + chunks - 1): the ring is often exactly full */
        uint64_t room = (c.chunk + chunks_per_ring) * epc - pushed;
        uint64_t batch = room == 0 ? 0 : 1 + (rng >> 33) % room;
        if (batch > total - pushed)
            batch = total - pushed;
        for (uint64_t i = 0; i < batch; i++) {
            int rc = push_seq(&ring, pushed);
            if (rc != 0) {
                CHECKF(rc == 0, "push %" PRIu64 " failed (%d) with %" PRIu64 " in flight", pushed, rc,
                      pushed - read);
                goto out;
            }
            pushed++;
        }
        CHECKF(pt_ring_written(&ring) == pushed, "written %" PRIu64 " != %" PRIu64, pt_ring_written(&ring), pushed);
        /* drain, sometimes only partly */
        uint64_t want = (rng >> 20) % 4 == 0 ? (pushed - read) / 2 : pushed - read;
        while (read < pushed && want > 0) {
            uint64_t chunk_before = c.chunk;
            uint32_t index_before = c.index;
            uint32_t n = tc_poll(&c, buf, want < 4096 ? (uint32_t)want : 4096);
            if (n == 0)
                break;
            for (uint32_t i = 0; i < n; i++)
                if (!record_matches(&buf[i], read + i) && bad++ < 5)
                    CHECKF(0, "record %" PRIu64 " wrong: ticks %" PRIu64 " id %u kind %u", read + i, buf[i].ticks,
                          buf[i].id, buf[i].kind);
            if (index_before == 0 && c.index == epc && c.chunk == chunk_before)
                check_copy_parses(&c, chunk_before, buf, n);
            read += n;
            want -= n;
        }
    }
    while (read < pushed) {
        uint32_t n = tc_poll(&c, buf, 4096);
        if (n == 0)
            break;
        for (uint32_t i = 0; i < n; i++)
            if (!record_matches(&buf[i], read + i) && bad++ < 5)
                CHECKF(0, "record %" PRIu64 " wrong", read + i);
        read += n;
    }
out:
    CHECKF(read == pushed, "read %" PRIu64 " of %" PRIu64, read, pushed);
    CHECKF(bad == 0, "%" PRIu64 " wrong records", bad);
    CHECKF(c.header_errors == 0, "%" PRIu64 " bad chunk headers", c.header_errors);
    CHECKF(c.length_errors == 0, "%" PRIu64 " bad chunk lengths", c.length_errors);
    CHECKF(pushed / capacity >= 100 || total < capacity * 100, "only %" PRIu64 " wraps", pushed / capacity);
    CHECKF(atomic_load(&l.slot->events_dropped) == 0, "dropped %" PRIu64, (uint64_t)atomic_load(&l.slot->events_dropped));
    uint64_t flushed = atomic_load(&l.slot->events_written);
    CHECKF(flushed <= pushed && flushed + epc >= pushed, "flushed counter %" PRIu64 " vs %" PRIu64, flushed, pushed);
    pt_ring_flush_counters(&ring);
    CHECKF(atomic_load(&l.slot->events_written) == pushed, "events_written after flush");
    /* size prefix of a ring chunk is the whole chunk */
    uint32_t prefix;
    memcpy(&prefix, l.base, 4);
    CHECKF(prefix == chunk_bytes - 4, "size prefix %u", prefix);
    printf("order/wrap %u x %u: %" PRIu64 " records, %" PRIu64 " wraps, %" PRIu64 " chunk headers checked\n",
           chunks_per_ring, chunk_bytes, pushed, pushed / capacity, c.chunks_checked);
    free_layout(&l);
}

/* Stack writer for the recovery tests: records the room it got, pushes up to
 * `frames` Frame records (never more than room - 1). */
typedef struct stack_ctx {
    uint32_t frames;
    uint32_t room_seen;
    uint32_t calls;
} stack_ctx_t;

static int write_stack(pt_ring_t *ring, void *vctx, uint32_t room, int whole)
{
    stack_ctx_t *ctx = vctx;
    ctx->calls++;
    ctx->room_seen = room;
    if (whole && ctx->frames + 1 > room)
        return -EAGAIN;
    for (uint32_t d = 0; d < ctx->frames && d + 1 < room; d++)
        pt_ring_push_frame(ring, 1000 + d, 500 + d, (uint16_t)d, d == 1 ? PT_EVF_C_FUNCTION : 0);
    return 0;
}

static uint64_t drain_all(tc_consumer_t *c, pt_event_t *buf, uint32_t cap)
{
    uint64_t n = 0;
    for (;;) {
        uint32_t got = tc_poll(c, buf + n, (uint32_t)(cap - n));
        if (got == 0)
            return n;
        n += got;
    }
}

/* A small drop-policy ring (4 chunks of 4 KiB) with a stack writer and a
 * consumer, for the tests of gaps and stack records. */
typedef struct small_ring {
    layout_t l;
    pt_ring_t ring;
    tc_consumer_t c;
    uint32_t chunks;
    uint32_t epc;
} small_ring_t;

static void small_ring_init(small_ring_t *s, stack_ctx_t *sctx)
{
    const uint32_t chunk_bytes = 4096;
    s->chunks = 4;
    s->l = make_layout(chunk_bytes, s->chunks);
    CHECKF(pt_ring_init(&s->ring, s->l.slot, s->l.base, chunk_bytes, s->chunks, PT_POLICY_DROP, 0, 3, 9) == 0,
           "init");
    pt_ring_set_stack_writer(&s->ring, write_stack, sctx);
    tc_init(&s->c, s->l.slot, s->l.base, chunk_bytes, s->chunks, 9);
    s->epc = (uint32_t)PT_CHUNK_EVENTS(chunk_bytes);
}

static void test_drop_policy(void)
{
    stack_ctx_t sctx = {.frames = 5};
    small_ring_t s;
    small_ring_init(&s, &sctx);
    pt_ring_t *ring = &s.ring;
    tc_consumer_t *c = &s.c;
    pt_ring_slot_t *slot = s.l.slot;
    uint32_t epc = s.epc;
    uint64_t capacity = (uint64_t)epc * s.chunks;

    uint64_t seq = 0;
    for (; seq < capacity; seq++)
        CHECKF(push_seq(ring, seq) == 0, "push %" PRIu64 " below capacity failed", seq);
    /* full: the next pushes drop, counted */
    for (int i = 0; i < 11; i++, seq++)
        CHECKF(push_seq(ring, seq) == -ENOBUFS, "push into a full ring must return -ENOBUFS");
    CHECKF(atomic_load(&slot->events_dropped) == 11, "events_dropped %" PRIu64,
          (uint64_t)atomic_load(&slot->events_dropped));
    CHECKF(ring->lost_pending == 11, "lost_pending %" PRIu64, ring->lost_pending);
    CHECKF(atomic_load(&ring->limit) == 0, "limit must be 0 while a Lost record is pending");
    CHECKF(sctx.calls == 0, "no stack written while full");

    static pt_event_t buf[8192];
    uint64_t n = drain_all(c, buf, 8192);
    CHECKF(n == capacity, "drained %" PRIu64 " of %" PRIu64, n, capacity);
    for (uint64_t i = 0; i < n; i++)
        if (!record_matches(&buf[i], i)) {
            CHECKF(0, "record %" PRIu64 " wrong before the gap", i);
            break;
        }
    /* still full from the producer's view until it looks again: the next push
     * finds room, writes Lost(11), the stack, then the record */
    CHECKF(push_seq(ring, seq) == 0, "push after room returned");
    CHECKF(sctx.calls == 1, "stack writer called once (%u)", sctx.calls);
    /* consumer released chunks 0..2 (chunk 3 == head stays), so the new head
     * 4 leaves 2 free chunks: room = epc - 1 (after Lost) + 2 * epc */
    CHECKF(sctx.room_seen == epc - 1 + 2 * epc, "room %u != %u", sctx.room_seen, epc - 1 + 2 * epc);
    CHECKF(atomic_load(&ring->limit) == epc, "limit restored");
    n = drain_all(c, buf, 8192);
    CHECKF(n == 1 + 5 + 1, "after recovery: %" PRIu64 " records, want Lost + 5 frames + record", n);
    if (n == 7) {
        CHECKF(buf[0].flags == 0, "a full ring under policy drop: no cause flag (flags %u)", buf[0].flags);
        CHECKF(buf[0].kind == PT_EV_LOST && buf[0].id == 11 && buf[0].aux == 0, "Lost(11): kind %u id %u",
              buf[0].kind, buf[0].id);
        CHECKF(buf[0].ticks == seq, "Lost carries the ticks of the record that found room");
        for (uint32_t d = 0; d < 5; d++) {
            CHECKF(buf[1 + d].kind == PT_EV_FRAME && buf[1 + d].id == 500 + d && buf[1 + d].aux == d,
                  "frame %u: kind %u id %u aux %u", d, buf[1 + d].kind, buf[1 + d].id, buf[1 + d].aux);
            CHECKF(buf[1 + d].flags == (d == 1 ? PT_EVF_C_FUNCTION : 0), "frame flags");
        }
        CHECKF(record_matches(&buf[6], seq), "the record after the stack");
    }
    seq++;
    CHECKF(pt_ring_written(ring) == capacity + 7, "written counts Lost and frames");

    /* saturation: a count past 48 bits is written as PT_LOST_MAX */
    while (push_seq(ring, seq) == 0)
        seq++;
    ring->lost_pending = PT_LOST_MAX + 100;
    memset(ring->lost_by_cause, 0, sizeof ring->lost_by_cause);
    ring->lost_by_cause[PT_RING_LOST_FULL] = PT_LOST_MAX + 100;
    (void)drain_all(c, buf, 8192);
    pt_ring_set_stack_writer(ring, NULL, NULL);
    CHECKF(push_seq(ring, seq) == 0, "push after room returned");
    n = drain_all(c, buf, 8192);
    CHECKF(n == 2 && buf[0].kind == PT_EV_LOST && buf[0].id == UINT32_MAX && buf[0].aux == UINT16_MAX,
          "saturated Lost: n %" PRIu64 " id %u aux %u", n, buf[0].id, buf[0].aux);
    CHECKF(n == 2 && record_matches(&buf[1], seq), "record after saturated Lost");
    seq++;

    /* flush_lost: a trailing gap is announced when there is room */
    while (push_seq(ring, seq) == 0)
        seq++;
    CHECKF(push_seq(ring, seq + 1) == -ENOBUFS, "second drop");
    CHECKF(pt_ring_flush_lost(ring, 77) == -ENOBUFS, "flush_lost without room");
    (void)drain_all(c, buf, 8192);
    CHECKF(pt_ring_flush_lost(ring, 77) == 0, "flush_lost with room");
    n = drain_all(c, buf, 8192);
    CHECKF(n == 1 && buf[0].kind == PT_EV_LOST && buf[0].id == 2 && buf[0].ticks == 77, "trailing Lost(2)");
    CHECKF(pt_ring_flush_lost(ring, 78) == 0 && drain_all(c, buf, 8192) == 0, "nothing pending, nothing written");
    CHECKF(c->header_errors == 0 && c->length_errors == 0, "headers %" PRIu64 " lengths %" PRIu64, c->header_errors,
          c->length_errors);
    free_layout(&s.l);
}

/* A reader's stack request: served on the owner's next push after
 * pt_ring_request_slow_path (whole stack, then the record), or at the next
 * chunk change when the current chunk has no room for all of it; the request
 * is cleared once served, and no record is lost or reordered. */
static void test_stack_request(void)
{
    stack_ctx_t sctx = {.frames = 4};
    small_ring_t s;
    small_ring_init(&s, &sctx);
    pt_ring_t *ring = &s.ring;
    tc_consumer_t *c = &s.c;
    pt_ring_slot_t *slot = s.l.slot;
    uint32_t epc = s.epc;
    static pt_event_t buf[8192];

    uint64_t seq = 0;
    for (; seq < 10; seq++)
        CHECK(push_seq(ring, seq) == 0);
    CHECK(drain_all(c, buf, 8192) == 10);

    /* no request: a lowered limit only takes one push through the slow path */
    pt_ring_request_slow_path(ring);
    CHECK(push_seq(ring, seq++) == 0);
    CHECKF(sctx.calls == 0, "no stack without a request");
    CHECKF(atomic_load(&ring->limit) == epc, "limit restored after a spurious poke");

    /* request served on the next push: 4 frames, then the record */
    atomic_store(&slot->stack_request, 1);
    pt_ring_request_slow_path(ring);
    CHECK(push_seq(ring, seq) == 0);
    CHECKF(sctx.calls == 1, "stack writer called (%u)", sctx.calls);
    CHECKF(atomic_load(&slot->stack_request) == 0, "request cleared");
    uint64_t n = drain_all(c, buf, 8192);
    CHECKF(n == 1 + 4 + 1, "%" PRIu64 " records: want the earlier one, 4 frames, the record", n);
    if (n == 6) {
        CHECK(record_matches(&buf[0], seq - 1));
        for (uint32_t d = 0; d < 4; d++)
            CHECKF(buf[1 + d].kind == PT_EV_FRAME && buf[1 + d].id == 500 + d && buf[1 + d].aux == d,
                   "frame %u", d);
        CHECK(record_matches(&buf[5], seq));
    }
    seq++;

    /* not enough room in this chunk (and none free): deferred to the chunk change */
    while (ring->index < epc - 2)
        CHECK(push_seq(ring, seq++) == 0);
    (void)drain_all(c, buf, 8192);
    uint32_t calls = sctx.calls;
    atomic_store(&slot->stack_request, 1);
    sctx.frames = 3000; /* more than the room left and more than a chunk holds after it */
    pt_ring_request_slow_path(ring);
    uint64_t before = seq;
    CHECK(push_seq(ring, seq++) == 0);
    CHECKF(sctx.calls == calls + 1 && atomic_load(&slot->stack_request) == 1,
           "a stack that does not fit is not written; the request stays");
    sctx.frames = 4;
    CHECK(push_seq(ring, seq++) == 0); /* last slot of the chunk: fast path */
    CHECK(push_seq(ring, seq++) == 0); /* chunk change: served here */
    CHECKF(atomic_load(&slot->stack_request) == 0, "served at the chunk change");
    n = drain_all(c, buf, 8192);
    CHECKF(n == 3 + 4, "%" PRIu64 " records after the deferral", n);
    if (n == 7) {
        CHECK(record_matches(&buf[0], before) && record_matches(&buf[1], before + 1));
        CHECKF(buf[2].kind == PT_EV_FRAME && buf[2].aux == 0 && buf[5].kind == PT_EV_FRAME && buf[5].aux == 3,
               "the stack first in the new chunk");
        CHECK(record_matches(&buf[6], before + 2));
    }
    free_layout(&s.l);
}

static void test_wait_policy_bound(void)
{
    const uint32_t chunk_bytes = 4096, chunks = 2;
    layout_t l = make_layout(chunk_bytes, chunks);
    pt_ring_t ring;
    CHECKF(pt_ring_init(&ring, l.slot, l.base, chunk_bytes, chunks, PT_POLICY_WAIT, 2000000 /* 2 ms */, 0, 1) == 0,
          "init");
    tc_consumer_t c;
    tc_init(&c, l.slot, l.base, chunk_bytes, chunks, 1);
    uint64_t capacity = PT_CHUNK_EVENTS(chunk_bytes) * chunks, seq = 0;
    for (; seq < capacity; seq++)
        CHECKF(push_seq(&ring, seq) == 0, "push below capacity");
    /* nobody drains: the push waits for its bound, then drops */
    CHECKF(push_seq(&ring, seq++) == -ENOBUFS, "wait bound ran out: -ENOBUFS");
    CHECKF(ring.waiting_disabled == 1, "after a timeout the ring stops waiting");
    CHECKF(push_seq(&ring, seq++) == -ENOBUFS, "second push drops at once");
    CHECKF(atomic_load(&l.slot->events_dropped) == 2, "two drops counted");
    static pt_event_t buf[1024];
    CHECKF(drain_all(&c, buf, 1024) == capacity, "drain");
    CHECKF(push_seq(&ring, seq) == 0, "room returned");
    CHECKF(ring.waiting_disabled == 0, "waiting again once room returned");
    uint64_t n = drain_all(&c, buf, 1024);
    CHECKF(n == 2 && buf[0].kind == PT_EV_LOST && buf[0].id == 2, "Lost(2) then the record");
    CHECKF(buf[0].flags == PT_EVF_LOST_WAIT_TIMEOUT, "a drop under policy wait says the wait timed out (flags %u)",
           buf[0].flags);
    CHECKF(n == 2 && record_matches(&buf[1], seq), "record after Lost");
    free_layout(&l);
}


/* A ring whose memory is reserved in steps (pt_ring_set_reserver): the
 * producer reserves chunks before it writes them, doubling (2, then 2 more,
 * then 4, ...), never writes a chunk it has not reserved, and takes nothing
 * after its first lap. When a reservation fails it drops, counted, without
 * waiting even under the wait policy (no reader frees memory), retries after
 * another chunk's worth of drops, and then writes Lost(count) and goes on:
 * every push is written or counted. */
typedef struct reserver {
    layout_t *l;
    uint32_t calls, fail, ring_index;
    uint32_t from[16], count[16];
    uint8_t reserved[64]; /* per chunk */
} reserver_t;

static int reserve_cb(void *vctx, uint32_t ring_index, uint32_t from, uint32_t count)
{
    reserver_t *r = vctx;
    if (r->calls < 16) {
        r->from[r->calls] = from;
        r->count[r->calls] = count;
    }
    r->calls++;
    r->ring_index = ring_index;
    if (r->fail)
        return -ENOSPC;
    for (uint32_t i = from; i < from + count && i < 64; i++)
        r->reserved[i] = 1;
    return 0;
}

/* Chunks the producer wrote into (their 0xA5 fill is gone) that were never reserved. */
static uint32_t written_unreserved(const reserver_t *r, uint32_t chunks)
{
    uint32_t bad = 0;
    for (uint32_t i = 0; i < chunks; i++) {
        const uint8_t *chunk = r->l->base + (size_t)i * r->l->chunk_bytes;
        if (!r->reserved[i] && chunk[0] != 0xA5)
            bad++;
    }
    return bad;
}

static void test_reserve_in_steps(void)
{
    const uint32_t chunk_bytes = 4096, chunks = 16;
    layout_t l = make_layout(chunk_bytes, chunks);
    pt_ring_t ring;
    /* wait policy with a 2 s bound: a push that waited on a failed reservation
     * would show as waiting_disabled (and a slow test), never as a pass */
    CHECKF(pt_ring_init(&ring, l.slot, l.base, chunk_bytes, chunks, PT_POLICY_WAIT, 2000000000ull, 5, 1) == 0,
           "init");
    reserver_t r = {.l = &l};
    r.reserved[0] = r.reserved[1] = 1; /* what the claim reserved */
    pt_ring_set_reserver(&ring, reserve_cb, &r, 2);
    tc_consumer_t c;
    tc_init(&c, l.slot, l.base, chunk_bytes, chunks, 1);
    const uint32_t epc = (uint32_t)PT_CHUNK_EVENTS(chunk_bytes);
    static pt_event_t buf[16 * 256 + 64];

    uint64_t seq = 0;
    for (; seq < 2 * epc; seq++)
        CHECKF(push_seq(&ring, seq) == 0, "push %" PRIu64, seq);
    CHECKF(r.calls == 0, "two reserved chunks filled without a reservation (%u calls)", r.calls);
    CHECK(push_seq(&ring, seq++) == 0);
    CHECKF(r.calls == 1 && r.from[0] == 2 && r.count[0] == 2 && r.ring_index == 5, "then chunks 2-3: %u calls, %u+%u",
           r.calls, r.from[0], r.count[0]);
    for (; seq < 4 * epc + 1; seq++)
        CHECK(push_seq(&ring, seq) == 0);
    CHECKF(r.calls == 2 && r.from[1] == 4 && r.count[1] == 4, "then chunks 4-7: %u+%u", r.from[1], r.count[1]);
    CHECKF(written_unreserved(&r, chunks) == 0, "no chunk written before it was reserved");

    /* chunk 8 cannot be reserved: drops, counted, no waiting */
    for (; seq < 8 * epc; seq++)
        CHECK(push_seq(&ring, seq) == 0);
    r.fail = 1;
    uint64_t drops = 0;
    for (uint32_t i = 0; i < epc / 2; i++, seq++, drops++)
        CHECKF(push_seq(&ring, seq) == -ENOBUFS, "no room in the file: the push drops");
    CHECKF(ring.waiting_disabled == 0, "it did not wait for a reader (a reader frees no memory)");
    CHECKF(r.calls == 3, "one failed attempt, then no retry before a chunk's worth of drops (%u)", r.calls);
    CHECKF(atomic_load(&l.slot->events_dropped) == drops, "drops counted: %" PRIu64,
           (uint64_t)atomic_load(&l.slot->events_dropped));
    CHECKF(written_unreserved(&r, chunks) == 0, "nothing written into the unreserved chunk");
    /* room in the file again: the retry comes after epc drops in all */
    r.fail = 0;
    while (r.calls == 3) {
        CHECK(push_seq(&ring, seq) == -ENOBUFS || r.calls == 4);
        if (r.calls == 3)
            drops++;
        seq++;
    }
    CHECKF(drops == epc, "retried after %" PRIu64 " drops (a chunk is %u)", drops, epc);
    CHECKF(r.from[3] == 8 && r.count[3] == 8, "then chunks 8-15: %u+%u", r.from[3], r.count[3]);
    uint64_t n = drain_all(&c, buf, sizeof buf / sizeof buf[0]);
    CHECKF(n == 8 * epc + 2, "drained %" PRIu64 ": 8 chunks, Lost, the record", n);
    if (n == 8 * epc + 2) {
        CHECKF(buf[8 * epc].kind == PT_EV_LOST && buf[8 * epc].id == drops, "Lost(%u)", buf[8 * epc].id);
        CHECKF(buf[8 * epc].flags == PT_EVF_LOST_NO_ROOM, "a drop for want of memory says so (flags %u)",
               buf[8 * epc].flags);
        CHECK(record_matches(&buf[8 * epc + 1], seq - 1));
    }
    /* the rest of the first lap, then laps more: no more reservations */
    for (uint64_t i = 0; i < 40 * (uint64_t)epc; i++, seq++) {
        if (push_seq(&ring, seq) != 0)
            CHECKF(0, "push %" PRIu64 " after recovery", seq);
        if (i % epc == 0)
            (void)drain_all(&c, buf, sizeof buf / sizeof buf[0]);
    }
    CHECKF(r.calls == 4, "the whole ring is reserved after its first lap (%u calls)", r.calls);
    CHECKF(written_unreserved(&r, chunks) == 0, "never a chunk written unreserved");
    CHECKF(c.header_errors == 0 && c.length_errors == 0, "consumer saw no bad chunk");
    free_layout(&l);
}

/* Events a thread made before it had a ring (pt_ring_count_missed) are not
 * drops of the ring: events_dropped stays, and the gap is its own Lost record
 * flagged LostNoRing; a later full-ring drop in the same gap is a second Lost
 * record, unflagged. So a reader can say each cause with its own count. */
static void test_lost_causes_apart(void)
{
    stack_ctx_t sctx = {.frames = 0};
    small_ring_t s;
    small_ring_init(&s, &sctx);
    pt_ring_t *ring = &s.ring;
    static pt_event_t buf[8192];
    pt_ring_count_missed(ring, 1234);
    CHECKF(atomic_load(&s.l.slot->events_dropped) == 0, "missed events are not dropped ones");
    CHECKF(push_seq(ring, 0) == 0, "first push");
    uint64_t n = drain_all(&s.c, buf, 8192);
    CHECKF(n == 2 && buf[0].kind == PT_EV_LOST && buf[0].id == 1234 && buf[0].flags == PT_EVF_LOST_NO_RING,
           "Lost(1234, LostNoRing): n %" PRIu64 " kind %u id %u flags %u", n, buf[0].kind, buf[0].id, buf[0].flags);
    uint64_t seq = 1;
    while (push_seq(ring, seq) == 0)
        seq++;
    (void)push_seq(ring, seq + 1); /* two drops */
    pt_ring_count_missed(ring, 5);  /* API misuse in practice, but both causes may meet in one gap */
    (void)drain_all(&s.c, buf, 8192);
    CHECKF(push_seq(ring, seq + 2) == 0, "room returned");
    n = drain_all(&s.c, buf, 8192);
    CHECKF(n == 3 && buf[0].kind == PT_EV_LOST && buf[0].id == 2 && buf[0].flags == 0 && buf[1].kind == PT_EV_LOST &&
               buf[1].id == 5 && buf[1].flags == PT_EVF_LOST_NO_RING,
           "one Lost per cause: n %" PRIu64, n);
    CHECKF(atomic_load(&s.l.slot->events_dropped) == 2, "only the ring's drops are events_dropped");
    free_layout(&s.l);
}

static void test_misuse(void)
{
    pt_ring_t zero;
    memset(&zero, 0, sizeof zero);
    CHECKF(pt_ring_push(&zero, 1, 2, PT_EV_CALL, 0, 0) == -ENOBUFS, "a zero handle drops");
    CHECKF(pt_ring_written(&zero) == 0, "a zero handle wrote nothing");
    layout_t l = make_layout(4096, 4);
    pt_ring_t ring;
    CHECKF(pt_ring_init(&ring, l.slot, l.base, 3000, 4, 0, 0, 0, 1) == -EINVAL, "chunk size not a power of two");
    CHECKF(pt_ring_init(&ring, l.slot, l.base, 2048, 4, 0, 0, 0, 1) == -EINVAL, "chunk size below minimum");
    CHECKF(pt_ring_init(&ring, l.slot, l.base, 4096, 3, 0, 0, 0, 1) == -EINVAL, "chunk count not a power of two");
    CHECKF(pt_ring_init(&ring, l.slot, l.base, 4096, 1, 0, 0, 0, 1) == -EINVAL, "one chunk");
    CHECKF(pt_ring_init(&ring, l.slot, l.base, 4096, 4, 7, 0, 0, 1) == -EINVAL, "unknown policy");
    CHECKF(pt_ring_init(&ring, NULL, l.base, 4096, 4, 0, 0, 0, 1) == -EINVAL, "no slot");
    /* re-init over a used slot resets the cursors of the previous owner */
    atomic_store(&l.slot->released_chunks, 1234);
    atomic_store(&l.slot->head_chunk, 1234);
    CHECKF(pt_ring_init(&ring, l.slot, l.base, 4096, 4, 0, 0, 0, 1) == 0, "init");
    CHECKF(atomic_load(&l.slot->released_chunks) == 0 && atomic_load(&l.slot->head_chunk) == 0, "cursors reset");
    free_layout(&l);
}

int main(void)
{
    test_order_and_wraparound(4096, 4, 3000000);
    test_order_and_wraparound(8192, 2, 1000000);
    test_order_and_wraparound(65536, 64, 3000000);
    test_drop_policy();
    test_stack_request();
    test_wait_policy_bound();
    test_reserve_in_steps();
    test_lost_causes_apart();
    test_misuse();
    if (failures) {
        fprintf(stderr, "test_ring_order: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_ring_order: all checks passed\n");
    return 0;
}
