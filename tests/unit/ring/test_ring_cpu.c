/*
 * Ring, CpuTime records (ring.h "CPU time"): the owner's CPU time is written
 * from the slow path only -- before the first push's record (the baseline of a
 * thread's Frame run at attach), after a Lost record and before the stack, before
 * a stack written for a reader's request, at every chunk change, on request by
 * another thread (pt_ring_request_cpu_sample), and by pt_ring_write_cpu from
 * another thread (the owner's clock, not the caller's). Each CpuTime carries the
 * ticks of the record it precedes; values are the owner's CPU ns modulo 2^48,
 * non-decreasing; counts (pt_ring_written) include them; the fast path's limit is
 * restored after each.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "shm/clock.h"
#include "shm/ring.h"
#include "tc_consumer.h"

#ifndef TC_RECORDS
#define TC_RECORDS 2000000ull /* pushed while another thread requests samples */
#endif
#define CHUNK_BYTES 4096u
#define CHUNKS 4u

typedef struct fixture {
    pt_ring_slot_t *slot;
    uint8_t *base;
    pt_ring_t ring;
    tc_consumer_t c;
    uint32_t epc;
    uint32_t frames;       /* the stack writer's stack depth */
    uint32_t stack_calls;
} fixture_t;

static int write_stack(pt_ring_t *ring, void *vctx, uint32_t room, int whole)
{
    fixture_t *f = vctx;
    f->stack_calls++;
    if (whole && f->frames + 1 > room)
        return -EAGAIN;
    for (uint32_t d = 0; d < f->frames && d + 1 < room; d++)
        pt_ring_push_frame(ring, 7000 + d, 500 + d, (uint16_t)d, 0);
    return 0;
}

static void fixture_init(fixture_t *f)
{
    memset(f, 0, sizeof *f);
    f->slot = aligned_alloc(64, sizeof(pt_ring_slot_t));
    f->base = aligned_alloc(4096, (size_t)CHUNK_BYTES * CHUNKS);
    if (f->slot == NULL || f->base == NULL)
        exit(2);
    memset(f->slot, 0, sizeof *f->slot);
    memset(f->base, 0xA5, (size_t)CHUNK_BYTES * CHUNKS);
    if (pt_ring_init(&f->ring, f->slot, f->base, CHUNK_BYTES, CHUNKS, PT_POLICY_DROP, 0, 0, 5) != 0)
        exit(2);
    pt_ring_set_stack_writer(&f->ring, write_stack, f);
    tc_init(&f->c, f->slot, f->base, CHUNK_BYTES, CHUNKS, 5);
    f->epc = (uint32_t)PT_CHUNK_EVENTS(CHUNK_BYTES);
}

static void fixture_free(fixture_t *f)
{
    free(f->slot);
    free(f->base);
}

static uint64_t records_read;

static uint64_t drain(fixture_t *f, pt_event_t *buf, uint32_t cap)
{
    uint64_t n = 0;
    for (;;) {
        uint32_t got = tc_poll(&f->c, buf + n, (uint32_t)(cap - n));
        records_read += got;
        if (got == 0)
            return n;
        n += got;
    }
}

static uint64_t cpu_of(const pt_event_t *ev)
{
    return ((uint64_t)ev->id | ((uint64_t)ev->aux << 32)) & PT_CPU_MASK;
}

static int push_call(pt_ring_t *ring, uint64_t ticks)
{
    return pt_ring_push(ring, ticks, 42, PT_EV_CALL, 0, 0);
}

/* Burn about `ns` of this thread's CPU time. */
static void spin_cpu(uint64_t ns)
{
    uint64_t end = pt_thread_cpu_ns() + ns;
    volatile uint64_t x = 0;
    while (pt_thread_cpu_ns() < end)
        for (int i = 0; i < 1000; i++)
            x = x + (uint64_t)i;
}

static uint64_t seen_last_cpu;

/* Check ev is a CpuTime of this thread between lo and hi and non-decreasing. */
static void check_cpu(const pt_event_t *ev, uint64_t ticks, uint64_t lo, uint64_t hi, const char *what)
{
    CHECKF(ev->kind == PT_EV_CPU_TIME, "%s: kind %u, want CpuTime", what, ev->kind);
    CHECKF(ev->ticks == ticks, "%s: ticks %" PRIu64 ", want the next record's %" PRIu64, what, ev->ticks, ticks);
    uint64_t v = cpu_of(ev);
    CHECKF(v >= (lo & PT_CPU_MASK) && v <= (hi & PT_CPU_MASK), "%s: cpu %" PRIu64 " not in [%" PRIu64 ", %" PRIu64 "]",
           what, v, lo, hi);
    CHECKF(v >= seen_last_cpu, "%s: cpu went back (%" PRIu64 " < %" PRIu64 ")", what, v, seen_last_cpu);
    seen_last_cpu = v;
}

typedef struct requester {
    pt_ring_t *ring;
    int write_now;         /* pt_ring_write_cpu instead of a request */
    int rc;
    uint64_t own_cpu;      /* the calling thread's CPU time after */
} requester_t;

static void *requester_main(void *arg)
{
    requester_t *r = arg;
    if (r->write_now)
        r->rc = pt_ring_write_cpu(r->ring, 9999);
    else
        pt_ring_request_cpu_sample(r->ring);
    r->own_cpu = pt_thread_cpu_ns();
    return NULL;
}

static void run_requester(requester_t *r)
{
    pthread_t th;
    if (pthread_create(&th, NULL, requester_main, r) != 0 || pthread_join(th, NULL) != 0)
        exit(2);
}

static void test_cpu_records(void)
{
    fixture_t f;
    fixture_init(&f);
    pt_ring_t *ring = &f.ring;
    static pt_event_t buf[8192];
    seen_last_cpu = 0;

    /* without the CPU clock: no CpuTime, no request effect */
    CHECK(push_call(ring, 1) == 0);
    pt_ring_request_cpu_sample(ring);
    CHECKF(atomic_load(&ring->limit) == f.epc, "a request before set_cpu_clock changes nothing");
    CHECK(drain(&f, buf, 8192) == 1 && buf[0].kind == PT_EV_CALL);

    /* (a) the first push after set_cpu_clock (the attach's Frame run): CpuTime first */
    CHECK(pt_ring_set_cpu_clock(ring) == 0);
    spin_cpu(2000000);
    uint64_t lo = pt_thread_cpu_ns();
    CHECK(pt_ring_push(ring, 10, 77, PT_EV_FRAME, 0, 0) == 0);
    uint64_t hi = pt_thread_cpu_ns();
    CHECK(pt_ring_push(ring, 10, 78, PT_EV_FRAME, 0, 1) == 0);
    CHECK(push_call(ring, 11) == 0);
    uint64_t n = drain(&f, buf, 8192);
    CHECKF(n == 4, "start: %" PRIu64 " records, want CpuTime, 2 frames, call", n);
    check_cpu(&buf[0], 10, lo, hi, "start");
    CHECK(buf[1].kind == PT_EV_FRAME && buf[2].kind == PT_EV_FRAME && buf[3].kind == PT_EV_CALL);
    CHECKF(atomic_load(&ring->limit) == f.epc, "limit restored after the baseline");

    /* no sample due: a poke of the slow path writes none */
    pt_ring_request_slow_path(ring);
    CHECK(push_call(ring, 12) == 0);
    CHECK(drain(&f, buf, 8192) == 1 && buf[0].kind == PT_EV_CALL);

    /* (c) on request by another thread: one CpuTime before the owner's next record */
    spin_cpu(2000000);
    requester_t r = {.ring = ring};
    run_requester(&r);
    CHECKF(atomic_load(&ring->limit) == 0, "a request sends the owner to the slow path");
    lo = pt_thread_cpu_ns();
    CHECK(push_call(ring, 13) == 0);
    hi = pt_thread_cpu_ns();
    CHECK(push_call(ring, 14) == 0);
    n = drain(&f, buf, 8192);
    CHECKF(n == 3, "request: %" PRIu64 " records, want CpuTime, 2 calls", n);
    check_cpu(&buf[0], 13, lo, hi, "request");
    CHECK(buf[1].kind == PT_EV_CALL && buf[2].kind == PT_EV_CALL);
    CHECKF(cpu_of(&buf[0]) >= 4000000, "the owner's CPU time (%" PRIu64 " ns), not the requester's",
           cpu_of(&buf[0]));

    /* (a) a reader's stack request: CpuTime, the stack, the record */
    f.frames = 3;
    atomic_store(&f.slot->stack_request, 1);
    pt_ring_request_slow_path(ring);
    lo = pt_thread_cpu_ns();
    CHECK(push_call(ring, 15) == 0);
    hi = pt_thread_cpu_ns();
    n = drain(&f, buf, 8192);
    CHECKF(n == 1 + 3 + 1, "stack request: %" PRIu64 " records, want CpuTime, 3 frames, call", n);
    check_cpu(&buf[0], 15, lo, hi, "stack request");
    CHECK(buf[1].kind == PT_EV_FRAME && buf[3].kind == PT_EV_FRAME && buf[4].kind == PT_EV_CALL);

    /* (b) every chunk change: the first record of each new chunk is a CpuTime
     * with the ticks of the record that follows it */
    uint64_t t = 100;
    uint64_t chunk0 = ring->head;
    uint64_t cpu_records = 0, calls = 0;
    for (int k = 0; k < 3 * (int)f.epc; k++) {
        CHECK(push_call(ring, t++) == 0);
        if (k % 512 == 0)
            spin_cpu(100000);
        n = drain(&f, buf, 8192);
        for (uint64_t i = 0; i < n; i++) {
            if (buf[i].kind == PT_EV_CPU_TIME) {
                cpu_records++;
                CHECKF(i + 1 < n && buf[i + 1].ticks == buf[i].ticks, "a chunk's CpuTime precedes its record");
                check_cpu(&buf[i], buf[i].ticks, 0, pt_thread_cpu_ns(), "chunk change");
                CHECKF(i == 0 && n == 2 && f.c.index == 2, "CpuTime first in its chunk (at %" PRIu64 " of %" PRIu64
                       ", chunk index %u)", i, n, f.c.index);
            } else {
                calls++;
            }
        }
    }
    uint64_t changes = ring->head - chunk0;
    CHECKF(changes >= 2 && cpu_records == changes, "%" PRIu64 " CpuTime records for %" PRIu64 " chunk changes",
           cpu_records, changes);
    CHECKF(calls == 3 * (uint64_t)f.epc, "every call record came through (%" PRIu64 ")", calls);

    /* (a) after a Lost gap: Lost, CpuTime, the stack, the record */
    uint64_t dropped = 0;
    while (push_call(ring, t) == 0)
        t++;
    dropped++;
    CHECK(push_call(ring, t) == -ENOBUFS);
    dropped++;
    (void)drain(&f, buf, 8192);
    lo = pt_thread_cpu_ns();
    CHECK(push_call(ring, t + 1) == 0);
    hi = pt_thread_cpu_ns();
    n = drain(&f, buf, 8192);
    CHECKF(n == 1 + 1 + 3 + 1, "after a gap: %" PRIu64 " records, want Lost, CpuTime, 3 frames, call", n);
    CHECKF(buf[0].kind == PT_EV_LOST && buf[0].id == dropped, "Lost(%" PRIu64 ") first", dropped);
    check_cpu(&buf[1], t + 1, lo, hi, "after a gap");
    CHECK(buf[2].kind == PT_EV_FRAME && buf[4].kind == PT_EV_FRAME && buf[5].kind == PT_EV_CALL);
    t += 2;

    /* (d) the end, written by another thread: the owner's clock, not its own */
    spin_cpu(5000000);
    uint64_t owner_before = pt_thread_cpu_ns();
    requester_t w = {.ring = ring, .write_now = 1};
    run_requester(&w);
    CHECKF(w.rc == 0, "write_cpu from another thread: %d", w.rc);
    n = drain(&f, buf, 8192);
    CHECKF(n == 1, "write_cpu: %" PRIu64 " records", n);
    check_cpu(&buf[0], 9999, owner_before, pt_thread_cpu_ns(), "write_cpu by another thread");
    CHECKF(cpu_of(&buf[0]) > w.own_cpu, "the owner's CPU (%" PRIu64 "), not the writer's (%" PRIu64 ")",
           cpu_of(&buf[0]), w.own_cpu);

    /* counts: every CpuTime is a record */
    pt_ring_flush_counters(ring);
    CHECKF(atomic_load(&f.slot->events_written) == records_read,
           "events_written %" PRIu64 " == records read %" PRIu64, (uint64_t)atomic_load(&f.slot->events_written),
           records_read);
    CHECK(f.c.header_errors == 0 && f.c.length_errors == 0);
    fixture_free(&f);
}

typedef struct hammer {
    pt_ring_t *ring;
    _Atomic int stop;
    _Atomic uint64_t requests;
} hammer_t;

static void *hammer_main(void *arg)
{
    hammer_t *h = arg;
    while (!atomic_load(&h->stop)) {
        pt_ring_request_cpu_sample(h->ring);
        atomic_fetch_add(&h->requests, 1);
        for (volatile int i = 0; i < 2000; i++)
            ;
    }
    return NULL;
}

/* Requests from another thread while the owner pushes: every record arrives
 * in order, each CpuTime is followed by a record with its ticks, values never
 * go back, the requests are served (many CpuTime records beyond the chunk
 * changes), and the limit is the chunk's again once the hammering stops. */
static void test_concurrent_requests(void)
{
    fixture_t f;
    fixture_init(&f);
    pt_ring_t *ring = &f.ring;
    static pt_event_t buf[8192];
    seen_last_cpu = 0;
    CHECK(pt_ring_set_cpu_clock(ring) == 0);
    hammer_t h = {.ring = ring};
    pthread_t th;
    if (pthread_create(&th, NULL, hammer_main, &h) != 0)
        exit(2);
    /* at least TC_RECORDS, and on until requests made while the owner pushes
     * were served (on a loaded machine the requester may run only later), at
     * most 5 s */
    uint64_t total = TC_RECORDS;
    uint64_t next = 0, cpu_records = 0, first_head = ring->head;
    uint64_t deadline = pt_monotonic_ns() + 5000000000ull;
    for (uint64_t t = 0;; t++) {
        if (t >= total) {
            if (cpu_records > ring->head - first_head + 10 || pt_monotonic_ns() > deadline)
                break;
            total = t + 65536;
        }
        CHECK(push_call(ring, t) == 0);
        if ((t & 255) != 255)
            continue;
        uint64_t n = drain(&f, buf, 8192);
        for (uint64_t i = 0; i < n; i++) {
            if (buf[i].kind == PT_EV_CPU_TIME) {
                cpu_records++;
                CHECK(i + 1 < n && buf[i + 1].ticks == buf[i].ticks);
                uint64_t v = cpu_of(&buf[i]);
                CHECK(v >= seen_last_cpu);
                seen_last_cpu = v;
            } else if (buf[i].ticks != next++) {
                CHECKF(0, "record %" PRIu64 " out of order", next - 1);
                break;
            }
        }
    }
    atomic_store(&h.stop, 1);
    pthread_join(th, NULL);
    uint64_t changes = ring->head - first_head;
    printf("concurrent requests: %" PRIu64 " requests, %" PRIu64 " CpuTime records for %" PRIu64
           " records and %" PRIu64 " chunk changes\n", (uint64_t)atomic_load(&h.requests), cpu_records, total,
           changes);
    CHECKF(cpu_records > changes + 1, "requests served: %" PRIu64 " CpuTime records, %" PRIu64 " chunk changes",
           cpu_records, changes);
    CHECK(push_call(ring, total) == 0); /* serves a request left by the hammer, if any */
    CHECK(push_call(ring, total + 1) == 0);
    CHECKF(atomic_load(&ring->limit) == f.epc, "the fast path's limit is back");
    fixture_free(&f);
}

int main(void)
{
    test_cpu_records();
    test_concurrent_requests();
    if (failures) {
        fprintf(stderr, "test_ring_cpu: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_ring_cpu: all checks passed\n");
    return 0;
}
