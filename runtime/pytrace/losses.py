"""The loss counters every tool shows, in one list.

A counter here is named as in `pytrace.Counters`, `Reader.stats()`, the ProducerStatus
message and `pytrace ls --json`. Each tool (stop(), `pytrace record`, `pytrace export`,
`pytrace ls`) shows the non-zero ones through `describe()`, so a new counter is one line
here (and the same line in viewer/top/main.c's table for pytrace-top).
"""

# (key, "N <phrase>" for one, for several)
LOSS_COUNTERS = (
    ("events_dropped", "event dropped", "events dropped"),
    ("symbols_dropped", "symbol dropped (its function shows as <unknown>)",
     "symbols dropped (their functions show as <unknown>)"),
    ("hook_errors", "hook error", "hook errors"),
    ("threads_untraced", "thread ran without a ring (no free ring or no room for one)",
     "threads ran without a ring (no free ring or no room for one)"),
    ("events_untraced", "event of a thread without a ring not recorded",
     "events of threads without a ring not recorded"),
    ("tracing_displaced", "thread displaced by the program's own profiler (not traced)",
     "threads displaced by the program's own profiler (not traced)"),
    ("unrecorded_events", "event read and not written to the recording (its disk was full)",
     "events read and not written to the recording (its disk was full)"),
)

# Counters that are not events dropped: export and record show events dropped their own
# way (the gaps they saw), these beside it.
# unrecorded_events is the recorder's loss, not the job's: said by its own line
# (unrecorded_text) where a recording is read.
OTHER_LOSSES = tuple(k for k, _, _ in LOSS_COUNTERS if k not in ("events_dropped", "unrecorded_events"))


def losses_of(source, keys=None):
    """{key: count} of the loss counters found in `source` (a mapping or an object with
    attributes); missing ones count 0."""
    out = {}
    for key, _, _ in LOSS_COUNTERS:
        if keys is not None and key not in keys:
            continue
        value = source.get(key, 0) if isinstance(source, dict) else getattr(source, key, 0)
        try:
            out[key] = int(value or 0)
        except (TypeError, ValueError):
            out[key] = 0
    return out


def describe(values, keys=None):
    """'25325 symbols dropped (...), 1 hook error' for the non-zero counters, in the
    list's order; '' when there is none."""
    parts = []
    for key, one, several in LOSS_COUNTERS:
        if keys is not None and key not in keys:
            continue
        n = values.get(key, 0) if isinstance(values, dict) else getattr(values, key, 0)
        if n:
            parts.append("%d %s" % (n, one if n == 1 else several))
    return ", ".join(parts)


def unrecorded_text(path, events, messages, err):
    """The one line every tool gives for a recording whose writer could not write
    everything (the file's INCOMPLETE flag and loss slot, pytrace.recording)."""
    import errno as _errno
    import os as _os
    try:
        cause = _os.strerror(err) if err else "a write failed"
    except (ValueError, OverflowError):     # the file's number, not one of this system's
        cause = "error %d" % err
    if err in (_errno.ENOSPC, _errno.EDQUOT):
        cause += " (disk full)"
    elif err == _errno.EFBIG:
        cause += " (file size limit)"
    return ("%s is incomplete: %s; %d events in %d messages were read and not written "
            "(the recording holds everything before)" % (path, cause, events, messages))


def unannounced_text(n):
    """The one line for events that name a symbol never announced (viewer/core/walk.h:
    damage, the rest of the stream kept)."""
    return "%d event%s name%s symbols never announced (damage): shown as <unknown #id>" % (
        n, "" if n == 1 else "s", "s" if n == 1 else "")
