/*
 * pt_profile: the PyEval_SetProfile adapter (CPython 3.10/3.11) in front of the
 * core entries (pt_py_open / pt_py_close / pt_c_event, inline in
 * pt_tracer_inline.h).
 *
 * The profile function goes on every thread of the interpreter
 * (_PyEval_SetProfile(tstate, ...), exported by both), and on threads started
 * later through threading.setprofile() with a C callable that swaps itself for
 * the C profile function on the new thread's first event (threads started with
 * _thread directly are not traced on these versions). On 3.11 without C calls
 * the frame-evaluation adapter (pt_evalframe.c) is tried first: far cheaper,
 * and it sees every thread, however it was started; it hands the session over
 * to this one when the C stack runs low (pt_tracer_hook_fall_back).
 *
 * Generators (no yield/resume events on these versions):
 *   3.10: Call on a frame with f_lasti >= 0 is a Resume; Return on a frame
 *         whose f_state is FRAME_SUSPENDED is a Yield.
 *   3.11: the instruction at f_lasti tells: RESUME 0 = first entry (Call),
 *         RESUME n>0 = Resume, anything else (the YIELD_VALUE the frame is
 *         suspended at) = entered by throw()/close() (Resume, THROWN); a
 *         Return at YIELD_VALUE is a Yield.
 *   Return with arg NULL (exception) is an Unwind on both.
 *
 * A program's own profile function (sys.setprofile, cProfile,
 * threading.setprofile): a thread has one profile slot, and the program's
 * function must run as it would untraced. So pytrace never overwrites it: a
 * thread that holds one when tracing starts is left alone, and a thread whose
 * slot the program takes over stops being traced. Both are counted
 * (tracing_displaced, one per thread) and explained in first_error, as soon as
 * it happens: an audit hook sees every "sys.setprofile" event (raised by
 * _PyEval_SetProfile before the slot changes, for the Python and C APIs
 * alike). The frame-evaluation adapter shares no slot with sys.setprofile:
 * both run, nothing to count.
 *
 * asyncio task records (3.11, with C calls): at Context.run's C events from
 * asyncio's Handle._run, the step's callable is read from that frame and handed to
 * pt_tasks.c (ctx_run_event below); other C calls pay one pointer compare.
 *
 * Registered with the core as a pt_hook_ops_t (pt_profile_register); on 3.12+
 * it registers nothing.
 */
#include "pt_adapters.h"
#include "pt_tasks.h"
#include "pt_tracer_inline.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#if !PT_HAVE_MONITORING

#if PY_VERSION_HEX < 0x030B0000
#include <frameobject.h>
#else
#include <opcode.h>
#endif

#if PT_HAVE_TASKS /* 3.11 */
#define Py_BUILD_CORE 1 /* for _PyInterpreterFrame's localsplus: Handle._run's self */
#include <internal/pycore_frame.h>
#include <structmember.h>
#endif

static int g_c_calls;


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

#if PT_HAVE_TASKS
/* asyncio task records (pt_tasks.c). The C_CALL event names Context.run but not its
 * arguments; a task's step runs as Handle._run's `self._context.run(self._callback,
 * *self._args)`, and that Handle._run is the frame the event comes from: cb is its
 * self._callback, read from the frame's first local and the Handle's slot (no
 * attribute look-up, no locals dict), the same object at the call and at the return.
 * Context.run called from any other code is no task step: not looked at. */
static PyObject *g_handle_run_code;  /* asyncio.events.Handle._run.__code__ (strong) */
static PyTypeObject *g_handle_type;  /* asyncio.events.Handle (strong) */
static Py_ssize_t g_callback_offset; /* of Handle's `_callback` slot */
static int g_handle_unusable;        /* asyncio.events is not as expected: no task records */

/* Once asyncio.events is imported: Handle, _run's code and the `_callback` slot. 1 when
 * known (GIL held; no exception left). */
static int handle_known(void)
{
    if (g_handle_run_code)
        return 1;
    if (g_handle_unusable)
        return 0;
    PyObject *mods = PyImport_GetModuleDict(); /* borrowed */
    PyObject *events = mods ? PyDict_GetItemString(mods, "asyncio.events") : NULL; /* borrowed */
    if (events == NULL)
        return 0; /* not yet (Context.run from elsewhere) */
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyObject *handle = PyObject_GetAttrString(events, "Handle");
    PyObject *run = handle && PyType_Check(handle) ? PyObject_GetAttrString(handle, "_run") : NULL;
    PyObject *code = run && PyFunction_Check(run) ? PyFunction_GetCode(run) : NULL; /* borrowed */
    PyObject *slot = run ? PyDict_GetItemString(((PyTypeObject *)handle)->tp_dict, "_callback") : NULL;
    PyErr_Clear();
    PyMemberDef *m = slot && Py_IS_TYPE(slot, &PyMemberDescr_Type) ? ((PyMemberDescrObject *)slot)->d_member : NULL;
    PyCodeObject *co = (PyCodeObject *)code;
    /* self is local 0 of _run, a plain local (not a cell) */
    if (code && PyCode_Check(code) && co->co_argcount == 1 && co->co_ncellvars == 0 && m &&
        (m->type == T_OBJECT || m->type == T_OBJECT_EX) && m->offset > 0) {
        g_callback_offset = m->offset;
        g_handle_type = (PyTypeObject *)Py_NewRef(handle);
        g_handle_run_code = Py_NewRef(code);
    } else {
        g_handle_unusable = 1;
    }
    Py_XDECREF(run);
    Py_XDECREF(handle);
    PyErr_Restore(t, v, tb);
    return g_handle_run_code != NULL;
}

/* The step callable of the Context.run called from `frame` (borrowed), or NULL. */
static PyObject *step_callable(PyFrameObject *frame, PyCodeObject *caller)
{
    if (!handle_known() || (PyObject *)caller != g_handle_run_code || frame->f_frame->f_code != caller)
        return NULL;
    PyObject *self = frame->f_frame->localsplus[0];
    if (self == NULL || !PyObject_TypeCheck(self, g_handle_type))
        return NULL;
    return *(PyObject **)((char *)self + g_callback_offset);
}

/* Context.run's C_CALL / C_RETURN / C_EXCEPTION: as pt_monitoring.c orders them,
 * TaskStep after the CCall record, TaskSuspend (+ TaskAwait) before CReturn / CUnwind. */
static __attribute__((noinline)) void ctx_run_event(PyFrameObject *frame, PyCodeObject *caller, PyObject *callable,
                                      const PyMethodDef *def, uint8_t kind)
{
    PyObject *cb = step_callable(frame, caller);
    if (cb != NULL && kind != PT_EV_CCALL)
        pt_tasks_return(cb);
    (void)pt_c_event(caller, callable, NULL, def, kind);
    if (cb != NULL && kind == PT_EV_CCALL)
        pt_tasks_call(cb);
}
#endif

static inline void c_event(PyFrameObject *frame, PyCodeObject *caller, PyObject *callable, uint8_t kind)
{
    const PyMethodDef *def;
    if (!g_c_calls || !callable || (def = pt_cfunc_def(callable)) == NULL)
        return;
#if PT_HAVE_TASKS
    if (PT_UNLIKELY(def == PT_TASKS_CTX_RUN_DEF())) { /* an asyncio task's step? */
        ctx_run_event(frame, caller, callable, def, kind);
        return;
    }
#else
    (void)frame;
#endif
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
        c_event(frame, code, arg, PT_EV_CCALL);
        break;
    case PyTrace_C_RETURN:
        c_event(frame, code, arg, PT_EV_CRETURN);
        break;
    case PyTrace_C_EXCEPTION:
        c_event(frame, code, arg, PT_EV_CUNWIND);
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
static PyObject *g_module; /* for the threading hook set when threading is imported later */
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

static void profile_uninstall(void);

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
            profile_uninstall();
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
        profile_uninstall();
        return -1;
    }
    return 0;
}

/* 1, or -1 (exception set). */
static int profile_install(PyObject *module, int c_calls)
{
#if PT_HAVE_TASKS
    if (pt_tasks_init() < 0)
        return -1;
#endif
    g_c_calls = c_calls;
    Py_XSETREF(g_module, Py_NewRef(module));
    return install_profile(module) < 0 ? -1 : 1;
}

static void profile_uninstall(void)
{
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

static int profile_active(void)
{
    return g_installed;
}

static const pt_hook_ops_t profile_ops = {
    .name = "PyEval_SetProfile",
    .install = profile_install,
    .uninstall = profile_uninstall,
    .active = profile_active,
};

int pt_profile_register(void)
{
    return pt_tracer_hook_register(&profile_ops);
}

#else /* PT_HAVE_MONITORING */

int pt_profile_register(void)
{
    return 0;
}

#endif
