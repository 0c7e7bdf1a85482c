/*
 * pt_tasks: asyncio task records (issue 23) for the sys.monitoring adapter.
 *
 * Every task step runs as Handle._run -> ctx.run(cb, *args): a C call (the
 * bound builtin method Context.run, through CALL_FUNCTION_EX) whose first
 * argument cb is a TaskStepMethWrapper (first step), a bound builtin method of
 * a C Task (wake-ups), or a bound Python method of the pure-Python
 * asyncio.tasks._PyTask (__step / __wakeup). cb.__self__ is the task.
 * pt_monitoring.c calls pt_tasks_call after the CCall record of Context.run and
 * pt_tasks_return before its CReturn / CUnwind: TaskStep, then TaskSuspend with
 * the task's state and, when pending, the TaskAwait records that
 * pytrace._tasks.suspend() names (Python, run only at a pending suspend;
 * sys.monitoring fires no events inside a callback, so it is not recorded).
 *
 * Task symbols: one per task object, interned on the task's first step (its
 * name then: get_name(); file: its coroutine's __qualname__; line: a serial
 * 1, 2, ... in the session). Kept in a dict keyed by the task's address with a
 * weak reference beside the id: a task is never kept alive, and an address
 * reused by a new task fails the weak reference check and gets a new symbol.
 * The dict is emptied when a new session begins. A full symbol log: the task's
 * records are not written (the first error says so; pt_tasks_unnamed counts).
 */
#include "pt_tasks.h"

#include "pt_tracer_inline.h"
#include "pt_tracer_internal.h"
#include "shm/symlog.h"

#include <errno.h>
#include <string.h>

#if PT_HAVE_MONITORING

const PyMethodDef *pt_tasks_ctx_run_def;

static PyObject *g_task_types[2]; /* asyncio.tasks.Task, asyncio.tasks._PyTask (strong) */
static PyObject *g_syms;          /* {address: (weakref, id)} in session g_epoch */
static PyObject *g_labels;        /* {label: id} in session g_epoch */
static PyObject *g_suspend;       /* pytrace._tasks.suspend */
static PyTypeObject *g_step_wrapper; /* _asyncio.TaskStepMethWrapper, once seen */
static uint32_t g_epoch;
static uint32_t g_serial;
static uint64_t g_unnamed;        /* task records not written: no symbol (symbol log full) */

static const PyMethodDef *g_ctx_run_def; /* Context.run's, found once */
static int g_off;                        /* _tasks_set(False): no task records */

int pt_tasks_init(void)
{
    if (g_ctx_run_def) {
        pt_tasks_ctx_run_def = g_off ? NULL : g_ctx_run_def;
        return 0;
    }
    PyObject *run = PyObject_GetAttrString((PyObject *)&PyContext_Type, "run");
    if (run == NULL)
        return -1;
    if (Py_TYPE(run) == &PyMethodDescr_Type)
        g_ctx_run_def = ((PyMethodDescrObject *)run)->d_method;
    Py_DECREF(run);
    pt_tasks_ctx_run_def = g_off ? NULL : g_ctx_run_def;
    return 0;
}

PyObject *pt_tasks_py_set(PyObject *module, PyObject *on)
{
    (void)module;
    int v = PyObject_IsTrue(on);
    if (v < 0)
        return NULL;
    g_off = !v;
    pt_tasks_ctx_run_def = g_off ? NULL : g_ctx_run_def;
    Py_RETURN_NONE;
}

PyObject *pt_tasks_py_stats(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return Py_BuildValue("{s:O,s:K,s:I}", "on", g_off ? Py_False : Py_True, "unnamed",
                         (unsigned long long)g_unnamed, "tasks", (unsigned)g_serial);
}


/* The asyncio task types, once asyncio.tasks is imported (0: not yet). */
static int task_types(void)
{
    if (g_task_types[0])
        return 1;
    PyObject *mods = PySys_GetObject("modules"); /* borrowed */
    PyObject *tasks = mods ? PyDict_GetItemString(mods, "asyncio.tasks") : NULL;
    if (tasks == NULL)
        return 0;
    PyObject *t = PyObject_GetAttrString(tasks, "Task");
    PyObject *pt = PyObject_GetAttrString(tasks, "_PyTask");
    PyErr_Clear();
    if (t == NULL || !PyType_Check(t)) {
        Py_XDECREF(t);
        Py_XDECREF(pt);
        return 0;
    }
    if (pt != NULL && !PyType_Check(pt))
        Py_CLEAR(pt);
    g_task_types[1] = pt;
    g_task_types[0] = t;
    return 1;
}

static int is_task(PyObject *o)
{
    return (g_task_types[0] && PyObject_TypeCheck(o, (PyTypeObject *)g_task_types[0])) ||
           (g_task_types[1] && PyObject_TypeCheck(o, (PyTypeObject *)g_task_types[1]));
}

/* The task whose step cb runs (borrowed), or NULL. */
static PyObject *cb_task(PyObject *cb)
{
    if (!task_types())
        return NULL;
    PyObject *self = NULL;
    PyTypeObject *tp = Py_TYPE(cb);
    if (tp == &PyCFunction_Type || tp == &PyCMethod_Type)
        self = PyCFunction_GET_SELF(cb);
    else if (tp == &PyMethod_Type)
        self = PyMethod_GET_SELF(cb);
    else if (tp == g_step_wrapper ||
             (g_step_wrapper == NULL && strcmp(tp->tp_name, "_asyncio.TaskStepMethWrapper") == 0)) {
        g_step_wrapper = tp; /* _asyncio's heap type lives as long as the interpreter */
        PyObject *s = PyObject_GetAttrString(cb, "__self__");
        if (s == NULL) {
            PyErr_Clear();
            return NULL;
        }
        Py_DECREF(s); /* cb holds the task */
        self = s;
    }
    return self && is_task(self) ? self : NULL;
}

static void new_session(uint32_t epoch)
{
    if (g_epoch == epoch && g_syms)
        return;
    Py_XSETREF(g_syms, PyDict_New());
    Py_XSETREF(g_labels, PyDict_New());
    g_epoch = epoch;
    g_serial = 0;
}

static int append_symbol(uint32_t kind, const char *name, const char *file, uint32_t line, uint32_t *id)
{
    if (pt_core.seg == NULL)
        return -ENOENT;
    int rc = pt_symlog_append(pt_core.seg, kind, name, file, line, id);
    if (rc == -ENOSPC) {
        g_unnamed++;
        pt_tracer_set_first_error("symbol log full: asyncio task %s and later tasks are not recorded; "
                                  "start with a larger symlog_bytes", name);
    } else if (rc < 0)
        pt_tracer_fail("symbol log append failed");
    return rc < 0 ? rc : 0;
}

/* The Task symbol of `task` in session `epoch` (0: none; no exception left). */
static uint32_t task_symbol(PyObject *task, uint32_t epoch)
{
    new_session(epoch);
    if (g_syms == NULL) {
        PyErr_Clear();
        return 0;
    }
    uint32_t id = 0;
    PyObject *key = PyLong_FromVoidPtr(task);
    if (key == NULL)
        goto fail;
    PyObject *hit = PyDict_GetItemWithError(g_syms, key); /* borrowed */
    if (hit) {
        PyObject *ref = PyTuple_GET_ITEM(hit, 0);
#if PY_VERSION_HEX >= 0x030D0000
        PyObject *obj = NULL;
        if (PyWeakref_GetRef(ref, &obj) == 1)
            Py_DECREF(obj); /* compared only */
#else
        PyObject *obj = PyWeakref_GET_OBJECT(ref);
#endif
        {
            if (obj == task) {
                id = (uint32_t)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(hit, 1));
                Py_DECREF(key);
                return id;
            }
        }
        PyErr_Clear();
    } else if (PyErr_Occurred())
        goto fail;
    /* first sight (or a new task at a reused address) */
    PyObject *name = PyObject_CallMethod(task, "get_name", NULL);
    PyObject *coro = name ? PyObject_CallMethod(task, "get_coro", NULL) : NULL;
    PyObject *qual = coro && coro != Py_None ? PyObject_GetAttrString(coro, "__qualname__") : NULL;
    PyErr_Clear();
    const char *n = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    const char *q = qual && PyUnicode_Check(qual) ? PyUnicode_AsUTF8(qual) : NULL;
    PyErr_Clear();
    int rc = append_symbol(PT_SYM_TASK, n ? n : "?", q ? q : "", ++g_serial, &id);
    Py_XDECREF(name);
    Py_XDECREF(coro);
    Py_XDECREF(qual);
    if (rc < 0)
        id = 0;
    PyObject *ref = PyWeakref_NewRef(task, NULL);
    PyObject *val = ref ? Py_BuildValue("(NI)", ref, (unsigned)id) : NULL;
    if (val == NULL || PyDict_SetItem(g_syms, key, val) < 0)
        PyErr_Clear();
    Py_XDECREF(val);
    Py_DECREF(key);
    return id;
fail:
    Py_XDECREF(key);
    PyErr_Clear();
    return 0;
}

static uint32_t label_symbol(PyObject *label)
{
    PyObject *hit = PyDict_GetItemWithError(g_labels, label);
    if (hit)
        return (uint32_t)PyLong_AsUnsignedLong(hit);
    PyErr_Clear();
    const char *s = PyUnicode_AsUTF8(label);
    uint32_t id = 0;
    if (s == NULL || append_symbol(PT_SYM_LABEL, s, "", 0, &id) < 0) {
        PyErr_Clear();
        return 0;
    }
    PyObject *v = PyLong_FromUnsignedLong(id);
    if (v == NULL || PyDict_SetItem(g_labels, label, v) < 0)
        PyErr_Clear();
    Py_XDECREF(v);
    return id;
}

/* This thread's context if its ring is in the current session, else NULL. */
static pt_thread_t *ring_thread(uint32_t *epoch)
{
    *epoch = pt_epoch_now();
    pt_thread_t *t = pt_tls_thread;
    return *epoch != 0 && t != NULL && pt_ok_epoch(t) == *epoch ? t : NULL;
}

void pt_tasks_call(PyObject *cb)
{
    uint32_t epoch;
    pt_thread_t *t = ring_thread(&epoch);
    if (t == NULL)
        return;
    PyObject *task = cb_task(cb);
    if (task == NULL)
        return;
    PyObject *exc = PyErr_GetRaisedException();
    uint32_t id = task_symbol(task, epoch);
    PyErr_SetRaisedException(exc);
    if (id != 0)
        (void)pt_ring_push(&t->ring, pt_now(), id, PT_EV_TASK_STEP, 0, 0);
}

void pt_tasks_return(PyObject *cb)
{
    uint32_t epoch;
    pt_thread_t *t = ring_thread(&epoch);
    if (t == NULL)
        return;
    PyObject *task = cb_task(cb);
    if (task == NULL)
        return;
    PyObject *exc = PyErr_GetRaisedException();
    uint32_t id = task_symbol(task, epoch);
    if (id == 0)
        goto out;
    if (g_suspend == NULL) {
        PyObject *mod = PyImport_ImportModule("pytrace._tasks");
        g_suspend = mod ? PyObject_GetAttrString(mod, "suspend") : NULL;
        Py_XDECREF(mod);
    }
    /* (state, ((await_kind, task_or_label), ...)) */
    PyObject *r = g_suspend ? PyObject_CallOneArg(g_suspend, task) : NULL;
    long state = PT_TASK_PENDING;
    PyObject *awaits = NULL;
    if (r && PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
        state = PyLong_AsLong(PyTuple_GET_ITEM(r, 0));
        awaits = PyTuple_GET_ITEM(r, 1);
        if (!PyTuple_Check(awaits))
            awaits = NULL;
    }
    PyErr_Clear();
    if (state < 0 || state >= PT_TASK_STATE_COUNT)
        state = PT_TASK_PENDING;
    (void)pt_ring_push(&t->ring, pt_now(), id, PT_EV_TASK_SUSPEND, 0, (uint16_t)state);
    for (Py_ssize_t i = 0; state == PT_TASK_PENDING && awaits && i < PyTuple_GET_SIZE(awaits); i++) {
        PyObject *a = PyTuple_GET_ITEM(awaits, i);
        if (!PyTuple_Check(a) || PyTuple_GET_SIZE(a) != 2)
            continue;
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(a, 0));
        PyObject *what = PyTuple_GET_ITEM(a, 1);
        PyErr_Clear();
        if (kind < 0 || kind >= PT_AWAIT_KIND_COUNT)
            continue;
        uint32_t wid = PyUnicode_Check(what) ? label_symbol(what) : is_task(what) ? task_symbol(what, epoch) : 0;
        if (wid != 0)
            (void)pt_ring_push(&t->ring, pt_now(), wid, PT_EV_TASK_AWAIT, 0, (uint16_t)kind);
    }
    Py_XDECREF(r);
out:
    PyErr_SetRaisedException(exc);
}

#endif /* PT_HAVE_MONITORING */

#if !PT_HAVE_MONITORING
PyObject *pt_tasks_py_set(PyObject *module, PyObject *on)
{
    (void)module;
    if (PyObject_IsTrue(on) < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyObject *pt_tasks_py_stats(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return Py_BuildValue("{s:O,s:i,s:i}", "on", Py_False, "unnamed", 0, "tasks", 0);
}
#endif
