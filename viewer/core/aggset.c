/*
 * pt_aggset: the routing of a multi-process stream to one pt_agg_t per
 * process (see aggset.h for the rule). Tags are looked up in a hash map, and
 * the last process routed is remembered: a stream comes in runs of messages of
 * one process (a chunk of events, a batch from one child's ring).
 */
#include "viewer/core/aggset.h"

#include <errno.h>
#include <stdlib.h>

#include "u64map_internal.h"

struct pt_aggset {
    pt_agg_config_t agg_cfg;
    uint32_t max_processes;
    pt_agg_t **aggs;
    uint32_t *tags;
    size_t count;
    size_t cap;
    int claimed;           /* index 0 has its tag */
    size_t last;           /* the index routed last (a fast path) */
    pt_u64map_t by_tag;    /* tag -> index */
    uint64_t refused;
};

int pt_aggset_create(const pt_aggset_config_t *cfg, pt_aggset_t **out)
{
    pt_aggset_t *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    if (cfg)
        s->agg_cfg = cfg->agg;
    s->max_processes = cfg && cfg->max_processes ? cfg->max_processes : PT_AGGSET_DEFAULT_MAX_PROCESSES;
    s->cap = 4;
    s->aggs = calloc(s->cap, sizeof *s->aggs);
    s->tags = calloc(s->cap, sizeof *s->tags);
    if (!s->aggs || !s->tags || pt_u64map_init(&s->by_tag, 16) || pt_agg_create(&s->agg_cfg, &s->aggs[0]))
        goto err;
    s->count = 1;
    *out = s;
    return 0;
err:
    pt_aggset_destroy(s);
    return -ENOMEM;
}

void pt_aggset_destroy(pt_aggset_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->count; i++)
        pt_agg_destroy(s->aggs[i]);
    free(s->aggs);
    free(s->tags);
    pt_u64map_free(&s->by_tag);
    free(s);
}

int pt_aggset_route(pt_aggset_t *s, uint32_t tag, size_t *index)
{
    if (s->claimed && s->tags[s->last] == tag) {
        *index = s->last;
        return 0;
    }
    if (!s->claimed) { /* the first tag seen takes the aggregation made at creation */
        if (pt_u64map_put(&s->by_tag, tag, 0)) {
            s->refused++;
            return -ENOMEM;
        }
        s->claimed = 1;
        s->tags[0] = tag;
        s->last = *index = 0;
        return 0;
    }
    uint32_t known = pt_u64map_get(&s->by_tag, tag);
    if (known != PT_U64MAP_EMPTY) {
        s->last = *index = known;
        return 0;
    }
    if (s->count >= s->max_processes) {
        s->refused++;
        return -ENOSPC;
    }
    if (s->count == s->cap) {
        size_t cap = s->cap * 2;
        pt_agg_t **a = realloc(s->aggs, cap * sizeof *a);
        if (a)
            s->aggs = a;
        uint32_t *t = realloc(s->tags, cap * sizeof *t);
        if (t)
            s->tags = t;
        if (!a || !t) {
            s->refused++;
            return -ENOMEM;
        }
        s->cap = cap;
    }
    pt_agg_t *agg;
    if (pt_agg_create(&s->agg_cfg, &agg)) {
        s->refused++;
        return -ENOMEM;
    }
    if (pt_u64map_put(&s->by_tag, tag, (uint32_t)s->count)) {
        pt_agg_destroy(agg);
        s->refused++;
        return -ENOMEM;
    }
    s->aggs[s->count] = agg;
    s->tags[s->count] = tag;
    s->last = *index = s->count++;
    return 1;
}

int pt_aggset_feed_msg(pt_aggset_t *s, const pt_fb_msg_t *m)
{
    size_t i;
    int rc = pt_aggset_route(s, m->process, &i);
    if (rc < 0)
        return rc;
    return pt_agg_feed_msg(s->aggs[i], m);
}

int pt_aggset_feed_bytes(pt_aggset_t *s, const uint8_t *buf, size_t len)
{
    pt_fb_msg_t m;
    if (pt_fb_parse(buf, len, &m, NULL, 0))
        return -EBADMSG;
    return pt_aggset_feed_msg(s, &m);
}

size_t pt_aggset_count(const pt_aggset_t *s) { return s->count; }

pt_agg_t *pt_aggset_agg(const pt_aggset_t *s, size_t index) { return index < s->count ? s->aggs[index] : NULL; }

uint32_t pt_aggset_tag(const pt_aggset_t *s, size_t index) { return index < s->count ? s->tags[index] : 0; }

long pt_aggset_find_tag(const pt_aggset_t *s, uint32_t tag)
{
    uint32_t i = s->claimed ? pt_u64map_get(&s->by_tag, tag) : PT_U64MAP_EMPTY;
    return i == PT_U64MAP_EMPTY ? -ENOENT : (long)i;
}

long pt_aggset_find_pid(const pt_aggset_t *s, uint64_t pid)
{
    for (size_t i = 0; i < s->count; i++)
        if (pt_agg_process_info(s->aggs[i])->pid == pid)
            return (long)i;
    return -ENOENT;
}

uint64_t pt_aggset_refused(const pt_aggset_t *s) { return s->refused; }

uint32_t pt_aggset_max_processes(const pt_aggset_t *s) { return s->max_processes; }
