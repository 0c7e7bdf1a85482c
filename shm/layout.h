/*
 * pytrace shared-memory layout: the bytes of a /dev/shm segment.
 *
 * This header is the contract between the traced process (producer) and any
 * reader. Fixed-width types only, offsets instead of pointers, every size and
 * offset asserted. All-zero memory means "empty / free". Little-endian only
 * (asserted at build time and marked in the header for readers).
 *
 *   +----------------------+ 0
 *   | pt_seg_header_t      |  PT_SEG_HEADER_BYTES (4 KiB)
 *   +----------------------+ ring_table_offset
 *   | pt_ring_slot_t[R]    |  R = ring_count, 256 bytes each
 *   +----------------------+ rings_offset (page aligned)
 *   | ring 0: chunk[C]     |  each ring = chunks_per_ring chunks of chunk_bytes
 *   | ring 1: chunk[C]     |
 *   | ...                  |
 *   +----------------------+ symlog_offset (page aligned)
 *   | symbol log           |  size-prefixed Message{Symbol} records, 8-aligned,
 *   |                      |  published up to header.symlog_published (bytes)
 *   +----------------------+ segment_bytes
 *
 * A chunk is, at every moment, a valid size-prefixed FlatBuffer of
 * schema/pytrace.fbs: Message{body: EventChunk{thread, first_event, events}}.
 * Its fixed header (PT_CHUNK_HEADER_BYTES, 72 bytes) and the Event record are the
 * wire, defined in schema/pt_wire.h; only the vector length at
 * PT_CHUNK_OFF_LENGTH changes while the chunk is written. The size prefix of a
 * chunk in a ring is chunk_bytes - 4 (the whole chunk); a reader's copy of n
 * events sets it to 72 + 16n - 4 and the length to n.
 *
 * This header keeps only the segment's own layout: identity, geometry limits,
 * ring slots, segment header. Nothing here includes Python.h.
 */
#ifndef PT_SHM_LAYOUT_H
#define PT_SHM_LAYOUT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "../schema/pt_wire.h" /* the wire: Event, its kinds and flags, the chunk header */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pytrace segments are little-endian; big-endian hosts are not supported"
#endif

#define PT_CACHE_LINE 64

/* ---- identity ---------------------------------------------------------- */

#define PT_SEG_MAGIC 0x0045434152545950ull /* "PYTRACE\0" little-endian */
#define PT_ABI_MAJOR 1                     /* a reader refuses another major */
#define PT_ABI_MINOR 6                     /* a reader accepts any minor (1: stack_request; 2: tracing_displaced,
                                              events_untraced, rings reserved on claim; 3: *_reused;
                                              4: consumer_reads_children, CpuTime records
                                              in the rings; 5: end_signal, end_signal_pid,
                                              the role line; 6: asyncio task records in the
                                              rings (TaskStep, TaskSuspend, TaskAwait) and
                                              Task symbols in the symbol log) */
#define PT_ENDIAN_MARK 0x01020304u         /* reads 0x04030201 on a wrong-endian reader */
#define PT_SHM_PREFIX "pytrace-"           /* /dev/shm/pytrace-<pid>-<seq>-<16 hex random> */

/* ---- geometry limits (a reader rejects anything outside) --------------- */

#define PT_SEG_HEADER_BYTES 4096u
#define PT_RING_SLOT_BYTES 256u
#define PT_MIN_CHUNK_BYTES 4096u            /* power of two */
#define PT_MAX_CHUNK_BYTES (16u << 20)      /* power of two */
#define PT_MIN_CHUNKS_PER_RING 2u           /* power of two */
#define PT_MAX_CHUNKS_PER_RING (1u << 16)   /* power of two */
#define PT_MAX_RINGS 4096u
#define PT_MAX_SEGMENT_BYTES (UINT64_C(64) << 30)
#define PT_CMDLINE_BYTES 1024u
#define PT_PYVERSION_BYTES 64u
#define PT_THREAD_NAME_BYTES 64u
#define PT_ROLE_BYTES 120u
#define PT_MAX_SYMBOL_RECORD_BYTES (64u << 10)

/* ---- per-ring slot (one per possible thread) --------------------------- *
 *
 * Who writes what (P = owning producer thread, C = attached consumer,
 * A = any producer thread of the process trying to claim):
 *
 *   field                  written by        read by
 *   state                  A (CAS FREE->     C, A
 *                          ACTIVE), P (ACTIVE
 *                          ->RETIRED), C (RETIRED->FREE after draining)
 *   generation             A, release-store of generation+1 after the identity,
 *                          chunk 0 and the cursor reset are written
 *   thread..name           A, between its CAS FREE->ACTIVE and the release
 *                          store of generation
 *   end_ticks              P, before the release-store of state=RETIRED
 *   head_chunk             P (release)       C (acquire)
 *   events_written/dropped P (relaxed)       C (relaxed, counters only)
 *   released_chunks        C (release)       P (acquire, when changing chunk)
 *   consumer_index         C only: absolute position of the next record to
 *                          read (chunk sequence * events_per_chunk + index), kept
 *                          in the segment so a reader that takes over from a dead
 *                          one continues where it stopped (shm/reader.c)
 *   released_chunks, consumer_index, events_written/dropped are reset to 0 by
 *   A during the claim (no consumer touches a slot whose new generation is not
 *   yet published); the previous owner's events_written/dropped are first
 *   added to the header's *_reused counters, so the producer's totals keep them.
 *   reported_generation    C only (last generation announced by ThreadStart)
 *   stack_request          C sets 1 (relaxed) when it starts reading an active
 *                          ring in the middle (consumer_index > 0: a reader
 *                          before it read the beginning); P writes the
 *                          thread's stack as Frame records soon after and
 *                          sets 0 (relaxed). Carries no data. (ABI minor 1)
 *
 * The chunk with sequence s lives at ring + (s % chunks_per_ring) * chunk_bytes.
 * Chunks with sequence < released_chunks are free; the producer writes chunk
 * head_chunk and may start chunk s only while s - released_chunks < chunks_per_ring.
 *
 * Claim protocol (pt_segment_claim_ring): CAS state FREE->ACTIVE (acq_rel), fill
 * thread/os_tid/start_ticks/name, reset the cursors, write chunk 0 and
 * release-store head_chunk = 0, then release-store generation + 1. A reader
 * therefore acquire-loads generation first: when it differs from the
 * generation the reader last handled (reported_generation), the identity and
 * chunk 0 are complete; then it acquire-loads state. A slot that reads ACTIVE
 * with an unchanged generation is being claimed: skip it until the generation
 * moves. The reader sets a RETIRED slot FREE (release) only after draining it.
 */
enum pt_ring_state { PT_RING_FREE = 0, PT_RING_ACTIVE = 1, PT_RING_RETIRED = 2 };

typedef struct pt_ring_slot {
    /* line 0: identity, written by the claiming thread */
    _Atomic uint32_t state;       /* enum pt_ring_state */
    _Atomic uint32_t generation;  /* +1 on every claim (release; never 0 once claimed) */
    uint64_t thread;              /* segment-unique thread number, 1.. */
    uint64_t os_tid;
    uint64_t start_ticks;
    uint64_t end_ticks;
    uint8_t reserved0[24];
    /* line 1: name */
    char name[PT_THREAD_NAME_BYTES];
    /* line 2: producer cursor */
    _Alignas(PT_CACHE_LINE) _Atomic uint64_t head_chunk;
    _Atomic uint64_t events_written;
    _Atomic uint64_t events_dropped;
    uint8_t reserved2[40];
    /* line 3: consumer cursor */
    _Alignas(PT_CACHE_LINE) _Atomic uint64_t released_chunks;
    _Atomic uint64_t consumer_index;
    _Atomic uint64_t reported_generation;
    _Atomic uint64_t reported_dropped;
    _Atomic uint32_t stack_request;
    uint8_t reserved3[28];
} pt_ring_slot_t;

_Static_assert(sizeof(_Atomic uint64_t) == 8 && _Alignof(_Atomic uint64_t) == 8, "lock-free u64");
_Static_assert(sizeof(_Atomic uint32_t) == 4, "lock-free u32");
_Static_assert(sizeof(pt_ring_slot_t) == PT_RING_SLOT_BYTES, "ring slot size");
_Static_assert(offsetof(pt_ring_slot_t, name) == 64, "slot name");
_Static_assert(offsetof(pt_ring_slot_t, head_chunk) == 128, "producer line");
_Static_assert(offsetof(pt_ring_slot_t, released_chunks) == 192, "consumer line");
_Static_assert(offsetof(pt_ring_slot_t, stack_request) == 224, "stack request");

/* ---- segment header ---------------------------------------------------- *
 *
 *   field group            written by                     when
 *   identity + geometry    creator                        before shm is shared
 *   process + clock        creator                        before state=RUNNING
 *   state, heartbeat_ns    producer (release / relaxed)   lifetime
 *   counters               producer threads (relaxed)     lifetime
 *   *_reused               claimer of a slot (release     each claim of a slot that had an owner:
 *                          add after resetting the slot)  producer totals = *_reused + sum of slots
 *   symlog_published       producer, under its in-process symbol lock (release;
 *                          pairs with the reader's acquire before reading symbols)
 *   consumer_*             readers (CAS on consumer_pid)  attach / detach / takeover
 *   end_signal, _pid       the producer's SIGTERM         the signal that ends it, before its
 *                          handler (relaxed)              release-store of state=EXITED (ABI minor 5)
 *   role_seq, role         producer, under its in-process lifetime, when the role becomes known
 *                          lock: a seqlock (role_seq odd  (multiprocessing name, DataLoader worker):
 *                          while role is written; release readers copy role between two equal even
 *                          on each change)                acquire loads of role_seq (ABI minor 5)
 *   consumer_reads_children  the holder, after its CAS     0 on every lock and unlock; a
 *                          (release)                      tree reader sets 1 (its producer reads
 *                                                         it with acquire, then checks the holder lives)
 */
typedef struct pt_seg_header {
    /* identity: checked first by every reader */
    uint64_t magic;               /*    0 PT_SEG_MAGIC */
    uint16_t abi_major;           /*    8 */
    uint16_t abi_minor;           /*   10 */
    uint32_t endian_mark;         /*   12 PT_ENDIAN_MARK */
    uint64_t segment_bytes;       /*   16 total mapped size; must equal the file size */
    uint32_t header_bytes;        /*   24 PT_SEG_HEADER_BYTES */
    uint32_t ring_slot_bytes;     /*   28 PT_RING_SLOT_BYTES */
    /* geometry */
    uint32_t ring_count;          /*   32 */
    uint32_t chunk_bytes;         /*   36 power of two */
    uint32_t chunks_per_ring;     /*   40 power of two */
    uint32_t drop_policy;         /*   44 enum pt_drop_policy */
    uint64_t ring_table_offset;   /*   48 */
    uint64_t rings_offset;        /*   56 */
    uint64_t ring_bytes;          /*   64 chunk_bytes * chunks_per_ring */
    uint64_t symlog_offset;       /*   72 */
    uint64_t symlog_bytes;        /*   80 */
    uint64_t wait_timeout_ns;     /*   88 bound of the wait policy per push */
    /* process */
    uint64_t pid;                 /*   96 */
    uint64_t ppid;                /*  104 */
    uint32_t uid;                 /*  112 */
    uint32_t reserved_p;          /*  116 */
    uint64_t start_realtime_ns;   /*  120 */
    /* clock */
    uint32_t clock_kind;          /*  128 enum pt_clock_kind */
    uint32_t reserved_c;          /*  132 */
    uint64_t ticks_per_second;    /*  136 */
    uint64_t base_ticks;          /*  144 */
    uint64_t base_monotonic_ns;   /*  152 */
    uint64_t base_realtime_ns;    /*  160 */
    uint64_t producer_start;      /*  168 producer's start time, /proc/<pid>/stat field 22
                                           (clock ticks since boot): detects pid reuse */
    /* how the process ended, when a signal ended it (ABI minor 5): its parent's
     * SIGTERM (multiprocessing's terminate()) ends a traced process as an exit,
     * state EXITED, and says so here; 0 = not by a signal */
    _Atomic uint32_t end_signal;  /*  176 */
    uint32_t reserved_e;          /*  180 */
    _Atomic uint64_t end_signal_pid; /* 184 the pid that sent it */
    uint8_t reserved_g[64];       /*  192 .. 256 */
    char python_version[PT_PYVERSION_BYTES]; /*  256 NUL-terminated */
    char cmdline[PT_CMDLINE_BYTES];          /*  320 NUL-terminated, args joined by ' ' */
    /* producer state line (1344) */
    _Alignas(PT_CACHE_LINE) _Atomic uint32_t state; /* enum pt_producer_state */
    uint32_t reserved_s;
    _Atomic uint64_t heartbeat_ns;      /* CLOCK_MONOTONIC, refreshed while running */
    _Atomic uint64_t hook_errors;       /* sticky failure count of the hooks */
    _Atomic uint64_t symbols_dropped;   /* symbols that did not fit the log */
    _Atomic uint64_t threads_started;   /* last thread number handed out */
    _Atomic uint64_t threads_untraced;  /* threads that ran without a ring (none free, or no room in
                                           /dev/shm for one): each once a session; such a thread
                                           tries again every 100 ms */
    _Atomic uint64_t events_untraced;   /* 1392: events of threads without a ring; moved into the
                                           thread's events_dropped (and a Lost record) once it has one */
    _Atomic uint64_t tracing_displaced; /* 1400: threads whose profile hook the program (sys.setprofile,
                                           cProfile) took over, or held when tracing started */
    /* symbol log line (1408) */
    _Alignas(PT_CACHE_LINE) _Atomic uint64_t symlog_published; /* bytes, release */
    _Atomic uint64_t symbol_count;      /* last id handed out */
    uint8_t reserved_y[48];
    /* consumer line (1472) */
    _Alignas(PT_CACHE_LINE) _Atomic uint64_t consumer_pid; /* 0 = no reader */
    _Atomic uint64_t consumer_start;    /* holder's process start time (pid reuse) */
    _Atomic uint64_t consumer_heartbeat_ns;
    _Atomic uint64_t consumer_takeovers;
    _Atomic uint64_t consumer_reads_children; /* 1504: 1 while the holder reads the producer's process
                                                 tree (a hub with --subprocesses, ABI minor 4): the
                                                 producer, exiting, leaves the segments of its dead
                                                 children to that reader instead of removing them */
    uint8_t reserved_k[24];
    /* reused-slot line (1536): the final counters of earlier owners of slots
     * that were claimed again, folded in by the claimer (ABI minor 3) */
    _Alignas(PT_CACHE_LINE) _Atomic uint64_t events_written_reused;
    _Atomic uint64_t events_dropped_reused;
    uint8_t reserved_r[48];
    /* role line (1600, ABI minor 5): what the process is in its job, learnt after
     * the segment exists; 0 = none yet */
    _Alignas(PT_CACHE_LINE) _Atomic uint32_t role_seq;
    uint32_t reserved_o;
    _Atomic uint8_t role[PT_ROLE_BYTES]; /* 1608 NUL-terminated UTF-8; bytes atomic (relaxed): a seqlock */
    uint8_t reserved_tail[PT_SEG_HEADER_BYTES - 1728];
} pt_seg_header_t;

_Static_assert(sizeof(pt_seg_header_t) == PT_SEG_HEADER_BYTES, "header size");
_Static_assert(offsetof(pt_seg_header_t, ring_count) == 32, "geometry");
_Static_assert(offsetof(pt_seg_header_t, pid) == 96, "process");
_Static_assert(offsetof(pt_seg_header_t, clock_kind) == 128, "clock");
_Static_assert(offsetof(pt_seg_header_t, producer_start) == 168, "producer_start");
_Static_assert(offsetof(pt_seg_header_t, end_signal) == 176, "end_signal");
_Static_assert(offsetof(pt_seg_header_t, end_signal_pid) == 184, "end_signal_pid");
_Static_assert(offsetof(pt_seg_header_t, python_version) == 256, "python_version");
_Static_assert(offsetof(pt_seg_header_t, cmdline) == 320, "cmdline");
_Static_assert(offsetof(pt_seg_header_t, state) == 1344, "state line");
_Static_assert(offsetof(pt_seg_header_t, events_untraced) == 1392, "events_untraced");
_Static_assert(offsetof(pt_seg_header_t, tracing_displaced) == 1400, "tracing_displaced");
_Static_assert(offsetof(pt_seg_header_t, symlog_published) == 1408, "symlog line");
_Static_assert(offsetof(pt_seg_header_t, consumer_pid) == 1472, "consumer line");
_Static_assert(offsetof(pt_seg_header_t, consumer_reads_children) == 1504, "consumer_reads_children");
_Static_assert(offsetof(pt_seg_header_t, events_written_reused) == 1536, "reused-slot line");
_Static_assert(offsetof(pt_seg_header_t, role_seq) == 1600, "role line");
_Static_assert(offsetof(pt_seg_header_t, role) == 1608 && sizeof(_Atomic uint8_t) == 1, "role");

#endif /* PT_SHM_LAYOUT_H */
