/*
 * The base layer (shm/base): arrays grow by doubling from their first capacity,
 * keep their contents, zero what is new when asked and refuse a capacity past
 * the limit with the array untouched; the error string fits its buffer; /proc
 * stat lines are parsed from the last ')' (a name may hold ") "), hostile text
 * is refused, a task of another process is not read and an id that is not a
 * pid never becomes a path.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/base/err.h"
#include "shm/base/grow.h"
#include "shm/base/procstat.h"
#include "tests/unit/check.h"

static void test_grow(void)
{
    int *a = NULL;
    size_t cap = 0;
    CHECK_EQ(pt_grow_size((void **)&a, &cap, sizeof *a, 1, 16), 0);
    CHECK_EQ(cap, 16);
    for (int i = 0; i < 16; i++)
        a[i] = i;
    CHECK_EQ(pt_grow_size((void **)&a, &cap, sizeof *a, 16, 16), 0); /* room already: unchanged */
    CHECK_EQ(cap, 16);
    CHECK_EQ(pt_grow_size((void **)&a, &cap, sizeof *a, 100, 16), 0);
    CHECK_EQ(cap, 128); /* 16 doubled until it holds 100 */
    for (int i = 0; i < 16; i++)
        CHECK_EQ(a[i], i);
    int *keep = a;
    CHECK_EQ(pt_grow_size((void **)&a, &cap, sizeof *a, SIZE_MAX / 2, 16), -ENOMEM); /* past size_t */
    CHECK(a == keep && cap == 128);
    free(a);

    uint64_t *z = NULL;
    size_t zcap = 0;
    CHECK_EQ(pt_grow_zeroed((void **)&z, &zcap, sizeof *z, 3, 4), 0);
    CHECK_EQ(zcap, 4);
    for (size_t i = 0; i < zcap; i++) {
        CHECK_EQ(z[i], 0);
        z[i] = ~0ull;
    }
    CHECK_EQ(pt_grow_zeroed((void **)&z, &zcap, sizeof *z, 9, 4), 0);
    CHECK_EQ(zcap, 16);
    for (size_t i = 0; i < zcap; i++)
        CHECK_EQ(z[i], i < 4 ? ~0ull : 0); /* the old kept, the new zeroed */
    free(z);

    char *b = NULL;
    uint32_t bcap = 0;
    CHECK_EQ(pt_grow((void **)&b, &bcap, 1, 1), 0);
    CHECK_EQ(bcap, 16);
    CHECK_EQ(pt_grow((void **)&b, &bcap, 1, 17), 0);
    CHECK_EQ(bcap, 32);
    CHECK_EQ(pt_grow((void **)&b, &bcap, 1, (1u << 30) + 1), -ENOMEM); /* past 2^30 elements */
    CHECK_EQ(bcap, 32);
    free(b);
}

static void test_err(void)
{
    char err[8] = "x";
    pt_set_err(err, sizeof err, "%s %d", "segment", 12345);
    CHECK(strcmp(err, "segment") == 0); /* cut to fit, terminated */
    pt_set_err(NULL, 10, "%d", 1);    /* no buffer: nothing */
    pt_set_err(err, 0, "%d", 1);
    CHECK(strcmp(err, "segment") == 0);
}

/* A stat line: fields 3.. after the name; ppid (4) = 1, utime (14) = 150,
 * stime (15) = 50, starttime (22) = 9999. */
#define FIELDS "S 1 2 3 4 5 6 7 8 9 10 150 50 13 14 15 16 17 18 9999 20 21 22\n"

static void test_parse(void)
{
    pt_proc_stat_t st;
    CHECK_EQ(pt_proc_stat_parse("42 (python3) " FIELDS, &st), 0);
    CHECK(st.state == 'S' && st.ppid == 1 && st.utime == 150 && st.stime == 50 && st.start == 9999);
    /* a thread may name itself "x) R 1 2 (" : fields count from the last ')' */
    memset(&st, 0, sizeof st);
    CHECK_EQ(pt_proc_stat_parse("42 (x) R 1 2 ( y) " FIELDS, &st), 0);
    CHECK(st.state == 'S' && st.utime == 150 && st.stime == 50 && st.start == 9999);
    CHECK_EQ(pt_proc_stat_parse("42 python3 S 1 2", &st), -EINVAL);                     /* no ')' */
    CHECK_EQ(pt_proc_stat_parse("42 (python3) S 1 2 3 4 5 6 7 8 9 10 150", &st), -EINVAL); /* cut */
    CHECK_EQ(pt_proc_stat_parse("42 (p) S 1 2 3 4 5 6 7 8 9 10 -150 50 13 14 15 16 17 18 9999 20\n", &st), -EINVAL);
    CHECK_EQ(pt_proc_stat_parse("42 (p) S 1 2 3 4 5 6 7 8 9 10 1x0 50 13 14 15 16 17 18 9999 20\n", &st), -EINVAL);
    CHECK_EQ(pt_proc_stat_parse("42 (p) S 1 2 3 4 5 6 7 8 9 10 99999999999999999999999 50 13 14 15 16 17 18 9 20\n",
                                &st),
             -EINVAL);
    CHECK_EQ(pt_proc_stat_parse("42 (p) S x 2 3 4 5 6 7 8 9 10 150 50 13 14 15 16 17 18 9999 20\n", &st),
             -EINVAL); /* ppid not a number */
    CHECK_EQ(pt_proc_stat_parse("", &st), -EINVAL);
}

static void test_read(void)
{
    uint64_t pid = (uint64_t)getpid(), me = (uint64_t)syscall(SYS_gettid);
    pt_proc_stat_t st, task;
    REQUIRE(pt_proc_stat_read(pid, 0, &st) == 0);
    CHECK(st.state == 'R');
    CHECK_EQ(st.ppid, (uint64_t)getppid());
    CHECK(st.start > 0);
    CHECK_EQ(pt_proc_stat_read(pid, me, &task), 0);
    CHECK_EQ(task.start, st.start); /* the main thread started with its process */
    /* the parent is not a task of this process: never read through our pid */
    CHECK_EQ(pt_proc_stat_read(pid, (uint64_t)getppid(), &st), -ENOENT);
    CHECK_EQ(pt_proc_stat_read(0, 0, &st), -EINVAL);
    CHECK_EQ(pt_proc_stat_read(1ull << 40, 0, &st), -EINVAL); /* not a pid: never a path */
    CHECK_EQ(pt_proc_stat_read(pid, 1ull << 40, &st), -EINVAL);
    /* a process that is gone (a child reaped) */
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0)
        _exit(0);
    int status;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK_EQ(pt_proc_stat_read((uint64_t)child, 0, &st), -ENOENT);
}

int main(void)
{
    test_grow();
    test_err();
    test_parse();
    test_read();
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures != 0;
}
