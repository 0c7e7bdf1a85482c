"""`pytrace export`: turn a recording into the formats other tools read.

    pytrace export out.pytrace --format perfetto   -o trace.pftrace    # ui.perfetto.dev (protobuf)
    pytrace export out.pytrace --format chrome     -o trace.json       # ui.perfetto.dev, chrome://tracing
    pytrace export out.pytrace --format speedscope -o profile.json     # speedscope.app
    pytrace export out.pytrace --format collapsed  -o stacks.folded    # flamegraph.pl, inferno
    pytrace export out.pytrace --format pstats     -o profile.pstats   # pstats, snakeviz, gprof2dot
    pytrace export out.pytrace -f pstats --qualnames -o profile.pstats # keyed by qualified names
    pytrace export all.pytrace -f pstats --pid 4242 -o rank0.pstats   # one process of several
    pytrace export out.pytrace --format html       -o report.html      # a browser, offline

The exporters are C (viewer/core/export.c, through _pytrace.export): the recording is
read message by message and turned into stacks by the walk every reader shares
(viewer/core/walk.h), so an export shows what pytrace-top shows. Memory holds the open
stacks, the symbol table and the format's own aggregates, never the event list. A
damaged recording is exported up to the damage, which is reported with its byte offset
(exit status 1). The HTML report is one self-contained page (no network): the flame
graph, the function table and the per-thread timeline of pytrace's C aggregation
(pytrace.Profile), embedded as aggregates, not events. `perfetto-json` is the old name of `chrome` (kept for a release);
`perfetto` is Perfetto's own protobuf trace (it named the Chrome JSON before).
A recording of several processes (a process tree, `pytrace merge`) puts each process on
its own track (chrome, perfetto: its pid) or profile (speedscope), or in the HTML report's
process chooser; pstats and collapsed add them up; every format takes only the processes
of `--pid PID` (repeatable) when given.
"""

import os
import sys

from ..cmdline import ArgumentParser
from ..recording import HEADER_BYTES, RecordingError, read_header

__all__ = ["main", "export", "FORMATS", "ExportResult"]

FORMATS = ("perfetto", "chrome", "speedscope", "collapsed", "pstats", "html", "perfetto-json")
# "perfetto-json" is the old name of the Chrome JSON (kept for a release, with a note).
_ALIASES = {"perfetto-json": "chrome"}
_BINARY = ("pstats", "perfetto")

_SUFFIXES = (
    (".pftrace", "perfetto"), (".perfetto-trace", "perfetto"),
    (".speedscope.json", "speedscope"),
    (".pstats", "pstats"), (".prof", "pstats"),
    (".folded", "collapsed"), (".collapsed", "collapsed"), (".txt", "collapsed"),
    (".json", "chrome"),
    (".html", "html"), (".htm", "html"),
)


class _Status:
    """The recording's last ProducerStatus, as losses.describe reads it."""

    def __init__(self, values):
        self.__dict__.update(values)


class ExportResult:
    """What an export read: events, lost_events (gaps marked in the stream), unmatched,
    threads and symbols (counts), producer_status (the last ProducerStatus or None)."""

    def __init__(self, d):
        self.events = d["events"]
        self.lost_events = d["lost_events"]
        self.unmatched = d["unmatched"]
        self.threads = d["threads"]
        self.symbols = d["symbols"]
        self.timed_out = bool(d["timed_out"])
        self.processes = d.get("processes", 1)              # processes in the recording
        self.selected_processes = d.get("selected_processes", 1)  # exported (pids=)
        self.pids = list(d.get("pids", ()))                 # their pids (ProcessInfo order)
        self.producer_status = _Status(d["status"]) if "status" in d else None


def export(recording, fmt, output, weight="ns", per_thread=False, follow=False, timeout=30.0,
           qualnames=False, uncompressed=False, pids=None):
    """Export `recording` to `output` (a path, or "-" for stdout). pstats keys are
    cProfile's, or with qualnames=True pytrace's qualified names. perfetto packets are
    zlib-compressed in batches (compressed_packets) unless uncompressed=True. A recording
    of several processes (a process tree, a merge) exports all of them, or with pids=[...]
    only the processes with those pids. Returns the ExportResult and the RecordingError
    that stopped the read early, or None."""
    from .. import _output, _pytrace
    fmt = _ALIASES.get(fmt, fmt)
    if fmt not in FORMATS:
        raise ValueError("unknown format %r (choose from %s)" % (fmt, ", ".join(FORMATS)))
    if weight not in ("ns", "calls"):
        raise ValueError("weight must be 'ns' or 'calls'")
    if fmt == "html":
        return _export_html(recording, output, pids)
    binary = fmt in _BINARY
    tmp = None
    if output == "-":
        if fmt == "pstats":
            raise ValueError("pstats output must go to a file, not stdout")
        sys.stdout.flush()
        fd, f = sys.stdout.fileno(), None
        tmp_dir = None
    else:
        if _output.same_file(recording, output):
            raise ValueError("the output %s is the input recording; choose another path" % output)
        # Written beside the target and renamed over it when complete: a link planted at
        # the path is replaced, not followed; an interrupted export leaves nothing.
        f, tmp = _output.create(output, binary=True)
        fd = f.fileno()
        tmp_dir = os.path.dirname(os.path.abspath(output))
    # Whatever stops us before the rename (an error, or Ctrl-C: a signal that came while the
    # export ran is raised at the next call after it on 3.14+, f.close() here, not as the
    # export returns) removes the temporary file.
    committed = False
    try:
        try:
            d = _pytrace.export(os.fspath(recording), fmt, fd, weight_calls=weight == "calls",
                                per_thread=bool(per_thread) and fmt == "collapsed",
                                qualnames=qualnames, follow=follow, timeout=timeout,
                                tmp_dir=tmp_dir,
                                uncompressed=bool(uncompressed) and fmt == "perfetto",
                                pids=list(pids) if pids else None)
        except OSError as e:
            if e.errno == 32:       # EPIPE: `pytrace export ... -o - | head`
                raise BrokenPipeError(e.errno, e.strerror) from None
            raise
        finally:
            if f is not None:
                f.close()
        if pids and not d.get("selected_processes"):
            raise ValueError("no process with pid %s in %s (its processes: %s); nothing written" % (
                ", ".join(str(x) for x in pids), recording,
                ", ".join("pid %d" % x for x in d.get("pids", ())) or "none"))
        if tmp is not None:
            _output.commit(tmp, output)
        committed = True
    finally:
        if not committed and tmp is not None:
            _output.discard(tmp)
    error = None
    if "damage" in d:
        offset, reason = d["damage"]
        error = RecordingError(recording, offset, reason)
    return ExportResult(d), error


class _HtmlResult:
    """ExportResult's fields for the HTML report, from the Profile's counters of the
    processes shown, added up."""

    def __init__(self, prof, shown, status):
        counts = [prof.counters(process=e.index) for e in shown]
        self.events = sum(c["events"] for c in counts)
        # every Lost record, as the other formats count them: the job's and a hub's gaps
        self.lost_events = sum(c["dropped_lost_records"] + c["missed_in_hub"] for c in counts)
        self.unmatched = sum(c["unmatched"] for c in counts)
        self.threads = sum(c["threads_seen"] for c in counts)
        self.symbols = sum(c["symbols"] for c in counts)
        self.timed_out = False
        self.processes = len(prof.processes())
        self.selected_processes = len(shown)
        self.pids = [e.pid for e in shown]
        self.producer_status = status
        c = prof.counters()
        self.past_process_limit = (c["process_limit"], c["messages_past_process_limit"])


def _export_html(recording, output, pids=None):
    """The HTML report: the recording read into a pytrace.Profile (the C aggregation),
    its pictures embedded in the page of pytrace.web; every process of a recording of
    several (each its own pictures, a chooser), or those of `pids`. A damaged recording
    gives the report of everything before the damage, and the error."""
    from .. import _output
    from ..profile import Profile
    from ..reader import MsgType, decode
    from ..recording import RecordingReader
    from ..web import data as web_data, page
    # 10 ms slices for the timeline (grouped to at most 1500 cells), an hour of them
    prof = Profile(window=3600.0, slice_seconds=0.01)
    error = None
    status = {}     # the last ProducerStatus of each process (by Message.process tag)

    def messages(reader):
        for msg_type, data in reader:
            if msg_type == MsgType.ProducerStatus:
                try:
                    d = decode(msg_type, data)
                    status[d.process] = _Status(vars(d))
                except ValueError:
                    pass
            yield msg_type, data

    with RecordingReader(recording) as reader:
        try:
            prof.read(messages(reader))
        except RecordingError as e:
            error = e
    entries = prof.processes()
    shown = [e for e in entries if not pids or e.pid in pids]
    if not shown:
        c = prof.counters()
        beyond = (" (the report reads the first %d processes; %d messages of further ones were "
                  "not read: export them to perfetto or chrome)" % (
                      c["process_limit"], c["messages_past_process_limit"])
                  if c["messages_past_process_limit"] else "")
        raise ValueError("no process with pid %s in %s (its processes: %s)%s; nothing written" % (
            ", ".join(str(x) for x in pids), recording,
            ", ".join("pid %d" % e.pid for e in entries) or "none", beyond))
    title = os.path.basename(os.fspath(recording))
    report = web_data.report_data(prof, title, processes=[e.index for e in shown])
    text, _csp = page.build(report, "pytrace: " + title, live=False)
    if output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        if _output.same_file(recording, output):
            raise ValueError("the output %s is the input recording; choose another path" % output)
        f, tmp = _output.create(output, binary=True)
        try:
            with f:
                f.write(text.encode("utf-8"))
            _output.commit(tmp, output)
        except BaseException:
            _output.discard(tmp)
            raise
    return _HtmlResult(prof, shown, _status_of(status, [e.tag for e in shown])), error


def _status_of(status, tags):
    """The ProducerStatus of the processes shown, their counts added up (None if none came)."""
    got = [status[t] for t in tags if t in status]
    if not got:
        return None
    if len(got) == 1:
        return got[0]
    out = dict(vars(got[0]))
    for other in got[1:]:
        for k, v in vars(other).items():
            if isinstance(v, int) and k != "state" and k in out and isinstance(out[k], int):
                out[k] += v
    return _Status(out)


def _guess_format(output):
    low = output.lower()
    for suffix, fmt in _SUFFIXES:
        if low.endswith(suffix):
            return fmt
    return None


def main(argv=None):
    p = ArgumentParser(
        prog="pytrace export",
        description="Export a pytrace recording to Perfetto's protobuf trace, Chrome trace-event "
                    "JSON (Perfetto loads it too), speedscope JSON, collapsed stacks, a pstats file "
                    "or a self-contained HTML report (flame graph, table, timeline).")
    p.add_argument("recording", help="a file written by `pytrace record`")
    p.add_argument("--format", "-f", choices=FORMATS,
                   help="output format (default: guessed from the -o suffix: .pftrace perfetto, "
                        ".json chrome, ...); perfetto-json is the old name of chrome")
    p.add_argument("-o", "--output", required=True, help="output file ('-' = stdout, not for pstats)")
    p.add_argument("--weight", choices=("ns", "calls"), default="ns",
                   help="collapsed: self time in integer nanoseconds (default) or call counts")
    p.add_argument("--per-thread", action="store_true",
                   help="collapsed: start each stack with its thread")
    p.add_argument("--qualnames", action="store_true",
                   help="pstats: key functions by qualified name (Class.method, list.append) "
                        "instead of cProfile's keys (method, <method 'append' of 'list' objects>)")
    p.add_argument("--uncompressed", action="store_true",
                   help="perfetto: plain packets (default: zlib-compressed batches, which "
                        "Perfetto reads; 10-20x smaller)")
    p.add_argument("--pid", type=int, action="append", metavar="PID",
                   help="a recording of several processes: export only the process with this "
                        "pid (repeat for more; default: every process, pstats and collapsed "
                        "add them together)")
    p.add_argument("--follow", action="store_true",
                   help="read a recording that is still being written, until the job ends")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="--follow: give up after this many seconds without new data")
    args = p.parse_args(argv)
    fmt = args.format or _guess_format(args.output)
    if fmt is None:
        p.error("cannot tell the format from %r: pass --format (%s)" % (args.output, "|".join(FORMATS)))
    if fmt == "perfetto-json":
        print("pytrace export: --format perfetto-json is now called chrome (the old name goes "
              "in the next release)", file=sys.stderr)
    elif fmt == "perfetto" and args.output.lower().endswith(".json"):
        print("pytrace export: --format perfetto writes Perfetto's protobuf trace (it wrote "
              "Chrome JSON before); use --format chrome for JSON", file=sys.stderr)
    fmt = _ALIASES.get(fmt, fmt)
    if args.qualnames and fmt != "pstats":
        p.error("--qualnames is for --format pstats")
    if args.uncompressed and fmt != "perfetto":
        p.error("--uncompressed is for --format perfetto")
    if not args.follow:
        # A file that is not a recording at all gets one line and no output file.
        try:
            with open(args.recording, "rb") as f:
                read_header(f.read(HEADER_BYTES))
        except OSError as e:
            print("pytrace export: cannot read %s: %s" % (args.recording, e.strerror or e), file=sys.stderr)
            return 1
        except ValueError as e:
            offset = 8 if "unsupported recording format" in str(e) else 0  # major at 8, magic at 0
            print("pytrace export: %s" % RecordingError(args.recording, offset, str(e)), file=sys.stderr)
            return 1
    try:
        walker, error = export(args.recording, fmt, args.output, weight=args.weight,
                               per_thread=args.per_thread, follow=args.follow, timeout=args.timeout,
                               qualnames=args.qualnames, uncompressed=args.uncompressed,
                               pids=args.pid)
    except RecordingError as e:       # damage before anything could be read (header)
        print("pytrace export: %s" % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:         # the partial output and spill files are gone already
        print("pytrace export: interrupted; no output written", file=sys.stderr)
        return 130
    except BrokenPipeError:           # `pytrace export ... -o - | head`
        try:
            sys.stdout = None
        finally:
            return 1
    except (OSError, ValueError) as e:
        print("pytrace export: %s" % e, file=sys.stderr)
        return 1
    where = "stdout" if args.output == "-" else args.output
    if walker.processes > 1:
        print("pytrace export: %d of %d processes (pids %s)" % (
            walker.selected_processes, walker.processes,
            ", ".join(str(x) for x in walker.pids)), file=sys.stderr)
    print("pytrace export: %d events, %d threads, %d symbols -> %s (%s)" % (
        walker.events, walker.threads, walker.symbols, where, fmt), file=sys.stderr)
    limit, past = getattr(walker, "past_process_limit", (0, 0))
    if past:
        print("pytrace export: the report holds the first %d processes; %d messages of further ones "
              "were left out (export them to perfetto or chrome)" % (limit, past), file=sys.stderr)
    # The job's own count of dropped events (its final status), as record, pytrace-top and
    # stop() give it. The gaps marked in the stream (Lost records) can be fewer: drops after
    # a thread's last record have no record after them to mark them.
    status = walker.producer_status
    job_dropped = max(walker.lost_events, getattr(status, "events_dropped", 0) or 0)
    if job_dropped:
        line = ("pytrace export: %d events dropped by the job (a full ring, policy drop); "
                "stacks were rebuilt after each gap" % job_dropped)
        if job_dropped > walker.lost_events:
            line += ("; %d of them are marked as gaps in the recording, the other %d came after "
                     "a thread's last record" % (walker.lost_events, job_dropped - walker.lost_events))
        print(line, file=sys.stderr)
    if walker.producer_status is not None:
        from ..losses import OTHER_LOSSES, describe
        lost = describe(walker.producer_status, OTHER_LOSSES)
        if lost:
            print("pytrace export: the traced job also lost: %s" % lost, file=sys.stderr)
    if fmt == "pstats" and not walker.events:
        print("pytrace export: the recording holds no calls; pstats.Stats refuses an empty "
              "profile", file=sys.stderr)
    if walker.unmatched:
        print("pytrace export: %d returns had no matching call and were ignored" % walker.unmatched,
              file=sys.stderr)
    if error is not None:
        print("pytrace export: %s; exported everything before it" % error, file=sys.stderr)
        return 1
    return 0
