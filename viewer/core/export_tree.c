/*
 * pt_export's symbol table and calling-context tree, and the two formats
 * written from the tree: collapsed (folded stacks) and pstats (a marshal file
 * pstats.Stats loads).
 *
 *   - The symbol table (every format's): one entry per (process, id), dense
 *     indexes; an id never announced is "<unknown #N>" (as agg.c names it).
 *   - The tree (node = path from the root; threads share the root unless
 *     per_thread; each process after the first has its own subtree below
 *     node 0, so self ticks convert with its clock), each node with its calls
 *     and self ticks. Self time is accounted exactly as agg.c does it (the
 *     ticks between two callbacks of a thread go to the entry on top), so
 *     pytrace-top, pstats and collapsed agree to the tick on every function.
 *   - collapsed: symbols of one process with the same label share their
 *     nodes (folded_canon), each stack one line; opts.max_depth folds what ran
 *     deeper under a "[deeper frames]" marker.
 *   - pstats rows are derived at the end: calls, calls of nodes whose
 *     function is not already on the path (primitive), self, and inclusive
 *     time of outermost activations; caller edges the same per (caller,
 *     callee) pair, which is cProfile's per-pair recursion level. pstats keys
 *     merge the processes; strings are made valid UTF-8 (marshal refuses
 *     anything else).
 */
#define _POSIX_C_SOURCE 200809L
#include "export_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "grow_internal.h"

typedef struct node {
    uint32_t parent, sym, first_child, next_sibling;
    uint32_t cache_id, cache_child;
    uint32_t thread; /* per-thread root: thread index; else NONE */
    uint32_t proc;   /* index in ex_t.procs (its subtree's process) */
    uint64_t calls, self;
} node_t;

typedef struct tree {
    node_t *nodes;
    uint32_t nnodes, cap_nodes;
    pt_u64map_t node_map;
    pt_u64map_t label_map; /* collapsed: (process, label hash) -> symbol index */
    uint32_t *proc_root;   /* a process's subtree (node 0 for the first process) */
    uint32_t cap_proc_root;
    uint32_t *thread_root; /* a thread's root: its process's, or its own (per_thread) */
    uint32_t cap_thread_root;
} tree_t;

/* ---- symbols ---------------------------------------------------------------- */

static void sym_clear(sym_t *s)
{
    free(s->name);
    free(s->file);
    free(s->profile);
    free(s->folded);
}

uint32_t pt_ex_sym_index(ex_t *e, uint32_t proc, uint32_t id)
{
    const uint64_t key = (uint64_t)proc << 32 | id; /* ids are per process */
    uint32_t *slot = pt_u64map_slot(&e->sym_map, key, NONE);
    if (!slot)
        return NONE;
    if (*slot != NONE)
        return *slot;
    if (pt_grow((void **)&e->syms, &e->cap_syms, sizeof *e->syms, e->nsyms + 1))
        return NONE;
    sym_t *s = &e->syms[e->nsyms];
    memset(s, 0, sizeof *s);
    char buf[48];
    snprintf(buf, sizeof buf, "<unknown #%u>", id); /* as agg.c names it */
    s->id = id;
    s->proc = proc;
    s->name = pt_ex_dup_c(buf);
    s->file = pt_ex_dup_c("?");
    s->canon = NONE;
    if (!s->name || !s->file) {
        sym_clear(s);
        return NONE;
    }
    slot = pt_u64map_slot(&e->sym_map, key, NONE); /* the map did not grow since */
    *slot = e->nsyms;
    return e->nsyms++;
}

int pt_ex_feed_symbol(ex_t *e, uint32_t proc, const pt_fb_symbol_t *in)
{
    uint32_t i = pt_ex_sym_index(e, proc, in->id);
    if (i == NONE)
        return -ENOMEM;
    sym_t *s = &e->syms[i];
    char *name = pt_ex_dup_str(in->name), *file = pt_ex_dup_str(in->file);
    char *profile = in->profile_name.ptr ? pt_ex_dup_str(in->profile_name) : NULL;
    if (!name || !file || (in->profile_name.ptr && !profile)) {
        free(name);
        free(file);
        free(profile);
        return -ENOMEM;
    }
    free(s->name);
    free(s->file);
    free(s->profile);
    free(s->folded);
    s->folded = NULL;
    if (e->w->symbol) /* what a writer derived from it */
        e->w->symbol(e, i);
    s->name = name;
    s->file = file;
    s->profile = profile;
    s->kind = in->kind;
    s->line = in->line;
    return 0;
}

/* ---- the tree --------------------------------------------------------------- */

static uint32_t node_new(ex_t *e, uint32_t parent, uint32_t sym, uint32_t thread)
{
    tree_t *tr = e->ws;
    if (pt_grow((void **)&tr->nodes, &tr->cap_nodes, sizeof *tr->nodes, tr->nnodes + 1))
        return NONE;
    uint32_t i = tr->nnodes++;
    node_t *n = &tr->nodes[i];
    *n = (node_t){.parent = parent, .sym = sym, .first_child = NONE, .next_sibling = NONE,
                  .cache_id = NONE, .cache_child = NONE, .thread = thread,
                  .proc = parent != NONE ? tr->nodes[parent].proc : 0};
    if (parent != NONE) {
        n->next_sibling = tr->nodes[parent].first_child;
        tr->nodes[parent].first_child = i;
    }
    return i;
}

/* A process's subtree root (processes after the first): sym and thread NONE. */
static uint32_t node_new_proc(ex_t *e, uint32_t proc)
{
    tree_t *tr = e->ws;
    uint32_t r = node_new(e, 0, NONE, NONE);
    if (r != NONE)
        tr->nodes[r].proc = proc;
    return r;
}

static const char *folded_label(ex_t *e, sym_t *s);

/* collapsed: symbols of one process with the same label (two code objects of one
 * function, a dataclass's generated methods) share their nodes, so each stack
 * is one line. Labels whose hashes collide stay apart. NONE: out of memory. */
static uint32_t folded_canon(ex_t *e, uint32_t s)
{
    tree_t *tr = e->ws;
    if (e->syms[s].canon != NONE)
        return e->syms[s].canon;
    const char *label = folded_label(e, &e->syms[s]);
    if (!label)
        return NONE;
    uint64_t h = 1469598103934665603ull ^ e->syms[s].proc; /* FNV-1a over the label */
    for (const unsigned char *c = (const unsigned char *)label; *c; c++)
        h = (h ^ *c) * 1099511628211ull;
    uint32_t first = pt_u64map_get(&tr->label_map, h);
    if (first == NONE) {
        if (pt_u64map_put(&tr->label_map, h, s))
            return NONE;
        first = s;
    } else if (e->syms[first].proc != e->syms[s].proc || !e->syms[first].folded ||
               strcmp(e->syms[first].folded, label)) {
        first = s;
    }
    e->syms[s].canon = first;
    return first;
}

void pt_ex_syms_free(ex_t *e)
{
    for (uint32_t i = 0; i < e->nsyms; i++)
        sym_clear(&e->syms[i]);
    free(e->syms);
    pt_u64map_free(&e->sym_map);
}

/* ---- the tree writers' ops -------------------------------------------------- */

static int tree_init(ex_t *e)
{
    tree_t *tr = calloc(1, sizeof *tr);
    if (!tr)
        return -ENOMEM;
    e->ws = tr;
    if (pt_u64map_init(&tr->node_map, 4096) || pt_u64map_init(&tr->label_map, 1024))
        return -ENOMEM;
    return node_new(e, NONE, NONE, NONE) == 0 ? 0 : -ENOMEM; /* the root */
}

static void tree_destroy(ex_t *e)
{
    tree_t *tr = e->ws;
    free(tr->nodes);
    pt_u64map_free(&tr->node_map);
    pt_u64map_free(&tr->label_map);
    free(tr->proc_root);
    free(tr->thread_root);
}

/* The first process's tree is node 0's, the others hang below it. */
static int tree_proc_new(ex_t *e, uint32_t proc)
{
    tree_t *tr = e->ws;
    if (pt_grow((void **)&tr->proc_root, &tr->cap_proc_root, sizeof *tr->proc_root, proc + 1))
        return -ENOMEM;
    uint32_t r = 0;
    if (proc && (r = node_new_proc(e, proc)) == NONE)
        return -ENOMEM;
    tr->proc_root[proc] = r;
    return 0;
}

static int tree_thread(ex_t *e, uint32_t index)
{
    tree_t *tr = e->ws;
    if (pt_grow((void **)&tr->thread_root, &tr->cap_thread_root, sizeof *tr->thread_root, index + 1))
        return -ENOMEM;
    uint32_t root = tr->proc_root[e->thr[index].proc];
    if (e->o.per_thread) {
        root = node_new(e, root, NONE, index);
        if (root == NONE)
            return -ENOMEM;
    }
    tr->thread_root[index] = root;
    return 0;
}

/* The thread's clock at `ticks`; the ticks it went on are self time of the
 * entry on top (the agg.c rule). */
static inline uint64_t account(ex_t *e, thr_t *t, uint32_t index, uint64_t ticks)
{
    uint64_t moved, now = ex_clock(t, ticks, &moved);
    if (moved) {
        tree_t *tr = e->ws;
        tr->nodes[t->depth ? t->stack[t->depth - 1] : tr->thread_root[index]].self += moved;
    }
    return now;
}

/* The clock went on (a mark, a gap, a thread's start or end): self time too. */
static void tree_self(ex_t *e, thr_t *t, uint64_t moved)
{
    tree_t *tr = e->ws;
    tr->nodes[t->depth ? t->stack[t->depth - 1] : tr->thread_root[t - e->thr]].self += moved;
}

/* A call: the child of the node on top (one node per label for collapsed). */
static int tree_enter(ex_t *e, pt_walk_thread_t *wt, uint32_t id, uint64_t ticks, unsigned flags)
{
    tree_t *tr = e->ws;
    thr_t *t = thr_of(e, wt);
    uint64_t now = account(e, t, wt->index, ticks);
    uint32_t parent = t->depth ? t->stack[t->depth - 1] : tr->thread_root[wt->index];
    node_t *p = &tr->nodes[parent];
    uint32_t c = p->cache_id == id ? p->cache_child : NONE;
    if (c == NONE) {
        uint64_t key = (uint64_t)parent << 32 | id;
        if (e->o.format == PT_EXPORT_COLLAPSED) { /* one node per label (folded_canon) */
            uint32_t s = pt_ex_sym_index(e, t->proc, id);
            if (s == NONE || (s = folded_canon(e, s)) == NONE)
                return -ENOMEM;
            key = (uint64_t)parent << 32 | s;
        }
        uint32_t *slot = pt_u64map_slot(&tr->node_map, key, NONE);
        if (!slot)
            return -ENOMEM;
        c = *slot;
        if (c == NONE) {
            uint32_t s = pt_ex_sym_index(e, t->proc, id);
            if (s == NONE)
                return -ENOMEM;
            c = node_new(e, parent, s, NONE);
            if (c == NONE)
                return -ENOMEM;
            *pt_u64map_slot(&tr->node_map, key, NONE) = c;
        }
        p = &tr->nodes[parent];
        p->cache_id = id;
        p->cache_child = c;
    }
    if (!(flags & PT_WALK_CONTINUED))
        tr->nodes[c].calls++;
    return ex_push(t, c, now);
}

/* ---- collapsed -------------------------------------------------------------- */

static const char *folded_label(ex_t *e, sym_t *s)
{
    if (s->folded)
        return s->folded;
    size_t n = strlen(s->name) + strlen(s->file) + 40;
    char *b = malloc(n);
    if (!b)
        return NULL;
    if (s->kind == PT_SYM_PY_FUNCTION)
        snprintf(b, n, "%s (%s:%u)", s->name, s->file, s->line);
    else
        snprintf(b, n, "%s", s->name);
    for (char *p = b; *p; p++)
        if (*p == ';')
            *p = ':';
        else if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    (void)e;
    s->folded = b;
    return b;
}

static uint64_t folded_value(const ex_t *e, const node_t *nd)
{
    return e->o.weight_calls ? nd->calls : (uint64_t)llround((double)nd->self * e->procs[nd->proc].ns_per_tick);
}

/* One line: the path, sep (" " or ";[deeper frames] ") and the value. */
static int folded_line(obuf_t *o, const char *path, size_t plen, const char *sep, uint64_t value)
{
    ob_put(o, path, plen);
    ob_puts(o, sep);
    ob_u64(o, value);
    ob_putc(o, '\n');
    return o->err;
}

/* The calling contexts below n (opts.max_depth): their weight added up, how
 * many there are, and the deepest (frames below n); no stack (parent links). */
static uint64_t fold_below(ex_t *e, uint32_t n, uint64_t *count, uint32_t *below)
{
    tree_t *tr = e->ws;
    uint64_t sum = 0;
    uint32_t depth = 0, c = tr->nodes[n].first_child;
    while (c != NONE) {
        depth++;
        if (depth > *below)
            *below = depth;
        sum += folded_value(e, &tr->nodes[c]);
        (*count)++;
        if (tr->nodes[c].first_child != NONE) {
            c = tr->nodes[c].first_child;
            continue;
        }
        while (c != n && tr->nodes[c].next_sibling == NONE) {
            c = tr->nodes[c].parent;
            depth--;
        }
        c = c == n ? NONE : tr->nodes[c].next_sibling;
    }
    return sum;
}

static int write_collapsed(ex_t *e)
{
    tree_t *tr = e->ws;
    obuf_t *o = &e->out;
    char *path = NULL;
    size_t plen = 0, pcap = 0;
    uint32_t *lens = NULL, nl = 0, cap_l = 0;
    uint32_t *frames = NULL; /* frames on the path at each level (thread and process roots are none) */
    int rc = 0;
    /* iterative DFS from the root: path holds the names of the current node's ancestors */
    uint32_t n = tr->nnodes > 1 ? tr->nodes[0].first_child : NONE;
    while (n != NONE) {
        node_t *nd = &tr->nodes[n];
        const char *label;
        char tb[96];
        if (nd->sym == NONE && nd->thread == NONE) {
            label = ""; /* a process's subtree: its stacks merge with the others' */
        } else if (nd->sym == NONE) {
            thr_t *t = &e->thr[nd->thread];
            char nb[40];
            const char *tn = pt_ex_thread_name(t, nb, sizeof nb);
            size_t need = strlen(tn) + 48;
            char *b = need <= sizeof tb ? tb : malloc(need);
            if (!b) {
                rc = -ENOMEM;
                break;
            }
            snprintf(b, need, "thread %s (tid %llu)", tn, (unsigned long long)t->os_tid);
            for (char *p = b; *p; p++)
                if (*p == ';')
                    *p = ':';
                else if ((unsigned char)*p < 0x20 || *p == 0x7f)
                    *p = ' ';
            label = b;
        } else {
            label = folded_label(e, &e->syms[nd->sym]);
            if (!label) {
                rc = -ENOMEM;
                break;
            }
        }
        size_t ll = strlen(label);
        int heap_label = nd->sym == NONE && nd->thread != NONE && label != tb;
        /* enter n: path += (";" if nonempty) + label */
        uint32_t cap_f = cap_l;
        if (pt_grow((void **)&lens, &cap_l, sizeof *lens, nl + 1) ||
            pt_grow((void **)&frames, &cap_f, sizeof *frames, nl + 1))
            rc = -ENOMEM;
        if (!rc && plen + ll + 2 > pcap) {
            size_t nc = pcap ? pcap : 4096;
            while (nc < plen + ll + 2)
                nc *= 2;
            char *p2 = realloc(path, nc);
            if (p2) {
                path = p2;
                pcap = nc;
            } else {
                rc = -ENOMEM;
            }
        }
        if (rc) {
            if (heap_label)
                free((void *)label);
            break;
        }
        uint32_t depth = (nl ? frames[nl - 1] : 0) + (nd->sym != NONE);
        frames[nl] = depth;
        if (depth > e->deepest)
            e->deepest = depth;
        lens[nl++] = (uint32_t)plen;
        if (ll) {
            if (plen)
                path[plen++] = ';';
            memcpy(path + plen, label, ll);
            plen += ll;
        }
        if (heap_label)
            free((void *)label);
        if (nd->sym != NONE) {
            uint64_t value = folded_value(e, nd);
            if (value && (rc = folded_line(o, path, plen, " ", value)) != 0)
                break;
        }
        /* opts.max_depth: what ran below is one line under a marker (a deep
         * recursion wrote a line per level, each as long as its depth) */
        if (e->o.max_depth && depth >= e->o.max_depth && nd->first_child != NONE) {
            uint32_t below = 0;
            uint64_t value = fold_below(e, n, &e->stacks_folded, &below);
            if (depth + below > e->deepest)
                e->deepest = depth + below;
            if (value && (rc = folded_line(o, path, plen, ";[deeper frames] ", value)) != 0)
                break;
        }
        if (nd->first_child != NONE && !(e->o.max_depth && depth >= e->o.max_depth)) {
            n = nd->first_child;
            continue;
        }
        /* leave n and ancestors until one has a next sibling */
        while (n != NONE) {
            plen = lens[--nl];
            if (tr->nodes[n].next_sibling != NONE) {
                n = tr->nodes[n].next_sibling;
                break;
            }
            n = tr->nodes[n].parent;
            if (n == 0)
                n = NONE;
        }
    }
    free(path);
    free(lens);
    free(frames);
    return rc;
}

/* ---- pstats (marshal) ------------------------------------------------------- */

static void m_i32(obuf_t *o, int32_t v)
{
    uint32_t u = (uint32_t)v;
    char b[4] = {(char)(u & 0xff), (char)(u >> 8 & 0xff), (char)(u >> 16 & 0xff), (char)(u >> 24)};
    ob_put(o, b, 4);
}

static void m_int(obuf_t *o, uint64_t v)
{
    if (v <= INT32_MAX) {
        ob_putc(o, 'i');
        m_i32(o, (int32_t)v);
        return;
    }
    uint16_t d[5];
    int n = 0;
    while (v) {
        d[n++] = (uint16_t)(v & 0x7fff);
        v >>= 15;
    }
    ob_putc(o, 'l');
    m_i32(o, n);
    for (int i = 0; i < n; i++) {
        char b[2] = {(char)(d[i] & 0xff), (char)(d[i] >> 8)};
        ob_put(o, b, 2);
    }
}

static void m_float(obuf_t *o, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    char b[9] = {'g'};
    for (int i = 0; i < 8; i++)
        b[1 + i] = (char)(u >> (8 * i) & 0xff);
    ob_put(o, b, 9);
}

static int m_str(obuf_t *o, const char *s)
{
    size_t n;
    char *c = pt_utf8_clean(s, &n);
    if (!c)
        return -ENOMEM;
    ob_putc(o, 'u');
    m_i32(o, (int32_t)n);
    ob_put(o, c, n);
    free(c);
    return 0;
}

typedef struct pkey {
    char *file, *name;
    uint32_t line;
    uint64_t cc, nc, tt, ct;
    uint32_t first_edge; /* into the sorted edge array */
    uint32_t nedges;
} pkey_t;

/* A pstats function key, the tuple (file, line, name), then the opening of
 * the value tuple of `fields` items that follows it. 0 or -ENOMEM. */
static int m_key(obuf_t *o, const pkey_t *k, int32_t fields)
{
    ob_putc(o, '(');
    m_i32(o, 3);
    if (m_str(o, k->file))
        return -ENOMEM;
    m_int(o, k->line);
    if (m_str(o, k->name))
        return -ENOMEM;
    ob_putc(o, '(');
    m_i32(o, fields);
    return 0;
}

typedef struct pedge {
    uint32_t caller, callee; /* symbol indexes, then key indexes */
    uint64_t nc, cc, tt, ct;
} pedge_t;

/* cProfile's label of a C function from a recording without profile names. */
static char *old_c_label(const sym_t *s)
{
    const char *name = s->name, *module = s->file;
    size_t ml = strlen(module), n = strlen(name) + 64;
    char *b = malloc(n + strlen(module));
    if (!b)
        return NULL;
    const char *dot = strrchr(name, '.');
    if (ml && !strncmp(name, module, ml) && name[ml] == '.' && !strchr(name + ml + 1, '.'))
        snprintf(b, n, "<built-in method %s>", name);
    else if (dot)
        snprintf(b, n, "<method '%s' of '%.*s' objects>", dot + 1, (int)(dot - name), name);
    else
        snprintf(b, n, "<built-in method %s>", name);
    return b;
}

/* The pstats key of a symbol (file, line, name), malloc'd strings. */
static int pstats_key(const sym_t *s, int qualnames, char **file, uint32_t *line, char **name)
{
    *line = 0;
    if (s->kind == PT_SYM_PY_FUNCTION) {
        *file = pt_ex_dup_c(s->file);
        *line = s->line;
        if (qualnames || !s->profile) {
            const char *base = s->name;
            if (!qualnames) {
                const char *dot = strrchr(s->name, '.');
                base = dot ? dot + 1 : s->name;
            }
            *name = pt_ex_dup_c(base);
        } else {
            *name = pt_ex_dup_c(s->profile);
        }
    } else if (s->kind == PT_SYM_LABEL) {
        *file = pt_ex_dup_c("~");
        size_t n = strlen(s->name) + 16;
        *name = malloc(n);
        if (*name)
            snprintf(*name, n, "<span '%s'>", s->name);
    } else {
        *file = pt_ex_dup_c("~");
        if (qualnames) {
            size_t n = strlen(s->name) + 24;
            *name = malloc(n);
            if (*name)
                snprintf(*name, n, "<built-in method %s>", s->name);
        } else {
            *name = s->profile ? pt_ex_dup_c(s->profile) : old_c_label(s);
        }
    }
    if (!*file || !*name) {
        free(*file);
        free(*name);
        return -ENOMEM;
    }
    return 0;
}

static uint64_t str_hash(const char *a, uint32_t line, const char *b)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = a; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ 0xff ^ line) * 1099511628211ull;
    for (const char *p = b; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

static int edge_cmp(const void *x, const void *y)
{
    const pedge_t *a = x, *b = y;
    if (a->callee != b->callee)
        return a->callee < b->callee ? -1 : 1;
    return a->caller < b->caller ? -1 : a->caller > b->caller;
}

static int write_pstats(ex_t *e)
{
    tree_t *tr = e->ws;
    int rc = -ENOMEM;
    uint32_t nn = tr->nnodes, ns = e->nsyms;
    uint64_t *incl = calloc(nn ? nn : 1, sizeof *incl);
    uint32_t *onpath = calloc(ns ? ns : 1, sizeof *onpath);
    uint64_t *f = calloc((size_t)(ns ? ns : 1) * 4, sizeof *f); /* nc, cc, tt, ct per symbol */
    double *scale = malloc((size_t)(e->nprocs ? e->nprocs : 1) * sizeof *scale); /* per process */
    pt_u64map_t edge_map = {0}, edge_on = {0}, key_map = {0};
    pedge_t *edges = NULL;
    uint32_t nedges = 0, cap_edges = 0;
    pkey_t *keys = NULL;
    uint32_t nkeys = 0, cap_keys = 0;
    if (!incl || !onpath || !f || !scale || pt_u64map_init(&edge_map, 1024) || pt_u64map_init(&edge_on, 64) ||
        pt_u64map_init(&key_map, 1024))
        goto out;
    for (uint32_t i = nn; i-- > 1;) {
        incl[i] += tr->nodes[i].self;
        incl[tr->nodes[i].parent] += incl[i];
    }
    /* DFS with the functions and (caller, callee) pairs on the path counted */
    uint32_t n = nn > 1 ? tr->nodes[0].first_child : NONE;
    while (n != NONE) {
        node_t *nd = &tr->nodes[n];
        uint32_t s = nd->sym;
        uint32_t ps = nd->parent != NONE ? tr->nodes[nd->parent].sym : NONE;
        if (s != NONE) {
            uint64_t *fs = f + (size_t)s * 4;
            fs[0] += nd->calls;
            fs[2] += nd->self;
            if (!onpath[s]) {
                fs[1] += nd->calls;
                fs[3] += incl[n];
            }
            onpath[s]++;
            if (ps != NONE) {
                uint64_t ek = (uint64_t)ps << 32 | s;
                uint32_t *slot = pt_u64map_slot(&edge_map, ek, NONE);
                if (!slot)
                    goto out;
                if (*slot == NONE) {
                    if (pt_grow((void **)&edges, &cap_edges, sizeof *edges, nedges + 1))
                        goto out;
                    edges[nedges] = (pedge_t){.caller = ps, .callee = s};
                    *pt_u64map_slot(&edge_map, ek, NONE) = nedges++;
                    slot = pt_u64map_slot(&edge_map, ek, NONE);
                }
                pedge_t *ed = &edges[*slot];
                uint32_t *on = pt_u64map_slot(&edge_on, ek, 0);
                if (!on)
                    goto out;
                ed->nc += nd->calls;
                ed->tt += nd->self;
                if (!*on) {
                    ed->cc += nd->calls;
                    ed->ct += incl[n];
                }
                (*on)++;
            }
        }
        if (nd->first_child != NONE) {
            n = nd->first_child;
            continue;
        }
        while (n != NONE) {
            node_t *x = &tr->nodes[n];
            if (x->sym != NONE) { /* leave x */
                onpath[x->sym]--;
                uint32_t px = x->parent != NONE ? tr->nodes[x->parent].sym : NONE;
                if (px != NONE)
                    (*pt_u64map_slot(&edge_on, (uint64_t)px << 32 | x->sym, 0))--;
            }
            if (x->next_sibling != NONE) {
                n = x->next_sibling;
                break;
            }
            n = x->parent;
            if (n == 0)
                n = NONE;
        }
    }
    /* Times are in the first selected process's ticks: another process's
     * ticks are scaled by the ratio of the clocks (exactly 1 when they share
     * the clock, as the processes of one machine do). */
    const proc_t *clock = NULL;
    for (uint32_t i = 0; i < e->nprocs && !clock; i++)
        if (e->procs[i].selected && e->procs[i].have_pinfo)
            clock = &e->procs[i];
    for (uint32_t i = 0; i < e->nprocs; i++)
        scale[i] = clock && e->procs[i].have_pinfo
                       ? (double)clock->pinfo.ticks_per_second / (double)e->procs[i].pinfo.ticks_per_second
                       : 1.0;
    for (uint32_t s = 0; s < ns; s++) {
        const double sc = scale[e->syms[s].proc];
        if (sc != 1.0) {
            uint64_t *fs = f + (size_t)s * 4;
            fs[2] = (uint64_t)llround((double)fs[2] * sc);
            fs[3] = (uint64_t)llround((double)fs[3] * sc);
        }
    }
    for (uint32_t i = 0; i < nedges; i++) {
        const double sc = scale[e->syms[edges[i].callee].proc];
        if (sc != 1.0) {
            edges[i].tt = (uint64_t)llround((double)edges[i].tt * sc);
            edges[i].ct = (uint64_t)llround((double)edges[i].ct * sc);
        }
    }
    /* keys: symbols with one key are added together */
    for (uint32_t s = 0; s < ns; s++) {
        e->syms[s].key = NONE;
        uint64_t *fs = f + (size_t)s * 4;
        if (!fs[0] && !fs[2] && !fs[3])
            continue;
        char *file, *name;
        uint32_t line;
        if (pstats_key(&e->syms[s], e->o.qualnames, &file, &line, &name))
            goto out;
        uint64_t h = str_hash(file, line, name);
        uint32_t k = NONE;
        for (;; h = pt_u64map_mix(h + 1)) {
            uint32_t *slot = pt_u64map_slot(&key_map, h, NONE);
            if (!slot) {
                free(file);
                free(name);
                goto out;
            }
            if (*slot == NONE) {
                if (pt_grow((void **)&keys, &cap_keys, sizeof *keys, nkeys + 1)) {
                    free(file);
                    free(name);
                    goto out;
                }
                keys[nkeys] = (pkey_t){.file = file, .name = name, .line = line};
                *pt_u64map_slot(&key_map, h, NONE) = k = nkeys++;
                break;
            }
            pkey_t *kk = &keys[*slot];
            if (kk->line == line && !strcmp(kk->file, file) && !strcmp(kk->name, name)) {
                k = *slot;
                free(file);
                free(name);
                break;
            }
        }
        e->syms[s].key = k;
        keys[k].nc += fs[0];
        keys[k].cc += fs[1];
        keys[k].tt += fs[2];
        keys[k].ct += fs[3];
    }
    for (uint32_t i = 0; i < nedges; i++) {
        edges[i].caller = e->syms[edges[i].caller].key;
        edges[i].callee = e->syms[edges[i].callee].key;
    }
    if (nedges) /* edges is NULL when no call has a caller; qsort's pointer must not be */
        qsort(edges, nedges, sizeof *edges, edge_cmp);
    uint32_t w = 0;
    for (uint32_t i = 0; i < nedges; i++) {
        if (edges[i].callee == NONE || edges[i].caller == NONE)
            continue;
        if (w && edges[w - 1].callee == edges[i].callee && edges[w - 1].caller == edges[i].caller) {
            edges[w - 1].nc += edges[i].nc;
            edges[w - 1].cc += edges[i].cc;
            edges[w - 1].tt += edges[i].tt;
            edges[w - 1].ct += edges[i].ct;
        } else {
            edges[w++] = edges[i];
        }
    }
    nedges = w;
    for (uint32_t i = 0; i < nedges; i++) {
        pkey_t *k = &keys[edges[i].callee];
        if (!k->nedges)
            k->first_edge = i;
        k->nedges++;
    }
    double spt = 1.0 / (double)(clock ? clock->pinfo.ticks_per_second : 1000000000ull);
    obuf_t *o = &e->out;
    ob_putc(o, '{');
    for (uint32_t i = 0; i < nkeys; i++) {
        pkey_t *k = &keys[i];
        if (m_key(o, k, 5))
            goto out;
        m_int(o, k->cc);
        m_int(o, k->nc);
        m_float(o, (double)k->tt * spt);
        m_float(o, (double)k->ct * spt);
        ob_putc(o, '{');
        for (uint32_t j = k->first_edge; j < k->first_edge + k->nedges; j++) {
            if (m_key(o, &keys[edges[j].caller], 4))
                goto out;
            m_int(o, edges[j].nc);
            m_int(o, edges[j].cc);
            m_float(o, (double)edges[j].tt * spt);
            m_float(o, (double)edges[j].ct * spt);
        }
        ob_putc(o, '0');
    }
    ob_putc(o, '0');
    rc = o->err;
out:
    for (uint32_t i = 0; i < nkeys; i++) {
        free(keys[i].file);
        free(keys[i].name);
    }
    free(keys);
    free(edges);
    free(incl);
    free(onpath);
    free(f);
    free(scale);
    pt_u64map_free(&edge_map);
    pt_u64map_free(&edge_on);
    pt_u64map_free(&key_map);
    return rc;
}

/* A return: the entry on top closes. */
static int tree_exit(ex_t *e, pt_walk_thread_t *wt, uint64_t ticks)
{
    thr_t *t = thr_of(e, wt);
    account(e, t, wt->index, ticks);
    if (t->depth)
        t->depth--;
    return 0;
}

static int collapsed_end(ex_t *e, const pt_walk_counters_t *wc)
{
    (void)wc;
    return write_collapsed(e);
}

static int pstats_end(ex_t *e, const pt_walk_counters_t *wc)
{
    (void)wc;
    return write_pstats(e);
}

const ex_writer_t pt_ex_collapsed = {
    .tree = 1, .init = tree_init, .destroy = tree_destroy, .proc_new = tree_proc_new, .thread = tree_thread,
    .self = tree_self, .enter = tree_enter, .exit = tree_exit, .end = collapsed_end};

const ex_writer_t pt_ex_pstats = {
    .tree = 1, .init = tree_init, .destroy = tree_destroy, .proc_new = tree_proc_new, .thread = tree_thread,
    .self = tree_self, .enter = tree_enter, .exit = tree_exit, .end = pstats_end};
