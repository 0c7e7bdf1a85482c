"""Shared by the export and recording tests: each output format checked with its consumer's
rules (collapsed lines, Chrome trace-event nesting, the speedscope file-format schema), and a
recording's pstats export read as rows keyed as pytrace-top's are."""

import collections
import pstats


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


def _key(name, file, line):
    """Python functions by (name, file, line), C functions and spans by name."""
    return (name, file, line) if line > 0 else name


def _pstats(path, tmp_path, names):
    from pytrace.export import main as export_main
    out = tmp_path / "p.pstats"
    assert export_main([str(path), "-f", "pstats", "--qualnames", "-o", str(out)]) == 0
    st = pstats.Stats(str(out)).stats
    rows = {}
    for (file, line, name), (cc, nc, tt, ct, _callers) in st.items():
        if name.startswith("<span '"):
            key = name[len("<span '"):-2]
        elif file == "~":
            key = name[len("<built-in method "):-1]
        else:
            key = _key(name, file, line)
        rows[key] = (nc, cc, round(tt * 1e9), round(ct * 1e9))
    return rows
