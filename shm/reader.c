/*
 * libpytrace reader: drain a live segment into FlatBuffers messages.
 *
 * Design summary
 *
 *   One poll = one consistent cut of the segment:
 *     1. acquire-load the producer state (EXITED publishes everything), and
 *        decide whether the producer died;
 *     2. snapshot every ring: slot state, generation, head_chunk and the head
 *        chunk's length (all acquire loads);
 *     3. acquire-load symlog_published and hand out every new Symbol. A
 *        producer publishes a symbol before any record that uses its id, and
 *        the records seen in step 2 were published before this load, so every
 *        id used by the records of the snapshot is named by now;
 *     4. per ring: ThreadStart for a generation this reader has not announced,
 *        LostCount when the drop counter grew, then EventChunk messages for
 *        the records after the consumer cursor, up to the snapshot; ThreadEnd
 *        and RETIRED -> FREE once a retired ring is drained;
 *     5. when the producer exited (or died) and everything is drained:
 *        ThreadEnd for threads still active, ProducerStatus, finished.
 *
 *   Every record handed out is first copied into the reader's own buffer and
 *   validated there (kind in range, symbol id already named), then framed with
 *   pt_fb_chunk_header: a producer that scribbles on the ring cannot change a
 *   record between its check and its use, and the framing is always ours.
 *
 *   Consumer cursor (slot->consumer_index): the absolute position in the
 *   thread's record stream (chunk_seq * events_per_chunk + index in chunk) of
 *   the next record to hand out. Absolute, so that the two stores made when a
 *   chunk is finished (consumer_index, then released_chunks) leave a state a
 *   reader taking over after a crash between them interprets correctly.
 *   A record is marked consumed right after the callback that received it
 *   returns; a reader killed inside a callback may have the next reader hand
 *   out that message again (same first_event, so it can be recognised).
 *
 *   Decisions:
 *   - Symbol id 0 means "unknown" (the log was full) and is always accepted;
 *     other ids must be <= the highest id read from the log. Lost records
 *     carry a count in id, Frame records a symbol id.
 *   - Each attach starts a self-contained stream: ProcessInfo, every Symbol
 *     from the start of the log, ThreadStart for every live thread (even if a
 *     previous reader announced it), then records from where the previous
 *     reader stopped (never twice, never skipped). For a live thread whose
 *     beginning a previous reader read, the producer is asked for the stack
 *     (slot->stack_request): the frames opened before our position get their
 *     roots from the Frame records it writes soon after.
 *     slot->reported_generation records the generation last announced; its
 *     bit 32 marks "ended and freed by the reader", which tells an
 *     in-progress claim (state ACTIVE, generation not yet bumped) from a live
 *     thread.
 *
 *   Memory orders are named at every atomic access below.
 */
#include "reader.h"
#include "shm_internal.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "schema/pt_fb.h"
#include "symlog.h"

/* symlog.c, hidden: the walk with the capacity validated at attach */
int pt_symlog_read_bounded(const pt_segment_t *seg, uint64_t cap, uint64_t *cursor, uint64_t published,
                           pt_symlog_visit_fn fn, void *ctx, char *err, size_t errlen);

#define GEN_ENDED (UINT64_C(1) << 32)
#define MSG_SMALL_BYTES 4096u

typedef struct rd_ring {
    uint32_t announced_gen; /* generation this reader announced; 0 = none */
    int ended;              /* ThreadEnd handed out for announced_gen */
    int corrupt;            /* stopped: bad content */
    uint64_t thread;        /* thread number of announced_gen */
    uint64_t dropped_seen;  /* last events_dropped reported by LostCount */
    /* snapshot of this poll */
    int snap_valid;
    uint32_t snap_state;
    uint32_t snap_gen;
    uint64_t snap_head;
    uint32_t snap_len;
    int drained;            /* reached the snapshot this poll */
    /* the reader's own cursor (absolute chunk sequence and record position) for
     * generation cur_gen; the slot's shared cursors follow it at once, or, with
     * PT_READER_DEFER_RELEASE, only in pt_reader_release */
    uint32_t cur_gen;
    uint64_t cur_seq, cur_pos;
    int free_pending;       /* retired and drained: set FREE at the next release */
} rd_ring_t;

/* A dead producer is noticed within this long of its last event. */
#define PT_READER_ALIVE_CHECK_NS 20000000ull

struct pt_reader {
    pt_segment_t *seg;
    pt_seg_header_t *h;
    unsigned flags;
    /* geometry, copied once after attach validated it */
    uint32_t ring_count;
    uint32_t chunk_bytes;
    uint32_t chunks_per_ring;
    uint32_t events_per_chunk;
    uint64_t symlog_bytes;
    uint64_t mapped_bytes;
    int shrunk;             /* the file shrank under the mapping: reading stopped */
    rd_ring_t *rings;
    uint8_t *chunk_msg;     /* 72 + 16 * events_per_chunk, 64-aligned */
    uint8_t small_msg[MSG_SMALL_BYTES] __attribute__((aligned(8)));
    /* symbols */
    uint64_t sym_cursor;
    uint32_t max_symbol_id;
    int symlog_bad;
    /* producer */
    int sent_info;
    uint32_t sent_role_seq;   /* role_seq of the role the last ProcessInfo carried */
    uint32_t reported_state;  /* last ProducerStatus state handed out; UINT32_MAX = none */
    int dead;
    int finished;
    long last_poll_events;
    uint64_t alive_checked_ns; /* when the producer's pid was last looked at */
    uint32_t next_ring;       /* ring the next poll starts with */
    pt_reader_stats_t st;
    char err[320];
};

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void rd_error(pt_reader_t *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
}


/* ---- fault guard -------------------------------------------------------------
 *
 * The segment is a file another process can shrink (ftruncate) at any time;
 * a load from a page past its new end raises SIGBUS. Every access of a
 * reader to its mapping happens inside pt_reader_poll/_stats/_detach, so
 * those arm a per-thread guard over the mapping's address range: a SIGBUS
 * whose address lies in that range jumps back to the guarded call, which
 * reports the shrink in one line and stops reading that segment; everything
 * handed out before stays handed out. Any other SIGBUS goes to the handler
 * that was installed before ours (or the default action), so a host program
 * (pytrace.Reader inside someone's Python, with faulthandler) sees no change.
 * The guard is disarmed while a message callback runs: callbacks get our own
 * copies, never pointers into the mapping, and a fault in them is not ours.
 * Cost: one sigsetjmp (which saves the signal mask: a system call) per poll.
 */
typedef struct rd_guard {
    sigjmp_buf env;
    const uint8_t *lo, *hi;
    volatile uintptr_t fault_addr;
} rd_guard_t;

static _Thread_local rd_guard_t *rd_guard_current;
static struct sigaction rd_prev_sigbus;
static pthread_once_t rd_guard_once = PTHREAD_ONCE_INIT;

static void rd_on_sigbus(int sig, siginfo_t *info, void *uctx)
{
    rd_guard_t *g = rd_guard_current;
    const uint8_t *addr = info ? (const uint8_t *)info->si_addr : NULL;
    if (g && addr >= g->lo && addr < g->hi) {
        g->fault_addr = (uintptr_t)addr;
        rd_guard_current = NULL;
        siglongjmp(g->env, 1);
    }
    /* not a fault of a guarded read: whoever handled SIGBUS before us does */
    if (rd_prev_sigbus.sa_flags & SA_SIGINFO) {
        rd_prev_sigbus.sa_sigaction(sig, info, uctx);
        return;
    }
    if (rd_prev_sigbus.sa_handler != SIG_DFL && rd_prev_sigbus.sa_handler != SIG_IGN) {
        rd_prev_sigbus.sa_handler(sig);
        return;
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGBUS, &dfl, NULL);
    raise(SIGBUS); /* pending until we return; a faulting access also faults again */
}

static void rd_guard_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = rd_on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &rd_prev_sigbus);
}

static void rd_guard_arm(pt_reader_t *r, rd_guard_t *g)
{
    pthread_once(&rd_guard_once, rd_guard_install);
    g->lo = (const uint8_t *)r->h;
    g->hi = g->lo + r->mapped_bytes;
    g->fault_addr = 0;
    rd_guard_current = g;
}

static void rd_guard_disarm(void)
{
    rd_guard_current = NULL;
}

/* After a guarded access faulted: stop reading this segment, say so once. */
static long rd_shrunk(pt_reader_t *r, const rd_guard_t *g)
{
    if (!r->shrunk) {
        r->shrunk = 1;
        rd_error(r,
                 "segment %s shrank under the reader (a read at byte %llu of its %llu failed): the file was "
                 "truncated by another process; reading stopped, everything read before it is kept",
                 pt_segment_name(r->seg), (unsigned long long)(g->fault_addr - (uintptr_t)g->lo),
                 (unsigned long long)r->mapped_bytes);
    }
    return -EFAULT;
}


int pt_reader_attach(const char *target, unsigned flags, pt_reader_t **out, char *err, size_t errlen)
{
    if (!target || !out) {
        pt_set_err(err, errlen, "pt_reader_attach: no segment name or pid given");
        return -EINVAL;
    }
    *out = NULL;
    pt_segment_t *seg = NULL;
    int rc = pt_segment_attach(target, flags & PT_ATTACH_ANY_USER, &seg, err, errlen);
    if (rc < 0)
        return rc;
    pt_reader_t *r = calloc(1, sizeof *r);
    if (!r) {
        rc = -ENOMEM;
        goto err_seg;
    }
    r->seg = seg;
    r->h = pt_segment_header(seg);
    r->flags = flags;
    /* The snapshot pt_segment_attach validated; the live header is never
     * read for geometry (a producer may rewrite it while we attach). */
    pt_segment_geometry_t geo;
    pt_segment_geometry(seg, &geo);
    r->ring_count = geo.ring_count;
    r->chunk_bytes = geo.chunk_bytes;
    r->chunks_per_ring = geo.chunks_per_ring;
    r->symlog_bytes = geo.symlog_bytes;
    r->mapped_bytes = geo.mapped_bytes;
    if (r->ring_count > PT_MAX_RINGS ||
        r->chunk_bytes < PT_MIN_CHUNK_BYTES || r->chunk_bytes > PT_MAX_CHUNK_BYTES ||
        r->chunks_per_ring < PT_MIN_CHUNKS_PER_RING || r->chunks_per_ring > PT_MAX_CHUNKS_PER_RING ||
        (r->chunks_per_ring & (r->chunks_per_ring - 1)) != 0) {
        if (err && errlen && !err[0])
            pt_set_err(err, errlen, "segment %s: geometry changed after validation (corrupt segment)",
                    pt_segment_name(seg));
        rc = -EPROTO;
        goto err_reader;
    }
    r->events_per_chunk = (uint32_t)PT_CHUNK_EVENTS(r->chunk_bytes);
    r->reported_state = UINT32_MAX;
    r->st.pid = r->h->pid;
    r->rings = calloc(r->ring_count ? r->ring_count : 1, sizeof *r->rings);
    if (!r->rings || posix_memalign((void **)&r->chunk_msg, 64,
                                    PT_CHUNK_HEADER_BYTES + (size_t)r->events_per_chunk * sizeof(pt_event_t))) {
        r->chunk_msg = NULL;
        rc = -ENOMEM;
        goto err_reader;
    }
    if (!(flags & PT_READER_NO_LOCK)) {
        rc = pt_segment_lock_consumer(seg, err, errlen);
        if (rc < 0)
            goto err_reader;
    }
    *out = r;
    return 0;

err_reader:
    free(r->rings);
    free(r->chunk_msg);
    free(r);
err_seg:
    if (rc == -ENOMEM)
        pt_set_err(err, errlen, "out of memory attaching to %s", target);
    pt_segment_close(seg, 0);
    return rc;
}

/* ---- message helpers ------------------------------------------------------ */

typedef struct rd_sink {
    pt_reader_msg_fn fn;
    void *ctx;
    int stop; /* non-zero return of fn */
} rd_sink_t;

static int emit(pt_reader_t *r, rd_sink_t *sink, uint32_t type, const uint8_t *msg, size_t len)
{
    r->st.messages++;
    if (sink->fn) {
        rd_guard_t *guard = rd_guard_current; /* a callback's faults are not ours */
        rd_guard_current = NULL;
        int rc = sink->fn(sink->ctx, type, msg, len);
        rd_guard_current = guard;
        if (rc != 0)
            sink->stop = rc;
    }
    return sink->stop;
}

static pt_fb_str_t bounded_str(const char *s, size_t cap)
{
    pt_fb_str_t out = {s, (uint32_t)strnlen(s, cap)};
    return out;
}

static int emit_process_info(pt_reader_t *r, rd_sink_t *sink)
{
    const pt_seg_header_t *h = r->h;
    /* The header strings may lack their NUL (hostile): copy them bounded. */
    char cmdline[PT_CMDLINE_BYTES + 1], pyver[PT_PYVERSION_BYTES + 1];
    memcpy(cmdline, h->cmdline, PT_CMDLINE_BYTES);
    cmdline[PT_CMDLINE_BYTES] = 0;
    memcpy(pyver, h->python_version, PT_PYVERSION_BYTES);
    pyver[PT_PYVERSION_BYTES] = 0;
    const char *name = pt_segment_name(r->seg);
    char role[PT_ROLE_BYTES + 1];
    uint32_t role_seq = pt_segment_read_role(h, role, sizeof role);
    pt_fb_process_info_t pi = {
        .pid = h->pid,
        .ppid = h->ppid,
        .command_line = bounded_str(cmdline, PT_CMDLINE_BYTES),
        .python_version = bounded_str(pyver, PT_PYVERSION_BYTES),
        .segment = bounded_str(name, 96),
        .abi_major = h->abi_major,
        .abi_minor = h->abi_minor,
        .clock = (uint8_t)h->clock_kind,
        .ticks_per_second = h->ticks_per_second,
        .base_ticks = h->base_ticks,
        .base_monotonic_ns = h->base_monotonic_ns,
        .base_realtime_ns = h->base_realtime_ns,
        .ring_count = r->ring_count,
        .ring_capacity_events = (uint64_t)r->chunks_per_ring * r->events_per_chunk,
        .drop_policy = (uint8_t)h->drop_policy,
    };
    if (role_seq != UINT32_MAX && role_seq != 0 && role[0])
        pi.role = bounded_str(role, PT_ROLE_BYTES);
    if (role_seq != UINT32_MAX)
        r->sent_role_seq = role_seq; /* being written: sent again once it is stable */
    size_t n = pt_fb_build_process_info(r->small_msg, sizeof r->small_msg, &pi);
    r->sent_info = 1;
    return n ? emit(r, sink, PT_MSG_PROCESS_INFO, r->small_msg, n) : 0;
}

static void producer_totals(const pt_reader_t *r, uint64_t *written, uint64_t *dropped)
{
    /* acquire: pairs with a claimer's release add after it reset the slot
     * (the counts of a slot's earlier owners): read before the slots, they
     * are never counted twice */
    uint64_t w = atomic_load_explicit(&r->h->events_written_reused, memory_order_acquire);
    uint64_t d = atomic_load_explicit(&r->h->events_dropped_reused, memory_order_acquire);
    for (uint32_t i = 0; i < r->ring_count; i++) {
        pt_ring_slot_t *slot = pt_segment_slot(r->seg, i);
        /* relaxed: counters only, no memory position is derived from them */
        w += atomic_load_explicit(&slot->events_written, memory_order_relaxed);
        d += atomic_load_explicit(&slot->events_dropped, memory_order_relaxed);
    }
    *written = w;
    *dropped = d;
}

static int emit_status(pt_reader_t *r, rd_sink_t *sink, uint32_t state)
{
    pt_fb_producer_status_t ps = {0};
    ps.state = (uint8_t)state;
    /* relaxed: liveness hint and statistics */
    ps.heartbeat_ns = atomic_load_explicit(&r->h->heartbeat_ns, memory_order_relaxed);
    producer_totals(r, &ps.events_written, &ps.events_dropped);
    ps.hook_errors = atomic_load_explicit(&r->h->hook_errors, memory_order_relaxed);
    ps.symbols_dropped = atomic_load_explicit(&r->h->symbols_dropped, memory_order_relaxed);
    ps.threads_untraced = atomic_load_explicit(&r->h->threads_untraced, memory_order_relaxed);
    ps.tracing_displaced = atomic_load_explicit(&r->h->tracing_displaced, memory_order_relaxed);
    ps.events_untraced = atomic_load_explicit(&r->h->events_untraced, memory_order_relaxed);
    if (state == PT_STATE_EXITED) {
        /* relaxed: written before the producer's release store of EXITED, which
         * the caller's acquire load of state saw */
        ps.end_signal = atomic_load_explicit(&r->h->end_signal, memory_order_relaxed);
        ps.end_signal_pid = ps.end_signal ? atomic_load_explicit(&r->h->end_signal_pid, memory_order_relaxed) : 0;
    }
    r->reported_state = state;
    size_t n = pt_fb_build_producer_status(r->small_msg, sizeof r->small_msg, &ps);
    return n ? emit(r, sink, PT_MSG_PRODUCER_STATUS, r->small_msg, n) : 0;
}

static int emit_thread_end(pt_reader_t *r, rd_sink_t *sink, rd_ring_t *rr, pt_ring_slot_t *slot)
{
    pt_fb_thread_end_t te = {
        .thread = rr->thread,
        .ticks = slot->end_ticks,
        /* relaxed: counters (final once the slot is RETIRED: published by the
         * release store of RETIRED that our acquire of state paired with) */
        .events_written = atomic_load_explicit(&slot->events_written, memory_order_relaxed),
        .events_dropped = atomic_load_explicit(&slot->events_dropped, memory_order_relaxed),
    };
    rr->ended = 1;
    if (r->st.threads_active)
        r->st.threads_active--;
    size_t n = pt_fb_build_thread_end(r->small_msg, sizeof r->small_msg, &te);
    return n ? emit(r, sink, PT_MSG_THREAD_END, r->small_msg, n) : 0;
}

/* ---- symbols ---------------------------------------------------------------- */

typedef struct sym_ctx {
    pt_reader_t *r;
    rd_sink_t *sink;
} sym_ctx_t;

static int on_symbol(void *ctx, const uint8_t *msg, size_t len)
{
    sym_ctx_t *sc = ctx;
    pt_reader_t *r = sc->r;
    pt_fb_msg_t m;
    /* already verified by the walk; parse again only to read the id */
    if (pt_fb_parse(msg, len, &m, NULL, 0) != 0 || m.type != PT_MSG_SYMBOL)
        return -EBADMSG;
    if (m.u.symbol.id != r->max_symbol_id + 1) {
        rd_error(r, "symbol log: record at offset %llu has id %u, expected %u (corrupt segment)",
                 (unsigned long long)r->sym_cursor, m.u.symbol.id, r->max_symbol_id + 1);
        return -EBADMSG;
    }
    r->max_symbol_id = m.u.symbol.id;
    r->st.symbols_read++;
    return emit(r, sc->sink, PT_MSG_SYMBOL, msg, len) ? 1 : 0;
}

/* Returns 0, or -EBADMSG the first time the log is found corrupt. */
static int read_symbols(pt_reader_t *r, rd_sink_t *sink)
{
    if (r->symlog_bad)
        return 0;
    /* acquire: pairs with the appender's release store of symlog_published
     * (pt_symlog_append): every record below it is complete */
    uint64_t published = atomic_load_explicit(&r->h->symlog_published, memory_order_acquire);
    sym_ctx_t sc = {r, sink};
    char why[256];
    why[0] = 0;
    int rc = pt_symlog_read_bounded(r->seg, r->symlog_bytes, &r->sym_cursor, published, on_symbol, &sc, why,
                                    sizeof why);
    if (rc == 1)
        return 0; /* the callback asked to stop; sink->stop carries its value */
    if (rc < 0) {
        r->symlog_bad = 1;
        if (why[0])
            rd_error(r, "%s", why);
        return -EBADMSG;
    }
    return 0;
}

/* ---- rings ------------------------------------------------------------------- */

static uint8_t *chunk_ptr(const pt_reader_t *r, uint32_t ring, uint64_t seq)
{
    return pt_segment_ring_base(r->seg, ring) + (size_t)(seq & (r->chunks_per_ring - 1)) * r->chunk_bytes;
}

static void ring_corrupt(pt_reader_t *r, rd_ring_t *rr, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void ring_corrupt(pt_reader_t *r, rd_ring_t *rr, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    if (!rr->corrupt) {
        rr->corrupt = 1;
        r->st.corrupt_rings++;
    }
    rr->snap_valid = 0;
}

static void snapshot_ring(pt_reader_t *r, uint32_t i)
{
    rd_ring_t *rr = &r->rings[i];
    pt_ring_slot_t *slot = pt_segment_slot(r->seg, i);
    rr->snap_valid = 0;
    rr->drained = 1;
    if (rr->corrupt)
        return;
    /* acquire: pairs with the producer's release store of RETIRED (its last
     * records, counters and end_ticks are published) and with the claimer's
     * CAS to ACTIVE */
    uint32_t state = atomic_load_explicit(&slot->state, memory_order_acquire);
    if (state == PT_RING_FREE)
        return;
    if (state != PT_RING_ACTIVE && state != PT_RING_RETIRED) {
        ring_corrupt(r, rr, "ring %u: slot state %u is not a ring state (corrupt segment)", i, state);
        return;
    }
    /* acquire: pairs with the claimer's release store of generation, which
     * publishes the slot identity, the cursor reset and chunk 0 */
    uint32_t gen = atomic_load_explicit(&slot->generation, memory_order_acquire);
    /* relaxed: written only by readers; a previous reader's stores are
     * visible through the consumer lock (its release, our acquire CAS) */
    uint64_t reported = atomic_load_explicit(&slot->reported_generation, memory_order_relaxed);
    if (gen == 0 || ((reported & GEN_ENDED) && (uint32_t)reported == gen))
        return; /* a claim is in progress: its generation is not published yet */
    if (gen != rr->announced_gen) {
        /* a new thread in this slot: forget the previous owner */
        rr->ended = 0;
        rr->dropped_seen = 0;
    } else if (rr->ended && state == PT_RING_ACTIVE) {
        return; /* ended at producer exit; nothing more comes */
    }
    /* acquire: pairs with the producer's release store of head_chunk (the
     * chunk's header is written; every earlier chunk's length is final) */
    uint64_t head = atomic_load_explicit(&slot->head_chunk, memory_order_acquire);
    /* relaxed: we are the only writer (see `reported` above for takeovers) */
    uint64_t released = atomic_load_explicit(&slot->released_chunks, memory_order_relaxed);
    if (rr->cur_gen == gen && gen != 0 && rr->cur_seq >= released)
        released = rr->cur_seq; /* read, and not yet released (deferred) */
    if (head < released || head - released >= r->chunks_per_ring) {
        ring_corrupt(r, rr, "ring %u: head_chunk %llu and released_chunks %llu are inconsistent (corrupt segment)",
                     i, (unsigned long long)head, (unsigned long long)released);
        return;
    }
    _Atomic uint32_t *len_p = (_Atomic uint32_t *)(void *)(chunk_ptr(r, i, head) + PT_CHUNK_OFF_LENGTH);
    /* acquire: pairs with the producer's release store of the length in
     * pt_ring_store_ (ring_inline.h): records below it are complete */
    uint32_t len = atomic_load_explicit(len_p, memory_order_acquire);
    rr->snap_valid = 1;
    rr->snap_state = state;
    rr->snap_gen = gen;
    rr->snap_head = head;
    rr->snap_len = len;
    rr->drained = 0;
}

/* Index of the first invalid record among n (n if all are valid). */
static uint32_t first_bad_event(const uint8_t *ev, uint32_t n, uint32_t max_id)
{
    unsigned bad = 0;
    for (uint32_t k = 0; k < n; k++) {
        const uint8_t *e = ev + (size_t)k * sizeof(pt_event_t);
        uint8_t kind = e[14];
        uint32_t id = (uint32_t)e[8] | ((uint32_t)e[9] << 8) | ((uint32_t)e[10] << 16) | ((uint32_t)e[11] << 24);
        bad |= (unsigned)((uint8_t)(kind - 1) >= PT_EV_KIND_COUNT - 1) | (unsigned)(!PT_EV_ID_IS_VALUE(kind) && id > max_id);
    }
    if (!bad)
        return n;
    for (uint32_t k = 0; k < n; k++) {
        const uint8_t *e = ev + (size_t)k * sizeof(pt_event_t);
        uint8_t kind = e[14];
        uint32_t id = (uint32_t)e[8] | ((uint32_t)e[9] << 8) | ((uint32_t)e[10] << 16) | ((uint32_t)e[11] << 24);
        if ((uint8_t)(kind - 1) >= PT_EV_KIND_COUNT - 1 || (!PT_EV_ID_IS_VALUE(kind) && id > max_id))
            return k;
    }
    return n;
}

/* Drain ring i up to its snapshot. *budget: events left (UINT64_MAX = no
 * limit). Returns events handed out. */
static void free_slot(pt_reader_t *r, rd_ring_t *rr, pt_ring_slot_t *slot, uint32_t i);

static uint64_t drain_ring(pt_reader_t *r, rd_sink_t *sink, uint32_t i, uint64_t *budget)
{
    rd_ring_t *rr = &r->rings[i];
    pt_ring_slot_t *slot = pt_segment_slot(r->seg, i);
    uint64_t handed = 0;
    if (!rr->snap_valid)
        return 0;
    const uint32_t epc = r->events_per_chunk;

    if (rr->snap_gen != rr->announced_gen) {
        rr->announced_gen = rr->snap_gen;
        rr->thread = slot->thread;
        rr->ended = 0;
        r->st.threads_seen++;
        r->st.threads_active++;
        char name[PT_THREAD_NAME_BYTES + 1];
        memcpy(name, slot->name, PT_THREAD_NAME_BYTES);
        name[PT_THREAD_NAME_BYTES] = 0;
        pt_fb_thread_start_t ts = {
            .thread = rr->thread,
            .ring = i,
            .os_tid = slot->os_tid,
            .name = bounded_str(name, PT_THREAD_NAME_BYTES),
            .ticks = slot->start_ticks,
        };
        /* relaxed: reader-only field, published to a later reader by the
         * consumer lock's release/acquire */
        atomic_store_explicit(&slot->reported_generation, rr->snap_gen, memory_order_relaxed);
        /* A reader before us read this thread's stream up to here: the frames
         * it saw open are unknown to us. Ask the producer for the stack (Frame
         * records soon after our position). relaxed: carries no data. */
        if (rr->snap_state == PT_RING_ACTIVE && atomic_load_explicit(&slot->consumer_index, memory_order_relaxed) > 0)
            atomic_store_explicit(&slot->stack_request, 1, memory_order_relaxed);
        size_t n = pt_fb_build_thread_start(r->small_msg, sizeof r->small_msg, &ts);
        if (n && emit(r, sink, PT_MSG_THREAD_START, r->small_msg, n))
            return 0;
    }

    /* relaxed: a counter; the Lost records in the ring carry the exact gaps */
    uint64_t dropped = atomic_load_explicit(&slot->events_dropped, memory_order_relaxed);
    if (dropped > rr->dropped_seen) {
        rr->dropped_seen = dropped;
        atomic_store_explicit(&slot->reported_dropped, dropped, memory_order_relaxed); /* reader-only */
        pt_fb_lost_count_t lc = {rr->thread, dropped};
        size_t n = pt_fb_build_lost_count(r->small_msg, sizeof r->small_msg, &lc);
        if (n && emit(r, sink, PT_MSG_LOST_COUNT, r->small_msg, n))
            return 0;
    }

    if (rr->cur_gen != rr->snap_gen) {
        /* relaxed: reader-only cursors (see snapshot_ring); where the previous
         * reader (or the claim's reset) left them */
        rr->cur_seq = atomic_load_explicit(&slot->released_chunks, memory_order_relaxed);
        rr->cur_pos = atomic_load_explicit(&slot->consumer_index, memory_order_relaxed);
        rr->cur_gen = rr->snap_gen;
        rr->free_pending = 0;
    }
    const int defer = (r->flags & PT_READER_DEFER_RELEASE) != 0;
    uint64_t seq = rr->cur_seq;
    uint64_t pos = rr->cur_pos;
    uint64_t idx = pos > seq * epc ? pos - seq * epc : 0;
    if (idx > epc) {
        ring_corrupt(r, rr, "ring %u (thread %llu): consumer_index %llu is past chunk %llu (corrupt segment)", i,
                     (unsigned long long)rr->thread, (unsigned long long)pos, (unsigned long long)seq);
        return 0;
    }

    uint8_t expect[PT_CHUNK_HEADER_BYTES];
    while (seq <= rr->snap_head) {
        const uint8_t *chunk = chunk_ptr(r, i, seq);
        const int complete = seq < rr->snap_head;
        uint32_t len = rr->snap_len;
        if (complete) {
            /* acquire: the length is final (head moved past this chunk, which
             * our acquire of head_chunk saw); pairs with its release store */
            len = atomic_load_explicit((_Atomic uint32_t *)(void *)(chunk + PT_CHUNK_OFF_LENGTH),
                                       memory_order_acquire);
        }
        if (len > epc) {
            ring_corrupt(r, rr, "ring %u (thread %llu) chunk %llu: length %u exceeds %u records per chunk (corrupt segment)",
                         i, (unsigned long long)rr->thread, (unsigned long long)seq, len, epc);
            return handed;
        }
        /* the header must be exactly what the producer writes for this chunk */
        pt_fb_chunk_header(expect, rr->thread, seq * epc, len, r->chunk_bytes - 4);
        if (memcmp(expect, chunk, PT_CHUNK_OFF_LENGTH) != 0) {
            uint64_t fe;
            memcpy(&fe, chunk + PT_CHUNK_OFF_FIRST_EVENT, sizeof fe);
            ring_corrupt(r, rr, "ring %u (thread %llu) chunk %llu: bad chunk header (first_event %llu, expected %llu) (corrupt segment)",
                         i, (unsigned long long)rr->thread, (unsigned long long)seq, (unsigned long long)fe,
                         (unsigned long long)(seq * epc));
            return handed;
        }
        if (idx > len) {
            ring_corrupt(r, rr, "ring %u (thread %llu) chunk %llu: consumer index %llu is past the length %u (corrupt segment)",
                         i, (unsigned long long)rr->thread, (unsigned long long)seq, (unsigned long long)idx, len);
            return handed;
        }
        if (idx < len) {
            uint64_t n = len - idx;
            if (n > *budget)
                n = *budget;
            if (n == 0)
                return handed;
            uint8_t *dst = r->chunk_msg + PT_CHUNK_OFF_EVENTS;
            memcpy(dst, chunk + PT_CHUNK_OFF_EVENTS + idx * sizeof(pt_event_t), (size_t)n * sizeof(pt_event_t));
            uint32_t good = first_bad_event(dst, (uint32_t)n, r->max_symbol_id);
            if (good > 0) {
                pt_fb_chunk_header(r->chunk_msg, rr->thread, seq * epc + idx, good,
                                   (uint32_t)(PT_CHUNK_HEADER_BYTES + (size_t)good * sizeof(pt_event_t) - 4));
                r->st.events_read += good;
                r->st.chunks_read++;
                handed += good;
                *budget -= good;
                idx += good;
                int stop = emit(r, sink, PT_MSG_EVENT_CHUNK, r->chunk_msg,
                                PT_CHUNK_HEADER_BYTES + (size_t)good * sizeof(pt_event_t));
                /* consumed once the callback returned (a reader killed inside
                 * it lets the next one hand the message out again, with the
                 * same first_event); deferred: once the caller released it */
                rr->cur_pos = seq * epc + idx;
                if (!defer)
                    atomic_store_explicit(&slot->consumer_index, rr->cur_pos, memory_order_relaxed); /* reader-only */
                if (stop)
                    return handed;
            }
            if (good < n) {
                const uint8_t *e = dst + (size_t)good * sizeof(pt_event_t);
                uint32_t id = (uint32_t)e[8] | ((uint32_t)e[9] << 8) | ((uint32_t)e[10] << 16) | ((uint32_t)e[11] << 24);
                ring_corrupt(r, rr, "ring %u (thread %llu) chunk %llu index %llu: %s %u (kind %u; highest symbol id %u) (corrupt segment)",
                             i, (unsigned long long)rr->thread, (unsigned long long)seq, (unsigned long long)idx,
                             ((uint8_t)(e[14] - 1) >= PT_EV_KIND_COUNT - 1) ? "invalid record kind, id" : "symbol id out of range:",
                             id, e[14], r->max_symbol_id);
                return handed;
            }
            if (idx < len)
                return handed; /* budget exhausted */
        }
        if (!complete)
            break;
        /* chunk fully consumed: cursor first, then release the chunk, so a
         * reader taking over after a crash between the two stores skips
         * nothing and repeats nothing */
        seq++;
        idx = 0;
        rr->cur_seq = seq;
        rr->cur_pos = seq * epc;
        if (!defer) {
            atomic_store_explicit(&slot->consumer_index, seq * epc, memory_order_relaxed); /* reader-only */
            /* release: we are done reading the chunk; pairs with the producer's
             * acquire load of released_chunks before it overwrites it */
            atomic_store_explicit(&slot->released_chunks, seq, memory_order_release);
        }
    }

    rr->drained = 1;
    if (rr->snap_state == PT_RING_RETIRED) {
        /* a stop request from the callback is honoured after the slot is
         * freed: the ThreadEnd was delivered */
        if (!rr->ended)
            (void)emit_thread_end(r, sink, rr, slot);
        if (defer)
            rr->free_pending = 1; /* freed by pt_reader_release, after the caller kept it all */
        else
            free_slot(r, rr, slot, i);
    }
    return handed;
}

/* A retired ring read to its end: give the slot back for a new thread. */
static void free_slot(pt_reader_t *r, rd_ring_t *rr, pt_ring_slot_t *slot, uint32_t i)
{
    /* relaxed: published by the release CAS below */
    atomic_store_explicit(&slot->reported_generation, (uint64_t)rr->snap_gen | GEN_ENDED, memory_order_relaxed);
    uint32_t expected = PT_RING_RETIRED;
    /* release: our last reads of the slot and its chunks happen before a
     * new claim; pairs with the claimer's acq_rel CAS FREE->ACTIVE */
    if (!atomic_compare_exchange_strong_explicit(&slot->state, &expected, PT_RING_FREE, memory_order_release,
                                                 memory_order_relaxed))
        ring_corrupt(r, rr, "ring %u: retired slot changed state to %u while draining (corrupt segment)", i,
                     expected);
    rr->free_pending = 0;
}

static void release_all(pt_reader_t *r)
{
    for (uint32_t i = 0; i < r->ring_count; i++) {
        rd_ring_t *rr = &r->rings[i];
        if (rr->cur_gen == 0 || rr->corrupt)
            continue;
        pt_ring_slot_t *slot = pt_segment_slot(r->seg, i);
        /* acquire: pairs with the claimer's release store of generation; a slot
         * that is not the one our cursor is for is not ours to move */
        if (atomic_load_explicit(&slot->generation, memory_order_acquire) != rr->cur_gen)
            continue;
        /* relaxed: reader-only; cursor first, then the chunks (as in drain_ring) */
        atomic_store_explicit(&slot->consumer_index, rr->cur_pos, memory_order_relaxed);
        /* release: our reads of the chunks before cur_seq are done; pairs with
         * the producer's acquire load of released_chunks */
        atomic_store_explicit(&slot->released_chunks, rr->cur_seq, memory_order_release);
        if (rr->free_pending) {
            free_slot(r, rr, slot, i);
            rr->cur_gen = 0; /* the slot is a new thread's from here on */
        }
    }
}

int pt_reader_release(pt_reader_t *r)
{
    if (!r)
        return -EINVAL;
    if (r->shrunk)
        return -EFAULT;
    if (!(r->flags & PT_READER_DEFER_RELEASE))
        return 0;
    rd_guard_t guard;
    if (sigsetjmp(guard.env, 1))
        return (int)rd_shrunk(r, &guard);
    rd_guard_arm(r, &guard);
    release_all(r);
    rd_guard_disarm();
    return 0;
}

/* ---- poll ------------------------------------------------------------------ */

static long poll_once(pt_reader_t *r, pt_reader_msg_fn fn, void *ctx, uint64_t max_events);

long pt_reader_poll(pt_reader_t *r, pt_reader_msg_fn fn, void *ctx, uint64_t max_events)
{
    if (!r)
        return -EINVAL;
    if (r->shrunk)
        return -EFAULT;
    rd_guard_t guard;
    if (sigsetjmp(guard.env, 1))
        return rd_shrunk(r, &guard);
    rd_guard_arm(r, &guard);
    long rc = poll_once(r, fn, ctx, max_events);
    rd_guard_disarm();
    return rc;
}

static long poll_once(pt_reader_t *r, pt_reader_msg_fn fn, void *ctx, uint64_t max_events)
{
    if (r->flags & PT_READER_NO_LOCK) {
        rd_error(r, "attached with PT_READER_NO_LOCK (inspect only): attach without it to read events");
        return -EPERM;
    }
    if (r->finished)
        return r->dead ? -EPIPE : 0;
    rd_sink_t sink = {fn, ctx, 0};
    long handed = 0;
    int bad = 0;
    const uint32_t corrupt_before = r->st.corrupt_rings;
    const uint64_t now_ns = pt_monotonic_ns();
    /* relaxed: a liveness hint for `pytrace ls` and for takeovers */
    atomic_store_explicit(&r->h->consumer_heartbeat_ns, now_ns, memory_order_relaxed);

    if (!r->sent_info && emit_process_info(r, &sink))
        return sink.stop;
    /* The role, learnt after the process started: its ProcessInfo again, with it.
     * relaxed: a hint; pt_segment_read_role reads it with acquire */
    const uint32_t role_seq = atomic_load_explicit(&r->h->role_seq, memory_order_relaxed);
    if (role_seq != r->sent_role_seq && !(role_seq & 1u) && emit_process_info(r, &sink))
        return sink.stop;

    /* acquire: pairs with the producer's release store of state; EXITED means
     * everything it wrote is published */
    uint32_t state = atomic_load_explicit(&r->h->state, memory_order_acquire);
    if (state > PT_STATE_EXITED) {
        rd_error(r, "producer state %u is not a valid state (corrupt segment); treating it as running", state);
        state = PT_STATE_RUNNING;
    }
    /* Checking the pid costs a kill() and a read of /proc: only when the last
     * poll was idle, and at most every PT_READER_ALIVE_CHECK_NS (a hub polls
     * the idle segments of a 50-worker pool thousands of times a second). */
    if (!r->dead && state != PT_STATE_EXITED && r->last_poll_events == 0 &&
        now_ns - r->alive_checked_ns >= PT_READER_ALIVE_CHECK_NS) {
        r->alive_checked_ns = now_ns;
        if (!pt_segment_producer_alive(r->seg)) {
            /* it may have ended between the load of its state above and this look: a
             * producer stores EXITED before it goes, so a second load after it is seen
             * gone tells an exit from a death (a Pool worker's parent's SIGTERM, whose
             * handler marks the segment and re-raises, read as "died" otherwise).
             * acquire: as above */
            state = atomic_load_explicit(&r->h->state, memory_order_acquire);
            if (state > PT_STATE_EXITED)
                state = PT_STATE_RUNNING; /* said above if it was so then; corrupt */
            if (state != PT_STATE_EXITED)
                r->dead = 1;
        }
    }
    const uint32_t eff_state = r->dead ? PT_STATE_DEAD : state;

    for (uint32_t i = 0; i < r->ring_count; i++)
        snapshot_ring(r, i);

    if (read_symbols(r, &sink) < 0)
        bad = 1;
    if (sink.stop)
        return sink.stop;

    if (eff_state != r->reported_state && eff_state != PT_STATE_EXITED && eff_state != PT_STATE_DEAD &&
        emit_status(r, &sink, eff_state))
        return sink.stop;

    uint64_t budget = max_events ? max_events : UINT64_MAX;
    int all_drained = 1;
    /* start one ring further each poll, so a small max_events starves none */
    const uint32_t first = r->ring_count ? r->next_ring++ % r->ring_count : 0;
    for (uint32_t k = 0; k < r->ring_count; k++) {
        const uint32_t i = (first + k) % r->ring_count;
        handed += (long)drain_ring(r, &sink, i, &budget);
        if (sink.stop)
            return sink.stop;
        if (!r->rings[i].drained && !r->rings[i].corrupt)
            all_drained = 0;
    }
    if (r->st.corrupt_rings != corrupt_before)
        bad = 1;
    r->last_poll_events = handed;

    if ((eff_state == PT_STATE_EXITED || eff_state == PT_STATE_DEAD) && all_drained && !bad) {
        /* everything published was handed out: close the threads still open */
        for (uint32_t i = 0; i < r->ring_count; i++) {
            rd_ring_t *rr = &r->rings[i];
            if (rr->announced_gen && !rr->ended && !rr->corrupt &&
                emit_thread_end(r, &sink, rr, pt_segment_slot(r->seg, i)))
                return sink.stop;
        }
        if (emit_status(r, &sink, eff_state))
            return sink.stop;
        r->finished = 1;
        if (r->dead) {
            rd_error(r, "producer pid %llu died without exiting cleanly; everything it published was read",
                     (unsigned long long)r->h->pid);
            return -EPIPE;
        }
    }
    return bad ? -EBADMSG : handed;
}

int pt_reader_finished(const pt_reader_t *r) { return r ? r->finished : 0; }

static void stats_read(pt_reader_t *r, pt_reader_stats_t *out);

void pt_reader_stats(const pt_reader_t *r, pt_reader_stats_t *out)
{
    if (!r || !out)
        return;
    *out = r->st;
    if (r->shrunk)
        return;
    rd_guard_t guard;
    if (sigsetjmp(guard.env, 1)) {
        rd_shrunk((pt_reader_t *)r, &guard);
        return;
    }
    rd_guard_arm((pt_reader_t *)r, &guard);
    stats_read((pt_reader_t *)r, out);
    rd_guard_disarm();
}

static void stats_read(pt_reader_t *r, pt_reader_stats_t *out)
{
    producer_totals(r, &out->producer_events_written, &out->producer_events_dropped);
    /* relaxed: statistics */
    out->hook_errors = atomic_load_explicit(&r->h->hook_errors, memory_order_relaxed);
    out->symbols_dropped = atomic_load_explicit(&r->h->symbols_dropped, memory_order_relaxed);
    out->threads_untraced = atomic_load_explicit(&r->h->threads_untraced, memory_order_relaxed);
    out->tracing_displaced = atomic_load_explicit(&r->h->tracing_displaced, memory_order_relaxed);
    out->events_untraced = atomic_load_explicit(&r->h->events_untraced, memory_order_relaxed);
    if (r->dead) {
        out->producer_state = PT_STATE_DEAD;
    } else {
        /* relaxed: a snapshot for display */
        uint32_t s = atomic_load_explicit(&r->h->state, memory_order_relaxed);
        out->producer_state = s > PT_STATE_EXITED ? PT_STATE_RUNNING : s;
    }
}

const char *pt_reader_error(const pt_reader_t *r) { return r ? r->err : ""; }

pt_segment_t *pt_reader_segment(const pt_reader_t *r) { return r ? r->seg : NULL; }

void pt_reader_detach(pt_reader_t *r, int unlink_if_finished)
{
    if (!r)
        return;
    /* also when shrunk: unlocking clears the handle's lock flag before it
     * writes, so a fault here leaves pt_segment_close nothing to write */
    if (!(r->flags & PT_READER_NO_LOCK)) {
        rd_guard_t guard;
        if (sigsetjmp(guard.env, 1) == 0) {
            rd_guard_arm(r, &guard);
            pt_segment_unlock_consumer(r->seg);
            rd_guard_disarm();
        } else {
            rd_shrunk(r, &guard);
        }
    }
    pt_segment_close(r->seg, unlink_if_finished && r->finished);
    free(r->rings);
    free(r->chunk_msg);
    free(r);
}
