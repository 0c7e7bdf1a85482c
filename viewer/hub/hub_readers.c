/*
 * pytrace-hub's reader connections (hub_internal.h): each reader's queue, the
 * budget over every queue together, the welcome and the state a late joiner or
 * a reader after an overflow is sent (proto.h: the resync), sending, and
 * delivering every drained message to every reader. The design is in hub.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shm/base/grow.h"
#include "shm/clock.h"
#include "viewer/hub/hub_internal.h"

#define MIN_QUEUE ((size_t)64 << 10)           /* a queue's first allocation */
#define RESYNC_OUTQ (64 << 10)                 /* a reader cut by the budget resyncs once its
                                                  socket holds less than this unread */
#define MAX_STACK 4096u                        /* frames resent per thread */

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

static int reader_threads(hreader_t *r, size_t n)
{
    if (n <= r->nthr)
        return 0;
    size_t cap = r->nthr, cap2 = r->nthr, cap3 = r->nthr, cap4 = r->nthr;
    if (pt_grow_zeroed((void **)&r->known, &cap, 1, n, 8) || pt_grow_zeroed((void **)&r->missed, &cap2, 8, n, 8) ||
        pt_grow_zeroed((void **)&r->missed_total, &cap3, 8, n, 8) || pt_grow_zeroed((void **)&r->due, &cap4, 1, n, 8))
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
    if (pt_grow_zeroed((void **)&r->sym_sent, &cap, sizeof(size_t), n, 8) || pt_grow_zeroed((void **)&r->pi_sent, &cap2, 1, n, 8))
        return -ENOMEM;
    r->nseg = cap < cap2 ? cap : cap2;
    return 0;
}

/* ---- the state a reader is sent ------------------------------------------- */

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

void reader_drop(hub_t *h, size_t i, const char *why)
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

void accept_readers(hub_t *h)
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
        if (r == NULL || pt_grow_zeroed((void **)&h->readers, &h->capreaders, sizeof *h->readers, h->nreaders + 1, 8)) {
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

/* ---- every message to every reader ---------------------------------------- */

void deliver(hub_t *h, uint32_t seg, const pt_fb_msg_t *m, const uint8_t *msg, size_t len, long ti)
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

int may_drain(const hub_t *h, uint64_t now)
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

/* ---- the loop's steps ------------------------------------------------------- */

void readers_input(hub_t *h, const struct pollfd *pfd, size_t nfds, uint64_t now)
{
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
}

void readers_flush(hub_t *h)
{
    for (size_t i = h->nreaders; i-- > 0;)
        if (reader_flush(h, h->readers[i]) < 0)
            reader_drop(h, i, "went away");
}

void readers_close_finished(hub_t *h)
{
    uint64_t now = pt_monotonic_ns(); /* after the flushes (progress_ns) */
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
}
