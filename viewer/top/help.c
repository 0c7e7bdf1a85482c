/*
 * Help: the screen that ? shows over the panel: every key of every mode, one
 * table (README's keys table says the same). Any key closes it (main.c).
 */
#include <curses.h>
#include <stdio.h>

#include "app.h"
#include "crt.h"
#include "text.h"

static const struct {
    const char *key;   /* NULL: a mode's heading in `what` */
    const char *what;
} Help_keys[] = {
    {NULL, "everywhere"},
    {"?", "this help (any key closes it)"},
    {"q", "quit"},
    {"space", "pause the picture (reading goes on, the job's rings do not fill)"},
    {"Tab v", "table view <-> flame view"},
    {"T", "thread list: pick a thread, or all threads"},
    {"P", "several processes: show the next process"},
    {"/", "filter by name: the table keeps matching rows, the flame highlights them"},
    {"+ -", "window length, 1 s to 600 s"},
    {"c", "time shown: wall <-> CPU (the header says which; in CPU mode waiting is hidden: percentages, "
          "sorting, the flame graph and all threads follow)"},
    {"s", "step mode: the table and the flame graph show the last complete step alone (steps end at "
          "pytrace.step() and, under --torch, Optimizer.step); the steps line: count, last, median, p10-p90, "
          "mean, sd, slowest; wall time only"},
    {NULL, "table"},
    {"o t # n f", "sort by own, total, calls, name, file (F3-F7)"},
    {"", "WAIT% (wall time): the off-CPU part of each function's own time"},
    {"", "<not observed> (last row): time in gaps, in no function nor %"},
    {"r", "reverse the sort"},
    {"w", "whole run <-> rolling window"},
    {"arrows PgUp PgDn Home End", "move the selection"},
    {NULL, "flame"},
    {"arrows", "select a frame: parent, biggest child, siblings"},
    {"Enter", "zoom into the selected frame"},
    {"Bksp Esc", "zoom out one level"},
    {"PgUp PgDn Home End", "scroll a deep graph up and down (the edges say how many levels are hidden)"},
    {"", "wall time: frames that mostly wait (off a CPU) are white on blue"},
    {"i", "hide idle threads: those that started no call in the window (blocked or waiting "
          "in one call, or done; one busy in a single long call too)"},
    {"A", "task mode: the asyncio tasks of the shown process, whole run (Python 3.12+)"},
    {NULL, "task mode (A)"},
    {"", "ID STATE STEPS RUN WAIT NAME COROUTINE, WAITING ON: what a pending task awaits now"},
    {"r w", "sort by running time, by waiting time (the largest first)"},
    {"arrows PgUp PgDn Home End", "move the cursor"},
    {"Enter", "the task under the cursor: its waiting by kind and its logical calls (one call of a "
              "coroutine, however many resumptions), by total time"},
    {"f", "the flame graph of the task under the cursor (or shown): its logical calls from its "
          "coroutine, running time only; Esc or A back to the tasks"},
    {"F", "every task's flame graph side by side (one frame per task under the root)"},
    {"Esc A", "back (Esc: from a task to the table, A: out of task mode)"},
    {NULL, "thread list (T)"},
    {"arrows PgUp PgDn Home End", "move (live threads first, then ended ones, the latest first)"},
    {"Enter", "show the thread under the cursor (the first row: all threads)"},
    {"a", "all threads"},
    {"Esc T", "back, unchanged"},
    {NULL, "filter (/)"},
    {"text", "the filter, a part of the name, any case (in task mode: of the task's name)"},
    {"Enter", "done (the filter stays)"},
    {"Esc", "clear the filter"},
    {"Bksp", "delete a character"},
};
#define HELP_COUNT (int)(sizeof Help_keys / sizeof Help_keys[0])
#define HELP_KEY_WIDTH 25

void Help_draw(int top, int rows, int cols)
{
    if (rows < 2 || cols < 20)
        return;
    /* one column, or two when the rows are too few */
    int per_col = rows - 1, ncols = HELP_COUNT > per_col && cols >= 100 ? 2 : 1;
    int colw = cols / ncols;
    for (int y = top; y < top + rows; y++) {
        move(y, 0);
        for (int x = 0; x < cols; x++)
            addch(' ');
    }
    attrset(CRT_attr(CRT_C_HEADER) | A_BOLD);
    move(top, 0);
    for (int x = 0; x < cols; x++)
        addch(' ');
    mvaddstr(top, 1, "pytrace-top keys (any key closes this)");
    attrset(A_NORMAL);
    for (int i = 0; i < HELP_COUNT && i / per_col < ncols; i++) {
        int y = top + 1 + i % per_col, x = (i / per_col) * colw;
        char text[512], fit[512];
        if (!Help_keys[i].key) {
            attrset(A_BOLD | A_UNDERLINE);
            snprintf(text, sizeof text, " %s", Help_keys[i].what);
        } else {
            snprintf(text, sizeof text, "   %-*s %s", HELP_KEY_WIDTH, Help_keys[i].key, Help_keys[i].what);
        }
        Text_fit(text, colw - 1, 0, fit, sizeof fit);
        mvaddstr(y, x, fit);
        attrset(A_NORMAL);
    }
}
