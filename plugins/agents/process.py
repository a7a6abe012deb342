"""Run one agent process: argv only (never a shell), its own process group, a hard timeout.

On timeout the whole process group gets SIGTERM, then SIGKILL after a grace period, so
children the agent started die with it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

GRACE_S = 2.0
MAX_CAPTURE = 8 * 1024 * 1024  # keep at most this much of each stream: its head and tail


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessResult:
    argv: tuple[str, ...]
    exit_code: int | None  # None when it could not be started
    stdout: str
    stderr: str
    timed_out: bool
    spawn_error: str | None  # set when the program could not be started at all
    pid: int | None
    first_output_s: float | None  # seconds from spawn to the first byte on stdout


class _Capture:
    """At most :data:`MAX_CAPTURE` bytes of a stream: its first half and its last half,
    with a line saying how much was left out between them. An agent's receipt ends its
    output: keeping only the head lost the receipt of an agent that wrote more."""

    def __init__(self, limit: int = MAX_CAPTURE) -> None:
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail += chunk
        extra = len(self.tail) - self.half
        if extra > self.half:  # trimmed now and then, not at every chunk
            del self.tail[:extra]
            self.dropped += extra

    def text(self) -> str:
        extra = len(self.tail) - self.half
        if extra > 0:
            del self.tail[:extra]
            self.dropped += extra
        gap = (
            f"\n[autoloop: {self.dropped} bytes of this output are left out here]\n".encode()
            if self.dropped
            else b""
        )
        return bytes(self.head + gap + self.tail).decode("utf-8", "replace")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=GRACE_S)
    # Children may outlive the leader: always finish the group off.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=GRACE_S)


def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    stdin: bytes | None = None,
    on_start: Callable[[int], None] | None = None,
) -> ProcessResult:
    """Run ``argv`` to completion or until ``timeout_s``; never raises for the child's sake."""
    args = tuple(argv)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(  # argv list, shell=False: nothing is interpreted
            args,
            cwd=str(cwd),
            env=dict(env),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        # The folder named too: a missing cwd raised the same error as a missing program,
        # and was reported as the program (which was there).
        what = args[0] if args else "?"
        if not Path(cwd).is_dir():
            what = f"the folder it runs in, {cwd} (the rule's cwd)"
        return ProcessResult(
            argv=args,
            exit_code=None,
            stdout="",
            stderr="",
            timed_out=False,
            spawn_error=f"{what}: {exc.strerror or exc}",
            pid=None,
            first_output_s=None,
        )
    if on_start is not None:
        on_start(proc.pid)

    out_chunks = _Capture()
    err_chunks = _Capture()
    first: list[float] = []

    def pump(stream: object, sink: _Capture, mark_first: bool) -> None:
        read = stream.read1  # type: ignore[attr-defined]  # BufferedReader
        while True:
            chunk: bytes = read(65536)
            if not chunk:
                return
            if mark_first and not first:
                first.append(time.monotonic() - started)
            sink.add(chunk)

    threads = [
        threading.Thread(target=pump, args=(proc.stdout, out_chunks, True), daemon=True),
        threading.Thread(target=pump, args=(proc.stderr, err_chunks, False), daemon=True),
    ]
    for t in threads:
        t.start()
    if stdin is not None and proc.stdin is not None:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(stdin)
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()

    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    else:
        # The leader is gone; anything it left behind in its group goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    for t in threads:
        t.join(timeout=GRACE_S)
    # Close our ends of the pipes (left open they leak a descriptor per turn). A stream
    # whose reader is still blocked -- held open by a process outside the group -- is left
    # to that reader.
    for t, stream in zip(threads, (proc.stdout, proc.stderr), strict=True):
        if stream is not None and not t.is_alive():
            stream.close()
    return ProcessResult(
        argv=args,
        exit_code=proc.returncode,
        stdout=out_chunks.text(),
        stderr=err_chunks.text(),
        timed_out=timed_out,
        spawn_error=None,
        pid=proc.pid,
        first_output_s=first[0] if first else None,
    )
