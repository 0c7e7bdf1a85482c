"""Recordings with CpuTime records (EventKind CpuTime: a thread's CPU ns at a tick, modulo
2^48 in id | aux << 32), for the views' CPU and <not observed> tests: no traced process,
so the CPU figures are exact and known.

spin_and_wait(path): thread 1 calls main -> spin and is on a CPU all the time; thread 2
calls main -> wait and is on a CPU 1% of the time; each for SECONDS, with a CpuTime record
every 10 ms (as the tracer writes them); thread 2 for WAIT_SECONDS.

with_gap(path): one thread, main -> spin, on a CPU all the time; after GAP_AT seconds
LOST_EVENTS events are lost for GAP seconds (a Lost record, then Frame records of main,
spin), then it spins on to the end (SECONDS in all, the gap included).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import synthetic as S  # noqa: E402
from pytrace.fb.EventKind import EventKind as K  # noqa: E402

SECONDS = 2.0
WAIT_SECONDS = 3.0           # the waiter is longer: first by wall time, last by CPU time
TICK = 10_000_000            # a CpuTime record every 10 ms
WAIT_CPU_SHARE = 0.01
GAP_AT = 1.0
GAP = 1.0
LOST_EVENTS = 4242
MASK48 = (1 << 48) - 1

# symbol ids
MAIN_SPIN, SPIN, MAIN_WAIT, WAIT = 1, 2, 3, 4


def cpu_ev(ticks, cpu_ns):
    v = cpu_ns & MASK48
    return (ticks, v & 0xFFFFFFFF, v >> 32, K.CpuTime, 0)


def _symbols():
    return [S.symbol(MAIN_SPIN, "main_spin", "job.py", 1), S.symbol(SPIN, "spin", "job.py", 10),
            S.symbol(MAIN_WAIT, "main_wait", "job.py", 20), S.symbol(WAIT, "wait", "job.py", 30)]


def _thread(thread, outer, inner, share, seconds, cpu0=1000):
    """Events of a thread: outer -> inner for `seconds`, on a CPU `share` of the time."""
    total = int(seconds * 1e9)
    evs = [cpu_ev(0, cpu0), (0, outer, K.Call), (0, inner, K.Call)]
    for t in range(TICK, total + 1, TICK):
        evs.append(cpu_ev(t, cpu0 + int(t * share)))
    evs += [(total, inner, K.Return), (total, outer, K.Return)]
    return evs


def _write(path, msgs):
    from pytrace.recording import RecordingWriter
    w = RecordingWriter(path, lossless=False)
    for m in msgs:
        w.append(m)
    w.close()


def spin_and_wait(path):
    msgs = [S.process_info(pid=4321, command_line="python job.py")] + _symbols()
    msgs += [S.thread_start(1, "spinner", ticks=0), S.thread_start(2, "waiter", ticks=0)]
    msgs.append(S.event_chunk(1, _thread(1, MAIN_SPIN, SPIN, 1.0, SECONDS)))
    msgs.append(S.event_chunk(2, _thread(2, MAIN_WAIT, WAIT, WAIT_CPU_SHARE, WAIT_SECONDS)))
    msgs += [S.thread_end(1, int(SECONDS * 1e9)), S.thread_end(2, int(WAIT_SECONDS * 1e9)),
             S.producer_status(state=3)]
    _write(path, msgs)


def with_gap(path):
    msgs = [S.process_info(pid=4322, command_line="python gap.py")] + _symbols()
    msgs.append(S.thread_start(1, "MainThread", ticks=0))
    gap_at, gap_end, end = int(GAP_AT * 1e9), int((GAP_AT + GAP) * 1e9), int((SECONDS + GAP) * 1e9)
    evs = [cpu_ev(0, 0), (0, MAIN_SPIN, K.Call), (0, SPIN, K.Call)]
    evs += [cpu_ev(t, t) for t in range(TICK, gap_at + 1, TICK)]
    # the gap: LOST_EVENTS events nobody saw, then the stack as Frame records
    evs.append((gap_end, LOST_EVENTS & 0xFFFFFFFF, LOST_EVENTS >> 32, K.Lost, 0))
    evs.append((gap_end, MAIN_SPIN, 0, K.Frame, 0))
    evs.append((gap_end, SPIN, 1, K.Frame, 0))
    evs += [cpu_ev(t, t) for t in range(gap_end, end + 1, TICK)]
    evs += [(end, SPIN, K.Return), (end, MAIN_SPIN, K.Return)]
    msgs.append(S.event_chunk(1, evs))
    msgs += [S.thread_end(1, end), S.producer_status(state=3)]
    _write(path, msgs)
