/*
 * tests/unit/reader: the reader library end to end, against real segments and
 * real producer processes (fork).
 *
 *   clean_exit      several producer threads (and rings reused by later
 *                   threads) intern symbols continuously while the reader
 *                   polls; every message verifies; symbols precede their use;
 *                   ThreadStart/ThreadEnd bracket each thread; every event
 *                   arrives once, in order; EXITED last; finished = 1
 *   producer_killed SIGKILL after publishing: everything is read, then -EPIPE
 *   reader_killed   a reader is killed; a new one takes over the lock and
 *                   continues exactly where the first stopped
 *   bad_symbol_id   a record naming an id the log never held: clear error
 *   bad_kind        a record with kind 0: clear error
 *   bad_symlog      a corrupt symbol log record: error with its offset
 *   bad_chunk       corrupt chunk length / first_event: clear error
 *
 * Usage: test_reader [dump-file]  (the clean_exit stream is written there for
 * the stock C++ verifier test)
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../check.h"
#include "schema/pt_fb.h"
#include "shm/reader.h"
#include "shm/segment.h"
#include "shm/symlog.h"


static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* ---- a stream checker ------------------------------------------------------ */

#define MAX_THREADS 64

typedef struct thr {
    int started, ended;
    uint64_t next;   /* expected first_event of the next chunk */
    int next_known;  /* for a takeover, set by the test */
} thr_t;

typedef struct coll {
    uint64_t messages;
    uint64_t events;
    uint32_t max_symbol;
    uint32_t last_type;
    uint32_t last_status;
    uint32_t status_changes;
    uint64_t lost_total;     /* last LostCount.dropped_total */
    uint64_t status_written; /* last ProducerStatus.events_written */
    uint64_t status_dropped; /* last ProducerStatus.events_dropped */
    uint64_t lost_records;   /* sum of the counts of Lost records */
    int saw_info;
    int check_ticks;   /* producer wrote ticks = position in its stream */
    int errors;
    thr_t thr[MAX_THREADS];
    FILE *dump;
} coll_t;

#define CERR(c, ...)                                                                   \
    do {                                                                               \
        if ((c)->errors++ < 10)                                                        \
            fprintf(stderr, __VA_ARGS__);                                              \
    } while (0)

static int on_msg(void *ctx, uint32_t type, const uint8_t *msg, size_t len)
{
    coll_t *c = ctx;
    pt_fb_msg_t m;
    char why[128];
    if (c->dump)
        REQUIRE(fwrite(msg, 1, len, c->dump) == len);
    if (pt_fb_parse(msg, len, &m, why, sizeof why) != 0) {
        CERR(c, "message %llu does not parse: %s\n", (unsigned long long)c->messages, why);
        return 0;
    }
    if (m.type != type)
        CERR(c, "callback type %u but message says %u\n", type, m.type);
    if (c->messages++ == 0 && type != PT_MSG_PROCESS_INFO)
        CERR(c, "first message has type %u, not ProcessInfo\n", type);
    c->last_type = type;
    switch (type) {
    case PT_MSG_PROCESS_INFO:
        c->saw_info = 1;
        break;
    case PT_MSG_SYMBOL:
        if (m.u.symbol.id != c->max_symbol + 1)
            CERR(c, "symbol id %u after %u\n", m.u.symbol.id, c->max_symbol);
        c->max_symbol = m.u.symbol.id;
        break;
    case PT_MSG_THREAD_START: {
        uint64_t t = m.u.thread_start.thread;
        if (t == 0 || t >= MAX_THREADS || c->thr[t].started)
            CERR(c, "ThreadStart for thread %llu twice or out of range\n", (unsigned long long)t);
        else
            c->thr[t].started = 1;
        break;
    }
    case PT_MSG_THREAD_END: {
        uint64_t t = m.u.thread_end.thread;
        if (t == 0 || t >= MAX_THREADS || !c->thr[t].started || c->thr[t].ended)
            CERR(c, "ThreadEnd for thread %llu without ThreadStart, or twice\n", (unsigned long long)t);
        else if (m.u.thread_end.events_written != c->thr[t].next)
            CERR(c, "ThreadEnd thread %llu: %llu written, %llu read\n", (unsigned long long)t,
                 (unsigned long long)m.u.thread_end.events_written, (unsigned long long)c->thr[t].next);
        else
            c->thr[t].ended = 1;
        break;
    }
    case PT_MSG_EVENT_CHUNK: {
        const pt_fb_event_chunk_t *ec = &m.u.event_chunk;
        uint64_t t = ec->thread;
        if (t == 0 || t >= MAX_THREADS || !c->thr[t].started || c->thr[t].ended) {
            CERR(c, "EventChunk of thread %llu outside ThreadStart/ThreadEnd\n", (unsigned long long)t);
            break;
        }
        thr_t *th = &c->thr[t];
        if (!th->next_known) {
            th->next = ec->first_event;
            th->next_known = 1;
        }
        if (ec->first_event != th->next)
            CERR(c, "thread %llu: chunk starts at %llu, expected %llu (gap or duplicate)\n", (unsigned long long)t,
                 (unsigned long long)ec->first_event, (unsigned long long)th->next);
        for (uint32_t k = 0; k < ec->count; k++) {
            const pt_event_t *e = &ec->events[k];
            if (c->check_ticks && e->ticks != ec->first_event + k) {
                CERR(c, "thread %llu event %llu has ticks %llu\n", (unsigned long long)t,
                     (unsigned long long)(ec->first_event + k), (unsigned long long)e->ticks);
                break;
            }
            if (e->kind == PT_EV_LOST)
                c->lost_records += e->id | ((uint64_t)e->aux << 32);
            if (e->kind != PT_EV_LOST && e->id > c->max_symbol) {
                CERR(c, "thread %llu event %llu uses symbol %u before it was handed out (max %u)\n",
                     (unsigned long long)t, (unsigned long long)(ec->first_event + k), e->id, c->max_symbol);
                break;
            }
        }
        th->next = ec->first_event + ec->count;
        c->events += ec->count;
        break;
    }
    case PT_MSG_PRODUCER_STATUS:
        c->last_status = m.u.producer_status.state;
        c->status_written = m.u.producer_status.events_written;
        c->status_dropped = m.u.producer_status.events_dropped;
        c->status_changes++;
        break;
    case PT_MSG_LOST_COUNT:
        c->lost_total = m.u.lost_count.dropped_total;
        break;
    default:
        break;
    }
    return 0;
}

/* ---- producer side --------------------------------------------------------- */

static uint64_t symlog_bytes_override; /* 0 = 1 MiB */

static pt_segment_t *make_segment(uint32_t rings, uint32_t policy, char *name, size_t namelen)
{
    pt_segment_config_t cfg = {0};
    cfg.ring_count = rings;
    cfg.chunk_bytes = 4096;       /* 251 records per chunk */
    cfg.chunks_per_ring = 4;
    cfg.symlog_bytes = symlog_bytes_override ? symlog_bytes_override : 1u << 20;
    cfg.drop_policy = policy;
    cfg.wait_timeout_ns = 30ull * 1000000000ull;
    cfg.cmdline = "test_reader producer";
    cfg.python_version = "3.11.2";
    cfg.clock_kind = PT_CLOCK_MONOTONIC;
    cfg.ticks_per_second = 1000000000ull;
    pt_segment_t *seg = NULL;
    char err[256] = "";
    int rc = pt_segment_create(&cfg, &seg, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "pt_segment_create: %d %s\n", rc, err);
    REQUIRE(rc == 0);
    snprintf(name, namelen, "%s", pt_segment_name(seg));
    return seg;
}

typedef struct prod_arg {
    pt_segment_t *seg;
    uint64_t events;
    int index;
    int retire;
    int failed;
} prod_arg_t;

/* ticks = position in the thread's stream; a new symbol every 256 records,
 * used right away */
static void *producer_thread(void *p)
{
    prod_arg_t *a = p;
    pt_ring_t ring;
    char tname[32];
    snprintf(tname, sizeof tname, "worker-%d", a->index);
    int rc;
    while ((rc = pt_segment_claim_ring(a->seg, (uint64_t)gettid(), tname, 0, &ring)) == -EAGAIN)
        sleep_us(500); /* every ring busy: wait for the reader to free one */
    if (rc != 0) {
        fprintf(stderr, "producer %d: pt_segment_claim_ring: %d\n", a->index, rc);
        a->failed = 1;
        return NULL;
    }
    uint32_t id = 0;
    for (uint64_t i = 0; i < a->events; i++) {
        if (i % 256 == 0) {
            char fn[64];
            snprintf(fn, sizeof fn, "mod.func_%d_%llu", a->index, (unsigned long long)i);
            int rc_sym = pt_symlog_append(a->seg, PT_SYM_PY_FUNCTION, fn, "/src/mod.py", (uint32_t)i, &id);
            if (rc_sym != 0 && !a->failed++)
                fprintf(stderr, "producer %d: pt_symlog_append: %d\n", a->index, rc_sym);
        }
        uint8_t kind = (i & 1) ? PT_EV_RETURN : PT_EV_CALL;
        int rc_push = pt_ring_push(&ring, i, id, kind, 0, 0);
        if (rc_push != 0 && !a->failed++)
            fprintf(stderr, "producer %d: pt_ring_push of record %llu: %d\n", a->index, (unsigned long long)i,
                    rc_push);
    }
    if (a->retire)
        pt_segment_retire_ring(a->seg, &ring, a->events);
    else
        pt_ring_flush_counters(&ring);
    return NULL;
}

static void write_all(int fd, const void *buf, size_t n)
{
    REQUIRE(write(fd, buf, n) == (ssize_t)n);
}

static void read_all(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        REQUIRE(r > 0);
        got += (size_t)r;
    }
}

/* Fork a producer: it creates the segment, sends its name, waits for "go". */
typedef struct producer {
    pid_t pid;
    int to_child, from_child;
    char name[96];
} producer_t;

static void start_producer(producer_t *p, void (*body)(pt_segment_t *seg, int to_parent, int from_parent))
{
    int down[2], up[2];
    REQUIRE(pipe(down) == 0 && pipe(up) == 0);
    p->pid = fork();
    REQUIRE(p->pid >= 0);
    if (p->pid == 0) {
        failures = 0; /* the child reports only its own failures */
        close(down[1]);
        close(up[0]);
        char name[96];
        pt_segment_t *seg = make_segment(4, PT_POLICY_WAIT, name, sizeof name);
        write_all(up[1], name, sizeof name);
        char go;
        read_all(down[0], &go, 1);
        body(seg, up[1], down[0]);
        pt_segment_set_state(seg, PT_STATE_EXITED);
        _exit(failures ? 2 : 0);
    }
    close(down[0]);
    close(up[1]);
    p->to_child = down[1];
    p->from_child = up[0];
    read_all(p->from_child, p->name, sizeof p->name);
}

static pt_reader_t *attach(const char *name)
{
    pt_reader_t *r = NULL;
    char err[256] = "";
    int rc = pt_reader_attach(name, 0, &r, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "pt_reader_attach(%s): %d %s\n", name, rc, err);
    REQUIRE(rc == 0);
    return r;
}

/* Poll until finished (or an error); returns the last poll result. */
static long poll_until_finished(pt_reader_t *r, coll_t *c)
{
    long rc = 0;
    for (long spins = 0; !pt_reader_finished(r) && spins < 2000000; spins++) {
        rc = pt_reader_poll(r, on_msg, c, 0);
        if (rc < 0)
            return rc;
        if (rc == 0)
            sleep_us(100);
    }
    return rc;
}

/* ---- clean exit: threads, symbols, slot reuse ------------------------------- */

#define CLEAN_THREADS_A 3
#define CLEAN_THREADS_B 3
#define CLEAN_EVENTS 100000ull

static void clean_body(pt_segment_t *seg, int to_parent, int from_parent)
{
    (void)to_parent;
    (void)from_parent;
    prod_arg_t args[CLEAN_THREADS_A + CLEAN_THREADS_B];
    pthread_t th[CLEAN_THREADS_A + CLEAN_THREADS_B];
    /* first wave: 3 threads on 4 rings; second wave: 3 more, which need rings
     * the reader freed after the first wave retired */
    for (int wave = 0; wave < 2; wave++) {
        int base = wave * CLEAN_THREADS_A, n = wave ? CLEAN_THREADS_B : CLEAN_THREADS_A;
        for (int i = 0; i < n; i++) {
            args[base + i] = (prod_arg_t){seg, CLEAN_EVENTS + (uint64_t)(base + i) * 1000, base + i, 1, 0};
            REQUIRE(pthread_create(&th[base + i], NULL, producer_thread, &args[base + i]) == 0);
        }
        for (int i = 0; i < n; i++) {
            pthread_join(th[base + i], NULL);
            if (args[base + i].failed)
                failures++;
        }
    }
}

static void test_clean_exit(const char *dump_path)
{
    producer_t p;
    start_producer(&p, clean_body);
    pt_reader_t *r = attach(p.name);
    coll_t c = {0};
    c.check_ticks = 1;
    if (dump_path)
        REQUIRE((c.dump = fopen(dump_path, "wb")) != NULL);
    write_all(p.to_child, "g", 1);

    long rc = poll_until_finished(r, &c);
    if (rc < 0)
        fprintf(stderr, "clean_exit: poll returned %ld: %s\n", rc, pt_reader_error(r));
    CHECK(rc >= 0);
    CHECK(pt_reader_finished(r) == 1);
    int status = 0;
    REQUIRE(waitpid(p.pid, &status, 0) == p.pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    uint64_t want = 0;
    for (int i = 0; i < CLEAN_THREADS_A + CLEAN_THREADS_B; i++)
        want += CLEAN_EVENTS + (uint64_t)i * 1000;
    CHECK(c.errors == 0);
    CHECK(c.saw_info);
    CHECK(c.events == want);
    CHECK(c.last_type == PT_MSG_PRODUCER_STATUS && c.last_status == PT_STATE_EXITED);
    int threads = 0;
    for (int t = 0; t < MAX_THREADS; t++) {
        if (c.thr[t].started) {
            threads++;
            CHECK(c.thr[t].ended);
        }
    }
    CHECK(threads == CLEAN_THREADS_A + CLEAN_THREADS_B);
    CHECK(c.max_symbol > 0);
    pt_reader_stats_t st;
    pt_reader_stats(r, &st);
    CHECK(st.events_read == want && st.threads_seen == (uint64_t)threads && st.corrupt_rings == 0);
    CHECK(st.producer_state == PT_STATE_EXITED && st.symbols_read == c.max_symbol);
    CHECK(st.producer_events_dropped == 0);
    /* nothing more after finished */
    uint64_t before = c.messages;
    CHECK(pt_reader_poll(r, on_msg, &c, 0) == 0);
    CHECK(c.messages == before);
    if (c.dump)
        fclose(c.dump);
    pt_reader_detach(r, 1);
    CHECK(pt_segment_unlink(p.name) == -ENOENT); /* the finished reader removed it */
    close(p.to_child);
    close(p.from_child);
    printf("clean_exit: %llu events, %u symbols, %d threads, %llu messages\n", (unsigned long long)c.events,
           c.max_symbol, threads, (unsigned long long)c.messages);
}

/* ---- producer killed ------------------------------------------------------- */

#define KILLED_EVENTS 900ull /* fits in the ring (4 x 251) without a reader */

static void killed_body(pt_segment_t *seg, int to_parent, int from_parent)
{
    (void)from_parent;
    prod_arg_t a = {seg, KILLED_EVENTS, 0, 0, 0}; /* not retired: it "dies" */
    producer_thread(&a);
    write_all(to_parent, a.failed ? "F" : "d", 1);
    for (;;)
        pause();
}

static void test_producer_killed(void)
{
    producer_t p;
    start_producer(&p, killed_body);
    pt_reader_t *r = attach(p.name);
    coll_t c = {0};
    c.check_ticks = 1;
    write_all(p.to_child, "g", 1);
    char done;
    read_all(p.from_child, &done, 1);
    CHECK(done == 'd');
    REQUIRE(kill(p.pid, SIGKILL) == 0);
    int status;
    REQUIRE(waitpid(p.pid, &status, 0) == p.pid);

    long rc = poll_until_finished(r, &c);
    CHECK(rc == -EPIPE);
    CHECK(pt_reader_finished(r) == 1);
    CHECK(c.errors == 0);
    CHECK(c.events == KILLED_EVENTS); /* everything published, before -EPIPE */
    CHECK(c.last_type == PT_MSG_PRODUCER_STATUS && c.last_status == PT_STATE_DEAD);
    CHECK(strstr(pt_reader_error(r), "died") != NULL);
    pt_reader_stats_t st;
    pt_reader_stats(r, &st);
    CHECK(st.producer_state == PT_STATE_DEAD);
    CHECK(pt_reader_poll(r, on_msg, &c, 0) == -EPIPE);
    pt_reader_detach(r, 1);
    close(p.to_child);
    close(p.from_child);
    printf("producer_killed: %llu events then -EPIPE\n", (unsigned long long)c.events);
}

/* ---- reader killed: takeover ----------------------------------------------- */

#define TAKEOVER_EVENTS 200000ull

static void takeover_body(pt_segment_t *seg, int to_parent, int from_parent)
{
    (void)to_parent;
    (void)from_parent;
    prod_arg_t a = {seg, TAKEOVER_EVENTS, 0, 1, 0};
    producer_thread(&a);
    if (a.failed)
        failures++;
}

static void test_reader_killed(void)
{
    producer_t p;
    start_producer(&p, takeover_body);
    int up[2];
    REQUIRE(pipe(up) == 0);
    pid_t reader1 = fork();
    REQUIRE(reader1 >= 0);
    if (reader1 == 0) {
        failures = 0;
        /* first reader: read about a third, report where it stopped, wait to die */
        close(up[0]);
        pt_reader_t *r = attach(p.name);
        coll_t c = {0};
        c.check_ticks = 1;
        write_all(up[1], "a", 1);
        while (c.events < TAKEOVER_EVENTS / 3) {
            long rc = pt_reader_poll(r, on_msg, &c, 10000);
            if (rc < 0 || c.errors)
                _exit(3);
            if (rc == 0)
                sleep_us(100);
        }
        uint64_t next = c.thr[1].next;
        write_all(up[1], &next, sizeof next);
        for (;;)
            pause();
    }
    close(up[1]);
    char attached;
    read_all(up[0], &attached, 1);
    write_all(p.to_child, "g", 1);
    uint64_t next = 0;
    read_all(up[0], &next, sizeof next);
    REQUIRE(kill(reader1, SIGKILL) == 0);
    int status;
    REQUIRE(waitpid(reader1, &status, 0) == reader1);
    CHECK(WIFSIGNALED(status));

    /* the producer is unaffected; a new reader takes over and continues */
    pt_reader_t *r = attach(p.name);
    coll_t c = {0};
    c.check_ticks = 1;
    c.thr[1].next = next; /* the first chunk must start exactly here */
    c.thr[1].next_known = 1;
    long rc = poll_until_finished(r, &c);
    if (rc < 0)
        fprintf(stderr, "takeover: poll returned %ld: %s\n", rc, pt_reader_error(r));
    CHECK(rc >= 0 && pt_reader_finished(r));
    REQUIRE(waitpid(p.pid, &status, 0) == p.pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(c.errors == 0);
    CHECK(next >= TAKEOVER_EVENTS / 3);
    CHECK(c.events == TAKEOVER_EVENTS - next);
    CHECK(c.thr[1].started && c.thr[1].ended); /* each stream announces its threads */
    CHECK(atomic_load(&pt_segment_header(pt_reader_segment(r))->consumer_takeovers) == 1);
    pt_reader_detach(r, 1);
    close(up[0]);
    close(p.to_child);
    close(p.from_child);
    printf("reader_killed: first reader stopped at %llu, second read the other %llu\n", (unsigned long long)next,
           (unsigned long long)c.events);
}

/* ---- hostile content (producer in this process) ----------------------------- */

typedef struct local {
    pt_segment_t *seg;
    pt_reader_t *r;
    char name[96];
    coll_t c;
} local_t;

static void local_open(local_t *l)
{
    memset(l, 0, sizeof *l);
    l->seg = make_segment(2, PT_POLICY_DROP, l->name, sizeof l->name);
    l->r = attach(l->name);
}

static void local_close(local_t *l)
{
    pt_reader_detach(l->r, 0);
    pt_segment_close(l->seg, 1);
}

static long poll_once(local_t *l) { return pt_reader_poll(l->r, on_msg, &l->c, 0); }

static void test_bad_symbol_id(void)
{
    local_t l;
    local_open(&l);
    pt_ring_t ring;
    REQUIRE(pt_segment_claim_ring(l.seg, 1, "main", 0, &ring) == 0);
    uint32_t id = 0;
    REQUIRE(pt_symlog_append(l.seg, PT_SYM_PY_FUNCTION, "f", "a.py", 1, &id) == 0 && id == 1);
    for (int i = 0; i < 5; i++)
        REQUIRE(pt_ring_push(&ring, (uint64_t)i, id, PT_EV_CALL, 0, 0) == 0);
    REQUIRE(pt_ring_push(&ring, 5, 0, PT_EV_CALL, 0, 0) == 0); /* id 0 = unknown: accepted */
    REQUIRE(pt_ring_push(&ring, 6, 999, PT_EV_CALL, 0, 0) == 0); /* never interned */
    REQUIRE(pt_ring_push(&ring, 7, id, PT_EV_CALL, 0, 0) == 0);
    long rc = poll_once(&l);
    const char *err = pt_reader_error(l.r);
    printf("bad_symbol_id: %s\n", err);
    CHECK(rc == -EBADMSG);
    CHECK(strstr(err, "ring 0") && strstr(err, "chunk 0") && strstr(err, "index 6") && strstr(err, "999"));
    CHECK(l.c.events == 6 && l.c.errors == 0); /* the valid records before it were handed out */
    pt_reader_stats_t st;
    pt_reader_stats(l.r, &st);
    CHECK(st.corrupt_rings == 1);
    /* the ring stays stopped; polling again is harmless */
    REQUIRE(pt_ring_push(&ring, 8, id, PT_EV_CALL, 0, 0) == 0);
    CHECK(poll_once(&l) >= 0);
    CHECK(l.c.events == 6);
    local_close(&l);
}

static void test_bad_kind(void)
{
    local_t l;
    local_open(&l);
    pt_ring_t ring;
    REQUIRE(pt_segment_claim_ring(l.seg, 1, "main", 0, &ring) == 0);
    REQUIRE(pt_ring_push(&ring, 0, 0, PT_EV_MARK, 0, 0) == 0);
    REQUIRE(pt_ring_push(&ring, 1, 0, 0, 0, 0) == 0);            /* kind None */
    long rc = poll_once(&l);
    printf("bad_kind: %s\n", pt_reader_error(l.r));
    CHECK(rc == -EBADMSG);
    CHECK(strstr(pt_reader_error(l.r), "ring 0") && strstr(pt_reader_error(l.r), "index 1") &&
          strstr(pt_reader_error(l.r), "kind"));
    CHECK(l.c.events == 1);
    local_close(&l);

    local_open(&l);
    REQUIRE(pt_segment_claim_ring(l.seg, 1, "main", 0, &ring) == 0);
    REQUIRE(pt_ring_push(&ring, 0, 0, 200, 0, 0) == 0);          /* beyond the enum */
    CHECK(poll_once(&l) == -EBADMSG);
    CHECK(l.c.events == 0 && strstr(pt_reader_error(l.r), "index 0"));
    local_close(&l);
}

static void test_bad_symlog(void)
{
    local_t l;
    local_open(&l);
    uint32_t id;
    REQUIRE(pt_symlog_append(l.seg, PT_SYM_PY_FUNCTION, "one", "a.py", 1, &id) == 0 && id == 1);
    REQUIRE(pt_symlog_append(l.seg, PT_SYM_PY_FUNCTION, "two", "a.py", 2, &id) == 0 && id == 2);
    REQUIRE(pt_symlog_append(l.seg, PT_SYM_PY_FUNCTION, "three", "a.py", 3, &id) == 0 && id == 3);
    uint8_t *log = pt_segment_symlog(l.seg);
    size_t first = pt_fb_message_size(log, 1u << 20);
    REQUIRE(first > 0 && first % 8 == 0);
    log[first + 8] = 'X'; /* identifier of the second record */
    long rc = poll_once(&l);
    const char *err = pt_reader_error(l.r);
    printf("bad_symlog: %s\n", err);
    CHECK(rc == -EBADMSG);
    char want[64];
    snprintf(want, sizeof want, "offset %zu", first);
    CHECK(strstr(err, "symbol log") && strstr(err, want));
    CHECK(l.c.max_symbol == 1); /* the good record before it was handed out */
    CHECK(poll_once(&l) >= 0);  /* no crash, no repeat */
    local_close(&l);

    /* a size prefix that runs past the watermark */
    local_open(&l);
    REQUIRE(pt_symlog_append(l.seg, PT_SYM_LABEL, "x", NULL, 0, &id) == 0);
    log = pt_segment_symlog(l.seg);
    log[0] = 0xff;
    log[1] = 0xff;
    CHECK(poll_once(&l) == -EBADMSG);
    CHECK(strstr(pt_reader_error(l.r), "offset 0") != NULL);
    local_close(&l);
}

static void test_bad_chunk(void)
{
    local_t l;
    local_open(&l);
    pt_ring_t ring;
    REQUIRE(pt_segment_claim_ring(l.seg, 1, "main", 0, &ring) == 0);
    for (int i = 0; i < 10; i++)
        REQUIRE(pt_ring_push(&ring, (uint64_t)i, 0, PT_EV_MARK, 0, 0) == 0);
    uint8_t *chunk0 = pt_segment_ring_base(l.seg, ring.ring_index);
    _Atomic uint32_t *len = (_Atomic uint32_t *)(void *)(chunk0 + PT_CHUNK_OFF_LENGTH);
    atomic_store(len, 5000u); /* more than a 4 KiB chunk holds */
    long rc = poll_once(&l);
    const char *err = pt_reader_error(l.r);
    printf("bad_chunk (length): %s\n", err);
    CHECK(rc == -EBADMSG);
    CHECK(strstr(err, "ring 0") && strstr(err, "chunk 0") && strstr(err, "length 5000"));
    CHECK(l.c.events == 0);
    local_close(&l);

    local_open(&l);
    REQUIRE(pt_segment_claim_ring(l.seg, 1, "main", 0, &ring) == 0);
    for (int i = 0; i < 10; i++)
        REQUIRE(pt_ring_push(&ring, (uint64_t)i, 0, PT_EV_MARK, 0, 0) == 0);
    chunk0 = pt_segment_ring_base(l.seg, ring.ring_index);
    chunk0[PT_CHUNK_OFF_FIRST_EVENT] = 77; /* first_event inconsistent with chunk 0 */
    CHECK(poll_once(&l) == -EBADMSG);
    printf("bad_chunk (first_event): %s\n", pt_reader_error(l.r));
    CHECK(strstr(pt_reader_error(l.r), "first_event 77") != NULL);
    local_close(&l);

    /* head_chunk far beyond released_chunks */
    local_open(&l);
    REQUIRE(pt_segment_claim_ring(l.seg, 1, "main", 0, &ring) == 0);
    atomic_store(&pt_segment_slot(l.seg, ring.ring_index)->head_chunk, 1000);
    CHECK(poll_once(&l) == -EBADMSG);
    printf("bad_chunk (head): %s\n", pt_reader_error(l.r));
    CHECK(strstr(pt_reader_error(l.r), "head_chunk 1000") != NULL);
    local_close(&l);
}

/* ---- symbol log limits ------------------------------------------------------ */

typedef struct symvisit { int count; uint32_t last_id; size_t longest; int bad; } symvisit_t;

static int visit_symbol(void *ctx, const uint8_t *msg, size_t len)
{
    symvisit_t *v = ctx;
    pt_fb_msg_t m;
    if (pt_fb_parse(msg, len, &m, NULL, 0) != 0 || m.type != PT_MSG_SYMBOL || m.u.symbol.id != v->last_id + 1) {
        v->bad++;
        return 0;
    }
    v->last_id = m.u.symbol.id;
    v->count++;
    if (m.u.symbol.name.len > v->longest)
        v->longest = m.u.symbol.name.len;
    return 0;
}

static void test_symlog_limits(void)
{
    local_t l;
    symlog_bytes_override = 4096;
    local_open(&l);
    symlog_bytes_override = 0;
    uint32_t id = 0, last = 0;
    int rc = 0, appended = 0;
    while ((rc = pt_symlog_append(l.seg, PT_SYM_PY_FUNCTION, "pkg.mod.Class.method", "/src/pkg/mod.py", 10,
                                  &id)) == 0) {
        CHECK(id == last + 1);
        last = id;
        appended++;
    }
    CHECK(rc == -ENOSPC && id == 0 && appended > 10);
    pt_seg_header_t *h = pt_segment_header(l.seg);
    CHECK(atomic_load(&h->symbols_dropped) == 1);
    CHECK(atomic_load(&h->symbol_count) == last);
    CHECK(atomic_load(&h->symlog_published) % 8 == 0 && atomic_load(&h->symlog_published) <= 4096);
    /* the public walk sees every record, verified, in id order */
    symvisit_t v = {0, 0, 0, 0};
    uint64_t cursor = 0;
    char err[256] = "";
    CHECK(pt_symlog_read(l.seg, &cursor, atomic_load(&h->symlog_published), visit_symbol, &v, err, sizeof err) == 0);
    CHECK(v.count == appended && v.bad == 0 && cursor == atomic_load(&h->symlog_published));
    /* the reader hands them all out, and the stats count the drop */
    CHECK(poll_once(&l) == 0);
    CHECK(l.c.max_symbol == last && l.c.errors == 0);
    pt_reader_stats_t st;
    pt_reader_stats(l.r, &st);
    CHECK(st.symbols_dropped == 1 && st.symbols_read == last);
    local_close(&l);

    /* names longer than a record are cut (at a UTF-8 boundary) */
    local_open(&l);
    size_t big = 100000;
    char *name = malloc(big + 1);
    REQUIRE(name);
    for (size_t i = 0; i < big; i += 2) {
        name[i] = (char)0xc3; /* e-acute, two bytes */
        name[i + 1] = (char)0xa9;
    }
    name[big] = 0;
    CHECK(pt_symlog_append(l.seg, PT_SYM_C_FUNCTION, name, "mod", 0, &id) == 0 && id == 1);
    CHECK(pt_symlog_append(l.seg, PT_SYM_LABEL, NULL, NULL, 0, &id) == 0 && id == 2);
    free(name);
    v = (symvisit_t){0, 0, 0, 0};
    cursor = 0;
    h = pt_segment_header(l.seg);
    CHECK(pt_symlog_read(l.seg, &cursor, atomic_load(&h->symlog_published), visit_symbol, &v, err, sizeof err) == 0);
    CHECK(v.count == 2 && v.bad == 0 && v.longest > 60000 && v.longest < PT_MAX_SYMBOL_RECORD_BYTES);
    CHECK(v.longest % 2 == 0);
    CHECK(poll_once(&l) == 0 && l.c.max_symbol == 2 && l.c.errors == 0);
    local_close(&l);
}

/* Three strings (name, file, profile name) share one record: long ones are cut to an
 * equal share of the room at a UTF-8 boundary, short ones stay whole. */
typedef struct symlens { int count; size_t len[2][3]; int odd; } symlens_t;

static int visit_lengths(void *ctx, const uint8_t *msg, size_t len)
{
    symlens_t *v = ctx;
    pt_fb_msg_t m;
    if (v->count >= 2 || pt_fb_parse(msg, len, &m, NULL, 0) != 0 || m.type != PT_MSG_SYMBOL ||
        !m.u.symbol.profile_name.ptr)
        return 0;
    const pt_fb_str_t s[3] = {m.u.symbol.name, m.u.symbol.file, m.u.symbol.profile_name};
    for (int i = 0; i < 3; i++) {
        v->len[v->count][i] = s[i].len;
        v->odd += (int)(s[i].len % 2 && s[i].len > 3); /* the long ones hold two-byte characters only */
    }
    v->count++;
    return 0;
}

static void test_symlog_three_strings(void)
{
    local_t l;
    local_open(&l);
    size_t big = 100000;
    char *text = malloc(big + 1);
    REQUIRE(text);
    for (size_t i = 0; i < big; i += 2) {
        text[i] = (char)0xc3; /* e-acute, two bytes */
        text[i + 1] = (char)0xa9;
    }
    text[big] = 0;
    uint32_t id = 0;
    CHECK(pt_symlog_append_named(l.seg, PT_SYM_C_FUNCTION, text, text, 0, text, &id) == 0 && id == 1);
    CHECK(pt_symlog_append_named(l.seg, PT_SYM_C_FUNCTION, text, "mod", 0, "<f>", &id) == 0 && id == 2);
    free(text);
    pt_seg_header_t *h = pt_segment_header(l.seg);
    symlens_t v;
    memset(&v, 0, sizeof v);
    uint64_t cursor = 0;
    char err[256] = "";
    CHECK(pt_symlog_read(l.seg, &cursor, atomic_load(&h->symlog_published), visit_lengths, &v, err, sizeof err) == 0);
    CHECK(v.count == 2 && v.odd == 0);
    /* three long strings: an equal share each, all three together within one record */
    CHECK(v.len[0][0] > 20000 && v.len[0][1] > 20000 && v.len[0][2] > 20000);
    CHECK(v.len[0][0] + v.len[0][1] + v.len[0][2] < PT_MAX_SYMBOL_RECORD_BYTES - 100);
    /* one long string: the short ones whole, the long one gets the rest */
    CHECK(v.len[1][1] == 3 && v.len[1][2] == 3 && v.len[1][0] > 60000);
    CHECK(poll_once(&l) == 0 && l.c.max_symbol == 2 && l.c.errors == 0);
    local_close(&l);
}

/* ---- drops, state changes, inspect-only readers ------------------------------ */

static void test_lost_and_status(void)
{
    local_t l;
    local_open(&l);
    l.c.check_ticks = 0;
    pt_ring_t ring;
    REQUIRE(pt_segment_claim_ring(l.seg, 1, "main", 0, &ring) == 0);
    CHECK(poll_once(&l) == 0);
    CHECK(l.c.last_status == PT_STATE_RUNNING && l.c.status_changes == 1);
    const uint64_t capacity = 4 * 251;
    int dropped = 0;
    for (uint64_t i = 0; i < capacity + 96; i++)
        if (pt_ring_push(&ring, i, 0, PT_EV_MARK, 0, 0) == -ENOBUFS)
            dropped++;
    CHECK(dropped == 96);
    CHECK(poll_once(&l) == (long)capacity);
    CHECK(l.c.lost_total == 96); /* the reader's LostCount */
    /* room again: the producer's Lost record comes first, then the record */
    REQUIRE(pt_ring_push(&ring, 7, 0, PT_EV_MARK, 0, 0) == 0);
    CHECK(poll_once(&l) == 2);
    CHECK(l.c.lost_records == 96);
    CHECK(l.c.events == capacity + 2 && l.c.errors == 0);

    /* an inspect-only reader may attach while we hold the lock, but not drain */
    pt_reader_t *peek = NULL;
    char err[256] = "";
    CHECK(pt_reader_attach(l.name, PT_READER_NO_LOCK, &peek, err, sizeof err) == 0);
    if (peek) {
        CHECK(pt_reader_poll(peek, on_msg, &l.c, 0) == -EPERM);
        pt_reader_detach(peek, 0);
    }
    pt_reader_t *second = NULL;
    CHECK(pt_reader_attach(l.name, 0, &second, err, sizeof err) == -EBUSY);
    printf("second reader: %s\n", err);

    pt_segment_set_state(l.seg, PT_STATE_STOPPED);
    CHECK(poll_once(&l) == 0);
    CHECK(l.c.last_status == PT_STATE_STOPPED && l.c.status_changes == 2);
    pt_segment_retire_ring(l.seg, &ring, 8);
    pt_segment_set_state(l.seg, PT_STATE_EXITED);
    CHECK(poll_once(&l) == 0);
    CHECK(pt_reader_finished(l.r) && l.c.last_status == PT_STATE_EXITED && l.c.status_changes == 3);
    CHECK(l.c.thr[1].ended);
    local_close(&l);
}

/* A thread's ring retires, the reader drains it and frees the slot, and a later
 * thread claims that same slot (its claim resets the slot's counters): the
 * producer's totals (ProducerStatus, pt_reader_stats, pt_segment_inspect) still
 * count the first thread's events, so they agree with what was read. */
static void test_totals_survive_slot_reuse(void)
{
    local_t l;
    local_open(&l);
    l.c.check_ticks = 0;
    pt_ring_t ring;
    REQUIRE(pt_segment_claim_ring(l.seg, 1, "first", 0, &ring) == 0);
    const uint64_t capacity = 4 * 251, lost = 30, first = capacity + 1, second = 200;
    for (uint64_t i = 0; i < capacity + lost; i++)
        (void)pt_ring_push(&ring, i, 0, PT_EV_MARK, 0, 0);
    CHECK(poll_once(&l) == (long)capacity);
    pt_segment_retire_ring(l.seg, &ring, first); /* its Lost record is the last event */
    CHECK(poll_once(&l) == 1);                    /* drained: the slot is FREE again */
    CHECK(l.c.thr[1].ended);
    REQUIRE(pt_segment_claim_ring(l.seg, 2, "second", first, &ring) == 0);
    CHECK(ring.ring_index == 0); /* the same slot, reused */
    for (uint64_t i = 0; i < second; i++)
        REQUIRE(pt_ring_push(&ring, i, 0, PT_EV_MARK, 0, 0) == 0);
    pt_ring_flush_counters(&ring);
    pt_reader_stats_t st;
    pt_reader_stats(l.r, &st);
    CHECK(st.producer_events_written == first + second);
    pt_segment_retire_ring(l.seg, &ring, first + second);
    pt_segment_set_state(l.seg, PT_STATE_EXITED);
    CHECK(poll_once(&l) == (long)second);
    CHECK(pt_reader_finished(l.r) && l.c.last_status == PT_STATE_EXITED);
    CHECK(l.c.events == first + second && l.c.errors == 0);
    CHECK(l.c.status_written == l.c.events);
    CHECK(l.c.status_dropped == lost && st.producer_events_dropped == lost);
    printf("slot reuse: read %llu, producer status says %llu written\n", (unsigned long long)l.c.events,
           (unsigned long long)l.c.status_written);
    local_close(&l);
}

/* ---- a segment that shrinks under the reader ------------------------------------ */

static void truncate_segment(const char *name, off_t size)
{
    char path[160];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    REQUIRE(truncate(path, size) == 0);
}

/* Another process truncates the file: reads past its new end raise SIGBUS. The
 * reader reports it in one line, keeps what it handed out, and every later
 * call (poll, stats, detach) is safe. Run in a child so that a SIGBUS shows
 * as a failed check, not a dead test binary. */
static void shrink_case(off_t new_size)
{
    local_t l;
    local_open(&l);
    pt_ring_t ring;
    REQUIRE(pt_segment_claim_ring(l.seg, 1, "main", 0, &ring) == 0);
    for (int i = 0; i < 100; i++)
        REQUIRE(pt_ring_push(&ring, (uint64_t)i, 0, PT_EV_MARK, 0, 0) == 0);
    CHECK(poll_once(&l) >= 0 && l.c.events == 100);
    for (int i = 100; i < 200; i++)
        REQUIRE(pt_ring_push(&ring, (uint64_t)i, 0, PT_EV_MARK, 0, 0) == 0);
    truncate_segment(l.name, new_size);
    long rc = poll_once(&l);
    const char *err = pt_reader_error(l.r);
    printf("shrink to %lld: rc %ld: %s\n", (long long)new_size, rc, err);
    CHECK(rc == -EFAULT);
    CHECK(strstr(err, "shrank") != NULL && strchr(err, '\n') == NULL);
    CHECK(l.c.events == 100 && l.c.errors == 0); /* what was read is kept */
    CHECK(poll_once(&l) == -EFAULT);              /* and it stays stopped */
    pt_reader_stats_t st;
    pt_reader_stats(l.r, &st);
    CHECK(st.events_read == 100);
    pt_reader_detach(l.r, 0);
    pt_segment_unlink(l.name);
}

static void test_segment_shrinks(void)
{
    const off_t sizes[] = {4096, 0};
    for (size_t k = 0; k < 2; k++) {
        pid_t child = fork();
        if (child == 0) {
            alarm(30);
            shrink_case(sizes[k]);
            _exit(failures ? 3 : 0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "shrink to %lld: %s %d", (long long)sizes[k],
               WIFSIGNALED(status) ? "killed by signal" : "exit status",
               WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }

    /* A SIGBUS that is not a guarded read of a segment still kills: the
     * reader's handler passes it on to the default action. */
    pid_t child = fork();
    if (child == 0) {
        local_t l;
        local_open(&l);
        CHECK(poll_once(&l) >= 0); /* the guard's handler is installed now */
        char path[] = "/tmp/pt-sigbus-XXXXXX";
        int fd = mkstemp(path);
        REQUIRE(fd >= 0 && ftruncate(fd, 8192) == 0);
        volatile char *p = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
        REQUIRE(p != MAP_FAILED);
        REQUIRE(ftruncate(fd, 0) == 0);
        unlink(path);
        pt_segment_unlink(l.name);
        (void)p[4096]; /* SIGBUS */
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
#ifdef __SANITIZE_ADDRESS__
    /* ASan's handler was there first: it reports the fault and exits 1 */
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 1, "a foreign SIGBUS reaches ASan's handler: %d", status);
#else
    CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS, "a foreign SIGBUS keeps its default action: %d",
           status);
#endif
}

/* A producer that rewrites its geometry while readers attach: every attach
 * either fails with a one-line error or reads within what it validated (27
 * of 300 attaches crashed when the reader took ring_count and chunks_per_ring
 * from the live header after validating it). */
static void test_geometry_changes_during_attach(void)
{
    local_t l;
    memset(&l, 0, sizeof l);
    l.seg = make_segment(2, PT_POLICY_DROP, l.name, sizeof l.name);
    pt_ring_t ring;
    REQUIRE(pt_segment_claim_ring(l.seg, 1, "main", 0, &ring) == 0);
    for (int i = 0; i < 300; i++)
        REQUIRE(pt_ring_push(&ring, (uint64_t)i, 0, PT_EV_MARK, 0, 0) == 0);
    pid_t flipper = fork();
    if (flipper == 0) {
        pt_seg_header_t *h = pt_segment_header(l.seg);
        volatile uint32_t *rc_p = &h->ring_count, *cpr_p = &h->chunks_per_ring;
        for (uint64_t i = 0;; i++) {
            *rc_p = (i & 1) ? 4000 : 2;
            *cpr_p = (i & 2) ? (1u << 20) : 4;
        }
    }
    int ok = 0, refused = 0;
    for (int k = 0; k < 300; k++) {
        pid_t child = fork();
        if (child == 0) {
            alarm(20);
            pt_reader_t *r = NULL;
            char err[256] = "";
            if (pt_reader_attach(l.name, 0, &r, err, sizeof err) != 0)
                _exit(strchr(err, '\n') ? 4 : 2);
            coll_t c;
            memset(&c, 0, sizeof c);
            for (int i = 0; i < 3; i++)
                pt_reader_poll(r, on_msg, &c, 0);
            pt_reader_detach(r, 0);
            _exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
            ok++;
        else if (WIFEXITED(status) && WEXITSTATUS(status) == 2)
            refused++;
        else
            CHECKF(0, "attach %d while the geometry changes: %s %d", k,
                   WIFSIGNALED(status) ? "killed by signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    kill(flipper, SIGKILL);
    waitpid(flipper, NULL, 0);
    printf("geometry flips: %d attaches read, %d refused, none crashed\n", ok, refused);
    pt_segment_close(l.seg, 1);
}

/* PT_READER_DEFER_RELEASE: the shared cursors move only at pt_reader_release.
 * Until then a producer with the wait policy sees no room freed, and a reader
 * taking over re-reads from the last release; a slot freed at a release and
 * claimed again by a new thread starts clean (a stale cursor of the old
 * thread once marked such a slot corrupt). */
static void test_deferred_release(void)
{
    local_t l;
    memset(&l, 0, sizeof l);
    l.seg = make_segment(1, PT_POLICY_DROP, l.name, sizeof l.name);
    pt_reader_t *r = NULL;
    char err[256] = "";
    REQUIRE(pt_reader_attach(l.name, PT_READER_DEFER_RELEASE, &r, err, sizeof err) == 0);
    l.r = r;
    pt_ring_t ring;
    for (int round = 0; round < 3; round++) {
        REQUIRE(pt_segment_claim_ring(l.seg, 1, "t", 0, &ring) == 0);
        pt_ring_slot_t *slot = pt_segment_slot(l.seg, 0);
        for (int i = 0; i < 600; i++) /* past two 251-record chunks */
            REQUIRE(pt_ring_push(&ring, (uint64_t)i, 0, PT_EV_MARK, 0, 0) == 0);
        /* a release before this reader has seen the new thread leaves its slot alone */
        CHECK(pt_reader_release(r) == 0);
        CHECKF(atomic_load(&slot->released_chunks) == 0, "round %d: a new thread's slot kept its cursor", round);
        long rc = pt_reader_poll(r, on_msg, &l.c, 0);
        CHECKF(rc >= 0, "round %d: poll %ld: %s", round, rc, pt_reader_error(r));
        CHECKF(atomic_load(&slot->released_chunks) == 0, "round %d: nothing released before release()", round);
        CHECK(pt_reader_release(r) == 0);
        CHECKF(atomic_load(&slot->released_chunks) == 2, "round %d: released %llu", round,
               (unsigned long long)atomic_load(&slot->released_chunks));
        pt_segment_retire_ring(l.seg, &ring, 1000);
        CHECK(pt_reader_poll(r, on_msg, &l.c, 0) >= 0);
        CHECKF(atomic_load(&slot->state) == PT_RING_RETIRED, "round %d: freed only at release", round);
        CHECK(pt_reader_release(r) == 0);
        CHECKF(atomic_load(&slot->state) == PT_RING_FREE, "round %d: freed at release", round);
        CHECK(pt_reader_release(r) == 0); /* again: must not touch the free slot */
        CHECK(atomic_load(&slot->released_chunks) == 2);
    }
    CHECKF(l.c.events == 3 * 600 && l.c.errors == 0, "events %llu errors %d", (unsigned long long)l.c.events,
           l.c.errors);
    pt_reader_stats_t st;
    pt_reader_stats(r, &st);
    CHECK(st.corrupt_rings == 0);
    local_close(&l);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    test_bad_symbol_id();
    test_bad_kind();
    test_bad_symlog();
    test_bad_chunk();
    test_lost_and_status();
    test_totals_survive_slot_reuse();
    test_symlog_limits();
    test_symlog_three_strings();
    test_clean_exit(argc > 1 ? argv[1] : NULL);
    test_producer_killed();
    test_reader_killed();
    test_segment_shrinks();
    test_deferred_release();
    test_geometry_changes_during_attach();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("reader: all checks passed\n");
    return 0;
}
