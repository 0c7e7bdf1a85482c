"""`pytrace export`: turn a recording into the formats other tools read.

    pytrace export out.pytrace --format perfetto   -o trace.pftrace    # ui.perfetto.dev (protobuf)
    pytrace export out.pytrace --format chrome     -o trace.json       # ui.perfetto.dev, chrome://tracing
    pytrace export out.pytrace --format speedscope -o profile.json     # speedscope.app
    pytrace export out.pytrace --format collapsed  -o stacks.folded    # flamegraph.pl, inferno
    pytrace export out.pytrace --format pstats     -o profile.pstats   # pstats, snakeviz, gprof2dot
    pytrace export out.pytrace -f pstats --time cpu -o cpu.pstats      # CPU time instead of wall
    pytrace export out.pytrace -f pstats --qualnames -o profile.pstats # keyed by qualified names
    pytrace export all.pytrace -f pstats --pid 4242 -o rank0.pstats   # one process of several
    pytrace export out.pytrace --format html       -o report.html      # a browser, offline
    pytrace export out.pytrace -f chrome --from 2 --to 3 --min-duration 1ms -o t.json  # a part
    pytrace export out.pytrace -f collapsed --max-depth 0 --max-size 0 -o all.folded  # no limits

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
Time nobody saw (inside a gap of lost events) is in no function: pstats leaves it out
(the export says how much on stderr), collapsed shows it as a `<not observed>` frame.
`--time cpu` gives pstats and collapsed in CPU time (each thread's CpuTime records share
its CPU time among what ran between them, viewer/core/cct.h); perfetto and chrome show
each thread's CPU usage as a counter track beside its slices.
"""

import errno
import os
import sys

from ..cmdline import ArgumentParser
from ..recording import HEADER_BYTES, RecordingError, read_header

__all__ = ["main", "export", "FORMATS", "ExportResult", "OutputTooLarge"]

# What export writes unless asked for more (--max-size): a deep recursion's collapsed
# stacks or a long job's Chrome JSON grow past anything a viewer loads, and filled disks.
DEFAULT_MAX_BYTES = 1 << 30
# collapsed: stacks deeper than this are cut there (a "[deeper frames]" line holds what
# ran below): each line is as long as its stack, so a deep recursion was quadratic.
DEFAULT_MAX_DEPTH = 256
# Past this a JSON trace is more than viewers load: chrome://tracing stops at 256 MB
# (google/trace-viewer#627); the Perfetto UI works in about 2 GB of browser memory, a
# trace taking 2-4x its size there (perfetto.dev/docs/visualization/large-traces; a
# 900 MB JSON crashed it, google/perfetto#99); speedscope parses the whole file as one
# JavaScript string (V8: at most 2**29 - 24 characters).
VIEWER_JSON_BYTES = 256 << 20
_TIMELINE = ("chrome", "speedscope", "perfetto")

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


class OutputTooLarge(ValueError):
    """The export stopped at max_bytes (--max-size); nothing was written."""


def _size_text(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            # 3 digits, never an exponent: 1017 MiB (was "1.02e+03 MiB"), 1000 KiB, 1.5 GiB
            return ("%.3g %s" if n < 1000 * size else "%.0f %s") % (n / size, unit)
    return "%d bytes" % n


def _parse_size(text):
    """--max-size: bytes, or with a K/M/G suffix (powers of 1024); 0 = no limit."""
    t = text.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    if mult > 1:
        t = t[:-1]
    try:
        v = float(t)
    except ValueError:
        raise ValueError("--max-size %r: give bytes or a size like 500M or 2G (0: no limit)" % text) from None
    if not v >= 0:
        raise ValueError("--max-size %r: a size is not negative" % text)
    if v == float("inf"):
        raise ValueError("--max-size %r: give a number (0: no limit)" % text)
    return int(v * mult)


def _parse_seconds(text, option):
    """--from/--to/--min-duration: seconds, or with a unit (s, ms, us, ns)."""
    t = text.strip().lower()
    for unit, scale in (("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0)):
        if t.endswith(unit):
            t, mult = t[:-len(unit)], scale
            break
    else:
        mult = 1.0
    try:
        v = float(t) * mult
    except ValueError:
        raise ValueError("%s %r: give seconds (2.5) or a time with a unit (250ms, 40us)" % (option, text)) from None
    if not v >= 0:
        raise ValueError("%s %r: a time here is not negative" % (option, text))
    if v > 9e9:         # ns in an int64 (inf, 1e308: an OverflowError traceback where it became ns)
        raise ValueError("%s %r: a time here is at most 9e9 s" % (option, text))
    return v


class ExportResult:
    """What an export read: events, lost_events (gaps marked in the stream), unmatched,
    threads and symbols (counts), producer_status (the last ProducerStatus or None)."""

    def __init__(self, d):
        self.events = d["events"]
        self.lost_events = d["lost_events"]
        # of them by cause (the rest: a full ring under policy drop), and the gaps of
        # threads that had no ring (events_untraced, not dropped)
        self.lost_wait_timeout = d.get("lost_wait_timeout", 0)
        self.lost_no_room = d.get("lost_no_room", 0)
        self.lost_no_ring = d.get("lost_no_ring", 0)
        self.unmatched = d["unmatched"]
        # events naming a symbol never announced: damage, shown as <unknown #id>
        self.unannounced = d.get("unannounced", 0)
        self.threads = d["threads"]
        self.symbols = d["symbols"]
        self.timed_out = bool(d["timed_out"])
        self.processes = d.get("processes", 1)              # processes in the recording
        self.selected_processes = d.get("selected_processes", 1)  # exported (pids=)
        self.pids = list(d.get("pids", ()))                 # their pids (ProcessInfo order)
        self.bytes = d.get("bytes", 0)                      # the output's size
        self.calls_left_out = d.get("calls_left_out", 0)    # --from/--to/--min-duration
        self.stacks_folded = d.get("stacks_folded", 0)      # collapsed: below max_depth
        self.deepest = d.get("deepest", 0)                  # collapsed: the deepest stack
        self.tree_budget = d.get("tree_budget", 0)          # collapsed, pstats: the call tree's bytes
        self.folded_calls = d.get("folded_calls", 0)        # ... and the calls folded past them
        self.span_ns = d.get("span_ns", 0)                  # the processes' wall span
        # collapsed, pstats: thread time inside gaps of lost events (in no function), its
        # CPU time, the events of those gaps (LostNoRing's too) and of them LostNoRing's
        self.unobserved_ns = d.get("unobserved_ns", 0)
        self.unobserved_cpu_ns = d.get("unobserved_cpu_ns", 0)
        self.unobserved_lost = d.get("unobserved_lost", 0)
        self.unobserved_no_ring = d.get("unobserved_no_ring", 0)
        self.cpu_records = d.get("cpu_records", 0)          # CpuTime records read
        self.producer_status = _Status(d["status"]) if "status" in d else None


def export(recording, fmt, output, weight="ns", per_thread=False, follow=False, timeout=30.0,
           qualnames=False, uncompressed=False, pids=None, max_bytes=DEFAULT_MAX_BYTES,
           max_depth=DEFAULT_MAX_DEPTH, start=None, end=None, min_duration=None, tree_budget_mib=256,
           time="wall"):
    """Export `recording` to `output` (a path, or "-" for stdout). pstats keys are
    cProfile's, or with qualnames=True pytrace's qualified names. perfetto packets are
    zlib-compressed in batches (compressed_packets) unless uncompressed=True. A recording
    of several processes (a process tree, a merge) exports all of them, or with pids=[...]
    only the processes with those pids. The output stops at max_bytes (0: no limit) with
    OutputTooLarge and nothing written; collapsed stacks are cut at max_depth frames (0: no
    limit). The timeline formats (chrome, speedscope, perfetto) take only the calls that
    overlap [start, end] (seconds since the recording's start) and last min_duration seconds
    or more. The call tree of collapsed, pstats and html holds tree_budget_mib MiB; past it,
    new call paths fold into [other] nodes (counted in folded_calls). time="cpu" gives pstats
    (tt, ct) and collapsed (the weights) in CPU time instead of wall time. A failed write raises
    OSError naming `output`; nothing is left there. Returns
    the ExportResult and the RecordingError that stopped the read early, or None."""
    from .. import _output, _pytrace
    fmt = _ALIASES.get(fmt, fmt)
    if fmt not in FORMATS:
        raise ValueError("unknown format %r (choose from %s)" % (fmt, ", ".join(FORMATS)))
    if weight not in ("ns", "calls"):
        raise ValueError("weight must be 'ns' or 'calls'")
    if time not in ("wall", "cpu"):
        raise ValueError("time must be 'wall' or 'cpu'")
    if time == "cpu" and fmt not in ("pstats", "collapsed"):
        raise ValueError("--time cpu is for --format pstats and collapsed (perfetto and chrome show CPU "
                         "usage as a counter track beside wall time)")
    if time == "cpu" and weight == "calls":
        raise ValueError("--time cpu weighs by CPU time; --weight calls by calls: choose one")
    if (start or end or min_duration) and fmt not in _TIMELINE:
        raise ValueError("--from, --to and --min-duration are for the timeline formats (%s)" % ", ".join(_TIMELINE))
    if fmt == "html":
        return _export_html(recording, output, pids, max_bytes, tree_budget_mib)
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
                                pids=list(pids) if pids else None, max_bytes=int(max_bytes or 0),
                                max_depth=int(max_depth or 0) if fmt == "collapsed" else 0,
                                from_ns=int(round((start or 0) * 1e9)), to_ns=int(round((end or 0) * 1e9)),
                                min_duration_ns=int(round((min_duration or 0) * 1e9)),
                                tree_budget=int(tree_budget_mib) << 20 if fmt in ("collapsed", "pstats") else 0,
                                cpu_time=time == "cpu")
        except OSError as e:
            if e.errno == 32:       # EPIPE: `pytrace export ... -o - | head`
                raise BrokenPipeError(e.errno, e.strerror) from None
            if e.errno == errno.EFBIG and e.strerror == "output size limit reached":
                raise OutputTooLarge(_too_large(output, fmt, max_bytes)) from None
            if e.errno is not None and e.filename is None:   # a write of the output failed
                raise OSError(e.errno, e.strerror, output) from None
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
        # the aggregation does not split the gaps by cause (the walker's export does): main()
        # reads these two, and without them a report of any recording with a gap was a traceback
        self.lost_wait_timeout = self.lost_no_room = 0
        self.unmatched = sum(c["unmatched"] for c in counts)
        self.unannounced = sum(c["unannounced"] for c in counts)
        self.threads = sum(c["threads_seen"] for c in counts)
        self.symbols = sum(c["symbols"] for c in counts)
        self.folded_calls = sum(c["folded_calls"] for c in counts)
        self.tree_budget = counts[0]["tree_budget"] if counts else 0
        self.timed_out = False
        self.processes = len(prof.processes())
        self.selected_processes = len(shown)
        self.pids = [e.pid for e in shown]
        self.producer_status = status
        c = prof.counters()
        self.past_process_limit = (c["process_limit"], c["messages_past_process_limit"])


def _too_large(output, fmt, max_bytes):
    where = "what reached stdout is incomplete" if output == "-" else "nothing written to %s" % output
    narrow = {"chrome": "; or narrow it with --from/--to, --min-duration or --pid, or use --format perfetto "
                        "(10-30x smaller)",
              "speedscope": "; or narrow it with --from/--to, --min-duration or --pid, or use --format perfetto",
              "perfetto": "; or narrow it with --from/--to, --min-duration or --pid",
              "collapsed": "; or lower --max-depth"}.get(fmt, "")
    return ("the %s output would be larger than %s; %s. Raise the limit with --max-size SIZE (0: none)%s"
            % (fmt, _size_text(max_bytes), where, narrow))


def _export_html(recording, output, pids=None, max_bytes=DEFAULT_MAX_BYTES, tree_budget_mib=256):
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
    prof = Profile(window=3600.0, slice_seconds=0.01, tree_budget_mib=tree_budget_mib)
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
    if error is not None:       # shown on the page, in every process's status line
        damage = "damaged at byte offset %d: %s; the report shows everything before it" % (
            error.offset, error.reason)
        for part in [report] + list(report.get("procs", {}).values()):
            part["status"]["damage"] = damage
    text, _csp = page.build(report, "pytrace: " + title, live=False)
    data = text.encode("utf-8")
    if max_bytes and len(data) > max_bytes:
        raise OutputTooLarge(_too_large(output, "html", max_bytes))
    if output == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        if _output.same_file(recording, output):
            raise ValueError("the output %s is the input recording; choose another path" % output)
        f, tmp = _output.create(output, binary=True)
        try:
            try:
                with f:
                    f.write(data)
            except OSError as e:
                raise OSError(e.errno, e.strerror, output) from None
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


def _say_pstats_total(path, result):
    """pstats' header ("N function calls in T seconds") gives T = the self time of every
    function added up: over all threads and processes, so a 14 s job of several processes
    shows 73.8 s. pstats computes it from the rows; say what it is beside the job's span."""
    import pstats
    try:
        total = pstats.Stats(path).total_tt
    except Exception:       # the file was written by us; a failure here is not the export's
        return
    span = result.span_ns / 1e9
    if span and total > span * 1.05:
        print("pytrace export: pstats' header time (%.3f s) is the self time of every function added "
              "up over %d threads%s; the job ran %.3f s (its wall span)" % (
                  total, result.threads, " of %d processes" % result.selected_processes
                  if result.selected_processes > 1 else "", span), file=sys.stderr)


def _time_text(ns):
    """9.87 s, 12.3 ms, 456 us, 789 ns: the unit that fits, never an exponent."""
    for unit, size in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= size:
            v = ns / size
            return ("%.2f %s" if unit == "s" and v < 100 else "%.1f %s" if v < 100 else "%.0f %s") % (v, unit)
    return "%d ns" % ns


def _say_unobserved(fmt, result, cpu):
    """pstats and collapsed: the thread time nobody saw (inside gaps of lost events) is in no
    function; say how much, and in CPU time whether there was any CPU time to show."""
    if result.unobserved_ns or result.unobserved_lost:
        lost = result.unobserved_lost - result.unobserved_no_ring
        events = "%d events lost" % lost
        if result.unobserved_no_ring:
            events += ", %d events of threads without a ring" % result.unobserved_no_ring
        print("pytrace export: not observed: %s of thread time (%s)%s, in no function%s" % (
            _time_text(result.unobserved_ns), events,
            "; %s of CPU time" % _time_text(result.unobserved_cpu_ns) if cpu else "",
            "; shown as <not observed>" if fmt == "collapsed" else ""), file=sys.stderr)
    if cpu and result.events and not result.cpu_records:
        print("pytrace export: the recording holds no CPU time samples (it was made by a pytrace "
              "that wrote none): every CPU time is 0; use --time wall", file=sys.stderr)


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
    p.add_argument("--time", choices=("wall", "cpu"), default=None,
                   help="pstats, collapsed: wall time (default) or CPU time (each thread's CPU time "
                        "shared among what ran between its CPU samples)")
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
    p.add_argument("--max-size", default="1G", metavar="SIZE",
                   help="refuse to write more than SIZE (bytes, or 500M, 2G; default 1G, 0: no limit): "
                        "the export stops and leaves nothing")
    p.add_argument("--max-depth", type=int, default=DEFAULT_MAX_DEPTH, metavar="N",
                   help="collapsed: cut stacks at N frames, what ran deeper added up under a "
                        "'[deeper frames]' frame (default %d, 0: no limit)" % DEFAULT_MAX_DEPTH)
    p.add_argument("--from", dest="start", metavar="SECONDS",
                   help="chrome, speedscope, perfetto: only calls that end after this time "
                        "(seconds since the recording's start, or 250ms ...)")
    p.add_argument("--to", dest="end", metavar="SECONDS",
                   help="chrome, speedscope, perfetto: only calls that begin before this time")
    p.add_argument("--min-duration", metavar="SECONDS",
                   help="chrome, speedscope, perfetto: leave out calls shorter than this (e.g. 1ms); "
                        "they are counted")
    p.add_argument("--tree-budget", type=int, default=None, metavar="MIB",
                   help="html, pstats, collapsed: memory for the call tree (html: each process's; "
                        "default 256 MiB); past it, new call paths fold into [other] nodes, counted "
                        "(the function table stays exact)")
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
    if args.time is not None and fmt not in ("pstats", "collapsed"):
        p.error("--time is for --format pstats and collapsed (perfetto and chrome show each thread's "
                "CPU usage as a counter track)")
    if args.time == "cpu" and args.weight == "calls":
        p.error("--time cpu and --weight calls: choose one")
    try:
        max_bytes = _parse_size(args.max_size)
        start = _parse_seconds(args.start, "--from") if args.start is not None else None
        end = _parse_seconds(args.end, "--to") if args.end is not None else None
        min_duration = (_parse_seconds(args.min_duration, "--min-duration")
                        if args.min_duration is not None else None)
    except ValueError as e:
        p.error(str(e))
    if (start or end or min_duration) and fmt not in _TIMELINE:
        p.error("--from, --to and --min-duration are for --format %s" % ", ".join(_TIMELINE))
    if start is not None and end is not None and end <= start:
        p.error("--to (%g s) must come after --from (%g s)" % (end, start))
    if args.max_depth < 0:
        p.error("--max-depth is 0 (no limit) or more")
    if args.tree_budget is not None and fmt not in ("html", "pstats", "collapsed"):
        p.error("--tree-budget is for --format html, pstats and collapsed")
    if args.tree_budget is not None and not 1 <= args.tree_budget <= 1 << 24:
        p.error("--tree-budget must be a whole number of MiB from 1 to 16777216")
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
                               pids=args.pid, max_bytes=max_bytes, max_depth=args.max_depth,
                               start=start, end=end, min_duration=min_duration,
                               tree_budget_mib=args.tree_budget or 256, time=args.time or "wall")
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
    except OSError as e:
        if e.filename == args.output:     # a write of the output failed (a full disk ...)
            left = ("what reached stdout is incomplete" if args.output == "-" else
                    "nothing written (the partial file was removed)")
            print("pytrace export: writing %s failed: %s; %s" % (
                "stdout" if args.output == "-" else args.output, e.strerror or e, left), file=sys.stderr)
        else:
            print("pytrace export: %s" % e, file=sys.stderr)
        return 1
    except ValueError as e:
        print("pytrace export: %s" % e, file=sys.stderr)
        return 1
    where = "stdout" if args.output == "-" else args.output
    if walker.processes > 1:
        print("pytrace export: %d of %d processes (pids %s)" % (
            walker.selected_processes, walker.processes,
            ", ".join(str(x) for x in walker.pids)), file=sys.stderr)
    print("pytrace export: %d events, %d threads, %d symbols -> %s (%s)" % (
        walker.events, walker.threads, walker.symbols, where, fmt), file=sys.stderr)
    left_out = getattr(walker, "calls_left_out", 0)
    if left_out:
        # with a range, the recording's own span: a --from past its end leaves out every call
        span = getattr(walker, "span_ns", 0)
        print("pytrace export: %d calls left out (%s)%s" % (left_out, ", ".join(
            x for x in ("--from" if start else "", "--to" if end else "",
                        "--min-duration %s" % args.min_duration if min_duration else "") if x),
            "; the recording spans %.3f s" % (span / 1e9) if span and (start or end) else ""),
              file=sys.stderr)
    if getattr(walker, "stacks_folded", 0):
        print("pytrace export: %d stacks deeper than %d frames (the deepest: %d) were cut at %d, what ran "
              "below added up under '[deeper frames]'; --max-depth 0 writes them whole" % (
                  walker.stacks_folded, args.max_depth, walker.deepest, args.max_depth), file=sys.stderr)
    size = getattr(walker, "bytes", 0)
    if fmt in ("chrome", "speedscope") and size > VIEWER_JSON_BYTES:
        print("pytrace export: %s is %s, more than %s; --format perfetto is 10-30x smaller "
              "(ui.perfetto.dev, or trace_processor --httpd for the biggest), or narrow it with "
              "--from/--to or --min-duration" % (
                  where, _size_text(size),
                  "chrome://tracing loads (256 MB) and the Perfetto UI's JSON import handles well"
                  if fmt == "chrome" else "speedscope.app handles well (it parses the file whole)"),
              file=sys.stderr)
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
        full = walker.lost_events - walker.lost_wait_timeout - walker.lost_no_room
        causes = [(full, "a full ring, policy drop"),
                  (walker.lost_wait_timeout, "policy wait: the reader freed no room within the wait bound"),
                  (walker.lost_no_room, "no room in /dev/shm for the ring")]
        said = "; ".join("%d: %s" % (n, why) for n, why in causes if n)
        line = ("pytrace export: %d events dropped by the job (%s); stacks were rebuilt after "
                "each gap" % (job_dropped, said or "its rings' counters; no gap is marked"))
        if job_dropped > walker.lost_events:
            line += ("; %d of them are marked as gaps in the recording, the other %d came after "
                     "a thread's last record" % (walker.lost_events, job_dropped - walker.lost_events))
        print(line, file=sys.stderr)
    if walker.producer_status is not None:
        from ..losses import OTHER_LOSSES, describe
        lost = describe(walker.producer_status, OTHER_LOSSES)
        if lost:
            print("pytrace export: the traced job also lost: %s" % lost, file=sys.stderr)
    if status is not None and any(getattr(status, k, 0) for k in ("unrecorded_errno", "unrecorded_events",
                                                                  "unrecorded_messages")):
        from ..losses import unrecorded_text
        print("pytrace export: %s" % unrecorded_text(args.recording, status.unrecorded_events,
                                                     status.unrecorded_messages,
                                                     status.unrecorded_errno), file=sys.stderr)
    if fmt in ("pstats", "collapsed"):
        _say_unobserved(fmt, walker, args.time == "cpu")
    if fmt == "pstats" and walker.events and args.output != "-":
        _say_pstats_total(args.output, walker)
    if fmt == "pstats" and not walker.events:
        print("pytrace export: the recording holds no calls; pstats.Stats refuses an empty "
              "profile", file=sys.stderr)
    if getattr(walker, "folded_calls", 0):
        print("pytrace export: the call tree reached its budget (%d MiB, --tree-budget): %d calls "
              "folded into [other] %s" % (
                  walker.tree_budget >> 20, walker.folded_calls,
                  "frames" if fmt == "collapsed" else "nodes; the function table is exact"), file=sys.stderr)
    if walker.unmatched:
        print("pytrace export: %d returns had no matching call and were ignored" % walker.unmatched,
              file=sys.stderr)
    if walker.unannounced:
        from ..losses import unannounced_text
        print("pytrace export: %s" % unannounced_text(walker.unannounced), file=sys.stderr)
    if error is not None:
        print("pytrace export: %s; exported everything before it" % error, file=sys.stderr)
        return 1
    return 0
