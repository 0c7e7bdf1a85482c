/*
 * tests/unit/reader: producer threads and the reader in one process, so that
 * ThreadSanitizer sees both sides of every atomic (built twice: plain and with
 * -fsanitize=thread). Producers intern symbols continuously and use them at
 * once; the reader checks that every record arrives once, in order, after
 * the symbol it names, and that rings are freed and reclaimed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../check.h"
#include "schema/pt_fb.h"
#include "shm/reader.h"
#include "shm/segment.h"
#include "shm/symlog.h"

#ifndef RT_EVENTS
#define RT_EVENTS 300000ull
#endif
#define RT_THREADS 4 /* on 2 rings: the last two need rings the reader freed */


typedef struct arg {
    pt_segment_t *seg;
    int index;
    int failed;
} arg_t;

static void *producer(void *p)
{
    arg_t *a = p;
    pt_ring_t ring;
    int rc;
    while ((rc = pt_segment_claim_ring(a->seg, (uint64_t)a->index, "t", 0, &ring)) == -EAGAIN) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    if (rc != 0) {
        a->failed = 1;
        return NULL;
    }
    uint32_t id = 0;
    for (uint64_t i = 0; i < RT_EVENTS; i++) {
        if (i % 512 == 0) {
            char fn[48];
            snprintf(fn, sizeof fn, "f_%d_%llu", a->index, (unsigned long long)i);
            if (pt_symlog_append(a->seg, PT_SYM_PY_FUNCTION, fn, "x.py", 1, &id) != 0)
                a->failed = 1;
        }
        if (pt_ring_push(&ring, i, id, PT_EV_CALL, 0, 0) != 0)
            a->failed = 1;
    }
    pt_segment_retire_ring(a->seg, &ring, RT_EVENTS);
    return NULL;
}

typedef struct coll {
    uint32_t max_symbol;
    uint64_t next[64];
    uint64_t events;
    int started[64], ended[64];
    int errors;
} coll_t;

static int on_msg(void *ctx, uint32_t type, const uint8_t *msg, size_t len)
{
    coll_t *c = ctx;
    pt_fb_msg_t m;
    if (pt_fb_parse(msg, len, &m, NULL, 0) != 0 || m.type != type) {
        c->errors++;
        return 0;
    }
    if (type == PT_MSG_SYMBOL) {
        c->errors += m.u.symbol.id != c->max_symbol + 1;
        c->max_symbol = m.u.symbol.id;
    } else if (type == PT_MSG_THREAD_START) {
        uint64_t t = m.u.thread_start.thread;
        c->errors += t >= 64 || c->started[t];
        if (t < 64)
            c->started[t] = 1;
    } else if (type == PT_MSG_THREAD_END) {
        uint64_t t = m.u.thread_end.thread;
        c->errors += t >= 64 || !c->started[t] || c->next[t] != RT_EVENTS;
        if (t < 64)
            c->ended[t] = 1;
    } else if (type == PT_MSG_EVENT_CHUNK) {
        const pt_fb_event_chunk_t *ec = &m.u.event_chunk;
        if (ec->thread >= 64 || !c->started[ec->thread] || c->ended[ec->thread] ||
            ec->first_event != c->next[ec->thread]) {
            c->errors++;
            return 0;
        }
        for (uint32_t k = 0; k < ec->count; k++)
            if (ec->events[k].ticks != ec->first_event + k || ec->events[k].id > c->max_symbol ||
                ec->events[k].id == 0) {
                c->errors++;
                break;
            }
        c->next[ec->thread] += ec->count;
        c->events += ec->count;
    }
    return 0;
}

int main(void)
{
    pt_segment_config_t cfg = {0};
    cfg.ring_count = 2;
    cfg.chunk_bytes = 4096;
    cfg.chunks_per_ring = 4;
    cfg.symlog_bytes = 4u << 20;
    cfg.drop_policy = PT_POLICY_WAIT;
    cfg.wait_timeout_ns = 60ull * 1000000000ull;
    cfg.clock_kind = PT_CLOCK_MONOTONIC;
    cfg.ticks_per_second = 1000000000ull;
    pt_segment_t *seg = NULL;
    char err[256] = "";
    if (pt_segment_create(&cfg, &seg, err, sizeof err) != 0) {
        fprintf(stderr, "pt_segment_create: %s\n", err);
        return 1;
    }
    pt_reader_t *r = NULL;
    if (pt_reader_attach(pt_segment_name(seg), 0, &r, err, sizeof err) != 0) {
        fprintf(stderr, "pt_reader_attach: %s\n", err);
        return 1;
    }
    arg_t args[RT_THREADS];
    pthread_t th[RT_THREADS];
    for (int i = 0; i < RT_THREADS; i++) {
        args[i] = (arg_t){seg, i, 0};
        pthread_create(&th[i], NULL, producer, &args[i]);
    }
    coll_t c;
    memset(&c, 0, sizeof c);
    int joined = 0;
    while (!pt_reader_finished(r)) {
        long rc = pt_reader_poll(r, on_msg, &c, 5000);
        if (rc < 0) {
            fprintf(stderr, "poll: %ld %s\n", rc, pt_reader_error(r));
            failures++;
            break;
        }
        if (!joined && c.events == RT_THREADS * RT_EVENTS) {
            for (int i = 0; i < RT_THREADS; i++) {
                pthread_join(th[i], NULL);
                CHECK(!args[i].failed);
            }
            joined = 1;
            pt_segment_set_state(seg, PT_STATE_EXITED);
        }
    }
    CHECK(joined);
    CHECK(c.errors == 0);
    CHECK(c.events == RT_THREADS * RT_EVENTS);
    for (int t = 1; t <= RT_THREADS; t++)
        CHECK(c.started[t] && c.ended[t]);
    pt_reader_detach(r, 0);
    pt_segment_close(seg, 1);
    if (failures)
        return 1;
    printf("reader_threads: %llu events from %d threads, %u symbols, all in order\n", (unsigned long long)c.events,
           RT_THREADS, c.max_symbol);
    return 0;
}
