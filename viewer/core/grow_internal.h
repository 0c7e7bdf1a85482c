/*
 * The reading core's growable arrays are the base layer's (shm/base/grow.h):
 * pt_grow, uint32_t capacities from 16. Kept as this name for the files that
 * include it still (agg.c, aggset.c, export.c); new code includes
 * "shm/base/grow.h".
 */
#ifndef PT_VIEWER_GROW_INTERNAL_H
#define PT_VIEWER_GROW_INTERNAL_H

#include "shm/base/grow.h"

#endif /* PT_VIEWER_GROW_INTERNAL_H */
