"""Tracing starts deep inside the program, in the main thread and while another thread is
already running; frames that were running then return before their callers call on.

    <module> > outer > middle > start_here > _harness.begin > pytrace.start   (main thread)
    Thread._bootstrap > ... > early_worker > waiter > Event.wait             (other thread)

After tracing starts, start_here returns, middle calls work; middle returns, outer
calls after; in the thread, waiter returns and early_worker calls after_wait.
"""
import threading

import _harness


def leaf():
    return 1


def work():
    return leaf()


def after():
    return leaf() + leaf()


def after_wait():
    return leaf()


def waiter(go):
    go.wait()


def early_worker(go, done):
    waiter(go)
    after_wait()
    done.set()


def start_here():
    _harness.begin(["outer", "early_worker"])


def middle():
    start_here()
    work()


def outer(go, done):
    middle()
    after()
    go.set()
    done.wait()


if __name__ == "__main__":
    go, done = threading.Event(), threading.Event()
    thread = threading.Thread(target=early_worker, args=(go, done))
    thread.start()
    outer(go, done)
    thread.join()
    _harness.end()
