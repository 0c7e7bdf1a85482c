/* libFuzzer target: the aggregation (viewer/core/agg.c) on any stream of events:
 * the input is a few parameters (ticks per second, base ticks, window) then
 * 16-byte records cut into chunks of several threads; every query is run. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "viewer/core/agg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 24)
        return 0;
    uint64_t tps, base;
    uint32_t window_tenths, threads;
    memcpy(&tps, data, 8);
    memcpy(&base, data + 8, 8);
    memcpy(&window_tenths, data + 16, 4);
    memcpy(&threads, data + 20, 4);
    data += 24;
    size -= 24;
    pt_agg_t *agg = NULL;
    if (pt_agg_create(&(pt_agg_config_t){.slice_ns = 1000000ull + (window_tenths % 7) * 50000000ull,
                                         .slice_count = 1 + window_tenths % 200,
                                         .task_nodes = 1 + threads % 64}, /* small: [other] nodes */
                      &agg) != 0)
        return 0;
    pt_fb_msg_t m = {.type = PT_MSG_PROCESS_INFO};
    m.u.process_info.ticks_per_second = tps;
    m.u.process_info.base_ticks = base;
    (void)pt_agg_feed_msg(agg, &m);
    for (uint32_t id = 1; id < 40; id++) {
        pt_fb_msg_t s = {.type = PT_MSG_SYMBOL};
        s.u.symbol = (pt_fb_symbol_t){.id = id, .kind = PT_SYM_PY_FUNCTION, .name = {"f", 1}, .file = {"f.py", 4}};
        (void)pt_agg_feed_msg(agg, &s);
    }
    for (uint32_t id = 40; id < 48; id++) { /* asyncio tasks (viewer/core/tasks.h) */
        pt_fb_msg_t s = {.type = PT_MSG_SYMBOL};
        s.u.symbol = (pt_fb_symbol_t){.id = id, .kind = PT_SYM_TASK, .name = {"t", 1}, .file = {"co", 2}, .line = id};
        (void)pt_agg_feed_msg(agg, &s);
    }
    size_t n = size / sizeof(pt_event_t);
    pt_event_t *ev = n ? (pt_event_t *)malloc(n * sizeof *ev) : NULL;
    if (n && !ev) {
        pt_agg_destroy(agg);
        return 0;
    }
    if (n)
        memcpy(ev, data, n * sizeof *ev);
    size_t chunk = 1 + (threads % 97);
    for (size_t i = 0; i < n; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        (void)pt_agg_feed_events(agg, 1 + (i / chunk) % (1 + threads % 5), ev + i, k);
    }
    pt_agg_query_t queries[] = {{.window_seconds = 0}, {.window_seconds = window_tenths / 10.0}, {.thread = 1},
                                {.last_step = 1}, {.thread = 2, .last_step = 1}};
    for (size_t q = 0; q < sizeof queries / sizeof queries[0]; q++) {
        pt_agg_table_t t = {0};
        if (pt_agg_table(agg, &queries[q], (int)(window_tenths % 6), 1, NULL, &t) == 0)
            pt_agg_table_free(&t);
        pt_agg_tree_t tree = {0};
        if (pt_agg_tree(agg, &queries[q], &tree) == 0)
            pt_agg_tree_free(&tree);
        pt_agg_timeline_t tl = {0};
        if (pt_agg_timeline(agg, &queries[q], threads, 1 + window_tenths % 13, &tl) == 0)
            pt_agg_timeline_free(&tl);
    }
    pt_agg_tasks_t ts;
    if (pt_agg_tasks(agg, &ts) == 0)
        pt_agg_tasks_free(&ts);
    for (uint32_t task = 40; task < 49; task++) { /* each task, then (48) every task side by side */
        pt_agg_tree_t tree = {0};
        if (pt_agg_task_tree(agg, task == 48 ? PT_AGG_NONE : task, &tree) == 0)
            pt_agg_tree_free(&tree);
    }
    pt_agg_counters_t c;
    pt_agg_counters(agg, &c);
    pt_agg_steps_t st;
    (void)pt_agg_steps(agg, 0, &st);
    pt_agg_step_t list[64];
    size_t nl = 0;
    (void)pt_agg_step_list(agg, 1, list, 64, &nl);
    free(ev);
    pt_agg_destroy(agg);
    return 0;
}
