/*
 * reader_bench: how fast the reader library drains rings and hands out
 * EventChunk messages (copy + validation + framing), on one core.
 *
 *   prefilled   producer threads fill R rings completely, then the reader
 *               drains them; only the drain is timed (repeated)
 *   streaming   one producer thread pushes continuously (wait policy, so it
 *               is throttled by the reader, nothing is dropped) while the
 *               reader polls; events handed out per second of wall time
 *
 * The callback only counts, so the figure is the library's own cost.
 * Usage: reader_bench [seconds-for-streaming (default 2)]
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shm/clock.h"
#include "shm/reader.h"
#include "shm/segment.h"
#include "shm/symlog.h"

#define CHUNK_BYTES (1u << 20)
#define CHUNKS_PER_RING 16u
#define RINGS 4u

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct counter { uint64_t events, messages; } counter_t;

static int count_msg(void *ctx, uint32_t type, const uint8_t *msg, size_t len)
{
    counter_t *c = ctx;
    (void)msg;
    c->messages++;
    if (type == PT_MSG_EVENT_CHUNK)
        c->events += (len - PT_CHUNK_HEADER_BYTES) / sizeof(pt_event_t);
    return 0;
}

typedef struct prod {
    pt_segment_t *seg;
    uint32_t symbol;
    uint64_t events;      /* prefilled: records to push; streaming: 0 = until stop */
    _Atomic int *stop;
    uint64_t pushed;
    int rc;
} prod_t;

static void *producer(void *p)
{
    prod_t *a = p;
    pt_ring_t ring;
    a->rc = pt_segment_claim_ring(a->seg, 0, "bench", 0, &ring);
    if (a->rc != 0)
        return NULL;
    uint64_t i = 0;
    if (a->events) {
        for (; i < a->events; i++)
            (void)pt_ring_push(&ring, i, a->symbol, (i & 1) ? PT_EV_RETURN : PT_EV_CALL, 0, 0);
    } else {
        /* relaxed: a stop flag, orders nothing */
        while (!atomic_load_explicit(a->stop, memory_order_relaxed)) {
            for (int k = 0; k < 4096; k++, i++)
                (void)pt_ring_push(&ring, i, a->symbol, (i & 1) ? PT_EV_RETURN : PT_EV_CALL, 0, 0);
        }
    }
    a->pushed = i;
    pt_segment_retire_ring(a->seg, &ring, i);
    return NULL;
}

static pt_segment_t *make_segment(uint32_t policy)
{
    pt_segment_config_t cfg = {0};
    cfg.ring_count = RINGS;
    cfg.chunk_bytes = CHUNK_BYTES;
    cfg.chunks_per_ring = CHUNKS_PER_RING;
    cfg.symlog_bytes = 1u << 20;
    cfg.drop_policy = policy;
    cfg.wait_timeout_ns = 10ull * 1000000000ull;
    cfg.cmdline = "reader_bench";
    cfg.clock_kind = PT_CLOCK_MONOTONIC;
    cfg.ticks_per_second = 1000000000ull;
    pt_segment_t *seg = NULL;
    char err[256] = "";
    if (pt_segment_create(&cfg, &seg, err, sizeof err) != 0) {
        fprintf(stderr, "reader_bench: cannot create a segment: %s\n", err);
        exit(1);
    }
    return seg;
}

static pt_reader_t *attach(pt_segment_t *seg)
{
    pt_reader_t *r = NULL;
    char err[256] = "";
    if (pt_reader_attach(pt_segment_name(seg), 0, &r, err, sizeof err) != 0) {
        fprintf(stderr, "reader_bench: cannot attach: %s\n", err);
        exit(1);
    }
    return r;
}

static void bench_prefilled(void)
{
    const uint64_t per_ring = (uint64_t)PT_CHUNK_EVENTS(CHUNK_BYTES) * CHUNKS_PER_RING;
    const int rounds = 5;
    double best = 0, total_s = 0;
    uint64_t total_events = 0;
    pt_segment_t *seg = make_segment(PT_POLICY_DROP);
    pt_reader_t *r = attach(seg);
    uint32_t sym = 0;
    pt_symlog_append(seg, PT_SYM_PY_FUNCTION, "bench.f", "bench.py", 1, &sym);
    counter_t c = {0, 0};
    for (int round = 0; round < rounds; round++) {
        prod_t a[RINGS];
        pthread_t th[RINGS];
        for (uint32_t i = 0; i < RINGS; i++) {
            a[i] = (prod_t){seg, sym, per_ring, NULL, 0, 0};
            pthread_create(&th[i], NULL, producer, &a[i]);
        }
        for (uint32_t i = 0; i < RINGS; i++)
            pthread_join(th[i], NULL);
        uint64_t before = c.events;
        double t0 = now_s();
        long rc;
        do {
            rc = pt_reader_poll(r, count_msg, &c, 0);
        } while (rc > 0);
        double dt = now_s() - t0;
        uint64_t n = c.events - before;
        if (rc < 0 || n != per_ring * RINGS) {
            fprintf(stderr, "reader_bench: drained %llu of %llu (rc %ld: %s)\n", (unsigned long long)n,
                    (unsigned long long)(per_ring * RINGS), rc, pt_reader_error(r));
            exit(1);
        }
        double rate = (double)n / dt;
        if (rate > best)
            best = rate;
        total_s += dt;
        total_events += n;
    }
    printf("prefilled: %u rings x %llu events, %d rounds: mean %.1f M events/s, best %.1f M events/s "
           "(%.2f ns/event, %.2f GB/s of records)\n",
           RINGS, (unsigned long long)per_ring, rounds, (double)total_events / total_s / 1e6, best / 1e6,
           total_s / (double)total_events * 1e9, (double)total_events * 16 / total_s / 1e9);
    pt_reader_detach(r, 0);
    pt_segment_close(seg, 1);
}

static void bench_streaming(double seconds)
{
    pt_segment_t *seg = make_segment(PT_POLICY_WAIT);
    pt_reader_t *r = attach(seg);
    uint32_t sym = 0;
    pt_symlog_append(seg, PT_SYM_PY_FUNCTION, "bench.f", "bench.py", 1, &sym);
    _Atomic int stop = 0;
    prod_t a = {seg, sym, 0, &stop, 0, 0};
    pthread_t th;
    counter_t c = {0, 0};
    pthread_create(&th, NULL, producer, &a);
    double t0 = now_s(), t = t0;
    uint64_t idle = 0;
    while ((t = now_s()) - t0 < seconds) {
        long rc = pt_reader_poll(r, count_msg, &c, 0);
        if (rc < 0) {
            fprintf(stderr, "reader_bench: %s\n", pt_reader_error(r));
            exit(1);
        }
        if (rc == 0)
            idle++;
    }
    double dt = t - t0;
    uint64_t got = c.events;
    atomic_store_explicit(&stop, 1, memory_order_relaxed);
    /* keep draining so a waiting producer can finish */
    while (1) {
        long rc = pt_reader_poll(r, count_msg, &c, 0);
        if (rc <= 0 && pthread_tryjoin_np(th, NULL) == 0)
            break;
    }
    while (pt_reader_poll(r, count_msg, &c, 0) > 0) {
    }
    pt_reader_stats_t st;
    pt_reader_stats(r, &st);
    printf("streaming: 1 producer thread + reader, %.1f s: %.1f M events/s handed out "
           "(%llu events, %llu idle polls; total %llu of %llu pushed, %llu dropped)\n",
           dt, (double)got / dt / 1e6, (unsigned long long)got, (unsigned long long)idle,
           (unsigned long long)c.events, (unsigned long long)a.pushed,
           (unsigned long long)st.producer_events_dropped);
    pt_reader_detach(r, 0);
    pt_segment_close(seg, 1);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 2.0;
    if (seconds <= 0)
        seconds = 2.0;
    bench_prefilled();
    bench_streaming(seconds);
    return 0;
}
