/*
 * pt_export's Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing):
 * one "X" event per call, written as it closes (the driver clamps a thread's
 * timestamps to be non-decreasing, so slices nest), "i" events for marks and
 * gaps, "C" events of each thread's CPU usage counter (CpuTime records), and
 * "M" events naming the processes (the first one opens the array) and, at the
 * end, the threads. Each process has its own track: pid = its
 * real pid, or (number << 22) | pid when another process of the stream has
 * that pid already (above Linux's pid_max).
 */
#define _POSIX_C_SOURCE 200809L
#include "export_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "grow_internal.h"

typedef struct chrome {
    char **head;   /* per symbol: its "X" event's opening (NULL: not made yet) */
    uint32_t cap_head;
} chrome_t;

static const char *chrome_head(ex_t *e, uint32_t sym)
{
    chrome_t *c = e->ws;
    if (sym < c->cap_head && c->head[sym])
        return c->head[sym];
    if (ex_grow_fill((void **)&c->head, &c->cap_head, sizeof *c->head, sym + 1, 0))
        return NULL;
    const pt_cct_symbol_t *s = ex_sym(e, sym);
    obuf_t m = {.fd = -1, .cap = 256 + 6 * (strlen(s->name) + strlen(s->file))};
    m.buf = malloc(m.cap);
    if (!m.buf)
        return NULL;
    ob_puts(&m, ",\n{\"ph\":\"X\",\"cat\":\"");
    ob_puts(&m, s->kind == PT_SYM_PY_FUNCTION ? "python" : s->kind == PT_SYM_C_FUNCTION ? "c" : "span");
    ob_puts(&m, "\",\"name\":");
    pt_ob_json(&m, s->name);
    if (s->kind != PT_SYM_LABEL) {
        ob_puts(&m, ",\"args\":{\"file\":");
        pt_ob_json(&m, s->file);
        ob_puts(&m, ",\"line\":");
        ob_u64(&m, s->line);
        ob_putc(&m, '}');
    }
    ob_puts(&m, ",\"pid\":");
    ob_u64(&m, (uint64_t)e->procs[s->proc].shown_pid);
    ob_putc(&m, 0);
    c->head[sym] = m.buf;
    return m.buf;
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
    char label[1400];
    pt_ex_process_label(p, label, sizeof label);
    const char *cl = label[0] ? label : "python";
    size_t n = strlen(cl) + strlen(tail) + 1;
    char *name = malloc(n);
    if (name) {
        snprintf(name, n, "%s%s", cl, tail);
        pt_ob_json(o, name);
        free(name);
    } else {
        pt_ob_json(o, "python");
    }
    ob_puts(o, "}}");
}

static void chrome_instant_arg(ex_t *e, thr_t *t, const char *cat, const char *name, uint64_t ticks,
                               const char *arg, int64_t value)
{
    obuf_t *o = &e->out;
    ob_puts(o, ",\n{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"");
    ob_puts(o, cat);
    ob_puts(o, "\",\"name\":");
    pt_ob_json(o, name);
    ob_puts(o, ",\"pid\":");
    ob_u64(o, (uint64_t)e->procs[t->proc].shown_pid);
    ob_puts(o, ",\"tid\":");
    ob_u64(o, t->number);
    ob_puts(o, ",\"ts\":");
    ob_us3(o, chrome_ns(&e->procs[t->proc], ticks));
    if (value >= 0) {
        ob_puts(o, ",\"args\":{\"");
        ob_puts(o, arg);
        ob_puts(o, "\":");
        ob_i64(o, value);
        ob_putc(o, '}');
    }
    ob_putc(o, '}');
}

static void chrome_instant(ex_t *e, thr_t *t, const char *cat, const char *name, uint64_t ticks, int64_t count)
{
    chrome_instant_arg(e, t, cat, name, ticks, "count", count);
}

static int chrome_end(ex_t *e, const pt_walk_counters_t *wc)
{
    obuf_t *o = &e->out;
    for (uint32_t i = 0; i < e->nprocs; i++) /* processes without a ProcessInfo */
        if (e->procs[i].selected && e->procs[i].seen && !e->procs[i].described)
            chrome_process(e, &e->procs[i], 0);
    for (uint32_t i = 0; i < e->nthr; i++) {
        thr_t *t = &e->thr[i];
        char nb[40];
        const char *tn = pt_ex_thread_name(t, nb, sizeof nb);
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
        pt_ob_json(o, name);
        ob_puts(o, "}}");
        free(name);
    }
    ob_puts(o, "\n],\"otherData\":{\"exporter\":\"pytrace\",\"events\":");
    ob_u64(o, wc->events);
    ob_puts(o, ",\"lost_events\":");
    ob_u64(o, wc->lost);
    const proc_t *p0 = pt_ex_first_selected(e);
    if (p0) {
        ob_puts(o, ",\"python_version\":");
        pt_ob_json(o, p0->python_version);
        ob_puts(o, ",\"command_line\":");
        pt_ob_json(o, p0->command_line);
    }
    ob_puts(o, "}}\n");
    return o->err;
}

static int chrome_init(ex_t *e)
{
    e->ws = calloc(1, sizeof(chrome_t));
    return e->ws ? 0 : -ENOMEM;
}

static void chrome_destroy(ex_t *e)
{
    chrome_t *c = e->ws;
    for (uint32_t i = 0; i < c->cap_head; i++)
        free(c->head[i]);
    free(c->head);
}

/* The output's beginning: the processes known so far (p's opens the array). */
static int chrome_begin(ex_t *e, proc_t *p)
{
    chrome_process(e, p, 1);
    for (uint32_t i = 0; i < e->nprocs; i++)
        if (&e->procs[i] != p && e->procs[i].selected && e->procs[i].seen && e->procs[i].have_pinfo)
            chrome_process(e, &e->procs[i], 0);
    return 0;
}

static int chrome_process_info(ex_t *e, proc_t *p)
{
    chrome_process(e, p, 0);
    return 0;
}

/* A symbol announced again: its head is made anew. */
static void chrome_symbol(ex_t *e, uint32_t sym)
{
    chrome_t *c = e->ws;
    if (sym < c->cap_head) {
        free(c->head[sym]);
        c->head[sym] = NULL;
    }
}

static int chrome_close(ex_t *e, pt_walk_thread_t *wt, uint32_t sym, uint64_t start, uint64_t now)
{
    const char *head = chrome_head(e, sym);
    if (!head)
        return -ENOMEM;
    thr_t *t = thr_of(e, wt);
    obuf_t *o = &e->out;
    const proc_t *p = &e->procs[t->proc];
    if (e->filter && !pt_ex_passes(e, p, start, now)) {
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
    return o->err;
}

static int chrome_mark(ex_t *e, pt_walk_thread_t *wt, uint32_t id, uint64_t now, unsigned flags)
{
    thr_t *t = thr_of(e, wt);
    uint32_t s = pt_cct_sym(e->cct, t->proc, id);
    if (s == NONE)
        return -ENOMEM;
    if (flags & PT_EVF_STEP) /* the end of step N of the thread's loop: cat "step", args.step N */
        chrome_instant_arg(e, t, "step", ex_sym(e, s)->name, now, "step", (int64_t)(t->steps & INT64_MAX));
    else
        chrome_instant(e, t, "mark", ex_sym(e, s)->name, now, -1);
    return 0;
}

static int chrome_gap(ex_t *e, pt_walk_thread_t *wt, uint64_t now, uint64_t lost)
{
    char name[64];
    const uint8_t f = wt->lost_flags;
    snprintf(name, sizeof name, "lost %llu events%s", (unsigned long long)lost,
             f & PT_EVF_LOST_NO_RING         ? " (no ring)"
             : f & PT_EVF_LOST_WAIT_TIMEOUT ? " (wait timed out)"
             : f & PT_EVF_LOST_NO_ROOM      ? " (no room in /dev/shm)"
             : f & PT_EVF_SYNTHETIC         ? " (the reader fell behind)"
                                            : "");
    chrome_instant(e, thr_of(e, wt), "pytrace", name, now, (int64_t)(lost & INT64_MAX));
    return 0;
}

/* The thread ran on a CPU at `rate` (the CPU ns over the wall ns between two
 * CpuTime records) from `from` to `to`: a "C" event of its own counter,
 * "CPU usage (thread N)" (N its tid field; counters are per process in this
 * format), set at the interval's start; rate < 0: it ended at `to` (0). */
static int chrome_cpu_rate(ex_t *e, uint32_t index, uint64_t from, uint64_t to, double rate)
{
    const thr_t *t = &e->thr[index];
    obuf_t *o = &e->out;
    ob_puts(o, ",\n{\"ph\":\"C\",\"name\":\"CPU usage (thread ");
    ob_u64(o, t->number);
    ob_puts(o, ")\",\"pid\":");
    ob_u64(o, (uint64_t)e->procs[t->proc].shown_pid);
    ob_puts(o, ",\"tid\":");
    ob_u64(o, t->number);
    ob_puts(o, ",\"ts\":");
    ob_us3(o, chrome_ns(&e->procs[t->proc], rate < 0 ? to : from));
    char v[32];
    snprintf(v, sizeof v, "%.4f", rate < 0 ? 0.0 : rate);
    ob_puts(o, ",\"args\":{\"cpu\":");
    ob_puts(o, v);
    ob_puts(o, "}}");
    return o->err;
}

const ex_writer_t pt_ex_chrome = {
    .init = chrome_init, .destroy = chrome_destroy, .begin = chrome_begin, .process = chrome_process_info,
    .symbol = chrome_symbol, .close = chrome_close, .instant = chrome_mark, .gap = chrome_gap,
    .cpu_rate = chrome_cpu_rate, .end = chrome_end};
