/*
 * pytrace-hub's segments (hub_internal.h): the job's own, and with
 * --subprocesses every traced process of its tree, found in /dev/shm by
 * parent pid (and at once through inotify). Draining them keeps what a late
 * reader needs (each segment's ProcessInfo, symbols and last status, each
 * thread's start, end, next event and open frames) and hands every message to
 * the readers (hub_readers.c: deliver). The design is in hub.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include "shm/clock.h"
#include "shm/base/grow.h"
#include "shm/base/procstat.h"
#include "shm/segment.h"
#include "viewer/hub/hub_internal.h"

#define CHILD_RETRY_NS 2000000000ull          /* a child's segment that does not attach at once */

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

/* ---- the state the hub keeps ------------------------------------------------- */

static long thread_index(hub_t *h, uint32_t seg, uint64_t number)
{
    /* threads are few (one per ring at a time); search from the newest */
    for (size_t i = h->nthreads; i-- > 0;)
        if (h->threads[i].seg == seg && h->threads[i].number == number)
            return (long)i;
    if (pt_grow_zeroed((void **)&h->threads, &h->capthreads, sizeof *h->threads, h->nthreads + 1, 8))
        return -ENOMEM;
    hthread_t *t = &h->threads[h->nthreads];
    memset(t, 0, sizeof *t);
    t->seg = seg;
    t->number = number;
    return (long)h->nthreads++;
}

uint8_t *scratch(hub_t *h, size_t len)
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
const uint8_t *tag(hub_t *h, uint32_t seg, const uint8_t *msg, size_t *len)
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

/* ---- draining: the state a late reader needs, then every reader ----------- */

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
        if (pt_grow_zeroed((void **)&s->syms, &s->capsyms, sizeof *s->syms, s->nsyms + 1, 8))
            return -ENOMEM;
        blob_t *b = &s->syms[s->nsyms];
        memset(b, 0, sizeof *b);
        if (blob_set(b, msg, len))
            return -ENOMEM;
        s->nsyms++;
        uint32_t id = m.u.symbol.id;
        if (id < (1u << 24)) {
            size_t cap = s->symkind_cap;
            if (pt_grow_zeroed((void **)&s->symkind, &cap, 1, (size_t)id + 1, 8))
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

/* Drain every segment once. Returns the events drained, or -1 on a fatal error. */
long drain(hub_t *h)
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
    pt_proc_stat_t st;
    int ok = pt_proc_stat_read(pid, 0, &st) == 0;
    if (start)
        *start = ok ? st.start : 0;
    return ok ? st.ppid : 0;
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
    if (pt_grow_zeroed((void **)&h->segs, &(size_t){h->nsegs}, sizeof *h->segs, h->nsegs + 1, 8))
        return -ENOMEM;
    hseg_t *s = &h->segs[h->nsegs];
    memset(s, 0, sizeof *s);
    int rc = pt_reader_attach(name, 0, &s->r, err, sizeof err);
    if (rc < 0) {
        struct hfailed *f = NULL;
        for (size_t i = 0; i < h->nfailed && f == NULL; i++)
            if (!strcmp(h->failed[i].name, name))
                f = &h->failed[i];
        if (f == NULL && !pt_grow_zeroed((void **)&h->failed, &h->capfailed, sizeof *h->failed, h->nfailed + 1, 8)) {
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
    pt_segment_set_reads_children(pt_reader_segment(s->r)); /* its dead children are ours to read */
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
int children_pending(const hub_t *h)
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
        pt_grow_zeroed((void **)&h->others, &h->capothers, sizeof *h->others, h->nothers + 1, 8))
        return; /* then it is looked at again next time: slower, not wrong */
    snprintf(h->others[h->nothers++].name, sizeof h->others->name, "%s", name);
}

/* Attach every segment of the job's tree not read yet. Returns how many. */
int scan_children(hub_t *h)
{
    size_t count = 0;
    pt_segment_info_t *infos = NULL;
    int added = 0;
    if (pt_segment_list_alloc_skip(&infos, &count, settled, h) < 0)
        return 0;
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
        /* ended having written nothing: nothing to read, ever. Not one that its parent's
         * SIGTERM ended (Pool.terminate()): its handler marks it exited without the counters
         * an exit publishes, and its rings may hold what it wrote (such spawn workers went
         * missing from a recorded Pool, uncounted) */
        if (si->state == PT_STATE_EXITED && si->end_signal == 0 && si->consumer_pid == 0 &&
            si->events_written == 0) {
            not_the_jobs(h, si->name);
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

/* ---- the job's segment, the watch, the end ------------------------------------ */

int attach_root(hub_t *h, const char *target, double wait_seconds)
{
    char err[512] = "";
    h->segs = calloc(1, sizeof *h->segs);
    if (h->segs == NULL)
        return -1;
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
        return -1;
    }
    h->nsegs = 1;
    snprintf(root->name, sizeof root->name, "%s", pt_segment_name(pt_reader_segment(root->r)));
    {
        pt_reader_stats_t st;
        pt_reader_stats(root->r, &st);
        root->pid = h->root_pid = st.pid;
        root->policy_wait = pt_segment_header(pt_reader_segment(root->r))->drop_policy == PT_POLICY_WAIT;
        if (h->tree) /* its children that end before the hub finds them stay for the hub */
            pt_segment_set_reads_children(pt_reader_segment(root->r));
        (void)proc_stat(root->pid, &root->start);
    }
    if (pt_walk_create(&(pt_walk_ops_t){0}, NULL, &root->walk)) {
        fprintf(stderr, "pytrace-hub: out of memory\n");
        return -1;
    }
    return 0;
}

void watch_shm(hub_t *h)
{
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
}

void watch_read(hub_t *h)
{
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

int all_finished(const hub_t *h)
{
    int all_done = 1;
    for (size_t si = 0; si < h->nsegs; si++)
        all_done &= h->segs[si].finished;
    return all_done;
}
