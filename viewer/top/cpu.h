/*
 * Cpu: how much CPU a traced job's process and threads use, read by the
 * viewer from the kernel (/proc/PID/stat and /proc/PID/task/TID/stat:
 * utime + stime), never by the traced process, so the hot path pays nothing.
 *
 * pytrace-top's table is wall time: a frame that sleeps or waits for the GIL
 * counts as much as one that computes, so two threads can add up to 200% on a
 * process that used one core. These figures say how much of that time a CPU
 * worked (100% = one core, as in top).
 *
 * A meter keeps its first read, the read that opened its current period, and
 * its latest read, and gives three figures:
 *   - CpuMeter_periodPct: over the last full period (the screen, like top);
 *     before the first one, for a task younger than two periods, its
 *     average since it started (short-lived threads get a figure too);
 *   - CpuMeter_measuredPct: from its first read to its latest (--once over a
 *     --duration);
 *   - CpuMeter_sinceStartPct: CPU time over the time since the task started
 *     (like ps), for --once when there was no time to measure.
 * A task id that the kernel has given to another task (its start time
 * differs) is not read any more: the meter is gone and keeps its figures.
 * Every figure is negative when unknown.
 *
 * Cpu_* functions return 0 or a negative errno. Not thread-safe (one viewer
 * thread uses it).
 */
#ifndef PT_TOP_CPU_H
#define PT_TOP_CPU_H

#include <stddef.h>
#include <stdint.h>

typedef struct CpuMeter {
    uint64_t thread;         /* the segment's thread number; 0 for the process */
    uint64_t tid;            /* kernel task id (the process: its pid) */
    uint64_t start_ticks;    /* the task's start, clock ticks after boot */
    uint64_t first_ticks, first_ns;  /* CPU ticks and monotonic ns at the first read */
    uint64_t base_ticks, base_ns;    /* ... at the read that opened the current period */
    uint64_t last_ticks, last_ns;    /* ... at the latest read */
    uint64_t last_boot_ns;   /* CLOCK_BOOTTIME at the latest read */
    double period_pct;       /* over the last full period; < 0 until one passed */
    uint64_t period_ns;
    long hz;                 /* clock ticks per second */
    int reads;               /* good reads since the (re)start; 0 = never read */
    int gone;                /* the latest read failed: the task has ended */
} CpuMeter;

typedef struct Cpu {
    uint64_t pid;            /* 0: nothing to read (a recording, or pid unknown) */
    uint64_t period_ns;
    uint64_t last_sample_ns; /* monotonic ns of the last Cpu_sample */
    long hz;
    CpuMeter process;
    CpuMeter *threads;
    size_t count, cap;
} Cpu;

/* Fold one read into a meter (cpu_ticks: utime + stime, start_ticks: start,
 * as pt_proc_stat_read gives them; now_ns monotonic, boot_ns CLOCK_BOOTTIME). */
void CpuMeter_note(CpuMeter *m, uint64_t cpu_ticks, uint64_t start_ticks, uint64_t now_ns, uint64_t boot_ns,
                   uint64_t period_ns);

double CpuMeter_periodPct(const CpuMeter *m);
double CpuMeter_measuredPct(const CpuMeter *m);
double CpuMeter_sinceStartPct(const CpuMeter *m);
double CpuMeter_seconds(const CpuMeter *m);       /* CPU seconds at the latest read */
double CpuMeter_measuredSeconds(const CpuMeter *m); /* wall seconds from first to latest read */

void Cpu_init(Cpu *c, uint64_t pid, uint64_t period_ns);
void Cpu_done(Cpu *c);

/* Read the process and the given threads (thread numbers and their kernel
 * ids; only threads that have not ended). Any number of reads may fall in a
 * period; each period closes at the first read a period after it opened.
 * -ENOMEM if a new thread's meter cannot be kept. */
int Cpu_sample(Cpu *c, const uint64_t *threads, const uint64_t *tids, size_t n, uint64_t now_ns);

/* The meter of a thread number, or NULL if it was never read. */
const CpuMeter *Cpu_thread(const Cpu *c, uint64_t thread);

#endif
