/*
 * A u64 -> u32 open-addressing hash map for the reading core (agg.c, walk.c,
 * export.c): linear probing, load factor <= 1/2, value UINT32_MAX = empty.
 * Internal; static inline so each user gets its own copy.
 */
#ifndef PT_VIEWER_U64MAP_INTERNAL_H
#define PT_VIEWER_U64MAP_INTERNAL_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PT_U64MAP_EMPTY UINT32_MAX

typedef struct pt_u64map {
    uint64_t *keys;
    uint32_t *vals;
    size_t cap; /* power of two */
    size_t used;
} pt_u64map_t;

static inline uint64_t pt_u64map_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* cap is rounded up to a power of two (at least 16): the probes wrap with cap - 1,
 * and with any other cap they would cycle over a part of the table for good */
static inline int pt_u64map_init(pt_u64map_t *m, size_t cap)
{
    size_t want = cap;
    for (cap = 16; cap < want; cap <<= 1)
        ;
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    if (!m->keys || !m->vals) {
        free(m->keys);
        free(m->vals);
        memset(m, 0, sizeof *m);
        return -ENOMEM;
    }
    memset(m->vals, 0xff, cap * sizeof *m->vals);
    m->cap = cap;
    m->used = 0;
    return 0;
}

static inline void pt_u64map_free(pt_u64map_t *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static inline uint32_t pt_u64map_get(const pt_u64map_t *m, uint64_t key)
{
    size_t mask = m->cap - 1;
    for (size_t i = pt_u64map_mix(key) & mask;; i = (i + 1) & mask) {
        if (m->vals[i] == PT_U64MAP_EMPTY)
            return PT_U64MAP_EMPTY;
        if (m->keys[i] == key)
            return m->vals[i];
    }
}

/* Pointer to key's slot value, inserted with `init` if absent; NULL if out of
 * memory. Valid until the next insertion. */
static inline uint32_t *pt_u64map_slot(pt_u64map_t *m, uint64_t key, uint32_t init)
{
    size_t mask = m->cap - 1;
    size_t i = pt_u64map_mix(key) & mask;
    for (;; i = (i + 1) & mask) {
        if (m->vals[i] == PT_U64MAP_EMPTY)
            break;
        if (m->keys[i] == key)
            return &m->vals[i];
    }
    if ((m->used + 1) * 2 > m->cap) {
        pt_u64map_t bigger;
        if (pt_u64map_init(&bigger, m->cap * 2))
            return NULL;
        size_t bmask = bigger.cap - 1;
        for (size_t j = 0; j < m->cap; j++) {
            if (m->vals[j] == PT_U64MAP_EMPTY)
                continue;
            size_t k = pt_u64map_mix(m->keys[j]) & bmask;
            while (bigger.vals[k] != PT_U64MAP_EMPTY)
                k = (k + 1) & bmask;
            bigger.keys[k] = m->keys[j];
            bigger.vals[k] = m->vals[j];
        }
        bigger.used = m->used;
        pt_u64map_free(m);
        *m = bigger;
        mask = m->cap - 1;
        for (i = pt_u64map_mix(key) & mask; m->vals[i] != PT_U64MAP_EMPTY; i = (i + 1) & mask)
            ;
    }
    m->keys[i] = key;
    m->vals[i] = init;
    m->used++;
    return &m->vals[i];
}

/* Insert key -> val, or overwrite its value. val must not be PT_U64MAP_EMPTY.
 * Returns 0 or -ENOMEM (the map unchanged). */
static inline int pt_u64map_put(pt_u64map_t *m, uint64_t key, uint32_t val)
{
    uint32_t *slot = pt_u64map_slot(m, key, val);
    if (!slot)
        return -ENOMEM;
    *slot = val;
    return 0;
}

#endif /* PT_VIEWER_U64MAP_INTERNAL_H */
