"""Root's `pytrace attach` / `detach` against a second local user (issue 18, 1-2), detach
with no room on disk, and `pytrace dump` of a job a hub holds or that runs in a chroot
(issue 19, 12).

The second user is the suite's (support/users.py: a real second uid). It owns the target
process and plants, in every `pytrace-attach-*` directory root makes under /tmp, `cancelled`
as a symlink to a root-only file, `result` as a FIFO or as a symlink to that file; or it
binds the abstract socket name that was the attach lock. Root's file must stay whole and
unread, and root's attach end within its own --timeout. Every command has a timeout."""

import os
import re
import shutil
import subprocess
import pwd
import sys
import tempfile
import textwrap
import time

import pytest

from helpers import PY
from attachkit import JOB, STACKS_JOB, Job, python_frames, segments_of, start_stacks_job
from users import other_uid, popen_other  # noqa: F401 - other_uid: a fixture

NEEDS_314 = pytest.mark.skipif(sys.version_info < (3, 14), reason="attaching needs Python 3.14+ "
                               "(PEP 768 sys.remote_exec); this is %d.%d" % sys.version_info[:2])
NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd to act as a second user")

SECRET = "root's secret, never to be read or truncated by another user\n"


def pytrace(*args, timeout=60, **kw):
    return subprocess.run([PY, "-m", "pytrace", *args], capture_output=True, text=True,
                          timeout=timeout, **kw)


# The other user's process: its main thread blocks in C (stdin) so that root's attach runs
# into its timeout (and writes `cancelled`); a thread of it plants its files in every new
# attach directory under /tmp as soon as it appears.
PLANTER = """
    import threading, time
    how, secret = sys.argv[1], sys.argv[2]
    planted = []
    def plant():
        seen = set(os.listdir("/tmp"))      # only what root makes from now on
        end = time.time() + 60
        while time.time() < end:
            for name in os.listdir("/tmp"):
                if not name.startswith("pytrace-attach-") or name in seen:
                    continue
                seen.add(name)
                folder = os.path.join("/tmp", name)
                try:
                    if how == "result-held-open":
                        # the one thing root's directory lets this user do: write into the
                        # FIFO root made; half an answer, and never closed (root makes the
                        # FIFO and opens its reading end a moment after the directory
                        # appears: tried until then, as for result-unhashable)
                        for _ in range(2000):
                            try:
                                fd = os.open(os.path.join(folder, "result"), os.O_WRONLY | os.O_NONBLOCK)
                                break
                            except OSError:
                                time.sleep(0.001)
                        os.write(fd, b"{'status': 'ok', ")
                        planted.append(fd)
                        continue
                    if how == "result-unhashable":
                        # an answer that is a literal but no dict a set can hold: {[]: 1}
                        # (root gives the FIFO to this user, and opens its reading end,
                        # a moment after the directory appears)
                        for _ in range(2000):
                            try:
                                fd = os.open(os.path.join(folder, "result"), os.O_WRONLY | os.O_NONBLOCK)
                                break
                            except OSError:
                                time.sleep(0.001)
                        os.write(fd, b"{[]: 1}")
                        os.close(fd)
                        planted.append(name)
                        continue
                    if how == "cancelled-symlink":
                        os.symlink(secret, os.path.join(folder, "cancelled"))
                    else:
                        path = os.path.join(folder, "result")
                        try:
                            os.unlink(path)
                        except FileNotFoundError:
                            pass
                        if how == "result-fifo":
                            os.mkfifo(path, 0o666)
                        else:
                            os.symlink(secret, path)
                    planted.append(name)
                except OSError as e:
                    sys.stderr.write("refused %s: %s\\n" % (name, e.strerror))
                    sys.stderr.flush()
            time.sleep(0.001)
    threading.Thread(target=plant, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.readline()        # the main thread blocked in C: root's attach times out
    print("planted", len(planted), flush=True)
"""


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "secret"
    path.write_text(SECRET)
    os.chmod(path, 0o600)
    os.chmod(tmp_path, 0o755)       # the other user may name the file, not read it
    return path


@NEEDS_314
@NEEDS_ROOT
@pytest.mark.parametrize("how", ["cancelled-symlink", "result-fifo", "result-symlink", "result-held-open",
                                 "result-unhashable"])
def test_root_attach_follows_no_file_the_other_user_plants(other_uid, secret, how):  # noqa: F811
    """A symlink as `cancelled` (root wrote it at the timeout: the file was truncated), a
    FIFO as `result` (root's read hung past its --timeout), a symlink as `result` (root
    printed the file): the directory is root's, the other user can plant nothing in it,
    root's file stays whole and unread, and root's attach says its timeout in one line.
    The FIFO root made is the user's to write: half an answer held open past the timeout
    still ends root's attach at its timeout; an answer no dict can hold ({[]: 1}) is one
    line of error."""
    proc = popen_other(PLANTER, how, str(secret), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        start = time.monotonic()
        r = pytrace("attach", "--timeout", "1.5", str(proc.pid), timeout=30)
        took = time.monotonic() - start
        out, err = proc.communicate("go\n", timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert secret.read_text() == SECRET, "root's file was changed through a planted link"
    if how == "result-unhashable":
        # the user's word about its own process, refused in one line (it was a TypeError
        # traceback out of root's attach)
        assert out == "planted 1\n", (out, err)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and "unreadable result" in r.stderr, r.stderr
        return
    assert "secret" not in r.stderr and "secret" not in r.stdout, r.stderr
    assert r.returncode == 1 and "did not run the attach code within 1.5 s" in r.stderr, r.stderr
    assert took < 15, "root's attach took %.1f s with a 1.5 s --timeout" % took
    if how == "result-held-open":
        assert out == "planted 1\n", (out, err)    # it wrote, and held it past the timeout
        return
    assert out == "planted 0\n", (out, err)
    assert "refused pytrace-attach-" in err and "Permission denied" in err, err


@NEEDS_314
@NEEDS_ROOT
def test_root_attaches_to_and_detaches_another_users_process(other_uid):  # noqa: F811
    """The answer of a process of another uid comes back through the FIFO root made (the
    only thing in root's directory that user may write): attach and detach both work, the
    segment is that user's, and the process ends unchanged."""
    proc = popen_other(JOB, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        r = pytrace("attach", "--timeout", "10", str(proc.pid), timeout=60)
        assert r.returncode == 0 and "tracing pid %d" % proc.pid in r.stderr, r.stderr
        segments = segments_of(proc.pid)
        assert len(segments) == 1 and os.stat("/dev/shm/" + segments[0]).st_uid == other_uid
        proc.stdin.write("100\n")
        proc.stdin.flush()
        assert proc.stdout.readline().startswith("done 100 ")
        r = pytrace("detach", "--timeout", "10", str(proc.pid), timeout=60)
        assert r.returncode == 0 and "no longer traced" in r.stderr, r.stderr
        assert segments_of(proc.pid) == []
        out, err = proc.communicate("quit\n", timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 3 and err == "", err
    assert "tools [None, None, None, None, None, None]\n" in out, out


# Root's attach reaches a target of another Python version (3.14 for pytrace on 3.15, and
# the other way round) by running that target's interpreter. The other user's job runs
# root's binary from a folder of theirs (a hard link, where fs.protected_hardlinks is 0;
# here a copy root made: root's, writable by no one else) or a copy of their own; the
# interpreter finds its standard library beside it (lib/pythonX.Y, the user's to change).
# Once the job runs, the user swaps in a library of their own (root's files, but
# encodings/utf_8.py, which every start imports, leaves a file named by the uid that ran it).
_OTHER = "3.15" if sys.version_info[:2] == (3, 14) else "3.14"
_PREFIX_JOB = """
import sys
print("prefix", sys.prefix, flush=True)
sys.stdin.readline()
print("done", flush=True)
"""
_SWAP = r"""
set -eu
lib=$1 real=$2 ran=$3
rm "$lib"; mkdir "$lib" "$lib/encodings"
for f in "$real"/*; do [ "${f##*/}" = encodings ] || ln -s "$f" "$lib/"; done
for f in "$real"/encodings/*; do [ "${f##*/}" = utf_8.py ] || ln -s "$f" "$lib/encodings/"; done
{ echo 'import posix; posix.close(posix.open("'"$ran"'/ran-as-%d" % posix.geteuid(), posix.O_WRONLY | posix.O_CREAT, 0o644))'
  cat "$real/encodings/utf_8.py"; } > "$lib/encodings/utf_8.py"
"""


@NEEDS_314
@NEEDS_ROOT
@pytest.mark.skipif(shutil.which("python" + _OTHER) is None, reason="needs python" + _OTHER)
@pytest.mark.parametrize("owner,name", [("root", "python" + _OTHER), ("user", "python" + _OTHER),
                                        ("root", "python")])
def test_root_attach_runs_no_interpreter_or_source_of_another_user(other_uid, owner, name):  # noqa: F811
    """Root's pytrace attaching the other user's job on the other Python version runs that
    job's interpreter only where dump would (the same file, its directories and standard
    library root's alone): here it refuses in one line, and nothing of the user's runs as
    root (it ran their os.py and encodings: the interpreter took its library from their
    folder). A name without the version (python) is asked its version as that user. The
    job ends unchanged."""
    gid = pwd.getpwuid(other_uid).pw_gid
    home = tempfile.mkdtemp(prefix="pytrace-attachexe-", dir="/tmp")
    proc = None
    try:
        os.chmod(home, 0o755)
        os.makedirs(home + "/py/bin")
        os.makedirs(home + "/py/lib")
        exe = home + "/py/bin/" + name
        shutil.copy(os.path.realpath(shutil.which("python" + _OTHER)), exe)
        os.chmod(exe, 0o755)
        lib = home + "/py/lib/python" + _OTHER
        os.symlink("/usr/lib/python" + _OTHER, lib)
        os.lchown(lib, other_uid, gid)
        for d in (home, home + "/py", home + "/py/bin", home + "/py/lib"):
            os.chown(d, other_uid, gid)
        if owner == "user":
            os.chown(exe, other_uid, gid)
        as_user = dict(user=other_uid, group=gid, extra_groups=[])
        proc = subprocess.Popen([exe, "-c", _PREFIX_JOB], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=home, **as_user)
        assert proc.stdout.readline() == "prefix %s/py\n" % home    # its library is the folder's
        subprocess.run(["sh", "-c", _SWAP, "swap", lib, "/usr/lib/python" + _OTHER, home], check=True,
                       timeout=30, **as_user)
        r = pytrace("attach", "--timeout", "3", str(proc.pid), timeout=60)
        dump = pytrace("dump", str(proc.pid), timeout=60)     # the same rule
        ran = sorted(n for n in os.listdir(home) if n.startswith("ran-as-"))
        out, err = proc.communicate("go\n", timeout=30)
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        shutil.rmtree(home, ignore_errors=True)
    assert "ran-as-0" not in ran, "root ran the other user's Python source (%s): %s" % (ran, r.stderr)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    mine = "root does not run it" if owner == "root" else "this pytrace runs on"
    assert mine in r.stderr, r.stderr
    assert dump.returncode == 1 and dump.stderr.count("\n") == 1, dump.stderr
    assert ("root does not run it" if owner == "root" else "installed for Python") in dump.stderr, dump.stderr
    assert out == "done\n" and proc.returncode == 0, (out, err)


@NEEDS_314
@NEEDS_ROOT
# solo: it squats the machine-wide lock directories (/tmp/pytrace-locks-0, -UID), which an
# attach in a test beside it would meet (tests/run_all.sh runs it alone)
@pytest.mark.solo
def test_other_user_cannot_take_the_attach_lock(other_uid, tmp_path):  # noqa: F811
    """The other user binds the abstract socket name that was the lock (root's attach failed
    at once, record PID waited its whole timeout) and makes the lock directories of the
    fallback names first: root's attach, record and detach of root's own job still work,
    and exact."""
    job = Job(tmp_path)
    squat = popen_other("""
        import socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind("\\0pytrace-attach-%d" % int(sys.argv[1]))
        s.listen(1)
        for d in ("/tmp/pytrace-locks-0", "/tmp/pytrace-locks-%d" % os.getuid()):
            try:
                os.mkdir(d, 0o777)
                os.chmod(d, 0o777)
            except OSError:
                pass
        print("ready", flush=True)
        sys.stdin.readline()
    """, str(job.pid), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert squat.stdout.readline() == "ready\n"
        r = pytrace("attach", "--timeout", "5", str(job.pid), timeout=30)
        assert r.returncode == 0 and "tracing pid %d" % job.pid in r.stderr, r.stderr
        job.run(100)
        r = pytrace("detach", "--timeout", "5", str(job.pid), timeout=30)
        assert r.returncode == 0 and "no longer traced" in r.stderr, r.stderr
        rec = tmp_path / "rec.pytrace"
        r = pytrace("record", "-o", str(rec), "--duration", "0.5", "--attach-timeout", "5",
                    str(job.pid), timeout=30)
        assert r.returncode == 0, r.stderr
        assert segments_of(job.pid) == []
    finally:
        squat.kill()
        squat.wait()
        for d in ("/tmp/pytrace-locks-0", "/tmp/pytrace-locks-%d" % other_uid):
            if os.path.isdir(d) and os.stat(d).st_uid == other_uid:
                shutil.rmtree(d, ignore_errors=True)
        code, output = job.finish()
        job.kill()
    assert code == 3 and "pytrace modules []\n" in output


# Run as root in a mount namespace of its own (unshare -m), with the job inside it too
# (/proc/PID/maps names files of the namespace a process started in, and the remote
# debugging code opens them by those names). It starts the job, attaches, then fills the
# disk: every temporary directory tempfile may pick (/tmp, /var/tmp, the working directory;
# TMPDIR unset) becomes a filled tmpfs of 64 KiB. Detach with /dev/shm full too, then with
# only the disk full. Prints what it saw as JSON.
FULL_DISK_DRIVER = r"""
import json, os, re, subprocess, sys
PY = sys.executable
for k in ("TMPDIR", "TEMP", "TMP"):
    os.environ.pop(k, None)
job = subprocess.Popen([PY, sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert job.stdout.readline() == "ready\n"
def pytrace(*args):
    r = subprocess.run([PY, "-m", "pytrace", *args, str(job.pid)], capture_output=True, text=True,
                       timeout=60)
    return [r.returncode, r.stderr]
def segments():
    return [n for n in os.listdir("/dev/shm") if re.fullmatch(r"pytrace-%d-.*" % job.pid, n)]
def fill(path):
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", path], check=True)
    subprocess.run(["dd", "if=/dev/zero", "of=%s/fill" % path, "bs=4k"], capture_output=True)
def run(n):
    job.stdin.write("%d\n" % n)
    job.stdin.flush()
    return job.stdout.readline()
seen = {"attach": pytrace("attach", "--timeout", "10"), "run1": run(100)}
for path in ("/tmp", "/var/tmp", "/usr/tmp"):
    if os.path.isdir(path):
        fill(path)
os.chdir("/tmp")
fill("/dev/shm")
seen["both_full"] = pytrace("detach", "--timeout", "10")
subprocess.run(["umount", "/dev/shm"], check=True)
seen["traced_after_failure"] = segments()
seen["disk_full"] = pytrace("detach", "--timeout", "10")
seen["traced_after_detach"] = segments()
seen["left_in_shm"] = [n for n in os.listdir("/dev/shm") if n.startswith(".pytrace-attach-")]
seen["run2"] = run(100)
out, _ = job.communicate("quit\n", timeout=60)
seen["exit"] = [job.returncode, out]
print(json.dumps(seen))
"""


@NEEDS_314
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare to mount a full tmpfs")
def test_detach_with_a_full_disk_still_detaches(tmp_path):
    """The disk full: detach writes its request to /dev/shm instead and the job is detached
    (it was a raw OSError traceback, and the job stayed traced). With /dev/shm full too:
    one line, nothing changed (still traced)."""
    import json
    job = tmp_path / "job.py"
    job.write_text(JOB)
    driver = tmp_path / "driver.py"
    driver.write_text(FULL_DISK_DRIVER)
    r = subprocess.run(["unshare", "-m", "--propagation", "private", PY, str(driver), str(job)],
                       capture_output=True, text=True, timeout=120, cwd="/")
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert seen["attach"][0] == 0, seen["attach"]
    assert seen["run1"].startswith("done 100 "), seen
    code, err = seen["both_full"]
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, err
    assert "No space left on device" in lines[0] and "nothing was changed" in lines[0], err
    assert seen["traced_after_failure"] != [], seen
    code, err = seen["disk_full"]
    assert code == 0 and "no longer traced" in err and "Traceback" not in err, err
    assert seen["traced_after_detach"] == [] and seen["left_in_shm"] == [], seen
    assert seen["run2"].startswith("done 100 "), seen
    assert seen["exit"][0] == 3 and "pytrace modules []\n" in seen["exit"][1], seen


def _hub_pid(out):
    m = re.search(r"pytrace hub: pid (\d+) serves", out)
    assert m, out
    return int(m.group(1))


def test_dump_of_a_job_a_hub_holds_reads_through_the_hub(tmp_path):
    """A hub holds the job's segment: dump reads the stacks through it (the hub serves a
    reader that joins late every thread's open frames), complete, and names the hub by its
    pid; it said "is being read by pid N (pytrace-top?)" of the hub, or (3.14+) read the
    process's memory instead."""
    proc = start_stacks_job(tmp_path, traced=True)
    hub = None
    try:
        r = pytrace("hub", str(proc.pid), timeout=60)
        assert r.returncode == 0, r.stderr
        hub = _hub_pid(r.stdout + r.stderr)
        r = pytrace("dump", str(proc.pid), timeout=60)
        assert r.returncode == 0, r.stderr
        assert "stacks from its pytrace segment /pytrace-%d-" % proc.pid in r.stdout, r.stdout
        assert "through the hub that holds it (pid %d)" % hub in r.stdout, r.stdout
        assert "older frames not known" not in r.stdout, r.stdout
        assert python_frames(r.stdout, "blocked")[:3] == ["h", "g", "f"], r.stdout
        assert "<module>" in python_frames(r.stdout, "MainThread"), r.stdout
    finally:
        out, _ = proc.communicate("go\n", timeout=120)
        if hub is not None:
            try:
                os.kill(hub, 15)
            except ProcessLookupError:
                pass
    assert proc.returncode == 0 and out == "finished\n"


def test_a_plain_reader_holding_the_segment_is_named_by_its_name(tmp_path):
    """A reader that is not a hub holds the segment: the message names it by its own
    command line (it guessed "pytrace-top?"), and a long command line, the holder's and
    the job's, ends at a word."""
    script = tmp_path / ("stacks_job_with_a_rather_long_name_" + "x" * 40 + ".py")
    script.write_text(STACKS_JOB)
    proc = subprocess.Popen([PY, "-m", "pytrace", "run", str(script), "argument-one", "argument-two"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    holder = None
    try:
        assert proc.stdout.readline() == "ready\n"
        holder = subprocess.Popen([PY, "-c", textwrap.dedent("""
            import sys, time
            from pytrace import _pytrace
            r = _pytrace.Reader(sys.argv[1])
            print("holding", flush=True)
            sys.stdin.readline()
        """), str(proc.pid)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline() == "holding\n"
        r = subprocess.run([PY, "-c", textwrap.dedent("""
            import sys
            from pytrace.attach import inspect_target, describe
            from pytrace.dump import stacks_from_segment
            print(describe(inspect_target(int(sys.argv[1]))))
            try:
                stacks_from_segment(int(sys.argv[1]))
            except OSError as e:
                print(e)
        """), str(proc.pid)], capture_output=True, text=True, timeout=60)
        described, error = r.stdout.splitlines()[:2]
        # the holder by its own command line, ended at a word: "PY -c ..."
        assert "is being read by pid %d (%s -c " % (holder.pid, PY) in error, error
        assert " ...); stop that reader first" in error and "pytrace-top?" not in error, error
        assert described.endswith(" ...)"), described
        words = described[len("pid %d (" % proc.pid):-len(" ...)")].split(" ")
        assert all(w in proc.args for w in words[2:]), described   # whole words only
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        out, _ = proc.communicate("go\n", timeout=120)
    assert proc.returncode == 0 and out == "finished\n"


def _sidroot():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "sidroot.sh")


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/opt/pytrace-sid/usr/bin/python3.14")
                    or sys.version_info >= (3, 14),
                    reason="needs root, and the Debian root's python3.14 as a chrooted process seen "
                           "from this machine's older Python")
def test_dump_of_a_process_in_a_chroot(tmp_path):
    """A Python 3.14 process inside the Debian root (a chroot: its interpreter needs that
    root's C library), dumped from outside: its own interpreter reads its stacks, run in its
    root. It said "list index out of range"."""
    script = "/tmp/pytrace-chroot-dump-%d.py" % os.getpid()
    inside = "/opt/pytrace-sid" + script
    with open(inside, "w") as f:
        f.write(STACKS_JOB)
    proc = subprocess.Popen(["bash", _sidroot(), "run", "/usr/bin/python3.14", script],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd="/tmp")
    try:
        assert proc.stdout.readline() == "ready\n"
        pids = subprocess.run(["pgrep", "-f", script], capture_output=True, text=True).stdout.split()
        target = [int(p) for p in pids
                  if os.readlink("/proc/%s/exe" % p).endswith("/python3.14")]
        assert len(target) == 1, pids
        r = pytrace("dump", str(target[0]), timeout=60)
        assert r.returncode == 0, r.stderr
        assert "stacks read from its memory" in r.stdout, r.stdout
        assert python_frames(r.stdout, "blocked")[:3] == ["h", "g", "f"], r.stdout
        assert "Thread.join" in python_frames(r.stdout, "MainThread"), r.stdout
    finally:
        out, _ = proc.communicate("go\n", timeout=120)
        os.unlink(inside)
    assert out == "finished\n"


# A root of root's (every directory down to the interpreter root's, as dump checked), whose
# interpreter finds its standard library in a folder another user owns (lib/ beside its
# bin/): the user puts Python source there (as itself, inside) once its process runs, and root's dump, which
# runs that interpreter chrooted, ran it as root. Built in a private mount namespace, on a
# small tmpfs, from the Debian root's /usr and /etc (read-only).
_LIB_ROOT = r"""
set -eu
R=$1; OU=$2; PY=$3; SID=$4
mount -t tmpfs -o size=8m,mode=755 pytrace-test $R
mkdir -p $R/usr $R/etc $R/tmp $R/proc $R/opt/py/bin $R/opt/py/lib
chmod 1777 $R/tmp
mount --bind $SID/usr $R/usr; mount -o remount,bind,ro $R/usr
mount --bind $SID/etc $R/etc; mount -o remount,bind,ro $R/etc
ln -s usr/lib $R/lib; ln -s usr/lib64 $R/lib64; ln -s usr/bin $R/bin
touch $R/opt/py/bin/python3.14
mount --bind $SID/usr/bin/python3.14 $R/opt/py/bin/python3.14
mount -t proc proc $R/proc
chown $OU $R/opt/py/lib
ln -s /usr/lib/python3.14 $R/opt/py/lib/python3.14
chroot --userspec=$OU:$OU $R /opt/py/bin/python3.14 -c "import sys, time; print(sys.prefix, flush=True); time.sleep(60)" > $R/tmp/out &
JOB=$!
trap 'kill $JOB 2>/dev/null' EXIT
for i in $(seq 100); do [ -s $R/tmp/out ] && break; sleep 0.1; done
TARGET=$(pgrep -P $JOB || echo $JOB)
chroot --userspec=$OU:$OU $R /bin/sh -c "
  rm /opt/py/lib/python3.14; mkdir -p /opt/py/lib/python3.14/encodings
  touch /opt/py/lib/python3.14/os.py
  echo 'import posix; posix.close(posix.open(\"/tmp/ran-as-%d\" % posix.getuid(), posix.O_WRONLY | posix.O_CREAT, 0o644))' > /opt/py/lib/python3.14/encodings/__init__.py"
echo "prefix $(cat $R/tmp/out)"
timeout 60 $PY -m pytrace dump $TARGET && echo "dump rc 0" || echo "dump rc $?"
echo "ran: $(ls $R/tmp | grep ran-as- || true)"
"""


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/opt/pytrace-sid/usr/bin/python3.14")
                    or shutil.which("unshare") is None or shutil.which("setpriv") is None,
                    reason="needs root, unshare, setpriv and the Debian root's python3.14")
def test_root_dump_runs_no_python_source_of_another_user_in_a_chroot(other_uid, tmp_path):  # noqa: F811
    """The chroot's directories down to its interpreter are root's, but the standard
    library the interpreter finds (/opt/py/lib/python3.14, beside its bin/) is in a folder
    the process's user owns: root must refuse to run that interpreter, and say why."""
    root = tmp_path / "root"
    root.mkdir()
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c", _LIB_ROOT, "lib-root",
                        str(root), str(other_uid), PY, "/opt/pytrace-sid"],
                       capture_output=True, text=True, timeout=120)
    assert "prefix /opt/py\n" in r.stdout, (r.stdout, r.stderr)     # it ran from that library
    assert "ran: \n" in r.stdout, (r.stdout, r.stderr)              # nothing of the user's ran
    assert "dump rc 1" in r.stdout, (r.stdout, r.stderr)
    assert "not root's alone" in r.stderr and "standard library" in r.stderr, r.stderr


# The other user's process, chrooted (in a user namespace of its own, where it may) into
# the Debian root, all of it root's, keeping an fd of a directory of its own (fd 9): told
# to, it moves its root there. That directory has /usr/bin/python3.14 too, a script of
# the user's that leaves a file behind, owned by whoever ran it.
_FLIPPER = """
import os, sys
print("ready", flush=True)
sys.stdin.readline()
os.fchdir(9)
os.chroot(".")
print("flipped", flush=True)
sys.stdin.readline()
"""


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/opt/pytrace-sid/usr/bin/python3.14")
                    or shutil.which("unshare") is None or shutil.which("setpriv") is None,
                    reason="needs root, unshare, setpriv and the Debian root's python3.14")
def test_root_dump_enters_the_root_it_checked(other_uid, monkeypatch):  # noqa: F811
    """Between dump's check of the process's root and its chroot into /proc/PID/root, the
    process moves its root to a directory of its user's: root must run the interpreter of
    the root it checked (pinned by an fd), never one of that user's."""
    import tempfile
    from pytrace import dump
    sid = "/opt/pytrace-sid"
    if subprocess.run(["setpriv", "--reuid=%d" % other_uid, "--regid=%d" % other_uid, "--clear-groups",
                       "unshare", "-r", "true"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("no unprivileged user namespaces here")
    evil = tempfile.mkdtemp(prefix="pytrace-test-flip-", dir="/tmp")
    proc = None
    try:
        for path in ("usr/bin", "usr/lib/x86_64-linux-gnu", "lib64"):
            os.makedirs(os.path.join(evil, path))
        shutil.copy(sid + "/usr/bin/dash", evil + "/usr/bin/dash")
        shutil.copy(sid + "/usr/lib/x86_64-linux-gnu/libc.so.6", evil + "/usr/lib/x86_64-linux-gnu/")
        shutil.copy(os.path.realpath(sid + "/usr/lib64/ld-linux-x86-64.so.2"), evil + "/lib64/")
        with open(evil + "/usr/bin/python3.14", "w") as f:
            f.write("#!/usr/bin/dash\necho > /ran\n")
        os.chmod(evil + "/usr/bin/python3.14", 0o755)
        for dirpath, dirnames, filenames in os.walk(evil):
            for name in [dirpath] + [os.path.join(dirpath, n) for n in filenames]:
                os.chown(name, other_uid, other_uid)
        os.chmod(evil, 0o755)
        proc = subprocess.Popen(["setpriv", "--reuid=%d" % other_uid, "--regid=%d" % other_uid,
                                 "--clear-groups", "unshare", "-r", "bash", "-c",
                                 'exec 9<"$1"; exec chroot "$2" /usr/bin/python3.14 -c "$3"', "flip",
                                 evil, sid, _FLIPPER],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd="/")
        assert proc.stdout.readline() == "ready\n", proc.stderr.read()
        checked = dump._trusted_root
        flipped = []

        def check_then_flip(*args):
            ok = checked(*args)
            if not flipped:
                proc.stdin.write("flip\n")
                proc.stdin.flush()
                flipped.append(proc.stdout.readline())
            return ok

        monkeypatch.setattr(dump, "_trusted_root", check_then_flip)
        assert os.readlink("/proc/%d/root" % proc.pid) == sid
        dump.main([str(proc.pid)])
        assert flipped == ["flipped\n"], flipped
        assert os.readlink("/proc/%d/root" % proc.pid) == evil     # it did move
        assert not os.path.exists(evil + "/ran"), "root ran the other user's program"
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(timeout=30)
        shutil.rmtree(evil)
