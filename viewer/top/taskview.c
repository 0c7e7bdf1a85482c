/*
 * TasksPanel: task mode (A), the shown process's asyncio tasks as
 * pt_agg_tasks gives them (viewer/core/tasks.h holds the rules). The task
 * table: one row per kept task (name, state, steps, running time, waiting
 * time, what it waits on now), sorted by running (r) or waiting (w) time,
 * the filter (/) keeping the tasks whose name matches. Enter shows the task
 * under the cursor: its figures, its waiting time by what it awaited, and its
 * table of logical calls (one call of a coroutine however many resumptions),
 * sorted by total time. Esc goes back one level (A leaves at once).
 *
 * f opens the flame panel on the task under the cursor (or the one shown),
 * F on every task side by side (flame.c, app->task_flame: the core's
 * pt_agg_task_tree); Esc there comes back here. The cursor is a Task symbol,
 * not a row, so it stays on its task while the order changes under it.
 */
#include <curses.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "crt.h"
#include "text.h"

#include "viewer/core/tasks.h"

static int TasksPanel_byWait;

static int TasksPanel_order(const void *x, const void *y)
{
    const pt_agg_task_t *a = *(const pt_agg_task_t *const *)x, *b = *(const pt_agg_task_t *const *)y;
    uint64_t u = TasksPanel_byWait ? a->wait_ns : a->run_ns, v = TasksPanel_byWait ? b->wait_ns : b->run_ns;
    if (u != v)
        return u < v ? 1 : -1; /* the largest first */
    return a->serial < b->serial ? -1 : a->serial > b->serial;
}

/* The rows shown, in order (pointers into app->tasks); NULL with *n 0 when none. */
static const pt_agg_task_t **TasksPanel_rows(App *app, size_t *n)
{
    *n = 0;
    const pt_agg_task_t **rows = malloc((app->tasks.count ? app->tasks.count : 1) * sizeof *rows);
    if (!rows)
        return NULL;
    for (size_t i = 0; i < app->tasks.count; i++)
        if (pt_agg_name_matches(app->tasks.tasks[i].name, app->filter))
            rows[(*n)++] = &app->tasks.tasks[i];
    TasksPanel_byWait = app->tasks_by_wait;
    qsort(rows, *n, sizeof *rows, TasksPanel_order);
    return rows;
}

static int TasksPanel_rowOf(App *app, const pt_agg_task_t **rows, size_t n)
{
    for (size_t i = 0; app->tasks_have_cursor && i < n; i++)
        if (rows[i]->symbol == app->tasks_cursor)
            return (int)i;
    return 0;
}

static const pt_agg_task_t *TasksPanel_task(App *app, uint32_t symbol)
{
    for (size_t i = 0; i < app->tasks.count; i++)
        if (app->tasks.tasks[i].symbol == symbol)
            return &app->tasks.tasks[i];
    return NULL;
}

void TasksPanel_open(App *app)
{
    if (app->panel == &TasksPanel_class)
        return;
    app->tasks_back = app->panel;
    app->tasks_open = 0;
    app->tasks_scroll = app->tasks_fn_scroll = 0;
    app->panel = &TasksPanel_class;
}

static void TasksPanel_close(App *app)
{
    app->panel = app->tasks_back ? app->tasks_back : &TablePanel_class;
    app->tasks_open = 0;
}

/* "asyncio.sleep, task worker-2" (escaped): what a pending task awaits now. */
static void TasksPanel_awaits(const pt_agg_task_t *t, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = 0;
    for (uint32_t i = 0; i < t->await_count && used + 1 < cap; i++) {
        char esc[256];
        Text_escape(t->awaits[i].name ? t->awaits[i].name : "", esc, sizeof esc);
        int w = snprintf(out + used, cap - used, "%s%s %s", i ? ", " : "", pt_tasks_await_name(t->awaits[i].kind),
                         esc);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

static void TasksPanel_drawTable(App *app, int top, int rows, int cols)
{
    size_t n;
    const pt_agg_task_t **list = TasksPanel_rows(app, &n);
    if (!list)
        return;
    char line[2048];
    const pt_agg_tasks_t *ts = &app->tasks;
    char folded[160] = "";
    if (ts->folded)
        snprintf(folded, sizeof folded, ", %llu done tasks folded (their totals kept, not their rows)",
                 (unsigned long long)ts->folded);
    char malformed[96] = "";
    if (ts->malformed)
        snprintf(malformed, sizeof malformed, ", %llu damaged task records ignored",
                 (unsigned long long)ts->malformed);
    snprintf(line, sizeof line, " TASKS (A): %llu seen, %zu shown%s%s  sorted by %s time (r: running, w: waiting)  "
             "Enter: its logical calls  Esc: back",
             (unsigned long long)ts->seen, n, folded, malformed, app->tasks_by_wait ? "waiting" : "running");
    CRT_line(top, cols, A_BOLD, line);
    if (!ts->count) {
        CRT_line(top + 1, cols, A_NORMAL,
                        " no asyncio task in this process so far (task records come from Python 3.12 and newer)");
        free(list);
        return;
    }
    snprintf(line, sizeof line, " %6s %-9s %7s %10s %10s  %-28s %-24s  %s", "ID", "STATE", "STEPS", "RUN", "WAIT",
             "NAME", "COROUTINE", "WAITING ON");
    CRT_line(top + 1, cols, CRT_attr(CRT_C_HEADER), line);
    int body = rows - 2, total = (int)n;
    int cursor = TasksPanel_rowOf(app, list, n);
    if (n) {
        app->tasks_cursor = list[cursor]->symbol;
        app->tasks_have_cursor = 1;
    }
    if (cursor < app->tasks_scroll)
        app->tasks_scroll = cursor;
    if (cursor >= app->tasks_scroll + body)
        app->tasks_scroll = cursor - body + 1;
    if (app->tasks_scroll > total - body)
        app->tasks_scroll = total - body > 0 ? total - body : 0;
    for (int i = 0; i < body && app->tasks_scroll + i < total; i++) {
        const pt_agg_task_t *t = list[app->tasks_scroll + i];
        char run[32], wait[32], name[512], fname[64], coro[512], fcoro[64], awaits[1024];
        Text_duration(t->run_ns, run, sizeof run);
        Text_duration(t->wait_ns, wait, sizeof wait);
        Text_escape(t->name ? t->name : "", name, sizeof name);
        Text_fit(name, 28, 0, fname, sizeof fname);
        Text_escape(t->coro ? t->coro : "", coro, sizeof coro);
        Text_fit(coro, 24, 1, fcoro, sizeof fcoro);
        TasksPanel_awaits(t, awaits, sizeof awaits);
        /* Text_fit counts columns, printf's width bytes: pad by hand */
        char namecol[128], corocol[128];
        snprintf(namecol, sizeof namecol, "%s%*s", fname, 28 - Text_width(fname), "");
        snprintf(corocol, sizeof corocol, "%s%*s", fcoro, 24 - Text_width(fcoro), "");
        snprintf(line, sizeof line, " %6u %-9s %7llu %10s %10s  %s %s  %s", t->serial, pt_tasks_state_name(t->state),
                 (unsigned long long)t->steps, run, wait, namecol, corocol, awaits);
        CRT_line(top + 2 + i, cols, app->tasks_scroll + i == cursor ? CRT_attr(CRT_C_SELECTED) : (int)A_NORMAL,
                        line);
    }
    if (app->tasks_scroll + body < total) {
        snprintf(line, sizeof line, " ... %d more below (Down, PgDn, End)", total - app->tasks_scroll - body);
        CRT_line(top + rows - 1, cols, A_BOLD, line);
    }
    free(list);
}

/* One task: its figures, its waiting by kind, and its logical calls by total time. */
static void TasksPanel_drawTask(App *app, const pt_agg_task_t *t, int top, int rows, int cols)
{
    char line[4096], name[512], coro[512], run[32], wait[32], awaits[1024];
    Text_escape(t->name ? t->name : "", name, sizeof name);
    Text_escape(t->coro ? t->coro : "", coro, sizeof coro);
    Text_duration(t->run_ns, run, sizeof run);
    Text_duration(t->wait_ns, wait, sizeof wait);
    snprintf(line, sizeof line, " TASK %s (#%u, coroutine %s): %s, %llu steps, running %s, waiting %s  Esc: the task table",
             name, t->serial, coro, pt_tasks_state_name(t->state), (unsigned long long)t->steps, run, wait);
    CRT_line(top, cols, A_BOLD, line);
    size_t used = (size_t)snprintf(line, sizeof line, " waited on:");
    int any = 0;
    for (unsigned k = 0; k <= PT_TASKS_WAIT_OTHER && used < sizeof line; k++) {
        if (!t->wait_by_ns[k])
            continue;
        char d[32];
        Text_duration(t->wait_by_ns[k], d, sizeof d);
        int w = snprintf(line + used, sizeof line - used, " %s %s", pt_tasks_await_name(k), d);
        if (w < 0)
            break;
        used += (size_t)w;
        any = 1;
    }
    TasksPanel_awaits(t, awaits, sizeof awaits);
    if (used < sizeof line)
        snprintf(line + used, sizeof line - used, "%s  now: %s", any ? "" : " nothing", awaits[0] ? awaits : "-");
    CRT_line(top + 1, cols, A_NORMAL, line);
    snprintf(line, sizeof line, " %16s %10s %10s  %s", "CALLS", "OWN", "TOTAL", "FUNCTION  FILE:LINE  (logical calls)");
    CRT_line(top + 2, cols, CRT_attr(CRT_C_HEADER), line);
    const pt_agg_task_fn_t *fns = t->fns; /* by total time (agg.h) */
    int body = rows - 3, total = (int)t->fn_count;
    if (app->tasks_fn_scroll > total - body)
        app->tasks_fn_scroll = total - body > 0 ? total - body : 0;
    if (!total)
        CRT_line(top + 3, cols, A_NORMAL,
                        " no logical call of this task was seen (a step that began before tracing is not counted)");
    for (int i = 0; i < body && app->tasks_fn_scroll + i < total; i++) {
        const pt_agg_task_fn_t *f = &fns[app->tasks_fn_scroll + i];
        char self[32], incl[32], fname[1024], ffile[1024];
        Text_duration(f->excl_ns, self, sizeof self);
        Text_duration(f->incl_ns, incl, sizeof incl);
        Text_escape(f->name ? f->name : "", fname, sizeof fname);
        Text_escape(f->file ? f->file : "", ffile, sizeof ffile);
        if (f->line)
            snprintf(line, sizeof line, " %16llu %10s %10s  %s  %s:%u", (unsigned long long)f->calls, self, incl, fname,
                     ffile, f->line);
        else
            snprintf(line, sizeof line, " %16llu %10s %10s  %s  %s", (unsigned long long)f->calls, self, incl, fname,
                     ffile);
        CRT_line(top + 3 + i, cols, A_NORMAL, line);
    }
    if (app->tasks_fn_scroll + body < total) {
        snprintf(line, sizeof line, " ... %d more below (Down, PgDn, End)", total - app->tasks_fn_scroll - body);
        CRT_line(top + rows - 1, cols, A_BOLD, line);
    }
}

static void TasksPanel_draw(App *app, int top, int rows, int cols)
{
    if (rows < 4)
        return;
    const pt_agg_task_t *t = app->tasks_open ? TasksPanel_task(app, app->tasks_cursor) : NULL;
    if (app->tasks_open && !t) { /* folded away since (a done task past the budget) */
        app->tasks_open = 0;
    }
    if (t)
        TasksPanel_drawTask(app, t, top, rows, cols);
    else
        TasksPanel_drawTable(app, top, rows, cols);
}

/* The flame panel on one task's tree (its Task symbol) or every task's (PT_AGG_NONE);
 * one task's frame starts selected. */
static void TasksPanel_flame(App *app, uint32_t task)
{
    app->task_flame = 1;
    app->task_flame_of = task;
    app->zoom_len = app->flame_scroll = 0;
    app->sel_len = task != PT_AGG_NONE;
    app->sel_path[0] = task;
    app->flame_follow = 1;
    app->panel = &FlamePanel_class;
}

static PanelResult TasksPanel_onKey(App *app, int ch)
{
    int page = LINES - 8 > 1 ? LINES - 8 : 1;
    if (ch == 'F') {
        TasksPanel_flame(app, PT_AGG_NONE);
        return PANEL_HANDLED | PANEL_REFRESH;
    }
    if (app->tasks_open) {
        switch (ch) {
        case 'f':
            TasksPanel_flame(app, app->tasks_cursor);
            return PANEL_HANDLED | PANEL_REFRESH;
        case KEY_UP: case 'k': app->tasks_fn_scroll -= app->tasks_fn_scroll > 0; break;
        case KEY_DOWN: case 'j': app->tasks_fn_scroll++; break; /* the draw clamps it */
        case KEY_PPAGE: app->tasks_fn_scroll = app->tasks_fn_scroll > page ? app->tasks_fn_scroll - page : 0; break;
        case KEY_NPAGE: app->tasks_fn_scroll += page; break;
        case KEY_HOME: app->tasks_fn_scroll = 0; break;
        case KEY_END: app->tasks_fn_scroll = 1 << 30; break;
        case 27: case KEY_BACKSPACE: case 127: case 8:
            app->tasks_open = 0;
            break;
        case 'A':
            TasksPanel_close(app);
            return PANEL_HANDLED | PANEL_REFRESH;
        default: return PANEL_IGNORED;
        }
        return PANEL_HANDLED | PANEL_REDRAW;
    }
    size_t n;
    const pt_agg_task_t **list = TasksPanel_rows(app, &n);
    if (!list)
        return PANEL_IGNORED;
    int cursor = TasksPanel_rowOf(app, list, n), total = (int)n;
    PanelResult res = PANEL_HANDLED | PANEL_REDRAW;
    switch (ch) {
    case KEY_UP: case 'k': cursor = cursor > 0 ? cursor - 1 : 0; break;
    case KEY_DOWN: case 'j': cursor = cursor + 1 < total ? cursor + 1 : cursor; break;
    case KEY_PPAGE: cursor = cursor > page ? cursor - page : 0; break;
    case KEY_NPAGE: cursor = cursor + page < total ? cursor + page : total - 1; break;
    case KEY_HOME: cursor = 0; break;
    case KEY_END: cursor = total - 1; break;
    case 'r': case 'w':
        app->tasks_by_wait = ch == 'w';
        app->tasks_scroll = 0;
        app->tasks_have_cursor = 0; /* the top of the new order */
        free(list);
        return PANEL_HANDLED | PANEL_REDRAW;
    case '\n': case '\r': case KEY_ENTER:
        if (n) {
            app->tasks_open = 1;
            app->tasks_fn_scroll = 0;
        }
        break;
    case 'f':
        if (n && cursor >= 0 && cursor < total) {
            TasksPanel_flame(app, list[cursor]->symbol);
            res = PANEL_HANDLED | PANEL_REFRESH;
        }
        break;
    case 27: case 'A':
        TasksPanel_close(app);
        res = PANEL_HANDLED | PANEL_REFRESH;
        break;
    default:
        res = PANEL_IGNORED;
        break;
    }
    if (n && cursor >= 0 && cursor < total) {
        app->tasks_cursor = list[cursor]->symbol;
        app->tasks_have_cursor = 1;
    }
    free(list);
    return res;
}

const PanelClass TasksPanel_class = {
    .name = "tasks",
    .help = "arrows/PgUp/PgDn:move r/w:sort by run/wait Enter:its calls f:its flame F:all tasks' Esc:back",
    .draw = TasksPanel_draw,
    .onKey = TasksPanel_onKey,
};
