/*
 * A minimal ring consumer for the ring tests, following the protocol of
 * shm/layout.h (the real one is shm/reader.c):
 *
 *   1. acquire-load head_chunk (pairs with the producer's release store when it
 *      starts a chunk: the chunk header and every earlier record are visible);
 *   2. acquire-load the length of chunk `chunk` (pairs with the release store
 *      of the length in pt_ring_store_);
 *   3. copy the records [index, length);
 *   4. if chunk < head the chunk is complete (its last length store came
 *      before the head store): release-store released_chunks = chunk + 1
 *      (pairs with the producer's acquire load before it reuses the chunk).
 *
 * It also checks every chunk header it reads, byte for byte, against
 * pt_fb_chunk_header(thread, chunk * events_per_chunk, 0, chunk_bytes - 4).
 */
#ifndef PT_TEST_TC_CONSUMER_H
#define PT_TEST_TC_CONSUMER_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "schema/pt_fb.h"
#include "shm/layout.h"

typedef struct tc_consumer {
    pt_ring_slot_t *slot;
    uint8_t *base;
    uint32_t chunk_bytes, chunks_per_ring, events_per_chunk;
    uint64_t thread;
    uint64_t chunk;          /* next chunk to read (== released_chunks) */
    uint32_t index;          /* records already read from it */
    uint64_t header_errors;  /* chunk headers that differed from the expected bytes */
    uint64_t length_errors;  /* complete chunks that were not full, lengths > capacity */
    uint64_t chunks_checked;
} tc_consumer_t;

static inline void tc_init(tc_consumer_t *c, pt_ring_slot_t *slot, uint8_t *base, uint32_t chunk_bytes,
                           uint32_t chunks_per_ring, uint64_t thread)
{
    memset(c, 0, sizeof *c);
    c->slot = slot;
    c->base = base;
    c->chunk_bytes = chunk_bytes;
    c->chunks_per_ring = chunks_per_ring;
    c->events_per_chunk = (uint32_t)PT_CHUNK_EVENTS(chunk_bytes);
    c->thread = thread;
}

static inline void tc_check_header(tc_consumer_t *c, const uint8_t *chunk)
{
    uint8_t want[PT_CHUNK_HEADER_BYTES];
    pt_fb_chunk_header(want, c->thread, c->chunk * c->events_per_chunk, 0, c->chunk_bytes - 4);
    /* every byte but the length (which the producer is changing) */
    if (memcmp(want, chunk, PT_CHUNK_OFF_LENGTH) != 0)
        c->header_errors++;
    c->chunks_checked++;
}

/* Copy up to cap published records into buf. Returns the number copied; 0 when
 * nothing is published beyond what was read. */
static inline uint32_t tc_poll(tc_consumer_t *c, pt_event_t *buf, uint32_t cap)
{
    for (;;) {
        /* acquire: pairs with the producer's release store of head_chunk */
        uint64_t head = atomic_load_explicit(&c->slot->head_chunk, memory_order_acquire);
        if (c->chunk > head)
            return 0;
        uint8_t *chunk = c->base + (size_t)(c->chunk & (c->chunks_per_ring - 1)) * c->chunk_bytes;
        if (c->index == 0)
            tc_check_header(c, chunk);
        /* acquire: pairs with the release store of the length in pt_ring_store_ */
        uint32_t len = atomic_load_explicit((_Atomic uint32_t *)(void *)(chunk + PT_CHUNK_OFF_LENGTH),
                                            memory_order_acquire);
        if (len > c->events_per_chunk || len < c->index) {
            c->length_errors++;
            return 0;
        }
        if (len > c->index) {
            uint32_t n = len - c->index;
            if (n > cap)
                n = cap;
            memcpy(buf, chunk + PT_CHUNK_OFF_EVENTS + (size_t)c->index * sizeof(pt_event_t),
                   (size_t)n * sizeof(pt_event_t));
            c->index += n;
            /* relaxed: only this consumer reads it (takeover bookkeeping) */
            atomic_store_explicit(&c->slot->consumer_index, c->index, memory_order_relaxed);
            return n;
        }
        if (c->chunk == head)
            return 0;
        /* complete: the producer moved on, so this chunk was full */
        if (len != c->events_per_chunk)
            c->length_errors++;
        c->chunk++;
        c->index = 0;
        atomic_store_explicit(&c->slot->consumer_index, 0, memory_order_relaxed);
        /* release: we are done reading the chunk; pairs with the producer's
         * acquire load of released_chunks before it reuses it */
        atomic_store_explicit(&c->slot->released_chunks, c->chunk, memory_order_release);
    }
}

#endif /* PT_TEST_TC_CONSUMER_H */
