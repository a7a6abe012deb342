"""Time passing in the kernel: schedules decided from a local now, and when to wake next."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from kernel import inputs as k
from kernel.durations import iso
from kernel.model import Rule
from kernel.timers import due_schedules
from tests.kernel.helpers import T0, Kernel, ev, receipt, rule, rules_of

PLUS8 = timezone(timedelta(hours=8))


def _every(line: str, name: str = "morning") -> Rule:
    return Rule(name=name, agent="a", every=line)


def _tick(kn: Kernel, zone: timezone = UTC) -> k.Decision:
    return kn.step(k.Tick(local_now=kn.now.astimezone(zone)))


def test_a_schedule_fires_once_per_tick_and_once_after_a_clock_jump() -> None:
    kn = Kernel(rules_of(_every("*/5 * * * *")))
    fired = []
    for minutes in (0, 3, 5, 5, 180):
        kn.now = T0 + timedelta(minutes=minutes)
        fired.append(_tick(kn).reply.data["schedules"])
    assert fired == [1, 0, 1, 0, 1]
    ids = [e.event.id for e in kn.state.events.values()]
    assert ids == [
        "morning@2026-11-30T09:00:00.000000+00:00",
        "morning@2026-11-30T09:05:00.000000+00:00",
        "morning@2026-11-30T12:00:00.000000+00:00",
    ]
    assert kn.state.matters["morning"].waiting
    assert kn.replayed().records() == kn.state.records()


def test_a_new_schedule_does_not_replay_its_history() -> None:
    rules = rules_of(_every("0 9 * * *"))
    assert due_schedules(rules, {}, T0 + timedelta(seconds=59)) == [(rules.rules[0], iso(T0))]
    assert due_schedules(rules, {}, T0 + timedelta(minutes=2)) == []
    assert due_schedules(rules, {"morning": iso(T0)}, T0 + timedelta(days=1)) != []


def test_a_schedule_first_seen_late_fires_its_next_tick_whenever_seen() -> None:
    """Scheduled CI runs start minutes after their slot: each was a first sight, later
    than a minute, and a rule every 15 minutes never fired. The first sight now records
    the latest tick as seen (not fired); the next fires however late it is seen."""
    kn = Kernel(rules_of(_every("*/15 * * * *")))
    fired = []
    for minutes in (4, 19, 33, 48.5, 64):
        kn.now = T0 + timedelta(minutes=minutes)
        fired.append(_tick(kn).reply.data["schedules"])
    assert fired == [0, 1, 1, 1, 1]
    ids = [e.event.id for e in kn.state.events.values()]
    assert ids == [
        f"morning@2026-11-30T{t}:00.000000+00:00" for t in ("09:15", "09:30", "09:45", "10:00")
    ]
    assert kn.state.meta.ticks["morning"] == "2026-11-30T10:00:00.000000+00:00"
    assert kn.replayed().records() == kn.state.records()


def test_schedules_follow_the_wall_clock_of_the_rules_time_zone() -> None:
    kn = Kernel(rules_of(_every("0 17 * * *")), now=T0)  # 09:00 UTC is 17:00 at +08:00
    assert _tick(kn).reply.data["schedules"] == 0
    assert _tick(kn, PLUS8).reply.data["schedules"] == 1
    (row,) = kn.state.events.values()
    assert row.event.details["at"] == iso(T0)


def test_without_a_local_now_no_schedule_is_looked_at() -> None:
    kn = Kernel(rules_of(_every("* * * * *")))
    d = kn.step(k.Tick())
    assert (d.reply.data["schedules"], d.facts, d.wake_at) == (0, (), None)


def test_local_now_must_be_the_decisions_now() -> None:
    kn = Kernel(rules_of(_every("* * * * *")))
    with pytest.raises(ValueError, match="local_now"):
        kn.step(k.Tick(local_now=T0 + timedelta(minutes=1)))


def test_a_tick_wakes_at_the_next_timer_lease_or_schedule_it_knows_of() -> None:
    kn = Kernel(rules_of(rule(timeout_s=60), _every("0 * * * *", "hourly")))
    kn.step(k.Ingest(event=ev("1")))
    t1 = kn.claim("r")  # lease 300 s
    assert t1
    assert _tick(kn).wake_at == T0 + timedelta(seconds=300)
    kn.finish(t1, receipt(json.dumps({"later": [{"in": "90s"}]})))
    assert _tick(kn).wake_at == T0 + timedelta(seconds=90)
    kn.advance(seconds=100)
    d = _tick(kn)
    assert d.reply.data["timers_fired"] == 1
    assert d.wake_at == datetime(2026, 11, 30, 10, 0, tzinfo=UTC)  # the next hourly tick


def test_a_decision_wakes_at_the_leases_and_timers_it_sets() -> None:
    kn = Kernel(rules_of(rule()))
    assert kn.step(k.Ingest(event=ev("1"))).wake_at is None
    d = kn.step(k.Claim(matter="r", worker="w", lease_s=120))
    assert d.wake_at == T0 + timedelta(seconds=120)
    d = kn.step(k.Heartbeat(turn="t1", fence=1, lease_s=600))
    assert d.wake_at == T0 + timedelta(seconds=600)
    d = kn.finish("t1", receipt(json.dumps({"later": [{"in": "30m"}, {"in": "5m"}]})))
    assert d.wake_at == T0 + timedelta(minutes=5)
