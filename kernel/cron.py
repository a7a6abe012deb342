"""Five-field cron lines, and the next (or last) tick in a time zone's wall clock.

A line is ``minute hour day-of-month month day-of-week`` with ``*``, lists (``1,15``),
ranges (``1-5``), steps (``*/5``, ``0-30/10``, and ``5/15`` meaning ``5-max/15``), month
names ``JAN``-``DEC`` and day names ``SUN``-``SAT`` (case-insensitive; 0 and 7 are both
Sunday), or one of ``@hourly @daily @midnight @weekly @monthly @yearly @annually``.

Day rule, as in the classic cron: when both day fields are restricted (neither starts
with ``*``) a day matches if *either* matches; otherwise both must match (so
``0 9 * * 1-5`` is weekdays and ``0 9 13 * 5`` is every 13th and every Friday).

Ticks are wall-clock times in the tzinfo of the datetime given (the shell passes an
aware datetime in the rules' time zone). Around daylight-saving changes:

- a wall time skipped by a jump forward (02:30 on a spring-forward night) fires at the
  instant of the jump (03:00 new time); several skipped ticks collapse into that one;
- a wall time that happens twice (01:30 on a fall-back night) fires once, at its first
  occurrence (``fold=0``).

The search walks the calendar field by field (months, then days, hours, minutes), never
minute by minute over long spans.

Why not ``croniter``: compared on the same lines, it fires a wall time that a fall-back
night repeats twice (``30 2 * * *`` in Europe/Berlin on 2026-10-25: at 02:30+02:00 and
at 02:30+01:00), accepts a line that can never fire (``0 0 31 2 *``) and fails only
when asked for its next tick, and was about five times slower here; it would also
bring ``python-dateutil`` into the pure kernel.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import MAXYEAR, MINYEAR, UTC, datetime, timedelta, tzinfo

__all__ = ["Cron", "parse_cron"]

_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_MONTH_NAMES = {name: index + 1 for index, name in enumerate(_MONTHS)}
_DAY_NAMES = {name: index for index, name in enumerate(_DAYS)}
_NUMBER = re.compile(r"[0-9]{1,2}")
_ONE_MINUTE = timedelta(minutes=1)
_SEARCH_YEARS = 401  # the Gregorian calendar repeats every 400 years
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February at most


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int] | None


_FIELDS = (
    _Field("minute", 0, 59, None),
    _Field("hour", 0, 23, None),
    _Field("day-of-month", 1, 31, None),
    _Field("month", 1, 12, _MONTH_NAMES),
    _Field("day-of-week", 0, 7, _DAY_NAMES),
)


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed cron line. Build it with :func:`parse_cron`."""

    line: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]  # days of the month, 1-31
    months: tuple[int, ...]  # 1-12
    weekdays: tuple[int, ...]  # 0 = Sunday ... 6 = Saturday
    either_day: bool  # both day fields restricted: a day matches if either field does

    def matches(self, moment: datetime) -> bool:
        """Whether the wall-clock minute of ``moment`` is a tick (seconds are ignored)."""
        return (
            moment.minute in self.minutes
            and moment.hour in self.hours
            and moment.month in self.months
            and self._day_ok(moment)
        )

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment``, in ``moment``'s tzinfo.

        ``moment`` must be aware. See the module docstring for daylight-saving changes.
        Raises :class:`ValueError` at the end of the calendar (year 9999).
        """
        zone = _zone(moment)
        try:
            wall = _wall(moment, zone).replace(second=0, microsecond=0) + _ONE_MINUTE
            instant = moment.astimezone(UTC)
            while True:
                wall = self._first_at_or_after(wall)
                tick = _resolve(wall, zone)
                if tick.astimezone(UTC) > instant:
                    return tick
                wall += _ONE_MINUTE  # a second pass through a repeated hour: already fired
        except OverflowError:
            raise ValueError(
                f"cron {self.line!r}: no tick after {moment.isoformat()} (the calendar ends)"
            ) from None

    def last_at_or_before(self, moment: datetime) -> datetime:
        """The latest tick at or before ``moment``, in ``moment``'s tzinfo.

        For "fire once for the most recent missed tick" after the clock jumped ahead.
        ``moment`` must be aware. Raises :class:`ValueError` at the start of the calendar.
        """
        zone = _zone(moment)
        try:
            instant = moment.astimezone(UTC)
            wall = _wall(moment, zone).replace(second=0, microsecond=0)
            # After a fall-back, wall times later than now already happened (first pass):
            # start that much later and let the check below skip those still to come.
            wall += max(
                timedelta(0), _offset(instant - timedelta(days=1), zone) - _offset(instant, zone)
            )
            while True:
                wall = self._last_at_or_before(wall)
                tick = _resolve(wall, zone)
                if tick.astimezone(UTC) <= instant:
                    return tick
                wall -= _ONE_MINUTE
        except OverflowError:
            raise ValueError(
                f"cron {self.line!r}: no tick at or before {moment.isoformat()} "
                "(the calendar starts at year 1)"
            ) from None

    # ----------------------------------------------------------------- wall-clock search

    def _day_ok(self, day: datetime) -> bool:
        in_month = day.day in self.days
        in_week = (day.weekday() + 1) % 7 in self.weekdays  # Python: Monday = 0
        return (in_month or in_week) if self.either_day else (in_month and in_week)

    def _first_at_or_after(self, start: datetime) -> datetime:
        """Smallest matching naive wall minute >= ``start`` (``start`` minute-aligned)."""
        last_year = min(start.year + _SEARCH_YEARS, MAXYEAR)
        for year in range(start.year, last_year + 1):
            for month in self.months:
                if (year, month) < (start.year, start.month):
                    continue
                this_month = (year, month) == (start.year, start.month)
                first = start.day if this_month else 1
                for day in range(first, _days_in(year, month) + 1):
                    date = start.replace(year=year, month=month, day=day, hour=0, minute=0)
                    if not self._day_ok(date):
                        continue
                    today = this_month and day == start.day
                    for hour in self.hours:
                        if today and hour < start.hour:
                            continue
                        floor = start.minute if today and hour == start.hour else 0
                        index = bisect_left(self.minutes, floor)
                        if index < len(self.minutes):
                            return date.replace(hour=hour, minute=self.minutes[index])
        raise ValueError(
            f"cron {self.line!r} has no tick after {start.isoformat(timespec='minutes')}"
        )

    def _last_at_or_before(self, end: datetime) -> datetime:
        """Largest matching naive wall minute <= ``end`` (``end`` minute-aligned)."""
        first_year = max(end.year - _SEARCH_YEARS, MINYEAR)
        for year in range(end.year, first_year - 1, -1):
            for month in reversed(self.months):
                if (year, month) > (end.year, end.month):
                    continue
                this_month = (year, month) == (end.year, end.month)
                last = end.day if this_month else _days_in(year, month)
                for day in range(last, 0, -1):
                    date = end.replace(year=year, month=month, day=day, hour=0, minute=0)
                    if not self._day_ok(date):
                        continue
                    today = this_month and day == end.day
                    for hour in reversed(self.hours):
                        if today and hour > end.hour:
                            continue
                        ceiling = end.minute if today and hour == end.hour else 59
                        index = bisect_right(self.minutes, ceiling)
                        if index > 0:
                            return date.replace(hour=hour, minute=self.minutes[index - 1])
        raise ValueError(
            f"cron {self.line!r} has no tick before {end.isoformat(timespec='minutes')}"
        )


def parse_cron(line: str) -> Cron:
    """Parse a five-field cron line or an ``@`` macro; :class:`ValueError` says what is wrong."""
    if not isinstance(line, str):
        raise ValueError(f"a cron line must be a string, got {type(line).__name__}")
    text = line.strip()
    if not text:
        raise ValueError("empty cron line: expected five fields, e.g. '0 9 * * 1-5'")
    if text.startswith("@"):
        if text.lower() not in _MACROS:
            known = " ".join(_MACROS)
            raise ValueError(f"bad cron line {line!r}: unknown macro (known: {known})")
        text = _MACROS[text.lower()]
    parts = text.split()
    if len(parts) != len(_FIELDS):
        hint = " (a seconds field is not supported)" if len(parts) == 6 else ""
        raise ValueError(
            f"bad cron line {line!r}: expected 5 fields (minute hour day-of-month month "
            f"day-of-week), got {len(parts)}{hint}"
        )
    values = []
    for spec, part in zip(_FIELDS, parts, strict=True):
        try:
            values.append(_parse_field(part, spec))
        except ValueError as exc:
            raise ValueError(f"bad cron line {line!r}: {spec.name} {part!r}: {exc}") from None
    minutes, hours, days, months, weekdays = values
    weekdays = tuple(sorted({day % 7 for day in weekdays}))
    either_day = not parts[2].startswith("*") and not parts[4].startswith("*")
    if not either_day and not any(day <= _DAYS_IN_MONTH[m - 1] for m in months for day in days):
        raise ValueError(
            f"bad cron line {line!r}: day-of-month {parts[2]!r} never occurs in "
            f"month {parts[3]!r}, so it would never fire"
        )
    return Cron(
        line=line,
        minutes=minutes,
        hours=hours,
        days=days,
        months=months,
        weekdays=weekdays,
        either_day=either_day,
    )


def _parse_field(text: str, spec: _Field) -> tuple[int, ...]:
    chosen: set[int] = set()
    for item in text.split(","):
        if not item:
            raise ValueError("empty item in a list")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not _NUMBER.fullmatch(step_text) or int(step_text) == 0:
                raise ValueError(f"step {step_text!r} must be a number from 1")
            step = int(step_text)
        if base == "*":
            low, high = spec.low, spec.high
        elif "-" in base:
            first, _, last = base.partition("-")
            low, high = _value(first, spec), _value(last, spec)
            if low > high:
                raise ValueError(
                    f"range {base!r} goes backwards: write {last}-{first} the other way"
                )
        else:
            low = _value(base, spec)
            high = spec.high if slash else low
        chosen.update(range(low, high + 1, step))
    return tuple(sorted(chosen))


def _value(text: str, spec: _Field) -> int:
    if spec.names is not None and text.upper() in spec.names:
        return spec.names[text.upper()]
    if not _NUMBER.fullmatch(text):
        names = f" or a name like {next(iter(spec.names))}" if spec.names else ""
        raise ValueError(f"{text!r} is not a number{names}")
    value = int(text)
    if not spec.low <= value <= spec.high:
        raise ValueError(f"{value} is out of range {spec.low}-{spec.high}")
    return value


def _days_in(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return _DAYS_IN_MONTH[month - 1]


def _zone(moment: datetime) -> tzinfo:
    zone = moment.tzinfo
    if zone is None or moment.utcoffset() is None:
        raise ValueError("cron needs an aware datetime (with a tzinfo) to know the wall clock")
    return zone


def _wall(moment: datetime, zone: tzinfo) -> datetime:
    """The naive wall-clock time of ``moment`` in ``zone``, normalised through UTC."""
    return moment.astimezone(UTC).astimezone(zone).replace(tzinfo=None)


def _offset(instant: datetime, zone: tzinfo) -> timedelta:
    return instant.astimezone(zone).utcoffset() or timedelta(0)


def _resolve(wall: datetime, zone: tzinfo) -> datetime:
    """The instant (aware, in ``zone``) at which the naive ``wall`` time happens.

    An existing or repeated wall time gives its first occurrence (``fold=0``, as PEP 495
    defines it; a tzinfo that ignores ``fold`` decides itself); a wall time skipped by
    a jump forward gives the instant of the jump (the first instant whose wall time is
    later than or equal to ``wall``).
    """
    guess = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if guess.astimezone(zone).replace(tzinfo=None) == wall:
        return guess.astimezone(zone)
    # Skipped wall time: search the two days around it for the jump, to the second.
    low, high = guess - timedelta(days=2), guess + timedelta(days=2)
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) // 2
        middle = middle.replace(microsecond=0)
        if middle.astimezone(zone).replace(tzinfo=None) >= wall:
            high = middle
        else:
            low = middle
    return high.astimezone(zone)
