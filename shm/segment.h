/*
 * pt_segment: create, attach, validate, list and collect /dev/shm segments;
 * claim and retire ring slots; producer state and heartbeat; the consumer lock.
 *
 * Producer calls: pt_segment_create, pt_segment_claim_ring, pt_segment_retire_ring,
 * pt_segment_set_state, pt_segment_heartbeat, pt_segment_close(…, unlink=0).
 * Reader calls: pt_segment_attach (validates everything in the header as
 * untrusted input), pt_segment_lock_consumer / unlock, pt_segment_list(_alloc),
 * pt_segment_unlink, pt_segment_close.
 *
 * Errors are 0 or a negative errno; where an `err` buffer is given, it receives
 * one line a person can act on ("segment /pytrace-12-0: wrong magic (not a
 * pytrace segment); run `pytrace ls` to see valid segments").
 *   -ENOENT   no such segment / no segment for that pid
 *   -EPROTO   wrong magic, wrong ABI major, wrong endianness, bad geometry/offsets
 *   -EBADMSG  truncated (file smaller than the header says)
 *   -EACCES   owned by another user (and PT_ATTACH_ANY_USER not given)
 *   -EBUSY    consumer lock held by a live reader
 *   -ENOSPC   /dev/shm cannot hold the segment (create)
 *   -EINVAL   bad arguments / configuration
 */
#ifndef PT_SHM_SEGMENT_H
#define PT_SHM_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "ring.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pt_segment pt_segment_t;

/* Defaults of pt_segment_config_t (0 = default). Ring slots are threads traced
 * at once; they are cheap: a ring's memory is taken only when a thread claims
 * its slot (see pt_segment_claim_ring). */
#define PT_DEFAULT_RING_COUNT 256u
#define PT_DEFAULT_CHUNK_BYTES (64u << 10)
#define PT_DEFAULT_CHUNKS_PER_RING 64u
#define PT_DEFAULT_SYMLOG_BYTES (UINT64_C(8) << 20)
#define PT_MIN_SYMLOG_BYTES (UINT64_C(64) << 10) /* a default log shrinks to what /dev/shm holds, not below */

typedef struct pt_segment_config {
    uint32_t ring_count;        /* 0 = default 16 */
    uint32_t chunk_bytes;       /* 0 = default 64 KiB; power of two */
    uint32_t chunks_per_ring;   /* 0 = default 64; power of two */
    uint64_t symlog_bytes;      /* 0 = default 8 MiB */
    uint32_t drop_policy;       /* enum pt_drop_policy */
    uint64_t wait_timeout_ns;   /* 0 = default 1 s (wait policy bound per push) */
    const char *cmdline;        /* may be NULL */
    const char *python_version; /* may be NULL */
    uint32_t clock_kind;        /* from pt_clock_init() */
    uint64_t ticks_per_second;
    uint64_t base_ticks;
    uint64_t base_monotonic_ns;
    uint64_t base_realtime_ns;
} pt_segment_config_t;

/* Producer: create /pytrace-<pid>-<seq>-<random> (0600), size it with
 * ftruncate, reserve the header, ring table and symbol log (posix_fallocate,
 * so a full /dev/shm fails here with -ENOSPC and never later with SIGBUS; the
 * rings are reserved one by one at claim), map it, fill the header, state =
 * RUNNING. */
int pt_segment_create(const pt_segment_config_t *cfg, pt_segment_t **out, char *err, size_t errlen);

#define PT_ATTACH_ANY_USER 0x1u  /* accept a segment owned by another uid */

/* Reader: attach to a segment by name ("/pytrace-12-0", "pytrace-12-0") or by
 * pid ("12": the newest segment of that pid). Maps read-write (the consumer
 * cursors live in the segment) and validates magic, ABI, endianness, sizes,
 * geometry and offsets against the real file size before returning. */
int pt_segment_attach(const char *target, unsigned flags, pt_segment_t **out, char *err, size_t errlen);

/* Check a mapped header as untrusted input: identity, geometry, and that every
 * region lies inside file_bytes. Used by attach; public for tests and tools. */
int pt_segment_validate(const pt_seg_header_t *h, uint64_t file_bytes, char *err, size_t errlen);

/* Unmap and free the handle; the producer passes unlink_it = 1 only if it wants
 * the name gone now (normally the segment outlives the process until a reader
 * or `pytrace ls --collect` removes it). */
void pt_segment_close(pt_segment_t *seg, int unlink_it);

/* Remove a segment by name. */
int pt_segment_unlink(const char *name);

/* The geometry validated at attach (or set at create). The header in the
 * mapping is the producer's and may change at any time; every size and count
 * a reader uses comes from this copy, never from the live header. */
typedef struct pt_segment_geometry {
    uint64_t mapped_bytes;    /* bytes mapped at pt_segment_header() */
    uint32_t ring_count;
    uint32_t chunk_bytes;
    uint32_t chunks_per_ring;
    uint64_t ring_bytes;
    uint64_t symlog_bytes;
} pt_segment_geometry_t;
void pt_segment_geometry(const pt_segment_t *seg, pt_segment_geometry_t *out);

pt_seg_header_t *pt_segment_header(const pt_segment_t *seg);
const char *pt_segment_name(const pt_segment_t *seg);      /* "/pytrace-12-0" */
pt_ring_slot_t *pt_segment_slot(const pt_segment_t *seg, uint32_t ring_index);
uint8_t *pt_segment_ring_base(const pt_segment_t *seg, uint32_t ring_index);
uint8_t *pt_segment_symlog(const pt_segment_t *seg);

/* Producer: claim a FREE ring slot for the calling thread (CAS FREE->ACTIVE),
 * reserve the ring's first chunks in the file (posix_fallocate; the rest as
 * the thread's first lap reaches them, and promised now: /dev/shm must have
 * room for the whole ring beside the other rings promised), fill its
 * identity, hand out the next thread number, and initialise `ring`. -EAGAIN
 * when every slot is taken, -ENOSPC when /dev/shm has no room for the ring;
 * the caller counts the thread as untraced (header.threads_untraced). */
int pt_segment_claim_ring(pt_segment_t *seg, uint64_t os_tid, const char *thread_name,
                          uint64_t start_ticks, pt_ring_t *ring);

/* Producer: flush counters, record end_ticks, release-store state = RETIRED.
 * The reader drains the ring, announces ThreadEnd and sets the slot FREE. */
void pt_segment_retire_ring(pt_segment_t *seg, pt_ring_t *ring, uint64_t end_ticks);

/* Producer, one thread at a time (the caller's lock): set the process's role
 * (cut to PT_ROLE_BYTES - 1 bytes at a UTF-8 boundary). */
void pt_segment_set_role(pt_segment_t *seg, const char *role);

/* Reader: copy the role into out (NUL-terminated) and return its sequence
 * (0: none yet), or UINT32_MAX while it is being written (try again later). */
uint32_t pt_segment_read_role(const pt_seg_header_t *h, char *out, size_t len);

/* Producer: release-store the state (RUNNING/STOPPED/EXITED) and refresh the
 * heartbeat. */
void pt_segment_set_state(pt_segment_t *seg, uint32_t state);
void pt_segment_heartbeat(pt_segment_t *seg);

/* Reader: take the consumer lock (CAS 0 -> own pid). If the holder is dead
 * (pid gone, or a different process start time), take it over and count the
 * takeover. -EBUSY with the holder's pid in err if a live reader holds it. */
int pt_segment_lock_consumer(pt_segment_t *seg, char *err, size_t errlen);
void pt_segment_unlock_consumer(pt_segment_t *seg);
/* Reader holding the lock: say it reads the producer's process tree (a hub with
 * --subprocesses). The producer, exiting, then leaves its dead children's
 * segments to this reader instead of removing them. Cleared by every lock and
 * unlock. */
void pt_segment_set_reads_children(pt_segment_t *seg);

/* Is the producer process alive? 1 yes, 0 no (its pid is gone or reused). */
int pt_segment_producer_alive(const pt_segment_t *seg);

/* Discovery: scan /dev/shm for pytrace-* segments. Entries that fail
 * validation are listed with valid = 0 and the reason in `error`. */
typedef struct pt_segment_info {
    char name[96];            /* "/pytrace-12-0" */
    uint64_t pid;
    uint64_t ppid;            /* the producer's parent (0 if the header is invalid) */
    uint32_t uid;
    uint32_t state;           /* enum pt_producer_state; PT_STATE_DEAD when the pid is gone */
    uint32_t end_signal;      /* an EXITED producer that a signal ended (its parent's SIGTERM): its
                                 counters were never published, events_written says nothing */
    int alive;                /* producer process alive */
    int valid;                /* header validated */
    uint32_t threads_active;  /* ACTIVE ring slots */
    uint64_t events_written;
    uint64_t events_dropped;
    uint64_t hook_errors, symbols_dropped, threads_untraced, tracing_displaced, events_untraced; /* header counters */
    uint64_t segment_bytes;
    uint64_t consumer_pid;    /* 0 if no live reader */
    char cmdline[256];
    char error[160];
} pt_segment_info_t;

/* Fills up to `max` entries, newest first; *count receives the number found
 * (may exceed max). */
int pt_segment_list(pt_segment_info_t *out, size_t max, size_t *count);

/* The same, leaving out (never opening) each entry skip(name, ctx) says yes
 * to: a caller that scans often (the hub following a process tree) inspects
 * only the segments it has not seen. */
typedef int (*pt_segment_skip_fn)(const char *name, void *ctx);
int pt_segment_list_skip(pt_segment_info_t *out, size_t max, size_t *count, pt_segment_skip_fn skip, void *ctx);

/* Every segment, newest first, into an array of its own: *out (free() it; NULL
 * when none) and *count. The listing's size is not capped, so callers need no
 * retry loop. 0, or a negative errno (-ENOMEM; /dev/shm not readable) with
 * *out NULL and *count 0. With skip, as pt_segment_list_skip. */
int pt_segment_list_alloc(pt_segment_info_t **out, size_t *count);
int pt_segment_list_alloc_skip(pt_segment_info_t **out, size_t *count, pt_segment_skip_fn skip, void *ctx);

/* Unlink every segment whose producer is dead and that no live reader holds
 * (or that is not a valid segment, owned by us, and whose pid is gone).
 * Returns the number removed or a negative errno. */
int pt_segment_collect_stale(void);

/* Like pt_segment_collect_stale, but only valid segments whose producer's
 * parent is parent_pid (0 = any). A traced process calls it at exit for its
 * fork children, which often leave with _exit() and so never remove their own
 * segment. */
int pt_segment_collect_children(uint64_t parent_pid);

#ifdef __cplusplus
}
#endif

#endif /* PT_SHM_SEGMENT_H */
