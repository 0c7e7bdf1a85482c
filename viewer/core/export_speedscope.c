/*
 * pt_export's speedscope file: evented profiles, one per (process, thread),
 * and the shared frames. speedscope needs each thread's events together:
 * they are buffered per thread and spilled in blocks to an unlinked temporary
 * file (opts.tmp_dir; nothing is left behind, even on a crash), then copied
 * out per thread at the end.
 */
#define _POSIX_C_SOURCE 200809L
#include "export_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "grow_internal.h"

#define SS_THREAD_BUF (16u << 10)
#define SS_TOTAL_BUF (16u << 20)

typedef struct block {
    uint64_t off;
    uint32_t len;
} block_t;

/* A thread's events: the last ones in sbuf, the others in the spill file. */
typedef struct ss_thr {
    char *sbuf;
    size_t slen;
    block_t *blocks;
    uint32_t nblocks, cap_blocks;
    uint64_t scount;
    int64_t start_at, end_at;
    int have_at;
} ss_thr_t;

typedef struct ss {
    ss_thr_t *thr;          /* per thread index */
    uint32_t cap_thr;
    uint32_t *frame;        /* per symbol: its frame index (NONE: none yet) */
    uint32_t cap_frame;
    uint32_t ss_frames;     /* frames assigned */
    uint32_t *ss_frame_sym; /* frame index -> symbol index */
    uint32_t cap_ss;
    int spill_fd;
    uint64_t spill_end;
    size_t ss_buffered;
} ss_t;

static int ss_spill(ex_t *e, ss_thr_t *st)
{
    ss_t *ss = e->ws;
    if (!st->slen)
        return 0;
    if (pt_grow((void **)&st->blocks, &st->cap_blocks, sizeof *st->blocks, st->nblocks + 1))
        return -ENOMEM;
    if (e->o.max_bytes && ss->spill_end + st->slen > e->o.max_bytes) { /* the output would be larger */
        e->out.limited = 1;
        return -EFBIG;
    }
    int rc = pt_ex_write_all(ss->spill_fd, st->sbuf, st->slen, (int64_t)ss->spill_end);
    if (rc)
        return rc;
    st->blocks[st->nblocks++] = (block_t){.off = ss->spill_end, .len = (uint32_t)st->slen};
    ss->spill_end += st->slen;
    ss->ss_buffered -= st->slen;
    st->slen = 0;
    return 0;
}

static int ss_event(ex_t *e, ss_thr_t *st, char type, uint32_t frame, int64_t at)
{
    ss_t *ss = e->ws;
    if (!st->sbuf && !(st->sbuf = malloc(SS_THREAD_BUF)))
        return -ENOMEM;
    if (st->slen + 80 > SS_THREAD_BUF) {
        int rc = ss_spill(e, st);
        if (rc)
            return rc;
    }
    char *p = st->sbuf + st->slen;
    int n = snprintf(p, 80, "%s{\"type\":\"%c\",\"frame\":%u,\"at\":%lld}", st->scount ? ",\n" : "", type, frame,
                     (long long)at);
    st->slen += (size_t)n;
    ss->ss_buffered += (size_t)n;
    st->scount++;
    if (!st->have_at) {
        st->have_at = 1;
        st->start_at = at;
    }
    if (at > st->end_at)
        st->end_at = at;
    if (ss->ss_buffered > SS_TOTAL_BUF)
        for (uint32_t i = 0; i < e->nthr; i++) {
            int rc = ss_spill(e, &ss->thr[i]);
            if (rc)
                return rc;
        }
    return 0;
}

/* Symbol s's frame (assigned at its first open). 0 or -ENOMEM. */
static int ss_frame_of(ex_t *e, uint32_t s)
{
    ss_t *ss = e->ws;
    if (ex_grow_fill((void **)&ss->frame, &ss->cap_frame, sizeof *ss->frame, s + 1, 0xff)) /* NONE */
        return -ENOMEM;
    if (ss->frame[s] == NONE) {
        if (pt_grow((void **)&ss->ss_frame_sym, &ss->cap_ss, sizeof *ss->ss_frame_sym, ss->ss_frames + 1))
            return -ENOMEM;
        ss->ss_frame_sym[ss->ss_frames] = s;
        ss->frame[s] = ss->ss_frames++;
    }
    return 0;
}

static uint32_t shown_procs(const ex_t *e)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < e->nprocs; i++)
        n += e->procs[i].seen && e->procs[i].selected;
    return n;
}

static int ss_end(ex_t *e, const pt_walk_counters_t *wc)
{
    (void)wc;
    ss_t *ss = e->ws;
    obuf_t *o = &e->out;
    ob_puts(o, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\n\"profiles\":[");
    int first = 1;
    char *copy = malloc(SS_THREAD_BUF);
    if (!copy)
        return -ENOMEM;
    for (uint32_t i = 0; i < e->nthr; i++) {
        const thr_t *t = &e->thr[i];
        const ss_thr_t *st = &ss->thr[i];
        if (!st->scount)
            continue;
        char nb[40], pname[600], prefix[200] = "";
        const char *tn = pt_ex_thread_name(t, nb, sizeof nb);
        char *heap = NULL;
        const char *name = tn;
        if (shown_procs(e) > 1) { /* a profile per (process, thread); the process's role when known */
            const proc_t *p = &e->procs[t->proc];
            snprintf(prefix, sizeof prefix, "pid %llu%s%.120s%s: ", (unsigned long long)p->pinfo.pid,
                     p->role ? " (" : "", p->role ? p->role : "", p->role ? ")" : "");
        }
        if (t->os_tid || prefix[0]) {
            size_t need = strlen(tn) + strlen(prefix) + 48;
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
        pt_ob_json(o, name);
        if (heap && heap != pname)
            free(heap);
        ob_puts(o, ",\"unit\":\"nanoseconds\",\"startValue\":");
        ob_i64(o, st->start_at);
        ob_puts(o, ",\"endValue\":");
        ob_i64(o, st->end_at > st->start_at ? st->end_at : st->start_at);
        ob_puts(o, ",\"events\":[\n");
        for (uint32_t b = 0; b < st->nblocks; b++) {
            size_t got = 0;
            while (got < st->blocks[b].len) {
                ssize_t r = pread(ss->spill_fd, copy + got, st->blocks[b].len - got, (off_t)(st->blocks[b].off + got));
                if (r <= 0) {
                    free(copy);
                    return r < 0 ? -errno : -EIO;
                }
                got += (size_t)r;
            }
            ob_put(o, copy, got);
        }
        ob_put(o, st->sbuf, st->slen);
        ob_puts(o, "]}");
        if (o->err)
            break;
    }
    free(copy);
    ob_puts(o, "\n],\n\"shared\":{\"frames\":[");
    for (uint32_t i = 0; i < ss->ss_frames; i++) {
        const pt_cct_symbol_t *s = ex_sym(e, ss->ss_frame_sym[i]);
        ob_puts(o, i ? ",{\"name\":" : "{\"name\":");
        pt_ob_json(o, s->name);
        if (s->kind == PT_SYM_PY_FUNCTION) {
            ob_puts(o, ",\"file\":");
            pt_ob_json(o, s->file);
            ob_puts(o, ",\"line\":");
            ob_u64(o, s->line);
        }
        ob_putc(o, '}');
    }
    ob_puts(o, "]},\n\"name\":");
    const proc_t *p0 = pt_ex_first_selected(e);
    pt_ob_json(o, p0 && p0->command_line && p0->command_line[0] ? p0->command_line : "pytrace recording");
    ob_puts(o, ",\"activeProfileIndex\":0,\"exporter\":\"pytrace\"}\n");
    return o->err;
}

static int ss_init(ex_t *e)
{
    ss_t *ss = calloc(1, sizeof *ss);
    if (!ss)
        return -ENOMEM;
    ss->spill_fd = -1;
    e->ws = ss;
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
    ss->spill_fd = fd;
    return 0;
}

static void ss_destroy(ex_t *e)
{
    ss_t *ss = e->ws;
    if (ss->spill_fd >= 0)
        close(ss->spill_fd);
    for (uint32_t i = 0; i < ss->cap_thr; i++) {
        free(ss->thr[i].sbuf);
        free(ss->thr[i].blocks);
    }
    free(ss->thr);
    free(ss->frame);
    free(ss->ss_frame_sym);
}

static int ss_thread(ex_t *e, uint32_t index)
{
    ss_t *ss = e->ws;
    return ex_grow_fill((void **)&ss->thr, &ss->cap_thr, sizeof *ss->thr, index + 1, 0);
}

static int ss_open(ex_t *e, pt_walk_thread_t *wt, uint32_t sym, uint64_t at, int continued)
{
    (void)continued;
    ss_t *ss = e->ws;
    int rc = ss_frame_of(e, sym);
    if (rc)
        return rc;
    return ss_event(e, &ss->thr[wt->index], 'O', ss->frame[sym],
                    ticks_ns_since_base(&e->procs[thr_of(e, wt)->proc], at));
}

static int ss_close(ex_t *e, pt_walk_thread_t *wt, uint32_t sym, uint64_t start, uint64_t now)
{
    (void)start;
    ss_t *ss = e->ws;
    return ss_event(e, &ss->thr[wt->index], 'C', ss->frame[sym],
                    ticks_ns_since_base(&e->procs[thr_of(e, wt)->proc], now));
}

const ex_writer_t pt_ex_speedscope = {
    .defers = 1, .init = ss_init, .destroy = ss_destroy, .thread = ss_thread, .open = ss_open, .close = ss_close,
    .end = ss_end};
