/*
 * The cost floor of CPython's tracing hooks, for bench/overhead.py: an empty C
 * callback on the same hook and the same events pytrace uses. Whatever a tracer
 * does, it pays at least this per event; the difference to a tracer's figure is
 * the tracer's own work.
 *
 * Built by bench/overhead_child.py with the measured interpreter's headers
 * (not part of the library: bench/CMakeLists.txt builds only *.c files that
 * define main, see its filter).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* 3.12+: a sys.monitoring callback (vectorcall, returns None) */
static PyObject *hookfloor_noop(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    (void)args;
    (void)nargs;
    Py_RETURN_NONE;
}

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

static PyMethodDef hookfloor_methods[] = {
    {"noop", (PyCFunction)(void (*)(void))hookfloor_noop, METH_FASTCALL, "empty monitoring callback"},
    {"setprofile", hookfloor_setprofile, METH_O, "setprofile(on): install an empty C profile function"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef hookfloor_module = {PyModuleDef_HEAD_INIT, "hookfloor", NULL, -1, hookfloor_methods,
                                              NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_hookfloor(void)
{
    return PyModule_Create(&hookfloor_module);
}
