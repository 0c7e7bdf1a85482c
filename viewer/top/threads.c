/*
 * ThreadsPanel: the thread list that T opens. A job such as http.server under
 * load has had thousands of threads, almost all of them ended; stepping through
 * them one key at a time found nothing. The list shows "all threads" first,
 * then the live threads (first seen first), then the ended ones (the latest
 * first), each with its number, OS tid, state, CPU% and CPU time (from /proc;
 * n/a for a recording) and events; Enter shows the thread under the cursor, a
 * goes back to all threads, Esc (or T) closes the list unchanged.
 *
 * The cursor is a thread number, not a row, so it stays on its thread while
 * threads start and end under it.
 */
#include <curses.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "crt.h"
#include "text.h"

typedef struct ThreadsRows {
    size_t *index;   /* pt_agg_thread_at indices in list order (row i + 1; row 0 is "all threads") */
    size_t count;
    size_t live;
} ThreadsRows;

/* The list's order: live threads first seen first, then ended ones latest first. */
static int ThreadsPanel_rows(App *app, ThreadsRows *r)
{
    size_t n = pt_agg_thread_count(app->agg);
    memset(r, 0, sizeof *r);
    r->index = malloc((n ? n : 1) * sizeof *r->index);
    if (!r->index)
        return -1;
    pt_agg_thread_info_t ti;
    for (size_t i = 0; i < n; i++)
        if (!pt_agg_thread_at(app->agg, i, &ti) && !ti.ended)
            r->index[r->count++] = i;
    r->live = r->count;
    for (size_t i = n; i-- > 0;)
        if (!pt_agg_thread_at(app->agg, i, &ti) && ti.ended)
            r->index[r->count++] = i;
    return 0;
}

/* The row of thread number `thread` (0 and unknown numbers: the "all threads" row). */
static int ThreadsPanel_rowOf(App *app, const ThreadsRows *r, uint64_t thread)
{
    pt_agg_thread_info_t ti;
    for (size_t i = 0; thread && i < r->count; i++)
        if (!pt_agg_thread_at(app->agg, r->index[i], &ti) && ti.thread == thread)
            return (int)i + 1;
    return 0;
}

static uint64_t ThreadsPanel_threadAt(App *app, const ThreadsRows *r, int row)
{
    pt_agg_thread_info_t ti;
    if (row <= 0 || (size_t)row > r->count || pt_agg_thread_at(app->agg, r->index[row - 1], &ti))
        return 0;
    return ti.thread;
}

void ThreadsPanel_open(App *app)
{
    if (app->panel == &ThreadsPanel_class)
        return;
    app->threads_back = app->panel;
    app->threads_cursor = app->thread;
    app->threads_scroll = 0;
    app->panel = &ThreadsPanel_class;
}

static void ThreadsPanel_close(App *app)
{
    app->panel = app->threads_back ? app->threads_back : &TablePanel_class;
}

static void ThreadsPanel_draw(App *app, int top, int rows, int cols)
{
    ThreadsRows r;
    if (rows < 3 || ThreadsPanel_rows(app, &r))
        return;
    char line[1024];
    snprintf(line, sizeof line, " pick a thread: %zu live, %zu ended  (Enter: show it, a: all threads, Esc: back)",
             r.live, r.count - r.live);
    CRT_line(top, cols, A_BOLD, line);
    snprintf(line, sizeof line, " %8s %9s %-7s %7s %9s %10s  %s", "THREAD", "OS_TID", "STATE", "CPU%", "CPU TIME",
             "EVENTS", "NAME");
    CRT_line(top + 1, cols, CRT_attr(CRT_C_HEADER), line);
    int body = rows - 2, total = (int)r.count + 1;
    int cursor = ThreadsPanel_rowOf(app, &r, app->threads_cursor);
    app->threads_cursor = ThreadsPanel_threadAt(app, &r, cursor); /* an unknown thread: the "all" row */
    if (cursor < app->threads_scroll)
        app->threads_scroll = cursor;
    if (cursor >= app->threads_scroll + body)
        app->threads_scroll = cursor - body + 1;
    if (app->threads_scroll > total - body)
        app->threads_scroll = total - body > 0 ? total - body : 0;
    for (int i = 0; i < body && app->threads_scroll + i < total; i++) {
        int row = app->threads_scroll + i;
        int attr = row == cursor ? CRT_attr(CRT_C_SELECTED) : (int)A_NORMAL;
        if (row == 0) {
            snprintf(line, sizeof line, " %8s %9s %-7s %7s %9s %10llu  %s", "all", "", "", "", "",
                     (unsigned long long)app->counters.events_seen, "(every thread)");
        } else {
            pt_agg_thread_info_t ti;
            if (pt_agg_thread_at(app->agg, r.index[row - 1], &ti))
                continue;
            const CpuMeter *m = Cpu_thread(&app->cpu, ti.thread);
            char pct[32], secs[32] = "n/a", name[256];
            App_cpuText(app, m, pct, sizeof pct);
            if (app->cpu.pid && m && CpuMeter_seconds(m) >= 0)
                snprintf(secs, sizeof secs, "%.2fs", CpuMeter_seconds(m));
            else if (app->cpu.pid)
                snprintf(secs, sizeof secs, "-");
            Text_escape(ti.name, name, sizeof name); /* whole: the line is cut to the screen */
            snprintf(line, sizeof line, " %8llu %9llu %-7s %7s %9s %10llu  %s%s", (unsigned long long)ti.thread,
                     (unsigned long long)ti.os_tid, ti.ended ? "ended" : "live", pct, secs,
                     (unsigned long long)ti.events, name, ti.thread == app->thread ? "  (shown)" : "");
            if (!ti.ended && row == (int)r.live && r.live < r.count)
                attr |= A_UNDERLINE; /* the last live thread: the ended ones follow */
        }
        CRT_line(top + 2 + i, cols, attr, line);
    }
    if (app->threads_scroll + body < total) { /* say that the list goes on */
        snprintf(line, sizeof line, " ... %d more below (Down, PgDn, End)", total - app->threads_scroll - body);
        CRT_line(top + rows - 1, cols, A_BOLD, line);
    }
    free(r.index);
}

static PanelResult ThreadsPanel_onKey(App *app, int ch)
{
    ThreadsRows r;
    if (ThreadsPanel_rows(app, &r))
        return PANEL_IGNORED;
    int total = (int)r.count + 1, page = LINES - 6 > 1 ? LINES - 6 : 1;
    int cursor = ThreadsPanel_rowOf(app, &r, app->threads_cursor);
    PanelResult res = PANEL_HANDLED | PANEL_REDRAW;
    switch (ch) {
    case KEY_UP: case 'k': cursor = cursor > 0 ? cursor - 1 : 0; break;
    case KEY_DOWN: case 'j': cursor = cursor + 1 < total ? cursor + 1 : cursor; break;
    case KEY_PPAGE: cursor = cursor > page ? cursor - page : 0; break;
    case KEY_NPAGE: cursor = cursor + page < total ? cursor + page : total - 1; break;
    case KEY_HOME: cursor = 0; break;
    case KEY_END: cursor = total - 1; break;
    case '\n': case '\r': case KEY_ENTER: case 'a':
        app->thread = ch == 'a' ? 0 : ThreadsPanel_threadAt(app, &r, cursor);
        app->table_selected = app->table_scroll = 0;
        app->sel_len = app->zoom_len = app->flame_scroll = 0;
        ThreadsPanel_close(app);
        res = PANEL_HANDLED | PANEL_REFRESH;
        break;
    case 27: case 'T':
        ThreadsPanel_close(app);
        res = PANEL_HANDLED | PANEL_REFRESH;
        break;
    default:
        res = PANEL_IGNORED;
        break;
    }
    if (!(res & PANEL_REFRESH))
        app->threads_cursor = ThreadsPanel_threadAt(app, &r, cursor);
    free(r.index);
    return res;
}

const PanelClass ThreadsPanel_class = {
    .name = "threads",
    .help = "arrows/PgUp/PgDn:move Enter:show a:all Esc:back",
    .draw = ThreadsPanel_draw,
    .onKey = ThreadsPanel_onKey,
};
