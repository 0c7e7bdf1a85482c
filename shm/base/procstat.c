#include "procstat.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int pt_proc_stat_parse(const char *text, pt_proc_stat_t *out)
{
    /* "pid (comm) state ppid ... utime(14) stime(15) ... starttime(22) ..." */
    const char *p = strrchr(text, ')');
    if (p == NULL)
        return -EINVAL;
    p++;
    pt_proc_stat_t st = {0};
    for (int field = 3; field <= 22; field++) {
        while (*p == ' ')
            p++;
        if (*p == 0 || *p == '\n')
            return -EINVAL;
        const char *tok = p;
        while (*p && *p != ' ' && *p != '\n')
            p++;
        if (field == 3) {
            st.state = *tok;
            continue;
        }
        if (field != 4 && field != 14 && field != 15 && field != 22)
            continue;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(tok, &end, 10);
        if (end != p || errno || tok[0] == '-')
            return -EINVAL;
        if (field == 4)
            st.ppid = v;
        else if (field == 14)
            st.utime = v;
        else if (field == 15)
            st.stime = v;
        else
            st.start = v;
    }
    *out = st;
    return 0;
}

int pt_proc_stat_read(uint64_t pid, uint64_t tid, pt_proc_stat_t *out)
{
    char path[96], buf[1024];
    if (pid == 0 || pid > PT_PROC_ID_MAX || tid > PT_PROC_ID_MAX)
        return -EINVAL;
    if (tid)
        snprintf(path, sizeof path, "/proc/%" PRIu64 "/task/%" PRIu64 "/stat", pid, tid);
    else
        snprintf(path, sizeof path, "/proc/%" PRIu64 "/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n;
    do
        n = read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    int err = n < 0 ? -errno : 0;
    close(fd);
    if (err)
        return err;
    buf[n] = 0;
    return pt_proc_stat_parse(buf, out);
}
