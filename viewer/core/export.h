/*
 * pt_export: a recording file to the formats other tools read, in C, with
 * bounded memory. Driven by the walk (walk.h) over the recording reader
 * (recfile.h); `pytrace export` calls it through the extension. No Python.
 *
 * Formats (what each holds is in export.c's opening comment and the README):
 *   PT_EXPORT_COLLAPSED   folded stacks, self ns (or calls, or CPU ns) per stack;
 *                         time inside Lost gaps as a "<not observed>" stack
 *   PT_EXPORT_PSTATS      a marshal file pstats.Stats loads (cProfile's keys), in
 *                         wall or CPU time; time inside Lost gaps in no row
 *   PT_EXPORT_SPEEDSCOPE  speedscope evented profiles, one per (process, thread)
 *   PT_EXPORT_CHROME      Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing),
 *                         a "C" counter of each thread's CPU usage
 *   PT_EXPORT_PERFETTO    Perfetto's protobuf trace (TrackEvent; ui.perfetto.dev),
 *                         a "CPU usage" counter track under each thread's track
 *
 * Memory: collapsed and pstats keep one node per calling context; Chrome keeps
 * the open stacks; Perfetto the open stacks, a bit per (thread, symbol) and a
 * 1 MiB batch of packets (zlib-compressed unless pf_uncompressed); speedscope spills each thread's events to an unlinked
 * temporary file (in opts.tmp_dir) and copies them out at the end.
 *
 * Errors: 0, or a negative errno (-ENOMEM; -EINTR when progress() asked to
 * stop; -EPIPE and other write(2) errors of the output; -EFBIG past
 * opts.max_bytes; -EINVAL for options).
 * Damage in the recording is not an error of the call: everything before it
 * is exported, and res->damaged, res->error and res->error_offset say where.
 */
#ifndef PT_VIEWER_EXPORT_H
#define PT_VIEWER_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "schema/pt_fb.h"

#ifdef __cplusplus
extern "C" {
#endif

enum pt_export_format {
    PT_EXPORT_COLLAPSED = 1,
    PT_EXPORT_PSTATS,
    PT_EXPORT_SPEEDSCOPE,
    PT_EXPORT_CHROME,
    PT_EXPORT_PERFETTO,
};

typedef struct pt_export_opts {
    int format;              /* enum pt_export_format */
    int weight_calls;        /* collapsed: weight = calls instead of self ns */
    int per_thread;          /* collapsed: a "thread NAME (tid N)" root frame per thread */
    int qualnames;           /* pstats: pytrace's qualified names instead of cProfile's keys */
    int follow;              /* read a file still being written, until the job ends */
    double timeout;          /* follow: give up after this many seconds without new data */
    int pf_uncompressed;     /* perfetto: plain packets, no compressed_packets batches */
    const char *tmp_dir;     /* speedscope spill file directory (NULL: the output's, else /tmp) */
    /* Only the processes with these pids (a multi-process stream, walk.h
     * PROCESSES); npids 0: every process. */
    const uint64_t *pids;
    size_t npids;
    /* Refuse to write more than this many bytes: the export stops with -EFBIG
     * and res->size_limited set (0: no limit). */
    uint64_t max_bytes;
    /* collapsed: stacks deeper than this many frames are cut there, what ran
     * below added up under a "[deeper frames]" marker (0: no limit). */
    uint32_t max_depth;
    /* chrome, speedscope, perfetto: only calls that overlap [from_ns, to_ns]
     * (ns since the recording's start; to_ns 0: its end) and last at least
     * min_duration_ns; the others are counted in res->calls_left_out. */
    int64_t from_ns, to_ns, min_duration_ns;
    /* collapsed, pstats: the call tree's memory budget in bytes (0: 256 MiB,
     * pt_agg's default): past it, new call paths fold into [other] nodes
     * (viewer/core/cct.h); pstats' function rows stay exact, the callers of a
     * folded call are not kept. */
    uint64_t tree_budget;
    /* collapsed, pstats: CPU time instead of wall time (the rule of cct.h,
     * pt_cct_cpu: each thread's CpuTime records share its CPU time among what
     * ran between them by wall time); weight_calls excludes it. */
    int cpu_time;
    /* Called every few thousand messages and while waiting; non-zero stops
     * the export with -EINTR. May be NULL. */
    int (*progress)(void *ctx);
    void *progress_ctx;
} pt_export_opts_t;

#define PT_EXPORT_MAX_PIDS 64

typedef struct pt_export_result {
    uint64_t events;
    uint64_t lost;           /* sum of Lost record counts (gaps marked in the stream): dropped */
    uint64_t lost_wait_timeout, lost_no_room; /* ... of them, by cause (the rest: a full ring, policy drop) */
    uint64_t lost_no_ring;   /* LostNoRing counts: events of threads without a ring (not in lost) */
    uint64_t unmatched;      /* returns (and span ends) without a matching open entry */
    uint64_t unannounced;    /* events naming a symbol never announced: damage (walk.h), shown as
                                "<unknown #id>" */
    uint64_t threads;
    uint64_t symbols;
    uint64_t messages;
    int damaged;             /* the recording is damaged from error_offset on */
    int timed_out;           /* follow: nothing new came for `timeout` seconds */
    int64_t error_offset;
    char error[512];         /* the damage, one line, without the "damaged at" prefix */
    int have_status;
    pt_fb_producer_status_t status; /* the last ProducerStatus; several processes: each one's
                                       last, counters added, the least advanced state */
    uint64_t bytes_written;
    int size_limited;            /* stopped at opts.max_bytes (rc -EFBIG) */
    uint64_t calls_left_out;     /* opts.from_ns/to_ns/min_duration_ns left them out */
    uint64_t stacks_folded;      /* collapsed: calling contexts below opts.max_depth */
    uint32_t deepest;            /* collapsed: the deepest stack, in frames */
    uint64_t tree_budget;        /* the call tree's budget in bytes (opts.tree_budget or its default) */
    uint64_t folded_calls;       /* collapsed, pstats: calls folded into [other] nodes past it */
    /* collapsed, pstats: thread time nobody saw (inside Lost gaps: cct.h,
     * pt_cct_gap), in no function; collapsed shows it as <not observed>. */
    uint64_t unobserved_ns;
    uint64_t unobserved_cpu_ns;  /* ... the CPU time of it (CpuTime records) */
    uint64_t unobserved_lost;    /* the events of those gaps: Lost record counts, LostNoRing's too */
    uint64_t unobserved_no_ring; /* ... of them LostNoRing's (threads without a ring: untraced) */
    uint64_t cpu_records;        /* CpuTime records read (0: a recording without CPU time) */
    uint64_t span_ns;            /* the exported processes' wall span: the earliest start
                                    (ProcessInfo) to the latest tick */
    uint32_t processes;          /* in the stream (Message.process numbers seen) */
    uint32_t selected_processes; /* exported (opts.pids) */
    uint32_t npids;              /* pids of the first PT_EXPORT_MAX_PIDS processes with a ProcessInfo */
    uint64_t pids[PT_EXPORT_MAX_PIDS];
} pt_export_result_t;

/* Export `recording` to the open file descriptor out_fd (not closed). */
int pt_export_file(const char *recording, int out_fd, const pt_export_opts_t *opts, pt_export_result_t *res);

#ifdef __cplusplus
}
#endif

#endif /* PT_VIEWER_EXPORT_H */
