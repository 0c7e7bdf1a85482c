/*
 * pt_tasks: asyncio task records (TaskStep, TaskSuspend, TaskAwait; issue 23),
 * written by the sys.monitoring adapter (3.12+) and the PyEval_SetProfile adapter
 * (3.11) at the C call of Context.run that runs a task's step (pt_tasks.c says how). Callers hold the GIL, or, free-threaded, an
 * attached thread state (pt_tasks.c's lock serialises what threads share).
 */
#ifndef PT_RUNTIME_TASKS_H
#define PT_RUNTIME_TASKS_H

#include "pt_tracer.h"

/* Task records are written on 3.11 (the PyEval_SetProfile adapter, with C calls) and
 * 3.12+ (the sys.monitoring adapter). */
#define PT_HAVE_TASKS (PY_VERSION_HEX >= 0x030B0000)

/* Context.run's PyMethodDef (NULL before pt_tasks_init and while task records are off): the
 * adapter's one pointer compare on the C-call path it already takes. Hooks read it while
 * `_tasks_set` may change it from another thread (free-threaded): through
 * PT_TASKS_CTX_RUN_DEF(), a relaxed atomic load (a plain load on x86-64 and arm64). */
PT_HIDDEN extern const PyMethodDef *pt_tasks_ctx_run_def;
#define PT_TASKS_CTX_RUN_DEF() __atomic_load_n(&pt_tasks_ctx_run_def, __ATOMIC_RELAXED)
/* Once, with the GIL: finds Context.run. 0 or -1 (exception set). */
PT_HIDDEN int pt_tasks_init(void);
/* In a fork child: the task lock's holder did not come along (free-threaded). */
PT_HIDDEN void pt_tasks_after_fork_child(void);
/* After the CCall record of Context.run(cb, ...): TaskStep if cb runs a task's step.
 * cb is the call's first argument (3.11: the caller Handle._run's self._callback). */
PT_HIDDEN void pt_tasks_call(PyObject *cb);
/* Before its CReturn / CUnwind: TaskSuspend (+ TaskAwait records when pending). */
PT_HIDDEN void pt_tasks_return(PyObject *cb);
/* _tasks_set(on): task records on (the default) or off, for this process (on older
 * Pythons: accepted, nothing to switch). _tasks_stats() -> {"on", "unnamed": task
 * records not written for want of a symbol (symbol log full), "tasks": Task symbols
 * written in the current or last session, "slots": the size of the table of tasks seen,
 * which holds the live ones: dead tasks leave it when it fills}. */
PT_HIDDEN PyObject *pt_tasks_py_set(PyObject *module, PyObject *on);
PT_HIDDEN PyObject *pt_tasks_py_stats(PyObject *module, PyObject *unused);

#endif /* PT_RUNTIME_TASKS_H */
