/*
 * The hook adapters as the module sees them: each registers its pt_hook_ops_t
 * with the core (pt_tracer_hook_register) if it works on this Python, and does
 * nothing otherwise. module.c calls them once, in the order start() tries them.
 * The core never includes this header (tests/unit/layers).
 *
 * Each returns 0 or a negative errno (pt_tracer_hook_register's).
 */
#ifndef PT_RUNTIME_ADAPTERS_H
#define PT_RUNTIME_ADAPTERS_H

#include "pt_tracer.h"

/* sys.monitoring (3.12+), pt_monitoring.c */
PT_HIDDEN int pt_monitoring_register(void);
/* The frame-evaluation function, PEP 523 (3.11, without C calls), pt_evalframe.c */
PT_HIDDEN int pt_evalframe_register(void);
/* PyEval_SetProfile (3.10/3.11), pt_profile.c */
PT_HIDDEN int pt_profile_register(void);

#endif /* PT_RUNTIME_ADAPTERS_H */
