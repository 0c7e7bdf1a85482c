/*
 * pt_monitoring: the sys.monitoring adapter (CPython 3.12+) in front of the core
 * entries (pt_py_open / pt_py_close / pt_c_event, inline in pt_tracer_inline.h).
 *
 * Callback objects of our own vectorcall type, registered from one static
 * table. Filtered code returns DISABLE from local events, so it costs nothing
 * after its first event. C functions: CALL + C_RETURN + C_RAISE, and both sides
 * check that the callable is a PyCFunction or a method descriptor (and that the
 * calling code is not filtered), so they pair. CALL returns DISABLE only in
 * filtered code: elsewhere it would also silence C_RETURN/C_RAISE of that call
 * site for C callables.
 *
 * Registered with the core as a pt_hook_ops_t (pt_monitoring_register); on
 * older Pythons it registers nothing.
 */
#include "pt_adapters.h"
#include "pt_tasks.h"
#include "pt_tracer_inline.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#if PT_HAVE_MONITORING

static PyObject *g_disable;  /* sys.monitoring.DISABLE */
static int g_tool_id = -1;

/* A sys.monitoring callback object. CPython calls its vectorcall slot
 * directly: no PyCFunction wrapper, no recursion check, no thread-state
 * lookup between the event and our code. */
typedef struct pt_callback {
    PyObject_HEAD
    vectorcallfunc vectorcall;
} pt_callback_t;

static PyTypeObject *g_callback_type; /* process-wide, like the tracer */

#define PT_VC_ARGS PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames
#define PT_VC_UNUSED \
    (void)self;      \
    (void)kwnames

/* The code object of an event (args[0]); NULL if the callback was called
 * with something else (by hand: the objects can be fetched back from
 * sys.monitoring). */
static inline PyCodeObject *code_arg(PyObject *const *args, size_t nargsf)
{
    return PyVectorcall_NARGS(nargsf) >= 2 && PyCode_Check(args[0]) ? (PyCodeObject *)args[0] : NULL;
}

static inline PyObject *ret_disable(int filtered)
{
    if (filtered)
        return Py_NewRef(g_disable);
    Py_RETURN_NONE;
}

static PyObject *mon_py_start(PT_VC_ARGS)
{
    PT_VC_UNUSED;
    PyCodeObject *code = code_arg(args, nargsf);
    return ret_disable(code && pt_py_open(code, PT_EV_CALL, 0));
}

static PyObject *mon_py_resume(PT_VC_ARGS)
{
    PT_VC_UNUSED;
    PyCodeObject *code = code_arg(args, nargsf);
    return ret_disable(code && pt_py_open(code, PT_EV_RESUME, 0));
}

static PyObject *mon_py_throw(PT_VC_ARGS)
{
    PT_VC_UNUSED;
    PyCodeObject *code = code_arg(args, nargsf);
    if (code)
        (void)pt_py_open(code, PT_EV_RESUME, PT_EVF_THROWN); /* not disableable */
    Py_RETURN_NONE;
}

static PyObject *mon_py_return(PT_VC_ARGS)
{
    PT_VC_UNUSED;
    PyCodeObject *code = code_arg(args, nargsf);
    return ret_disable(code && pt_py_close(code, PT_EV_RETURN));
}

static PyObject *mon_py_yield(PT_VC_ARGS)
{
    PT_VC_UNUSED;
    PyCodeObject *code = code_arg(args, nargsf);
    return ret_disable(code && pt_py_close(code, PT_EV_YIELD));
}

static PyObject *mon_py_unwind(PT_VC_ARGS)
{
    PT_VC_UNUSED;
    PyCodeObject *code = code_arg(args, nargsf);
    if (code)
        (void)pt_py_close(code, PT_EV_UNWIND); /* not disableable */
    Py_RETURN_NONE;
}

/* C events: args = (code, offset, callable, arg0). CALL comes for every call,
 * C_RETURN / C_RAISE only for callables that are not Python functions; both
 * sides record only PyCFunctions and method descriptors called from code that
 * is not filtered, so they pair. */
static PyObject *mon_call(PT_VC_ARGS)
{
    PT_VC_UNUSED;
    PyCodeObject *code = code_arg(args, nargsf);
    if (code == NULL || PyVectorcall_NARGS(nargsf) < 3)
        Py_RETURN_NONE;
    const PyMethodDef *def = pt_cfunc_def(args[2]);
    if (def != NULL) {
        int filtered = pt_c_event(code, args[2], PyVectorcall_NARGS(nargsf) > 3 ? args[3] : NULL, def,
                                  PT_EV_CCALL);
        if (PT_UNLIKELY(def == PT_TASKS_CTX_RUN_DEF()) && PyVectorcall_NARGS(nargsf) > 3) {
            /* an asyncio task's step? (never DISABLEd: its C_RETURN ends the step) */
            pt_tasks_call(args[3]);
            return ret_disable(0);
        }
        return ret_disable(filtered);
    }
    /* Not a C function. A call site in filtered code is silenced for good:
     * DISABLE turns off CALL there, and with it C_RETURN and C_RAISE, none of
     * which we would record from that code. Elsewhere CALL must stay on: the
     * same site may call a C function next time. */
    if (!pt_hot.filtering)
        Py_RETURN_NONE;
    uint64_t extra = pt_code_extra(code);
    uint32_t epoch = pt_epoch_now();
    return ret_disable(epoch != 0 && (uint32_t)(extra >> 33) == epoch && (extra & PT_XTRA_FILTERED));
}

static inline void c_close(PyObject *const *args, size_t nargsf, uint8_t kind)
{
    PyCodeObject *code = code_arg(args, nargsf);
    if (code == NULL || PyVectorcall_NARGS(nargsf) < 3)
        return;
    const PyMethodDef *def = pt_cfunc_def(args[2]);
    if (def == NULL)
        return;
    if (PT_UNLIKELY(def == PT_TASKS_CTX_RUN_DEF()) && PyVectorcall_NARGS(nargsf) > 3)
        pt_tasks_return(args[3]); /* TaskSuspend before the CReturn of Context.run */
    (void)pt_c_event(code, args[2], PyVectorcall_NARGS(nargsf) > 3 ? args[3] : NULL, def, kind);
}

static PyObject *mon_c_return(PT_VC_ARGS)
{
    PT_VC_UNUSED;
    c_close(args, nargsf, PT_EV_CRETURN); /* C_RETURN cannot be disabled */
    Py_RETURN_NONE;
}

static PyObject *mon_c_raise(PT_VC_ARGS)
{
    PT_VC_UNUSED;
    c_close(args, nargsf, PT_EV_CUNWIND);
    Py_RETURN_NONE;
}

static const struct {
    const char *event;   /* name in sys.monitoring.events */
    int c_event;         /* only with c_calls=True */
    vectorcallfunc fn;
} pt_mon_table[] = {
    {"PY_START", 0, mon_py_start},   {"PY_RESUME", 0, mon_py_resume}, {"PY_THROW", 0, mon_py_throw},
    {"PY_RETURN", 0, mon_py_return}, {"PY_YIELD", 0, mon_py_yield},   {"PY_UNWIND", 0, mon_py_unwind},
    {"CALL", 1, mon_call},           {"C_RETURN", 1, mon_c_return},   {"C_RAISE", 1, mon_c_raise},
};
#define PT_MON_COUNT (sizeof pt_mon_table / sizeof pt_mon_table[0])

static PyMemberDef callback_members[] = {
    {"__vectorcalloffset__", Py_T_PYSSIZET, offsetof(pt_callback_t, vectorcall), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot callback_slots[] = {
    {Py_tp_call, __extension__(void *) PyVectorcall_Call},
    {Py_tp_members, callback_members},
    {Py_tp_doc, (void *)"pytrace's sys.monitoring callback (internal)"},
    {0, NULL},
};

static PyType_Spec callback_spec = {
    .name = "pytrace._pytrace.MonitoringCallback",
    .basicsize = sizeof(pt_callback_t),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = callback_slots,
};

static PyObject *callback_new(vectorcallfunc fn)
{
    if (g_callback_type == NULL) {
        g_callback_type = (PyTypeObject *)PyType_FromSpec(&callback_spec);
        if (g_callback_type == NULL)
            return NULL;
    }
    pt_callback_t *cb = PyObject_New(pt_callback_t, g_callback_type);
    if (cb == NULL)
        return NULL;
    cb->vectorcall = fn;
    return (PyObject *)cb;
}

static PyObject *monitoring(void)
{
    PyObject *sys_mon = PySys_GetObject("monitoring"); /* borrowed */
    if (sys_mon == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "sys.monitoring is missing");
    return sys_mon;
}

static long event_bit(PyObject *mon, const char *name)
{
    PyObject *events = PyObject_GetAttrString(mon, "events");
    if (events == NULL)
        return -1;
    PyObject *bit = PyObject_GetAttrString(events, name);
    Py_DECREF(events);
    if (bit == NULL)
        return -1;
    long v = PyLong_AsLong(bit);
    Py_DECREF(bit);
    return v;
}

static void monitoring_uninstall(void);

/* 1 (installed, or nothing to trace: said through pt_tracer_fail) or -1. */
static int monitoring_install(PyObject *module, int c_calls)
{
    (void)module;
    PyObject *mon = monitoring();
    if (mon == NULL)
        return -1;
    if (pt_tasks_init() < 0)
        return -1;
    if (g_disable == NULL) {
        g_disable = PyObject_GetAttrString(mon, "DISABLE");
        if (g_disable == NULL)
            return -1;
    }
    /* Ids 3 and 4: sys.monitoring names 0 (debugger), 1 (coverage), 2
     * (profiler: cProfile takes it) and 5 (optimizer) for other kinds of
     * tools, so a program's own cProfile, coverage or debugger keeps its id. */
    static const int candidates[] = {3, 4};
    enum { n_candidates = sizeof candidates / sizeof candidates[0] };
    g_tool_id = -1;
    for (size_t i = 0; i < n_candidates; i++) {
        PyObject *r = PyObject_CallMethod(mon, "use_tool_id", "is", candidates[i], "pytrace");
        if (r) {
            Py_DECREF(r);
            g_tool_id = candidates[i];
            break;
        }
        if (!PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear();
    }
    if (g_tool_id < 0) {
        /* Not an error of start(): the program runs as it would untraced,
         * and stop() reports that nothing was traced (hook error + text). */
        char holders[2][64] = {"?", "?"};
        for (size_t i = 0; i < n_candidates; i++) {
            PyObject *name = PyObject_CallMethod(mon, "get_tool", "i", candidates[i]);
            const char *text = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
            if (text)
                snprintf(holders[i], sizeof holders[i], "%s", text);
            Py_XDECREF(name);
            PyErr_Clear();
        }
        char msg[256];
        snprintf(msg, sizeof msg,
                 "sys.monitoring tool ids 3 and 4 are both taken (by '%s' and '%s'): nothing "
                 "is traced; free one of them (sys.monitoring.free_tool_id) before starting pytrace",
                 holders[0], holders[1]);
        pt_tracer_fail(msg);
        return 1;
    }
    long mask = 0;
    for (size_t i = 0; i < PT_MON_COUNT; i++) {
        if (pt_mon_table[i].c_event && !c_calls)
            continue;
        long bit = event_bit(mon, pt_mon_table[i].event);
        if (bit < 0)
            goto err;
        PyObject *fn = callback_new(pt_mon_table[i].fn);
        if (fn == NULL)
            goto err;
        PyObject *r = PyObject_CallMethod(mon, "register_callback", "ilO", g_tool_id, bit, fn);
        Py_DECREF(fn);
        if (r == NULL)
            goto err;
        Py_DECREF(r);
        mask |= bit;
    }
    PyObject *r = PyObject_CallMethod(mon, "set_events", "il", g_tool_id, mask);
    if (r == NULL)
        goto err;
    Py_DECREF(r);
    /* Re-enable what an earlier session DISABLEd (its filters may differ).
     * This also re-enables other tools' disabled events: harmless, they
     * disable them again on their next event. */
    r = PyObject_CallMethod(mon, "restart_events", NULL);
    if (r == NULL)
        goto err;
    Py_DECREF(r);
    return 1;
err:
    monitoring_uninstall();
    return -1;
}

static void monitoring_uninstall(void)
{
    if (g_tool_id < 0)
        return;
    PyObject *mon = monitoring();
    if (mon == NULL) {
        PyErr_Clear();
        return;
    }
    PyObject *saved = PyErr_GetRaisedException();
    PyObject *r = PyObject_CallMethod(mon, "set_events", "ii", g_tool_id, 0);
    Py_XDECREF(r);
    PyErr_Clear();
    for (size_t i = 0; i < PT_MON_COUNT; i++) {
        long bit = event_bit(mon, pt_mon_table[i].event);
        if (bit < 0) {
            PyErr_Clear();
            continue;
        }
        r = PyObject_CallMethod(mon, "register_callback", "ilO", g_tool_id, bit, Py_None);
        Py_XDECREF(r);
        PyErr_Clear();
    }
    r = PyObject_CallMethod(mon, "free_tool_id", "i", g_tool_id);
    Py_XDECREF(r);
    PyErr_Clear();
    PyErr_SetRaisedException(saved);
    g_tool_id = -1;
}

static int monitoring_active(void)
{
    return g_tool_id >= 0;
}

/* No intact(): our tool id is ours until we free it. frame_key: the frame. */
static const pt_hook_ops_t monitoring_ops = {
    .name = "sys.monitoring",
    .install = monitoring_install,
    .uninstall = monitoring_uninstall,
    .active = monitoring_active,
};

int pt_monitoring_register(void)
{
    return pt_tracer_hook_register(&monitoring_ops);
}

#else /* !PT_HAVE_MONITORING */

int pt_monitoring_register(void)
{
    return 0;
}

#endif
