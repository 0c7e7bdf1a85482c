/*
 * pt_tasks: asyncio task records (issue 23) for the sys.monitoring adapter (3.12+)
 * and the PyEval_SetProfile adapter (3.11, with C calls: its C_CALL event has no
 * arguments, so pt_profile.c reads cb from the caller Handle._run's frame).
 *
 * Every task step runs as Handle._run -> ctx.run(cb, *args): a C call (the
 * bound builtin method Context.run, through CALL_FUNCTION_EX) whose first
 * argument cb is a TaskStepMethWrapper (first step), a bound builtin method of
 * a C Task (wake-ups), or a bound Python method of the pure-Python
 * asyncio.tasks._PyTask (__step / __wakeup). cb.__self__ is the task.
 * pt_monitoring.c calls pt_tasks_call after the CCall record of Context.run and
 * pt_tasks_return before its CReturn / CUnwind: TaskStep, then TaskSuspend with
 * the task's state and, when pending, the TaskAwait records that name what it
 * waits on (suspend_records below: attribute reads with interned names, the
 * coroutine chain's classification cached on each code object in a co_extra
 * slot of our own; no Python function is called and nothing is allocated at a
 * step that awaits a sleep: the start finds the task's symbol in a C table, the
 * end reuses what the start found).
 *
 * Task symbols: one per task object, interned on the task's first step (its
 * name then: get_name(); file: its coroutine's __qualname__; line: a serial
 * 1, 2, ... in the session). Kept in a table keyed by the task's address with a
 * weak reference beside the id: a task is never kept alive, an address reused by
 * a new task fails the weak reference check and gets a new symbol, and dead tasks
 * leave the table when it fills. It is emptied when a new session begins. A full symbol log: the task's
 * records are not written (the first error says so; pt_tasks_unnamed counts).
 */
#include "pt_tasks.h"

#include "pt_tracer_inline.h"
#include "pt_tracer_internal.h"
#include "shm/symlog.h"

#include <errno.h>
#include <frameobject.h>
#include <string.h>

#if PT_HAVE_TASKS

#if PY_VERSION_HEX < 0x030C0000
/* 3.11 (the PyEval_SetProfile adapter): the 3.12 API this file uses, from 3.11's. */
#define PyUnstable_Eval_RequestCodeExtraIndex _PyEval_RequestCodeExtraIndex
#define PyUnstable_Code_GetExtra _PyCode_GetExtra
#define PyUnstable_Code_SetExtra _PyCode_SetExtra

/* (3.11's generators still hold their code object) */
static PyCodeObject *PyGen_GetCode(PyGenObject *gen)
{
    return (PyCodeObject *)Py_NewRef(gen->gi_code);
}

static PyObject *PyFrame_GetVar(PyFrameObject *frame, PyObject *name)
{
    PyObject *locals = PyFrame_GetLocals(frame); /* a dict made for the call: TaskGroup waits only */
    PyObject *v = locals && PyDict_Check(locals) ? PyDict_GetItemWithError(locals, name) : NULL;
    Py_XINCREF(v);
    if (v == NULL && !PyErr_Occurred())
        PyErr_SetObject(PyExc_NameError, name);
    Py_XDECREF(locals);
    return v;
}

#define PT_STEP_WRAPPER_NAME "TaskStepMethWrapper" /* a static type on 3.11 */
#else
#define PT_STEP_WRAPPER_NAME "_asyncio.TaskStepMethWrapper"
#endif

const PyMethodDef *pt_tasks_ctx_run_def;

/* Free-threaded, loops in several threads step tasks at once: g_tasks_mutex serialises
 * the task table (g_slots), the label dict, g_epoch, g_serial, g_unnamed, g_off and the
 * stores of pt_tasks_ctx_run_def (a PyMutex parks detached; held only
 * around C work: dict look-ups and stores of int and str keys, no Python call inside;
 * reset in a fork child). With the GIL, the GIL does. */
#ifdef Py_GIL_DISABLED
static PyMutex g_tasks_mutex;
#define TASKS_LOCK() PyMutex_Lock(&g_tasks_mutex)
#define TASKS_UNLOCK() PyMutex_Unlock(&g_tasks_mutex)
#else
#define TASKS_LOCK() ((void)0)
#define TASKS_UNLOCK() ((void)0)
#endif

static PyObject *g_task_types[2]; /* asyncio.tasks.Task, asyncio.tasks._PyTask (strong) */
/* The tasks seen in session g_epoch: an open-addressing table keyed by the task's
 * address, each slot holding a weak reference to the task (strong to the weakref) and its
 * Task symbol id. No Python object is made or hashed at a look-up. Slots are never freed
 * one by one: when the table is 3/4 full it is rebuilt with the slots whose task still
 * lives (a dead task's slot goes; an address reused by a new task fails the weak
 * reference check and its slot is taken over), doubling only if the live ones need it. */
typedef struct {
    uintptr_t key; /* the task's address; 0: empty */
    PyObject *ref; /* weakref to the task (owned) */
    uint32_t id;   /* its Task symbol (0: none, the log was full) */
} task_slot_t;
static task_slot_t *g_slots;
static size_t g_slot_cap, g_slot_used; /* cap a power of two (0: none yet) */
static uint32_t g_own_labels[4]; /* ids of our labels sleep, yield, TaskGroup, executor in g_epoch (0: not yet) */
static PyObject *g_labels;        /* {label: id} in session g_epoch */
static PyObject *g_gathering;     /* asyncio.tasks._GatheringFuture (strong; may stay NULL) */
static PyTypeObject *g_step_wrapper; /* _asyncio.TaskStepMethWrapper, once seen */
static uint32_t g_epoch;
static uint32_t g_serial;
static uint64_t g_unnamed;        /* task records not written: no symbol (symbol log full) */

static const PyMethodDef *g_ctx_run_def; /* Context.run's (looked up at each start) */
static int g_off;                        /* _tasks_set(False): no task records */

/* The step callable, task and Task symbol found by this thread's last pt_tasks_call,
 * for its pt_tasks_return: between the two the callable is alive (the C call holds it)
 * and holds the task, so its address names both. Cleared at every call and return of
 * Context.run seen, and tied to the session and to pt_task_switches (bumped when task records
 * are switched, so a step whose start was not seen never takes an older step's entry). */
static __thread struct {
    PyObject *cb, *task;
    uint32_t id, epoch, switches;
} tl_step __attribute__((tls_model("initial-exec")));

/* Interned names: the attributes read and the labels written. */
enum {
    S_STATE, S_EXCEPTION, S_CORO, S_FUT_WAITER, S_CR_CODE, S_CR_AWAIT, S_GI_YIELDFROM,
    S_CR_FRAME, S_SELF, S_TASKS, S_CHILDREN, S_CALLBACKS, S_QUALNAME, S_DUNDER_SELF, S_PENDING,
    S_CANCELLED, S_ASYNCIO, S_L_SLEEP, S_L_YIELD, S_L_TASKGROUP, S_L_EXECUTOR, S_COUNT
};
static const char *const g_str_text[S_COUNT] = {
    "_state", "_exception", "_coro", "_fut_waiter", "cr_code", "cr_await", "gi_yieldfrom",
    "cr_frame", "self", "_tasks", "_children", "_callbacks", "__qualname__", "__self__", "PENDING",
    "CANCELLED", "asyncio", "asyncio.sleep", "yield", "TaskGroup", "run_in_executor",
};
static PyObject *g_str[S_COUNT];

/* What an asyncio coroutine's code stands for, cached in its co_extra slot
 * g_code_index (0: not classified yet). */
enum { CLS_UNKNOWN = 0, CLS_NONE, CLS_SLEEP, CLS_THREAD, CLS_SYNC, CLS_IO, CLS_TASKGROUP };
static Py_ssize_t g_code_index = -1; /* -1: no slot (classified at every suspend) */

/* The getter of a getset attribute of an immutable type (the coroutine and generator
 * types, the C Task): what PyObject_GetAttr calls after finding that data descriptor in
 * the type, without the look-up. One type per attribute name; other types (the
 * pure-Python Task) go through PyObject_GetAttr. */
typedef struct {
    PyTypeObject *type;
    getter get;
    void *closure;
    int claimed; /* the one thread that fills get and closure, then publishes type */
} fast_attr_t;
static fast_attr_t g_fast[S_COUNT];

static void fast_attr_init(PyTypeObject *tp, int name)
{
    if (__atomic_load_n(&g_fast[name].claimed, __ATOMIC_RELAXED) || !(tp->tp_flags & Py_TPFLAGS_IMMUTABLETYPE))
        return;
    PyObject *d = PyObject_GetAttr((PyObject *)tp, g_str[name]); /* the descriptor itself */
    if (d != NULL && Py_IS_TYPE(d, &PyGetSetDescr_Type) && ((PyGetSetDescrObject *)d)->d_getset->get &&
        !__atomic_exchange_n(&g_fast[name].claimed, 1, __ATOMIC_RELAXED)) {
        /* (free-threaded, two threads may get here at once: the first to claim writes) */
        PyGetSetDef *def = ((PyGetSetDescrObject *)d)->d_getset; /* lives as long as the type */
        g_fast[name].get = def->get;
        g_fast[name].closure = def->closure;
        __atomic_store_n(&g_fast[name].type, tp, __ATOMIC_RELEASE); /* published last */
    }
    Py_XDECREF(d);
    PyErr_Clear();
}

/* o.<name>: a new reference, or NULL with an exception set. */
static inline PyObject *attr(PyObject *o, int name)
{
    const fast_attr_t *f = &g_fast[name];
    if (__atomic_load_n(&f->type, __ATOMIC_ACQUIRE) == Py_TYPE(o))
        return f->get(o, f->closure);
    return PyObject_GetAttr(o, g_str[name]);
}

static int init_strings(void)
{
    if (g_str[S_COUNT - 1])
        return 0;
    for (int i = 0; i < S_COUNT; i++) {
        if (g_str[i] == NULL && (g_str[i] = PyUnicode_InternFromString(g_str_text[i])) == NULL)
            return -1;
    }
    g_code_index = PyUnstable_Eval_RequestCodeExtraIndex(NULL);
    if (g_code_index < 0)
        PyErr_Clear();
    fast_attr_init(&PyCoro_Type, S_CR_CODE);
    fast_attr_init(&PyCoro_Type, S_CR_AWAIT);
    fast_attr_init(&PyCoro_Type, S_CR_FRAME);
    fast_attr_init(&PyGen_Type, S_GI_YIELDFROM);
    return 0;
}

int pt_tasks_init(void)
{
    if (init_strings() < 0)
        return -1;
    /* (the look-up outside the lock: it may run Python code; the same def every time) */
    const PyMethodDef *def = NULL;
    PyObject *run = PyObject_GetAttrString((PyObject *)&PyContext_Type, "run");
    if (run == NULL)
        return -1;
    if (Py_TYPE(run) == &PyMethodDescr_Type)
        def = ((PyMethodDescrObject *)run)->d_method;
    Py_DECREF(run);
    TASKS_LOCK();
    g_ctx_run_def = def;
    __atomic_store_n(&pt_tasks_ctx_run_def, g_off ? NULL : g_ctx_run_def, __ATOMIC_RELAXED);
    TASKS_UNLOCK();
    return 0;
}

PyObject *pt_tasks_py_set(PyObject *module, PyObject *on)
{
    (void)module;
    int v = PyObject_IsTrue(on);
    if (v < 0)
        return NULL;
    TASKS_LOCK();
    g_off = !v;
    __atomic_store_n(&pt_tasks_ctx_run_def, g_off ? NULL : g_ctx_run_def, __ATOMIC_RELAXED);
    __atomic_add_fetch(&pt_task_switches, 1, __ATOMIC_RELAXED);
    TASKS_UNLOCK();
    Py_RETURN_NONE;
}



/* The asyncio task types, once asyncio.tasks is imported (0: not yet). Free-threaded,
 * hooks of several threads may find them at once: the first to take the task lock keeps
 * its references and publishes g_task_types[0] last (release; readers load it with
 * acquire, after which g_task_types[1] and g_gathering are visible), the others drop
 * theirs. */
static int task_types(void)
{
    if (__atomic_load_n(&g_task_types[0], __ATOMIC_ACQUIRE))
        return 1;
    PyObject *mods = PySys_GetObject("modules"); /* borrowed */
    PyObject *tasks = mods ? PyDict_GetItemString(mods, "asyncio.tasks") : NULL;
    if (tasks == NULL)
        return 0;
    PyObject *t = PyObject_GetAttrString(tasks, "Task");
    PyObject *pt = PyObject_GetAttrString(tasks, "_PyTask");
    PyErr_Clear();
    PyObject *gf = PyObject_GetAttrString(tasks, "_GatheringFuture");
    PyErr_Clear();
    if (gf != NULL && !PyType_Check(gf))
        Py_CLEAR(gf);
    if (t == NULL || !PyType_Check(t)) {
        Py_XDECREF(t);
        Py_XDECREF(pt);
        Py_XDECREF(gf);
        return 0;
    }
    /* the C Task's own attributes (an immutable type; the pure-Python Task is not) */
    static const int task_attrs[] = {S_STATE, S_EXCEPTION, S_CORO, S_FUT_WAITER};
    for (size_t i = 0; i < sizeof task_attrs / sizeof task_attrs[0]; i++)
        fast_attr_init((PyTypeObject *)t, task_attrs[i]);
    if (pt != NULL && !PyType_Check(pt))
        Py_CLEAR(pt);
    TASKS_LOCK();
    int won = g_task_types[0] == NULL;
    if (won) {
        g_gathering = gf;
        g_task_types[1] = pt;
        __atomic_store_n(&g_task_types[0], t, __ATOMIC_RELEASE); /* published last */
    }
    TASKS_UNLOCK();
    if (!won) { /* (released after the lock: no Python code runs under it) */
        Py_DECREF(t);
        Py_XDECREF(pt);
        Py_XDECREF(gf);
    }
    return 1;
}

static int is_task(PyObject *o)
{
    PyObject *t = __atomic_load_n(&g_task_types[0], __ATOMIC_ACQUIRE); /* then [1] is set */
    return t && (PyObject_TypeCheck(o, (PyTypeObject *)t) ||
                 (g_task_types[1] && PyObject_TypeCheck(o, (PyTypeObject *)g_task_types[1])));
}

/* The task whose step cb runs (borrowed), or NULL. */
static PyObject *cb_task(PyObject *cb)
{
    if (!task_types())
        return NULL;
    PyObject *self = NULL;
    PyTypeObject *tp = Py_TYPE(cb), *wrapper;
    if (tp == &PyCFunction_Type || tp == &PyCMethod_Type)
        self = PyCFunction_GET_SELF(cb);
    else if (tp == &PyMethod_Type)
        self = PyMethod_GET_SELF(cb);
    else if (tp == (wrapper = __atomic_load_n(&g_step_wrapper, __ATOMIC_ACQUIRE)) ||
             (wrapper == NULL && strcmp(tp->tp_name, PT_STEP_WRAPPER_NAME) == 0)) {
        if (wrapper == NULL) {
            fast_attr_init(tp, S_DUNDER_SELF);
            /* _asyncio's heap type lives as long as the interpreter; threads that find it
             * at once store the same type */
            __atomic_store_n(&g_step_wrapper, tp, __ATOMIC_RELEASE);
        }
        PyObject *s = attr(cb, S_DUNDER_SELF);
        if (s == NULL) {
            PyErr_Clear();
            return NULL;
        }
        Py_DECREF(s); /* cb holds the task */
        self = s;
    }
    return self && is_task(self) ? self : NULL;
}


PyObject *pt_tasks_py_stats(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    TASKS_LOCK();
    unsigned long long unnamed = g_unnamed, slots = g_slot_cap;
    unsigned tasks = g_serial;
    int off = g_off;
    TASKS_UNLOCK();
    return Py_BuildValue("{s:O,s:K,s:I,s:K}", "on", off ? Py_False : Py_True, "unnamed", unnamed, "tasks",
                         tasks, "slots", slots);
}

void pt_tasks_after_fork_child(void)
{
#ifdef Py_GIL_DISABLED
    memset(&g_tasks_mutex, 0, sizeof g_tasks_mutex); /* its holder did not come along */
#endif
}

static inline size_t slot_hash(uintptr_t key)
{
    uint64_t x = (uint64_t)key >> 4; /* objects are 16-aligned */
    x *= UINT64_C(0x9e3779b97f4a7c15);
    return (size_t)(x ^ (x >> 29));
}

/* Strong references taken under the lock and released after it: releasing the last one
 * of a task runs its finalizer (Python code, which may step into this file again). */
typedef struct {
    PyObject **v;
    size_t n, cap;
} held_t;

static void held_release(held_t *h)
{
    for (size_t i = 0; i < h->n; i++)
        Py_DECREF(h->v[i]);
    free(h->v);
    *h = (held_t){0};
}

/* Whether the slot's task lives. On 3.13+ the check takes a strong reference, kept in
 * `held` (with the GIL nothing can drop the others meanwhile, free-threaded another
 * thread can; if `held` cannot grow it is dropped here: with the GIL, safely). */
static int slot_alive(const task_slot_t *s, held_t *held)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *obj = NULL;
    if (PyWeakref_GetRef(s->ref, &obj) != 1)
        return 0;
    if (held->n == held->cap) {
        size_t cap = held->cap ? held->cap * 2 : 64;
        PyObject **v = realloc(held->v, cap * sizeof *v);
        if (v == NULL) {
            Py_DECREF(obj);
            return 1;
        }
        held->v = v;
        held->cap = cap;
    }
    held->v[held->n++] = obj;
    return 1;
#else
    (void)held;
    return PyWeakref_GET_OBJECT(s->ref) != Py_None;
#endif
}

/* Under the lock: the slot of `key`, or the empty slot where it would go. */
static task_slot_t *slot_find(uintptr_t key)
{
    size_t mask = g_slot_cap - 1;
    for (size_t i = slot_hash(key) & mask;; i = (i + 1) & mask)
        if (g_slots[i].key == key || g_slots[i].key == 0)
            return &g_slots[i];
}

/* Under the lock: empty the table (cap 0: a new session), or rebuild it with the live
 * tasks only into `cap` slots. The weak references of the others are released (a
 * weakref's own end runs no Python code). */
static void slots_rebuild(size_t cap, held_t *held)
{
    task_slot_t *old = g_slots;
    size_t old_cap = g_slot_cap;
    task_slot_t *fresh = cap ? calloc(cap, sizeof *fresh) : NULL;
    g_slots = fresh;
    g_slot_cap = fresh ? cap : 0;
    g_slot_used = 0;
    for (size_t i = 0; i < old_cap; i++) {
        task_slot_t *s = &old[i];
        if (s->key == 0)
            continue;
        if (fresh && slot_alive(s, held)) {
            *slot_find(s->key) = *s;
            g_slot_used++;
        } else {
            Py_DECREF(s->ref);
        }
    }
    free(old);
}

/* Under the lock: the slot for a new entry of `key` (its old entry, dead or another
 * task's, is released), or NULL (no memory). */
static task_slot_t *slot_claim(uintptr_t key, held_t *held)
{
    if (g_slot_cap == 0 || (g_slot_used + 1) * 4 > g_slot_cap * 3) {
        size_t live = 0;
        for (size_t i = 0; i < g_slot_cap; i++)
            live += g_slots[i].key != 0 && slot_alive(&g_slots[i], held);
        size_t cap = g_slot_cap ? g_slot_cap : 256;
        while ((live + 1) * 2 > cap)
            cap *= 2;
        slots_rebuild(cap, held);
        if (g_slots == NULL)
            return NULL;
    }
    task_slot_t *s = slot_find(key);
    if (s->key == key)
        Py_CLEAR(s->ref);
    else
        g_slot_used++;
    s->key = key;
    return s;
}

/* Under the lock. */
static void new_session(uint32_t epoch)
{
    if (g_epoch == epoch && g_labels)
        return;
    held_t none = {0};
    slots_rebuild(0, &none); /* (keeps nothing) */
    Py_XSETREF(g_labels, PyDict_New());
    memset(g_own_labels, 0, sizeof g_own_labels);
    g_epoch = epoch;
    g_serial = 0;
}

/* Under the lock. */
static int append_symbol(uint32_t kind, const char *name, const char *file, uint32_t line, uint32_t *id)
{
    if (pt_core.seg == NULL)
        return -ENOENT;
    int rc = pt_symlog_append(pt_core.seg, kind, name, file, line, id);
    if (rc == -ENOSPC) {
        g_unnamed++;
        pt_tracer_set_first_error("symbol log full: asyncio task %s and later tasks are not recorded; "
                                  "start with a larger symlog_bytes", name);
    } else if (rc < 0)
        pt_tracer_fail("symbol log append failed");
    return rc < 0 ? rc : 0;
}

/* Under the lock: 1 and *id when the table holds `task` (*id 0: its symbol could not be
 * written, the log was full: it is not tried again), else 0. */
static int known_task(PyObject *task, uint32_t *id)
{
    if (g_slot_cap == 0)
        return 0;
    const task_slot_t *s = slot_find((uintptr_t)task);
    if (s->key == 0)
        return 0;
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *obj = NULL;
    if (PyWeakref_GetRef(s->ref, &obj) == 1)
        Py_DECREF(obj); /* compared only: alive, it is `task` (at its address), which the caller holds */
#else
    PyObject *obj = PyWeakref_GET_OBJECT(s->ref);
#endif
    if (obj != task)
        return 0; /* a dead task's address, reused */
    *id = s->id;
    return 1;
}

/* The Task symbol of `task` in session `epoch` (0: none; no exception left). Its name
 * and coroutine are read (Python calls: get_name may be a subclass's) outside the
 * lock; a thread that interned the same task meanwhile wins. A task whose symbol did
 * not fit the log is remembered with 0: counted once, not at each of its steps. */
static uint32_t task_symbol(PyObject *task, uint32_t epoch)
{
    uint32_t id = 0;
    TASKS_LOCK();
    new_session(epoch);
    int known = known_task(task, &id);
    TASKS_UNLOCK();
    if (known)
        return id;
    /* first sight (or a new task at a reused address) */
    PyObject *name = PyObject_CallMethod(task, "get_name", NULL);
    PyObject *coro = name ? PyObject_CallMethod(task, "get_coro", NULL) : NULL;
    PyObject *qual = coro && coro != Py_None ? PyObject_GetAttrString(coro, "__qualname__") : NULL;
    PyErr_Clear();
    const char *n = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    const char *q = qual && PyUnicode_Check(qual) ? PyUnicode_AsUTF8(qual) : NULL;
    PyErr_Clear();
    PyObject *ref = PyWeakref_NewRef(task, NULL);
    PyErr_Clear();
    held_t held = {0};
    TASKS_LOCK();
    new_session(epoch); /* (a new session may have begun meanwhile) */
    if (g_epoch == epoch && !known_task(task, &id)) {
        int rc = append_symbol(PT_SYM_TASK, n ? n : "?", q ? q : "", ++g_serial, &id);
        if (rc < 0)
            id = 0;
        task_slot_t *s = ref ? slot_claim((uintptr_t)task, &held) : NULL;
        if (s != NULL) {
            s->ref = ref; /* the table's now */
            s->id = id;
            ref = NULL;
        }
    }
    TASKS_UNLOCK();
    held_release(&held);
    Py_XDECREF(ref);
    Py_XDECREF(name);
    Py_XDECREF(coro);
    Py_XDECREF(qual);
    return id;
}

static uint32_t label_symbol(PyObject *label)
{
    uint32_t id = 0;
    /* our own labels (asyncio.sleep at every sleep's suspend) skip the dict */
    int own = label == g_str[S_L_SLEEP] ? 0 : label == g_str[S_L_YIELD] ? 1 : label == g_str[S_L_TASKGROUP] ? 2
              : label == g_str[S_L_EXECUTOR] ? 3 : -1;
    TASKS_LOCK();
    if (own >= 0 && g_own_labels[own] != 0) {
        id = g_own_labels[own];
        TASKS_UNLOCK();
        return id;
    }
    PyObject *hit = g_labels ? PyDict_GetItemWithError(g_labels, label) : NULL;
    if (hit) {
        id = (uint32_t)PyLong_AsUnsignedLong(hit);
    } else if (g_labels && !PyErr_Occurred()) { /* first sight: its text (C work on a str) */
        const char *s = PyUnicode_AsUTF8(label);
        if (s != NULL && append_symbol(PT_SYM_LABEL, s, "", 0, &id) == 0) {
            PyObject *v = PyLong_FromUnsignedLong(id);
            if (v == NULL || PyDict_SetItem(g_labels, label, v) < 0)
                PyErr_Clear();
            Py_XDECREF(v);
        }
        PyErr_Clear();
    } else {
        PyErr_Clear(); /* the look-up failed */
    }
    if (own >= 0)
        g_own_labels[own] = id;
    TASKS_UNLOCK();
    return id;
}

/* This thread's context if its ring is in the current session, else NULL. */
static pt_thread_t *ring_thread(uint32_t *epoch)
{
    *epoch = pt_epoch_now();
    pt_thread_t *t = pt_tls_thread;
    return *epoch != 0 && t != NULL && pt_ok_epoch(t) == *epoch ? t : NULL;
}

void pt_tasks_call(PyObject *cb)
{
    tl_step.cb = NULL;
    uint32_t epoch;
    pt_thread_t *t = ring_thread(&epoch);
    if (t == NULL)
        return;
    PyObject *task = cb_task(cb);
    if (task == NULL)
        return;
    PT_EXC_SAVE;
    uint32_t id = task_symbol(task, epoch);
    PT_EXC_RESTORE;
    tl_step.cb = id != 0 ? cb : NULL;
    tl_step.task = task;
    tl_step.id = id;
    tl_step.epoch = epoch;
    tl_step.switches = __atomic_load_n(&pt_task_switches, __ATOMIC_RELAXED);
    if (id != 0) {
        (void)pt_ring_push(&t->ring, pt_now(), id, PT_EV_TASK_STEP, 0, 0);
        t->task = id; /* after the push: a stack written before it has no step yet */
        t->task_switches = tl_step.switches;
    }
}

/* One TaskAwait record: `what` is a task (its Task symbol) or a label (str); anything
 * else writes nothing. No exception left. */
static void push_await(pt_thread_t *t, uint32_t epoch, int kind, PyObject *what)
{
    uint32_t wid = PyUnicode_Check(what) ? label_symbol(what) : is_task(what) ? task_symbol(what, epoch) : 0;
    if (wid != 0)
        (void)pt_ring_push(&t->ring, pt_now(), wid, PT_EV_TASK_AWAIT, 0, (uint16_t)kind);
}

/* A TaskAwait record labelled with the type name of `o` (type(o).__name__). */
static void push_type_name(pt_thread_t *t, uint32_t epoch, int kind, PyObject *o)
{
    PyObject *name = PyType_GetName(Py_TYPE(o));
    if (name != NULL) {
        push_await(t, epoch, kind, name);
        Py_DECREF(name);
    }
    PyErr_Clear();
}

static int str_starts(const char *s, const char *const *prefixes)
{
    for (; *prefixes; prefixes++) {
        if (strncmp(s, *prefixes, strlen(*prefixes)) == 0)
            return 1;
    }
    return 0;
}

/* What awaiting a coroutine of this code stands for: asyncio's own coroutines (by
 * __qualname__, in a file whose path names asyncio) name the wait. */
static int classify_now(PyCodeObject *code)
{
    static const char *const sync_prefixes[] = {"Lock.", "Event.", "Condition.", "Semaphore.", "BoundedSemaphore.",
                                                "Queue.", "PriorityQueue.", "LifoQueue.", "Barrier.", NULL};
    static const char *const io_prefixes[] = {"StreamReader.", "StreamWriter.", "BaseSelectorEventLoop.sock_",
                                              "_SelectorSocketTransport.", "BaseEventLoop.sock_",
                                              "BaseEventLoop.create_connection", "BaseEventLoop.getaddrinfo", NULL};
    PyObject *file = code->co_filename, *qual = code->co_qualname;
    if (!PyUnicode_Check(file) || !PyUnicode_Check(qual))
        return CLS_NONE;
    Py_ssize_t at = PyUnicode_Find(file, g_str[S_ASYNCIO], 0, PY_SSIZE_T_MAX, 1);
    const char *q = at >= 0 ? PyUnicode_AsUTF8(qual) : NULL;
    if (q == NULL) {
        PyErr_Clear();
        return CLS_NONE;
    }
    if (strcmp(q, "sleep") == 0 || strcmp(q, "__sleep0") == 0)
        return CLS_SLEEP;
    if (strcmp(q, "to_thread") == 0)
        return CLS_THREAD;
    if (str_starts(q, sync_prefixes))
        return CLS_SYNC;
    if (str_starts(q, io_prefixes))
        return CLS_IO;
    if (strcmp(q, "TaskGroup.__aexit__") == 0)
        return CLS_TASKGROUP;
    return CLS_NONE;
}

/* classify_now, cached on the code object (the classification depends on the code
 * alone, so it outlives sessions). */
static int classify(PyCodeObject *code)
{
    void *v = NULL;
    if (g_code_index >= 0) {
        if (PyUnstable_Code_GetExtra((PyObject *)code, g_code_index, &v) < 0)
            PyErr_Clear();
        else if (v != NULL)
            return (int)(uintptr_t)v;
    }
    int cls = classify_now(code);
    if (g_code_index >= 0 && PyUnstable_Code_SetExtra((PyObject *)code, g_code_index, (void *)(uintptr_t)cls) < 0)
        PyErr_Clear();
    return cls;
}

/* Each item of the iterable `o` (borrowed): a task -> Task, else Future with its type
 * name (gather's children), or, with `any`, push_await(Task, item) as it is. */
static void push_each(pt_thread_t *t, uint32_t epoch, PyObject *o, int any)
{
    PyObject *it = PyObject_GetIter(o);
    if (it == NULL) {
        PyErr_Clear();
        return;
    }
    PyObject *c;
    while ((c = PyIter_Next(it)) != NULL) {
        if (any || is_task(c))
            push_await(t, epoch, PT_AWAIT_TASK, c);
        else
            push_type_name(t, epoch, PT_AWAIT_FUTURE, c);
        Py_DECREF(c);
    }
    Py_DECREF(it);
    PyErr_Clear();
}

/* TaskGroup.__aexit__ waits for the group's tasks: its frame's `self`._tasks. */
static void push_taskgroup(pt_thread_t *t, uint32_t epoch, PyObject *coro)
{
    PyObject *frame = attr(coro, S_CR_FRAME);
    PyObject *tg = frame && PyFrame_Check(frame) ? PyFrame_GetVar((PyFrameObject *)frame, g_str[S_SELF]) : NULL;
    PyErr_Clear();
    PyObject *tasks = tg ? PyObject_GetAttr(tg, g_str[S_TASKS]) : NULL;
    PyErr_Clear();
    int any = tasks ? PyObject_IsTrue(tasks) : 0;
    if (any > 0)
        push_each(t, epoch, tasks, 1);
    else
        push_await(t, epoch, PT_AWAIT_FUTURE, g_str[S_L_TASKGROUP]);
    PyErr_Clear();
    Py_XDECREF(tasks);
    Py_XDECREF(tg);
    Py_XDECREF(frame);
}

/* What the future a task waits on stands for: a task, a gather of children, a thread's
 * result (chained to a concurrent.futures.Future), else a Future of its type name. */
static void push_future(pt_thread_t *t, uint32_t epoch, PyObject *fut)
{
    if (is_task(fut)) {
        push_await(t, epoch, PT_AWAIT_TASK, fut);
        return;
    }
    if (g_gathering && PyObject_TypeCheck(fut, (PyTypeObject *)g_gathering)) {
        PyObject *children = PyObject_GetAttr(fut, g_str[S_CHILDREN]);
        if (children)
            push_each(t, epoch, children, 0);
        Py_XDECREF(children);
        PyErr_Clear();
        return;
    }
    PyObject *cbs = PyObject_GetAttr(fut, g_str[S_CALLBACKS]);
    PyErr_Clear();
    PyObject *it = cbs && cbs != Py_None ? PyObject_GetIter(cbs) : NULL;
    PyErr_Clear();
    int chained = 0;
    PyObject *item;
    while (it && !chained && (item = PyIter_Next(it)) != NULL) {
        PyObject *cb = PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2 ? PyTuple_GET_ITEM(item, 0) : NULL;
        PyObject *q = cb ? PyObject_GetAttr(cb, g_str[S_QUALNAME]) : NULL;
        PyErr_Clear();
        if (q && PyUnicode_Check(q)) {
            const char *s = PyUnicode_AsUTF8(q);
            chained = s && strncmp(s, "_chain_future.", 14) == 0;
        }
        PyErr_Clear();
        Py_XDECREF(q);
        Py_DECREF(item);
    }
    PyErr_Clear();
    Py_XDECREF(it);
    Py_XDECREF(cbs);
    if (chained)
        push_await(t, epoch, PT_AWAIT_THREAD, g_str[S_L_EXECUTOR]);
    else
        push_type_name(t, epoch, PT_AWAIT_FUTURE, fut);
}

/* The task's state after a step: _state / _exception (never exception(), which would
 * mark a failure as retrieved). Unreadable: Pending. */
static int task_state(PyObject *task)
{
    PyObject *s = attr(task, S_STATE);
    if (s == NULL) {
        PyErr_Clear();
        return PT_TASK_PENDING;
    }
    int state;
    if (s == g_str[S_PENDING] || (PyUnicode_Check(s) && PyUnicode_Compare(s, g_str[S_PENDING]) == 0))
        state = PT_TASK_PENDING;
    else if (s == g_str[S_CANCELLED] || (PyUnicode_Check(s) && PyUnicode_Compare(s, g_str[S_CANCELLED]) == 0))
        state = PT_TASK_CANCELLED;
    else {
        PyObject *e = attr(task, S_EXCEPTION);
        state = e == NULL ? PT_TASK_PENDING : e != Py_None ? PT_TASK_FAILED : PT_TASK_DONE;
        Py_XDECREF(e);
    }
    Py_DECREF(s);
    PyErr_Clear();
    return state;
}

/* The code object of a coroutine or generator (new reference). Not through cr_code /
 * gi_code: their getters raise the "object.__getattr__" audit event, which builds its
 * arguments and runs every audit hook (pytrace's own included), about 1,000
 * instructions a read on 3.12. PyGen_GetCode reads the same field of the generator
 * layout that coroutines share (CPython's cr_code getter does the same); only a debug
 * build's assert insists on a generator, so there the getter is used. */
static PyObject *gen_code(PyObject *aw, int coro)
{
#ifdef Py_DEBUG
    if (coro)
        return attr(aw, S_CR_CODE);
#else
    (void)coro;
#endif
    return (PyObject *)PyGen_GetCode((PyGenObject *)aw);
}

/* TaskSuspend, then for a pending task the TaskAwait records of what it waits on: the
 * coroutine chain (cr_await / gi_yieldfrom) from the task's coroutine inwards, where the
 * first of asyncio's own coroutines names the wait; else the task's _fut_waiter; else
 * a Future named after the innermost awaitable (a bare `yield`: "yield"). */
static void suspend_records(pt_thread_t *t, uint32_t epoch, PyObject *task, uint32_t id)
{
    int state = task_state(task);
    (void)pt_ring_push(&t->ring, pt_now(), id, PT_EV_TASK_SUSPEND, 0, (uint16_t)state);
    t->task = 0; /* after the push: a stack written before it still opens the step */
    if (state != PT_TASK_PENDING)
        return;
    PyObject *aw = attr(task, S_CORO);
    while (aw != NULL) {
        int coro = Py_IS_TYPE(aw, &PyCoro_Type);
        if (!coro && !Py_IS_TYPE(aw, &PyGen_Type))
            break;
        PyObject *code = gen_code(aw, coro);
        if (code == NULL || !PyCode_Check(code)) {
            Py_XDECREF(code);
            Py_CLEAR(aw);
            break;
        }
        int cls = classify((PyCodeObject *)code);
        if (cls != CLS_NONE) {
            if (cls == CLS_SLEEP)
                push_await(t, epoch, PT_AWAIT_SLEEP, g_str[S_L_SLEEP]);
            else if (cls == CLS_TASKGROUP)
                push_taskgroup(t, epoch, aw);
            else
                push_await(t, epoch,
                           cls == CLS_THREAD ? PT_AWAIT_THREAD : cls == CLS_SYNC ? PT_AWAIT_SYNC : PT_AWAIT_IO,
                           ((PyCodeObject *)code)->co_qualname);
            Py_DECREF(code);
            Py_DECREF(aw);
            return;
        }
        Py_DECREF(code);
        Py_SETREF(aw, attr(aw, coro ? S_CR_AWAIT : S_GI_YIELDFROM));
    }
    PyObject *waiter = aw ? attr(task, S_FUT_WAITER) : NULL;
    PyErr_Clear();
    if (waiter != NULL && waiter != Py_None)
        push_future(t, epoch, waiter);
    else if (waiter != NULL && aw == Py_None)
        push_await(t, epoch, PT_AWAIT_FUTURE, g_str[S_L_YIELD]);
    else if (waiter != NULL)
        push_type_name(t, epoch, PT_AWAIT_FUTURE, aw);
    Py_XDECREF(waiter);
    Py_XDECREF(aw);
    PyErr_Clear();
}

void pt_tasks_return(PyObject *cb)
{
    PyObject *started = tl_step.cb;
    tl_step.cb = NULL;
    uint32_t epoch;
    pt_thread_t *t = ring_thread(&epoch);
    if (t == NULL)
        return;
    int seen = cb == started && epoch == tl_step.epoch &&
               tl_step.switches == __atomic_load_n(&pt_task_switches, __ATOMIC_RELAXED);
    PyObject *task = seen ? tl_step.task : cb_task(cb); /* this step's start found it */
    if (task == NULL)
        return;
    uint32_t id = tl_step.id;
    PT_EXC_SAVE; /* (a C_RAISE: the program's exception is pending) */
    if (!seen) {
        id = task_symbol(task, epoch);
        /* its start was not seen (tracing began inside the step, or task records were
         * switched on in it): the step is there, its start unknown; a Synthetic TaskStep
         * says so, unless a stack written since has already opened it */
        if (id != 0 && t->task != id)
            (void)pt_ring_push(&t->ring, pt_now(), id, PT_EV_TASK_STEP, PT_EVF_SYNTHETIC, 0);
    }
    if (id != 0)
        suspend_records(t, epoch, task, id);
    PT_EXC_RESTORE;
}

#endif /* PT_HAVE_TASKS */

#if !PT_HAVE_TASKS
void pt_tasks_after_fork_child(void) {}

PyObject *pt_tasks_py_set(PyObject *module, PyObject *on)
{
    (void)module;
    if (PyObject_IsTrue(on) < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyObject *pt_tasks_py_stats(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return Py_BuildValue("{s:O,s:i,s:i,s:i}", "on", Py_False, "unnamed", 0, "tasks", 0, "slots", 0);
}
#endif
