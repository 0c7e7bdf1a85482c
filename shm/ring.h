/*
 * pt_ring: the single-producer/single-consumer event ring of one traced thread.
 *
 * Producer side only (the owning thread); the consumer side lives in the reader
 * (shm/reader.h), which drains rings through the segment.
 *
 * A ring is chunks_per_ring chunks of chunk_bytes; each chunk is a valid
 * size-prefixed FlatBuffer Message{EventChunk} (schema/pt_wire.h). Appending writes
 * the 16-byte record at index n of the current chunk and release-stores the
 * vector length n+1. When a chunk is full the producer moves to the next one,
 * which it may reuse only after the consumer released it.
 *
 * Full ring, drop policy (PT_POLICY_DROP, default): the record is not written,
 * slot->events_dropped and the pending-lost count grow by one, and the push
 * returns -ENOBUFS. On the first push that finds room again, the ring writes a
 * Lost record with the pending count, then calls the ring's stack writer (if
 * set) which pushes Frame records for the thread's current stack (outermost
 * first), then writes the record it was given. So after a gap the consumer sees
 * exactly: Lost(count), Frame..., next record.
 *
 * Full ring, wait policy (PT_POLICY_WAIT): the producer waits (spin, then
 * sleep) for the consumer to release a chunk, at most wait_timeout_ns per push.
 * When the bound runs out the record is dropped as in the drop policy, and the
 * ring keeps dropping without waiting until room returns (so a dead or absent
 * reader costs the program one timeout per gap, not one per event).
 *
 * Stack on request: a reader that starts in the middle of a thread's stream
 * sets slot->stack_request. Someone in the producer process (the tracer's
 * heartbeat thread) sees it and calls pt_ring_request_slow_path(); the owner's
 * next push then writes the stack through the stack writer (Frame records)
 * before its record, as after a gap, and clears the request. Only with room
 * for the whole stack: else at the next chunk change.
 *
 * CPU time (CpuTime records, after pt_ring_set_cpu_clock): the ring writes the
 * owning thread's CPU time (CLOCK_THREAD_CPUTIME_ID, ns modulo 2^48) as a
 * CpuTime record just before the record being pushed, with that record's
 * ticks, from the slow path only (the hot path is unchanged):
 *   - before every run of Frame records: at the ring's first push (the
 *     attach's Frame records or the first event), after a Lost record (Lost,
 *     CpuTime, Frame..., record), before the stack written for a request;
 *   - at every chunk change (so at least once per chunk of records);
 *   - when asked: pt_ring_request_cpu_sample (the tracer's heartbeat, about
 *     every 10 ms), served at the owner's next push, so a blocked thread's
 *     sample comes with its first record after it wakes;
 *   - pt_ring_write_cpu, at the thread's end or at stop.
 * So a reader's first observation of a thread after a gap or a join starts
 * from a CPU baseline, and between two CpuTime records the CPU time is known.
 * A push by another thread (stop() closing a thread's frames) reads the
 * owner's clock through pthread_getcpuclockid.
 *
 * Errors: 0 on success; -ENOBUFS when the record was dropped (counted).
 * A zero-initialised handle (no ring claimed, or a retired one) drops every
 * push with -ENOBUFS and counts nothing.
 */
#ifndef PT_SHM_RING_H
#define PT_SHM_RING_H

#include "layout.h"
#include "ring_types.h"
#include "ring_inline.h" /* the hot path: pt_ring_push */

#ifdef __cplusplus
extern "C" {
#endif

/* Initialise a producer handle over a claimed slot (called by
 * pt_segment_claim_ring; tests may call it on a hand-made layout). Writes the
 * header of chunk 0 and publishes head_chunk = 0. Returns 0 or -EINVAL. */
int pt_ring_init(pt_ring_t *ring, pt_ring_slot_t *slot, uint8_t *ring_base,
                 uint32_t chunk_bytes, uint32_t chunks_per_ring, uint32_t policy,
                 uint64_t wait_timeout_ns, uint32_t ring_index, uint64_t thread);

/* Send the owner's next push to the slow path (where a pending stack request
 * is served). The only call that another thread of the process may make on
 * the handle; the handle must stay valid meanwhile (the caller's business). */
void pt_ring_request_slow_path(pt_ring_t *ring);

/* Send the owner's next push to the slow path, which writes a CpuTime record
 * (ring.h "CPU time"). Like pt_ring_request_slow_path, another thread of the
 * process may call it; a no-op before pt_ring_set_cpu_clock. A request may be
 * hidden by the owner's own store of the limit: it stays due and is written at
 * the next slow path (the next request or chunk change). */
void pt_ring_request_cpu_sample(pt_ring_t *ring);

/* Write CpuTime records from now on (ring.h "CPU time"), the first at the next
 * push. Called by the owning thread, whose CPU clock it records. 0, -EINVAL on
 * a zero handle, or the error of pthread_getcpuclockid (negative). */
int pt_ring_set_cpu_clock(pt_ring_t *ring);

/* Write a CpuTime record now at `ticks` (the thread's end, stop), reading the
 * owner's CPU clock; a thread other than the owner may call it while the owner
 * lives and is not pushing (stop() with the GIL). With a Lost record pending it
 * writes nothing (the next push writes Lost, CpuTime, the stack). 0, or
 * -ENOBUFS (no room, or no CPU clock set), -ESRCH (the clock cannot be read). */
int pt_ring_write_cpu(pt_ring_t *ring, uint64_t ticks);

/* Set the callback that writes the thread's stack after a gap (may be NULL). */
void pt_ring_set_stack_writer(pt_ring_t *ring, pt_ring_stack_writer_fn fn, void *ctx);

/* The ring's first `reserved` chunks have their memory; `fn` reserves the
 * rest as the producer first reaches them, doubling (the whole ring after
 * pt_ring_init: every chunk may be written). When `fn` fails the producer
 * drops, counted, as on a full ring (no waiting: no reader frees memory), and
 * tries again after another chunk's worth of drops. */
void pt_ring_set_reserver(pt_ring_t *ring, pt_ring_reserve_fn fn, void *ctx, uint32_t reserved);

/* Records published so far by this producer (exact, producer thread only). */
uint64_t pt_ring_written(const pt_ring_t *ring);

/* Push a Frame record from inside a stack writer (room already reserved). */
void pt_ring_push_frame(pt_ring_t *ring, uint64_t ticks, uint32_t id, uint16_t depth,
                        uint8_t flags);
/* Push any record from inside a stack writer (room already reserved): what goes
 * before the Frame run, as the Synthetic TaskStep of a task step in progress. */
void pt_ring_push_stack_record(pt_ring_t *ring, uint64_t ticks, uint32_t id, uint16_t aux, uint8_t kind,
                               uint8_t flags);

/* Write the pending Lost record now if there is room (called at retire so a
 * trailing gap is announced too). 0 if nothing was pending or it was written,
 * -ENOBUFS if the ring is still full (the count then stays in events_dropped). */
int pt_ring_flush_lost(pt_ring_t *ring, uint64_t ticks);

/* Causes of a gap, each written as its own Lost record with its flag
 * (schema EventFlags): a full ring under policy drop (no flag), events made
 * before the thread had a ring (LostNoRing), a wait that ran out of its bound
 * under policy wait (LostWaitTimeout), no room in /dev/shm for the next chunk
 * (LostNoRoom). Only the first is a choice; under policy wait the others are
 * the only drops. */
enum { PT_RING_LOST_FULL = 0, PT_RING_LOST_NO_RING = 1, PT_RING_LOST_WAIT_TIMEOUT = 2, PT_RING_LOST_NO_ROOM = 3 };

/* Count `missed` records the owning thread made before it had this ring: not
 * dropped by the ring (slot events_dropped does not grow; the caller keeps
 * them in events_untraced), but the next push writes Lost(missed, LostNoRing)
 * and the stack first, as after any gap. Producer thread only. */
void pt_ring_count_missed(pt_ring_t *ring, uint64_t missed);

/* Publish written/dropped counters to the slot (called at chunk changes and at
 * retire; the hot path does not touch them). */
void pt_ring_flush_counters(pt_ring_t *ring);

#ifdef __cplusplus
}
#endif

#endif /* PT_SHM_RING_H */
