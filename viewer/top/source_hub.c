/*
 * HubSource: a traced job read through its hub (pytrace-hub, viewer/hub/client.h),
 * used when the job's segment is held by a hub. The same messages as a
 * LiveSource, parsed and checked here; the figures (pt_reader_stats_t) are the
 * ones the stream says (the client keeps them). Events this view missed in
 * the hub's queue (its synthetic Lost records) are counted apart from the
 * job's drops: HubSource_missed().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source.h"
#include "viewer/hub/client.h"

typedef struct HubSource {
    Source base;
    pt_hub_client_t *client;
    SourceStatus status;
    int seen;        /* the first poll waited for the late joiner's state */
    char error[256]; /* sticky: the last client or parse error */
    Source_sink sink;
    void *sink_ctx;
} HubSource;

static int HubSource_onMessage(void *ctx, uint32_t type, const uint8_t *msg, size_t len)
{
    HubSource *hs = ctx;
    pt_fb_msg_t m;
    char why[128] = "";
    (void)type;
    if (pt_fb_parse(msg, len, &m, why, sizeof why)) {
        snprintf(hs->error, sizeof hs->error, "bad message from the hub (%s); the picture may be incomplete", why);
        return 0;
    }
    hs->sink(hs->sink_ctx, &m);
    return 0;
}

static long HubSource_poll(Source *src, Source_sink sink, void *ctx, size_t max_events)
{
    HubSource *hs = (HubSource *)src;
    if (hs->status.ended || hs->status.died || hs->status.disconnected)
        return 0;
    hs->sink = sink;
    hs->sink_ctx = ctx;
    /* the first poll waits a little: --once shows the job as it is now */
    long n = pt_hub_client_poll(hs->client, HubSource_onMessage, hs, max_events, hs->seen ? 0 : 200);
    hs->seen = 1;
    const char *e = pt_hub_client_error(hs->client);
    if (n < 0 && n != -EPIPE && n != -ECONNRESET)
        snprintf(hs->error, sizeof hs->error, "%s", e && *e ? e : strerror((int)-n));
    if (pt_hub_client_disconnected(hs->client)) {
        hs->status.disconnected = 1; /* this view's connection, not the job, ended */
        snprintf(hs->error, sizeof hs->error, "%s", e && *e ? e : "disconnected from the hub");
    } else if (pt_hub_client_finished(hs->client)) {
        pt_reader_stats_t st;
        pt_hub_client_stats(hs->client, &st);
        if (st.producer_state == PT_STATE_DEAD) {
            hs->status.died = 1;
            if (e && *e)
                snprintf(hs->error, sizeof hs->error, "%s", e);
        } else {
            hs->status.ended = 1;
        }
    }
    return n;
}

static void HubSource_stats(const Source *src, pt_reader_stats_t *out)
{
    pt_hub_client_stats(((const HubSource *)src)->client, out);
}

static void HubSource_status(const Source *src, SourceStatus *out) { *out = ((const HubSource *)src)->status; }

static const char *HubSource_error(const Source *src) { return ((const HubSource *)src)->error; }

static uint64_t HubSource_pending(const Source *src)
{
    (void)src;
    return 0;
}

static void HubSource_describe(const Source *src, char *out, size_t cap)
{
    (void)src;
    if (cap)
        out[0] = '\0';
}

static void HubSource_json(const Source *src, FILE *out)
{
    /* events this view missed in the hub's queue (told by Lost records, not in
     * events_dropped): events_read + this = what the job wrote while the view was there */
    fprintf(out, "  \"events_missed_in_hub\": %llu,\n",
            (unsigned long long)pt_hub_client_missed(((const HubSource *)src)->client));
}

static void HubSource_close(Source *src)
{
    HubSource *hs = (HubSource *)src;
    pt_hub_client_close(hs->client);
    free(hs);
}

static const SourceClass HubSource_class = {
    .name = "hub",
    .replay = 0,
    .poll = HubSource_poll,
    .stats = HubSource_stats,
    .status = HubSource_status,
    .error = HubSource_error,
    .pending = HubSource_pending,
    .describe = HubSource_describe,
    .json = HubSource_json,
    .close = HubSource_close,
};

uint64_t HubSource_missed(const Source *src)
{
    return src && src->cls == &HubSource_class ? pt_hub_client_missed(((const HubSource *)src)->client) : 0;
}

int HubSource_open(const char *target, Source **out, char *err, size_t errlen)
{
    HubSource *hs = calloc(1, sizeof *hs);
    if (!hs) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    hs->base.cls = &HubSource_class;
    int rc = pt_hub_client_connect(target, 0, &hs->client, err, errlen);
    if (rc) {
        free(hs);
        return rc;
    }
    *out = &hs->base;
    return 0;
}
