/*
 * pt_clock: one monotonic tick source per segment.
 *
 * The TSC where it is invariant (CPUID 0x80000007 EDX bit 8) and the kernel
 * uses it (clocksource tsc), else CLOCK_MONOTONIC in nanoseconds.
 * pt_clock_init calibrates ticks_per_second against CLOCK_MONOTONIC and takes
 * a base point (ticks, monotonic ns, realtime ns) for conversions.
 */
#ifndef PT_SHM_CLOCK_H
#define PT_SHM_CLOCK_H

#include <stdint.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "../schema/pt_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pt_clock {
    uint32_t kind;               /* enum pt_clock_kind */
    uint64_t ticks_per_second;
    uint64_t base_ticks;
    uint64_t base_monotonic_ns;
    uint64_t base_realtime_ns;
} pt_clock_t;

/* Pick the source and calibrate (takes about 20 ms for the TSC). force_kind:
 * -1 = best available, else enum pt_clock_kind (TSC falls back if absent). */
int pt_clock_init(pt_clock_t *clock, int force_kind);

static inline uint64_t pt_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CPU time of the calling thread in ns (CLOCK_THREAD_CPUTIME_ID: a system
 * call, about 0.2-0.5 us; never on the hot path, see ring.h "CPU time").
 * 0 if the clock cannot be read. */
static inline uint64_t pt_thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CPU time in ns on a thread's CPU clock (pthread_getcpuclockid), readable
 * from another thread while that thread lives. 0 and *ns, or -1 (a thread
 * that ended: EINVAL). */
static inline int pt_cpu_clock_ns(clockid_t id, uint64_t *ns)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return -1;
    *ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    return 0;
}

/* Read the clock: rdtsc or CLOCK_MONOTONIC ns, per clock->kind. */
static inline uint64_t pt_clock_now(const pt_clock_t *clock)
{
#if defined(__x86_64__) || defined(__i386__)
    if (clock->kind == PT_CLOCK_TSC)
        return __rdtsc();
#endif
    (void)clock;
    return pt_monotonic_ns();
}

/* Ticks to nanoseconds since base (monotonic ns = base_monotonic_ns + this). */
static inline uint64_t pt_clock_ticks_to_ns(const pt_clock_t *clock, uint64_t ticks)
{
    if (ticks < clock->base_ticks)
        return 0;
    __extension__ unsigned __int128 delta = (unsigned __int128)(ticks - clock->base_ticks) * 1000000000u;
    return (uint64_t)(delta / clock->ticks_per_second);
}

#ifdef __cplusplus
}
#endif

#endif /* PT_SHM_CLOCK_H */
