"""Time passing: timers fire, lapsed leases expire, schedules tick.

Each is an event on its matter, so that a turn runs for it like for any other event.
"""

from __future__ import annotations

from kernel import facts as f
from kernel.context import Context
from kernel.inputs import AgentOutcome, Reply, ScheduleDue, Tick
from kernel.model import Event, Rule
from kernel.routing import matter_of, session_of
from kernel.turns import failed

__all__ = ["schedule_due", "tick"]


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
            AgentOutcome(started=True, ok=False, error=f"lease of worker {t.worker!r} expired"),
            outcome="lease_expired",
        )
        expired += 1
    return Reply(ok=True, code="ticked", data={"timers_fired": fired, "leases_expired": expired})


def schedule_due(ctx: Context, inp: ScheduleDue) -> Reply:
    rule = ctx.rules.rule(inp.rule)
    if rule is None:
        return Reply(ok=False, code="unknown", message=f"no rule {inp.rule!r}")
    last = ctx.state.meta.ticks.get(rule.name)
    if last is not None and last >= inp.at:
        return Reply(ok=True, code="duplicate", message="already ticked")
    mid = matter_of(rule, rule.name)
    create = None
    if mid not in ctx.state.matters:
        create = (mid, rule.name, rule.name, session_of(mid))
    ctx.emit(f.ScheduleTicked(rule=rule.name, at=inp.at))
    fact = ctx.record_event(
        Event(
            source="schedule",
            id=f"{rule.name}@{inp.at}",
            type="schedule.tick",
            subject=rule.name,
            details={"rule": rule.name, "at": inp.at},
            matter=mid,
        ),
        create=create,
    )
    return Reply(ok=True, code="recorded", data={"seq": fact.seq})
