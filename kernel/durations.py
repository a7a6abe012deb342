"""Durations (``90s``, ``30m``, ``2h``, ``1d``, ``1h30m``) and ISO 8601 instants with offset.

The parsers raise :class:`ValueError` with a message that says what was expected;
callers turn it into their own error value. :func:`iso` is the one stored form of an
instant: fixed-width UTC, so that stored instants compare as strings.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime

__all__ = ["MAX_DURATION_S", "iso", "parse_duration", "parse_instant", "parse_iso"]

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


@functools.lru_cache(maxsize=256)
def iso(dt: datetime) -> str:
    """Fixed-width UTC form, so that stored instants compare as strings.

    Cached: one decision, or a group of them, formats the same instant many times."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


def parse_instant(text: str) -> datetime:
    """An instant stored by :func:`iso` (or any ISO 8601 text the kernel wrote)."""
    return datetime.fromisoformat(text)
