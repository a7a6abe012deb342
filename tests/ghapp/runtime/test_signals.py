"""A signal the kernel hands to a thread other than the main one still stops a wait."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

from ghapp.runtime.signals import SLICE_S, wait_awake
from tests.paths import ROOT

# A process whose main thread waits for a SIGTERM handler to set an event, while another
# thread sends SIGTERM to itself (pthread_kill): the C-level handler runs in that thread,
# and only a main thread that wakes now and then runs the Python one. {wait} is the wait.
PROGRAM = """
import os, signal, sys, threading, time
from ghapp.runtime.signals import wait_awake
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
def other() -> None:
    time.sleep(0.3)
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
    time.sleep(60)  # (a pump or a worker loop, going on)
threading.Thread(target=other, daemon=True).start()
began = time.monotonic()
{wait}
print(round(time.monotonic() - began, 2), flush=True)
os._exit(0)
"""


def run(wait: str) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(PROGRAM).replace("{wait}", wait)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def test_a_signal_to_another_thread_ends_the_wait_within_a_slice() -> None:
    done = run("wait_awake(stop)")
    assert done.returncode == 0, done.stderr
    assert 0.3 <= float(done.stdout) < 0.3 + SLICE_S + 2  # (2 s: a loaded machine)


def test_a_plain_wait_would_sleep_on() -> None:
    """What the helper is for: ``Event.wait()`` with no timeout is not woken (the same
    program, bounded at 3 s, still waits then)."""
    done = run("stop.wait(3)")
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) >= 3


def test_it_returns_whether_the_event_was_set() -> None:
    event = threading.Event()
    began = time.monotonic()
    assert wait_awake(event, 0.1) is False
    assert time.monotonic() - began < 0.1 + SLICE_S
    assert wait_awake(event, 0) is False
    threading.Timer(0.05, event.set).start()
    assert wait_awake(event, 5) is True
    assert wait_awake(event) is True  # already set: at once


def test_a_timeout_longer_than_a_slice_is_kept() -> None:
    timeout = 0.6
    began = time.monotonic()
    assert wait_awake(threading.Event(), timeout) is False
    assert timeout <= time.monotonic() - began < timeout + SLICE_S
