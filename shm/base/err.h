/*
 * The one-line error every library function of the project hands back in a
 * caller's buffer (`char *err, size_t errlen`): what went wrong and what to do.
 */
#ifndef PT_BASE_ERR_H
#define PT_BASE_ERR_H

#include <stddef.h>

#include "base.h"

/* Format into err; nothing when err is NULL or errlen is 0. Truncated to fit. */
PT_BASE_HIDDEN void pt_set_err(char *err, size_t errlen, const char *fmt, ...) PT_BASE_PRINTF(3, 4);

#endif /* PT_BASE_ERR_H */
