/*
 * pt_clock: pick the tick source and calibrate it.
 *
 * The TSC is used only when it is invariant (constant rate across P/C-states,
 * CPUID 0x80000007 EDX bit 8) AND the kernel itself trusts it as its
 * clocksource: the kernel checks TSC synchronisation across CPUs at boot and
 * switches away when it misbehaves, so "current_clocksource == tsc" is the
 * cheapest proof that ticks read on different CPUs are comparable.
 */
#include "clock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#define PT_CLOCKSOURCE_PATH "/sys/devices/system/clocksource/clocksource0/current_clocksource"
#define PT_CALIBRATE_NS 20000000u /* 20 ms */

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int tsc_invariant(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned int eax, ebx, ecx, edx;
    if ((unsigned int)__get_cpuid_max(0x80000000u, NULL) < 0x80000007u)
        return 0;
    if (!__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx))
        return 0;
    return (edx >> 8) & 1u;
#else
    return 0;
#endif
}

static int kernel_uses_tsc(void)
{
    char buf[32] = {0};
    FILE *f = fopen(PT_CLOCKSOURCE_PATH, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return strcmp(buf, "tsc") == 0;
}

#if defined(__x86_64__) || defined(__i386__)
/* One (tsc, monotonic ns) pair taken as close together as possible: the
 * monotonic reading is the midpoint of two around the rdtsc, retried a few
 * times to keep the tightest bracket (a preemption widens it). */
static void tsc_pair(uint64_t *tsc, uint64_t *mono)
{
    uint64_t best_width = UINT64_MAX;
    for (int i = 0; i < 8; i++) {
        uint64_t m0 = pt_monotonic_ns();
        uint64_t t = __rdtsc();
        uint64_t m1 = pt_monotonic_ns();
        if (m1 - m0 < best_width) {
            best_width = m1 - m0;
            *tsc = t;
            *mono = m0 + (m1 - m0) / 2;
        }
    }
}
#endif

int pt_clock_init(pt_clock_t *clock, int force_kind)
{
    if (clock == NULL || (force_kind != -1 && force_kind != PT_CLOCK_MONOTONIC && force_kind != PT_CLOCK_TSC))
        return -EINVAL;
    memset(clock, 0, sizeof *clock);

#if defined(__x86_64__) || defined(__i386__)
    if (force_kind != PT_CLOCK_MONOTONIC && tsc_invariant() && kernel_uses_tsc()) {
        uint64_t t0 = 0, m0 = 0, t1 = 0, m1 = 0;
        tsc_pair(&t0, &m0);
        struct timespec nap = {.tv_sec = 0, .tv_nsec = PT_CALIBRATE_NS};
        while (nanosleep(&nap, &nap) != 0 && errno == EINTR) {
        }
        tsc_pair(&t1, &m1);
        if (t1 > t0 && m1 > m0) {
            __extension__ unsigned __int128 tps = (unsigned __int128)(t1 - t0) * 1000000000u / (m1 - m0);
            clock->kind = PT_CLOCK_TSC;
            clock->ticks_per_second = (uint64_t)tps;
            tsc_pair(&clock->base_ticks, &clock->base_monotonic_ns);
            clock->base_realtime_ns = realtime_ns() - (pt_monotonic_ns() - clock->base_monotonic_ns);
            return 0;
        }
    }
#else
    (void)tsc_invariant;
    (void)kernel_uses_tsc;
#endif
    clock->kind = PT_CLOCK_MONOTONIC;
    clock->ticks_per_second = 1000000000u;
    clock->base_monotonic_ns = pt_monotonic_ns();
    clock->base_realtime_ns = realtime_ns();
    clock->base_ticks = clock->base_monotonic_ns;
    return 0;
}
