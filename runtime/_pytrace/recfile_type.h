/*
 * The recording file (viewer/core/recfile.h) for Python: the types RecFileReader
 * and RecFileWriter and the function verify_message, added to the module by
 * pt_recfile_types_add() from module.c's exec slot. runtime/pytrace/recording.py
 * is the Python face of these.
 */
#ifndef PT_RUNTIME_RECFILE_TYPE_H
#define PT_RUNTIME_RECFILE_TYPE_H

#include <Python.h>

/* 0, or -1 with an exception set. */
int pt_recfile_types_add(PyObject *module);

#endif /* PT_RUNTIME_RECFILE_TYPE_H */
