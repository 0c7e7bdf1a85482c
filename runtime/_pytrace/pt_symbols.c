/*
 * pt_symbols: the core's symbols -- what a code object, a C function or a label
 * is called in the session's symbol log (shm/symlog.h), and the caches that
 * keep the hot path from asking twice.
 *
 *   A code object's id lives in its co_extra slot (pt_code_extra_index) as
 *   epoch<<33 | filtered<<32 | id; the include/exclude/hide filters are applied
 *   once, when the code is first seen in a session. A C function's id lives in
 *   a node of a lock-free rculfhash keyed by its PyMethodDef, as epoch<<32 | id
 *   (each thread keeps a small cache in front of it, pt_threads.c). A new
 *   session (new epoch) invalidates all of them at once.
 *
 *   Interning runs Python (names, module of the frame, cProfile's labels), and
 *   a GC run there may run anything, even stop(): every intern does its Python
 *   work first, then re-checks the epoch, then appends to the symbol log.
 */
#include "pt_tracer_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define _LGPL_SOURCE /* inline read-side lock (liburcu is LGPL; header inlines are allowed) */
#include <urcu/urcu-bp.h>
#include <urcu/rculfhash.h>

#include "shm/symlog.h"

#if PY_VERSION_HEX >= 0x030C0000
#define pt_code_set_extra PyUnstable_Code_SetExtra
#define pt_request_code_extra_index PyUnstable_Eval_RequestCodeExtraIndex
#else
#define pt_code_set_extra _PyCode_SetExtra
#define pt_request_code_extra_index _PyEval_RequestCodeExtraIndex
#endif

typedef struct pt_cnode {
    struct cds_lfht_node node;
    const PyMethodDef *def;
    _Atomic uint64_t value; /* epoch << 32 | id */
} pt_cnode_t;

/* C functions by PyMethodDef; entries never removed (no call_rcu needed) */
static struct cds_lfht *cfuncs;

Py_ssize_t pt_code_extra_index = -1;

#ifdef Py_GIL_DISABLED
PyMutex pt_intern_mutex;
#endif

/* ---- filters and code interning ----------------------------------------- */

static int prefix_match(const char *s, const char *pat, int module)
{
    size_t n = strlen(pat);
    if (strncmp(s, pat, n) != 0)
        return 0;
    /* a module pattern "a.b" matches "a.b" and "a.b.c", not "a.bc" */
    return !module || s[n] == '\0' || s[n] == '.' || pat[n ? n - 1 : 0] == '.';
}

static int list_matches(char **pats, const char *file, const char *module)
{
    for (; pats && *pats; pats++) {
        if (file && prefix_match(file, *pats, 0))
            return 1;
        if (module && prefix_match(module, *pats, 1))
            return 1;
    }
    return 0;
}

const char *pt_utf8_or(PyObject *s, const char *fallback)
{
    if (s == NULL || !PyUnicode_Check(s))
        return fallback;
    const char *u = PyUnicode_AsUTF8(s);
    if (u == NULL) {
        PyErr_Clear();
        return fallback;
    }
    return u;
}

/* Module name of the frame running `code`, if it is the current frame. */
static const char *module_of(PyCodeObject *code)
{
    PyFrameObject *f = PyEval_GetFrame(); /* borrowed */
    if (f == NULL)
        return NULL;
    PyCodeObject *fc = PyFrame_GetCode(f);
    Py_DECREF(fc);
    if (fc != code)
        return NULL;
    PyObject *globals = PyEval_GetGlobals(); /* borrowed */
    if (globals == NULL || !PyDict_Check(globals))
        return NULL;
    return pt_utf8_or(PyDict_GetItemString(globals, "__name__"), NULL);
}

static uint64_t code_intern(PyCodeObject *code, uint32_t epoch)
{
    uint64_t value;
    PT_EXC_SAVE;
    const char *file = pt_utf8_or(code->co_filename, "");
    int filtered = 0;
    if (pt_core.opts.hide && list_matches(pt_core.opts.hide, file, NULL)) {
        filtered = 1; /* pytrace's own code: never in the picture, nor its C calls */
    } else if (pt_core.opts.include || pt_core.opts.exclude) {
        const char *module = module_of(code);
        if (pt_core.opts.include && !list_matches(pt_core.opts.include, file, module))
            filtered = 1;
        if (pt_core.opts.exclude && list_matches(pt_core.opts.exclude, file, module))
            filtered = 1;
    }
    uint32_t id = 0;
    /* cProfile keys code by (co_filename, co_firstlineno, co_name) */
    const char *profile_name = filtered ? NULL : pt_utf8_or(code->co_name, "?");
#if PY_VERSION_HEX >= 0x030B0000
    const char *name = filtered ? NULL : pt_utf8_or(code->co_qualname, "?");
#else
    const char *name = profile_name;
#endif
    /* No Python call from here to the unlock. */
    PT_INTERN_LOCK();
#ifdef Py_GIL_DISABLED
    /* another thread interned it meanwhile (it held the lock): take its id */
    uint64_t again = pt_code_extra(code);
    if ((again >> 33) == epoch) {
        PT_INTERN_UNLOCK();
        PT_EXC_RESTORE;
        return (again & PT_XTRA_FILTERED) ? PT_CODE_FILTERED : (uint32_t)again;
    }
#endif
    if (!filtered) {
        if (pt_epoch_now() != epoch || pt_core.seg == NULL) {
            PT_INTERN_UNLOCK();
            PT_EXC_RESTORE;
            return PT_CODE_FILTERED;
        }
        int rc = pt_symlog_append_named(pt_core.seg, PT_SYM_PY_FUNCTION, name, file,
                                        (uint32_t)(code->co_firstlineno > 0 ? code->co_firstlineno : 0),
                                        profile_name, &id);
        if (rc == -ENOSPC)
            pt_tracer_set_first_error("symbol log full: %s and later functions show as <unknown>; "
                            "start with a larger symlog_bytes", name);
        else if (rc < 0)
            pt_tracer_fail("symbol log append failed");
        if (rc < 0)
            id = 0;
    }
    value = ((uint64_t)epoch << 33) | (filtered ? PT_XTRA_FILTERED : 0) | id;
    /* the id was published by pt_symlog_append before we cache it */
    if (pt_code_set_extra((PyObject *)code, pt_code_extra_index, (void *)(uintptr_t)value) < 0) {
        PyErr_Clear();
        pt_tracer_fail("cannot cache a symbol id on a code object");
    }
    PT_INTERN_UNLOCK();
    PT_EXC_RESTORE;
    return filtered ? PT_CODE_FILTERED : id;
}

__attribute__((noinline)) uint64_t pt_code_lookup(PyCodeObject *code)
{
    uint64_t v = pt_code_extra(code);
    uint32_t epoch = pt_epoch_now();
    if (PT_LIKELY((v >> 33) == epoch && epoch != 0))
        return (v & PT_XTRA_FILTERED) ? PT_CODE_FILTERED : (uint32_t)v;
    if (epoch == 0)
        return PT_CODE_FILTERED;
    return code_intern(code, epoch);
}

/* ---- C functions ---------------------------------------------------------- */

static unsigned long hash_ptr(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    return (unsigned long)x;
}

static int cnode_match(struct cds_lfht_node *node, const void *key)
{
    return caa_container_of(node, pt_cnode_t, node)->def == key;
}

static void type_names(PyTypeObject *tp, const char **name, char *module, size_t modlen)
{
    const char *full = tp->tp_name;
    const char *dot = strrchr(full, '.');
    *name = full;
    if (dot) {
        size_t n = (size_t)(dot - full);
        if (n >= modlen)
            n = modlen - 1;
        memcpy(module, full, n);
        module[n] = '\0';
    } else {
        snprintf(module, modlen, "builtins");
    }
}

static int defines(PyTypeObject *tp, const PyMethodDef *def)
{
    for (const PyMethodDef *m = tp->tp_methods; m && m->ml_name; m++)
        if (m == def)
            return 1;
    return 0;
}

/* The type on tp's MRO whose method table holds `def`, or NULL. A C function is
 * interned once per PyMethodDef, so it is named after the type that defines it,
 * not the (sub)type of the object it was first called on. */
static PyTypeObject *defining_type(PyTypeObject *tp, const PyMethodDef *def)
{
    PyObject *mro = tp->tp_mro;
    if (mro == NULL || !PyTuple_Check(mro))
        return defines(tp, def) ? tp : NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
        PyObject *base = PyTuple_GET_ITEM(mro, i);
        if (PyType_Check(base) && defines((PyTypeObject *)base, def))
            return (PyTypeObject *)base;
    }
    return NULL;
}

/* Objects whose repr runs no Python code (cProfile calls repr() on whatever the
 * lookup finds; we must not run the program's own __repr__ from a hook). */
static int repr_is_safe(PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    return tp == &PyMethodDescr_Type || tp == &PyClassMethodDescr_Type || tp == &PyWrapperDescr_Type ||
           tp == &PyMemberDescr_Type || tp == &PyGetSetDescr_Type || tp == &PyCFunction_Type ||
           tp == &PyCMethod_Type || tp == &PyFunction_Type || tp->tp_repr == PyBaseObject_Type.tp_repr;
}

/* s into out, cut (if it must be) before a UTF-8 sequence, never inside one. */
static void copy_utf8(PyObject *s, char *out, size_t len)
{
    const char *u = pt_utf8_or(s, NULL);
    if (u == NULL || len == 0)
        return;
    size_t n = strlen(u);
    if (n >= len) {
        n = len - 1;
        while (n > 0 && ((unsigned char)u[n] & 0xC0u) == 0x80u)
            n--;
    }
    memcpy(out, u, n);
    out[n] = '\0';
}

/* The label cProfile gives a C function in this call: normalizeUserObj() of
 * CPython's Modules/_lsprof.c (the same in 3.10 to 3.13), applied to the bound
 * builtin method that CPython (3.10/3.11) or cProfile (3.12+, for a method
 * descriptor and its first argument) hands it:
 *   no self:   "<NAME>", or "<MODULE.NAME>" when the module is not builtins;
 *   with self: repr(lookup of NAME on type(self)), e.g. "<method 'append' of
 *              'list' objects>", else "<built-in method MODULE.NAME>" or
 *              "<built-in method NAME>" (module functions: self is the module).
 * cProfile keys its entries by the PyMethodDef and names one on first sight, as
 * we intern, so the first call's label is the label of every call. Where the
 * lookup finds an object whose repr would run Python code (a class attribute of
 * the program's own type with its own __repr__) the last form stands in. */
static void cprofile_label(PyObject *callable, PyObject *self_arg, const PyMethodDef *def, char *out,
                           size_t len)
{
    PyObject *self = NULL, *module = NULL;
    snprintf(out, len, "<built-in method %s>", def->ml_name);
    if (PyCFunction_Check(callable)) {
        PyCFunctionObject *f = (PyCFunctionObject *)callable;
        self = f->m_self;
        module = f->m_module;
        if (self == NULL) {
            PyObject *modname = NULL;
            if (module && PyUnicode_Check(module)) {
                modname = module;
                Py_INCREF(modname);
            } else if (module && PyModule_Check(module)) {
                modname = PyModule_GetNameObject(module);
                if (modname == NULL)
                    PyErr_Clear();
            }
            const char *m = pt_utf8_or(modname, NULL);
            if (m && strcmp(m, "builtins") != 0)
                snprintf(out, len, "<%s.%s>", m, def->ml_name);
            else
                snprintf(out, len, "<%s>", def->ml_name);
            Py_XDECREF(modname);
            return;
        }
    } else {
        /* A method descriptor: cProfile binds it to the first argument (a method
         * bound this way has no module), and records nothing when it cannot
         * (no argument, or one of another type); the descriptor's own repr
         * names it then. */
        PyTypeObject *owner = PyDescr_TYPE(callable);
        if (self_arg == NULL || !PyObject_TypeCheck(self_arg, owner)) {
            snprintf(out, len, "<method '%s' of '%s' objects>", def->ml_name, owner->tp_name);
            return;
        }
        self = self_arg;
    }
    PyObject *name = PyUnicode_FromString(def->ml_name);
    PyObject *found = name ? _PyType_Lookup(Py_TYPE(self), name) : NULL; /* borrowed */
    Py_XINCREF(found);
    Py_XDECREF(name);
    PyObject *repr = found && repr_is_safe(found) ? PyObject_Repr(found) : NULL;
    Py_XDECREF(found);
    if (repr) {
        copy_utf8(repr, out, len);
        Py_DECREF(repr);
        return;
    }
    PyErr_Clear();
    const char *m = module && PyUnicode_Check(module) ? pt_utf8_or(module, NULL) : NULL;
    if (m)
        snprintf(out, len, "<built-in method %s.%s>", m, def->ml_name);
}

static uint32_t cfunc_intern(PyObject *callable, PyObject *self_arg, const PyMethodDef *def,
                             pt_cnode_t *node, unsigned long hash, uint32_t epoch)
{
    char name[512], module[256], label[1024];
    const char *owner = NULL;
    PT_EXC_SAVE;
    module[0] = '\0';
    if (PyCFunction_Check(callable)) {
        PyCFunctionObject *f = (PyCFunctionObject *)callable;
        PyObject *self = f->m_self;
        if (self && PyModule_Check(self)) {
            owner = PyModule_GetName(self);
            if (owner == NULL) {
                PyErr_Clear();
                owner = pt_utf8_or(f->m_module, "");
            }
            snprintf(module, sizeof module, "%s", owner);
        } else if (self) {
            /* a method of type(self), or a class or static method of self */
            PyTypeObject *tp = defining_type(Py_TYPE(self), def);
            if (tp == NULL && PyType_Check(self))
                tp = defining_type((PyTypeObject *)self, def);
            if (tp == NULL && PyType_Check(self))
                tp = (PyTypeObject *)self;
            if (tp) {
                type_names(tp, &owner, module, sizeof module);
            } else {
                /* A function bound to an object whose type does not define it:
                 * pybind11's (self is its function record, of a type named
                 * pybind11_builtins.pybind11_detail_function_record_v1_...), a
                 * weakref callback. Named as cProfile names it ("<built-in
                 * method MODULE.NAME>", cprofile_label): by the module the
                 * function says it is from, not by that object's type. */
                owner = f->m_module && PyUnicode_Check(f->m_module) ? pt_utf8_or(f->m_module, "") : "";
                snprintf(module, sizeof module, "%s", owner);
            }
        } else {
            owner = pt_utf8_or(f->m_module, "");
            snprintf(module, sizeof module, "%s", owner);
        }
    } else {
        type_names(PyDescr_TYPE(callable), &owner, module, sizeof module);
    }
    /* a function without a name (pybind11 gives each torch.ops overload one,
     * cProfile shows it as "MODULE.") reads as <unnamed>, not a bare dot */
    const char *fname = def->ml_name && def->ml_name[0] ? def->ml_name : "<unnamed>";
    if (owner && owner[0])
        snprintf(name, sizeof name, "%s.%s", owner, fname);
    else
        snprintf(name, sizeof name, "%s", fname);
    cprofile_label(callable, self_arg, def, label, sizeof label);

    uint32_t id = 0;
    /* No Python call from here to the unlock. */
    PT_INTERN_LOCK();
    if (pt_epoch_now() != epoch || pt_core.seg == NULL) {
        PT_INTERN_UNLOCK();
        PT_EXC_RESTORE;
        return 0;
    }
#ifdef Py_GIL_DISABLED
    /* another thread interned it meanwhile (it held the lock): take its id */
    {
        struct cds_lfht_iter iter;
        urcu_bp_read_lock();
        cds_lfht_lookup(cfuncs, hash, cnode_match, def, &iter);
        struct cds_lfht_node *n = cds_lfht_iter_get_node(&iter);
        uint64_t v = n ? atomic_load_explicit(&caa_container_of(n, pt_cnode_t, node)->value,
                                              memory_order_acquire) : 0;
        urcu_bp_read_unlock();
        if (n && (v >> 32) == epoch) {
            PT_INTERN_UNLOCK();
            PT_EXC_RESTORE;
            return (uint32_t)v;
        }
    }
#endif
    int rc = pt_symlog_append_named(pt_core.seg, PT_SYM_C_FUNCTION, name, module, 0, label, &id);
    if (rc < 0) {
        id = 0;
        if (rc != -ENOSPC)
            pt_tracer_fail("symbol log append failed");
    }
    uint64_t value = ((uint64_t)epoch << 32) | id;
    if (node) {
        /* release: the symbol is published; pairs with the acquire in pt_symbols_cfunc_id */
        atomic_store_explicit(&node->value, value, memory_order_release);
    } else {
        node = calloc(1, sizeof *node);
        if (node == NULL) {
            pt_tracer_fail("out of memory interning a C function");
        } else {
            cds_lfht_node_init(&node->node);
            node->def = def;
            atomic_store_explicit(&node->value, value, memory_order_relaxed);
            urcu_bp_read_lock();
            struct cds_lfht_node *got = cds_lfht_add_unique(cfuncs, hash, cnode_match, def, &node->node);
            if (got != &node->node) { /* someone else added it: update theirs */
                atomic_store_explicit(&caa_container_of(got, pt_cnode_t, node)->value, value,
                                      memory_order_release);
                urcu_bp_read_unlock();
                free(node);
            } else {
                urcu_bp_read_unlock();
            }
        }
    }
    PT_INTERN_UNLOCK();
    PT_EXC_RESTORE;
    return id;
}

uint32_t pt_symbols_cfunc_id(PyObject *callable, PyObject *self_arg, const PyMethodDef *def, uint32_t epoch)
{
    struct cds_lfht_iter iter;
    unsigned long hash = hash_ptr(def);
    urcu_bp_read_lock();
    cds_lfht_lookup(cfuncs, hash, cnode_match, def, &iter);
    struct cds_lfht_node *n = cds_lfht_iter_get_node(&iter);
    pt_cnode_t *node = n ? caa_container_of(n, pt_cnode_t, node) : NULL;
    /* acquire: pairs with the release store of the value in cfunc_intern */
    uint64_t v = node ? atomic_load_explicit(&node->value, memory_order_acquire) : 0;
    urcu_bp_read_unlock();
    if (PT_LIKELY(node && (v >> 32) == epoch))
        return (uint32_t)v;
    return cfunc_intern(callable, self_arg, def, node, hash, epoch);
}

int pt_tracer_intern_label(const char *name, uint32_t *id_out)
{
    if (pt_epoch_now() == 0 || pt_core.seg == NULL)
        return -ENOENT;
    return pt_symlog_append(pt_core.seg, PT_SYM_LABEL, name, "", 0, id_out);
}

int pt_symbols_init(char *err, size_t errlen)
{
    pt_code_extra_index = pt_request_code_extra_index(NULL);
    if (pt_code_extra_index < 0) {
        snprintf(err, errlen, "no free co_extra slot on code objects (too many tools loaded)");
        return -ENOSPC;
    }
    /* Fixed size, no auto-resize and no removal: lookups are lock-free, and
     * nothing ever needs call_rcu (whose worker threads would not survive a
     * fork). 2^14 buckets keep chains short for tens of thousands of C
     * functions. */
    cfuncs = cds_lfht_new_flavor(1u << 14, 1u << 14, 1u << 14, 0, &urcu_bp_flavor, NULL);
    if (cfuncs == NULL) {
        snprintf(err, errlen, "cannot allocate the C function table");
        return -ENOMEM;
    }
    pthread_atfork(urcu_bp_before_fork, urcu_bp_after_fork_parent, urcu_bp_after_fork_child);
    return 0;
}
