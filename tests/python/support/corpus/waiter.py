"""Starts tracing, says so, and sleeps until killed (for `pytrace ls`)."""
import sys
import time

import pytrace

segment = pytrace.start()
print(segment, flush=True)
deadline = time.monotonic() + float(sys.argv[1] if len(sys.argv) > 1 else 60)
while time.monotonic() < deadline:
    time.sleep(0.01)
