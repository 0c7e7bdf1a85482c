/*
 * pt_ring producer: everything but the hot path (ring_inline.h).
 *
 * Design summary
 *
 *   The ring is chunks_per_ring chunks; chunk sequence s lives at
 *   base + (s & (chunks_per_ring - 1)) * chunk_bytes. The producer writes chunk
 *   `head` and may start chunk s only while s - released_chunks < chunks_per_ring.
 *
 *   The hot path appends while index < limit. limit is events_per_chunk, or 0
 *   whenever the next push must come here (a Lost record is pending, or a
 *   reader asked for the stack, a CPU sample is due). So this file runs only
 *   when a chunk is full, when the ring is full, when the ring recovers from a
 *   gap, when a stack request is served, and when a CPU sample is asked for.
 *
 *   Memory orders used here, and what they pair with:
 *     - release store of slot->head_chunk (chunk header written, chunk started):
 *       pairs with the consumer's acquire load of head_chunk before it reads
 *       the chunk's header and length;
 *     - acquire load of slot->released_chunks (a chunk may be overwritten):
 *       pairs with the consumer's release store of released_chunks after it
 *       finished copying that chunk;
 *     - release store of the chunk length (in pt_ring_store_): pairs with the
 *       consumer's acquire load of the length;
 *     - relaxed stores of the counters events_written / events_dropped: they
 *       are statistics; the consumer reads them relaxed and never derives a
 *       memory position from them.
 *     - relaxed load/store of slot->stack_request, of cpu_due and of limit: a
 *       request carries no data, and a lowered limit only sends the owner
 *       here (seeing the limit before cpu_due only delays the sample). A
 *       store of limit by the owner may hide one by another thread; the
 *       request stays set and is noticed again.
 *
 *   Recovery after a gap always starts a fresh chunk (a drop happens only when
 *   the current chunk is full and the next one is not free), so the stack
 *   writer always gets at least events_per_chunk - 1 records of room.
 */
#include "ring.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "../schema/pt_fb.h"

#define PT_RING_SPIN_NS 50000u        /* wait policy: spin this long before sleeping */
#define PT_RING_SLEEP_MIN_NS 10000u   /* first sleep; doubles up to the max */
#define PT_RING_SLEEP_MAX_NS 1000000u

static int is_pow2_u32(uint32_t v)
{
    return v != 0 && (v & (v - 1)) == 0;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint8_t *chunk_at(const pt_ring_t *ring, uint64_t seq)
{
    return ring->base + (size_t)(seq & (ring->chunks_per_ring - 1)) * ring->chunk_bytes;
}

/* Point the handle at chunk `seq`, write its header (length 0) and publish it. */
static void start_chunk(pt_ring_t *ring, uint64_t seq)
{
    uint8_t *chunk = chunk_at(ring, seq);
    pt_fb_chunk_header(chunk, ring->thread, seq * ring->events_per_chunk, 0, ring->chunk_bytes - 4);
    ring->head = seq;
    ring->events = (pt_event_t *)(void *)(chunk + PT_CHUNK_OFF_EVENTS);
    ring->length = (_Atomic uint32_t *)(void *)(chunk + PT_CHUNK_OFF_LENGTH);
    ring->index = 0;
    /* release: publishes the chunk header written above (and every record of
     * the previous chunks); pairs with the consumer's acquire load of
     * head_chunk before it reads this chunk */
    atomic_store_explicit(&ring->slot->head_chunk, seq, memory_order_release);
}

/* Free chunks after head, using the cached released count. */
static uint64_t free_chunks_cached(const pt_ring_t *ring)
{
    uint64_t in_use = ring->head - ring->released_cache + 1; /* head is in use */
    return in_use >= ring->chunks_per_ring ? 0 : ring->chunks_per_ring - in_use;
}

/* Is chunk head + 1 reserved (its memory taken), reserving more if the first
 * lap has reached the end of what is? Doubles, so a ring takes its memory in
 * a few steps and a short-lived thread or fork child only what it wrote. */
static int next_chunk_reserved(pt_ring_t *ring)
{
    uint64_t next = ring->head + 1;
    if (next < ring->chunks_reserved || ring->chunks_reserved >= ring->chunks_per_ring)
        return 1;
    if (ring->reserve_blocked && ring->lost_pending < ring->reserve_retry_lost)
        return 0;
    uint32_t want = ring->chunks_reserved * 2;
    if (want > ring->chunks_per_ring || want == 0)
        want = ring->chunks_per_ring;
    if (ring->reserve(ring->reserve_ctx, ring->ring_index, ring->chunks_reserved, want - ring->chunks_reserved) != 0) {
        ring->reserve_blocked = 1;
        ring->reserve_retry_lost = ring->lost_pending + ring->events_per_chunk;
        return 0;
    }
    ring->reserve_blocked = 0;
    ring->chunks_reserved = want;
    return 1;
}

/* Can the producer start chunk head + 1 now? Refreshes the cache only when the
 * cached value says no, so a ring that is far from full costs no shared load. */
static int next_chunk_free(pt_ring_t *ring)
{
    if (!next_chunk_reserved(ring))
        return 0;
    if (free_chunks_cached(ring) > 0)
        return 1;
    /* acquire: the consumer finished reading every chunk below this count
     * before its release store of released_chunks; pairs with that store, so
     * overwriting the chunk cannot race with its copy */
    ring->released_cache = atomic_load_explicit(&ring->slot->released_chunks, memory_order_acquire);
    return free_chunks_cached(ring) > 0;
}

/* Move to the next chunk (caller checked next_chunk_free). A CPU sample is
 * due at every chunk change: written before the record that triggered it. */
static void advance_chunk(pt_ring_t *ring)
{
    ring->written_before_head += ring->index;
    start_chunk(ring, ring->head + 1);
    pt_ring_flush_counters(ring);
    if (ring->cpu_on)
        atomic_store_explicit(&ring->cpu_due, 1, memory_order_relaxed); /* owner: plain flag */
}

/* Records that can be written now without waiting. */
static uint64_t room_now(const pt_ring_t *ring)
{
    return (uint64_t)(ring->events_per_chunk - ring->index) + free_chunks_cached(ring) * ring->events_per_chunk;
}

/* Make sure index < events_per_chunk, moving to the next chunk if it is free.
 * Returns 1 if there is room for one record now. */
static int ensure_room(pt_ring_t *ring)
{
    if (ring->index < ring->events_per_chunk)
        return 1;
    if (!next_chunk_free(ring))
        return 0;
    advance_chunk(ring);
    return 1;
}

/* The cause of a drop now, as its Lost record will say it (ring.h). */
static unsigned drop_cause(const pt_ring_t *ring)
{
    if (ring->reserve_blocked)
        return PT_RING_LOST_NO_ROOM;
    return ring->policy == PT_POLICY_WAIT ? PT_RING_LOST_WAIT_TIMEOUT : PT_RING_LOST_FULL;
}

static void count_drop(pt_ring_t *ring)
{
    ring->lost_pending++;
    ring->lost_by_cause[drop_cause(ring)]++;
    /* relaxed: statistics; the producer is the only writer of this counter */
    uint64_t dropped = atomic_load_explicit(&ring->slot->events_dropped, memory_order_relaxed);
    atomic_store_explicit(&ring->slot->events_dropped, dropped + 1, memory_order_relaxed);
    /* the next push must come here to write the Lost record */
    atomic_store_explicit(&ring->limit, 0, memory_order_relaxed);
}

void pt_ring_count_missed(pt_ring_t *ring, uint64_t missed)
{
    if (ring->slot == NULL || missed == 0)
        return;
    /* not dropped by the ring: the caller counts them as events_untraced; the
     * Lost record says so (LostNoRing) */
    ring->lost_pending += missed;
    ring->lost_by_cause[PT_RING_LOST_NO_RING] += missed;
    /* the next push goes to the slow path, which writes the Lost record */
    atomic_store_explicit(&ring->limit, 0, memory_order_relaxed);
}

/* Wait policy: spin, then sleep with a doubling backoff, until the consumer
 * frees chunk head + 1 or the per-push bound runs out. Returns 1 on room. */
static int wait_for_room(pt_ring_t *ring)
{
    uint64_t start = pt_monotonic_ns();
    uint64_t sleep_ns = PT_RING_SLEEP_MIN_NS;
    for (uint32_t spins = 0;; spins++) {
        if (next_chunk_free(ring))
            return 1;
        if ((spins & 63) != 0) {
            cpu_relax();
            continue;
        }
        uint64_t waited = pt_monotonic_ns() - start;
        if (waited >= ring->wait_timeout_ns)
            return 0;
        if (waited < PT_RING_SPIN_NS) {
            cpu_relax();
            continue;
        }
        uint64_t left = ring->wait_timeout_ns - waited;
        uint64_t nap = sleep_ns < left ? sleep_ns : left;
        struct timespec ts = {.tv_sec = (time_t)(nap / 1000000000u), .tv_nsec = (long)(nap % 1000000000u)};
        nanosleep(&ts, NULL);
        if (sleep_ns < PT_RING_SLEEP_MAX_NS)
            sleep_ns *= 2;
    }
}

/* One Lost record per cause with a count (the caller made room for one; each
 * further one takes the next slot of this fresh chunk). */
static void store_lost(pt_ring_t *ring, uint64_t ticks)
{
    static const uint8_t cause_flags[4] = {0, PT_EVF_LOST_NO_RING, PT_EVF_LOST_WAIT_TIMEOUT, PT_EVF_LOST_NO_ROOM};
    int first = 1;
    for (unsigned c = 0; c < 4; c++) {
        uint64_t n = ring->lost_by_cause[c];
        if (n == 0)
            continue;
        if (!first && !ensure_room(ring))
            return; /* no room for the rest: they stay pending */
        first = 0;
        uint64_t count = n < PT_LOST_MAX ? n : PT_LOST_MAX;
        uint64_t word1 = pt_event_word1((uint32_t)count, (uint16_t)(count >> 32), PT_EV_LOST, cause_flags[c]);
        pt_ring_store_(ring, ring->index, ticks, word1);
        ring->lost_pending -= n;
        ring->lost_by_cause[c] = 0;
    }
    ring->lost_pending = 0;
    ring->waiting_disabled = 0;
}

/* The owner's CPU time in ns: its own clock on its thread, else its CPU clock
 * id (stop() writing into another thread's ring). 0, or -1. */
static int read_cpu(const pt_ring_t *ring, uint64_t *ns)
{
    if (pthread_equal(pthread_self(), ring->cpu_owner)) {
        *ns = pt_thread_cpu_ns();
        return *ns != 0 ? 0 : -1;
    }
    return pt_cpu_clock_ns(ring->cpu_clock, ns);
}

/* Write a CpuTime record at `ticks` if CPU samples are on and there is room
 * (the sample stays due otherwise). The flag is cleared after ensure_room, so
 * the chunk change it may make does not ask for a second one. */
static int write_cpu(pt_ring_t *ring, uint64_t ticks)
{
    if (!ring->cpu_on)
        return -ENOBUFS;
    if (!ensure_room(ring)) {
        atomic_store_explicit(&ring->cpu_due, 1, memory_order_relaxed);
        return -ENOBUFS;
    }
    atomic_store_explicit(&ring->cpu_due, 0, memory_order_relaxed);
    uint64_t ns;
    if (read_cpu(ring, &ns) != 0)
        return -ESRCH;
    ns &= PT_CPU_MASK;
    pt_ring_store_(ring, ring->index, ticks,
                   pt_event_word1((uint32_t)ns, (uint16_t)(ns >> 32), PT_EV_CPU_TIME, 0));
    return 0;
}

static int cpu_due(const pt_ring_t *ring)
{
    /* relaxed: a flag without data (see the design summary) */
    return ring->cpu_on && atomic_load_explicit(&ring->cpu_due, memory_order_relaxed) != 0;
}

int pt_ring_init(pt_ring_t *ring, pt_ring_slot_t *slot, uint8_t *ring_base, uint32_t chunk_bytes,
                 uint32_t chunks_per_ring, uint32_t policy, uint64_t wait_timeout_ns, uint32_t ring_index,
                 uint64_t thread)
{
    if (ring == NULL || slot == NULL || ring_base == NULL)
        return -EINVAL;
    if (!is_pow2_u32(chunk_bytes) || chunk_bytes < PT_MIN_CHUNK_BYTES || chunk_bytes > PT_MAX_CHUNK_BYTES)
        return -EINVAL;
    if (!is_pow2_u32(chunks_per_ring) || chunks_per_ring < PT_MIN_CHUNKS_PER_RING ||
        chunks_per_ring > PT_MAX_CHUNKS_PER_RING)
        return -EINVAL;
    if (policy != PT_POLICY_DROP && policy != PT_POLICY_WAIT)
        return -EINVAL;
    if (((uintptr_t)ring_base & 7u) != 0)
        return -EINVAL;

    memset(ring, 0, sizeof *ring);
    ring->slot = slot;
    ring->base = ring_base;
    ring->chunk_bytes = chunk_bytes;
    ring->chunks_per_ring = chunks_per_ring;
    ring->events_per_chunk = (uint32_t)PT_CHUNK_EVENTS(chunk_bytes);
    ring->policy = policy;
    ring->wait_timeout_ns = wait_timeout_ns;
    ring->ring_index = ring_index;
    ring->thread = thread;

    /* The slot is not yet visible to a consumer for this generation (see
     * pt_segment_claim_ring), so the producer resets the consumer cursors and
     * counters of the previous owner. relaxed: published by the release store
     * of head_chunk below and by the claim's release store of generation. */
    atomic_store_explicit(&slot->released_chunks, 0, memory_order_relaxed);
    atomic_store_explicit(&slot->consumer_index, 0, memory_order_relaxed);
    atomic_store_explicit(&slot->events_written, 0, memory_order_relaxed);
    atomic_store_explicit(&slot->events_dropped, 0, memory_order_relaxed);
    ring->released_cache = 0;
    ring->chunks_reserved = chunks_per_ring;

    start_chunk(ring, 0);
    atomic_store_explicit(&ring->limit, ring->events_per_chunk, memory_order_relaxed);
    return 0;
}

void pt_ring_request_slow_path(pt_ring_t *ring)
{
    atomic_store_explicit(&ring->limit, 0, memory_order_relaxed);
}

void pt_ring_request_cpu_sample(pt_ring_t *ring)
{
    /* cpu_on is set by the owner before the handle is published to us (the
     * caller's business, as for the handle itself) */
    if (!ring->cpu_on)
        return;
    /* relaxed: see the design summary; seeing the lowered limit first only
     * sends the owner here once for nothing, the sample stays due */
    atomic_store_explicit(&ring->cpu_due, 1, memory_order_relaxed);
    atomic_store_explicit(&ring->limit, 0, memory_order_relaxed);
}

int pt_ring_set_cpu_clock(pt_ring_t *ring)
{
    if (ring->slot == NULL)
        return -EINVAL;
    pthread_t self = pthread_self();
    clockid_t id;
    int rc = pthread_getcpuclockid(self, &id);
    if (rc != 0)
        return -rc;
    ring->cpu_owner = self;
    ring->cpu_clock = id;
    ring->cpu_on = 1;
    /* the first push writes the baseline */
    atomic_store_explicit(&ring->cpu_due, 1, memory_order_relaxed);
    atomic_store_explicit(&ring->limit, 0, memory_order_relaxed);
    return 0;
}

int pt_ring_write_cpu(pt_ring_t *ring, uint64_t ticks)
{
    if (ring->slot == NULL || !ring->cpu_on)
        return -ENOBUFS;
    if (ring->lost_pending != 0)
        return 0; /* after the gap's Lost record, not before it (ring.h) */
    int rc = write_cpu(ring, ticks);
    if (rc == 0)
        pt_ring_flush_counters(ring);
    return rc;
}

/* Call the stack writer with the room there is now (ensure_room succeeded).
 * The request is cleared first: a reader asking again meanwhile gets a later
 * stack instead of having its request erased. */
static int write_stack(pt_ring_t *ring, int whole)
{
    atomic_store_explicit(&ring->slot->stack_request, 0, memory_order_relaxed);
    uint64_t room = room_now(ring);
    int rc = ring->stack_writer(ring, ring->stack_ctx, room > UINT32_MAX ? UINT32_MAX : (uint32_t)room, whole);
    if (rc != 0) /* did not fit: the next chunk change (a fresh chunk) tries again */
        atomic_store_explicit(&ring->slot->stack_request, 1, memory_order_relaxed);
    return rc;
}

void pt_ring_set_stack_writer(pt_ring_t *ring, pt_ring_stack_writer_fn fn, void *ctx)
{
    ring->stack_writer = fn;
    ring->stack_ctx = ctx;
}

void pt_ring_set_reserver(pt_ring_t *ring, pt_ring_reserve_fn fn, void *ctx, uint32_t reserved)
{
    if (fn == NULL || reserved == 0 || reserved >= ring->chunks_per_ring) {
        ring->reserve = NULL;
        ring->chunks_reserved = ring->chunks_per_ring;
        return;
    }
    ring->reserve = fn;
    ring->reserve_ctx = ctx;
    ring->chunks_reserved = reserved;
    ring->reserve_blocked = 0;
}

int pt_ring_push_slow(pt_ring_t *ring, uint64_t word0, uint64_t word1)
{
    if (ring->slot == NULL)
        return -ENOBUFS; /* zero handle: no ring was claimed; drop uncounted */

    if (!ensure_room(ring)) {
        /* Ring full. The wait policy waits once per gap; after a timeout it
         * drops without waiting until room returns. */
        if (ring->policy == PT_POLICY_WAIT && !ring->waiting_disabled &&
            ring->lost_pending == ring->lost_by_cause[PT_RING_LOST_NO_RING] && !ring->reserve_blocked) {
            if (wait_for_room(ring)) {
                advance_chunk(ring);
                (void)write_cpu(ring, word0); /* the chunk change's sample */
                if (!ensure_room(ring)) { /* cannot happen: a fresh chunk */
                    count_drop(ring);
                    return -ENOBUFS;
                }
                pt_ring_store_(ring, ring->index, word0, word1);
                return 0;
            }
            ring->waiting_disabled = 1;
        }
        count_drop(ring);
        return -ENOBUFS;
    }

    int sampled = 0; /* a CpuTime record went before the stack in this visit */
    if (ring->lost_pending != 0) {
        /* Room returned after a gap: Lost(count), CpuTime (the baseline of
         * what follows), the stack, then the record. */
        store_lost(ring, word0);
        if (ring->cpu_on)
            sampled = write_cpu(ring, word0) == 0;
        if (ring->stack_writer != NULL) {
            /* The Lost record filled at most one slot of a fresh chunk, so
             * room >= 1; the writer keeps the last one for the record. */
            if (ring->index >= ring->events_per_chunk)
                (void)ensure_room(ring);
            (void)write_stack(ring, 0); /* also serves a pending stack request */
        }
    } else if (ring->stack_writer != NULL &&
               atomic_load_explicit(&ring->slot->stack_request, memory_order_relaxed) != 0) {
        if (ring->cpu_on)
            sampled = write_cpu(ring, word0) == 0; /* the baseline of a reader that joins here */
        (void)write_stack(ring, 1);
    }
    if (sampled) /* a stack that crossed a chunk asked for one more: the slot it kept is the record's */
        atomic_store_explicit(&ring->cpu_due, 0, memory_order_relaxed);
    else if (cpu_due(ring))
        (void)write_cpu(ring, word0); /* chunk change, first push, or asked for */
    if (!ensure_room(ring)) {
        /* Only if the stack writer overran its room (API misuse). */
        count_drop(ring);
        return -ENOBUFS;
    }
    atomic_store_explicit(&ring->limit, ring->events_per_chunk, memory_order_relaxed);
    pt_ring_store_(ring, ring->index, word0, word1);
    return 0;
}

uint64_t pt_ring_written(const pt_ring_t *ring)
{
    return ring->written_before_head + ring->index;
}

void pt_ring_push_stack_record(pt_ring_t *ring, uint64_t ticks, uint32_t id, uint16_t aux, uint8_t kind,
                               uint8_t flags)
{
    if (ring->slot == NULL || !ensure_room(ring))
        return; /* the stack writer exceeded its room: the record is not written */
    pt_ring_store_(ring, ring->index, ticks, pt_event_word1(id, aux, kind, flags));
}

void pt_ring_push_frame(pt_ring_t *ring, uint64_t ticks, uint32_t id, uint16_t depth, uint8_t flags)
{
    pt_ring_push_stack_record(ring, ticks, id, depth, PT_EV_FRAME, flags);
}

void pt_ring_flush_counters(pt_ring_t *ring)
{
    if (ring->slot == NULL)
        return;
    /* relaxed: a statistic; the records themselves are published by the
     * release store of each chunk length */
    atomic_store_explicit(&ring->slot->events_written, pt_ring_written(ring), memory_order_relaxed);
}

int pt_ring_flush_lost(pt_ring_t *ring, uint64_t ticks)
{
    if (ring->slot == NULL || ring->lost_pending == 0)
        return 0;
    if (!ensure_room(ring))
        return -ENOBUFS;
    store_lost(ring, ticks);
    atomic_store_explicit(&ring->limit, ring->events_per_chunk, memory_order_relaxed);
    pt_ring_flush_counters(ring);
    return 0;
}
