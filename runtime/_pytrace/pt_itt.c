/*
 * pt_itt: an ITT collector inside _pytrace -- PyTorch's operators as spans.
 *
 * How it is reached. libtorch_cpu links ittnotify's static part (intel/ittapi,
 * src/ittnotify/ittnotify_static.c). On its first ITT call other than a create
 * (__itt_task_begin: the first op under emit_itt) it reads INTEL_LIBITTNOTIFY64,
 * dlopen()s that library and, because it exports __itt_api_version (a "version 1"
 * collector), dlsym()s every API entry of the groups INTEL_ITTNOTIFY_GROUPS names
 * (without that variable it resolves none). pytrace sets INTEL_LIBITTNOTIFY64 to
 * this extension's own file and INTEL_ITTNOTIFY_GROUPS to "structure" (domains,
 * string handles, tasks); dlopen of a loaded file returns the loaded copy, so the
 * entries below, exported with default visibility, are what torch calls. Domains
 * and string handles created before that first call (torch's "PyTorch" domain,
 * at import) are the static part's own structs: only their leading fields
 * (ittnotify.h's __itt_domain, __itt_string_handle) are read here.
 *
 * What it writes. Each __itt_task_begin of the "PyTorch" domain (an aten:: op, an
 * autograd node, a record_function label) is a SpanBegin record with the op's name
 * as a label symbol, in the calling thread's ring (pt_foreign_enter: the thread may
 * be a Python thread inside an op that released the GIL, or a torch pool thread
 * that never ran Python); __itt_task_end carries no name, so each thread keeps the
 * stack of its open tasks (label and session) and writes the SpanEnd of the one on
 * top. Every task of the domain is pushed, recorded or not, so ends always pair
 * with their begins; an end is written only if its begin was. Other domains
 * (oneDNN's primitives) are created disabled (flags 0): their calls never come.
 *
 * Names. torch calls __itt_string_handle_create(name) for every op call, so a
 * handle is interned once in a fixed open-addressing table (lock-free lookups,
 * inserts under a mutex) and carries the label id of the session it was last used
 * in (epoch << 32 | id), interned on its first use in a session.
 *
 * On and off. Recording needs pt_itt_on (set from Python: start(torch=True),
 * cleared when the program's own profiler starts); not tracing, nothing is
 * written. In a process where the extension was never initialised (a child that
 * inherited the variables and loaded it through torch) every entry returns before
 * touching anything but its own statics.
 */
#include "pt_adapters.h"
#include "pt_tracer_inline.h"
#include "shm/symlog.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define PT_ITT_EXPORT __attribute__((visibility("default")))
#define PT_ITT_TABLE 65536u     /* string handles (power of two) */
#define PT_ITT_DEPTH 1024u      /* open tasks per thread recorded */
#define PT_ITT_MAGIC 0x70747274 /* "ptrt" in extra1: a handle of ours */
#define PT_ITT_DOMAIN "PyTorch"

/* ittnotify.h's __itt_domain and __itt_string_handle (their leading fields, the
 * layout every ITT static part writes) and __itt_id. */
typedef struct pt_itt_domain {
    volatile int flags;
    const char *nameA;
    void *nameW;
    int extra1;
    void *extra2;
    struct pt_itt_domain *next;
} pt_itt_domain_t;

typedef struct pt_itt_string {
    const char *strA;
    void *strW;
    int extra1;               /* PT_ITT_MAGIC */
    void *extra2;             /* the handle itself */
    struct pt_itt_string *next;
    /* ours */
    _Atomic uint64_t label;   /* epoch << 32 | label id; 0 = none yet */
    uint32_t hash;
} pt_itt_string_t;

typedef struct pt_itt_id {
    unsigned long long d1, d2, d3;
} pt_itt_id_t;

static _Atomic(pt_itt_string_t *) names[PT_ITT_TABLE];
static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER; /* inserts, label interning, domains */
static pt_itt_domain_t *domains;                               /* under names_lock */
static _Atomic(const void *) torch_domain;                     /* the "PyTorch" domain seen last */
static _Atomic int pt_itt_on;

/* statistics (relaxed: counts only) */
static _Atomic uint64_t n_seen, n_calls, n_spans, n_names, n_names_dropped, n_too_deep, n_label_failed;

/* A thread's open tasks of the domain: epoch << 32 | label (label 0: not recorded).
 * malloc'd on the thread's first task (the module's TLS must stay small: it is
 * loaded with dlopen and uses initial-exec TLS), freed by the key's destructor. */
typedef struct pt_itt_tasks {
    uint32_t depth, cap;
    uint64_t open[];
} pt_itt_tasks_t;

static __thread pt_itt_tasks_t *tasks_tls;
static pthread_key_t tasks_key;
static pthread_once_t tasks_once = PTHREAD_ONCE_INIT;
static int tasks_key_rc = -1; /* 0 once tasks_key exists */

/* The key is made on first need, not only by pt_itt_init: in a process that loaded
 * this file through ittnotify alone (a child that inherited INTEL_LIBITTNOTIFY64 and
 * never imported pytrace) a key never created is key 0 -- another library's, often
 * the interpreter's own thread-state key (test_itt_uninitialised). */
/* At the thread's exit: the stack goes, and so does the thread's pointer to it (an ITT
 * call from a later destructor of the same thread starts a new stack, not a freed one). */
static void tasks_free(void *p)
{
    tasks_tls = NULL;
    free(p);
}

static void tasks_key_create(void)
{
    tasks_key_rc = pthread_key_create(&tasks_key, tasks_free);
}

/* The thread's task stack with room for level `depth`, or NULL (not recorded). */
static pt_itt_tasks_t *tasks_room(pt_itt_tasks_t *tk, uint32_t depth)
{
    if (PT_LIKELY(tk != NULL && depth < tk->cap))
        return tk;
    if (depth >= PT_ITT_DEPTH)
        return NULL;
    pthread_once(&tasks_once, tasks_key_create);
    if (tasks_key_rc != 0)
        return NULL; /* no key to free the stack at the thread's exit: not recorded */
    uint32_t cap = tk ? tk->cap * 2u : 32u;
    pt_itt_tasks_t *n = realloc(tk, sizeof *n + cap * sizeof n->open[0]);
    if (n == NULL)
        return NULL;
    if (tk == NULL)
        n->depth = 0;
    n->cap = cap;
    tasks_tls = n;
    pthread_setspecific(tasks_key, n);
    return n;
}

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* The handle of `name`, or NULL. Lock-free: slots are written once (release). */
static pt_itt_string_t *names_find(const char *name, uint32_t hash)
{
    for (uint32_t i = 0; i < PT_ITT_TABLE; i++) {
        /* acquire: pairs with the release store in names_add */
        pt_itt_string_t *h = atomic_load_explicit(&names[(hash + i) & (PT_ITT_TABLE - 1u)], memory_order_acquire);
        if (h == NULL)
            return NULL;
        if (h->hash == hash && strcmp(h->strA, name) == 0)
            return h;
    }
    return NULL;
}

static pt_itt_string_t *names_add(const char *name, uint32_t hash)
{
    pthread_mutex_lock(&names_lock);
    pt_itt_string_t *h = names_find(name, hash);
    if (h != NULL)
        goto out;
    uint32_t slot = PT_ITT_TABLE;
    /* keep a quarter free: probes stay short */
    if (atomic_load_explicit(&n_names, memory_order_relaxed) < PT_ITT_TABLE / 4u * 3u)
        for (uint32_t i = 0; i < PT_ITT_TABLE; i++)
            if (atomic_load_explicit(&names[(hash + i) & (PT_ITT_TABLE - 1u)], memory_order_relaxed) == NULL) {
                slot = (hash + i) & (PT_ITT_TABLE - 1u);
                break;
            }
    char *copy = slot < PT_ITT_TABLE ? strdup(name) : NULL;
    h = copy ? calloc(1, sizeof *h) : NULL;
    if (h == NULL) {
        free(copy);
        atomic_fetch_add_explicit(&n_names_dropped, 1, memory_order_relaxed);
        goto out;
    }
    h->strA = copy;
    h->extra1 = PT_ITT_MAGIC;
    h->extra2 = h;
    h->hash = hash;
    atomic_fetch_add_explicit(&n_names, 1, memory_order_relaxed);
    /* release: publishes the handle's fields; pairs with names_find's acquire */
    atomic_store_explicit(&names[slot], h, memory_order_release);
out:
    pthread_mutex_unlock(&names_lock);
    return h;
}

static pt_itt_string_t *names_get(const char *name)
{
    uint32_t hash = name_hash(name);
    pt_itt_string_t *h = names_find(name, hash);
    return h ? h : names_add(name, hash);
}

/* Our handle for what torch passed: ours, or one the static part made before the
 * collector was loaded (found by its name). */
static pt_itt_string_t *handle_of(const void *p)
{
    const pt_itt_string_t *h = p;
    if (h == NULL)
        return NULL;
    if (h->extra1 == PT_ITT_MAGIC && h->extra2 == h)
        return (pt_itt_string_t *)h;
    return h->strA ? names_get(h->strA) : NULL;
}

/* The label id of h in session `epoch` (the caller holds its ring: the session is
 * alive). 0 if it cannot be interned (counted). */
static uint32_t label_of(pt_itt_string_t *h, uint32_t epoch)
{
    /* acquire: the id was published by the symbol log before it was cached */
    uint64_t v = atomic_load_explicit(&h->label, memory_order_acquire);
    if (PT_LIKELY((uint32_t)(v >> 32) == epoch))
        return (uint32_t)v;
    uint32_t id = 0;
    pthread_mutex_lock(&names_lock); /* one symbol per name and session */
    v = atomic_load_explicit(&h->label, memory_order_relaxed);
    if ((uint32_t)(v >> 32) == epoch) {
        id = (uint32_t)v;
    } else if (pt_tracer_intern_label(h->strA, &id) == 0 && id != 0) {
        /* release: pairs with the acquire above */
        atomic_store_explicit(&h->label, (uint64_t)epoch << 32 | id, memory_order_release);
    } else {
        id = 0;
        atomic_fetch_add_explicit(&n_label_failed, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&names_lock);
    return id;
}

static int is_torch_domain(const pt_itt_domain_t *d)
{
    if (d == NULL)
        return 0;
    /* relaxed: a cache of a pointer whose struct is never freed */
    if (PT_LIKELY(atomic_load_explicit(&torch_domain, memory_order_relaxed) == d))
        return 1;
    if (d->nameA != NULL && strcmp(d->nameA, PT_ITT_DOMAIN) == 0) {
        atomic_store_explicit(&torch_domain, d, memory_order_relaxed);
        return 1;
    }
    return 0;
}

/* ---- the ITT entries torch calls (default visibility) ------------------------ */

PT_ITT_EXPORT const char *__itt_api_version(void);
PT_ITT_EXPORT void *__itt_domain_create(const char *name);
PT_ITT_EXPORT void *__itt_string_handle_create(const char *name);
PT_ITT_EXPORT void __itt_task_begin(const void *domain, pt_itt_id_t id, pt_itt_id_t parent, void *name);
PT_ITT_EXPORT void __itt_task_end(const void *domain);

/* Its presence makes the static part resolve each entry by name (version 1). */
const char *__itt_api_version(void)
{
    return "pytrace";
}

void *__itt_domain_create(const char *name)
{
    if (name == NULL)
        return NULL;
    pthread_mutex_lock(&names_lock);
    pt_itt_domain_t *d;
    for (d = domains; d; d = d->next)
        if (strcmp(d->nameA, name) == 0)
            goto out;
    d = calloc(1, sizeof *d);
    char *copy = d ? strdup(name) : NULL;
    if (copy == NULL) {
        free(d);
        d = NULL;
        goto out;
    }
    d->nameA = copy;
    /* only torch's tasks are recorded: the static part does not call us for a
     * domain whose flags are 0 */
    d->flags = strcmp(name, PT_ITT_DOMAIN) == 0;
    d->next = domains;
    domains = d;
out:
    pthread_mutex_unlock(&names_lock);
    return d;
}

void *__itt_string_handle_create(const char *name)
{
    return name ? names_get(name) : NULL;
}

void __itt_task_begin(const void *domain, pt_itt_id_t id, pt_itt_id_t parent, void *name)
{
    (void)id;
    (void)parent;
    if (!is_torch_domain(domain))
        return;
    pt_itt_tasks_t *tk = tasks_tls;
    uint32_t depth = tk ? tk->depth : 0;
    pt_itt_tasks_t *room = tasks_room(tk, depth);
    if (room == NULL) {
        if (tk == NULL)
            return; /* no stack at all: its end finds none either */
        tk->depth++;
        atomic_fetch_add_explicit(&n_too_deep, 1, memory_order_relaxed);
        return;
    }
    tk = room;
    tk->depth = depth + 1;
    tk->open[depth] = 0;
    atomic_fetch_add_explicit(&n_seen, 1, memory_order_relaxed);
    /* relaxed: a switch; a task begun just after it flips is recorded or not, and
     * its end follows its begin either way */
    if (!atomic_load_explicit(&pt_itt_on, memory_order_relaxed) || pt_epoch_now() == 0)
        return;
    atomic_fetch_add_explicit(&n_calls, 1, memory_order_relaxed);
    pt_itt_string_t *h = handle_of(name);
    pt_thread_t *t = h ? pt_foreign_enter() : NULL;
    if (t == NULL)
        return;
    uint32_t epoch = pt_ok_epoch(t);
    uint32_t label = label_of(h, epoch);
    if (label != 0) {
        pt_emit(t, label, PT_EV_SPAN_BEGIN, 0);
        tk->open[depth] = (uint64_t)epoch << 32 | label;
        atomic_fetch_add_explicit(&n_spans, 1, memory_order_relaxed);
    }
    pt_foreign_leave(t);
}

void __itt_task_end(const void *domain)
{
    pt_itt_tasks_t *tk = tasks_tls;
    if (!is_torch_domain(domain) || tk == NULL || tk->depth == 0)
        return; /* a task begun before this thread's first one */
    uint32_t depth = --tk->depth;
    if (depth >= tk->cap)
        return;
    uint64_t open = tk->open[depth];
    if (open == 0)
        return;
    pt_thread_t *t = pt_foreign_enter();
    if (t == NULL)
        return;
    /* a span of an earlier session (or of a ring this thread gave back) stays open
     * there: its session closed it */
    if ((uint32_t)(open >> 32) == pt_ok_epoch(t))
        pt_emit(t, (uint32_t)open, PT_EV_SPAN_END, 0);
    pt_foreign_leave(t);
}

/* ---- from Python (module.c) ------------------------------------------------------ */

static void names_prepare(void)
{
    pthread_mutex_lock(&names_lock);
}

static void names_release(void)
{
    pthread_mutex_unlock(&names_lock);
}

int pt_itt_init(void)
{
    static int done; /* the module's exec slot may run more than once (GIL held) */
    if (done)
        return 0;
    pthread_once(&tasks_once, tasks_key_create);
    int rc = tasks_key_rc;
    if (rc != 0)
        return -rc;
    /* a fork child must not inherit the lock held by a thread that is gone. label_of
     * appends to the symbol log holding names_lock: the symbol lock's handlers are
     * registered first, so fork takes names_lock before the symbol lock (prepare
     * handlers run in reverse order), as label_of does -- the other order deadlocks
     * a fork against a thread interning a label (test_itt_fork) */
    pt_symlog_register_atfork();
    rc = pthread_atfork(names_prepare, names_release, names_release);
    done = rc == 0;
    return -rc;
}

PyObject *pt_itt_py_set(PyObject *module, PyObject *on)
{
    (void)module;
    int v = PyObject_IsTrue(on);
    if (v < 0)
        return NULL;
    /* relaxed: a switch read by the entries above */
    atomic_store_explicit(&pt_itt_on, v, memory_order_relaxed);
    Py_RETURN_NONE;
}

/* _exec_then(loader, after, module): the exec_module of pytrace._torch's one-shot import
 * hook, in C so that no frame of ours is on the stack while torch's module runs (a
 * stack it captures, a warning's, is the one it would capture untraced): the module's
 * loader is its own again, the module runs, then after(module), whose failure is not
 * the import's (after(None) if the module failed). */
PyObject *pt_itt_py_exec_then(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *loader, *mod, *after;
    if (!PyArg_ParseTuple(args, "OOO", &loader, &after, &mod))
        return NULL;
    if (PyObject_SetAttrString(mod, "__loader__", loader) < 0)
        return NULL;
    PyObject *spec = PyObject_GetAttrString(mod, "__spec__");
    if (spec == NULL)
        return NULL;
    int rc = spec == Py_None ? 0 : PyObject_SetAttrString(spec, "loader", loader);
    Py_DECREF(spec);
    if (rc < 0)
        return NULL;
    PyObject *r = PyObject_CallMethod(loader, "exec_module", "O", mod);
    if (r == NULL) {
        /* the import failed: after(None) still runs (it puts the environment back), and
         * the import's exception is the one that propagates */
#if PY_VERSION_HEX >= 0x030C0000
        PyObject *exc = PyErr_GetRaisedException();
#else
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
#endif
        PyObject *a = PyObject_CallOneArg(after, Py_None);
        if (a == NULL)
            PyErr_Clear();
        Py_XDECREF(a);
#if PY_VERSION_HEX >= 0x030C0000
        PyErr_SetRaisedException(exc);
#else
        PyErr_Restore(type, value, tb);
#endif
        return NULL;
    }
    Py_DECREF(r);
    r = PyObject_CallOneArg(after, mod);
    if (r == NULL)
        PyErr_Clear(); /* after() says what went wrong itself */
    Py_XDECREF(r);
    Py_RETURN_NONE;
}

PyObject *pt_itt_py_stats(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return Py_BuildValue("{s:i,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "on",
                         atomic_load_explicit(&pt_itt_on, memory_order_relaxed), "seen",
                         (unsigned long long)atomic_load_explicit(&n_seen, memory_order_relaxed), "calls",
                         (unsigned long long)atomic_load_explicit(&n_calls, memory_order_relaxed), "spans",
                         (unsigned long long)atomic_load_explicit(&n_spans, memory_order_relaxed), "names",
                         (unsigned long long)atomic_load_explicit(&n_names, memory_order_relaxed), "names_dropped",
                         (unsigned long long)atomic_load_explicit(&n_names_dropped, memory_order_relaxed),
                         "too_deep", (unsigned long long)atomic_load_explicit(&n_too_deep, memory_order_relaxed),
                         "labels_failed",
                         (unsigned long long)atomic_load_explicit(&n_label_failed, memory_order_relaxed));
}
