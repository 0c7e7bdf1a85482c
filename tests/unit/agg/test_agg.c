/*
 * pt_agg unit tests: hand-built event streams with synthetic ticks
 * (ticks_per_second = 1e9, so one tick = one ns) and exact expectations.
 * Call counts follow what cProfile/pstats reports for the same program.
 */
#include "../check.h"
#include "viewer/core/agg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- stream building ----------------------------------------------------- */

typedef struct stream {
    pt_agg_t *agg;
    uint64_t thread;
    uint64_t now;
    pt_event_t ev[4096];
    size_t n;
} stream_t;

static void flush(stream_t *s)
{
    if (s->n)
        CHECK_EQ(pt_agg_feed_events(s->agg, s->thread, s->ev, s->n), 0);
    s->n = 0;
}

static void ev(stream_t *s, uint8_t kind, uint32_t id, uint64_t advance)
{
    s->now += advance;
    if (s->n == sizeof s->ev / sizeof s->ev[0])
        flush(s);
    s->ev[s->n++] = (pt_event_t){.ticks = s->now, .id = id, .kind = kind};
}

static void symbol(pt_agg_t *agg, uint32_t id, const char *name)
{
    pt_fb_msg_t m = {.type = PT_MSG_SYMBOL};
    m.u.symbol = (pt_fb_symbol_t){.id = id, .kind = PT_SYM_PY_FUNCTION, .name = {name, (uint32_t)strlen(name)},
                                  .file = {"t.py", 4}, .line = id * 10};
    CHECK_EQ(pt_agg_feed_msg(agg, &m), 0);
}

static pt_agg_t *new_agg(void)
{
    pt_agg_t *agg = NULL;
    pt_agg_config_t cfg = {.slice_ns = 100000000ull, .slice_count = 600};
    CHECK_EQ(pt_agg_create(&cfg, &agg), 0);
    pt_fb_msg_t m = {.type = PT_MSG_PROCESS_INFO};
    m.u.process_info.ticks_per_second = 1000000000ull;
    m.u.process_info.pid = 42;
    CHECK_EQ(pt_agg_feed_msg(agg, &m), 0);
    return agg;
}

static const pt_agg_row_t *row(const pt_agg_table_t *t, const char *name)
{
    for (size_t i = 0; i < t->count; i++)
        if (!strcmp(t->rows[i].name, name))
            return &t->rows[i];
    return NULL;
}

static const pt_agg_row_t *get_row(pt_agg_t *agg, pt_agg_table_t *t, uint64_t thread, double window,
                                   const char *name)
{
    pt_agg_query_t q = {.thread = thread, .window_seconds = window};
    pt_agg_table_free(t);
    CHECK_EQ(pt_agg_table(agg, &q, PT_AGG_SORT_SELF, 1, NULL, t), 0);
    const pt_agg_row_t *r = row(t, name);
    if (!r) {
        fprintf(stderr, "row %s missing\n", name);
        failures++;
    }
    static pt_agg_row_t zero;
    return r ? r : &zero;
}

enum { MAIN = 1, F = 2, G = 3, H = 4, FIB = 5, A = 6, B = 7, GEN = 8 };

static void setup_syms(pt_agg_t *agg)
{
    symbol(agg, MAIN, "main");
    symbol(agg, F, "f");
    symbol(agg, G, "g");
    symbol(agg, H, "h");
    symbol(agg, FIB, "fib");
    symbol(agg, A, "a");
    symbol(agg, B, "b");
    symbol(agg, GEN, "gen");
}

/* ---- tests ---------------------------------------------------------------- */

static void fib(stream_t *s, int n)
{
    ev(s, PT_EV_CALL, FIB, 1);
    if (n >= 2) {
        fib(s, n - 1);
        fib(s, n - 2);
    }
    ev(s, PT_EV_RETURN, FIB, 1);
}

/* pstats for fib(5): ncalls "15/1", cumtime = the outermost call only. */
static void test_direct_recursion(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    stream_t s = {.agg = agg, .thread = 1, .now = 1000};
    ev(&s, PT_EV_CALL, MAIN, 0);
    uint64_t start = s.now;
    fib(&s, 5);
    uint64_t fib_total = s.now - start; /* from main's call to fib's outer return */
    ev(&s, PT_EV_RETURN, MAIN, 5);
    flush(&s);
    pt_agg_table_t t = {0};
    const pt_agg_row_t *r = get_row(agg, &t, 0, 0, "fib");
    CHECK_EQ(r->calls, 15);
    CHECK_EQ(r->prim_calls, 1);
    /* fib's outer call starts 1 tick after main's */
    CHECK_EQ(r->total_ns, fib_total - 1);
    CHECK_EQ(r->self_ns, fib_total - 1); /* fib calls nothing else */
    r = get_row(agg, &t, 0, 0, "main");
    CHECK_EQ(r->calls, 1);
    CHECK_EQ(r->total_ns, s.now - 1000);
    CHECK_EQ(r->self_ns, 1 + 5);
    pt_agg_table_free(&t);
    pt_agg_counters_t c;
    pt_agg_counters(agg, &c);
    CHECK_EQ(c.unmatched_closes, 0);
    CHECK_EQ(c.events_seen, 32);
    pt_agg_destroy(agg);
}

static void mutual(stream_t *s, int n, int is_a)
{
    ev(s, PT_EV_CALL, is_a ? A : B, 1);
    if (n > 0)
        mutual(s, n - 1, !is_a);
    ev(s, PT_EV_RETURN, is_a ? A : B, 1);
}

/* a(4) -> b(3) -> a(2) -> b(1) -> a(0): pstats "3/1" for a and "2/1" for b. */
static void test_mutual_recursion(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    stream_t s = {.agg = agg, .thread = 1};
    mutual(&s, 4, 1);
    flush(&s);
    pt_agg_table_t t = {0};
    const pt_agg_row_t *ra = get_row(agg, &t, 0, 0, "a");
    CHECK_EQ(ra->calls, 3);
    CHECK_EQ(ra->prim_calls, 1);
    CHECK_EQ(ra->total_ns, 9); /* ticks 1..10 */
    const pt_agg_row_t *rb = get_row(agg, &t, 0, 0, "b");
    CHECK_EQ(rb->calls, 2);
    CHECK_EQ(rb->prim_calls, 1);
    CHECK_EQ(rb->total_ns, 7); /* ticks 2..9 */
    CHECK_EQ(rb->self_ns, 4);  /* b3: 2..3, 8..9; b1: 4..5, 6..7 */
    pt_agg_table_free(&t);
    pt_agg_destroy(agg);
}

/* main{10} f{30} g{10} main{10}: exact self and inclusive times. */
static void test_self_and_inclusive(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    stream_t s = {.agg = agg, .thread = 1, .now = 500};
    ev(&s, PT_EV_CALL, MAIN, 0);
    ev(&s, PT_EV_CALL, F, 10);
    ev(&s, PT_EV_RETURN, F, 30);
    ev(&s, PT_EV_CALL, G, 0);
    ev(&s, PT_EV_RETURN, G, 10);
    ev(&s, PT_EV_RETURN, MAIN, 10);
    flush(&s);
    pt_agg_table_t t = {0};
    const pt_agg_row_t *r = get_row(agg, &t, 0, 0, "main");
    CHECK_EQ(r->self_ns, 20);
    CHECK_EQ(r->total_ns, 60);
    CHECK(r->total_pct > 99.9 && r->total_pct < 100.1);
    r = get_row(agg, &t, 0, 0, "f");
    CHECK_EQ(r->self_ns, 30);
    CHECK_EQ(r->total_ns, 30);
    CHECK(r->self_pct > 49.9 && r->self_pct < 50.1);
    r = get_row(agg, &t, 0, 0, "g");
    CHECK_EQ(r->self_ns, 10);
    /* sorted by self, descending: f, main, g */
    CHECK(!strcmp(t.rows[0].name, "f") && !strcmp(t.rows[1].name, "main") && !strcmp(t.rows[2].name, "g"));
    /* sort by name ascending and filter */
    pt_agg_table_free(&t);
    CHECK_EQ(pt_agg_table(agg, NULL, PT_AGG_SORT_NAME, 0, NULL, &t), 0);
    CHECK(t.count == 3 && !strcmp(t.rows[0].name, "f") && !strcmp(t.rows[2].name, "main"));
    pt_agg_table_free(&t);
    CHECK_EQ(pt_agg_table(agg, NULL, PT_AGG_SORT_SELF, 1, "AI", &t), 0);
    CHECK(t.count == 1 && !strcmp(t.rows[0].name, "main"));
    pt_agg_table_free(&t);

    /* the tree: root -> main -> {f, g} with inclusive = sum of subtree self */
    pt_agg_tree_t tr;
    CHECK_EQ(pt_agg_tree(agg, NULL, &tr), 0);
    CHECK_EQ(tr.count, 4);
    CHECK_EQ(tr.nodes[0].incl_ns, 60);
    uint32_t m = tr.nodes[0].first_child;
    CHECK_EQ(tr.nodes[m].symbol, MAIN);
    CHECK_EQ(tr.nodes[m].incl_ns, 60);
    CHECK_EQ(tr.nodes[m].self_ns, 20);
    uint32_t c1 = tr.nodes[m].first_child, c2 = tr.nodes[c1].next_sibling;
    CHECK_EQ(tr.nodes[c1].symbol, F); /* children sorted by name */
    CHECK_EQ(tr.nodes[c2].symbol, G);
    CHECK_EQ(tr.nodes[c2].next_sibling, PT_AGG_NONE);
    CHECK_EQ(tr.nodes[c1].depth, 2);
    pt_agg_tree_free(&tr);
    pt_agg_destroy(agg);
}

/* A generator resumed three times: three calls (as cProfile counts), time
 * only while it runs. */
static void test_yield_resume(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    stream_t s = {.agg = agg, .thread = 1};
    ev(&s, PT_EV_CALL, MAIN, 0);
    ev(&s, PT_EV_CALL, GEN, 1);
    ev(&s, PT_EV_YIELD, GEN, 5);
    ev(&s, PT_EV_RESUME, GEN, 100);
    ev(&s, PT_EV_YIELD, GEN, 5);
    ev(&s, PT_EV_RESUME, GEN, 100);
    ev(&s, PT_EV_RETURN, GEN, 5);
    ev(&s, PT_EV_RETURN, MAIN, 1);
    flush(&s);
    pt_agg_table_t t = {0};
    const pt_agg_row_t *r = get_row(agg, &t, 0, 0, "gen");
    CHECK_EQ(r->calls, 3);
    CHECK_EQ(r->prim_calls, 3);
    CHECK_EQ(r->self_ns, 15);
    CHECK_EQ(r->total_ns, 15);
    r = get_row(agg, &t, 0, 0, "main");
    CHECK_EQ(r->self_ns, 202);
    pt_agg_table_free(&t);
    pt_agg_destroy(agg);
}

static void lost(stream_t *s, uint64_t count, uint64_t advance)
{
    ev(s, PT_EV_LOST, (uint32_t)count, advance);
    s->ev[s->n - 1].aux = (uint16_t)(count >> 32);
}

static void frame(stream_t *s, uint32_t id, uint16_t depth, uint64_t advance)
{
    ev(s, PT_EV_FRAME, id, advance);
    s->ev[s->n - 1].aux = depth;
}

/* main -> f -> g, records lost, Frame records main, f, h: the common prefix
 * (main, f) stays open with its call counts, g is closed at the Lost tick, h
 * opens (one call, reported); then h and f return normally. */
static void test_lost_and_frames(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    stream_t s = {.agg = agg, .thread = 1};
    ev(&s, PT_EV_CALL, MAIN, 0);
    ev(&s, PT_EV_CALL, F, 10);
    ev(&s, PT_EV_CALL, G, 10);
    lost(&s, 0x100000005ull, 50); /* 48-bit count across id and aux */
    frame(&s, MAIN, 0, 1);
    frame(&s, F, 1, 0);
    frame(&s, H, 2, 0);
    ev(&s, PT_EV_RETURN, H, 20);
    ev(&s, PT_EV_RETURN, F, 5);
    ev(&s, PT_EV_RETURN, MAIN, 5);
    flush(&s);
    pt_agg_counters_t c;
    pt_agg_counters(agg, &c);
    CHECK_EQ(c.dropped_lost_records, 0x100000005ull);
    CHECK_EQ(c.dropped, 0x100000005ull);
    CHECK_EQ(c.unmatched_closes, 0);
    pt_agg_table_t t = {0};
    const pt_agg_row_t *r = get_row(agg, &t, 0, 0, "g");
    CHECK_EQ(r->calls, 1);
    CHECK_EQ(r->self_ns, 0); /* the gap is nobody's: not the frame on top before it (cct.h) */
    CHECK_EQ(t.unobserved_ns, 50); /* ... but the thread's <not observed> time, with its lost events */
    CHECK_EQ(t.unobserved_lost, 0x100000005ull);
    CHECK_EQ(t.span_ns, 101 - 50); /* percentages are of observed time */
    r = get_row(agg, &t, 0, 0, "f");
    CHECK_EQ(r->calls, 1); /* kept open across the gap */
    CHECK_EQ(r->self_ns, 10 + 1 + 5);
    CHECK_EQ(r->total_ns, 10 + 1 + 20 + 5);
    r = get_row(agg, &t, 0, 0, "h");
    CHECK_EQ(r->calls, 1); /* opened by a Frame record: one call per activation seen (walk.h) */
    CHECK_EQ(r->self_ns, 20);
    r = get_row(agg, &t, 0, 0, "main");
    CHECK_EQ(r->calls, 1);
    CHECK_EQ(r->total_ns, 101 - 50);
    pt_agg_table_free(&t);
    pt_agg_tree_t tr1 = {0};
    CHECK_EQ(pt_agg_tree(agg, &(pt_agg_query_t){.thread = 1}, &tr1), 0);
    CHECK_EQ(tr1.nodes[0].incl_ns, 101 - 50); /* the tree holds observed time only */
    pt_agg_tree_free(&tr1);

    /* Lost with a whole different stack: everything old is closed, the new
     * stack opens; a Frame run shorter than the stack closes the rest. */
    s.thread = 2;
    s.now = 1000;
    ev(&s, PT_EV_CALL, A, 0);
    ev(&s, PT_EV_CALL, B, 10);
    lost(&s, 3, 10);
    frame(&s, MAIN, 0, 0);
    ev(&s, PT_EV_CALL, G, 10);
    ev(&s, PT_EV_RETURN, G, 10);
    ev(&s, PT_EV_RETURN, MAIN, 10);
    ev(&s, PT_EV_CALL, A, 0);
    lost(&s, 1, 10);
    /* no Frame records: the stack is empty now */
    ev(&s, PT_EV_CALL, H, 10);
    ev(&s, PT_EV_RETURN, H, 10);
    flush(&s);
    pt_agg_counters(agg, &c);
    CHECK_EQ(c.unmatched_closes, 0);
    pt_agg_tree_t tr;
    pt_agg_query_t q = {.thread = 2};
    CHECK_EQ(pt_agg_tree(agg, &q, &tr), 0);
    /* root -> {a -> b, main -> g, h} (a appears once: the second call merges) */
    uint32_t n = tr.nodes[0].first_child;
    CHECK_EQ(tr.nodes[n].symbol, A);
    CHECK_EQ(tr.nodes[n].calls, 2);
    CHECK_EQ(tr.nodes[tr.nodes[n].first_child].symbol, B);
    n = tr.nodes[n].next_sibling;
    CHECK_EQ(tr.nodes[n].symbol, H);
    CHECK_EQ(tr.nodes[n].depth, 1);
    n = tr.nodes[n].next_sibling;
    CHECK_EQ(tr.nodes[n].symbol, MAIN);
    CHECK_EQ(tr.nodes[n].calls, 1); /* reported by a Frame record: counts once */
    CHECK_EQ(tr.nodes[n].incl_ns, 30);
    pt_agg_tree_free(&tr);
    pt_agg_destroy(agg);
}

/* Frame records at thread start open the stack that was already running. */
static void test_frames_at_start_and_open_time(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    pt_fb_msg_t m = {.type = PT_MSG_THREAD_START};
    m.u.thread_start = (pt_fb_thread_start_t){.thread = 1, .os_tid = 99, .name = {"MainThread", 10}, .ticks = 100};
    CHECK_EQ(pt_agg_feed_msg(agg, &m), 0);
    stream_t s = {.agg = agg, .thread = 1, .now = 100};
    frame(&s, MAIN, 0, 0);
    frame(&s, F, 1, 0);
    ev(&s, PT_EV_CALL, G, 10);
    flush(&s);
    /* another thread's event moves the latest tick: open frames count to it */
    stream_t s2 = {.agg = agg, .thread = 2, .now = 200};
    ev(&s2, PT_EV_CALL, H, 0);
    flush(&s2);
    pt_agg_table_t t = {0};
    const pt_agg_row_t *r = get_row(agg, &t, 1, 0, "g");
    CHECK_EQ(r->calls, 1);
    CHECK_EQ(r->self_ns, 90);
    r = get_row(agg, &t, 1, 0, "main");
    CHECK_EQ(r->calls, 1); /* already running at start: counts once, as in every export */
    CHECK_EQ(r->total_ns, 100);
    CHECK(row(&t, "h") == NULL); /* thread 1 only */
    pt_agg_table_free(&t);
    CHECK_EQ(pt_agg_thread_count(agg), 2);
    pt_agg_thread_info_t ti;
    CHECK_EQ(pt_agg_thread_at(agg, 0, &ti), 0);
    CHECK(ti.thread == 1 && ti.os_tid == 99 && !strcmp(ti.name, "MainThread") && ti.depth == 3);

    /* ThreadEnd closes every frame at its tick */
    m.type = PT_MSG_THREAD_END;
    m.u.thread_end = (pt_fb_thread_end_t){.thread = 1, .ticks = 150, .events_dropped = 7};
    CHECK_EQ(pt_agg_feed_msg(agg, &m), 0);
    r = get_row(agg, &t, 1, 0, "g");
    CHECK_EQ(r->self_ns, 40);
    pt_agg_table_free(&t);
    pt_agg_counters_t c;
    pt_agg_counters(agg, &c);
    CHECK_EQ(c.threads_seen, 2);
    CHECK_EQ(c.threads_active, 1);
    CHECK_EQ(c.dropped_lost_counts, 7);
    CHECK_EQ(c.dropped, 7);
    pt_agg_destroy(agg);
}

/* One EventChunk message of thread `thread` whose first event is number
 * first_event of the thread's stream. */
static void chunk(pt_agg_t *agg, uint64_t thread, uint64_t first_event, const pt_event_t *e, uint32_t n)
{
    pt_fb_msg_t m = {.type = PT_MSG_EVENT_CHUNK};
    m.u.event_chunk = (pt_fb_event_chunk_t){.thread = thread, .first_event = first_event, .events = e, .count = n};
    CHECK_EQ(pt_agg_feed_msg(agg, &m), 0);
}

/* pt_agg_stack: the walk's open frames per thread, outermost first, with
 * kinds and starts (ns since the first tick); whole (known) when the thread's
 * stream was read from its first event or a Frame run reported it. */
static void test_stacks(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    pt_event_t a[] = {{.ticks = 1000, .id = MAIN, .kind = PT_EV_CALL},
                      {.ticks = 1100, .id = 900, .kind = PT_EV_SPAN_BEGIN},
                      {.ticks = 1200, .id = F, .kind = PT_EV_CALL},
                      {.ticks = 1300, .id = G, .kind = PT_EV_CCALL}};
    chunk(agg, 1, 0, a, 4);
    /* thread 2 met mid-stream: a return of a call not seen, then a call */
    pt_event_t b[] = {{.ticks = 1400, .id = H, .kind = PT_EV_RETURN}, {.ticks = 1500, .id = F, .kind = PT_EV_CALL}};
    chunk(agg, 2, 57, b, 2);
    pt_agg_frame_t f[8];
    uint32_t depth = 99;
    int known = -1;
    CHECK_EQ(pt_agg_stack(agg, 0, f, 8, &depth, &known), 0);
    CHECK_EQ(depth, 4);
    CHECK_EQ(known, 1);
    CHECK(f[0].symbol == MAIN && f[0].kind == PT_WALK_FRAME_PYTHON && f[0].start_ns == 0 && !f[0].reported);
    CHECK(f[1].symbol == 900 && f[1].kind == PT_WALK_FRAME_SPAN && f[1].start_ns == 100);
    CHECK(f[2].symbol == F && f[2].kind == PT_WALK_FRAME_PYTHON && f[2].start_ns == 200);
    CHECK(f[3].symbol == G && f[3].kind == PT_WALK_FRAME_C && f[3].start_ns == 300);
    CHECK_EQ(pt_agg_stack(agg, 1, f, 8, &depth, &known), 0);
    CHECK_EQ(depth, 1);
    CHECK_EQ(known, 0);
    CHECK(f[0].symbol == F && f[0].start_ns == 500);
    /* its stack reported: whole now */
    pt_event_t c[] = {{.ticks = 1600, .id = MAIN, .aux = 0, .kind = PT_EV_FRAME},
                      {.ticks = 1600, .id = H, .aux = 1, .kind = PT_EV_FRAME},
                      {.ticks = 1600, .id = F, .aux = 2, .kind = PT_EV_FRAME},
                      {.ticks = 1700, .id = G, .kind = PT_EV_CCALL}};
    chunk(agg, 2, 59, c, 4);
    CHECK_EQ(pt_agg_stack(agg, 1, f, 2, &depth, &known), 0);
    CHECK_EQ(depth, 4); /* only cap = 2 written */
    CHECK_EQ(known, 1);
    CHECK(f[0].symbol == MAIN && f[0].reported && f[0].start_ns == 600);
    CHECK(f[1].symbol == H && f[1].reported);
    pt_agg_thread_info_t ti;
    CHECK_EQ(pt_agg_thread_at(agg, 1, &ti), 0);
    CHECK_EQ(ti.depth, 4); /* the aggregation's stack is the same walk's */
    /* a ThreadEnd: nothing open */
    pt_fb_msg_t m = {.type = PT_MSG_THREAD_END};
    m.u.thread_end = (pt_fb_thread_end_t){.thread = 1, .ticks = 2000};
    CHECK_EQ(pt_agg_feed_msg(agg, &m), 0);
    CHECK_EQ(pt_agg_stack(agg, 0, f, 8, &depth, &known), 0);
    CHECK(depth == 0 && known == 1);
    CHECK_EQ(pt_agg_stack(agg, 2, f, 8, &depth, &known), -EINVAL);
    pt_agg_destroy(agg);
}

/* f runs during the first second, g during the next two: a 1 s window sees
 * only g, the whole run sees both. */
static void test_window(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    stream_t s = {.agg = agg, .thread = 1};
    const uint64_t ms = 1000000;
    ev(&s, PT_EV_CALL, MAIN, 0);
    for (int i = 0; i < 100; i++) {
        ev(&s, PT_EV_CALL, F, 0);
        ev(&s, PT_EV_RETURN, F, 10 * ms);
    }
    for (int i = 0; i < 200; i++) {
        ev(&s, PT_EV_CALL, G, 0);
        ev(&s, PT_EV_RETURN, G, 10 * ms);
    }
    ev(&s, PT_EV_MARK, MAIN, 5 * ms); /* latest = 3.005 s: slice 30 is partial */
    flush(&s);
    pt_agg_table_t t = {0};
    const pt_agg_row_t *r = get_row(agg, &t, 0, 0, "f");
    CHECK_EQ(r->calls, 100);
    CHECK_EQ(r->self_ns, 1000 * ms);
    r = get_row(agg, &t, 0, 0, "g");
    CHECK_EQ(r->calls, 200);
    CHECK_EQ(r->self_ns, 2000 * ms);
    /* 1 s = 10 slices: 21..30, i.e. from 2.1 s to 3.005 s */
    pt_agg_table_free(&t);
    pt_agg_query_t q = {.window_seconds = 1.0};
    CHECK_EQ(pt_agg_table(agg, &q, PT_AGG_SORT_SELF, 1, NULL, &t), 0);
    CHECK(row(&t, "f") == NULL);
    r = row(&t, "g");
    CHECK(r != NULL);
    if (r) {
        CHECK_EQ(r->calls, 90);
        CHECK_EQ(r->self_ns, 900 * ms);
    }
    CHECK_EQ(t.span_ns, 905 * ms);
    r = row(&t, "main");
    CHECK(r && r->self_ns == 5 * ms && r->total_ns == 905 * ms && r->prim_calls == 0);
    /* 2.5 s window: slices 6..30, f from 0.6 s */
    r = get_row(agg, &t, 0, 2.5, "f");
    CHECK_EQ(r->calls, 40);
    CHECK_EQ(r->self_ns, 400 * ms);
    pt_agg_table_free(&t);
    /* the tree of the window */
    pt_agg_tree_t tr;
    CHECK_EQ(pt_agg_tree(agg, &q, &tr), 0);
    CHECK_EQ(tr.count, 3); /* root, main, g */
    CHECK_EQ(tr.nodes[0].incl_ns, 905 * ms);
    pt_agg_tree_free(&tr);
    pt_agg_counters_t c;
    pt_agg_counters(agg, &c);
    CHECK_EQ(c.span_ns, 3005 * ms);
    /* the last second holds slices 21..30: 182 events (90 return+call
     * pairs, the last return, the mark) in 0.905 s */
    CHECK(c.events_per_second > 201.0 && c.events_per_second < 201.2);
    pt_agg_destroy(agg);
}

/* The window's ring of slices grows with the stream's span, never past
 * slice_count, and the window reads the same across each growth: a short
 * stream of a long window (an hour of 10 ms slices) holds few slices. */
static void window_ring_stream(uint32_t slice_count, pt_agg_t **out)
{
    pt_agg_t *agg = NULL;
    pt_agg_config_t cfg = {.slice_ns = 100000000ull, .slice_count = slice_count};
    CHECK_EQ(pt_agg_create(&cfg, &agg), 0);
    pt_fb_msg_t m = {.type = PT_MSG_PROCESS_INFO};
    m.u.process_info.ticks_per_second = 1000000000ull;
    CHECK_EQ(pt_agg_feed_msg(agg, &m), 0);
    setup_syms(agg);
    stream_t s = {.agg = agg, .thread = 1};
    const uint64_t ms = 1000000;
    ev(&s, PT_EV_CALL, MAIN, 0);
    for (int i = 0; i < 700; i++) { /* one call of f a slice, 70 s */
        ev(&s, PT_EV_CALL, F, 0);
        ev(&s, PT_EV_RETURN, F, 100 * ms);
    }
    ev(&s, PT_EV_MARK, MAIN, 5 * ms); /* latest 70.005 s: slice 700 */
    flush(&s);
    *out = agg;
}

static void test_window_ring_grows(void)
{
    const uint64_t ms = 1000000;
    pt_agg_counters_t c;
    pt_agg_t *agg = NULL;
    /* short: 2 s of a 10-hour window */
    CHECK_EQ(pt_agg_create(&(pt_agg_config_t){.slice_ns = 100000000ull, .slice_count = 360000}, &agg), 0);
    setup_syms(agg);
    stream_t s = {.agg = agg, .thread = 1};
    for (int i = 0; i < 20; i++) {
        ev(&s, PT_EV_CALL, F, 0);
        ev(&s, PT_EV_RETURN, F, 100 * ms);
    }
    flush(&s);
    pt_agg_counters(agg, &c);
    CHECK_EQ(c.window_slots, 256);
    CHECK(c.window_max_seconds > 35999.0);
    pt_agg_table_t t = {0};
    const pt_agg_row_t *r = get_row(agg, &t, 0, 3600.0, "f");
    CHECK_EQ(r->calls, 20);
    pt_agg_table_free(&t);
    pt_agg_destroy(agg);

    /* 70 s in a 100 s window: 256 -> 512 -> 1000 slots; the last 60 s are
     * slices 101..700, the calls started in 101..699 */
    window_ring_stream(1000, &agg);
    pt_agg_counters(agg, &c);
    CHECK_EQ(c.window_slots, 1000);
    r = get_row(agg, &t, 0, 60.0, "f");
    CHECK_EQ(r->calls, 599);
    CHECK_EQ(r->self_ns, 599 * 100 * ms);
    r = get_row(agg, &t, 0, 0, "f");
    CHECK_EQ(r->calls, 700);
    pt_agg_table_free(&t);
    pt_agg_destroy(agg);

    /* 70 s in a 30 s window: the ring stops at 300 slots; 30 s hold 299 calls */
    window_ring_stream(300, &agg);
    pt_agg_counters(agg, &c);
    CHECK_EQ(c.window_slots, 300);
    r = get_row(agg, &t, 0, 30.0, "f");
    CHECK_EQ(r->calls, 299);
    r = get_row(agg, &t, 0, 0, "f");
    CHECK_EQ(r->calls, 700);
    CHECK_EQ(r->self_ns, 700 * 100 * ms);
    pt_agg_table_free(&t);
    pt_agg_destroy(agg);
}

/* Missed returns, unknown ids, unmatched closes. */
static void test_robustness(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    stream_t s = {.agg = agg, .thread = 1};
    ev(&s, PT_EV_CALL, A, 0);
    ev(&s, PT_EV_CALL, B, 1);
    ev(&s, PT_EV_CALL, 777, 1);
    ev(&s, PT_EV_RETURN, A, 1); /* closes 777 and b too */
    ev(&s, PT_EV_RETURN, G, 1); /* nothing to close */
    ev(&s, 200, 0, 1);          /* unknown kind */
    flush(&s);
    pt_agg_counters_t c;
    pt_agg_counters(agg, &c);
    CHECK_EQ(c.unmatched_closes, 1);
    pt_agg_table_t t = {0};
    const pt_agg_row_t *r = get_row(agg, &t, 0, 0, "<unknown #777>");
    CHECK_EQ(r->calls, 1);
    CHECK_EQ(r->self_ns, 1);
    pt_agg_table_free(&t);
    pt_agg_symbol_t sym = pt_agg_symbol(agg, 777);
    CHECK(!sym.known && !strcmp(sym.name, "<unknown #777>"));
    /* a later Symbol names it */
    symbol(agg, 777, "late");
    sym = pt_agg_symbol(agg, 777);
    CHECK(sym.known && !strcmp(sym.name, "late") && sym.line == 7770);
    pt_agg_destroy(agg);
}

/* Two threads running the same path merge by path in the all-threads tree. */
static void test_threads_merge(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    for (uint64_t th = 1; th <= 2; th++) {
        stream_t s = {.agg = agg, .thread = th};
        ev(&s, PT_EV_CALL, MAIN, 0);
        ev(&s, PT_EV_CALL, F, 1);
        ev(&s, PT_EV_RETURN, F, th * 10);
        ev(&s, PT_EV_RETURN, MAIN, 1);
        flush(&s);
    }
    pt_agg_tree_t tr;
    CHECK_EQ(pt_agg_tree(agg, NULL, &tr), 0);
    CHECK_EQ(tr.count, 3);
    uint32_t m = tr.nodes[0].first_child;
    CHECK_EQ(tr.nodes[m].calls, 2);
    CHECK_EQ(tr.nodes[tr.nodes[m].first_child].self_ns, 30);
    pt_agg_tree_free(&tr);
    pt_agg_table_t t = {0};
    CHECK_EQ(get_row(agg, &t, 2, 0, "f")->self_ns, 20);
    CHECK_EQ(get_row(agg, &t, 0, 0, "f")->calls, 2);
    pt_agg_table_free(&t);
    pt_agg_destroy(agg);
}

/* The same stream as bytes: builders -> pt_agg_feed_bytes. */
static void test_feed_bytes(void)
{
    pt_agg_t *agg = NULL;
    CHECK_EQ(pt_agg_create(NULL, &agg), 0);
    uint8_t buf[4096];
    pt_fb_process_info_t pi = {.pid = 7, .ticks_per_second = 2000000000ull, .command_line = {"x", 1}};
    size_t n = pt_fb_build_process_info(buf, sizeof buf, &pi);
    CHECK(n > 0);
    CHECK_EQ(pt_agg_feed_bytes(agg, buf, n), 0);
    pt_fb_symbol_t sy = {.id = 1, .name = {"work", 4}, .file = {"w.py", 4}, .line = 3};
    n = pt_fb_build_symbol(buf, sizeof buf, &sy);
    CHECK_EQ(pt_agg_feed_bytes(agg, buf, n), 0);
    pt_event_t evs[2] = {{.ticks = 10, .id = 1, .kind = PT_EV_CALL}, {.ticks = 2010, .id = 1, .kind = PT_EV_RETURN}};
    n = pt_fb_build_event_chunk(buf, sizeof buf, 1, 0, evs, 2);
    CHECK(n > 0);
    CHECK_EQ(pt_agg_feed_bytes(agg, buf, n), 0);
    buf[8] ^= 0xff; /* corrupt the identifier */
    CHECK(pt_agg_feed_bytes(agg, buf, n) < 0);
    pt_agg_table_t t = {0};
    const pt_agg_row_t *r = get_row(agg, &t, 0, 0, "work");
    CHECK_EQ(r->self_ns, 1000); /* 2000 ticks at 2 GHz */
    CHECK(!strcmp(r->file, "w.py") && r->line == 3);
    pt_agg_table_free(&t);
    CHECK_EQ(pt_agg_process_info(agg)->pid, 7);
    pt_agg_destroy(agg);
}

/* Many events, deep and wide, to exercise table growth (no time asserted). */
static void test_volume(void)
{
    pt_agg_t *agg = new_agg();
    stream_t *s = calloc(1, sizeof *s);
    s->agg = agg;
    s->thread = 1;
    for (int rep = 0; rep < 200; rep++)
        for (uint32_t id = 100; id < 1100; id++) {
            ev(s, PT_EV_CALL, id, 1);
            ev(s, PT_EV_CALL, id + 1, 1);
            ev(s, PT_EV_RETURN, id + 1, 1);
            ev(s, PT_EV_RETURN, id, 1);
        }
    flush(s);
    pt_agg_table_t t = {0};
    CHECK_EQ(pt_agg_table(agg, NULL, PT_AGG_SORT_CALLS, 1, NULL, &t), 0);
    CHECK_EQ(t.count, 1001);
    CHECK_EQ(t.rows[0].calls, 400);
    pt_agg_table_free(&t);
    pt_agg_counters_t c;
    pt_agg_counters(agg, &c);
    CHECK_EQ(c.events_seen, 800000);
    CHECK_EQ(c.nodes, 1 + 1000 + 1000);
    free(s);
    pt_agg_destroy(agg);
}

/* Ticks near 2^64 (a hostile or damaged stream): slice borders saturate
 * instead of wrapping, so feeding ends (it ran for hours before), and a call
 * 2^40 s long shows as such, not as 0 ns (a float-to-integer overflow). */
static void test_hostile_ticks(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    stream_t *s = calloc(1, sizeof *s);
    s->agg = agg;
    s->thread = 1;
    s->now = 1000;
    ev(s, PT_EV_CALL, A, 0);
    ev(s, PT_EV_CALL, B, 5);
    ev(s, PT_EV_RETURN, B, UINT64_MAX - 2000); /* near 2^64 */
    ev(s, PT_EV_CALL, G, 1);
    ev(s, PT_EV_RETURN, G, 0);
    s->now = UINT64_MAX;
    ev(s, PT_EV_RETURN, A, 0);
    s->now = 3; /* and back to the start: a clock that went back */
    ev(s, PT_EV_CALL, A, 0);
    ev(s, PT_EV_RETURN, A, 0);
    flush(s);
    pt_agg_table_t t = {0};
    const pt_agg_row_t *r = get_row(agg, &t, 0, 0, "b");
    CHECK_EQ(r->calls, 1);
    CHECK(r->self_ns > (UINT64_C(1) << 62)); /* about 2^64 ns, not 0 */
    r = get_row(agg, &t, 0, 10.0, "a"); /* the window of the last 10 s */
    CHECK_EQ(r->calls, 0);
    pt_agg_table_free(&t);
    pt_agg_tree_t tree = {0};
    CHECK_EQ(pt_agg_tree(agg, &(pt_agg_query_t){.thread = 0, .window_seconds = 10.0}, &tree), 0);
    pt_agg_tree_free(&tree);
    free(s);
    pt_agg_destroy(agg);

    /* ticks_per_second near 2^64 as well: slice length saturates */
    pt_agg_t *agg2 = NULL;
    CHECK_EQ(pt_agg_create(&(pt_agg_config_t){.slice_ns = 100000000ull, .slice_count = 600}, &agg2), 0);
    pt_fb_msg_t m = {.type = PT_MSG_PROCESS_INFO};
    m.u.process_info.ticks_per_second = UINT64_MAX;
    m.u.process_info.base_ticks = UINT64_MAX - 10;
    CHECK_EQ(pt_agg_feed_msg(agg2, &m), 0);
    pt_event_t evs[] = {{.ticks = UINT64_MAX - 5, .id = 1, .kind = PT_EV_CALL},
                        {.ticks = UINT64_MAX, .id = 1, .kind = PT_EV_RETURN},
                        {.ticks = 0, .id = 2, .kind = PT_EV_CALL},
                        {.ticks = UINT64_MAX, .id = 2, .kind = PT_EV_RETURN}};
    CHECK_EQ(pt_agg_feed_events(agg2, 1, evs, 4), 0);
    pt_agg_table_t t2 = {0};
    CHECK_EQ(pt_agg_table(agg2, &(pt_agg_query_t){.window_seconds = 5.0}, PT_AGG_SORT_SELF, 1, NULL, &t2), 0);
    pt_agg_table_free(&t2);
    pt_agg_destroy(agg2);

    /* one tick a second: a 2^40 s call is past 2^64 ns and saturates, not 0 */
    pt_agg_t *agg3 = NULL;
    CHECK_EQ(pt_agg_create(NULL, &agg3), 0);
    m.u.process_info.ticks_per_second = 1;
    m.u.process_info.base_ticks = 0;
    CHECK_EQ(pt_agg_feed_msg(agg3, &m), 0);
    pt_event_t long_call[] = {{.ticks = 1, .id = 1, .kind = PT_EV_CALL},
                              {.ticks = 1 + (UINT64_C(1) << 40), .id = 1, .kind = PT_EV_RETURN}};
    CHECK_EQ(pt_agg_feed_events(agg3, 1, long_call, 2), 0);
    CHECK_EQ(pt_agg_ticks_to_ns(agg3, 1 + (UINT64_C(1) << 40)), UINT64_MAX);
    pt_agg_table_t t3 = {0};
    CHECK_EQ(pt_agg_table(agg3, NULL, PT_AGG_SORT_SELF, 1, NULL, &t3), 0);
    CHECK(t3.count == 1 && t3.rows[0].self_ns == UINT64_MAX);
    pt_agg_table_free(&t3);
    pt_agg_destroy(agg3);
}

/* Returns with no matching call (a reader that starts mid-stream sees many)
 * cost O(1) each however deep the stack: 1 M of them under a 100,000-deep
 * stack took minutes when each one scanned the stack. The test bounds the
 * work by time only loosely (it is a test, not a benchmark): it must finish
 * at all under ctest's timeout, and the counts must be exact. */
static void test_unmatched_returns_linear(void)
{
    pt_agg_t *agg = new_agg();
    stream_t *s = calloc(1, sizeof *s);
    s->agg = agg;
    s->thread = 1;
    const uint32_t depth = 100000;
    for (uint32_t i = 0; i < depth; i++)
        ev(s, PT_EV_CALL, 10 + (i % 50), 1); /* 50 functions, deep mutual recursion */
    for (uint32_t i = 0; i < 1000000; i++)
        ev(s, PT_EV_RETURN, 5000 + (i % 1000), 1); /* never called */
    /* a return that matches deep down closes every frame above it */
    ev(s, PT_EV_RETURN, 10, 1);
    flush(s);
    pt_agg_counters_t c;
    pt_agg_counters(agg, &c);
    CHECK_EQ(c.unmatched_closes, 1000000);
    pt_agg_thread_info_t ti;
    CHECK_EQ(pt_agg_thread_at(agg, 0, &ti), 0);
    CHECK_EQ(ti.depth, (uint32_t)(depth - 50)); /* the innermost frame of 10 was at depth - 50 */
    /* and the counts of open frames stay right after the cut: 10 is still
     * open below, so its return matches again */
    ev(s, PT_EV_RETURN, 10, 1);
    flush(s);
    CHECK_EQ(pt_agg_thread_at(agg, 0, &ti), 0);
    CHECK_EQ(ti.depth, (uint32_t)(depth - 100));
    pt_agg_counters(agg, &c);
    CHECK_EQ(c.unmatched_closes, 1000000);
    free(s);
    pt_agg_destroy(agg);
}

/* The timeline: per slice and thread, the symbol with the most self time,
 * the busy time and the calls; an open frame runs up to the latest tick; the
 * window, since_slice and the thread filter cut it. */
static const pt_agg_tl_cell_t *cell(const pt_agg_timeline_t *t, uint64_t slice, uint64_t thread)
{
    for (size_t i = 0; i < t->count; i++)
        if (t->cells[i].slice == slice && t->cells[i].thread == thread)
            return &t->cells[i];
    return NULL;
}

static void test_timeline(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    const uint64_t ms = 1000000;
    stream_t s1 = {.agg = agg, .thread = 1};
    ev(&s1, PT_EV_CALL, MAIN, 0);
    ev(&s1, PT_EV_CALL, F, 0);
    ev(&s1, PT_EV_RETURN, F, 160 * ms);
    ev(&s1, PT_EV_CALL, G, 0);
    ev(&s1, PT_EV_RETURN, G, 150 * ms); /* t = 310 ms: slice 3 */
    flush(&s1);
    stream_t s2 = {.agg = agg, .thread = 2};
    ev(&s2, PT_EV_CALL, H, 0); /* never returns: open up to the latest tick */
    flush(&s2);

    pt_agg_timeline_t tl;
    CHECK_EQ(pt_agg_timeline(agg, NULL, 0, 1, &tl), 0);
    CHECK_EQ(tl.slice_ns, 100 * ms);
    CHECK_EQ(tl.first_slice, 0);
    CHECK_EQ(tl.last_slice, 3);
    CHECK_EQ(tl.count, 8); /* two threads, slices 0..3 each */
    const pt_agg_tl_cell_t *c = cell(&tl, 0, 1);
    CHECK(c && c->symbol == F && c->top_ns == 100 * ms && c->busy_ns == 100 * ms && c->calls == 2);
    c = cell(&tl, 1, 1);
    CHECK(c && c->symbol == F && c->top_ns == 60 * ms && c->busy_ns == 100 * ms && c->calls == 1);
    c = cell(&tl, 2, 1);
    CHECK(c && c->symbol == G && c->top_ns == 100 * ms && c->calls == 0);
    c = cell(&tl, 3, 1);
    CHECK(c && c->symbol == G && c->top_ns == 10 * ms && c->busy_ns == 10 * ms);
    for (uint64_t sl = 0; sl < 3; sl++) {
        c = cell(&tl, sl, 2);
        CHECK(c && c->symbol == H && c->top_ns == 100 * ms && c->busy_ns == 100 * ms);
    }
    c = cell(&tl, 3, 2);
    CHECK(c && c->symbol == H && c->top_ns == 10 * ms);
    /* cells come by slice, then thread */
    for (size_t i = 1; i < tl.count; i++)
        CHECK(tl.cells[i - 1].slice < tl.cells[i].slice ||
              (tl.cells[i - 1].slice == tl.cells[i].slice && tl.cells[i - 1].thread < tl.cells[i].thread));
    pt_agg_timeline_free(&tl);

    /* the last 0.2 s = slices 2 and 3; since_slice 3 leaves slice 3; thread 2 only */
    pt_agg_query_t q = {.window_seconds = 0.2};
    CHECK_EQ(pt_agg_timeline(agg, &q, 0, 1, &tl), 0);
    CHECK_EQ(tl.first_slice, 2);
    CHECK_EQ(tl.count, 4);
    pt_agg_timeline_free(&tl);
    CHECK_EQ(pt_agg_timeline(agg, &q, 3, 1, &tl), 0);
    CHECK_EQ(tl.count, 2);
    CHECK(cell(&tl, 3, 1) && cell(&tl, 3, 2));
    pt_agg_timeline_free(&tl);
    q.thread = 2;
    CHECK_EQ(pt_agg_timeline(agg, &q, 0, 1, &tl), 0);
    CHECK_EQ(tl.count, 2);
    CHECK(cell(&tl, 2, 2) && cell(&tl, 3, 2) && !cell(&tl, 3, 1));
    pt_agg_timeline_free(&tl);
    /* two slices per cell: [0, 200 ms) and [200, 400 ms); since 3 starts at cell 2 */
    CHECK_EQ(pt_agg_timeline(agg, NULL, 0, 2, &tl), 0);
    CHECK_EQ(tl.group, 2);
    CHECK_EQ(tl.count, 4);
    c = cell(&tl, 0, 1);
    CHECK(c && c->symbol == F && c->top_ns == 160 * ms && c->busy_ns == 200 * ms && c->calls == 3);
    c = cell(&tl, 2, 1);
    CHECK(c && c->symbol == G && c->top_ns == 110 * ms && c->busy_ns == 110 * ms);
    c = cell(&tl, 2, 2);
    CHECK(c && c->symbol == H && c->top_ns == 110 * ms);
    pt_agg_timeline_free(&tl);
    CHECK_EQ(pt_agg_timeline(agg, NULL, 3, 2, &tl), 0);
    CHECK_EQ(tl.count, 2);
    CHECK(cell(&tl, 2, 1) && cell(&tl, 2, 2));
    pt_agg_timeline_free(&tl);
    /* hostile clock: one tick a second, so a slice is one tick and slice numbers reach
     * 2^64 - 3; any group size ends, with the window's cells only */
    {
        pt_agg_t *h = NULL;
        CHECK_EQ(pt_agg_create(&(pt_agg_config_t){.slice_ns = 100000000ull, .slice_count = 50}, &h), 0);
        pt_fb_msg_t m = {.type = PT_MSG_PROCESS_INFO};
        m.u.process_info.ticks_per_second = 1;
        CHECK_EQ(pt_agg_feed_msg(h, &m), 0);
        symbol(h, F, "f");
        pt_event_t evs[] = {{.ticks = 0, .id = F, .kind = PT_EV_CALL}, {.ticks = UINT64_MAX - 3, .id = F, .kind = PT_EV_RETURN},
                            {.ticks = UINT64_MAX - 2, .id = F, .kind = PT_EV_CALL}};
        CHECK_EQ(pt_agg_feed_events(h, 1, evs, 3), 0);
        uint32_t groups[] = {1, 7, 50, UINT32_MAX};
        for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
            CHECK_EQ(pt_agg_timeline(h, NULL, 0, groups[i], &tl), 0);
            CHECK(tl.count >= 1 && tl.count <= 50);
            CHECK(tl.last_slice >= UINT64_MAX - 4);
            pt_agg_timeline_free(&tl);
            CHECK_EQ(pt_agg_timeline(h, NULL, UINT64_MAX - 1, groups[i], &tl), 0);
            pt_agg_timeline_free(&tl);
        }
        pt_agg_destroy(h);
    }
    /* an empty aggregator has no slices */
    pt_agg_t *empty = new_agg();
    CHECK_EQ(pt_agg_timeline(empty, NULL, 0, 1, &tl), 0);
    CHECK_EQ(tl.count, 0);
    pt_agg_timeline_free(&tl);
    pt_agg_destroy(empty);
    pt_agg_destroy(agg);
}

/* hide_idle: the tree of every thread leaves out a thread that started no call
 * in the window (here one blocked in g since the start), counts it again over
 * the whole run, and never hides a thread that was asked for by number. */
static int tree_has_path(const pt_agg_tree_t *tr, uint32_t a, uint32_t b)
{
    for (uint32_t c = tr->nodes[0].first_child; c != PT_AGG_NONE; c = tr->nodes[c].next_sibling)
        if (tr->nodes[c].symbol == a)
            for (uint32_t d = tr->nodes[c].first_child; d != PT_AGG_NONE; d = tr->nodes[d].next_sibling)
                if (tr->nodes[d].symbol == b)
                    return 1;
    return 0;
}

static void test_hide_idle(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    const uint64_t ms = 1000000;
    stream_t idle = {.agg = agg, .thread = 1};
    ev(&idle, PT_EV_CALL, MAIN, 0);
    ev(&idle, PT_EV_CALL, G, 1); /* blocked in g from here on */
    flush(&idle);
    stream_t busy = {.agg = agg, .thread = 2};
    ev(&busy, PT_EV_CALL, MAIN, 0);
    for (int i = 0; i < 300; i++) {
        ev(&busy, PT_EV_CALL, F, 0);
        ev(&busy, PT_EV_RETURN, F, 10 * ms);
    }
    flush(&busy);
    pt_agg_tree_t tr;
    pt_agg_query_t q = {.window_seconds = 1.0};
    CHECK_EQ(pt_agg_tree(agg, &q, &tr), 0);
    CHECK(tree_has_path(&tr, MAIN, G) && tree_has_path(&tr, MAIN, F)); /* both threads */
    uint64_t both = tr.nodes[0].incl_ns;
    pt_agg_tree_free(&tr);
    q.hide_idle = 1;
    CHECK_EQ(pt_agg_tree(agg, &q, &tr), 0);
    CHECK(!tree_has_path(&tr, MAIN, G) && tree_has_path(&tr, MAIN, F)); /* the idle thread left out */
    CHECK(tr.nodes[0].incl_ns < both);
    pt_agg_tree_free(&tr);
    q.window_seconds = 0; /* over the whole run it started calls */
    CHECK_EQ(pt_agg_tree(agg, &q, &tr), 0);
    CHECK(tree_has_path(&tr, MAIN, G));
    pt_agg_tree_free(&tr);
    q = (pt_agg_query_t){.thread = 1, .window_seconds = 1.0, .hide_idle = 1}; /* asked for: shown */
    CHECK_EQ(pt_agg_tree(agg, &q, &tr), 0);
    CHECK(tree_has_path(&tr, MAIN, G));
    pt_agg_tree_free(&tr);
    pt_agg_destroy(agg);
}

/* ---- tree budget ------------------------------------------------------------
 * The same stream of never-repeating paths (random walks over 300 functions,
 * depth 1-12, recursion and spans among them, two threads, frames left open at
 * the end) fed to an aggregation with the default budget (the whole tree fits)
 * and to one whose budget allows 64 nodes: the small one folds paths into
 * [other] nodes, says so, and still gives the exact flat table and timeline and
 * a tree whose sums equal the big one's. */

static uint64_t budget_rng = 88172645463325252ull;
static uint32_t budget_rand(uint32_t n)
{
    budget_rng ^= budget_rng << 13;
    budget_rng ^= budget_rng >> 7;
    budget_rng ^= budget_rng << 17;
    return (uint32_t)(budget_rng % n);
}

/* With budget_resync set, budget_walk is cut now and then as a reader the hub
 * cut is (Lost, then the thread's Frame records): the stack reported is the one
 * open, either as it is or with calls made in the gap still open on top of it
 * (they enter reported, one call each, and return at once), or only a prefix of
 * it (what was above is closed at the gap; its returns then close nothing). */
static int budget_resync;
static uint32_t budget_stack[64];

static void budget_cut(stream_t *s, int depth)
{
    uint32_t kind = budget_rand(3), keep = kind == 2 ? budget_rand((uint32_t)depth + 1) : (uint32_t)depth;
    uint32_t extra = kind == 1 ? 1 + budget_rand(3) : 0, ids[3];
    lost(s, 1 + budget_rand(100), 1 + budget_rand(50));
    for (uint32_t i = 0; i < keep; i++)
        frame(s, budget_stack[i], (uint16_t)i, 0);
    for (uint32_t i = 0; i < extra; i++) {
        ids[i] = 1000 + budget_rand(300);
        frame(s, ids[i], (uint16_t)(keep + i), 0);
    }
    while (extra--)
        ev(s, PT_EV_RETURN, ids[extra], 1 + budget_rand(50));
}

static void budget_walk(stream_t *s, int depth, int max_depth)
{
    uint32_t id = 1000 + budget_rand(300);
    int span = budget_rand(10) == 0;
    ev(s, span ? PT_EV_SPAN_BEGIN : PT_EV_CALL, id, 1 + budget_rand(50));
    budget_stack[depth - 1] = id;
    if (budget_resync && !span && budget_rand(8) == 0)
        budget_cut(s, depth);
    if (depth < max_depth) {
        uint32_t kids = budget_rand(3);
        for (uint32_t k = 0; k < kids; k++)
            budget_walk(s, depth + 1, max_depth);
    }
    ev(s, span ? PT_EV_SPAN_END : PT_EV_RETURN, id, 1 + budget_rand(50));
}

static void budget_feed(pt_agg_t *agg, int open_at_end)
{
    budget_rng = 88172645463325252ull;
    for (uint32_t i = 1000; i < 1300; i++) {
        char name[32];
        snprintf(name, sizeof name, "fn%u", i);
        symbol(agg, i, name);
    }
    stream_t a = {.agg = agg, .thread = 1, .now = 1000}, b = {.agg = agg, .thread = 2, .now = 1000};
    for (int round = 0; round < 400; round++) {
        stream_t *s = round % 3 ? &a : &b;
        budget_walk(s, 1, 1 + (int)budget_rand(12));
        s->now += 20000000; /* the window's slices are 100 ms: cross a few */
        flush(s);
    }
    if (open_at_end) { /* frames open when queried, one of them folded */
        ev(&a, PT_EV_CALL, 1000, 5);
        ev(&a, PT_EV_CALL, 1001, 5);
        ev(&a, PT_EV_CALL, 1000, 5);
        ev(&a, PT_EV_CALL, 1002, 5);
        flush(&a);
        ev(&b, PT_EV_MARK, 1, a.now + 1000 - b.now); /* the latest tick is past a's last event */
        flush(&b);
    }
}

static void tree_sums(const pt_agg_tree_t *t, uint64_t *calls, uint64_t *self, uint64_t *others)
{
    *calls = *self = *others = 0;
    for (size_t i = 0; i < t->count; i++) {
        *calls += t->nodes[i].calls;
        *self += t->nodes[i].self_ns;
        *others += t->nodes[i].other;
        if (t->nodes[i].other)
            CHECK(t->nodes[i].first_child == PT_AGG_NONE && t->nodes[i].symbol == PT_AGG_OTHER);
    }
}

static void test_tree_budget(void)
{
    /* open_at_end 2: the stream has resyncs after gaps (budget_cut) */
    for (int open_at_end = 0; open_at_end < 3; open_at_end++) {
        budget_resync = open_at_end == 2;
        pt_agg_t *big = new_agg(), *small = NULL;
        pt_agg_config_t cfg = {.slice_ns = 100000000ull, .slice_count = 600,
                               .tree_budget = 64ull * PT_AGG_NODE_BYTES * 2};
        CHECK_EQ(pt_agg_create(&cfg, &small), 0);
        pt_fb_msg_t m = {.type = PT_MSG_PROCESS_INFO};
        m.u.process_info.ticks_per_second = 1000000000ull;
        CHECK_EQ(pt_agg_feed_msg(small, &m), 0);
        budget_feed(big, open_at_end);
        budget_feed(small, open_at_end);

        pt_agg_counters_t cb, cs;
        pt_agg_counters(big, &cb);
        pt_agg_counters(small, &cs);
        CHECK_EQ(cb.folded_calls, 0);
        CHECK_EQ(cb.tree_budget, PT_AGG_DEFAULT_TREE_BUDGET);
        CHECK(cb.nodes > 2000);                     /* the paths do not repeat */
        CHECK(cs.folded_calls > 1000);
        CHECK(cs.other_nodes > 0 && cs.other_nodes <= 64);
        CHECK(cs.nodes <= 64 + cs.other_nodes);     /* the budget holds */

        /* the flat table is exact: every row, whole run and windows, merged and per thread */
        const double windows[] = {0, 0.3, 2, 100};
        for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
            for (uint64_t thread = 0; thread <= 2; thread++) {
                pt_agg_query_t q = {.thread = thread, .window_seconds = windows[w]};
                pt_agg_table_t tb, ts;
                CHECK_EQ(pt_agg_table(big, &q, PT_AGG_SORT_NAME, 0, NULL, &tb), 0);
                CHECK_EQ(pt_agg_table(small, &q, PT_AGG_SORT_NAME, 0, NULL, &ts), 0);
                CHECK_EQ(tb.count, ts.count);
                CHECK(windows[w] < 50 || tb.count > 100);
                CHECK_EQ(tb.span_ns, ts.span_ns);
                for (size_t i = 0; i < tb.count && i < ts.count; i++) {
                    const pt_agg_row_t *x = &tb.rows[i], *y = &ts.rows[i];
                    if (x->symbol != y->symbol || x->calls != y->calls || x->prim_calls != y->prim_calls ||
                        x->self_ns != y->self_ns || x->total_ns != y->total_ns) {
                        fprintf(stderr, "window %g thread %llu row %s: calls %llu/%llu prim %llu/%llu self %llu/%llu "
                                        "total %llu/%llu\n", windows[w], (unsigned long long)thread, x->name,
                                (unsigned long long)x->calls, (unsigned long long)y->calls,
                                (unsigned long long)x->prim_calls, (unsigned long long)y->prim_calls,
                                (unsigned long long)x->self_ns, (unsigned long long)y->self_ns,
                                (unsigned long long)x->total_ns, (unsigned long long)y->total_ns);
                        failures++;
                        break;
                    }
                }
                pt_agg_table_free(&tb);
                pt_agg_table_free(&ts);

                /* the tree: counts agree (what [other] holds is still counted) */
                pt_agg_tree_t rb, rs;
                CHECK_EQ(pt_agg_tree(big, &q, &rb), 0);
                CHECK_EQ(pt_agg_tree(small, &q, &rs), 0);
                uint64_t callb, selfb, ob, calls_, selfs, os;
                tree_sums(&rb, &callb, &selfb, &ob);
                tree_sums(&rs, &calls_, &selfs, &os);
                CHECK_EQ(ob, 0);
                if (windows[w] == 0 || windows[w] > 50) { /* the whole run: what was folded is in it */
                    CHECK(os > 0);
                    CHECK(rs.count < rb.count);
                }
                CHECK_EQ(callb, calls_);
                CHECK_EQ(rb.nodes[0].incl_ns, rs.nodes[0].incl_ns);
                /* self is rounded to ns per node: the sums agree to a ns per node */
                CHECK(selfs + rs.count >= rb.nodes[0].incl_ns && selfs <= rs.nodes[0].incl_ns + rs.count);
                pt_agg_tree_free(&rb);
                pt_agg_tree_free(&rs);
            }

        /* the timeline is exact too: the top symbol of every cell */
        pt_agg_timeline_t tb, ts;
        CHECK_EQ(pt_agg_timeline(big, NULL, 0, 1, &tb), 0);
        CHECK_EQ(pt_agg_timeline(small, NULL, 0, 1, &ts), 0);
        CHECK_EQ(tb.count, ts.count);
        for (size_t i = 0; i < tb.count && i < ts.count; i++) {
            const pt_agg_tl_cell_t *x = &tb.cells[i], *y = &ts.cells[i];
            CHECK(x->slice == y->slice && x->thread == y->thread && x->symbol == y->symbol &&
                  x->top_ns == y->top_ns && x->busy_ns == y->busy_ns && x->calls == y->calls);
        }
        pt_agg_timeline_free(&tb);
        pt_agg_timeline_free(&ts);
        pt_agg_destroy(big);
        pt_agg_destroy(small);
    }
}

/* A symbol id of 0xFFFFFFFF (PT_AGG_NONE) is an id like any other: it was the
 * empty value of a node's child cache, so its call looked like an allocation
 * failure and the whole aggregation stopped (-ENOMEM). */
static void test_id_all_ones(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    stream_t s = {.agg = agg, .thread = 1, .now = 1000};
    ev(&s, PT_EV_CALL, MAIN, 0);
    ev(&s, PT_EV_CALL, UINT32_MAX, 10);
    ev(&s, PT_EV_RETURN, UINT32_MAX, 10);
    ev(&s, PT_EV_CALL, F, 0);
    ev(&s, PT_EV_RETURN, F, 5);
    ev(&s, PT_EV_RETURN, MAIN, 5);
    flush(&s);
    pt_agg_table_t t = {0};
    CHECK_EQ(get_row(agg, &t, 0, 0, "<unknown #4294967295>")->calls, 1);
    CHECK_EQ(get_row(agg, &t, 0, 0, "<unknown #4294967295>")->self_ns, 10);
    CHECK_EQ(get_row(agg, &t, 0, 0, "f")->calls, 1);
    CHECK_EQ(get_row(agg, &t, 0, 0, "main")->total_ns, 30);
    pt_agg_table_free(&t);
    pt_agg_tree_t tr;
    CHECK_EQ(pt_agg_tree(agg, NULL, &tr), 0);
    CHECK_EQ(tr.count, 4);
    pt_agg_tree_free(&tr);
    /* never announced: damage, counted per event (walk.h), the rest kept */
    pt_agg_counters_t c;
    pt_agg_counters(agg, &c);
    CHECK_EQ(c.unannounced, 2);
    CHECK_EQ(c.events_seen, 6);
    pt_agg_destroy(agg);
}

static void cpu_time(stream_t *s, uint64_t cpu_ns, uint64_t advance)
{
    ev(s, PT_EV_CPU_TIME, (uint32_t)cpu_ns, advance);
    s->ev[s->n - 1].aux = (uint16_t)(cpu_ns >> 32);
}

/* CPU time (cct.h, THE RULE FOR CPU TIME): the CPU ns between two CpuTime
 * records are shared by what ran between them in proportion to its ticks
 * (1 tick = 1 ns here); ticks before a thread's first record get none; the
 * CPU clock is taken modulo 2^48; the window's slices carry the same. */
static void test_cpu_time(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    stream_t s = {.agg = agg, .thread = 1};
    const uint64_t base = (UINT64_C(1) << 48) - 60; /* the CPU clock wraps in the middle */
    ev(&s, PT_EV_CALL, MAIN, 0);
    ev(&s, PT_EV_CALL, A, 40);        /* main's 40 ticks come before the first record: CPU unknown */
    cpu_time(&s, base, 0);
    ev(&s, PT_EV_CALL, F, 50);         /* a spins 100 ticks with f: all on a CPU */
    ev(&s, PT_EV_RETURN, F, 50);
    cpu_time(&s, base + 100, 0);
    ev(&s, PT_EV_CALL, B, 0);          /* b waits 1000 ticks, 10 of them on a CPU */
    cpu_time(&s, base + 110, 1000);
    ev(&s, PT_EV_RETURN, B, 0);
    ev(&s, PT_EV_RETURN, A, 0);
    ev(&s, PT_EV_RETURN, MAIN, 0);
    flush(&s);
    pt_agg_table_t t = {0};
    const pt_agg_row_t *r = get_row(agg, &t, 0, 0, "f");
    CHECK_EQ(r->self_ns, 50);
    CHECK_EQ(r->self_cpu_ns, 50);
    r = get_row(agg, &t, 0, 0, "main");
    CHECK_EQ(r->self_ns, 40);
    CHECK_EQ(r->self_cpu_ns, 0);       /* before any CpuTime record of its thread */
    CHECK_EQ(r->total_ns, 40 + 100 + 1000);
    CHECK_EQ(r->total_cpu_ns, 100 + 10);
    r = get_row(agg, &t, 0, 0, "a");
    CHECK_EQ(r->self_ns, 50);
    CHECK_EQ(r->self_cpu_ns, 50);
    CHECK_EQ(r->total_ns, 100 + 1000);
    CHECK_EQ(r->total_cpu_ns, 100 + 10);
    r = get_row(agg, &t, 0, 0, "b");
    CHECK_EQ(r->self_ns, 1000);
    CHECK_EQ(r->self_cpu_ns, 10);
    CHECK_EQ(r->total_cpu_ns, 10);
    pt_agg_table_free(&t);
    /* the window (its slices) gives the same, to its unit: 1/32767 of a slice
     * (3052 ns here) a CpuTime record; b's 10 ns are below it */
    r = get_row(agg, &t, 0, 60, "b");
    CHECK(r->self_cpu_ns <= 3052 / 2);
    pt_agg_table_free(&t);
    pt_agg_tree_t tr = {0};
    CHECK_EQ(pt_agg_tree(agg, &(pt_agg_query_t){.thread = 1}, &tr), 0);
    CHECK_EQ(tr.nodes[0].incl_cpu_ns, 110);
    CHECK_EQ(tr.nodes[0].incl_ns, 1140);
    pt_agg_tree_free(&tr);
    {
        stream_t s3 = {.agg = agg, .thread = 3, .now = s.now};
        cpu_time(&s3, 5000, 0);
        ev(&s3, PT_EV_CALL, GEN, 0);
        cpu_time(&s3, 5000 + 20000000, 50000000); /* 20 of 50 ms on a CPU */
        ev(&s3, PT_EV_RETURN, GEN, 0);
        flush(&s3);
        r = get_row(agg, &t, 3, 60, "gen");
        CHECK_EQ(r->self_ns, 50000000);
        CHECK(r->self_cpu_ns + 3052 / 2 >= 20000000 && r->self_cpu_ns <= 20000000 + 3052 / 2);
        r = get_row(agg, &t, 3, 0, "gen"); /* the whole run's is exact */
        CHECK_EQ(r->self_cpu_ns, 20000000);
        pt_agg_table_free(&t);
    }

    /* a thread's CPU clock ends with it: a new thread under its number (a
     * reused ring) starts from its own first record, not from the old clock */
    s.thread = 2;
    cpu_time(&s, 1000000, 10);
    ev(&s, PT_EV_CALL, G, 0);
    flush(&s);
    pt_fb_msg_t m = {.type = PT_MSG_THREAD_END};
    m.u.thread_end = (pt_fb_thread_end_t){.thread = 2, .ticks = s.now + 50};
    CHECK_EQ(pt_agg_feed_msg(agg, &m), 0); /* g's 50 ticks after the last record: CPU unknown */
    s.now += 50;
    cpu_time(&s, 7, 10);                   /* the new thread's clock: small */
    ev(&s, PT_EV_CALL, H, 0);
    cpu_time(&s, 7 + 40, 100);             /* h: 40 of 100 on a CPU */
    ev(&s, PT_EV_RETURN, H, 0);
    flush(&s);
    r = get_row(agg, &t, 2, 0, "g");
    CHECK_EQ(r->self_ns, 50);
    CHECK_EQ(r->self_cpu_ns, 0);
    r = get_row(agg, &t, 2, 0, "h");
    CHECK_EQ(r->self_ns, 100);
    CHECK_EQ(r->self_cpu_ns, 40);
    pt_agg_table_free(&t);
    pt_agg_destroy(agg);
}

/* A CpuTime record after a Frame run ends the run before the clock moves to it:
 * the old frame the run did not report (g) closes at the gap's tick, and the
 * time up to the record goes to the reported top (f), not to g. Right after the
 * Lost record (before the run, as the tracer writes it) it ends nothing: f and
 * main stay open across the gap, one call each. */
static void test_cpu_time_around_frame_runs(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    stream_t s = {.agg = agg, .thread = 1};
    cpu_time(&s, 0, 0);
    ev(&s, PT_EV_CALL, MAIN, 0);
    ev(&s, PT_EV_CALL, F, 0);
    ev(&s, PT_EV_CCALL, G, 10);
    lost(&s, 7, 20);
    cpu_time(&s, 10, 0);
    frame(&s, MAIN, 0, 0);
    frame(&s, F, 1, 0);
    cpu_time(&s, 20, 10);
    ev(&s, PT_EV_RETURN, F, 0);
    ev(&s, PT_EV_RETURN, MAIN, 0);
    flush(&s);
    pt_agg_table_t t = {0};
    const pt_agg_row_t *r = get_row(agg, &t, 0, 0, "g");
    CHECK_EQ(r->self_ns, 0);   /* its 20 ticks are the gap's */
    r = get_row(agg, &t, 0, 0, "f");
    CHECK_EQ(r->calls, 1);
    CHECK_EQ(r->self_ns, 10 + 10);
    r = get_row(agg, &t, 0, 0, "main");
    CHECK_EQ(r->calls, 1);
    CHECK_EQ(t.unobserved_ns, 20);
    pt_agg_table_free(&t);
    pt_agg_destroy(agg);
}

/* ---- steps (STEPS in agg.c) ---------------------------------------------- */

enum { STEP_LABEL = 40 };

static void step_mark(stream_t *s, uint64_t advance)
{
    ev(s, PT_EV_MARK, STEP_LABEL, advance);
    s->ev[s->n - 1].flags = PT_EVF_STEP;
}

/* the node of the last step's tree under parent with symbol sym */
static const pt_agg_tnode_t *tchild(const pt_agg_tree_t *tr, uint32_t parent, uint32_t sym)
{
    for (uint32_t c = tr->nodes[parent].first_child; c != PT_AGG_NONE; c = tr->nodes[c].next_sibling)
        if (tr->nodes[c].symbol == sym)
            return &tr->nodes[c];
    fprintf(stderr, "tree node %u under %u missing\n", sym, parent);
    failures++;
    static pt_agg_tnode_t zero;
    return &zero;
}

/* Step durations and the last step's tree: the first step from the thread's
 * first event; a frame open at a mark goes on into the next step (its call in
 * the step that entered it); a Lost gap inside a step is its <not observed>
 * time, with its events. */
static void test_steps(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    pt_agg_steps_t st;
    CHECK_EQ(pt_agg_steps(agg, 0, &st), 0);
    CHECK_EQ(st.count, 0);
    pt_agg_tree_t tr;
    pt_agg_query_t lastq = {.last_step = 1};
    CHECK_EQ(pt_agg_tree(agg, &lastq, &tr), 0); /* no step yet: an empty view */
    CHECK_EQ(tr.count, 1);
    pt_agg_tree_free(&tr);

    stream_t s = {.agg = agg, .thread = 1, .now = 1000};
    ev(&s, PT_EV_CALL, MAIN, 0);
    /* step 1: 1000 -> 1035 */
    ev(&s, PT_EV_CALL, F, 10);
    ev(&s, PT_EV_RETURN, F, 20);
    step_mark(&s, 5);
    flush(&s);
    CHECK_EQ(pt_agg_steps(agg, 0, &st), 0);
    CHECK_EQ(st.count, 1);
    CHECK_EQ(st.thread, 1);
    CHECK_EQ(st.last_ns, 35); /* from the thread's first event */
    CHECK_EQ(st.label, STEP_LABEL);
    CHECK_EQ(pt_agg_tree(agg, &lastq, &tr), 0);
    const pt_agg_tnode_t *m = tchild(&tr, 0, MAIN);
    CHECK_EQ(m->calls, 1);
    CHECK_EQ(m->self_ns, 15);
    CHECK_EQ(m->incl_ns, 35);
    CHECK_EQ(tchild(&tr, (uint32_t)(m - tr.nodes), F)->self_ns, 20);
    pt_agg_tree_free(&tr);

    /* step 2: 1035 -> 1040, g open at its end */
    ev(&s, PT_EV_CALL, G, 1);
    step_mark(&s, 4);
    /* step 3: 1040 -> 1160, g returns in it */
    ev(&s, PT_EV_RETURN, G, 6);
    ev(&s, PT_EV_CALL, F, 4);
    ev(&s, PT_EV_RETURN, F, 100);
    step_mark(&s, 10);
    ev(&s, PT_EV_CALL, H, 3); /* the running step: not in the last one */
    flush(&s);
    CHECK_EQ(pt_agg_steps(agg, 0, &st), 0);
    CHECK_EQ(st.count, 3);
    CHECK_EQ(st.last_ns, 120);
    CHECK_EQ(st.min_ns, 5);
    CHECK_EQ(st.max_ns, 120);
    CHECK_EQ(st.slowest, 3);
    CHECK_EQ(st.median_ns, 35);
    CHECK_EQ(st.p10_ns, 5);
    CHECK_EQ(st.p90_ns, 120);
    CHECK_EQ(st.mean_ns, 53);
    CHECK_EQ(st.total_ns, 160);
    CHECK_EQ(st.kept, 3);
    CHECK_EQ(st.folded, 0);
    CHECK_EQ(st.last_start_ns, 40);
    CHECK_EQ(st.last_end_ns, 160);
    CHECK_EQ(pt_agg_tree(agg, &lastq, &tr), 0);
    CHECK_EQ(tr.nodes[0].incl_ns, 120);
    m = tchild(&tr, 0, MAIN);
    uint32_t mi = (uint32_t)(m - tr.nodes);
    CHECK_EQ(m->calls, 0); /* entered in step 1 */
    CHECK_EQ(m->self_ns, 14);
    CHECK_EQ(m->incl_ns, 120);
    CHECK_EQ(tchild(&tr, mi, G)->calls, 0); /* entered in step 2 ... */
    CHECK_EQ(tchild(&tr, mi, G)->self_ns, 6); /* ... its time in step 3 is step 3's */
    CHECK_EQ(tchild(&tr, mi, F)->calls, 1);
    CHECK_EQ(tchild(&tr, mi, F)->self_ns, 100);
    pt_agg_tree_free(&tr);
    pt_agg_table_t t = {0};
    CHECK_EQ(pt_agg_table(agg, &lastq, PT_AGG_SORT_SELF, 1, NULL, &t), 0);
    CHECK_EQ(t.span_ns, 120);
    CHECK(row(&t, "h") == NULL);
    CHECK(row(&t, "f") && row(&t, "f")->calls == 1 && row(&t, "f")->total_ns == 100);
    CHECK(row(&t, "main") && row(&t, "main")->total_ns == 120);
    pt_agg_table_free(&t);
    pt_agg_step_t list[8];
    size_t n = 0;
    CHECK_EQ(pt_agg_step_list(agg, 0, list, 8, &n), 0);
    CHECK_EQ(n, 3);
    CHECK(list[0].number == 1 && list[0].dur_ns == 35 && list[0].end_ns == 35);
    CHECK(list[1].number == 2 && list[1].dur_ns == 5);
    CHECK(list[2].number == 3 && list[2].dur_ns == 120 && list[2].end_ns == 160);

    /* step 4: 1160 -> 1200 with a gap of 7 events inside it */
    ev(&s, PT_EV_RETURN, H, 2);
    ev(&s, PT_EV_CALL, F, 5);
    lost(&s, 7, 10);
    frame(&s, MAIN, 0, 1);
    frame(&s, F, 1, 0);
    ev(&s, PT_EV_RETURN, F, 9);
    step_mark(&s, 10);
    flush(&s);
    CHECK_EQ(pt_agg_steps(agg, 0, &st), 0);
    CHECK_EQ(st.last_ns, 40);
    CHECK_EQ(st.last_lost, 7);
    CHECK_EQ(pt_agg_table(agg, &lastq, PT_AGG_SORT_SELF, 1, NULL, &t), 0);
    CHECK_EQ(t.unobserved_ns, 10);
    CHECK_EQ(t.unobserved_lost, 7);
    CHECK(row(&t, "f") && row(&t, "f")->calls == 1 && row(&t, "f")->self_ns == 10);
    CHECK(row(&t, "h") && row(&t, "h")->calls == 1 && row(&t, "h")->self_ns == 2); /* called after mark 3 */
    CHECK(row(&t, "main") && row(&t, "main")->self_ns == 3 + 5 + 10);
    CHECK(row(&t, "main") && row(&t, "main")->total_ns == 40 - 10); /* the gap is nobody's */
    pt_agg_table_free(&t);

    /* a second thread that steps later is the stepping thread; thread 1 still answers */
    stream_t s2 = {.agg = agg, .thread = 2, .now = 1300};
    ev(&s2, PT_EV_CALL, A, 0);
    step_mark(&s2, 50);
    flush(&s2);
    CHECK_EQ(pt_agg_steps(agg, 0, &st), 0);
    CHECK(st.thread == 2 && st.count == 1 && st.last_ns == 50 && st.threads == 2);
    CHECK_EQ(pt_agg_steps(agg, 1, &st), 0);
    CHECK(st.thread == 1 && st.count == 4);
    CHECK_EQ(pt_agg_steps(agg, 99, &st), -ENOENT);
    CHECK_EQ(pt_agg_tree(agg, &lastq, &tr), 0);
    CHECK_EQ(tchild(&tr, 0, A)->self_ns, 50);
    pt_agg_tree_free(&tr);
    pt_agg_destroy(agg);
}

/* Past PT_AGG_STEPS_KEPT steps the oldest leave the list and the percentiles,
 * counted (folded); count, min, max, mean and the slowest still cover all. */
static void test_steps_bound(void)
{
    pt_agg_t *agg = new_agg();
    setup_syms(agg);
    stream_t s = {.agg = agg, .thread = 1, .now = 1000};
    ev(&s, PT_EV_CALL, MAIN, 0);
    const uint64_t total = PT_AGG_STEPS_KEPT + 50;
    for (uint64_t k = 1; k <= total; k++) {
        ev(&s, PT_EV_CALL, F, 1);
        ev(&s, PT_EV_RETURN, F, k == 7 ? 100000 : 1 + k % 3);
        step_mark(&s, 1);
    }
    flush(&s);
    pt_agg_steps_t st;
    CHECK_EQ(pt_agg_steps(agg, 0, &st), 0);
    CHECK_EQ(st.count, total);
    CHECK_EQ(st.kept, PT_AGG_STEPS_KEPT);
    CHECK_EQ(st.folded, 50);
    CHECK_EQ(st.slowest, 7); /* folded out of the list, still the slowest */
    CHECK_EQ(st.max_ns, 100002);
    CHECK_EQ(st.min_ns, 3);
    CHECK_EQ(st.median_ns, 4);
    pt_agg_step_t *list = calloc(PT_AGG_STEPS_KEPT, sizeof *list);
    size_t n = 0;
    CHECK_EQ(pt_agg_step_list(agg, 0, list, PT_AGG_STEPS_KEPT, &n), 0);
    CHECK_EQ(n, PT_AGG_STEPS_KEPT);
    CHECK_EQ(list[0].number, 51);
    CHECK_EQ(list[PT_AGG_STEPS_KEPT - 1].number, total);
    CHECK_EQ(list[0].dur_ns, 3 + 51 % 3);
    CHECK_EQ(list[PT_AGG_STEPS_KEPT - 1].end_ns, s.now - 1000);
    free(list);
    pt_agg_tree_t tr;
    CHECK_EQ(pt_agg_tree(agg, &(pt_agg_query_t){.last_step = 1}, &tr), 0);
    CHECK_EQ(tr.nodes[0].incl_ns, 3 + total % 3);
    pt_agg_tree_free(&tr);
    pt_agg_destroy(agg);
}

int main(void)
{
    test_steps();
    test_steps_bound();
    test_tree_budget();
    test_id_all_ones();
    test_direct_recursion();
    test_mutual_recursion();
    test_self_and_inclusive();
    test_yield_resume();
    test_lost_and_frames();
    test_cpu_time();
    test_cpu_time_around_frame_runs();
    test_frames_at_start_and_open_time();
    test_window();
    test_window_ring_grows();
    test_robustness();
    test_threads_merge();
    test_hide_idle();
    test_feed_bytes();
    test_volume();
    test_hostile_ticks();
    test_unmatched_returns_linear();
    test_timeline();
    test_stacks();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("agg: all tests passed\n");
    return 0;
}
