"""Shared by the export and recording tests: each output format checked with its consumer's
rules (collapsed lines, Chrome trace-event nesting, the speedscope file-format schema)."""

import collections


def _collapsed(path):
    out = {}
    for line in open(path):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        assert stack and count.isdigit(), line
        names = tuple(f.split(" (")[0] for f in stack.split(";"))
        out[names] = out.get(names, 0) + int(count)
    return out


def _check_nesting(events):
    """X events of one thread must nest: intervals are disjoint or contained."""
    evs = sorted(events, key=lambda e: (e["ts"], -e["dur"]))
    stack = []
    for e in evs:
        start, end = e["ts"], e["ts"] + e["dur"]
        while stack and stack[-1] <= start + 1e-9:
            stack.pop()
        assert not stack or end <= stack[-1] + 1e-6, e
        stack.append(end)


def check_speedscope(doc):
    """The required structure of https://www.speedscope.app/file-format-schema.json
    (SpeedscopeFile, EventedProfile, FrameInfo), checked by hand."""
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = doc["shared"]["frames"]
    assert isinstance(frames, list)
    for f in frames:
        assert isinstance(f["name"], str)
        assert set(f) <= {"name", "file", "line", "col"}
    assert isinstance(doc["profiles"], list)
    opens = collections.Counter()
    for p in doc["profiles"]:
        assert p["type"] == "evented"
        assert isinstance(p["name"], str)
        assert p["unit"] in ("none", "nanoseconds", "microseconds", "milliseconds", "seconds", "bytes")
        assert p["startValue"] <= p["endValue"]
        stack, last = [], p["startValue"]
        for e in p["events"]:
            assert e["type"] in ("O", "C") and 0 <= e["frame"] < len(frames)
            assert last <= e["at"] <= p["endValue"]          # events sorted by time
            last = e["at"]
            if e["type"] == "O":
                stack.append(e["frame"])
                opens[frames[e["frame"]]["name"]] += 1
            else:
                assert stack and stack.pop() == e["frame"]    # speedscope rejects mismatches
        assert not stack
    if "activeProfileIndex" in doc:
        assert 0 <= doc["activeProfileIndex"] < max(1, len(doc["profiles"]))
    return opens
