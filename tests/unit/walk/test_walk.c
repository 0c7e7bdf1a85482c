/*
 * pt_walk unit tests: streams in, the exact sequence of enter/exit callbacks
 * out, written as a transcript ("+f", "-f", "+s/c" for a continued span...).
 * They pin the rules of walk.h: missed returns, unmatched returns, Frame runs
 * after a gap, one call per reported frame, and the rule for spans.
 */
#include "../check.h"
#include "viewer/core/u64map_internal.h"
#include "viewer/core/walk.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

enum { MAIN = 1, F, G, H, ENTER, BEGIN, EXIT, END, S = 100 };
static const char *names[] = {"?", "main", "f", "g", "h", "enter", "begin", "exit", "end"};

static char transcript[8192];

static const char *nm(uint32_t id) { return id == S ? "s" : id < 9 ? names[id] : "x"; }

static void put(const char *s)
{
    size_t n = strlen(transcript);
    snprintf(transcript + n, sizeof transcript - n, "%s%s", n ? " " : "", s);
}

static int on_enter(void *ctx, pt_walk_thread_t *th, uint32_t id, uint64_t t, unsigned flags)
{
    (void)ctx;
    char b[64];
    snprintf(b, sizeof b, "+%s%s%s@%llu", nm(id), flags & PT_WALK_CONTINUED ? "/c" : "",
             flags & PT_WALK_REPORTED ? "/r" : "", (unsigned long long)t);
    put(b);
    CHECK(th->depth > 0);
    return 0;
}

static int on_leave(void *ctx, pt_walk_thread_t *th, uint32_t id, uint64_t t, unsigned flags)
{
    (void)ctx;
    (void)th;
    char b[64];
    snprintf(b, sizeof b, "-%s%s@%llu", nm(id), flags & PT_WALK_CONTINUED ? "/c" : "", (unsigned long long)t);
    put(b);
    return 0;
}

static int on_gap(void *ctx, pt_walk_thread_t *th, uint64_t t, uint64_t lost)
{
    (void)ctx;
    (void)th;
    char b[64];
    snprintf(b, sizeof b, "gap%llu@%llu", (unsigned long long)lost, (unsigned long long)t);
    put(b);
    return 0;
}

static int on_instant(void *ctx, pt_walk_thread_t *th, uint32_t id, uint64_t t, unsigned flags)
{
    (void)ctx;
    (void)th;
    char b[64];
    snprintf(b, sizeof b, "%s%s@%llu", flags & PT_EVF_STEP ? "step:" : "mark:", nm(id), (unsigned long long)t);
    put(b);
    return 0;
}

static const pt_walk_ops_t ops = {.enter = on_enter, .exit = on_leave, .gap = on_gap};

static pt_event_t E(uint64_t t, uint8_t kind, uint32_t id, uint16_t aux)
{
    return (pt_event_t){.ticks = t, .id = id, .aux = aux, .kind = kind};
}

static void run(const pt_event_t *ev, size_t n, const char *want, pt_walk_counters_t *c)
{
    pt_walk_t *w = NULL;
    transcript[0] = 0;
    CHECK_EQ(pt_walk_create(&ops, NULL, &w), 0);
    CHECK_EQ(pt_walk_events(w, 1, ev, n), 0);
    CHECK_EQ(pt_walk_finish(w), 0);
    CHECKF(!strcmp(transcript, want), "\n got  %s\n want %s", transcript, want);
    if (c)
        pt_walk_counters(w, c);
    pt_walk_destroy(w);
}

#define N(a) (sizeof(a) / sizeof(a)[0])

/* A missed return closes the frames above; a return with no call is counted. */
static void test_missed_and_unmatched(void)
{
    pt_event_t ev[] = {E(1, PT_EV_RETURN, H, 0), E(2, PT_EV_CALL, MAIN, 0), E(3, PT_EV_CALL, F, 0),
                       E(4, PT_EV_CALL, G, 0), E(5, PT_EV_RETURN, F, 0), E(6, PT_EV_RETURN, MAIN, 0)};
    pt_walk_counters_t c;
    run(ev, N(ev), "+main@2 +f@3 +g@4 -g@5 -f@5 -main@6", &c);
    CHECK_EQ(c.unmatched, 1);
}

/* pytrace.span's helpers: begin is written inside enter/begin, end inside
 * exit/end. The span outlives its helpers (rule 1) and takes exit/end along
 * when it ends (rule 2): strict nesting, one call for the span. */
static void test_span_rule(void)
{
    pt_event_t ev[] = {
        E(1, PT_EV_CALL, MAIN, 0),     E(2, PT_EV_CALL, ENTER, 0),   E(3, PT_EV_CCALL, BEGIN, 0),
        E(4, PT_EV_SPAN_BEGIN, S, 0),  E(5, PT_EV_CRETURN, BEGIN, 0), E(6, PT_EV_RETURN, ENTER, 0),
        E(7, PT_EV_CALL, F, 0),        E(8, PT_EV_RETURN, F, 0),      E(9, PT_EV_CALL, EXIT, 0),
        E(10, PT_EV_CCALL, END, 0),    E(11, PT_EV_SPAN_END, S, 0),   E(12, PT_EV_CRETURN, END, 0),
        E(13, PT_EV_RETURN, EXIT, 0),  E(14, PT_EV_SPAN_END, S, 0),   E(15, PT_EV_RETURN, MAIN, 0),
    };
    pt_walk_counters_t c;
    run(ev, N(ev),
        "+main@1 +enter@2 +begin@3 +s@4 -s/c@5 -begin@5 +s/c@5 -s/c@6 -enter@6 +s/c@6 +f@7 -f@8 +exit@9 "
        "+end@10 -end/c@11 -exit/c@11 -s@11 +exit/c@11 +end/c@11 -end@12 -exit@13 -main@15",
        &c);
    CHECK_EQ(c.unmatched, 0);
    CHECK_EQ(c.unmatched_spans, 1);
}

/* Lost, then Frame records: the common prefix stays, the rest closes at the
 * Lost tick, reported frames enter (flag r) at their ticks; spans survive. */
static void test_gap_and_frames(void)
{
    pt_event_t ev[] = {
        E(1, PT_EV_CALL, MAIN, 0), E(2, PT_EV_SPAN_BEGIN, S, 0), E(3, PT_EV_CALL, F, 0),
        E(4, PT_EV_CALL, G, 0),    E(10, PT_EV_LOST, 7, 0),       E(11, PT_EV_FRAME, MAIN, 0),
        E(11, PT_EV_FRAME, F, 1),  E(11, PT_EV_FRAME, H, 2),      E(12, PT_EV_RETURN, H, 0),
        E(13, PT_EV_LOST, 1, 0),   E(14, PT_EV_CALL, G, 0),
    };
    pt_walk_counters_t c;
    run(ev, N(ev),
        "+main@1 +s@2 +f@3 +g@4 gap7@10 -g@10 +h/r@11 -h@12 gap1@13 -f@13 -s/c@13 -main@13 +s/c@13 +g@14 -g@14 "
        "-s@14",
        &c);
    CHECK_EQ(c.lost, 8);
    /* Frame records at the start of a stream open what was already running */
    pt_event_t ev2[] = {E(5, PT_EV_FRAME, MAIN, 0), E(5, PT_EV_FRAME, F, 1), E(6, PT_EV_RETURN, F, 0)};
    run(ev2, N(ev2), "+main/r@5 +f/r@5 -f@6 -main@6", NULL);
}

/* A million returns without calls on a deep stack: linear (the open counts
 * answer each at once); a test that would take minutes if it searched. */
static void test_linear(void)
{
    static pt_event_t ev[1 << 20];
    size_t n = 0;
    for (uint32_t i = 0; i < 50000; i++)
        ev[n++] = E(i, PT_EV_CALL, 1000 + i, 0);
    while (n < N(ev))
        ev[n] = E(60000, PT_EV_RETURN, 7, 0), n++;
    pt_walk_t *w = NULL;
    pt_walk_ops_t none = {0};
    CHECK_EQ(pt_walk_create(&none, NULL, &w), 0);
    CHECK_EQ(pt_walk_events(w, 1, ev, n), 0);
    pt_walk_counters_t c;
    pt_walk_counters(w, &c);
    CHECK_EQ(c.unmatched, N(ev) - 50000);
    pt_walk_destroy(w);
}

/* Threads of a multi-process stream are (process, number): the same number in
 * two processes is two threads with their own stacks, also when the two pairs
 * fall on one hash key (walk.c chains them), and the plain calls are process 0. */
static void test_processes(void)
{
    pt_walk_t *w = NULL;
    int rc;
    CHECK_EQ(pt_walk_create(&ops, NULL, &w), 0);
    /* (1, 7) and (2, n2) share walk.c's key: n ^ mix(p | 1 << 63) */
    const uint64_t n2 = 7 ^ pt_u64map_mix(1ull | 1ull << 63) ^ pt_u64map_mix(2ull | 1ull << 63);
    pt_walk_thread_t *a = pt_walk_proc_thread(w, 1, 7, &rc);
    pt_walk_thread_t *b = pt_walk_proc_thread(w, 2, n2, &rc);
    pt_walk_thread_t *c = pt_walk_proc_thread(w, 2, 7, &rc);
    pt_walk_thread_t *d = pt_walk_thread(w, 7, &rc);
    CHECK(a && b && c && d);
    CHECK(a != b && a != c && b != c && d != a && d != c);
    CHECK_EQ(a->process, 1);
    CHECK_EQ(b->process, 2);
    CHECK_EQ(b->number, n2);
    CHECK_EQ(d->process, 0);
    CHECK(pt_walk_proc_thread(w, 1, 7, &rc) == a); /* found again, through the chain */
    CHECK(pt_walk_proc_thread(w, 2, n2, &rc) == b);
    CHECK(pt_walk_proc_thread(w, 2, 7, &rc) == c);
    CHECK_EQ(pt_walk_thread_count(w), 4);
    transcript[0] = 0;
    pt_event_t f[] = {E(1, PT_EV_CALL, F, 0)}, g[] = {E(2, PT_EV_CALL, G, 0)}, r[] = {E(3, PT_EV_RETURN, F, 0)};
    CHECK_EQ(pt_walk_proc_events(w, 1, 7, f, 1), 0);
    CHECK_EQ(pt_walk_proc_events(w, 2, n2, g, 1), 0);
    CHECK_EQ(pt_walk_proc_events(w, 2, n2, r, 1), 0); /* f is not open in this thread: ignored */
    CHECK_EQ(a->depth, 1);
    CHECK_EQ(b->depth, 1);
    CHECK_EQ(pt_walk_proc_thread_end(w, 1, 7, 5), 0);
    CHECK_EQ(a->depth, 0);
    CHECK_EQ(b->depth, 1);
    CHECKF(!strcmp(transcript, "+f@1 +g@2 -f@5"), "\n got  %s", transcript);
    pt_walk_counters_t cnt;
    pt_walk_counters(w, &cnt);
    CHECK_EQ(cnt.unmatched, 1);
    pt_walk_destroy(w);
}

/* The thread's stack as pt_walk_frames gives it: "name:kind[/r]@start ...",
 * kind p (Python), c (C), s (span); then "?" if not known to be whole. */
static const char *frames_of(pt_walk_t *w, pt_walk_thread_t *th)
{
    static char out[1024];
    pt_walk_frame_t f[16];
    uint32_t d = pt_walk_frames(w, th, f, 16);
    CHECK_EQ(pt_walk_frames(w, th, NULL, 0), d);
    out[0] = 0;
    for (uint32_t i = 0; i < d && i < 16; i++) {
        size_t n = strlen(out);
        snprintf(out + n, sizeof out - n, "%s%s:%c%s@%llu", i ? " " : "", nm(f[i].id),
                 "pcs"[f[i].kind < 3 ? f[i].kind : 0], f[i].reported ? "/r" : "",
                 (unsigned long long)f[i].start_ticks);
    }
    if (!th->stack_known) {
        size_t n = strlen(out);
        snprintf(out + n, sizeof out - n, "%s?", n ? " " : "");
    }
    return out;
}

static void feed_check(pt_walk_t *w, pt_walk_thread_t *th, pt_event_t e, const char *want)
{
    CHECK_EQ(pt_walk_events(w, th->number, &e, 1), 0);
    const char *got = frames_of(w, th);
    CHECKF(!strcmp(got, want), "after kind %u id %s@%llu\n got  %s\n want %s", e.kind, nm(e.id),
           (unsigned long long)e.ticks, got, want);
}

/* pt_walk_frames: the stack the walk holds, with kinds and start ticks; spans
 * in it (where pytrace.span's helpers leave them), C calls in progress, the
 * outcome of a Frame run while it is read, and whether it is the whole stack. */
static void test_frames(void)
{
    pt_walk_t *w = NULL;
    pt_walk_ops_t none = {0};
    int rc;
    CHECK_EQ(pt_walk_create(&none, NULL, &w), 0);
    pt_walk_thread_t *th = pt_walk_thread(w, 1, &rc);
    REQUIRE(th != NULL);
    CHECK_EQ(th->stack_known, 0); /* met mid-stream, as far as the walk knows */
    th->stack_known = 1;          /* the consumer read its first event */
    feed_check(w, th, E(1, PT_EV_CALL, MAIN, 0), "main:p@1");
    feed_check(w, th, E(2, PT_EV_CALL, ENTER, 0), "main:p@1 enter:p@2");
    feed_check(w, th, E(3, PT_EV_CCALL, BEGIN, 0), "main:p@1 enter:p@2 begin:c@3");
    feed_check(w, th, E(4, PT_EV_SPAN_BEGIN, S, 0), "main:p@1 enter:p@2 begin:c@3 s:s@4");
    feed_check(w, th, E(5, PT_EV_CRETURN, BEGIN, 0), "main:p@1 enter:p@2 s:s@4");
    feed_check(w, th, E(6, PT_EV_RETURN, ENTER, 0), "main:p@1 s:s@4"); /* the span keeps its start */
    feed_check(w, th, E(7, PT_EV_CALL, F, 0), "main:p@1 s:s@4 f:p@7");
    feed_check(w, th, E(8, PT_EV_CALL, G, 0), "main:p@1 s:s@4 f:p@7 g:p@8");
    /* a gap: the stack is not known; the span outlives it */
    feed_check(w, th, E(10, PT_EV_LOST, 3, 0), "s:s@4 ?");
    /* a Frame run: what matches stays (with its start), what it has not
     * confirmed is not shown, spans survive */
    feed_check(w, th, E(11, PT_EV_FRAME, MAIN, 0), "main:p@1 s:s@4");
    feed_check(w, th, E(11, PT_EV_FRAME, F, 1), "main:p@1 s:s@4 f:p@7");
    pt_event_t c = E(11, PT_EV_FRAME, H, 2);
    c.flags = PT_EVF_C_FUNCTION;
    feed_check(w, th, c, "main:p@1 s:s@4 f:p@7 h:c/r@11");
    feed_check(w, th, E(12, PT_EV_CRETURN, H, 0), "main:p@1 s:s@4 f:p@7");
    feed_check(w, th, E(13, PT_EV_SPAN_END, S, 0), "main:p@1 f:p@7");
    CHECK_EQ(pt_walk_thread_end(w, 1, 14), 0);
    CHECKF(!strcmp(frames_of(w, th), ""), "after ThreadEnd: %s", frames_of(w, th));

    /* a thread met mid-stream: returns of unseen calls are ignored, the stack
     * is not whole until a Frame run reports it */
    pt_walk_thread_t *t2 = pt_walk_thread(w, 2, &rc);
    REQUIRE(t2 != NULL);
    feed_check(w, t2, E(20, PT_EV_RETURN, H, 0), "?");
    feed_check(w, t2, E(21, PT_EV_CALL, G, 0), "g:p@21 ?");
    feed_check(w, t2, E(22, PT_EV_FRAME, MAIN, 0), "main:p/r@22");
    feed_check(w, t2, E(22, PT_EV_FRAME, F, 1), "main:p/r@22 f:p/r@22");
    feed_check(w, t2, E(23, PT_EV_CALL, G, 0), "main:p/r@22 f:p/r@22 g:p@23");
    /* a second run starts at depth 0: it replaces the stack, not appends to it */
    feed_check(w, t2, E(24, PT_EV_FRAME, MAIN, 0), "main:p/r@22");
    feed_check(w, t2, E(24, PT_EV_FRAME, F, 1), "main:p/r@22 f:p/r@22");
    feed_check(w, t2, E(24, PT_EV_FRAME, G, 2), "main:p/r@22 f:p/r@22 g:p@23");
    feed_check(w, t2, E(24, PT_EV_FRAME, MAIN, 0), "main:p/r@22");
    feed_check(w, t2, E(24, PT_EV_FRAME, H, 1), "main:p/r@22 h:p/r@24");
    feed_check(w, t2, E(25, PT_EV_CALL, F, 0), "main:p/r@22 h:p/r@24 f:p@25");
    pt_walk_frame_t one;
    CHECK_EQ(pt_walk_frames(w, t2, &one, 1), 3); /* the depth; only cap written */
    CHECK_EQ(one.id, MAIN);
    pt_walk_destroy(w);
}

/* Events that name a symbol never announced (walk.h): counted per thread and
 * in all, per process (ids are per process), Lost records (a count in id), id 0
 * (the producer's "unknown") and bad kinds not; dense and sparse ids alike;
 * only once pt_walk_check_symbols was called; still walked. */
static void test_unannounced(void)
{
    pt_walk_t *w = NULL;
    int rc;
    pt_walk_counters_t c;
    const uint32_t BIG = 0x7FFFFFF0u;
    CHECK_EQ(pt_walk_create(&ops, NULL, &w), 0);
    pt_event_t f[] = {E(1, PT_EV_CALL, F, 0), E(2, PT_EV_RETURN, F, 0)};
    CHECK_EQ(pt_walk_proc_symbol(w, 0, G), 0); /* not checking: ignored */
    CHECK_EQ(pt_walk_events(w, 1, f, 2), 0);
    pt_walk_counters(w, &c);
    CHECK_EQ(c.unannounced, 0);
    pt_walk_destroy(w);

    CHECK_EQ(pt_walk_create(&ops, NULL, &w), 0);
    pt_walk_check_symbols(w);
    CHECK_EQ(pt_walk_proc_symbol(w, 0, MAIN), 0);
    CHECK_EQ(pt_walk_proc_symbol(w, 0, F), 0);
    CHECK_EQ(pt_walk_proc_symbol(w, 0, BIG), 0); /* past the bitmap */
    CHECK_EQ(pt_walk_proc_symbol(w, 0, F), 0);   /* again: no harm */
    CHECK_EQ(pt_walk_proc_symbol(w, 1, G), 0);
    transcript[0] = 0;
    pt_event_t p0[] = {
        E(1, PT_EV_CALL, MAIN, 0),
        E(2, PT_EV_CALL, G, 0),          /* G is process 1's: counted */
        E(3, PT_EV_RETURN, G, 0),        /* counted */
        E(4, PT_EV_CALL, BIG, 0),
        E(5, PT_EV_RETURN, BIG, 0),
        E(6, PT_EV_LOST, 0xFFFFFFFFu, 0),/* a count, not an id */
        E(7, PT_EV_FRAME, MAIN, 0),
        E(7, PT_EV_FRAME, UINT32_MAX, 1),/* counted */
        E(8, PT_EV_MARK, 0, 0),          /* id 0: the producer's unknown */
        E(9, 200, H, 0),                 /* a bad kind: bad_events */
        E(10, PT_EV_CCALL, H, 0),        /* counted */
        E(11, PT_EV_CRETURN, H, 0),      /* counted */
    };
    CHECK_EQ(pt_walk_events(w, 1, p0, sizeof p0 / sizeof *p0), 0);
    pt_event_t p1[] = {E(1, PT_EV_CALL, G, 0), E(2, PT_EV_CALL, F, 0) /* F is process 0's */};
    CHECK_EQ(pt_walk_proc_events(w, 1, 1, p1, 2), 0);
    CHECK_EQ(pt_walk_proc_symbol(w, 0, H), 0); /* announced late: from now on it is named */
    pt_event_t h[] = {E(12, PT_EV_CALL, H, 0)};
    CHECK_EQ(pt_walk_events(w, 1, h, 1), 0);
    pt_walk_counters(w, &c);
    CHECK_EQ(c.unannounced, 6);
    CHECK_EQ(c.bad_events, 1);
    CHECK_EQ(pt_walk_thread(w, 1, &rc)->unannounced, 5);
    CHECK_EQ(pt_walk_proc_thread(w, 1, 1, &rc)->unannounced, 1);
    /* still walked: the unannounced ids entered and left like any */
    CHECKF(!strcmp(transcript, "+main@1 +g@2 -g@3 +x@4 -x@5 gap4294967295@6 +x/r@7 +h@10 -h@11 +g@1 +f@2 +h@12"),
           "\n got  %s", transcript);
    pt_walk_destroy(w);
}

/* A Mark reaches instant() with its flags (a Step mark ends a step: agg.h STEPS), the
 * stack unchanged: frames open at it go on. */
static void test_marks_and_steps(void)
{
    pt_event_t ev[] = {E(1, PT_EV_CALL, MAIN, 0), E(2, PT_EV_MARK, H, 0), E(3, PT_EV_CALL, F, 0),
                       E(4, PT_EV_MARK, G, 0), E(5, PT_EV_RETURN, F, 0), E(6, PT_EV_RETURN, MAIN, 0)};
    ev[3].flags = PT_EVF_STEP;
    const pt_walk_ops_t with_marks = {.enter = on_enter, .exit = on_leave, .instant = on_instant, .gap = on_gap};
    pt_walk_t *w = NULL;
    transcript[0] = 0;
    CHECK_EQ(pt_walk_create(&with_marks, NULL, &w), 0);
    CHECK_EQ(pt_walk_events(w, 1, ev, N(ev)), 0);
    CHECK_EQ(pt_walk_finish(w), 0);
    const char *want = "+main@1 mark:h@2 +f@3 step:g@4 -f@5 -main@6";
    CHECKF(!strcmp(transcript, want), "\n got  %s\n want %s", transcript, want);
    pt_walk_destroy(w);
}

int main(void)
{
    test_marks_and_steps();
    test_unannounced();
    test_frames();
    test_processes();
    test_missed_and_unmatched();
    test_span_rule();
    test_gap_and_frames();
    test_linear();
    return failures != 0;
}
