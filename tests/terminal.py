"""Starting a command as a terminal starts it, for tests that press Ctrl-C (SIGINT).

A child inherits its parent's ignored signals and its signal mask. Run from pytest's
workers beside the rest of the suite, the commands started by two tests ignored SIGINT
(the demo ran to its end; a drain never stopped), where run alone they did not: a shell
starts a command with SIGINT at its default and unblocked, so these tests do too.
"""

from __future__ import annotations

import signal
from pathlib import Path


def as_from_a_terminal() -> None:
    """``preexec_fn``: SIGINT at its default and unblocked in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def signal_state(pid: int) -> str:
    """The child's blocked and ignored signals, for a failure's message."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as exc:
        return f"(no status: {exc})"
    return " ".join(line for line in lines if line.startswith(("SigBlk", "SigIgn")))
