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
    int width;
    int right;
} TablePanel_columns[] = {
    {"OWN%", PT_AGG_SORT_SELF, 6, 1},
    {"TOTAL%", PT_AGG_SORT_TOTAL, 7, 1},
    {"OWN", PT_AGG_SORT_SELF, 9, 1},
    {"TOTAL", PT_AGG_SORT_TOTAL, 9, 1},
    {"CALLS", PT_AGG_SORT_CALLS, 16, 1},
    {"FUNCTION", PT_AGG_SORT_NAME, 0, 0},
    {"FILE:LINE", PT_AGG_SORT_FILE, 0, 0},
};
#define NCOLS (int)(sizeof TablePanel_columns / sizeof TablePanel_columns[0])

static void TablePanel_widths(int cols, int *w)
{
    int fixed = 0;
    for (int i = 0; i < NCOLS; i++) {
        w[i] = TablePanel_columns[i].width;
        fixed += w[i] + 1;
    }
    int rest = cols - fixed;
    if (rest < 20)
        rest = 20;
    w[5] = rest * 3 / 5;
    w[6] = rest - w[5] - 1;
}

static void TablePanel_draw(App *app, int top, int rows, int cols)
{
    int w[NCOLS];
    TablePanel_widths(cols, w);
    /* header */
    attrset(CRT_attr(CRT_C_HEADER));
    move(top, 0);
    for (int i = 0, x = 0; i < NCOLS; x += w[i] + 1, i++) {
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
        if (x + w[i] < cols)
            mvaddch(top, x + w[i], ' ');
    }
    attrset(A_NORMAL);
    int body = rows - 1;
    if (body <= 0)
        return;
    int n = (int)app->table.count;
    if (app->table_selected >= n)
        app->table_selected = n ? n - 1 : 0;
    if (app->table_selected < app->table_scroll)
        app->table_scroll = app->table_selected;
    if (app->table_selected >= app->table_scroll + body)
        app->table_scroll = app->table_selected - body + 1;
    if (n == 0) {
        mvaddstr(top + 1, 1, app->filter[0] ? "(no function matches the filter)" : "(no calls seen yet)");
        return;
    }
    for (int r = 0; r < body && app->table_scroll + r < n; r++) {
        const pt_agg_row_t *row = &app->table.rows[app->table_scroll + r];
        int y = top + 1 + r;
        char cell[8][512];
        snprintf(cell[0], sizeof cell[0], "%.1f", row->self_pct);
        snprintf(cell[1], sizeof cell[1], "%.1f", row->total_pct);
        Text_duration(row->self_ns, cell[2], sizeof cell[2]);
        Text_duration(row->total_ns, cell[3], sizeof cell[3]);
        if (row->prim_calls != row->calls)
            snprintf(cell[4], sizeof cell[4], "%llu/%llu", (unsigned long long)row->calls,
                     (unsigned long long)row->prim_calls);
        else
            snprintf(cell[4], sizeof cell[4], "%llu", (unsigned long long)row->calls);
        Text_escape(row->name, cell[5], sizeof cell[5]);
        char file[400];
        Text_escape(row->file, file, sizeof file);
        if (row->line)
            snprintf(cell[6], sizeof cell[6], "%s:%u", file, row->line);
        else
            snprintf(cell[6], sizeof cell[6], "%s", file);
        int sel = app->table_scroll + r == app->table_selected;
        attrset(sel ? CRT_attr(CRT_C_SELECTED) : (int)A_NORMAL);
        for (int i = 0, x = 0; i < NCOLS; x += w[i] + 1, i++) {
            if (i == 6) {
                char buf[512];
                int used = Text_fit(cell[6], w[6], 1, buf, sizeof buf); /* keep the file's tail */
                mvaddstr(y, x, buf);
                for (int k = used; k < w[6]; k++)
                    addch(' ');
            } else if (TablePanel_columns[i].right) {
                put_right(y, x, cell[i], w[i]);
            } else {
                put(y, x, cell[i], w[i]);
            }
            if (x + w[i] < cols)
                mvaddch(y, x + w[i], ' ');
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
