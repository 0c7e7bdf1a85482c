/*
 * pytrace-top's CPU meter (its /proc reader, shm/base/procstat, is tested in
 * tests/unit/base): a reused task id not taken for the task, and the three
 * figures (last period, measured, since start) computed from the kernel's
 * ticks. The live part spins this thread until the kernel
 * has counted some CPU time for it, and sleeps another thread meanwhile; it
 * asserts what the kernel counted, never a duration.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "viewer/top/cpu.h"

static void test_meter_arithmetic(void)
{
    CpuMeter m = {.hz = 100};
    CHECK(CpuMeter_periodPct(&m) < 0 && CpuMeter_measuredPct(&m) < 0 && CpuMeter_seconds(&m) < 0);
    CpuMeter_note(&m, 0, 500, 0, 8000000000ull, 1000000000ull);
    CHECK(CpuMeter_periodPct(&m) < 0); /* no full period yet, and 3 s old: wait for one */
    CpuMeter_note(&m, 50, 500, 1000000000ull, 9000000000ull, 1000000000ull);
    CHECKF(fabs(CpuMeter_periodPct(&m) - 50.0) < 1e-9, "%f", CpuMeter_periodPct(&m));
    CpuMeter_note(&m, 60, 500, 1500000000ull, 10000000000ull, 1000000000ull);
    CHECKF(fabs(CpuMeter_periodPct(&m) - 50.0) < 1e-9, "%f", CpuMeter_periodPct(&m)); /* half a period: kept */
    CHECKF(fabs(CpuMeter_measuredPct(&m) - 40.0) < 1e-9, "%f", CpuMeter_measuredPct(&m)); /* 0.6 s in 1.5 s */
    CHECKF(fabs(CpuMeter_measuredSeconds(&m) - 1.5) < 1e-9, "%f", CpuMeter_measuredSeconds(&m));
    CHECKF(fabs(CpuMeter_seconds(&m) - 0.6) < 1e-9, "%f", CpuMeter_seconds(&m));
    /* started 5 s after boot, read 10 s after boot: 0.6 s of CPU in 5 s */
    CHECKF(fabs(CpuMeter_sinceStartPct(&m) - 12.0) < 1e-9, "%f", CpuMeter_sinceStartPct(&m));
    /* a task 0.5 s old, before its first period: its average since it started */
    CpuMeter young = {.hz = 100};
    CpuMeter_note(&young, 20, 1000, 0, 10500000000ull, 1000000000ull);
    CHECKF(fabs(CpuMeter_periodPct(&young) - 40.0) < 1e-9, "%f", CpuMeter_periodPct(&young));
    /* the id now names another task (another start time): not ours, the meter
     * is gone and keeps the figures of the task it measured */
    CpuMeter_note(&m, 3, 900, 2000000000ull, 11000000000ull, 1000000000ull);
    CHECK(m.gone);
    CHECK_EQ(m.reads, 3);
    CHECKF(fabs(CpuMeter_seconds(&m) - 0.6) < 1e-9, "%f", CpuMeter_seconds(&m));
    CHECKF(fabs(CpuMeter_measuredPct(&m) - 40.0) < 1e-9, "%f", CpuMeter_measuredPct(&m));
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile int sleeper_stop;
static volatile uint64_t sleeper_tid;

static void *sleeper(void *arg)
{
    (void)arg;
    sleeper_tid = (uint64_t)syscall(SYS_gettid);
    while (!sleeper_stop) {
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void test_live(void)
{
    uint64_t pid = (uint64_t)getpid(), me = (uint64_t)syscall(SYS_gettid);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, sleeper, NULL) == 0);
    while (!sleeper_tid)
        sched_yield();
    Cpu c;
    Cpu_init(&c, pid, 1000000000ull);
    uint64_t threads[2] = {1, 2}, tids[2] = {me, sleeper_tid};
    CHECK_EQ(Cpu_sample(&c, threads, tids, 2, mono_ns()), 0);
    const CpuMeter *spin = Cpu_thread(&c, 1), *nap = Cpu_thread(&c, 2);
    REQUIRE(spin && nap && c.process.reads == 1);
    uint64_t spin0 = spin->last_ticks, nap0 = nap->last_ticks;
    /* spin until the kernel has counted 20 ticks more for this thread */
    volatile uint64_t sink = 0;
    for (long round = 0; round < 100000000L && spin->last_ticks < spin0 + 20; round++) {
        for (int i = 0; i < 100000; i++)
            sink += (uint64_t)i;
        CHECK_EQ(Cpu_sample(&c, threads, tids, 2, mono_ns()), 0);
    }
    sleeper_stop = 1;
    pthread_join(th, NULL);
    CHECK(spin->last_ticks >= spin0 + 20);
    CHECKF(nap->last_ticks <= nap0 + 2, "the sleeping thread used %llu ticks",
           (unsigned long long)(nap->last_ticks - nap0));
    double pct = CpuMeter_measuredPct(spin);
    CHECKF(pct > 0 && pct <= 110.0, "%f", pct); /* one thread: at most one core (and a tick) */
    CHECK(CpuMeter_measuredPct(nap) < CpuMeter_measuredPct(spin));
    /* The process, read after its threads, counts them. The kernel rounds
     * each task's utime and stime down to ticks separately (and splits the
     * process's time in its own ratio), so the process may read one tick
     * under a thread that did all the work: never more than one. */
    CHECKF(c.process.last_ticks + 1 >= spin->last_ticks, "process %llu ticks, its thread %llu",
           (unsigned long long)c.process.last_ticks, (unsigned long long)spin->last_ticks);
    /* a thread that ended: its meter keeps its last figures. pthread_join
     * returns when the kernel clears the thread's tid, before it removes the
     * task: wait until /proc no longer lists it (read before that, the
     * thread is still there and its reading is a true one) */
    uint64_t gone_tid = sleeper_tid;
    char task[64];
    snprintf(task, sizeof task, "/proc/self/task/%llu", (unsigned long long)gone_tid);
    for (int i = 0; i < 10000 && access(task, F_OK) == 0; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    REQUIRE(access(task, F_OK) != 0);
    uint64_t last = nap->last_ticks;
    CHECK_EQ(Cpu_sample(&c, threads + 1, &gone_tid, 1, mono_ns()), 0);
    CHECK(nap->gone && nap->reads > 0 && nap->last_ticks == last);
    Cpu_done(&c);
}

int main(void)
{
    test_meter_arithmetic();
    test_live();
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures != 0;
}
