/*
 * The auto-hub policy (autohub.h): which segment is free, and starting
 * pytrace-hub for it.
 */
#include "viewer/hub/autohub.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/segment.h"

/* Close every fd from lowfd up, in a forked child (async-signal-safe calls only):
 * close_range where the kernel has it (glibc's wrapper needs 2.34), else one by one. */
static void close_from(int lowfd)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)lowfd, ~0u, 0u) == 0)
        return;
#endif
    struct rlimit rl;
    long max = 65536;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (long)rl.rlim_cur < max)
        max = (long)rl.rlim_cur;
    for (long fd = lowfd; fd < max; fd++)
        close((int)fd);
}

int pt_autohub_free_segment(const char *target, char *name, size_t cap)
{
    char want[96];
    int by_pid = target[0] != 0 && strspn(target, "0123456789") == strlen(target);
    uint64_t pid = by_pid ? strtoull(target, NULL, 10) : 0;
    snprintf(want, sizeof want, "%s%s", target[0] == '/' ? "" : "/", target);
    size_t count = 0;
    pt_segment_info_t *infos = NULL;
    if (pt_segment_list_alloc(&infos, &count) < 0)
        return -ENOENT;
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

int pt_autohub_start(const char *target, const char *hub, char *segment, size_t segcap, char *sock,
                     size_t sockcap, char *err, size_t errlen)
{
    char seg[96];
    int rc = pt_autohub_free_segment(target, seg, sizeof seg);
    if (rc < 0)
        return rc;
    if (segment)
        snprintf(segment, segcap, "%s", seg);
    /* pytrace-hub as given, else beside this program (one install), else on PATH */
    char path[4096] = "";
    if (hub) {
        snprintf(path, sizeof path, "%s", hub);
    } else {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
        if (n > 0) {
            path[n] = 0;
            char *slash = strrchr(path, '/');
            if (slash)
                snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "pytrace-hub");
            if (access(path, X_OK) != 0)
                path[0] = 0;
        }
    }
    char idle[32];
    snprintf(idle, sizeof idle, "%g", PT_AUTOHUB_IDLE_EXIT);
    char *argv[] = {path[0] ? path : "pytrace-hub", "--quiet", "--hold", "1", "--idle-exit", idle, seg, NULL};
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0) {
        rc = -errno;
        snprintf(err, errlen, "pytrace-hub for %s did not start: %s", seg, strerror(-rc));
        return rc;
    }
    pid_t child = fork();
    if (child < 0) {
        rc = -errno;
        close(pipefd[0]);
        close(pipefd[1]);
        snprintf(err, errlen, "pytrace-hub for %s did not start: %s", seg, strerror(-rc));
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
        /* none of the caller's other files (a pipe someone reads to its end, a
         * socket): the hub may outlive the caller */
        close_from(3);
        if (path[0])
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
        int pr = poll(&p, 1, PT_AUTOHUB_START_TIMEOUT_MS);
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
    if (rc) {
        snprintf(err, errlen, "pytrace-hub for %s did not start", seg);
        return rc;
    }
    line[got] = 0;
    *strchr(line, '\n') = 0;
    if (sock)
        snprintf(sock, sockcap, "%s", line);
    return 0;
}
