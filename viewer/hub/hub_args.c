/*
 * pytrace-hub's command line (hub_internal.h: hub_parse_args).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "viewer/hub/hub_internal.h"

#ifndef PYTRACE_VERSION
#define PYTRACE_VERSION "0"
#endif

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pytrace-hub [options] PID | SEGMENT\n"
            "\n"
            "The one reader of a traced job: drains its segment and serves the stream to any\n"
            "number of readers (pytrace-top, pytrace record, pytrace.Reader) over a Unix socket\n"
            "of this user (see the README, \"Many readers: the hub\"). Prints the socket's path\n"
            "on stdout once it listens; ends when the job has ended and every reader has its end.\n"
            "\n"
            "options:\n"
            "  --hold N          do not drain before N readers have joined (at most --hold-timeout)\n"
            "  --hold-timeout S  (default 30)\n"
            "  --wait S          the job is starting: wait up to S seconds for its segment\n"
            "  --queue-mib M     each reader's queue bound (default %u; at most --budget-mib)\n"
            "  --budget-mib M    every reader's queue together (default %u): past it the largest\n"
            "                    queues (the slowest readers) are cut: they miss events, counted in a\n"
            "                    Lost record, and get a resync once they read again\n"
            "  --max-readers N   readers at once (default %u); one more is refused, told so\n"
            "  --idle-exit S     drain only while a reader is there, and end when the last one left\n"
            "                    (or none came in S seconds), releasing the job's segment as it is (a\n"
            "                    later reader goes on from there); the hub a reader starts for a job\n"
            "                    that has none runs with --idle-exit 5\n"
            "  --subprocesses    also read every traced process the job starts (its segments, found\n"
            "                    in /dev/shm by parent pid); each message is tagged with its process\n"
            "  --quiet           no messages on stderr but errors\n"
            "  --detach          once it listens, leave the caller's stdin, stdout and stderr: its\n"
            "                    messages go to the socket's name with .log for .sock (removed at the\n"
            "                    end when empty), so a caller reading its output does not wait for it\n"
            "  -V, --version     print the version;  -h, --help: this help\n",
            DEFAULT_QUEUE_MIB, DEFAULT_BUDGET_MIB, DEFAULT_MAX_READERS);
}

int hub_parse_args(int argc, char **argv, hub_t *h, hub_args_t *a)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(arg, "-V") || !strcmp(arg, "--version")) {
            printf("pytrace-hub %s (protocol %u.%u)\n", PYTRACE_VERSION, PT_HUB_MAJOR, PT_HUB_MINOR);
            return 0;
        } else if (!strcmp(arg, "--hold") && val) {
            h->hold = (unsigned)strtoul(val, NULL, 10);
            i++;
        } else if (!strcmp(arg, "--wait") && val) {
            a->wait_seconds = atof(val);
            i++;
        } else if (!strcmp(arg, "--hold-timeout") && val) {
            a->hold_timeout = atof(val);
            i++;
        } else if (!strcmp(arg, "--queue-mib") && val) {
            double mib = atof(val);
            if (!(mib >= 1 && mib <= 1024)) {
                fprintf(stderr, "pytrace-hub: --queue-mib must be 1..1024, not '%s'\n", val);
                return 2;
            }
            h->default_bound = (size_t)(mib * (1 << 20));
            i++;
        } else if (!strcmp(arg, "--budget-mib") && val) {
            double mib = atof(val);
            if (!(mib >= 4 && mib <= 65536)) {
                fprintf(stderr, "pytrace-hub: --budget-mib must be 4..65536, not '%s'\n", val);
                return 2;
            }
            h->budget = (size_t)(mib * (1 << 20));
            i++;
        } else if (!strcmp(arg, "--max-readers") && val) {
            char *end;
            unsigned long n = strtoul(val, &end, 10);
            if (*end || !(n >= 1 && n <= 100000)) {
                fprintf(stderr, "pytrace-hub: --max-readers must be 1..100000, not '%s'\n", val);
                return 2;
            }
            h->max_readers = (unsigned)n;
            i++;
        } else if (!strcmp(arg, "--idle-exit") && val) {
            double sec = atof(val);
            if (!(sec > 0 && sec <= 86400)) {
                fprintf(stderr, "pytrace-hub: --idle-exit must be 0..86400 seconds, not '%s'\n", val);
                return 2;
            }
            h->idle_exit_ns = (uint64_t)(sec * 1e9);
            i++;
        } else if (!strcmp(arg, "--quiet")) {
            h->quiet = 1;
        } else if (!strcmp(arg, "--detach")) {
            a->detach = 1;
        } else if (!strcmp(arg, "--subprocesses")) {
            h->tree = 1;
        } else if (arg[0] == '-' && arg[1]) {
            fprintf(stderr, "pytrace-hub: unknown option '%s' (try --help)\n", arg);
            return 2;
        } else if (!a->target) {
            a->target = arg;
        } else {
            fprintf(stderr, "pytrace-hub: one job only (a pid or a segment name)\n");
            return 2;
        }
    }
    if (!a->target) {
        usage(stderr);
        return 2;
    }
    return -1;
}
