"""Argument types shared by ``autoloop serve`` and ``autoloop work``.

Each turns a bad value into argparse's own error (the usage, then one line naming the
option and what it takes, exit 2), before anything opens the ledger or listens.
"""

from __future__ import annotations

import argparse
import math
from urllib.parse import urlsplit

__all__ = ["base_url", "poll_seconds", "turns_at_once", "worker_name"]

MIN_POLL_S = 0.01
MAX_POLL_S = 3600.0
RESERVED_WORKERS = ("any",)  # an agent's "worker": "any" means every worker


def turns_at_once(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give 1 or more turns at once")
    return value


def poll_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not MIN_POLL_S <= value <= MAX_POLL_S:
        raise argparse.ArgumentTypeError(
            f"{text}: give seconds from {MIN_POLL_S} to {MAX_POLL_S:.0f} (default 1)"
        )
    return value


def stop_wait_seconds(text: str) -> float:
    """``--stop-wait``: seconds a stop waits for running turns, from 0 to a day."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"{text}: give seconds from 0 to 86400")
    return value


def worker_name(text: str) -> str:
    """Any name an agent's ``"worker"`` can hold in rules.json: printable, not blank."""
    if not text.strip() or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f'{text!r}: give the name an agent\'s "worker" holds in rules.json '
            "(printable, not blank)"
        )
    if text in RESERVED_WORKERS:
        raise argparse.ArgumentTypeError(
            f'{text!r} is what an agent\'s "worker" says to run on every worker: '
            "give this worker a name of its own"
        )
    return text


def base_url(text: str) -> str:
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give the public http(s) address of this server, e.g. "
            "https://autoloop.example.com (card links start with it)"
        )
    return text.strip().rstrip("/")
