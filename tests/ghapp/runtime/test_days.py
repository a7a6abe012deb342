"""Local days: their bounds, and what the turns started in them used."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from ghapp.runtime.days import day_bounds, spent_between, zone

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize("days", [1, 7])
@pytest.mark.parametrize(
    "now",
    [T0, T0.replace(hour=0), T0.replace(hour=23, minute=59, second=59, microsecond=999999)],
)
def test_utc_is_read_without_the_time_zone_database_and_gives_the_same_days(
    now: datetime, days: int
) -> None:
    assert zone("UTC") is UTC
    assert day_bounds(now, "UTC", days=days) == day_bounds(now, "Etc/UTC", days=days)
    assert isinstance(zone("Etc/UTC"), ZoneInfo)


def test_another_zone_moves_the_day() -> None:
    # 09:00 UTC is 17:00 in Shanghai; 17:00 UTC is already the next day there.
    assert day_bounds(T0, "Asia/Shanghai") == (
        "2026-11-30",
        "2026-11-29T16:00:00.000000+00:00",
        "2026-11-30T16:00:00.000000+00:00",
    )
    assert day_bounds(T0 + timedelta(hours=8), "Asia/Shanghai")[0] == "2026-12-01"
    with pytest.raises(KeyError):  # zoneinfo.ZoneInfoNotFoundError
        zone("Mars/Olympus")


def test_turns_count_where_they_started_in_order_given() -> None:
    start, end = "2026-11-30T00:00:00.000000+00:00", "2026-12-01T00:00:00.000000+00:00"
    turns = [
        ("2026-11-29T23:59:59.999999+00:00", 100, 1.0),  # the day before
        ("2026-11-30T00:00:00.000000+00:00", 10, 0.1),
        ("2026-11-30T12:00:00.000000+00:00", None, 0.2),  # no tokens reported
        ("2026-11-30T13:00:00.000000+00:00", 5, None),  # no cost reported
        ("2026-12-01T00:00:00.000000+00:00", 100, 1.0),  # the next day
    ]
    assert spent_between(turns, start, end) == (3, 15, 0.1 + 0.2)
