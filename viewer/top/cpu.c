#include "cpu.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* pid_max is at most 2^22 on Linux; anything larger read from a segment is not
 * a task id and is never put into a path. */
#define CPU_ID_MAX 4194304ull

int Cpu_parseStat(const char *text, uint64_t *cpu_ticks, uint64_t *start_ticks)
{
    /* "pid (comm) state ppid ... utime(14) stime(15) ... starttime(22) ..." */
    const char *p = strrchr(text, ')');
    if (!p)
        return -EINVAL;
    p++;
    uint64_t utime = 0, stime = 0, start = 0;
    for (int field = 3; field <= 22; field++) {
        while (*p == ' ')
            p++;
        if (!*p)
            return -EINVAL;
        const char *tok = p;
        while (*p && *p != ' ' && *p != '\n')
            p++;
        if (field == 14 || field == 15 || field == 22) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(tok, &end, 10);
            if (end != p || errno || tok[0] == '-')
                return -EINVAL;
            if (field == 14)
                utime = v;
            else if (field == 15)
                stime = v;
            else
                start = v;
        }
        if (*p == '\n')
            p++;
    }
    *cpu_ticks = utime + stime;
    *start_ticks = start;
    return 0;
}

int Cpu_readStat(uint64_t pid, uint64_t tid, uint64_t *cpu_ticks, uint64_t *start_ticks)
{
    char path[96], buf[1024];
    if (pid == 0 || pid > CPU_ID_MAX || tid > CPU_ID_MAX)
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
    return Cpu_parseStat(buf, cpu_ticks, start_ticks);
}

static uint64_t Cpu_clock(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts))
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void CpuMeter_note(CpuMeter *m, uint64_t cpu_ticks, uint64_t start_ticks, uint64_t now_ns, uint64_t boot_ns,
                   uint64_t period_ns)
{
    /* Another start time: the task ended and the kernel gave its id to another
     * one (of any process, when it is the pid), which is not ours to show. */
    if (m->reads && (start_ticks != m->start_ticks || cpu_ticks < m->last_ticks || now_ns < m->last_ns)) {
        m->gone = 1;
        return;
    }
    m->gone = 0;
    m->period_ns = period_ns;
    m->last_ticks = cpu_ticks;
    m->last_ns = now_ns;
    m->last_boot_ns = boot_ns;
    if (!m->reads) {
        m->start_ticks = start_ticks;
        m->first_ticks = m->base_ticks = cpu_ticks;
        m->first_ns = m->base_ns = now_ns;
        m->period_pct = -1;
        m->reads = 1;
        return;
    }
    m->reads++;
    if (now_ns - m->base_ns >= period_ns && now_ns > m->base_ns && m->hz > 0) {
        m->period_pct = (double)(cpu_ticks - m->base_ticks) / (double)m->hz * 1e11 / (double)(now_ns - m->base_ns);
        m->base_ticks = cpu_ticks;
        m->base_ns = now_ns;
    }
}

static double CpuMeter_aliveSeconds(const CpuMeter *m)
{
    return (double)m->last_boot_ns / 1e9 - (double)m->start_ticks / (double)m->hz;
}

double CpuMeter_periodPct(const CpuMeter *m)
{
    if (!m || !m->reads || m->hz <= 0)
        return -1;
    if (m->period_pct >= 0)
        return m->period_pct;
    /* No full period yet. A task younger than two periods (a short-lived
     * worker thread) has lived only about that long: its average since it
     * started is its figure for the period. An older one waits for a period. */
    double alive = CpuMeter_aliveSeconds(m);
    if (alive > 0 && alive * 1e9 <= 2.0 * (double)m->period_ns)
        return CpuMeter_sinceStartPct(m);
    return -1;
}

double CpuMeter_measuredSeconds(const CpuMeter *m)
{
    return m && m->reads ? (double)(m->last_ns - m->first_ns) / 1e9 : -1;
}

double CpuMeter_measuredPct(const CpuMeter *m)
{
    if (!m || !m->reads || m->last_ns <= m->first_ns || m->hz <= 0)
        return -1;
    return (double)(m->last_ticks - m->first_ticks) / (double)m->hz * 1e11 / (double)(m->last_ns - m->first_ns);
}

double CpuMeter_sinceStartPct(const CpuMeter *m)
{
    if (!m || !m->reads || m->hz <= 0)
        return -1;
    double alive = CpuMeter_aliveSeconds(m);
    if (alive <= 0)
        return -1;
    return (double)m->last_ticks / (double)m->hz * 100.0 / alive;
}

double CpuMeter_seconds(const CpuMeter *m)
{
    return m && m->reads && m->hz > 0 ? (double)m->last_ticks / (double)m->hz : -1;
}

void Cpu_init(Cpu *c, uint64_t pid, uint64_t period_ns)
{
    memset(c, 0, sizeof *c);
    c->pid = pid;
    c->period_ns = period_ns;
    long hz = sysconf(_SC_CLK_TCK);
    c->hz = hz > 0 ? hz : 100;
    c->process.hz = c->hz;
    c->process.tid = pid;
}

void Cpu_done(Cpu *c)
{
    free(c->threads);
    c->threads = NULL;
    c->count = c->cap = 0;
}

static CpuMeter *Cpu_find(Cpu *c, uint64_t thread)
{
    for (size_t i = 0; i < c->count; i++)
        if (c->threads[i].thread == thread)
            return &c->threads[i];
    return NULL;
}

const CpuMeter *Cpu_thread(const Cpu *c, uint64_t thread)
{
    const CpuMeter *m = Cpu_find((Cpu *)c, thread);
    return m && m->reads ? m : NULL;
}

static void Cpu_read(const Cpu *c, CpuMeter *m, uint64_t tid, uint64_t now_ns, uint64_t boot_ns)
{
    uint64_t ticks, start;
    if (Cpu_readStat(c->pid, tid, &ticks, &start))
        m->gone = 1; /* keep what was read: the figures of its last second */
    else
        CpuMeter_note(m, ticks, start, now_ns, boot_ns, c->period_ns);
}

int Cpu_sample(Cpu *c, const uint64_t *threads, const uint64_t *tids, size_t n, uint64_t now_ns)
{
    if (!c->pid)
        return 0;
    c->last_sample_ns = now_ns;
    uint64_t boot_ns = Cpu_clock(CLOCK_BOOTTIME);
    int rc = 0;
    /* threads first, the process last: the process's reading then covers all
     * the time its threads were read with, so the process line never shows
     * less than one of its threads (read the other way round, a thread that
     * runs while we read would gain a tick the process reading missed) */
    for (size_t i = 0; i < n; i++) {
        if (!tids[i])
            continue;
        CpuMeter *m = Cpu_find(c, threads[i]);
        if (!m) {
            if (c->count == c->cap) {
                size_t cap = c->cap ? c->cap * 2 : 16;
                CpuMeter *grown = realloc(c->threads, cap * sizeof *grown);
                if (!grown) {
                    rc = -ENOMEM;
                    continue;
                }
                c->threads = grown;
                c->cap = cap;
            }
            m = &c->threads[c->count++];
            memset(m, 0, sizeof *m);
            m->thread = threads[i];
            m->hz = c->hz;
        }
        if (m->tid != tids[i]) { /* a new ThreadStart for the same number: not the same task */
            m->tid = tids[i];
            m->reads = 0;
        }
        Cpu_read(c, m, tids[i], now_ns, boot_ns);
    }
    Cpu_read(c, &c->process, 0, now_ns, boot_ns);
    return rc;
}
