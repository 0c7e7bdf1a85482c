/*
 * pt_hub_client (client.h): a reader of a hub's socket.
 *
 * Bytes arrive in a growing buffer; each complete size-prefixed message is
 * handed out in place when it is 8-aligned there, else from an aligned copy
 * (the callback may read the Event vector as 8-aligned structs).
 */
#include "client.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "schema/pt_fb.h"
#include "shm/base/err.h"
#include "shm/base/grow.h"
#include "shm/segment.h"

struct pt_hub_client {
    int fd;
    int eof;
    int finished;
    int disconnected; /* the hub closed the stream before the job's end */
    pt_hub_welcome_t welcome;
    uint8_t *buf;    /* received bytes [start, have) */
    size_t start, have, cap;
    uint64_t *aligned; /* scratch for a message that is not 8-aligned in buf */
    size_t aligned_cap;
    pt_reader_stats_t stats;
    uint64_t missed; /* events this reader missed in the hub (its synthetic Lost records) */
    pt_fb_producer_status_t *status; /* by process number: the stats sum them */
    size_t nstatus;
    char segment[96];
    char error[256];
};

static int find_once(const char *target, unsigned flags, char *sock, size_t cap, uint64_t *hub_pid, char *err,
                     size_t errlen)
{
    /* The segment of target (newest of a pid) and who holds its lock. */
    size_t count = 0;
    pt_segment_info_t *infos = NULL;
    int rc = pt_segment_list_alloc(&infos, &count);
    if (rc < 0) {
        pt_set_err(err, errlen, "cannot list /dev/shm: %s", strerror(-rc));
        return rc;
    }
    const char *name = target;
    while (*name == '/')
        name++;
    char *end = NULL;
    unsigned long long pid = strtoull(target, &end, 10);
    int by_pid = end != target && *end == 0;
    const pt_segment_info_t *found = NULL;
    for (size_t i = 0; i < count && found == NULL; i++) {
        const pt_segment_info_t *s = &infos[i];
        if (!s->valid)
            continue;
        if (by_pid ? s->pid == pid : !strcmp(s->name + (s->name[0] == '/'), name))
            found = s;
    }
    if (found == NULL) {
        free(infos);
        pt_set_err(err, errlen, "no pytrace segment %s%s", by_pid ? "for pid " : "", target);
        return -ENOENT;
    }
    if (found->uid != geteuid() && !(flags & PT_HUB_CLIENT_ANY_USER)) {
        pt_set_err(err, errlen, "segment %s belongs to uid %u", found->name, (unsigned)found->uid);
        free(infos);
        return -EACCES;
    }
    uint64_t holder = found->consumer_pid;
    char segname[96];
    snprintf(segname, sizeof segname, "%s", found->name);
    free(infos);
    if (holder == 0) {
        pt_set_err(err, errlen, "segment %s is not held by a hub", segname);
        return -ENOENT;
    }
    char dirs[2][PT_HUB_PATH_MAX];
    int ndirs = pt_hub_dirs(dirs, err, errlen);
    for (int i = 0; i < ndirs; i++) {
        char path[PT_HUB_PATH_MAX];
        struct stat st;
        if (pt_hub_socket_path(dirs[i], segname, path, sizeof path) < 0)
            continue;
        if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
            if (strlen(path) + 1 > cap)
                return -ENAMETOOLONG;
            memcpy(sock, path, strlen(path) + 1);
            *hub_pid = holder;
            return 0;
        }
    }
    *hub_pid = holder;
    pt_set_err(err, errlen, "segment %s is being read by pid %llu, which is not a hub (no socket in %s); stop that "
            "reader first, or read through a hub: pytrace hub PID", segname, (unsigned long long)holder, dirs[0]);
    return -ENXIO;
}

/* pid is a pytrace-hub process (its comm, which the kernel keeps to 15 bytes). */
static int is_hub_process(uint64_t pid)
{
    char path[64], comm[32] = "";
    snprintf(path, sizeof path, "/proc/%llu/comm", (unsigned long long)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    int ok = fgets(comm, sizeof comm, f) != NULL;
    fclose(f);
    return ok && !strncmp(comm, "pytrace-hub", 11);
}

/* A hub holds its segment a moment before its socket listens, and a hub that
 * ends (its last reader left) unlinks the socket a moment before it lets the
 * segment go: a holder that is a pytrace-hub with no socket is waited for
 * (up to HUB_SETTLE_MS) until it serves or lets go, so that a reader arriving
 * then joins it or reads the segment itself, not fails. */
#define HUB_SETTLE_MS 3000

int pt_hub_client_find(const char *target, unsigned flags, char *sock, size_t cap, uint64_t *hub_pid, char *err,
                       size_t errlen)
{
    for (int waited = 0;; waited += 20) {
        uint64_t holder = 0;
        int rc = find_once(target, flags, sock, cap, &holder, err, errlen);
        if (rc == 0)
            *hub_pid = holder;
        if (rc != -ENXIO || waited >= HUB_SETTLE_MS || !is_hub_process(holder))
            return rc;
        usleep(20000);
    }
}

static int read_full(int fd, void *out, size_t len, int timeout_ms)
{
    size_t got = 0;
    while (got < len) {
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, timeout_ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return -ETIMEDOUT;
        ssize_t n = recv(fd, (char *)out + got, len - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EPIPE;
        got += (size_t)n;
    }
    return 0;
}

int pt_hub_client_open(const char *sock, uint64_t expect_pid, unsigned flags, uint32_t queue_kib,
                       pt_hub_client_t **out, char *err, size_t errlen)
{
    /* The directory must be ours and closed to others, like the hub checks it. */
    char dir[PT_HUB_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", sock);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || strlen(sock) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        pt_set_err(err, errlen, "'%s' is not a socket path", sock);
        return -EINVAL;
    }
    *slash = 0;
    struct stat st;
    if (lstat(dir[0] ? dir : "/", &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        pt_set_err(err, errlen, "%s is not a directory of yours closed to others (mode 0700); not connecting", dir);
        return -EACCES;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        pt_set_err(err, errlen, "socket: %s", strerror(errno));
        return -errno;
    }
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, sock, strlen(sock) + 1);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        int e = errno;
        close(fd);
        pt_set_err(err, errlen, "cannot connect to the hub at %s: %s", sock, strerror(e));
        return e == ENOENT ? -ENOENT : -e;
    }
    struct ucred cred;
    socklen_t clen = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 || cred.uid != geteuid() ||
        (expect_pid && (uint64_t)cred.pid != expect_pid)) {
        close(fd);
        pt_set_err(err, errlen, "the process at %s (pid %d, uid %u) is not the hub expected; not reading from it", sock,
                (int)cred.pid, (unsigned)cred.uid);
        return -EACCES;
    }
    pt_hub_hello_t hello = {.major = PT_HUB_MAJOR, .minor = PT_HUB_MINOR, .queue_kib = queue_kib};
    memcpy(hello.magic, PT_HUB_HELLO_MAGIC, sizeof hello.magic);
    hello.flags = (flags & PT_HUB_CLIENT_LOSSLESS) ? PT_HUB_HELLO_LOSSLESS : 0;
    int send_errno = 0;
    if (send(fd, &hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello)
        send_errno = errno; /* a hub that refuses us may close first: its welcome says why */
    pt_hub_welcome_t w;
    int rc = read_full(fd, &w, sizeof w, 10000);
    if (rc < 0 && send_errno) {
        close(fd);
        pt_set_err(err, errlen, "cannot greet the hub at %s: %s", sock, strerror(send_errno));
        return -EPIPE;
    }
    if (rc < 0) {
        close(fd);
        pt_set_err(err, errlen, "the hub at %s %s", sock,
                rc == -EPIPE ? "closed the connection without a welcome (it refused us)"
                             : "did not answer within 10 s");
        return rc == -EPIPE ? -EACCES : rc;
    }
    if (memcmp(w.magic, PT_HUB_WELCOME_MAGIC, sizeof w.magic) != 0 || w.major != PT_HUB_MAJOR) {
        close(fd);
        pt_set_err(err, errlen, "%s is not a pytrace hub of protocol %u", sock, PT_HUB_MAJOR);
        return -EPROTO;
    }
    if (w.status == -EUSERS) {
        close(fd);
        pt_set_err(err, errlen, "the hub at %s refused us: it serves its most readers at once (%u, pytrace-hub "
                "--max-readers); try again when one has left", sock, (unsigned)w.queue_kib);
        return -EUSERS;
    }
    if (w.status != 0) {
        close(fd);
        pt_set_err(err, errlen, "the hub at %s refused us: %s", sock, strerror(w.status < 0 ? -w.status : w.status));
        return w.status < 0 ? w.status : -w.status;
    }
    pt_hub_client_t *c = calloc(1, sizeof *c);
    if (c == NULL) {
        close(fd);
        return -ENOMEM;
    }
    c->fd = fd;
    c->welcome = w;
    c->stats.pid = w.root_pid;
    *out = c;
    return 0;
}

int pt_hub_client_connect(const char *target, unsigned flags, pt_hub_client_t **out, char *err, size_t errlen)
{
    char sock[PT_HUB_PATH_MAX];
    uint64_t pid = 0;
    int rc = pt_hub_client_find(target, flags, sock, sizeof sock, &pid, err, errlen);
    if (rc < 0)
        return rc;
    rc = pt_hub_client_open(sock, pid, flags, 0, out, err, errlen);
    if (rc == -ENOENT || rc == -ECONNREFUSED) { /* it ended between: find again (it may be let go) */
        rc = pt_hub_client_find(target, flags, sock, sizeof sock, &pid, err, errlen);
        if (rc == 0)
            rc = pt_hub_client_open(sock, pid, flags, 0, out, err, errlen);
    }
    return rc;
}

/* The pt_reader_stats view, kept from the stream. */
static void note(pt_hub_client_t *c, const pt_fb_msg_t *m)
{
    pt_reader_stats_t *st = &c->stats;
    st->messages++;
    switch (m->type) {
    case PT_MSG_PROCESS_INFO:
        if (c->segment[0] == 0) {
            st->pid = m->u.process_info.pid;
            size_t n = m->u.process_info.segment.len < sizeof c->segment - 1 ? m->u.process_info.segment.len
                                                                               : sizeof c->segment - 1;
            if (m->u.process_info.segment.ptr)
                memcpy(c->segment, m->u.process_info.segment.ptr, n);
            c->segment[n] = 0;
        }
        break;
    case PT_MSG_SYMBOL: st->symbols_read++; break;
    case PT_MSG_THREAD_START: st->threads_seen++; st->threads_active++; break;
    case PT_MSG_THREAD_END: if (st->threads_active) st->threads_active--; break;
    case PT_MSG_EVENT_CHUNK:
        st->chunks_read++;
        for (uint32_t i = 0; i < m->u.event_chunk.count; i++) { /* resync chunks hold no live events */
            const pt_event_t *e = &m->u.event_chunk.events[i];
            if ((e->kind != PT_EV_FRAME && e->kind != PT_EV_LOST) || !(e->flags & PT_EVF_SYNTHETIC))
                st->events_read++;
            else if (e->kind == PT_EV_LOST)
                c->missed += e->id | ((uint64_t)e->aux << 32);
        }
        break;
    case PT_MSG_PRODUCER_STATUS: {
        /* a stream of several processes (tagged): the counters are the sum of
         * each process's last status; the state is the first process's */
        uint32_t proc = m->process;
        if (proc >= (1u << 16) ||
            pt_grow_zeroed((void **)&c->status, &c->nstatus, sizeof *c->status, (size_t)proc + 1, 16) < 0)
            break;
        c->status[proc] = m->u.producer_status;
        c->status[proc].state = m->u.producer_status.state ? m->u.producer_status.state : 1;
        st->producer_events_written = st->producer_events_dropped = st->hook_errors = st->symbols_dropped = 0;
        st->threads_untraced = st->tracing_displaced = st->events_untraced = 0;
        int first = 1;
        for (size_t i = 0; i < c->nstatus; i++) {
            const pt_fb_producer_status_t *p = &c->status[i];
            if (p->state == 0)
                continue; /* no status from this process number */
            if (first)
                st->producer_state = p->state;
            first = 0;
            st->producer_events_written += p->events_written;
            st->producer_events_dropped += p->events_dropped;
            st->hook_errors += p->hook_errors;
            st->symbols_dropped += p->symbols_dropped;
            st->threads_untraced += p->threads_untraced;
            st->tracing_displaced += p->tracing_displaced;
            st->events_untraced += p->events_untraced;
        }
        break;
    }
    default: break;
    }
}

long pt_hub_client_poll(pt_hub_client_t *c, pt_reader_msg_fn fn, void *ctx, uint64_t max_events, int timeout_ms)
{
    if (c->finished)
        return c->disconnected ? -ECONNRESET : 0;
    long events = 0;
    for (int round = 0;; round++) {
        /* receive what is there (wait for the first bytes only) */
        if (!c->eof) {
            if (c->start > 0 && (c->start > c->cap / 2 || c->start == c->have)) {
                memmove(c->buf, c->buf + c->start, c->have - c->start);
                c->have -= c->start;
                c->start = 0;
            }
            if (pt_grow_size((void **)&c->buf, &c->cap, 1, c->have + (64u << 10), 1u << 20) < 0)
                return -ENOMEM;
            if (round == 0 && timeout_ms > 0 && c->have == c->start) {
                struct pollfd p = {c->fd, POLLIN, 0};
                while (poll(&p, 1, timeout_ms) < 0 && errno == EINTR)
                    ;
            }
            ssize_t n = recv(c->fd, c->buf + c->have, c->cap - c->have, MSG_DONTWAIT);
            if (n > 0)
                c->have += (size_t)n;
            else if (n == 0)
                c->eof = 1;
            else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                snprintf(c->error, sizeof c->error, "reading from the hub: %s", strerror(errno));
                c->eof = 1;
            }
        }
        /* hand out every whole message */
        int handed = 0;
        while (c->have - c->start >= 4) {
            const uint8_t *p = c->buf + c->start;
            uint32_t size;
            memcpy(&size, p, 4);
            size_t total = (size_t)size + 4;
            if (size < 8 || total > PT_HUB_MAX_MESSAGE) {
                snprintf(c->error, sizeof c->error, "the hub sent a message of %u bytes; the stream is damaged", size);
                return -EBADMSG;
            }
            if (c->have - c->start < total)
                break;
            const uint8_t *msg = p;
            if (((uintptr_t)p & 7u) != 0) {
                if (c->aligned_cap < total) {
                    uint64_t *na = realloc(c->aligned, (total + 7) & ~(size_t)7);
                    if (na == NULL)
                        return -ENOMEM;
                    c->aligned = na;
                    c->aligned_cap = (total + 7) & ~(size_t)7;
                }
                memcpy(c->aligned, p, total);
                msg = (const uint8_t *)c->aligned;
            }
            pt_fb_msg_t m;
            uint32_t type = 0;
            if (pt_fb_parse(msg, total, &m, NULL, 0) == 0) {
                type = m.type;
                note(c, &m);
                if (m.type == PT_MSG_EVENT_CHUNK)
                    events += m.u.event_chunk.count;
            } else if (total >= 28) {
                type = msg[24]; /* let the caller's own parse say what is wrong */
            }
            c->start += total;
            handed = 1;
            int rc = fn(ctx, type, msg, total);
            if (rc)
                return rc;
            if (max_events && (uint64_t)events >= max_events)
                return events;
        }
        if (c->eof) {
            if (c->have - c->start > 0) {
                if (c->error[0] == 0)
                    snprintf(c->error, sizeof c->error, "the hub's stream ended inside a message");
                c->start = c->have;
            }
            if (c->stats.producer_state >= PT_STATE_STOPPED || c->stats.producer_state == PT_STATE_EMPTY) {
                c->finished = 1;
                if (c->stats.producer_state < PT_STATE_EXITED)
                    c->stats.producer_state = PT_STATE_EXITED;
                return events;
            }
            /* Not the job's end: this reader's connection is gone (the hub was stopped,
             * or it cut this reader). The job's state stays what the stream last said. */
            char why[sizeof c->error];
            snprintf(why, sizeof why, "%s", c->error[0] ? c->error : "the hub closed the stream");
            snprintf(c->error, sizeof c->error,
                     "disconnected from the hub (pid %llu) before the job ended (%.100s); the job may still run",
                     (unsigned long long)c->welcome.hub_pid, why);
            c->finished = 1;
            c->disconnected = 1;
            return events ? events : -ECONNRESET;
        }
        if (!handed || round > 64)
            return events;
    }
}

int pt_hub_client_finished(const pt_hub_client_t *c) { return c->finished; }

int pt_hub_client_disconnected(const pt_hub_client_t *c) { return c->disconnected; }

void pt_hub_client_stats(const pt_hub_client_t *c, pt_reader_stats_t *out) { *out = c->stats; }

uint64_t pt_hub_client_missed(const pt_hub_client_t *c) { return c->missed; }

const pt_hub_welcome_t *pt_hub_client_welcome(const pt_hub_client_t *c) { return &c->welcome; }

const char *pt_hub_client_error(const pt_hub_client_t *c) { return c->error; }

const char *pt_hub_client_segment(const pt_hub_client_t *c) { return c->segment; }

int pt_hub_client_fd(const pt_hub_client_t *c) { return c->fd; }

void pt_hub_client_close(pt_hub_client_t *c)
{
    if (c == NULL)
        return;
    close(c->fd);
    free(c->status);
    free(c->buf);
    free(c->aligned);
    free(c);
}
