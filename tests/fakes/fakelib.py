"""Shared by the fake CLIs in ``bin/``: recording, scenarios, a session store, hanging.

Control comes through the environment the adapter gives the fake (tests put these names
in ``AgentRequest.env``):

- ``FAKE_RECORD``: a file; each run appends one JSON line ``{"argv", "env", "cwd"}``.
- ``FAKE_SCENARIO``: what to do (each fake documents its own); default ``ok``.
- ``FAKE_STATE``: a folder holding the sessions this fake "knows" (one file each).
- ``FAKE_CHILD_PID``: for ``hang``: where to write the pid of the child it starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def record() -> None:
    path = os.environ.get("FAKE_RECORD")
    if path:
        line = {"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd()}
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")


def scenario() -> str:
    return os.environ.get("FAKE_SCENARIO", "ok")


def _state(session: str) -> Path:
    return Path(os.environ.get("FAKE_STATE", os.getcwd())) / f"{session}.session"


def knows(session: str) -> bool:
    return _state(session).is_file()


def turns_in(session: str) -> int:
    try:
        return int(_state(session).read_text())
    except (OSError, ValueError):
        return 0


def remember(session: str) -> int:
    """Count one more turn in ``session``; returns the new count."""
    count = turns_in(session) + 1
    path = _state(session)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(str(count))
    return count


def hang(first_output: str = "") -> None:
    """Start a child that would outlive us, say where it is, then never finish."""
    child = subprocess.Popen(["sleep", "1000"])
    pid_file = os.environ.get("FAKE_CHILD_PID")
    if pid_file:
        Path(pid_file).write_text(f"{os.getpid()} {child.pid}")
    if first_output:
        print(first_output, flush=True)
    time.sleep(1000)


ASK = (
    "I need a decision.\n\n```autoloop\n"
    '{"ask": [{"key": "colour", "title": "Pick a colour", "text": "For the fake.",'
    ' "options": ["red", "green"]}]}\n```'
)
DONE = (
    "Done.\n\n```autoloop\n"
    '{"notice": [{"title": "Painted", "text": "The fake painted."}], "resolve": ["colour"]}\n```'
)


def message_for(turn: int) -> str:
    """The first turn of a session asks; later turns resolve the question."""
    return ASK if turn <= 1 else DONE
