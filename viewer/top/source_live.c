/*
 * LiveSource: a traced job's shared-memory segment, read with the reader
 * library (shm/reader.h). The reader hands out raw messages; they are parsed
 * (and checked) here, and a bad one is skipped with an error line rather than
 * ending the view.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source.h"

typedef struct LiveSource {
    Source base;
    pt_reader_t *reader;
    SourceStatus status;
    uint64_t parse_errors;
    char error[256]; /* sticky: the last reader or parse error */
    /* the poll in progress */
    Source_sink sink;
    void *sink_ctx;
} LiveSource;

static int LiveSource_onMessage(void *ctx, uint32_t type, const uint8_t *msg, size_t len)
{
    LiveSource *ls = ctx;
    pt_fb_msg_t m;
    char why[128] = "";
    (void)type;
    if (pt_fb_parse(msg, len, &m, why, sizeof why)) {
        ls->parse_errors++;
        snprintf(ls->error, sizeof ls->error, "bad message from the reader (%s); the picture may be incomplete", why);
        return 0; /* skip it, keep reading */
    }
    ls->sink(ls->sink_ctx, &m);
    return 0;
}

static long LiveSource_poll(Source *src, Source_sink sink, void *ctx, size_t max_events)
{
    LiveSource *ls = (LiveSource *)src;
    if (ls->status.ended || ls->status.died)
        return 0;
    ls->sink = sink;
    ls->sink_ctx = ctx;
    long n = pt_reader_poll(ls->reader, LiveSource_onMessage, ls, max_events);
    const char *e = pt_reader_error(ls->reader);
    if (n == -EPIPE)
        ls->status.died = 1;
    else if (n < 0)
        snprintf(ls->error, sizeof ls->error, "%s", e && *e ? e : strerror((int)-n));
    else if (e && *e)
        snprintf(ls->error, sizeof ls->error, "%s", e);
    if (pt_reader_finished(ls->reader)) {
        pt_reader_stats_t st;
        pt_reader_stats(ls->reader, &st);
        if (st.producer_state == PT_STATE_DEAD)
            ls->status.died = 1;
        else
            ls->status.ended = 1;
    }
    return n;
}

static void LiveSource_stats(const Source *src, pt_reader_stats_t *out)
{
    pt_reader_stats(((const LiveSource *)src)->reader, out);
}

static void LiveSource_status(const Source *src, SourceStatus *out) { *out = ((const LiveSource *)src)->status; }

static const char *LiveSource_error(const Source *src) { return ((const LiveSource *)src)->error; }

static uint64_t LiveSource_pending(const Source *src)
{
    (void)src;
    return 0; /* the reader drains all there is in one poll (up to its event limit) */
}

static void LiveSource_describe(const Source *src, char *out, size_t cap)
{
    (void)src;
    if (cap)
        out[0] = '\0'; /* the header's pid names the job */
}

static void LiveSource_json(const Source *src, FILE *out)
{
    (void)src;
    (void)out;
}

static void LiveSource_close(Source *src)
{
    LiveSource *ls = (LiveSource *)src;
    pt_reader_detach(ls->reader, 1); /* a finished job's segment is spent once read: remove it */
    free(ls);
}

static const SourceClass LiveSource_class = {
    .name = "live",
    .replay = 0,
    .poll = LiveSource_poll,
    .stats = LiveSource_stats,
    .status = LiveSource_status,
    .error = LiveSource_error,
    .pending = LiveSource_pending,
    .describe = LiveSource_describe,
    .json = LiveSource_json,
    .close = LiveSource_close,
};

int LiveSource_open(const char *target, Source **out, char *err, size_t errlen)
{
    LiveSource *ls = calloc(1, sizeof *ls);
    if (!ls) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    ls->base.cls = &LiveSource_class;
    int rc = pt_reader_attach(target, 0, &ls->reader, err, errlen);
    if (rc) {
        free(ls);
        return rc;
    }
    *out = &ls->base;
    return 0;
}
