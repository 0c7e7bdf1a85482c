/*
 * pytrace-top: the live terminal view of a traced job.
 *
 *   pytrace-top                      pick a live segment (arrows + Enter)
 *   pytrace-top PID|SEGMENT          attach and show it live
 *   pytrace-top PID --once [--json]  print the table once and exit
 *   pytrace-top --file REC [--follow] [--once [--json]]
 *                                    show a recording (viewer/core/recfile.h) the
 *                                    same way; a file still being written is
 *                                    followed while it grows (or, with
 *                                    --follow, until the recording ends)
 *
 * main chooses: the options (options.c), the job list when there is no target
 * (picker.c), the source (source.h: a live segment, the job's hub, or a
 * recording), then --once (headless.c) or the live view (app.c, view.c).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "app.h"
#include "crt.h"
#include "top.h"
#include "viewer/hub/autohub.h"

/* The stream of o's target: its hub, a hub started for it, the segment itself, or
 * the recording. 0, or a negative errno with the reason in err ("" if none). */
static int open_source(const Options *o, Source **out, char *err, size_t errlen)
{
    int rc = -ENOENT;
    if (!o->file && !o->no_hub && !(o->once && o->duration <= 0)) {
        /* a view that follows a job reads it through its hub: the one that holds it, or
         * one started now for a running job that no one reads (viewer/hub/autohub.h), so
         * that other readers (record, pytrace.Reader, another view) can join; a one-shot
         * table of what is there now (--once without --duration) takes it directly */
        char herr[512] = "";
        rc = HubSource_open(o->target, out, herr, sizeof herr);
        if (rc == -ENOENT && pt_autohub_start(o->target, NULL, NULL, 0, NULL, 0, herr, sizeof herr) == 0)
            rc = HubSource_open(o->target, out, herr, sizeof herr);
    }
    if (rc != 0)
        rc = o->file ? FileSource_open(o->file, o->follow, out, err, errlen)
                     : LiveSource_open(o->target, out, err, errlen);
    /* held: by a hub, read through it (any number of readers may); a hub that let the
     * segment go meanwhile (its last reader left) leaves it to be read directly */
    for (int tries = 0; rc == -EBUSY && !o->file && !o->no_hub && tries < 3; tries++) {
        char herr[512] = "";
        int hrc = HubSource_open(o->target, out, herr, sizeof herr);
        if (hrc == 0)
            rc = 0;
        else if (hrc == -ENOENT)
            rc = LiveSource_open(o->target, out, err, errlen);
        else if (hrc != -ENXIO)
            snprintf(err, errlen, "%s", herr);
        if (hrc != -ENOENT)
            break;
    }
    return rc;
}

int main(int argc, char **argv)
{
    Options o = {.sort = PT_AGG_SORT_SELF};
    if (Options_parse(argc, argv, &o))
        return 2;
    CRT_setLocale();
    if (o.once)
        CRT_utf8 = 1; /* output is UTF-8 text / JSON, whatever the locale */

    char chosen[128];
    int interactive_started = 0;
    if (!o.target && !o.file) {
        if (o.once || !isatty(STDOUT_FILENO))
            return Picker_print(o.all);
        if (CRT_init()) {
            fprintf(stderr, "pytrace-top: not a terminal; pass a pid with --once for a text table\n");
            return 1;
        }
        interactive_started = 1;
        if (Picker_run(chosen, sizeof chosen, o.all)) {
            CRT_done();
            return 0;
        }
        o.target = chosen;
    }

    App app = {.window_seconds = 10, .table_window = 0, .sort = o.sort, .sort_desc = 1, .panel = &TablePanel_class};
    if (o.sort == PT_AGG_SORT_NAME || o.sort == PT_AGG_SORT_FILE)
        app.sort_desc = 0;
    if (o.window > 0) {
        app.window_seconds = o.window;
        app.table_window = 1;
    }
    app.thread = o.thread;
    app.time_cpu = o.time_cpu;
    app.step_mode = o.last_step;
    char err[512] = "";
    int rc = open_source(&o, &app.source, err, sizeof err);
    if (rc) {
        if (interactive_started)
            CRT_done();
        fprintf(stderr, "pytrace-top: %s\n", err[0] ? err : strerror(-rc));
        return 1;
    }
    if (App_start(&app, o.pid, o.tree_budget)) {
        if (interactive_started)
            CRT_done();
        fprintf(stderr, "pytrace-top: out of memory\n");
        Source_close(app.source);
        return 1;
    }
    int status = 0;
    if (o.once) {
        status = Headless_run(&app, &o);
    } else if (!interactive_started && CRT_init()) {
        fprintf(stderr, "pytrace-top: not a terminal; use --once [--json] for a table on stdout\n");
        status = 1;
    } else {
        App_run(&app);
        CRT_done();
    }
    App_done(&app);
    return status;
}
