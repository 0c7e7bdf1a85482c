/*
 * pt_export implementation: recording -> walk -> one format writer.
 *
 * Design summary
 *   - The driver reads messages with recfile, keeps the symbol table, thread
 *     names and clock, and feeds events to the walk (walk.h: the rules every
 *     reader shares). The writers are the walk's callbacks.
 *   - Self time is accounted exactly as agg.c does it (the ticks between two
 *     callbacks of a thread go to the entry on top; a tick below the largest
 *     seen adds nothing; threads without ThreadEnd are closed at the latest
 *     tick of the stream, as pytrace-top counts open frames), so pytrace-top,
 *     pstats and collapsed agree to the tick on every function.
 *   - collapsed and pstats share one calling-context tree (node = path from
 *     the root; threads share the root unless per_thread), each node with its
 *     calls and self ticks. pstats rows are derived at the end: calls, calls
 *     of nodes whose function is not already on the path (primitive), self,
 *     and inclusive time of outermost activations; caller edges the same per
 *     (caller, callee) pair, which is cProfile's per-pair recursion level.
 *   - Chrome writes one "X" event per exit, as it happens (timestamps clamped
 *     to be non-decreasing per thread, so slices nest).
 *   - speedscope needs each thread's events together: they are buffered per
 *     thread and spilled in blocks to an unlinked temporary file (nothing is
 *     left behind, even on a crash), then copied out per thread.
 *   - Processes (walk.h, PROCESSES and THE TIME AXIS): a stream may hold
 *     several, each message tagged with Message.process. Each has its own
 *     ProcessInfo (pid, command line, clock), threads (keyed (process,
 *     number) in the walk) and symbols (keyed (process, id) here), and its
 *     ticks convert with its own clock. Chrome and Perfetto give each process
 *     its own track (pid = its real pid; one that another process of the
 *     stream already has gets (number << 22) | pid, above Linux's pid_max);
 *     speedscope has a profile per (process, thread); collapsed and pstats
 *     add all processes together (each process has its own subtree under the
 *     root, so self ticks convert with its clock; pstats keys merge them), or
 *     only those opts.pids selects. An untagged stream is process 0 and
 *     exports exactly as before processes existed.
 *   - Names: JSON strings are escaped (quotes, backslashes, control
 *     characters; invalid UTF-8 becomes U+FFFD); pstats strings are made
 *     valid UTF-8 (marshal refuses anything else).
 */
#define _POSIX_C_SOURCE 200809L
#include "export.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zlib.h>

#include "recfile.h"
#include "grow_internal.h"
#include "u64map_internal.h"
#include "walk.h"

#define NONE UINT32_MAX
#define OUT_BUF_BYTES (1u << 20)
#define SS_THREAD_BUF (16u << 10)
#define SS_TOTAL_BUF (16u << 20)
#define PROGRESS_EVERY 1024u

/* ---- output buffer ---------------------------------------------------------- */

typedef struct obuf {
    int fd;
    char *buf;
    size_t len, cap;
    int err;
    uint64_t written;
    uint64_t max_bytes; /* 0: no limit; past it err = -EFBIG and limited = 1 */
    int limited;
} obuf_t;

/* Write all n bytes at offset off, or at the file position (a pipe too)
 * when off < 0. 0 or -errno. */
static int write_all(int fd, const char *p, size_t n, int64_t off)
{
    while (n) {
        ssize_t w = off < 0 ? write(fd, p, n) : pwrite(fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
        if (off >= 0)
            off += w;
    }
    return 0;
}

/* The size the user allowed (opts.max_bytes): nothing past it is written. */
static int ob_over(obuf_t *o, size_t n)
{
    if (!o->max_bytes || o->written + n <= o->max_bytes)
        return 0;
    o->limited = 1;
    o->err = -EFBIG;
    return 1;
}

static void ob_flush(obuf_t *o)
{
    if (o->err || !o->len || ob_over(o, o->len)) {
        o->len = 0; /* after an error the rest is dropped, never written past the buffer */
        return;
    }
    o->err = write_all(o->fd, o->buf, o->len, -1);
    o->written += o->len;
    o->len = 0;
}

static inline void ob_put(obuf_t *o, const void *p, size_t n)
{
    if (o->len + n > o->cap) {
        ob_flush(o);
        if (n > o->cap) {
            if (!o->err && !ob_over(o, n))
                o->err = write_all(o->fd, p, n, -1);
            o->written += n;
            return;
        }
    }
    memcpy(o->buf + o->len, p, n);
    o->len += n;
}

static inline void ob_puts(obuf_t *o, const char *s) { ob_put(o, s, strlen(s)); }

static inline void ob_putc(obuf_t *o, char c)
{
    if (o->len == o->cap)
        ob_flush(o);
    o->buf[o->len++] = c;
}

static inline char *u64_digits(char *end, uint64_t v)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

static inline void ob_u64(obuf_t *o, uint64_t v)
{
    char b[24], *e = b + sizeof b, *s = u64_digits(e, v);
    ob_put(o, s, (size_t)(e - s));
}

static inline void ob_i64(obuf_t *o, int64_t v)
{
    if (v < 0) {
        ob_putc(o, '-');
        ob_u64(o, (uint64_t)0 - (uint64_t)v);
    } else {
        ob_u64(o, (uint64_t)v);
    }
}

/* ns as microseconds with three decimals (what "%.3f" of ns/1000 gives) */
static inline void ob_us3(obuf_t *o, int64_t ns)
{
    uint64_t a = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    if (ns < 0)
        ob_putc(o, '-');
    ob_u64(o, a / 1000);
    char f[4] = {'.', (char)('0' + a % 1000 / 100), (char)('0' + a % 100 / 10), (char)('0' + a % 10)};
    ob_put(o, f, 4);
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if invalid. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned min;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, min = 0x10000;
    else
        return 0;
    if (len > n)
        return 0;
    unsigned cp = c & (0x7fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* A JSON string literal of s (quotes included). */
static void ob_json(obuf_t *o, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    ob_putc(o, '"');
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            size_t j = i;
            while (j < n && p[j] >= 0x20 && p[j] < 0x80 && p[j] != '"' && p[j] != '\\')
                j++;
            ob_put(o, p + i, j - i);
            i = j;
            continue;
        }
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            ob_put(o, e, 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            ob_put(o, e, 6);
            i++;
        } else {
            size_t l = utf8_len(p + i, n - i);
            if (l) {
                ob_put(o, p + i, l);
                i += l;
            } else {
                ob_puts(o, "\\ufffd");
                i++;
            }
        }
    }
    ob_putc(o, '"');
}

/* s made valid UTF-8 (invalid bytes -> U+FFFD), malloc'd. */
static char *utf8_clean(const char *s, size_t *out_len)
{
    size_t n = strlen(s);
    char *d = malloc(n * 3 + 1);
    if (!d)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_len((const unsigned char *)s + i, n - i);
        if (l) {
            memcpy(d + k, s + i, l);
            k += l;
            i += l;
        } else {
            memcpy(d + k, "\xef\xbf\xbd", 3);
            k += 3;
            i++;
        }
    }
    d[k] = 0;
    *out_len = k;
    return d;
}

/* ---- state ------------------------------------------------------------------ */

typedef struct sym {
    uint32_t id;
    uint32_t proc;               /* index in ex_t.procs */
    uint8_t kind;
    uint32_t line;
    char *name, *file, *profile; /* profile NULL: absent */
    char *folded;                /* collapsed label, cleaned */
    char *head;                  /* chrome "X" prefix */
    uint32_t ss_frame;           /* speedscope frame index */
    uint32_t canon;              /* collapsed: the process's first symbol with this label (NONE: not yet) */
    uint32_t key;                /* pstats key index */
} sym_t;

typedef struct node {
    uint32_t parent, sym, first_child, next_sibling;
    uint32_t cache_id, cache_child;
    uint32_t thread; /* per-thread root: thread index; else NONE */
    uint32_t proc;   /* index in ex_t.procs (its subtree's process) */
    uint64_t calls, self;
} node_t;

typedef struct block {
    uint64_t off;
    uint32_t len;
} block_t;

/* Filtering perfetto: a mark or gap inside calls whose opens are deferred waits
 * (its track's clock only goes forward: written first, it would move their
 * starts up to it). */
typedef struct pf_instant {
    uint64_t ticks, lost; /* lost: a gap of this many events (sym NONE) */
    uint32_t sym;
} pf_instant_t;

typedef struct thr {
    uint64_t number, os_tid;
    uint32_t proc; /* index in ex_t.procs */
    char *name;
    int ended;
    uint32_t root;
    uint32_t *stack; /* nodes (cct) or symbol indexes (chrome/speedscope) */
    uint64_t *starts;
    uint32_t depth, cap;
    uint32_t emitted; /* filtering speedscope/perfetto: stack levels whose open is written */
    pf_instant_t *pf_wait; /* filtering perfetto: instants that wait (pf_instant_t) */
    uint32_t pf_nwait, pf_cap_wait;
    uint64_t last;
    int have_last;
    /* speedscope */
    char *sbuf;
    size_t slen;
    block_t *blocks;
    uint32_t nblocks, cap_blocks;
    uint64_t scount;
    int64_t start_at, end_at;
    int have_at;
    /* perfetto */
    uint32_t pf_seq;
    int pf_open, pf_named;
    uint64_t pf_last_ns;
    uint8_t *pf_interned; /* a bit per symbol index: interned on this sequence */
    size_t pf_icap;
} thr_t;

/* One process of the stream (Message.process = tag). */
typedef struct proc {
    uint32_t tag;
    int seen, have_pinfo, selected, described;
    pt_fb_process_info_t pinfo;
    char *command_line, *python_version;
    double ns_per_tick;
    double scale;         /* pstats: its ticks in the first process's ticks */
    uint64_t base_ticks;
    uint64_t latest;      /* its latest tick (threads without ThreadEnd close there) */
    int have_latest;
    uint32_t root;        /* cct: its subtree (node 0 for the first process) */
    int64_t shown_pid;    /* chrome/perfetto pid */
    int have_status;
    pt_fb_producer_status_t status;
} proc_t;

typedef struct ex {
    pt_export_opts_t o;
    obuf_t out;
    pt_walk_t *walk;
    int started;
    uint32_t first;       /* the process whose message started the output */
    proc_t *procs;
    uint32_t nprocs, cap_procs;
    pt_u64map_t proc_map; /* tag -> index */

    sym_t *syms;
    uint32_t nsyms, cap_syms;
    pt_u64map_t sym_map;

    thr_t *thr;
    uint32_t nthr, cap_thr;

    node_t *nodes;
    uint32_t nnodes, cap_nodes;
    pt_u64map_t node_map;
    pt_u64map_t label_map; /* collapsed: (process, label hash) -> symbol index */

    uint32_t ss_frames;     /* speedscope frames assigned */
    uint32_t *ss_frame_sym; /* frame index -> symbol index */
    uint32_t cap_ss;
    int spill_fd;
    uint64_t spill_end;
    size_t ss_buffered;
    uint64_t chrome_calls;
    /* perfetto */
    uint8_t *pf_batch, *pf_zout;
    size_t pf_blen, pf_zcap;
    z_stream pf_z;
    int pf_z_init;
    int pf_start_rc;
    /* opts.from_ns/to_ns/min_duration_ns (timeline formats) */
    int filter;
    int have_t0;
    int64_t t0;           /* the recording's start: the first ProcessInfo's monotonic ns */
    uint64_t left_out;
    uint64_t stacks_folded; /* collapsed: calling contexts below opts.max_depth */
    uint32_t deepest;
} ex_t;

/* Filtering speedscope/perfetto: a stack level whose open is deferred keeps
 * Perfetto's "continued" flag (walk.h) in its top bit. */
#define STACK_CONTINUED 0x80000000u
#define STACK_SYM(v) ((v) & ~STACK_CONTINUED)

static char *dup_str(pt_fb_str_t s)
{
    size_t n = s.ptr ? s.len : 0;
    char *d = malloc(n + 1);
    if (!d)
        return NULL;
    if (n)
        memcpy(d, s.ptr, n);
    d[n] = 0;
    /* a NUL inside a name ends it: names are C strings from here on */
    return d;
}

static char *dup_c(const char *s) { return dup_str((pt_fb_str_t){s, (uint32_t)strlen(s)}); }

/* ---- processes -------------------------------------------------------------- */

static uint32_t node_new_proc(ex_t *e, uint32_t proc);

static int pid_selected(const ex_t *e, uint64_t pid)
{
    if (!e->o.npids)
        return 1;
    for (size_t i = 0; i < e->o.npids; i++)
        if (e->o.pids[i] == pid)
            return 1;
    return 0;
}

/* The process of Message.process `tag` (created on first sight, with a
 * nanosecond clock until its ProcessInfo comes); NULL if out of memory. */
static proc_t *proc_for(ex_t *e, uint32_t tag)
{
    uint32_t *slot = pt_u64map_slot(&e->proc_map, tag, NONE);
    if (!slot)
        return NULL;
    if (*slot != NONE)
        return &e->procs[*slot];
    if (pt_grow((void **)&e->procs, &e->cap_procs, sizeof *e->procs, e->nprocs + 1))
        return NULL;
    uint32_t i = e->nprocs;
    proc_t *p = &e->procs[i];
    memset(p, 0, sizeof *p);
    p->tag = tag;
    p->pinfo.ticks_per_second = 1000000000ull;
    p->ns_per_tick = 1.0;
    p->scale = 1.0;
    p->selected = !e->o.npids;
    p->root = 0;
    if (i && e->nnodes) { /* cct: the first process's tree is node 0's, others hang below it */
        uint32_t r = node_new_proc(e, i);
        if (r == NONE)
            return NULL;
        p = &e->procs[i];
        p->root = r;
    }
    *pt_u64map_slot(&e->proc_map, tag, NONE) = i;
    e->nprocs++;
    return p;
}

static uint32_t proc_index(const ex_t *e, const proc_t *p) { return (uint32_t)(p - e->procs); }

/* ---- symbols ---------------------------------------------------------------- */

static void sym_clear(sym_t *s)
{
    free(s->name);
    free(s->file);
    free(s->profile);
    free(s->folded);
    free(s->head);
}

/* Dense index of symbol id; an id never announced gets a placeholder name. */
static uint32_t sym_index(ex_t *e, uint32_t proc, uint32_t id)
{
    const uint64_t key = (uint64_t)proc << 32 | id; /* ids are per process */
    uint32_t *slot = pt_u64map_slot(&e->sym_map, key, NONE);
    if (!slot)
        return NONE;
    if (*slot != NONE)
        return *slot;
    if (pt_grow((void **)&e->syms, &e->cap_syms, sizeof *e->syms, e->nsyms + 1))
        return NONE;
    sym_t *s = &e->syms[e->nsyms];
    memset(s, 0, sizeof *s);
    char buf[48];
    snprintf(buf, sizeof buf, "<unknown #%u>", id); /* as agg.c names it */
    s->id = id;
    s->proc = proc;
    s->name = dup_c(buf);
    s->file = dup_c("?");
    s->ss_frame = NONE;
    s->canon = NONE;
    if (!s->name || !s->file) {
        sym_clear(s);
        return NONE;
    }
    slot = pt_u64map_slot(&e->sym_map, key, NONE); /* the map did not grow since */
    *slot = e->nsyms;
    return e->nsyms++;
}

static int feed_symbol(ex_t *e, uint32_t proc, const pt_fb_symbol_t *in)
{
    uint32_t i = sym_index(e, proc, in->id);
    if (i == NONE)
        return -ENOMEM;
    sym_t *s = &e->syms[i];
    char *name = dup_str(in->name), *file = dup_str(in->file);
    char *profile = in->profile_name.ptr ? dup_str(in->profile_name) : NULL;
    if (!name || !file || (in->profile_name.ptr && !profile)) {
        free(name);
        free(file);
        free(profile);
        return -ENOMEM;
    }
    free(s->name);
    free(s->file);
    free(s->profile);
    free(s->folded);
    free(s->head);
    s->folded = s->head = NULL;
    s->name = name;
    s->file = file;
    s->profile = profile;
    s->kind = in->kind;
    s->line = in->line;
    return 0;
}

/* ---- threads ---------------------------------------------------------------- */

static thr_t *thr_of(ex_t *e, pt_walk_thread_t *wt) { return &e->thr[wt->index]; }

static uint32_t node_new(ex_t *e, uint32_t parent, uint32_t sym, uint32_t thread)
{
    if (pt_grow((void **)&e->nodes, &e->cap_nodes, sizeof *e->nodes, e->nnodes + 1))
        return NONE;
    uint32_t i = e->nnodes++;
    node_t *n = &e->nodes[i];
    *n = (node_t){.parent = parent, .sym = sym, .first_child = NONE, .next_sibling = NONE,
                  .cache_id = NONE, .cache_child = NONE, .thread = thread,
                  .proc = parent != NONE ? e->nodes[parent].proc : 0};
    if (parent != NONE) {
        n->next_sibling = e->nodes[parent].first_child;
        e->nodes[parent].first_child = i;
    }
    return i;
}

/* A process's subtree root (processes after the first): sym and thread NONE. */
static uint32_t node_new_proc(ex_t *e, uint32_t proc)
{
    uint32_t r = node_new(e, 0, NONE, NONE);
    if (r != NONE)
        e->nodes[r].proc = proc;
    return r;
}

static const char *folded_label(ex_t *e, sym_t *s);

/* collapsed: symbols of one process with the same label (two code objects of one
 * function, a dataclass's generated methods) share their nodes, so each stack
 * is one line. Labels whose hashes collide stay apart. NONE: out of memory. */
static uint32_t folded_canon(ex_t *e, uint32_t s)
{
    if (e->syms[s].canon != NONE)
        return e->syms[s].canon;
    const char *label = folded_label(e, &e->syms[s]);
    if (!label)
        return NONE;
    uint64_t h = 1469598103934665603ull ^ e->syms[s].proc; /* FNV-1a over the label */
    for (const unsigned char *c = (const unsigned char *)label; *c; c++)
        h = (h ^ *c) * 1099511628211ull;
    uint32_t first = pt_u64map_get(&e->label_map, h);
    if (first == NONE) {
        if (pt_u64map_put(&e->label_map, h, s))
            return NONE;
        first = s;
    } else if (e->syms[first].proc != e->syms[s].proc || !e->syms[first].folded ||
               strcmp(e->syms[first].folded, label)) {
        first = s;
    }
    e->syms[s].canon = first;
    return first;
}

static int cct(const ex_t *e) { return e->o.format == PT_EXPORT_COLLAPSED || e->o.format == PT_EXPORT_PSTATS; }

static int on_thread_new(void *ctx, pt_walk_thread_t *wt)
{
    ex_t *e = ctx;
    if (pt_grow((void **)&e->thr, &e->cap_thr, sizeof *e->thr, wt->index + 1))
        return -ENOMEM;
    thr_t *t = &e->thr[wt->index];
    memset(t, 0, sizeof *t);
    e->nthr = wt->index + 1;
    t->number = wt->number;
    proc_t *p = proc_for(e, wt->process);
    if (!p)
        return -ENOMEM;
    t = &e->thr[wt->index];
    t->proc = proc_index(e, p);
    t->root = p->root;
    if (cct(e) && e->o.per_thread) {
        t->root = node_new(e, p->root, NONE, wt->index);
        if (t->root == NONE)
            return -ENOMEM;
    }
    return 0;
}

static const char *thread_name(const thr_t *t, char *buf, size_t n)
{
    if (t->name && t->name[0])
        return t->name;
    snprintf(buf, n, "thread %llu", (unsigned long long)t->number);
    return buf;
}

/* ---- time ------------------------------------------------------------------- */

/* Self time to the entry on top (the agg.c rule); returns the thread's clamped now. */
static inline uint64_t account(ex_t *e, thr_t *t, uint64_t now)
{
    if (!t->have_last) {
        t->have_last = 1;
        t->last = now;
        return now;
    }
    if (now <= t->last)
        return t->last;
    if (cct(e)) {
        uint32_t top = t->depth ? t->stack[t->depth - 1] : t->root;
        e->nodes[top].self += now - t->last;
    }
    t->last = now;
    return now;
}

static inline int64_t ticks_ns_since_base(const proc_t *p, uint64_t ticks)
{
    double d = ticks >= p->base_ticks ? (double)(ticks - p->base_ticks) : -(double)(p->base_ticks - ticks);
    return (int64_t)(d * p->ns_per_tick); /* truncates, as int() did */
}

/* The stream's time axis (walk.h, THE TIME AXIS): CLOCK_MONOTONIC ns. */
static inline int64_t chrome_ns(const proc_t *p, uint64_t ticks)
{
    double d = ticks >= p->base_ticks ? (double)(ticks - p->base_ticks) : -(double)(p->base_ticks - ticks);
    return (int64_t)llround(d * p->ns_per_tick + (double)p->pinfo.base_monotonic_ns);
}

static int push(thr_t *t, uint32_t v, uint64_t start)
{
    if (t->depth == t->cap) {
        uint32_t cap = t->cap;
        if (pt_grow((void **)&t->stack, &cap, sizeof *t->stack, t->depth + 1))
            return -ENOMEM;
        uint32_t cap2 = t->cap;
        if (pt_grow((void **)&t->starts, &cap2, sizeof *t->starts, t->depth + 1))
            return -ENOMEM;
        t->cap = cap;
    }
    t->stack[t->depth] = v;
    t->starts[t->depth++] = start;
    return 0;
}

/* ---- speedscope events ------------------------------------------------------ */

static int ss_spill(ex_t *e, thr_t *t)
{
    if (!t->slen)
        return 0;
    if (pt_grow((void **)&t->blocks, &t->cap_blocks, sizeof *t->blocks, t->nblocks + 1))
        return -ENOMEM;
    if (e->o.max_bytes && e->spill_end + t->slen > e->o.max_bytes) { /* the output would be larger */
        e->out.limited = 1;
        return -EFBIG;
    }
    int rc = write_all(e->spill_fd, t->sbuf, t->slen, (int64_t)e->spill_end);
    if (rc)
        return rc;
    t->blocks[t->nblocks++] = (block_t){.off = e->spill_end, .len = (uint32_t)t->slen};
    e->spill_end += t->slen;
    e->ss_buffered -= t->slen;
    t->slen = 0;
    return 0;
}

static int ss_event(ex_t *e, thr_t *t, char type, uint32_t frame, int64_t at)
{
    if (!t->sbuf && !(t->sbuf = malloc(SS_THREAD_BUF)))
        return -ENOMEM;
    if (t->slen + 80 > SS_THREAD_BUF) {
        int rc = ss_spill(e, t);
        if (rc)
            return rc;
    }
    char *p = t->sbuf + t->slen;
    int n = snprintf(p, 80, "%s{\"type\":\"%c\",\"frame\":%u,\"at\":%lld}", t->scount ? ",\n" : "", type, frame,
                     (long long)at);
    t->slen += (size_t)n;
    e->ss_buffered += (size_t)n;
    t->scount++;
    if (!t->have_at) {
        t->have_at = 1;
        t->start_at = at;
    }
    if (at > t->end_at)
        t->end_at = at;
    if (e->ss_buffered > SS_TOTAL_BUF)
        for (uint32_t i = 0; i < e->nthr; i++) {
            int rc = ss_spill(e, &e->thr[i]);
            if (rc)
                return rc;
        }
    return 0;
}

/* ---- chrome ----------------------------------------------------------------- */

static const char *chrome_head(ex_t *e, sym_t *s)
{
    if (s->head)
        return s->head;
    obuf_t m = {.fd = -1, .cap = 256 + 6 * (strlen(s->name) + strlen(s->file))};
    m.buf = malloc(m.cap);
    if (!m.buf)
        return NULL;
    ob_puts(&m, ",\n{\"ph\":\"X\",\"cat\":\"");
    ob_puts(&m, s->kind == PT_SYM_PY_FUNCTION ? "python" : s->kind == PT_SYM_C_FUNCTION ? "c" : "span");
    ob_puts(&m, "\",\"name\":");
    ob_json(&m, s->name);
    if (s->kind != PT_SYM_LABEL) {
        ob_puts(&m, ",\"args\":{\"file\":");
        ob_json(&m, s->file);
        ob_puts(&m, ",\"line\":");
        ob_u64(&m, s->line);
        ob_putc(&m, '}');
    }
    ob_puts(&m, ",\"pid\":");
    ob_u64(&m, (uint64_t)e->procs[s->proc].shown_pid);
    ob_putc(&m, 0);
    s->head = m.buf;
    return s->head;
}

/* The process's "M" process_name event (the first one opens the array). */
static void chrome_process(ex_t *e, proc_t *p, int first)
{
    obuf_t *o = &e->out;
    p->described = 1;
    ob_puts(o, first ? "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n" : ",\n");
    ob_puts(o, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":");
    ob_u64(o, (uint64_t)p->shown_pid);
    ob_puts(o, ",\"tid\":0,\"args\":{\"name\":");
    char tail[48];
    snprintf(tail, sizeof tail, " (pid %llu)", (unsigned long long)p->pinfo.pid);
    const char *cl = p->command_line && p->command_line[0] ? p->command_line : "python";
    size_t n = strlen(cl) + strlen(tail) + 1;
    char *name = malloc(n);
    if (name) {
        snprintf(name, n, "%s%s", cl, tail);
        ob_json(o, name);
        free(name);
    } else {
        ob_json(o, "python");
    }
    ob_puts(o, "}}");
}

static void chrome_instant(ex_t *e, thr_t *t, const char *cat, const char *name, uint64_t ticks, int64_t count)
{
    obuf_t *o = &e->out;
    ob_puts(o, ",\n{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"");
    ob_puts(o, cat);
    ob_puts(o, "\",\"name\":");
    ob_json(o, name);
    ob_puts(o, ",\"pid\":");
    ob_u64(o, (uint64_t)e->procs[t->proc].shown_pid);
    ob_puts(o, ",\"tid\":");
    ob_u64(o, t->number);
    ob_puts(o, ",\"ts\":");
    ob_us3(o, chrome_ns(&e->procs[t->proc], ticks));
    if (count >= 0) {
        ob_puts(o, ",\"args\":{\"count\":");
        ob_i64(o, count);
        ob_putc(o, '}');
    }
    ob_putc(o, '}');
}

/* ---- perfetto --------------------------------------------------------------- */
/*
 * Perfetto's own trace format (protos/perfetto/trace/trace.proto): a Trace is
 * `repeated TracePacket packet = 1`, so the file is a run of (tag 0x0a, varint
 * length, TracePacket) with nothing before or after. Written by hand: varints
 * and length-delimited fields, field numbers from perfetto_trace.proto.
 *
 * Nested messages are built innermost first in small buffers (a TrackEvent,
 * then the TracePacket around it) and written with minimal varint lengths. A
 * packet is tens of bytes, so the copies cost nothing next to the walk, and
 * every byte counts for the size target (a padded 4-byte length at two levels
 * would more than double an event's packet).
 *
 * Layout: sequence 1 holds the clock snapshot (CLOCK_MONOTONIC is the trace
 * clock, REALTIME beside it) and the process track. Each thread has its own
 * packet sequence (2, 3, ...) opened, as the Perfetto SDK opens its per-thread
 * writers, by a packet with SEQ_INCREMENTAL_STATE_CLEARED, TracePacketDefaults
 * (timestamp_clock_id 64 and track_event_defaults.track_uuid = the thread's
 * track) and a ClockSnapshot defining clock 64 as an incremental ns clock of
 * that sequence; then its TrackDescriptor (ThreadDescriptor pid, tid,
 * thread_name). So an event packet carries only: timestamp (the ns since the
 * thread's previous packet), the sequence id, SEQ_NEEDS_INCREMENTAL_STATE and
 * a TrackEvent of type SLICE_BEGIN (name_iid, and source_location_iid for
 * Python functions: the UI shows the function as the slice and file, line in
 * its arguments), SLICE_END (type only) or INSTANT (a mark by name_iid; a gap
 * named "lost N events" with a debug annotation lost_events = N). A slice that
 * continues an activation under a new parent (PT_WALK_CONTINUED: a span that
 * outlives the frame that began it, walk.h) has the annotation continued =
 * true, so slices without it are calls, one each. Names and
 * source locations are interned per sequence (InternedData in the packet that
 * first uses them; iid = the symbol's index + 1).
 *
 * That is 9-12 bytes an event. Unless opts.pf_uncompressed, packets are
 * gathered in batches of PF_BATCH_BYTES and each batch is written as one
 * packet of `compressed_packets` (a zlib stream of Trace bytes, which Perfetto's
 * own service writes and its trace processor and UI read): the repetitive
 * packets of a call-heavy trace shrink ~10-20x. Memory: one batch, its
 * compressed copy and zlib's state, plus a bit per (thread, symbol) for
 * interning.
 */

#define PF_BATCH_BYTES (1u << 20)
#define PF_CLOCK_INCREMENTAL 64u /* sequence-scoped clock id, as the SDK's kClockIdIncremental */
#define PF_CLOCK_MONOTONIC 3u    /* BUILTIN_CLOCK_MONOTONIC */
#define PF_CLOCK_REALTIME 1u     /* BUILTIN_CLOCK_REALTIME */
#define PF_SEQ_PROCESS 1u
#define PF_SEQ_CLEARED 1u        /* TracePacket.SequenceFlags */
#define PF_SEQ_NEEDS 2u
#define PF_SLICE_BEGIN 1u        /* TrackEvent.Type */
#define PF_SLICE_END 2u
#define PF_INSTANT 3u

/* wire types */
#define PB_VARINT 0u
#define PB_LEN 2u

/* A growable protobuf buffer (for the rare packets that are not fixed-size). */
typedef struct pb {
    uint8_t *p;
    size_t len, cap;
    int err;
} pb_t;

static inline size_t varint_put(uint8_t *d, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        d[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    d[n++] = (uint8_t)v;
    return n;
}

static int pb_room(pb_t *b, size_t n)
{
    if (b->err)
        return -1;
    if (b->len + n <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n)
        cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
        b->err = -ENOMEM;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static void pb_varint(pb_t *b, uint64_t v)
{
    if (!pb_room(b, 10))
        b->len += varint_put(b->p + b->len, v);
}

static void pb_uint(pb_t *b, uint32_t field, uint64_t v)
{
    pb_varint(b, (uint64_t)field << 3 | PB_VARINT);
    pb_varint(b, v);
}

static void pb_bytes(pb_t *b, uint32_t field, const void *p, size_t n)
{
    pb_varint(b, (uint64_t)field << 3 | PB_LEN);
    pb_varint(b, n);
    if (!pb_room(b, n)) {
        if (n)
            memcpy(b->p + b->len, p, n);
        b->len += n;
    }
}

/* A string field, made valid UTF-8 (protobuf strings must be). */
static void pb_str(pb_t *b, uint32_t field, const char *s)
{
    size_t n;
    char *clean = utf8_clean(s, &n);
    if (!clean) {
        b->err = -ENOMEM;
        return;
    }
    pb_bytes(b, field, clean, n);
    free(clean);
}

static void pb_msg(pb_t *b, uint32_t field, const pb_t *inner) { pb_bytes(b, field, inner->p, inner->len); }

static void pb_done(pb_t *b) { free(b->p); }

/* Compress and write the gathered packets as one compressed_packets packet. */
static int pf_flush(ex_t *e)
{
    if (!e->pf_blen)
        return e->out.err;
    if (e->o.pf_uncompressed) {
        ob_put(&e->out, e->pf_batch, e->pf_blen);
        e->pf_blen = 0;
        return e->out.err;
    }
    size_t bound = deflateBound(&e->pf_z, (uLong)e->pf_blen);
    if (bound > e->pf_zcap) {
        uint8_t *p = realloc(e->pf_zout, bound);
        if (!p)
            return -ENOMEM;
        e->pf_zout = p;
        e->pf_zcap = bound;
    }
    if (deflateReset(&e->pf_z) != Z_OK)
        return -EIO;
    e->pf_z.next_in = e->pf_batch;
    e->pf_z.avail_in = (uInt)e->pf_blen;
    e->pf_z.next_out = e->pf_zout;
    e->pf_z.avail_out = (uInt)e->pf_zcap;
    if (deflate(&e->pf_z, Z_FINISH) != Z_STREAM_END)
        return -EIO;
    size_t zlen = e->pf_zcap - e->pf_z.avail_out;
    /* Trace.packet { compressed_packets (50) = zlib bytes } */
    uint8_t head[24];
    uint8_t inner_head[12];
    size_t ih = varint_put(inner_head, 50u << 3 | PB_LEN);
    ih += varint_put(inner_head + ih, zlen);
    size_t h = varint_put(head, 1u << 3 | PB_LEN);
    h += varint_put(head + h, ih + zlen);
    ob_put(&e->out, head, h);
    ob_put(&e->out, inner_head, ih);
    ob_put(&e->out, e->pf_zout, zlen);
    e->pf_blen = 0;
    return e->out.err;
}

/* One TracePacket (its encoded body) as a Trace.packet field. */
static int pf_packet(ex_t *e, const uint8_t *body, size_t n)
{
    uint8_t head[12];
    size_t h = varint_put(head, 1u << 3 | PB_LEN);
    h += varint_put(head + h, n);
    if (e->pf_blen + h + n > PF_BATCH_BYTES) {
        int rc = pf_flush(e);
        if (rc)
            return rc;
    }
    if (h + n > PF_BATCH_BYTES) { /* a huge name: a batch of its own */
        uint8_t *big = malloc(h + n), *saved = e->pf_batch;
        if (!big)
            return -ENOMEM;
        memcpy(big, head, h);
        memcpy(big + h, body, n);
        e->pf_batch = big;
        e->pf_blen = h + n;
        int rc = pf_flush(e);
        e->pf_batch = saved;
        e->pf_blen = 0;
        free(big);
        return rc;
    }
    memcpy(e->pf_batch + e->pf_blen, head, h);
    memcpy(e->pf_batch + e->pf_blen + h, body, n);
    e->pf_blen += h + n;
    return 0;
}

static int pf_pb_packet(ex_t *e, pb_t *b)
{
    int rc = b->err ? b->err : pf_packet(e, b->p, b->len);
    pb_done(b);
    return rc;
}

/* Free nested messages whose bytes were copied into their parent; returns
 * the first error among them (0 if none). */
static int pb_done_all(pb_t *const *parts, size_t nparts)
{
    int err = 0;
    for (size_t i = 0; i < nparts; i++) {
        if (!err)
            err = parts[i]->err;
        pb_done(parts[i]);
    }
    return err;
}

/* Write the packet unless building its parts failed (err); freed either way. */
static int pf_pb_send(ex_t *e, pb_t *pkt, int err)
{
    if (err) {
        pb_done(pkt);
        return err;
    }
    return pf_pb_packet(e, pkt);
}

static uint64_t pf_uuid(const ex_t *e, uint32_t thread_index)
{
    /* unique within the trace; derived from the (first) pid so two exports of
     * different jobs opened together rarely collide */
    uint64_t base = pt_u64map_mix(e->procs[e->first].pinfo.pid + 0x7079747261636500ull) & ~0xffffffffull;
    return base | ((uint64_t)thread_index + 1);
}

/* A process's track: the first process's (e->first) is pf_uuid(UINT32_MAX) (as before
 * processes existed); thread indexes stay below 2^30, so these never meet. */
static uint64_t pf_proc_uuid(const ex_t *e, uint32_t proc)
{
    return proc != e->first ? (pf_uuid(e, 0) & ~0xffffffffull) | (0x80000000ull + proc) : pf_uuid(e, UINT32_MAX);
}

static int64_t pf_pid(const proc_t *p) { return (int32_t)(uint32_t)p->shown_pid; }

static int pf_process(ex_t *e, proc_t *p);

static int pf_begin(ex_t *e)
{
    const proc_t *p0 = &e->procs[e->first];
    pb_t clk = {0}, c1 = {0}, c2 = {0}, pkt = {0};
    pb_uint(&c1, 1, PF_CLOCK_MONOTONIC);
    pb_uint(&c1, 2, p0->pinfo.base_monotonic_ns);
    pb_msg(&clk, 1, &c1);
    if (p0->pinfo.base_realtime_ns) {
        pb_uint(&c2, 1, PF_CLOCK_REALTIME);
        pb_uint(&c2, 2, p0->pinfo.base_realtime_ns);
        pb_msg(&clk, 1, &c2);
    }
    pb_uint(&clk, 2, PF_CLOCK_MONOTONIC); /* primary_trace_clock */
    pb_uint(&pkt, 10, PF_SEQ_PROCESS);
    pb_msg(&pkt, 6, &clk);
    int rc = pf_pb_send(e, &pkt, pb_done_all((pb_t *const[]){&clk, &c1, &c2}, 3));
    if (rc)
        return rc;
    for (uint32_t i = 0; i < e->nprocs; i++)
        if (e->procs[i].selected && e->procs[i].seen && (i == e->first || e->procs[i].have_pinfo) &&
            (rc = pf_process(e, &e->procs[i])) != 0)
            return rc;
    return 0;
}

/* The process track (pid, command line), on sequence 1. */
static int pf_process(ex_t *e, proc_t *p)
{
    pb_t pd = {0}, td = {0}, pkt = {0};
    p->described = 1;
    const char *cl = p->command_line && p->command_line[0] ? p->command_line : "python";
    pb_uint(&pd, 1, (uint64_t)pf_pid(p));
    pb_str(&pd, 2, cl);
    pb_str(&pd, 6, cl);
    pb_uint(&td, 1, pf_proc_uuid(e, proc_index(e, p)));
    pb_msg(&td, 3, &pd);
    pb_uint(&pkt, 10, PF_SEQ_PROCESS);
    pb_msg(&pkt, 60, &td);
    return pf_pb_send(e, &pkt, pb_done_all((pb_t *const[]){&pd, &td}, 2));
}

/* The thread's TrackDescriptor, on its own sequence (again when its name changes). */
static int pf_thread_descriptor(ex_t *e, thr_t *t, uint32_t index)
{
    pb_t th = {0}, td = {0}, pkt = {0};
    char nb[40];
    pb_uint(&th, 1, (uint64_t)pf_pid(&e->procs[t->proc]));
    pb_uint(&th, 2, t->os_tid ? t->os_tid : t->number);
    pb_str(&th, 5, thread_name(t, nb, sizeof nb));
    pb_uint(&td, 1, pf_uuid(e, index));
    pb_uint(&td, 5, pf_proc_uuid(e, t->proc)); /* parent: the process track */
    pb_msg(&td, 4, &th);
    pb_uint(&pkt, 10, t->pf_seq);
    pb_msg(&pkt, 60, &td);
    int rc = pf_pb_send(e, &pkt, pb_done_all((pb_t *const[]){&th, &td}, 2));
    if (!rc)
        t->pf_named = 1;
    return rc;
}

/* The thread's sequence: cleared state, defaults, its incremental clock, its track. */
static int pf_open_sequence(ex_t *e, thr_t *t, uint32_t index, uint64_t ns)
{
    t->pf_seq = PF_SEQ_PROCESS + 1 + index;
    t->pf_last_ns = ns;
    t->pf_open = 1;
    pb_t ted = {0}, def = {0}, c1 = {0}, c2 = {0}, clk = {0}, pkt = {0};
    pb_uint(&ted, 11, pf_uuid(e, index)); /* TrackEventDefaults.track_uuid */
    pb_uint(&def, 58, PF_CLOCK_INCREMENTAL);
    pb_msg(&def, 11, &ted);
    pb_uint(&c1, 1, PF_CLOCK_MONOTONIC);
    pb_uint(&c1, 2, ns);
    pb_uint(&c2, 1, PF_CLOCK_INCREMENTAL);
    pb_uint(&c2, 2, ns);
    pb_uint(&c2, 3, 1); /* is_incremental */
    pb_uint(&c2, 4, 1); /* unit_multiplier_ns */
    pb_msg(&clk, 1, &c1);
    pb_msg(&clk, 1, &c2);
    pb_uint(&pkt, 10, t->pf_seq);
    pb_uint(&pkt, 13, PF_SEQ_CLEARED);
    pb_msg(&pkt, 59, &def);
    pb_msg(&pkt, 6, &clk);
    int rc = pf_pb_send(e, &pkt, pb_done_all((pb_t *const[]){&ted, &def, &c1, &c2, &clk}, 5));
    return rc ? rc : pf_thread_descriptor(e, t, index);
}

/* InternedData for symbol s on the thread's sequence, if not sent there yet
 * (appended to `pkt`); returns 0 or -ENOMEM. */
static int pf_intern(ex_t *e, thr_t *t, uint32_t s, pb_t *pkt)
{
    if ((size_t)s / 8 < t->pf_icap && (t->pf_interned[s / 8] >> (s % 8) & 1))
        return 0;
    if ((size_t)s / 8 >= t->pf_icap) {
        size_t cap = t->pf_icap ? t->pf_icap : 64;
        while (cap <= (size_t)s / 8)
            cap *= 2;
        uint8_t *p = realloc(t->pf_interned, cap);
        if (!p)
            return -ENOMEM;
        memset(p + t->pf_icap, 0, cap - t->pf_icap);
        t->pf_interned = p;
        t->pf_icap = cap;
    }
    t->pf_interned[s / 8] |= (uint8_t)(1u << (s % 8));
    const sym_t *sy = &e->syms[s];
    pb_t idata = {0}, en = {0}, sl = {0};
    pb_uint(&en, 1, (uint64_t)s + 1);
    pb_str(&en, 2, sy->name);
    pb_msg(&idata, 2, &en);
    if (sy->kind == PT_SYM_PY_FUNCTION) {
        pb_uint(&sl, 1, (uint64_t)s + 1);
        pb_str(&sl, 2, sy->file);
        pb_str(&sl, 3, sy->name);
        pb_uint(&sl, 4, sy->line);
        pb_msg(&idata, 4, &sl);
    }
    pb_msg(pkt, 12, &idata);
    return pb_done_all((pb_t *const[]){&en, &sl, &idata}, 3);
}

/* A TrackEvent on the thread's track at `now` (clamped ticks). sym: a symbol
 * index for BEGIN and INSTANT of a mark, NONE otherwise; lost_name/lost: a gap. */
static int pf_event(ex_t *e, pt_walk_thread_t *wt, unsigned type, uint32_t sym, uint64_t now, const char *lost_name,
                    uint64_t lost, int continued)
{
    thr_t *t = thr_of(e, wt);
    int64_t sns = chrome_ns(&e->procs[t->proc], now);
    uint64_t ns = sns > 0 ? (uint64_t)sns : 0;
    if (!t->pf_open) {
        int rc = pf_open_sequence(e, t, wt->index, ns);
        if (rc)
            return rc;
    } else if (!t->pf_named && t->name) {
        int rc = pf_thread_descriptor(e, t, wt->index);
        if (rc)
            return rc;
    }
    if (ns < t->pf_last_ns) /* a reused thread number: its sequence's clock only goes forward */
        ns = t->pf_last_ns;
    uint64_t delta = ns - t->pf_last_ns;
    t->pf_last_ns = ns;
    int interned_needed = sym != NONE && !((size_t)sym / 8 < t->pf_icap && (t->pf_interned[sym / 8] >> (sym % 8) & 1));
    if (!interned_needed && !lost_name && !continued) {
        /* the hot path: fixed-size fields into a stack buffer */
        uint8_t te[32], pkt[64];
        size_t tl = 0, pl = 0;
        te[tl++] = 9u << 3 | PB_VARINT;
        te[tl++] = (uint8_t)type;
        if (sym != NONE) {
            te[tl++] = 10u << 3 | PB_VARINT;
            tl += varint_put(te + tl, (uint64_t)sym + 1);
            if (e->syms[sym].kind == PT_SYM_PY_FUNCTION && type == PF_SLICE_BEGIN) {
                tl += varint_put(te + tl, 34u << 3 | PB_VARINT);
                tl += varint_put(te + tl, (uint64_t)sym + 1);
            }
        }
        pkt[pl++] = 8u << 3 | PB_VARINT;
        pl += varint_put(pkt + pl, delta);
        pkt[pl++] = 10u << 3 | PB_VARINT;
        pl += varint_put(pkt + pl, t->pf_seq);
        pkt[pl++] = 13u << 3 | PB_VARINT;
        pkt[pl++] = PF_SEQ_NEEDS;
        pkt[pl++] = 11u << 3 | PB_LEN;
        pl += varint_put(pkt + pl, tl);
        memcpy(pkt + pl, te, tl);
        pl += tl;
        return pf_packet(e, pkt, pl);
    }
    pb_t te = {0}, pkt = {0}, da = {0};
    pb_uint(&te, 9, type);
    if (sym != NONE) {
        pb_uint(&te, 10, (uint64_t)sym + 1);
        if (e->syms[sym].kind == PT_SYM_PY_FUNCTION && type == PF_SLICE_BEGIN)
            pb_uint(&te, 34, (uint64_t)sym + 1);
    }
    if (lost_name) {
        pb_str(&te, 23, lost_name);
        pb_str(&da, 10, "lost_events");
        pb_uint(&da, 3, lost);
        pb_msg(&te, 4, &da);
    }
    if (continued) { /* not a new call: the same activation under a new parent (walk.h) */
        pb_str(&da, 10, "continued");
        pb_uint(&da, 2, 1); /* bool_value */
        pb_msg(&te, 4, &da);
    }
    pb_uint(&pkt, 8, delta);
    pb_uint(&pkt, 10, t->pf_seq);
    pb_uint(&pkt, 13, PF_SEQ_NEEDS);
    pb_msg(&pkt, 11, &te);
    int err = te.err ? te.err : da.err;
    if (!err && sym != NONE)
        err = pf_intern(e, t, sym, &pkt);
    pb_done(&te);
    pb_done(&da);
    return pf_pb_send(e, &pkt, err);
}

static int pf_end(ex_t *e)
{
    for (uint32_t i = 0; i < e->nthr; i++) /* a name that came after the thread's last event */
        if (e->thr[i].pf_open && !e->thr[i].pf_named) {
            int rc = pf_thread_descriptor(e, &e->thr[i], i);
            if (rc)
                return rc;
        }
    int rc = pf_flush(e);
    return rc ? rc : e->out.err;
}

/* ---- walk callbacks --------------------------------------------------------- */

static int on_enter(void *ctx, pt_walk_thread_t *wt, uint32_t id, uint64_t ticks, unsigned flags)
{
    ex_t *e = ctx;
    thr_t *t = thr_of(e, wt);
    uint64_t now = account(e, t, ticks);
    if (cct(e)) {
        uint32_t parent = t->depth ? t->stack[t->depth - 1] : t->root;
        node_t *p = &e->nodes[parent];
        uint32_t c = p->cache_id == id ? p->cache_child : NONE;
        if (c == NONE) {
            uint64_t key = (uint64_t)parent << 32 | id;
            if (e->o.format == PT_EXPORT_COLLAPSED) { /* one node per label (folded_canon) */
                uint32_t s = sym_index(e, t->proc, id);
                if (s == NONE || (s = folded_canon(e, s)) == NONE)
                    return -ENOMEM;
                key = (uint64_t)parent << 32 | s;
            }
            uint32_t *slot = pt_u64map_slot(&e->node_map, key, NONE);
            if (!slot)
                return -ENOMEM;
            c = *slot;
            if (c == NONE) {
                uint32_t s = sym_index(e, t->proc, id);
                if (s == NONE)
                    return -ENOMEM;
                c = node_new(e, parent, s, NONE);
                if (c == NONE)
                    return -ENOMEM;
                *pt_u64map_slot(&e->node_map, key, NONE) = c;
            }
            p = &e->nodes[parent];
            p->cache_id = id;
            p->cache_child = c;
        }
        if (!(flags & PT_WALK_CONTINUED))
            e->nodes[c].calls++;
        return push(t, c, now);
    }
    uint32_t s = sym_index(e, t->proc, id);
    if (s == NONE)
        return -ENOMEM;
    if (e->filter) /* the open is written when a call that passes closes (on_leave) */
        return push(t, s | (flags & PT_WALK_CONTINUED ? STACK_CONTINUED : 0), now);
    if (e->o.format == PT_EXPORT_SPEEDSCOPE) {
        sym_t *sy = &e->syms[s];
        if (sy->ss_frame == NONE) {
            if (pt_grow((void **)&e->ss_frame_sym, &e->cap_ss, sizeof *e->ss_frame_sym, e->ss_frames + 1))
                return -ENOMEM;
            e->ss_frame_sym[e->ss_frames] = s;
            sy->ss_frame = e->ss_frames++;
        }
        int rc = ss_event(e, t, 'O', sy->ss_frame, ticks_ns_since_base(&e->procs[t->proc], now));
        if (rc)
            return rc;
    } else if (e->o.format == PT_EXPORT_PERFETTO) {
        int rc = pf_event(e, wt, PF_SLICE_BEGIN, s, now, NULL, 0, (flags & PT_WALK_CONTINUED) != 0);
        if (rc)
            return rc;
        t = thr_of(e, wt);
    }
    return push(t, s, now);
}

/* ns since the recording's start (--from/--to are relative to it) */
static int64_t rel_ns(const ex_t *e, const proc_t *p, uint64_t ticks) { return chrome_ns(p, ticks) - e->t0; }

/* Does the call from start to end pass opts.from_ns/to_ns/min_duration_ns?
 * Both tests hold for every caller of a call that passes (a caller lasts at
 * least as long and overlaps whatever its callees overlap), so a filtered
 * stream still nests. */
static int passes(const ex_t *e, const proc_t *p, uint64_t start, uint64_t end)
{
    if ((double)(end - start) * p->ns_per_tick < (double)e->o.min_duration_ns)
        return 0;
    if (rel_ns(e, p, end) < e->o.from_ns)
        return 0;
    return e->o.to_ns <= 0 || rel_ns(e, p, start) <= e->o.to_ns;
}

static int ss_frame_of(ex_t *e, uint32_t s)
{
    sym_t *sy = &e->syms[s];
    if (sy->ss_frame == NONE) {
        if (pt_grow((void **)&e->ss_frame_sym, &e->cap_ss, sizeof *e->ss_frame_sym, e->ss_frames + 1))
            return -ENOMEM;
        e->ss_frame_sym[e->ss_frames] = s;
        sy->ss_frame = e->ss_frames++;
    }
    return 0;
}

static int pf_instant_now(ex_t *e, pt_walk_thread_t *wt, uint32_t sym, uint64_t ticks, uint64_t lost)
{
    char name[48];
    if (sym == NONE)
        snprintf(name, sizeof name, "lost %llu events", (unsigned long long)lost);
    return pf_event(e, wt, PF_INSTANT, sym, ticks, sym == NONE ? name : NULL, lost, 0);
}

/* Filtering perfetto: write the waiting instants up to `upto` ticks (all of
 * them when no open is deferred any more), in time order. */
static int pf_flush_waiting(ex_t *e, pt_walk_thread_t *wt, uint64_t upto, int all)
{
    thr_t *t = thr_of(e, wt);
    uint32_t n = 0;
    while (n < t->pf_nwait && (all || t->pf_wait[n].ticks <= upto)) {
        pf_instant_t w = t->pf_wait[n++];
        int rc = pf_instant_now(e, wt, w.sym, w.ticks, w.lost);
        t = thr_of(e, wt);
        if (rc)
            return rc;
    }
    if (n) {
        memmove(t->pf_wait, t->pf_wait + n, (t->pf_nwait - n) * sizeof *t->pf_wait);
        t->pf_nwait -= n;
    }
    return 0;
}

/* A mark (sym) or a gap (sym NONE, lost) on perfetto's track; it waits while
 * an open is deferred (filtering). */
static int pf_instant(ex_t *e, pt_walk_thread_t *wt, uint32_t sym, uint64_t ticks, uint64_t lost)
{
    thr_t *t = thr_of(e, wt);
    if (!e->filter || t->emitted >= t->depth)
        return pf_instant_now(e, wt, sym, ticks, lost);
    if (pt_grow((void **)&t->pf_wait, &t->pf_cap_wait, sizeof *t->pf_wait, t->pf_nwait + 1))
        return -ENOMEM;
    t->pf_wait[t->pf_nwait++] = (pf_instant_t){.ticks = ticks, .lost = lost, .sym = sym};
    return 0;
}

/* Filtering speedscope/perfetto: the call at stack level d (just popped)
 * closes at now. One that passes writes the deferred opens of its callers and
 * itself first (at their own start times), then its close. */
static int leave_filtered(ex_t *e, pt_walk_thread_t *wt, uint32_t d, uint64_t now)
{
    thr_t *t = thr_of(e, wt);
    const proc_t *p = &e->procs[t->proc];
    if (t->emitted <= d && !passes(e, p, t->starts[d], now)) {
        e->left_out++;
        /* no open deferred any more: the instants that waited go out */
        return e->o.format == PT_EXPORT_PERFETTO && t->emitted >= d && t->pf_nwait
                   ? pf_flush_waiting(e, wt, 0, 1) : 0;
    }
    for (uint32_t i = t->emitted; i <= d; i++) {
        t = thr_of(e, wt);
        uint32_t s = STACK_SYM(t->stack[i]);
        int rc;
        if (e->o.format == PT_EXPORT_SPEEDSCOPE) {
            if ((rc = ss_frame_of(e, s)) == 0)
                rc = ss_event(e, t, 'O', e->syms[s].ss_frame, ticks_ns_since_base(&e->procs[t->proc], t->starts[i]));
        } else {
            uint64_t at = t->starts[i];
            unsigned cont = (t->stack[i] & STACK_CONTINUED) != 0;
            rc = t->pf_nwait ? pf_flush_waiting(e, wt, at, 0) : 0;
            if (!rc)
                rc = pf_event(e, wt, PF_SLICE_BEGIN, s, at, NULL, 0, cont);
        }
        if (rc)
            return rc;
    }
    t = thr_of(e, wt);
    t->emitted = d;
    if (e->o.format == PT_EXPORT_SPEEDSCOPE)
        return ss_event(e, t, 'C', e->syms[STACK_SYM(t->stack[d])].ss_frame,
                        ticks_ns_since_base(&e->procs[t->proc], now));
    int rc = t->pf_nwait ? pf_flush_waiting(e, wt, now, 0) : 0;
    if (!rc)
        rc = pf_event(e, wt, PF_SLICE_END, NONE, now, NULL, 0, 0);
    return rc;
}

static int on_leave(void *ctx, pt_walk_thread_t *wt, uint32_t id, uint64_t ticks, unsigned flags)
{
    (void)id;
    (void)flags;
    ex_t *e = ctx;
    thr_t *t = thr_of(e, wt);
    uint64_t now = account(e, t, ticks);
    if (!t->depth)
        return 0;
    t->depth--;
    if (cct(e))
        return 0;
    if (e->filter && e->o.format != PT_EXPORT_CHROME)
        return leave_filtered(e, wt, t->depth, now);
    sym_t *s = &e->syms[t->stack[t->depth]];
    if (e->o.format == PT_EXPORT_SPEEDSCOPE)
        return ss_event(e, t, 'C', s->ss_frame, ticks_ns_since_base(&e->procs[t->proc], now));
    if (e->o.format == PT_EXPORT_PERFETTO)
        return pf_event(e, wt, PF_SLICE_END, NONE, now, NULL, 0, 0);
    /* chrome */
    const char *head = chrome_head(e, s);
    if (!head)
        return -ENOMEM;
    obuf_t *o = &e->out;
    uint64_t start = t->starts[t->depth];
    const proc_t *p = &e->procs[t->proc];
    if (e->filter && !passes(e, p, start, now)) {
        e->left_out++;
        return 0;
    }
    int64_t ts = chrome_ns(p, start);
    ob_puts(o, head);
    ob_puts(o, ",\"tid\":");
    ob_u64(o, t->number);
    ob_puts(o, ",\"ts\":");
    ob_us3(o, ts);
    ob_puts(o, ",\"dur\":");
    ob_us3(o, (int64_t)llround((double)(now - start) * p->ns_per_tick));
    ob_putc(o, '}');
    e->chrome_calls++;
    return o->err;
}

/* A mark or a gap: written when it falls in [from_ns, to_ns]. */
static int in_range(const ex_t *e, const proc_t *p, uint64_t at)
{
    int64_t r = rel_ns(e, p, at);
    return r >= e->o.from_ns && (e->o.to_ns <= 0 || r <= e->o.to_ns);
}

static int on_instant(void *ctx, pt_walk_thread_t *wt, uint32_t id, uint64_t ticks)
{
    ex_t *e = ctx;
    thr_t *t = thr_of(e, wt);
    uint64_t now = account(e, t, ticks);
    if (e->filter && !in_range(e, &e->procs[t->proc], now))
        return 0;
    if (e->o.format == PT_EXPORT_CHROME) {
        uint32_t s = sym_index(e, t->proc, id);
        if (s == NONE)
            return -ENOMEM;
        chrome_instant(e, t, "mark", e->syms[s].name, now, -1);
    } else if (e->o.format == PT_EXPORT_PERFETTO) {
        uint32_t s = sym_index(e, t->proc, id);
        if (s == NONE)
            return -ENOMEM;
        int rc = pf_instant(e, wt, s, now, 0);
        if (rc)
            return rc;
    }
    return e->out.err;
}

static int on_gap(void *ctx, pt_walk_thread_t *wt, uint64_t ticks, uint64_t lost)
{
    ex_t *e = ctx;
    thr_t *t = thr_of(e, wt);
    uint64_t now = account(e, t, ticks);
    if (e->filter && !in_range(e, &e->procs[t->proc], now))
        return 0;
    char name[64];
    const uint8_t f = wt->lost_flags;
    snprintf(name, sizeof name, "lost %llu events%s", (unsigned long long)lost,
             f & PT_EVF_LOST_NO_RING         ? " (no ring)"
             : f & PT_EVF_LOST_WAIT_TIMEOUT ? " (wait timed out)"
             : f & PT_EVF_LOST_NO_ROOM      ? " (no room in /dev/shm)"
             : f & PT_EVF_SYNTHETIC         ? " (the reader fell behind)"
                                            : "");
    if (e->o.format == PT_EXPORT_CHROME) {
        chrome_instant(e, t, "pytrace", name, now, (int64_t)(lost & INT64_MAX));
    } else if (e->o.format == PT_EXPORT_PERFETTO) {
        int rc = pf_instant(e, wt, NONE, now, lost);
        if (rc)
            return rc;
    }
    return e->out.err;
}

static const pt_walk_ops_t ex_ops = {
    .thread_new = on_thread_new, .enter = on_enter, .exit = on_leave, .instant = on_instant, .gap = on_gap};

/* ---- messages --------------------------------------------------------------- */

static void note_latest(proc_t *p, uint64_t t)
{
    if (!p->have_latest || t > p->latest) {
        p->latest = t;
        p->have_latest = 1;
    }
}

/* The output's beginning, at the first message that counts (p's). */
static void start(ex_t *e, proc_t *p)
{
    if (e->started)
        return;
    e->started = 1;
    e->first = proc_index(e, p);
    if (e->o.format == PT_EXPORT_CHROME) {
        chrome_process(e, p, 1); /* opens the array */
        for (uint32_t i = 0; i < e->nprocs; i++)
            if (&e->procs[i] != p && e->procs[i].selected && e->procs[i].seen && e->procs[i].have_pinfo)
                chrome_process(e, &e->procs[i], 0);
    }
    if (e->o.format == PT_EXPORT_PERFETTO)
        e->pf_start_rc = pf_begin(e);
}

static thr_t *thread_for(ex_t *e, const proc_t *p, uint64_t number, int *rc)
{
    pt_walk_thread_t *wt = pt_walk_proc_thread(e->walk, p->tag, number, rc);
    return wt ? thr_of(e, wt) : NULL;
}

/* A process's ProcessInfo: its clock, names and the pid its tracks show. */
static int feed_process_info(ex_t *e, proc_t *p, const pt_fb_process_info_t *in)
{
    if (p->have_pinfo)
        return 0; /* the first one counts, as before processes existed */
    char *cl = dup_str(in->command_line), *pv = dup_str(in->python_version);
    if (!cl || !pv) {
        free(cl);
        free(pv);
        return -ENOMEM;
    }
    p->have_pinfo = 1;
    p->pinfo = *in;
    if (!e->have_t0) {
        e->have_t0 = 1;
        e->t0 = (int64_t)in->base_monotonic_ns;
    }
    p->command_line = cl;
    p->python_version = pv;
    p->base_ticks = in->base_ticks;
    uint64_t tps = in->ticks_per_second ? in->ticks_per_second : 1000000000ull;
    p->pinfo.ticks_per_second = tps;
    p->ns_per_tick = 1e9 / (double)tps;
    p->shown_pid = (int64_t)in->pid;
    for (uint32_t i = 0; i < e->nprocs; i++) /* a pid another process of the stream shows already */
        if (&e->procs[i] != p && e->procs[i].have_pinfo && e->procs[i].shown_pid == p->shown_pid) {
            p->shown_pid = (int64_t)((uint64_t)p->tag << 22 | (in->pid & 0x3fffff));
            break;
        }
    int sel = pid_selected(e, in->pid);
    p->selected = sel;
    if (!e->started || !sel || p->described)
        return 0;
    if (e->o.format == PT_EXPORT_CHROME)
        chrome_process(e, p, 0);
    else if (e->o.format == PT_EXPORT_PERFETTO)
        return pf_process(e, p);
    return 0;
}

static int feed(ex_t *e, const pt_fb_msg_t *m, pt_export_result_t *res)
{
    int rc = 0;
    proc_t *p = proc_for(e, m->process);
    if (!p)
        return -ENOMEM;
    p->seen = 1;
    if (m->type == PT_MSG_PROCESS_INFO) {
        rc = feed_process_info(e, p, &m->u.process_info);
        if (rc)
            return rc;
        if (p->selected || !e->o.npids)
            start(e, p);
        return 0;
    }
    if (!p->selected) /* --pid: another process */
        return 0;
    switch (m->type) {
    case PT_MSG_SYMBOL:
        start(e, p);
        if (pt_walk_proc_symbol(e->walk, p->tag, m->u.symbol.id))
            return -ENOMEM;
        return feed_symbol(e, proc_index(e, p), &m->u.symbol);
    case PT_MSG_THREAD_START: {
        start(e, p);
        const pt_fb_thread_start_t *in = &m->u.thread_start;
        thr_t *t = thread_for(e, p, in->thread, &rc);
        if (!t)
            return rc ? rc : -ENOMEM;
        p = &e->procs[t->proc];
        if (in->name.ptr && in->name.len) {
            char *n = dup_str(in->name);
            if (!n)
                return -ENOMEM;
            if (!t->name || strcmp(t->name, n))
                t->pf_named = 0; /* perfetto: the track descriptor again */
            free(t->name);
            t->name = n;
        }
        if (in->os_tid)
            t->os_tid = in->os_tid;
        if (t->ended) { /* a new thread under a reused number */
            t->ended = 0;
            t->have_last = 0;
        }
        if (in->ticks) {
            note_latest(p, in->ticks);
            account(e, t, in->ticks);
        }
        return 0;
    }
    case PT_MSG_THREAD_END: {
        start(e, p);
        const pt_fb_thread_end_t *in = &m->u.thread_end;
        thr_t *t = thread_for(e, p, in->thread, &rc);
        if (!t)
            return rc ? rc : -ENOMEM;
        p = &e->procs[t->proc];
        const uint32_t tag = p->tag;
        if (in->ticks) {
            note_latest(p, in->ticks);
            account(e, t, in->ticks);
        }
        rc = pt_walk_proc_thread_end(e->walk, tag, in->thread, in->ticks);
        int rc2;
        t = thread_for(e, &e->procs[*pt_u64map_slot(&e->proc_map, tag, NONE)], in->thread, &rc2); /* arrays may have moved */
        if (t)
            t->ended = 1;
        return rc;
    }
    case PT_MSG_EVENT_CHUNK: {
        start(e, p);
        const pt_fb_event_chunk_t *c = &m->u.event_chunk;
        for (uint32_t i = 0; i < c->count; i++)
            note_latest(p, c->events[i].ticks);
        const uint32_t tag = p->tag;
        thr_t *t = thread_for(e, p, c->thread, &rc);
        if (!t)
            return rc ? rc : -ENOMEM;
        t->ended = 0;
        return pt_walk_proc_events(e->walk, tag, c->thread, c->events, c->count);
    }
    case PT_MSG_PRODUCER_STATUS:
        p->have_status = 1;
        p->status = m->u.producer_status;
        res->have_status = 1;
        return 0;
    default:
        return 0;
    }
}

/* ---- collapsed -------------------------------------------------------------- */

static const char *folded_label(ex_t *e, sym_t *s)
{
    if (s->folded)
        return s->folded;
    size_t n = strlen(s->name) + strlen(s->file) + 40;
    char *b = malloc(n);
    if (!b)
        return NULL;
    if (s->kind == PT_SYM_PY_FUNCTION)
        snprintf(b, n, "%s (%s:%u)", s->name, s->file, s->line);
    else
        snprintf(b, n, "%s", s->name);
    for (char *p = b; *p; p++)
        if (*p == ';')
            *p = ':';
        else if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    (void)e;
    s->folded = b;
    return b;
}

static uint64_t folded_value(const ex_t *e, const node_t *nd)
{
    return e->o.weight_calls ? nd->calls : (uint64_t)llround((double)nd->self * e->procs[nd->proc].ns_per_tick);
}

/* The calling contexts below n (opts.max_depth): their weight added up, how
 * many there are, and the deepest (frames below n); no stack (parent links). */
static uint64_t fold_below(ex_t *e, uint32_t n, uint64_t *count, uint32_t *below)
{
    uint64_t sum = 0;
    uint32_t depth = 0, c = e->nodes[n].first_child;
    while (c != NONE) {
        depth++;
        if (depth > *below)
            *below = depth;
        sum += folded_value(e, &e->nodes[c]);
        (*count)++;
        if (e->nodes[c].first_child != NONE) {
            c = e->nodes[c].first_child;
            continue;
        }
        while (c != n && e->nodes[c].next_sibling == NONE) {
            c = e->nodes[c].parent;
            depth--;
        }
        c = c == n ? NONE : e->nodes[c].next_sibling;
    }
    return sum;
}

static int write_collapsed(ex_t *e)
{
    obuf_t *o = &e->out;
    char *path = NULL;
    size_t plen = 0, pcap = 0;
    uint32_t *lens = NULL, nl = 0, cap_l = 0;
    uint32_t *frames = NULL; /* frames on the path at each level (thread and process roots are none) */
    int rc = 0;
    /* iterative DFS from the root: path holds the names of the current node's ancestors */
    uint32_t n = e->nnodes > 1 ? e->nodes[0].first_child : NONE;
    while (n != NONE) {
        node_t *nd = &e->nodes[n];
        const char *label;
        char tb[96];
        if (nd->sym == NONE && nd->thread == NONE) {
            label = ""; /* a process's subtree: its stacks merge with the others' */
        } else if (nd->sym == NONE) {
            thr_t *t = &e->thr[nd->thread];
            char nb[40];
            const char *tn = thread_name(t, nb, sizeof nb);
            size_t need = strlen(tn) + 48;
            char *b = need <= sizeof tb ? tb : malloc(need);
            if (!b) {
                rc = -ENOMEM;
                break;
            }
            snprintf(b, need, "thread %s (tid %llu)", tn, (unsigned long long)t->os_tid);
            for (char *p = b; *p; p++)
                if (*p == ';')
                    *p = ':';
                else if ((unsigned char)*p < 0x20 || *p == 0x7f)
                    *p = ' ';
            label = b;
        } else {
            label = folded_label(e, &e->syms[nd->sym]);
            if (!label) {
                rc = -ENOMEM;
                break;
            }
        }
        size_t ll = strlen(label);
        int heap_label = nd->sym == NONE && nd->thread != NONE && label != tb;
        /* enter n: path += (";" if nonempty) + label */
        uint32_t cap_f = cap_l;
        if (pt_grow((void **)&lens, &cap_l, sizeof *lens, nl + 1) ||
            pt_grow((void **)&frames, &cap_f, sizeof *frames, nl + 1))
            rc = -ENOMEM;
        if (!rc && plen + ll + 2 > pcap) {
            size_t nc = pcap ? pcap : 4096;
            while (nc < plen + ll + 2)
                nc *= 2;
            char *p2 = realloc(path, nc);
            if (p2) {
                path = p2;
                pcap = nc;
            } else {
                rc = -ENOMEM;
            }
        }
        if (rc) {
            if (heap_label)
                free((void *)label);
            break;
        }
        uint32_t depth = (nl ? frames[nl - 1] : 0) + (nd->sym != NONE);
        frames[nl] = depth;
        if (depth > e->deepest)
            e->deepest = depth;
        lens[nl++] = (uint32_t)plen;
        if (ll) {
            if (plen)
                path[plen++] = ';';
            memcpy(path + plen, label, ll);
            plen += ll;
        }
        if (heap_label)
            free((void *)label);
        if (nd->sym != NONE) {
            uint64_t value = folded_value(e, nd);
            if (value) {
                ob_put(o, path, plen);
                ob_putc(o, ' ');
                ob_u64(o, value);
                ob_putc(o, '\n');
                if (o->err) {
                    rc = o->err;
                    break;
                }
            }
        }
        /* opts.max_depth: what ran below is one line under a marker (a deep
         * recursion wrote a line per level, each as long as its depth) */
        if (e->o.max_depth && depth >= e->o.max_depth && nd->first_child != NONE) {
            uint32_t below = 0;
            uint64_t value = fold_below(e, n, &e->stacks_folded, &below);
            if (depth + below > e->deepest)
                e->deepest = depth + below;
            if (value) {
                ob_put(o, path, plen);
                ob_puts(o, ";[deeper frames] ");
                ob_u64(o, value);
                ob_putc(o, '\n');
                if (o->err) {
                    rc = o->err;
                    break;
                }
            }
        }
        if (nd->first_child != NONE && !(e->o.max_depth && depth >= e->o.max_depth)) {
            n = nd->first_child;
            continue;
        }
        /* leave n and ancestors until one has a next sibling */
        while (n != NONE) {
            plen = lens[--nl];
            if (e->nodes[n].next_sibling != NONE) {
                n = e->nodes[n].next_sibling;
                break;
            }
            n = e->nodes[n].parent;
            if (n == 0)
                n = NONE;
        }
    }
    free(path);
    free(lens);
    free(frames);
    return rc;
}

/* ---- pstats (marshal) ------------------------------------------------------- */

static void m_i32(obuf_t *o, int32_t v)
{
    uint32_t u = (uint32_t)v;
    char b[4] = {(char)(u & 0xff), (char)(u >> 8 & 0xff), (char)(u >> 16 & 0xff), (char)(u >> 24)};
    ob_put(o, b, 4);
}

static void m_int(obuf_t *o, uint64_t v)
{
    if (v <= INT32_MAX) {
        ob_putc(o, 'i');
        m_i32(o, (int32_t)v);
        return;
    }
    uint16_t d[5];
    int n = 0;
    while (v) {
        d[n++] = (uint16_t)(v & 0x7fff);
        v >>= 15;
    }
    ob_putc(o, 'l');
    m_i32(o, n);
    for (int i = 0; i < n; i++) {
        char b[2] = {(char)(d[i] & 0xff), (char)(d[i] >> 8)};
        ob_put(o, b, 2);
    }
}

static void m_float(obuf_t *o, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    char b[9] = {'g'};
    for (int i = 0; i < 8; i++)
        b[1 + i] = (char)(u >> (8 * i) & 0xff);
    ob_put(o, b, 9);
}

static int m_str(obuf_t *o, const char *s)
{
    size_t n;
    char *c = utf8_clean(s, &n);
    if (!c)
        return -ENOMEM;
    ob_putc(o, 'u');
    m_i32(o, (int32_t)n);
    ob_put(o, c, n);
    free(c);
    return 0;
}

typedef struct pkey {
    char *file, *name;
    uint32_t line;
    uint64_t cc, nc, tt, ct;
    uint32_t first_edge; /* into the sorted edge array */
    uint32_t nedges;
} pkey_t;

/* A pstats function key, the tuple (file, line, name), then the opening of
 * the value tuple of `fields` items that follows it. 0 or -ENOMEM. */
static int m_key(obuf_t *o, const pkey_t *k, int32_t fields)
{
    ob_putc(o, '(');
    m_i32(o, 3);
    if (m_str(o, k->file))
        return -ENOMEM;
    m_int(o, k->line);
    if (m_str(o, k->name))
        return -ENOMEM;
    ob_putc(o, '(');
    m_i32(o, fields);
    return 0;
}

typedef struct pedge {
    uint32_t caller, callee; /* symbol indexes, then key indexes */
    uint64_t nc, cc, tt, ct;
} pedge_t;

/* cProfile's label of a C function from a recording without profile names. */
static char *old_c_label(const sym_t *s)
{
    const char *name = s->name, *module = s->file;
    size_t ml = strlen(module), n = strlen(name) + 64;
    char *b = malloc(n + strlen(module));
    if (!b)
        return NULL;
    const char *dot = strrchr(name, '.');
    if (ml && !strncmp(name, module, ml) && name[ml] == '.' && !strchr(name + ml + 1, '.'))
        snprintf(b, n, "<built-in method %s>", name);
    else if (dot)
        snprintf(b, n, "<method '%s' of '%.*s' objects>", dot + 1, (int)(dot - name), name);
    else
        snprintf(b, n, "<built-in method %s>", name);
    return b;
}

/* The pstats key of a symbol (file, line, name), malloc'd strings. */
static int pstats_key(const sym_t *s, int qualnames, char **file, uint32_t *line, char **name)
{
    *line = 0;
    if (s->kind == PT_SYM_PY_FUNCTION) {
        *file = dup_c(s->file);
        *line = s->line;
        if (qualnames || !s->profile) {
            const char *base = s->name;
            if (!qualnames) {
                const char *dot = strrchr(s->name, '.');
                base = dot ? dot + 1 : s->name;
            }
            *name = dup_c(base);
        } else {
            *name = dup_c(s->profile);
        }
    } else if (s->kind == PT_SYM_LABEL) {
        *file = dup_c("~");
        size_t n = strlen(s->name) + 16;
        *name = malloc(n);
        if (*name)
            snprintf(*name, n, "<span '%s'>", s->name);
    } else {
        *file = dup_c("~");
        if (qualnames) {
            size_t n = strlen(s->name) + 24;
            *name = malloc(n);
            if (*name)
                snprintf(*name, n, "<built-in method %s>", s->name);
        } else {
            *name = s->profile ? dup_c(s->profile) : old_c_label(s);
        }
    }
    if (!*file || !*name) {
        free(*file);
        free(*name);
        return -ENOMEM;
    }
    return 0;
}

static uint64_t str_hash(const char *a, uint32_t line, const char *b)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = a; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ 0xff ^ line) * 1099511628211ull;
    for (const char *p = b; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

static int edge_cmp(const void *x, const void *y)
{
    const pedge_t *a = x, *b = y;
    if (a->callee != b->callee)
        return a->callee < b->callee ? -1 : 1;
    return a->caller < b->caller ? -1 : a->caller > b->caller;
}

static int write_pstats(ex_t *e)
{
    int rc = -ENOMEM;
    uint32_t nn = e->nnodes, ns = e->nsyms;
    uint64_t *incl = calloc(nn ? nn : 1, sizeof *incl);
    uint32_t *onpath = calloc(ns ? ns : 1, sizeof *onpath);
    uint64_t *f = calloc((size_t)(ns ? ns : 1) * 4, sizeof *f); /* nc, cc, tt, ct per symbol */
    pt_u64map_t edge_map = {0}, edge_on = {0}, key_map = {0};
    pedge_t *edges = NULL;
    uint32_t nedges = 0, cap_edges = 0;
    pkey_t *keys = NULL;
    uint32_t nkeys = 0, cap_keys = 0;
    if (!incl || !onpath || !f || pt_u64map_init(&edge_map, 1024) || pt_u64map_init(&edge_on, 64) ||
        pt_u64map_init(&key_map, 1024))
        goto out;
    for (uint32_t i = nn; i-- > 1;) {
        incl[i] += e->nodes[i].self;
        incl[e->nodes[i].parent] += incl[i];
    }
    /* DFS with the functions and (caller, callee) pairs on the path counted */
    uint32_t n = nn > 1 ? e->nodes[0].first_child : NONE;
    while (n != NONE) {
        node_t *nd = &e->nodes[n];
        uint32_t s = nd->sym;
        uint32_t ps = nd->parent != NONE ? e->nodes[nd->parent].sym : NONE;
        if (s != NONE) {
            uint64_t *fs = f + (size_t)s * 4;
            fs[0] += nd->calls;
            fs[2] += nd->self;
            if (!onpath[s]) {
                fs[1] += nd->calls;
                fs[3] += incl[n];
            }
            onpath[s]++;
            if (ps != NONE) {
                uint64_t ek = (uint64_t)ps << 32 | s;
                uint32_t *slot = pt_u64map_slot(&edge_map, ek, NONE);
                if (!slot)
                    goto out;
                if (*slot == NONE) {
                    if (pt_grow((void **)&edges, &cap_edges, sizeof *edges, nedges + 1))
                        goto out;
                    edges[nedges] = (pedge_t){.caller = ps, .callee = s};
                    *pt_u64map_slot(&edge_map, ek, NONE) = nedges++;
                    slot = pt_u64map_slot(&edge_map, ek, NONE);
                }
                pedge_t *ed = &edges[*slot];
                uint32_t *on = pt_u64map_slot(&edge_on, ek, 0);
                if (!on)
                    goto out;
                ed->nc += nd->calls;
                ed->tt += nd->self;
                if (!*on) {
                    ed->cc += nd->calls;
                    ed->ct += incl[n];
                }
                (*on)++;
            }
        }
        if (nd->first_child != NONE) {
            n = nd->first_child;
            continue;
        }
        while (n != NONE) {
            node_t *x = &e->nodes[n];
            if (x->sym != NONE) { /* leave x */
                onpath[x->sym]--;
                uint32_t px = x->parent != NONE ? e->nodes[x->parent].sym : NONE;
                if (px != NONE)
                    (*pt_u64map_slot(&edge_on, (uint64_t)px << 32 | x->sym, 0))--;
            }
            if (x->next_sibling != NONE) {
                n = x->next_sibling;
                break;
            }
            n = x->parent;
            if (n == 0)
                n = NONE;
        }
    }
    /* Times are in the first selected process's ticks: another process's
     * ticks are scaled by the ratio of the clocks (exactly 1 when they share
     * the clock, as the processes of one machine do). */
    const proc_t *clock = NULL;
    for (uint32_t i = 0; i < e->nprocs && !clock; i++)
        if (e->procs[i].selected && e->procs[i].have_pinfo)
            clock = &e->procs[i];
    for (uint32_t i = 0; i < e->nprocs; i++)
        e->procs[i].scale = clock && e->procs[i].have_pinfo
                                ? (double)clock->pinfo.ticks_per_second / (double)e->procs[i].pinfo.ticks_per_second
                                : 1.0;
    for (uint32_t s = 0; s < ns; s++) {
        const double scale = e->procs[e->syms[s].proc].scale;
        if (scale != 1.0) {
            uint64_t *fs = f + (size_t)s * 4;
            fs[2] = (uint64_t)llround((double)fs[2] * scale);
            fs[3] = (uint64_t)llround((double)fs[3] * scale);
        }
    }
    for (uint32_t i = 0; i < nedges; i++) {
        const double scale = e->procs[e->syms[edges[i].callee].proc].scale;
        if (scale != 1.0) {
            edges[i].tt = (uint64_t)llround((double)edges[i].tt * scale);
            edges[i].ct = (uint64_t)llround((double)edges[i].ct * scale);
        }
    }
    /* keys: symbols with one key are added together */
    for (uint32_t s = 0; s < ns; s++) {
        e->syms[s].key = NONE;
        uint64_t *fs = f + (size_t)s * 4;
        if (!fs[0] && !fs[2] && !fs[3])
            continue;
        char *file, *name;
        uint32_t line;
        if (pstats_key(&e->syms[s], e->o.qualnames, &file, &line, &name))
            goto out;
        uint64_t h = str_hash(file, line, name);
        uint32_t k = NONE;
        for (;; h = pt_u64map_mix(h + 1)) {
            uint32_t *slot = pt_u64map_slot(&key_map, h, NONE);
            if (!slot) {
                free(file);
                free(name);
                goto out;
            }
            if (*slot == NONE) {
                if (pt_grow((void **)&keys, &cap_keys, sizeof *keys, nkeys + 1)) {
                    free(file);
                    free(name);
                    goto out;
                }
                keys[nkeys] = (pkey_t){.file = file, .name = name, .line = line};
                *pt_u64map_slot(&key_map, h, NONE) = k = nkeys++;
                break;
            }
            pkey_t *kk = &keys[*slot];
            if (kk->line == line && !strcmp(kk->file, file) && !strcmp(kk->name, name)) {
                k = *slot;
                free(file);
                free(name);
                break;
            }
        }
        e->syms[s].key = k;
        keys[k].nc += fs[0];
        keys[k].cc += fs[1];
        keys[k].tt += fs[2];
        keys[k].ct += fs[3];
    }
    for (uint32_t i = 0; i < nedges; i++) {
        edges[i].caller = e->syms[edges[i].caller].key;
        edges[i].callee = e->syms[edges[i].callee].key;
    }
    if (nedges) /* edges is NULL when no call has a caller; qsort's pointer must not be */
        qsort(edges, nedges, sizeof *edges, edge_cmp);
    uint32_t w = 0;
    for (uint32_t i = 0; i < nedges; i++) {
        if (edges[i].callee == NONE || edges[i].caller == NONE)
            continue;
        if (w && edges[w - 1].callee == edges[i].callee && edges[w - 1].caller == edges[i].caller) {
            edges[w - 1].nc += edges[i].nc;
            edges[w - 1].cc += edges[i].cc;
            edges[w - 1].tt += edges[i].tt;
            edges[w - 1].ct += edges[i].ct;
        } else {
            edges[w++] = edges[i];
        }
    }
    nedges = w;
    for (uint32_t i = 0; i < nedges; i++) {
        pkey_t *k = &keys[edges[i].callee];
        if (!k->nedges)
            k->first_edge = i;
        k->nedges++;
    }
    double spt = 1.0 / (double)(clock ? clock->pinfo.ticks_per_second : 1000000000ull);
    obuf_t *o = &e->out;
    ob_putc(o, '{');
    for (uint32_t i = 0; i < nkeys; i++) {
        pkey_t *k = &keys[i];
        if (m_key(o, k, 5))
            goto out;
        m_int(o, k->cc);
        m_int(o, k->nc);
        m_float(o, (double)k->tt * spt);
        m_float(o, (double)k->ct * spt);
        ob_putc(o, '{');
        for (uint32_t j = k->first_edge; j < k->first_edge + k->nedges; j++) {
            if (m_key(o, &keys[edges[j].caller], 4))
                goto out;
            m_int(o, edges[j].nc);
            m_int(o, edges[j].cc);
            m_float(o, (double)edges[j].tt * spt);
            m_float(o, (double)edges[j].ct * spt);
        }
        ob_putc(o, '0');
    }
    ob_putc(o, '0');
    rc = o->err;
out:
    for (uint32_t i = 0; i < nkeys; i++) {
        free(keys[i].file);
        free(keys[i].name);
    }
    free(keys);
    free(edges);
    free(incl);
    free(onpath);
    free(f);
    pt_u64map_free(&edge_map);
    pt_u64map_free(&edge_on);
    pt_u64map_free(&key_map);
    return rc;
}

/* ---- speedscope ------------------------------------------------------------- */

static uint32_t shown_procs(const ex_t *e)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < e->nprocs; i++)
        n += e->procs[i].seen && e->procs[i].selected;
    return n;
}

/* The first selected process that has its ProcessInfo (NULL if none). */
static const proc_t *first_selected(const ex_t *e)
{
    for (uint32_t i = 0; i < e->nprocs; i++)
        if (e->procs[i].selected && e->procs[i].have_pinfo)
            return &e->procs[i];
    return NULL;
}

static int write_speedscope(ex_t *e)
{
    obuf_t *o = &e->out;
    ob_puts(o, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\n\"profiles\":[");
    int first = 1;
    char *copy = malloc(SS_THREAD_BUF);
    if (!copy)
        return -ENOMEM;
    for (uint32_t i = 0; i < e->nthr; i++) {
        thr_t *t = &e->thr[i];
        if (!t->scount)
            continue;
        char nb[40], pname[600], prefix[48] = "";
        const char *tn = thread_name(t, nb, sizeof nb);
        char *heap = NULL;
        const char *name = tn;
        if (shown_procs(e) > 1) /* a profile per (process, thread) */
            snprintf(prefix, sizeof prefix, "pid %llu: ", (unsigned long long)e->procs[t->proc].pinfo.pid);
        if (t->os_tid || prefix[0]) {
            size_t need = strlen(tn) + 88;
            heap = need <= sizeof pname ? pname : malloc(need);
            if (!heap) {
                free(copy);
                return -ENOMEM;
            }
            if (t->os_tid)
                snprintf(heap, need, "%s%s (tid %llu)", prefix, tn, (unsigned long long)t->os_tid);
            else
                snprintf(heap, need, "%s%s", prefix, tn);
            name = heap;
        }
        ob_puts(o, first ? "\n{\"type\":\"evented\",\"name\":" : ",\n{\"type\":\"evented\",\"name\":");
        first = 0;
        ob_json(o, name);
        if (heap && heap != pname)
            free(heap);
        ob_puts(o, ",\"unit\":\"nanoseconds\",\"startValue\":");
        ob_i64(o, t->start_at);
        ob_puts(o, ",\"endValue\":");
        ob_i64(o, t->end_at > t->start_at ? t->end_at : t->start_at);
        ob_puts(o, ",\"events\":[\n");
        for (uint32_t b = 0; b < t->nblocks; b++) {
            size_t got = 0;
            while (got < t->blocks[b].len) {
                ssize_t r = pread(e->spill_fd, copy + got, t->blocks[b].len - got, (off_t)(t->blocks[b].off + got));
                if (r <= 0) {
                    free(copy);
                    return r < 0 ? -errno : -EIO;
                }
                got += (size_t)r;
            }
            ob_put(o, copy, got);
        }
        ob_put(o, t->sbuf, t->slen);
        ob_puts(o, "]}");
        if (o->err)
            break;
    }
    free(copy);
    ob_puts(o, "\n],\n\"shared\":{\"frames\":[");
    for (uint32_t i = 0; i < e->ss_frames; i++) {
        const sym_t *s = &e->syms[e->ss_frame_sym[i]];
        ob_puts(o, i ? ",{\"name\":" : "{\"name\":");
        ob_json(o, s->name);
        if (s->kind == PT_SYM_PY_FUNCTION) {
            ob_puts(o, ",\"file\":");
            ob_json(o, s->file);
            ob_puts(o, ",\"line\":");
            ob_u64(o, s->line);
        }
        ob_putc(o, '}');
    }
    ob_puts(o, "]},\n\"name\":");
    const proc_t *p0 = first_selected(e);
    ob_json(o, p0 && p0->command_line && p0->command_line[0] ? p0->command_line : "pytrace recording");
    ob_puts(o, ",\"activeProfileIndex\":0,\"exporter\":\"pytrace\"}\n");
    return o->err;
}

static int write_chrome_end(ex_t *e, const pt_walk_counters_t *wc)
{
    obuf_t *o = &e->out;
    for (uint32_t i = 0; i < e->nprocs; i++) /* processes without a ProcessInfo */
        if (e->procs[i].selected && e->procs[i].seen && !e->procs[i].described)
            chrome_process(e, &e->procs[i], 0);
    for (uint32_t i = 0; i < e->nthr; i++) {
        thr_t *t = &e->thr[i];
        char nb[40];
        const char *tn = thread_name(t, nb, sizeof nb);
        size_t need = strlen(tn) + 40;
        char *name = malloc(need);
        if (!name)
            return -ENOMEM;
        if (t->os_tid)
            snprintf(name, need, "%s (tid %llu)", tn, (unsigned long long)t->os_tid);
        else
            snprintf(name, need, "%s", tn);
        ob_puts(o, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":");
        ob_u64(o, (uint64_t)e->procs[t->proc].shown_pid);
        ob_puts(o, ",\"tid\":");
        ob_u64(o, t->number);
        ob_puts(o, ",\"args\":{\"name\":");
        ob_json(o, name);
        ob_puts(o, "}}");
        free(name);
    }
    ob_puts(o, "\n],\"otherData\":{\"exporter\":\"pytrace\",\"events\":");
    ob_u64(o, wc->events);
    ob_puts(o, ",\"lost_events\":");
    ob_u64(o, wc->lost);
    const proc_t *p0 = first_selected(e);
    if (p0) {
        ob_puts(o, ",\"python_version\":");
        ob_json(o, p0->python_version);
        ob_puts(o, ",\"command_line\":");
        ob_json(o, p0->command_line);
    }
    ob_puts(o, "}}\n");
    return o->err;
}

/* ---- driver ----------------------------------------------------------------- */

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int open_spill(ex_t *e)
{
    const char *dir = e->o.tmp_dir && e->o.tmp_dir[0] ? e->o.tmp_dir : "/tmp";
    size_t n = strlen(dir) + 40;
    char *tmpl = malloc(n);
    if (!tmpl)
        return -ENOMEM;
    snprintf(tmpl, n, "%s/.pytrace-speedscope-XXXXXX", dir);
    int fd = mkstemp(tmpl);
    if (fd < 0) {
        int err = -errno;
        free(tmpl);
        return err;
    }
    unlink(tmpl); /* nothing is left behind, whatever happens */
    free(tmpl);
    e->spill_fd = fd;
    return 0;
}

static void ex_free(ex_t *e)
{
    pt_walk_destroy(e->walk);
    for (uint32_t i = 0; i < e->nsyms; i++)
        sym_clear(&e->syms[i]);
    free(e->syms);
    pt_u64map_free(&e->sym_map);
    for (uint32_t i = 0; i < e->nthr; i++) {
        free(e->thr[i].name);
        free(e->thr[i].stack);
        free(e->thr[i].starts);
        free(e->thr[i].sbuf);
        free(e->thr[i].blocks);
        free(e->thr[i].pf_interned);
        free(e->thr[i].pf_wait);
    }
    free(e->thr);
    free(e->nodes);
    pt_u64map_free(&e->node_map);
    pt_u64map_free(&e->label_map);
    free(e->ss_frame_sym);
    for (uint32_t i = 0; i < e->nprocs; i++) {
        free(e->procs[i].command_line);
        free(e->procs[i].python_version);
    }
    free(e->procs);
    pt_u64map_free(&e->proc_map);
    free(e->out.buf);
    free(e->pf_batch);
    free(e->pf_zout);
    if (e->pf_z_init)
        deflateEnd(&e->pf_z);
    if (e->spill_fd >= 0)
        close(e->spill_fd);
}

int pt_export_file(const char *recording, int out_fd, const pt_export_opts_t *opts, pt_export_result_t *res)
{
    memset(res, 0, sizeof *res);
    res->error_offset = -1;
    if (opts->format < PT_EXPORT_COLLAPSED || opts->format > PT_EXPORT_PERFETTO)
        return -EINVAL;
    ex_t ex = {.o = *opts, .spill_fd = -1};
    ex_t *e = &ex;
    pt_recfile_t *rf = NULL;
    int rc = -ENOMEM;
    e->out.fd = out_fd;
    e->out.cap = OUT_BUF_BYTES;
    e->out.max_bytes = opts->max_bytes;
    e->filter = !cct(e) && (opts->from_ns > 0 || opts->to_ns > 0 || opts->min_duration_ns > 0);
    e->out.buf = malloc(OUT_BUF_BYTES);
    if (!e->out.buf || pt_u64map_init(&e->sym_map, 1024) || pt_u64map_init(&e->node_map, 4096) ||
        pt_u64map_init(&e->label_map, 1024) ||
        pt_u64map_init(&e->proc_map, 16) || pt_walk_create(&ex_ops, e, &e->walk))
        goto out;
    pt_walk_check_symbols(e->walk); /* events naming ids never announced are damage (walk.h) */
    if (cct(e) && node_new(e, NONE, NONE, NONE) != 0)
        goto out;
    if (!proc_for(e, 0)) /* process 0: an untagged stream's, also when it is empty */
        goto out;
    if (e->o.format == PT_EXPORT_SPEEDSCOPE && (rc = open_spill(e)) != 0)
        goto out;
    if (e->o.format == PT_EXPORT_PERFETTO) {
        e->pf_batch = malloc(PF_BATCH_BYTES);
        if (!e->pf_batch)
            goto out;
        if (!e->o.pf_uncompressed) {
            if (deflateInit(&e->pf_z, Z_BEST_SPEED) != Z_OK)
                goto out;
            e->pf_z_init = 1;
        }
    }
    char err[512];
    rc = pt_recfile_open(recording, &rf, err, sizeof err);
    if (rc) {
        snprintf(res->error, sizeof res->error, "%s", err);
        res->damaged = 0;
        goto out;
    }
    double last_data = mono_now();
    uint64_t since_progress = 0;
    for (;;) {
        const uint8_t *msg;
        size_t len;
        pt_fb_msg_t m;
        int r = pt_recfile_next(rf, &msg, &len, &m);
        if (r == 1) {
            res->messages++;
            last_data = mono_now();
            if ((rc = feed(e, &m, res)) != 0 || (rc = e->pf_start_rc) != 0)
                goto out;
            if (e->out.err) {
                rc = e->out.err;
                goto out;
            }
            if (++since_progress >= PROGRESS_EVERY) {
                since_progress = 0;
                if (e->o.progress && e->o.progress(e->o.progress_ctx)) {
                    rc = -EINTR;
                    goto out;
                }
                last_data = mono_now();
            }
            continue;
        }
        if (r == -EBADMSG)
            break;
        if (r < 0 && r != -EINTR && r != -EAGAIN) {
            rc = r;
            goto out;
        }
        /* r == 0: nothing complete now */
        if (e->o.follow && !pt_recfile_ended(rf)) {
            if (mono_now() - last_data >= e->o.timeout) {
                res->timed_out = 1;
                break;
            }
            if (e->o.progress && e->o.progress(e->o.progress_ctx)) {
                rc = -EINTR;
                goto out;
            }
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (r == 0 && !res->timed_out)
            pt_recfile_finish(rf);
        break;
    }
    if (pt_recfile_error_offset(rf) >= 0) {
        const char *why = pt_recfile_error(rf);
        const char *colon = strstr(why, ": ");
        res->damaged = 1;
        res->error_offset = pt_recfile_error_offset(rf);
        snprintf(res->error, sizeof res->error, "%s", colon && !strncmp(why, "damaged at", 10) ? colon + 2 : why);
    }
    start(e, &e->procs[0]);
    if ((rc = e->pf_start_rc) != 0)
        goto out;
    /* threads with no ThreadEnd: their open entries count up to the latest
     * tick of the stream (pytrace-top does the same) */
    for (uint32_t i = 0; i < e->nthr; i++) {
        const proc_t *p = &e->procs[e->thr[i].proc];
        if (!e->thr[i].ended && p->have_latest) {
            uint64_t number = e->thr[i].number;
            if ((rc = pt_walk_proc_thread_end(e->walk, p->tag, number, p->latest)) != 0)
                goto out;
        }
    }
    /* the job's counters: each process's last ProducerStatus, added up */
    uint32_t with_status = 0;
    for (uint32_t i = 0; i < e->nprocs; i++) {
        const proc_t *p = &e->procs[i];
        if (!p->selected || !p->have_status)
            continue;
        pt_fb_producer_status_t *st = &res->status;
        if (!with_status++) {
            *st = p->status;
            continue;
        }
        if (p->status.state < st->state)
            st->state = p->status.state; /* the least advanced: running before exited */
        st->events_written += p->status.events_written;
        st->events_dropped += p->status.events_dropped;
        st->hook_errors += p->status.hook_errors;
        st->symbols_dropped += p->status.symbols_dropped;
        st->threads_untraced += p->status.threads_untraced;
        st->tracing_displaced += p->status.tracing_displaced;
        st->events_untraced += p->status.events_untraced;
        st->unrecorded_events += p->status.unrecorded_events;
        st->unrecorded_messages += p->status.unrecorded_messages;
        if (!st->unrecorded_errno)
            st->unrecorded_errno = p->status.unrecorded_errno;
    }
    res->have_status = with_status > 0;
    int64_t first_ns = 0, last_ns = 0;
    int have_span = 0;
    for (uint32_t i = 0; i < e->nprocs; i++) {
        const proc_t *p = &e->procs[i];
        if (!p->selected || !p->have_pinfo || !p->have_latest)
            continue;
        int64_t a = (int64_t)p->pinfo.base_monotonic_ns, b = chrome_ns(p, p->latest);
        if (!have_span || a < first_ns)
            first_ns = a;
        if (!have_span || b > last_ns)
            last_ns = b;
        have_span = 1;
    }
    res->span_ns = have_span && last_ns > first_ns ? (uint64_t)(last_ns - first_ns) : 0;
    res->processes = 0;
    for (uint32_t i = 0; i < e->nprocs; i++) {
        res->processes += e->procs[i].seen;
        res->selected_processes += e->procs[i].seen && e->procs[i].selected;
    }
    for (uint32_t i = 0; i < e->nprocs && res->npids < PT_EXPORT_MAX_PIDS; i++)
        if (e->procs[i].have_pinfo)
            res->pids[res->npids++] = e->procs[i].pinfo.pid;
    if ((rc = pt_walk_finish(e->walk)) != 0)
        goto out;
    pt_walk_counters_t wc;
    pt_walk_counters(e->walk, &wc);
    res->events = wc.events;
    res->lost = wc.lost;
    res->lost_wait_timeout = wc.lost_wait_timeout;
    res->lost_no_room = wc.lost_no_room;
    res->lost_no_ring = wc.lost_no_ring;
    res->unmatched = wc.unmatched + wc.unmatched_spans;
    res->unannounced = wc.unannounced;
    res->threads = wc.threads;
    res->symbols = e->nsyms;
    switch (e->o.format) {
    case PT_EXPORT_COLLAPSED: rc = write_collapsed(e); break;
    case PT_EXPORT_PSTATS: rc = write_pstats(e); break;
    case PT_EXPORT_SPEEDSCOPE: rc = write_speedscope(e); break;
    case PT_EXPORT_PERFETTO: rc = pf_end(e); break;
    default: rc = write_chrome_end(e, &wc); break;
    }
    if (!rc) {
        ob_flush(&e->out);
        rc = e->out.err;
    }
out:
    res->bytes_written = e->out.written;
    res->size_limited = e->out.limited;
    res->calls_left_out = e->left_out;
    res->stacks_folded = e->stacks_folded;
    res->deepest = e->deepest;
    pt_recfile_close(rf);
    ex_free(e);
    return rc;
}
