/*
 * pt_export's Perfetto protobuf trace (TrackEvent; ui.perfetto.dev), with its
 * protobuf encoder.
 *
 * Perfetto's own trace format (protos/perfetto/trace/trace.proto): a Trace is
 * `repeated TracePacket packet = 1`, so the file is a run of (tag 0x0a, varint
 * length, TracePacket) with nothing before or after. Written by hand: varints
 * and length-delimited fields, field numbers from perfetto_trace.proto.
 *
 * Nested messages are built innermost first in small buffers (a TrackEvent,
 * then the TracePacket around it) and written with minimal varint lengths. A
 * packet is tens of bytes, so the copies cost nothing next to the walk, and
 * every byte counts for the size target (a padded 4-byte length at two levels
 * would more than double an event's packet).
 *
 * Layout: sequence 1 holds the clock snapshot (CLOCK_MONOTONIC is the trace
 * clock, REALTIME beside it) and the process track. Each thread has its own
 * packet sequence (2, 3, ...) opened, as the Perfetto SDK opens its per-thread
 * writers, by a packet with SEQ_INCREMENTAL_STATE_CLEARED, TracePacketDefaults
 * (timestamp_clock_id 64 and track_event_defaults.track_uuid = the thread's
 * track) and a ClockSnapshot defining clock 64 as an incremental ns clock of
 * that sequence; then its TrackDescriptor (ThreadDescriptor pid, tid,
 * thread_name). So an event packet carries only: timestamp (the ns since the
 * thread's previous packet), the sequence id, SEQ_NEEDS_INCREMENTAL_STATE and
 * a TrackEvent of type SLICE_BEGIN (name_iid, and source_location_iid for
 * Python functions: the UI shows the function as the slice and file, line in
 * its arguments), SLICE_END (type only) or INSTANT (a mark by name_iid; a gap
 * named "lost N events" with a debug annotation lost_events = N). A slice that
 * continues an activation under a new parent (PT_WALK_CONTINUED: a span that
 * outlives the frame that began it, walk.h) has the annotation continued =
 * true, so slices without it are calls, one each. Names and
 * source locations are interned per sequence (InternedData in the packet that
 * first uses them; iid = the symbol's index + 1).
 *
 * CPU usage: a thread with CpuTime records gets a counter track "CPU usage"
 * (TrackDescriptor.counter, a child of its thread's track, the y axis shared
 * by every thread's), TYPE_COUNTER events of double_counter_value 0..1: the
 * CPU ns over the wall ns between two records (the driver's pt_cct_cpu), set
 * at the interval's start, and 0 from its ThreadEnd on. A value is known one
 * record late, after the thread's later events went out, so the counter has a
 * packet sequence of its own (PF_SEQ_CPU + index, opened as a thread's is, on
 * its own incremental clock), whose clock still only goes forward.
 *
 * That is 9-12 bytes an event. Unless opts.pf_uncompressed, packets are
 * gathered in batches of PF_BATCH_BYTES and each batch is written as one
 * packet of `compressed_packets` (a zlib stream of Trace bytes, which Perfetto's
 * own service writes and its trace processor and UI read): the repetitive
 * packets of a call-heavy trace shrink ~10-20x. Memory: one batch, its
 * compressed copy and zlib's state, plus a bit per (thread, symbol) for
 * interning.
 */
#define _POSIX_C_SOURCE 200809L
#include "export_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <zlib.h>

#include "grow_internal.h"

#define PF_BATCH_BYTES (1u << 20)
#define PF_CLOCK_INCREMENTAL 64u /* sequence-scoped clock id, as the SDK's kClockIdIncremental */
#define PF_CLOCK_MONOTONIC 3u    /* BUILTIN_CLOCK_MONOTONIC */
#define PF_CLOCK_REALTIME 1u     /* BUILTIN_CLOCK_REALTIME */
#define PF_SEQ_PROCESS 1u
#define PF_SEQ_CLEARED 1u        /* TracePacket.SequenceFlags */
#define PF_SEQ_NEEDS 2u
#define PF_SLICE_BEGIN 1u        /* TrackEvent.Type */
#define PF_SLICE_END 2u
#define PF_INSTANT 3u
#define PF_COUNTER 4u           /* TrackEvent.TYPE_COUNTER */
#define PF_CONTINUED 0x100u    /* pf_event: added to PF_SLICE_BEGIN */
#define PF_SEQ_CPU 0x80000000u /* + thread index: the sequence of its CPU usage counter */
#define PF_CPU_TRACK 0x40000001u /* + thread index: the low half of its counter track's uuid */
#define PF_SEQ_STEP 0xC0000000u  /* + thread index: the sequence of its Steps track */
#define PF_STEP_TRACK 0x20000001u /* + thread index: the low half of its Steps track's uuid */

/* wire types */
#define PB_VARINT 0u
#define PB_LEN 2u

/* Filtering: a mark or gap inside calls whose opens are deferred waits (its
 * track's clock only goes forward: written first, it would move their starts
 * up to it). */
typedef struct pf_instant {
    uint64_t ticks, lost; /* lost: a gap of this many events (sym NONE) */
    uint32_t sym;
} pf_instant_t;

/* A thread's packet sequence. */
typedef struct pf_thr {
    uint32_t pf_seq;
    int pf_open, pf_named;
    uint64_t pf_last_ns;
    uint8_t *pf_interned; /* a bit per symbol index: interned on this sequence */
    size_t pf_icap;
    pf_instant_t *pf_wait; /* filtering: instants that wait */
    uint32_t pf_nwait, pf_cap_wait;
    int cpu_open;          /* its CPU usage counter's sequence and track are written */
    int step_open;         /* its Steps track's sequence and track are written */
    uint64_t step_last_ns; /* that sequence's clock */
    uint64_t cpu_first_ns, cpu_last_ns;
    /* tasks: a Pending suspend whose wait slice is not written yet (its TaskAwait
     * records, which name it, follow it); written before the sequence's next packet */
    uint32_t wait_task;      /* index in pf_t.tasks + 1; 0: none pending */
    uint64_t wait_ticks;
    uint32_t wait_what;      /* symbol index of the first thing it awaits, NONE: none named */
    uint32_t wait_count;     /* TaskAwait records */
    uint64_t *wait_flows;    /* flows that start at the wait (awaits of tasks) */
    uint32_t wait_nflows, wait_cap_flows;
} pf_thr_t;

/* An asyncio task's track (tasks.h, Timelines). */
typedef struct pf_task {
    uint32_t sym;       /* its Task symbol's index */
    uint32_t thread;    /* the thread index whose sequence wrote its last packet */
    int described;      /* its TrackDescriptor is written */
    int waiting;        /* its innermost open slice is a wait */
    uint32_t open;      /* slices open on its track (calls, and a wait) */
    uint64_t *flows;    /* flows from its awaiters, terminated at its end */
    uint32_t nflows, cap_flows;
} pf_task_t;

typedef struct pf {
    pf_thr_t *thr; /* per thread index */
    uint32_t cap_thr;
    uint8_t *pf_batch, *pf_zout;
    size_t pf_blen, pf_zcap;
    z_stream pf_z;
    int pf_z_init;
    pf_task_t *tasks;
    uint32_t ntasks, cap_tasks;
    pt_u64map_t task_map; /* task symbol index -> tasks index */
    uint64_t flows;       /* flow ids given */
} pf_t;

/* A growable protobuf buffer (for the rare packets that are not fixed-size). */
typedef struct pb {
    uint8_t *p;
    size_t len, cap;
    int err;
} pb_t;

static inline size_t varint_put(uint8_t *d, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        d[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    d[n++] = (uint8_t)v;
    return n;
}

static int pb_room(pb_t *b, size_t n)
{
    if (b->err)
        return -1;
    if (b->len + n <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n)
        cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
        b->err = -ENOMEM;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static void pb_varint(pb_t *b, uint64_t v)
{
    if (!pb_room(b, 10))
        b->len += varint_put(b->p + b->len, v);
}

static void pb_uint(pb_t *b, uint32_t field, uint64_t v)
{
    pb_varint(b, (uint64_t)field << 3 | PB_VARINT);
    pb_varint(b, v);
}

static void pb_bytes(pb_t *b, uint32_t field, const void *p, size_t n)
{
    pb_varint(b, (uint64_t)field << 3 | PB_LEN);
    pb_varint(b, n);
    if (!pb_room(b, n)) {
        if (n)
            memcpy(b->p + b->len, p, n);
        b->len += n;
    }
}

/* A string field, made valid UTF-8 (protobuf strings must be). */
static void pb_str(pb_t *b, uint32_t field, const char *s)
{
    size_t n;
    char *clean = pt_utf8_clean(s, &n);
    if (!clean) {
        b->err = -ENOMEM;
        return;
    }
    pb_bytes(b, field, clean, n);
    free(clean);
}

static void pb_msg(pb_t *b, uint32_t field, const pb_t *inner) { pb_bytes(b, field, inner->p, inner->len); }

static void pb_done(pb_t *b) { free(b->p); }

/* Compress and write the gathered packets as one compressed_packets packet. */
static int pf_flush(ex_t *e)
{
    pf_t *pf = e->ws;
    if (!pf->pf_blen)
        return e->out.err;
    if (e->o.pf_uncompressed) {
        ob_put(&e->out, pf->pf_batch, pf->pf_blen);
        pf->pf_blen = 0;
        return e->out.err;
    }
    size_t bound = deflateBound(&pf->pf_z, (uLong)pf->pf_blen);
    if (bound > pf->pf_zcap) {
        uint8_t *p = realloc(pf->pf_zout, bound);
        if (!p)
            return -ENOMEM;
        pf->pf_zout = p;
        pf->pf_zcap = bound;
    }
    if (deflateReset(&pf->pf_z) != Z_OK)
        return -EIO;
    pf->pf_z.next_in = pf->pf_batch;
    pf->pf_z.avail_in = (uInt)pf->pf_blen;
    pf->pf_z.next_out = pf->pf_zout;
    pf->pf_z.avail_out = (uInt)pf->pf_zcap;
    if (deflate(&pf->pf_z, Z_FINISH) != Z_STREAM_END)
        return -EIO;
    size_t zlen = pf->pf_zcap - pf->pf_z.avail_out;
    /* Trace.packet { compressed_packets (50) = zlib bytes } */
    uint8_t head[24];
    uint8_t inner_head[12];
    size_t ih = varint_put(inner_head, 50u << 3 | PB_LEN);
    ih += varint_put(inner_head + ih, zlen);
    size_t h = varint_put(head, 1u << 3 | PB_LEN);
    h += varint_put(head + h, ih + zlen);
    ob_put(&e->out, head, h);
    ob_put(&e->out, inner_head, ih);
    ob_put(&e->out, pf->pf_zout, zlen);
    pf->pf_blen = 0;
    return e->out.err;
}

/* One TracePacket (its encoded body) as a Trace.packet field. */
static int pf_packet(ex_t *e, const uint8_t *body, size_t n)
{
    pf_t *pf = e->ws;
    uint8_t head[12];
    size_t h = varint_put(head, 1u << 3 | PB_LEN);
    h += varint_put(head + h, n);
    if (pf->pf_blen + h + n > PF_BATCH_BYTES) {
        int rc = pf_flush(e);
        if (rc)
            return rc;
    }
    if (h + n > PF_BATCH_BYTES) { /* a huge name: a batch of its own */
        uint8_t *big = malloc(h + n), *saved = pf->pf_batch;
        if (!big)
            return -ENOMEM;
        memcpy(big, head, h);
        memcpy(big + h, body, n);
        pf->pf_batch = big;
        pf->pf_blen = h + n;
        int rc = pf_flush(e);
        pf->pf_batch = saved;
        pf->pf_blen = 0;
        free(big);
        return rc;
    }
    memcpy(pf->pf_batch + pf->pf_blen, head, h);
    memcpy(pf->pf_batch + pf->pf_blen + h, body, n);
    pf->pf_blen += h + n;
    return 0;
}

static int pf_pb_packet(ex_t *e, pb_t *b)
{
    int rc = b->err ? b->err : pf_packet(e, b->p, b->len);
    pb_done(b);
    return rc;
}

/* Free nested messages whose bytes were copied into their parent; returns
 * the first error among them (0 if none). */
static int pb_done_all(pb_t *const *parts, size_t nparts)
{
    int err = 0;
    for (size_t i = 0; i < nparts; i++) {
        if (!err)
            err = parts[i]->err;
        pb_done(parts[i]);
    }
    return err;
}

/* Write the packet unless building its parts failed (err); freed either way. */
static int pf_pb_send(ex_t *e, pb_t *pkt, int err)
{
    if (err) {
        pb_done(pkt);
        return err;
    }
    return pf_pb_packet(e, pkt);
}

static uint64_t pf_uuid(const ex_t *e, uint32_t thread_index)
{
    /* unique within the trace; derived from the (first) pid so two exports of
     * different jobs opened together rarely collide */
    uint64_t base = pt_u64map_mix(e->procs[e->first].pinfo.pid + 0x7079747261636500ull) & ~0xffffffffull;
    return base | ((uint64_t)thread_index + 1);
}

/* A process's track: the first process's (e->first) is pf_uuid(UINT32_MAX) (as before
 * processes existed); thread indexes stay below 2^30, so these never meet. */
static uint64_t pf_proc_uuid(const ex_t *e, uint32_t proc)
{
    return proc != e->first ? (pf_uuid(e, 0) & ~0xffffffffull) | (0x80000000ull + proc) : pf_uuid(e, UINT32_MAX);
}

static int64_t pf_pid(const proc_t *p) { return (int32_t)(uint32_t)p->shown_pid; }

static int pf_process(ex_t *e, proc_t *p);

static int pf_begin(ex_t *e, proc_t *first)
{
    (void)first; /* e->first */
    const proc_t *p0 = &e->procs[e->first];
    pb_t clk = {0}, c1 = {0}, c2 = {0}, pkt = {0};
    pb_uint(&c1, 1, PF_CLOCK_MONOTONIC);
    pb_uint(&c1, 2, p0->pinfo.base_monotonic_ns);
    pb_msg(&clk, 1, &c1);
    if (p0->pinfo.base_realtime_ns) {
        pb_uint(&c2, 1, PF_CLOCK_REALTIME);
        pb_uint(&c2, 2, p0->pinfo.base_realtime_ns);
        pb_msg(&clk, 1, &c2);
    }
    pb_uint(&clk, 2, PF_CLOCK_MONOTONIC); /* primary_trace_clock */
    pb_uint(&pkt, 10, PF_SEQ_PROCESS);
    pb_msg(&pkt, 6, &clk);
    int rc = pf_pb_send(e, &pkt, pb_done_all((pb_t *const[]){&clk, &c1, &c2}, 3));
    if (rc)
        return rc;
    for (uint32_t i = 0; i < e->nprocs; i++)
        if (e->procs[i].selected && e->procs[i].seen && (i == e->first || e->procs[i].have_pinfo) &&
            (rc = pf_process(e, &e->procs[i])) != 0)
            return rc;
    return 0;
}

/* The process track (pid, command line), on sequence 1. */
static int pf_process(ex_t *e, proc_t *p)
{
    pb_t pd = {0}, td = {0}, pkt = {0};
    p->described = 1;
    char label[1400];
    pt_ex_process_label(p, label, sizeof label);
    const char *cl = label[0] ? label : "python";
    pb_uint(&pd, 1, (uint64_t)pf_pid(p));
    pb_str(&pd, 2, cl);   /* cmdline */
    pb_str(&pd, 6, cl);   /* process_name; sent again when the role comes */
    pb_uint(&td, 1, pf_proc_uuid(e, proc_index(e, p)));
    pb_msg(&td, 3, &pd);
    pb_uint(&pkt, 10, PF_SEQ_PROCESS);
    pb_msg(&pkt, 60, &td);
    return pf_pb_send(e, &pkt, pb_done_all((pb_t *const[]){&pd, &td}, 2));
}

/* The thread's TrackDescriptor, on its own sequence (again when its name changes). */
static int pf_thread_descriptor(ex_t *e, uint32_t index)
{
    const thr_t *t = &e->thr[index];
    pf_thr_t *pt = &((pf_t *)e->ws)->thr[index];
    pb_t th = {0}, td = {0}, pkt = {0};
    char nb[40];
    pb_uint(&th, 1, (uint64_t)pf_pid(&e->procs[t->proc]));
    pb_uint(&th, 2, t->os_tid ? t->os_tid : t->number);
    pb_str(&th, 5, pt_ex_thread_name(t, nb, sizeof nb));
    pb_uint(&td, 1, pf_uuid(e, index));
    pb_uint(&td, 5, pf_proc_uuid(e, t->proc)); /* parent: the process track */
    pb_msg(&td, 4, &th);
    pb_uint(&pkt, 10, pt->pf_seq);
    pb_msg(&pkt, 60, &td);
    int rc = pf_pb_send(e, &pkt, pb_done_all((pb_t *const[]){&th, &td}, 2));
    if (!rc)
        pt->pf_named = 1;
    return rc;
}

/* A sequence's first packet: cleared state, its events' default track, its
 * incremental clock starting at ns. */
static int pf_sequence_start(ex_t *e, uint32_t seq, uint64_t track_uuid, uint64_t ns)
{
    pb_t ted = {0}, def = {0}, c1 = {0}, c2 = {0}, clk = {0}, pkt = {0};
    pb_uint(&ted, 11, track_uuid); /* TrackEventDefaults.track_uuid */
    pb_uint(&def, 58, PF_CLOCK_INCREMENTAL);
    pb_msg(&def, 11, &ted);
    pb_uint(&c1, 1, PF_CLOCK_MONOTONIC);
    pb_uint(&c1, 2, ns);
    pb_uint(&c2, 1, PF_CLOCK_INCREMENTAL);
    pb_uint(&c2, 2, ns);
    pb_uint(&c2, 3, 1); /* is_incremental */
    pb_uint(&c2, 4, 1); /* unit_multiplier_ns */
    pb_msg(&clk, 1, &c1);
    pb_msg(&clk, 1, &c2);
    pb_uint(&pkt, 10, seq);
    pb_uint(&pkt, 13, PF_SEQ_CLEARED);
    pb_msg(&pkt, 59, &def);
    pb_msg(&pkt, 6, &clk);
    return pf_pb_send(e, &pkt, pb_done_all((pb_t *const[]){&ted, &def, &c1, &c2, &clk}, 5));
}

/* The thread's sequence: cleared state, defaults, its incremental clock, its track. */
static int pf_open_sequence(ex_t *e, uint32_t index, uint64_t ns)
{
    pf_thr_t *pt = &((pf_t *)e->ws)->thr[index];
    pt->pf_seq = PF_SEQ_PROCESS + 1 + index;
    pt->pf_last_ns = ns;
    pt->pf_open = 1;
    int rc = pf_sequence_start(e, pt->pf_seq, pf_uuid(e, index), ns);
    return rc ? rc : pf_thread_descriptor(e, index);
}

/* InternedData for symbol s on the thread's sequence, if not sent there yet
 * (appended to `pkt`); returns 0 or -ENOMEM. */
static int pf_intern(ex_t *e, pf_thr_t *pt, uint32_t s, pb_t *pkt)
{
    if ((size_t)s / 8 < pt->pf_icap && (pt->pf_interned[s / 8] >> (s % 8) & 1))
        return 0;
    if ((size_t)s / 8 >= pt->pf_icap) {
        size_t cap = pt->pf_icap ? pt->pf_icap : 64;
        while (cap <= (size_t)s / 8)
            cap *= 2;
        uint8_t *p = realloc(pt->pf_interned, cap);
        if (!p)
            return -ENOMEM;
        memset(p + pt->pf_icap, 0, cap - pt->pf_icap);
        pt->pf_interned = p;
        pt->pf_icap = cap;
    }
    pt->pf_interned[s / 8] |= (uint8_t)(1u << (s % 8));
    const pt_cct_symbol_t *sy = ex_sym(e, s);
    pb_t idata = {0}, en = {0}, sl = {0};
    pb_uint(&en, 1, (uint64_t)s + 1);
    pb_str(&en, 2, sy->name);
    pb_msg(&idata, 2, &en);
    if (sy->kind == PT_SYM_PY_FUNCTION) {
        pb_uint(&sl, 1, (uint64_t)s + 1);
        pb_str(&sl, 2, sy->file);
        pb_str(&sl, 3, sy->name);
        pb_uint(&sl, 4, sy->line);
        pb_msg(&idata, 4, &sl);
    }
    pb_msg(pkt, 12, &idata);
    return pb_done_all((pb_t *const[]){&en, &sl, &idata}, 3);
}

static int pf_wait_flush(ex_t *e, uint32_t index);
static int pf_tasks_end(ex_t *e);

/* The thread's sequence, ready for a packet at `ticks`: opened and named, the
 * wait slice that waited for it written; *ns: the time on its clock, which
 * only goes forward (a reused thread number). */
static int pf_seq_ready(ex_t *e, uint32_t index, uint64_t ticks, uint64_t *ns)
{
    const thr_t *t = &e->thr[index];
    pf_thr_t *pt = &((pf_t *)e->ws)->thr[index];
    int64_t sns = chrome_ns(&e->procs[t->proc], ticks);
    *ns = sns > 0 ? (uint64_t)sns : 0;
    int rc = 0;
    if (!pt->pf_open)
        rc = pf_open_sequence(e, index, *ns);
    else if (!pt->pf_named && t->name)
        rc = pf_thread_descriptor(e, index);
    if (!rc && pt->wait_task)
        rc = pf_wait_flush(e, index);
    if (*ns < pt->pf_last_ns)
        *ns = pt->pf_last_ns;
    return rc;
}

/* A TrackEvent on the thread's track at `now` (clamped ticks). type: its
 * TrackEvent.Type, with PF_CONTINUED for a BEGIN that continues an activation;
 * sym: a symbol index for BEGIN and INSTANT of a mark, NONE otherwise (an
 * INSTANT without one is a gap of `lost` events). */
static int pf_event(ex_t *e, pt_walk_thread_t *wt, unsigned type, uint32_t sym, uint64_t now, uint64_t lost)
{
    const int continued = (type & PF_CONTINUED) != 0, gap = type == PF_INSTANT && sym == NONE;
    type &= ~PF_CONTINUED;
    pf_thr_t *pt = &((pf_t *)e->ws)->thr[wt->index];
    uint64_t ns;
    int rc = pf_seq_ready(e, wt->index, now, &ns);
    if (rc)
        return rc;
    uint64_t delta = ns - pt->pf_last_ns;
    pt->pf_last_ns = ns;
    int interned_needed = sym != NONE && !((size_t)sym / 8 < pt->pf_icap && (pt->pf_interned[sym / 8] >> (sym % 8) & 1));
    if (!interned_needed && !gap && !continued) {
        /* the hot path: fixed-size fields into a stack buffer */
        uint8_t te[32], pkt[64];
        size_t tl = 0, pl = 0;
        te[tl++] = 9u << 3 | PB_VARINT;
        te[tl++] = (uint8_t)type;
        if (sym != NONE) {
            te[tl++] = 10u << 3 | PB_VARINT;
            tl += varint_put(te + tl, (uint64_t)sym + 1);
            if (ex_sym(e, sym)->kind == PT_SYM_PY_FUNCTION && type == PF_SLICE_BEGIN) {
                tl += varint_put(te + tl, 34u << 3 | PB_VARINT);
                tl += varint_put(te + tl, (uint64_t)sym + 1);
            }
        }
        pkt[pl++] = 8u << 3 | PB_VARINT;
        pl += varint_put(pkt + pl, delta);
        pkt[pl++] = 10u << 3 | PB_VARINT;
        pl += varint_put(pkt + pl, pt->pf_seq);
        pkt[pl++] = 13u << 3 | PB_VARINT;
        pkt[pl++] = PF_SEQ_NEEDS;
        pkt[pl++] = 11u << 3 | PB_LEN;
        pl += varint_put(pkt + pl, tl);
        memcpy(pkt + pl, te, tl);
        pl += tl;
        return pf_packet(e, pkt, pl);
    }
    pb_t te = {0}, pkt = {0}, da = {0};
    pb_uint(&te, 9, type);
    if (sym != NONE) {
        pb_uint(&te, 10, (uint64_t)sym + 1);
        if (ex_sym(e, sym)->kind == PT_SYM_PY_FUNCTION && type == PF_SLICE_BEGIN)
            pb_uint(&te, 34, (uint64_t)sym + 1);
    }
    if (gap) {
        char lost_name[48];
        snprintf(lost_name, sizeof lost_name, "lost %llu events", (unsigned long long)lost);
        pb_str(&te, 23, lost_name);
        pb_str(&da, 10, "lost_events");
        pb_uint(&da, 3, lost);
        pb_msg(&te, 4, &da);
    }
    if (continued) { /* not a new call: the same activation under a new parent (walk.h) */
        pb_str(&da, 10, "continued");
        pb_uint(&da, 2, 1); /* bool_value */
        pb_msg(&te, 4, &da);
    }
    pb_uint(&pkt, 8, delta);
    pb_uint(&pkt, 10, pt->pf_seq);
    pb_uint(&pkt, 13, PF_SEQ_NEEDS);
    pb_msg(&pkt, 11, &te);
    int err = te.err ? te.err : da.err;
    if (!err && sym != NONE)
        err = pf_intern(e, pt, sym, &pkt);
    pb_done(&te);
    pb_done(&da);
    return pf_pb_send(e, &pkt, err);
}

/* ---- CPU usage: a counter track per thread ---------------------------------- */

static uint64_t pf_cpu_uuid(const ex_t *e, uint32_t index)
{
    return (pf_uuid(e, 0) & ~0xffffffffull) | ((uint64_t)PF_CPU_TRACK + index);
}

/* The counter's own sequence (its values are known one CpuTime record late,
 * so they go out after the thread's later events: on a sequence of their own,
 * each sequence's clock still only goes forward): cleared state, defaults
 * (the counter track, an incremental clock from ns), then the counter's
 * TrackDescriptor, a child of the thread's track, its y axis shared by every
 * thread's counter (0..1 on all of them). */
static int pf_cpu_open(ex_t *e, uint32_t index, uint64_t ns)
{
    pf_thr_t *pt = &((pf_t *)e->ws)->thr[index];
    const uint32_t seq = PF_SEQ_CPU + index;
    int rc = pf_sequence_start(e, seq, pf_cpu_uuid(e, index), ns);
    if (rc)
        return rc;
    pb_t cd = {0}, td = {0}, pkt2 = {0};
    pb_str(&cd, 7, "pytrace CPU usage"); /* CounterDescriptor.y_axis_share_key */
    pb_uint(&td, 1, pf_cpu_uuid(e, index));
    pb_str(&td, 2, "CPU usage");
    pb_uint(&td, 5, pf_uuid(e, index)); /* parent: the thread's track */
    pb_msg(&td, 8, &cd);
    pb_uint(&pkt2, 10, seq);
    pb_msg(&pkt2, 60, &td);
    rc = pf_pb_send(e, &pkt2, pb_done_all((pb_t *const[]){&cd, &td}, 2));
    if (!rc) {
        pt->cpu_open = 1;
        pt->cpu_first_ns = pt->cpu_last_ns = ns;
    }
    return rc;
}

/* The thread ran on a CPU at `rate` (the CPU ns over the wall ns between two
 * CpuTime records) from `from` to `to`: a step of its counter, set at the
 * interval's start; rate < 0: it ended at `to` (0 from then on). */
static int pf_cpu_rate(ex_t *e, uint32_t index, uint64_t from, uint64_t to, double rate)
{
    pf_thr_t *pt = &((pf_t *)e->ws)->thr[index];
    const thr_t *t = &e->thr[index];
    int64_t sns = chrome_ns(&e->procs[t->proc], rate < 0 ? to : from);
    uint64_t ns = sns > 0 ? (uint64_t)sns : 0;
    if (rate < 0) {
        if (!pt->cpu_open)
            return 0;
        rate = 0.0;
    } else if (!pt->cpu_open) {
        int rc = pf_cpu_open(e, index, ns);
        if (rc)
            return rc;
    }
    if (ns < pt->cpu_last_ns)
        ns = pt->cpu_last_ns;
    uint8_t pkt[48];
    size_t pl = 0;
    pkt[pl++] = 8u << 3 | PB_VARINT;
    pl += varint_put(pkt + pl, ns - pt->cpu_last_ns);
    pt->cpu_last_ns = ns;
    pkt[pl++] = 10u << 3 | PB_VARINT;
    pl += varint_put(pkt + pl, PF_SEQ_CPU + index);
    pkt[pl++] = 13u << 3 | PB_VARINT;
    pkt[pl++] = PF_SEQ_NEEDS;
    pkt[pl++] = 11u << 3 | PB_LEN;
    pkt[pl++] = 2 + 2 + 8; /* TrackEvent { type, double_counter_value } */
    pkt[pl++] = 9u << 3 | PB_VARINT;
    pkt[pl++] = PF_COUNTER;
    pl += varint_put(pkt + pl, 44u << 3 | 1u); /* double_counter_value: 64-bit */
    uint64_t bits;
    memcpy(&bits, &rate, sizeof bits);
    for (int i = 0; i < 8; i++)
        pkt[pl++] = (uint8_t)(bits >> (8 * i));
    return pf_packet(e, pkt, pl);
}

static int pf_end(ex_t *e, const pt_walk_counters_t *wc)
{
    (void)wc;
    pf_t *pf = e->ws;
    int trc = pf_tasks_end(e);
    if (trc)
        return trc;
    for (uint32_t i = 0; i < e->nthr; i++) { /* a name that came after the thread's last event */
        int rc = 0;
        if (pf->thr[i].pf_open && !pf->thr[i].pf_named)
            rc = pf_thread_descriptor(e, i);
        else if (!pf->thr[i].pf_open && pf->thr[i].cpu_open) /* its counter's parent track */
            rc = pf_open_sequence(e, i, pf->thr[i].cpu_first_ns);
        if (rc)
            return rc;
    }
    int rc = pf_flush(e);
    return rc ? rc : e->out.err;
}

/* Filtering perfetto: write the waiting instants up to `upto` ticks (all of
 * them when no open is deferred any more), in time order. */
static int pf_flush_waiting(ex_t *e, pt_walk_thread_t *wt, uint64_t upto, int all)
{
    pf_thr_t *pt = &((pf_t *)e->ws)->thr[wt->index];
    uint32_t n = 0;
    while (n < pt->pf_nwait && (all || pt->pf_wait[n].ticks <= upto)) {
        pf_instant_t w = pt->pf_wait[n++];
        int rc = pf_event(e, wt, PF_INSTANT, w.sym, w.ticks, w.lost);
        if (rc)
            return rc;
    }
    if (n) {
        memmove(pt->pf_wait, pt->pf_wait + n, (pt->pf_nwait - n) * sizeof *pt->pf_wait);
        pt->pf_nwait -= n;
    }
    return 0;
}

/* A mark (sym) or a gap (sym NONE, lost) on perfetto's track; it waits while
 * an open is deferred (filtering). */
static int pf_instant(ex_t *e, pt_walk_thread_t *wt, uint32_t sym, uint64_t ticks, uint64_t lost)
{
    thr_t *t = thr_of(e, wt);
    if (!e->filter || t->emitted >= t->depth)
        return pf_event(e, wt, PF_INSTANT, sym, ticks, lost);
    pf_thr_t *pt = &((pf_t *)e->ws)->thr[wt->index];
    if (pt_grow((void **)&pt->pf_wait, &pt->pf_cap_wait, sizeof *pt->pf_wait, pt->pf_nwait + 1))
        return -ENOMEM;
    pt->pf_wait[pt->pf_nwait++] = (pf_instant_t){.ticks = ticks, .lost = lost, .sym = sym};
    return 0;
}

static int pf_init(ex_t *e)
{
    pf_t *pf = calloc(1, sizeof *pf);
    if (!pf)
        return -ENOMEM;
    e->ws = pf;
    pf->pf_batch = malloc(PF_BATCH_BYTES);
    if (!pf->pf_batch)
        return -ENOMEM;
    if (!e->o.pf_uncompressed) {
        if (deflateInit(&pf->pf_z, Z_BEST_SPEED) != Z_OK)
            return -ENOMEM;
        pf->pf_z_init = 1;
    }
    return 0;
}

static int pf_thread(ex_t *e, uint32_t index)
{
    pf_t *pf = e->ws;
    return ex_grow_fill((void **)&pf->thr, &pf->cap_thr, sizeof *pf->thr, index + 1, 0);
}

/* The thread's name changed: its track descriptor again. */
static void pf_named(ex_t *e, uint32_t index) { ((pf_t *)e->ws)->thr[index].pf_named = 0; }

static void pf_destroy(ex_t *e)
{
    pf_t *pf = e->ws;
    if (pf->pf_z_init)
        deflateEnd(&pf->pf_z);
    free(pf->pf_batch);
    free(pf->pf_zout);
    for (uint32_t i = 0; i < pf->cap_thr; i++) { /* (pf->thr is NULL when no thread came) */
        pf_thr_t *t = &pf->thr[i];
        free(t->pf_interned);
        free(t->pf_wait);
        free(t->wait_flows);
    }
    free(pf->thr);
    for (uint32_t i = 0; i < pf->ntasks; i++)
        free(pf->tasks[i].flows);
    free(pf->tasks);
    pt_u64map_free(&pf->task_map);
}

/* A slice opens (the instants that waited until `at` go first). */
static int pf_open(ex_t *e, pt_walk_thread_t *wt, uint32_t sym, uint64_t at, int continued)
{
    if (e->filter && ((pf_t *)e->ws)->thr[wt->index].pf_nwait) { /* they wait only when filtering */
        int rc = pf_flush_waiting(e, wt, at, 0);
        if (rc)
            return rc;
    }
    return pf_event(e, wt, PF_SLICE_BEGIN | (continued ? PF_CONTINUED : 0), sym, at, 0);
}

static int pf_close(ex_t *e, pt_walk_thread_t *wt, uint32_t sym, uint64_t start, uint64_t now)
{
    (void)sym;
    (void)start;
    if (e->filter && ((pf_t *)e->ws)->thr[wt->index].pf_nwait) {
        int rc = pf_flush_waiting(e, wt, now, 0);
        if (rc)
            return rc;
    }
    return pf_event(e, wt, PF_SLICE_END, NONE, now, 0);
}

/* No open is deferred any more: the instants that waited go out. */
static int pf_resume(ex_t *e, pt_walk_thread_t *wt)
{
    return ((pf_t *)e->ws)->thr[wt->index].pf_nwait ? pf_flush_waiting(e, wt, 0, 1) : 0;
}

/* ---- steps: a track per stepping thread -------------------------------------
 * A Step mark (agg.h STEPS) is an instant named after its label on the
 * thread's track, as any mark; and on a "Steps" track (a child of the thread's)
 * the step it ends is a slice "step N" from the thread's previous Step mark (or
 * its first event) to it. Steps follow each other, so that track has a packet
 * sequence of its own (PF_SEQ_STEP + index) whose clock only goes forward. */
static uint64_t pf_step_uuid(const ex_t *e, uint32_t index)
{
    return (pf_uuid(e, 0) & ~0xffffffffull) | ((uint64_t)PF_STEP_TRACK + index);
}

static int pf_step_packet(ex_t *e, pf_thr_t *pt, uint32_t seq, unsigned type, uint64_t ns, const char *name)
{
    pb_t te = {0}, pkt = {0};
    if (ns < pt->step_last_ns)
        ns = pt->step_last_ns;
    pb_uint(&pkt, 8, ns - pt->step_last_ns);
    pt->step_last_ns = ns;
    pb_uint(&te, 9, type);
    if (name)
        pb_str(&te, 23, name);
    pb_uint(&pkt, 10, seq);
    pb_uint(&pkt, 13, PF_SEQ_NEEDS);
    pb_msg(&pkt, 11, &te);
    return pf_pb_send(e, &pkt, pb_done_all((pb_t *const[]){&te}, 1));
}

static int pf_step(ex_t *e, pt_walk_thread_t *wt, uint64_t now)
{
    thr_t *t = thr_of(e, wt);
    pf_thr_t *pt = &((pf_t *)e->ws)->thr[wt->index];
    const proc_t *p = &e->procs[t->proc];
    int64_t s0 = chrome_ns(p, t->step_last), s1 = chrome_ns(p, now);
    uint64_t from = s0 > 0 ? (uint64_t)s0 : 0, to = s1 > 0 ? (uint64_t)s1 : 0;
    const uint32_t seq = PF_SEQ_STEP + wt->index;
    int rc;
    if (!pt->step_open) {
        if ((rc = pf_sequence_start(e, seq, pf_step_uuid(e, wt->index), from)) != 0)
            return rc;
        pb_t td = {0}, pkt = {0};
        pb_uint(&td, 1, pf_step_uuid(e, wt->index));
        pb_str(&td, 2, "Steps");
        pb_uint(&td, 5, pf_uuid(e, wt->index)); /* parent: the thread's track */
        pb_uint(&pkt, 10, seq);
        pb_msg(&pkt, 60, &td);
        if ((rc = pf_pb_send(e, &pkt, pb_done_all((pb_t *const[]){&td}, 1))) != 0)
            return rc;
        pt->step_open = 1;
        pt->step_last_ns = from;
    }
    char name[40];
    snprintf(name, sizeof name, "step %llu", (unsigned long long)t->steps);
    if ((rc = pf_step_packet(e, pt, seq, PF_SLICE_BEGIN, from, name)) != 0)
        return rc;
    return pf_step_packet(e, pt, seq, PF_SLICE_END, to, NULL);
}

static int pf_mark(ex_t *e, pt_walk_thread_t *wt, uint32_t id, uint64_t now, unsigned flags)
{
    uint32_t s = pt_cct_sym(e->cct, thr_of(e, wt)->proc, id);
    if (s == NONE)
        return -ENOMEM;
    int rc = pf_instant(e, wt, s, now, 0);
    if (!rc && (flags & PT_EVF_STEP))
        rc = pf_step(e, wt, now);
    return rc;
}

static int pf_gap(ex_t *e, pt_walk_thread_t *wt, uint64_t now, uint64_t lost)
{
    return pf_instant(e, wt, NONE, now, lost);
}

/* ---- asyncio tasks: a track per task ------------------------------------------
 * tasks.c reports, in stream order, what each task does (tasks.h, Timelines):
 * its logical calls (one per call of a coroutine, however many resumptions),
 * its steps and suspends, what it awaits. Each task has a track named after it
 * (a child of its process's track, as thread tracks are) whose slices are its
 * logical calls, and, between two steps, a slice "await X" named after the
 * first thing it awaits ("await asyncio.sleep", "await worker-2", "+N more"
 * when it awaits several). Its end is an instant named after its state (done,
 * cancelled, failed). An await of a task starts a flow at the awaiter's wait
 * slice that ends at the awaited task's end. The thread's own track is
 * unchanged (the loop's frames and the task's, one slice per resumption).
 * Task packets go on the sequence of the thread that runs the task (its clock
 * goes forward with the thread's events, and a task's events are in time
 * order), with TrackEvent.track_uuid set to the task's track. */

static uint64_t pf_task_uuid(const ex_t *e, uint32_t sym)
{
    return ((pf_uuid(e, 0) & ~0xffffffffull) ^ 0x7461736b00000000ull) | ((uint64_t)sym + 1);
}

/* The writer's task for Task symbol `id` of the thread's process (created). */
static pf_task_t *pf_task_of(ex_t *e, const pt_walk_thread_t *wt, uint32_t id)
{
    pf_t *pf = e->ws;
    uint32_t s = pt_cct_sym(e->cct, e->thr[wt->index].proc, id);
    if (s == NONE)
        return NULL;
    if (!pf->task_map.cap && pt_u64map_init(&pf->task_map, 64))
        return NULL;
    uint32_t i = pt_u64map_get(&pf->task_map, s);
    if (i != PT_U64MAP_EMPTY)
        return &pf->tasks[i];
    if (pt_grow((void **)&pf->tasks, &pf->cap_tasks, sizeof *pf->tasks, pf->ntasks + 1) ||
        pt_u64map_put(&pf->task_map, s, pf->ntasks))
        return NULL;
    pf->tasks[pf->ntasks] = (pf_task_t){.sym = s, .thread = wt->index};
    return &pf->tasks[pf->ntasks++];
}

static void pb_fixed64s(pb_t *b, uint32_t field, const uint64_t *v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        pb_varint(b, (uint64_t)field << 3 | 1u);
        if (!pb_room(b, 8))
            for (int k = 0; k < 8; k++)
                b->p[b->len++] = (uint8_t)(v[i] >> (8 * k));
    }
}

/* A TrackEvent on task k's track, on the sequence of thread `index` at `ticks`:
 * type; a name (sym: a symbol index, interned; else `name`); flows it starts
 * (out) or ends (in). */
static int pf_task_event(ex_t *e, uint32_t index, pf_task_t *k, unsigned type, uint32_t sym, const char *name,
                         int continued, const uint64_t *out, uint32_t nout, const uint64_t *in, uint32_t nin,
                         uint64_t ticks)
{
    pf_thr_t *pt = &((pf_t *)e->ws)->thr[index];
    uint64_t ns;
    int rc = pf_seq_ready(e, index, ticks, &ns);
    if (rc)
        return rc;
    k->thread = index;
    if (!k->described) { /* its TrackDescriptor: named after the task, under its process */
        const pt_cct_symbol_t *ts = ex_sym(e, k->sym);
        char serial[40];
        snprintf(serial, sizeof serial, "task %u", ts->line);
        pb_t td = {0}, pkt = {0};
        pb_uint(&td, 1, pf_task_uuid(e, k->sym));
        pb_str(&td, 2, ts->name && ts->name[0] ? ts->name : serial);
        pb_uint(&td, 5, pf_proc_uuid(e, e->thr[index].proc));
        pb_uint(&pkt, 10, pt->pf_seq);
        pb_msg(&pkt, 60, &td);
        if ((rc = pf_pb_send(e, &pkt, pb_done_all((pb_t *const[]){&td}, 1))) != 0)
            return rc;
        k->described = 1;
    }
    pb_t te = {0}, pkt = {0}, da = {0};
    pb_uint(&te, 9, type);
    pb_uint(&te, 11, pf_task_uuid(e, k->sym));
    if (sym != NONE) {
        pb_uint(&te, 10, (uint64_t)sym + 1);
        if (ex_sym(e, sym)->kind == PT_SYM_PY_FUNCTION && type == PF_SLICE_BEGIN)
            pb_uint(&te, 34, (uint64_t)sym + 1);
    } else if (name) {
        pb_str(&te, 23, name);
    }
    if (continued) { /* a span moved under a new parent: not a new call (walk.h) */
        pb_str(&da, 10, "continued");
        pb_uint(&da, 2, 1);
        pb_msg(&te, 4, &da);
    }
    pb_fixed64s(&te, 47, out, nout); /* flow_ids */
    pb_fixed64s(&te, 48, in, nin);   /* terminating_flow_ids */
    pb_uint(&pkt, 8, ns - pt->pf_last_ns);
    pt->pf_last_ns = ns;
    pb_uint(&pkt, 10, pt->pf_seq);
    pb_uint(&pkt, 13, PF_SEQ_NEEDS);
    pb_msg(&pkt, 11, &te);
    int err = te.err ? te.err : da.err;
    if (!err && sym != NONE)
        err = pf_intern(e, pt, sym, &pkt);
    pb_done(&te);
    pb_done(&da);
    return pf_pb_send(e, &pkt, err);
}

/* The wait that thread `index` holds back: its slice opens, at its suspend. */
static int pf_wait_flush(ex_t *e, uint32_t index)
{
    pf_t *pf = e->ws;
    pf_thr_t *pt = &pf->thr[index];
    pf_task_t *k = &pf->tasks[pt->wait_task - 1];
    pt->wait_task = 0; /* before writing: pf_seq_ready flushes what waits */
    char name[300];
    if (pt->wait_what == NONE) {
        snprintf(name, sizeof name, "waiting");
    } else {
        const char *what = ex_sym(e, pt->wait_what)->name;
        if (pt->wait_count > 1)
            snprintf(name, sizeof name, "await %.200s +%u more", what, pt->wait_count - 1);
        else
            snprintf(name, sizeof name, "await %.200s", what);
    }
    int rc = pf_task_event(e, index, k, PF_SLICE_BEGIN, NONE, name, 0, pt->wait_flows, pt->wait_nflows, NULL, 0,
                           pt->wait_ticks);
    pt->wait_nflows = 0;
    if (!rc) {
        k->waiting = 1;
        k->open++;
    }
    return rc;
}

/* The task's wait slice closes (it steps again, or a call of it ends). */
static int pf_wait_end(ex_t *e, uint32_t index, pf_task_t *k, uint64_t ticks)
{
    pf_t *pf = e->ws;
    uint32_t ki = (uint32_t)(k - pf->tasks) + 1;
    for (uint32_t j = 0; j < e->nthr && j < pf->cap_thr; j++) /* its wait held back on another thread goes first */
        if (pf->thr[j].wait_task == ki) {
            int rc = pf_wait_flush(e, j);
            if (rc)
                return rc;
        }
    if (!k->waiting)
        return 0;
    k->waiting = 0;
    k->open--;
    return pf_task_event(e, index, k, PF_SLICE_END, NONE, NULL, 0, NULL, 0, NULL, 0, ticks);
}

static int pf_call_begin(void *ctx, const pt_walk_thread_t *wt, uint32_t task, uint32_t depth, uint32_t id,
                         uint64_t ticks, unsigned flags)
{
    (void)depth;
    ex_t *e = ctx;
    pf_task_t *k = pf_task_of(e, wt, task);
    uint32_t s = pt_cct_sym(e->cct, e->thr[wt->index].proc, id);
    if (!k || s == NONE)
        return -ENOMEM;
    int rc = pf_wait_end(e, wt->index, k, ticks);
    if (rc)
        return rc;
    k->open++;
    return pf_task_event(e, wt->index, k, PF_SLICE_BEGIN, s, NULL, (flags & PT_WALK_CONTINUED) != 0, NULL, 0, NULL,
                         0, ticks);
}

static int pf_call_end(void *ctx, const pt_walk_thread_t *wt, uint32_t task, uint32_t depth, uint64_t ticks)
{
    (void)depth;
    ex_t *e = ctx;
    pf_task_t *k = pf_task_of(e, wt, task);
    if (!k)
        return -ENOMEM;
    int rc = pf_wait_end(e, wt->index, k, ticks);
    if (rc || !k->open)
        return rc;
    k->open--;
    return pf_task_event(e, wt->index, k, PF_SLICE_END, NONE, NULL, 0, NULL, 0, NULL, 0, ticks);
}

static int pf_task_step(void *ctx, const pt_walk_thread_t *wt, uint32_t task, uint64_t ticks, unsigned flags)
{
    (void)flags;
    ex_t *e = ctx;
    pf_task_t *k = pf_task_of(e, wt, task);
    return k ? pf_wait_end(e, wt->index, k, ticks) : -ENOMEM;
}

static int pf_task_suspend(void *ctx, const pt_walk_thread_t *wt, uint32_t task, uint8_t state, uint64_t ticks,
                           unsigned flags)
{
    ex_t *e = ctx;
    pf_t *pf = e->ws;
    pf_task_t *k = pf_task_of(e, wt, task);
    if (!k)
        return -ENOMEM;
    pf_thr_t *pt = &pf->thr[wt->index];
    if (pt->wait_task) { /* another task's wait, held back with no packet since */
        int rc = pf_wait_flush(e, wt->index);
        if (rc)
            return rc;
    }
    if (state == PT_TASK_PENDING) {
        if (!(flags & PT_EVF_SYNTHETIC)) { /* its wait: written once its TaskAwait records named it */
            pt->wait_task = (uint32_t)(k - pf->tasks) + 1;
            pt->wait_ticks = ticks;
            pt->wait_what = NONE;
            pt->wait_count = 0;
            pt->wait_nflows = 0;
        }
        return 0;
    }
    /* its end: an instant named after its state, where the flows of its awaiters end */
    int rc = pf_task_event(e, wt->index, k, PF_INSTANT, NONE, pt_tasks_state_name(state), 0, NULL, 0, k->flows,
                           k->nflows, ticks);
    k->nflows = 0;
    return rc;
}

static int pf_task_await(void *ctx, const pt_walk_thread_t *wt, uint32_t task, uint8_t kind, uint32_t id,
                         uint64_t ticks)
{
    (void)ticks;
    ex_t *e = ctx;
    pf_t *pf = e->ws;
    pf_task_t *k = pf_task_of(e, wt, task);
    if (!k)
        return -ENOMEM;
    pf_thr_t *pt = &pf->thr[wt->index];
    if (pt->wait_task != (uint32_t)(k - pf->tasks) + 1)
        return 0; /* its suspend drew no wait (tasks.c passes an await only after a Pending one) */
    if (!pt->wait_count++) {
        pt->wait_what = pt_cct_sym(e->cct, e->thr[wt->index].proc, id);
        if (pt->wait_what == NONE)
            return -ENOMEM;
    }
    if (kind != PT_AWAIT_TASK)
        return 0;
    pf_task_t *awaited = pf_task_of(e, wt, id); /* may move pf->tasks: k is not used after */
    if (!awaited)
        return -ENOMEM;
    uint64_t flow = (pf_uuid(e, 0) & ~0xffffffffull) ^ 0x666c6f7700000000ull ^ ++pf->flows;
    if (pt_grow((void **)&awaited->flows, &awaited->cap_flows, sizeof *awaited->flows, awaited->nflows + 1) ||
        pt_grow((void **)&pt->wait_flows, &pt->wait_cap_flows, sizeof *pt->wait_flows, pt->wait_nflows + 1))
        return -ENOMEM;
    awaited->flows[awaited->nflows++] = flow;
    pt->wait_flows[pt->wait_nflows++] = flow;
    return 0;
}

/* The end of the stream: held-back waits open, then what tasks left open
 * closes at the last time of the sequence that wrote their last packet. */
static int pf_tasks_end(ex_t *e)
{
    pf_t *pf = e->ws;
    for (uint32_t j = 0; j < e->nthr && j < pf->cap_thr; j++)
        if (pf->thr[j].wait_task) {
            int rc = pf_wait_flush(e, j);
            if (rc)
                return rc;
        }
    for (uint32_t i = 0; i < pf->ntasks; i++) {
        pf_task_t *k = &pf->tasks[i];
        k->waiting = 0;
        while (k->open) {
            k->open--;
            /* ticks 0: pf_seq_ready clamps to the sequence's last time (its clock never goes back) */
            int rc = pf_task_event(e, k->thread, k, PF_SLICE_END, NONE, NULL, 0, NULL, 0, NULL, 0, 0);
            if (rc)
                return rc;
        }
    }
    return 0;
}

static const pt_tasks_observer_t pf_tasks_observer = {.call_begin = pf_call_begin,
                                                      .call_end = pf_call_end,
                                                      .step = pf_task_step,
                                                      .suspend = pf_task_suspend,
                                                      .await = pf_task_await};

const ex_writer_t pt_ex_perfetto = {
    .defers = 1, .init = pf_init, .destroy = pf_destroy, .thread = pf_thread, .begin = pf_begin,
    .process = pf_process, .named = pf_named, .open = pf_open, .close = pf_close, .resume = pf_resume,
    .instant = pf_mark, .gap = pf_gap, .cpu_rate = pf_cpu_rate, .end = pf_end, .tasks = &pf_tasks_observer};
