/*
 * ring_bench: what the ring costs, without the clock (ticks = loop counter).
 *
 *   push, no consumer       ns per pt_ring_push into a ring that never fills
 *   push, consumer thread   ns per push while a second thread drains (wait
 *                           policy, so nothing is dropped; includes the waits)
 *   drain, one core         events/s a consumer copies out of a full ring
 *   cross-process           events/s from a forked producer to this process
 *                           through a real shm segment (wait policy)
 *   clock                   ns per pt_clock_now (TSC and CLOCK_MONOTONIC)
 *
 * Usage: ring_bench [events]   (default 200M)
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/clock.h"
#include "shm/ring.h"
#include "shm/segment.h"

#define CHUNK_BYTES (64u << 10)
#define CHUNKS 64u

typedef struct drain {
    pt_ring_slot_t *slot;
    uint8_t *base;
    uint32_t chunk_bytes, chunks, epc;
    uint64_t chunk;
    uint32_t index;
    uint64_t events;
    uint64_t checksum;
    pt_event_t *buf;
} drain_t;

static void drain_init(drain_t *d, pt_ring_slot_t *slot, uint8_t *base, uint32_t chunk_bytes, uint32_t chunks)
{
    memset(d, 0, sizeof *d);
    d->slot = slot;
    d->base = base;
    d->chunk_bytes = chunk_bytes;
    d->chunks = chunks;
    d->epc = (uint32_t)PT_CHUNK_EVENTS(chunk_bytes);
    d->buf = aligned_alloc(64, chunk_bytes);
}

/* One consumer step, as a reader does it: acquire head, acquire length, copy,
 * release the chunk once the producer moved past it. Returns events copied. */
static uint32_t drain_step(drain_t *d)
{
    /* acquire: pairs with the producer's release store of head_chunk */
    uint64_t head = atomic_load_explicit(&d->slot->head_chunk, memory_order_acquire);
    uint8_t *chunk = d->base + (size_t)(d->chunk & (d->chunks - 1)) * d->chunk_bytes;
    /* acquire: pairs with the release store of the length in pt_ring_store_ */
    uint32_t len = atomic_load_explicit((_Atomic uint32_t *)(void *)(chunk + PT_CHUNK_OFF_LENGTH),
                                        memory_order_acquire);
    uint32_t n = len - d->index;
    if (n > 0) {
        memcpy(d->buf, chunk + PT_CHUNK_OFF_EVENTS + (size_t)d->index * 16, (size_t)n * 16);
        d->checksum += d->buf[n - 1].ticks;
        d->index = len;
        d->events += n;
    }
    if (d->chunk < head && d->index == len) {
        d->chunk++;
        d->index = 0;
        /* release: done with the chunk; pairs with the producer's acquire */
        atomic_store_explicit(&d->slot->released_chunks, d->chunk, memory_order_release);
    }
    return n;
}

static double now_s(void)
{
    return (double)pt_monotonic_ns() / 1e9;
}

typedef struct consumer_arg {
    drain_t d;
    uint64_t target;
} consumer_arg_t;

static void *consumer_thread(void *varg)
{
    consumer_arg_t *a = varg;
    /* A reader polls; it does not chase the producer record by record (that
     * would bounce the chunk-length cache line on every push). When little
     * was ready, back off for about a microsecond. */
    while (a->d.events < a->target) {
        if (drain_step(&a->d) < 1024)
            for (int i = 0; i < 100; i++)
                _mm_pause();
    }
    return NULL;
}

static void bench_push_alone(uint64_t events)
{
    pt_ring_slot_t *slot = aligned_alloc(64, sizeof *slot);
    uint8_t *base = aligned_alloc(4096, (size_t)CHUNK_BYTES * CHUNKS);
    memset(slot, 0, sizeof *slot);
    memset(base, 0, (size_t)CHUNK_BYTES * CHUNKS);
    pt_ring_t ring;
    uint64_t capacity = PT_CHUNK_EVENTS(CHUNK_BYTES) * CHUNKS, done = 0;
    double total = 0;
    while (done < events) {
        pt_ring_init(&ring, slot, base, CHUNK_BYTES, CHUNKS, PT_POLICY_DROP, 0, 0, 1);
        uint64_t n = capacity < events - done ? capacity : events - done;
        double t0 = now_s();
        for (uint64_t i = 0; i < n; i++)
            pt_ring_push(&ring, done + i, (uint32_t)i, PT_EV_CALL, 0, 0);
        total += now_s() - t0;
        done += n;
    }
    printf("push, no consumer (ring never full):      %6.2f ns/event  (%" PRIu64 " events)\n", total * 1e9 / (double)events,
           events);
    free(slot);
    free(base);
}

static void bench_push_with_consumer(uint64_t events)
{
    pt_ring_slot_t *slot = aligned_alloc(64, sizeof *slot);
    uint8_t *base = aligned_alloc(4096, (size_t)CHUNK_BYTES * CHUNKS);
    memset(slot, 0, sizeof *slot);
    memset(base, 0, (size_t)CHUNK_BYTES * CHUNKS);
    pt_ring_t ring;
    pt_ring_init(&ring, slot, base, CHUNK_BYTES, CHUNKS, PT_POLICY_WAIT, 10000000000ull, 0, 1);
    consumer_arg_t *a = calloc(1, sizeof *a);
    drain_init(&a->d, slot, base, CHUNK_BYTES, CHUNKS);
    a->target = events;
    pthread_t tid;
    pthread_create(&tid, NULL, consumer_thread, a);
    double t0 = now_s();
    uint64_t dropped = 0;
    for (uint64_t i = 0; i < events; i++)
        dropped += pt_ring_push(&ring, i, (uint32_t)i, PT_EV_CALL, 0, 0) != 0;
    double t1 = now_s();
    pt_ring_flush_counters(&ring);
    pthread_join(tid, NULL);
    double t2 = now_s();
    printf("push, consumer thread draining (wait):    %6.2f ns/event  (%" PRIu64 " events, %" PRIu64
           " dropped, drained at %.0f M events/s)\n",
           (t1 - t0) * 1e9 / (double)events, events, dropped, (double)events / (t2 - t0) / 1e6);
    free(a->d.buf);
    free(a);
    free(slot);
    free(base);
}

static void bench_drain(uint64_t events)
{
    const uint32_t chunks = 1024; /* 64 MiB ring, about 4.2M events */
    pt_ring_slot_t *slot = aligned_alloc(64, sizeof *slot);
    uint8_t *base = aligned_alloc(4096, (size_t)CHUNK_BYTES * chunks);
    memset(slot, 0, sizeof *slot);
    memset(base, 0, (size_t)CHUNK_BYTES * chunks);
    pt_ring_t ring;
    drain_t d;
    drain_init(&d, slot, base, CHUNK_BYTES, chunks);
    uint64_t capacity = PT_CHUNK_EVENTS(CHUNK_BYTES) * chunks, done = 0;
    double total = 0;
    while (done < events) {
        pt_ring_init(&ring, slot, base, CHUNK_BYTES, chunks, PT_POLICY_DROP, 0, 0, 1);
        for (uint64_t i = 0; i < capacity; i++)
            pt_ring_push(&ring, i, (uint32_t)i, PT_EV_CALL, 0, 0);
        d.chunk = 0;
        d.index = 0;
        uint64_t before = d.events;
        double t0 = now_s();
        while (d.events - before < capacity)
            drain_step(&d);
        total += now_s() - t0;
        done += d.events - before;
    }
    printf("drain, one core (full ring, copy out):    %6.1f M events/s (%" PRIu64 " events, checksum %" PRIu64 ")\n",
           (double)done / total / 1e6, done, d.checksum & 0xff);
    free(d.buf);
    free(slot);
    free(base);
}

static void bench_cross_process(uint64_t events)
{
    pt_segment_config_t cfg = {.ring_count = 1, .chunk_bytes = CHUNK_BYTES, .chunks_per_ring = CHUNKS,
                               .symlog_bytes = 4096, .drop_policy = PT_POLICY_WAIT,
                               .wait_timeout_ns = 10000000000ull, .clock_kind = PT_CLOCK_MONOTONIC};
    pt_segment_t *seg;
    char err[256];
    if (pt_segment_create(&cfg, &seg, err, sizeof err) != 0) {
        printf("cross-process: %s\n", err);
        return;
    }
    double t0 = now_s();
    pid_t child = fork();
    if (child == 0) {
        pt_ring_t ring;
        if (pt_segment_claim_ring(seg, 1, "bench", 0, &ring) != 0)
            _exit(1);
        for (uint64_t i = 0; i < events; i++)
            pt_ring_push(&ring, i, (uint32_t)i, PT_EV_CALL, 0, 0);
        pt_segment_retire_ring(seg, &ring, events);
        _exit(0);
    }
    pt_segment_t *r;
    if (pt_segment_attach(pt_segment_name(seg), 0, &r, err, sizeof err) != 0) {
        printf("cross-process: %s\n", err);
        return;
    }
    pt_ring_slot_t *slot = pt_segment_slot(r, 0);
    /* acquire: pairs with the claim's release store of generation */
    while (atomic_load_explicit(&slot->generation, memory_order_acquire) == 0)
        ;
    drain_t d;
    drain_init(&d, slot, pt_segment_ring_base(r, 0), CHUNK_BYTES, CHUNKS);
    while (d.events < events) {
        if (drain_step(&d) < 1024)
            for (int i = 0; i < 100; i++)
                _mm_pause();
    }
    double t1 = now_s();
    waitpid(child, NULL, 0);
    printf("cross-process (fork, shm, wait policy):   %6.1f M events/s (%" PRIu64 " events, %" PRIu64 " dropped)\n",
           (double)events / (t1 - t0) / 1e6, events,
           (uint64_t)atomic_load_explicit(&slot->events_dropped, memory_order_relaxed));
    free(d.buf);
    pt_segment_close(r, 0);
    pt_segment_close(seg, 1);
}

static void bench_clock(void)
{
    for (int kind = PT_CLOCK_TSC; kind >= PT_CLOCK_MONOTONIC; kind--) {
        pt_clock_t clock;
        pt_clock_init(&clock, kind);
        if ((int)clock.kind != kind)
            continue;
        const uint64_t calls = 20000000;
        volatile uint64_t sink = 0;
        double t0 = now_s();
        for (uint64_t i = 0; i < calls; i++)
            sink += pt_clock_now(&clock);
        double t = now_s() - t0;
        (void)sink;
        printf("clock, pt_clock_now (%-9s):          %6.2f ns/call   (for reference; not in the push figures)\n",
               kind == PT_CLOCK_TSC ? "tsc" : "monotonic", t * 1e9 / (double)calls);
    }
}

int main(int argc, char **argv)
{
    uint64_t events = argc > 1 ? strtoull(argv[1], NULL, 10) : 200000000ull;
    printf("ring_bench: %" PRIu64 " events, ring %u x %u KiB (ticks = loop counter, no clock)\n", events, CHUNKS,
           CHUNK_BYTES >> 10);
    bench_push_alone(events);
    bench_push_with_consumer(events);
    bench_drain(events);
    bench_cross_process(events);
    bench_clock();
    return 0;
}
