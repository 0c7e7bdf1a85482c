// tests/unit/schema: schema/pt_wire.h is schema/pytrace.fbs, value for value.
//
// pt_wire.h spells the wire for C (enum values, the Event struct, the file
// identifier, the hand-laid EventChunk header). Every value is asserted here
// against the C++ code flatc generates from pytrace.fbs: a value that differs
// fails the build (static_assert), an enum that gains a value in the .fbs
// without pt_wire.h fails it too (the *_MAX checks), and the Event layout and
// chunk offsets are checked through the generated accessors at run time.
#include <cstdio>
#include <cstring>
#include <vector>

#include "flatbuffers/verifier.h"
#include "pytrace_generated.h"
#include "schema/pt_fb.h"
#include "schema/pt_wire.h"

namespace fb = pytrace::fb;

// The C enum and flatc's are distinct types: compare their values.
#define SAME(ours, generated, what) \
  static_assert(static_cast<long>(ours) == static_cast<long>(generated), what ": pt_wire.h differs from pytrace.fbs")

// ---- enum EventKind --------------------------------------------------------
SAME(PT_EV_NONE, fb::EventKind_None, "EventKind None");
SAME(PT_EV_CALL, fb::EventKind_Call, "EventKind Call");
SAME(PT_EV_RETURN, fb::EventKind_Return, "EventKind Return");
SAME(PT_EV_CCALL, fb::EventKind_CCall, "EventKind CCall");
SAME(PT_EV_CRETURN, fb::EventKind_CReturn, "EventKind CReturn");
SAME(PT_EV_UNWIND, fb::EventKind_Unwind, "EventKind Unwind");
SAME(PT_EV_CUNWIND, fb::EventKind_CUnwind, "EventKind CUnwind");
SAME(PT_EV_YIELD, fb::EventKind_Yield, "EventKind Yield");
SAME(PT_EV_RESUME, fb::EventKind_Resume, "EventKind Resume");
SAME(PT_EV_SPAN_BEGIN, fb::EventKind_SpanBegin, "EventKind SpanBegin");
SAME(PT_EV_SPAN_END, fb::EventKind_SpanEnd, "EventKind SpanEnd");
SAME(PT_EV_MARK, fb::EventKind_Mark, "EventKind Mark");
SAME(PT_EV_LOST, fb::EventKind_Lost, "EventKind Lost");
SAME(PT_EV_FRAME, fb::EventKind_Frame, "EventKind Frame");
SAME(PT_EV_CPU_TIME, fb::EventKind_CpuTime, "EventKind CpuTime");
SAME(PT_EV_TASK_STEP, fb::EventKind_TaskStep, "EventKind TaskStep");
SAME(PT_EV_TASK_SUSPEND, fb::EventKind_TaskSuspend, "EventKind TaskSuspend");
SAME(PT_EV_TASK_AWAIT, fb::EventKind_TaskAwait, "EventKind TaskAwait");
SAME(PT_EV_KIND_COUNT, fb::EventKind_MAX + 1, "EventKind: every kind of the .fbs is in pt_wire.h");

// ---- enum EventFlags (bit_flags) -------------------------------------------
SAME(PT_EVF_C_FUNCTION, fb::EventFlags_CFunction, "EventFlags CFunction");
SAME(PT_EVF_THROWN, fb::EventFlags_Thrown, "EventFlags Thrown");
SAME(PT_EVF_SYNTHETIC, fb::EventFlags_Synthetic, "EventFlags Synthetic");
SAME(PT_EVF_LOST_NO_RING, fb::EventFlags_LostNoRing, "EventFlags LostNoRing");
SAME(PT_EVF_LOST_WAIT_TIMEOUT, fb::EventFlags_LostWaitTimeout, "EventFlags LostWaitTimeout");
SAME(PT_EVF_LOST_NO_ROOM, fb::EventFlags_LostNoRoom, "EventFlags LostNoRoom");
SAME(PT_EVF_STEP, fb::EventFlags_Step, "EventFlags Step");
SAME((PT_EVF_C_FUNCTION | PT_EVF_THROWN | PT_EVF_SYNTHETIC | PT_EVF_LOST_CAUSES | PT_EVF_STEP), fb::EventFlags_ANY, "EventFlags: every flag of the .fbs is in pt_wire.h");

// ---- enum ClockKind, ProducerState, SymbolKind, DropPolicy -----------------
SAME(PT_CLOCK_MONOTONIC, fb::ClockKind_Monotonic, "ClockKind Monotonic");
SAME(PT_CLOCK_TSC, fb::ClockKind_Tsc, "ClockKind Tsc");
SAME(PT_CLOCK_TSC, fb::ClockKind_MAX, "ClockKind: every value is in pt_wire.h");

SAME(PT_STATE_EMPTY, fb::ProducerState_Empty, "ProducerState Empty");
SAME(PT_STATE_RUNNING, fb::ProducerState_Running, "ProducerState Running");
SAME(PT_STATE_STOPPED, fb::ProducerState_Stopped, "ProducerState Stopped");
SAME(PT_STATE_EXITED, fb::ProducerState_Exited, "ProducerState Exited");
SAME(PT_STATE_DEAD, fb::ProducerState_Dead, "ProducerState Dead");
SAME(PT_STATE_DEAD, fb::ProducerState_MAX, "ProducerState: every value is in pt_wire.h");

SAME(PT_SYM_PY_FUNCTION, fb::SymbolKind_PyFunction, "SymbolKind PyFunction");
SAME(PT_SYM_C_FUNCTION, fb::SymbolKind_CFunction, "SymbolKind CFunction");
SAME(PT_SYM_LABEL, fb::SymbolKind_Label, "SymbolKind Label");
SAME(PT_SYM_TASK, fb::SymbolKind_Task, "SymbolKind Task");
SAME(PT_SYM_TASK, fb::SymbolKind_MAX, "SymbolKind: every value is in pt_wire.h");

SAME(PT_POLICY_DROP, fb::DropPolicy_Drop, "DropPolicy Drop");
SAME(PT_POLICY_WAIT, fb::DropPolicy_Wait, "DropPolicy Wait");
SAME(PT_POLICY_WAIT, fb::DropPolicy_MAX, "DropPolicy: every value is in pt_wire.h");

// ---- union MessageBody -----------------------------------------------------
SAME(PT_MSG_NONE, fb::MessageBody_NONE, "MessageBody NONE");
SAME(PT_MSG_PROCESS_INFO, fb::MessageBody_ProcessInfo, "MessageBody ProcessInfo");
SAME(PT_MSG_THREAD_START, fb::MessageBody_ThreadStart, "MessageBody ThreadStart");
SAME(PT_MSG_THREAD_END, fb::MessageBody_ThreadEnd, "MessageBody ThreadEnd");
SAME(PT_MSG_SYMBOL, fb::MessageBody_Symbol, "MessageBody Symbol");
SAME(PT_MSG_EVENT_CHUNK, fb::MessageBody_EventChunk, "MessageBody EventChunk");
SAME(PT_MSG_LOST_COUNT, fb::MessageBody_LostCount, "MessageBody LostCount");
SAME(PT_MSG_PRODUCER_STATUS, fb::MessageBody_ProducerStatus, "MessageBody ProducerStatus");
SAME(PT_MSG_COMPRESSED_CHUNK, fb::MessageBody_CompressedChunk, "MessageBody CompressedChunk");
SAME(PT_MSG_LAST, fb::MessageBody_MAX, "MessageBody: every type is in pt_wire.h");

// ---- enum Codec --------------------------------------------------------------
SAME(PT_CODEC_NONE, fb::Codec_None, "Codec None");
SAME(PT_CODEC_ZSTD_DELTA_SHUFFLE, fb::Codec_ZstdDeltaShuffle, "Codec ZstdDeltaShuffle");
SAME(PT_CODEC_ZSTD_DELTA_SHUFFLE, fb::Codec_MAX, "Codec: every value is in pt_wire.h");

// ---- struct Event ----------------------------------------------------------
static_assert(sizeof(pt_event_t) == sizeof(fb::Event), "Event size");
static_assert(alignof(pt_event_t) == alignof(fb::Event), "Event alignment");

static int failures = 0;

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
      failures++;                                                                    \
    }                                                                                \
  } while (0)

// Each field of pt_event_t lands where the generated struct reads it, and back.
static void event_layout() {
  pt_event_t ours{0x0102030405060708ull, 0x11223344u, 0x5566u, PT_EV_LOST, 0x77u};
  fb::Event theirs;
  std::memcpy(static_cast<void *>(&theirs), &ours, sizeof ours);
  CHECK(theirs.ticks() == ours.ticks && theirs.id() == ours.id && theirs.aux() == ours.aux);
  CHECK(theirs.kind() == fb::EventKind_Lost && theirs.flags() == ours.flags);

  fb::Event made(99, 7, 3, fb::EventKind_Frame, fb::EventFlags_CFunction);
  pt_event_t back;
  std::memcpy(&back, &made, sizeof back);
  CHECK(back.ticks == 99 && back.id == 7 && back.aux == 3 && back.kind == PT_EV_FRAME &&
        back.flags == PT_EVF_C_FUNCTION);
}

// The hand-laid chunk header: the generated accessors find each field at the
// offset pt_wire.h names.
static void chunk_offsets() {
  CHECK(std::strlen(PT_FILE_IDENTIFIER) == 4 && std::strcmp(PT_FILE_IDENTIFIER, fb::MessageIdentifier()) == 0);

  const uint32_t count = 3;
  std::vector<uint64_t> store((PT_CHUNK_HEADER_BYTES + 16 * count) / 8, 0);
  uint8_t *buf = reinterpret_cast<uint8_t *>(store.data());
  const size_t len = PT_CHUNK_HEADER_BYTES + 16 * count;
  pt_fb_chunk_header(buf, 12345, 678, count, (uint32_t)len - 4);
  flatbuffers::Verifier v(buf, len);
  CHECK(fb::VerifySizePrefixedMessageBuffer(v));
  CHECK(fb::SizePrefixedMessageBufferHasIdentifier(buf));
  const fb::Message *m = fb::GetSizePrefixedMessage(buf);
  CHECK(m->body_type() == fb::MessageBody_EventChunk);
  const fb::EventChunk *c = m->body_as_EventChunk();
  if (!c || !c->events()) {
    CHECK(c && c->events());
    return;
  }
  // (the generated table derives privately from flatbuffers::Table, at offset 0)
  const flatbuffers::Table *table = reinterpret_cast<const flatbuffers::Table *>(c);
  CHECK(table->GetAddressOf(fb::EventChunk::VT_THREAD) - buf == PT_CHUNK_OFF_THREAD);
  CHECK(table->GetAddressOf(fb::EventChunk::VT_FIRST_EVENT) - buf == PT_CHUNK_OFF_FIRST_EVENT);
  CHECK(reinterpret_cast<const uint8_t *>(c->events()) - buf == PT_CHUNK_OFF_LENGTH);
  CHECK(c->events()->Data() - buf == PT_CHUNK_OFF_EVENTS);
  CHECK(c->thread() == 12345 && c->first_event() == 678 && c->events()->size() == count);
  CHECK(PT_CHUNK_EVENTS(65536u) == (65536u - PT_CHUNK_HEADER_BYTES) / sizeof(fb::Event));
}

int main() {
  event_layout();
  chunk_offsets();
  if (failures) {
    std::fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("pt_wire.h agrees with the flatc-generated code of pytrace.fbs\n");
  return 0;
}
