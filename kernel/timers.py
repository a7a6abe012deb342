"""Time passing: timers fire, lapsed leases expire, schedules tick.

Each is an event on its matter, so that a turn runs for it like for any other event.
A schedule (a rule's ``every``) is due when its cron line has ticked, in the rules' time
zone, since the last tick recorded (``Meta.ticks``); the first time a schedule is seen
only a tick of the last minute counts, so a new rule does not replay its history, and
after a clock jump only the latest missed tick fires. A schedule first seen later than
that minute records its latest tick as seen, without firing it: the next tick then fires
whenever it is seen (a scheduled CI run starts minutes late; every one was a first sight,
and such a rule never fired). A Tick's decision wakes the shell
again at the next timer, lease or schedule instant it knows of.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from kernel import facts as f
from kernel.context import Context
from kernel.cron import Cron, parse_cron
from kernel.durations import iso
from kernel.inputs import AgentOutcome, Reply, ScheduleDue, Tick
from kernel.model import Event, Rule, Rules
from kernel.routing import matter_of, session_of
from kernel.turns import failed

__all__ = ["due_schedules", "schedule_due", "tick"]

FIRST_SIGHT = timedelta(minutes=1)  # a schedule seen for the first time: ticks this recent


def tick(ctx: Context, inp: Tick) -> Reply:
    st = ctx.state
    fired = 0
    for tm in sorted(st.timers.values(), key=lambda x: (x.due, x.id)):
        if tm.fired or tm.due > ctx.at:
            continue
        ctx.emit(f.TimerFired(timer=tm.id, at=ctx.at))
        m = st.matters.get(tm.matter)
        ctx.record_event(
            Event(
                source="timer",
                id=tm.id,
                type="timer.fired",
                subject=m.subject if m else tm.matter,
                summary=tm.why,
                details={"timer": tm.id, "why": tm.why, "due": tm.due},
                hops=m.hops if m else tm.hops,
                chain=tm.chain if tm.chain is not None else m.chain if m else None,
                matter=tm.matter,
            )
        )
        fired += 1
    expired = 0
    for t in sorted(st.turns.values(), key=lambda x: x.id):
        if t.state != "running" or not t.lease_until or t.lease_until > ctx.at:
            continue
        m = st.matters[t.matter]
        rule = ctx.rules.rule(t.rule) or Rule(name=t.rule, agent=t.agent)
        failed(
            ctx,
            t,
            m,
            rule,
            AgentOutcome(
                started=True,
                ok=False,
                error=f"lease of worker {t.worker!r} expired",
                backoff=False,  # the lease was the wait
            ),
            outcome="lease_expired",
        )
        expired += 1
    schedules = 0
    if inp.local_now is not None:
        if inp.local_now != ctx.now:
            raise ValueError("Tick.local_now must be the decision's now")  # a bug in the caller
        for rule, at in due_schedules(ctx.rules, st.meta.ticks, inp.local_now):
            _schedule(ctx, rule, at)
            schedules += 1
        for rule, at in _unseen_schedules(ctx.rules, st.meta.ticks, inp.local_now):
            ctx.emit(f.ScheduleTicked(rule=rule.name, at=at))  # seen, not fired
        for rule in ctx.rules.rules:
            if rule.every:
                ctx.wake(iso(_cron(rule.every).next_after(inp.local_now)))
    for tm in st.timers.values():  # what is still to come, among what was loaded
        if not tm.fired:
            ctx.wake(tm.due)
    for t in st.turns.values():
        if t.state == "running" and t.lease_until:
            ctx.wake(t.lease_until)
    data = {"timers_fired": fired, "leases_expired": expired, "schedules": schedules}
    return Reply(ok=True, code="ticked", data=data)


def schedule_due(ctx: Context, inp: ScheduleDue) -> Reply:
    rule = ctx.rules.rule(inp.rule)
    if rule is None:
        return Reply(ok=False, code="unknown", message=f"no rule {inp.rule!r}")
    last = ctx.state.meta.ticks.get(rule.name)
    if last is not None and last >= inp.at:
        return Reply(ok=True, code="duplicate", message="already ticked")
    fact = _schedule(ctx, rule, inp.at)
    return Reply(ok=True, code="recorded", data={"seq": fact.seq})


def due_schedules(
    rules: Rules, ticks: Mapping[str, str], local_now: datetime
) -> list[tuple[Rule, str]]:
    """The schedules due at ``local_now`` (aware, in the rules' time zone), each with the
    instant (iso) of its latest tick; ``ticks`` are the last ticks recorded, by rule."""
    due: list[tuple[Rule, str]] = []
    for rule in rules.rules:
        if not rule.every:
            continue
        latest = _cron(rule.every).last_at_or_before(local_now)
        at = iso(latest)
        last = ticks.get(rule.name)
        if last is None:
            # Compare instants in UTC: datetimes of one zone compare by wall clock.
            if latest.astimezone(UTC) < local_now.astimezone(UTC) - FIRST_SIGHT:
                continue
        elif at <= last:
            continue
        due.append((rule, at))
    return due


def _unseen_schedules(
    rules: Rules, ticks: Mapping[str, str], local_now: datetime
) -> list[tuple[Rule, str]]:
    """Schedules never ticked whose latest tick is older than :data:`FIRST_SIGHT` (they
    are not due), each with that tick's instant (iso): their starting point."""
    out: list[tuple[Rule, str]] = []
    for rule in rules.rules:
        if rule.every and rule.name not in ticks:
            latest = _cron(rule.every).last_at_or_before(local_now)
            if latest.astimezone(UTC) < local_now.astimezone(UTC) - FIRST_SIGHT:
                out.append((rule, iso(latest)))
    return out


@functools.lru_cache(maxsize=64)
def _cron(line: str) -> Cron:
    return parse_cron(line)


def _schedule(ctx: Context, rule: Rule, at: str) -> f.EventRecorded:
    mid = matter_of(rule, rule.name)
    create = None
    if mid not in ctx.state.matters:
        create = (mid, rule.name, rule.name, session_of(mid))
    ctx.emit(f.ScheduleTicked(rule=rule.name, at=at))
    return ctx.record_event(
        Event(
            source="schedule",
            id=f"{rule.name}@{at}",
            type="schedule.tick",
            subject=rule.name,
            details={"rule": rule.name, "at": at},
            matter=mid,
        ),
        create=create,
    )
