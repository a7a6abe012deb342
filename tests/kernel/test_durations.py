"""Durations for ``later.in`` and ISO 8601 instants for ``later.at``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.durations import MAX_DURATION_S, parse_duration, parse_iso


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("2h", 7200),
        ("1d", 86400),
        ("1h30m", 5400),
        ("1d2h3m4s", 93784),
        ("0h5m", 300),
        ("3660d", 3660 * 86400),
    ],
)
def test_durations_in_units_d_h_m_s_add_up(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "expected a duration like 90s"),
        ("90", "expected a duration like 90s"),
        ("1.5h", "expected a duration like 90s"),
        ("30m1h", "expected a duration like 90s"),
        ("1h 30m", "expected a duration like 90s"),
        ("-5m", "expected a duration like 90s"),
        ("5M", "expected a duration like 90s"),
        (" 5m", "expected a duration like 90s"),
        ("PT5M", "expected a duration like 90s"),
        ("0s", "longer than zero"),
        ("0d0h", "longer than zero"),
        ("3661d", "at most ten years"),
        ("9999999999s", "expected a duration like 90s"),
    ],
)
def test_bad_durations_say_what_is_expected(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as caught:
        parse_duration(text)
    assert f"got {text!r}" in str(caught.value)


def test_a_duration_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(ValueError, match="got int"):
        parse_duration(30)  # type: ignore[arg-type]  # callers hand over untrusted JSON


@given(st.integers(0, 3000), st.integers(0, 99), st.integers(0, 99), st.integers(0, 99))
def test_duration_round_trips_through_its_parts(d: int, h: int, m: int, s: int) -> None:
    total = d * 86400 + h * 3600 + m * 60 + s
    text = "".join(f"{v}{u}" for v, u in ((d, "d"), (h, "h"), (m, "m"), (s, "s")) if v)
    if not text:
        with pytest.raises(ValueError, match="expected a duration"):
            parse_duration(text)
    elif total > MAX_DURATION_S:
        with pytest.raises(ValueError, match="at most ten years"):
            parse_duration(text)
    else:
        assert parse_duration(text) == total


@given(st.text(max_size=20))
def test_parse_duration_raises_only_value_error(text: str) -> None:
    try:
        seconds = parse_duration(text)
    except ValueError:
        return
    assert 0 < seconds <= MAX_DURATION_S


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-31T09:00:00+08:00", datetime(2026, 1, 31, 1, 0, tzinfo=UTC)),
        ("2026-01-31T09:00:00Z", datetime(2026, 1, 31, 9, 0, tzinfo=UTC)),
        ("2026-01-31 09:00+00:00", datetime(2026, 1, 31, 9, 0, tzinfo=UTC)),
        ("2026-01-31T09:00:00.5-05:30", datetime(2026, 1, 31, 14, 30, 0, 500000, tzinfo=UTC)),
    ],
)
def test_iso_times_with_offset_are_read_as_instants(text: str, expected: datetime) -> None:
    value = parse_iso(text)
    assert value == expected
    assert value.utcoffset() is not None


def test_iso_time_keeps_its_own_offset() -> None:
    assert parse_iso("2026-01-31T09:00:00+08:00").utcoffset() == timedelta(hours=8)
    assert parse_iso("2026-01-31T09:00:00+08:00").tzinfo == timezone(timedelta(hours=8))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("2026-01-31T09:00:00", "has no UTC offset: add one"),
        ("2026-01-31", "expected a date and a time with UTC offset"),
        ("tomorrow", "expected an ISO 8601 time like"),
        ("2026-02-30T09:00:00Z", "expected an ISO 8601 time like"),
        ("", "expected an ISO 8601 time like"),
    ],
)
def test_iso_times_without_offset_or_malformed_are_refused(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_iso(text)


def test_iso_time_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(ValueError, match="got list"):
        parse_iso([])  # type: ignore[arg-type]  # callers hand over untrusted JSON


@given(st.datetimes(timezones=st.just(UTC)))
def test_iso_round_trips_aware_datetimes(value: datetime) -> None:
    assert parse_iso(value.isoformat()) == value
