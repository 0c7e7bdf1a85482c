/*
 * Segment: create/attach round trip, every kind of bad segment (each gives its
 * own clear one-line error and no crash), dead producers in list/collect, the
 * consumer lock (busy, dead holder taken over), a full /dev/shm, another
 * user's segment, ring slots claimed until exhausted, retired and reused.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../check.h"
#include "shm/clock.h"
#include "shm/segment.h"
#include "shm/symlog.h"


/* An error must be one line that contains `want`. */
#define CHECK_ERR(rc, want_rc, err, want)                                                              \
    do {                                                                                               \
        CHECKF((rc) == (want_rc), "rc %d, want %d (%s)", (rc), (want_rc), (err));                       \
        CHECKF(strstr((err), (want)) != NULL, "error \"%s\" lacks \"%s\"", (err), (want));             \
        CHECKF(strchr((err), '\n') == NULL, "error is not one line: \"%s\"", (err));                    \
        printf("  ok (%d): %s\n", (rc), (err));                                                       \
    } while (0)

static pt_clock_t test_clock;

static pt_segment_config_t small_config(void)
{
    pt_segment_config_t cfg = {
        .ring_count = 4,
        .chunk_bytes = 4096,
        .chunks_per_ring = 2,
        .symlog_bytes = 8192,
        .drop_policy = PT_POLICY_DROP,
        .cmdline = "python3 -m demo --flag",
        .python_version = "3.11.2",
        .clock_kind = test_clock.kind,
        .ticks_per_second = test_clock.ticks_per_second,
        .base_ticks = test_clock.base_ticks,
        .base_monotonic_ns = test_clock.base_monotonic_ns,
        .base_realtime_ns = test_clock.base_realtime_ns,
    };
    return cfg;
}

static pt_segment_t *create_small(void)
{
    pt_segment_config_t cfg = small_config();
    pt_segment_t *seg = NULL;
    char err[256] = "";
    int rc = pt_segment_create(&cfg, &seg, err, sizeof err);
    CHECKF(rc == 0, "create: %s", err);
    if (rc != 0)
        exit(1);
    return seg;
}

static int shm_exists(const char *name)
{
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

static char skip_name[128];
static int skip_calls;

static int skip_one(const char *name, void *ctx)
{
    (void)ctx;
    skip_calls++;
    return strcmp(name, skip_name) == 0;
}

/* The role line: none until set, then what the producer set (cut at a UTF-8
 * boundary to PT_ROLE_BYTES - 1), its sequence even and growing with each set. */
static void test_role(void)
{
    printf("role\n");
    pt_segment_t *seg = create_small();
    pt_seg_header_t *h = pt_segment_header(seg);
    char role[PT_ROLE_BYTES + 1];
    CHECKF(pt_segment_read_role(h, role, sizeof role) == 0 && role[0] == '\0', "no role yet");
    pt_segment_set_role(seg, "ForkPoolWorker-1");
    uint32_t s1 = pt_segment_read_role(h, role, sizeof role);
    CHECKF(s1 != 0 && s1 % 2 == 0 && strcmp(role, "ForkPoolWorker-1") == 0, "role %s seq %u", role, s1);
    char longer[300];
    memset(longer, 'a', sizeof longer);
    memcpy(longer + PT_ROLE_BYTES - 2, "\xc3\xa9", 2); /* an e-acute across the limit */
    longer[sizeof longer - 1] = '\0';
    pt_segment_set_role(seg, longer);
    uint32_t s2 = pt_segment_read_role(h, role, sizeof role);
    CHECKF(s2 > s1 && s2 % 2 == 0 && strlen(role) == PT_ROLE_BYTES - 2, "cut at the character: %zu",
           strlen(role));
    /* a writer caught in the middle (odd sequence): the reader says try again */
    atomic_store(&h->role_seq, s2 + 1);
    CHECKF(pt_segment_read_role(h, role, sizeof role) == UINT32_MAX, "odd sequence");
    atomic_store(&h->role_seq, s2);
    char small[8];
    CHECKF(pt_segment_read_role(h, small, sizeof small) == s2 && strcmp(small, "aaaaaaa") == 0, "bounded copy");
    pt_segment_close(seg, 1);
}

static void test_round_trip(void)
{
    printf("round trip\n");
    pt_segment_t *seg = create_small();
    const char *name = pt_segment_name(seg);
    pt_seg_header_t *h = pt_segment_header(seg);
    char expect[64];
    snprintf(expect, sizeof expect, "/pytrace-%ld-", (long)getpid());
    CHECKF(strncmp(name, expect, strlen(expect)) == 0, "name %s", name);
    struct stat st;
    char path[128];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    CHECKF(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "mode %o", (unsigned)(st.st_mode & 0777));
    CHECKF((uint64_t)st.st_size == h->segment_bytes, "file size %lld vs %" PRIu64, (long long)st.st_size,
          h->segment_bytes);
    CHECKF(h->ring_table_offset % 4096 == 0 && h->rings_offset % 4096 == 0 && h->symlog_offset % 4096 == 0,
          "offsets page aligned");
    CHECKF(h->ring_bytes == 8192 && h->ring_count == 4 && h->wait_timeout_ns == 1000000000ull, "geometry");
    CHECKF(atomic_load(&h->state) == PT_STATE_RUNNING, "state RUNNING");
    CHECKF(h->pid == (uint64_t)getpid() && h->uid == geteuid() && h->producer_start != 0, "process info");

    /* attach: by name with and without '/', and by pid */
    const char *targets[3];
    char bare[96], pid_str[32];
    snprintf(bare, sizeof bare, "%s", name + 1);
    snprintf(pid_str, sizeof pid_str, "%ld", (long)getpid());
    targets[0] = name;
    targets[1] = bare;
    targets[2] = pid_str;
    for (int i = 0; i < 3; i++) {
        pt_segment_t *r = NULL;
        char err[256] = "";
        int rc = pt_segment_attach(targets[i], 0, &r, err, sizeof err);
        CHECKF(rc == 0, "attach %s: %s", targets[i], err);
        if (rc != 0)
            continue;
        CHECKF(strcmp(pt_segment_name(r), name) == 0, "attached %s, want %s", pt_segment_name(r), name);
        pt_seg_header_t *rh = pt_segment_header(r);
        CHECKF(strcmp(rh->cmdline, "python3 -m demo --flag") == 0, "cmdline %s", rh->cmdline);
        CHECKF(strcmp(rh->python_version, "3.11.2") == 0, "python_version");
        CHECKF(rh->ticks_per_second == test_clock.ticks_per_second && rh->clock_kind == test_clock.kind, "clock");
        CHECKF(pt_segment_producer_alive(r) == 1, "producer alive");
        CHECKF(pt_segment_ring_base(r, 3) - (uint8_t *)rh == (ptrdiff_t)(rh->rings_offset + 3 * rh->ring_bytes),
              "ring base");
        CHECKF(pt_segment_slot(r, 4) == NULL && pt_segment_ring_base(r, 4) == NULL, "index out of range");
        pt_segment_close(r, 0);
    }

    /* a claimed ring is visible to the reader through generation */
    pt_ring_t ring;
    CHECKF(pt_segment_claim_ring(seg, 99, "main", 5, &ring) == 0, "claim");
    pt_ring_push(&ring, 1, 2, PT_EV_CALL, 0, 0);
    pt_segment_t *r = NULL;
    char err[256];
    CHECKF(pt_segment_attach(name, 0, &r, err, sizeof err) == 0, "attach: %s", err);
    if (r) {
        pt_ring_slot_t *slot = pt_segment_slot(r, 0);
        CHECKF(atomic_load_explicit(&slot->generation, memory_order_acquire) == 1, "generation 1");
        CHECKF(atomic_load(&slot->state) == PT_RING_ACTIVE && slot->os_tid == 99 && strcmp(slot->name, "main") == 0,
              "identity");
        pt_segment_close(r, 0);
    }
    pt_segment_info_t info[64];
    size_t count = 0;
    CHECKF(pt_segment_list(info, 64, &count) == 0, "list");
    int found = 0;
    for (size_t i = 0; i < count && i < 64; i++) {
        if (strcmp(info[i].name, name) != 0)
            continue;
        found = 1;
        CHECKF(info[i].valid && info[i].alive && info[i].state == PT_STATE_RUNNING, "listed alive RUNNING");
        CHECKF(info[i].threads_active == 1, "threads_active %u", info[i].threads_active);
        CHECKF(strcmp(info[i].cmdline, "python3 -m demo --flag") == 0, "listed cmdline");
    }
    CHECKF(found, "segment %s not listed", name);
    /* a caller that settled a segment (the hub) has it left out, never opened */
    skip_calls = 0;
    snprintf(skip_name, sizeof skip_name, "%s", name);
    CHECKF(pt_segment_list_skip(info, 64, &count, skip_one, NULL) == 0, "list, skipping");
    for (size_t i = 0; i < count && i < 64; i++)
        CHECKF(strcmp(info[i].name, name) != 0, "skipped segment %s listed", name);
    CHECKF(skip_calls >= 1, "asked about every entry (%d)", skip_calls);
    pt_segment_close(seg, 1);
    CHECKF(!shm_exists(name), "closed with unlink: gone");
}

/* Attach to `name` and expect a failure with text `want`. */
static void expect_attach_fails(const char *name, int want_rc, const char *want)
{
    pt_segment_t *r = NULL;
    char err[256] = "";
    int rc = pt_segment_attach(name, 0, &r, err, sizeof err);
    CHECK_ERR(rc, want_rc, err, want);
    CHECKF(r == NULL, "no handle on failure");
    if (r)
        pt_segment_close(r, 0);
}

static void test_bad_headers(void)
{
    printf("bad headers\n");
    pt_segment_t *seg = create_small();
    const char *name = pt_segment_name(seg);
    pt_seg_header_t *h = pt_segment_header(seg);
    pt_seg_header_t saved;
    memcpy(&saved, h, offsetof(pt_seg_header_t, python_version));
#define RESTORE() memcpy(h, &saved, offsetof(pt_seg_header_t, python_version))

    h->magic = 0x1234;
    expect_attach_fails(name, -EPROTO, "wrong magic");
    RESTORE();
    h->magic = __builtin_bswap64(PT_SEG_MAGIC);
    expect_attach_fails(name, -EPROTO, "big-endian");
    RESTORE();
    h->endian_mark = 0x04030201u;
    expect_attach_fails(name, -EPROTO, "wrong endianness");
    RESTORE();
    h->abi_major = PT_ABI_MAJOR + 1;
    {
        char want[32];
        snprintf(want, sizeof want, "ABI %d.%d", PT_ABI_MAJOR + 1, PT_ABI_MINOR);
        expect_attach_fails(name, -EPROTO, want);
    }
    RESTORE();
    h->abi_minor = 7; /* another minor is fine */
    {
        pt_segment_t *r = NULL;
        char err[256] = "";
        CHECKF(pt_segment_attach(name, 0, &r, err, sizeof err) == 0, "newer minor accepted: %s", err);
        pt_segment_close(r, 0);
    }
    RESTORE();
    h->header_bytes = 1024;
    expect_attach_fails(name, -EPROTO, "header size");
    RESTORE();
    h->chunk_bytes = 5000;
    expect_attach_fails(name, -EPROTO, "chunk size 5000");
    RESTORE();
    h->chunk_bytes = 1u << 30;
    expect_attach_fails(name, -EPROTO, "not a power of two in");
    RESTORE();
    h->chunks_per_ring = 3;
    expect_attach_fails(name, -EPROTO, "3 chunks per ring");
    RESTORE();
    h->ring_count = 0;
    expect_attach_fails(name, -EPROTO, "ring count 0");
    RESTORE();
    h->ring_count = PT_MAX_RINGS + 1;
    expect_attach_fails(name, -EPROTO, "ring count 4097");
    RESTORE();
    h->ring_bytes = 4096;
    expect_attach_fails(name, -EPROTO, "ring size 4096");
    RESTORE();
    h->ring_count = 1000; /* rings run past the end */
    expect_attach_fails(name, -EPROTO, "outside");
    RESTORE();
    h->symlog_offset = h->segment_bytes - 8; /* log runs past the end */
    expect_attach_fails(name, -EPROTO, "symbol log at offset");
    RESTORE();
    h->symlog_offset = UINT64_MAX - 4095; /* no overflow in the bounds check */
    expect_attach_fails(name, -EPROTO, "outside");
    RESTORE();
    h->rings_offset = h->ring_table_offset; /* ring table and rings overlap */
    expect_attach_fails(name, -EPROTO, "overlap");
    RESTORE();
    h->symlog_offset = h->rings_offset + 4096; /* log inside the rings */
    expect_attach_fails(name, -EPROTO, "overlap");
    RESTORE();
    h->ring_table_offset = 64; /* inside the header */
    expect_attach_fails(name, -EPROTO, "ring table at offset 64");
    RESTORE();
    h->segment_bytes += 4096; /* header claims more than the file has */
    expect_attach_fails(name, -EBADMSG, "is truncated");
    RESTORE();
    h->segment_bytes -= 4096;
    expect_attach_fails(name, -EPROTO, "but the file has");
    RESTORE();
    h->drop_policy = 9;
    expect_attach_fails(name, -EPROTO, "drop policy");
    RESTORE();

    /* pt_segment_validate on its own, with a file size */
    char err[256] = "";
    CHECKF(pt_segment_validate(h, h->segment_bytes, err, sizeof err) == 0, "valid: %s", err);
    CHECK_ERR(pt_segment_validate(h, 100, err, sizeof err), -EBADMSG, err, "less than the 4096-byte header");

    /* truncated file: the producer's mapping is not touched afterwards */
    uint64_t full = h->segment_bytes;
    int fd = shm_open(name, O_RDWR, 0);
    CHECKF(fd >= 0 && ftruncate(fd, (off_t)(full - 8192)) == 0, "truncate");
    char want[160];
    snprintf(want, sizeof want, "is truncated: file has %" PRIu64 " bytes, header says %" PRIu64, full - 8192, full);
    expect_attach_fails(name, -EBADMSG, want);
    CHECKF(ftruncate(fd, 1000) == 0, "truncate below the header");
    expect_attach_fails(name, -EBADMSG, "file has 1000 bytes, less than the 4096-byte header");
    CHECKF(ftruncate(fd, 0) == 0, "truncate to 0");
    expect_attach_fails(name, -EBADMSG, "file has 0 bytes");
    close(fd);
    pt_segment_close(seg, 1);
#undef RESTORE

    /* names */
    expect_attach_fails("/pytrace-999999999-0", -ENOENT, "no segment /pytrace-999999999-0");
    expect_attach_fails("999999999", -ENOENT, "no pytrace segment for pid 999999999");
    expect_attach_fails("a/b", -EINVAL, "not a segment name");
    expect_attach_fails("", -EINVAL, "no segment given");

    /* configuration errors */
    pt_segment_config_t cfg = small_config();
    pt_segment_t *s = NULL;
    cfg.chunk_bytes = 3000;
    CHECK_ERR(pt_segment_create(&cfg, &s, err, sizeof err), -EINVAL, err, "power of two");
    cfg = small_config();
    cfg.ring_count = PT_MAX_RINGS + 1;
    CHECK_ERR(pt_segment_create(&cfg, &s, err, sizeof err), -EINVAL, err, "lower --rings");
    cfg = small_config();
    cfg.ring_count = PT_MAX_RINGS;
    cfg.chunk_bytes = PT_MAX_CHUNK_BYTES;
    cfg.chunks_per_ring = 1024; /* 64 TiB */
    CHECK_ERR(pt_segment_create(&cfg, &s, err, sizeof err), -EINVAL, err, "exceeds the");
}

static void test_dead_producer(void)
{
    printf("dead producer\n");
    for (int exited = 0; exited < 2; exited++) {
        int fds[2];
        CHECKF(pipe(fds) == 0, "pipe");
        pid_t child = fork();
        if (child == 0) {
            pt_segment_config_t cfg = small_config();
            pt_segment_t *seg = NULL;
            char err[256];
            if (pt_segment_create(&cfg, &seg, err, sizeof err) != 0)
                _exit(1);
            pt_ring_t ring;
            pt_segment_claim_ring(seg, 1, "t", 0, &ring);
            pt_ring_push(&ring, 1, 1, PT_EV_CALL, 0, 0);
            pt_ring_flush_counters(&ring);
            if (exited)
                pt_segment_set_state(seg, PT_STATE_EXITED);
            char name[96];
            snprintf(name, sizeof name, "%s", pt_segment_name(seg));
            if (write(fds[1], name, sizeof name) != (ssize_t)sizeof name)
                _exit(2);
            _exit(0); /* no cleanup: the segment stays behind */
        }
        close(fds[1]);
        char name[96] = "";
        CHECKF(read(fds[0], name, sizeof name) == (ssize_t)sizeof name, "child segment name");
        close(fds[0]);
        int status;
        waitpid(child, &status, 0); /* reaped: the pid is really gone */
        pt_segment_info_t info[64];
        size_t count = 0;
        CHECKF(pt_segment_list(info, 64, &count) == 0, "list");
        int found = 0;
        for (size_t i = 0; i < count && i < 64; i++) {
            if (strcmp(info[i].name, name) != 0)
                continue;
            found = 1;
            CHECKF(info[i].valid && !info[i].alive, "listed valid and not alive");
            CHECKF(info[i].state == (exited ? PT_STATE_EXITED : PT_STATE_DEAD), "state %u", info[i].state);
            CHECKF(info[i].pid == (uint64_t)child && info[i].events_written == 1 && info[i].threads_active == 1,
                  "pid/counters");
            printf("  ok: %s pid %" PRIu64 " state %u alive %d\n", info[i].name, info[i].pid, info[i].state,
                   info[i].alive);
        }
        CHECKF(found, "dead segment %s listed", name);
        pt_segment_t *r = NULL;
        char err[256];
        CHECKF(pt_segment_attach(name, 0, &r, err, sizeof err) == 0, "a dead segment can still be read: %s", err);
        if (r) {
            CHECKF(pt_segment_producer_alive(r) == 0, "producer not alive");
            pt_segment_close(r, 0);
        }
        int removed = pt_segment_collect_stale();
        CHECKF(removed >= 1, "collect removed %d", removed);
        CHECKF(!shm_exists(name), "%s collected", name);
    }
    /* collect leaves live segments alone */
    pt_segment_t *live = create_small();
    pt_segment_collect_stale();
    CHECKF(shm_exists(pt_segment_name(live)), "live segment survives collect");
    pt_segment_close(live, 1);
}

static void test_consumer_lock(void)
{
    printf("consumer lock\n");
    pt_segment_t *seg = create_small();
    const char *name = pt_segment_name(seg);
    int ready[2], go[2];
    CHECKF(pipe(ready) == 0 && pipe(go) == 0, "pipes");
    pid_t child = fork();
    if (child == 0) {
        pt_segment_t *r = NULL;
        char err[256];
        char ok = 1;
        if (pt_segment_attach(name, 0, &r, err, sizeof err) != 0 || pt_segment_lock_consumer(r, err, sizeof err) != 0)
            ok = 0;
        if (write(ready[1], &ok, 1) != 1)
            _exit(2);
        if (read(go[0], &ok, 1) != 1)
            _exit(3);
        _exit(0); /* dies holding the lock */
    }
    char ok = 0;
    CHECKF(read(ready[0], &ok, 1) == 1 && ok == 1, "child holds the lock");
    pt_segment_t *r = NULL;
    char err[256] = "";
    CHECKF(pt_segment_attach(name, 0, &r, err, sizeof err) == 0, "attach: %s", err);
    /* the holder is named by its own command line (this program's), not a guess */
    char argv0[64] = "";
    FILE *cf = fopen("/proc/self/cmdline", "r");
    if (cf != NULL) {
        size_t got = fread(argv0, 1, sizeof argv0 - 1, cf);
        argv0[got] = 0;
        fclose(cf);
    }
    char want[128];
    snprintf(want, sizeof want, "being read by pid %ld (%s", (long)child, argv0);
    CHECK_ERR(pt_segment_lock_consumer(r, err, sizeof err), -EBUSY, err, want);
    CHECKF(strstr(err, "pytrace-top?") == NULL && strstr(err, "); stop that reader first") != NULL,
           "holder named: %s", err);
    pt_seg_header_t *h = pt_segment_header(r);
    CHECKF(atomic_load(&h->consumer_pid) == (uint64_t)child, "holder recorded");
    /* the holder dies without unlocking: its lock is taken over */
    CHECKF(write(go[1], &ok, 1) == 1, "release child");
    int status;
    waitpid(child, &status, 0);
    CHECKF(pt_segment_lock_consumer(r, err, sizeof err) == 0, "take over a dead holder: %s", err);
    CHECKF(atomic_load(&h->consumer_pid) == (uint64_t)getpid(), "we hold it");
    CHECKF(atomic_load(&h->consumer_takeovers) == 1, "takeover counted");
    CHECKF(atomic_load(&h->consumer_start) != 0, "start time recorded");
    pt_segment_unlock_consumer(r);
    CHECKF(atomic_load(&h->consumer_pid) == 0 && atomic_load(&h->consumer_start) == 0, "unlocked");
    CHECKF(pt_segment_lock_consumer(r, err, sizeof err) == 0, "lock again: %s", err);
    CHECKF(atomic_load(&h->consumer_takeovers) == 1, "no takeover for a free lock");
    pt_segment_close(r, 0); /* close unlocks */
    CHECKF(atomic_load(&pt_segment_header(seg)->consumer_pid) == 0, "close released the lock");
    close(ready[0]);
    close(ready[1]);
    close(go[0]);
    close(go[1]);
    pt_segment_close(seg, 1);
}

static int count_own_segments(void)
{
    pt_segment_info_t info[256];
    size_t count = 0;
    pt_segment_list(info, 256, &count);
    int n = 0;
    for (size_t i = 0; i < count && i < 256; i++)
        if (info[i].pid == (uint64_t)getpid())
            n++;
    return n;
}

static void test_full_shm(void)
{
    printf("full /dev/shm\n");
    struct statvfs vfs;
    CHECKF(statvfs("/dev/shm", &vfs) == 0, "statvfs");
    uint64_t fs_bytes = (uint64_t)vfs.f_blocks * vfs.f_frsize;
    /* rings are reserved when claimed; the symbol log at create: make it
     * larger than the whole fs */
    uint64_t symlog_bytes = fs_bytes + (64u << 20);
    if (symlog_bytes + (64u << 20) > PT_MAX_SEGMENT_BYTES) {
        printf("  skipped: /dev/shm (%" PRIu64 " MiB) is larger than the biggest segment\n", fs_bytes >> 20);
        return;
    }
    pt_segment_config_t cfg = small_config();
    cfg.symlog_bytes = symlog_bytes;
    int before = count_own_segments();
    pt_segment_t *seg = NULL;
    char err[256] = "";
    int rc = pt_segment_create(&cfg, &seg, err, sizeof err);
    CHECK_ERR(rc, -ENOSPC, err, "not enough room in /dev/shm for a");
    CHECKF(strstr(err, "lower --rings/--ring-size") != NULL, "says what to do");
    CHECKF(seg == NULL, "no handle");
    CHECKF(count_own_segments() == before, "no segment left behind");
}

static void test_foreign_user(void)
{
    printf("foreign user\n");
    if (geteuid() != 0) {
        printf("  skipped: needs root to create a segment as another user\n");
        return;
    }
    int fds[2];
    CHECKF(pipe(fds) == 0, "pipe");
    pid_t child = fork();
    if (child == 0) {
        char name[96] = "";
        if (setegid(65534) != 0 || seteuid(65534) != 0)
            _exit(1);
        pt_segment_config_t cfg = small_config();
        pt_segment_t *seg = NULL;
        char err[256];
        if (pt_segment_create(&cfg, &seg, err, sizeof err) == 0)
            snprintf(name, sizeof name, "%s", pt_segment_name(seg));
        if (write(fds[1], name, sizeof name) != (ssize_t)sizeof name)
            _exit(2);
        _exit(0);
    }
    char name[96] = "";
    CHECKF(read(fds[0], name, sizeof name) == (ssize_t)sizeof name && name[0] == '/', "child created a segment");
    close(fds[0]);
    close(fds[1]);
    int status;
    waitpid(child, &status, 0);
    if (name[0] != '/')
        return;
    expect_attach_fails(name, -EACCES, "belongs to uid 65534");
    pt_segment_t *r = NULL;
    char err[256] = "";
    CHECKF(pt_segment_attach(name, PT_ATTACH_ANY_USER, &r, err, sizeof err) == 0, "ANY_USER accepts: %s", err);
    if (r)
        pt_segment_close(r, 0);
    CHECKF(pt_segment_unlink(name) == 0, "unlink");
}

/* Names of our pattern that are not our segments: a FIFO (opening it would
 * block), a symlink to a file of ours (following it would write through it),
 * a directory, and a file of another user (it may shrink under a mapping:
 * SIGBUS). list, attach by name and by pid, and collect must neither block
 * nor map any of them, and must leave them where they are. */
static void test_planted_names(void)
{
    printf("planted names\n");
    const long fake_pid = 424242;
    char fifo[96], link[96], dir[96], foreign[96], target[128];
    snprintf(fifo, sizeof fifo, "/dev/shm/pytrace-%ld-0", fake_pid);
    snprintf(link, sizeof link, "/dev/shm/pytrace-%ld-1", fake_pid);
    snprintf(dir, sizeof dir, "/dev/shm/pytrace-%ld-2", fake_pid);
    snprintf(foreign, sizeof foreign, "/dev/shm/pytrace-%ld-3", fake_pid);
    snprintf(target, sizeof target, "/tmp/pt-planted-target-%ld", (long)getpid());
    unlink(fifo), unlink(link), rmdir(dir), unlink(foreign);
    int tfd = open(target, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    CHECKF(tfd >= 0 && write(tfd, "keep", 4) == 4, "target file");
    close(tfd);
    CHECKF(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno));
    CHECKF(symlink(target, link) == 0, "symlink");
    CHECKF(mkdir(dir, 0700) == 0, "mkdir");
    int have_foreign = 0;
    if (geteuid() == 0) {
        /* a valid-looking segment of another user: a copy of a real one */
        pt_segment_t *real = create_small();
        int ffd = open(foreign, O_CREAT | O_EXCL | O_WRONLY, 0600);
        uint64_t bytes = pt_segment_header(real)->segment_bytes;
        have_foreign = ffd >= 0 && write(ffd, pt_segment_header(real), bytes) == (ssize_t)bytes &&
                       fchown(ffd, 65534, 65534) == 0;
        CHECKF(have_foreign, "foreign file");
        close(ffd);
        pt_segment_close(real, 1);
    }

    /* Every check runs in a child with an alarm: a blocking open fails the
     * test instead of hanging it. */
    pid_t child = fork();
    if (child == 0) {
        alarm(10);
        int failed = 0;
        pt_segment_info_t infos[64];
        size_t count = 0;
        failed |= pt_segment_list(infos, 64, &count) != 0;
        int seen = 0;
        for (size_t i = 0; i < count && i < 64; i++) {
            if (strstr(infos[i].name, "pytrace-424242-") == NULL)
                continue;
            seen++;
            failed |= infos[i].valid; /* none of them is a segment we may read */
            failed |= infos[i].error[0] == '\0';
            if (strcmp(infos[i].name, "/pytrace-424242-3") == 0)
                failed |= infos[i].uid != 65534 || strstr(infos[i].error, "owned by uid 65534") == NULL;
        }
        failed |= seen != 3 + have_foreign;
        const char *names[] = {"/pytrace-424242-0", "/pytrace-424242-1", "/pytrace-424242-2"};
        for (int i = 0; i < 3; i++) {
            pt_segment_t *seg = NULL;
            char err[256] = "";
            int rc = pt_segment_attach(names[i], PT_ATTACH_ANY_USER, &seg, err, sizeof err);
            failed |= rc == 0 || strchr(err, '\n') != NULL || err[0] == '\0';
            printf("  attach %s: %d %s\n", names[i], rc, err);
        }
        pt_segment_t *seg = NULL;
        char err[256] = "";
        failed |= pt_segment_attach("424242", 0, &seg, err, sizeof err) != -ENOENT; /* by pid: none of ours */
        failed |= pt_segment_collect_stale() < 0;
        _exit(failed ? 3 : 0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "list/attach/collect with planted names: %s %d",
           WIFSIGNALED(status) ? "killed by signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    struct stat st;
    CHECKF(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "FIFO left alone");
    CHECKF(lstat(dir, &st) == 0 && S_ISDIR(st.st_mode), "directory left alone");
    CHECKF(lstat(target, &st) == 0 && st.st_size == 4, "symlink target untouched");
    if (have_foreign)
        CHECKF(lstat(foreign, &st) == 0, "other user's file left alone");
    unlink(fifo), unlink(link), rmdir(dir), unlink(foreign), unlink(target);
}

/* Names carry 64 random bits: names of the old pattern planted ahead for this
 * pid do not stop creation, and two segments never share a name. */
static void test_random_names(void)
{
    printf("random names\n");
    char planted[96];
    for (int i = 0; i < 64; i++) {
        snprintf(planted, sizeof planted, "/dev/shm/pytrace-%ld-%d", (long)getpid(), i);
        int fd = open(planted, O_CREAT | O_WRONLY, 0600);
        if (fd >= 0)
            close(fd);
    }
    pt_segment_t *a = create_small(), *b = create_small();
    const char *na = pt_segment_name(a), *nb = pt_segment_name(b);
    char expect[64];
    snprintf(expect, sizeof expect, "/pytrace-%ld-", (long)getpid());
    const char *dash = strrchr(na, '-');
    CHECKF(strncmp(na, expect, strlen(expect)) == 0 && dash && strlen(dash + 1) == 16, "name %s", na);
    CHECKF(strcmp(na, nb) != 0, "distinct names %s %s", na, nb);
    pt_segment_close(a, 1);
    pt_segment_close(b, 1);
    for (int i = 0; i < 64; i++) {
        snprintf(planted, sizeof planted, "/dev/shm/pytrace-%ld-%d", (long)getpid(), i);
        unlink(planted);
    }
}

/* A ring's pages are reserved when a thread claims its slot and writes it,
 * not at create: a segment of many slots costs the header, table and symbol
 * log until threads arrive (so a job starts in a container's 64 MB /dev/shm),
 * and a ring its first chunks until its thread has written more. */
static void test_rings_reserved_on_claim(void)
{
    printf("rings reserved on claim\n");
    pt_segment_config_t cfg = small_config();
    cfg.ring_count = 64;
    cfg.chunk_bytes = 64 << 10;
    cfg.chunks_per_ring = 16; /* 1 MiB rings */
    pt_segment_t *seg = NULL;
    char err[256] = "";
    CHECKF(pt_segment_create(&cfg, &seg, err, sizeof err) == 0, "create: %s", err);
    if (!seg)
        return;
    char path[160];
    snprintf(path, sizeof path, "/dev/shm%s", pt_segment_name(seg));
    struct stat st;
    CHECK(stat(path, &st) == 0);
    uint64_t ring_bytes = pt_segment_header(seg)->ring_bytes;
    uint64_t before = (uint64_t)st.st_blocks * 512;
    CHECKF(before < 2 * ring_bytes, "at create %" PRIu64 " bytes reserved of %lld", before, (long long)st.st_size);
    pt_ring_t ring;
    CHECK(pt_segment_claim_ring(seg, 1, "t", 0, &ring) == 0);
    CHECK(stat(path, &st) == 0);
    uint64_t after = (uint64_t)st.st_blocks * 512;
    /* the claim takes the ring's first chunks, not the whole ring (a fork
     * child writing a few thousand events takes 128 KiB, not 4 MiB) */
    CHECKF(after >= before + 2 * cfg.chunk_bytes, "a claim reserves its first chunks: %" PRIu64 " -> %" PRIu64,
           before, after);
    CHECKF(after < before + ring_bytes / 2, "not the whole ring: %" PRIu64 " -> %" PRIu64, before, after);
    /* its thread's first lap takes the rest, before writing it */
    uint64_t per_chunk = PT_CHUNK_EVENTS(cfg.chunk_bytes);
    uint64_t written = 0;
    for (uint64_t i = 0; i < per_chunk * 5; i++)
        written += pt_ring_push(&ring, i, 7, PT_EV_CALL, 0, 0) == 0;
    CHECK(written == per_chunk * 5);
    CHECK(stat(path, &st) == 0);
    uint64_t five = (uint64_t)st.st_blocks * 512;
    CHECKF(five >= before + 8 * cfg.chunk_bytes && five < before + ring_bytes,
           "5 chunks written: 8 reserved (doubling), %" PRIu64 " -> %" PRIu64, before, five);
    for (uint64_t i = 0; i < per_chunk * 11; i++)
        written += pt_ring_push(&ring, i, 7, PT_EV_CALL, 0, 0) == 0;
    CHECK(written == per_chunk * 16);
    CHECK(stat(path, &st) == 0);
    uint64_t lap = (uint64_t)st.st_blocks * 512;
    CHECKF(lap >= before + ring_bytes, "a whole lap: the whole ring, %" PRIu64 " -> %" PRIu64, before, lap);
    pt_segment_close(seg, 1);
}

/* The symbol log's pages are reserved as it fills, not all at create: a fork
 * child (a pool worker) must not zero the whole log at its start. Every
 * symbol still lands, and the pages are there before a record is written. */
static void test_symlog_reserved_as_it_fills(void)
{
    printf("symbol log reserved as it fills\n");
    pt_segment_config_t cfg = small_config();
    cfg.symlog_bytes = 8u << 20;
    pt_segment_t *seg = NULL;
    char err[256] = "";
    CHECKF(pt_segment_create(&cfg, &seg, err, sizeof err) == 0, "create: %s", err);
    if (!seg)
        return;
    char path[160];
    snprintf(path, sizeof path, "/dev/shm%s", pt_segment_name(seg));
    struct stat st;
    CHECK(stat(path, &st) == 0);
    uint64_t before = (uint64_t)st.st_blocks * 512;
    printf("  at create: %" PRIu64 " bytes reserved\n", before);
    CHECKF(before < (1u << 20), "at create %" PRIu64 " bytes reserved, not the 8 MiB log", before);
    char name[600];
    memset(name, 'f', sizeof name - 1);
    name[sizeof name - 1] = 0;
    pt_seg_header_t *h = pt_segment_header(seg);
    uint32_t id = 0, last = 0;
    int failed = 0;
    while (atomic_load(&h->symlog_published) < (3u << 20) && !failed) {
        failed = pt_symlog_append(seg, PT_SYM_PY_FUNCTION, name, "file.py", 1, &id) != 0 || id != last + 1;
        last = id;
    }
    CHECKF(!failed, "every append lands (id %u)", last);
    CHECKF(atomic_load(&h->symbols_dropped) == 0, "no symbol dropped");
    CHECK(stat(path, &st) == 0);
    uint64_t after = (uint64_t)st.st_blocks * 512;
    CHECKF(after >= before + (3u << 20) - (256u << 10), "the pages written are reserved: %" PRIu64 " -> %" PRIu64,
           before, after);
    CHECKF(after < before + (8u << 20), "not the whole log: %" PRIu64, after);
    pt_segment_close(seg, 1);
}


/* A claim promises the rest of its ring: where /dev/shm cannot hold the rings
 * already promised plus this one, the claim is refused (-ENOSPC: its thread
 * runs untraced, counted) though only the first chunks of each are taken yet.
 * Real /dev/shm: rings of a third to two thirds of its free room, 4 slots. */
static void test_claims_promise_their_rings(void)
{
    printf("claims promise their rings\n");
    struct statvfs vfs;
    CHECKF(statvfs("/dev/shm", &vfs) == 0, "statvfs");
    uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    pt_segment_config_t cfg = small_config();
    cfg.chunk_bytes = 1u << 20;
    uint64_t chunks = 64;
    while (chunks * cfg.chunk_bytes < avail / 3 && chunks < PT_MAX_CHUNKS_PER_RING)
        chunks *= 2; /* the first ring size >= a third of the room */
    cfg.chunks_per_ring = (uint32_t)chunks;
    cfg.ring_count = 4;
    uint64_t ring_bytes = chunks * cfg.chunk_bytes;
    if (ring_bytes * 4 + (64u << 20) > PT_MAX_SEGMENT_BYTES || ring_bytes >= avail) {
        printf("  skipped: /dev/shm has %" PRIu64 " MiB free\n", avail >> 20);
        return;
    }
    pt_segment_t *seg = NULL;
    char err[256] = "";
    CHECKF(pt_segment_create(&cfg, &seg, err, sizeof err) == 0, "create: %s", err);
    if (!seg)
        return;
    pt_ring_t rings[4];
    int claimed = 0, rc = 0;
    while (claimed < 4 && (rc = pt_segment_claim_ring(seg, 1, "t", 0, &rings[claimed])) == 0)
        claimed++;
    uint64_t fit = avail / ring_bytes; /* 1 or 2 */
    printf("  rings of %" PRIu64 " MiB, %" PRIu64 " MiB free: %d claimed, then %d\n", ring_bytes >> 20,
           avail >> 20, claimed, rc);
    CHECKF(rc == -ENOSPC, "a claim past the room is refused: %d", rc);
    CHECKF(claimed >= 1 && (uint64_t)claimed <= fit, "%d claimed, %" PRIu64 " fit", claimed, fit);
    char path[160];
    snprintf(path, sizeof path, "/dev/shm%s", pt_segment_name(seg));
    struct stat st;
    CHECK(stat(path, &st) == 0);
    CHECKF((uint64_t)st.st_blocks * 512 < (uint64_t)(claimed * 2 + 1) * cfg.chunk_bytes + (8u << 20),
           "only the first chunks are taken: %lld bytes", (long long)st.st_blocks * 512);
    pt_segment_close(seg, 1);
}

static void test_claim_retire(void)
{
    printf("claim and retire\n");
    pt_segment_t *seg = create_small();
    pt_seg_header_t *h = pt_segment_header(seg);
    pt_ring_t rings[5];
    for (uint32_t i = 0; i < 4; i++) {
        CHECKF(pt_segment_claim_ring(seg, 100 + i, "worker", i, &rings[i]) == 0, "claim %u", i);
        pt_ring_slot_t *slot = pt_segment_slot(seg, i);
        CHECKF(slot->thread == i + 1 && atomic_load(&slot->generation) == 1, "thread %" PRIu64, slot->thread);
        CHECKF(rings[i].ring_index == i && rings[i].policy == PT_POLICY_DROP, "ring handle");
    }
    CHECKF(pt_segment_claim_ring(seg, 200, "late", 0, &rings[4]) == -EAGAIN, "exhausted: -EAGAIN");
    CHECKF(atomic_load(&h->threads_untraced) == 0, "the segment does not count threads (the tracer does)");
    CHECKF(atomic_load(&h->threads_started) == 4, "threads_started");

    pt_ring_push(&rings[2], 7, 1, PT_EV_CALL, 0, 0);
    pt_segment_retire_ring(seg, &rings[2], 1234);
    pt_ring_slot_t *slot = pt_segment_slot(seg, 2);
    CHECKF(atomic_load(&slot->state) == PT_RING_RETIRED && slot->end_ticks == 1234, "retired");
    CHECKF(atomic_load(&slot->events_written) == 1, "final counters flushed");
    CHECKF(pt_ring_push(&rings[2], 8, 1, PT_EV_CALL, 0, 0) == -ENOBUFS, "a retired handle drops");
    CHECKF(pt_segment_claim_ring(seg, 200, "late", 0, &rings[4]) == -EAGAIN, "retired is not free until drained");
    /* the reader drains it and frees it */
    atomic_store_explicit(&slot->released_chunks, 5, memory_order_relaxed);
    atomic_store_explicit(&slot->state, PT_RING_FREE, memory_order_release);
    CHECKF(pt_segment_claim_ring(seg, 200, "late", 9, &rings[4]) == 0, "claim a freed slot");
    CHECKF(rings[4].ring_index == 2 && slot->thread == 5 && atomic_load(&slot->generation) == 2 &&
              strcmp(slot->name, "late") == 0 && slot->os_tid == 200,
          "reused slot identity");
    CHECKF(atomic_load(&slot->released_chunks) == 0 && atomic_load(&slot->head_chunk) == 0 &&
              atomic_load(&slot->events_written) == 0,
          "cursors reset for the new owner");
    pt_segment_set_state(seg, PT_STATE_STOPPED);
    CHECKF(atomic_load(&h->state) == PT_STATE_STOPPED && atomic_load(&h->heartbeat_ns) != 0, "state");
    pt_segment_close(seg, 1);
}

int main(void)
{
    pt_clock_init(&test_clock, -1);
    printf("clock: %s, %" PRIu64 " ticks/s\n", test_clock.kind == PT_CLOCK_TSC ? "tsc" : "monotonic",
           test_clock.ticks_per_second);
    CHECKF(test_clock.ticks_per_second > 0, "calibrated");
    test_round_trip();
    test_role();
    test_bad_headers();
    test_dead_producer();
    test_consumer_lock();
    test_full_shm();
    test_foreign_user();
    test_claim_retire();
    test_rings_reserved_on_claim();
    test_claims_promise_their_rings();
    test_symlog_reserved_as_it_fills();
    test_planted_names();
    test_random_names();
    if (failures) {
        fprintf(stderr, "test_segment: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_segment: all checks passed\n");
    return 0;
}
