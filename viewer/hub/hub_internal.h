/*
 * pytrace-hub's parts (hub.c's design summary says how they work together):
 *   hub.c          main: the options, the job's segment, the socket, the loop, the end
 *   hub_args.c     the command line
 *   hub_tree.c     the segments: the job's and, with --subprocesses, its children's
 *                  (found in /dev/shm); draining them and the state a late reader needs
 *   hub_readers.c  the reader connections: queues, the budget, the welcome and the
 *                  state a reader is sent, sending
 * One thread: nothing here is shared with another thread.
 */
#ifndef PT_HUB_INTERNAL_H
#define PT_HUB_INTERNAL_H

#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "schema/pt_fb.h"
#include "shm/reader.h"
#include "viewer/core/walk.h"
#include "viewer/hub/proto.h"

#define DRAIN_EVENTS (1u << 16)              /* per segment and round */
#define DEFAULT_QUEUE_MIB 32u
#define DEFAULT_BUDGET_MIB 256u                /* all queues together (--budget-mib) */
#define DEFAULT_MAX_READERS 256u               /* readers at once (--max-readers) */
#define HELLO_TIMEOUT_NS 10000000000ull
#define FINISH_GRACE_NS 10000000000ull         /* after the end, a non-lossless reader that takes
                                                  nothing for this long is closed */

typedef struct blob {
    uint8_t *p;
    size_t len;
} blob_t;

typedef struct hseg {
    pt_reader_t *r;
    pt_walk_t *walk;
    char name[96];
    uint64_t pid;
    blob_t pinfo, status;
    blob_t *syms;
    size_t nsyms, capsyms;
    uint8_t *symkind; /* by id: 1 + SymbolKind, 0 unknown */
    uint32_t symkind_cap;
    int policy_wait;
    int finished;
    uint64_t start; /* the producer's start time (/proc, clock ticks), 0 if unknown */
    char link[PT_HUB_PATH_MAX]; /* the socket's hard link named after this segment */
} hseg_t;

typedef struct hthread {
    uint32_t seg;
    uint64_t number;
    blob_t start, end;
    int ended;
    uint64_t next_event;
    uint64_t producer_dropped;
} hthread_t;

enum { R_HELLO, R_LIVE };

typedef struct hreader {
    int fd;
    int state;
    pid_t pid;
    uint8_t hello[PT_HUB_HELLO_BYTES];
    size_t hello_got;
    uint64_t since_ns;
    uint64_t progress_ns; /* last time it took bytes */
    int lossless;
    uint8_t *q;
    size_t qstart, qend, qcap, bound;
    int overflow;
    size_t mark;      /* the first message boundary at or after qstart (the welcome, 64
                         bytes and no size prefix, is put first: mark starts past it) */
    int cut;          /* cut by the hub's budget: resync once its socket has drained */
    uint64_t overflows, missed_events, sent_bytes;
    size_t *sym_sent; /* per segment */
    uint8_t *pi_sent; /* per segment: its ProcessInfo was sent */
    size_t nseg;
    uint8_t *known;   /* per hub thread: ThreadStart seen, ThreadEnd not */
    uint64_t *missed, *missed_total;
    uint8_t *due;     /* per hub thread, what a cut discarded that the resync sends again:
                         DUE_LOST_COUNT, DUE_STACK */
    size_t nthr;
} hreader_t;

enum { DUE_LOST_COUNT = 1, DUE_STACK = 2 };

typedef struct hub {
    hseg_t *segs;
    size_t nsegs;
    hthread_t *threads;
    size_t nthreads, capthreads;
    hreader_t **readers;
    size_t nreaders, capreaders;
    int listen_fd;
    int spare_fd;             /* /dev/null, given up to accept and refuse a reader when no fd is left */
    char sock[PT_HUB_PATH_MAX];
    uint64_t root_pid;
    size_t default_bound;
    size_t budget;            /* --budget-mib: every queue's allocation together */
    unsigned max_readers;     /* --max-readers: connections at once */
    uint64_t budget_cuts, refused_full;
    unsigned hold;
    uint64_t hold_until_ns;
    unsigned welcomed;
    int quiet;
    char log[PT_HUB_PATH_MAX]; /* --detach: stderr goes here (removed at the end when empty) */
    uint64_t idle_exit_ns;    /* --idle-exit: end after this long without a reader (0: never) */
    uint64_t idle_since_ns;   /* when the last reader left (or the hub started) */
    uint64_t finished_ns;
    uint64_t events_drained, readers_served;
    uint8_t *scratch;
    size_t scratch_cap;
    /* process tree (--subprocesses) */
    int tree;                 /* tag every message with its process (segment index; 0 untagged) */
    uint64_t next_scan_ns;
    int shm_watch;            /* inotify on /dev/shm: a new segment is scanned for at once */
    uint64_t children_attached, children_failed;
    struct hfailed {
        char name[96];
        uint64_t first_ns;    /* first failed attach; retried for CHILD_RETRY_NS (a segment
                                 being created has no valid header yet) */
        int said;             /* given up on, counted and said */
    } *failed;
    size_t nfailed, capfailed;
    struct hother {
        char name[96];        /* a valid segment that is not the job's: never opened again */
    } *others;
    size_t nothers, capothers;
    char dir[PT_HUB_PATH_MAX];
    uint8_t *tagged;          /* a message tagged with its process */
    size_t tagged_cap;
} hub_t;

/* SIGTERM, SIGINT, SIGHUP: end (hub.c). */
extern volatile sig_atomic_t stop_requested;

/* ---- hub.c: shared helpers */
/* "pytrace-hub: " + the message on stderr, unless --quiet. */
void say(const hub_t *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- hub_args.c */
typedef struct hub_args {
    const char *target;
    double hold_timeout, wait_seconds;
    int detach;
} hub_args_t;
/* Parse argv into h's settings and a. Returns -1 to go on, else the exit status
 * (0 after --help or --version, 2 with the reason on stderr). */
int hub_parse_args(int argc, char **argv, hub_t *h, hub_args_t *a);

/* ---- hub_tree.c */
/* Attach the job's segment (target: a pid or a name), trying again for up to
 * wait_seconds while it is not there yet. 0, or -1 once said on stderr. */
int attach_root(hub_t *h, const char *target, double wait_seconds);
/* --subprocesses: watch /dev/shm, so a child's segment is attached as soon as
 * it appears (h->shm_watch, -1 if inotify is not there). */
void watch_shm(hub_t *h);
/* Read the watch's events: a new segment of ours makes the next round scan. */
void watch_read(hub_t *h);
/* Attach every segment of the job's tree not read yet. Returns how many. */
int scan_children(hub_t *h);
/* Children tried but neither read nor given up on yet (being created). */
int children_pending(const hub_t *h);
/* Every segment has ended and was read to its end. */
int all_finished(const hub_t *h);
/* Drain every segment once. Returns the events drained, or -1 on a fatal error. */
long drain(hub_t *h);
/* msg tagged with the segment's process number (h->tree), else msg; *len updated. */
const uint8_t *tag(hub_t *h, uint32_t seg, const uint8_t *msg, size_t *len);
/* h's scratch buffer of at least len bytes (8-aligned), NULL if out of memory. */
uint8_t *scratch(hub_t *h, size_t len);

/* ---- hub_readers.c */
/* Bytes queued for the reader, not sent yet. */
static inline size_t q_len(const hreader_t *r) { return r->qend - r->qstart; }
/* Accept every reader waiting: this uid only (SO_PEERCRED); past --max-readers, or
 * with no fd left, one is refused with its reason in the welcome, counted. */
void accept_readers(hub_t *h);
/* Read each reader's input (hello, close) as poll() said, dropping the gone. */
void readers_input(hub_t *h, const struct pollfd *pfd, size_t nfds, uint64_t now);
/* Send what each reader has queued, dropping the gone. */
void readers_flush(hub_t *h);
/* The end: close every reader that has everything (a stuck one after FINISH_GRACE_NS). */
void readers_close_finished(hub_t *h);
/* Close reader i and free it (why: said with its counts; NULL: silently); the
 * last reader takes its place. */
void reader_drop(hub_t *h, size_t i, const char *why);
/* Every message drained, to every reader (its queue, or counted as missed). */
void deliver(hub_t *h, uint32_t seg, const pt_fb_msg_t *m, const uint8_t *msg, size_t len, long ti);
/* May the hub drain now: --hold, --idle-exit without a reader, a lossless reader's full queue. */
int may_drain(const hub_t *h, uint64_t now);

#endif /* PT_HUB_INTERNAL_H */
