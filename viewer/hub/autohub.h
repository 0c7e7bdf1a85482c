/*
 * The auto-hub policy, one for every reader (pytrace-top, pytrace.Reader
 * through the extension): a running job that no one reads gets a hub of its
 * own, so that other readers can join it. The hub is pytrace-hub --quiet
 * --hold 1 --idle-exit PT_AUTOHUB_IDLE_EXIT: it drains nothing before a reader
 * joined, and lets the segment go, as it stands, once its last reader left.
 *
 * Only a segment of this user (its header's uid), valid, whose job runs and
 * that no reader holds is taken: any other is read directly by the caller,
 * whose own attach says why not.
 *
 * Who may call: any thread; pt_autohub_start blocks until the hub listens (at
 * most PT_AUTOHUB_START_TIMEOUT_MS) and forks: from a multi-threaded process
 * the child only calls async-signal-safe functions before exec.
 */
#ifndef PT_HUB_AUTOHUB_H
#define PT_HUB_AUTOHUB_H

#include <stddef.h>

/* Seconds an auto-started hub waits after its last reader left (or for its
 * first) before it lets the job go. */
#define PT_AUTOHUB_IDLE_EXIT 5.0
#define PT_AUTOHUB_START_TIMEOUT_MS 10000

/* target's segment (a pid: its newest, as a reader takes it; or a segment
 * name) when it is this user's, valid, its job runs and no reader holds it:
 * its name into name. 0, -ENOENT (no such segment), -ENOMEM. */
int pt_autohub_free_segment(const char *target, char *name, size_t cap);

/* Start a hub for target's free running segment (pt_autohub_free_segment):
 * hub is the pytrace-hub to run (NULL: the one beside this program, else
 * pytrace-hub on PATH). It runs in its own session, a grandchild of the
 * caller (never its zombie), stdin and stderr on /dev/null. Returns once it
 * listens: 0 with the segment's name in segment and the hub's socket path in
 * sock (either may be NULL). -ENOENT: no running job that no one reads (the
 * caller reads directly); other negative errno with one line in err (the hub
 * did not start: another reader's hub may have taken the segment first). */
int pt_autohub_start(const char *target, const char *hub, char *segment, size_t segcap, char *sock,
                     size_t sockcap, char *err, size_t errlen);

#endif /* PT_HUB_AUTOHUB_H */
