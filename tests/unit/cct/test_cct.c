/*
 * pt_cct (viewer/core/cct.h): the calling-context tree every reader keeps. A
 * small reader here feeds it from the walk (as pt_agg and the exports do) and
 * the tests check its rules: self time, unknown symbols, primitive calls and
 * total time of outermost activations, the tree budget with [other] nodes and
 * fold records that keep the function rows exact, and children merged by a key.
 */
#include "viewer/core/cct.h"

#include <stdlib.h>
#include <string.h>

#include "../check.h"

/* ---- a reader: one root per thread, the walk's enter/exit into the tree ---- */

typedef struct reader {
    pt_cct_t *cct;
    pt_walk_t *walk;
    pt_cct_thread_t th[4];
    uint32_t flushed; /* fold_flushed calls */
    uint64_t flushed_ticks;
} reader_t;

static pt_cct_thread_t *cur(reader_t *r, pt_walk_thread_t *wt) { return &r->th[wt->index]; }

static int on_thread(void *ctx, pt_walk_thread_t *wt)
{
    reader_t *r = ctx;
    REQUIRE(wt->index < 4);
    uint32_t root = pt_cct_root(r->cct, PT_CCT_NONE, wt->index);
    REQUIRE(root != PT_CCT_NONE);
    pt_cct_thread_init(cur(r, wt), root, wt->index);
    return 0;
}

static int on_enter(void *ctx, pt_walk_thread_t *wt, uint32_t id, uint64_t ticks, unsigned flags)
{
    reader_t *r = ctx;
    pt_cct_account(r->cct, cur(r, wt), ticks);
    return pt_cct_enter(r->cct, cur(r, wt), wt->process, id, !(flags & PT_WALK_CONTINUED), r->walk, wt, NULL);
}

static int on_leave(void *ctx, pt_walk_thread_t *wt, uint32_t id, uint64_t ticks, unsigned flags)
{
    (void)id;
    (void)flags;
    reader_t *r = ctx;
    pt_cct_account(r->cct, cur(r, wt), ticks);
    pt_cct_exit(r->cct, cur(r, wt));
    return 0;
}

static int on_instant(void *ctx, pt_walk_thread_t *wt, uint32_t id, uint64_t ticks, unsigned flags)
{
    (void)id;
    (void)flags;
    reader_t *r = ctx;
    pt_cct_account(r->cct, cur(r, wt), ticks);
    return 0;
}

static int on_gap(void *ctx, pt_walk_thread_t *wt, uint64_t ticks, uint64_t lost)
{
    (void)lost;
    reader_t *r = ctx;
    pt_cct_account(r->cct, cur(r, wt), ticks);
    return 0;
}

static const pt_walk_ops_t ops = {
    .thread_new = on_thread, .enter = on_enter, .exit = on_leave, .instant = on_instant, .gap = on_gap};

static void flushed(void *ctx, pt_cct_thread_t *th, uint32_t fold, uint64_t ticks, uint64_t cpu)
{
    (void)th;
    (void)cpu;
    (void)fold;
    reader_t *r = ctx;
    r->flushed++;
    r->flushed_ticks += ticks;
}

static void reader_init(reader_t *r, uint64_t budget, uint32_t (*key_of)(void *, uint32_t, uint32_t))
{
    memset(r, 0, sizeof *r);
    pt_cct_config_t cfg = {.budget = budget, .key_of = key_of, .fold_flushed = flushed, .ctx = r};
    REQUIRE(pt_cct_create(&cfg, &r->cct) == 0);
    REQUIRE(pt_walk_create(&ops, r, &r->walk) == 0);
}

static void reader_done(reader_t *r)
{
    for (int i = 0; i < 4; i++)
        pt_cct_thread_free(&r->th[i]);
    pt_walk_destroy(r->walk);
    pt_cct_destroy(r->cct);
}

static pt_event_t E(uint64_t t, uint8_t kind, uint32_t id) { return (pt_event_t){.ticks = t, .id = id, .kind = kind}; }

/* Function rows of the whole tree (every root), fold records included. */
static pt_cct_sums_t *rows(reader_t *r)
{
    const pt_cct_t *t = r->cct;
    uint64_t *incl = calloc(t->node_count, sizeof *incl);
    pt_cct_sums_t *sums = calloc(t->sym_count + 1, sizeof *sums);
    uint32_t roots[4];
    size_t nroots = 0;
    for (uint32_t i = 0; i < t->node_count; i++)
        if (t->nodes[i].parent == PT_CCT_NONE)
            roots[nroots++] = i;
    REQUIRE(incl && sums);
    pt_cct_sum_up(t, NULL, NULL, incl, NULL);
    pt_cct_view_t v = {.incl = incl};
    REQUIRE(pt_cct_walk(t, roots, nroots, &v, sums, NULL, NULL) == 0);
    pt_cct_fold_sums(t, sums);
    free(incl);
    return sums;
}

static uint32_t sym_of(reader_t *r, uint32_t id) { return pt_cct_sym(r->cct, 0, id); }

enum { MAIN = 1, F = 2, G = 3 };

/* The ticks between two events go to the frame on top (the root when none is
 * open); a tick that goes back gives nothing and the clock stays where it was. */
static void test_self_time(void)
{
    reader_t r;
    reader_init(&r, 0, NULL);
    pt_event_t ev[] = {E(10, PT_EV_CALL, MAIN), E(12, PT_EV_CALL, F), E(17, PT_EV_RETURN, F),
                       E(15, PT_EV_CALL, G), /* back in time: nothing */
                       E(20, PT_EV_RETURN, G), E(26, PT_EV_RETURN, MAIN), E(30, PT_EV_MARK, MAIN)};
    REQUIRE(pt_walk_events(r.walk, 1, ev, sizeof ev / sizeof ev[0]) == 0);
    const pt_cct_t *t = r.cct;
    pt_cct_sums_t *s = rows(&r);
    CHECK_EQ(s[sym_of(&r, MAIN)].self, 2 + 0 + 6); /* 10-12, 17-17 (15 is behind), 20-26 */
    CHECK_EQ(s[sym_of(&r, F)].self, 5);
    CHECK_EQ(s[sym_of(&r, G)].self, 3);             /* 17 (the clock held) to 20 */
    CHECK_EQ(t->nodes[r.th[0].root].self, 4);       /* 26-30: nothing open */
    CHECK_EQ(r.th[0].acc, 20);
    CHECK_EQ(r.th[0].last, 30);
    free(s);
    reader_done(&r);
}

/* An id never announced is "<unknown #id>" with file "" (the rule every view
 * shows); announced later it takes the Symbol's strings, and the strings handed
 * out before stay valid. Ids are per process. */
static void test_symbols(void)
{
    pt_cct_t *t;
    REQUIRE(pt_cct_create(NULL, &t) == 0);
    uint32_t s = pt_cct_sym(t, 0, 7);
    REQUIRE(s != PT_CCT_NONE);
    const pt_cct_symbol_t *sym = pt_cct_sym_at(t, s);
    CHECK(!strcmp(sym->name, "<unknown #7>"));
    CHECK(!strcmp(sym->file, ""));
    CHECK(sym->known == 0 && sym->profile == NULL);
    const char *old = sym->name;
    pt_fb_symbol_t in = {.id = 7, .kind = PT_SYM_PY_FUNCTION, .line = 3, .name = {"f", 1}, .file = {"a.py", 4},
                         .profile_name = {"f", 1}};
    CHECK_EQ(pt_cct_sym_set(t, 0, &in), s);
    sym = pt_cct_sym_at(t, s);
    CHECK(!strcmp(sym->name, "f") && !strcmp(sym->file, "a.py") && sym->line == 3 && sym->known == 1);
    CHECK(sym->profile && !strcmp(sym->profile, "f"));
    CHECK(!strcmp(old, "<unknown #7>")); /* still readable */
    uint32_t s2 = pt_cct_sym(t, 1, 7);   /* the same id in another process */
    CHECK(s2 != s);
    CHECK(!strcmp(pt_cct_sym_at(t, s2)->name, "<unknown #7>"));
    CHECK_EQ(t->sym_count, 2);
    pt_cct_destroy(t);
}

/* Recursion: main -> f -> g -> f -> g. f and g have 2 calls, 1 primitive, and
 * their total time is the outermost activation's only. */
static void test_primitive_and_total(void)
{
    reader_t r;
    reader_init(&r, 0, NULL);
    pt_event_t ev[] = {E(0, PT_EV_CALL, MAIN), E(1, PT_EV_CALL, F),    E(2, PT_EV_CALL, G),
                       E(3, PT_EV_CALL, F),    E(4, PT_EV_CALL, G),    E(8, PT_EV_RETURN, G),
                       E(9, PT_EV_RETURN, F),  E(10, PT_EV_RETURN, G), E(11, PT_EV_RETURN, F),
                       E(20, PT_EV_RETURN, MAIN)};
    REQUIRE(pt_walk_events(r.walk, 1, ev, sizeof ev / sizeof ev[0]) == 0);
    pt_cct_sums_t *s = rows(&r);
    pt_cct_sums_t f = s[sym_of(&r, F)], g = s[sym_of(&r, G)], m = s[sym_of(&r, MAIN)];
    CHECK_EQ(f.calls, 2);
    CHECK_EQ(f.prim, 1);
    CHECK_EQ(f.self, 1 + 1 + 1 + 1); /* 1-2, 3-4, 8-9, 10-11 */
    CHECK_EQ(f.total, 10);           /* 1 to 11: the inner one is inside it */
    CHECK_EQ(g.calls, 2);
    CHECK_EQ(g.prim, 1);
    CHECK_EQ(g.total, 8);            /* 2 to 10 */
    CHECK_EQ(m.total, 20);
    CHECK_EQ(m.prim, 1);
    free(s);
    reader_done(&r);
}

/* Past the budget (the smallest: 64 nodes), new paths go to the parent's
 * [other] node, below it every call is that node, and the function rows (walk
 * plus fold records) are those of an unbounded tree, to the tick. */
static void test_budget(void)
{
    static pt_event_t ev[4096];
    size_t n = 0;
    uint64_t t = 0;
    ev[n++] = E(t++, PT_EV_CALL, MAIN);
    for (uint32_t i = 0; i < 200; i++) { /* 200 paths main -> (100 + i) -> f -> f (recursion below a fold) */
        ev[n++] = E(t++, PT_EV_CALL, 100 + i);
        ev[n++] = E(t += 2, PT_EV_CALL, F);
        ev[n++] = E(t += 3, PT_EV_CALL, F);
        ev[n++] = E(t += 5, PT_EV_RETURN, F);
        ev[n++] = E(t += 7, PT_EV_RETURN, F);
        ev[n++] = E(t += 11, PT_EV_RETURN, 100 + i);
    }
    ev[n++] = E(t + 1, PT_EV_RETURN, MAIN);
    reader_t big, small;
    reader_init(&big, 0, NULL);
    reader_init(&small, 64ull * PT_CCT_NODE_BYTES * 2, NULL);
    REQUIRE(pt_walk_events(big.walk, 1, ev, n) == 0);
    REQUIRE(pt_walk_events(small.walk, 1, ev, n) == 0);
    CHECK_EQ(big.cct->other_count, 0);
    CHECK_EQ(big.cct->folded_calls, 0);
    CHECK_EQ(small.cct->node_count - small.cct->other_count, 64);
    uint64_t other_calls = 0, others = 0;
    for (uint32_t i = 0; i < small.cct->node_count; i++)
        if (small.cct->nodes[i].sym == PT_CCT_OTHER) {
            others++;
            other_calls += small.cct->nodes[i].calls;
            CHECK(small.cct->nodes[i].first_child == PT_CCT_NONE); /* below [other]: [other] */
        }
    CHECK_EQ(others, small.cct->other_count);
    CHECK(others >= 1 && others <= 3);
    CHECK_EQ(small.cct->folded_calls, other_calls);
    CHECK(other_calls > 400); /* most of the 200 paths' 600 calls */
    CHECK(small.flushed > 0);
    pt_cct_sums_t *a = rows(&big), *b = rows(&small);
    for (uint32_t i = 0; i < big.cct->sym_count; i++) {
        uint32_t id = big.cct->syms[i].id, j = sym_of(&small, id);
        CHECKF(a[i].calls == b[j].calls && a[i].prim == b[j].prim && a[i].self == b[j].self &&
                   a[i].total == b[j].total,
               "id %u: calls %llu/%llu prim %llu/%llu self %llu/%llu total %llu/%llu", id,
               (unsigned long long)a[i].calls, (unsigned long long)b[j].calls, (unsigned long long)a[i].prim,
               (unsigned long long)b[j].prim, (unsigned long long)a[i].self, (unsigned long long)b[j].self,
               (unsigned long long)a[i].total, (unsigned long long)b[j].total);
    }
    CHECK_EQ(b[sym_of(&small, F)].prim, 200);
    free(a);
    free(b);
    reader_done(&big);
    reader_done(&small);
}

/* key_of merges children: ids 10 and 11 with one key share a node (collapsed's
 * labels), whose symbol is the first one seen. */
static uint32_t same_key(void *ctx, uint32_t proc, uint32_t id)
{
    (void)ctx;
    (void)proc;
    return id >= 10 ? 10 : id;
}

static void test_key_of(void)
{
    reader_t r;
    reader_init(&r, 0, same_key);
    pt_event_t ev[] = {E(0, PT_EV_CALL, MAIN), E(1, PT_EV_CALL, 11), E(2, PT_EV_RETURN, 11),
                       E(3, PT_EV_CALL, 10),   E(5, PT_EV_RETURN, 10), E(6, PT_EV_RETURN, MAIN)};
    REQUIRE(pt_walk_events(r.walk, 1, ev, sizeof ev / sizeof ev[0]) == 0);
    CHECK_EQ(r.cct->node_count, 3); /* root, main, one child */
    CHECK_EQ(r.cct->nodes[2].calls, 2);
    CHECK_EQ(r.cct->nodes[2].self, 3);
    CHECK_EQ(r.cct->syms[r.cct->nodes[2].sym].id, 11);
    reader_done(&r);
}

/* The walk: visit sees entering (with outermost) and leaving, in order, and
 * passes through roots inside the subtree; a node with no time and no calls is
 * left out whole when sub_calls is given. */
typedef struct trace {
    char buf[256];
    const pt_cct_t *t;
} trace_t;

static int visit(void *ctx, uint32_t node, int leaving, int outermost)
{
    trace_t *tr = ctx;
    size_t len = strlen(tr->buf);
    snprintf(tr->buf + len, sizeof tr->buf - len, "%s%u%s ", leaving ? "-" : "+", tr->t->syms[tr->t->nodes[node].sym].id,
             outermost ? "*" : "");
    return 0;
}

static void test_walk_order(void)
{
    reader_t r;
    reader_init(&r, 0, NULL);
    pt_cct_t *t = r.cct;
    pt_walk_t *w = r.walk;
    pt_walk_thread_t *wt = pt_walk_thread(w, 1, &(int){0}); /* its root is node 0 */
    REQUIRE(wt);
    uint32_t top = pt_cct_root(t, PT_CCT_NONE, 0), inner = pt_cct_root(t, top, 1);
    pt_cct_thread_t th = {0};
    pt_cct_thread_init(&th, inner, 0);
    /* f -> f (a node of f under f), then g, which has nothing */
    REQUIRE(pt_cct_enter(t, &th, 0, F, 1, w, wt, NULL) == 0);
    REQUIRE(pt_cct_enter(t, &th, 0, F, 1, w, wt, NULL) == 0);
    pt_cct_exit(t, &th);
    pt_cct_exit(t, &th);
    REQUIRE(pt_cct_enter(t, &th, 0, G, 0, w, wt, NULL) == 0);
    pt_cct_exit(t, &th);
    uint64_t incl[8] = {0}, sub[8] = {0};
    REQUIRE(t->node_count <= 8);
    pt_cct_sum_up(t, NULL, NULL, incl, sub);
    trace_t tr = {.t = t};
    pt_cct_view_t all = {.incl = incl}, active = {.incl = incl, .sub_calls = sub};
    REQUIRE(pt_cct_walk(t, &top, 1, &all, NULL, visit, &tr) == 0);
    CHECK(!strcmp(tr.buf, "+3* -3 +2* +2 -2 -2 "));
    tr.buf[0] = 0;
    REQUIRE(pt_cct_walk(t, &top, 1, &active, NULL, visit, &tr) == 0);
    CHECK(!strcmp(tr.buf, "+2* +2 -2 -2 "));
    pt_cct_thread_free(&th);
    reader_done(&r);
}

/* CPU time with a node two threads share (an export merges threads by path):
 * each thread's ticks get its own rate. a waits (rate 0) and b computes (rate
 * 1), each 100 ticks in the same node: the node gets b's 100, whichever thread
 * gave ticks first; a thread's end forgets its pending ticks. */
static void test_cpu_shared_node(void)
{
    reader_t r;
    reader_init(&r, 0, NULL);
    pt_cct_t *t = r.cct;
    pt_walk_t *w = r.walk;
    pt_walk_thread_t *wt = pt_walk_thread(w, 1, &(int){0});
    REQUIRE(wt);
    uint32_t root = pt_cct_root(t, PT_CCT_NONE, 0);
    pt_cct_thread_t a = {0}, b = {0};
    pt_cct_thread_init(&a, root, 0);
    pt_cct_thread_init(&b, root, 0);
    const uint64_t tps = 1000000000u; /* a tick is a ns */
    pt_cct_account(t, &a, 0);
    pt_cct_account(t, &b, 0);
    pt_cct_cpu(t, &a, 0, 1000, tps, NULL);
    pt_cct_cpu(t, &b, 0, 5000, tps, NULL);
    pt_cct_entered_t ea, eb;
    REQUIRE(pt_cct_enter(t, &a, 0, F, 1, w, wt, &ea) == 0);
    REQUIRE(pt_cct_enter(t, &b, 0, F, 1, w, wt, &eb) == 0);
    CHECK(ea.node == eb.node);
    pt_cct_account(t, &a, 100);
    pt_cct_account(t, &b, 100);
    double ra, rb;
    pt_cct_cpu(t, &a, 100, 1000, tps, &ra);       /* a: no CPU in 100 ns */
    pt_cct_cpu(t, &b, 100, 5000 + 100, tps, &rb); /* b: all of them */
    CHECK(ra == 0.0 && rb == 1.0);
    CHECK(t->nodes[ea.node].self == 200);
    CHECK(PT_CCT_CPU(t->nodes[ea.node].cpu) == 100);
    CHECK(a.acc_cpu == 0 && b.acc_cpu == 100);
    /* the other order: b gives first, a's record first */
    pt_cct_account(t, &b, 150);
    pt_cct_account(t, &a, 150);
    pt_cct_cpu(t, &a, 150, 1000, tps, NULL);
    pt_cct_cpu(t, &b, 150, 5100 + 50, tps, NULL);
    CHECK(PT_CCT_CPU(t->nodes[ea.node].cpu) == 150);
    /* a thread that ends: its pending ticks get nothing, b's still do */
    pt_cct_account(t, &a, 200);
    pt_cct_account(t, &b, 200);
    pt_cct_cpu_forget(t, &a);
    pt_cct_cpu(t, &b, 200, 5150 + 50, tps, NULL);
    CHECK(PT_CCT_CPU(t->nodes[ea.node].cpu) == 200);
    CHECK(a.ndirty == 0 && b.ndirty == 0);
    pt_cct_thread_free(&a);
    pt_cct_thread_free(&b);
    reader_done(&r);
}

int main(void)
{
    test_self_time();
    test_symbols();
    test_primitive_and_total();
    test_budget();
    test_key_of();
    test_walk_order();
    test_cpu_shared_node();
    if (!failures)
        printf("cct: all tests passed\n");
    return failures != 0;
}
