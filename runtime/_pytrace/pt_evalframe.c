/*
 * pt_evalframe: the PEP 523 frame-evaluation adapter (CPython 3.11, used when
 * C calls are not traced).
 *
 * Why: on 3.11 the only hook that reports C calls is PyEval_SetProfile, and it
 * puts the whole interpreter on its tracing path: every instruction goes
 * through DO_TRACING (which undoes specialisation) and every event builds a
 * frame object and a line number. An empty profile function already costs
 * more than half of what cProfile costs. Python frames alone can be seen
 * through the frame-evaluation function instead: the interpreter keeps running
 * specialised code, and only Python-to-Python calls lose their inlining (they
 * recurse on the C stack, as on 3.10).
 *
 * What the hook sees: every evaluation of a Python frame -- a call, a
 * generator or coroutine resumed by send()/throw()/close() (with throwflag),
 * a module or class body -- and it sees it leave: with a value (return, or a
 * yield when the generator is suspended afterwards) or NULL (an exception).
 * A generator or coroutine function called to build its generator object is
 * also evaluated (it runs up to RETURN_GENERATOR); the other hooks do not
 * report that run, and neither does this one.
 *
 * Frames already running when the hook was installed (or when this thread's
 * ring was claimed) were not entered through it, so they leave unseen. They
 * are the bottom `prior` levels of the shadow stack, with their frame and code
 * in prior_frames. Each time a frame opens while such a frame is on top of
 * the shadow, the top must still be on the interpreter's frame chain; if it is
 * not, it is closed there with a synthetic record (PT_EVF_SYNTHETIC), so every
 * later event has its true parent.
 *
 * The C stack. Python-to-Python calls are not inlined while a frame
 * evaluation function is set: each one costs about 0.5 KiB of C stack, where
 * the untraced 3.11 interpreter spends none. A program that raised the
 * recursion limit and recurses deeply (20,000 calls overflow an 8 MiB stack)
 * would crash here and not untraced. So every evaluation compares the stack
 * pointer with a floor kept per thread (the stack's low end, from
 * pthread_getattr_np, plus a reserve of 1/8 of the stack, at least 256 KiB);
 * below it, the session moves to the PyEval_SetProfile adapter for good
 * (pt_tracer_hook_fall_back): calls are inlined again, the C stack stops
 * growing, and nothing is lost or doubled -- the profile hook reports the
 * return of every frame still open (this hook no longer closes them) and the
 * call of the frame being evaluated.
 *
 * Not installed when another tool already owns the frame-evaluation function
 * (the PyEval_SetProfile adapter is used then). A tool that replaces ours
 * while we trace stops our events; the table's intact() says so and the
 * tracer reports it as an error.
 *
 * Registered with the core as a pt_hook_ops_t (pt_evalframe_register), before
 * the profile adapter; elsewhere than 3.11 it registers nothing.
 */
#include "pt_adapters.h"
#include "pt_tracer_inline.h"

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define PT_HAVE_EVALFRAME 1
#else
#define PT_HAVE_EVALFRAME 0
#endif

#if PT_HAVE_EVALFRAME
#define Py_BUILD_CORE 1 /* for _PyInterpreterFrame; nothing else in this file */
#include <internal/pycore_frame.h>
#include <opcode.h>
#include <pthread.h>
#endif

#if PY_VERSION_HEX < 0x030B0000
#include <frameobject.h>
#endif

#if PT_HAVE_EVALFRAME

static PyInterpreterState *g_interp; /* where the hook is installed, or NULL */
/* 1 while this hook is the session's: it then closes the frames it opened.
 * 0 after uninstall or the fall-back to the profile hook, which reports the
 * returns of frames that are still open. */
static int g_active;

/* Lowest stack address this thread may evaluate a frame at through us;
 * UINTPTR_MAX = not known yet, 0 = no limit known. */
static __thread uintptr_t tls_stack_floor __attribute__((tls_model("initial-exec"))) = UINTPTR_MAX;

#define PT_STACK_RESERVE_MIN (256u * 1024u)

static uintptr_t stack_floor_of_this_thread(void)
{
    pthread_attr_t attr;
    void *low;
    size_t size;
    uintptr_t floor = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0)
        return 0;
    if (pthread_attr_getstack(&attr, &low, &size) == 0) {
        size_t reserve = size / 8 > PT_STACK_RESERVE_MIN ? size / 8 : PT_STACK_RESERVE_MIN;
        if (reserve < size)
            floor = (uintptr_t)low + reserve;
    }
    pthread_attr_destroy(&attr);
    return floor;
}

/* 1 if this thread's C stack is below its floor (the first call per thread
 * also finds the floor). */
static int stack_low(uintptr_t sp)
{
    if (tls_stack_floor == UINTPTR_MAX)
        tls_stack_floor = stack_floor_of_this_thread();
    return sp < tls_stack_floor;
}

/* Move the session to the profile hook (see the design summary): the core
 * uninstalls this adapter and installs the next one. */
static void evalframe_uninstall(void);

static PyObject *fall_back(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    if (pt_tracer_hook_fall_back("deep C stack") < 0)
        pt_tracer_fail("the C stack ran low under the frame-evaluation hook and the profile "
                       "hook could not take over: Python calls are no longer traced");
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
}

#define PT_GEN_FLAGS (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)

static const void *evalframe_frame_key(PyFrameObject *frame)
{
    return frame->f_frame;
}

/* Is the prior frame `p` still on the chain that starts at `f` (the caller of
 * the frame being opened)? Frames are compared by address and code, so a new
 * frame that reuses the slot of a finished one does not pass for it. */
static int on_chain(const _PyInterpreterFrame *f, const pt_prior_frame_t *p)
{
    for (; f != NULL; f = f->previous)
        if ((const void *)f == p->frame && f->f_code == p->code)
            return 1;
    return 0;
}

/* Close the prior frames on top of the shadow that have left. */
static void drop_stale_priors(pt_thread_t *t, PyThreadState *tstate)
{
    const _PyInterpreterFrame *caller = tstate->cframe->current_frame;
    while (t->prior > 0 && t->depth == t->prior && !on_chain(caller, &t->prior_frames[t->prior - 1]))
        pt_close_synthetic_above(t, t->depth - 1);
}

/* Open a frame of `code` that is not linked yet (its caller is the current
 * frame), after closing the prior frames that left. 1 if the code is
 * filtered out. */
static int frame_open(PyThreadState *tstate, PyCodeObject *code, uint8_t kind, uint8_t flags)
{
    uint64_t extra = pt_code_extra(code);
    pt_thread_t *t = pt_fast_thread(pt_epoch_now(), extra);
    if (PT_UNLIKELY(t == NULL || (extra & PT_XTRA_FILTERED))) {
        /* Python work (interning, attaching the thread) may run anything,
         * even stop() and start(): check the session again after it */
        if (pt_code_lookup(code) == PT_CODE_FILTERED)
            return 1;
        t = pt_thread_current(NULL);
        if (t == NULL)
            return 0; /* not tracing, or no ring for this thread */
        extra = pt_code_extra(code);
        if ((uint32_t)(extra >> 33) != pt_ok_epoch(t) || (extra & PT_XTRA_FILTERED))
            return 0;
    }
    if (PT_UNLIKELY(t->prior != 0 && t->depth <= t->prior))
        drop_stale_priors(t, tstate);
    pt_open(t, (uint32_t)extra, kind, flags);
    return 0;
}

/* Close a frame this hook opened. A prior frame can be closed here too (one
 * this hook saw start in an earlier session): its level is then no longer a
 * prior one. The shared fast close leaves `prior` alone (only this adapter
 * reads it); the slow paths lower it themselves. */
static inline void frame_close(PyCodeObject *code, uint8_t kind)
{
    (void)pt_py_close(code, kind);
    pt_thread_t *t = pt_tls_thread;
    if (t != NULL && PT_UNLIKELY(t->prior > t->depth))
        t->prior = t->depth;
}

static PyObject *eval_generator(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag);

static PyObject *pt_eval_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    if (PT_UNLIKELY((uintptr_t)__builtin_frame_address(0) < tls_stack_floor) &&
        stack_low((uintptr_t)__builtin_frame_address(0)))
        return fall_back(tstate, frame, throwflag);
    PyCodeObject *code = frame->f_code;
    if (PT_UNLIKELY(code->co_flags & PT_GEN_FLAGS))
        return eval_generator(tstate, frame, throwflag);
    if (frame_open(tstate, code, PT_EV_CALL, 0))
        return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
    PyObject *result = _PyEval_EvalFrameDefault(tstate, frame, throwflag);
    /* By code, not by what was opened: the frame may outlive the session it
     * was opened in (stop() and start() inside it), and then it is a prior
     * frame of the new one. The frame still holds its code here: the caller
     * clears it after we return. Only while this hook is the session's: else
     * the profile hook reports the return. */
    if (PT_LIKELY(g_active))
        frame_close(code, result != NULL ? PT_EV_RETURN : PT_EV_UNWIND);
    return result;
}

static PyObject *eval_generator(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    PyCodeObject *code = frame->f_code;
    if (frame->owner != FRAME_OWNED_BY_GENERATOR) /* building the generator object */
        return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
    /* A suspended frame stopped at YIELD_VALUE; a new one has not run yet. */
    uint8_t kind = PT_EV_CALL, flags = 0;
    if (frame->prev_instr >= _PyCode_CODE(code) && _Py_OPCODE(*frame->prev_instr) == YIELD_VALUE) {
        kind = PT_EV_RESUME;
        if (throwflag)
            flags = PT_EVF_THROWN;
    }
    PyGenObject *gen = _PyFrame_GetGenerator(frame);
    Py_INCREF(gen); /* its frame state is read after the frame ran */
    PyObject *result;
    if (frame_open(tstate, code, kind, flags)) {
        result = _PyEval_EvalFrameDefault(tstate, frame, throwflag);
    } else {
        result = _PyEval_EvalFrameDefault(tstate, frame, throwflag);
        /* YIELD_VALUE sets FRAME_SUSPENDED before it returns; a return or
         * an exception leaves the state to the caller (gen_send_ex2) */
        uint8_t close = result == NULL ? PT_EV_UNWIND
                        : gen->gi_frame_state == FRAME_SUSPENDED ? PT_EV_YIELD
                                                                 : PT_EV_RETURN;
        if (g_active)
            frame_close(code, close);
    }
    Py_DECREF(gen);
    return result;
}

/* 1 installed, 0 not possible (C calls asked for: this hook does not see them;
 * or another tool owns the frame evaluation function). */
static int evalframe_install(PyObject *module, int c_calls)
{
    (void)module;
    if (c_calls)
        return 0;
    PyInterpreterState *interp = PyThreadState_GetInterpreter(PyThreadState_Get());
    _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (current != _PyEval_EvalFrameDefault && current != pt_eval_frame)
        return 0; /* another tool's hook: do not take it over */
    _PyInterpreterState_SetEvalFrameFunc(interp, pt_eval_frame);
    g_interp = interp;
    g_active = 1;
    return 1;
}

static void evalframe_uninstall(void)
{
    g_active = 0;
    if (g_interp == NULL)
        return;
    if (_PyInterpreterState_GetEvalFrameFunc(g_interp) == pt_eval_frame)
        _PyInterpreterState_SetEvalFrameFunc(g_interp, _PyEval_EvalFrameDefault);
    g_interp = NULL;
}

static int evalframe_intact(void)
{
    /* a plain read of a pointer another thread may be writing with the GIL;
     * a stale answer is corrected by the next check */
    return g_interp == NULL || _PyInterpreterState_GetEvalFrameFunc(g_interp) == pt_eval_frame;
}

static int evalframe_active(void)
{
    return g_interp != NULL;
}

static const pt_hook_ops_t evalframe_ops = {
    .name = "frame evaluation (PEP 523)",
    .install = evalframe_install,
    .uninstall = evalframe_uninstall,
    .active = evalframe_active,
    .intact = evalframe_intact,
    .replaced_error = "another tool replaced pytrace's frame-evaluation hook (PEP 523): "
                      "Python calls after that are not traced; trace with C calls on "
                      "(PyEval_SetProfile) alongside that tool",
    .frame_key = evalframe_frame_key,
};

int pt_evalframe_register(void)
{
    return pt_tracer_hook_register(&evalframe_ops);
}

#else /* !PT_HAVE_EVALFRAME */

int pt_evalframe_register(void)
{
    return 0;
}

#endif
