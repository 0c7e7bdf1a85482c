/*
 * pytrace-top's live view: the header lines (state, losses, errors, the
 * processes and threads lines), the current panel below them, the keys that
 * are the view's own, and the loop. The loop reads the source every POLL_MS
 * (getch's timeout) so the job's rings never fill, and re-queries the
 * aggregation and redraws every DRAW_NS (~3 Hz). The picture can be paused
 * (space) while reading goes on.
 */
#include <curses.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "crt.h"
#include "shm/clock.h"
#include "text.h"

#define DRAW_NS 333000000ull

static const double App_windows[] = {1, 2, 5, 10, 30, 60, 120, 300, 600};
#define N_WINDOWS (int)(sizeof App_windows / sizeof App_windows[0])

static void App_fillLine(int y, int attr)
{
    attrset(attr);
    move(y, 0);
    for (int i = 0; i < COLS; i++)
        addch(' ');
}

void App_drawLine(int y, int attr, const char *text)
{
    char buf[2048];
    App_fillLine(y, attr);
    Text_fit(text, COLS, 0, buf, sizeof buf);
    mvaddstr(y, 0, buf);
    attrset(A_NORMAL);
}

typedef struct ThreadCpu {
    pt_agg_thread_info_t info;
    double pct;
} ThreadCpu;

static int ThreadCpu_byPct(const void *a, const void *b)
{
    const ThreadCpu *x = a, *y = b;
    if (x->pct != y->pct)
        return x->pct < y->pct ? 1 : -1;
    return x->info.thread < y->info.thread ? -1 : x->info.thread > y->info.thread;
}

/* " threads (cpu): 2 side 98.7%  1 MainThread 0.2%": the threads running now,
 * busiest first (as top orders them); all of them once the job ended or for a
 * recording (first seen first; its cpu is n/a). The selected one is [marked]. */
static void App_threadsLine(App *app, char *line, size_t cap)
{
    size_t n = pt_agg_thread_count(app->agg), k = 0, running = 0;
    ThreadCpu *list = calloc(n ? n : 1, sizeof *list);
    int live = app->cpu.pid != 0;
    size_t used = (size_t)snprintf(line, cap, live ? " threads (cpu):" : " threads (cpu n/a in a recording):");
    if (!list)
        return;
    for (size_t i = 0; i < n; i++)
        if (!pt_agg_thread_at(app->agg, i, &list[k].info)) {
            running += !list[k].info.ended;
            k++;
        }
    size_t m = 0;
    for (size_t i = 0; i < k; i++) { /* keep the running ones, when there are any */
        if (running && list[i].info.ended)
            continue;
        list[i].pct = live ? CpuMeter_periodPct(Cpu_thread(&app->cpu, list[i].info.thread)) : 0;
        list[m++] = list[i];
    }
    if (live)
        qsort(list, m, sizeof *list, ThreadCpu_byPct);
    for (size_t i = 0; i < m && used < cap; i++) {
        char name[128], pct[32] = "";
        App_threadName(&list[i].info, name, sizeof name);
        if (live)
            App_cpuText(app, Cpu_thread(&app->cpu, list[i].info.thread), pct, sizeof pct);
        int sel = app->thread == list[i].info.thread;
        int w = snprintf(line + used, cap - used, " %s%llu%s%s%s%s%s", sel ? "[" : " ",
                         (unsigned long long)list[i].info.thread, name[0] ? " " : "", name, live ? " " : "", pct,
                         sel ? "]" : "");
        if (w < 0)
            break;
        used += (size_t)w;
    }
    free(list);
}

/* " processes (P): [4101 running 98.7% python job.py]  4102 exited 0.0% ...": each
 * process of the stream, its pid, state and CPU% (n/a in a recording); the
 * shown one [marked]. */
static void App_processesLine(App *app, char *line, size_t cap)
{
    size_t used = (size_t)snprintf(line, cap, " processes (P):");
    for (size_t i = 0; i < pt_aggset_count(app->set) && used < cap; i++) {
        const pt_fb_process_info_t *pi = pt_agg_process_info(pt_aggset_agg(app->set, i));
        const Cpu *c = i == app->proc ? &app->cpu : &app->cpus[i];
        char pct[32] = "n/a", cmd[64] = "", esc[200];
        if (c->pid) {
            double v = CpuMeter_periodPct(&c->process);
            if (v >= 0)
                snprintf(pct, sizeof pct, "%.1f%%", v);
            else
                snprintf(pct, sizeof pct, "-");
        }
        char label[300];
        pt_process_label(pi->role.ptr, pi->command_line.ptr, label, sizeof label);
        Text_escape(label, esc, sizeof esc);
        Text_fit(esc, 24, 0, cmd, sizeof cmd);
        int sel = i == app->proc;
        int w = snprintf(line + used, cap - used, " %s%llu %s %s %s%s", sel ? "[" : " ",
                         (unsigned long long)pi->pid, App_procState(pt_aggset_agg(app->set, i)), pct, cmd, sel ? "]" : "");
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

static void App_draw(App *app)
{
    erase();
    char line[2048], rate[32], cmd[300], win[160], losses[256], cpu[32];
    const pt_fb_process_info_t *pi = pt_agg_process_info(app->agg);
    char label[300];
    pt_process_label(pi->role.ptr, pi->command_line.ptr, label, sizeof label);
    Text_escape(label, cmd, sizeof cmd);
    Text_count(app->read_rate, rate, sizeof rate);
    uint64_t dropped = App_dropped(app);
    unsigned threads = app->counters.threads_active;
    App_threadLabel(app, win, sizeof win);
    App_cpuText(app, &app->cpu.process, cpu, sizeof cpu);
    const char *state = App_stateName(app);
    char source[300] = "", speed[64];
    int replay = app->source->cls->replay;
    Source_describe(app->source, source, sizeof source);
    if (replay) {
        Text_count((double)app->stats.events_read, rate, sizeof rate);
        snprintf(speed, sizeof speed, "%s events", rate);
    } else {
        snprintf(speed, sizeof speed, "%s ev/s", rate);
    }
    int other_losses = App_lossText(app, "  ", losses, sizeof losses);
    snprintf(line, sizeof line, " pytrace-top  %spid %llu  [%s]%s  cpu %s  %s  %s  dropped %llu%s%s  threads %u  window %gs  %s  %s: %s  %s",
             source, (unsigned long long)(pt_aggset_count(app->set) > 1 ? pi->pid : app->stats.pid), state, app->paused ? " PAUSED" : "",
             cpu, App_timeName(app), speed,
             (unsigned long long)dropped, other_losses ? "  " : "", losses, threads, app->window_seconds, win, app->panel->name,
             app->step_mode && app->panel != &TasksPanel_class && !app->task_flame ? "last step"
             : app->panel == &TablePanel_class ? (app->table_window ? "window" : "whole run")
             : app->panel == &TasksPanel_class || app->task_flame ? "whole run" : "window", cmd);
    App_drawLine(0, CRT_attr(app->status.ended || app->status.died ? CRT_C_ENDED : CRT_C_HEADER) | A_BOLD, line);
    int top = 1;
    if (dropped) {
        snprintf(line, sizeof line,
                 " WARNING: the job dropped %llu events (%s); counts are incomplete - "
                 "use a larger ring (pytrace run --ring-size) or the lossless policy",
                 (unsigned long long)dropped, app->counters.dropped_cause);
        App_drawLine(top++, CRT_attr(CRT_C_WARNING) | A_BOLD, line);
    }
    if (app->counters.missed_in_hub) {
        snprintf(line, sizeof line, " this view missed %llu events (%s); not the job's drops",
                 (unsigned long long)app->counters.missed_in_hub, app->counters.missed_cause);
        App_drawLine(top++, CRT_attr(CRT_C_WARNING), line);
    }
    if (other_losses) {
        char list[256];
        App_lossText(app, ", ", list, sizeof list);
        snprintf(line, sizeof line,
                 " WARNING: the job lost more than events (%s); the picture is incomplete - "
                 "pytrace.stop() and the job's stderr say why", list);
        App_drawLine(top++, CRT_attr(CRT_C_WARNING) | A_BOLD, line);
    }
    if (App_error(app)[0]) {
        char esc[600];
        Text_escape(App_error(app), esc, sizeof esc);
        snprintf(line, sizeof line, " error: %s", esc);
        App_drawLine(top++, CRT_attr(CRT_C_WARNING), line);
    }
    if (app->counters.unannounced) { /* damage (walk.h): the same words as pytrace export's */
        snprintf(line, sizeof line, " DAMAGE: %llu events name symbols never announced: shown as <unknown #id>",
                 (unsigned long long)app->counters.unannounced);
        App_drawLine(top++, CRT_attr(CRT_C_WARNING) | A_BOLD, line);
    }
    if (app->counters.folded_calls && app->panel == &FlamePanel_class) {
        char n[32];
        Text_count((double)app->counters.folded_calls, n, sizeof n);
        snprintf(line, sizeof line,
                 " call tree: budget %llu MiB reached; %s calls folded into [other] (the table is exact; "
                 "--tree-budget MIB)", (unsigned long long)(app->counters.tree_budget >> 20), n);
        App_drawLine(top++, CRT_attr(CRT_C_WARNING), line);
    }
    if (app->status.disconnected) {
        snprintf(line, sizeof line, " %s: disconnected from the hub; the job may still run (pytrace top PID "
                 "reads it again); this is the last picture (q to quit)", state);
        App_drawLine(top++, CRT_attr(CRT_C_ENDED) | A_BOLD, line);
    } else if (app->status.ended || app->status.died) {
        const char *how = app->status.died ? "died without a clean exit" : "exited";
        if (app->status.cut_short && !app->status.died)
            how = "was still running when the recording stopped";
        snprintf(line, sizeof line, " %s: %s %s; this is its last picture%s (q to quit)", state,
                 replay ? "the recording ended: the job" : "the job", how,
                 replay ? ", the window is its last seconds" : "");
        App_drawLine(top++, CRT_attr(CRT_C_ENDED) | A_BOLD, line);
    } else if (app->status.stalled && !app->status.damaged) {
        App_drawLine(top++, CRT_attr(CRT_C_WARNING),
                     " INCOMPLETE: the recording has no end mark and is not growing (its writer stopped or is idle); "
                     "watching the file");
    }
    if (pt_aggset_count(app->set) > 1) {
        App_processesLine(app, line, sizeof line);
        App_drawLine(top++, A_NORMAL, line);
    }
    if (pt_agg_thread_count(app->agg)) {
        App_threadsLine(app, line, sizeof line);
        App_drawLine(top++, A_NORMAL, line);
    }
    if (app->steps.count || app->step_mode) {
        App_stepsLine(app, line, sizeof line);
        App_drawLine(top++, app->step_mode ? A_BOLD : A_NORMAL, line);
    }
    if (app->filter_editing || app->filter[0]) {
        char esc[300];
        Text_escape(app->filter, esc, sizeof esc);
        snprintf(line, sizeof line, " filter: %s%s", esc, app->filter_editing ? "_  (Enter: done, Esc: clear)" : "");
        App_drawLine(top++, A_BOLD, line);
    }
    int rows = LINES - top - 1;
    if (rows > 0)
        app->panel->draw(app, top, rows, COLS);
    if (rows > 0 && app->help)
        Help_draw(top, rows, COLS);
    snprintf(line, sizeof line, " ?:help q:quit space:pause Tab:%s c:%s s:%s T:threads A:tasks%s /:filter +/-:window  %s  [sort %s %s]",
             app->panel == &TablePanel_class ? "flame" : "table", app->time_cpu ? "wall" : "CPU",
             app->step_mode ? "all" : "last step",
             pt_aggset_count(app->set) > 1 ? " P:process" : "",
             app->panel->help, App_sortNames[app->sort],
             app->sort_desc ? "desc" : "asc");
    App_drawLine(LINES - 1, CRT_attr(CRT_C_HELP_KEY), line);
    refresh();
}

static PanelResult App_onFilterKey(App *app, int ch)
{
    size_t len = strlen(app->filter);
    if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) {
        app->filter_editing = 0;
    } else if (ch == 27) {
        app->filter_editing = 0;
        app->filter[0] = 0;
    } else if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
        if (len)
            app->filter[len - 1] = 0;
    } else if (ch >= 0x20 && ch < 0x7f && len + 1 < sizeof app->filter) {
        app->filter[len] = (char)ch;
        app->filter[len + 1] = 0;
    } else {
        return PANEL_HANDLED;
    }
    app->table_selected = app->table_scroll = 0;
    return PANEL_HANDLED | PANEL_REFRESH;
}

static PanelResult App_onKey(App *app, int ch)
{
    if (app->help && ch != KEY_RESIZE) { /* any key closes the help screen, and does nothing else */
        app->help = 0;
        return PANEL_HANDLED | PANEL_REDRAW;
    }
    if (app->filter_editing)
        return App_onFilterKey(app, ch);
    PanelResult r = app->panel->onKey(app, ch);
    if (r & PANEL_HANDLED)
        return r;
    switch (ch) {
    case 'q': case 'Q': return PANEL_QUIT;
    case ' ':
        app->paused = !app->paused;
        return PANEL_REFRESH;
    case '\t': case 'v':
        app->panel = app->panel == &TablePanel_class ? &FlamePanel_class : &TablePanel_class;
        app->task_flame = 0;
        return PANEL_REFRESH;
    case 'A': /* task mode (taskview.c): the asyncio tasks; Enter there shows one's logical calls */
        TasksPanel_open(app);
        return PANEL_REFRESH;
    case 'T': /* the thread list (threads.c); Enter there picks one */
        ThreadsPanel_open(app);
        return PANEL_REFRESH;
    case '?':
        app->help = 1;
        return PANEL_REDRAW;
    case 's': /* step mode: the last complete step alone (agg.h STEPS) */
        app->step_mode = !app->step_mode;
        app->table_selected = app->table_scroll = 0;
        app->sel_len = app->zoom_len = app->flame_scroll = 0;
        return PANEL_REFRESH;
    case 'c': /* the time shown: wall <-> CPU (waiting hidden) */
        app->time_cpu = !app->time_cpu;
        app->table_selected = app->table_scroll = 0;
        return PANEL_REFRESH;
    case 'P': /* the next process of a multi-process stream */
        if (pt_aggset_count(app->set) > 1) {
            app->want_pid = 0;
            App_showProcess(app, (app->proc + 1) % pt_aggset_count(app->set));
            app->sel_len = app->zoom_len = app->flame_scroll = 0;
            app->table_selected = app->table_scroll = 0;
        }
        return PANEL_REFRESH;
    case '/':
        app->filter_editing = 1;
        return PANEL_REDRAW;
    case '+': case '=': case '-': case '_': {
        int i = 0;
        while (i < N_WINDOWS - 1 && App_windows[i] < app->window_seconds)
            i++;
        if (ch == '+' || ch == '=')
            i = i + 1 < N_WINDOWS ? i + 1 : i;
        else
            i = i > 0 ? i - 1 : 0;
        app->window_seconds = App_windows[i];
        return PANEL_REFRESH;
    }
    case KEY_RESIZE:
        return PANEL_REDRAW;
    default:
        return PANEL_IGNORED;
    }
}

int App_run(App *app)
{
    uint64_t last_draw = 0, rate_t0 = pt_monotonic_ns(), next_retry = 0;
    uint64_t rate_events0 = 0;
    int need_refresh = 1;
    timeout(POLL_MS);
    while (!CRT_quit) {
        uint64_t now = pt_monotonic_ns();
        if (!App_error(app)[0] || now >= next_retry) {
            long n = App_poll(app);
            if (n < 0 && n != -EPIPE && n != -ECONNRESET)
                next_retry = now + 1000000000ull; /* keep trying, slowly */
            else
                next_retry = 0;
        }
        if (now - rate_t0 >= 1000000000ull) {
            pt_reader_stats_t st;
            Source_stats(app->source, &st);
            app->read_rate = (double)(st.events_read - rate_events0) * 1e9 / (double)(now - rate_t0);
            rate_events0 = st.events_read;
            rate_t0 = now;
        }
        if (CRT_syncSize())
            last_draw = 0; /* draw the new size now */
        if (now - last_draw >= DRAW_NS) {
            if (!app->paused || need_refresh)
                App_refresh(app);
            else
                Source_stats(app->source, &app->stats);
            need_refresh = 0;
            App_draw(app);
            last_draw = now;
        }
        int ch = getch();
        if (ch == ERR)
            continue;
        PanelResult r = App_onKey(app, ch);
        if (r & PANEL_QUIT)
            break;
        if (r & PANEL_REFRESH)
            App_refresh(app);
        if (r & (PANEL_REDRAW | PANEL_REFRESH)) {
            App_draw(app);
            last_draw = pt_monotonic_ns();
        }
    }
    return 0;
}
