#include "grow.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The one doubling rule; max_cap bounds the capacity in elements. */
static int grow(void **arr, size_t *cap, size_t elem, size_t need, size_t first, size_t max_cap, int zero)
{
    if (need <= *cap)
        return 0;
    if (elem == 0 || max_cap > SIZE_MAX / elem)
        max_cap = elem ? SIZE_MAX / elem : 0;
    size_t ncap = *cap ? *cap : (first ? first : 1);
    while (ncap < need) {
        if (ncap > max_cap / 2)
            return -ENOMEM;
        ncap *= 2;
    }
    if (ncap > max_cap)
        return -ENOMEM;
    void *p = realloc(*arr, ncap * elem);
    if (p == NULL)
        return -ENOMEM;
    if (zero)
        memset((char *)p + *cap * elem, 0, (ncap - *cap) * elem);
    *arr = p;
    *cap = ncap;
    return 0;
}

int pt_grow_size(void **arr, size_t *cap, size_t elem, size_t need, size_t first)
{
    return grow(arr, cap, elem, need, first, SIZE_MAX, 0);
}

int pt_grow_zeroed(void **arr, size_t *cap, size_t elem, size_t need, size_t first)
{
    return grow(arr, cap, elem, need, first, SIZE_MAX, 1);
}

int pt_grow_u32(void **arr, uint32_t *cap, size_t elem, uint32_t need)
{
    size_t c = *cap;
    int rc = grow(arr, &c, elem, need, 16, UINT32_MAX / 2, 0);
    if (rc == 0)
        *cap = (uint32_t)c;
    return rc;
}
