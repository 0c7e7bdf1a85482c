/*
 * The cost floor of CPython's tracing hooks, for bench/overhead.py: an empty C
 * callback on the same hook and the same events pytrace uses, with and without
 * C calls (on 3.11 without them, that hook is the frame-evaluation function).
 * Whatever a tracer does, it pays at least this per event; the difference to a
 * tracer's figure is the tracer's own work.
 *
 * Built by bench/overhead_child.py with the measured interpreter's headers
 * (not part of the library: bench/CMakeLists.txt builds only *.c files that
 * define main, see its filter).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>

/* 3.12+: a sys.monitoring callback (vectorcall, returns None) */
static PyObject *hookfloor_noop(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    (void)args;
    (void)nargs;
    Py_RETURN_NONE;
}

#if PY_VERSION_HEX >= 0x030C0000
/* 3.12+: the cheapest callback CPython can call, as pytrace registers them:
 * an object whose vectorcall slot is the (empty) callback itself. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
} hookfloor_callback;

static PyObject *hookfloor_vc_noop(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    (void)self;
    (void)args;
    (void)nargsf;
    (void)kwnames;
    Py_RETURN_NONE;
}

static PyMemberDef hookfloor_callback_members[] = {
    {"__vectorcalloffset__", Py_T_PYSSIZET, offsetof(hookfloor_callback, vectorcall), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot hookfloor_callback_slots[] = {
    {Py_tp_call, __extension__(void *) PyVectorcall_Call},
    {Py_tp_members, hookfloor_callback_members},
    {0, NULL},
};

static PyType_Spec hookfloor_callback_spec = {
    .name = "hookfloor.Callback",
    .basicsize = sizeof(hookfloor_callback),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = hookfloor_callback_slots,
};

/* vc_noop() -> a new empty vectorcall callback object */
static PyObject *hookfloor_vc(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    static PyTypeObject *type;
    if (type == NULL && (type = (PyTypeObject *)PyType_FromSpec(&hookfloor_callback_spec)) == NULL)
        return NULL;
    hookfloor_callback *cb = PyObject_New(hookfloor_callback, type);
    if (cb)
        cb->vectorcall = hookfloor_vc_noop;
    return (PyObject *)cb;
}
#endif

/* 3.10/3.11: a PyEval_SetProfile function */
static int hookfloor_profile(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    (void)obj;
    (void)frame;
    (void)what;
    (void)arg;
    return 0;
}

static PyObject *hookfloor_setprofile(PyObject *self, PyObject *on)
{
    (void)self;
    PyEval_SetProfile(PyObject_IsTrue(on) ? hookfloor_profile : NULL, NULL);
    Py_RETURN_NONE;
}

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
/* 3.11 without C calls: pytrace uses the frame-evaluation function (PEP 523);
 * its floor is a function that only evaluates the frame. */
static PyObject *hookfloor_eval(PyThreadState *tstate, struct _PyInterpreterFrame *frame, int throwflag)
{
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
}

static PyObject *hookfloor_set_eval(PyObject *self, PyObject *on)
{
    (void)self;
    PyInterpreterState *interp = PyThreadState_GetInterpreter(PyThreadState_Get());
    _PyInterpreterState_SetEvalFrameFunc(interp, PyObject_IsTrue(on) ? hookfloor_eval : _PyEval_EvalFrameDefault);
    Py_RETURN_NONE;
}
#endif

static PyMethodDef hookfloor_methods[] = {
    {"noop", (PyCFunction)(void (*)(void))hookfloor_noop, METH_FASTCALL, "empty monitoring callback"},
    {"setprofile", hookfloor_setprofile, METH_O, "setprofile(on): install an empty C profile function"},
#if PY_VERSION_HEX >= 0x030C0000
    {"vc_noop", hookfloor_vc, METH_NOARGS, "vc_noop() -> an empty callback object called by vectorcall"},
#endif
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
    {"set_eval", hookfloor_set_eval, METH_O, "set_eval(on): install a frame-evaluation function that only evaluates"},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef hookfloor_module = {PyModuleDef_HEAD_INIT, "hookfloor", NULL, -1, hookfloor_methods,
                                              NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_hookfloor(void)
{
    return PyModule_Create(&hookfloor_module);
}
