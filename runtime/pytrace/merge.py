"""`pytrace merge a.pytrace b.pytrace ... -o all.pytrace`: one recording of every process
of several recordings (the ranks of one job, recorded on several machines).

Each input's processes get new process numbers (Message.process), and every process is
placed on one time axis by its recording's wall-clock base (base_realtime_ns): the C
implementation is viewer/core/recfile.c (pt_recfile_merge); this is the command line.
The README ("Merging recordings") states the alignment error this leaves.
"""

import os
import sys

from .cmdline import ArgumentParser
from .recording import HEADER_BYTES, RecordingError, read_header

__all__ = ["main", "merge"]


def merge(inputs, output):
    """Merge the recordings `inputs` into `output` (created owner-only beside the path and
    renamed over it). Returns (per-input dicts, totals) as _pytrace.merge_recordings."""
    from . import _output, _pytrace
    for i in inputs:
        if _output.same_file(i, output):
            raise ValueError("the output %s is one of the inputs; choose another path" % output)
    f, tmp = _output.create(output, binary=True)
    committed = False
    try:
        try:
            result = _pytrace.merge_recordings([os.fspath(i) for i in inputs], f.fileno())
        finally:
            f.close()
        _output.commit(tmp, output)
        committed = True
    finally:
        if not committed:
            _output.discard(tmp)
    return result


def main(argv=None):
    p = ArgumentParser(
        prog="pytrace merge",
        description="Merge recordings (e.g. the ranks of one job recorded on several machines) "
                    "into one: every process keeps its own numbers, all are placed on one time "
                    "axis by their recordings' wall-clock bases.")
    p.add_argument("recordings", nargs="+", help="files written by `pytrace record`")
    p.add_argument("-o", "--output", required=True, help="the merged recording")
    args = p.parse_args(argv)
    for path in args.recordings:
        try:
            with open(path, "rb") as f:
                read_header(f.read(HEADER_BYTES))
        except OSError as e:
            print("pytrace merge: cannot read %s: %s" % (path, e.strerror or e), file=sys.stderr)
            return 1
        except ValueError as e:
            offset = 8 if "unsupported recording format" in str(e) else 0
            print("pytrace merge: %s" % RecordingError(path, offset, str(e)), file=sys.stderr)
            return 1
    try:
        inputs, totals = merge(args.recordings, args.output)
    except (OSError, ValueError) as e:
        print("pytrace merge: %s" % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pytrace merge: interrupted; no output written", file=sys.stderr)
        return 130
    code = 0
    unaligned = [path for path, r in zip(args.recordings, inputs) if not r["have_realtime"]]
    for path, r in zip(args.recordings, inputs):
        line = "pytrace merge: %s: %d process%s, %d events" % (
            path, r["processes"], "" if r["processes"] == 1 else "es", r["events"])
        if r["have_realtime"]:
            line += ", shifted %+.6f s" % (r["shift_ns"] / 1e9)
        print(line, file=sys.stderr)
        if r["orphans"]:
            print("pytrace merge: %s: %d messages came before their process's ProcessInfo and "
                  "were left out" % (path, r["orphans"]), file=sys.stderr)
        if r["damaged"]:
            print("pytrace merge: %s" % RecordingError(path, r["error_offset"], r["error"]) +
                  "; merged everything before it", file=sys.stderr)
            code = 1
    if unaligned:
        print("pytrace merge: %s ha%s no wall-clock base (recorded before pytrace stored it): "
              "not aligned with the others" % (", ".join(unaligned), "s" if len(unaligned) == 1 else "ve"),
              file=sys.stderr)
    print("pytrace merge: %d processes, %d events -> %s" % (
        sum(r["processes"] for r in inputs), totals["events"], args.output), file=sys.stderr)
    return code
