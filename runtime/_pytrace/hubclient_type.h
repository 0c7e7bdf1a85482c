/*
 * _pytrace.HubClient: a reader of a job's hub (viewer/hub/client.h) for
 * Python, added to the module by pt_hubclient_type_add() from module.c's exec
 * slot. runtime/pytrace/reader.py picks it when a hub holds the segment.
 */
#ifndef PT_RUNTIME_HUBCLIENT_TYPE_H
#define PT_RUNTIME_HUBCLIENT_TYPE_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

/* 0, or -1 with an exception set. */
int pt_hubclient_type_add(PyObject *module);

#endif /* PT_RUNTIME_HUBCLIENT_TYPE_H */
