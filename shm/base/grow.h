/*
 * Growable arrays: one rule for every "double the capacity until it holds n"
 * of the project. The capacity starts at `first` elements (when the array is
 * empty) and doubles until it holds `need`; the array keeps its contents.
 *
 *   pt_grow_size    size_t capacities (buffers, lists)
 *   pt_grow_zeroed  the same, the new elements zeroed
 *   pt_grow         uint32_t capacities from 16, at most 2^30 elements (the
 *                   reading core's tables: indices stay well below UINT32_MAX,
 *                   the "none" of its maps, and fit the walk's packed keys)
 *
 * Each returns 0, or -ENOMEM with the array and its capacity unchanged (out of
 * memory, or a capacity past the limit or past what size_t holds in bytes).
 */
#ifndef PT_BASE_GROW_H
#define PT_BASE_GROW_H

#include <stddef.h>
#include <stdint.h>

#include "base.h"

PT_BASE_HIDDEN int pt_grow_size(void **arr, size_t *cap, size_t elem, size_t need, size_t first);
PT_BASE_HIDDEN int pt_grow_zeroed(void **arr, size_t *cap, size_t elem, size_t need, size_t first);

/* pt_grow's slow path: the capacity does not hold need. */
PT_BASE_HIDDEN int pt_grow_u32(void **arr, uint32_t *cap, size_t elem, uint32_t need);

/* Inline: the common case (room already) costs one compare at the call. */
static inline int pt_grow(void **arr, uint32_t *cap, size_t elem, uint32_t need)
{
    return need <= *cap ? 0 : pt_grow_u32(arr, cap, elem, need);
}

#endif /* PT_BASE_GROW_H */
