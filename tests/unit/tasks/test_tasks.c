/*
 * asyncio tasks in the reading core (viewer/core/tasks.h, walk.h TASKS), fed
 * through pt_agg as every view is: hand-built streams with one tick = one ns
 * and exact expectations (logical calls, run and wait time, states, awaits,
 * malformed records, the done tasks' budget).
 */
#include "../check.h"
#include "viewer/core/agg.h"
#include "viewer/core/tasks.h"
#include "viewer/core/walk.h"

#include <stdio.h>
#include <string.h>

typedef struct stream {
    pt_agg_t *agg;
    uint64_t now;
    pt_event_t ev[4096];
    size_t n;
} stream_t;

static void flush(stream_t *s)
{
    if (s->n)
        CHECK_EQ(pt_agg_feed_events(s->agg, 1, s->ev, s->n), 0);
    s->n = 0;
}

static void evx(stream_t *s, uint8_t kind, uint32_t id, uint16_t aux, uint8_t flags, uint64_t advance)
{
    s->now += advance;
    if (s->n == sizeof s->ev / sizeof s->ev[0])
        flush(s);
    s->ev[s->n++] = (pt_event_t){.ticks = s->now, .id = id, .aux = aux, .kind = kind, .flags = flags};
}

static void ev(stream_t *s, uint8_t kind, uint32_t id, uint64_t advance) { evx(s, kind, id, 0, 0, advance); }

static void symbol(pt_agg_t *agg, uint32_t id, uint8_t kind, const char *name, const char *file, uint32_t line)
{
    pt_fb_msg_t m = {.type = PT_MSG_SYMBOL};
    m.u.symbol = (pt_fb_symbol_t){.id = id, .kind = kind, .name = {name, (uint32_t)strlen(name)},
                                  .file = {file, (uint32_t)strlen(file)}, .line = line};
    CHECK_EQ(pt_agg_feed_msg(agg, &m), 0);
}

enum { RUN_FOREVER = 1, RUN_ONCE = 2, HANDLE_RUN = 3, WORKER = 10, FETCH = 11, SLEEP = 12, MAIN = 13,
       T1 = 100, T2 = 101, T3 = 102, L_SLEEP = 200 };

static stream_t *new_stream_with(const pt_agg_config_t *cfg)
{
    static stream_t s;
    memset(&s, 0, sizeof s);
    CHECK_EQ(pt_agg_create(cfg, &s.agg), 0);
    pt_fb_msg_t m = {.type = PT_MSG_PROCESS_INFO};
    m.u.process_info.ticks_per_second = 1000000000ull;
    CHECK_EQ(pt_agg_feed_msg(s.agg, &m), 0);
    symbol(s.agg, RUN_FOREVER, PT_SYM_PY_FUNCTION, "BaseEventLoop.run_forever", "base_events.py", 1);
    symbol(s.agg, RUN_ONCE, PT_SYM_PY_FUNCTION, "BaseEventLoop._run_once", "base_events.py", 2);
    symbol(s.agg, HANDLE_RUN, PT_SYM_PY_FUNCTION, "Handle._run", "events.py", 3);
    symbol(s.agg, WORKER, PT_SYM_PY_FUNCTION, "worker", "t.py", 10);
    symbol(s.agg, FETCH, PT_SYM_PY_FUNCTION, "fetch", "t.py", 20);
    symbol(s.agg, SLEEP, PT_SYM_PY_FUNCTION, "sleep", "tasks.py", 30);
    symbol(s.agg, MAIN, PT_SYM_PY_FUNCTION, "main", "t.py", 40);
    symbol(s.agg, T1, PT_SYM_TASK, "worker-1", "worker", 1);
    symbol(s.agg, T2, PT_SYM_TASK, "worker-2", "worker", 2);
    symbol(s.agg, T3, PT_SYM_TASK, "main-task", "main", 3);
    symbol(s.agg, L_SLEEP, PT_SYM_LABEL, "asyncio.sleep", "", 0);
    ev(&s, PT_EV_CALL, RUN_FOREVER, 0);
    ev(&s, PT_EV_CALL, RUN_ONCE, 1);
    return &s;
}

static stream_t *new_stream(void) { return new_stream_with(NULL); }

static const pt_agg_task_t *task_named(const pt_agg_tasks_t *t, const char *name)
{
    for (size_t i = 0; i < t->count; i++)
        if (!strcmp(t->tasks[i].name, name))
            return &t->tasks[i];
    fprintf(stderr, "task %s missing\n", name);
    failures++;
    return NULL;
}

static const pt_agg_task_fn_t *fn_named(const pt_agg_task_t *k, const char *name)
{
    for (uint32_t i = 0; k && i < k->fn_count; i++)
        if (!strcmp(k->fns[i].name, name))
            return &k->fns[i];
    fprintf(stderr, "function %s missing\n", name);
    failures++;
    static const pt_agg_task_fn_t none;
    return &none;
}

/* One step of a task under the loop's Handle._run: body() writes its frames. */
static void step_begin(stream_t *s, uint32_t task)
{
    ev(s, PT_EV_CALL, HANDLE_RUN, 5);
    ev(s, PT_EV_TASK_STEP, task, 1);
}

static void step_end(stream_t *s, uint32_t task, uint16_t state)
{
    evx(s, PT_EV_TASK_SUSPEND, task, state, 0, 1);
}

static void after_step(stream_t *s) { ev(s, PT_EV_RETURN, HANDLE_RUN, 1); }

/* worker: three steps, fetch called twice (each suspends once in sleep). The
 * whole-program table keeps cProfile's count (a resumption is a call); the
 * task's table counts logical calls. */
static void test_logical_calls_and_times(void)
{
    stream_t *s = new_stream();
    /* step 1: 10 + 10 + 10 + 3 ticks inside the step */
    step_begin(s, T1);
    uint64_t st1 = s->now;
    ev(s, PT_EV_CALL, WORKER, 10);
    ev(s, PT_EV_CALL, FETCH, 10);
    ev(s, PT_EV_CALL, SLEEP, 10);
    ev(s, PT_EV_YIELD, SLEEP, 1);
    ev(s, PT_EV_YIELD, FETCH, 1);
    ev(s, PT_EV_YIELD, WORKER, 1);
    step_end(s, T1, PT_TASK_PENDING);
    uint64_t run = s->now - st1, wait_from = s->now;
    evx(s, PT_EV_TASK_AWAIT, L_SLEEP, PT_AWAIT_SLEEP, 0, 0);
    after_step(s);
    ev(s, PT_EV_CALL, HANDLE_RUN, 1000); /* another handle runs meanwhile */
    ev(s, PT_EV_RETURN, HANDLE_RUN, 100);
    /* step 2: the sleep ends, fetch returns, a second fetch starts and sleeps */
    step_begin(s, T1);
    uint64_t st2 = s->now, wait = s->now - wait_from;
    ev(s, PT_EV_RESUME, WORKER, 2);
    ev(s, PT_EV_RESUME, FETCH, 2);
    ev(s, PT_EV_RESUME, SLEEP, 2);
    ev(s, PT_EV_RETURN, SLEEP, 2);
    ev(s, PT_EV_RETURN, FETCH, 2);
    ev(s, PT_EV_CALL, FETCH, 2);
    ev(s, PT_EV_CALL, SLEEP, 2);
    ev(s, PT_EV_YIELD, SLEEP, 2);
    ev(s, PT_EV_YIELD, FETCH, 2);
    ev(s, PT_EV_YIELD, WORKER, 2);
    step_end(s, T1, PT_TASK_PENDING);
    run += s->now - st2;
    wait_from = s->now;
    evx(s, PT_EV_TASK_AWAIT, L_SLEEP, PT_AWAIT_SLEEP, 0, 0);
    after_step(s);
    /* step 3: everything returns */
    ev(s, PT_EV_MARK, L_SLEEP, 500); /* time moves; a mark changes no stack */
    step_begin(s, T1);
    uint64_t st3 = s->now;
    wait += s->now - wait_from;
    ev(s, PT_EV_RESUME, WORKER, 3);
    ev(s, PT_EV_RESUME, FETCH, 3);
    ev(s, PT_EV_RESUME, SLEEP, 3);
    ev(s, PT_EV_RETURN, SLEEP, 3);
    ev(s, PT_EV_RETURN, FETCH, 3);
    ev(s, PT_EV_RETURN, WORKER, 3);
    step_end(s, T1, PT_TASK_DONE);
    run += s->now - st3;
    after_step(s);
    flush(s);

    pt_agg_tasks_t t;
    CHECK_EQ(pt_agg_tasks(s->agg, &t), 0);
    CHECK_EQ(t.count, 1);
    CHECK_EQ(t.malformed, 0);
    const pt_agg_task_t *k = task_named(&t, "worker-1");
    if (k) {
        CHECK_EQ(k->serial, 1);
        CHECK(!strcmp(k->coro, "worker"));
        CHECK_EQ(k->state, PT_TASK_DONE);
        CHECK_EQ(k->steps, 3);
        CHECK_EQ(k->run_ns, run);
        CHECK_EQ(k->wait_ns, wait);
        CHECK_EQ(k->wait_by_ns[PT_AWAIT_SLEEP], wait);
        CHECK_EQ(k->await_count, 0); /* done: it waits on nothing */
        CHECK_EQ(fn_named(k, "worker")->calls, 1);
        CHECK_EQ(fn_named(k, "fetch")->calls, 2);
        CHECK_EQ(fn_named(k, "sleep")->calls, 2);
        CHECK_EQ(k->fn_count, 3); /* the loop's frames below the step are not the task's */
        /* worker's inclusive time: its running pieces in all 3 steps, not its waits */
        uint64_t worker_incl = 23 + 18 + 15;
        CHECKF(fn_named(k, "worker")->incl_ns == worker_incl, "worker incl %llu want %llu",
               (unsigned long long)fn_named(k, "worker")->incl_ns, (unsigned long long)worker_incl);
        uint64_t excl = 0;
        for (uint32_t i = 0; i < k->fn_count; i++)
            excl += k->fns[i].excl_ns;
        CHECK_EQ(excl, worker_incl); /* every tick inside worker goes to one of its frames */
    }
    pt_agg_tasks_free(&t);

    /* the task's own tree: worker-1 -> worker -> fetch -> sleep, one node per path (fetch's
     * second call and every resumption are the same node), logical calls, running time */
    pt_agg_tree_t tr;
    CHECK_EQ(pt_agg_task_tree(s->agg, T1, &tr), 0);
    CHECK_EQ(tr.count, 5); /* root, the task, worker, fetch, sleep */
    if (tr.count == 5) {
        const pt_agg_tnode_t *task = &tr.nodes[tr.nodes[0].first_child];
        CHECK_EQ(task->symbol, T1);
        CHECK_EQ(task->next_sibling, PT_AGG_NONE);
        const pt_agg_tnode_t *w = &tr.nodes[task->first_child], *f = &tr.nodes[w->first_child],
                             *sl = &tr.nodes[f->first_child];
        CHECK_EQ(w->symbol, WORKER);
        CHECK_EQ(f->symbol, FETCH);
        CHECK_EQ(sl->symbol, SLEEP);
        CHECK_EQ(w->calls, 1);
        CHECK_EQ(f->calls, 2);
        CHECK_EQ(sl->calls, 2);
        CHECK_EQ(w->incl_ns, 23 + 18 + 15); /* as the table's worker: running pieces only */
        CHECK_EQ(tr.nodes[0].incl_ns, 23 + 18 + 15);
        CHECK_EQ(task->self_ns, 0);
        /* each node's own time is its function's (one path each here) */
        pt_agg_tasks_t t2;
        CHECK_EQ(pt_agg_tasks(s->agg, &t2), 0);
        const pt_agg_task_t *k2 = task_named(&t2, "worker-1");
        CHECK_EQ(w->self_ns, fn_named(k2, "worker")->excl_ns);
        CHECK_EQ(f->self_ns, fn_named(k2, "fetch")->excl_ns);
        CHECK_EQ(sl->self_ns, fn_named(k2, "sleep")->excl_ns);
        CHECK_EQ(t2.tree_nodes, 3);
        CHECK_EQ(t2.tree_folded, 0);
        pt_agg_tasks_free(&t2);
        CHECK_EQ(tr.span_ns, run);
    }
    pt_agg_tree_free(&tr);
    CHECK_EQ(pt_agg_task_of_serial(s->agg, 1), T1); /* worker-1's serial (its symbol's line) */
    CHECK_EQ(pt_agg_task_of_serial(s->agg, 77), PT_AGG_NONE);
    CHECK_EQ(pt_agg_task_tree(s->agg, 999, &tr), 0); /* not a task: the root alone */
    CHECK_EQ(tr.count, 1);
    pt_agg_tree_free(&tr);

    /* the whole-program table keeps cProfile's counts: every Resume is a call */
    pt_agg_table_t tab = {0};
    pt_agg_query_t q = {0};
    CHECK_EQ(pt_agg_table(s->agg, &q, PT_AGG_SORT_NAME, 0, "fetch", &tab), 0);
    CHECK_EQ(tab.count, 1);
    if (tab.count)
        CHECK_EQ(tab.rows[0].calls, 4);
    pt_agg_table_free(&tab);
    pt_agg_destroy(s->agg);
}

/* A gather: main-task waits on two tasks; its current awaits are the edges of
 * the await graph, its wait is charged to Task; a later step clears them. */
static void test_gather_awaits(void)
{
    stream_t *s = new_stream();
    step_begin(s, T3);
    ev(s, PT_EV_CALL, MAIN, 1);
    ev(s, PT_EV_YIELD, MAIN, 1);
    step_end(s, T3, PT_TASK_PENDING);
    evx(s, PT_EV_TASK_AWAIT, T1, PT_AWAIT_TASK, 0, 0);
    evx(s, PT_EV_TASK_AWAIT, T2, PT_AWAIT_TASK, 0, 0);
    uint64_t from = s->now;
    after_step(s);
    step_begin(s, T1);
    step_end(s, T1, PT_TASK_DONE);
    after_step(s);
    step_begin(s, T2);
    step_end(s, T2, PT_TASK_FAILED);
    after_step(s);
    flush(s);
    pt_agg_tasks_t t;
    CHECK_EQ(pt_agg_tasks(s->agg, &t), 0);
    CHECK_EQ(t.count, 3);
    const pt_agg_task_t *m = task_named(&t, "main-task");
    if (m) {
        CHECK_EQ(m->state, PT_TASK_PENDING);
        CHECK_EQ(m->await_count, 2);
        if (m->await_count == 2) {
            CHECK_EQ(m->awaits[0].kind, PT_AWAIT_TASK);
            CHECK(!strcmp(m->awaits[0].name, "worker-1"));
            CHECK(!strcmp(m->awaits[1].name, "worker-2"));
        }
        CHECK_EQ(m->wait_by_ns[PT_AWAIT_TASK], s->now - from); /* still waiting: up to the latest tick */
    }
    const pt_agg_task_t *w2 = task_named(&t, "worker-2");
    if (w2)
        CHECK_EQ(w2->state, PT_TASK_FAILED);
    pt_agg_tasks_free(&t);
    /* its next step: no awaits any more */
    step_begin(s, T3);
    ev(s, PT_EV_RESUME, MAIN, 1);
    ev(s, PT_EV_RETURN, MAIN, 1);
    step_end(s, T3, PT_TASK_DONE);
    after_step(s);
    flush(s);
    CHECK_EQ(pt_agg_tasks(s->agg, &t), 0);
    m = task_named(&t, "main-task");
    if (m) {
        CHECK_EQ(m->await_count, 0);
        CHECK_EQ(m->state, PT_TASK_DONE);
        CHECK_EQ(fn_named(m, "main")->calls, 1);
    }
    pt_agg_tasks_free(&t);
    pt_agg_destroy(s->agg);
}

/* Damaged streams: every bad task record is counted and ignored, none crashes. */
static void test_malformed(void)
{
    stream_t *s = new_stream();
    step_end(s, T1, PT_TASK_PENDING);                    /* 1: a suspend with no step */
    evx(s, PT_EV_TASK_AWAIT, L_SLEEP, PT_AWAIT_SLEEP, 0, 1); /* 2: an await with no suspend */
    step_begin(s, T1);
    ev(s, PT_EV_CALL, WORKER, 1);
    ev(s, PT_EV_TASK_STEP, T2, 1);                       /* 3: nested: T1's step ends first */
    step_end(s, T1, PT_TASK_PENDING);                    /* 4: T2 runs, not T1 */
    step_end(s, T2, 9);                                  /* 5: unknown state */
    step_end(s, T2, PT_TASK_PENDING);
    evx(s, PT_EV_TASK_AWAIT, L_SLEEP, 77, 0, 0);         /* 6: unknown await kind */
    evx(s, PT_EV_TASK_AWAIT, L_SLEEP, PT_AWAIT_TASK, 0, 0); /* 7: a Task await naming a label */
    ev(s, PT_EV_TASK_STEP, WORKER, 1);                   /* 8: a step of a function symbol */
    step_end(s, WORKER, PT_TASK_DONE);                   /* ignored: its step was */
    ev(s, PT_EV_TASK_STEP, 0, 1);                        /* 9: id 0 */
    ev(s, PT_EV_TASK_STEP, 5000, 1);                     /* 10: never announced */
    evx(s, PT_EV_LOST, 3, 0, 0, 1);                      /* ends that step */
    evx(s, PT_EV_TASK_STEP, T1, 0, PT_EVF_SYNTHETIC, 1);   /* a synthetic step: time counts */
    evx(s, PT_EV_FRAME, RUN_FOREVER, 0, 0, 0);
    evx(s, PT_EV_FRAME, RUN_ONCE, 1, 0, 0);
    evx(s, PT_EV_FRAME, WORKER, 2, 0, 0);
    ev(s, PT_EV_RESUME, FETCH, 1);
    ev(s, PT_EV_YIELD, FETCH, 1);
    step_end(s, T1, PT_TASK_CANCELLED);
    flush(s);
    pt_agg_tasks_t t;
    CHECK_EQ(pt_agg_tasks(s->agg, &t), 0);
    CHECKF(t.malformed == 10, "malformed %llu", (unsigned long long)t.malformed);
    const pt_agg_task_t *k = task_named(&t, "worker-1");
    if (k) {
        CHECK_EQ(k->state, PT_TASK_CANCELLED);
        CHECK_EQ(k->steps, 2);
        CHECK_EQ(fn_named(k, "worker")->calls, 1);
        CHECK_EQ(k->fn_count, 1); /* a synthetic step's frames are not the task's table */
    }
    pt_agg_tasks_free(&t);
    pt_agg_destroy(s->agg);
}

/* Many short tasks: the done ones past the budget fold into counted totals. */
static void test_done_tasks_fold(void)
{
    stream_t *s = new_stream();
    const uint32_t n = 3 * PT_TASKS_DEFAULT_DONE_KEPT + 17;
    for (uint32_t i = 0; i < n; i++) {
        symbol(s->agg, 1000 + i, PT_SYM_TASK, "short", "worker", i + 10);
        step_begin(s, 1000 + i);
        ev(s, PT_EV_CALL, WORKER, 1);
        ev(s, PT_EV_RETURN, WORKER, 1);
        step_end(s, 1000 + i, PT_TASK_DONE);
        after_step(s);
        flush(s);
    }
    pt_agg_tasks_t t;
    CHECK_EQ(pt_agg_tasks(s->agg, &t), 0);
    CHECK_EQ(t.seen, n);
    CHECK(t.count < 2 * PT_TASKS_DEFAULT_DONE_KEPT);
    CHECK(t.count >= PT_TASKS_DEFAULT_DONE_KEPT);
    CHECK_EQ(t.folded + t.count, n);
    uint64_t steps = t.folded_steps, run = t.folded_run_ns;
    for (size_t i = 0; i < t.count; i++) {
        steps += t.tasks[i].steps;
        run += t.tasks[i].run_ns;
    }
    CHECK_EQ(steps, n);
    CHECK_EQ(run, 3ull * n); /* each step: call +1, return +1, suspend +1 */
    /* the newest are kept */
    CHECK_EQ(t.tasks[t.count - 1].serial, n - 1 + 10);
    pt_agg_tasks_free(&t);
    pt_agg_destroy(s->agg);
}

/* ---- the observer (tasks.h, Timelines): fed by a walk, as export.c feeds it ---- */

typedef struct obs_log {
    pt_tasks_t *tasks;
    char text[2048];
} obs_log_t;

static void logf_(obs_log_t *l, const char *s)
{
    size_t n = strlen(l->text);
    snprintf(l->text + n, sizeof l->text - n, "%s%s", n ? " " : "", s);
}

static int o_begin(void *ctx, const pt_walk_thread_t *th, uint32_t task, uint32_t depth, uint32_t id, uint64_t ticks,
                   unsigned flags)
{
    (void)th;
    (void)flags;
    char b[64];
    snprintf(b, sizeof b, "B%u:%u@%u=%u", task, depth, id, (unsigned)ticks);
    logf_(ctx, b);
    return 0;
}

static int o_end(void *ctx, const pt_walk_thread_t *th, uint32_t task, uint32_t depth, uint64_t ticks)
{
    (void)th;
    char b[64];
    snprintf(b, sizeof b, "E%u:%u=%u", task, depth, (unsigned)ticks);
    logf_(ctx, b);
    return 0;
}

static int o_step(void *ctx, const pt_walk_thread_t *th, uint32_t task, uint64_t ticks, unsigned flags)
{
    (void)th;
    char b[64];
    snprintf(b, sizeof b, "S%u%s=%u", task, flags & PT_EVF_SYNTHETIC ? "s" : "", (unsigned)ticks);
    logf_(ctx, b);
    return 0;
}

static int o_suspend(void *ctx, const pt_walk_thread_t *th, uint32_t task, uint8_t state, uint64_t ticks,
                     unsigned flags)
{
    (void)th;
    char b[64];
    snprintf(b, sizeof b, "P%u/%u%s=%u", task, state, flags & PT_EVF_SYNTHETIC ? "s" : "", (unsigned)ticks);
    logf_(ctx, b);
    return 0;
}

static int o_await(void *ctx, const pt_walk_thread_t *th, uint32_t task, uint8_t kind, uint32_t id, uint64_t ticks)
{
    (void)th;
    char b[64];
    snprintf(b, sizeof b, "A%u/%u:%u=%u", task, kind, id, (unsigned)ticks);
    logf_(ctx, b);
    return 0;
}

static const pt_tasks_observer_t obs_ops = {.call_begin = o_begin, .call_end = o_end, .step = o_step,
                                            .suspend = o_suspend, .await = o_await};

static int w_enter(void *c, pt_walk_thread_t *th, uint32_t id, uint64_t t, unsigned f)
{
    return pt_tasks_on_enter(((obs_log_t *)c)->tasks, th, id, t, f);
}
static int w_exit(void *c, pt_walk_thread_t *th, uint32_t id, uint64_t t, unsigned f)
{
    return pt_tasks_on_exit(((obs_log_t *)c)->tasks, th, id, t, f);
}
static int w_task(void *c, pt_walk_thread_t *th, uint8_t kind, uint32_t id, uint16_t aux, uint64_t t, unsigned f)
{
    /* ids >= 100 are Task symbols here */
    int is_task = (kind == PT_EV_TASK_AWAIT && aux != PT_AWAIT_TASK) || id >= 100;
    return pt_tasks_on_task(((obs_log_t *)c)->tasks, th, kind, id, aux, t, f, is_task);
}

static void test_observer_logical_calls(void)
{
    static obs_log_t l;
    memset(&l, 0, sizeof l);
    CHECK_EQ(pt_tasks_create(0, &l.tasks), 0);
    pt_tasks_set_observer(l.tasks, &obs_ops, &l);
    pt_walk_t *w;
    const pt_walk_ops_t ops = {.enter = w_enter, .exit = w_exit, .task = w_task};
    CHECK_EQ(pt_walk_create(&ops, &l, &w), 0);
    const pt_event_t e[] = {
        {.ticks = 1, .id = RUN_ONCE, .kind = PT_EV_CALL},
        /* step 1: worker -> sleep, both yield; it waits on a sleep */
        {.ticks = 2, .id = T1, .kind = PT_EV_TASK_STEP},
        {.ticks = 3, .id = WORKER, .kind = PT_EV_CALL},
        {.ticks = 4, .id = SLEEP, .kind = PT_EV_CALL},
        {.ticks = 5, .id = SLEEP, .kind = PT_EV_YIELD},
        {.ticks = 6, .id = WORKER, .kind = PT_EV_YIELD},
        {.ticks = 7, .id = T1, .aux = PT_TASK_PENDING, .kind = PT_EV_TASK_SUSPEND},
        {.ticks = 7, .id = L_SLEEP, .aux = PT_AWAIT_SLEEP, .kind = PT_EV_TASK_AWAIT},
        {.ticks = 7, .id = FETCH, .aux = PT_AWAIT_TASK, .kind = PT_EV_TASK_AWAIT}, /* not a task: ignored */
        /* step 2: resumed where it left (no call), sleep returns, worker calls fetch and yields */
        {.ticks = 10, .id = T1, .kind = PT_EV_TASK_STEP},
        {.ticks = 11, .id = WORKER, .kind = PT_EV_RESUME},
        {.ticks = 12, .id = SLEEP, .kind = PT_EV_RESUME},
        {.ticks = 13, .id = SLEEP, .kind = PT_EV_RETURN},
        {.ticks = 14, .id = FETCH, .kind = PT_EV_CALL},
        {.ticks = 15, .id = FETCH, .kind = PT_EV_YIELD},
        {.ticks = 16, .id = WORKER, .kind = PT_EV_YIELD},
        {.ticks = 17, .id = T1, .aux = PT_TASK_PENDING, .kind = PT_EV_TASK_SUSPEND},
        {.ticks = 17, .id = T2, .aux = PT_AWAIT_TASK, .kind = PT_EV_TASK_AWAIT},
        /* step 3: worker resumed, but not fetch: fetch's call is gone; worker returns: done */
        {.ticks = 20, .id = T1, .kind = PT_EV_TASK_STEP},
        {.ticks = 21, .id = WORKER, .kind = PT_EV_RESUME},
        {.ticks = 22, .id = SLEEP, .kind = PT_EV_CALL},
        {.ticks = 23, .id = SLEEP, .kind = PT_EV_RETURN},
        {.ticks = 24, .id = WORKER, .kind = PT_EV_RETURN},
        {.ticks = 25, .id = T1, .aux = PT_TASK_DONE, .kind = PT_EV_TASK_SUSPEND},
        /* damage: a suspend with no step, a step of a function id (not a task) */
        {.ticks = 26, .id = T2, .aux = PT_TASK_PENDING, .kind = PT_EV_TASK_SUSPEND},
        {.ticks = 27, .id = FETCH, .kind = PT_EV_TASK_STEP},
        {.ticks = 28, .id = FETCH, .aux = PT_TASK_DONE, .kind = PT_EV_TASK_SUSPEND},
    };
    CHECK_EQ(pt_walk_events(w, 1, e, sizeof e / sizeof e[0]), 0);
    const char *want = "S100=2 B100:0@10=3 B100:1@12=4 P100/0=7 A100/2:200=7"
                       " S100=10 E100:1=13 B100:1@11=14 P100/0=17 A100/1:101=17"
                       " S100=20 E100:1=22 B100:1@12=22 E100:1=23 E100:0=24 P100/1=25";
    if (strcmp(l.text, want)) {
        fprintf(stderr, "observer:\n got  %s\n want %s\n", l.text, want);
        failures++;
    }
    pt_walk_destroy(w);
    pt_tasks_destroy(l.tasks);
}

/* A generator resumed by its caller within one step is one logical call (the
 * frame under it is the same activation as when it yielded): main, a fresh call
 * of this step, consumes fetch (yields twice) -> 1 call. A sibling call between
 * two resumptions cuts the chain (the task's stack is a stack): worker, resumed
 * after sleep ran at its depth, counts 2. A new fetch after the first returned
 * is a new call. Without the activation rule (the frame under it had to be one
 * that continued a call) fetch counted 4: each resumption a call. */
static void test_generator_within_a_step(void)
{
    stream_t *s = new_stream();
    step_begin(s, T3);
    ev(s, PT_EV_CALL, MAIN, 1);
    ev(s, PT_EV_CALL, FETCH, 1);
    ev(s, PT_EV_YIELD, FETCH, 1);
    ev(s, PT_EV_RESUME, FETCH, 1);
    ev(s, PT_EV_YIELD, FETCH, 1);
    ev(s, PT_EV_RESUME, FETCH, 1);
    ev(s, PT_EV_RETURN, FETCH, 1);
    ev(s, PT_EV_CALL, WORKER, 1);
    ev(s, PT_EV_YIELD, WORKER, 1);
    ev(s, PT_EV_CALL, SLEEP, 1);
    ev(s, PT_EV_RETURN, SLEEP, 1);
    ev(s, PT_EV_RESUME, WORKER, 1);
    ev(s, PT_EV_RETURN, WORKER, 1);
    ev(s, PT_EV_CALL, FETCH, 1);
    ev(s, PT_EV_RETURN, FETCH, 1);
    ev(s, PT_EV_RETURN, MAIN, 1);
    step_end(s, T3, PT_TASK_DONE);
    after_step(s);
    flush(s);
    pt_agg_tasks_t t;
    CHECK_EQ(pt_agg_tasks(s->agg, &t), 0);
    const pt_agg_task_t *k = task_named(&t, "main-task");
    if (k) {
        CHECK_EQ(fn_named(k, "main")->calls, 1);
        CHECK_EQ(fn_named(k, "fetch")->calls, 2);
        CHECK_EQ(fn_named(k, "worker")->calls, 2);
        CHECK_EQ(fn_named(k, "sleep")->calls, 1);
    }
    pt_agg_tasks_free(&t);
    pt_agg_destroy(s->agg);
}

/* Every task's tree side by side, and the node budget: past it a new path is an
 * [other] node under its parent that counts the calls folded into it. */
static void test_task_trees_and_budget(void)
{
    stream_t *s = new_stream_with(&(pt_agg_config_t){.task_nodes = 4});
    /* worker-1: worker -> fetch -> sleep (3 nodes) */
    step_begin(s, T1);
    ev(s, PT_EV_CALL, WORKER, 1);
    ev(s, PT_EV_CALL, FETCH, 1);
    ev(s, PT_EV_CALL, SLEEP, 1);
    ev(s, PT_EV_RETURN, SLEEP, 1);
    ev(s, PT_EV_RETURN, FETCH, 1);
    ev(s, PT_EV_RETURN, WORKER, 1);
    step_end(s, T1, PT_TASK_DONE);
    after_step(s);
    /* worker-2: worker (node 4, the last in the budget), then fetch -> sleep twice and
     * main: past the budget, all in one [other] under worker (5 calls folded) */
    step_begin(s, T2);
    ev(s, PT_EV_CALL, WORKER, 1);
    for (int i = 0; i < 2; i++) {
        ev(s, PT_EV_CALL, FETCH, 1);
        ev(s, PT_EV_CALL, SLEEP, 1);
        ev(s, PT_EV_RETURN, SLEEP, 10);
        ev(s, PT_EV_RETURN, FETCH, 1);
    }
    ev(s, PT_EV_CALL, MAIN, 1);
    ev(s, PT_EV_RETURN, MAIN, 1);
    ev(s, PT_EV_RETURN, WORKER, 1);
    step_end(s, T2, PT_TASK_DONE);
    after_step(s);
    flush(s);

    pt_agg_tasks_t t;
    CHECK_EQ(pt_agg_tasks(s->agg, &t), 0);
    CHECK_EQ(t.tree_nodes, 5); /* 4 real, one [other] */
    CHECK_EQ(t.tree_folded, 5);
    const pt_agg_task_t *k2 = task_named(&t, "worker-2");
    pt_agg_tree_t tr;
    CHECK_EQ(pt_agg_task_tree(s->agg, PT_AGG_NONE, &tr), 0);
    CHECK_EQ(tr.count, 1 + 2 + 5);
    uint32_t tasks = 0;
    uint64_t sum = 0;
    for (uint32_t c = tr.nodes[0].first_child; c != PT_AGG_NONE; c = tr.nodes[c].next_sibling) {
        tasks++;
        sum += tr.nodes[c].incl_ns;
        CHECK(tr.nodes[c].symbol == T1 || tr.nodes[c].symbol == T2);
        if (tr.nodes[c].symbol != T2)
            continue;
        const pt_agg_tnode_t *w = &tr.nodes[tr.nodes[c].first_child];
        CHECK_EQ(w->symbol, WORKER);
        const pt_agg_tnode_t *o = &tr.nodes[w->first_child];
        CHECK(o->other && o->symbol == PT_AGG_OTHER);
        CHECK_EQ(o->calls, 5);
        CHECK_EQ(o->first_child, PT_AGG_NONE);
        CHECK_EQ(o->next_sibling, PT_AGG_NONE);
        /* the task's running time is all in its tree: the fold loses no time */
        CHECK_EQ(tr.nodes[c].incl_ns, k2->run_ns - 2); /* less the step's first and last tick */
        uint64_t calls = 0;
        for (uint32_t i = 0; k2 && i < k2->fn_count; i++)
            calls += k2->fns[i].calls;
        CHECK_EQ(calls, w->calls + o->calls); /* the table's calls, all in the tree */
    }
    CHECK_EQ(tasks, 2);
    CHECK_EQ(tr.nodes[0].incl_ns, sum);
    pt_agg_tree_free(&tr);
    pt_agg_tasks_free(&t);
    pt_agg_destroy(s->agg);
}

/* Folding done tasks gives their nodes back and takes their [other] calls with them:
 * tree_nodes and tree_folded stay those of the kept tasks' trees (what
 * pt_agg_task_tree shows), whatever was folded before. */
static void test_tree_counts_after_folding(void)
{
    stream_t *s = new_stream_with(&(pt_agg_config_t){.task_nodes = 1});
    const uint32_t n = 2 * PT_TASKS_DEFAULT_DONE_KEPT + 5;
    for (uint32_t i = 0; i < n; i++) { /* worker -> fetch: past the one-node budget, in [other] */
        symbol(s->agg, 1000 + i, PT_SYM_TASK, "short", "worker", i + 10);
        step_begin(s, 1000 + i);
        ev(s, PT_EV_CALL, WORKER, 1);
        ev(s, PT_EV_CALL, FETCH, 1);
        ev(s, PT_EV_RETURN, FETCH, 1);
        ev(s, PT_EV_RETURN, WORKER, 1);
        step_end(s, 1000 + i, PT_TASK_DONE);
        after_step(s);
        flush(s);
    }
    pt_agg_tasks_t t;
    CHECK_EQ(pt_agg_tasks(s->agg, &t), 0);
    CHECK(t.folded > 0);
    pt_agg_tree_t tr;
    CHECK_EQ(pt_agg_task_tree(s->agg, PT_AGG_NONE, &tr), 0);
    uint64_t other_calls = 0;
    for (uint32_t i = 0; i < tr.count; i++)
        if (tr.nodes[i].other)
            other_calls += tr.nodes[i].calls;
    CHECK_EQ(t.tree_nodes, (uint64_t)tr.count - 1 - t.count); /* less the root and the task nodes */
    CHECK_EQ(t.tree_folded, other_calls);
    CHECK_EQ(other_calls, 2ull * t.count); /* none of the kept tasks is the first (its worker is real) */
    pt_agg_tree_free(&tr);
    pt_agg_tasks_free(&t);
    pt_agg_destroy(s->agg);
}

/* What a step runs after its coroutine frame left (asyncio's call_soon of a task that
 * yielded, an eager step's WeakSet.add) is not the task's: it counts no call in the
 * task's table and does not cut the suspended chain, so the next step's Resume of
 * worker continues the same logical call. */
static void test_after_the_coroutine_left(void)
{
    stream_t *s = new_stream();
    step_begin(s, T1);
    ev(s, PT_EV_CALL, WORKER, 1);
    ev(s, PT_EV_YIELD, WORKER, 1);
    ev(s, PT_EV_CALL, FETCH, 1);  /* bookkeeping after the coroutine left, at task depth 0 */
    ev(s, PT_EV_RETURN, FETCH, 1);
    step_end(s, T1, PT_TASK_PENDING);
    after_step(s);
    step_begin(s, T1);
    ev(s, PT_EV_RESUME, WORKER, 1);
    ev(s, PT_EV_RETURN, WORKER, 1);
    step_end(s, T1, PT_TASK_DONE);
    after_step(s);
    flush(s);
    pt_agg_tasks_t t;
    CHECK_EQ(pt_agg_tasks(s->agg, &t), 0);
    const pt_agg_task_t *k = task_named(&t, "worker-1");
    if (k) {
        CHECK_EQ(k->steps, 2);
        CHECK_EQ(fn_named(k, "worker")->calls, 1);
        CHECK_EQ(k->fn_count, 1); /* fetch ran in the step, after worker left: not the task's */
    }
    CHECK_EQ(t.malformed, 0);
    pt_agg_tasks_free(&t);
    pt_agg_destroy(s->agg);
}

/* A Lost record inside a step ends it (the walk's Synthetic Pending suspend); the
 * producer's Synthetic TaskStep of the same task right after is that step going on:
 * the task keeps 2 steps (not 3), the gap is running time, nothing is malformed. A
 * Synthetic TaskStep after frames of the loop is a step of its own. */
static void test_a_step_goes_on_after_a_gap(void)
{
    stream_t *s = new_stream();
    step_begin(s, T1);
    ev(s, PT_EV_CALL, WORKER, 1);
    evx(s, PT_EV_LOST, 7, 0, 0, 10);                     /* the step is cut */
    evx(s, PT_EV_TASK_STEP, T1, 0, PT_EVF_SYNTHETIC, 50); /* and goes on */
    evx(s, PT_EV_FRAME, RUN_FOREVER, 0, 0, 0);
    evx(s, PT_EV_FRAME, RUN_ONCE, 1, 0, 0);
    evx(s, PT_EV_FRAME, HANDLE_RUN, 2, 0, 0);
    evx(s, PT_EV_FRAME, WORKER, 3, 0, 0);
    ev(s, PT_EV_YIELD, WORKER, 5);
    step_end(s, T1, PT_TASK_PENDING);
    after_step(s);
    step_begin(s, T1);
    ev(s, PT_EV_RESUME, WORKER, 100);
    ev(s, PT_EV_RETURN, WORKER, 1);
    step_end(s, T1, PT_TASK_DONE);
    after_step(s);
    /* T2: a step, a gap, loop frames, then a Synthetic step of T2: a new step */
    step_begin(s, T2);
    evx(s, PT_EV_LOST, 7, 0, 0, 10);
    evx(s, PT_EV_FRAME, RUN_FOREVER, 0, 0, 0);
    evx(s, PT_EV_FRAME, RUN_ONCE, 1, 0, 0);
    ev(s, PT_EV_CALL, HANDLE_RUN, 1);
    evx(s, PT_EV_TASK_STEP, T2, 0, PT_EVF_SYNTHETIC, 1);
    step_end(s, T2, PT_TASK_DONE);
    after_step(s);
    flush(s);
    pt_agg_tasks_t t;
    CHECK_EQ(pt_agg_tasks(s->agg, &t), 0);
    CHECK_EQ(t.malformed, 0);
    const pt_agg_task_t *k = task_named(&t, "worker-1");
    if (k) {
        CHECK_EQ(k->steps, 2);
        CHECK_EQ(k->state, PT_TASK_DONE);
        CHECKF(k->run_ns >= 1 + 10 + 50 + 5 && k->wait_ns > 0, "run %llu wait %llu", (unsigned long long)k->run_ns,
               (unsigned long long)k->wait_ns);
        CHECKF(k->wait_ns < 50, "the gap counted as waiting: %llu", (unsigned long long)k->wait_ns);
    }
    const pt_agg_task_t *k2 = task_named(&t, "worker-2");
    if (k2)
        CHECK_EQ(k2->steps, 2);
    pt_agg_tasks_free(&t);
    pt_agg_destroy(s->agg);
}

int main(void)
{
    test_logical_calls_and_times();
    test_gather_awaits();
    test_malformed();
    test_after_the_coroutine_left();
    test_a_step_goes_on_after_a_gap();
    test_done_tasks_fold();
    test_observer_logical_calls();
    test_generator_within_a_step();
    test_task_trees_and_budget();
    test_tree_counts_after_folding();
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    return failures != 0;
}
