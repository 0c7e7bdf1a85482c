/*
 * The two formats written from the calling-context tree: collapsed (folded
 * stacks) and pstats (a marshal file pstats.Stats loads).
 *
 *   - The tree is pt_cct's (cct.h, in e->cct with the symbols): the same
 *     tree, self-time rule, budget and walk as pytrace-top's, so pytrace-top,
 *     pstats and collapsed agree to the tick on every function. Threads share
 *     the root (node 0) unless per_thread; each process after the first has
 *     its own subtree below node 0 (its root's owner is the process), so self
 *     ticks convert with its clock. A root's aux32 is its thread (per_thread)
 *     or NONE.
 *   - Past the tree budget (opts.tree_budget), new paths fold into [other]
 *     nodes: collapsed writes them as "[other]" frames; pstats takes their
 *     functions from the fold records (its rows stay exact; the callers of a
 *     folded call are not kept).
 *   - collapsed: symbols of one process with the same label share their
 *     nodes (folded_canon, the tree's key), each stack one line;
 *     opts.max_depth folds what ran deeper under a "[deeper frames]" marker.
 *   - pstats rows are pt_cct_walk's: calls, primitive calls, self, and
 *     inclusive time of outermost activations; caller edges the same per
 *     (caller, callee) pair, which is cProfile's per-pair recursion level.
 *     pstats keys merge the processes; strings are made valid UTF-8 (marshal
 *     refuses anything else).
 *   - Time nobody saw (cct.h, THE RULE FOR UNOBSERVED TIME): a Lost gap's ticks
 *     go to the thread's <not observed> node (pt_cct_gap), in no function:
 *     pstats has no row for it (cProfile's shape; the result's unobserved_*
 *     say how much), collapsed writes one "<not observed>" line (every
 *     thread's node added up), or one under each thread (per_thread).
 *   - CPU time (cct.h, THE RULE FOR CPU TIME): each CpuTime record gives the
 *     CPU share of the ticks given since the thread's last one (pt_cct_cpu);
 *     opts.cpu_time writes pstats' tt/ct (rows and caller edges) and
 *     collapsed's weights from the nodes' and fold records' CPU ticks. The
 *     rows are the same in both (a function with calls and no CPU time is
 *     there with 0).
 */
#define _POSIX_C_SOURCE 200809L
#include "export_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "grow_internal.h"

typedef struct tsym {      /* what the tree formats derive from a symbol */
    char *folded;          /* collapsed label, cleaned (NULL: not yet) */
    uint32_t canon;        /* collapsed: the process's first symbol with this label (NONE: not yet) */
    uint32_t key;          /* pstats key index */
} tsym_t;

typedef struct tree {
    pt_cct_thread_t *cur;  /* per thread (index): its place in e->cct */
    uint32_t cap_cur;
    uint32_t *proc_root;   /* a process's subtree (node 0 for the first process) */
    uint32_t cap_proc_root;
    tsym_t *sx;            /* per symbol (dense index) */
    uint32_t cap_sx;
    pt_u64map_t label_map; /* collapsed: (process, label hash) -> symbol index */
} tree_t;

/* Symbol s's derived entry (the array grown to hold it); NULL when out of memory. */
static tsym_t *tsym(ex_t *e, uint32_t s)
{
    tree_t *tr = e->ws;
    uint32_t old = tr->cap_sx;
    if (s >= old) {
        if (pt_grow((void **)&tr->sx, &tr->cap_sx, sizeof *tr->sx, s + 1))
            return NULL;
        for (uint32_t i = old; i < tr->cap_sx; i++)
            tr->sx[i] = (tsym_t){.folded = NULL, .canon = NONE, .key = NONE};
    }
    return &tr->sx[s];
}

static const char *folded_label(ex_t *e, uint32_t s);

/* collapsed: symbols of one process with the same label (two code objects of one
 * function, a dataclass's generated methods) share their nodes, so each stack
 * is one line. Labels whose hashes collide stay apart. NONE: out of memory. */
static uint32_t folded_canon(ex_t *e, uint32_t s)
{
    tree_t *tr = e->ws;
    tsym_t *x = tsym(e, s);
    if (!x)
        return NONE;
    if (x->canon != NONE)
        return x->canon;
    const char *label = folded_label(e, s);
    if (!label)
        return NONE;
    uint64_t h = 1469598103934665603ull ^ ex_sym(e, s)->proc; /* FNV-1a over the label */
    for (const unsigned char *c = (const unsigned char *)label; *c; c++)
        h = (h ^ *c) * 1099511628211ull;
    uint32_t first = pt_u64map_get(&tr->label_map, h);
    if (first == NONE) {
        if (pt_u64map_put(&tr->label_map, h, s))
            return NONE;
        first = s;
    } else if (ex_sym(e, first)->proc != ex_sym(e, s)->proc || !tr->sx[first].folded ||
               strcmp(tr->sx[first].folded, label)) {
        first = s;
    }
    tr->sx[s].canon = first;
    return first;
}

/* The tree's key of a call of (proc, id) for collapsed: its label's symbol. */
static uint32_t collapsed_key(void *ctx, uint32_t proc, uint32_t id)
{
    ex_t *e = ctx;
    uint32_t s = pt_cct_sym(e->cct, proc, id);
    return s == NONE ? NONE : folded_canon(e, s);
}

/* ---- the tree writers' ops -------------------------------------------------- */

static int tree_init(ex_t *e)
{
    tree_t *tr = calloc(1, sizeof *tr);
    if (!tr)
        return -ENOMEM;
    e->ws = tr;
    if (pt_u64map_init(&tr->label_map, 1024))
        return -ENOMEM;
    if (pt_cct_root(e->cct, NONE, 0) != 0) /* the root */
        return -ENOMEM;
    e->cct->nodes[0].aux32 = NONE;
    return 0;
}

static void tree_destroy(ex_t *e)
{
    tree_t *tr = e->ws;
    for (uint32_t i = 0; i < tr->cap_cur; i++)
        pt_cct_thread_free(&tr->cur[i]);
    free(tr->cur);
    free(tr->proc_root);
    for (uint32_t i = 0; i < tr->cap_sx; i++)
        free(tr->sx[i].folded);
    free(tr->sx);
    pt_u64map_free(&tr->label_map);
}

/* A symbol announced: the label derived from it goes (its canon stays). */
static void tree_symbol(ex_t *e, uint32_t s)
{
    tree_t *tr = e->ws;
    if (s < tr->cap_sx) {
        free(tr->sx[s].folded);
        tr->sx[s].folded = NULL;
    }
}

/* The first process's tree is node 0's, the others hang below it. */
static int tree_proc_new(ex_t *e, uint32_t proc)
{
    tree_t *tr = e->ws;
    if (pt_grow((void **)&tr->proc_root, &tr->cap_proc_root, sizeof *tr->proc_root, proc + 1))
        return -ENOMEM;
    uint32_t r = 0;
    if (proc) {
        if ((r = pt_cct_root(e->cct, 0, proc)) == NONE)
            return -ENOMEM;
        e->cct->nodes[r].aux32 = NONE;
    }
    tr->proc_root[proc] = r;
    return 0;
}

static int tree_thread(ex_t *e, uint32_t index)
{
    tree_t *tr = e->ws;
    uint32_t proc = e->thr[index].proc, root = tr->proc_root[proc];
    if (e->o.per_thread) {
        if ((root = pt_cct_root(e->cct, root, proc)) == NONE)
            return -ENOMEM;
        e->cct->nodes[root].aux32 = index;
    }
    uint32_t old = tr->cap_cur;
    if (index >= old) {
        if (pt_grow((void **)&tr->cur, &tr->cap_cur, sizeof *tr->cur, index + 1))
            return -ENOMEM;
        memset(tr->cur + old, 0, (size_t)(tr->cap_cur - old) * sizeof *tr->cur);
    }
    pt_cct_thread_init(&tr->cur[index], root, index);
    return 0;
}

/* The clock went on (a mark, a gap, a thread's start or end): self time too. */
static void tree_self(ex_t *e, thr_t *t, uint64_t moved)
{
    tree_t *tr = e->ws;
    pt_cct_give(e->cct, &tr->cur[t - e->thr], moved);
}

/* A call: the node below the one on top (one node per label for collapsed). */
static int tree_enter(ex_t *e, pt_walk_thread_t *wt, uint32_t id, uint64_t ticks, unsigned flags)
{
    tree_t *tr = e->ws;
    thr_t *t = thr_of(e, wt);
    pt_cct_thread_t *th = &tr->cur[wt->index]; /* once: the stores below may alias wt */
    uint64_t moved;
    ex_clock(t, ticks, &moved);
    /* its self time (moved may be 0) and the call, the top frame read once */
    return pt_cct_give_enter(e->cct, th, moved, t->proc, id, !(flags & PT_WALK_CONTINUED), e->walk, wt, NULL);
}

/* A return: the entry on top closes. */
static int tree_exit(ex_t *e, pt_walk_thread_t *wt, uint64_t ticks)
{
    tree_t *tr = e->ws;
    pt_cct_thread_t *th = &tr->cur[wt->index]; /* once: the stores below may alias wt */
    uint64_t moved;
    ex_clock(thr_of(e, wt), ticks, &moved);
    if (moved) /* its self time, and the close (the top frame read once) */
        pt_cct_give_exit(e->cct, th, moved);
    else
        pt_cct_exit(e->cct, th);
    return 0;
}

/* A gap (Lost record): the ticks since the thread's last event are nobody's
 * (cct.h, THE RULE FOR UNOBSERVED TIME): its <not observed> node's, in no
 * function. The thread's clock is the driver's (ex_clock); pt_cct_gap reads
 * the tree thread's, so that is set to it first. */
static int tree_gap(ex_t *e, pt_walk_thread_t *wt, uint64_t ticks, uint64_t lost)
{
    tree_t *tr = e->ws;
    thr_t *t = thr_of(e, wt);
    pt_cct_thread_t *th = &tr->cur[wt->index];
    const uint32_t had = th->unobserved;
    uint64_t moved;
    th->have_last = t->have_last;
    th->last = t->last;
    ex_clock(t, ticks, &moved);
    pt_cct_gap(e->cct, th, ticks, lost);
    if (had == NONE && th->unobserved != NONE) /* a node's owner is its process here (its clock) */
        e->cct->nodes[th->unobserved].owner = t->proc;
    if (wt->lost_flags & PT_EVF_LOST_NO_RING)
        e->unobserved_no_ring += lost;
    return 0;
}

/* A CpuTime record (the clock accounted up to it): the CPU share of the
 * ticks given since the thread's last one (cct.h, THE RULE FOR CPU TIME). */
static int tree_cpu(ex_t *e, pt_walk_thread_t *wt, uint64_t now, uint64_t cpu_ns)
{
    tree_t *tr = e->ws;
    thr_t *t = thr_of(e, wt);
    pt_cct_cpu(e->cct, &tr->cur[wt->index], now, cpu_ns, e->procs[t->proc].pinfo.ticks_per_second, NULL);
    return 0;
}

/* A thread ended: a new one under its number starts its own CPU clock (the
 * ticks until its first record get no CPU). */
static void tree_thread_end(ex_t *e, uint32_t index)
{
    tree_t *tr = e->ws;
    pt_cct_cpu_forget(e->cct, &tr->cur[index]);
}

/* The result's count of time nobody saw: every thread's <not observed> node. */
static void tree_unobserved(ex_t *e)
{
    tree_t *tr = e->ws;
    for (uint32_t i = 0; i < e->nthr && i < tr->cap_cur; i++) {
        const pt_cct_thread_t *th = &tr->cur[i];
        e->unobserved_lost += th->gap_lost;
        if (th->unobserved == NONE)
            continue;
        const pt_cct_node_t *n = &e->cct->nodes[th->unobserved];
        const double nspt = e->procs[e->thr[i].proc].ns_per_tick;
        e->unobserved_ns += (uint64_t)llround((double)n->self * nspt);
        e->unobserved_cpu_ns += (uint64_t)llround((double)PT_CCT_CPU(n->cpu) * nspt);
    }
}

/* ---- collapsed -------------------------------------------------------------- */

static const char *folded_label(ex_t *e, uint32_t sym)
{
    tsym_t *x = tsym(e, sym);
    if (!x)
        return NULL;
    if (x->folded)
        return x->folded;
    const pt_cct_symbol_t *s = ex_sym(e, sym);
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
    x->folded = b;
    return b;
}

static uint64_t folded_value(const ex_t *e, const pt_cct_node_t *nd)
{
    if (e->o.weight_calls)
        return nd->calls;
    return (uint64_t)llround((double)(e->o.cpu_time ? PT_CCT_CPU(nd->cpu) : nd->self) * e->procs[nd->owner].ns_per_tick);
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
    const pt_cct_node_t *nodes = e->cct->nodes;
    uint64_t sum = 0;
    uint32_t depth = 0, c = nodes[n].first_child;
    while (c != NONE) {
        depth++;
        if (depth > *below)
            *below = depth;
        sum += folded_value(e, &nodes[c]);
        (*count)++;
        if (nodes[c].first_child != NONE) {
            c = nodes[c].first_child;
            continue;
        }
        while (c != n && nodes[c].next_sibling == NONE) {
            c = nodes[c].parent;
            depth--;
        }
        c = c == n ? NONE : nodes[c].next_sibling;
    }
    return sum;
}

static int write_collapsed(ex_t *e)
{
    const pt_cct_node_t *nodes = e->cct->nodes;
    obuf_t *o = &e->out;
    char *path = NULL;
    size_t plen = 0, pcap = 0;
    uint32_t *lens = NULL, nl = 0, cap_l = 0;
    uint32_t *frames = NULL; /* frames on the path at each level (thread and process roots are none) */
    uint64_t unobserved = 0; /* the <not observed> nodes without a thread root: one stack */
    int rc = 0;
    /* iterative DFS from the root: path holds the names of the current node's ancestors */
    uint32_t n = e->cct->node_count > 1 ? nodes[0].first_child : NONE;
    while (n != NONE) {
        const pt_cct_node_t *nd = &nodes[n];
        const char *label;
        char tb[96];
        if (nd->sym == NONE && nd->aux32 == NONE) {
            label = ""; /* a process's subtree: its stacks merge with the others' */
        } else if (nd->sym == NONE) { /* a thread's (per_thread) */
            thr_t *t = &e->thr[nd->aux32];
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
        } else if (nd->sym == PT_CCT_OTHER) {
            label = "[other]"; /* calls below its parent folded past the tree budget */
        } else if (nd->sym == PT_CCT_UNOBSERVED) {
            label = "<not observed>"; /* the thread's time inside Lost gaps: in no function */
        } else {
            label = folded_label(e, nd->sym);
            if (!label) {
                rc = -ENOMEM;
                break;
            }
        }
        size_t ll = strlen(label);
        int heap_label = nd->sym == NONE && nd->aux32 != NONE && label != tb;
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
        if (nd->sym == PT_CCT_UNOBSERVED && !e->o.per_thread) {
            unobserved += folded_value(e, nd); /* every thread's and process's: one line, at the end */
        } else if (nd->sym != NONE) {
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
            if (nodes[n].next_sibling != NONE) {
                n = nodes[n].next_sibling;
                break;
            }
            n = nodes[n].parent;
            if (n == 0)
                n = NONE;
        }
    }
    if (!rc && unobserved)
        rc = folded_line(o, "<not observed>", strlen("<not observed>"), " ", unobserved);
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
static char *old_c_label(const pt_cct_symbol_t *s)
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
static int pstats_key(const pt_cct_symbol_t *s, int qualnames, char **file, uint32_t *line, char **name)
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

/* The walk's visits (pt_cct_walk): the (caller, callee) pairs, each with
 * how many of its nodes are on the path (cProfile's per-pair recursion). */
typedef struct pairs {
    const pt_cct_t *cct;
    const uint64_t *incl;      /* the view's inclusive time (wall or CPU) */
    int cpu;                   /* self time: the nodes' CPU ticks */
    pt_u64map_t edge_map, edge_on; /* (caller << 32 | callee) -> edge, -> on the path */
    pedge_t *edges;
    uint32_t nedges, cap_edges;
} pairs_t;

static int pair_visit(void *ctx, uint32_t n, int leaving, int outermost)
{
    (void)outermost;
    pairs_t *pp = ctx;
    const pt_cct_node_t *nd = &pp->cct->nodes[n];
    uint32_t ps = nd->parent != NONE ? pp->cct->nodes[nd->parent].sym : NONE;
    if (ps == NONE) /* below a root: no caller */
        return 0;
    uint64_t ek = (uint64_t)ps << 32 | nd->sym;
    uint32_t *on = pt_u64map_slot(&pp->edge_on, ek, 0);
    if (!on)
        return -ENOMEM;
    if (leaving) {
        (*on)--;
        return 0;
    }
    int outer_pair = !*on;
    (*on)++;
    uint32_t *slot = pt_u64map_slot(&pp->edge_map, ek, NONE);
    if (!slot)
        return -ENOMEM;
    if (*slot == NONE) {
        if (pt_grow((void **)&pp->edges, &pp->cap_edges, sizeof *pp->edges, pp->nedges + 1))
            return -ENOMEM;
        pp->edges[pp->nedges] = (pedge_t){.caller = ps, .callee = nd->sym};
        *pt_u64map_slot(&pp->edge_map, ek, NONE) = pp->nedges++;
        slot = pt_u64map_slot(&pp->edge_map, ek, NONE);
    }
    pedge_t *ed = &pp->edges[*slot];
    ed->nc += nd->calls;
    ed->tt += pp->cpu ? PT_CCT_CPU(nd->cpu) : nd->self;
    if (outer_pair) {
        ed->cc += nd->calls;
        ed->ct += pp->incl[n];
    }
    return 0;
}

static int write_pstats(ex_t *e)
{
    tree_t *tr = e->ws;
    const pt_cct_t *cct = e->cct;
    int rc = -ENOMEM;
    uint32_t nn = cct->node_count, ns = cct->sym_count;
    const int cpu = e->o.cpu_time;
    uint64_t *incl = calloc(nn ? nn : 1, sizeof *incl);
    uint64_t *incl_cpu = cpu ? calloc(nn ? nn : 1, sizeof *incl_cpu) : NULL;
    pt_cct_sums_t *f = calloc(ns ? ns : 1, sizeof *f); /* per symbol */
    double *scale = malloc((size_t)(e->nprocs ? e->nprocs : 1) * sizeof *scale); /* per process */
    pairs_t pp = {.cct = cct, .incl = cpu ? incl_cpu : incl, .cpu = cpu};
    pt_u64map_t key_map = {0};
    pkey_t *keys = NULL;
    uint32_t nkeys = 0, cap_keys = 0;
    if (!incl || (cpu && !incl_cpu) || !f || !scale || (ns && !tsym(e, ns - 1)) ||
        pt_u64map_init(&pp.edge_map, 1024) || pt_u64map_init(&pp.edge_on, 64) || pt_u64map_init(&key_map, 1024))
        goto out;
    pt_cct_sum_up(cct, NULL, NULL, incl, NULL);
    if (cpu)
        pt_cct_sum_up_cpu(cct, NULL, incl_cpu);
    /* the functions' rows and the pairs', then the folded calls' rows (the
     * <not observed> nodes are in none: pstats stays cProfile's, the result
     * says how much was left out) */
    const pt_cct_view_t all = {.incl = incl, .incl_cpu = incl_cpu};
    const uint32_t root = 0;
    if (nn && (rc = pt_cct_walk(cct, &root, 1, &all, f, pair_visit, &pp)) != 0)
        goto out;
    rc = -ENOMEM;
    pt_cct_fold_sums(cct, f);
    pedge_t *edges = pp.edges;
    uint32_t nedges = pp.nedges;
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
        const double sc = scale[ex_sym(e, s)->proc];
        if (sc != 1.0) {
            f[s].self = (uint64_t)llround((double)f[s].self * sc);
            f[s].total = (uint64_t)llround((double)f[s].total * sc);
            f[s].self_cpu = (uint64_t)llround((double)f[s].self_cpu * sc);
            f[s].total_cpu = (uint64_t)llround((double)f[s].total_cpu * sc);
        }
    }
    for (uint32_t i = 0; i < nedges; i++) {
        const double sc = scale[ex_sym(e, edges[i].callee)->proc];
        if (sc != 1.0) {
            edges[i].tt = (uint64_t)llround((double)edges[i].tt * sc);
            edges[i].ct = (uint64_t)llround((double)edges[i].ct * sc);
        }
    }
    /* keys: symbols with one key are added together */
    for (uint32_t s = 0; s < ns; s++) {
        tr->sx[s].key = NONE;
        if (!f[s].calls && !f[s].self && !f[s].total) /* the same rows in wall and CPU time */
            continue;
        char *file, *name;
        uint32_t line;
        if (pstats_key(ex_sym(e, s), e->o.qualnames, &file, &line, &name))
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
        tr->sx[s].key = k;
        keys[k].nc += f[s].calls;
        keys[k].cc += f[s].prim;
        keys[k].tt += cpu ? f[s].self_cpu : f[s].self; /* the rows' times: CPU time or wall */
        keys[k].ct += cpu ? f[s].total_cpu : f[s].total;
    }
    for (uint32_t i = 0; i < nedges; i++) {
        edges[i].caller = tr->sx[edges[i].caller].key;
        edges[i].callee = tr->sx[edges[i].callee].key;
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
    free(pp.edges);
    free(incl);
    free(incl_cpu);
    free(f);
    free(scale);
    pt_u64map_free(&pp.edge_map);
    pt_u64map_free(&pp.edge_on);
    pt_u64map_free(&key_map);
    return rc;
}

static int collapsed_end(ex_t *e, const pt_walk_counters_t *wc)
{
    (void)wc;
    tree_unobserved(e);
    return write_collapsed(e);
}

static int pstats_end(ex_t *e, const pt_walk_counters_t *wc)
{
    (void)wc;
    tree_unobserved(e);
    return write_pstats(e);
}

const ex_writer_t pt_ex_collapsed = {
    .tree = 1, .tree_key = collapsed_key, .init = tree_init, .destroy = tree_destroy, .proc_new = tree_proc_new,
    .thread = tree_thread, .symbol = tree_symbol, .self = tree_self, .enter = tree_enter, .exit = tree_exit,
    .gap = tree_gap, .cpu = tree_cpu, .thread_end = tree_thread_end, .end = collapsed_end};

const ex_writer_t pt_ex_pstats = {
    .tree = 1, .init = tree_init, .destroy = tree_destroy, .proc_new = tree_proc_new, .thread = tree_thread,
    .symbol = tree_symbol, .self = tree_self, .enter = tree_enter, .exit = tree_exit, .gap = tree_gap,
    .cpu = tree_cpu, .thread_end = tree_thread_end, .end = pstats_end};
