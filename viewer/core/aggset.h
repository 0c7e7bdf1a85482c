/*
 * pt_aggset: one aggregation (pt_agg_t) per process of a stream.
 *
 * A stream may hold several processes: the hub follows a job's children and a
 * merged or recorded process tree tags each message with Message.process
 * (schema/pt_wire.h "Tagged messages"). Function ids, thread numbers and clocks
 * are per process, so each process needs an aggregation of its own. This module
 * is the one routing rule every reader uses (pytrace-top, _pytrace.Aggregator):
 *
 *   - A process's aggregation is made when its tag is first seen; processes are
 *     numbered (index) in that order.
 *   - The aggregation made at creation (index 0) belongs to the first tag seen,
 *     whatever it is: an untagged stream (tag 0) and a tagged one whose first
 *     message names process 5 both have their first process at index 0 (the
 *     job's root, as the hub and the recorder send it first).
 *   - Bounded: at most max_processes aggregations. Messages of further
 *     processes (a hostile stream inventing tags) are not read and counted
 *     (pt_aggset_refused); so are those of a process whose aggregation could not
 *     be made for want of memory.
 *
 * Threading: as pt_agg_t, one thread at a time. Errors: 0 or a negative errno.
 */
#ifndef PT_VIEWER_AGGSET_H
#define PT_VIEWER_AGGSET_H

#include <stddef.h>
#include <stdint.h>

#include "viewer/core/agg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Processes kept by default: a job with more in its lifetime shows the first ones. */
#define PT_AGGSET_DEFAULT_MAX_PROCESSES 1024u

typedef struct pt_aggset pt_aggset_t;

typedef struct pt_aggset_config {
    pt_agg_config_t agg;     /* every process's aggregation */
    uint32_t max_processes;  /* 0 = PT_AGGSET_DEFAULT_MAX_PROCESSES */
} pt_aggset_config_t;

/* A set holding one (still unclaimed) aggregation. cfg may be NULL. 0 or -ENOMEM. */
int pt_aggset_create(const pt_aggset_config_t *cfg, pt_aggset_t **out);
void pt_aggset_destroy(pt_aggset_t *set);

/* The index of process `tag`, its aggregation made on first sight.
 * Returns 0 (known, or the first tag claiming index 0), 1 (a new process: *index
 * is its index, the last one), -ENOSPC (past max_processes) or -ENOMEM; both
 * errors count one refused message and leave *index alone. */
int pt_aggset_route(pt_aggset_t *set, uint32_t tag, size_t *index);

/* Route m by m->process and feed it to that process's aggregation. Returns
 * pt_agg_feed_msg's result, or -ENOSPC / -ENOMEM from the routing (the message
 * is then not read, and counted). */
int pt_aggset_feed_msg(pt_aggset_t *set, const pt_fb_msg_t *m);
/* Verify and decode one size-prefixed message, then pt_aggset_feed_msg;
 * -EBADMSG if the verifier refuses it. */
int pt_aggset_feed_bytes(pt_aggset_t *set, const uint8_t *buf, size_t len);

/* Processes seen (at least 1: index 0 exists before anything is read). */
size_t pt_aggset_count(const pt_aggset_t *set);
/* Process `index`'s aggregation; NULL if index >= pt_aggset_count. */
pt_agg_t *pt_aggset_agg(const pt_aggset_t *set, size_t index);
/* Process `index`'s Message.process tag (0 for index >= count). */
uint32_t pt_aggset_tag(const pt_aggset_t *set, size_t index);
/* The index of tag, or -ENOENT. */
long pt_aggset_find_tag(const pt_aggset_t *set, uint32_t tag);
/* The first process whose ProcessInfo gave this pid, or -ENOENT. */
long pt_aggset_find_pid(const pt_aggset_t *set, uint64_t pid);

/* Messages not read because their process was past the limit (or could not be made). */
uint64_t pt_aggset_refused(const pt_aggset_t *set);
uint32_t pt_aggset_max_processes(const pt_aggset_t *set);

#ifdef __cplusplus
}
#endif

#endif /* PT_VIEWER_AGGSET_H */
