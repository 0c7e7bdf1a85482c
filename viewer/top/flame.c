/* FlamePanel: the rolling window as an icicle graph (root on top), zoomable;
 * or, opened from task mode (f, F), asyncio tasks' own trees (app->task_flame):
 * one frame per task under the root, its logical calls above it, running time
 * only (no waiting colours: a task's tree has no CPU parts). */
#include <curses.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
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
    if (node->parent == PT_AGG_NONE && app->task_flame) {
        snprintf(esc, sizeof esc, "%s", app->task_flame_of == PT_AGG_NONE ? "every task: running time"
                                                                          : "one task: running time");
    } else if (node->parent == PT_AGG_NONE) { /* the root (a symbol id may be PT_AGG_NONE too) */
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

/* Where each node of the zoomed subtree lies: its x and width in columns and
 * its level below the zoomed node; level -1 for a node too narrow to draw
 * (and so its children). Found by an explicit walk, not recursion: a deep
 * recursion in the job is a deep tree here. */
typedef struct FlameLayout {
    int *level;
    double *x0, *width;
    int levels; /* the deepest level drawn + 1 */
} FlameLayout;

/* The columns [*c0, *c1) of a box at x0 of width; 0 if it has none. */
static int FlameLayout_columns(double x0, double width, int cols, int *c0, int *c1)
{
    *c0 = (int)(x0 + 0.5);
    *c1 = (int)(x0 + width + 0.5);
    if (*c1 > cols)
        *c1 = cols;
    return *c1 > *c0;
}

static void FlameLayout_free(FlameLayout *l)
{
    free(l->level);
    free(l->x0);
    free(l->width);
}

static int FlameLayout_build(App *app, uint32_t zoom, int cols, FlameLayout *l)
{
    size_t n = app->tree.count;
    memset(l, 0, sizeof *l);
    l->level = malloc(n * sizeof *l->level);
    l->x0 = malloc(n * sizeof *l->x0);
    l->width = malloc(n * sizeof *l->width);
    uint32_t *stack = malloc(n * sizeof *stack);
    if (!l->level || !l->x0 || !l->width || !stack) {
        free(stack);
        FlameLayout_free(l);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        l->level[i] = -1;
    size_t sp = 0;
    l->x0[zoom] = 0;
    l->width[zoom] = cols;
    l->level[zoom] = 0;
    stack[sp++] = zoom;
    while (sp) { /* each node is pushed once: by its parent, when it is wide enough */
        uint32_t v = stack[--sp];
        const pt_agg_tnode_t *node = FlamePanel_node(app, v);
        int c0, c1;
        if (!FlameLayout_columns(l->x0[v], l->width[v], cols, &c0, &c1)) {
            l->level[v] = -1;
            continue;
        }
        if (l->level[v] + 1 > l->levels)
            l->levels = l->level[v] + 1;
        if (!App_nodeIncl(app, node))
            continue;
        double scale = l->width[v] / (double)App_nodeIncl(app, node), x = l->x0[v];
        for (uint32_t c = node->first_child; c != PT_AGG_NONE; c = FlamePanel_node(app, c)->next_sibling) {
            l->x0[c] = x;
            l->width[c] = (double)App_nodeIncl(app, FlamePanel_node(app, c)) * scale;
            l->level[c] = l->level[v] + 1;
            x += l->width[c];
            stack[sp++] = c;
        }
    }
    free(stack);
    return 0;
}

/* One frame's box on screen row y. With a filter, matching frames are
 * highlighted and the others dimmed (without their colour). */
static void FlamePanel_drawNode(App *app, uint32_t n, int y, int c0, int c1, int selected, int *matches)
{
    const pt_agg_tnode_t *node = FlamePanel_node(app, n);
    int w = c1 - c0;
    /* wall mode: a frame that mostly waits (off a CPU) in its own colour */
    int attr = !app->time_cpu && !app->step_mode && !app->task_flame && App_nodeWaits(node) ? CRT_attr(CRT_C_WAITING)
                                                     : CRT_attr(CRT_C_FLAME0 + (int)(node->symbol % CRT_FLAME_COLORS));
    if (app->filter[0]) {
        int match = node->parent != PT_AGG_NONE && !node->other && pt_agg_name_matches(App_symbolName(app, node->symbol), app->filter);
        *matches += match;
        attr = match ? (int)(CRT_attr(CRT_C_MATCH) | A_BOLD | A_UNDERLINE) : (int)A_DIM;
    }
    if (selected)
        attr = (int)(CRT_attr(CRT_C_SELECTED) | A_BOLD);
    attrset(attr);
    char label[1024];
    int used = 0;
    if (w >= 2) {
        FlamePanel_label(app, node, w - 1, label, sizeof label);
        mvaddstr(y, c0, label);
        used = Text_width(label);
    } else {
        move(y, c0);
    }
    for (int i = used; i < w; i++)
        addch(i == w - 1 && w > 1 ? '|' : ' ');
    attrset(A_NORMAL);
}

static void FlamePanel_draw(App *app, int top, int rows, int cols)
{
    if (rows < 3)
        return;
    if (!app->tree.count || !App_nodeIncl(app, &app->tree.nodes[0])) {
        mvaddstr(top, 1, app->task_flame ? "(no running time in the task's calls yet; Esc: back to the tasks)"
                         : app->hide_idle ? "(no busy thread in the window: i shows the idle ones)"
                                          : "(no time in the window yet)");
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
    FlameLayout l;
    if (FlameLayout_build(app, zoom, cols, &l)) {
        mvaddstr(top, 1, "(out of memory drawing the flame graph)");
        return;
    }
    /* Levels in view: rows less the info line, less a line above when scrolled
     * and a line below when more levels are hidden there. */
    int graph = rows - 1;
    int sel_level = l.level[sel] >= 0 ? l.level[sel] : 0;
    if (app->flame_follow) { /* the selection moved: bring it into view */
        int view = graph - 2 > 1 ? graph - 2 : 1;
        if (sel_level < app->flame_scroll)
            app->flame_scroll = sel_level;
        else if (sel_level >= app->flame_scroll + view)
            app->flame_scroll = sel_level - view + 1;
        app->flame_follow = 0;
    }
    if (app->flame_scroll > l.levels - (graph - 1)) /* the last levels fill the graph, below the line above */
        app->flame_scroll = l.levels - (graph - 1);
    if (app->flame_scroll < 0 || l.levels <= graph)
        app->flame_scroll = 0;
    int above = app->flame_scroll, first_row = top;
    int avail = graph - (above > 0);
    int below = l.levels - above - avail;
    if (below > 0) {
        avail--;
        below++;
    } else {
        below = 0;
    }
    if (above > 0)
        first_row++;
    int matches = 0;
    for (size_t i = 0; i < app->tree.count; i++) {
        int row = l.level[i] - above, c0, c1;
        if (l.level[i] < 0 || row < 0 || row >= avail || !FlameLayout_columns(l.x0[i], l.width[i], cols, &c0, &c1))
            continue;
        FlamePanel_drawNode(app, (uint32_t)i, first_row + row, c0, c1, (uint32_t)i == sel, &matches);
    }
    char more[160];
    if (above > 0) {
        snprintf(more, sizeof more, " %s %d level%s above (PgUp, Home)", CRT_utf8 ? "\xe2\x96\xb2" : "^", above,
                 above == 1 ? "" : "s");
        attrset(A_BOLD | A_REVERSE);
        mvaddstr(top, 0, more);
        attrset(A_NORMAL);
    }
    if (below > 0) {
        snprintf(more, sizeof more, " %s %d more level%s below (PgDn, End)", CRT_utf8 ? "\xe2\x96\xbc" : "v", below,
                 below == 1 ? "" : "s");
        attrset(A_BOLD | A_REVERSE);
        mvaddstr(first_row + avail, 0, more);
        attrset(A_NORMAL);
    }
    FlameLayout_free(&l);
    /* the selected frame, in words */
    const pt_agg_tnode_t *s = FlamePanel_node(app, sel);
    char name[512], file[512] = "", line[1024], incl[32], self[32], extra[160] = "";
    if (s->parent == PT_AGG_NONE) {
        snprintf(name, sizeof name, "%s", "(root)");
    } else if (s->other) {
        snprintf(name, sizeof name, "%s", "[other]");
        snprintf(file, sizeof file, "%s", "calls here past the tree budget (folded)");
    } else {
        pt_agg_symbol_t sym = pt_agg_symbol(app->agg, s->symbol);
        if (sym.kind == PT_SYM_TASK) { /* a task's frame: name, coroutine (file), serial (line) */
            char esc[400];
            Text_escape(sym.name, esc, sizeof esc);
            snprintf(name, sizeof name, "task %s", esc);
            Text_escape(sym.file, esc, sizeof esc);
            snprintf(file, sizeof file, "coroutine %s, task #%u", esc, sym.line);
        } else {
            Text_escape(sym.name, name, sizeof name);
            char f[400];
            Text_escape(sym.file, f, sizeof f);
            if (sym.line)
                snprintf(file, sizeof file, "%s:%u", f, sym.line);
            else
                snprintf(file, sizeof file, "%s", f);
        }
    }
    Text_duration(App_nodeIncl(app, s), incl, sizeof incl);
    Text_duration(App_nodeSelf(app, s), self, sizeof self);
    if (app->filter[0])
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "  [%d frame%s in view match%s the filter]",
                 matches, matches == 1 ? "" : "s", matches == 1 ? "es" : "");
    if (app->hide_idle && !app->thread)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "  [idle threads hidden: i]");
    uint64_t root = App_nodeIncl(app, &app->tree.nodes[0]);
    double pct = root ? 100.0 * (double)App_nodeIncl(app, s) / (double)root : 0;
    char waiting[64] = "";
    if (!app->time_cpu && !app->step_mode && !app->task_flame) { /* the frame's off-CPU part (its callees' too) */
        char wd[32];
        Text_duration(s->incl_ns > s->incl_cpu_ns ? s->incl_ns - s->incl_cpu_ns : 0, wd, sizeof wd);
        snprintf(waiting, sizeof waiting, "  waiting %s", wd);
    }
    snprintf(line, sizeof line, "%s  %s  total %s (%.1f%%)  own %s%s  calls %llu%s%s", name, file, incl, pct, self,
             waiting, (unsigned long long)s->calls, app->zoom_len ? "  [zoomed: Bksp/Esc out]" : "", extra);
    char fitted[1024];
    Text_fit(line, cols, 0, fitted, sizeof fitted);
    attrset(A_BOLD);
    mvaddstr(top + rows - 1, 0, fitted);
    attrset(A_NORMAL);
}

static void FlamePanel_backToTasks(App *app)
{
    app->task_flame = 0;
    app->sel_len = app->zoom_len = app->flame_scroll = 0;
    app->panel = &TasksPanel_class; /* its tasks_back stays what it was */
}

static PanelResult FlamePanel_onKey(App *app, int ch)
{
    switch (ch) { /* keys that need no selection (the tree may be empty) */
    /* scrolling a deep graph: the draw clamps to the levels there are */
    case KEY_NPAGE: app->flame_scroll += LINES / 2 > 1 ? LINES / 2 : 1; return PANEL_HANDLED | PANEL_REDRAW;
    case KEY_PPAGE:
        app->flame_scroll -= LINES / 2 > 1 ? LINES / 2 : 1;
        if (app->flame_scroll < 0)
            app->flame_scroll = 0;
        return PANEL_HANDLED | PANEL_REDRAW;
    case KEY_HOME: app->flame_scroll = 0; return PANEL_HANDLED | PANEL_REDRAW;
    case KEY_END: app->flame_scroll = INT_MAX / 2; return PANEL_HANDLED | PANEL_REDRAW;
    case 'A': case 'f': case 'F': /* a task's flame graph: back to the tasks */
        if (!app->task_flame)
            break;
        FlamePanel_backToTasks(app);
        return PANEL_HANDLED | PANEL_REFRESH;
    case 'i':
        app->hide_idle = !app->hide_idle;
        return PANEL_HANDLED | PANEL_REFRESH;
    default: break;
    }
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
            if (App_nodeIncl(app, FlamePanel_node(app, c)) > best || next == PT_AGG_NONE) {
                best = App_nodeIncl(app, FlamePanel_node(app, c));
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
        app->flame_scroll = 0;
        return PANEL_HANDLED | PANEL_REDRAW;
    case KEY_BACKSPACE: case 127: case 8: case 27:
        if (app->task_flame && app->zoom_len == 0) {
            FlamePanel_backToTasks(app);
            return PANEL_HANDLED | PANEL_REFRESH;
        }
        if (app->zoom_len > 0)
            app->zoom_len--;
        app->flame_follow = 1;
        return PANEL_HANDLED | PANEL_REDRAW;
    default:
        return PANEL_IGNORED;
    }
    if (next != PT_AGG_NONE) {
        app->sel_len = FlamePanel_pathOf(app, next, app->sel_path);
        app->flame_follow = 1;
    }
    return PANEL_HANDLED | PANEL_REDRAW;
}

const PanelClass FlamePanel_class = {
    .name = "flame",
    .help = "arrows:select Enter:zoom Bksp/Esc:out PgUp/PgDn:scroll i:idle",
    .draw = FlamePanel_draw,
    .onKey = FlamePanel_onKey,
};
