/*
 * CRT: the one owner of curses state (htop's CRT.c). CRT_init enters curses,
 * sets colours and holds stderr aside (into a temporary file, replayed by
 * CRT_done) so nothing written to stderr garbles the screen. CRT_done leaves
 * curses and restores stderr; it is idempotent and is also called from the
 * fatal-signal handlers so a crash leaves a usable terminal.
 */
#ifndef PT_TOP_CRT_H
#define PT_TOP_CRT_H

enum CRT_color {
    CRT_C_NORMAL = 0,
    CRT_C_HEADER = 1,
    CRT_C_WARNING = 2,
    CRT_C_SELECTED = 3,
    CRT_C_HELP_KEY = 4,
    CRT_C_ENDED = 5,
    CRT_C_MATCH = 6,  /* a flame frame that matches the filter */
    CRT_C_FLAME0 = 7, /* CRT_FLAME_COLORS pairs from here */
};
#define CRT_FLAME_COLORS 4
/* a flame frame that mostly waits (wall mode): white on blue; without colours, dim */
#define CRT_C_WAITING (CRT_C_FLAME0 + CRT_FLAME_COLORS)

extern int CRT_utf8;            /* the locale is UTF-8: draw UTF-8 names and "…" */
extern volatile int CRT_quit;   /* set by SIGINT / SIGTERM */

void CRT_setLocale(void);       /* setlocale + CRT_utf8; also for headless mode */
int CRT_init(void);             /* 0 or -1 (not a terminal) */
void CRT_done(void);
/* Compare curses' idea of the size with the terminal's (TIOCGWINSZ) and resize
 * if they differ; 1 if it resized. Called before every frame, so a SIGWINCH
 * that arrived before curses installed its handler (a terminal resized right
 * after the program started) is never lost. */
int CRT_syncSize(void);
int CRT_attr(int color);        /* COLOR_PAIR with fallbacks for monochrome terminals */
void CRT_line(int y, int cols, int attr, const char *text); /* row y cleared in attr, text fitted to cols */

#endif
