/*
 * pt_wire: the wire of schema/pytrace.fbs in C, defined once.
 *
 * Everything a byte that crosses a process boundary means: the values of the
 * schema's enums (EventKind, EventFlags, ClockKind, ProducerState, SymbolKind,
 * DropPolicy, Codec) and of its union MessageBody, the 16-byte Event struct, the file
 * identifier, and the EventChunk FlatBuffer laid out by hand (the fixed chunk
 * header that a ring chunk and a reader's copy share). tests/unit/schema asserts
 * every value, size and offset here against the code flatc generates from
 * pytrace.fbs, so the two cannot drift.
 *
 * shm/ (the segment: header, ring slots, rings, symbol log) builds on this
 * header; nothing under schema/ includes anything from shm/ or above.
 * Plain C11, also readable by C++ (the generated-code test includes it).
 */
#ifndef PT_SCHEMA_WIRE_H
#define PT_SCHEMA_WIRE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the pytrace wire is little-endian; big-endian hosts are not supported"
#endif

#ifdef __cplusplus
#define PT_WIRE_ASSERT(cond, why) static_assert(cond, why)
#else
#define PT_WIRE_ASSERT(cond, why) _Static_assert(cond, why)
#endif

/* file_identifier of every Message */
#define PT_FILE_IDENTIFIER "PYTR"

/* ---- the 16-byte record (struct Event) --------------------------------- */

typedef struct pt_event {
    uint64_t ticks; /* 0 */
    uint32_t id;    /* 8 */
    uint16_t aux;   /* 12 */
    uint8_t kind;   /* 14: enum pt_event_kind */
    uint8_t flags;  /* 15: PT_EVF_* bits */
} pt_event_t;

PT_WIRE_ASSERT(sizeof(pt_event_t) == 16, "Event is 16 bytes");
PT_WIRE_ASSERT(offsetof(pt_event_t, ticks) == 0, "Event.ticks");
PT_WIRE_ASSERT(offsetof(pt_event_t, id) == 8, "Event.id");
PT_WIRE_ASSERT(offsetof(pt_event_t, aux) == 12, "Event.aux");
PT_WIRE_ASSERT(offsetof(pt_event_t, kind) == 14, "Event.kind");
PT_WIRE_ASSERT(offsetof(pt_event_t, flags) == 15, "Event.flags");

/* enum EventKind (frozen) */
enum pt_event_kind {
    PT_EV_NONE = 0,
    PT_EV_CALL = 1,
    PT_EV_RETURN = 2,
    PT_EV_CCALL = 3,
    PT_EV_CRETURN = 4,
    PT_EV_UNWIND = 5,
    PT_EV_CUNWIND = 6,
    PT_EV_YIELD = 7,
    PT_EV_RESUME = 8,
    PT_EV_SPAN_BEGIN = 9,
    PT_EV_SPAN_END = 10,
    PT_EV_MARK = 11,
    PT_EV_LOST = 12,
    PT_EV_FRAME = 13,
    PT_EV_CPU_TIME = 14,
    PT_EV_TASK_STEP = 15,    /* an asyncio task's step begins (id = Task symbol) */
    PT_EV_TASK_SUSPEND = 16, /* the step ends (aux = enum pt_task_state) */
    PT_EV_TASK_AWAIT = 17,   /* after a Pending suspend: what it waits on (aux = enum pt_await_kind) */
    PT_EV_KIND_COUNT = 18 /* one past the last kind */
};

/* TaskSuspend.aux: the task's state after the step */
enum pt_task_state { PT_TASK_PENDING = 0, PT_TASK_DONE = 1, PT_TASK_CANCELLED = 2, PT_TASK_FAILED = 3 };
#define PT_TASK_STATE_COUNT 4
/* TaskAwait.aux: what the task waits on (id: the awaited Task symbol, else a Label) */
enum pt_await_kind {
    PT_AWAIT_FUTURE = 0,
    PT_AWAIT_TASK = 1,
    PT_AWAIT_SLEEP = 2,
    PT_AWAIT_IO = 3,
    PT_AWAIT_THREAD = 4,
    PT_AWAIT_SYNC = 5
};
#define PT_AWAIT_KIND_COUNT 6

/* enum EventFlags (bit_flags): bits of Event.flags */
#define PT_EVF_C_FUNCTION 0x01u /* CFunction: Frame record of a C function */
#define PT_EVF_THROWN 0x02u     /* Thrown: Resume caused by gen.throw() */
#define PT_EVF_SYNTHETIC 0x04u  /* Synthetic: written by the tracer, not by the program */
/* the cause of a Lost record (none: a full ring under policy drop) */
#define PT_EVF_LOST_NO_RING 0x08u      /* LostNoRing: the thread had no ring (events_untraced) */
#define PT_EVF_LOST_WAIT_TIMEOUT 0x10u /* LostWaitTimeout: policy wait, the wait bound ran out */
#define PT_EVF_LOST_NO_ROOM 0x20u      /* LostNoRoom: no room in /dev/shm for the ring's next chunk */
#define PT_EVF_LOST_CAUSES (PT_EVF_LOST_NO_RING | PT_EVF_LOST_WAIT_TIMEOUT | PT_EVF_LOST_NO_ROOM)
/* Step: a Mark record that ends a step of the program's loop (Optimizer.step, pytrace.step()) */
#define PT_EVF_STEP 0x40u

/* Lost record: count = id | ((uint64_t)aux << 32) (48 bits, saturating). */
#define PT_LOST_MAX ((UINT64_C(1) << 48) - 1)
/* CpuTime record: the thread's CPU ns modulo 2^48 = id | ((uint64_t)aux << 32);
 * the difference of two is taken modulo 2^48 too. */
#define PT_CPU_MASK ((UINT64_C(1) << 48) - 1)
/* Does a record of this kind carry a value in id (not a symbol id)? */
#define PT_EV_ID_IS_VALUE(kind) ((kind) == PT_EV_LOST || (kind) == PT_EV_CPU_TIME)

/* enum ClockKind, ProducerState, SymbolKind, DropPolicy (frozen) */
enum pt_clock_kind { PT_CLOCK_MONOTONIC = 0, PT_CLOCK_TSC = 1 };
enum pt_producer_state {
    PT_STATE_EMPTY = 0,
    PT_STATE_RUNNING = 1,
    PT_STATE_STOPPED = 2, /* tracing stopped, process alive */
    PT_STATE_EXITED = 3,  /* process exited cleanly; everything is published */
    PT_STATE_DEAD = 4     /* reader-side verdict only: pid gone without EXITED */
};
enum pt_symbol_kind { PT_SYM_PY_FUNCTION = 0, PT_SYM_C_FUNCTION = 1, PT_SYM_LABEL = 2, PT_SYM_TASK = 3 };
enum pt_drop_policy { PT_POLICY_DROP = 0, PT_POLICY_WAIT = 1 };

/* union MessageBody: the type of a Message (frozen, order of the union) */
enum pt_msg_type {
    PT_MSG_NONE = 0,
    PT_MSG_PROCESS_INFO = 1,
    PT_MSG_THREAD_START = 2,
    PT_MSG_THREAD_END = 3,
    PT_MSG_SYMBOL = 4,
    PT_MSG_EVENT_CHUNK = 5,
    PT_MSG_LOST_COUNT = 6,
    PT_MSG_PRODUCER_STATUS = 7,
    PT_MSG_COMPRESSED_CHUNK = 8 /* recording files only (viewer/core/recfile.h) */
};
#define PT_MSG_LAST PT_MSG_COMPRESSED_CHUNK

/* enum Codec: how a CompressedChunk's data is made from its events */
#define PT_CODEC_NONE 0u
#define PT_CODEC_ZSTD_DELTA_SHUFFLE 1u

/* ---- EventChunk: the size-prefixed FlatBuffer laid out by hand ---------- *
 *
 * A chunk of a ring (shm/layout.h) is, at every moment, this Message; so is a
 * reader's copy of n events. Only the vector length at PT_CHUNK_OFF_LENGTH
 * changes while a chunk is written. Alignment is counted from byte 0 (the size
 * prefix), as the stock verifier counts it.
 *
 *  off size  field
 *    0   u32  size prefix            = bytes after the prefix
 *    4   u32  root uoffset           = 16      (-> Message table at 20)
 *    8   4    file identifier "PYTR"
 *   12   u16  Message vtable: size   = 8
 *   14   u16                 table   = 12
 *   16   u16                 body_type field at +4
 *   18   u16                 body      field at +8
 *   20   i32  Message table -> vtable = 8     (20 - 12)
 *   24   u8   body_type = PT_MSG_EVENT_CHUNK (5); 25..27 zero
 *   28   u32  body uoffset = 16      (-> EventChunk table at 44)
 *   32   u16  EventChunk vtable: size = 10
 *   34   u16                    table = 24
 *   36   u16  thread      at +4
 *   38   u16  first_event at +12
 *   40   u16  events      at +20
 *   42   u16  zero padding
 *   44   i32  EventChunk table -> vtable = 12  (44 - 32)
 *   48   u64  thread
 *   56   u64  first_event
 *   64   u32  events uoffset = 4     (-> vector at 68)
 *   68   u32  vector length n        (release-stored by the producer)
 *   72   Event[n], 16 bytes each, 8-aligned from byte 0
 */
#define PT_CHUNK_HEADER_BYTES 72u

/* ---- Tagged messages: Message.process (pt_fb_tag) ----------------------- *
 *
 * A message of a multi-process stream carries its process number in the
 * Message table's third field. pt_fb builds it from the untagged message by
 * replacing bytes 0..31 with this 40-byte header and moving the body (byte 32
 * on) 8 bytes on, so every offset inside the body is unchanged and the body
 * keeps its alignment:
 *
 *  off size  field
 *    0   u32  size prefix            = untagged prefix + 8
 *    4   u32  root uoffset           = 20      (-> Message table at 24)
 *    8   4    file identifier "PYTR"
 *   12   u16  Message vtable: size   = 10
 *   14   u16                 table   = 16
 *   16   u16                 body_type field at +4
 *   18   u16                 body      field at +8
 *   20   u16                 process   field at +12
 *   22   u16  zero padding
 *   24   i32  Message table -> vtable = 12    (24 - 12)
 *   28   u8   body_type; 29..31 zero
 *   32   u32  body uoffset           = untagged body uoffset + 4
 *   36   u32  process (never 0: 0 is written as an untagged message)
 *   40   the untagged message's bytes 32.. (body vtable, table, strings,
 *        vectors)
 */
#define PT_MSG_HEADER_BYTES 32u        /* untagged: the body starts here */
#define PT_MSG_TAGGED_HEADER_BYTES 40u /* tagged */
#define PT_CHUNK_OFF_THREAD 48u
#define PT_CHUNK_OFF_FIRST_EVENT 56u
#define PT_CHUNK_OFF_LENGTH 68u
#define PT_CHUNK_OFF_EVENTS 72u
#define PT_CHUNK_EVENTS(chunk_bytes) (((chunk_bytes) - PT_CHUNK_HEADER_BYTES) / sizeof(pt_event_t))

PT_WIRE_ASSERT(PT_CHUNK_OFF_EVENTS % 8 == 0, "Event vector 8-aligned from the chunk start");

#endif /* PT_SCHEMA_WIRE_H */
