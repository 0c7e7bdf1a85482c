/*
 * pt_aggset unit tests: a stream of several processes (tagged messages, as the
 * hub and a recorded process tree send them) gives each process its own
 * aggregation, with the rule pytrace-top always had: the first tag seen takes
 * index 0; and a stream inventing tags without end is bounded.
 */
#include "../check.h"
#include "viewer/core/aggset.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void info(pt_aggset_t *s, uint32_t tag, uint64_t pid)
{
    pt_fb_msg_t m = {.type = PT_MSG_PROCESS_INFO, .process = tag};
    m.u.process_info.pid = pid;
    m.u.process_info.ticks_per_second = 1000000000ull;
    CHECK_EQ(pt_aggset_feed_msg(s, &m), 0);
}

static void symbol(pt_aggset_t *s, uint32_t tag, uint32_t id, const char *name)
{
    pt_fb_msg_t m = {.type = PT_MSG_SYMBOL, .process = tag};
    m.u.symbol = (pt_fb_symbol_t){.id = id, .kind = PT_SYM_PY_FUNCTION, .name = {name, (uint32_t)strlen(name)},
                                  .file = {"t.py", 4}, .line = 1};
    CHECK_EQ(pt_aggset_feed_msg(s, &m), 0);
}

/* `calls` calls of id on thread 1 of process tag, 10 ticks each. */
static void calls(pt_aggset_t *s, uint32_t tag, uint32_t id, unsigned n)
{
    pt_event_t ev[64];
    for (unsigned i = 0; i < n && i < 32; i++) {
        ev[2 * i] = (pt_event_t){.ticks = 100 + 20 * i, .id = id, .kind = PT_EV_CALL};
        ev[2 * i + 1] = (pt_event_t){.ticks = 110 + 20 * i, .id = id, .kind = PT_EV_RETURN};
    }
    pt_fb_msg_t m = {.type = PT_MSG_EVENT_CHUNK, .process = tag};
    m.u.event_chunk = (pt_fb_event_chunk_t){.thread = 1, .events = ev, .count = 2 * (n < 32 ? n : 32)};
    CHECK_EQ(pt_aggset_feed_msg(s, &m), 0);
}

static uint64_t calls_of(pt_agg_t *agg, const char *name)
{
    pt_agg_table_t t;
    pt_agg_query_t q = {0};
    uint64_t n = 0;
    REQUIRE(pt_agg_table(agg, &q, PT_AGG_SORT_NAME, 0, NULL, &t) == 0);
    for (size_t i = 0; i < t.count; i++)
        if (!strcmp(t.rows[i].name, name))
            n += t.rows[i].calls;
    pt_agg_table_free(&t);
    return n;
}

static void test_untagged_stream_is_one_process(void)
{
    pt_aggset_t *s;
    REQUIRE(pt_aggset_create(NULL, &s) == 0);
    CHECK_EQ(pt_aggset_count(s), 1);
    info(s, 0, 42);
    symbol(s, 0, 1, "main");
    calls(s, 0, 1, 3);
    CHECK_EQ(pt_aggset_count(s), 1);
    CHECK_EQ(calls_of(pt_aggset_agg(s, 0), "main"), 3);
    CHECK_EQ(pt_aggset_find_pid(s, 42), 0);
    CHECK_EQ(pt_aggset_find_tag(s, 0), 0);
    CHECK_EQ(pt_aggset_refused(s), 0);
    CHECK(pt_aggset_agg(s, 1) == NULL);
    pt_aggset_destroy(s);
}

/* Children use the same symbol ids and thread numbers as the parent for other
 * functions: each process keeps its own. */
static void test_processes_stay_apart(void)
{
    pt_aggset_t *s;
    REQUIRE(pt_aggset_create(NULL, &s) == 0);
    CHECK_EQ(pt_aggset_find_tag(s, 5), -ENOENT); /* nothing claimed yet */
    info(s, 5, 100);      /* a tagged stream: its first tag takes index 0 */
    info(s, 6, 101);
    info(s, 7, 102);
    symbol(s, 5, 1, "parent");
    symbol(s, 6, 1, "child_a");
    symbol(s, 7, 1, "child_b");
    calls(s, 6, 1, 4);
    calls(s, 5, 1, 1);
    calls(s, 7, 1, 9);
    calls(s, 6, 1, 2);
    CHECK_EQ(pt_aggset_count(s), 3);
    CHECK_EQ(pt_aggset_tag(s, 0), 5);
    CHECK_EQ(pt_aggset_tag(s, 1), 6);
    CHECK_EQ(pt_aggset_tag(s, 2), 7);
    CHECK_EQ(pt_aggset_find_tag(s, 7), 2);
    CHECK_EQ(pt_aggset_find_pid(s, 101), 1);
    CHECK_EQ(pt_aggset_find_pid(s, 999), -ENOENT);
    CHECK_EQ(calls_of(pt_aggset_agg(s, 0), "parent"), 1);
    CHECK_EQ(calls_of(pt_aggset_agg(s, 1), "child_a"), 6);
    CHECK_EQ(calls_of(pt_aggset_agg(s, 2), "child_b"), 9);
    CHECK_EQ(calls_of(pt_aggset_agg(s, 0), "child_a"), 0);
    CHECK_EQ(calls_of(pt_aggset_agg(s, 1), "parent"), 0);
    CHECK_EQ(pt_agg_thread_count(pt_aggset_agg(s, 0)), 1);
    size_t idx = 99;
    CHECK_EQ(pt_aggset_route(s, 6, &idx), 0);
    CHECK_EQ(idx, 1);
    CHECK_EQ(pt_aggset_route(s, 8, &idx), 1); /* a new one */
    CHECK_EQ(idx, 3);
    pt_aggset_destroy(s);
}

/* A hostile stream inventing a million tags: the set keeps max_processes and
 * counts the rest, every later message of a kept process still goes through. */
static void test_bounded(void)
{
    pt_aggset_t *s;
    pt_aggset_config_t cfg = {.agg = {.slice_count = 16}, .max_processes = 8};
    REQUIRE(pt_aggset_create(&cfg, &s) == 0);
    CHECK_EQ(pt_aggset_max_processes(s), 8);
    uint8_t buf[256];
    pt_fb_thread_end_t te = {.thread = 1, .ticks = 5};
    size_t len = pt_fb_build_thread_end(buf, sizeof buf, &te);
    REQUIRE(len > 0);
    uint8_t tagged[512];
    uint64_t refused = 0;
    for (uint32_t tag = 1; tag <= 1000000; tag++) {
        size_t n = pt_fb_tag(tagged, sizeof tagged, buf, len, tag);
        REQUIRE(n == len + 8);
        int rc = pt_aggset_feed_bytes(s, tagged, n);
        if (tag <= 8)
            CHECK_EQ(rc, 0);
        else if (rc != -ENOSPC)
            CHECKF(0, "tag %u: rc %d", tag, rc);
        else
            refused++;
    }
    CHECK_EQ(pt_aggset_count(s), 8);
    CHECK_EQ(refused, 1000000 - 8);
    CHECK_EQ(pt_aggset_refused(s), 1000000 - 8);
    info(s, 3, 33); /* a kept process still reads */
    CHECK_EQ(pt_aggset_find_pid(s, 33), 2);
    /* garbage is refused by the verifier, not counted as a process */
    memset(tagged, 0xa5, sizeof tagged);
    CHECK_EQ(pt_aggset_feed_bytes(s, tagged, sizeof tagged), -EBADMSG);
    CHECK_EQ(pt_aggset_refused(s), 1000000 - 8);
    pt_aggset_destroy(s);
}

int main(void)
{
    test_untagged_stream_is_one_process();
    test_processes_stay_apart();
    test_bounded();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    return 0;
}
