/* libFuzzer target: a recording file from anywhere, exported (viewer/core/export.c)
 * to every timeline format and pstats, as `pytrace export` does: the walk, the
 * task rules (tasks.c) and the writers must not crash, hang or read out of
 * bounds on any input. The first byte picks the format. */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "viewer/core/export.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int formats[] = {PT_EXPORT_PERFETTO, PT_EXPORT_CHROME, PT_EXPORT_SPEEDSCOPE, PT_EXPORT_PSTATS};
    if (!size)
        return 0;
    int format = formats[data[0] % 4];
    int uncompressed = data[0] & 4, filtered = data[0] & 8;
    char path[] = "/tmp/pt-fuzz-export-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 0;
    if (write(fd, data + 1, size - 1) != (ssize_t)(size - 1)) {
        close(fd);
        unlink(path);
        return 0;
    }
    close(fd);
    int out = open("/dev/null", O_WRONLY);
    if (out >= 0) {
        pt_export_opts_t o = {.format = format, .pf_uncompressed = uncompressed != 0,
                              .max_bytes = 64u << 20, .min_duration_ns = filtered ? 1000 : 0};
        pt_export_result_t res;
        (void)pt_export_file(path, out, &o, &res);
        close(out);
    }
    unlink(path);
    return 0;
}
