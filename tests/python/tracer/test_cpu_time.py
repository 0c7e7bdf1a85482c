"""The tracer writes CpuTime records (schema EventKind CpuTime: the thread's CPU ns
modulo 2^48 in id | aux << 32, at the ticks of the record that follows): a baseline at
a thread's first record, one at every chunk change, one after each heartbeat request
(about every 10 ms) at the thread's next record, and a last one at the thread's end.
So a thread that spins shows CPU time close to its wall time, one that sleeps almost
none, and a thread that was blocked gets a sample with its first record after it wakes."""

import threading
import time

import pytest

import pytrace
from pytrace.reader import EventChunk, EventKind, ProcessInfo, ThreadStart

# needs a quiet core for its spinning thread (tests/run_all.sh runs it alone)
pytestmark = pytest.mark.solo

_CPU = int(EventKind.CpuTime)
_MASK = (1 << 48) - 1


def _tick():
    pass


_OWN_CPU = {}     # thread name -> its CPU ns from time.thread_time_ns(), measured inside


def spin(seconds):
    cpu0 = time.thread_time_ns()
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
        if n % 2000 == 0:
            _tick()       # records now and then: the heartbeat's samples ride on them
    _OWN_CPU[threading.current_thread().name] = time.thread_time_ns() - cpu0


def nap(seconds):
    cpu0 = time.thread_time_ns()
    time.sleep(seconds)
    _OWN_CPU[threading.current_thread().name] = time.thread_time_ns() - cpu0


def _run_job():
    pytrace.start(c_calls=False, include=[__file__], chunks_per_ring=64)
    spinner = threading.Thread(target=spin, args=(0.5,), name="cpu-spinner")
    sleeper = threading.Thread(target=nap, args=(0.5,), name="cpu-sleeper")
    blocked = threading.Thread(target=nap, args=(0.3,), name="cpu-blocked")
    for t in (spinner, sleeper, blocked):
        t.start()
    for t in (spinner, sleeper, blocked):
        t.join()
    counters = pytrace.stop()
    segment = counters.segment
    names, events, info = {}, {}, None
    with pytrace.Reader(segment) as reader:
        for msg in reader:
            if isinstance(msg, ProcessInfo):
                info = msg
            elif isinstance(msg, ThreadStart):
                names[msg.thread] = msg.name
            elif isinstance(msg, EventChunk):
                events.setdefault(msg.thread, []).extend(msg.iter_events())
    by_name = {names[t]: evs for t, evs in events.items() if t in names}
    return counters, info, by_name, events


def _cpu_records(evs):
    return [(ticks, (i | (aux << 32)) & _MASK) for ticks, i, aux, kind, _f in evs if kind == _CPU]


def _cpu_over_wall(info, evs):
    cpu = _cpu_records(evs)
    assert len(cpu) >= 2, cpu
    (t0, c0), (t1, c1) = cpu[0], cpu[-1]
    for (_, a), (_, b) in zip(cpu, cpu[1:]):
        assert (b - a) & _MASK < 1 << 47, "CPU time went back: %d then %d" % (a, b)
    wall = info.ticks_to_ns(t1) - info.ticks_to_ns(t0)
    return ((c1 - c0) & _MASK), wall, len(cpu)


def test_cpu_time_records_of_a_spinning_a_sleeping_and_a_blocked_thread():
    counters, info, threads, events = _run_job()
    assert counters.hook_errors == 0, counters.first_error
    assert counters.events_dropped == 0
    # CpuTime records are records: every count agrees with what was read
    assert counters.events_written == sum(len(e) for e in events.values())
    for name in ("cpu-spinner", "cpu-sleeper", "cpu-blocked"):
        assert name in threads, sorted(threads)
        evs = threads[name]
        assert evs[0][3] == _CPU, "%s: no CPU baseline before its first record: %r" % (name, evs[:3])
        assert evs[-1][3] == _CPU, "%s: no last CPU sample at its end: %r" % (name, evs[-3:])
        ticks = [e[0] for e in evs]
        for i, e in enumerate(evs[:-1]):
            if e[3] == _CPU:    # the sample carries the ticks of the record that follows
                assert e[0] <= evs[i + 1][0], (name, e, evs[i + 1])
        assert ticks[0] <= ticks[-1]

    # what the records say agrees with the thread's own clock, read inside spin(): the
    # first sample comes before it, the last at the thread's end, a few ms later
    cpu, wall, n = _cpu_over_wall(info, threads["cpu-spinner"])
    own = _OWN_CPU["cpu-spinner"]
    assert own <= cpu <= own + 50_000_000, "spinner: records say %d ns CPU, the thread %d" % (cpu, own)
    assert wall >= 0.45e9, wall
    assert cpu >= 0.6 * wall, "spinner: %d ns CPU in %d ns wall" % (cpu, wall)
    # heartbeat requests (about every 10 ms) on top of the start, chunk changes and end
    assert n >= 10, "spinner: only %d CpuTime records in %.2f s" % (n, wall / 1e9)

    cpu, wall, _ = _cpu_over_wall(info, threads["cpu-sleeper"])
    assert wall >= 0.45e9, wall
    assert cpu <= 0.1 * wall, "sleeper: %d ns CPU in %d ns wall" % (cpu, wall)

    # the blocked thread: its first record after the 0.3 s sleep is a CpuTime
    evs = threads["cpu-blocked"]
    gaps = [(evs[i + 1][0] - evs[i][0], i + 1) for i in range(len(evs) - 1)]
    gap, after = max(gaps)
    assert info.ticks_to_ns(evs[after][0]) - info.ticks_to_ns(evs[after - 1][0]) >= 0.25e9, evs
    assert evs[after][3] == _CPU, "the record after the wake is %r, not a CpuTime: %r" % (
        evs[after], evs[after - 2:after + 3])
    assert evs[after + 1][0] == evs[after][0], "the sample takes the ticks of the record after it"
