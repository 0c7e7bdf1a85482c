/*
 * Where hub sockets live (proto.h): a directory of the user, 0700, checked on
 * an fd opened without following links, so another user can neither plant
 * the directory nor swap it for a link between the check and the use.
 */
#include "proto.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm/base/err.h"

/* 0 if path is a directory of ours that no one else may enter or write. */
static int check_dir(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        pt_set_err(err, errlen, "%s: %s", path,
                e == ELOOP || e == ENOTDIR ? "not a directory (a link or a file is in its place); remove it"
                                           : strerror(e));
        return e == ELOOP ? -ENOTDIR : -e;
    }
    struct stat st;
    int rc = fstat(fd, &st);
    close(fd);
    if (rc < 0) {
        pt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return -errno;
    }
    if (st.st_uid != geteuid()) {
        pt_set_err(err, errlen, "%s belongs to uid %u, not to you (uid %u); remove it, it is not pytrace's", path,
                (unsigned)st.st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    if (st.st_mode & 077) {
        pt_set_err(err, errlen, "%s is open to other users (mode %03o); it must be 0700: chmod 700 it", path,
                (unsigned)(st.st_mode & 0777));
        return -EPERM;
    }
    return 0;
}

/* $XDG_RUNTIME_DIR/pytrace when XDG_RUNTIME_DIR is usable, else "". */
static int xdg_dir(char *out, size_t cap)
{
    const char *x = getenv("XDG_RUNTIME_DIR");
    out[0] = 0;
    if (x == NULL || x[0] != '/' || check_dir(x, NULL, 0) < 0)
        return 0;
    int n = snprintf(out, cap, "%s/pytrace", x);
    if (n < 0 || (size_t)n >= cap || (size_t)n + 48 >= PT_HUB_PATH_MAX) {
        out[0] = 0; /* too long for a socket name: use /tmp */
        return 0;
    }
    return 1;
}

int pt_hub_dirs(char out[2][PT_HUB_PATH_MAX], char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    int n = 0;
    if (xdg_dir(out[n], PT_HUB_PATH_MAX))
        n++;
    snprintf(out[n++], PT_HUB_PATH_MAX, "/tmp/pytrace-%u", (unsigned)geteuid());
    return n;
}

int pt_hub_dir(int create, char *out, size_t cap, char *err, size_t errlen)
{
    char dirs[2][PT_HUB_PATH_MAX];
    pt_hub_dirs(dirs, err, errlen);
    const char *dir = dirs[0];
    if (strlen(dir) + 1 > cap) {
        pt_set_err(err, errlen, "socket directory name too long");
        return -ENAMETOOLONG;
    }
    if (create && mkdir(dir, 0700) < 0 && errno != EEXIST) {
        int e = errno;
        pt_set_err(err, errlen, "cannot create %s: %s", dir, strerror(e));
        return -e;
    }
    int rc = check_dir(dir, err, errlen);
    if (rc < 0)
        return rc;
    memcpy(out, dir, strlen(dir) + 1);
    return 0;
}

int pt_hub_socket_path(const char *dir, const char *segment, char *out, size_t cap)
{
    while (*segment == '/')
        segment++;
    if (strchr(segment, '/') != NULL || segment[0] == 0)
        return -EINVAL;
    int n = snprintf(out, cap, "%s/%s.sock", dir, segment);
    if (n < 0 || (size_t)n >= cap || (size_t)n >= PT_HUB_PATH_MAX)
        return -ENAMETOOLONG;
    return 0;
}
