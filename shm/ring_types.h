/*
 * pt_ring_t: the producer's process-local handle of one ring (its layout only).
 *
 * Shared by the API (ring.h) and the hot path (ring_inline.h), so that neither
 * header needs the other's definitions. Fields are private to ring_inline.h
 * and ring.c; the struct is public only so the hot path can be inlined and the
 * handle can live in thread-local storage without an allocation.
 */
#ifndef PT_SHM_RING_TYPES_H
#define PT_SHM_RING_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pt_ring pt_ring_t;

/* Called on the producer thread, with room for at least `room` more records,
 * to write the thread's stack as Frame records (pt_ring_push_frame), outermost
 * first, using at most room - 1 of them: the last is kept for the event that
 * triggered it. After a Lost record (whole = 0) it writes what fits; for a
 * reader's stack request (whole = 1) it writes all or nothing. Returns 0 when
 * it wrote, -EAGAIN when whole = 1 and the stack does not fit. */
typedef int (*pt_ring_stack_writer_fn)(pt_ring_t *ring, void *ctx, uint32_t room, int whole);

/* Called on the producer thread before the ring first starts chunk `from`:
 * reserve the memory of chunks [from, from + count) of ring `ring_index` (the
 * segment's file pages), so writing them cannot fault. Returns 0, or a
 * negative errno when there is no room (the chunk is then not started). */
typedef int (*pt_ring_reserve_fn)(void *ctx, uint32_t ring_index, uint32_t from, uint32_t count);

struct pt_ring {
    /* hot: touched by every push */
    pt_event_t *events;           /* events of the current chunk */
    _Atomic uint32_t *length;     /* its vector length (PT_CHUNK_OFF_LENGTH) */
    uint32_t index;               /* records written into the current chunk */
    _Atomic uint32_t limit;       /* events_per_chunk, or 0 to force the slow path
                                     (also set by pt_ring_request_slow_path) */
    /* cold */
    pt_ring_slot_t *slot;
    uint8_t *base;                /* chunk 0 of this ring */
    uint64_t head;                /* sequence of the current chunk */
    uint64_t released_cache;      /* last released_chunks seen */
    uint64_t lost_pending;        /* records dropped since the last Lost record */
    uint64_t lost_by_cause[4];    /* ... by cause (PT_RING_LOST_*), summing to lost_pending */
    uint64_t written_before_head; /* records in chunks before head */
    uint32_t chunk_bytes;
    uint32_t chunks_per_ring;
    uint32_t events_per_chunk;
    uint32_t policy;              /* enum pt_drop_policy */
    uint64_t wait_timeout_ns;
    uint32_t waiting_disabled;    /* wait policy: a wait timed out, drop until room returns */
    uint32_t ring_index;
    uint64_t thread;              /* segment-unique thread number */
    pt_ring_stack_writer_fn stack_writer;
    void *stack_ctx;
    /* the ring's memory, reserved in steps during its first lap */
    uint32_t chunks_reserved;     /* chunks 0 .. chunks_reserved - 1 may be written */
    uint32_t reserve_blocked;     /* the last reservation failed: drop, retry later */
    uint64_t reserve_retry_lost;  /* ... once lost_pending reaches this */
    pt_ring_reserve_fn reserve;
    void *reserve_ctx;
    /* CPU time samples (CpuTime records; ring.h), off until pt_ring_set_cpu_clock */
    uint32_t cpu_on;
    _Atomic uint32_t cpu_due;     /* write one at the next slow path: set by the owner
                                     (chunk change, start) or by another thread
                                     (pt_ring_request_cpu_sample) */
    pthread_t cpu_owner;          /* the owning thread ... */
    clockid_t cpu_clock;          /* ... and its CPU clock, readable from another thread */
};

#ifdef __cplusplus
}
#endif

#endif /* PT_SHM_RING_TYPES_H */
