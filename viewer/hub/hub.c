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
 *
 * The parts: hub_args.c (the command line), hub_tree.c (the segments: the
 * job's and its children's, drained), hub_readers.c (the reader connections:
 * queues, budget, welcome, send); hub_internal.h holds what they share. This
 * file is main: the job's segment, the socket, the loop and the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "shm/clock.h"
#include "shm/base/grow.h"
#include "shm/segment.h"
#include "viewer/hub/hub_internal.h"

volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

void say(const hub_t *h, const char *fmt, ...)
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

/* The loop: accept and read the readers, scan for children, drain, send;
 * until a signal, the job's end with every reader served, or --idle-exit.
 * Returns the exit status. */
static int serve(hub_t *h)
{
    struct pollfd *pfd = NULL;
    size_t pfd_cap = 0;
    int status = 0;
    long last = 0;
    unsigned idle_rounds = 0;
    while (!stop_requested) {
        uint64_t now = pt_monotonic_ns();
        /* sockets first: a reader that joined sees the state before what follows */
        if (pt_grow_zeroed((void **)&pfd, &pfd_cap, sizeof *pfd, h->nreaders + 2, 8)) {
            status = 1;
            break;
        }
        pfd[0] = (struct pollfd){h->listen_fd, POLLIN, 0};
        for (size_t i = 0; i < h->nreaders; i++)
            pfd[i + 1] = (struct pollfd){h->readers[i]->fd, (short)(POLLIN | (q_len(h->readers[i]) ? POLLOUT : 0)), 0};
        /* last: the /dev/shm watch (fd -1 is ignored by poll) */
        pfd[h->nreaders + 1] = (struct pollfd){h->shm_watch, POLLIN, 0};
        int all_done = all_finished(h);
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
        if (pfd[nfds].revents & POLLIN)
            watch_read(h);
        if (pfd[0].revents & POLLIN)
            accept_readers(h);
        readers_input(h, pfd, nfds, now);
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
        readers_flush(h);
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
        all_done = all_finished(h);
        if (all_done && h->finished_ns == 0 && h->tree && (scan_children(h) || children_pending(h)))
            all_done = 0; /* a child still to read, or one being created */
        if (all_done) {
            readers_close_finished(h);
            if (h->nreaders == 0)
                break;
        }
    }
    free(pfd);
    return status;
}

/* The end: every reader gets the end of the stream as it is, the segments
 * are let go (a finished one removed), the counts are said. */
static void finish(hub_t *h)
{
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
    if (h->log[0]) {
        struct stat st;
        fflush(stderr);
        if (fstat(STDERR_FILENO, &st) == 0 && st.st_size == 0)
            unlink(h->log);
    }
}

int main(int argc, char **argv)
{
    hub_t hub = {.listen_fd = -1, .spare_fd = -1, .default_bound = (size_t)DEFAULT_QUEUE_MIB << 20,
                 .budget = (size_t)DEFAULT_BUDGET_MIB << 20, .max_readers = DEFAULT_MAX_READERS};
    hub_t *h = &hub;
    hub_args_t args = {.hold_timeout = 30};
    int rc = hub_parse_args(argc, argv, h, &args);
    if (rc >= 0)
        return rc;
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    if (attach_root(h, args.target, args.wait_seconds))
        return 1;
    hseg_t *root = &h->segs[0];
    char err[512] = "";
    if (listen_on(h, root->name, err, sizeof err) < 0) {
        fprintf(stderr, "pytrace-hub: %s\n", err);
        pt_reader_detach(root->r, 0);
        return 1;
    }
    watch_shm(h);
    h->hold_until_ns = pt_monotonic_ns() + (uint64_t)(args.hold_timeout * 1e9);
    h->idle_since_ns = pt_monotonic_ns();
    printf("%s\n", h->sock);
    fflush(stdout);
    if (args.detach)
        detach_stdio(h);
    say(h, "serving %s (pid %llu) at %s", root->name, (unsigned long long)h->root_pid, h->sock);
    int status = serve(h);
    finish(h);
    return status;
}
