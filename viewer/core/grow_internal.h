/*
 * Growable arrays for the reading core (agg.c, walk.c, export.c): counts and
 * capacities are uint32_t, capacities double from 16. Internal; static inline
 * so each user gets its own copy.
 */
#ifndef PT_VIEWER_GROW_INTERNAL_H
#define PT_VIEWER_GROW_INTERNAL_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* Make room for `need` elements of `elem` bytes in *arr (capacity *cap).
 * Returns 0, or -ENOMEM (the array and *cap unchanged) when out of memory or
 * when the capacity would pass 2^30 elements (indices stay well below
 * UINT32_MAX, the "none" value of the maps, and fit the walk's packed keys). */
static inline int pt_grow(void **arr, uint32_t *cap, size_t elem, uint32_t need)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need)
        ncap *= 2;
    if (ncap > UINT32_MAX / 2)
        return -ENOMEM;
    void *p = realloc(*arr, ncap * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = (uint32_t)ncap;
    return 0;
}

#endif /* PT_VIEWER_GROW_INTERNAL_H */
