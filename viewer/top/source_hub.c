/*
 * HubSource: a traced job read through its hub (pytrace-hub, viewer/hub/client.h),
 * used when the job's segment is held by a hub. The same messages as a
 * LiveSource, parsed and checked here; the figures (pt_reader_stats_t) are the
 * ones the stream says (the client keeps them). Events this view missed in
 * the hub's queue (its synthetic Lost records) are counted apart from the
 * job's drops: HubSource_missed().
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/segment.h"

#include "source.h"
#include "viewer/hub/client.h"

typedef struct HubSource {
    Source base;
    pt_hub_client_t *client;
    SourceStatus status;
    int seen;        /* the first poll waited for the late joiner's state */
    char error[256]; /* sticky: the last client or parse error */
    Source_sink sink;
    void *sink_ctx;
} HubSource;

static int HubSource_onMessage(void *ctx, uint32_t type, const uint8_t *msg, size_t len)
{
    HubSource *hs = ctx;
    pt_fb_msg_t m;
    char why[128] = "";
    (void)type;
    if (pt_fb_parse(msg, len, &m, why, sizeof why)) {
        snprintf(hs->error, sizeof hs->error, "bad message from the hub (%s); the picture may be incomplete", why);
        return 0;
    }
    hs->sink(hs->sink_ctx, &m);
    return 0;
}

static long HubSource_poll(Source *src, Source_sink sink, void *ctx, size_t max_events)
{
    HubSource *hs = (HubSource *)src;
    if (hs->status.ended || hs->status.died || hs->status.disconnected)
        return 0;
    hs->sink = sink;
    hs->sink_ctx = ctx;
    /* the first poll waits a little: --once shows the job as it is now */
    long n = pt_hub_client_poll(hs->client, HubSource_onMessage, hs, max_events, hs->seen ? 0 : 200);
    hs->seen = 1;
    const char *e = pt_hub_client_error(hs->client);
    if (n < 0 && n != -EPIPE && n != -ECONNRESET)
        snprintf(hs->error, sizeof hs->error, "%s", e && *e ? e : strerror((int)-n));
    if (pt_hub_client_disconnected(hs->client)) {
        hs->status.disconnected = 1; /* this view's connection, not the job, ended */
        snprintf(hs->error, sizeof hs->error, "%s", e && *e ? e : "disconnected from the hub");
    } else if (pt_hub_client_finished(hs->client)) {
        pt_reader_stats_t st;
        pt_hub_client_stats(hs->client, &st);
        if (st.producer_state == PT_STATE_DEAD) {
            hs->status.died = 1;
            if (e && *e)
                snprintf(hs->error, sizeof hs->error, "%s", e);
        } else {
            hs->status.ended = 1;
        }
    }
    return n;
}

static void HubSource_stats(const Source *src, pt_reader_stats_t *out)
{
    pt_hub_client_stats(((const HubSource *)src)->client, out);
}

static void HubSource_status(const Source *src, SourceStatus *out) { *out = ((const HubSource *)src)->status; }

static const char *HubSource_error(const Source *src) { return ((const HubSource *)src)->error; }

static uint64_t HubSource_pending(const Source *src)
{
    (void)src;
    return 0;
}

static void HubSource_describe(const Source *src, char *out, size_t cap)
{
    (void)src;
    if (cap)
        out[0] = '\0';
}

static void HubSource_json(const Source *src, FILE *out)
{
    /* events this view missed in the hub's queue (told by Lost records, not in
     * events_dropped): events_read + this = what the job wrote while the view was there */
    fprintf(out, "  \"events_missed_in_hub\": %llu,\n",
            (unsigned long long)pt_hub_client_missed(((const HubSource *)src)->client));
}

static void HubSource_close(Source *src)
{
    HubSource *hs = (HubSource *)src;
    pt_hub_client_close(hs->client);
    free(hs);
}

static const SourceClass HubSource_class = {
    .name = "hub",
    .replay = 0,
    .poll = HubSource_poll,
    .stats = HubSource_stats,
    .status = HubSource_status,
    .error = HubSource_error,
    .pending = HubSource_pending,
    .describe = HubSource_describe,
    .json = HubSource_json,
    .close = HubSource_close,
};

uint64_t HubSource_missed(const Source *src)
{
    return src && src->cls == &HubSource_class ? pt_hub_client_missed(((const HubSource *)src)->client) : 0;
}

int HubSource_open(const char *target, Source **out, char *err, size_t errlen)
{
    HubSource *hs = calloc(1, sizeof *hs);
    if (!hs) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    hs->base.cls = &HubSource_class;
    int rc = pt_hub_client_connect(target, 0, &hs->client, err, errlen);
    if (rc) {
        free(hs);
        return rc;
    }
    *out = &hs->base;
    return 0;
}

/* ---- a hub for a job that has none ------------------------------------------ */

/* target's segment (a pid: its newest; or a name) when its job runs and no
 * reader holds it, into name. */
static int free_running_segment(const char *target, char *name, size_t cap)
{
    char want[96];
    int by_pid = target[0] != 0 && strspn(target, "0123456789") == strlen(target);
    uint64_t pid = by_pid ? strtoull(target, NULL, 10) : 0;
    snprintf(want, sizeof want, "%s%s", target[0] == '/' ? "" : "/", target);
    size_t max = 64, count = 0;
    pt_segment_info_t *infos = NULL;
    for (;;) {
        pt_segment_info_t *n = realloc(infos, max * sizeof *infos);
        if (n == NULL) {
            free(infos);
            return -ENOMEM;
        }
        infos = n;
        if (pt_segment_list(infos, max, &count) < 0) {
            free(infos);
            return -ENOENT;
        }
        if (count <= max)
            break;
        max = count + 16;
    }
    int rc = -ENOENT;
    for (size_t i = 0; i < count; i++) { /* newest first, as a reader takes a pid's segment */
        const pt_segment_info_t *si = &infos[i];
        if (by_pid ? si->pid != pid : strcmp(si->name, want) != 0)
            continue;
        if (!si->alive || !si->valid)
            continue;
        if (si->state == PT_STATE_RUNNING && si->consumer_pid == 0 && si->uid == (uint32_t)geteuid()) {
            snprintf(name, cap, "%s", si->name);
            rc = 0;
        }
        break;
    }
    free(infos);
    return rc;
}

int HubSource_startHub(const char *target, char *err, size_t errlen)
{
    char segment[96];
    int rc = free_running_segment(target, segment, sizeof segment);
    if (rc < 0)
        return rc;
    /* pytrace-hub beside this program (one install), else on PATH */
    char hub[4096] = "";
    ssize_t n = readlink("/proc/self/exe", hub, sizeof hub - 32);
    if (n > 0) {
        hub[n] = 0;
        char *slash = strrchr(hub, '/');
        if (slash)
            snprintf(slash + 1, sizeof hub - (size_t)(slash + 1 - hub), "pytrace-hub");
        if (access(hub, X_OK) != 0)
            hub[0] = 0;
    }
    char idle[32];
    snprintf(idle, sizeof idle, "%g", PT_TOP_AUTO_HUB_IDLE_EXIT);
    char *argv[] = {hub[0] ? hub : "pytrace-hub", "--quiet", "--hold", "1", "--idle-exit", idle, segment, NULL};
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return -errno;
    pid_t child = fork();
    if (child < 0) {
        rc = -errno;
        close(pipefd[0]);
        close(pipefd[1]);
        return rc;
    }
    if (child == 0) {
        /* its own session, and a grandchild of ours: a Ctrl-C here does not cut the
         * other readers' stream, and the hub is never our zombie */
        setsid();
        pid_t g = fork();
        if (g != 0)
            _exit(g < 0 ? 1 : 0);
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 2);
        }
        dup2(pipefd[1], 1);
        if (hub[0])
            execv(argv[0], argv);
        else
            execvp(argv[0], argv);
        _exit(127);
    }
    close(pipefd[1]);
    int status;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    /* the hub prints its socket's path once it listens (or exits: the pipe closes) */
    char line[512];
    size_t got = 0;
    rc = -EIO;
    for (;;) {
        struct pollfd p = {pipefd[0], POLLIN, 0};
        int pr = poll(&p, 1, 10000);
        if (pr <= 0)
            break;
        ssize_t r = read(pipefd[0], line + got, sizeof line - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
        if (memchr(line, '\n', got)) {
            rc = 0;
            break;
        }
        if (got >= sizeof line - 1)
            break;
    }
    close(pipefd[0]);
    if (rc)
        snprintf(err, errlen, "pytrace-hub for %s did not start", segment);
    return rc;
}
