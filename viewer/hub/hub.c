/*
 * pytrace-hub: the one consumer of a traced job; serves its stream to any
 * number of readers over a Unix-domain socket (protocol: proto.h).
 *
 * Design. One thread, one poll() loop:
 *   - drain every attached segment with the reader library (pt_reader_poll),
 *     at most DRAIN_EVENTS events per segment and round;
 *   - keep what a late reader needs: ProcessInfo, every Symbol, each thread's
 *     ThreadStart (and ThreadEnd), the last ProducerStatus, each thread's next
 *     event index and producer drop count, and each thread's open frames
 *     (viewer/core/walk, the one module with the stream-to-stacks rules);
 *   - copy every message into the queue of every reader; a queue is bounded:
 *     a reader whose queue is full is "overflowed" and from then on only the
 *     events it misses are counted, per thread; once its queue has drained to
 *     a quarter it gets a resync (proto.h) and the live stream again;
 *   - a lossless reader (hello flag, job policy Wait) has no bound: instead
 *     the hub does not drain while its queue is near the bound, so the job
 *     waits as it would for a single lossless reader;
 *   - flush queues with non-blocking sends; a reader that closes or errs is
 *     dropped and the others go on.
 * The hub releases ring space as soon as it has drained it into its memory
 * (no PT_READER_DEFER_RELEASE): what it holds for a reader that dies is lost
 * for that reader only; a hub killed loses what it had not yet sent, and a
 * reader that takes the segment over goes on from where the hub stopped.
 *
 * Process tree (--subprocesses): the hub scans /dev/shm for segments whose
 * producer descends from the job's root pid and attaches each; every message
 * of a child is re-framed with its process number (pt_fb_tag): the job's own
 * process is 0 (untagged, so a job without children gives the very stream a
 * single reader gives), its children 1, 2, ... in the order the hub found them.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "schema/pt_fb.h"
#include "shm/clock.h"
#include "shm/reader.h"
#include "shm/segment.h"
#include "viewer/core/walk.h"
#include "viewer/hub/proto.h"

#ifndef PYTRACE_VERSION
#define PYTRACE_VERSION "0"
#endif

#define DRAIN_EVENTS (1u << 16)              /* per segment and round */
#define DEFAULT_QUEUE_MIB 32u
#define DEFAULT_BUDGET_MIB 256u                /* all queues together (--budget-mib) */
#define DEFAULT_MAX_READERS 256u               /* readers at once (--max-readers) */
#define MIN_QUEUE ((size_t)64 << 10)           /* a queue's first allocation */
#define RESYNC_OUTQ (64 << 10)                 /* a reader cut by the budget resyncs once its
                                                  socket holds less than this unread */
#define MAX_STACK 4096u                        /* frames resent per thread */
#define HELLO_TIMEOUT_NS 10000000000ull
#define CHILD_RETRY_NS 2000000000ull          /* a child's segment that does not attach at once */
#define FINISH_GRACE_NS 10000000000ull         /* after the end, a non-lossless reader that takes
                                                  nothing for this long is closed */

typedef struct blob {
    uint8_t *p;
    size_t len;
} blob_t;

typedef struct hseg {
    pt_reader_t *r;
    pt_walk_t *walk;
    char name[96];
    uint64_t pid;
    blob_t pinfo, status;
    blob_t *syms;
    size_t nsyms, capsyms;
    uint8_t *symkind; /* by id: 1 + SymbolKind, 0 unknown */
    uint32_t symkind_cap;
    int policy_wait;
    int finished;
    uint64_t start; /* the producer's start time (/proc, clock ticks), 0 if unknown */
    char link[PT_HUB_PATH_MAX]; /* the socket's hard link named after this segment */
} hseg_t;

typedef struct hthread {
    uint32_t seg;
    uint64_t number;
    blob_t start, end;
    int ended;
    uint64_t next_event;
    uint64_t producer_dropped;
} hthread_t;

enum { R_HELLO, R_LIVE };

typedef struct hreader {
    int fd;
    int state;
    pid_t pid;
    uint8_t hello[PT_HUB_HELLO_BYTES];
    size_t hello_got;
    uint64_t since_ns;
    uint64_t progress_ns; /* last time it took bytes */
    int lossless;
    uint8_t *q;
    size_t qstart, qend, qcap, bound;
    int overflow;
    size_t mark;      /* the first message boundary at or after qstart (the welcome, 64
                         bytes and no size prefix, is put first: mark starts past it) */
    int cut;          /* cut by the hub's budget: resync once its socket has drained */
    uint64_t overflows, missed_events, sent_bytes;
    size_t *sym_sent; /* per segment */
    uint8_t *pi_sent; /* per segment: its ProcessInfo was sent */
    size_t nseg;
    uint8_t *known;   /* per hub thread: ThreadStart seen, ThreadEnd not */
    uint64_t *missed, *missed_total;
    uint8_t *due;     /* per hub thread, what a cut discarded that the resync sends again:
                         DUE_LOST_COUNT, DUE_STACK */
    size_t nthr;
} hreader_t;

enum { DUE_LOST_COUNT = 1, DUE_STACK = 2 };

typedef struct hub {
    hseg_t *segs;
    size_t nsegs;
    hthread_t *threads;
    size_t nthreads, capthreads;
    hreader_t **readers;
    size_t nreaders, capreaders;
    int listen_fd;
    int spare_fd;             /* /dev/null, given up to accept and refuse a reader when no fd is left */
    char sock[PT_HUB_PATH_MAX];
    uint64_t root_pid;
    size_t default_bound;
    size_t budget;            /* --budget-mib: every queue's allocation together */
    unsigned max_readers;     /* --max-readers: connections at once */
    uint64_t budget_cuts, refused_full;
    unsigned hold;
    uint64_t hold_until_ns;
    unsigned welcomed;
    int quiet;
    char log[PT_HUB_PATH_MAX]; /* --detach: stderr goes here (removed at the end when empty) */
    uint64_t idle_exit_ns;    /* --idle-exit: end after this long without a reader (0: never) */
    uint64_t idle_since_ns;   /* when the last reader left (or the hub started) */
    uint64_t finished_ns;
    uint64_t events_drained, readers_served;
    uint8_t *scratch;
    size_t scratch_cap;
    /* process tree (--subprocesses) */
    int tree;                 /* tag every message with its process (segment index; 0 untagged) */
    uint64_t next_scan_ns;
    int shm_watch;            /* inotify on /dev/shm: a new segment is scanned for at once */
    uint64_t children_attached, children_failed;
    struct hfailed {
        char name[96];
        uint64_t first_ns;    /* first failed attach; retried for CHILD_RETRY_NS (a segment
                                 being created has no valid header yet) */
        int said;             /* given up on, counted and said */
    } *failed;
    size_t nfailed, capfailed;
    struct hother {
        char name[96];        /* a valid segment that is not the job's: never opened again */
    } *others;
    size_t nothers, capothers;
    char dir[PT_HUB_PATH_MAX];
    uint8_t *tagged;          /* a message tagged with its process */
    size_t tagged_cap;
} hub_t;

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void say(const hub_t *h, const char *fmt, ...)
{
    if (h && h->quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("pytrace-hub: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static int blob_set(blob_t *b, const uint8_t *p, size_t len)
{
    uint8_t *n = realloc(b->p, len ? len : 1);
    if (n == NULL)
        return -ENOMEM;
    memcpy(n, p, len);
    b->p = n;
    b->len = len;
    return 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 8;
    while (ncap < need)
        ncap *= 2;
    void *n = realloc(*p, ncap * elem);
    if (n == NULL)
        return -ENOMEM;
    memset((char *)n + *cap * elem, 0, (ncap - *cap) * elem);
    *p = n;
    *cap = ncap;
    return 0;
}

/* ---- readers: queues ----------------------------------------------------- */

/* Bytes allocated to every reader's queue together: what --budget-mib bounds. */
static size_t q_total;

static void q_setcap(hreader_t *r, uint8_t *q, size_t cap)
{
    q_total = q_total - r->qcap + cap;
    r->q = q;
    r->qcap = cap;
}

static void q_compact(hreader_t *r)
{
    if (r->qstart > 0 && (r->qstart == r->qend || r->qstart > r->qcap / 2)) {
        memmove(r->q, r->q + r->qstart, r->qend - r->qstart);
        r->qend -= r->qstart;
        r->mark = r->mark > r->qstart ? r->mark - r->qstart : 0;
        r->qstart = 0;
    }
}

/* The capacity the queue needs to take len more bytes (after compaction). */
static size_t q_need(const hreader_t *r, size_t len)
{
    size_t used = r->qend - (r->qstart > 0 && (r->qstart == r->qend || r->qstart > r->qcap / 2) ? r->qstart : 0);
    if (used + len <= r->qcap)
        return r->qcap;
    size_t ncap = r->qcap ? r->qcap : MIN_QUEUE;
    while (ncap < used + len)
        ncap *= 2;
    return ncap;
}

static int q_put(hreader_t *r, const uint8_t *msg, size_t len)
{
    q_compact(r);
    size_t ncap = q_need(r, len);
    if (ncap > r->qcap) {
        uint8_t *n = realloc(r->q, ncap);
        if (n == NULL)
            return -ENOMEM;
        q_setcap(r, n, ncap);
    }
    memcpy(r->q + r->qend, msg, len);
    r->qend += len;
    return 0;
}

/* An empty queue gives its memory back past its first allocation. */
static void q_trim(hreader_t *r)
{
    size_t keep = r->qend - r->qstart;
    size_t cap = MIN_QUEUE;
    while (cap < keep)
        cap *= 2;
    if (r->qcap <= cap)
        return;
    if (r->qstart) {
        memmove(r->q, r->q + r->qstart, keep);
        r->qend = keep;
        r->mark = r->mark > r->qstart ? r->mark - r->qstart : 0;
        r->qstart = 0;
    }
    uint8_t *n = realloc(r->q, cap);
    if (n != NULL)
        q_setcap(r, n, cap);
}

static size_t q_len(const hreader_t *r) { return r->qend - r->qstart; }

static int reader_threads(hreader_t *r, size_t n)
{
    if (n <= r->nthr)
        return 0;
    size_t cap = r->nthr, cap2 = r->nthr, cap3 = r->nthr, cap4 = r->nthr;
    if (grow((void **)&r->known, &cap, n, 1) || grow((void **)&r->missed, &cap2, n, 8) ||
        grow((void **)&r->missed_total, &cap3, n, 8) || grow((void **)&r->due, &cap4, n, 1))
        return -ENOMEM;
    r->nthr = cap < cap2 ? cap : cap2;
    if (cap3 < r->nthr)
        r->nthr = cap3;
    if (cap4 < r->nthr)
        r->nthr = cap4;
    return 0;
}

static int reader_segs(hreader_t *r, size_t n)
{
    size_t cap = r->nseg, cap2 = r->nseg;
    if (n <= r->nseg)
        return 0;
    if (grow((void **)&r->sym_sent, &cap, n, sizeof(size_t)) || grow((void **)&r->pi_sent, &cap2, n, 1))
        return -ENOMEM;
    r->nseg = cap < cap2 ? cap : cap2;
    return 0;
}

/* ---- state the hub keeps ------------------------------------------------- */

static long thread_index(hub_t *h, uint32_t seg, uint64_t number)
{
    /* threads are few (one per ring at a time); search from the newest */
    for (size_t i = h->nthreads; i-- > 0;)
        if (h->threads[i].seg == seg && h->threads[i].number == number)
            return (long)i;
    if (grow((void **)&h->threads, &h->capthreads, h->nthreads + 1, sizeof *h->threads))
        return -ENOMEM;
    hthread_t *t = &h->threads[h->nthreads];
    memset(t, 0, sizeof *t);
    t->seg = seg;
    t->number = number;
    return (long)h->nthreads++;
}

static uint8_t *scratch(hub_t *h, size_t len)
{
    if (len > h->scratch_cap) {
        uint8_t *n = realloc(h->scratch, len);
        if (n == NULL)
            return NULL;
        h->scratch = n;
        h->scratch_cap = len;
    }
    return h->scratch;
}

/* msg tagged with the segment's process number when the hub serves a tree
 * (h->tree), else msg itself. *len is updated. NULL: out of memory or a
 * message that cannot be rebuilt (said by the caller). */
static const uint8_t *tag(hub_t *h, uint32_t seg, const uint8_t *msg, size_t *len)
{
    if (!h->tree || seg == 0)
        return msg; /* the job's own process is process 0: untagged, as a single-process stream */
    size_t cap = *len + 8;
    if (cap > h->tagged_cap) {
        uint8_t *n = realloc(h->tagged, cap);
        if (n == NULL)
            return NULL;
        h->tagged = n;
        h->tagged_cap = cap;
    }
    size_t n = pt_fb_tag(h->tagged, cap, msg, *len, seg);
    if (n == 0) { /* not a builder's layout (e.g. a symbol from another writer): rebuild it */
        pt_fb_msg_t m;
        if (pt_fb_parse(msg, *len, &m, NULL, 0))
            return NULL;
        m.process = seg;
        for (size_t want = cap + 64;; want *= 2) {
            if (want > h->tagged_cap) {
                uint8_t *nb = realloc(h->tagged, want);
                if (nb == NULL)
                    return NULL;
                h->tagged = nb;
                h->tagged_cap = want;
            }
            n = pt_fb_build(h->tagged, h->tagged_cap, &m);
            if (n || want > ((size_t)64 << 20))
                break;
        }
        if (n == 0)
            return NULL;
    }
    *len = n;
    return h->tagged;
}

/* A message the hub built for one reader, tagged as needed, into its queue. */
static int q_put_built(hub_t *h, hreader_t *r, uint32_t seg, const uint8_t *msg, size_t len)
{
    const uint8_t *t = tag(h, seg, msg, &len);
    return t ? q_put(r, t, len) : -ENOMEM;
}

/* The thread's open frames as Frame records, after a Lost record of `missed`
 * events if missed > 0: one EventChunk into the reader's queue. */
static int put_stack(hub_t *h, hreader_t *r, const hthread_t *t, uint64_t missed)
{
    hseg_t *s = &h->segs[t->seg];
    int rc = 0;
    pt_walk_thread_t *wt = pt_walk_thread(s->walk, t->number, &rc);
    if (wt == NULL)
        return rc ? rc : -ENOMEM;
    static uint32_t ids[MAX_STACK];
    static uint8_t spans[MAX_STACK];
    static pt_event_t ev[MAX_STACK + 1];
    uint32_t depth = pt_walk_stack(s->walk, wt, ids, spans, MAX_STACK);
    if (depth > MAX_STACK)
        depth = MAX_STACK;
    uint32_t n = 0;
    uint64_t ticks = wt->have_ticks ? wt->last_ticks : 0;
    if (missed) {
        uint64_t c = missed > PT_LOST_MAX ? PT_LOST_MAX : missed;
        ev[n++] = (pt_event_t){.ticks = ticks, .id = (uint32_t)c, .aux = (uint16_t)(c >> 32), .kind = PT_EV_LOST,
                               .flags = PT_EVF_SYNTHETIC};
    }
    uint32_t level = 0;
    for (uint32_t i = 0; i < depth; i++) {
        if (spans[i])
            continue; /* a span is no frame: it is seen again at its end (walk.h: unmatched) */
        uint8_t kind = ids[i] < s->symkind_cap ? s->symkind[ids[i]] : 0;
        ev[n++] = (pt_event_t){.ticks = ticks, .id = ids[i], .aux = (uint16_t)(level > 0xFFFFu ? 0xFFFFu : level),
                               .kind = PT_EV_FRAME,
                               .flags = (uint8_t)(PT_EVF_SYNTHETIC |
                                                  (kind == 1 + PT_SYM_C_FUNCTION ? PT_EVF_C_FUNCTION : 0))};
        level++;
    }
    if (n == 0)
        return 0;
    size_t cap = PT_CHUNK_HEADER_BYTES + 16u * n;
    uint8_t *buf = scratch(h, cap);
    if (buf == NULL)
        return -ENOMEM;
    size_t len = pt_fb_build_event_chunk(buf, cap, t->number, t->next_event, ev, n);
    return len ? q_put_built(h, r, t->seg, buf, len) : -EMSGSIZE;
}

static int put_lost_count(hub_t *h, hreader_t *r, const hthread_t *t, uint64_t total)
{
    pt_fb_lost_count_t lc = {t->number, total};
    uint8_t buf[128];
    size_t len = pt_fb_build_lost_count(buf, sizeof buf, &lc);
    return len ? q_put_built(h, r, t->seg, buf, len) : -EMSGSIZE;
}

/* What a reader needs to be consistent again: a late joiner's start
 * (late = 1), or the resync after an overflow (proto.h). */
static int put_state(hub_t *h, hreader_t *r, int late)
{
    if (reader_segs(r, h->nsegs) || reader_threads(r, h->nthreads))
        return -ENOMEM;
    for (size_t si = 0; si < h->nsegs; si++) {
        hseg_t *s = &h->segs[si];
        if ((late || !r->pi_sent[si]) && s->pinfo.len) { /* a process that began during the gap too */
            if (q_put(r, s->pinfo.p, s->pinfo.len))
                return -ENOMEM;
            r->pi_sent[si] = 1;
        }
        for (size_t k = r->sym_sent[si]; k < s->nsyms; k++)
            if (q_put(r, s->syms[k].p, s->syms[k].len))
                return -ENOMEM;
        r->sym_sent[si] = s->nsyms;
    }
    for (size_t i = 0; i < h->nthreads; i++) {
        hthread_t *t = &h->threads[i];
        uint64_t missed = r->missed[i];
        uint8_t due = late ? 0 : r->due[i];
        r->missed[i] = 0;
        r->due[i] = 0;
        int rc = 0;
        if (late) {
            if (t->ended || !t->start.len)
                continue;
            rc = q_put(r, t->start.p, t->start.len);
            r->known[i] = 1;
            if (!rc && t->producer_dropped)
                rc = put_lost_count(h, r, t, t->producer_dropped);
            if (!rc)
                rc = put_stack(h, r, t, 0);
        } else if (t->ended) {
            if (!r->known[i] && !missed && !due)
                continue;
            if (!r->known[i] && t->start.len)
                rc = q_put(r, t->start.p, t->start.len);
            r->missed_total[i] += missed;
            if (!rc && (missed || (due & DUE_LOST_COUNT)))
                rc = put_lost_count(h, r, t, t->producer_dropped + r->missed_total[i]);
            if (!rc && (missed || (due & DUE_STACK)))
                rc = put_stack(h, r, t, missed);
            if (!rc && t->end.len)
                rc = q_put(r, t->end.p, t->end.len);
            r->known[i] = 0;
        } else {
            if (!r->known[i] && t->start.len) {
                rc = q_put(r, t->start.p, t->start.len);
                r->known[i] = 1;
            }
            r->missed_total[i] += missed;
            if (!rc && (missed || (due & DUE_LOST_COUNT)))
                rc = put_lost_count(h, r, t, t->producer_dropped + r->missed_total[i]);
            if (!rc && (missed || (due & DUE_STACK)))
                rc = put_stack(h, r, t, missed);
        }
        if (rc)
            return rc;
    }
    for (size_t si = 0; si < h->nsegs; si++)
        if (h->segs[si].status.len && q_put(r, h->segs[si].status.p, h->segs[si].status.len))
            return -ENOMEM;
    return 0;
}

/* ---- the budget: every queue together ------------------------------------- */

static long thread_find(const hub_t *h, uint32_t seg, uint64_t number)
{
    for (size_t i = h->nthreads; i-- > 0;)
        if (h->threads[i].seg == seg && h->threads[i].number == number)
            return (long)i;
    return -1;
}

/* The capacity q_trim leaves a queue holding `keep` bytes. */
static size_t trimmed_cap(size_t keep)
{
    size_t cap = MIN_QUEUE;
    while (cap < keep)
        cap *= 2;
    return cap;
}

/* What cutting the reader would give back: everything queued past the message
 * being sent (which must go out whole: the stream stays framed). */
static size_t reclaimable(const hreader_t *r)
{
    size_t keep = (r->mark > r->qstart ? r->mark : r->qstart) - r->qstart;
    size_t cap = trimmed_cap(keep);
    return r->qcap > cap ? r->qcap - cap : 0;
}

/* Cut the reader: the messages queued past the one being sent are thrown
 * away, and what they told it is owed again (proto.h: the resync) -- events
 * of a live chunk become events missed, a synthetic Lost record's count is
 * missed again, a symbol or ProcessInfo is sent again, a thread's start or end
 * is known or not as before the first one thrown away, a LostCount and the
 * thread's open frames are resent. From now it is overflowed: it misses
 * events, counted, until its socket has drained; then the resync. */
static void reader_cut(hub_t *h, hreader_t *r)
{
    size_t from = r->mark > r->qstart ? r->mark : r->qstart;
    uint8_t *touched = calloc(r->nthr ? r->nthr : 1, 1);
    for (size_t p = from; p < r->qend;) {
        size_t len = pt_fb_message_size(r->q + p, r->qend - p);
        if (len == 0 || len > r->qend - p)
            break; /* cannot be: the hub framed every message */
        uint8_t *buf = scratch(h, len); /* 8-aligned: the parse reads events in place */
        pt_fb_msg_t m;
        p += len;
        if (buf == NULL)
            continue;
        memcpy(buf, r->q + p - len, len);
        if (pt_fb_parse(buf, len, &m, NULL, 0))
            continue;
        uint32_t seg = h->tree ? m.process : 0;
        long ti = -1;
        switch (m.type) {
        case PT_MSG_PROCESS_INFO:
            if (seg < r->nseg)
                r->pi_sent[seg] = 0;
            break;
        case PT_MSG_SYMBOL:
            if (seg < r->nseg && r->sym_sent[seg] > 0)
                r->sym_sent[seg]--; /* a segment's symbols are queued in order: the last ones */
            break;
        case PT_MSG_THREAD_START:
        case PT_MSG_THREAD_END:
            ti = thread_find(h, seg, m.type == PT_MSG_THREAD_START ? m.u.thread_start.thread : m.u.thread_end.thread);
            if (ti >= 0 && (size_t)ti < r->nthr && touched && !touched[ti]) {
                touched[ti] = 1;
                r->known[ti] = m.type == PT_MSG_THREAD_END; /* as before the first one thrown away */
            }
            break;
        case PT_MSG_EVENT_CHUNK: {
            ti = thread_find(h, seg, m.u.event_chunk.thread);
            if (ti < 0 || (size_t)ti >= r->nthr)
                break;
            const pt_event_t *ev = m.u.event_chunk.events;
            uint32_t n = m.u.event_chunk.count;
            if (n && (ev[0].flags & PT_EVF_SYNTHETIC)) { /* the hub's own: a resync or a late start */
                r->due[ti] |= DUE_STACK;
                if (ev[0].kind == PT_EV_LOST) {
                    uint64_t c = ev[0].id | ((uint64_t)ev[0].aux << 32);
                    r->missed[ti] += c;
                    r->missed_total[ti] -= c < r->missed_total[ti] ? c : r->missed_total[ti];
                }
            } else {
                r->missed[ti] += n;
                r->missed_events += n;
            }
            break;
        }
        case PT_MSG_LOST_COUNT:
            ti = thread_find(h, seg, m.u.lost_count.thread);
            if (ti >= 0 && (size_t)ti < r->nthr)
                r->due[ti] |= DUE_LOST_COUNT;
            break;
        default: break; /* ProducerStatus: the resync sends the last one anyway */
        }
    }
    free(touched);
    r->qend = from;
    if (!r->overflow) {
        r->overflow = 1;
        r->overflows++;
    }
    r->cut = 1;
    h->budget_cuts++;
    q_trim(r);
}

/* Keep every queue together within the budget: while putting len more bytes
 * into r (NULL: none) would pass it, the reader with the most to give back
 * (the largest queue: the slowest reader) is cut. Returns -1 when r itself is
 * overflowed now (cut, or nothing else to take from), else 0. A lossless
 * reader is never cut: it holds the job back instead (may_drain). */
static int enforce_budget(hub_t *h, hreader_t *r, size_t len)
{
    for (;;) {
        size_t extra = r ? q_need(r, len) - r->qcap : 0;
        if (q_total + extra <= h->budget)
            return 0;
        hreader_t *victim = NULL;
        size_t best = 0;
        for (size_t i = 0; i < h->nreaders; i++) {
            hreader_t *c = h->readers[i];
            size_t give = c->state == R_LIVE && !c->lossless ? reclaimable(c) : 0;
            if (give > best) {
                best = give;
                victim = c;
            }
        }
        if (victim == NULL) {
            if (r == NULL || r->lossless)
                return 0;
            if (!r->overflow) {
                r->overflow = 1;
                r->overflows++;
            }
            r->cut = 1;
            h->budget_cuts++;
            return -1;
        }
        if (h->budget_cuts == 0)
            say(h, "the readers' queues reached the budget (%zu MiB, --budget-mib): the slowest readers are "
                   "cut (they miss events, counted, and get a resync)", h->budget >> 20);
        reader_cut(h, victim);
        if (victim == r)
            return -1;
    }
}

/* ---- readers: connections ------------------------------------------------ */

static void reader_free(hreader_t *r)
{
    if (r->fd >= 0)
        close(r->fd);
    free(r->q);
    free(r->sym_sent);
    free(r->pi_sent);
    free(r->known);
    free(r->missed);
    free(r->missed_total);
    free(r->due);
    q_total -= r->qcap;
    free(r);
}

static void reader_drop(hub_t *h, size_t i, const char *why)
{
    hreader_t *r = h->readers[i];
    if (why)
        say(h, "reader pid %d %s (it missed %llu events in %llu overflows)", (int)r->pid, why,
            (unsigned long long)r->missed_events, (unsigned long long)r->overflows);
    reader_free(r);
    h->readers[i] = h->readers[--h->nreaders];
}

static void send_welcome(int fd, int32_t status, uint32_t flags, uint32_t queue_kib, uint64_t root_pid)
{
    pt_hub_welcome_t w = {.major = PT_HUB_MAJOR, .minor = PT_HUB_MINOR, .flags = flags, .status = status,
                          .queue_kib = queue_kib, .hub_pid = (uint64_t)getpid(), .root_pid = root_pid};
    memcpy(w.magic, PT_HUB_WELCOME_MAGIC, sizeof w.magic);
    (void)!send(fd, &w, sizeof w, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void accept_readers(hub_t *h)
{
    for (;;) {
        int fd = accept4(h->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE) && h->spare_fd >= 0) {
            /* no fd left (ulimit -n below --max-readers): the reader would wait in the
             * backlog, and poll() would wake at once for it, for ever (the hub spun at
             * 70 % of a core). Take it with the spare fd and refuse it, counted. */
            close(h->spare_fd);
            fd = accept4(h->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0) {
                if (h->refused_full++ == 0)
                    say(h, "refused a reader: no file descriptor left for it (%zu readers; ulimit -n); further "
                           "refusals are counted", h->nreaders);
                send_welcome(fd, -EMFILE, 0, h->max_readers, h->root_pid);
                close(fd);
            }
            h->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (fd >= 0)
                continue;
        }
        if (fd < 0)
            return;
        struct ucred cred;
        socklen_t clen = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 || cred.uid != geteuid()) {
            say(h, "refused a connection of uid %u (pid %d): only uid %u may read this job",
                (unsigned)cred.uid, (int)cred.pid, (unsigned)geteuid());
            send_welcome(fd, -EACCES, 0, 0, h->root_pid);
            close(fd);
            continue;
        }
        if (h->nreaders >= h->max_readers) {
            if (h->refused_full++ == 0)
                say(h, "refused a reader (pid %d): %zu readers already (--max-readers); further refusals "
                       "are counted", (int)cred.pid, h->nreaders);
            send_welcome(fd, -EUSERS, 0, h->max_readers, h->root_pid);
            close(fd);
            continue;
        }
        hreader_t *r = calloc(1, sizeof *r);
        if (r == NULL || grow((void **)&h->readers, &h->capreaders, h->nreaders + 1, sizeof *h->readers)) {
            free(r);
            close(fd);
            continue;
        }
        r->fd = fd;
        r->pid = cred.pid;
        r->state = R_HELLO;
        r->since_ns = pt_monotonic_ns();
        h->readers[h->nreaders++] = r;
    }
}

/* Hello complete: welcome, then the late joiner's state. */
static int reader_welcome(hub_t *h, hreader_t *r)
{
    pt_hub_hello_t hello;
    memcpy(&hello, r->hello, sizeof hello);
    if (memcmp(hello.magic, PT_HUB_HELLO_MAGIC, sizeof hello.magic) != 0 || hello.major != PT_HUB_MAJOR) {
        send_welcome(r->fd, -EPROTO, 0, 0, h->root_pid);
        return -EPROTO;
    }
    r->bound = h->default_bound;
    if (hello.queue_kib) {
        size_t b = (size_t)hello.queue_kib << 10;
        r->bound = b < ((size_t)1 << 20) ? ((size_t)1 << 20) : b > ((size_t)1 << 30) ? ((size_t)1 << 30) : b;
    }
    if (r->bound > h->budget) /* one queue is never more than all of them together */
        r->bound = h->budget;
    r->lossless = (hello.flags & PT_HUB_HELLO_LOSSLESS) && h->nsegs && h->segs[0].policy_wait;
    pt_hub_welcome_t w = {.major = PT_HUB_MAJOR, .minor = PT_HUB_MINOR,
                          .flags = r->lossless ? PT_HUB_WELCOME_LOSSLESS : 0, .status = 0,
                          .queue_kib = (uint32_t)(r->bound >> 10), .hub_pid = (uint64_t)getpid(),
                          .root_pid = h->root_pid};
    memcpy(w.magic, PT_HUB_WELCOME_MAGIC, sizeof w.magic);
    if (q_put(r, (const uint8_t *)&w, sizeof w))
        return -ENOMEM;
    r->mark = sizeof w; /* the welcome has no size prefix: the first boundary is past it */
    if (put_state(h, r, 1))
        return -ENOMEM;
    r->state = R_LIVE;
    (void)enforce_budget(h, NULL, 0);
    r->state = R_LIVE;
    h->welcomed++;
    h->readers_served++;
    if (!h->quiet)
        say(h, "reader pid %d joined%s (%zu readers)", (int)r->pid, r->lossless ? " (lossless)" : "",
            h->nreaders);
    return 0;
}

/* Read the hello or notice a close. Returns -1 when the reader is gone. */
static int reader_input(hub_t *h, hreader_t *r)
{
    for (;;) {
        uint8_t tmp[256];
        uint8_t *dst = r->state == R_HELLO ? r->hello + r->hello_got : tmp;
        size_t room = r->state == R_HELLO ? sizeof r->hello - r->hello_got : sizeof tmp;
        ssize_t n = recv(r->fd, dst, room, MSG_DONTWAIT);
        if (n == 0)
            return -1;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        if (r->state == R_HELLO) {
            r->hello_got += (size_t)n;
            if (r->hello_got == sizeof r->hello && reader_welcome(h, r) < 0)
                return -1;
        }
    }
}

/* Send what is queued; returns -1 when the reader is gone. */
static int reader_flush(hub_t *h, hreader_t *r)
{
    while (q_len(r) > 0) {
        ssize_t n = send(r->fd, r->q + r->qstart, q_len(r), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            if (errno == EINTR)
                continue;
            return -1;
        }
        r->qstart += (size_t)n;
        r->sent_bytes += (uint64_t)n;
        r->progress_ns = pt_monotonic_ns();
    }
    while (r->mark < r->qstart) { /* past the messages sent whole */
        size_t len = pt_fb_message_size(r->q + r->mark, r->qend - r->mark);
        if (len == 0)
            break;
        r->mark += len;
    }
    if (q_len(r) == 0) {
        r->qstart = r->qend = r->mark = 0;
        q_trim(r);
    }
    if (r->overflow && q_len(r) <= r->bound / 4) {
        if (r->cut) {
            /* cut by the budget: its resync waits until it has read what its socket holds
               (a reader that never reads is not sent the state again and again) */
            int outq = 0;
            if (q_len(r) > 0 || ioctl(r->fd, SIOCOUTQ, &outq) < 0 || outq >= RESYNC_OUTQ)
                return 0;
        }
        r->overflow = 0; /* room again: the resync, then the live stream */
        r->cut = 0;
        if (put_state(h, r, 0))
            return -1;
        (void)enforce_budget(h, NULL, 0);
    }
    return 0;
}

/* ---- draining: every message to every reader ---------------------------- */

static void deliver(hub_t *h, uint32_t seg, const pt_fb_msg_t *m, const uint8_t *msg, size_t len, long ti)
{
    for (size_t i = 0; i < h->nreaders; i++) {
        hreader_t *r = h->readers[i];
        if (r->state != R_LIVE)
            continue;
        if ((ti >= 0 && reader_threads(r, (size_t)ti + 1)) || reader_segs(r, seg + 1)) {
            r->overflow = 1; /* out of memory: treat as an overflow (counted) */
            continue;
        }
        if (!r->overflow && !r->lossless && q_len(r) + len > r->bound) {
            r->overflow = 1;
            r->overflows++;
        }
        if (!r->overflow && q_need(r, len) > r->qcap && q_total + (q_need(r, len) - r->qcap) > h->budget)
            (void)enforce_budget(h, r, len); /* r itself may be the one cut */
        if (r->overflow) {
            if (m->type == PT_MSG_EVENT_CHUNK && ti >= 0) {
                r->missed[ti] += m->u.event_chunk.count;
                r->missed_events += m->u.event_chunk.count;
            }
            continue;
        }
        int rc;
        if (m->type == PT_MSG_LOST_COUNT && ti >= 0 && r->missed_total[ti]) {
            rc = put_lost_count(h, r, &h->threads[ti], m->u.lost_count.dropped_total + r->missed_total[ti]);
        } else {
            rc = q_put(r, msg, len);
        }
        if (rc) {
            r->overflow = 1;
            r->overflows++;
            continue;
        }
        if (m->type == PT_MSG_SYMBOL)
            r->sym_sent[seg]++;
        else if (m->type == PT_MSG_PROCESS_INFO)
            r->pi_sent[seg] = 1;
        else if (m->type == PT_MSG_THREAD_START && ti >= 0)
            r->known[ti] = 1;
        else if (m->type == PT_MSG_THREAD_END && ti >= 0)
            r->known[ti] = 0;
    }
}

typedef struct drain_ctx {
    hub_t *h;
    uint32_t seg;
    int err;
} drain_ctx_t;

static int on_message(void *vctx, uint32_t type, const uint8_t *msg, size_t len)
{
    drain_ctx_t *ctx = vctx;
    hub_t *h = ctx->h;
    hseg_t *s = &h->segs[ctx->seg];
    pt_fb_msg_t m;
    char why[128];
    (void)type;
    if (pt_fb_parse(msg, len, &m, why, sizeof why)) {
        say(h, "%s: a message the reader library handed out does not parse (%s); skipped", s->name, why);
        return 0;
    }
    long ti = -1;
    int rc = 0;
    msg = tag(h, ctx->seg, msg, &len);
    if (msg == NULL) {
        say(h, "%s: out of memory tagging a message", s->name);
        return -ENOMEM;
    }
    switch (m.type) {
    case PT_MSG_PROCESS_INFO:
        rc = blob_set(&s->pinfo, msg, len);
        s->policy_wait = m.u.process_info.drop_policy == PT_POLICY_WAIT;
        if (s->pid == 0)
            s->pid = m.u.process_info.pid;
        break;
    case PT_MSG_SYMBOL: {
        if (grow((void **)&s->syms, &s->capsyms, s->nsyms + 1, sizeof *s->syms))
            return -ENOMEM;
        blob_t *b = &s->syms[s->nsyms];
        memset(b, 0, sizeof *b);
        if (blob_set(b, msg, len))
            return -ENOMEM;
        s->nsyms++;
        uint32_t id = m.u.symbol.id;
        if (id < (1u << 24)) {
            size_t cap = s->symkind_cap;
            if (grow((void **)&s->symkind, &cap, (size_t)id + 1, 1))
                return -ENOMEM;
            s->symkind_cap = (uint32_t)cap;
            s->symkind[id] = (uint8_t)(1 + m.u.symbol.kind);
        }
        break;
    }
    case PT_MSG_THREAD_START:
        ti = thread_index(h, ctx->seg, m.u.thread_start.thread);
        if (ti < 0)
            return (int)ti;
        rc = blob_set(&h->threads[ti].start, msg, len);
        h->threads[ti].ended = 0;
        break;
    case PT_MSG_THREAD_END:
        ti = thread_index(h, ctx->seg, m.u.thread_end.thread);
        if (ti < 0)
            return (int)ti;
        rc = blob_set(&h->threads[ti].end, msg, len);
        h->threads[ti].ended = 1;
        if (m.u.thread_end.events_dropped > h->threads[ti].producer_dropped)
            h->threads[ti].producer_dropped = m.u.thread_end.events_dropped;
        if (!rc)
            rc = pt_walk_thread_end(s->walk, m.u.thread_end.thread, m.u.thread_end.ticks);
        break;
    case PT_MSG_EVENT_CHUNK:
        ti = thread_index(h, ctx->seg, m.u.event_chunk.thread);
        if (ti < 0)
            return (int)ti;
        h->threads[ti].next_event = m.u.event_chunk.first_event + m.u.event_chunk.count;
        h->events_drained += m.u.event_chunk.count;
        rc = pt_walk_events(s->walk, m.u.event_chunk.thread, m.u.event_chunk.events, m.u.event_chunk.count);
        break;
    case PT_MSG_LOST_COUNT:
        ti = thread_index(h, ctx->seg, m.u.lost_count.thread);
        if (ti < 0)
            return (int)ti;
        h->threads[ti].producer_dropped = m.u.lost_count.dropped_total;
        break;
    case PT_MSG_PRODUCER_STATUS:
        rc = blob_set(&s->status, msg, len);
        break;
    default: break;
    }
    if (rc)
        return rc;
    deliver(h, ctx->seg, &m, msg, len, ti);
    return 0;
}

static int may_drain(const hub_t *h, uint64_t now)
{
    if (h->welcomed < h->hold && now < h->hold_until_ns)
        return 0;
    if (h->idle_exit_ns) {
        /* a hub started by a reader drains only while someone reads: what nobody
         * takes stays in the rings (the job waits or drops, counted, as it does
         * for a reader that left), for the next reader or the next hub */
        int live = 0;
        for (size_t i = 0; i < h->nreaders && !live; i++)
            live = h->readers[i]->state == R_LIVE;
        if (!live)
            return 0;
    }
    for (size_t i = 0; i < h->nreaders; i++) {
        const hreader_t *r = h->readers[i];
        if (r->state == R_LIVE && r->lossless && q_len(r) > r->bound / 2)
            return 0; /* the lossless reader's queue is full: the job waits (policy Wait); a
                         round adds at most about DRAIN_EVENTS events per segment above it */
    }
    return 1;
}

/* Drain every segment once. Returns the events drained, or -1 on a fatal error. */
static long drain(hub_t *h)
{
    long total = 0;
    for (uint32_t si = 0; si < h->nsegs; si++) {
        hseg_t *s = &h->segs[si];
        if (s->finished)
            continue;
        drain_ctx_t ctx = {h, si, 0};
        long n = pt_reader_poll(s->r, on_message, &ctx, DRAIN_EVENTS);
        if (n == -ENOMEM) {
            say(h, "out of memory; stopping");
            return -1;
        }
        if (n == -EBADMSG) { /* a corrupt ring or symbol log: skipped, the rest goes on */
            const char *e = pt_reader_error(s->r);
            say(h, "%s: %s", s->name, e && *e ? e : strerror((int)-n));
        } else if (n < 0 && n != -EPIPE) {
            /* the segment cannot be read on (it shrank under us): said even with
             * --quiet, and its stream ends here, so no reader waits for it forever */
            const char *e = pt_reader_error(s->r);
            fprintf(stderr, "pytrace-hub: %s: %s; its stream ends here\n", s->name,
                    e && *e ? e : strerror((int)-n));
            s->finished = 1;
            continue;
        }
        if (n > 0)
            total += n;
        if (pt_reader_finished(s->r)) {
            s->finished = 1;
            say(h, "%s: the job (pid %llu) ended; everything it published was served", s->name,
                (unsigned long long)s->pid);
        }
    }
    return total;
}

/* ---- the process tree (--subprocesses) ---------------------------------------- */

/* From /proc/<pid>/stat: the parent pid and the start time (clock ticks
 * since boot); 0 if the process is gone. */
static uint64_t proc_stat(uint64_t pid, uint64_t *start)
{
    char path[64], buf[1024];
    if (start)
        *start = 0;
    snprintf(path, sizeof path, "/proc/%llu/stat", (unsigned long long)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* comm may hold anything */
    unsigned long long ppid = 0;
    char state;
    if (p == NULL || sscanf(p + 1, " %c %llu", &state, &ppid) != 2)
        return 0;
    if (start) { /* field 22; p + 1 starts at field 3 */
        const char *q = p + 1;
        for (int field = 2; field < 21 && q; field++)
            q = strchr(q + 1, ' ');
        unsigned long long st = 0;
        if (q && sscanf(q, " %llu", &st) == 1)
            *start = st;
    }
    return ppid;
}

/* Does a process (started at cand_start, 0 if gone) whose parent was ppid
 * descend from the job? Its parent, or an ancestor (through /proc: an
 * untraced shell or forkserver in between), is the job's root or a process
 * the hub reads, and that ancestor started before it (a pid reused since by
 * another process is not the parent a segment names). */
static int descends(const hub_t *h, uint64_t ppid, uint64_t cand_start)
{
    for (int depth = 0; depth < 64 && ppid > 1; depth++) {
        for (size_t i = 0; i < h->nsegs; i++)
            if (h->segs[i].pid == ppid)
                return !(cand_start && h->segs[i].start > cand_start);
        uint64_t start;
        ppid = proc_stat(ppid, &start);
        if (cand_start && start > cand_start)
            return 0; /* an ancestor younger than the process: not its ancestor */
    }
    return 0;
}

/* A child the hub will not read: counted and said, even with --quiet (a
 * child nobody reads is never silent). */
static void give_up(hub_t *h, struct hfailed *f, const char *what, const char *why)
{
    f->said = 1;
    h->children_failed++;
    fprintf(stderr, "pytrace-hub: cannot read child %s of the job: %s (%llu child%s of the job not read)\n", what,
            why, (unsigned long long)h->children_failed, h->children_failed == 1 ? "" : "ren");
}

static int attach_seg(hub_t *h, const char *name, uint64_t pid)
{
    char err[512] = "";
    if (grow((void **)&h->segs, &(size_t){h->nsegs}, h->nsegs + 1, sizeof *h->segs))
        return -ENOMEM;
    hseg_t *s = &h->segs[h->nsegs];
    memset(s, 0, sizeof *s);
    int rc = pt_reader_attach(name, 0, &s->r, err, sizeof err);
    if (rc < 0) {
        struct hfailed *f = NULL;
        for (size_t i = 0; i < h->nfailed && f == NULL; i++)
            if (!strcmp(h->failed[i].name, name))
                f = &h->failed[i];
        if (f == NULL && !grow((void **)&h->failed, &h->capfailed, h->nfailed + 1, sizeof *h->failed)) {
            f = &h->failed[h->nfailed++];
            memset(f, 0, sizeof *f);
            snprintf(f->name, sizeof f->name, "%s", name);
            f->first_ns = pt_monotonic_ns();
        }
        if (f && !f->said && (rc == -EBUSY || rc == -EACCES || pt_monotonic_ns() - f->first_ns > CHILD_RETRY_NS)) {
            char what[64];
            snprintf(what, sizeof what, "pid %llu", (unsigned long long)pid);
            give_up(h, f, what, err[0] ? err : strerror(-rc));
        }
        return rc;
    }
    if (pt_walk_create(&(pt_walk_ops_t){0}, NULL, &s->walk)) {
        pt_reader_detach(s->r, 0);
        return -ENOMEM;
    }
    snprintf(s->name, sizeof s->name, "%s", pt_segment_name(pt_reader_segment(s->r)));
    s->pid = pid;
    (void)proc_stat(pid, &s->start);
    s->policy_wait = pt_segment_header(pt_reader_segment(s->r))->drop_policy == PT_POLICY_WAIT;
    /* a reader of this segment finds the hub by the segment's name */
    if (pt_hub_socket_path(h->dir, s->name, s->link, sizeof s->link) == 0) {
        unlink(s->link);
        if (link(h->sock, s->link) < 0)
            s->link[0] = 0;
    }
    for (size_t i = 0; i < h->nfailed; i++) /* it was being created when tried before */
        if (!strcmp(h->failed[i].name, name)) {
            h->failed[i] = h->failed[--h->nfailed];
            break;
        }
    h->nsegs++;
    h->children_attached++;
    say(h, "reading child pid %llu (%s) as process %zu", (unsigned long long)pid, s->name, h->nsegs - 1);
    return 0;
}

/* Children tried but neither read nor given up on yet (being created). */
static int children_pending(const hub_t *h)
{
    for (size_t i = 0; i < h->nfailed; i++)
        if (!h->failed[i].said)
            return 1;
    return 0;
}

/* pt_segment_skip_fn: a segment the hub has settled (read, given up on, or
 * not the job's) is not opened again. A scan runs at every new segment in
 * /dev/shm; opening all of them each time made a 50-worker pool's start
 * cost the hub O(n^2) opens and maps. */
static int settled(const char *name, void *ctx)
{
    const hub_t *h = ctx;
    for (size_t i = 0; i < h->nsegs; i++)
        if (!strcmp(h->segs[i].name, name))
            return 1;
    for (size_t i = 0; i < h->nfailed; i++)
        if (h->failed[i].said && !strcmp(h->failed[i].name, name))
            return 1;
    for (size_t i = 0; i < h->nothers; i++)
        if (!strcmp(h->others[i].name, name))
            return 1;
    return 0;
}

static void not_the_jobs(hub_t *h, const char *name)
{
    if (strlen(name) >= sizeof h->others->name ||
        grow((void **)&h->others, &h->capothers, h->nothers + 1, sizeof *h->others))
        return; /* then it is looked at again next time: slower, not wrong */
    snprintf(h->others[h->nothers++].name, sizeof h->others->name, "%s", name);
}

/* Attach every segment of the job's tree not read yet. Returns how many. */
static int scan_children(hub_t *h)
{
    size_t max = 256, count = 0;
    pt_segment_info_t *infos = NULL;
    int rc, added = 0;
    for (;;) {
        pt_segment_info_t *n = realloc(infos, max * sizeof *infos);
        if (n == NULL) {
            free(infos);
            return 0;
        }
        infos = n;
        rc = pt_segment_list_skip(infos, max, &count, settled, h);
        if (rc < 0 || count <= max)
            break;
        max = count + 16;
    }
    if (rc < 0) {
        free(infos);
        return 0;
    }
    /* oldest first: a parent is read before its children */
    for (size_t k = count; k-- > 0;) {
        const pt_segment_info_t *si = &infos[k];
        if (si->uid != geteuid() || si->pid == h->root_pid)
            continue;
        if (!si->valid) {
            /* being created (no header yet), or damaged: a live descendant's is tried
             * (and, failing for CHILD_RETRY_NS, counted); others are not the job's */
            uint64_t st = 0, pp = proc_stat(si->pid, &st);
            if (pp > 1 && descends(h, pp, st))
                (void)attach_seg(h, si->name, si->pid);
            continue;
        }
        if (settled(si->name, h)) /* attached above, from an older entry */
            continue;
        uint64_t cand_start = 0;
        uint64_t live_ppid = proc_stat(si->pid, &cand_start);
        /* alive: its parent now (an orphan's is 1) or the one its segment names.
         * A valid segment's ancestry does not become the job's later. */
        if (!descends(h, si->ppid, cand_start) && !(live_ppid > 1 && descends(h, live_ppid, cand_start))) {
            not_the_jobs(h, si->name);
            continue;
        }
        if (si->state == PT_STATE_EXITED && si->consumer_pid == 0 && si->events_written == 0) {
            not_the_jobs(h, si->name); /* ended having written nothing: nothing to read, ever */
            continue;
        }
        if (attach_seg(h, si->name, si->pid) == 0)
            added++;
    }
    free(infos);
    /* A child tried while its segment was being created, and not retried since
     * (it ended first, or its segment is gone): given up on after the same
     * CHILD_RETRY_NS, counted and said. Left pending, it held the hub -- and a
     * recorder waiting for the end -- forever (a spawn Pool's terminate() can
     * kill a worker between creating its segment and writing the header). */
    uint64_t now = pt_monotonic_ns();
    for (size_t i = 0; i < h->nfailed; i++) {
        struct hfailed *f = &h->failed[i];
        if (f->said || now - f->first_ns <= CHILD_RETRY_NS)
            continue;
        give_up(h, f, f->name, "it never became readable (the child ended first)");
    }
    return added;
}

/* ---- main ------------------------------------------------------------------ */

static int listen_on(hub_t *h, const char *segment, char *err, size_t errlen)
{
    char dir[PT_HUB_PATH_MAX];
    int rc = pt_hub_dir(1, dir, sizeof dir, err, errlen);
    if (rc < 0)
        return rc;
    memcpy(h->dir, dir, sizeof h->dir);
    if (pt_hub_socket_path(dir, segment, h->sock, sizeof h->sock) < 0) {
        snprintf(err, errlen, "socket path for %s too long", segment);
        return -ENAMETOOLONG;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, h->sock, strlen(h->sock) + 1);
    /* We hold the segment's consumer lock, so a socket of its name is stale
     * (a hub that was killed): replace it. The directory is ours alone. */
    struct stat st;
    if (lstat(h->sock, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            close(fd);
            snprintf(err, errlen, "%s exists and is not a socket; remove it", h->sock);
            return -EEXIST;
        }
        unlink(h->sock);
    }
    mode_t old = umask(077);
    rc = bind(fd, (struct sockaddr *)&addr, sizeof addr);
    umask(old);
    if (rc < 0 || listen(fd, 64) < 0) {
        int e = errno;
        close(fd);
        snprintf(err, errlen, "cannot listen on %s: %s", h->sock, strerror(e));
        return -e;
    }
    h->listen_fd = fd;
    h->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pytrace-hub [options] PID | SEGMENT\n"
            "\n"
            "The one reader of a traced job: drains its segment and serves the stream to any\n"
            "number of readers (pytrace-top, pytrace record, pytrace.Reader) over a Unix socket\n"
            "of this user (see the README, \"Many readers: the hub\"). Prints the socket's path\n"
            "on stdout once it listens; ends when the job has ended and every reader has its end.\n"
            "\n"
            "options:\n"
            "  --hold N          do not drain before N readers have joined (at most --hold-timeout)\n"
            "  --hold-timeout S  (default 30)\n"
            "  --wait S          the job is starting: wait up to S seconds for its segment\n"
            "  --queue-mib M     each reader's queue bound (default %u; at most --budget-mib)\n"
            "  --budget-mib M    every reader's queue together (default %u): past it the largest\n"
            "                    queues (the slowest readers) are cut: they miss events, counted in a\n"
            "                    Lost record, and get a resync once they read again\n"
            "  --max-readers N   readers at once (default %u); one more is refused, told so\n"
            "  --idle-exit S     drain only while a reader is there, and end when the last one left\n"
            "                    (or none came in S seconds), releasing the job's segment as it is (a\n"
            "                    later reader goes on from there); the hub a reader starts for a job\n"
            "                    that has none runs with --idle-exit 5\n"
            "  --subprocesses    also read every traced process the job starts (its segments, found\n"
            "                    in /dev/shm by parent pid); each message is tagged with its process\n"
            "  --quiet           no messages on stderr but errors\n"
            "  --detach          once it listens, leave the caller's stdin, stdout and stderr: its\n"
            "                    messages go to the socket's name with .log for .sock (removed at the\n"
            "                    end when empty), so a caller reading its output does not wait for it\n"
            "  -V, --version     print the version;  -h, --help: this help\n",
            DEFAULT_QUEUE_MIB, DEFAULT_BUDGET_MIB, DEFAULT_MAX_READERS);
}

/* --detach (pytrace hub PID): the hub outlives the command that started it, so it must
 * not hold that command's stdout and stderr open: whoever reads them (a pipe, a
 * capture, `$(...) 2>&1`) would wait for the job's end. Its stdin and stdout become
 * /dev/null and its stderr a file beside its socket, in the owner-only directory.
 * Failing that, stderr stays as it was: messages are never thrown away. */
static void detach_stdio(hub_t *h)
{
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        (void)dup2(null, STDIN_FILENO);
        (void)dup2(null, STDOUT_FILENO);
        if (null > STDERR_FILENO) /* a caller that closed stdin/stdout gave us fd 0 or 1 */
            close(null);
    }
    size_t n = strlen(h->sock);
    if (n < 5 || strcmp(h->sock + n - 5, ".sock") != 0)
        return;
    snprintf(h->log, sizeof h->log, "%.*s.log", (int)(n - 5), h->sock);
    int fd = open(h->log, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        say(h, "cannot open %s: %s; messages stay on stderr", h->log, strerror(errno));
        h->log[0] = 0;
        return;
    }
    fflush(stderr);
    if (dup2(fd, STDERR_FILENO) < 0)
        h->log[0] = 0;
    if (fd > STDERR_FILENO)
        close(fd);
}

int main(int argc, char **argv)
{
    hub_t hub = {.listen_fd = -1, .spare_fd = -1, .default_bound = (size_t)DEFAULT_QUEUE_MIB << 20,
                 .budget = (size_t)DEFAULT_BUDGET_MIB << 20, .max_readers = DEFAULT_MAX_READERS};
    hub_t *h = &hub;
    const char *target = NULL;
    double hold_timeout = 30, wait_seconds = 0;
    int detach = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
            printf("pytrace-hub %s (protocol %u.%u)\n", PYTRACE_VERSION, PT_HUB_MAJOR, PT_HUB_MINOR);
            return 0;
        } else if (!strcmp(a, "--hold") && val) {
            h->hold = (unsigned)strtoul(val, NULL, 10);
            i++;
        } else if (!strcmp(a, "--wait") && val) {
            wait_seconds = atof(val);
            i++;
        } else if (!strcmp(a, "--hold-timeout") && val) {
            hold_timeout = atof(val);
            i++;
        } else if (!strcmp(a, "--queue-mib") && val) {
            double mib = atof(val);
            if (!(mib >= 1 && mib <= 1024)) {
                fprintf(stderr, "pytrace-hub: --queue-mib must be 1..1024, not '%s'\n", val);
                return 2;
            }
            h->default_bound = (size_t)(mib * (1 << 20));
            i++;
        } else if (!strcmp(a, "--budget-mib") && val) {
            double mib = atof(val);
            if (!(mib >= 4 && mib <= 65536)) {
                fprintf(stderr, "pytrace-hub: --budget-mib must be 4..65536, not '%s'\n", val);
                return 2;
            }
            h->budget = (size_t)(mib * (1 << 20));
            i++;
        } else if (!strcmp(a, "--max-readers") && val) {
            char *end;
            unsigned long n = strtoul(val, &end, 10);
            if (*end || !(n >= 1 && n <= 100000)) {
                fprintf(stderr, "pytrace-hub: --max-readers must be 1..100000, not '%s'\n", val);
                return 2;
            }
            h->max_readers = (unsigned)n;
            i++;
        } else if (!strcmp(a, "--idle-exit") && val) {
            double sec = atof(val);
            if (!(sec > 0 && sec <= 86400)) {
                fprintf(stderr, "pytrace-hub: --idle-exit must be 0..86400 seconds, not '%s'\n", val);
                return 2;
            }
            h->idle_exit_ns = (uint64_t)(sec * 1e9);
            i++;
        } else if (!strcmp(a, "--quiet")) {
            h->quiet = 1;
        } else if (!strcmp(a, "--detach")) {
            detach = 1;
        } else if (!strcmp(a, "--subprocesses")) {
            h->tree = 1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "pytrace-hub: unknown option '%s' (try --help)\n", a);
            return 2;
        } else if (!target) {
            target = a;
        } else {
            fprintf(stderr, "pytrace-hub: one job only (a pid or a segment name)\n");
            return 2;
        }
    }
    if (!target) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    char err[512] = "";
    h->segs = calloc(1, sizeof *h->segs);
    if (h->segs == NULL)
        return 1;
    hseg_t *root = &h->segs[0];
    int rc;
    uint64_t wait_until = pt_monotonic_ns() + (uint64_t)(wait_seconds * 1e9);
    for (;;) { /* --wait: the job (pytrace run --hub) is starting; its segment comes soon */
        rc = pt_reader_attach(target, 0, &root->r, err, sizeof err);
        /* while waiting, a segment that is not there yet or not filled in yet (a
         * zero header: created, not yet initialised) is tried again */
        if (rc >= 0 || rc == -EBUSY || rc == -EACCES || rc == -EPERM || pt_monotonic_ns() >= wait_until ||
            stop_requested)
            break;
        struct timespec ts = {0, 5000000L};
        nanosleep(&ts, NULL);
    }
    if (rc < 0) {
        fprintf(stderr, "pytrace-hub: %s\n", err[0] ? err : strerror(-rc));
        return 1;
    }
    h->nsegs = 1;
    snprintf(root->name, sizeof root->name, "%s", pt_segment_name(pt_reader_segment(root->r)));
    {
        pt_reader_stats_t st;
        pt_reader_stats(root->r, &st);
        root->pid = h->root_pid = st.pid;
        root->policy_wait = pt_segment_header(pt_reader_segment(root->r))->drop_policy == PT_POLICY_WAIT;
        (void)proc_stat(root->pid, &root->start);
    }
    if (pt_walk_create(&(pt_walk_ops_t){0}, NULL, &root->walk)) {
        fprintf(stderr, "pytrace-hub: out of memory\n");
        return 1;
    }
    rc = listen_on(h, root->name, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "pytrace-hub: %s\n", err);
        pt_reader_detach(root->r, 0);
        return 1;
    }
    h->shm_watch = -1;
    if (h->tree) {
        /* a child's segment is attached as soon as it appears (a fork child that ends
         * at once must not be collected by its parent before the hub read it); the
         * periodic scan stays as the fallback */
        h->shm_watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (h->shm_watch >= 0 && inotify_add_watch(h->shm_watch, "/dev/shm", IN_CREATE | IN_MOVED_TO) < 0) {
            close(h->shm_watch);
            h->shm_watch = -1;
        }
    }
    h->hold_until_ns = pt_monotonic_ns() + (uint64_t)(hold_timeout * 1e9);
    h->idle_since_ns = pt_monotonic_ns();
    printf("%s\n", h->sock);
    fflush(stdout);
    if (detach)
        detach_stdio(h);
    say(h, "serving %s (pid %llu) at %s", root->name, (unsigned long long)h->root_pid, h->sock);

    struct pollfd *pfd = NULL;
    size_t pfd_cap = 0;
    int status = 0;
    long last = 0;
    unsigned idle_rounds = 0;
    while (!stop_requested) {
        uint64_t now = pt_monotonic_ns();
        /* sockets first: a reader that joined sees the state before what follows */
        if (grow((void **)&pfd, &pfd_cap, h->nreaders + 2, sizeof *pfd)) {
            status = 1;
            break;
        }
        pfd[0] = (struct pollfd){h->listen_fd, POLLIN, 0};
        for (size_t i = 0; i < h->nreaders; i++)
            pfd[i + 1] = (struct pollfd){h->readers[i]->fd, (short)(POLLIN | (q_len(h->readers[i]) ? POLLOUT : 0)), 0};
        /* last: the /dev/shm watch (fd -1 is ignored by poll) */
        pfd[h->nreaders + 1] = (struct pollfd){h->shm_watch, POLLIN, 0};
        int all_done = 1;
        for (size_t si = 0; si < h->nsegs; si++)
            all_done &= h->segs[si].finished;
        int busy = last >= (long)(DRAIN_EVENTS / 4);
        /* 2 ms while events flow; an idle job is polled less often, up to every 10 ms
         * (a default ring holds far more than 10 ms of a busy thread) */
        idle_rounds = last > 0 ? 0 : idle_rounds + 1;
        int timeout = busy ? 0 : idle_rounds > 50 ? 10 : 2;
        if (all_done)
            timeout = 20;
        size_t nfds = h->nreaders + 1;
        if (poll(pfd, nfds + 1, timeout) < 0 && errno != EINTR) {
            status = 1;
            break;
        }
        if (pfd[nfds].revents & POLLIN) {
            char evbuf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
            ssize_t got;
            int ours = 0;
            while ((got = read(h->shm_watch, evbuf, sizeof evbuf)) > 0)
                for (char *p = evbuf; p < evbuf + got;) {
                    const struct inotify_event *ev = (const struct inotify_event *)p;
                    if (ev->len && !strncmp(ev->name, PT_SHM_PREFIX, strlen(PT_SHM_PREFIX)))
                        ours = 1;
                    p += sizeof *ev + ev->len;
                }
            if (ours)
                h->next_scan_ns = 0; /* scan now */
        }
        if (pfd[0].revents & POLLIN)
            accept_readers(h);
        for (size_t i = nfds - 1; i >= 1; i--) {
            if (i - 1 >= h->nreaders)
                continue;
            hreader_t *r = h->readers[i - 1];
            if (r->fd != pfd[i].fd)
                continue;
            short ev = pfd[i].revents;
            if ((ev & (POLLIN | POLLHUP | POLLERR)) && reader_input(h, r) < 0) {
                reader_drop(h, i - 1, r->state == R_LIVE ? "left" : NULL);
                continue;
            }
            if (r->state == R_HELLO && now - r->since_ns > HELLO_TIMEOUT_NS) {
                reader_drop(h, i - 1, NULL);
                continue;
            }
        }
        if (h->tree && now >= h->next_scan_ns) { /* attaching drains nothing: even while held */
            if (scan_children(h))
                all_done = 0;
            /* 0.1 s: a child waiting on a full ring is picked up soon (inotify says at
             * once when one appears); 5 ms while one is being created */
            h->next_scan_ns = now + (children_pending(h) ? 5000000ull : 100000000ull);
        }
        last = 0;
        if (!all_done && may_drain(h, now)) {
            last = drain(h);
            if (last < 0) {
                status = 1;
                break;
            }
        }
        for (size_t i = h->nreaders; i-- > 0;)
            if (reader_flush(h, h->readers[i]) < 0)
                reader_drop(h, i, "went away");
        if (h->nreaders > 0) {
            h->idle_since_ns = 0;
        } else if (h->idle_since_ns == 0) {
            h->idle_since_ns = pt_monotonic_ns();
        } else if (h->idle_exit_ns && (h->welcomed > 0 || pt_monotonic_ns() - h->idle_since_ns > h->idle_exit_ns)) {
            /* its readers left (or none came): the segment goes back at once, as it
             * stands (nothing is drained for nobody), so a later reader -- a direct one
             * too, e.g. pytrace dump -- goes on from where this hub stopped */
            say(h, "no reader left; releasing the job");
            break;
        }
        all_done = 1;
        for (size_t si = 0; si < h->nsegs; si++)
            all_done &= h->segs[si].finished;
        if (all_done && h->finished_ns == 0 && h->tree && (scan_children(h) || children_pending(h)))
            all_done = 0; /* a child still to read, or one being created */
        if (all_done) {
            now = pt_monotonic_ns(); /* after the flushes (progress_ns) */
            if (h->finished_ns == 0)
                h->finished_ns = now;
            /* the end: close every reader that has everything; a stuck one gets a grace time */
            for (size_t i = h->nreaders; i-- > 0;) {
                hreader_t *r = h->readers[i];
                uint64_t since = r->progress_ns > h->finished_ns ? r->progress_ns : h->finished_ns;
                int late = !r->lossless && now > since && now - since > FINISH_GRACE_NS;
                /* a reader cut by the budget (overflowed, its queue empty) is owed its resync
                   and the end's state first: it is closed once it had them, or late */
                if (r->state == R_LIVE && ((q_len(r) == 0 && !r->overflow) || late)) {
                    shutdown(r->fd, SHUT_WR);
                    reader_drop(h, i, late ? "did not take the end of the stream in time; closed" : NULL);
                }
            }
            if (h->nreaders == 0)
                break;
        }
    }
    if (stop_requested)
        say(h, "stopped by a signal; readers get the end of the stream as it is");
    for (size_t i = h->nreaders; i-- > 0;)
        reader_drop(h, i, NULL);
    close(h->listen_fd);
    if (h->spare_fd >= 0)
        close(h->spare_fd);
    if (h->shm_watch >= 0)
        close(h->shm_watch);
    unlink(h->sock);
    for (size_t si = 0; si < h->nsegs; si++) {
        hseg_t *s = &h->segs[si];
        if (s->link[0])
            unlink(s->link);
        pt_reader_detach(s->r, s->finished);
        pt_walk_destroy(s->walk);
    }
    say(h, "served %llu readers, %llu events, %zu process%s", (unsigned long long)h->readers_served,
        (unsigned long long)h->events_drained, h->nsegs, h->nsegs == 1 ? "" : "es");
    for (size_t i = 0; i < h->nfailed; i++)
        if (!h->failed[i].said) {
            h->children_failed++;
            fprintf(stderr, "pytrace-hub: the job's segment %s never became readable\n", h->failed[i].name);
        }
    if (h->budget_cuts || h->refused_full)
        say(h, "%llu reader cuts at the budget (%zu MiB), %llu readers refused past --max-readers %u",
            (unsigned long long)h->budget_cuts, h->budget >> 20, (unsigned long long)h->refused_full,
            h->max_readers);
    if (h->children_failed)
        fprintf(stderr, "pytrace-hub: %llu child%s of the job could not be read\n",
                (unsigned long long)h->children_failed, h->children_failed == 1 ? "" : "ren");
    free(pfd);
    if (h->log[0]) {
        struct stat st;
        fflush(stderr);
        if (fstat(STDERR_FILENO, &st) == 0 && st.st_size == 0)
            unlink(h->log);
    }
    return status;
}
