/* TablePanel: one row per function, pstats-like columns, sortable. */
#include <curses.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "crt.h"
#include "text.h"

static void put(int y, int x, const char *s, int width)
{
    if (width <= 0)
        return;
    char buf[1024];
    int used = Text_fit(s, width, 0, buf, sizeof buf);
    mvaddstr(y, x, buf);
    for (int i = used; i < width; i++)
        addch(' ');
}

static void put_right(int y, int x, const char *s, int width)
{
    int w = Text_width(s);
    if (w >= width) {
        put(y, x, s, width);
        return;
    }
    move(y, x);
    for (int i = 0; i < width - w; i++)
        addch(' ');
    addstr(s);
}

static const struct {
    const char *title;     /* wall mode's */
    const char *cpu_title; /* CPU mode's; NULL: the column is not shown in CPU mode */
    int sort; /* -1: not sortable */
    int width; /* at full width; 0: a name column */
    int right;
} TablePanel_columns[] = {
    /* shares of the observed wall time (<not observed> is in no row and not in the base): in wall
     * mode of wall time (a sleeping or waiting frame counts), in CPU mode of CPU time */
    {"OWN%WALL", "OWN%CPU", PT_AGG_SORT_SELF, 8, 1},
    {"TOT%WALL", "TOT%CPU", PT_AGG_SORT_TOTAL, 8, 1},
    /* wall mode: the part of the row's own wall time off a CPU (waiting) */
    {"WAIT%", NULL, -1, 6, 1},
    {"OWN", "OWN CPU", PT_AGG_SORT_SELF, 9, 1},
    {"TOTAL", "TOT CPU", PT_AGG_SORT_TOTAL, 9, 1},
    {"CALLS", "CALLS", PT_AGG_SORT_CALLS, 16, 1},
    {"FUNCTION", "FUNCTION", PT_AGG_SORT_NAME, 0, 0},
    {"FILE:LINE", "FILE:LINE", PT_AGG_SORT_FILE, 0, 0},
};
#define NCOLS (int)(sizeof TablePanel_columns / sizeof TablePanel_columns[0])
#define COL_WAIT 2
#define COL_OWN 3
#define COL_TOTAL 4
#define COL_CALLS 5
#define COL_FUNCTION 6
#define COL_FILE 7
#define CELL_MAX 512
/* The narrowest FILE:LINE worth showing (it keeps the file's tail). */
#define FILE_MIN 10

static const char *TablePanel_title(const App *app, int i)
{
    return app->time_cpu ? TablePanel_columns[i].cpu_title : TablePanel_columns[i].title;
}

/* Number columns given up, in this order, when the function name would
 * otherwise get less than its share: the two durations (the percentages say
 * the same against the span), then calls, then the waiting share, then the
 * total share. OWN% always stays. */
static const int TablePanel_dropOrder[] = {COL_OWN, COL_TOTAL, COL_CALLS, COL_WAIT, 1};

static void TablePanel_cells(const App *app, const pt_agg_row_t *row, char cell[NCOLS][CELL_MAX])
{
    snprintf(cell[0], CELL_MAX, "%.1f", App_rowSelfPct(app, row));
    snprintf(cell[1], CELL_MAX, "%.1f", App_rowTotalPct(app, row));
    if (app->step_mode) /* a step's view has no CPU parts (agg.h last_step): its waiting is unknown */
        snprintf(cell[COL_WAIT], CELL_MAX, "-");
    else
        snprintf(cell[COL_WAIT], CELL_MAX, "%.1f", App_rowWaitPct(row));
    Text_duration(App_rowSelf(app, row), cell[COL_OWN], CELL_MAX);
    Text_duration(App_rowTotal(app, row), cell[COL_TOTAL], CELL_MAX);
    if (row->prim_calls != row->calls)
        snprintf(cell[COL_CALLS], CELL_MAX, "%llu/%llu", (unsigned long long)row->calls,
                 (unsigned long long)row->prim_calls);
    else
        snprintf(cell[COL_CALLS], CELL_MAX, "%llu", (unsigned long long)row->calls);
    Text_escape(row->name, cell[COL_FUNCTION], CELL_MAX);
    char file[400];
    Text_escape(row->file, file, sizeof file);
    if (row->line)
        snprintf(cell[COL_FILE], CELL_MAX, "%s:%u", file, row->line);
    else
        snprintf(cell[COL_FILE], CELL_MAX, "%s", file);
}

/* The <not observed> row (after the functions): the time of the view nobody
 * saw (Lost gaps), in no function and not in the percentages' base, and the
 * events lost in it. 0 when there is none. */
static int TablePanel_unobservedCells(const App *app, char cell[NCOLS][CELL_MAX])
{
    const pt_agg_table_t *t = &app->table;
    if (!t->unobserved_ns && !t->unobserved_lost)
        return 0;
    for (int i = 0; i < NCOLS; i++)
        snprintf(cell[i], CELL_MAX, "-");
    Text_duration(app->time_cpu ? t->unobserved_cpu_ns : t->unobserved_ns, cell[COL_OWN], CELL_MAX);
    snprintf(cell[COL_CALLS], CELL_MAX, "%llu events lost", (unsigned long long)t->unobserved_lost);
    snprintf(cell[COL_FUNCTION], CELL_MAX, "<not observed>");
    snprintf(cell[COL_FILE], CELL_MAX, "(not in any function nor in the %%)");
    return 1;
}

/* Column widths for `cols` columns (0 = not shown), given the widest cell of
 * each column among the rows in view (need). The layout rule:
 *   1. the function name gets at least min(its widest, half the width);
 *   2. full-width number columns, FILE:LINE when at least FILE_MIN is left;
 *   3. else number columns shrink to their widest cell (or title);
 *   4. else FILE:LINE goes; then number columns are dropped (dropOrder).
 * What is left after the number columns goes to the names: 3/5 to the
 * function, the rest to FILE:LINE (but the function keeps its minimum). */
static void TablePanel_layout(const App *app, int cols, const int *need, int *w)
{
    int fn_min = need[COL_FUNCTION] < cols / 2 ? need[COL_FUNCTION] : cols / 2;
    int numbers = 0;
    for (int i = 0; i < COL_FUNCTION; i++) {
        w[i] = TablePanel_title(app, i) ? TablePanel_columns[i].width : 0;
        numbers += w[i] ? w[i] + 1 : 0;
    }
    if (cols - numbers - fn_min - 1 < FILE_MIN) {
        numbers = 0;
        for (int i = 0; i < COL_FUNCTION; i++) {
            w[i] = !TablePanel_title(app, i) ? 0 : need[i] < TablePanel_columns[i].width ? need[i]
                                                                                          : TablePanel_columns[i].width;
            numbers += w[i] ? w[i] + 1 : 0;
        }
    }
    for (size_t d = 0; d < sizeof TablePanel_dropOrder / sizeof TablePanel_dropOrder[0] && cols - numbers < fn_min; d++) {
        numbers -= w[TablePanel_dropOrder[d]] ? w[TablePanel_dropOrder[d]] + 1 : 0;
        w[TablePanel_dropOrder[d]] = 0;
    }
    int rest = cols - numbers;
    if (rest < 1)
        rest = 1;
    if (rest - fn_min - 1 < FILE_MIN) {
        w[COL_FUNCTION] = rest;
        w[COL_FILE] = 0;
        return;
    }
    w[COL_FUNCTION] = rest * 3 / 5 > fn_min ? rest * 3 / 5 : fn_min;
    w[COL_FILE] = rest - w[COL_FUNCTION] - 1;
}

static void TablePanel_widen(char cell[NCOLS][CELL_MAX], int *need, int file_too)
{
    for (int i = 0; i < NCOLS; i++) {
        int cw = Text_width(cell[i]);
        if (cw > need[i] && (file_too || i != COL_FILE))
            need[i] = cw;
    }
}

/* The widest cell of each column among rows [first, first + count), the
 * <not observed> row (its FILE:LINE words may be cut) and the titles. */
static void TablePanel_need(const App *app, int first, int count, int *need)
{
    char cell[NCOLS][CELL_MAX];
    for (int i = 0; i < NCOLS; i++)
        need[i] = TablePanel_title(app, i) ? Text_width(TablePanel_title(app, i)) : 0;
    for (int r = first; r < first + count && r < (int)app->table.count; r++) {
        TablePanel_cells(app, &app->table.rows[r], cell);
        TablePanel_widen(cell, need, 1);
    }
    if (TablePanel_unobservedCells(app, cell))
        TablePanel_widen(cell, need, 0);
}

static void TablePanel_drawRow(int y, int cols, const int *w, char cell[NCOLS][CELL_MAX], int attr)
{
    attrset(attr);
    move(y, 0);
    for (int i = 0; i < cols; i++)
        addch(' ');
    for (int i = 0, x = 0; i < NCOLS && x < cols; i++) {
        if (!w[i])
            continue;
        if (i == COL_FILE) {
            char buf[CELL_MAX];
            int used = Text_fit(cell[i], w[i], 1, buf, sizeof buf); /* keep the file's tail */
            mvaddstr(y, x, buf);
            for (int k = used; k < w[i]; k++)
                addch(' ');
        } else if (TablePanel_columns[i].right) {
            put_right(y, x, cell[i], w[i]);
        } else {
            put(y, x, cell[i], w[i]);
        }
        x += w[i] + 1;
    }
    attrset(A_NORMAL);
}

static void TablePanel_draw(App *app, int top, int rows, int cols)
{
    /* the <not observed> row takes the table's last line when there is one */
    int unobserved = (app->table.unobserved_ns || app->table.unobserved_lost) && rows > 2;
    int body = rows - 1 - unobserved;
    int n = (int)app->table.count;
    if (app->table_selected >= n)
        app->table_selected = n ? n - 1 : 0;
    if (body > 0) {
        if (app->table_selected < app->table_scroll)
            app->table_scroll = app->table_selected;
        if (app->table_selected >= app->table_scroll + body)
            app->table_scroll = app->table_selected - body + 1;
    }
    int need[NCOLS], w[NCOLS];
    TablePanel_need(app, app->table_scroll, body > 0 ? body : 0, need);
    TablePanel_layout(app, cols, need, w);
    /* header */
    attrset(CRT_attr(CRT_C_HEADER));
    move(top, 0);
    for (int i = 0; i < cols; i++)
        addch(' ');
    for (int i = 0, x = 0; i < NCOLS && x < cols; i++) {
        if (!w[i])
            continue;
        int sorted = TablePanel_columns[i].sort == app->sort &&
                     (i != COL_OWN && i != COL_TOTAL); /* mark the % column of own/total */
        if (sorted)
            attron(A_BOLD | A_UNDERLINE);
        if (TablePanel_columns[i].right)
            put_right(top, x, TablePanel_title(app, i), w[i]);
        else
            put(top, x, TablePanel_title(app, i), w[i]);
        if (sorted)
            attroff(A_BOLD | A_UNDERLINE);
        x += w[i] + 1;
    }
    attrset(A_NORMAL);
    if (body <= 0)
        return;
    if (n == 0) {
        mvaddstr(top + 1, 1, app->filter[0] ? "(no function matches the filter)" : "(no calls seen yet)");
    }
    for (int r = 0; r < body && app->table_scroll + r < n; r++) {
        char cell[NCOLS][CELL_MAX];
        TablePanel_cells(app, &app->table.rows[app->table_scroll + r], cell);
        int sel = app->table_scroll + r == app->table_selected;
        TablePanel_drawRow(top + 1 + r, cols, w, cell, sel ? CRT_attr(CRT_C_SELECTED) : (int)A_NORMAL);
    }
    char cell[NCOLS][CELL_MAX];
    if (unobserved && TablePanel_unobservedCells(app, cell)) /* pinned at the end of the table */
        TablePanel_drawRow(top + 1 + body, cols, w, cell, (int)A_DIM);
}

static PanelResult TablePanel_sortBy(App *app, int sort)
{
    if (app->sort == sort)
        app->sort_desc = !app->sort_desc;
    else
        app->sort_desc = sort != PT_AGG_SORT_NAME && sort != PT_AGG_SORT_FILE;
    app->sort = sort;
    app->table_selected = app->table_scroll = 0;
    return PANEL_HANDLED | PANEL_REFRESH;
}

static PanelResult TablePanel_onKey(App *app, int ch)
{
    int page = LINES - 4 > 1 ? LINES - 4 : 1;
    switch (ch) {
    case KEY_F(3): case 'o': return TablePanel_sortBy(app, PT_AGG_SORT_SELF);
    case KEY_F(4): case 't': return TablePanel_sortBy(app, PT_AGG_SORT_TOTAL);
    case KEY_F(5): case '#': return TablePanel_sortBy(app, PT_AGG_SORT_CALLS); /* c: wall/CPU (view.c) */
    case KEY_F(6): case 'n': return TablePanel_sortBy(app, PT_AGG_SORT_NAME);
    case KEY_F(7): case 'f': return TablePanel_sortBy(app, PT_AGG_SORT_FILE);
    case 'r':
        app->sort_desc = !app->sort_desc;
        return PANEL_HANDLED | PANEL_REFRESH;
    case 'w':
        app->table_window = !app->table_window;
        return PANEL_HANDLED | PANEL_REFRESH;
    case KEY_UP: case 'k':
        if (app->table_selected > 0)
            app->table_selected--;
        return PANEL_HANDLED | PANEL_REDRAW;
    case KEY_DOWN: case 'j':
        if (app->table_selected + 1 < (int)app->table.count)
            app->table_selected++;
        return PANEL_HANDLED | PANEL_REDRAW;
    case KEY_PPAGE:
        app->table_selected = app->table_selected > page ? app->table_selected - page : 0;
        return PANEL_HANDLED | PANEL_REDRAW;
    case KEY_NPAGE:
        app->table_selected += page;
        return PANEL_HANDLED | PANEL_REDRAW;
    case KEY_HOME:
        app->table_selected = 0;
        return PANEL_HANDLED | PANEL_REDRAW;
    case KEY_END:
        app->table_selected = app->table.count ? (int)app->table.count - 1 : 0;
        return PANEL_HANDLED | PANEL_REDRAW;
    default:
        return PANEL_IGNORED;
    }
}

const PanelClass TablePanel_class = {
    .name = "table",
    .help = "o/t/#/n/f:sort(F3-F7) r:reverse w:window/run",
    .draw = TablePanel_draw,
    .onKey = TablePanel_onKey,
};
