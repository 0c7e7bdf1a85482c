/*
 * pt_cct: the calling-context tree (CCT) with its symbol table -- the one tree
 * every reader of the stream keeps: pt_agg (pytrace-top, the web view,
 * pytrace.Profile, the hub) and the pstats and collapsed exports. Internal to
 * viewer/core (it includes the core's internal map).
 *
 * The rules, stated once:
 *   - Symbols: (process, id) -> a dense index, in order of first sight. An id
 *     never announced is named "<unknown #id>" with file "" (known = 0). A
 *     Symbol announced again replaces its strings; the strings handed out
 *     before stay valid until pt_cct_destroy.
 *   - Nodes: (parent, key) -> node, the key being the symbol id (or what
 *     pt_cct_config_t.key_of says: collapsed merges symbols of one label). A
 *     node counts the calls that entered it and its self ticks. A child always
 *     has a larger index than its parent, so inclusive time is one reverse
 *     pass (pt_cct_sum_up).
 *   - Self time (pt_cct_account): between two events of a thread, the ticks
 *     elapsed go to the frame on top of its stack (to the thread's root when
 *     the stack is empty); a tick that does not move forward gives nothing.
 *   - Budget: past node_limit nodes, a path that would need a new node is
 *     charged to its parent's [other] node (sym PT_CCT_OTHER, at most one per
 *     node), and below an [other] node every call is that node again. The tree
 *     keeps the paths it holds and stops growing; every call and tick is still
 *     counted, in [other]. So that the function rows stay exact, a folded
 *     activation is also kept per (thread owner, symbol) in a fold record with
 *     its calls, primitive calls, self ticks and, for an outermost one (no
 *     other entry of its id open: pt_walk_open), its inclusive ticks, counted
 *     lazily from the thread's clock acc (ticks given to anything on it).
 *   - The walk (pt_cct_walk): primitive calls are the calls of a node whose
 *     symbol is not already on its path; total time is the inclusive time of
 *     those outermost activations (pstats' cumtime), so recursion never counts
 *     twice.
 *
 * Threading: one thread at a time. Errors: 0 or -ENOMEM.
 */
#ifndef PT_VIEWER_CCT_H
#define PT_VIEWER_CCT_H

#include <stddef.h>
#include <stdint.h>

#include "grow_internal.h"
#include "schema/pt_fb.h"
#include "u64map_internal.h"
#include "walk.h"

#define PT_CCT_NONE UINT32_MAX
#define PT_CCT_OTHER (UINT32_MAX - 1u) /* pt_cct_node_t.sym of an [other] node (no dense index has it) */
#define PT_CCT_UNOBSERVED (UINT32_MAX - 2u) /* sym of a thread's <not observed> node (pt_cct_gap) */

/* What one node costs a reader at most (its slot in the node array and the
 * hash table, and its copies in a query and in a Python tree), charged against
 * the budget; half of the budget is kept for [other] nodes. */
#define PT_CCT_DEFAULT_BUDGET (256ull << 20)
#define PT_CCT_NODE_BYTES 512u

_Static_assert(PT_CCT_NONE == PT_U64MAP_EMPTY, "the tree's none is the u64 map's empty value");

typedef struct pt_cct_symbol {
    uint32_t id;
    uint32_t proc;          /* the process it belongs to (ids are per process) */
    uint8_t kind;           /* enum pt_symbol_kind */
    uint8_t known;          /* 0: never announced; name is "<unknown #id>", file "" */
    uint32_t line;
    const char *name;       /* raw bytes from the stream, NUL-terminated (a NUL inside ends it) */
    const char *file;
    const char *profile;    /* Symbol.profile_name; NULL when absent */
} pt_cct_symbol_t;

typedef struct pt_cct_node {
    uint32_t parent;        /* PT_CCT_NONE for a root made with no parent */
    uint32_t sym;           /* dense symbol index; PT_CCT_NONE: a root; PT_CCT_OTHER: an [other] node */
    uint32_t first_child;   /* children newest first */
    uint32_t next_sibling;
    uint32_t cache_key;     /* the last child looked up from here (told empty by cache_child) */
    uint32_t cache_child;
    uint32_t owner;         /* given to a root, inherited by its subtree */
    uint32_t aux32;         /* the reader's own (pt_agg: its window entry) */
    uint64_t aux64;         /* the reader's own (pt_agg: that entry's slice) */
    uint64_t calls;
    uint64_t self;          /* ticks */
    uint64_t cpu;           /* ticks of self on a CPU, given at each CpuTime record (pt_cct_cpu);
                               read it with PT_CCT_CPU() (bit 63 is agg's window mark, never set here) */
} pt_cct_node_t;

#define PT_CCT_DIRTY (UINT64_C(1) << 63)
#define PT_CCT_CPU(x) ((x) & ~PT_CCT_DIRTY)

/* Ticks a thread gave a node (or fold record) since its last CpuTime record:
 * per thread, since threads may share nodes (an export's tree merges them by
 * path). Consecutive gives to one node are one entry. */
typedef struct pt_cct_pending {
    uint32_t idx;
    uint32_t reserved;
    uint64_t ticks;
} pt_cct_pending_t;

/* A thread's pending list holds at most this many entries (the tracer writes a
 * CpuTime record at least every chunk of 4,091 records); past it, ticks get no
 * CPU share, counted in cpu_lost. */
#define PT_CCT_PENDING_MAX 65536u

typedef struct pt_cct_fold {  /* folded activations of one symbol on one thread */
    uint32_t owner;         /* the thread's (pt_cct_thread_t.owner) */
    uint32_t sym;           /* dense symbol index */
    uint32_t aux32;         /* the reader's own (pt_agg: its window entry) */
    uint32_t reserved;
    uint64_t aux64;         /* the reader's own */
    uint64_t calls, prim, self, total;
    uint64_t cpu;           /* as a node's (bit 63 too) */
    uint64_t total_cpu;     /* CPU ticks of its outermost activations (from the thread's acc_cpu) */
} pt_cct_fold_t;

typedef struct pt_cct_fopen {  /* an open outermost folded activation */
    uint32_t fold;
    uint32_t pos;           /* its stack position */
    uint64_t mark;          /* the thread's acc when its ticks were last counted */
    uint64_t mark_cpu;      /* the thread's acc_cpu then */
} pt_cct_fopen_t;

typedef struct pt_cct_frame {  /* an open frame */
    uint32_t node;
    uint32_t fold;          /* its fold record if folded, else PT_CCT_NONE */
} pt_cct_frame_t;

/* One thread's place in the tree: its open frames and its clock. Zero it,
 * then pt_cct_thread_init. */
typedef struct pt_cct_thread {
    uint32_t root;
    uint32_t owner;         /* its fold records' owner */
    pt_cct_frame_t *stack;  /* the open frames, outermost first (one array: an event touches one entry) */
    uint32_t depth, stack_cap;
    pt_cct_fopen_t *fo;     /* open outermost folded activations, innermost last */
    uint32_t fo_count, fo_cap;
    uint64_t acc;           /* ticks given to anything on this thread */
    uint64_t last;          /* tick of the last event accounted */
    int have_last;
    /* CPU time (pt_cct_cpu): the last CpuTime record, and the nodes and fold
     * records given ticks since (PT_CCT_DIRTY), whose CPU share it will tell */
    int have_cpu;
    uint64_t cpu_ticks, cpu_ns;
    uint64_t acc_cpu;       /* CPU ticks given to anything on this thread */
    pt_cct_pending_t *dirty, *fdirty;
    uint32_t ndirty, dirty_cap, nfdirty, fdirty_cap;
    uint64_t cpu_lost;      /* gives left without a CPU share (list full or out of memory) */
    uint32_t unobserved;    /* its <not observed> node (PT_CCT_NONE until a gap) */
    uint64_t gap_lost;      /* events lost in its gaps */
} pt_cct_thread_t;

typedef struct pt_cct pt_cct_t;

typedef struct pt_cct_config {
    uint64_t budget;        /* bytes; 0 = PT_CCT_DEFAULT_BUDGET */
    /* The key a new child is merged by, from (process, id); NULL: the id.
     * Returns PT_CCT_NONE when out of memory. */
    uint32_t (*key_of)(void *ctx, uint32_t proc, uint32_t id);
    /* Called when `ticks` of inclusive time (and `cpu` CPU ticks) of an open
     * outermost folded activation are counted (into fold->total, total_cpu);
     * NULL: nothing. */
    void (*fold_flushed)(void *ctx, pt_cct_thread_t *th, uint32_t fold, uint64_t ticks, uint64_t cpu);
    void *ctx;
} pt_cct_config_t;

struct pt_cct {
    pt_cct_config_t cfg;
    pt_cct_node_t *nodes;
    uint32_t node_count, node_cap;
    pt_u64map_t node_map;   /* (parent << 32 | key) -> node */
    uint32_t node_limit;    /* nodes that are not [other] */
    uint32_t other_count;   /* [other] nodes */
    pt_u64map_t other_map;  /* parent -> its [other] child */
    uint64_t folded_calls;  /* calls charged to [other] nodes */
    pt_cct_fold_t *folds;
    uint32_t fold_count, fold_cap;
    pt_u64map_t fold_map;   /* (owner << 32 | sym) -> fold */
    pt_cct_symbol_t *syms;
    uint32_t sym_count, sym_cap;
    pt_u64map_t sym_map;    /* (process << 32 | id) -> dense index */
    char **old_strings;     /* replaced symbol strings, freed at destroy */
    size_t old_count, old_cap;
};

int pt_cct_create(const pt_cct_config_t *cfg, pt_cct_t **out);
void pt_cct_destroy(pt_cct_t *t);

/* ---- symbols ------------------------------------------------------------ */

/* The dense index of (proc, id), created as unknown on first sight;
 * PT_CCT_NONE when out of memory. */
uint32_t pt_cct_sym(pt_cct_t *t, uint32_t proc, uint32_t id);
/* Announce a symbol (its strings are copied): its dense index, PT_CCT_NONE
 * when out of memory. */
uint32_t pt_cct_sym_set(pt_cct_t *t, uint32_t proc, const pt_fb_symbol_t *in);

static inline const pt_cct_symbol_t *pt_cct_sym_at(const pt_cct_t *t, uint32_t sym) { return &t->syms[sym]; }

/* ---- nodes and threads -------------------------------------------------- */

/* A new root (sym PT_CCT_NONE) under parent (PT_CCT_NONE: none) with its
 * owner; PT_CCT_NONE when out of memory. Roots are not charged to the budget's
 * count of folded calls but count as nodes. */
uint32_t pt_cct_root(pt_cct_t *t, uint32_t parent, uint32_t owner);

static inline void pt_cct_thread_init(pt_cct_thread_t *th, uint32_t root, uint32_t owner)
{
    th->root = root;
    th->owner = owner;
    th->unobserved = PT_CCT_NONE;
}

/* Out of line: append (idx, d) to a pending list. */
void pt_cct_pend_(pt_cct_thread_t *th, pt_cct_pending_t **list, uint32_t *n, uint32_t *cap, uint32_t idx,
                  uint64_t d);

/* th gave d ticks to node: its CPU share comes with th's next CpuTime record. */
static inline void pt_cct_pend(pt_cct_t *t, pt_cct_thread_t *th, uint32_t node, uint64_t d)
{
    (void)t;
    if (!th->have_cpu || !d)
        return; /* before the thread's first CpuTime record: no CPU share, ever */
    if (th->ndirty && th->dirty[th->ndirty - 1].idx == node)
        th->dirty[th->ndirty - 1].ticks += d;
    else
        pt_cct_pend_(th, &th->dirty, &th->ndirty, &th->dirty_cap, node, d);
}

static inline void pt_cct_fpend(pt_cct_t *t, pt_cct_thread_t *th, uint32_t fold, uint64_t d)
{
    (void)t;
    if (!th->have_cpu || !d)
        return;
    if (th->nfdirty && th->fdirty[th->nfdirty - 1].idx == fold)
        th->fdirty[th->nfdirty - 1].ticks += d;
    else
        pt_cct_pend_(th, &th->fdirty, &th->nfdirty, &th->fdirty_cap, fold, d);
}
void pt_cct_thread_free(pt_cct_thread_t *th);

/* The node on top of th (its root when nothing is open). */
static inline uint32_t pt_cct_top(const pt_cct_thread_t *th)
{
    return th->depth ? th->stack[th->depth - 1].node : th->root;
}

/* The fold record of th's top frame; PT_CCT_NONE when it is not folded (or
 * nothing is open). */
static inline uint32_t pt_cct_top_fold(const pt_cct_thread_t *th)
{
    return th->depth ? th->stack[th->depth - 1].fold : PT_CCT_NONE;
}

/* d ticks of th's time (its clock moved on with its stack as it is) go to the
 * frame on top, to its fold record and to th->acc: pt_cct_account's second
 * half, for a reader that keeps the thread's clock itself. */
static inline void pt_cct_give(pt_cct_t *t, pt_cct_thread_t *th, uint64_t d)
{
    /* read before the first store (which the compiler must assume may alias th) */
    const uint32_t depth = th->depth;
    const pt_cct_frame_t f = depth ? th->stack[depth - 1] : (pt_cct_frame_t){.node = th->root, .fold = PT_CCT_NONE};
    const uint32_t top = f.node, fold = f.fold;
    t->nodes[top].self += d;
    pt_cct_pend(t, th, top, d);
    if (fold != PT_CCT_NONE) {
        t->folds[fold].self += d;
        pt_cct_fpend(t, th, fold, d);
    }
    th->acc += d;
}

/* The self-time rule: the ticks since th's last event go to the frame on top
 * (and to its fold record, and to th->acc). Returns the ticks given (0 for the
 * first event, or a tick that does not move forward); th->last is then the
 * largest tick seen. */
/* The ticks since th's last event (0 for its first, or a tick that does not
 * move forward); th->last is then the largest tick seen. */
static inline uint64_t pt_cct_elapsed(pt_cct_thread_t *th, uint64_t now)
{
    if (!th->have_last) {
        th->have_last = 1;
        th->last = now;
        return 0;
    }
    if (now <= th->last)
        return 0;
    uint64_t d = now - th->last;
    th->last = now;
    return d;
}

static inline uint64_t pt_cct_account(pt_cct_t *t, pt_cct_thread_t *th, uint64_t now)
{
    uint64_t d = pt_cct_elapsed(th, now);
    if (d)
        pt_cct_give(t, th, d);
    return d;
}

/* THE RULE FOR UNOBSERVED TIME. A Lost record (walk's gap) ends a stretch
 * nobody saw: the ticks from th's last event to it go to th's <not observed>
 * node (a child of its root, sym PT_CCT_UNOBSERVED, made on the first gap),
 * never to a function and not to th->acc (no total includes them); `lost`
 * events are counted on it (gap_lost). Returns the ticks (0 as
 * pt_cct_account gives 0). Out of memory for the node, they go to nobody,
 * still out of every function. */
uint64_t pt_cct_gap(pt_cct_t *t, pt_cct_thread_t *th, uint64_t now, uint64_t lost);

/* THE RULE FOR CPU TIME. A CpuTime record says th's CPU clock (ns, modulo
 * 2^48) at tick now. The caller first accounts up to now (pt_cct_account).
 * The CPU ns since th's previous CpuTime record, over the wall ns since it
 * (ticks_per_second converts), is the rate r (at most 1) at which every tick
 * given since then was on a CPU: each node and fold record given ticks since
 * gets round(ticks * r) CPU ticks, and th->acc_cpu the sum. The first record
 * of a thread is its baseline: ticks given before it get no CPU (unknown).
 * Ticks given after the last record have no CPU yet (live views: not yet
 * known). *rate (may be NULL) gets r, or -1 when nothing was given. */
void pt_cct_cpu(pt_cct_t *t, pt_cct_thread_t *th, uint64_t now, uint64_t cpu_ns, uint64_t ticks_per_second,
                double *rate);

/* The thread ended (ThreadEnd): its CPU clock is gone with it. Ticks given
 * since its last CpuTime record get no CPU (unknown), and a thread that
 * reuses its number starts from its own first record. */
void pt_cct_cpu_forget(pt_cct_t *t, pt_cct_thread_t *th);

/* Count the ticks since their last flush (up to acc) of th's open outermost
 * folded activations from index `from` on, as their inclusive time. */
void pt_cct_fold_flush(pt_cct_t *t, pt_cct_thread_t *th, uint32_t from, uint64_t acc);

typedef struct pt_cct_entered {
    uint32_t node;          /* the node now on top */
    uint32_t fold;          /* its fold record when folded, else PT_CCT_NONE */
    int outermost;          /* folded: no other entry of its id was open */
} pt_cct_entered_t;

/* Open a frame of (proc, id) on th (the walk's enter: wt is its thread, for
 * pt_walk_open). Its node is the top's child for the id, made on first sight
 * while the tree is within budget, else the top's [other] node. counted: the
 * activation is a call (not PT_WALK_CONTINUED): one more call of its node
 * (and fold record). out may be NULL. 0 or -ENOMEM. */
int pt_cct_enter_slow(pt_cct_t *t, pt_cct_thread_t *th, uint32_t proc, uint32_t id, int counted,
                      const pt_walk_t *walk, const pt_walk_thread_t *wt, pt_cct_entered_t *out);

/* pt_cct_give(t, th, d) (d may be 0), then pt_cct_enter, with th's top
 * frame and its node read once. */
static inline int pt_cct_give_enter(pt_cct_t *t, pt_cct_thread_t *th, uint64_t d, uint32_t proc, uint32_t id,
                                    int counted, const pt_walk_t *walk, const pt_walk_thread_t *wt,
                                    pt_cct_entered_t *out)
{
    const uint32_t depth = th->depth, cap = th->stack_cap;
    pt_cct_frame_t *stack = th->stack;
    const pt_cct_frame_t f = depth ? stack[depth - 1] : (pt_cct_frame_t){.node = th->root, .fold = PT_CCT_NONE};
    pt_cct_node_t *p = &t->nodes[f.node];
    p->self += d;
    pt_cct_pend(t, th, f.node, d);
    if (f.fold != PT_CCT_NONE) {
        t->folds[f.fold].self += d;
        pt_cct_fpend(t, th, f.fold, d);
    }
    th->acc += d;
    /* the hot path, inline: room on the stack and the top's last child again
     * (cache_key starts as PT_CCT_NONE, which is also an id a stream may carry:
     * an empty cache is told by its child). Neither is [other]: an [other]
     * node caches nothing and no [other] child is cached (child_of). */
    const uint32_t c = p->cache_child;
    if (depth < cap && c != PT_CCT_NONE && p->cache_key == id) {
        th->depth = depth + 1;
        stack[depth] = (pt_cct_frame_t){.node = c, .fold = PT_CCT_NONE};
        if (counted)
            t->nodes[c].calls++;
        if (out)
            *out = (pt_cct_entered_t){.node = c, .fold = PT_CCT_NONE, .outermost = 0};
        return 0;
    }
    return pt_cct_enter_slow(t, th, proc, id, counted, walk, wt, out);
}

static inline int pt_cct_enter(pt_cct_t *t, pt_cct_thread_t *th, uint32_t proc, uint32_t id, int counted,
                               const pt_walk_t *walk, const pt_walk_thread_t *wt, pt_cct_entered_t *out)
{
    return pt_cct_give_enter(t, th, 0, proc, id, counted, walk, wt, out); /* the adds of 0 fold away */
}

/* Does closing th's top frame end an outermost folded activation? (its
 * inclusive ticks are then flushed by pt_cct_exit) */
static inline int pt_cct_exit_ends_fold(const pt_cct_thread_t *th)
{
    return th->depth && th->fo_count && th->fo[th->fo_count - 1].pos >= th->depth - 1;
}

/* Close th's top frame (nothing when none is open). */
static inline void pt_cct_exit(pt_cct_t *t, pt_cct_thread_t *th)
{
    if (!th->depth)
        return;
    if (pt_cct_exit_ends_fold(th)) {
        pt_cct_fold_flush(t, th, th->fo_count - 1, th->acc);
        th->fo_count--;
    }
    th->depth--;
}

/* pt_cct_give(t, th, d), then pt_cct_exit(t, th), with th's top frame read
 * once: a frame that is not folded ends no folded activation (the frames
 * above a folded one are all folded, so none is open then). */
static inline void pt_cct_give_exit(pt_cct_t *t, pt_cct_thread_t *th, uint64_t d)
{
    const uint32_t depth = th->depth;
    if (!depth) {
        t->nodes[th->root].self += d;
        pt_cct_pend(t, th, th->root, d);
        th->acc += d;
        return;
    }
    const pt_cct_frame_t f = th->stack[depth - 1];
    t->nodes[f.node].self += d;
    pt_cct_pend(t, th, f.node, d);
    th->acc += d;
    if (f.fold == PT_CCT_NONE) {
        th->depth = depth - 1;
        return;
    }
    t->folds[f.fold].self += d;
    pt_cct_fpend(t, th, f.fold, d);
    pt_cct_exit(t, th);
}

/* The thread ended (its frames were closed by exits): nothing is open. */
static inline void pt_cct_thread_close(pt_cct_thread_t *th)
{
    th->depth = 0;
    th->fo_count = 0;
}

/* ---- the walk ------------------------------------------------------------- */

/* incl[n] = self over n's subtree; sub_calls (may be NULL) the same for calls.
 * self/calls NULL: the nodes' own. The arrays hold node_count entries, zeroed
 * by the caller. A <not observed> node's time is in no ancestor's incl. For
 * CPU: pt_cct_sum_up_cpu (cpu NULL: the nodes' own). */
void pt_cct_sum_up_cpu(const pt_cct_t *t, const uint64_t *cpu, uint64_t *incl_cpu);
void pt_cct_sum_up(const pt_cct_t *t, const uint64_t *self, const uint64_t *calls, uint64_t *incl, uint64_t *sub_calls);

typedef struct pt_cct_view {
    const uint64_t *calls;     /* per node; NULL: the nodes' own */
    const uint64_t *self;      /* per node; NULL: the nodes' own */
    const uint64_t *incl;      /* per node (pt_cct_sum_up) */
    const uint64_t *cpu;       /* per node; NULL: the nodes' own */
    const uint64_t *incl_cpu;  /* per node (pt_cct_sum_up of cpu); NULL: no CPU totals */
    const uint64_t *sub_calls; /* per node; given, a node whose incl and sub_calls are 0 is left out
                                  with its subtree; NULL: none is */
} pt_cct_view_t;

typedef struct pt_cct_sums {  /* a function row of the view, per dense symbol */
    uint64_t calls, prim, self, total;
    uint64_t self_cpu, total_cpu;
    uint64_t nodes;            /* nodes of the symbol visited */
} pt_cct_sums_t;

/* Called entering (leaving = 0, outermost: no node of its symbol is on its
 * path above it) and leaving (leaving = 1) each node visited. A nonzero
 * return stops the walk and is returned. */
typedef int (*pt_cct_visit_fn)(void *ctx, uint32_t node, int leaving, int outermost);

/* Depth-first over the subtrees of roots[0..nroots) in turn (the roots not
 * visited; roots inside them are passed through, [other] nodes left out: their
 * functions are in the fold records). Adds each visited node to sums[its
 * symbol] (may be NULL; sym_count entries): calls and self always, prim and
 * total (its incl) when outermost. 0, -ENOMEM or what visit returned. */
int pt_cct_walk(const pt_cct_t *t, const uint32_t *roots, size_t nroots, const pt_cct_view_t *v, pt_cct_sums_t *sums,
                pt_cct_visit_fn visit, void *ctx);

/* Add every fold record's calls, primitive calls, self and total to sums (the
 * whole run, once every thread is closed). */
void pt_cct_fold_sums(const pt_cct_t *t, pt_cct_sums_t *sums);

#endif /* PT_VIEWER_CCT_H */
