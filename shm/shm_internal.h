/*
 * Helpers shared by the shm/ modules; hidden from the library's users.
 */
#ifndef PT_SHM_INTERNAL_H
#define PT_SHM_INTERNAL_H

#include <stddef.h>

#if defined(__GNUC__)
#define PT_SHM_HIDDEN __attribute__((visibility("hidden")))
#define PT_SHM_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define PT_SHM_HIDDEN
#define PT_SHM_PRINTF(f, a)
#endif

/* pt_set_err: the one-line error of the base layer. */
#include "shm/base/err.h"

#include <stdint.h>

struct pt_segment;

/* Producer: reserve (posix_fallocate) the symbol log's pages up to byte
 * `upto` of the log, in doubling steps. Returns the bytes of the log that may
 * be written now (less than upto when /dev/shm is full). Call under the symbol
 * log's lock. A segment that is not the producer's returns the log's size. */
PT_SHM_HIDDEN uint64_t pt_segment_reserve_symlog(struct pt_segment *seg, uint64_t upto);

#endif /* PT_SHM_INTERNAL_H */
