/* libFuzzer target: a recording file from anywhere, read by the recording
 * reader (viewer/core/recfile.c) and every message fed to the aggregation
 * (viewer/core/agg.c), then the table and the tree built, as pytrace-top --file
 * does. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "viewer/core/agg.h"
#include "viewer/core/recfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[] = "/tmp/pt-fuzz-rec-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        unlink(path);
        return 0;
    }
    close(fd);
    pt_recfile_t *rf = NULL;
    char err[256];
    if (pt_recfile_open(path, &rf, err, sizeof err) == 0) {
        pt_agg_t *agg = NULL;
        if (pt_agg_create(&(pt_agg_config_t){.slice_ns = 100000000ull, .slice_count = 64}, &agg) == 0) {
            const uint8_t *msg;
            size_t len;
            pt_fb_msg_t m;
            while (pt_recfile_next(rf, &msg, &len, &m) == 1)
                (void)pt_agg_feed_bytes(agg, msg, len);
            (void)pt_recfile_finish(rf);
            pt_agg_table_t t = {0};
            if (pt_agg_table(agg, &(pt_agg_query_t){.window_seconds = 5.0}, PT_AGG_SORT_SELF, 1, NULL, &t) == 0)
                pt_agg_table_free(&t);
            pt_agg_tree_t tree = {0};
            if (pt_agg_tree(agg, NULL, &tree) == 0)
                pt_agg_tree_free(&tree);
            pt_agg_counters_t c;
            pt_agg_counters(agg, &c);
            pt_agg_destroy(agg);
        }
        pt_recfile_close(rf);
    }
    unlink(path);
    return 0;
}
