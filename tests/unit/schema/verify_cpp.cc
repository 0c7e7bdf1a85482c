// tests/unit/schema: every message our C builder writes passes the stock
// FlatBuffers verifier (VerifySizePrefixedMessageBuffer from flatc 2.0.8) and
// reads back with the generated C++ accessors.
//
// Usage: pt_schema_verify_cpp                 built-in messages, values checked
//        pt_schema_verify_cpp FILE [--min N]  every message in FILE (a stream of
//                                             size-prefixed messages) verified
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "flatbuffers/verifier.h"
#include "pytrace_generated.h"
#include "schema/pt_fb.h"

namespace fb = pytrace::fb;

static int failures = 0;

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
      failures++;                                                                    \
    }                                                                                \
  } while (0)

static pt_fb_str_t S(const char *s) { return pt_fb_str_t{s, (uint32_t)std::strlen(s)}; }

// Verify a copy placed at an 8-aligned address (as a reader's buffer would be).
static const fb::Message *verify(std::vector<uint64_t> &store, const uint8_t *msg, size_t len) {
  store.assign((len + 7) / 8, 0);
  std::memcpy(store.data(), msg, len);
  const uint8_t *buf = reinterpret_cast<const uint8_t *>(store.data());
  flatbuffers::Verifier v(buf, len);
  if (!fb::VerifySizePrefixedMessageBuffer(v)) {
    std::fprintf(stderr, "stock verifier rejected a %zu-byte message\n", len);
    failures++;
    return nullptr;
  }
  if (!fb::MessageBufferHasIdentifier(buf + 4)) {
    std::fprintf(stderr, "identifier missing\n");
    failures++;
  }
  return fb::GetSizePrefixedMessage(buf);
}

static bool str_is(const flatbuffers::String *s, const char *want) {
  return s && s->str() == want;
}

static void builtin() {
  std::vector<uint8_t> out(1 << 16);
  std::vector<uint64_t> store;
  size_t n;

  pt_fb_process_info_t pi{};
  pi.pid = 4242; pi.ppid = 1; pi.command_line = S("python3 app.py"); pi.python_version = S("3.11.2");
  pi.segment = S("/pytrace-4242-0"); pi.abi_major = 1; pi.abi_minor = 0; pi.clock = PT_CLOCK_TSC;
  pi.ticks_per_second = 3000000000ull; pi.base_ticks = 11; pi.base_monotonic_ns = 22;
  pi.base_realtime_ns = 33; pi.ring_count = 64; pi.ring_capacity_events = 131040; pi.drop_policy = 1;
  n = pt_fb_build_process_info(out.data(), out.size(), &pi);
  if (auto m = verify(store, out.data(), n)) {
    CHECK(m->body_type() == fb::MessageBody_ProcessInfo);
    auto p = m->body_as_ProcessInfo();
    CHECK(p && p->pid() == 4242 && p->ppid() == 1);
    CHECK(p && str_is(p->command_line(), "python3 app.py") && str_is(p->python_version(), "3.11.2"));
    CHECK(p && str_is(p->segment(), "/pytrace-4242-0"));
    CHECK(p && p->abi_major() == 1 && p->abi_minor() == 0 && p->clock() == fb::ClockKind_Tsc);
    CHECK(p && p->ticks_per_second() == 3000000000ull && p->base_ticks() == 11);
    CHECK(p && p->base_monotonic_ns() == 22 && p->base_realtime_ns() == 33);
    CHECK(p && p->ring_count() == 64 && p->ring_capacity_events() == 131040 && p->drop_policy() == 1);
    CHECK(p && p->role() == nullptr); /* no role: the 15-field form */
  }
  /* the role (field 15, added at the end), as flatc's reader finds it */
  pi.role = S("DataLoader worker 1");
  n = pt_fb_build_process_info(out.data(), out.size(), &pi);
  if (auto m = verify(store, out.data(), n)) {
    auto p = m->body_as_ProcessInfo();
    CHECK(p && str_is(p->role(), "DataLoader worker 1") && p->drop_policy() == 1 && p->pid() == 4242);
    CHECK(p && str_is(p->command_line(), "python3 app.py"));
  }
  pi.role = pt_fb_str_t{nullptr, 0};

  pt_fb_thread_start_t ts{7, 3, 99999, S("worker-1"), 555};
  n = pt_fb_build_thread_start(out.data(), out.size(), &ts);
  if (auto m = verify(store, out.data(), n)) {
    auto p = m->body_as_ThreadStart();
    CHECK(p && p->thread() == 7 && p->ring() == 3 && p->os_tid() == 99999);
    CHECK(p && str_is(p->name(), "worker-1") && p->ticks() == 555);
  }
  pt_fb_thread_start_t ts_noname{8, 4, 1, {nullptr, 0}, 2};
  n = pt_fb_build_thread_start(out.data(), out.size(), &ts_noname);
  if (auto m = verify(store, out.data(), n)) {
    auto p = m->body_as_ThreadStart();
    CHECK(p && p->name() == nullptr && p->thread() == 8);
  }

  pt_fb_thread_end_t te{7, 777, 1000000, 12};
  n = pt_fb_build_thread_end(out.data(), out.size(), &te);
  if (auto m = verify(store, out.data(), n)) {
    auto p = m->body_as_ThreadEnd();
    CHECK(p && p->thread() == 7 && p->ticks() == 777 && p->events_written() == 1000000 &&
          p->events_dropped() == 12);
  }

  // symbol-log style records: odd string lengths, empty strings, long names
  const char *names[] = {"f", "", "Klass.method", "a_rather_long_qualified_name.<locals>.inner"};
  for (uint32_t i = 0; i < 4; i++) {
    std::string file = std::string("/src/file") + std::to_string(i) + ".py";
    // profile_name absent (the 5-field form) for odd i, present for even i
    const char *profile = (i % 2) ? nullptr : names[3 - i];
    pt_fb_symbol_t sy{i + 1, (uint8_t)(i % 3), S(names[i]), S(file.c_str()), 10 * i,
                      profile ? S(profile) : pt_fb_str_t{nullptr, 0}};
    n = pt_fb_build_symbol(out.data(), out.size(), &sy);
    CHECK(n % 8 == 0);
    if (auto m = verify(store, out.data(), n)) {
      auto p = m->body_as_Symbol();
      CHECK(p && p->id() == i + 1 && p->kind() == (fb::SymbolKind)(i % 3));
      CHECK(p && str_is(p->name(), names[i]) && str_is(p->file(), file.c_str()) && p->line() == 10 * i);
      CHECK(p && (profile ? str_is(p->profile_name(), profile) : p->profile_name() == nullptr));
    }
  }

  pt_fb_lost_count_t lc{7, 4096};
  n = pt_fb_build_lost_count(out.data(), out.size(), &lc);
  if (auto m = verify(store, out.data(), n)) {
    auto p = m->body_as_LostCount();
    CHECK(p && p->thread() == 7 && p->dropped_total() == 4096);
  }

  pt_fb_producer_status_t ps{PT_STATE_EXITED, 111, 222, 333, 444, 555, 666, 777, 888, 0, 0, 0, 0, 0, 0};
  n = pt_fb_build_producer_status(out.data(), out.size(), &ps);
  if (auto m = verify(store, out.data(), n)) {
    auto p = m->body_as_ProducerStatus();
    CHECK(p && p->state() == fb::ProducerState_Exited && p->heartbeat_ns() == 111);
    CHECK(p && p->events_written() == 222 && p->events_dropped() == 333);
    CHECK(p && p->hook_errors() == 444 && p->symbols_dropped() == 555);
    CHECK(p && p->threads_untraced() == 666 && p->tracing_displaced() == 777 && p->events_untraced() == 888);
    CHECK(p && p->unrecorded_events() == 0 && p->unrecorded_messages() == 0 && p->unrecorded_errno() == 0);
    CHECK(p && p->end_signal() == 0 && p->end_signal_pid() == 0);
  }
  // ended by its parent's SIGTERM: the two fields (end_signal 12, end_signal_pid 13)
  ps.end_signal = 15;
  ps.end_signal_pid = 4241;
  n = pt_fb_build_producer_status(out.data(), out.size(), &ps);
  if (auto m = verify(store, out.data(), n)) {
    auto p = m->body_as_ProducerStatus();
    CHECK(p && p->state() == fb::ProducerState_Exited && p->events_untraced() == 888);
    CHECK(p && p->end_signal() == 15 && p->end_signal_pid() == 4241);
  }
  // a recording's loss slot: every field present, read back by flatc's code
  pt_fb_producer_status_t slot{PT_STATE_RUNNING, 0, 0, 0, 0, 0, 0, 0, 0, 1, 4515645, 2049, 28, 0, 0};
  n = pt_fb_build_producer_status(out.data(), out.size(), &slot);
  if (auto m = verify(store, out.data(), n)) {
    auto p = m->body_as_ProducerStatus();
    CHECK(p && p->state() == fb::ProducerState_Running && p->unrecorded_events() == 4515645);
    CHECK(p && p->unrecorded_messages() == 2049 && p->unrecorded_errno() == 28);
  }

  // chunk header + N events, for several N including 0 and a full 64 KiB chunk
  const uint32_t counts[] = {0, 1, 2, 3, 100, (uint32_t)PT_CHUNK_EVENTS(65536u)};
  for (uint32_t count : counts) {
    std::vector<uint8_t> chunk(PT_CHUNK_HEADER_BYTES + 16 * (size_t)count);
    pt_fb_chunk_header(chunk.data(), 5, 4093ull * 7, count, (uint32_t)chunk.size() - 4);
    for (uint32_t i = 0; i < count; i++) {
      pt_event_t e{1000000ull + i, i % 50 + 1, (uint16_t)i, (uint8_t)(1 + i % 13), (uint8_t)(i & 7)};
      std::memcpy(chunk.data() + PT_CHUNK_OFF_EVENTS + 16 * (size_t)i, &e, 16);
    }
    if (auto m = verify(store, chunk.data(), chunk.size())) {
      auto p = m->body_as_EventChunk();
      CHECK(p && p->thread() == 5 && p->first_event() == 4093ull * 7);
      CHECK(p && p->events() && p->events()->size() == count);
      for (uint32_t i = 0; p && p->events() && i < count; i++) {
        const fb::Event *e = p->events()->Get(i);
        CHECK(e->ticks() == 1000000ull + i && e->id() == i % 50 + 1 && e->aux() == (uint16_t)i);
        CHECK(e->kind() == (fb::EventKind)(1 + i % 13) && e->flags() == (i & 7));
        if (failures > 20) return;
      }
    }
    // built by pt_fb_build_event_chunk from structs: same bytes
    std::vector<pt_event_t> evs(count);
    if (count) std::memcpy(evs.data(), chunk.data() + PT_CHUNK_OFF_EVENTS, 16 * (size_t)count);
    std::vector<uint8_t> built(chunk.size());
    CHECK(pt_fb_build_event_chunk(built.data(), built.size(), 5, 4093ull * 7, evs.data(), count) ==
          chunk.size());
    CHECK(built == chunk);
  }
  // a ring chunk as it sits in a ring: size prefix = chunk_bytes - 4, length n < capacity
  {
    std::vector<uint8_t> ring_chunk(4096, 0);
    pt_fb_chunk_header(ring_chunk.data(), 1, 0, 7, 4096 - 4);
    CHECK(verify(store, ring_chunk.data(), ring_chunk.size()) != nullptr);
  }
}

static void from_file(const char *path, long min_messages) {
  FILE *f = std::fopen(path, "rb");
  if (!f) {
    std::fprintf(stderr, "cannot open %s\n", path);
    failures++;
    return;
  }
  std::vector<uint8_t> data;
  uint8_t tmp[65536];
  size_t got;
  while ((got = std::fread(tmp, 1, sizeof tmp, f)) > 0) data.insert(data.end(), tmp, tmp + got);
  std::fclose(f);
  std::vector<uint64_t> store;
  size_t off = 0;
  long count = 0, events = 0;
  while (off < data.size()) {
    size_t len = pt_fb_message_size(data.data() + off, data.size() - off);
    if (len < 8 || len > data.size() - off) {
      std::fprintf(stderr, "%s: bad message size at offset %zu\n", path, off);
      failures++;
      return;
    }
    auto m = verify(store, data.data() + off, len);
    if (!m) {
      std::fprintf(stderr, "%s: message %ld at offset %zu rejected\n", path, count, off);
      return;
    }
    if (m->body_type() == fb::MessageBody_EventChunk && m->body_as_EventChunk()->events())
      events += m->body_as_EventChunk()->events()->size();
    count++;
    off += len;
  }
  std::printf("%s: %ld messages (%ld events) pass the stock verifier\n", path, count, events);
  CHECK(count >= min_messages);
}

int main(int argc, char **argv) {
  if (argc == 1) {
    builtin();
  } else {
    long min_messages = 1;
    for (int i = 1; i < argc; i++) {
      if (!std::strcmp(argv[i], "--min") && i + 1 < argc) {
        min_messages = std::atol(argv[++i]);
        continue;
      }
      from_file(argv[i], min_messages);
    }
  }
  if (failures) {
    std::fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("stock verifier: all checks passed\n");
  return 0;
}
