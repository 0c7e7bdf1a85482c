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

/* The ITT collector (pt_itt.c): PyTorch's ops as spans. Not a hook adapter: a record
 * source outside the interpreter's hooks, through pt_foreign_enter. pt_itt_init once
 * (0 or a negative errno); _itt_set(on) switches recording; _itt_stats() -> dict. */
PT_HIDDEN int pt_itt_init(void);
PT_HIDDEN PyObject *pt_itt_py_set(PyObject *module, PyObject *on);
PT_HIDDEN PyObject *pt_itt_py_stats(PyObject *module, PyObject *unused);
PT_HIDDEN PyObject *pt_itt_py_exec_then(PyObject *module, PyObject *args);

#endif /* PT_RUNTIME_ADAPTERS_H */
