/*
 * Hot path of the producer: append one 16-byte record.
 *
 * Cost: two relaxed 64-bit stores, one release store of the chunk's vector
 * length, one compare. No allocation, lock, or system call.
 */
#ifndef PT_SHM_RING_INLINE_H
#define PT_SHM_RING_INLINE_H

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>

#include "ring_types.h"

#if defined(__GNUC__)
#define PT_LIKELY(x) __builtin_expect(!!(x), 1)
#define PT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define PT_LIKELY(x) (x)
#define PT_UNLIKELY(x) (x)
#endif

/* Slow path of pt_ring_push (chunk change, full ring, pending Lost record);
 * defined in ring.c. */
#ifdef __cplusplus
extern "C" {
#endif
int pt_ring_push_slow(pt_ring_t *ring, uint64_t word0, uint64_t word1);
#ifdef __cplusplus
}
#endif

/* Second 8 bytes of an Event: id | aux << 32 | kind << 48 | flags << 56. */
static inline uint64_t pt_event_word1(uint32_t id, uint16_t aux, uint8_t kind, uint8_t flags)
{
    return (uint64_t)id | ((uint64_t)aux << 32) | ((uint64_t)kind << 48) | ((uint64_t)flags << 56);
}

/* Write record words at index i of the current chunk and publish it. */
static inline void pt_ring_store_(pt_ring_t *ring, uint32_t i, uint64_t word0, uint64_t word1)
{
    _Atomic uint64_t *dst = (_Atomic uint64_t *)(void *)(ring->events + i);
    /* relaxed: the record is published by the release store of the length below */
    atomic_store_explicit(&dst[0], word0, memory_order_relaxed);
    atomic_store_explicit(&dst[1], word1, memory_order_relaxed);
    ring->index = i + 1;
    /* release: publishes record i; pairs with the acquire load of the chunk
     * length in the reader's drain (shm/reader.c) */
    atomic_store_explicit(ring->length, i + 1, memory_order_release);
}

/* Append one record. Producer thread only. Returns 0, or -ENOBUFS if the ring
 * was full and the record was dropped (counted; see ring.h for the policies). */
static inline int pt_ring_push(pt_ring_t *ring, uint64_t ticks, uint32_t id, uint8_t kind,
                               uint8_t flags, uint16_t aux)
{
    uint64_t word1 = pt_event_word1(id, aux, kind, flags);
    uint32_t i = ring->index;
    /* relaxed: a hint; pairs with nothing (another thread may only lower it to
     * send us to the slow path, which reads what it needs itself) */
    if (PT_UNLIKELY(i >= atomic_load_explicit(&ring->limit, memory_order_relaxed)))
        return pt_ring_push_slow(ring, ticks, word1);
    pt_ring_store_(ring, i, ticks, word1);
    return 0;
}

#endif /* PT_SHM_RING_INLINE_H */
