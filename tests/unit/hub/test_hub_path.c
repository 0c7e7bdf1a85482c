/*
 * viewer/hub/path.c: where hub sockets live. The directory is the user's own,
 * 0700, no link: a directory open to others, or a link or a file in its place,
 * is refused with one line; a socket name is the segment's and nothing else.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../check.h"
#include "viewer/hub/proto.h"

static char base[64];

static void test_socket_names(void)
{
    char out[PT_HUB_PATH_MAX];
    CHECK_EQ(pt_hub_socket_path("/tmp/d", "/pytrace-12-0-ab", out, sizeof out), 0);
    CHECK(strcmp(out, "/tmp/d/pytrace-12-0-ab.sock") == 0);
    CHECK_EQ(pt_hub_socket_path("/tmp/d", "pytrace-12-0-ab", out, sizeof out), 0);
    CHECK(strcmp(out, "/tmp/d/pytrace-12-0-ab.sock") == 0);
    CHECK_EQ(pt_hub_socket_path("/tmp/d", "/../../etc/x", out, sizeof out), -EINVAL); /* no path in a name */
    CHECK_EQ(pt_hub_socket_path("/tmp/d", "", out, sizeof out), -EINVAL);
    char longname[200];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CHECK_EQ(pt_hub_socket_path("/tmp/d", longname, out, sizeof out), -ENAMETOOLONG);
}

static void test_directory_checks(void)
{
    char dir[PT_HUB_PATH_MAX], err[256], hubdir[PATH_MAX];
    setenv("XDG_RUNTIME_DIR", base, 1);
    snprintf(hubdir, sizeof hubdir, "%s/pytrace", base);

    /* made 0700 when missing, and used */
    CHECK_EQ(pt_hub_dir(1, dir, sizeof dir, err, sizeof err), 0);
    CHECK(strcmp(dir, hubdir) == 0);
    struct stat st;
    CHECK(lstat(hubdir, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);

    /* open to others: refused, with the mode in the line */
    chmod(hubdir, 0755);
    err[0] = 0;
    CHECK_EQ(pt_hub_dir(1, dir, sizeof dir, err, sizeof err), -EPERM);
    CHECKF(strstr(err, "0700") != NULL, "%s", err);
    chmod(hubdir, 0700);

    /* a link in its place (to a directory of ours): refused, never followed */
    char target[PATH_MAX];
    snprintf(target, sizeof target, "%s/elsewhere", base);
    CHECK(rmdir(hubdir) == 0);
    CHECK(mkdir(target, 0700) == 0);
    CHECK(symlink(target, hubdir) == 0);
    err[0] = 0;
    CHECK_EQ(pt_hub_dir(1, dir, sizeof dir, err, sizeof err), -ENOTDIR);
    CHECKF(strstr(err, "not a directory") != NULL, "%s", err);
    unlink(hubdir);
    rmdir(target);

    /* an XDG_RUNTIME_DIR that is not usable (relative): /tmp/pytrace-<uid> instead */
    setenv("XDG_RUNTIME_DIR", "relative/dir", 1);
    char dirs[2][PT_HUB_PATH_MAX];
    CHECK_EQ(pt_hub_dirs(dirs, err, sizeof err), 1);
    char want[64];
    snprintf(want, sizeof want, "/tmp/pytrace-%u", (unsigned)geteuid());
    CHECK(strcmp(dirs[0], want) == 0);
}

int main(void)
{
    snprintf(base, sizeof base, "/tmp/pt-hub-path-XXXXXX");
    if (mkdtemp(base) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    chmod(base, 0700);
    test_socket_names();
    test_directory_checks();
    char hubdir[PATH_MAX];
    snprintf(hubdir, sizeof hubdir, "%s/pytrace", base);
    rmdir(hubdir);
    rmdir(base);
    return failures != 0;
}
