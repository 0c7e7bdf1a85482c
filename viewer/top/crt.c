#include <sys/ioctl.h>
#include "crt.h"
#include "text.h"

#include <curses.h>
#include <langinfo.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int CRT_utf8;
volatile int CRT_quit;

static volatile sig_atomic_t crt_active;
static int crt_saved_stderr = -1;
static FILE *crt_stderr_file;
static int crt_has_colors;

void CRT_setLocale(void)
{
    setlocale(LC_ALL, "");
    const char *cs = nl_langinfo(CODESET);
    CRT_utf8 = cs && (!strcmp(cs, "UTF-8") || !strcmp(cs, "utf8"));
}

static void CRT_handleQuit(int sig)
{
    (void)sig;
    CRT_quit = 1;
}

static void CRT_handleFatal(int sig)
{
    /* leave a usable terminal, then die of the same signal */
    CRT_done();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void CRT_holdStderr(void)
{
    fflush(stderr);
    crt_stderr_file = tmpfile();
    if (!crt_stderr_file)
        return;
    crt_saved_stderr = dup(STDERR_FILENO);
    if (crt_saved_stderr < 0 || dup2(fileno(crt_stderr_file), STDERR_FILENO) < 0) {
        fclose(crt_stderr_file);
        crt_stderr_file = NULL;
    }
}

static void CRT_releaseStderr(void)
{
    if (!crt_stderr_file || crt_saved_stderr < 0)
        return;
    fflush(stderr);
    dup2(crt_saved_stderr, STDERR_FILENO);
    close(crt_saved_stderr);
    crt_saved_stderr = -1;
    /* replay what was written while curses owned the screen */
    char buf[4096];
    ssize_t n;
    if (lseek(fileno(crt_stderr_file), 0, SEEK_SET) == 0)
        while ((n = read(fileno(crt_stderr_file), buf, sizeof buf)) > 0)
            if (write(STDERR_FILENO, buf, (size_t)n) < 0)
                break;
    fclose(crt_stderr_file);
    crt_stderr_file = NULL;
}

int CRT_syncSize(void)
{
    struct winsize ws;
    if (!crt_active || ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0 || ws.ws_row == 0)
        return 0;
    if (ws.ws_col == COLS && ws.ws_row == LINES)
        return 0;
    resize_term(ws.ws_row, ws.ws_col);
    clearok(curscr, TRUE);
    return 1;
}

int CRT_init(void)
{
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
        return -1;
    CRT_holdStderr();
    if (!initscr()) {
        CRT_releaseStderr();
        return -1;
    }
    crt_active = 1;
    cbreak();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    curs_set(0);
    set_escdelay(25);
    if (has_colors()) {
        start_color();
        use_default_colors();
        crt_has_colors = 1;
        init_pair(CRT_C_HEADER, COLOR_BLACK, COLOR_CYAN);
        init_pair(CRT_C_WARNING, COLOR_WHITE, COLOR_RED);
        init_pair(CRT_C_SELECTED, COLOR_BLACK, COLOR_GREEN);
        init_pair(CRT_C_HELP_KEY, COLOR_BLACK, COLOR_CYAN);
        init_pair(CRT_C_ENDED, COLOR_BLACK, COLOR_YELLOW);
        init_pair(CRT_C_MATCH, COLOR_WHITE, COLOR_BLUE);
        init_pair(CRT_C_FLAME0 + 0, COLOR_BLACK, COLOR_RED);
        init_pair(CRT_C_FLAME0 + 1, COLOR_BLACK, COLOR_YELLOW);
        init_pair(CRT_C_FLAME0 + 2, COLOR_BLACK, COLOR_MAGENTA);
        init_pair(CRT_C_FLAME0 + 3, COLOR_BLACK, COLOR_WHITE);
        init_pair(CRT_C_WAITING, COLOR_WHITE, COLOR_BLUE);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = CRT_handleQuit;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = CRT_handleFatal;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    sigaction(SIGABRT, &sa, NULL);
    sigaction(SIGFPE, &sa, NULL);
    return 0;
}

void CRT_done(void)
{
    if (!crt_active)
        return;
    crt_active = 0;
    curs_set(1);
    endwin();
    CRT_releaseStderr();
}

int CRT_attr(int color)
{
    if (crt_has_colors)
        return COLOR_PAIR(color);
    switch (color) {
    case CRT_C_NORMAL: return A_NORMAL;
    case CRT_C_WARNING: return A_BOLD | A_REVERSE;
    case CRT_C_SELECTED: return A_REVERSE;
    case CRT_C_WAITING: return A_DIM;
    default: return A_REVERSE;
    }
}

void CRT_line(int y, int cols, int attr, const char *text)
{
    char buf[2048];
    attrset(attr);
    move(y, 0);
    for (int i = 0; i < cols; i++)
        addch(' ');
    Text_fit(text, cols, 0, buf, sizeof buf);
    mvaddstr(y, 0, buf);
    attrset(A_NORMAL);
}
