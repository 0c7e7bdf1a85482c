/*
 * The one reader of /proc/PID/stat and /proc/PID/task/TID/stat (proc(5)): a
 * process's or thread's state, parent, CPU ticks and start time. What a
 * segment's header names (its producer's pid and start time) is checked
 * against it, so the pid is bounded before it becomes a path and the line is
 * parsed as untrusted text: the command name (field 2) may hold spaces and
 * parentheses, so fields are counted from its last ')'.
 */
#ifndef PT_BASE_PROCSTAT_H
#define PT_BASE_PROCSTAT_H

#include <stdint.h>

#include "base.h"

/* pid_max is at most 2^22 on Linux: a larger id is not a task. */
#define PT_PROC_ID_MAX UINT64_C(4194304)

typedef struct pt_proc_stat {
    char state;      /* field 3: 'R', 'S', 'D', 'Z', 'X', ... */
    uint64_t ppid;   /* field 4 */
    uint64_t utime;  /* field 14, clock ticks (sysconf(_SC_CLK_TCK)) */
    uint64_t stime;  /* field 15, clock ticks */
    uint64_t start;  /* field 22, clock ticks since boot */
} pt_proc_stat_t;

/* Parse the text of a stat file. 0, or -EINVAL when it is not a stat line
 * (no ')', fewer than 22 fields, a field 4, 14, 15 or 22 that is not a
 * non-negative number that fits 64 bits). */
PT_BASE_HIDDEN int pt_proc_stat_parse(const char *text, pt_proc_stat_t *out);

/* Read /proc/PID/stat (tid 0) or /proc/PID/task/TID/stat. 0; -ENOENT when the
 * process (or a tid of it) is gone; -EINVAL for pid 0, an id past
 * PT_PROC_ID_MAX (never made a path) or a line that does not parse; another
 * -errno when the file cannot be read. */
PT_BASE_HIDDEN int pt_proc_stat_read(uint64_t pid, uint64_t tid, pt_proc_stat_t *out);

#endif /* PT_BASE_PROCSTAT_H */
