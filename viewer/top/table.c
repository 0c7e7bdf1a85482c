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
    const char *title;
    int sort; /* -1: not sortable */
    int width; /* at full width; 0: a name column */
    int right;
} TablePanel_columns[] = {
    /* shares of wall time, not CPU: a sleeping or waiting frame counts */
    {"OWN%WALL", PT_AGG_SORT_SELF, 8, 1},
    {"TOT%WALL", PT_AGG_SORT_TOTAL, 8, 1},
    {"OWN", PT_AGG_SORT_SELF, 9, 1},
    {"TOTAL", PT_AGG_SORT_TOTAL, 9, 1},
    {"CALLS", PT_AGG_SORT_CALLS, 16, 1},
    {"FUNCTION", PT_AGG_SORT_NAME, 0, 0},
    {"FILE:LINE", PT_AGG_SORT_FILE, 0, 0},
};
#define NCOLS (int)(sizeof TablePanel_columns / sizeof TablePanel_columns[0])
#define COL_FUNCTION 5
#define COL_FILE 6
#define CELL_MAX 512
/* The narrowest FILE:LINE worth showing (it keeps the file's tail). */
#define FILE_MIN 10

/* Number columns given up, in this order, when the function name would
 * otherwise get less than its share: the two durations (the percentages say
 * the same against the span), then calls, then the total share. OWN%WALL
 * always stays. */
static const int TablePanel_dropOrder[] = {2, 3, 4, 1};

static void TablePanel_cells(const App *app, const pt_agg_row_t *row, char cell[NCOLS][CELL_MAX])
{
    (void)app;
    snprintf(cell[0], CELL_MAX, "%.1f", row->self_pct);
    snprintf(cell[1], CELL_MAX, "%.1f", row->total_pct);
    Text_duration(row->self_ns, cell[2], CELL_MAX);
    Text_duration(row->total_ns, cell[3], CELL_MAX);
    if (row->prim_calls != row->calls)
        snprintf(cell[4], CELL_MAX, "%llu/%llu", (unsigned long long)row->calls, (unsigned long long)row->prim_calls);
    else
        snprintf(cell[4], CELL_MAX, "%llu", (unsigned long long)row->calls);
    Text_escape(row->name, cell[5], CELL_MAX);
    char file[400];
    Text_escape(row->file, file, sizeof file);
    if (row->line)
        snprintf(cell[6], CELL_MAX, "%s:%u", file, row->line);
    else
        snprintf(cell[6], CELL_MAX, "%s", file);
}

/* Column widths for `cols` columns (0 = not shown), given the widest cell of
 * each column among the rows in view (need). The layout rule:
 *   1. the function name gets at least min(its widest, half the width);
 *   2. full-width number columns, FILE:LINE when at least FILE_MIN is left;
 *   3. else number columns shrink to their widest cell (or title);
 *   4. else FILE:LINE goes; then number columns are dropped (dropOrder).
 * What is left after the number columns goes to the names: 3/5 to the
 * function, the rest to FILE:LINE (but the function keeps its minimum). */
static void TablePanel_layout(int cols, const int *need, int *w)
{
    int fn_min = need[COL_FUNCTION] < cols / 2 ? need[COL_FUNCTION] : cols / 2;
    int numbers = 0;
    for (int i = 0; i < COL_FUNCTION; i++) {
        w[i] = TablePanel_columns[i].width;
        numbers += w[i] + 1;
    }
    if (cols - numbers - fn_min - 1 < FILE_MIN) {
        numbers = 0;
        for (int i = 0; i < COL_FUNCTION; i++) {
            w[i] = need[i] < TablePanel_columns[i].width ? need[i] : TablePanel_columns[i].width;
            numbers += w[i] + 1;
        }
    }
    for (size_t d = 0; d < sizeof TablePanel_dropOrder / sizeof TablePanel_dropOrder[0] && cols - numbers < fn_min; d++) {
        numbers -= w[TablePanel_dropOrder[d]] + 1;
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

/* The widest cell of each column among rows [first, first + count) and the
 * titles. */
static void TablePanel_need(const App *app, int first, int count, int *need)
{
    char cell[NCOLS][CELL_MAX];
    for (int i = 0; i < NCOLS; i++)
        need[i] = Text_width(TablePanel_columns[i].title);
    for (int r = first; r < first + count && r < (int)app->table.count; r++) {
        TablePanel_cells(app, &app->table.rows[r], cell);
        for (int i = 0; i < NCOLS; i++) {
            int cw = Text_width(cell[i]);
            if (cw > need[i])
                need[i] = cw;
        }
    }
}

static void TablePanel_draw(App *app, int top, int rows, int cols)
{
    int body = rows - 1;
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
    TablePanel_layout(cols, need, w);
    /* header */
    attrset(CRT_attr(CRT_C_HEADER));
    move(top, 0);
    for (int i = 0; i < cols; i++)
        addch(' ');
    for (int i = 0, x = 0; i < NCOLS && x < cols; i++) {
        if (!w[i])
            continue;
        int sorted = TablePanel_columns[i].sort == app->sort &&
                     (i != 2 && i != 3); /* mark the % column of own/total */
        if (sorted)
            attron(A_BOLD | A_UNDERLINE);
        if (TablePanel_columns[i].right)
            put_right(top, x, TablePanel_columns[i].title, w[i]);
        else
            put(top, x, TablePanel_columns[i].title, w[i]);
        if (sorted)
            attroff(A_BOLD | A_UNDERLINE);
        x += w[i] + 1;
    }
    attrset(A_NORMAL);
    if (body <= 0)
        return;
    if (n == 0) {
        mvaddstr(top + 1, 1, app->filter[0] ? "(no function matches the filter)" : "(no calls seen yet)");
        return;
    }
    for (int r = 0; r < body && app->table_scroll + r < n; r++) {
        const pt_agg_row_t *row = &app->table.rows[app->table_scroll + r];
        int y = top + 1 + r;
        char cell[NCOLS][CELL_MAX];
        TablePanel_cells(app, row, cell);
        int sel = app->table_scroll + r == app->table_selected;
        attrset(sel ? CRT_attr(CRT_C_SELECTED) : (int)A_NORMAL);
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
    case KEY_F(5): case 'c': return TablePanel_sortBy(app, PT_AGG_SORT_CALLS);
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
    .help = "o/t/c/n/f:sort(F3-F7) r:reverse w:window/run",
    .draw = TablePanel_draw,
    .onKey = TablePanel_onKey,
};
