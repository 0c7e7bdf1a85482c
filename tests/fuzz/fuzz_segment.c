/* libFuzzer target: a segment file from anywhere (a crashed producer, another
 * process scribbling on it): written to /dev/shm under a name of ours, then
 * validated, attached and drained by the reader library (shm/reader.c) as
 * pytrace-top and pytrace record do. */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "shm/reader.h"
#include "shm/segment.h"

static int on_msg(void *ctx, uint32_t type, const uint8_t *msg, size_t len)
{
    (void)ctx;
    (void)type;
    (void)msg;
    (void)len;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= sizeof(pt_seg_header_t)) {
        char err[256];
        (void)pt_segment_validate((const pt_seg_header_t *)(const void *)data, size, err, sizeof err);
    }
    char name[96], path[128];
    snprintf(name, sizeof name, "/pytrace-%ld-0-00000000f0220000", (long)getpid());
    snprintf(path, sizeof path, "/dev/shm%s", name);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        unlink(path);
        return 0;
    }
    close(fd);
    pt_reader_t *r = NULL;
    char err[256];
    if (pt_reader_attach(name, 0, &r, err, sizeof err) == 0) {
        for (int i = 0; i < 4; i++)
            if (pt_reader_poll(r, on_msg, NULL, 0) < 0 && i > 1)
                break;
        pt_reader_stats_t st;
        pt_reader_stats(r, &st);
        pt_reader_detach(r, 0);
    }
    unlink(path);
    return 0;
}
