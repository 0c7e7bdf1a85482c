/*
 * pt_hub protocol: how a reader talks to pytrace-hub, the one consumer of a job.
 *
 * The hub holds the consumer lock of every segment of a job (and, with
 * --subprocesses, of its process tree), drains them and serves the message
 * stream to any number of readers over a Unix-domain stream socket.
 *
 * Where the socket is (who makes it: the hub; who checks it: both):
 *
 *   dir   = $XDG_RUNTIME_DIR/pytrace   if XDG_RUNTIME_DIR is set, absolute, and
 *                                      a directory of ours with mode 0700
 *           /tmp/pytrace-<euid>        otherwise
 *   sock  = dir/<segment name without '/'>.sock
 *           e.g. /tmp/pytrace-0/pytrace-1234-0-0123456789abcdef.sock
 *
 * The directory must be a real directory (not a link) owned by the user, with
 * no permission for group or others; the hub creates it 0700 and refuses one
 * that is not so (another user may have planted it), a reader refuses it too.
 * The hub checks every connection's peer credentials (SO_PEERCRED) and refuses
 * any uid but its own; a reader checks the hub's uid the same way. A hub that
 * serves several segments (a process tree) makes one hard link of its socket
 * per segment, so the socket of any segment it holds is found by the name.
 * A reader that finds a segment's consumer lock held by pid P connects to the
 * socket of that segment and checks that the peer is P.
 *
 * The conversation (all integers little-endian, fixed sizes):
 *
 *   reader                                  hub
 *     |---- hello (32 bytes) ---------------->|   right after connect
 *     |<--- welcome (64 bytes) ---------------|   status 0: the stream follows;
 *     |                                       |   else the hub closes
 *     |<--- Message, Message, ... ------------|   size-prefixed FlatBuffers
 *     |<--- EOF ------------------------------|   every process exited, all sent
 *
 *   hello (reader writes)                   welcome (hub writes)
 *   off size                                off size
 *     0  8  magic "PTHUBHI\0"                 0  8  magic "PTHUBOK\0"
 *     8  u16 major = PT_HUB_MAJOR             8  u16 major
 *    10  u16 minor = PT_HUB_MINOR            10  u16 minor
 *    12  u32 flags (PT_HUB_HELLO_*)          12  u32 flags (PT_HUB_WELCOME_*)
 *    16  u32 queue_kib (0: hub default)      16  i32 status: 0, or -errno
 *    20  12  reserved, zero                  20  u32 queue_kib (this reader's bound)
 *                                            24  u64 hub pid
 *                                            32  u64 root pid (the job)
 *                                            40  24  reserved, zero
 *
 * A hub refuses another major (-EPROTO) and ignores hello flags and reserved
 * bytes it does not know (a newer minor). A reader refuses another major.
 * Messages follow each other with no padding; each is exactly as the reader
 * library hands it out (shm/reader.h), with the same order guarantees per
 * process; what the hub adds:
 *   - a reader that joins late first gets ProcessInfo, every Symbol so far,
 *     ThreadStart of every live thread, LostCount of a thread that dropped
 *     events, one EventChunk of Frame records per thread with a stack (its
 *     open frames, outermost first, as the tracer writes them at start), and
 *     the last ProducerStatus; then the live stream;
 *   - a reader whose queue overflowed misses messages until its queue has
 *     drained; then it gets the Symbols it missed, ThreadStart/ThreadEnd of
 *     threads that started/ended meanwhile, and per thread that lost events a
 *     LostCount (dropped_total = the producer's drops + the events this reader
 *     missed) and an EventChunk of one Lost record (count = events missed in
 *     this gap) followed by the thread's Frame records (the resync);
 *   - every reader's queue together stays within the hub's budget (--budget-mib):
 *     past it the largest queue is cut -- the messages after the one being sent
 *     are thrown away and the reader is overflowed as above; its resync waits
 *     until it has read what its socket holds; the welcome's queue_kib is at most
 *     the budget;
 *   - past --max-readers connections the hub answers status -EUSERS (queue_kib =
 *     that limit) and closes;
 *   - the synthetic EventChunks carry first_event = the index of the thread's
 *     next live event (a live chunk with the same first_event follows);
 *   - with --subprocesses, the messages of the job's child processes are
 *     tagged (Message.process = 1, 2, ... in the order the hub found them, each
 *     process's ProcessInfo first); the job's own process stays untagged (0).
 */
#ifndef PT_HUB_PROTO_H
#define PT_HUB_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "schema/pt_wire.h"

#define PT_HUB_MAJOR 1u
#define PT_HUB_MINOR 0u

#define PT_HUB_HELLO_MAGIC "PTHUBHI" /* 8 bytes with the NUL */
#define PT_HUB_WELCOME_MAGIC "PTHUBOK"
#define PT_HUB_HELLO_BYTES 32u
#define PT_HUB_WELCOME_BYTES 64u

/* hello flags */
#define PT_HUB_HELLO_LOSSLESS 0x1u /* a recorder that must get every event: granted only when
                                      the job's drop policy is Wait; the hub then stops
                                      draining while this reader's queue is full */
/* welcome flags */
#define PT_HUB_WELCOME_LOSSLESS 0x1u /* lossless granted */

typedef struct pt_hub_hello {
    char magic[8];
    uint16_t major, minor;
    uint32_t flags;
    uint32_t queue_kib;
    uint8_t reserved[12];
} pt_hub_hello_t;

typedef struct pt_hub_welcome {
    char magic[8];
    uint16_t major, minor;
    uint32_t flags;
    int32_t status;
    uint32_t queue_kib;
    uint64_t hub_pid;
    uint64_t root_pid;
    uint8_t reserved[24];
} pt_hub_welcome_t;

PT_WIRE_ASSERT(sizeof(pt_hub_hello_t) == PT_HUB_HELLO_BYTES, "hello is 32 bytes");
PT_WIRE_ASSERT(offsetof(pt_hub_hello_t, flags) == 12, "hello.flags");
PT_WIRE_ASSERT(offsetof(pt_hub_hello_t, queue_kib) == 16, "hello.queue_kib");
PT_WIRE_ASSERT(sizeof(pt_hub_welcome_t) == PT_HUB_WELCOME_BYTES, "welcome is 64 bytes");
PT_WIRE_ASSERT(offsetof(pt_hub_welcome_t, status) == 16, "welcome.status");
PT_WIRE_ASSERT(offsetof(pt_hub_welcome_t, queue_kib) == 20, "welcome.queue_kib");
PT_WIRE_ASSERT(offsetof(pt_hub_welcome_t, hub_pid) == 24, "welcome.hub_pid");
PT_WIRE_ASSERT(offsetof(pt_hub_welcome_t, root_pid) == 32, "welcome.root_pid");

/* Largest message a reader accepts from a hub (a ring chunk is at most 1 MiB;
 * a symbol a few KiB). */
#define PT_HUB_MAX_MESSAGE (64u << 20)

/* ---- the socket's directory and name (path.c) ---------------------------- */

#define PT_HUB_PATH_MAX 108 /* sizeof(sun_path) */

/* The directory for this user's hub sockets (see above) into out. create = 1:
 * make it (0700) if missing. Returns 0, or -errno with one line in err:
 * -ENOTDIR, -EPERM (not ours, or open to others), -ENAMETOOLONG. */
int pt_hub_dir(int create, char *out, size_t cap, char *err, size_t errlen);

/* All candidate directories a reader should look in (XDG first), n <= 2. */
int pt_hub_dirs(char out[2][PT_HUB_PATH_MAX], char *err, size_t errlen);

/* dir + "/" + segment name without '/' + ".sock"; -ENAMETOOLONG if too long. */
int pt_hub_socket_path(const char *dir, const char *segment, char *out, size_t cap);

#endif /* PT_HUB_PROTO_H */
