"""Durations (``90s``, ``30m``, ``2h``, ``1d``, ``1h30m``) and ISO 8601 instants with offset.

Both raise :class:`ValueError` with a message that says what was expected; callers
turn it into their own error value.
"""

from __future__ import annotations

import re
from datetime import datetime

__all__ = ["MAX_DURATION_S", "parse_duration", "parse_iso"]

MAX_DURATION_S = 10 * 366 * 86400  # ten years: anything longer is a mistake, not a plan

_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(?:(\d{1,9})d)?(?:(\d{1,9})h)?(?:(\d{1,9})m)?(?:(\d{1,9})s)?")
_EXPECTED = "expected a duration like 90s, 30m, 2h, 1d or 1h30m"


def parse_duration(text: str) -> int:
    """Seconds in ``text``: units d, h, m, s in that order, each at most once, e.g. ``1h30m``.

    The result is positive and at most ten years.
    """
    if not isinstance(text, str):
        raise ValueError(f"{_EXPECTED}, got {type(text).__name__}")
    match = _DURATION.fullmatch(text)
    if not text or match is None:
        raise ValueError(f"{_EXPECTED}, got {text!r}")
    seconds = sum(
        int(value) * _UNIT_S[unit]
        for value, unit in zip(match.groups(), "dhms", strict=True)
        if value is not None
    )
    if seconds <= 0:
        raise ValueError(f"a duration must be longer than zero, got {text!r}")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"a duration must be at most ten years (3660d), got {text!r}")
    return seconds


def parse_iso(text: str) -> datetime:
    """An ISO 8601 date and time that carries its UTC offset (``+08:00`` or ``Z``)."""
    if not isinstance(text, str):
        raise ValueError(f"expected an ISO 8601 time string, got {type(text).__name__}")
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"expected an ISO 8601 time like 2026-01-31T09:00:00+08:00, got {text!r}"
        ) from None
    if value.tzinfo is None or value.utcoffset() is None:
        if not re.search(r"\d[T ]\d", text):
            raise ValueError(
                f"expected a date and a time with UTC offset, e.g. {text}T09:00:00+00:00"
            )
        raise ValueError(
            f"the time {text!r} has no UTC offset: add one, e.g. {text}+00:00 or {text}Z"
        )
    return value
