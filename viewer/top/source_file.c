/*
 * FileSource: a recording file (viewer/core/recfile.h), read in bounded steps
 * and followed while it grows. The reader's figures are rebuilt from the
 * messages (a recording holds what the reader handed out). Damage ends the
 * reading with everything before it shown; a recording that has not ended and
 * stops growing is taken as complete for now (stalled) unless followed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm/clock.h"
#include "source.h"
#include "text.h"
#include "viewer/core/recfile.h"

#define FILE_POLL_MAX_MESSAGES 4096u
/* A recording that has not ended and did not grow for this long is taken as
 * complete (without --follow): its writer stopped or is idle. */
#define FILE_STALL_NS 1000000000ull

typedef struct FileSource {
    Source base;
    pt_recfile_t *recfile;
    const char *path;
    int follow;              /* wait for the recording's end however long */
    SourceStatus status;
    uint64_t file_size_seen; /* growth detection */
    uint64_t file_grew_ns;   /* monotonic time the file last grew (or was opened) */
    pt_reader_stats_t stats; /* what the reader stats say, rebuilt from the file */
    char error[256];
} FileSource;

static void FileSource_damage(FileSource *fs)
{
    fs->status.damaged = 1;
    snprintf(fs->error, sizeof fs->error, "%s: %s (everything before it is shown)", fs->path,
             pt_recfile_error(fs->recfile));
}

/* Keep the reader-stats view of a recording up to date from one message. */
static void FileSource_note(FileSource *fs, const pt_fb_msg_t *m)
{
    pt_reader_stats_t *st = &fs->stats;
    st->messages++;
    switch (m->type) {
    case PT_MSG_PROCESS_INFO: st->pid = m->u.process_info.pid; break;
    case PT_MSG_SYMBOL: st->symbols_read++; break;
    case PT_MSG_THREAD_START: st->threads_seen++; st->threads_active++; break;
    case PT_MSG_THREAD_END: if (st->threads_active) st->threads_active--; break;
    case PT_MSG_EVENT_CHUNK:
        st->chunks_read++;
        st->events_read += m->u.event_chunk.count;
        break;
    case PT_MSG_PRODUCER_STATUS:
        st->producer_state = m->u.producer_status.state;
        st->producer_events_written = m->u.producer_status.events_written;
        st->producer_events_dropped = m->u.producer_status.events_dropped;
        st->hook_errors = m->u.producer_status.hook_errors;
        st->symbols_dropped = m->u.producer_status.symbols_dropped;
        st->threads_untraced = m->u.producer_status.threads_untraced;
        st->tracing_displaced = m->u.producer_status.tracing_displaced;
        st->events_untraced = m->u.producer_status.events_untraced;
        if (m->u.producer_status.unrecorded_events > st->unrecorded_events)
            st->unrecorded_events = m->u.producer_status.unrecorded_events;
        break;
    default: break;
    }
}

/* At the end of what is written: has the recording ended, stalled, or is it
 * still growing? */
static void FileSource_atEnd(FileSource *fs)
{
    uint64_t now = pt_monotonic_ns();
    if (pt_recfile_ended(fs->recfile)) {
        if (pt_recfile_finish(fs->recfile) == -EBADMSG) {
            FileSource_damage(fs); /* the writer finished, yet the file is torn: truncated */
            if (pt_recfile_last_state(fs->recfile) < PT_STATE_EXITED)
                return; /* its end is lost: DAMAGED, not ENDED */
        }
        if (pt_recfile_last_state(fs->recfile) == PT_STATE_DEAD) {
            fs->status.died = 1;
        } else {
            fs->status.ended = 1;
            fs->status.cut_short = pt_recfile_last_state(fs->recfile) != PT_STATE_EXITED;
        }
        fs->status.stalled = 0;
        return;
    }
    uint64_t size = pt_recfile_file_size(fs->recfile);
    if (size != fs->file_size_seen) {
        fs->file_size_seen = size;
        fs->file_grew_ns = now;
        fs->status.stalled = 0;
        return;
    }
    if (fs->follow || now - fs->file_grew_ns < FILE_STALL_NS)
        return;
    /* Not following and nothing new for a while: a torn tail is truncation.
     * A clean end is not damage; keep watching in case the writer resumes. */
    fs->status.stalled = 1;
    if (pt_recfile_finish(fs->recfile) == -EBADMSG)
        FileSource_damage(fs);
}

static long FileSource_poll(Source *src, Source_sink sink, void *ctx, size_t max_events)
{
    FileSource *fs = (FileSource *)src;
    if (SourceStatus_finished(&fs->status))
        return 0;
    long events = 0;
    for (unsigned i = 0; i < FILE_POLL_MAX_MESSAGES && (size_t)events < max_events; i++) {
        const uint8_t *msg;
        size_t len;
        pt_fb_msg_t m;
        int rc = pt_recfile_next(fs->recfile, &msg, &len, &m);
        if (rc == 1) {
            FileSource_note(fs, &m);
            if (m.type == PT_MSG_EVENT_CHUNK)
                events += (long)m.u.event_chunk.count;
            sink(ctx, &m);
            fs->status.stalled = 0;
            continue;
        }
        if (rc == -EBADMSG) {
            FileSource_damage(fs);
        } else if (rc < 0) {
            snprintf(fs->error, sizeof fs->error, "%s: %s", fs->path, pt_recfile_error(fs->recfile));
            return rc;
        } else {
            if (fs->error[0] && !fs->status.damaged)
                fs->error[0] = 0; /* an I/O error went away */
            FileSource_atEnd(fs);
        }
        break;
    }
    return events;
}

static void FileSource_stats(const Source *src, pt_reader_stats_t *out) { *out = ((const FileSource *)src)->stats; }

static void FileSource_status(const Source *src, SourceStatus *out) { *out = ((const FileSource *)src)->status; }

static const char *FileSource_error(const Source *src) { return ((const FileSource *)src)->error; }

static uint64_t FileSource_pending(const Source *src) { return pt_recfile_pending(((const FileSource *)src)->recfile); }

static void FileSource_describe(const Source *src, char *out, size_t cap)
{
    const FileSource *fs = (const FileSource *)src;
    char esc[260];
    const char *base = strrchr(fs->path, '/'); /* the whole path is in the error lines */
    Text_escape(base && base[1] ? base + 1 : fs->path, esc, sizeof esc);
    snprintf(out, cap, "file %s  ", esc);
}

static void FileSource_json(const Source *src, FILE *out)
{
    const FileSource *fs = (const FileSource *)src;
    char path[2048];
    Text_json(fs->path, path, sizeof path);
    fprintf(out,
            "  \"file\": \"%s\",\n  \"recording_ended\": %s,\n  \"lossless\": %s,\n  \"messages_read\": %llu,\n"
            "  \"bytes_read\": %llu,\n  \"error_offset\": %lld,\n",
            path, fs->status.ended || fs->status.died ? "true" : "false",
            pt_recfile_flags(fs->recfile) & PT_RECFILE_FLAG_LOSSLESS ? "true" : "false",
            (unsigned long long)pt_recfile_messages(fs->recfile), (unsigned long long)pt_recfile_offset(fs->recfile),
            fs->status.damaged ? (long long)pt_recfile_error_offset(fs->recfile) : -1LL);
}

static void FileSource_close(Source *src)
{
    FileSource *fs = (FileSource *)src;
    pt_recfile_close(fs->recfile);
    free(fs);
}

static const SourceClass FileSource_class = {
    .name = "file",
    .replay = 1,
    .poll = FileSource_poll,
    .stats = FileSource_stats,
    .status = FileSource_status,
    .error = FileSource_error,
    .pending = FileSource_pending,
    .describe = FileSource_describe,
    .json = FileSource_json,
    .close = FileSource_close,
};

int FileSource_open(const char *path, int follow, Source **out, char *err, size_t errlen)
{
    FileSource *fs = calloc(1, sizeof *fs);
    if (!fs) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    fs->base.cls = &FileSource_class;
    fs->path = path;
    fs->follow = follow;
    fs->file_grew_ns = pt_monotonic_ns();
    int rc = pt_recfile_open(path, &fs->recfile, err, errlen);
    if (rc) {
        free(fs);
        return rc;
    }
    *out = &fs->base;
    return 0;
}
