"""Output files that a planted link cannot redirect and a failure cannot half-write.

`create(path)` makes a new file beside `path` (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600:
recordings and exports hold command lines and code names) and returns it open; `commit`
renames it over `path` (a symlink planted at `path` is replaced, its target untouched);
`discard` removes it. `same_file(a, b)` tells an output that is the input.
"""

import os
import secrets


def _temp_name(path):
    d, base = os.path.split(os.path.abspath(path))
    return os.path.join(d, ".%s.%s.tmp" % (base, secrets.token_hex(6)))


def create(path, binary=True, buffering=-1):
    """A new file beside `path`, open for writing: (file object, temporary path)."""
    for _ in range(16):
        tmp = _temp_name(path)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError("cannot create a temporary file beside %s" % path)
    try:
        if binary:
            f = os.fdopen(fd, "wb", buffering=buffering)
        else:
            f = os.fdopen(fd, "w", buffering=buffering, encoding="utf-8", newline="\n")
    except BaseException:
        # fdopen's file object may own fd already and have closed it (Ctrl-C inside open()):
        # closing it again would turn the KeyboardInterrupt into EBADF
        try:
            os.close(fd)
        except OSError:
            pass
        os.unlink(tmp)
        raise
    return f, tmp


def commit(tmp, path):
    """Put the finished file at `path` (atomically: readers see the old or the new)."""
    os.replace(tmp, path)


def discard(tmp):
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


def same_file(a, b):
    """True if `b` exists and is the file `a` (same device and inode, links followed)."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
