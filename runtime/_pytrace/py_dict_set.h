/*
 * PT_DICT_SET: d[key] = expr for the extension's functions that return a dict
 * of counters (agg_binding.c, export_binding.c). expr is a new reference (NULL
 * with an exception set is an error); on an error it jumps to the caller's
 * `err` label.
 */
#ifndef PT_PY_DICT_SET_H
#define PT_PY_DICT_SET_H

#include <Python.h>

#define PT_DICT_SET(d, key, expr)                                 \
    do {                                                          \
        PyObject *o_ = (expr);                                    \
        if (!o_ || PyDict_SetItemString(d, key, o_) < 0) {        \
            Py_XDECREF(o_);                                       \
            goto err;                                             \
        }                                                         \
        Py_DECREF(o_);                                            \
    } while (0)

#endif /* PT_PY_DICT_SET_H */
