/*
 * pt_hooks: the two interpreter adapters in front of the core entries
 * (pt_py_open / pt_py_close / pt_c_event, inline in pt_tracer_inline.h).
 *
 *   3.12+: sys.monitoring with callback objects of our own vectorcall type,
 *          registered from one static table. Filtered code returns DISABLE
 *          from local events, so it costs nothing after its first event.
 *          C functions: CALL + C_RETURN + C_RAISE, and both sides check that
 *          the callable is a PyCFunction or a method descriptor (and that the
 *          calling code is not filtered), so they pair. CALL returns DISABLE
 *          only in filtered code: elsewhere it would also silence
 *          C_RETURN/C_RAISE of that call site for C callables.
 *   3.11 without C calls: the frame-evaluation function (PEP 523), see
 *          pt_evalframe.c: far cheaper than the profile hook, and it sees
 *          every thread, however it was started.
 *   3.10/3.11: PyEval_SetProfile on every thread of the interpreter
 *          (_PyEval_SetProfile(tstate, ...), exported by both), and for
 *          threads started later through threading.setprofile() with a C
 *          callable that swaps itself for the C profile function on the new
 *          thread's first event (threads started with _thread directly are
 *          not traced on these versions).
 *
 * Generators on 3.10/3.11 (no yield/resume events there):
 *   3.10: Call on a frame with f_lasti >= 0 is a Resume; Return on a frame
 *         whose f_state is FRAME_SUSPENDED is a Yield.
 *   3.11: the instruction at f_lasti tells: RESUME 0 = first entry (Call),
 *         RESUME n>0 = Resume, anything else (the YIELD_VALUE the frame is
 *         suspended at) = entered by throw()/close() (Resume, THROWN); a
 *         Return at YIELD_VALUE is a Yield.
 *   Return with arg NULL (exception) is an Unwind on both.
 *
 * A program's own profile function on 3.10/3.11 (sys.setprofile, cProfile,
 * threading.setprofile): a thread has one profile slot, and the program's
 * function must run as it would untraced. So pytrace never overwrites it: a
 * thread that holds one when tracing starts is left alone, and a thread whose
 * slot the program takes over stops being traced. Both are counted
 * (tracing_displaced, one per thread) and explained in first_error, as soon as
 * it happens: an audit hook sees every "sys.setprofile" event (raised by
 * _PyEval_SetProfile before the slot changes, for the Python and C APIs
 * alike). The frame-evaluation adapter shares no slot with sys.setprofile:
 * both run, nothing to count.
 */
#include "pt_tracer_inline.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030B0000
#include <frameobject.h>
#elif PY_VERSION_HEX < 0x030C0000
#include <opcode.h>
#endif

static int g_c_calls;

#if PT_HAVE_MONITORING
/* ======================= sys.monitoring (3.12+) ======================= */

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
    if (def != NULL)
        return ret_disable(pt_c_event(code, args[2], PyVectorcall_NARGS(nargsf) > 3 ? args[3] : NULL, def,
                                      PT_EV_CCALL));
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
    if (def != NULL)
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

int pt_hooks_install(PyObject *module, int c_calls)
{
    (void)module;
    g_c_calls = c_calls;
    PyObject *mon = monitoring();
    if (mon == NULL)
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
        return 0;
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
    return 0;
err:
    pt_hooks_uninstall(module);
    return -1;
}

void pt_hooks_uninstall(PyObject *module)
{
    (void)module;
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

const char *pt_hooks_name(void)
{
    return g_tool_id >= 0 ? "sys.monitoring" : NULL;
}

int pt_hooks_intact(void)
{
    return 1; /* our tool id is ours until we free it */
}

#else
/* ===================== PyEval_SetProfile (3.10/3.11) ===================== */

static inline PyCodeObject *frame_code(PyFrameObject *frame)
{
#if PY_VERSION_HEX >= 0x030B0000
    PyCodeObject *code = PyFrame_GetCode(frame);
    Py_DECREF(code); /* the frame keeps it alive */
    return code;
#else
    return frame->f_code;
#endif
}

#define PT_GEN_FLAGS (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)

#if PY_VERSION_HEX >= 0x030B0000
/* Instruction the frame is at (3.11), or -1. */
static int frame_instr(PyFrameObject *frame, PyCodeObject *code, int *oparg)
{
    int lasti = PyFrame_GetLasti(frame); /* bytes */
    if (lasti < 0)
        return -1;
    Py_ssize_t index = lasti / (int)sizeof(_Py_CODEUNIT);
    if (index >= Py_SIZE(code))
        return -1;
    _Py_CODEUNIT word = _PyCode_CODE(code)[index];
    *oparg = _Py_OPARG(word);
    return _Py_OPCODE(word);
}
#endif

static inline void on_py_call(PyFrameObject *frame, PyCodeObject *code)
{
    uint8_t kind = PT_EV_CALL, flags = 0;
    if (code->co_flags & PT_GEN_FLAGS) {
#if PY_VERSION_HEX >= 0x030B0000
        int oparg = 0;
        int op = frame_instr(frame, code, &oparg);
        if (op == RESUME || op == RESUME_QUICK) {
            if (oparg != 0)
                kind = PT_EV_RESUME;
        } else if (op >= 0) {
            kind = PT_EV_RESUME;
            flags = PT_EVF_THROWN;
        }
#else
        if (frame->f_lasti >= 0)
            kind = PT_EV_RESUME;
#endif
    }
    (void)pt_py_open(code, kind, flags);
}

static inline void on_py_return(PyFrameObject *frame, PyCodeObject *code, PyObject *arg)
{
    uint8_t kind = PT_EV_RETURN;
    if (arg == NULL) {
        kind = PT_EV_UNWIND;
    } else if (code->co_flags & PT_GEN_FLAGS) {
#if PY_VERSION_HEX >= 0x030B0000
        int oparg = 0;
        if (frame_instr(frame, code, &oparg) == YIELD_VALUE)
            kind = PT_EV_YIELD;
#else
        if (frame->f_state == FRAME_SUSPENDED)
            kind = PT_EV_YIELD;
#endif
    }
    (void)pt_py_close(code, kind);
}

static inline void c_event(PyCodeObject *caller, PyObject *callable, uint8_t kind)
{
    const PyMethodDef *def;
    if (g_c_calls && callable && (def = pt_cfunc_def(callable)) != NULL)
        (void)pt_c_event(caller, callable, NULL, def, kind); /* bound by CPython: self is m_self */
}

/* threading was not imported when tracing started: importing it here would hide
 * its import from the program's picture (a launcher starts tracing before the
 * program imports anything). Its hook is set once the program imports it: the
 * "import threading" audit event arms g_threading_pending, and the next profile
 * events look for threading's `_profile_hook` global until its module code has
 * assigned it. No thread can be started through threading before that. */
static int g_threading_deferred;
static int g_threading_pending;
static void threading_poll(void);

static int pt_profile(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    (void)obj;
    if (PT_UNLIKELY(g_threading_pending))
        threading_poll();
    PyCodeObject *code = frame_code(frame);
    switch (what) {
    case PyTrace_CALL:
        on_py_call(frame, code);
        break;
    case PyTrace_RETURN:
        on_py_return(frame, code, arg);
        break;
    case PyTrace_C_CALL:
        c_event(code, arg, PT_EV_CCALL);
        break;
    case PyTrace_C_RETURN:
        c_event(code, arg, PT_EV_CRETURN);
        break;
    case PyTrace_C_EXCEPTION:
        c_event(code, arg, PT_EV_CUNWIND);
        break;
    default:
        break;
    }
    return 0; /* never raise into the program */
}

/* threading.setprofile() target: runs once on a new thread's first event and
 * replaces the Python-level profile trampoline with pt_profile. The event
 * itself is not recorded; the thread's first recorded event writes its whole
 * stack as Frame records, so nothing is unbalanced. */
static int g_setting_profile; /* our own PyEval_SetProfile calls (GIL held) */

static PyObject *thread_bootstrap(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    g_setting_profile = 1;
    if (pt_tracer_is_tracing())
        PyEval_SetProfile(pt_profile, NULL);
    else
        PyEval_SetProfile(NULL, NULL);
    g_setting_profile = 0;
    Py_RETURN_NONE;
}

static PyMethodDef thread_bootstrap_def = {"_pytrace_thread_bootstrap", thread_bootstrap,
                                           METH_VARARGS, NULL};
static PyObject *g_old_thread_hook; /* threading's previous profile hook */
static int g_replaced_thread_hook;  /* threading's hook was None and is our bootstrap */
static int g_installed;
static int g_evalframe; /* the frame-evaluation adapter is in use instead */
static int g_fell_back; /* it was, until the C stack ran low (pt_evalframe.c) */
static PyObject *g_module; /* for the threading hook installed on fall-back */
static int g_audit_added;

static int is_bootstrap(PyObject *obj)
{
    return obj != NULL && PyCFunction_Check(obj) && ((PyCFunctionObject *)obj)->m_ml == &thread_bootstrap_def;
}

/* 1 if threading starts new threads with our bootstrap (GIL held). */
static int threading_hook_is_ours(void)
{
    PyObject *modules = PyImport_GetModuleDict();
    PyObject *threading = modules ? PyDict_GetItemString(modules, "threading") : NULL; /* borrowed */
    if (threading == NULL)
        return 0;
    PyObject *hook = PyObject_GetAttrString(threading, "_profile_hook");
    int ours = is_bootstrap(hook);
    Py_XDECREF(hook);
    PyErr_Clear();
    return ours;
}

/* "sys.setprofile" is raised on the calling thread before its slot changes
 * (also when the target is another thread, which only pytrace itself does on
 * these versions). Runs with the GIL held; must not raise. */
static int audit_hook(const char *event, PyObject *args, void *data)
{
    (void)data;
    if (event[0] == 'i' && g_threading_deferred && strcmp(event, "import") == 0) {
        PyObject *name = PyTuple_Check(args) && PyTuple_GET_SIZE(args) > 0 ? PyTuple_GET_ITEM(args, 0) : NULL;
        if (name && PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "threading") == 0)
            g_threading_pending = 1;
        return 0;
    }
    if (event[0] != 's' || strcmp(event, "sys.setprofile") != 0)
        return 0;
    if (g_setting_profile || !g_installed || !pt_tracer_is_tracing())
        return 0;
    PyThreadState *ts = PyThreadState_Get();
    char how[256];
    if (ts->c_profilefunc == pt_profile) {
        snprintf(how, sizeof how,
                 "the program set its own profile function (sys.setprofile or a profiler such as "
                 "cProfile) on thread %lu: pytrace stops tracing that thread; trace without C calls "
                 "(3.11) to run both", PyThread_get_thread_ident());
        pt_tracer_displaced(how, 1);
    } else if (ts->c_profilefunc == NULL && pt_tls_thread == NULL) {
        /* A thread that never ran traced gets a profile function: threading
         * starting it with the program's hook, unless that hook is ours. */
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        int ours = threading_hook_is_ours();
        PyErr_Restore(t, v, tb);
        if (!ours) {
            snprintf(how, sizeof how,
                     "thread %lu started with the program's own profile function "
                     "(threading.setprofile): pytrace does not trace it",
                     PyThread_get_thread_ident());
            pt_tracer_displaced(how, 0);
        }
    }
    return 0;
}

static int set_threading_hook(PyObject *hook)
{
    PyObject *threading = PyImport_ImportModule("threading");
    if (threading == NULL)
        return -1;
    PyObject *r = PyObject_CallMethod(threading, "setprofile", "O", hook);
    Py_DECREF(threading);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Install (func = pt_profile) or remove (NULL) our profile function on every
 * thread. A thread whose slot holds another profile function is left to it:
 * on install it is counted as displaced (not traced), on removal skipped. */
static int for_all_threads(Py_tracefunc func)
{
    PyThreadState *me = PyThreadState_Get();
    PyInterpreterState *interp = PyThreadState_GetInterpreter(me);
    int rc = 0;
    g_setting_profile = 1;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts; ts = PyThreadState_Next(ts)) {
        int ours = ts->c_profilefunc == pt_profile ||
                   /* a new thread whose first event is still to come */
                   (ts->c_profilefunc != NULL && is_bootstrap(ts->c_profileobj));
        if (!ours && ts->c_profilefunc != NULL) {
            if (func != NULL) {
                char how[256];
                snprintf(how, sizeof how,
                         "thread %lu already runs the program's own profile function (sys.setprofile "
                         "or cProfile): pytrace leaves it untraced", (unsigned long)ts->thread_id);
                pt_tracer_displaced(how, 0);
            }
            continue;
        }
        if (func == NULL && !ours)
            continue;
        if (_PyEval_SetProfile(ts, func, NULL) < 0) {
            rc = -1;
            break;
        }
    }
    g_setting_profile = 0;
    return rc;
}

/* threading is being imported (g_threading_pending): once its module code has
 * assigned `_profile_hook`, make new threads start with our bootstrap, as
 * install_profile does when threading is there at start. No Python code runs. */
static void threading_poll(void)
{
    PyObject *modules = PyImport_GetModuleDict(); /* borrowed */
    PyObject *threading = modules ? PyDict_GetItemString(modules, "threading") : NULL; /* borrowed */
    if (threading == NULL || !PyModule_Check(threading))
        return;
    PyObject *dict = PyModule_GetDict(threading); /* borrowed */
    PyObject *current = dict ? PyDict_GetItemString(dict, "_profile_hook") : NULL; /* borrowed */
    if (current == NULL)
        return; /* its module code has not got there yet */
    g_threading_pending = 0;
    g_threading_deferred = 0;
    if (current != Py_None)
        return; /* the program's own hook (counted by the audit hook when used) */
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyObject *hook = PyCFunction_New(&thread_bootstrap_def, g_module);
    if (hook == NULL || PyDict_SetItemString(dict, "_profile_hook", hook) < 0) {
        PyErr_Clear();
        pt_tracer_fail("cannot set threading's profile hook: threads started later are not traced");
    } else {
        Py_XSETREF(g_old_thread_hook, Py_NewRef(Py_None));
        g_replaced_thread_hook = 1;
    }
    Py_XDECREF(hook);
    PyErr_Restore(t, v, tb);
}

static int install_profile(PyObject *module)
{
    if (!g_audit_added) {
        /* Added once for the process (audit hooks cannot be removed); it
         * does nothing unless this adapter is tracing. If the program's own
         * audit hook refuses it, displacement goes unseen until stop(). */
        if (PySys_AddAuditHook(audit_hook, NULL) == 0)
            g_audit_added = 1;
        PyErr_Clear();
    }
    PyObject *modules = PyImport_GetModuleDict(); /* borrowed */
    PyObject *threading = modules ? PyDict_GetItemString(modules, "threading") : NULL; /* borrowed */
    g_threading_pending = 0;
    g_threading_deferred = threading == NULL && g_audit_added;
    if (g_threading_deferred) {
        /* not imported yet: its hook is set when the program imports it
         * (threading_poll); without the audit hook, import it now */
        g_replaced_thread_hook = 0;
        Py_CLEAR(g_old_thread_hook);
        g_installed = 1;
        if (for_all_threads(pt_profile) < 0) {
            pt_hooks_uninstall(module);
            return -1;
        }
        return 0;
    }
    threading = PyImport_ImportModule("threading");
    if (threading == NULL)
        return -1;
    Py_XSETREF(g_old_thread_hook, PyObject_GetAttrString(threading, "_profile_hook"));
    Py_DECREF(threading);
    if (g_old_thread_hook == NULL)
        PyErr_Clear();
    /* The program's own threading.setprofile() hook is kept: its threads run
     * its profile function, as untraced (the audit hook counts them). */
    g_replaced_thread_hook = g_old_thread_hook == NULL || g_old_thread_hook == Py_None ||
                             is_bootstrap(g_old_thread_hook);
    if (g_replaced_thread_hook) {
        PyObject *hook = PyCFunction_New(&thread_bootstrap_def, module);
        if (hook == NULL)
            return -1;
        int rc = set_threading_hook(hook);
        Py_DECREF(hook);
        if (rc < 0)
            return -1;
    }
    g_installed = 1;
    if (for_all_threads(pt_profile) < 0) {
        pt_hooks_uninstall(module);
        return -1;
    }
    return 0;
}

int pt_hooks_install(PyObject *module, int c_calls)
{
    g_c_calls = c_calls;
    g_fell_back = 0;
    Py_XSETREF(g_module, Py_NewRef(module));
    /* Without C calls, 3.11 has a much cheaper hook (pt_evalframe.c). */
    if (!c_calls && pt_evalframe_install() == 1) {
        g_evalframe = 1;
        return 0;
    }
    return install_profile(module);
}

int pt_hooks_fall_back_to_profile(void)
{
    g_evalframe = 0;
    g_fell_back = 1;
    PyObject *t, *v, *tb; /* a frame may be entered with an exception (throw) */
    PyErr_Fetch(&t, &v, &tb);
    int rc = install_profile(g_module);
    if (rc < 0)
        PyErr_Clear();
    PyErr_Restore(t, v, tb);
    return rc;
}

void pt_hooks_uninstall(PyObject *module)
{
    (void)module;
    if (g_evalframe) {
        pt_evalframe_uninstall();
        g_evalframe = 0;
        return;
    }
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    g_installed = 0; /* first: our own removal is no displacement */
    g_threading_deferred = g_threading_pending = 0;
    if (for_all_threads(NULL) < 0)
        PyErr_Clear();
    if (g_replaced_thread_hook && !threading_hook_is_ours()) {
        /* threading.setprofile() while we traced: the threads it started
         * after that ran the program's hook (counted as displaced, each) or
         * none (not seen at all: threading sets no profile function then). */
        if (pt_tracer_is_tracing())
            pt_tracer_fail("the program replaced pytrace's threading.setprofile() hook: threads started "
                           "after that were not traced");
    } else if (g_replaced_thread_hook &&
               set_threading_hook(g_old_thread_hook && !is_bootstrap(g_old_thread_hook) ? g_old_thread_hook
                                                                                        : Py_None) < 0) {
        PyErr_Clear();
    }
    g_replaced_thread_hook = 0;
    Py_CLEAR(g_old_thread_hook);
    PyErr_Restore(t, v, tb);
}

const char *pt_hooks_name(void)
{
    if (g_evalframe)
        return "frame evaluation (PEP 523)";
    if (g_installed && g_fell_back)
        return "frame evaluation (PEP 523), then PyEval_SetProfile (deep C stack)";
    return g_installed ? "PyEval_SetProfile" : NULL;
}

int pt_hooks_intact(void)
{
    return !g_evalframe || pt_evalframe_intact();
}
#endif
