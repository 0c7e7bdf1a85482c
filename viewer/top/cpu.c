#include "cpu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shm/base/grow.h"
#include "shm/base/procstat.h"

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
    pt_proc_stat_t st;
    if (pt_proc_stat_read(c->pid, tid, &st))
        m->gone = 1; /* keep what was read: the figures of its last second */
    else
        CpuMeter_note(m, st.utime + st.stime, st.start, now_ns, boot_ns, c->period_ns);
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
            if (pt_grow_size((void **)&c->threads, &c->cap, sizeof *c->threads, c->count + 1, 16) < 0) {
                rc = -ENOMEM;
                continue;
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
