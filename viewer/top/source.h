/*
 * Where pytrace-top's stream comes from: a Source is a small vtable (htop's
 * Panel shape) that hands out parsed messages (viewer/core's pt_fb_msg_t, the
 * size-prefixed FlatBuffers messages of schema/) and says how far the stream
 * is. The rest of pytrace-top (drawing, --once, --json) is written once
 * against these operations; a new kind of source is a new SourceClass in its
 * own file and one more constructor here.
 *
 *   LiveSource   a job's shared-memory segment, through the reader library
 *                (shm/reader.h)            source_live.c
 *   FileSource   a recording file (viewer/core/recfile.h), followed while it
 *                grows                      source_file.c
 *   HubSource    a job read through its hub (viewer/hub/client.h), when a hub
 *                holds the segment          source_hub.c
 *
 * Who calls what: one thread (pytrace-top's main loop); a source is not shared.
 * Errors are the source's own lines (error()); what the caller does with a
 * message (aggregating it) reports its own errors.
 */
#ifndef PT_TOP_SOURCE_H
#define PT_TOP_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "schema/pt_fb.h"
#include "shm/reader.h"

/* How far the stream is. Several flags may hold at once (a recording can end
 * and be torn at its end); pytrace-top shows them in this order. */
typedef struct SourceStatus {
    int died;      /* the job is gone without a clean exit; all of it is read */
    int ended;     /* the stream ended (the job exited, or its recording was closed) and all of it is read */
    int cut_short; /* with ended: the stream ended while the job still ran (a recording stopped first) */
    int damaged;   /* bad bytes: everything before them was handed out, nothing after them will be */
    int stalled;   /* not ended and nothing new for a while (a recording's writer stopped or is idle) */
    int disconnected; /* the hub closed this view's stream before the job's end: not the job's
                         death (the job may still run); nothing more comes */
} SourceStatus;

/* Nothing more will come from a source with this status. */
static inline int SourceStatus_finished(const SourceStatus *st)
{
    return st->ended || st->died || st->damaged || st->disconnected;
}

/* Receives each message a poll reads, in stream order. */
typedef void (*Source_sink)(void *ctx, const pt_fb_msg_t *msg);

typedef struct Source Source;

typedef struct SourceClass {
    const char *name; /* "live", "file" */
    /* 1: a recording, read at its own pace rather than as it happens: its
     * figures are counts rather than rates, it has no CPU figures, and its
     * end is the recording's end (its window is its last seconds). */
    int replay;
    /* Read what is there now, at most max_events events (and a bounded number
     * of messages, so keys stay live), handing each message to sink. Returns
     * the events read (0: nothing now, or nothing will come once finished), or
     * a negative errno: -EPIPE when the job died, others for an error that may
     * go away (error() says what; the caller tries again later). */
    long (*poll)(Source *src, Source_sink sink, void *ctx, size_t max_events);
    /* The reader's figures (shm/reader.h's pt_reader_stats_t): events read,
     * the producer's totals, losses. A source that is not a reader fills what
     * its stream said. */
    void (*stats)(const Source *src, pt_reader_stats_t *out);
    void (*status)(const Source *src, SourceStatus *out);
    /* The source's error as one line ("" if none): sticky for a live job, gone
     * again for a recording whose I/O error went away. */
    const char *(*error)(const Source *src);
    /* Bytes known to be there past what was read (0 if none or not known). */
    uint64_t (*pending)(const Source *src);
    /* The header's prefix naming the source ("file rec.pt  ", escaped), or "". */
    void (*describe)(const Source *src, char *out, size_t cap);
    /* --json: the source's own fields, each `  "key": value,` on its own line. */
    void (*json)(const Source *src, FILE *out);
    /* Let go and free. A live job's segment that was read to the end after
     * the job finished is spent and removed. */
    void (*close)(Source *src);
} SourceClass;

struct Source {
    const SourceClass *cls;
};

/* Attach to a traced job: a pid or a segment name. 0, or a negative errno
 * with the reason in err. */
int LiveSource_open(const char *target, Source **out, char *err, size_t errlen);

/* Read a traced job through the hub that holds its segment (pytrace-hub):
 * -ENOENT/-ENXIO when no hub holds it (the caller keeps the segment's own
 * "being read by" error). */
int HubSource_open(const char *target, Source **out, char *err, size_t errlen);
/* Events a HubSource missed in the hub's queue (0 for any other source). */
uint64_t HubSource_missed(const Source *src);

/* Open a recording. follow: wait for its end however long it is idle (else a
 * recording that has not ended and stops growing for a second is stalled). */
int FileSource_open(const char *path, int follow, Source **out, char *err, size_t errlen);

static inline long Source_poll(Source *s, Source_sink sink, void *ctx, size_t max_events)
{
    return s->cls->poll(s, sink, ctx, max_events);
}
static inline void Source_stats(const Source *s, pt_reader_stats_t *out) { s->cls->stats(s, out); }
static inline void Source_status(const Source *s, SourceStatus *out) { s->cls->status(s, out); }
static inline const char *Source_error(const Source *s) { return s->cls->error(s); }
static inline uint64_t Source_pending(const Source *s) { return s->cls->pending(s); }
static inline void Source_describe(const Source *s, char *out, size_t cap) { s->cls->describe(s, out, cap); }
static inline void Source_json(const Source *s, FILE *out) { s->cls->json(s, out); }
static inline void Source_close(Source *s)
{
    if (s)
        s->cls->close(s);
}

#endif /* PT_TOP_SOURCE_H */
