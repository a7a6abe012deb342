"""Waiting in the main thread so that a signal is acted on.

Python runs a signal's handler in the main thread only, when that thread next runs
Python code. The kernel may hand a process's signal to any of its threads that does not
block it (an agent's output pump, the worker loop): then the main thread is not woken,
and one that waits on a lock with no timeout (``threading.Event().wait()``) sleeps on
with the handler never run. ``autoloop work`` stayed up after a SIGTERM that way, now
and then, until a service manager killed it. Waiting in short slices lets the main
thread run the handler within a slice, whichever thread the signal came to.
"""

from __future__ import annotations

import threading
import time

SLICE_S = 0.25  # how late a handler may run after its signal came to another thread


def wait_awake(event: threading.Event, timeout: float | None = None) -> bool:
    """``event.wait(timeout)``, in slices of :data:`SLICE_S` so that the main thread
    runs the handlers of the signals that came meanwhile: whether ``event`` was set."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = SLICE_S if deadline is None else min(SLICE_S, deadline - time.monotonic())
        if left <= 0:
            return event.is_set()
        if event.wait(left):
            return True
