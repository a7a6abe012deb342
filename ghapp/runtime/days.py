"""Local days of the rules' timezone: their bounds as stored instants, and what the turns
that started in them used.

The daily spend cap (:mod:`ghapp.runtime.budget`) and ``autoloop status`` count the
same way from here; this module loads nothing of the kernel's classes, so that status
starts fast.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, time, timedelta, tzinfo
from typing import Any

from kernel.durations import iso

__all__ = ["day_bounds", "review_runs", "spent_between", "zone"]


def zone(name: str) -> tzinfo:
    """The time zone called ``name`` (``zoneinfo.ZoneInfoNotFoundError``, a KeyError, or
    ValueError when there is none). UTC, the starter rules' zone, is the same instants
    without the time zone database: zoneinfo is loaded for the others only."""
    if name == "UTC":
        return UTC
    from zoneinfo import ZoneInfo  # noqa: PLC0415  # imported late: status in UTC starts without it

    return ZoneInfo(name)


def day_bounds(now: datetime, timezone: str, *, days: int = 1) -> tuple[str, str, str]:
    """(local date, start, end) of the ``days`` local days ending with today; ISO instants.

    ``start`` is local midnight ``days - 1`` days ago, ``end`` the next local midnight.
    """
    tz = zone(timezone)
    today = now.astimezone(tz).date()
    first = today - timedelta(days=days - 1)
    start = datetime.combine(first, time(0), tz)
    end = datetime.combine(today + timedelta(days=1), time(0), tz)
    return today.isoformat(), iso(start), iso(end)


def spent_between(
    turns: Iterable[tuple[str, int | None, float | None]], start: str, end: str
) -> tuple[int, int, float]:
    """(turns, tokens, usd) of the turns started in [start, end), each given as (started,
    tokens, usd); ISO instants compare as text. Summed in the order given."""
    n = tokens = 0
    cost = 0.0
    for started, used_tokens, used_usd in turns:
        if start <= started < end:
            n += 1
            tokens += used_tokens or 0
            cost += used_usd or 0.0
    return n, tokens, cost


def review_runs(data: Mapping[str, Any]) -> list[tuple[str, int, float, str]]:
    """(started, tokens, usd, request) of each review agent's run a delivery's record
    (its ``data``) keeps."""
    out: list[tuple[str, int, float, str]] = []
    for e in data.get("review_spend") or ():
        if not isinstance(e, Mapping) or not isinstance(e.get("at"), str):
            continue
        tokens, usd = e.get("tokens"), e.get("cost_usd")
        out.append(
            (
                e["at"],
                tokens if type(tokens) is int else 0,
                float(usd) if isinstance(usd, int | float) and type(usd) is not bool else 0.0,
                str(e.get("request") or ""),
            )
        )
    return out
