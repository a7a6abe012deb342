"""Cron lines: parsing, the next and the last tick, and daylight-saving changes."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.cron import Cron, parse_cron

HOUR = timedelta(hours=1)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]  # year, month, day, ...


class ToyZone(tzinfo):
    """+01:00 in winter, +02:00 in summer 2026 (2026-03-29 01:00 to 2026-10-25 01:00 UTC).

    Wall times 02:00-03:00 are skipped on 2026-03-29 and happen twice on 2026-10-25;
    ``fold`` follows PEP 495 (in a gap, fold=0 reads the wall time with the old offset).
    """

    START = datetime(2026, 3, 29, 1, 0)  # noqa: DTZ001 - naive UTC instant of the change
    END = datetime(2026, 10, 25, 1, 0)  # noqa: DTZ001 - naive UTC instant of the change

    def utcoffset(self, dt: datetime | None) -> timedelta:
        assert dt is not None
        wall = dt.replace(tzinfo=None)
        gap = self.START + HOUR  # wall 02:00, winter time
        twice = self.END + HOUR  # wall 02:00, winter time, after the change
        if gap <= wall < gap + HOUR:
            return 2 * HOUR if dt.fold else HOUR
        if twice <= wall < twice + HOUR:
            return HOUR if dt.fold else 2 * HOUR
        return 2 * HOUR if gap + HOUR <= wall < twice else HOUR

    def dst(self, dt: datetime | None) -> timedelta:
        return self.utcoffset(dt) - HOUR

    def tzname(self, dt: datetime | None) -> str:
        return "TOY"

    def fromutc(self, dt: datetime) -> datetime:
        moment = dt.replace(tzinfo=None)
        offset = 2 * HOUR if self.START <= moment < self.END else HOUR
        fold = 1 if self.END <= moment < self.END + HOUR else 0
        return (moment + offset).replace(tzinfo=self, fold=fold)


TOY = ToyZone()


def zone(name: str) -> tzinfo:
    zoneinfo = pytest.importorskip("zoneinfo")
    try:
        return zoneinfo.ZoneInfo(name)  # type: ignore[no-any-return]
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip(f"no time zone data for {name} on this machine")


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("line", "field", "values"),
    [
        ("* * * * *", "minutes", tuple(range(60))),
        ("*/15 * * * *", "minutes", (0, 15, 30, 45)),
        ("5/20 * * * *", "minutes", (5, 25, 45)),
        ("0-30/10 * * * *", "minutes", (0, 10, 20, 30)),
        ("1,2,3,2 * * * *", "minutes", (1, 2, 3)),
        ("0 9-17 * * *", "hours", tuple(range(9, 18))),
        ("0 0 1,15 * *", "days", (1, 15)),
        ("0 0 * jan,Jul-SEP *", "months", (1, 7, 8, 9)),
        ("0 0 * */3 *", "months", (1, 4, 7, 10)),
        ("0 0 * * MON-FRI", "weekdays", (1, 2, 3, 4, 5)),
        ("0 0 * * 0", "weekdays", (0,)),
        ("0 0 * * 7", "weekdays", (0,)),
        ("0 0 * * 5-7", "weekdays", (0, 5, 6)),
        ("0 0 * * sat,sun", "weekdays", (0, 6)),
        ("0 0 * * *", "weekdays", tuple(range(7))),
    ],
)
def test_fields_accept_lists_ranges_steps_and_names(
    line: str, field: str, values: tuple[int, ...]
) -> None:
    assert getattr(parse_cron(line), field) == values


@pytest.mark.parametrize(
    ("macro", "same_as"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_macros_are_shorthands(macro: str, same_as: str) -> None:
    cron, plain = parse_cron(macro), parse_cron(same_as)
    assert cron.line == macro
    assert (cron.minutes, cron.hours, cron.days, cron.months, cron.weekdays) == (
        plain.minutes,
        plain.hours,
        plain.days,
        plain.months,
        plain.weekdays,
    )


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("", "empty cron line: expected five fields"),
        ("   ", "empty cron line"),
        ("0 9 * *", "expected 5 fields (minute hour day-of-month month day-of-week), got 4"),
        ("0 0 9 * * 1", "got 6 (a seconds field is not supported)"),
        ("@reboot", "unknown macro (known: @hourly"),
        ("60 * * * *", "minute '60': 60 is out of range 0-59"),
        ("0 24 * * *", "hour '24': 24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month '0': 0 is out of range 1-31"),
        ("0 0 32 * *", "day-of-month '32': 32 is out of range 1-31"),
        ("0 0 * 13 *", "month '13': 13 is out of range 1-12"),
        ("0 9 * * 1-8", "day-of-week '1-8': 8 is out of range 0-7"),
        ("0 0 * * FUN", "day-of-week 'FUN': 'FUN' is not a number or a name like SUN"),
        ("0 0 * FOO *", "month 'FOO': 'FOO' is not a number or a name like JAN"),
        ("MON 0 * * *", "minute 'MON': 'MON' is not a number"),
        ("*/0 * * * *", "minute '*/0': step '0' must be a number from 1"),
        ("*/x * * * *", "step 'x' must be a number from 1"),
        ("5-1 * * * *", "range '5-1' goes backwards"),
        ("1,,2 * * * *", "empty item in a list"),
        ("1- * * * *", "'' is not a number"),
        ("? * * * *", "'?' is not a number"),
        ("0 0 L * *", "'L' is not a number"),
        ("0 0 * * 1#2", "'1#2' is not a number"),
        ("0 0 30 2 *", "day-of-month '30' never occurs in month '2', so it would never fire"),
        ("0 0 31 4,6 *", "never occurs"),
        ("\u0661 * * * *", "is not a number"),
    ],
)
def test_bad_lines_say_what_is_wrong(line: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_cron(line)


def test_a_bad_line_names_itself() -> None:
    with pytest.raises(ValueError, match=r"^bad cron line '0 9 \* \* 1-8': day-of-week"):
        parse_cron("0 9 * * 1-8")


def test_february_29th_is_a_possible_day() -> None:
    assert parse_cron("0 0 29 2 *").days == (29,)


# --------------------------------------------------------------------------- ticks


@pytest.mark.parametrize(
    ("line", "after", "expected"),
    [
        ("*/5 * * * *", utc(2026, 1, 1, 10, 2, 30), utc(2026, 1, 1, 10, 5)),
        ("*/5 * * * *", utc(2026, 1, 1, 10, 5), utc(2026, 1, 1, 10, 10)),
        ("0 9 * * 1-5", utc(2026, 11, 27, 9, 0), utc(2026, 11, 30, 9, 0)),  # Fri -> Mon
        ("0 9 * * 1-5", utc(2026, 11, 30, 8, 59, 59), utc(2026, 11, 30, 9, 0)),
        ("0 0 1 * *", utc(2026, 12, 31, 23, 59), utc(2027, 1, 1)),
        ("0 0 31 * *", utc(2026, 1, 31, 0, 0), utc(2026, 3, 31)),
        ("0 0 29 2 *", utc(2097, 3, 1), utc(2104, 2, 29)),  # 2100 is not a leap year
        ("@hourly", utc(2026, 6, 1, 23, 0), utc(2026, 6, 2, 0, 0)),
        ("@weekly", utc(2026, 6, 1), utc(2026, 6, 7)),  # Monday -> Sunday
        ("30 23 31 12 *", utc(2026, 12, 31, 23, 30), utc(2027, 12, 31, 23, 30)),
        # both day fields restricted: either one matches (the 13th, or any Friday)
        ("0 9 13 * 5", utc(2026, 11, 1), utc(2026, 11, 6, 9, 0)),
        ("0 9 13 * 5", utc(2026, 11, 10), utc(2026, 11, 13, 9, 0)),
        # a day field starting with * restricts with AND: the 13th that is a Sunday
        ("0 9 13 * */7", utc(2026, 1, 1), utc(2026, 9, 13, 9, 0)),
    ],
)
def test_next_after_finds_the_first_tick_strictly_later(
    line: str, after: datetime, expected: datetime
) -> None:
    assert parse_cron(line).next_after(after) == expected


@pytest.mark.parametrize(
    ("line", "at", "expected"),
    [
        ("*/5 * * * *", utc(2026, 1, 1, 10, 7), utc(2026, 1, 1, 10, 5)),
        ("*/5 * * * *", utc(2026, 1, 1, 10, 5, 0), utc(2026, 1, 1, 10, 5)),
        ("*/5 * * * *", utc(2026, 1, 1, 10, 5, 59), utc(2026, 1, 1, 10, 5)),
        ("0 9 * * 1-5", utc(2026, 11, 30, 8, 0), utc(2026, 11, 27, 9, 0)),  # Mon -> Fri
        ("0 0 29 2 *", utc(2104, 2, 28), utc(2096, 2, 29)),
        ("0 0 1 1 *", utc(2027, 1, 1, 0, 0, 1), utc(2027, 1, 1)),
    ],
)
def test_last_at_or_before_finds_the_most_recent_tick(
    line: str, at: datetime, expected: datetime
) -> None:
    assert parse_cron(line).last_at_or_before(at) == expected


def test_ticks_follow_the_wall_clock_of_a_fixed_offset() -> None:
    shanghai = timezone(timedelta(hours=8))
    after = datetime(2026, 11, 30, 0, 30, tzinfo=UTC)  # 08:30 in +08:00
    in_utc = parse_cron("0 9 * * *").next_after(after)
    assert in_utc == utc(2026, 11, 30, 9, 0)
    assert in_utc.tzinfo is UTC  # the tzinfo of the datetime given
    local = parse_cron("0 9 * * *").next_after(after.astimezone(shanghai))
    assert local == utc(2026, 11, 30, 1, 0)  # 09:00 in +08:00, half an hour later
    assert local.tzinfo == shanghai
    assert (local.hour, local.minute) == (9, 0)


def test_a_naive_datetime_is_refused() -> None:
    naive = datetime(2026, 1, 1)  # noqa: DTZ001 - the mistake under test
    with pytest.raises(ValueError, match="needs an aware datetime"):
        parse_cron("* * * * *").next_after(naive)
    with pytest.raises(ValueError, match="needs an aware datetime"):
        parse_cron("* * * * *").last_at_or_before(naive)


def test_the_ends_of_the_calendar_are_value_errors() -> None:
    with pytest.raises(ValueError, match="has no tick after 9999-06-01"):
        parse_cron("0 0 1 1 *").next_after(utc(9999, 6, 1))
    with pytest.raises(ValueError, match="no tick after 9999-12-31T23:59:00"):
        parse_cron("* * * * *").next_after(utc(9999, 12, 31, 23, 59))
    with pytest.raises(ValueError, match="has no tick before 0001-06-01"):
        parse_cron("0 0 1 7 *").last_at_or_before(utc(1, 6, 1))
    with pytest.raises(ValueError, match="the calendar starts at year 1"):
        parse_cron("0 0 2 1 *").last_at_or_before(utc(1, 1, 1, 5))


def test_a_cron_line_must_be_text() -> None:
    with pytest.raises(ValueError, match="a cron line must be a string, got int"):
        parse_cron(5)  # type: ignore[arg-type]  # the rules file is untrusted JSON


def test_a_rare_schedule_is_found_without_walking_every_minute() -> None:
    cron = parse_cron("59 23 29 2 */7")  # Feb 29 that is a Sunday, at 23:59
    tick = cron.next_after(utc(2033, 1, 1))
    assert tick == utc(2060, 2, 29, 23, 59)
    assert cron.matches(tick)


def test_matches_reads_the_wall_clock_minute() -> None:
    cron = parse_cron("30 9 * * MON")
    assert cron.matches(utc(2026, 11, 30, 9, 30, 59))
    assert not cron.matches(utc(2026, 11, 30, 9, 31))
    assert not cron.matches(utc(2026, 12, 1, 9, 30))


# --------------------------------------------------------------------------- daylight saving


def toy(*args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=TOY, fold=fold)  # type: ignore[misc]  # year, month, ...


def test_a_tick_skipped_by_the_spring_jump_fires_at_the_jump() -> None:
    cron = parse_cron("30 2 * * *")
    tick = cron.next_after(toy(2026, 3, 29, 1, 0))
    assert tick.astimezone(UTC) == utc(2026, 3, 29, 1, 0)  # the instant of the change
    assert (tick.hour, tick.minute, tick.utcoffset()) == (3, 0, 2 * HOUR)
    assert cron.next_after(tick) == toy(2026, 3, 30, 2, 30)


def test_several_skipped_ticks_collapse_into_one() -> None:
    cron = parse_cron("*/20 * * * *")
    first = cron.next_after(toy(2026, 3, 29, 1, 50))
    second = cron.next_after(first)
    assert first.astimezone(UTC) == utc(2026, 3, 29, 1, 0)  # 02:00, 02:20, 02:40, 03:00
    assert second.astimezone(UTC) == utc(2026, 3, 29, 1, 20)  # 03:20 summer time


def test_a_repeated_wall_time_fires_once_at_its_first_occurrence() -> None:
    cron = parse_cron("30 2 * * *")
    tick = cron.next_after(toy(2026, 10, 25, 0, 0))
    assert tick.astimezone(UTC) == utc(2026, 10, 25, 0, 30)  # 02:30 summer time
    assert cron.next_after(tick) == toy(2026, 10, 26, 2, 30)
    second_pass = toy(2026, 10, 25, 2, 10, fold=1)
    assert cron.next_after(second_pass) == toy(2026, 10, 26, 2, 30)


def test_frequent_ticks_skip_the_second_pass_of_a_repeated_hour() -> None:
    cron = parse_cron("*/30 * * * *")
    ticks = [toy(2026, 10, 25, 1, 50)]
    for _ in range(4):
        ticks.append(cron.next_after(ticks[-1]))
    assert [t.astimezone(UTC) for t in ticks[1:]] == [
        utc(2026, 10, 25, 0, 0),  # 02:00 summer
        utc(2026, 10, 25, 0, 30),  # 02:30 summer
        utc(2026, 10, 25, 2, 0),  # 03:00 winter: the second 02:00-03:00 is not repeated
        utc(2026, 10, 25, 2, 30),
    ]


def test_last_at_or_before_agrees_with_next_after_across_the_jumps() -> None:
    cron = parse_cron("30 2 * * *")
    assert cron.last_at_or_before(toy(2026, 3, 29, 4, 0)) == cron.next_after(toy(2026, 3, 29, 1, 0))
    repeated = cron.last_at_or_before(toy(2026, 10, 25, 2, 40, fold=1))
    assert repeated.astimezone(UTC) == utc(2026, 10, 25, 0, 30)


def test_during_the_second_pass_the_first_pass_ticks_count_as_past() -> None:
    cron = parse_cron("59 * * * *")
    second_pass = toy(2026, 10, 25, 2, 54, fold=1)  # 01:54 UTC
    last = cron.last_at_or_before(second_pass)
    assert last.astimezone(UTC) == utc(2026, 10, 25, 0, 59)  # 02:59 summer time
    assert cron.next_after(second_pass).astimezone(UTC) == utc(2026, 10, 25, 2, 59)


def test_the_day_after_a_fall_back_today_s_later_ticks_are_not_yet_past() -> None:
    cron = parse_cron("30 10 * * *")
    assert cron.last_at_or_before(toy(2026, 10, 25, 10, 0)) == toy(2026, 10, 24, 10, 30)
    assert cron.last_at_or_before(toy(2026, 10, 25, 10, 30)) == toy(2026, 10, 25, 10, 30)


def test_zoneinfo_spring_forward_in_new_york() -> None:
    york = zone("America/New_York")
    cron = parse_cron("30 2 * * *")
    tick = cron.next_after(datetime(2026, 3, 8, 0, 0, tzinfo=york))
    assert tick.astimezone(UTC) == utc(2026, 3, 8, 7, 0)  # 03:00 EDT
    assert cron.next_after(tick) == datetime(2026, 3, 9, 2, 30, tzinfo=york)


def test_zoneinfo_fall_back_in_new_york() -> None:
    york = zone("America/New_York")
    cron = parse_cron("30 1 * * *")
    tick = cron.next_after(datetime(2026, 11, 1, 0, 0, tzinfo=york))
    assert tick.astimezone(UTC) == utc(2026, 11, 1, 5, 30)  # 01:30 EDT, the first one
    assert cron.next_after(tick).astimezone(UTC) == utc(2026, 11, 2, 6, 30)


def test_zoneinfo_half_hour_change_on_lord_howe_island() -> None:
    howe = zone("Australia/Lord_Howe")  # clocks go from 02:00 to 02:30 in October
    tick = parse_cron("15 2 * * *").next_after(datetime(2026, 10, 4, 0, 0, tzinfo=howe))
    assert (tick.day, tick.hour, tick.minute) == (4, 2, 30)


def test_zoneinfo_a_whole_skipped_day_in_samoa() -> None:
    apia = zone("Pacific/Apia")  # 2011-12-30 did not happen there
    tick = parse_cron("0 12 * * *").next_after(datetime(2011, 12, 29, 13, 0, tzinfo=apia))
    assert (tick.year, tick.month, tick.day, tick.hour) == (2011, 12, 31, 0)


# --------------------------------------------------------------------------- properties


def _fires(line: str) -> bool:
    try:
        parse_cron(line)
    except ValueError:
        return False
    return True


_minute_field = st.sampled_from(["*", "*/7", "0", "15,45", "0-10/5", "59"])
_hour_field = st.sampled_from(["*", "*/5", "2", "1-3", "9-17", "23"])
_dom_field = st.sampled_from(["*", "1", "13", "29", "31", "1-7", "*/10"])
_month_field = st.sampled_from(["*", "2", "FEB,MAR", "*/4", "10-12"])
_dow_field = st.sampled_from(["*", "0", "MON-FRI", "6,7", "*/3"])
_lines = st.builds(
    lambda *parts: " ".join(parts), _minute_field, _hour_field, _dom_field, _month_field, _dow_field
).filter(_fires)
_moments = st.datetimes(
    min_value=datetime(1990, 1, 1),  # noqa: DTZ001 - hypothesis bounds are naive
    max_value=datetime(2090, 1, 1),  # noqa: DTZ001 - hypothesis bounds are naive
)


@settings(max_examples=300, deadline=None)
@given(_lines, _moments)
def test_next_after_is_strictly_later_matches_and_skips_no_tick_in_utc(
    line: str, naive: datetime
) -> None:
    cron: Cron = parse_cron(line)
    moment = naive.replace(tzinfo=UTC)
    tick = cron.next_after(moment)
    assert tick > moment
    assert cron.matches(tick)
    assert (tick.second, tick.microsecond) == (0, 0)
    assert cron.last_at_or_before(tick - timedelta(microseconds=1)) <= moment
    assert cron.last_at_or_before(tick) == tick


@settings(max_examples=300, deadline=None)
@given(_lines, _moments)
def test_last_at_or_before_is_not_later_and_is_the_latest_in_utc(
    line: str, naive: datetime
) -> None:
    cron = parse_cron(line)
    moment = naive.replace(tzinfo=UTC)
    tick = cron.last_at_or_before(moment)
    assert tick <= moment
    assert cron.matches(tick)
    assert cron.next_after(tick) > moment


@settings(max_examples=200, deadline=None)
@given(
    _lines,
    st.datetimes(
        min_value=datetime(2026, 3, 27),  # noqa: DTZ001 - hypothesis bounds are naive
        max_value=datetime(2026, 10, 28),  # noqa: DTZ001 - hypothesis bounds are naive
    ),
    st.sampled_from([0, 1]),
)
def test_ticks_in_a_zone_with_daylight_saving_still_move_forward(
    line: str, naive: datetime, fold: int
) -> None:
    cron = parse_cron(line)
    moment = naive.replace(tzinfo=TOY, fold=fold)
    tick = cron.next_after(moment)
    assert tick.astimezone(UTC) > moment.astimezone(UTC)
    # step back in absolute time: wall-clock arithmetic could land in the skipped hour
    just_before = (tick.astimezone(UTC) - timedelta(microseconds=1)).astimezone(TOY)
    before = cron.last_at_or_before(just_before)
    assert before.astimezone(UTC) <= moment.astimezone(UTC)
    assert cron.last_at_or_before(tick).astimezone(UTC) == tick.astimezone(UTC)
    last = cron.last_at_or_before(moment)
    assert last.astimezone(UTC) <= moment.astimezone(UTC)
    assert cron.next_after(last).astimezone(UTC) > moment.astimezone(UTC)


@settings(max_examples=200, deadline=None)
@given(
    _lines,
    st.datetimes(
        min_value=datetime(2025, 1, 1),  # noqa: DTZ001 - hypothesis bounds are naive
        max_value=datetime(2027, 1, 1),  # noqa: DTZ001 - hypothesis bounds are naive
    ),
    st.sampled_from(["America/New_York", "Australia/Lord_Howe", "Europe/Berlin"]),
)
def test_ticks_in_real_zones_move_forward_and_skip_none(
    line: str, naive: datetime, name: str
) -> None:
    cron, place = parse_cron(line), zone(name)
    moment = naive.replace(tzinfo=UTC).astimezone(place)
    tick = cron.next_after(moment)
    assert tick.astimezone(UTC) > moment.astimezone(UTC)
    just_before = (tick.astimezone(UTC) - timedelta(microseconds=1)).astimezone(place)
    assert cron.last_at_or_before(just_before).astimezone(UTC) <= moment.astimezone(UTC)
