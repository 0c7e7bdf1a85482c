"""A reader of Perfetto protobuf traces for the tests, on the bindings the `perfetto`
package ships (perfetto.protos.perfetto.trace.perfetto_trace_pb2): a plain protobuf
parse, no trace_processor binary. It follows the TrackEvent rules Perfetto's trace
processor applies (per-sequence incremental state, TracePacketDefaults, the sequence's
incremental clock, interned names and source locations, compressed_packets) and
asserts each of them, so a trace it reads is one Perfetto reads the same way."""

import collections
import zlib

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb  # .ci/install.sh installs it

CLEARED, NEEDS = 1, 2
BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4
MONOTONIC = 3


def packets(path):
    """Every TracePacket in file order, compressed_packets batches opened in place
    (they hold zlib-compressed Trace bytes, as Perfetto's service writes them).
    Returns (packets, number of compressed batches)."""
    trace = pb.Trace()
    trace.ParseFromString(open(path, "rb").read())
    out, batches = [], 0
    for p in trace.packet:
        if p.HasField("compressed_packets"):
            batches += 1
            inner = pb.Trace()
            inner.ParseFromString(zlib.decompress(p.compressed_packets))
            assert not any(q.HasField("compressed_packets") for q in inner.packet)
            out.extend(inner.packet)
        else:
            out.append(p)
    return out, batches


class Seq:
    def __init__(self):
        self.cleared = False
        self.clock_id = 0
        self.track = None
        self.clocks = {}          # sequence clock id -> (value, incremental, mono offset)
        self.names = {}
        self.locations = {}


def read_trace(path, counters=None, flows=None):
    """Rebuild what the trace processor sees: tracks, slices per track (nested),
    instants. Asserts each rule a TrackEvent reader relies on. counters (a dict): gets
    {counter track uuid: (name, parent uuid, [(ts, value), ...])}, the TYPE_COUNTER
    events of each track with a CounterDescriptor (descriptors are read first, as the
    trace processor reserves them while tokenizing, before the sorted events).
    flows (a dict): gets {flow id: {"out": [(track, name, ts)], "in": [...]}}, the events
    that start (flow_ids) and end (terminating_flow_ids) each flow."""
    pkts, batches = packets(path)
    counter_tracks = {}
    for p in pkts:
        if p.HasField("track_descriptor") and p.track_descriptor.HasField("counter"):
            td = p.track_descriptor
            counter_tracks[td.uuid] = (td.name, td.parent_uuid, [])
    if counters is not None:
        counters.update(counter_tracks)
    seqs = collections.defaultdict(Seq)
    tracks, processes = {}, {}
    stacks = collections.defaultdict(list)
    last_ts = {}
    # track uuid -> [(name, file, line, start, end, depth, child indexes, continued)], in end order
    slices = collections.defaultdict(list)
    instants = collections.defaultdict(list)    # track uuid -> [(name, ts, args)]
    primary = None
    for p in pkts:
        assert p.HasField("trusted_packet_sequence_id") and p.trusted_packet_sequence_id > 0
        s = seqs[p.trusted_packet_sequence_id]
        if p.sequence_flags & CLEARED:
            s.__init__()
            s.cleared = True
        if p.HasField("trace_packet_defaults"):
            d = p.trace_packet_defaults
            s.clock_id = d.timestamp_clock_id
            s.track = d.track_event_defaults.track_uuid
        if p.HasField("clock_snapshot"):
            cs = p.clock_snapshot
            if cs.primary_trace_clock:
                assert primary is None, "the trace clock is set once"
                primary = cs.primary_trace_clock
            mono = [c.timestamp for c in cs.clocks if c.clock_id == MONOTONIC]
            for c in cs.clocks:
                if 64 <= c.clock_id < 128:             # a sequence-scoped clock
                    assert mono, "a sequence clock is defined against CLOCK_MONOTONIC"
                    assert c.unit_multiplier_ns in (0, 1)
                    s.clocks[c.clock_id] = [c.timestamp, c.is_incremental, mono[0] - c.timestamp]
        if p.HasField("interned_data"):
            assert s.cleared, "interned data before the sequence's state was cleared"
            for n in p.interned_data.event_names:
                s.names[n.iid] = n.name
            for loc in p.interned_data.source_locations:
                s.locations[loc.iid] = (loc.file_name, loc.function_name, loc.line_number)
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            if td.HasField("process"):
                processes[td.uuid] = (td.process.pid, td.process.process_name)
            if td.HasField("thread"):
                tracks[td.uuid] = (td.thread.pid, td.thread.tid, td.thread.thread_name)
            elif not td.HasField("process") and not td.HasField("counter") and td.name:
                tracks[td.uuid] = (None, None, td.name)  # a named track (a thread's Steps)
        if not p.HasField("track_event"):
            continue
        assert p.sequence_flags & NEEDS and s.cleared, "a track event needs the sequence's state"
        assert p.HasField("timestamp")
        clock = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else s.clock_id
        if clock == MONOTONIC:
            ts = p.timestamp
        else:
            assert clock in s.clocks, "timestamp on clock %d, not defined on the sequence" % clock
            c = s.clocks[clock]
            if c[1]:
                c[0] += p.timestamp
                ts = c[0] + c[2]
            else:
                ts = p.timestamp + c[2]
        ev = p.track_event
        track = ev.track_uuid if ev.HasField("track_uuid") else s.track
        if ev.type == COUNTER:
            assert track in counter_tracks, "a counter value on a track with no CounterDescriptor"
            assert ev.HasField("double_counter_value") or ev.HasField("counter_value")
            assert ts >= last_ts.get(track, 0)
            last_ts[track] = ts
            counter_tracks[track][2].append((ts, ev.double_counter_value if ev.HasField("double_counter_value")
                                             else ev.counter_value))
            continue
        assert track in tracks, "event on a track with no descriptor"
        # The trace processor sorts events by time: a track's events must already be in
        # time order for its slices to nest as written.
        assert ts >= last_ts.get(track, 0)
        last_ts[track] = ts
        if ev.HasField("name_iid"):
            assert ev.name_iid in s.names, "name iid %d not interned on the sequence" % ev.name_iid
            name = s.names[ev.name_iid]
        else:
            name = ev.name
        if flows is not None:
            for fid in ev.flow_ids:
                flows.setdefault(fid, {"out": [], "in": []})["out"].append((track, name, ts))
            for fid in ev.terminating_flow_ids:
                flows.setdefault(fid, {"out": [], "in": []})["in"].append((track, name, ts))
        if ev.type == BEGIN:
            assert name
            loc = None
            if ev.HasField("source_location_iid"):
                loc = s.locations[ev.source_location_iid]
                assert loc[1] == name
            args = {a.name: a for a in ev.debug_annotations}
            continued = "continued" in args and args["continued"].bool_value
            stacks[track].append([name, loc, ts, continued, []])
        elif ev.type == END:
            assert stacks[track], "SLICE_END with no open slice"
            name0, loc, start, continued, children = stacks[track].pop()
            assert start <= ts
            file, line = (loc[0], loc[2]) if loc else (None, 0)
            index = len(slices[track])
            slices[track].append((name0, file, line, start, ts, len(stacks[track]), children, continued))
            if stacks[track]:
                stacks[track][-1][4].append(index)
        else:
            assert ev.type == INSTANT and name
            args = {a.name: a.uint_value for a in ev.debug_annotations}
            instants[track].append((name, ts, args))
    assert primary == MONOTONIC
    assert not any(stacks.values()), "slices left open at the end of the trace"
    return tracks, processes, slices, instants, len(pkts), batches


def check_nesting(track_slices):
    """Slices of a track nest: each lies within its parent, siblings one after another,
    and a slice's depth is its parent's plus one."""
    children_of = {}
    for i, (name, _f, _l, start, end, depth, children, _cont) in enumerate(track_slices):
        prev_end = start
        for c in children:
            cs = track_slices[c]
            assert cs[5] == depth + 1 and c not in children_of
            children_of[c] = i
            assert prev_end <= cs[3] and cs[4] <= end, (name, start, end, cs)
            prev_end = cs[4]
    for i, s in enumerate(track_slices):
        assert (s[5] == 0) == (i not in children_of), s
    roots = [s for s in track_slices if s[5] == 0]
    for a, b in zip(roots, roots[1:]):
        assert a[4] <= b[3], (a, b)


def slice_counts(slices):
    """Calls per function: slices that do not continue an activation under a new parent
    (annotated continued), Python functions by (name, file, line), others by name."""
    counts = collections.Counter()
    for track in slices.values():
        for name, file, line, *_rest, continued in track:
            if not continued:
                counts[(name, file, line) if file is not None and line > 0 else name] += 1
    return counts


def track_parents(path):
    """{track uuid: parent uuid} of every TrackDescriptor (0: none), and {process track
    uuid: pid}: which process track each thread track hangs under."""
    pkts, _batches = packets(path)
    parents, process_tracks = {}, {}
    for p in pkts:
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            parents[td.uuid] = td.parent_uuid if td.HasField("parent_uuid") else 0
            if td.HasField("process"):
                process_tracks[td.uuid] = td.process.pid
    return parents, process_tracks
