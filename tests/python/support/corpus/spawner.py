"""Starts a Python child process and reports whether the child was traced."""
import subprocess
import sys

CHILD = "import pytrace, os; print('child', os.getpid(), pytrace.is_tracing(), " \
        "pytrace.segment_name() if pytrace.is_tracing() else None)"

out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
sys.stdout.write(out.stdout)
sys.stderr.write(out.stderr)
sys.exit(out.returncode)
