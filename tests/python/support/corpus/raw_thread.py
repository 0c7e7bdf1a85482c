"""A thread started with _thread.start_new_thread (not threading) after tracing started."""
import _thread

import _harness


def leaf(x):
    return x * 2


def raw_entry(n, done):
    try:
        sum(leaf(i) for i in range(n))
    finally:
        done.release()


if __name__ == "__main__":
    _harness.begin(["raw_entry"])
    done = _thread.allocate_lock()
    done.acquire()
    _thread.start_new_thread(raw_entry, (5, done))
    done.acquire()          # released by the thread as its last action
    _harness.end()
