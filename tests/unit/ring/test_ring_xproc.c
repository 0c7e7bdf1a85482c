/*
 * Ring, producer and consumer running at the same time through a real shm
 * segment with a small ring (4 chunks of 4 KiB, 1004 records):
 *
 *   wait policy: every record arrives, strictly in order, nothing dropped;
 *   drop policy: records read + records dropped == records pushed, exactly,
 *                and every gap in the sequence is announced by a Lost record
 *                whose count equals the gap, followed by the stack (Frame
 *                records), then the next record.
 *
 * Default build: producer and consumer are two processes (fork); the consumer
 * attaches to the segment by name, as a reader does. With -DTC_THREADS (the
 * ThreadSanitizer build) they are two threads sharing one mapping, so TSan sees
 * every access and every acquire/release pair.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef TC_THREADS
#include <pthread.h>
#endif

#include "../check.h"
#include "shm/clock.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "tc_consumer.h"

#ifndef TC_EVENTS
#define TC_EVENTS 100000000ull
#endif
#define TC_FRAMES 3u


static inline uint32_t seq_id(uint64_t seq)
{
    return (uint32_t)(seq * 2654435761u);
}

static int write_stack(pt_ring_t *ring, void *ctx, uint32_t room, int whole)
{
    (void)ctx;
    if (whole && TC_FRAMES + 1 > room)
        return -EAGAIN;
    for (uint32_t d = 0; d < TC_FRAMES && d + 1 < room; d++)
        pt_ring_push_frame(ring, 0, 0xF0000000u + d, (uint16_t)d, 0);
    return 0;
}

typedef struct producer_args {
    pt_segment_t *seg;
    uint64_t events;
    uint64_t dropped; /* as seen by the producer's return codes */
    int rc;
} producer_args_t;

/* Push `events` records: ticks = sequence, id derived from it. */
static void *producer(void *varg)
{
    producer_args_t *a = varg;
    pt_ring_t ring;
    a->rc = pt_segment_claim_ring(a->seg, 4242, "producer", 0, &ring);
    if (a->rc != 0)
        return NULL;
    pt_ring_set_stack_writer(&ring, write_stack, NULL);
    uint64_t dropped = 0;
    for (uint64_t seq = 0; seq < a->events; seq++) {
        uint8_t kind = (seq & 1) ? PT_EV_RETURN : PT_EV_CALL;
        if (pt_ring_push(&ring, seq, seq_id(seq), kind, 0, (uint16_t)seq) != 0)
            dropped++;
    }
    pt_segment_retire_ring(a->seg, &ring, a->events);
    a->dropped = dropped;
    return NULL;
}

typedef struct verdict {
    uint64_t records;      /* producer records read */
    uint64_t lost_records; /* Lost records read */
    uint64_t lost_total;   /* sum of their counts */
    uint64_t frames;
    uint64_t next_seq;     /* the sequence expected next */
    uint64_t errors;
    uint64_t pending_lost; /* count of the last Lost not yet matched by a record */
    int have_lost;
    uint32_t frames_since_lost;
} verdict_t;

static void fail_once(verdict_t *v, const char *what, uint64_t seq, uint64_t detail)
{
    if (v->errors++ < 10)
        fprintf(stderr, "  stream error at seq %" PRIu64 ": %s (%" PRIu64 ")\n", seq, what, detail);
}

static void check_stream(verdict_t *v, const pt_event_t *ev, uint32_t n, uint32_t policy)
{
    for (uint32_t i = 0; i < n; i++) {
        const pt_event_t *e = &ev[i];
        if (e->kind == PT_EV_LOST) {
            if (policy == PT_POLICY_WAIT)
                fail_once(v, "Lost record in wait mode", v->next_seq, 0);
            if (v->have_lost)
                fail_once(v, "two Lost records without a record between", v->next_seq, 0);
            v->have_lost = 1;
            v->pending_lost = (uint64_t)e->id | ((uint64_t)e->aux << 32);
            v->frames_since_lost = 0;
            v->lost_records++;
            v->lost_total += v->pending_lost;
            continue;
        }
        if (e->kind == PT_EV_FRAME) {
            if (!v->have_lost)
                fail_once(v, "Frame record not after a Lost record", v->next_seq, 0);
            else if (e->id != 0xF0000000u + v->frames_since_lost || e->aux != v->frames_since_lost)
                fail_once(v, "Frame records out of order", v->next_seq, e->id);
            v->frames_since_lost++;
            v->frames++;
            continue;
        }
        uint64_t seq = e->ticks;
        if (seq != v->next_seq) {
            if (seq < v->next_seq)
                fail_once(v, "sequence went backwards", v->next_seq, seq);
            else if (!v->have_lost)
                fail_once(v, "gap without a Lost record", v->next_seq, seq - v->next_seq);
            else if (v->pending_lost != seq - v->next_seq)
                fail_once(v, "Lost count differs from the gap", v->next_seq, v->pending_lost);
        } else if (v->have_lost) {
            fail_once(v, "Lost record without a gap", seq, v->pending_lost);
        }
        if (v->have_lost && v->frames_since_lost != TC_FRAMES)
            fail_once(v, "stack after Lost incomplete", seq, v->frames_since_lost);
        uint8_t kind = (seq & 1) ? PT_EV_RETURN : PT_EV_CALL;
        if (e->id != seq_id(seq) || e->kind != kind || e->aux != (uint16_t)seq || e->flags != 0)
            fail_once(v, "record content wrong", seq, e->id);
        v->have_lost = 0;
        v->records++;
        v->next_seq = seq + 1;
    }
}

static void run(uint32_t policy, uint64_t events)
{
    const char *pname = policy == PT_POLICY_WAIT ? "wait" : "drop";
    pt_clock_t clock;
    pt_clock_init(&clock, -1);
    pt_segment_config_t cfg = {
        .ring_count = 1,
        .chunk_bytes = 4096,
        .chunks_per_ring = 4,
        .symlog_bytes = 4096,
        .drop_policy = policy,
        .wait_timeout_ns = 10ull * 1000000000ull, /* generous: a loaded CI box must not drop */
        .cmdline = "test_ring_xproc",
        .clock_kind = clock.kind,
        .ticks_per_second = clock.ticks_per_second,
    };
    char err[256] = "";
    pt_segment_t *seg = NULL;
    int rc = pt_segment_create(&cfg, &seg, err, sizeof err);
    CHECKF(rc == 0, "create: %s", err);
    if (rc != 0)
        return;

    producer_args_t pa = {.seg = seg, .events = events};
#ifdef TC_THREADS
    pt_segment_t *rseg = seg; /* one mapping, so TSan sees both sides */
    pthread_t tid;
    CHECKF(pthread_create(&tid, NULL, producer, &pa) == 0, "pthread_create");
#else
    pid_t child = fork();
    if (child == 0) {
        producer(&pa);
        if (pa.rc != 0)
            _exit(3);
        /* the producer's own drop count must match the slot counter */
        _exit(pa.dropped == atomic_load(&pt_segment_slot(seg, 0)->events_dropped) ? 0 : 4);
    }
    CHECKF(child > 0, "fork");
    pt_segment_t *rseg = NULL;
    rc = pt_segment_attach(pt_segment_name(seg), 0, &rseg, err, sizeof err);
    CHECKF(rc == 0, "attach %s: %s", pt_segment_name(seg), err);
    if (rc != 0)
        return;
    CHECKF(pt_segment_lock_consumer(rseg, err, sizeof err) == 0, "lock: %s", err);
#endif
    pt_ring_slot_t *slot = pt_segment_slot(rseg, 0);
    /* acquire generation: pairs with the claim's release store; then identity
     * and chunk 0 are complete */
    while (atomic_load_explicit(&slot->generation, memory_order_acquire) == 0)
        ;
    CHECKF(slot->os_tid == 4242 && strcmp(slot->name, "producer") == 0 && slot->thread == 1,
          "identity: tid %" PRIu64 " name %s thread %" PRIu64, slot->os_tid, slot->name, slot->thread);
    tc_consumer_t c;
    tc_init(&c, slot, pt_segment_ring_base(rseg, 0), 4096, 4, slot->thread);

    static pt_event_t buf[1024];
    verdict_t v;
    memset(&v, 0, sizeof v);
    int retired = 0;
    uint64_t polls = 0;
    for (;;) {
#ifdef TC_THREADS
        /* under TSan the producer is slow: pause the consumer now and then so
         * the drop test really drops and recovers */
        if (policy == PT_POLICY_DROP && (++polls & 7) == 0) {
            struct timespec nap = {0, 300000};
            nanosleep(&nap, NULL);
        }
#else
        polls++;
#endif
        uint32_t n = tc_poll(&c, buf, 1024);
        if (n > 0) {
            check_stream(&v, buf, n, policy);
            continue;
        }
        if (retired)
            break;
        /* acquire: pairs with the release store of RETIRED; after it every
         * record is published, so one more full drain ends the stream */
        retired = atomic_load_explicit(&slot->state, memory_order_acquire) == PT_RING_RETIRED;
    }
#ifdef TC_THREADS
    pthread_join(tid, NULL);
    CHECKF(pa.rc == 0, "claim failed: %d", pa.rc);
#else
    int status = 0;
    waitpid(child, &status, 0);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "producer exit status %d", status);
#endif
    uint64_t dropped = atomic_load_explicit(&slot->events_dropped, memory_order_relaxed);
    uint64_t written = atomic_load_explicit(&slot->events_written, memory_order_relaxed);
    /* a trailing gap (drops after the last record) has its Lost record only
     * if there was room at retire; either way it is counted */
    uint64_t trailing = events - v.next_seq;
    uint64_t trailing_announced = v.have_lost ? v.pending_lost : 0;
    CHECKF(!v.have_lost || trailing_announced == trailing, "%s: final Lost(%" PRIu64 ") but %" PRIu64 " missing",
          pname, trailing_announced, trailing);
    CHECKF(v.errors == 0, "%s: %" PRIu64 " stream errors", pname, v.errors);
    CHECKF(c.header_errors == 0 && c.length_errors == 0, "%s: chunk headers %" PRIu64 " lengths %" PRIu64, pname,
          c.header_errors, c.length_errors);
    CHECKF(v.records + dropped == events, "%s: read %" PRIu64 " + dropped %" PRIu64 " != pushed %" PRIu64, pname,
          v.records, dropped, events);
    CHECKF(v.lost_total + trailing - trailing_announced == dropped,
          "%s: Lost counts %" PRIu64 " + unannounced trailing %" PRIu64 " != dropped %" PRIu64, pname,
          v.lost_total, trailing - trailing_announced, dropped);
    CHECKF(written == v.records + v.lost_records + v.frames, "%s: events_written %" PRIu64 " != read %" PRIu64,
          pname, written, v.records + v.lost_records + v.frames);
    if (policy == PT_POLICY_WAIT) {
        CHECKF(dropped == 0 && v.lost_records == 0, "wait: %" PRIu64 " dropped", dropped);
        CHECKF(v.records == events && v.next_seq == events, "wait: read %" PRIu64 " of %" PRIu64, v.records, events);
    }
#ifdef TC_THREADS
    CHECKF(pa.dropped == dropped, "%s: producer saw %" PRIu64 " drops, slot says %" PRIu64, pname, pa.dropped,
          dropped);
#endif
    printf("%s: pushed %" PRIu64 ", read %" PRIu64 ", dropped %" PRIu64 " in %" PRIu64
           " gaps (Lost records), %" PRIu64 " chunks checked\n",
           pname, events, v.records, dropped, v.lost_records, c.chunks_checked);
#ifndef TC_THREADS
    pt_segment_close(rseg, 0);
#endif
    pt_segment_close(seg, 1);
}

int main(int argc, char **argv)
{
    uint64_t events = argc > 1 ? strtoull(argv[1], NULL, 10) : TC_EVENTS;
    run(PT_POLICY_WAIT, events);
    run(PT_POLICY_DROP, events);
    if (failures) {
        fprintf(stderr, "test_ring_xproc: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_ring_xproc: all checks passed\n");
    return 0;
}
