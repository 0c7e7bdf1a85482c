"""Schema messages built with the flatc-generated Python builders (test input for the
decoder and the call tree, independent of the C builder), as (message type, bytes)
pairs. The builders themselves are synthetic.py's (beside this file)."""

import synthetic as syn


def symbol(sym_id, kind, name, file="", line=0, process=0):
    return 4, syn.symbol(sym_id, name, file=file, line=line, kind=kind, process=process)


def chunk(thread, first_event, events, process=0):
    """events: (ticks, id, aux, kind, flags) tuples."""
    return 5, syn.event_chunk(thread, events, first_event=first_event, process=process)


def process_info(pid, segment="/pytrace-1-0", process=0):
    return 1, syn.process_info(pid=pid, segment=segment, process=process)


def thread_start(thread, name="MainThread"):
    return 2, syn.thread_start(thread, name=name)


def thread_end(thread, written, dropped=0):
    return 3, syn.thread_end(thread, 0, events_written=written, events_dropped=dropped)


def producer_status(state, written=0):
    return 7, syn.producer_status(state=state, events_written=written)
