/*
 * pt_segment: the /dev/shm segment's life cycle.
 *
 * Design summary
 *
 *   Create (producer): O_CREAT|O_EXCL 0600 under a fresh
 *   /pytrace-<pid>-<seq>-<random> name (64 random bits from getrandom(), so no
 *   other user can take a job's names ahead of it), ftruncate, posix_fallocate (so a full /dev/shm
 *   is -ENOSPC now, not SIGBUS later), mmap shared, fill the header, publish
 *   magic last and state = RUNNING with a release store.
 *
 *   Every open of a name under /dev/shm goes through open_segment_fd():
 *   non-blocking, no links followed, then fstat on the fd: only a regular
 *   file owned by the expected user is ever mapped (a FIFO would block the
 *   open, a file another user owns can shrink under us: SIGBUS). Listing
 *   shows other users' files from fstat alone, never mapping them.
 *
 *   Attach (reader): the file is untrusted. fstat first (owner, size), map,
 *   then pt_segment_validate before any other field is used. The geometry is
 *   copied into the handle once validated, and every address the handle hands
 *   out is computed from that copy, so a producer that rewrites its header
 *   later cannot move a reader outside the mapping.
 *
 *   Liveness: a pid alone is not an identity (pids are reused), so producer
 *   and consumer store their process start time (/proc/<pid>/stat field 22)
 *   next to their pid; a process is alive when kill(pid, 0) finds it, it is
 *   not a zombie, and its start time matches.
 */
#include "segment.h"
#include "shm_internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "shm/base/grow.h"
#include "shm/base/procstat.h"

#define PT_SEG_PAGE 4096u
#define PT_DEFAULT_WAIT_TIMEOUT_NS UINT64_C(1000000000)
#define PT_SHM_DIR "/dev/shm"

struct pt_segment {
    char name[96];            /* "/pytrace-12-0" */
    uint8_t *base;
    uint64_t bytes;
    int consumer_locked;
    int fd;                   /* producer: the file, to reserve a ring's pages at claim; else -1 */
    /* validated geometry (copied once; never re-read from the header) */
    uint32_t ring_count;
    uint32_t chunk_bytes;
    uint32_t chunks_per_ring;
    uint32_t drop_policy;
    uint64_t wait_timeout_ns;
    uint64_t ring_table_offset;
    uint64_t rings_offset;
    uint64_t ring_bytes;
    uint64_t symlog_offset;
    uint64_t symlog_bytes;
    uint64_t symlog_reserved; /* producer: bytes of the log whose pages are reserved (under the
                                 symbol log's lock, pt_segment_reserve_symlog) */
    /* producer: the rings' memory, reserved in steps (reserve_chunks). A claim
     * promises the rest of its ring and is refused (the thread runs untraced,
     * counted) when /dev/shm has no room for that beside what the other rings
     * of this segment were promised: in a small /dev/shm whole threads are
     * left out, as when a claim reserved the whole ring, instead of every
     * thread dropping the tail of its stream. */
    _Atomic uint32_t *slot_chunks;   /* per slot: chunks reserved */
    _Atomic uint64_t promised;       /* bytes promised and not yet reserved */
};

/* The symbol log's pages are reserved in steps as it fills: a fork child (or a
 * multiprocessing worker) that names a few hundred functions does not zero 8
 * MiB of /dev/shm at its start (that was most of a traced fork's cost). */
#define PT_SYMLOG_FIRST_RESERVE (UINT64_C(256) << 10)

/* Next <seq> of /pytrace-<pid>-<seq>; relaxed: only uniqueness matters, and
 * O_EXCL settles any collision. Reset in a forked child is not needed: the
 * child's pid differs. */
static _Atomic uint32_t segment_seq;

static int is_pow2_u64(uint64_t v)
{
    return v != 0 && (v & (v - 1)) == 0;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) & ~(a - 1);
}

/* ---- process identity ----------------------------------------------------- */

static uint64_t self_start_time(void)
{
    pt_proc_stat_t st;
    return pt_proc_stat_read((uint64_t)getpid(), 0, &st) == 0 ? st.start : 0;
}

/* How an error names process pid without guessing: its command line (arguments joined
 * by spaces; past 80 characters it ends at a word, with " ..."), else its /proc/PID/comm,
 * else "". Every character that is not printable ASCII becomes '?'. */
static void process_name(uint64_t pid, char *out, size_t cap)
{
    enum { MAX_SHOWN = 80 };
    char path[48], buf[MAX_SHOWN + 2];
    out[0] = 0;
    if (cap < MAX_SHOWN + 8)
        return;
    ssize_t n = -1;
    for (int pass = 0; pass < 2 && n <= 0; pass++) {
        snprintf(path, sizeof path, "/proc/%llu/%s", (unsigned long long)pid, pass == 0 ? "cmdline" : "comm");
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
            continue;
        n = read(fd, buf, sizeof buf - 1);
        close(fd);
    }
    if (n <= 0)
        return;
    while (n > 0 && (buf[n - 1] == 0 || buf[n - 1] == '\n'))
        n--;                                    /* the last argument's NUL, comm's newline */
    size_t len = (size_t)n;
    int cut = len > MAX_SHOWN;
    if (cut) {
        len = MAX_SHOWN;
        while (len > 0 && buf[len] != 0 && buf[len] != ' ')
            len--;                              /* end at a word */
        if (len == 0)
            len = MAX_SHOWN;
    }
    for (size_t i = 0; i < len; i++)
        out[i] = buf[i] == 0 ? ' ' : (buf[i] >= 0x20 && buf[i] < 0x7f) ? buf[i] : '?';
    snprintf(out + len, cap - len, "%s", cut ? " ..." : "");
}

/* Is (pid, start) a live process? start 0 = unknown, trust the pid alone. */
static int process_alive(uint64_t pid, uint64_t start)
{
    if (pid == 0 || pid > INT32_MAX)
        return 0;
    if (kill((pid_t)pid, 0) != 0 && errno != EPERM)
        return 0;
    pt_proc_stat_t st;
    int rc = pt_proc_stat_read(pid, 0, &st);
    if (rc == -ENOENT)
        return 0;
    if (rc != 0)
        return 1; /* cannot tell more than kill() did */
    if (st.state == 'Z' || st.state == 'X')
        return 0;
    return start == 0 || st.start == start;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    if (src == NULL) {
        dst[0] = '\0';
        return;
    }
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* ---- names ----------------------------------------------------------------- */

/* Parse "pytrace-<pid>-<seq>[-<hex>]" (no leading '/'). The random part is
 * optional so that names of earlier versions still parse. */
static int parse_seg_name(const char *base, uint64_t *pid, uint64_t *seq)
{
    size_t plen = strlen(PT_SHM_PREFIX);
    if (strncmp(base, PT_SHM_PREFIX, plen) != 0)
        return 0;
    const char *p = base + plen;
    char *end;
    if (!isdigit((unsigned char)*p))
        return 0;
    unsigned long long a = strtoull(p, &end, 10);
    if (*end != '-' || !isdigit((unsigned char)end[1]))
        return 0;
    p = end + 1;
    unsigned long long b = strtoull(p, &end, 10);
    if (*end == '-') {
        const char *r = end + 1;
        if (*r == '\0')
            return 0;
        for (; *r; r++)
            if (!isxdigit((unsigned char)*r))
                return 0;
    } else if (*end != '\0') {
        return 0;
    }
    *pid = a;
    *seq = b;
    return 1;
}

/* Open /dev/shm/<name> ("/pytrace-...") without blocking and without
 * following a link, and check on the fd that it is a regular file owned by
 * `owner` ((uid_t)-1: any owner). *st receives the fstat. Returns the fd, or
 * a negative errno with a one-line reason in err:
 *   -ENOENT no such name, -ELOOP a symbolic link, -EPROTO not a regular file,
 *   -EACCES owned by another user. */
static int open_segment_fd(const char *name, int writable, uid_t owner, struct stat *st, char *err,
                           size_t errlen)
{
    char path[160];
    snprintf(path, sizeof path, PT_SHM_DIR "%s", name);
    int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            pt_set_err(err, errlen,
                       "no segment %s: the process may have ended and its segment been collected; run `pytrace ls`",
                       name);
        else if (e == ELOOP)
            pt_set_err(err, errlen, "%s is a symbolic link, not a pytrace segment: not opened", path);
        else if (e == EISDIR)
            pt_set_err(err, errlen, "%s is a directory, not a pytrace segment: not opened", path);
        else if (e == EACCES)
            pt_set_err(err, errlen, "segment %s belongs to another user; run as that user", name);
        else
            pt_set_err(err, errlen, "cannot open segment %s: %s", name, strerror(e));
        return e == EISDIR ? -EPROTO : -e;
    }
    if (fstat(fd, st) != 0) {
        int e = errno;
        pt_set_err(err, errlen, "cannot stat segment %s: %s", name, strerror(e));
        close(fd);
        return -e;
    }
    if (!S_ISREG(st->st_mode)) {
        pt_set_err(err, errlen, "%s is not a regular file (a FIFO, device or directory), not a pytrace segment: "
                                "not opened",
                   path);
        close(fd);
        return -EPROTO;
    }
    if (owner != (uid_t)-1 && st->st_uid != owner) {
        pt_set_err(err, errlen,
                   "segment %s belongs to uid %u, not to you (uid %u); run as that user or allow other users "
                   "explicitly",
                   name, (unsigned)st->st_uid, (unsigned)owner);
        close(fd);
        return -EACCES;
    }
    return fd;
}

static int all_digits(const char *s)
{
    if (*s == '\0')
        return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return 0;
    return 1;
}

/* Newest segment of `pid` into name ("/pytrace-<pid>-<seq>"). */
static int find_by_pid(uint64_t pid, char *name, size_t namelen)
{
    DIR *d = opendir(PT_SHM_DIR);
    if (d == NULL)
        return -errno;
    int found = 0;
    struct timespec best_time = {0, 0};
    uint64_t best_seq = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        uint64_t p, seq;
        if (!parse_seg_name(de->d_name, &p, &seq) || p != pid)
            continue;
        char path[512];
        struct stat st;
        snprintf(path, sizeof path, PT_SHM_DIR "/%s", de->d_name);
        /* Only our own regular files: another user may plant names with any
         * pid in them (lstat: a link is never followed). */
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
            continue;
        int newer = !found || st.st_ctim.tv_sec > best_time.tv_sec ||
                    (st.st_ctim.tv_sec == best_time.tv_sec &&
                     (st.st_ctim.tv_nsec > best_time.tv_nsec ||
                      (st.st_ctim.tv_nsec == best_time.tv_nsec && seq > best_seq)));
        if (newer) {
            found = 1;
            best_time = st.st_ctim;
            best_seq = seq;
            if (namelen > 1) {
                name[0] = '/';
                copy_str(name + 1, namelen - 1, de->d_name);
            }
        }
    }
    closedir(d);
    return found ? 0 : -ENOENT;
}

/* ---- validation ------------------------------------------------------------ */

/* Is [off, off + len) inside [0, total)? Overflow-safe. */
static int region_inside(uint64_t off, uint64_t len, uint64_t total)
{
    return off <= total && len <= total - off;
}

static int regions_overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return a < b + blen && b < a + alen;
}

/* Validate the header at `live` (untrusted, possibly changing). The checks run
 * on one snapshot, which is copied to *snap (may be NULL) for the caller to
 * adopt, so what was checked is exactly what is used. */
static int validate_named(const char *name, const pt_seg_header_t *live, uint64_t file_bytes, char *err,
                          size_t errlen, pt_seg_header_t *snap)
{
    const char *what = name[0] ? name : "(unnamed)";
    if (file_bytes < sizeof(pt_seg_header_t)) {
        pt_set_err(err, errlen,
                "segment %s is truncated: file has %llu bytes, less than the %u-byte header; remove it with "
                "`pytrace ls --collect`",
                what, (unsigned long long)file_bytes, PT_SEG_HEADER_BYTES);
        return -EBADMSG;
    }
    /* One snapshot of the identity and geometry (no atomics live there), so
     * every check below sees the same values. */
    pt_seg_header_t h;
    memcpy(&h, live, offsetof(pt_seg_header_t, python_version));
    if (snap != NULL)
        memcpy(snap, &h, offsetof(pt_seg_header_t, python_version));

    if (h.magic == __builtin_bswap64(PT_SEG_MAGIC)) {
        pt_set_err(err, errlen,
                "segment %s was written by a big-endian host (wrong endianness); read it on the machine that "
                "wrote it",
                what);
        return -EPROTO;
    }
    if (h.magic != PT_SEG_MAGIC) {
        pt_set_err(err, errlen,
                "segment %s: wrong magic 0x%016llx (not a pytrace segment); run `pytrace ls` to see valid "
                "segments",
                what, (unsigned long long)h.magic);
        return -EPROTO;
    }
    if (h.endian_mark != PT_ENDIAN_MARK) {
        pt_set_err(err, errlen,
                "segment %s: wrong endianness mark 0x%08x (expected 0x%08x); read it on the machine that wrote "
                "it",
                what, h.endian_mark, PT_ENDIAN_MARK);
        return -EPROTO;
    }
    if (h.abi_major != PT_ABI_MAJOR) {
        pt_set_err(err, errlen,
                "segment %s uses segment ABI %u.%u but this reader speaks ABI %u.x; use the pytrace version "
                "that traced the program",
                what, h.abi_major, h.abi_minor, PT_ABI_MAJOR);
        return -EPROTO;
    }
    if (h.header_bytes != PT_SEG_HEADER_BYTES || h.ring_slot_bytes != PT_RING_SLOT_BYTES) {
        pt_set_err(err, errlen,
                "segment %s: header size %u / ring slot size %u differ from %u / %u; the segment is corrupt, "
                "remove it",
                what, h.header_bytes, h.ring_slot_bytes, PT_SEG_HEADER_BYTES, PT_RING_SLOT_BYTES);
        return -EPROTO;
    }
    if (h.segment_bytes > file_bytes) {
        pt_set_err(err, errlen,
                "segment %s is truncated: file has %llu bytes, header says %llu; the segment is damaged, remove "
                "it",
                what, (unsigned long long)file_bytes, (unsigned long long)h.segment_bytes);
        return -EBADMSG;
    }
    if (h.segment_bytes != file_bytes || h.segment_bytes > PT_MAX_SEGMENT_BYTES) {
        pt_set_err(err, errlen,
                "segment %s: header says %llu bytes but the file has %llu (limit %llu); the segment is "
                "corrupt, remove it",
                what, (unsigned long long)h.segment_bytes, (unsigned long long)file_bytes,
                (unsigned long long)PT_MAX_SEGMENT_BYTES);
        return -EPROTO;
    }
    if (h.ring_count == 0 || h.ring_count > PT_MAX_RINGS) {
        pt_set_err(err, errlen, "segment %s: ring count %u outside 1..%u; the segment is corrupt, remove it", what,
                h.ring_count, PT_MAX_RINGS);
        return -EPROTO;
    }
    if (!is_pow2_u64(h.chunk_bytes) || h.chunk_bytes < PT_MIN_CHUNK_BYTES || h.chunk_bytes > PT_MAX_CHUNK_BYTES) {
        pt_set_err(err, errlen,
                "segment %s: chunk size %u is not a power of two in %u..%u; the segment is corrupt, remove it",
                what, h.chunk_bytes, PT_MIN_CHUNK_BYTES, PT_MAX_CHUNK_BYTES);
        return -EPROTO;
    }
    if (!is_pow2_u64(h.chunks_per_ring) || h.chunks_per_ring < PT_MIN_CHUNKS_PER_RING ||
        h.chunks_per_ring > PT_MAX_CHUNKS_PER_RING) {
        pt_set_err(err, errlen,
                "segment %s: %u chunks per ring is not a power of two in %u..%u; the segment is corrupt, remove "
                "it",
                what, h.chunks_per_ring, PT_MIN_CHUNKS_PER_RING, PT_MAX_CHUNKS_PER_RING);
        return -EPROTO;
    }
    if (h.ring_bytes != (uint64_t)h.chunk_bytes * h.chunks_per_ring) {
        pt_set_err(err, errlen,
                "segment %s: ring size %llu is not chunk size x chunks (%u x %u); the segment is corrupt, remove "
                "it",
                what, (unsigned long long)h.ring_bytes, h.chunk_bytes, h.chunks_per_ring);
        return -EPROTO;
    }
    if (h.drop_policy != PT_POLICY_DROP && h.drop_policy != PT_POLICY_WAIT) {
        pt_set_err(err, errlen, "segment %s: unknown drop policy %u; the segment is corrupt, remove it", what,
                h.drop_policy);
        return -EPROTO;
    }
    if (h.clock_kind != PT_CLOCK_MONOTONIC && h.clock_kind != PT_CLOCK_TSC) {
        pt_set_err(err, errlen, "segment %s: unknown clock kind %u; the segment is corrupt, remove it", what,
                h.clock_kind);
        return -EPROTO;
    }
    if (h.ticks_per_second == 0) {
        pt_set_err(err, errlen, "segment %s: clock rate is 0 ticks per second; the segment is corrupt, remove it",
                what);
        return -EPROTO;
    }

    /* regions: header, ring table, rings, symbol log */
    uint64_t total = h.segment_bytes;
    uint64_t table_bytes = (uint64_t)h.ring_count * PT_RING_SLOT_BYTES;
    uint64_t rings_total = (uint64_t)h.ring_count * h.ring_bytes; /* <= 2^12 * 2^40 */
    struct {
        const char *label;
        uint64_t off, len, align;
    } reg[3] = {
        {"ring table", h.ring_table_offset, table_bytes, PT_CACHE_LINE},
        {"rings", h.rings_offset, rings_total, PT_CACHE_LINE},
        {"symbol log", h.symlog_offset, h.symlog_bytes, 8},
    };
    for (int i = 0; i < 3; i++) {
        if (!region_inside(reg[i].off, reg[i].len, total) || reg[i].off < PT_SEG_HEADER_BYTES ||
            reg[i].off % reg[i].align != 0 || (i == 2 && reg[i].len % 8 != 0)) {
            pt_set_err(err, errlen,
                    "segment %s: %s at offset %llu (+%llu bytes) is outside the %llu-byte segment or misaligned; "
                    "the segment is corrupt, remove it",
                    what, reg[i].label, (unsigned long long)reg[i].off, (unsigned long long)reg[i].len,
                    (unsigned long long)total);
            return -EPROTO;
        }
    }
    for (int i = 0; i < 3; i++) {
        for (int j = i + 1; j < 3; j++) {
            if (regions_overlap(reg[i].off, reg[i].len, reg[j].off, reg[j].len)) {
                pt_set_err(err, errlen, "segment %s: %s and %s overlap; the segment is corrupt, remove it", what,
                        reg[i].label, reg[j].label);
                return -EPROTO;
            }
        }
    }
    return 0;
}

int pt_segment_validate(const pt_seg_header_t *h, uint64_t file_bytes, char *err, size_t errlen)
{
    if (h == NULL) {
        pt_set_err(err, errlen, "no segment header given");
        return -EINVAL;
    }
    return validate_named("", h, file_bytes, err, errlen, NULL);
}

/* Copy the validated geometry (a snapshot) into the handle. */
static void adopt_geometry(pt_segment_t *seg, const pt_seg_header_t *h)
{
    seg->ring_count = h->ring_count;
    seg->chunk_bytes = h->chunk_bytes;
    seg->chunks_per_ring = h->chunks_per_ring;
    seg->drop_policy = h->drop_policy;
    seg->wait_timeout_ns = h->wait_timeout_ns;
    seg->ring_table_offset = h->ring_table_offset;
    seg->rings_offset = h->rings_offset;
    seg->ring_bytes = h->ring_bytes;
    seg->symlog_offset = h->symlog_offset;
    seg->symlog_bytes = h->symlog_bytes;
}

/* ---- create ---------------------------------------------------------------- */

int pt_segment_create(const pt_segment_config_t *cfg, pt_segment_t **out, char *err, size_t errlen)
{
    if (cfg == NULL || out == NULL) {
        pt_set_err(err, errlen, "pt_segment_create: no configuration or output given");
        return -EINVAL;
    }
    *out = NULL;
    uint32_t ring_count = cfg->ring_count ? cfg->ring_count : PT_DEFAULT_RING_COUNT;
    uint32_t chunk_bytes = cfg->chunk_bytes ? cfg->chunk_bytes : PT_DEFAULT_CHUNK_BYTES;
    uint32_t chunks_per_ring = cfg->chunks_per_ring ? cfg->chunks_per_ring : PT_DEFAULT_CHUNKS_PER_RING;
    uint64_t symlog_bytes = cfg->symlog_bytes ? cfg->symlog_bytes : PT_DEFAULT_SYMLOG_BYTES;
    uint64_t wait_timeout_ns = cfg->wait_timeout_ns ? cfg->wait_timeout_ns : PT_DEFAULT_WAIT_TIMEOUT_NS;

    if (ring_count > PT_MAX_RINGS) {
        pt_set_err(err, errlen, "%u rings requested, the limit is %u: lower --rings", ring_count, PT_MAX_RINGS);
        return -EINVAL;
    }
    if (!is_pow2_u64(chunk_bytes) || chunk_bytes < PT_MIN_CHUNK_BYTES || chunk_bytes > PT_MAX_CHUNK_BYTES) {
        pt_set_err(err, errlen, "chunk size %u must be a power of two between %u and %u bytes", chunk_bytes,
                PT_MIN_CHUNK_BYTES, PT_MAX_CHUNK_BYTES);
        return -EINVAL;
    }
    if (!is_pow2_u64(chunks_per_ring) || chunks_per_ring < PT_MIN_CHUNKS_PER_RING ||
        chunks_per_ring > PT_MAX_CHUNKS_PER_RING) {
        pt_set_err(err, errlen, "%u chunks per ring must be a power of two between %u and %u", chunks_per_ring,
                PT_MIN_CHUNKS_PER_RING, PT_MAX_CHUNKS_PER_RING);
        return -EINVAL;
    }
    if (cfg->drop_policy != PT_POLICY_DROP && cfg->drop_policy != PT_POLICY_WAIT) {
        pt_set_err(err, errlen, "unknown drop policy %u: use drop (0) or wait (1)", cfg->drop_policy);
        return -EINVAL;
    }
    if (cfg->clock_kind != PT_CLOCK_MONOTONIC && cfg->clock_kind != PT_CLOCK_TSC) {
        pt_set_err(err, errlen, "unknown clock kind %u: initialise the clock with pt_clock_init", cfg->clock_kind);
        return -EINVAL;
    }
    if (symlog_bytes > PT_MAX_SEGMENT_BYTES) {
        pt_set_err(err, errlen, "symbol log of %llu bytes is larger than a segment may be",
                (unsigned long long)symlog_bytes);
        return -EINVAL;
    }
    symlog_bytes = align_up(symlog_bytes, 8);

    uint64_t ring_bytes = (uint64_t)chunk_bytes * chunks_per_ring;
    uint64_t ring_table_offset = PT_SEG_HEADER_BYTES;
    uint64_t rings_offset = align_up(ring_table_offset + (uint64_t)ring_count * PT_RING_SLOT_BYTES, PT_SEG_PAGE);
    /* Room in /dev/shm: a start needs the header and ring table, one whole ring
     * (its first thread's) and a symbol log. The log is what dominates a small
     * configuration (8 MiB by default): when /dev/shm cannot hold it, a default
     * log shrinks to what fits, down to PT_MIN_SYMLOG_BYTES (symbols past it
     * show as <unknown>, counted as symbols_dropped). Below that, the start is
     * refused with the sizes it needs. */
    {
        struct statvfs vfs;
        if (statvfs(PT_SHM_DIR, &vfs) == 0 && vfs.f_frsize) {
            const uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
            const uint64_t fixed = rings_offset + ring_bytes;
            const uint64_t min_log = cfg->symlog_bytes ? symlog_bytes : PT_MIN_SYMLOG_BYTES;
            if (avail < fixed + min_log) {
                /* the smallest start: one ring of two 4 KiB chunks, the smallest log */
                const uint64_t smallest = align_up(PT_SEG_HEADER_BYTES + PT_RING_SLOT_BYTES, PT_SEG_PAGE) +
                                          2u * PT_MIN_CHUNK_BYTES + PT_MIN_SYMLOG_BYTES;
                pt_set_err(err, errlen,
                           "not enough room in /dev/shm for a segment: it needs %llu KiB (a %llu KiB ring, a %llu KiB "
                           "symbol log, %llu KiB header), %llu KiB are free; free space or lower --rings/--ring-size "
                           "(--rings 1 --ring-size 0.01 needs %llu KiB)",
                           (unsigned long long)((fixed + min_log + 1023) >> 10), (unsigned long long)(ring_bytes >> 10),
                           (unsigned long long)(min_log >> 10), (unsigned long long)(rings_offset >> 10),
                           (unsigned long long)(avail >> 10), (unsigned long long)(smallest >> 10));
                return -ENOSPC;
            }
            if (!cfg->symlog_bytes && avail < fixed + symlog_bytes)
                symlog_bytes = (avail - fixed) & ~(uint64_t)(PT_SEG_PAGE - 1);
        }
    }
    uint64_t symlog_offset = align_up(rings_offset + (uint64_t)ring_count * ring_bytes, PT_SEG_PAGE);
    uint64_t segment_bytes = align_up(symlog_offset + symlog_bytes, PT_SEG_PAGE);
    if (ring_count == 0 || segment_bytes > PT_MAX_SEGMENT_BYTES) {
        pt_set_err(err, errlen,
                "a segment of %u rings x %llu bytes plus a %llu-byte symbol log (%llu MiB) exceeds the %llu MiB "
                "limit: lower --rings/--ring-size",
                ring_count, (unsigned long long)ring_bytes, (unsigned long long)symlog_bytes,
                (unsigned long long)(segment_bytes >> 20), (unsigned long long)(PT_MAX_SEGMENT_BYTES >> 20));
        return -EINVAL;
    }

    pt_segment_t *seg = calloc(1, sizeof *seg);
    if (seg == NULL) {
        pt_set_err(err, errlen, "out of memory creating a segment handle");
        return -ENOMEM;
    }
    seg->fd = -1;
    int rc;
    int fd = -1;
    /* The random part makes a name no other user can create ahead of us, so
     * EEXIST is a real (2^-64) collision: a few tries are plenty. */
    for (int attempt = 0; attempt < 16; attempt++) {
        /* relaxed: a unique number is all that is needed */
        uint32_t seq = atomic_fetch_add_explicit(&segment_seq, 1, memory_order_relaxed);
        uint64_t random_part = 0;
        if (getrandom(&random_part, sizeof random_part, 0) != (ssize_t)sizeof random_part) {
            /* no entropy source: the clock still differs between tries */
            random_part = pt_monotonic_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)attempt;
        }
        snprintf(seg->name, sizeof seg->name, "/%s%ld-%u-%016llx", PT_SHM_PREFIX, (long)getpid(), seq,
                 (unsigned long long)random_part);
        char path[160];
        snprintf(path, sizeof path, PT_SHM_DIR "%s", seg->name);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            break;
    }
    if (fd < 0) {
        rc = -errno;
        pt_set_err(err, errlen, "cannot create shared memory segment %s: %s; check that /dev/shm is mounted and writable",
                seg->name, strerror(errno));
        goto err_free;
    }
    if (ftruncate(fd, (off_t)segment_bytes) != 0) {
        rc = -errno;
        pt_set_err(err, errlen, "cannot size segment %s to %llu MiB: %s; free space in /dev/shm or lower --rings/--ring-size",
                seg->name, (unsigned long long)(segment_bytes >> 20), strerror(errno));
        goto err_unlink;
    }
    /* Reserve the header, the ring table and the symbol log's first pages now
     * (the rest of the log as it fills); a ring's own pages only when a thread
     * claims it. So a job starts where /dev/shm is
     * small (a container's 64 MB), and a thread that finds no room later runs
     * untraced, counted, instead of failing the start or faulting. */
    uint64_t symlog_first = segment_bytes - symlog_offset;
    if (symlog_first > PT_SYMLOG_FIRST_RESERVE)
        symlog_first = PT_SYMLOG_FIRST_RESERVE;
    rc = posix_fallocate(fd, 0, (off_t)rings_offset);
    if (rc == 0)
        rc = posix_fallocate(fd, (off_t)symlog_offset, (off_t)symlog_first);
    if (rc == 0) {
        /* the rest of the log is reserved as it fills; a /dev/shm that could
         * never hold it is still an error now, not a log cut short later */
        struct statvfs vfs;
        if (fstatvfs(fd, &vfs) == 0 && vfs.f_frsize &&
            (uint64_t)vfs.f_bavail * vfs.f_frsize < segment_bytes - symlog_offset - symlog_first)
            rc = ENOSPC;
    }
    if (rc != 0) {
        if (rc == ENOSPC || rc == EFBIG || rc == ENOMEM)
            pt_set_err(err, errlen,
                    "not enough room in /dev/shm for a %llu MiB segment: free space or lower --rings/--ring-size",
                    (unsigned long long)((rings_offset + segment_bytes - symlog_offset + (1u << 20) - 1) >> 20));
        else
            pt_set_err(err, errlen, "cannot reserve %llu MiB for segment %s: %s; free space in /dev/shm",
                    (unsigned long long)(segment_bytes >> 20), seg->name, strerror(rc));
        rc = (rc == EFBIG || rc == ENOMEM) ? -ENOSPC : -rc;
        goto err_unlink;
    }
    void *map = mmap(NULL, (size_t)segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        rc = -errno;
        pt_set_err(err, errlen, "cannot map segment %s (%llu MiB): %s; lower --rings/--ring-size", seg->name,
                (unsigned long long)(segment_bytes >> 20), strerror(errno));
        goto err_unlink;
    }
    seg->fd = fd; /* kept for pt_segment_claim_ring and pt_segment_reserve_symlog */
    seg->symlog_reserved = symlog_first;
    /* no table (no memory): each claim reserves its whole ring at once */
    seg->slot_chunks = calloc(ring_count, sizeof *seg->slot_chunks);
    fd = -1;
    seg->base = map;
    seg->bytes = segment_bytes;

    /* The file is all zeros: every ring slot is FREE, every counter 0. Chunk 0
     * of a ring is written when a thread claims it. */
    pt_seg_header_t *h = (pt_seg_header_t *)map;
    h->abi_major = PT_ABI_MAJOR;
    h->abi_minor = PT_ABI_MINOR;
    h->endian_mark = PT_ENDIAN_MARK;
    h->segment_bytes = segment_bytes;
    h->header_bytes = PT_SEG_HEADER_BYTES;
    h->ring_slot_bytes = PT_RING_SLOT_BYTES;
    h->ring_count = ring_count;
    h->chunk_bytes = chunk_bytes;
    h->chunks_per_ring = chunks_per_ring;
    h->drop_policy = cfg->drop_policy;
    h->ring_table_offset = ring_table_offset;
    h->rings_offset = rings_offset;
    h->ring_bytes = ring_bytes;
    h->symlog_offset = symlog_offset;
    h->symlog_bytes = symlog_bytes;
    h->wait_timeout_ns = wait_timeout_ns;
    h->pid = (uint64_t)getpid();
    h->ppid = (uint64_t)getppid();
    h->uid = (uint32_t)geteuid();
    h->producer_start = self_start_time();
    h->clock_kind = cfg->clock_kind;
    h->ticks_per_second = cfg->ticks_per_second ? cfg->ticks_per_second : 1000000000u;
    h->base_ticks = cfg->base_ticks;
    h->base_monotonic_ns = cfg->base_monotonic_ns;
    h->base_realtime_ns = cfg->base_realtime_ns;
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        h->start_realtime_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    }
    copy_str(h->python_version, sizeof h->python_version, cfg->python_version);
    copy_str(h->cmdline, sizeof h->cmdline, cfg->cmdline);
    adopt_geometry(seg, h);

    /* Magic last: a reader racing the creation sees "not a pytrace segment
     * (yet)" rather than half a header. release fence: orders the header
     * stores above before the magic (pairs with the reader's acquire of state,
     * and with the shm_open/mmap it does after we return in practice). */
    atomic_thread_fence(memory_order_release);
    h->magic = PT_SEG_MAGIC;
    atomic_store_explicit(&h->heartbeat_ns, pt_monotonic_ns(), memory_order_relaxed);
    /* release: publishes the header; pairs with the reader's acquire load of
     * state before it trusts process and clock fields */
    atomic_store_explicit(&h->state, PT_STATE_RUNNING, memory_order_release);
    *out = seg;
    return 0;

err_unlink:
    close(fd);
    shm_unlink(seg->name);
err_free:
    free(seg);
    return rc;
}

/* ---- attach ---------------------------------------------------------------- */

/* Open and map `name` ("/pytrace-...") read-write or read-only, check the owner
 * and the header. On success *out holds the mapping. */
static int open_validated(const char *name, unsigned flags, int writable, pt_segment_t **out, char *err,
                          size_t errlen)
{
    pt_segment_t *seg = calloc(1, sizeof *seg);
    if (seg == NULL) {
        pt_set_err(err, errlen, "out of memory attaching to %s", name);
        return -ENOMEM;
    }
    seg->fd = -1;
    snprintf(seg->name, sizeof seg->name, "%s", name);
    int rc;
    struct stat st;
    int fd = open_segment_fd(seg->name, writable, (flags & PT_ATTACH_ANY_USER) ? (uid_t)-1 : geteuid(), &st, err,
                             errlen);
    if (fd < 0) {
        rc = fd;
        goto err_free;
    }
    uint64_t file_bytes = (uint64_t)st.st_size;
    if (file_bytes < PT_SEG_HEADER_BYTES) {
        rc = validate_named(seg->name, NULL, file_bytes, err, errlen, NULL); /* reports truncation */
        goto err_close;
    }
    if (file_bytes > PT_MAX_SEGMENT_BYTES) {
        rc = -EPROTO;
        pt_set_err(err, errlen, "segment %s: file of %llu bytes is larger than any valid segment; remove it",
                seg->name, (unsigned long long)file_bytes);
        goto err_close;
    }
    void *map = mmap(NULL, (size_t)file_bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        rc = -errno;
        pt_set_err(err, errlen, "cannot map segment %s: %s", seg->name, strerror(errno));
        goto err_close;
    }
    /* the size again, now that the mapping exists: a file that shrank
     * between the two would fault on the first read */
    struct stat st_after;
    if (fstat(fd, &st_after) != 0 || (uint64_t)st_after.st_size < file_bytes) {
        rc = -EBADMSG;
        pt_set_err(err, errlen, "segment %s shrank while it was being attached (%llu bytes, then %llu); try again",
                   seg->name, (unsigned long long)file_bytes, (unsigned long long)st_after.st_size);
        munmap(map, (size_t)file_bytes);
        goto err_close;
    }
    close(fd);
    seg->base = map;
    seg->bytes = file_bytes;
    pt_seg_header_t snap;
    rc = validate_named(seg->name, (const pt_seg_header_t *)map, file_bytes, err, errlen, &snap);
    if (rc != 0) {
        munmap(map, (size_t)file_bytes);
        goto err_free;
    }
    adopt_geometry(seg, &snap);
    *out = seg;
    return 0;

err_close:
    close(fd);
err_free:
    free(seg);
    return rc;
}

static int resolve_target(const char *target, char *name, size_t namelen, char *err, size_t errlen)
{
    if (target == NULL || target[0] == '\0') {
        pt_set_err(err, errlen, "no segment given: pass a segment name or a pid (see `pytrace ls`)");
        return -EINVAL;
    }
    if (all_digits(target)) {
        uint64_t pid = strtoull(target, NULL, 10);
        int rc = find_by_pid(pid, name, namelen);
        if (rc != 0)
            pt_set_err(err, errlen, "no pytrace segment for pid %s: is it traced? run `pytrace ls`", target);
        return rc;
    }
    const char *base = target[0] == '/' ? target + 1 : target;
    if (base[0] == '\0' || strchr(base, '/') != NULL || strlen(base) + 2 > namelen) {
        pt_set_err(err, errlen, "'%.80s' is not a segment name: use a name like pytrace-12-0 or a pid", target);
        return -EINVAL;
    }
    snprintf(name, namelen, "/%s", base);
    return 0;
}

int pt_segment_attach(const char *target, unsigned flags, pt_segment_t **out, char *err, size_t errlen)
{
    if (out == NULL) {
        pt_set_err(err, errlen, "pt_segment_attach: no output handle given");
        return -EINVAL;
    }
    *out = NULL;
    char name[96];
    int rc = resolve_target(target, name, sizeof name, err, errlen);
    if (rc != 0)
        return rc;
    return open_validated(name, flags, 1, out, err, errlen);
}

void pt_segment_close(pt_segment_t *seg, int unlink_it)
{
    if (seg == NULL)
        return;
    if (seg->consumer_locked)
        pt_segment_unlock_consumer(seg);
    if (unlink_it)
        shm_unlink(seg->name);
    if (seg->fd >= 0)
        close(seg->fd);
    munmap(seg->base, (size_t)seg->bytes);
    free((void *)seg->slot_chunks);
    free(seg);
}

int pt_segment_unlink(const char *name)
{
    char full[96];
    int rc = resolve_target(name, full, sizeof full, NULL, 0);
    if (rc != 0)
        return rc;
    return shm_unlink(full) == 0 ? 0 : -errno;
}

/* ---- accessors ------------------------------------------------------------- */

void pt_segment_geometry(const pt_segment_t *seg, pt_segment_geometry_t *out)
{
    *out = (pt_segment_geometry_t){
        .mapped_bytes = seg->bytes,
        .ring_count = seg->ring_count,
        .chunk_bytes = seg->chunk_bytes,
        .chunks_per_ring = seg->chunks_per_ring,
        .ring_bytes = seg->ring_bytes,
        .symlog_bytes = seg->symlog_bytes,
    };
}

pt_seg_header_t *pt_segment_header(const pt_segment_t *seg)
{
    return (pt_seg_header_t *)(void *)seg->base;
}

const char *pt_segment_name(const pt_segment_t *seg)
{
    return seg->name;
}

pt_ring_slot_t *pt_segment_slot(const pt_segment_t *seg, uint32_t ring_index)
{
    if (ring_index >= seg->ring_count)
        return NULL;
    return (pt_ring_slot_t *)(void *)(seg->base + seg->ring_table_offset + (uint64_t)ring_index * PT_RING_SLOT_BYTES);
}

uint8_t *pt_segment_ring_base(const pt_segment_t *seg, uint32_t ring_index)
{
    if (ring_index >= seg->ring_count)
        return NULL;
    return seg->base + seg->rings_offset + (uint64_t)ring_index * seg->ring_bytes;
}

uint8_t *pt_segment_symlog(const pt_segment_t *seg)
{
    return seg->base + seg->symlog_offset;
}

uint64_t pt_segment_reserve_symlog(pt_segment_t *seg, uint64_t upto)
{
    if (seg->fd < 0) /* not the producer's segment (or no file): the log as it is */
        return seg->symlog_bytes;
    if (upto > seg->symlog_bytes)
        upto = seg->symlog_bytes;
    if (upto <= seg->symlog_reserved)
        return seg->symlog_reserved;
    uint64_t want = seg->symlog_reserved * 2; /* doubling: a few calls for the whole log */
    if (want < upto)
        want = upto;
    if (want > seg->symlog_bytes)
        want = seg->symlog_bytes;
    /* No room in /dev/shm: the log stays as it is and the symbol that needed
     * more is dropped, counted (symbols_dropped), as at a full log. */
    if (posix_fallocate(seg->fd, (off_t)(seg->symlog_offset + seg->symlog_reserved),
                        (off_t)(want - seg->symlog_reserved)) == 0)
        seg->symlog_reserved = want;
    return seg->symlog_reserved;
}

/* ---- ring slots ------------------------------------------------------------ */

/* A ring's pages are reserved in steps: its first chunks at claim, the rest
 * (doubling) as its thread's first lap reaches them. A fork child or pool
 * worker that writes a few thousand events does not zero 4 MiB of /dev/shm
 * at its start (1.3 ms of a traced fork's 2 ms). */
#define PT_RING_FIRST_RESERVE_CHUNKS 2u

/* pt_ring_reserve_fn: chunks [from, from + count) of ring `ring_index`. On
 * the producer thread; the fd stays open while any ring of the segment is
 * written (it is closed with the mapping). */
static int reserve_chunks(void *ctx, uint32_t ring_index, uint32_t from, uint32_t count)
{
    pt_segment_t *seg = ctx;
    if (seg->fd < 0 || seg->slot_chunks == NULL || ring_index >= seg->ring_count || from > seg->chunks_per_ring ||
        count > seg->chunks_per_ring - from)
        return -EINVAL;
    int err = posix_fallocate(seg->fd,
                              (off_t)(seg->rings_offset + (uint64_t)ring_index * seg->ring_bytes +
                                      (uint64_t)from * seg->chunk_bytes),
                              (off_t)((uint64_t)count * seg->chunk_bytes));
    if (err != 0)
        return -err;
    /* relaxed: a tally for the claims' room check; only this slot's owner
     * thread moves the slot's count */
    uint32_t had = atomic_load_explicit(&seg->slot_chunks[ring_index], memory_order_relaxed);
    if (from + count > had) {
        atomic_store_explicit(&seg->slot_chunks[ring_index], from + count, memory_order_relaxed);
        atomic_fetch_sub_explicit(&seg->promised, (uint64_t)(from + count - had) * seg->chunk_bytes,
                                  memory_order_relaxed);
    }
    return 0;
}

/* A claim of slot i promises the part of its ring not reserved yet (once per
 * slot: a slot claimed again keeps its promise): refused with -ENOSPC when
 * /dev/shm has not that much room free beside the promises already made. */
static int ring_promise(pt_segment_t *seg, uint32_t i, uint32_t first, uint64_t *promised)
{
    *promised = 0;
    /* relaxed: see reserve_chunks */
    uint32_t had = atomic_load_explicit(&seg->slot_chunks[i], memory_order_relaxed);
    if (had != 0)
        return 0; /* promised at its first claim */
    uint64_t rest = (uint64_t)(seg->chunks_per_ring - first) * seg->chunk_bytes;
    uint64_t total = atomic_fetch_add_explicit(&seg->promised, rest, memory_order_relaxed) + rest;
    struct statvfs vfs;
    if (fstatvfs(seg->fd, &vfs) == 0 && vfs.f_frsize &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize < total + (uint64_t)first * seg->chunk_bytes) {
        atomic_fetch_sub_explicit(&seg->promised, rest, memory_order_relaxed);
        return -ENOSPC;
    }
    *promised = rest;
    return 0;
}

int pt_segment_claim_ring(pt_segment_t *seg, uint64_t os_tid, const char *thread_name, uint64_t start_ticks,
                          pt_ring_t *ring)
{
    if (seg == NULL || ring == NULL)
        return -EINVAL;
    pt_seg_header_t *h = pt_segment_header(seg);
    for (uint32_t i = 0; i < seg->ring_count; i++) {
        pt_ring_slot_t *slot = pt_segment_slot(seg, i);
        uint32_t expected = PT_RING_FREE;
        /* acq_rel on success: the acquire half pairs with the reader's release
         * store of FREE, so the reader's last use of this slot happens before
         * we rewrite it; the release half orders nothing extra (identity is
         * published by the generation store below). relaxed on failure: the
         * slot is someone else's and we touch nothing of it. */
        if (!atomic_compare_exchange_strong_explicit(&slot->state, &expected, PT_RING_ACTIVE, memory_order_acq_rel,
                                                     memory_order_relaxed))
            continue;
        /* The ring's first chunks, reserved now (a no-op on a later claim of
         * the slot); the rest as the thread's first lap reaches them
         * (reserve_chunks). No room: the slot goes back, the caller runs the
         * thread untraced and counts it. */
        uint32_t first = seg->chunks_per_ring < PT_RING_FIRST_RESERVE_CHUNKS ? seg->chunks_per_ring
                                                                              : PT_RING_FIRST_RESERVE_CHUNKS;
        if (seg->slot_chunks == NULL)
            first = seg->chunks_per_ring;
        uint64_t promised = 0;
        if (seg->fd >= 0 && seg->slot_chunks != NULL && ring_promise(seg, i, first, &promised) != 0) {
            /* release: give the slot back untouched */
            atomic_store_explicit(&slot->state, PT_RING_FREE, memory_order_release);
            return -ENOSPC;
        }
        if (seg->fd >= 0) {
            int err = posix_fallocate(seg->fd, (off_t)(seg->rings_offset + (uint64_t)i * seg->ring_bytes),
                                      (off_t)((uint64_t)first * seg->chunk_bytes));
            if (err != 0) {
                atomic_fetch_sub_explicit(&seg->promised, promised, memory_order_relaxed);
                /* release: give the slot back untouched */
                atomic_store_explicit(&slot->state, PT_RING_FREE, memory_order_release);
                return err == ENOSPC || err == EFBIG || err == ENOMEM ? -ENOSPC : -err;
            }
        }
        /* The previous owner's final counters leave the slot for the header:
         * the producer's totals (*_reused + sum of slots) keep them. Reset
         * first, then a release add: a reader that acquire-loads *_reused
         * before the slots may miss them for a moment, never counts them twice.
         * relaxed loads: we own the slot; the owner's last stores happen
         * before its RETIRED, which the reader's FREE and our CAS follow. */
        uint64_t old_w = atomic_load_explicit(&slot->events_written, memory_order_relaxed);
        uint64_t old_d = atomic_load_explicit(&slot->events_dropped, memory_order_relaxed);
        atomic_store_explicit(&slot->events_written, 0, memory_order_relaxed);
        atomic_store_explicit(&slot->events_dropped, 0, memory_order_relaxed);
        if (old_w)
            atomic_fetch_add_explicit(&h->events_written_reused, old_w, memory_order_release);
        if (old_d)
            atomic_fetch_add_explicit(&h->events_dropped_reused, old_d, memory_order_release);
        /* relaxed: a unique number; the order of thread numbers among
         * threads claiming at the same time does not matter */
        uint64_t thread = atomic_fetch_add_explicit(&h->threads_started, 1, memory_order_relaxed) + 1;
        slot->thread = thread;
        slot->os_tid = os_tid;
        slot->start_ticks = start_ticks;
        slot->end_ticks = 0;
        memset(slot->name, 0, sizeof slot->name);
        copy_str(slot->name, sizeof slot->name, thread_name);
        int rc = pt_ring_init(ring, slot, pt_segment_ring_base(seg, i), seg->chunk_bytes, seg->chunks_per_ring,
                              seg->drop_policy, seg->wait_timeout_ns, i, thread);
        if (rc != 0) {
            /* release: give the slot back (pairs with the acquire of the next claimer's CAS) */
            atomic_store_explicit(&slot->state, PT_RING_FREE, memory_order_release);
            return rc;
        }
        if (seg->fd >= 0 && seg->slot_chunks != NULL) {
            /* relaxed: see reserve_chunks */
            uint32_t had = atomic_load_explicit(&seg->slot_chunks[i], memory_order_relaxed);
            if (had < first)
                atomic_store_explicit(&seg->slot_chunks[i], first, memory_order_relaxed);
            pt_ring_set_reserver(ring, reserve_chunks, seg, had > first ? had : first);
        }
        /* relaxed load: only claimers write generation, and we own the slot */
        uint32_t gen = atomic_load_explicit(&slot->generation, memory_order_relaxed) + 1;
        if (gen == 0)
            gen = 1; /* 0 means "never claimed" */
        /* release: publishes the identity, the cursor reset and chunk 0 written
         * above; pairs with the reader's acquire load of generation */
        atomic_store_explicit(&slot->generation, gen, memory_order_release);
        return 0;
    }
    return -EAGAIN;
}

void pt_segment_retire_ring(pt_segment_t *seg, pt_ring_t *ring, uint64_t end_ticks)
{
    (void)seg;
    if (ring == NULL || ring->slot == NULL)
        return;
    pt_ring_slot_t *slot = ring->slot;
    (void)pt_ring_flush_lost(ring, end_ticks); /* a trailing gap gets its Lost record if there is room */
    pt_ring_flush_counters(ring);
    slot->end_ticks = end_ticks;
    /* release: publishes end_ticks, the final counters and every record; pairs
     * with the reader's acquire load of state before its final drain */
    atomic_store_explicit(&slot->state, PT_RING_RETIRED, memory_order_release);
    memset(ring, 0, sizeof *ring); /* later pushes drop without touching the slot */
}

/* ---- producer state -------------------------------------------------------- */

void pt_segment_heartbeat(pt_segment_t *seg)
{
    /* relaxed: a liveness hint read by readers, orders nothing */
    atomic_store_explicit(&pt_segment_header(seg)->heartbeat_ns, pt_monotonic_ns(), memory_order_relaxed);
}

void pt_segment_set_state(pt_segment_t *seg, uint32_t state)
{
    pt_segment_heartbeat(seg);
    /* release: everything published before (records, symbols, retired slots)
     * is visible to a reader that acquire-loads state (EXITED means "read
     * everything, nothing more comes") */
    atomic_store_explicit(&pt_segment_header(seg)->state, state, memory_order_release);
}

void pt_segment_set_role(pt_segment_t *seg, const char *role)
{
    pt_seg_header_t *h = pt_segment_header(seg);
    size_t n = strlen(role);
    if (n >= PT_ROLE_BYTES) {
        n = PT_ROLE_BYTES - 1;
        while (n > 0 && ((unsigned char)role[n] & 0xC0u) == 0x80u)
            n--;
    }
    /* relaxed: only this writer changes it */
    uint32_t seq = atomic_load_explicit(&h->role_seq, memory_order_relaxed);
    /* relaxed + release fence: the odd sequence is seen before any byte changes;
     * pairs with the acquire fence in pt_segment_read_role */
    atomic_store_explicit(&h->role_seq, seq | 1u, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (size_t i = 0; i < PT_ROLE_BYTES; i++)
        atomic_store_explicit(&h->role[i], i < n ? (uint8_t)role[i] : 0, memory_order_relaxed);
    /* release: the bytes before the even sequence; pairs with the reader's first acquire load */
    atomic_store_explicit(&h->role_seq, (seq | 1u) + 1u, memory_order_release);
}

uint32_t pt_segment_read_role(const pt_seg_header_t *h, char *out, size_t len)
{
    if (len == 0)
        return UINT32_MAX;
    /* acquire: pairs with the release store of the even sequence */
    uint32_t seq = atomic_load_explicit(&h->role_seq, memory_order_acquire);
    if (seq & 1u)
        return UINT32_MAX;
    size_t n = len - 1 < PT_ROLE_BYTES ? len - 1 : PT_ROLE_BYTES;
    for (size_t i = 0; i < n; i++)
        out[i] = (char)atomic_load_explicit(&h->role[i], memory_order_relaxed);
    out[n] = '\0';
    /* acquire fence: the bytes are read before the sequence is read again; pairs
     * with the writer's release fence after its odd store */
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&h->role_seq, memory_order_relaxed) != seq)
        return UINT32_MAX;
    out[strnlen(out, n)] = '\0';
    return seq;
}

int pt_segment_producer_alive(const pt_segment_t *seg)
{
    const pt_seg_header_t *h = pt_segment_header(seg);
    return process_alive(h->pid, h->producer_start);
}

/* ---- consumer lock --------------------------------------------------------- */

/* Protocol: consumer_pid is the lock word (CAS). consumer_start is written by
 * the new holder right after its CAS and cleared by the holder before it
 * releases; a checker that sees start 0 only trusts kill(). */
int pt_segment_lock_consumer(pt_segment_t *seg, char *err, size_t errlen)
{
    pt_seg_header_t *h = pt_segment_header(seg);
    uint64_t me = (uint64_t)getpid();
    uint64_t my_start = self_start_time();
    for (int attempt = 0; attempt < 100; attempt++) {
        /* acquire: pairs with the release CAS of the holder, so its
         * consumer_start store (made before) is visible if it is set */
        uint64_t holder = atomic_load_explicit(&h->consumer_pid, memory_order_acquire);
        uint64_t holder_start = atomic_load_explicit(&h->consumer_start, memory_order_acquire);
        int taking_over = 0;
        if (holder != 0) {
            if (process_alive(holder, holder_start)) {
                char name[96];
                process_name(holder, name, sizeof name);
                pt_set_err(err, errlen, "segment %s is being read by pid %llu%s%s%s; stop that reader first",
                        seg->name, (unsigned long long)holder, name[0] ? " (" : "", name, name[0] ? ")" : "");
                return -EBUSY;
            }
            taking_over = 1;
        }
        /* acq_rel: acquire pairs with the previous holder's release (its
         * consumer_index / released_chunks stores are visible to us); release
         * publishes nothing yet (consumer_start follows) */
        if (!atomic_compare_exchange_strong_explicit(&h->consumer_pid, &holder, me, memory_order_acq_rel,
                                                     memory_order_relaxed))
            continue; /* someone else moved first: look again */
        /* a new holder reads one segment until it says it reads the tree */
        atomic_store_explicit(&h->consumer_reads_children, 0, memory_order_relaxed);
        /* release: pairs with the acquire load of consumer_start by a checker */
        atomic_store_explicit(&h->consumer_start, my_start, memory_order_release);
        atomic_store_explicit(&h->consumer_heartbeat_ns, pt_monotonic_ns(), memory_order_relaxed);
        if (taking_over)
            atomic_fetch_add_explicit(&h->consumer_takeovers, 1, memory_order_relaxed); /* relaxed: statistic */
        seg->consumer_locked = 1;
        return 0;
    }
    pt_set_err(err, errlen, "segment %s: the reader lock keeps changing hands; try again", seg->name);
    return -EBUSY;
}

void pt_segment_unlock_consumer(pt_segment_t *seg)
{
    if (seg == NULL || !seg->consumer_locked)
        return;
    /* cleared first: if the stores below fault (a shrunk file, under the
     * reader's guard), pt_segment_close does not touch the header again; a
     * lock left behind is taken over as a dead holder's */
    seg->consumer_locked = 0;
    pt_seg_header_t *h = pt_segment_header(seg);
    uint64_t me = (uint64_t)getpid();
    /* relaxed: the CAS below releases them */
    atomic_store_explicit(&h->consumer_reads_children, 0, memory_order_relaxed);
    atomic_store_explicit(&h->consumer_start, 0, memory_order_relaxed);
    /* release: our cursor stores (released_chunks, consumer_index) happen
     * before the next holder's acquire CAS */
    atomic_compare_exchange_strong_explicit(&h->consumer_pid, &me, 0, memory_order_release, memory_order_relaxed);
}

void pt_segment_set_reads_children(pt_segment_t *seg)
{
    if (seg == NULL || !seg->consumer_locked)
        return;
    /* release: pairs with the producer's acquire at exit (pt_session.c) */
    atomic_store_explicit(&pt_segment_header(seg)->consumer_reads_children, 1, memory_order_release);
}

/* ---- discovery ------------------------------------------------------------- */

typedef struct listed {
    pt_segment_info_t info;
    struct timespec ctime;
    uint64_t seq;
    int regular; /* a regular file (not a link, FIFO, directory...) */
} listed_t;

/* `st` is the lstat of the entry. Only our own regular files are opened and
 * mapped; anything else is listed from its lstat alone. */
static void inspect(const char *dname, const struct stat *st, pt_segment_info_t *info)
{
    memset(info, 0, sizeof *info);
    info->name[0] = '/';
    copy_str(info->name + 1, sizeof info->name - 1, dname); /* scan() skipped longer names */
    uint64_t name_pid = 0, seq = 0;
    (void)parse_seg_name(dname, &name_pid, &seq);
    info->pid = name_pid;
    info->uid = (uint32_t)st->st_uid;

    pt_segment_t *seg = NULL;
    char err[256];
    int rc;
    if (!S_ISREG(st->st_mode)) {
        rc = -EPROTO;
        pt_set_err(err, sizeof err, "not a regular file (a link, FIFO, device or directory): not a pytrace segment");
    } else if (st->st_uid != geteuid()) {
        rc = -EACCES;
        pt_set_err(err, sizeof err, "owned by uid %u: not opened (only your own segments are read)",
                   (unsigned)st->st_uid);
    } else {
        rc = open_validated(info->name, 0, 0, &seg, err, sizeof err);
    }
    if (rc != 0) {
        copy_str(info->error, sizeof info->error, err);
        info->alive = process_alive(name_pid, 0);
        info->state = info->alive ? PT_STATE_EMPTY : PT_STATE_DEAD;
        return;
    }
    const pt_seg_header_t *h = pt_segment_header(seg);
    info->valid = 1;
    info->pid = h->pid;
    info->ppid = h->ppid;
    info->uid = h->uid;
    info->segment_bytes = seg->bytes;
    info->alive = pt_segment_producer_alive(seg);
    /* acquire: pairs with the producer's release store of state */
    info->state = atomic_load_explicit(&h->state, memory_order_acquire);
    if (!info->alive && info->state != PT_STATE_EXITED)
        info->state = PT_STATE_DEAD;
    /* relaxed: published by the release store of the state (acquired above) */
    info->end_signal = atomic_load_explicit(&h->end_signal, memory_order_relaxed);
    /* acquire: pairs with a claimer's release add (after it reset the slot) */
    info->events_written = atomic_load_explicit(&h->events_written_reused, memory_order_acquire);
    info->events_dropped = atomic_load_explicit(&h->events_dropped_reused, memory_order_acquire);
    for (uint32_t i = 0; i < seg->ring_count; i++) {
        const pt_ring_slot_t *slot = pt_segment_slot(seg, i);
        /* relaxed: counters and a state snapshot for display only */
        if (atomic_load_explicit(&slot->state, memory_order_relaxed) == PT_RING_ACTIVE)
            info->threads_active++;
        info->events_written += atomic_load_explicit(&slot->events_written, memory_order_relaxed);
        info->events_dropped += atomic_load_explicit(&slot->events_dropped, memory_order_relaxed);
    }
    /* relaxed: counters for display only */
    info->hook_errors = atomic_load_explicit(&h->hook_errors, memory_order_relaxed);
    info->symbols_dropped = atomic_load_explicit(&h->symbols_dropped, memory_order_relaxed);
    info->threads_untraced = atomic_load_explicit(&h->threads_untraced, memory_order_relaxed);
    info->tracing_displaced = atomic_load_explicit(&h->tracing_displaced, memory_order_relaxed);
    info->events_untraced = atomic_load_explicit(&h->events_untraced, memory_order_relaxed);
    uint64_t cpid = atomic_load_explicit(&h->consumer_pid, memory_order_acquire);
    uint64_t cstart = atomic_load_explicit(&h->consumer_start, memory_order_acquire);
    info->consumer_pid = process_alive(cpid, cstart) ? cpid : 0;
    /* cmdline is untrusted: copy bounded, NUL-terminated */
    size_t n = strnlen(h->cmdline, sizeof h->cmdline);
    if (n >= sizeof info->cmdline)
        n = sizeof info->cmdline - 1;
    memcpy(info->cmdline, h->cmdline, n);
    info->cmdline[n] = '\0';
    pt_segment_close(seg, 0);
}

static int newest_first(const void *a, const void *b)
{
    const listed_t *x = a, *y = b;
    if (x->ctime.tv_sec != y->ctime.tv_sec)
        return x->ctime.tv_sec < y->ctime.tv_sec ? 1 : -1;
    if (x->ctime.tv_nsec != y->ctime.tv_nsec)
        return x->ctime.tv_nsec < y->ctime.tv_nsec ? 1 : -1;
    if (x->seq != y->seq)
        return x->seq < y->seq ? 1 : -1;
    return strcmp(x->info.name, y->info.name);
}

/* Collect every pytrace-* entry of /dev/shm, inspected, newest first; an
 * entry `skip` says yes to ("/pytrace-...") is left out, never opened. */
static int scan(listed_t **out, size_t *count, pt_segment_skip_fn skip, void *ctx)
{
    *out = NULL;
    *count = 0;
    DIR *d = opendir(PT_SHM_DIR);
    if (d == NULL)
        return -errno;
    size_t cap = 0, n = 0;
    listed_t *v = NULL;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, PT_SHM_PREFIX, strlen(PT_SHM_PREFIX)) != 0)
            continue;
        if (strlen(de->d_name) + 2 > sizeof v->info.name)
            continue;
        if (skip != NULL) {
            char name[sizeof v->info.name];
            name[0] = '/';
            copy_str(name + 1, sizeof name - 1, de->d_name);
            if (skip(name, ctx))
                continue;
        }
        if (pt_grow_size((void **)&v, &cap, sizeof *v, n + 1, 16) < 0) {
            free(v);
            closedir(d);
            return -ENOMEM;
        }
        listed_t *e = &v[n];
        memset(e, 0, sizeof *e);
        char path[512];
        struct stat st;
        snprintf(path, sizeof path, PT_SHM_DIR "/%s", de->d_name);
        /* lstat: a link is listed as what it is, never followed */
        if (lstat(path, &st) != 0)
            continue; /* gone since readdir */
        e->ctime = st.st_ctim;
        e->regular = S_ISREG(st.st_mode);
        uint64_t pid;
        (void)parse_seg_name(de->d_name, &pid, &e->seq);
        inspect(de->d_name, &st, &e->info);
        n++;
    }
    closedir(d);
    if (n > 1)
        qsort(v, n, sizeof *v, newest_first);
    *out = v;
    *count = n;
    return 0;
}

int pt_segment_list(pt_segment_info_t *out, size_t max, size_t *count)
{
    return pt_segment_list_skip(out, max, count, NULL, NULL);
}

int pt_segment_list_skip(pt_segment_info_t *out, size_t max, size_t *count, pt_segment_skip_fn skip, void *ctx)
{
    listed_t *v;
    size_t n;
    int rc = scan(&v, &n, skip, ctx);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < n && i < max; i++)
        out[i] = v[i].info;
    if (count != NULL)
        *count = n;
    free(v);
    return 0;
}

int pt_segment_list_alloc(pt_segment_info_t **out, size_t *count)
{
    return pt_segment_list_alloc_skip(out, count, NULL, NULL);
}

int pt_segment_list_alloc_skip(pt_segment_info_t **out, size_t *count, pt_segment_skip_fn skip, void *ctx)
{
    listed_t *v;
    size_t n;
    *out = NULL;
    *count = 0;
    int rc = scan(&v, &n, skip, ctx);
    if (rc != 0)
        return rc;
    pt_segment_info_t *infos = n ? malloc(n * sizeof *infos) : NULL;
    if (n && infos == NULL) {
        free(v);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        infos[i] = v[i].info;
    free(v);
    *out = infos;
    *count = n;
    return 0;
}

int pt_segment_collect_stale(void)
{
    return pt_segment_collect_children(0);
}

int pt_segment_collect_children(uint64_t parent_pid)
{
    listed_t *v;
    size_t n;
    int rc = scan(&v, &n, NULL, NULL);
    if (rc != 0)
        return rc;
    int removed = 0;
    uid_t me = geteuid();
    for (size_t i = 0; i < n; i++) {
        const pt_segment_info_t *info = &v[i].info;
        /* A valid segment goes when its producer is dead. An invalid one goes
         * only if it is our own regular file and the pid in its name is gone:
         * a segment being created right now is briefly invalid and must
         * survive, and what is not a file was not made by pytrace. */
        int stale = info->valid ? !info->alive && info->consumer_pid == 0 /* a live reader finishes first */
                                : (v[i].regular && info->uid == (uint32_t)me && !info->alive);
        if (parent_pid != 0 && !(info->valid && info->ppid == parent_pid))
            stale = 0;
        if (stale && shm_unlink(info->name) == 0)
            removed++;
    }
    free(v);
    return removed;
}
