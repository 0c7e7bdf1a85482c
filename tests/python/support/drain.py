"""Reader process for the tests: attach to a segment, drain it live, write what it saw.

    python drain.py SEGMENT OUT.json [GO_FILE] [--max-seconds N]

Creates GO_FILE once it holds the segment (the traced program waits for it), follows
the stream until the producer stopped/exited, rebuilds the call tree with
calltree (tests/python/support/calltree.py), and writes JSON: the tree, events read, the reader's stats, thread
starts/ends, symbols, producer states seen and whether it ended on a dead producer.
"""

import json
import os
import sys
import time

import pytrace
from calltree import CallTree
from pytrace.reader import (EventChunk, LostCount, ProcessInfo, ProducerStatus, Symbol,
                            SymbolKind, ThreadEnd, ThreadStart)


def main(argv):
    segment, out = argv[0], argv[1]
    go = argv[2] if len(argv) > 2 and not argv[2].startswith("--") else None
    max_seconds = 120.0
    if "--max-seconds" in argv:
        max_seconds = float(argv[argv.index("--max-seconds") + 1])
    reader = pytrace.Reader(segment, follow=True, hub=False)   # the segment itself, not a hub
    if go:
        open(go, "w").close()
    tree = CallTree()
    result = {"segment": segment, "events_read": 0, "chunks": 0, "thread_starts": [],
              "thread_ends": [], "states": [], "symbols": 0, "labels": [], "process": None,
              "lost_counts": [], "first_events": {}, "gaps": 0, "kinds": {}}
    next_index = {}
    deadline = time.monotonic() + max_seconds
    for msg in reader:
        if isinstance(msg, EventChunk):
            result["events_read"] += msg.count
            result["chunks"] += 1
            # events of one thread are contiguous: first_event continues the last chunk
            expected = next_index.get(msg.thread)
            if expected is not None and msg.first_event != expected:
                result["gaps"] += 1
            next_index[msg.thread] = msg.first_event + msg.count
            kinds = result["kinds"]
            for ev in msg.iter_events():
                kinds[ev[3]] = kinds.get(ev[3], 0) + 1
        elif isinstance(msg, Symbol):
            result["symbols"] += 1
            if msg.kind == SymbolKind.Label:
                result["labels"].append(msg.name)
        elif isinstance(msg, ThreadStart):
            result["thread_starts"].append([msg.thread, msg.name])
        elif isinstance(msg, ThreadEnd):
            result["thread_ends"].append([msg.thread, msg.events_written, msg.events_dropped])
        elif isinstance(msg, ProducerStatus):
            result["states"].append(msg.state)
            result["status"] = {"events_written": msg.events_written,
                                "events_dropped": msg.events_dropped,
                                "hook_errors": msg.hook_errors}
        elif isinstance(msg, ProcessInfo):
            result["process"] = {"pid": msg.pid, "ppid": msg.ppid, "segment": msg.segment,
                                 "command_line": msg.command_line}
        elif isinstance(msg, LostCount):
            result["lost_counts"].append([msg.thread, msg.dropped_total])
        tree.feed(msg)
        if time.monotonic() > deadline:
            result["timeout"] = True
            break
    result["stats"] = reader.stats()
    result["finished"] = reader.finished
    result["error"] = reader.error
    result["tree"] = tree.to_json()
    result["kinds"] = {str(k): v for k, v in result["kinds"].items()}
    reader.close(unlink_if_finished=True)   # leave no segment behind once all is read
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main(sys.argv[1:])
