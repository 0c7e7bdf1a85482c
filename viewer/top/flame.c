/* FlamePanel: the rolling window as an icicle graph (root on top), zoomable. */
#include <curses.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "crt.h"
#include "text.h"

static const pt_agg_tnode_t *FlamePanel_node(App *app, uint32_t i) { return &app->tree.nodes[i]; }

/* Follow a symbol path from the root; *matched receives how much matched. */
static uint32_t FlamePanel_resolve(App *app, const uint32_t *path, int len, int *matched)
{
    uint32_t n = 0;
    int i = 0;
    if (!app->tree.count) {
        *matched = 0;
        return PT_AGG_NONE;
    }
    for (; i < len; i++) {
        uint32_t c = FlamePanel_node(app, n)->first_child;
        while (c != PT_AGG_NONE && FlamePanel_node(app, c)->symbol != path[i])
            c = FlamePanel_node(app, c)->next_sibling;
        if (c == PT_AGG_NONE)
            break;
        n = c;
    }
    *matched = i;
    return n;
}

static int FlamePanel_pathOf(App *app, uint32_t n, uint32_t *path)
{
    uint32_t rev[APP_PATH_MAX];
    int len = 0;
    while (n != 0 && n != PT_AGG_NONE && len < APP_PATH_MAX) {
        rev[len++] = FlamePanel_node(app, n)->symbol;
        n = FlamePanel_node(app, n)->parent;
    }
    for (int i = 0; i < len; i++)
        path[i] = rev[len - 1 - i];
    return len;
}

static void FlamePanel_label(App *app, const pt_agg_tnode_t *node, int width, char *out, size_t outcap)
{
    char esc[1024];
    if (node->parent == PT_AGG_NONE) { /* the root (a symbol id may be PT_AGG_NONE too) */
        App_threadLabel(app, esc, sizeof esc);
    } else if (node->other) {
        snprintf(esc, sizeof esc, "%s", "[other]");
    } else {
        const char *name = App_symbolName(app, node->symbol);
        Text_escape(name, esc, sizeof esc);
        if (Text_width(esc) > width) /* keep the last component of a qualname */
            Text_escape(Text_lastComponent(name), esc, sizeof esc);
    }
    Text_fit(esc, width, 0, out, outcap);
}

typedef struct FlameDraw {
    App *app;
    int top, rows, cols;
    uint32_t selected;
} FlameDraw;

static void FlamePanel_drawNode(FlameDraw *d, uint32_t n, double x0, double width, int row)
{
    if (row >= d->rows)
        return;
    const pt_agg_tnode_t *node = FlamePanel_node(d->app, n);
    int c0 = (int)(x0 + 0.5), c1 = (int)(x0 + width + 0.5);
    if (c1 > d->cols)
        c1 = d->cols;
    if (c1 <= c0)
        return;
    int w = c1 - c0;
    int color = CRT_C_FLAME0 + (int)(node->symbol % CRT_FLAME_COLORS);
    int attr = n == d->selected ? (int)(CRT_attr(CRT_C_SELECTED) | A_BOLD) : CRT_attr(color);
    attrset(attr);
    char label[1024];
    int used = 0;
    if (w >= 2) {
        used = Text_fit("", 0, 0, label, sizeof label);
        FlamePanel_label(d->app, node, w - 1, label, sizeof label);
        mvaddstr(d->top + row, c0, label);
        used = Text_width(label);
    } else {
        move(d->top + row, c0);
    }
    for (int i = used; i < w; i++)
        addch(i == w - 1 && w > 1 ? '|' : ' ');
    attrset(A_NORMAL);
    if (!node->incl_ns)
        return;
    double scale = width / (double)node->incl_ns;
    double x = x0;
    for (uint32_t c = node->first_child; c != PT_AGG_NONE; c = FlamePanel_node(d->app, c)->next_sibling) {
        double cw = (double)FlamePanel_node(d->app, c)->incl_ns * scale;
        FlamePanel_drawNode(d, c, x, cw, row + 1);
        x += cw;
    }
}

static void FlamePanel_draw(App *app, int top, int rows, int cols)
{
    if (rows < 3)
        return;
    if (!app->tree.count || !app->tree.nodes[0].incl_ns) {
        mvaddstr(top, 1, "(no time in the window yet)");
        return;
    }
    int matched;
    uint32_t zoom = FlamePanel_resolve(app, app->zoom_path, app->zoom_len, &matched);
    app->zoom_len = matched;
    uint32_t sel = FlamePanel_resolve(app, app->sel_path, app->sel_len, &matched);
    app->sel_len = matched;
    /* the selection must be inside the zoomed subtree */
    if (app->sel_len < app->zoom_len ||
        memcmp(app->sel_path, app->zoom_path, (size_t)app->zoom_len * sizeof(uint32_t))) {
        memcpy(app->sel_path, app->zoom_path, (size_t)app->zoom_len * sizeof(uint32_t));
        app->sel_len = app->zoom_len;
        sel = zoom;
    }
    FlameDraw d = {.app = app, .top = top, .rows = rows - 1, .cols = cols, .selected = sel};
    FlamePanel_drawNode(&d, zoom, 0, cols, 0);
    /* the selected frame, in words */
    const pt_agg_tnode_t *s = FlamePanel_node(app, sel);
    char name[512], file[512] = "", line[1024], incl[32], self[32];
    if (s->parent == PT_AGG_NONE) {
        snprintf(name, sizeof name, "%s", "(root)");
    } else if (s->other) {
        snprintf(name, sizeof name, "%s", "[other]");
        snprintf(file, sizeof file, "%s", "calls here past the tree budget (folded)");
    } else {
        pt_agg_symbol_t sym = pt_agg_symbol(app->agg, s->symbol);
        Text_escape(sym.name, name, sizeof name);
        char f[400];
        Text_escape(sym.file, f, sizeof f);
        if (sym.line)
            snprintf(file, sizeof file, "%s:%u", f, sym.line);
        else
            snprintf(file, sizeof file, "%s", f);
    }
    Text_duration(s->incl_ns, incl, sizeof incl);
    Text_duration(s->self_ns, self, sizeof self);
    double pct = app->tree.nodes[0].incl_ns ? 100.0 * (double)s->incl_ns / (double)app->tree.nodes[0].incl_ns : 0;
    snprintf(line, sizeof line, "%s  %s  total %s (%.1f%%)  own %s  calls %llu%s", name, file, incl, pct, self,
             (unsigned long long)s->calls, app->zoom_len ? "  [zoomed: Bksp/Esc out]" : "");
    char fitted[1024];
    Text_fit(line, cols, 0, fitted, sizeof fitted);
    attrset(A_BOLD);
    mvaddstr(top + rows - 1, 0, fitted);
    attrset(A_NORMAL);
}

static PanelResult FlamePanel_onKey(App *app, int ch)
{
    int matched;
    uint32_t sel = FlamePanel_resolve(app, app->sel_path, app->sel_len, &matched);
    if (sel == PT_AGG_NONE)
        return PANEL_IGNORED;
    const pt_agg_tnode_t *s = FlamePanel_node(app, sel);
    uint32_t next = PT_AGG_NONE;
    switch (ch) {
    case KEY_UP: case 'k':
        if (app->sel_len > app->zoom_len)
            next = s->parent;
        break;
    case KEY_DOWN: case 'j': { /* into the biggest child */
        uint64_t best = 0;
        for (uint32_t c = s->first_child; c != PT_AGG_NONE; c = FlamePanel_node(app, c)->next_sibling)
            if (FlamePanel_node(app, c)->incl_ns > best || next == PT_AGG_NONE) {
                best = FlamePanel_node(app, c)->incl_ns;
                next = c;
            }
        break;
    }
    case KEY_LEFT: case 'h':
        if (app->sel_len > app->zoom_len && s->parent != PT_AGG_NONE) {
            uint32_t prev = PT_AGG_NONE;
            for (uint32_t c = FlamePanel_node(app, s->parent)->first_child; c != sel;
                 c = FlamePanel_node(app, c)->next_sibling)
                prev = c;
            next = prev;
        }
        break;
    case KEY_RIGHT: case 'l':
        if (app->sel_len > app->zoom_len)
            next = s->next_sibling;
        break;
    case '\n': case '\r': case KEY_ENTER:
        memcpy(app->zoom_path, app->sel_path, sizeof app->zoom_path);
        app->zoom_len = app->sel_len;
        return PANEL_HANDLED | PANEL_REDRAW;
    case KEY_BACKSPACE: case 127: case 8: case 27:
        if (app->zoom_len > 0)
            app->zoom_len--;
        return PANEL_HANDLED | PANEL_REDRAW;
    default:
        return PANEL_IGNORED;
    }
    if (next != PT_AGG_NONE)
        app->sel_len = FlamePanel_pathOf(app, next, app->sel_path);
    return PANEL_HANDLED | PANEL_REDRAW;
}

const PanelClass FlamePanel_class = {
    .name = "flame",
    .help = "arrows:select Enter:zoom Bksp/Esc:out",
    .draw = FlamePanel_draw,
    .onKey = FlamePanel_onKey,
};
