/*
 * pytrace-top without a target: the job list. Picker_run is the curses list
 * (refreshed every second, each job's event rate from two listings), Enter
 * picks one; Picker_print is the same list as text (--once, or not on a
 * terminal). It hides what `pytrace ls` hides unless --all.
 */
#include <curses.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "crt.h"
#include "shm/base/grow.h"
#include "shm/clock.h"
#include "shm/segment.h"
#include "text.h"
#include "top.h"

typedef struct PickerRow {
    pt_segment_info_t info;
    double rate;
} PickerRow;

static const char *Picker_stateName(const pt_segment_info_t *s)
{
    if (!s->valid)
        return "INVALID";
    switch (s->state) {
    case PT_STATE_RUNNING: return "RUNNING";
    case PT_STATE_STOPPED: return "STOPPED";
    case PT_STATE_EXITED: return "EXITED";
    case PT_STATE_DEAD: return "DEAD";
    default: return "?";
    }
}

static void Picker_format(const PickerRow *r, char *line, size_t cap)
{
    char cmd[600], rate[32], name[300];
    /* the name is another user's choice too (any file under /dev/shm) */
    Text_escape(r->info.valid ? r->info.cmdline : r->info.error, cmd, sizeof cmd);
    Text_escape(r->info.name, name, sizeof name);
    Text_count(r->rate, rate, sizeof rate);
    snprintf(line, cap, " %-8llu %-8s %7u %9s %10llu  %-18s %s", (unsigned long long)r->info.pid, Picker_stateName(&r->info),
             r->info.threads_active, rate, (unsigned long long)r->info.events_dropped, name, cmd);
}

/* The list hides what `pytrace ls` hides (runtime/pytrace/cli.py cmd_ls):
 * segments whose producer is gone and files that are not valid segments,
 * unless --all. Keeps the shown ones at the front; returns their number. */
static size_t Picker_filter(pt_segment_info_t *infos, size_t count, int all)
{
    size_t kept = 0;
    for (size_t i = 0; i < count; i++)
        if (all || (infos[i].alive && infos[i].valid))
            infos[kept++] = infos[i];
    return kept;
}

/* Returns 0 with the chosen name, 1 if the user quit. */
int Picker_run(char *chosen, size_t cap, int all)
{
    PickerRow *rows = NULL, *prev = NULL; /* this listing's and the one before (for the rates) */
    size_t count = 0, prev_count = 0, rows_cap = 0, prev_cap = 0;
    int selected = 0, rc = 1;
    uint64_t last = 0, prev_t = 0;
    timeout(100);
    while (!CRT_quit) {
        uint64_t now = pt_monotonic_ns();
        if (!last || now - last >= 1000000000ull) {
            pt_segment_info_t *infos = NULL;
            size_t found = 0;
            if (pt_segment_list_alloc(&infos, &found) < 0)
                found = 0;
            count = Picker_filter(infos, found, all);
            if (pt_grow_size((void **)&rows, &rows_cap, sizeof *rows, count, 16) < 0)
                count = rows_cap; /* out of memory: the first ones */
            for (size_t i = 0; i < count; i++) {
                rows[i].info = infos[i];
                rows[i].rate = 0;
                for (size_t j = 0; j < prev_count; j++)
                    if (!strcmp(prev[j].info.name, infos[i].name) && prev_t && now > prev_t &&
                        infos[i].events_written >= prev[j].info.events_written)
                        rows[i].rate = (double)(infos[i].events_written - prev[j].info.events_written) * 1e9 /
                                       (double)(now - prev_t);
            }
            free(infos);
            prev_count = 0;
            if (count && pt_grow_size((void **)&prev, &prev_cap, sizeof *prev, count, 16) == 0) {
                memcpy(prev, rows, count * sizeof *rows);
                prev_count = count;
            }
            prev_t = now;
            last = now;
        }
        if (selected >= (int)count)
            selected = count ? (int)count - 1 : 0;
        (void)CRT_syncSize();
        erase();
        App_drawLine(0, CRT_attr(CRT_C_HEADER) | A_BOLD, " pytrace-top: pick a traced job (arrows + Enter, q to quit)");
        char line[1200];
        snprintf(line, sizeof line, " %-8s %-8s %7s %9s %10s  %-18s %s", "PID", "STATE", "THREADS", "EV/S", "DROPS",
                 "SEGMENT", "COMMAND");
        App_drawLine(1, A_BOLD | A_UNDERLINE, line);
        if (!count)
            mvaddstr(3, 1, all ? "no pytrace segments: start a job with `pytrace run script.py` (refreshing every second)"
                               : "no live pytrace segments: start a job with `pytrace run script.py` (refreshing every "
                                 "second; --all lists ended ones too)");
        for (size_t i = 0; i < count && (int)i + 2 < LINES - 1; i++) {
            Picker_format(&rows[i], line, sizeof line);
            App_drawLine(2 + (int)i, (int)i == selected ? CRT_attr(CRT_C_SELECTED) : (int)A_NORMAL, line);
        }
        App_drawLine(LINES - 1, CRT_attr(CRT_C_HELP_KEY), " Up/Down:select  Enter:attach  q:quit");
        refresh();
        int ch = getch();
        switch (ch) {
        case 'q': case 'Q': goto out;
        case KEY_UP: case 'k': if (selected > 0) selected--; break;
        case KEY_DOWN: case 'j': if (selected + 1 < (int)count) selected++; break;
        case '\n': case '\r': case KEY_ENTER:
            if (count) {
                snprintf(chosen, cap, "%s", rows[selected].info.name);
                rc = 0;
                goto out;
            }
            break;
        default: break;
        }
    }
out:
    free(rows);
    free(prev);
    return rc;
}

int Picker_print(int all)
{
    pt_segment_info_t *infos = NULL;
    size_t found = 0;
    int rc = pt_segment_list_alloc(&infos, &found);
    if (rc < 0) {
        fprintf(stderr, "pytrace-top: cannot list segments: %s\n", strerror(-rc));
        return 1;
    }
    found = Picker_filter(infos, found, all);
    if (!found) {
        printf("no %spytrace segments\n", all ? "" : "live ");
        free(infos);
        return 0;
    }
    printf(" %-8s %-8s %7s %9s %10s  %-18s %s\n", "PID", "STATE", "THREADS", "EV/S", "DROPS", "SEGMENT", "COMMAND");
    for (size_t i = 0; i < found; i++) {
        PickerRow r = {.info = infos[i]};
        char line[1200];
        Picker_format(&r, line, sizeof line);
        printf("%s\n", line);
    }
    free(infos);
    return 0;
}
