/*
 * shm/base: the bottom layer of the house, below shm/ (DESIGN.md, "The target
 * house"): small helpers that every floor above writes otherwise again -- a
 * growable array (grow.h), a one-line error (err.h), the /proc/PID/stat reader
 * (procstat.h). It includes no other file of the project, and its functions
 * are hidden from the users of libpytrace.so and of the extension.
 */
#ifndef PT_BASE_H
#define PT_BASE_H

#if defined(__GNUC__)
#define PT_BASE_HIDDEN __attribute__((visibility("hidden")))
#define PT_BASE_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define PT_BASE_HIDDEN
#define PT_BASE_PRINTF(f, a)
#endif

#endif /* PT_BASE_H */
