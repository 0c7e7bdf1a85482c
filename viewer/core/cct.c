/*
 * pt_cct implementation (the rules are in cct.h).
 *
 * Design summary
 *   - Nodes live in one growable array; a node's index never changes. Each
 *     node caches its last looked-up child, which hits for loops calling the
 *     same function over and over; a miss goes to the (parent, key) map.
 *   - Refusing new nodes past the budget (rather than evicting the least used
 *     ones) keeps every node that exists exact and costs nothing per event;
 *     the paths folded are the ones first seen after the budget was reached,
 *     which in a program with never-repeating paths are the rare ones.
 *   - A fold record's inclusive ticks are counted lazily: an open outermost
 *     folded activation remembers the thread's acc at its last flush, and the
 *     difference is counted when the activation exits (or when the reader
 *     flushes, as pt_agg does at each window slice): O(1) per event.
 *   - The walk is stackless (first_child / next_sibling / parent) and keeps
 *     per symbol how many of its nodes are on the current path.
 */
#define _POSIX_C_SOURCE 200809L /* strndup */
#include "cct.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_NODE_LIMIT 64u

int pt_cct_create(const pt_cct_config_t *cfg, pt_cct_t **out)
{
    pt_cct_t *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    if (cfg)
        t->cfg = *cfg;
    if (!t->cfg.budget)
        t->cfg.budget = PT_CCT_DEFAULT_BUDGET;
    uint64_t limit = t->cfg.budget / PT_CCT_NODE_BYTES / 2;
    t->node_limit = limit < MIN_NODE_LIMIT ? MIN_NODE_LIMIT : limit > UINT32_MAX / 4 ? UINT32_MAX / 4 : (uint32_t)limit;
    if (pt_u64map_init(&t->node_map, 1024) || pt_u64map_init(&t->sym_map, 256) || pt_u64map_init(&t->other_map, 16) ||
        pt_u64map_init(&t->fold_map, 16)) {
        pt_cct_destroy(t);
        return -ENOMEM;
    }
    *out = t;
    return 0;
}

static void free_sym_strings(pt_cct_symbol_t *s)
{
    free((void *)s->name);
    free((void *)s->file);
    free((void *)s->profile);
}

void pt_cct_destroy(pt_cct_t *t)
{
    if (!t)
        return;
    free(t->nodes);
    pt_u64map_free(&t->node_map);
    pt_u64map_free(&t->other_map);
    free(t->folds);
    pt_u64map_free(&t->fold_map);
    for (uint32_t i = 0; i < t->sym_count; i++)
        free_sym_strings(&t->syms[i]);
    free(t->syms);
    pt_u64map_free(&t->sym_map);
    for (size_t i = 0; i < t->old_count; i++)
        free(t->old_strings[i]);
    free(t->old_strings);
    free(t);
}

/* ---- symbols ---------------------------------------------------------------- */

/* A C string of s (a NUL inside ends it: names are C strings from here on). */
static char *dup_fb(pt_fb_str_t s) { return strndup(s.ptr ? s.ptr : "", s.ptr ? s.len : 0); }

uint32_t pt_cct_sym(pt_cct_t *t, uint32_t proc, uint32_t id)
{
    const uint64_t key = (uint64_t)proc << 32 | id;
    uint32_t idx = pt_u64map_get(&t->sym_map, key);
    if (idx != PT_CCT_NONE)
        return idx;
    if (pt_grow((void **)&t->syms, &t->sym_cap, sizeof *t->syms, t->sym_count + 1))
        return PT_CCT_NONE;
    char buf[40];
    snprintf(buf, sizeof buf, "<unknown #%u>", id);
    pt_cct_symbol_t *s = &t->syms[t->sym_count];
    *s = (pt_cct_symbol_t){.id = id, .proc = proc, .name = strdup(buf), .file = strdup("")};
    if (!s->name || !s->file || pt_u64map_put(&t->sym_map, key, t->sym_count)) {
        free_sym_strings(s);
        return PT_CCT_NONE;
    }
    return t->sym_count++;
}

/* Strings handed out earlier stay valid until destroy (a leak rather than a
 * dangling pointer when even that list cannot grow). */
static void keep_old(pt_cct_t *t, const char *s)
{
    if (!s)
        return;
    if (t->old_count == t->old_cap) {
        size_t ncap = t->old_cap ? t->old_cap * 2 : 16;
        char **p = realloc(t->old_strings, ncap * sizeof *p);
        if (!p)
            return;
        t->old_strings = p;
        t->old_cap = ncap;
    }
    t->old_strings[t->old_count++] = (char *)s;
}

uint32_t pt_cct_sym_set(pt_cct_t *t, uint32_t proc, const pt_fb_symbol_t *in)
{
    uint32_t idx = pt_cct_sym(t, proc, in->id);
    if (idx == PT_CCT_NONE)
        return PT_CCT_NONE;
    char *name = dup_fb(in->name), *file = dup_fb(in->file);
    char *profile = in->profile_name.ptr ? dup_fb(in->profile_name) : NULL;
    if (!name || !file || (in->profile_name.ptr && !profile)) {
        free(name);
        free(file);
        free(profile);
        return PT_CCT_NONE;
    }
    pt_cct_symbol_t *s = &t->syms[idx];
    keep_old(t, s->name);
    keep_old(t, s->file);
    keep_old(t, s->profile);
    s->name = name;
    s->file = file;
    s->profile = profile;
    s->kind = in->kind;
    s->line = in->line;
    s->known = 1;
    return idx;
}

/* ---- nodes ------------------------------------------------------------------ */

static uint32_t node_new(pt_cct_t *t, uint32_t parent, uint32_t sym, uint32_t owner)
{
    if (pt_grow((void **)&t->nodes, &t->node_cap, sizeof *t->nodes, t->node_count + 1))
        return PT_CCT_NONE;
    uint32_t idx = t->node_count++;
    pt_cct_node_t *n = &t->nodes[idx];
    *n = (pt_cct_node_t){.parent = parent, .sym = sym, .first_child = PT_CCT_NONE, .next_sibling = PT_CCT_NONE,
                         .cache_key = PT_CCT_NONE, .cache_child = PT_CCT_NONE, .owner = owner,
                         .aux64 = UINT64_MAX};
    if (parent != PT_CCT_NONE) {
        n->next_sibling = t->nodes[parent].first_child;
        t->nodes[parent].first_child = idx;
    }
    return idx;
}

uint32_t pt_cct_root(pt_cct_t *t, uint32_t parent, uint32_t owner)
{
    return node_new(t, parent, PT_CCT_NONE, owner);
}

/* The [other] child of `parent`, made on first need (at most one per node, so
 * they are bounded by the nodes that are not [other]). */
static uint32_t other_of(pt_cct_t *t, uint32_t parent)
{
    uint32_t c = pt_u64map_get(&t->other_map, parent);
    if (c != PT_CCT_NONE)
        return c;
    c = node_new(t, parent, PT_CCT_OTHER, t->nodes[parent].owner);
    if (c == PT_CCT_NONE || pt_u64map_put(&t->other_map, parent, c))
        return PT_CCT_NONE;
    t->other_count++;
    return c;
}

/* The child of `parent` for (proc, id): made on first sight while the tree is
 * within its budget, else the parent's [other] node; below an [other] node
 * every call is that node. */
static uint32_t child_of(pt_cct_t *t, uint32_t parent, uint32_t proc, uint32_t id)
{
    pt_cct_node_t *p = &t->nodes[parent];
    if (p->sym == PT_CCT_OTHER)
        return parent;
    /* cache_key starts as PT_CCT_NONE, which is also a symbol id a stream may
     * carry: an empty cache is told by its child */
    if (p->cache_child != PT_CCT_NONE && p->cache_key == id)
        return p->cache_child;
    uint32_t key = id;
    if (t->cfg.key_of && (key = t->cfg.key_of(t->cfg.ctx, proc, id)) == PT_CCT_NONE)
        return PT_CCT_NONE;
    uint64_t mkey = (uint64_t)parent << 32 | key;
    uint32_t c = pt_u64map_get(&t->node_map, mkey);
    if (c == PT_CCT_NONE && t->node_count - t->other_count >= t->node_limit) {
        c = other_of(t, parent);
    } else if (c == PT_CCT_NONE) {
        uint32_t sym = pt_cct_sym(t, proc, id);
        if (sym == PT_CCT_NONE)
            return PT_CCT_NONE;
        c = node_new(t, parent, sym, t->nodes[parent].owner);
        if (c != PT_CCT_NONE && pt_u64map_put(&t->node_map, mkey, c))
            return PT_CCT_NONE;
    }
    if (c == PT_CCT_NONE)
        return PT_CCT_NONE;
    if (t->nodes[c].sym == PT_CCT_OTHER) /* not cached: a cached child is never [other] (pt_cct_enter's hot path) */
        return c;
    p = &t->nodes[parent]; /* node_new may have moved the array */
    p->cache_key = id;
    p->cache_child = c;
    return c;
}

/* ---- fold records ----------------------------------------------------------- */

static uint32_t fold_get(pt_cct_t *t, uint32_t owner, uint32_t sym)
{
    uint64_t key = (uint64_t)owner << 32 | sym;
    uint32_t f = pt_u64map_get(&t->fold_map, key);
    if (f != PT_CCT_NONE)
        return f;
    if (t->fold_count >= UINT32_MAX / 4 ||
        pt_grow((void **)&t->folds, &t->fold_cap, sizeof *t->folds, t->fold_count + 1))
        return PT_CCT_NONE;
    f = t->fold_count;
    t->folds[f] = (pt_cct_fold_t){.owner = owner, .sym = sym, .aux64 = UINT64_MAX};
    if (pt_u64map_put(&t->fold_map, key, f))
        return PT_CCT_NONE;
    t->fold_count++;
    return f;
}

void pt_cct_fold_flush(pt_cct_t *t, pt_cct_thread_t *th, uint32_t from, uint64_t acc)
{
    for (uint32_t i = from; i < th->fo_count; i++) {
        pt_cct_fopen_t *o = &th->fo[i];
        /* CPU: what the thread's CpuTime records gave since (exact to one sample interval) */
        uint64_t dc = th->acc_cpu - o->mark_cpu;
        uint64_t d = acc - o->mark;
        if (!d && !dc)
            continue;
        t->folds[o->fold].total_cpu += dc;
        o->mark_cpu = th->acc_cpu;
        t->folds[o->fold].total += d;
        if (t->cfg.fold_flushed)
            t->cfg.fold_flushed(t->cfg.ctx, th, o->fold, d, dc);
        o->mark = acc;
    }
}

/* ---- CPU time and unobserved time (the rules are in cct.h) -------------------- */

void pt_cct_pend_(pt_cct_thread_t *th, pt_cct_pending_t **list, uint32_t *n, uint32_t *cap, uint32_t idx,
                  uint64_t d)
{
    if (*n >= PT_CCT_PENDING_MAX || pt_grow((void **)list, cap, sizeof **list, *n + 1)) {
        th->cpu_lost++; /* its share will be missing: counted */
        return;
    }
    (*list)[(*n)++] = (pt_cct_pending_t){.idx = idx, .ticks = d};
}

uint64_t pt_cct_gap(pt_cct_t *t, pt_cct_thread_t *th, uint64_t now, uint64_t lost)
{
    if (th->unobserved == PT_CCT_NONE) {
        uint32_t u = node_new(t, th->root, PT_CCT_UNOBSERVED, th->owner);
        if (u != PT_CCT_NONE)
            th->unobserved = u;
    }
    th->gap_lost += lost;
    uint64_t d = pt_cct_elapsed(th, now);
    if (d && th->unobserved != PT_CCT_NONE) {
        t->nodes[th->unobserved].self += d;
        pt_cct_pend(t, th, th->unobserved, d);
    }
    return d;
}

void pt_cct_cpu_forget(pt_cct_t *t, pt_cct_thread_t *th)
{
    (void)t;
    th->ndirty = th->nfdirty = 0;
    th->have_cpu = 0;
}

static uint64_t share(uint64_t ticks, double r)
{
    double v = (double)ticks * r + 0.5;
    return v >= 9223372036854775807.0 ? ~PT_CCT_DIRTY : (uint64_t)v; /* bit 63 is the mark */
}

void pt_cct_cpu(pt_cct_t *t, pt_cct_thread_t *th, uint64_t now, uint64_t cpu_ns, uint64_t ticks_per_second,
                double *rate)
{
    double r = -1.0;
    cpu_ns &= PT_CPU_MASK;
    if (th->have_cpu && now > th->cpu_ticks) {
        uint64_t dcpu = (cpu_ns - th->cpu_ns) & PT_CPU_MASK;
        double wall_ns = (double)(now - th->cpu_ticks) * 1e9 / (double)(ticks_per_second ? ticks_per_second : 1000000000u);
        r = wall_ns > 0 ? (double)dcpu / wall_ns : 0.0;
        if (r > 1.0)
            r = 1.0; /* two clocks read at slightly different moments */
    } else if (th->have_cpu) {
        /* the same tick again (or an older one): nothing was given in between;
         * keep the earlier record as the interval's start */
        if (rate)
            *rate = -1.0;
        return;
    }
    for (uint32_t i = 0; r >= 0 && i < th->ndirty; i++) {
        pt_cct_node_t *n = &t->nodes[th->dirty[i].idx];
        uint64_t c = share(th->dirty[i].ticks, r);
        n->cpu = c > ~PT_CCT_DIRTY - n->cpu ? ~PT_CCT_DIRTY : n->cpu + c; /* saturating (hostile ticks) */
        if (n->sym != PT_CCT_UNOBSERVED) /* nobody's, as its wall ticks are not in acc */
            th->acc_cpu += c;
    }
    for (uint32_t i = 0; r >= 0 && i < th->nfdirty; i++) {
        pt_cct_fold_t *f = &t->folds[th->fdirty[i].idx];
        uint64_t c = share(th->fdirty[i].ticks, r);
        f->cpu = c > ~PT_CCT_DIRTY - f->cpu ? ~PT_CCT_DIRTY : f->cpu + c;
    }
    th->ndirty = th->nfdirty = 0;
    th->have_cpu = 1;
    th->cpu_ticks = now;
    th->cpu_ns = cpu_ns;
    if (rate)
        *rate = r;
}

/* ---- threads ---------------------------------------------------------------- */

void pt_cct_thread_free(pt_cct_thread_t *th)
{
    free(th->stack);
    free(th->fo);
    free(th->dirty);
    free(th->fdirty);
    th->stack = NULL;
    th->fo = NULL;
    th->dirty = th->fdirty = NULL;
    th->ndirty = th->dirty_cap = th->nfdirty = th->fdirty_cap = 0;
    th->depth = th->stack_cap = th->fo_count = th->fo_cap = 0;
}

int pt_cct_enter_slow(pt_cct_t *t, pt_cct_thread_t *th, uint32_t proc, uint32_t id, int counted,
                      const pt_walk_t *walk, const pt_walk_thread_t *wt, pt_cct_entered_t *out)
{
    if (th->depth == th->stack_cap &&
        pt_grow((void **)&th->stack, &th->stack_cap, sizeof *th->stack, th->depth + 1))
        return -ENOMEM;
    uint32_t c = child_of(t, pt_cct_top(th), proc, id);
    if (c == PT_CCT_NONE)
        return -ENOMEM;
    uint32_t fr = PT_CCT_NONE;
    int outer = 0;
    if (t->nodes[c].sym == PT_CCT_OTHER) { /* folded: the function rows keep it in a fold record */
        uint32_t sym = pt_cct_sym(t, proc, id);
        fr = sym == PT_CCT_NONE ? PT_CCT_NONE : fold_get(t, th->owner, sym);
        if (fr == PT_CCT_NONE)
            return -ENOMEM;
        outer = pt_walk_open(walk, wt, id) == 1; /* no other entry of it on the stack */
        if (outer) {
            if (th->fo_count == th->fo_cap && pt_grow((void **)&th->fo, &th->fo_cap, sizeof *th->fo, th->fo_count + 1))
                return -ENOMEM;
            th->fo[th->fo_count++] = (pt_cct_fopen_t){.fold = fr, .pos = th->depth, .mark = th->acc,
                                                      .mark_cpu = th->acc_cpu};
        }
    }
    if (counted) { /* one call per activation, seen or reported */
        t->nodes[c].calls++;
        if (fr != PT_CCT_NONE) {
            t->folded_calls++;
            t->folds[fr].calls++;
            t->folds[fr].prim += (uint64_t)outer;
        }
    }
    th->stack[th->depth++] = (pt_cct_frame_t){.node = c, .fold = fr};
    if (out)
        *out = (pt_cct_entered_t){.node = c, .fold = fr, .outermost = outer};
    return 0;
}

/* ---- the walk --------------------------------------------------------------- */

void pt_cct_sum_up(const pt_cct_t *t, const uint64_t *self, const uint64_t *calls, uint64_t *incl, uint64_t *sub_calls)
{
    for (uint32_t i = t->node_count; i-- > 0;) {
        incl[i] += self ? self[i] : t->nodes[i].self;
        if (sub_calls)
            sub_calls[i] += calls ? calls[i] : t->nodes[i].calls;
        uint32_t p = t->nodes[i].parent;
        if (p != PT_CCT_NONE) {
            if (t->nodes[i].sym != PT_CCT_UNOBSERVED) /* nobody's time */
                incl[p] += incl[i];
            if (sub_calls)
                sub_calls[p] += sub_calls[i];
        }
    }
}

void pt_cct_sum_up_cpu(const pt_cct_t *t, const uint64_t *cpu, uint64_t *incl_cpu)
{
    for (uint32_t i = t->node_count; i-- > 0;) {
        incl_cpu[i] += cpu ? cpu[i] : PT_CCT_CPU(t->nodes[i].cpu);
        uint32_t p = t->nodes[i].parent;
        if (p != PT_CCT_NONE && t->nodes[i].sym != PT_CCT_UNOBSERVED)
            incl_cpu[p] += incl_cpu[i];
    }
}

/* One root's subtree (pt_cct_walk); onpath is all zero before and after. */
static int walk_root(const pt_cct_t *t, uint32_t root, const pt_cct_view_t *v, pt_cct_sums_t *sums,
                     pt_cct_visit_fn visit, void *ctx, uint32_t *onpath)
{
    const pt_cct_node_t *nodes = t->nodes;
    int rc = 0;
    uint32_t n = nodes[root].first_child;
    while (n != PT_CCT_NONE) {
        const pt_cct_node_t *nd = &nodes[n];
        uint32_t s = nd->sym;
        int entered = 0;
        if (s == PT_CCT_NONE) { /* a root inside: passed through */
            entered = 1;
        } else if (s != PT_CCT_OTHER && s != PT_CCT_UNOBSERVED && (!v->sub_calls || v->incl[n] || v->sub_calls[n])) {
            int outer = onpath[s] == 0; /* the outermost activation of s on this path */
            if (sums) {
                uint64_t calls = v->calls ? v->calls[n] : nd->calls;
                sums[s].nodes++;
                sums[s].calls += calls;
                sums[s].self += v->self ? v->self[n] : nd->self;
                sums[s].self_cpu += v->cpu ? v->cpu[n] : PT_CCT_CPU(nd->cpu);
                if (outer) {
                    sums[s].prim += calls;
                    sums[s].total += v->incl[n];
                    if (v->incl_cpu)
                        sums[s].total_cpu += v->incl_cpu[n];
                }
            }
            if (visit && (rc = visit(ctx, n, 0, outer)))
                return rc;
            onpath[s]++;
            entered = 1;
        }
        if (entered && nd->first_child != PT_CCT_NONE) {
            n = nd->first_child;
            continue;
        }
        /* leave n (if entered) and the ancestors that have no next sibling */
        for (;;) {
            const pt_cct_node_t *x = &nodes[n];
            if (entered && x->sym != PT_CCT_NONE) {
                onpath[x->sym]--;
                if (visit && (rc = visit(ctx, n, 1, 0)))
                    return rc;
            }
            if (x->next_sibling != PT_CCT_NONE) {
                n = x->next_sibling;
                break;
            }
            n = x->parent;
            if (n == root) {
                n = PT_CCT_NONE;
                break;
            }
            entered = 1; /* an ancestor we descended into */
        }
    }
    return rc;
}

int pt_cct_walk(const pt_cct_t *t, const uint32_t *roots, size_t nroots, const pt_cct_view_t *v, pt_cct_sums_t *sums,
                pt_cct_visit_fn visit, void *ctx)
{
    uint32_t *onpath = calloc(t->sym_count ? t->sym_count : 1, sizeof *onpath);
    if (!onpath)
        return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < nroots && !rc; i++)
        rc = walk_root(t, roots[i], v, sums, visit, ctx, onpath);
    free(onpath);
    return rc;
}

void pt_cct_fold_sums(const pt_cct_t *t, pt_cct_sums_t *sums)
{
    for (uint32_t f = 0; f < t->fold_count; f++) {
        const pt_cct_fold_t *r = &t->folds[f];
        sums[r->sym].calls += r->calls;
        sums[r->sym].prim += r->prim;
        sums[r->sym].self += r->self;
        sums[r->sym].total += r->total;
        sums[r->sym].self_cpu += PT_CCT_CPU(r->cpu);
        sums[r->sym].total_cpu += r->total_cpu;
        sums[r->sym].nodes++;
    }
}
