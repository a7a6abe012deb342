"""Turns: a worker claims a matter's waiting events, the agent runs, its receipt is applied.

A claim takes every waiting event of the matter (or the batch a failed turn left to run
again, or nothing for a repair turn). A finished turn's receipt is parsed against its
rule and applied at once: cards asked, notices posted, timers armed, events emitted
(cut at ``max_hops``), write-backs allowed, sent for approval or refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from kernel import facts as f
from kernel.codec import to_data
from kernel.context import Context
from kernel.durations import iso, parse_instant
from kernel.inputs import AgentOutcome, Claim, Finish, Heartbeat, PerformAction, Reply, SendCard
from kernel.model import HOP_LIMIT_KEY, Event, Receipt, ReceiptError, Rule
from kernel.receipt import agent_may_resolve, parse_receipt
from kernel.records import Matter, Turn
from kernel.routing import route

__all__ = ["claim", "failed", "finish", "heartbeat", "retry_wait_s"]

RETRY_WAIT_MAX_S = 3600  # a retry waits at most this long, however many failed before it

# What brings the work back after a failure that is not retried: the event itself is not
# run again (emitting it again is a duplicate, recorded once), the matter is not stuck.
_NEXT_EVENT = (
    "The events of this turn are not run again; the next event about the same subject "
    "(a comment, a new --id for 'autoloop emit') starts a new turn."
)


def retry_wait_s(rule: Rule, failures: int) -> int:
    """How long the retry after a failed turn waits, ``failures`` having failed in a row
    before it: the rule's ``retry_backoff_s``, doubled for each of them (an agent that
    failed on a rate limit or an outage was run again at once, and failed again)."""
    if rule.retry_backoff_s <= 0:
        return 0
    return int(min(RETRY_WAIT_MAX_S, rule.retry_backoff_s * 2 ** min(failures, 16)))


def claim(ctx: Context, inp: Claim) -> Reply:
    st = ctx.state
    m = st.matters.get(inp.matter)
    if m is None:
        return Reply(ok=False, code="unknown", message=f"no matter {inp.matter!r}")
    if m.running is not None:
        return Reply(ok=False, code="busy", message=f"turn {m.running} is running")
    if not m.runnable:
        return Reply(ok=False, code="idle", message="nothing to run")
    if m.retry_after > ctx.at:
        return Reply(
            ok=False,
            code="later",
            message=f"a failed turn's retry waits until {m.retry_after}",
            data={"at": m.retry_after},
        )
    rule = ctx.rules.rule(m.rule)
    if rule is None:
        return Reply(ok=False, code="no_rule", message=f"rule {m.rule!r} is not in rules.json")
    batch: tuple[int, ...]
    if m.repair:
        kind, batch = "repair", ()
    elif m.retry:
        kind, batch = "retry", (*m.retry, *st.pending_of(m.id))
    else:
        kind, batch = "normal", st.pending_of(m.id)
    hops = max((st.events[s].event.hops for s in batch if s in st.events), default=m.hops)
    # The chain: an event's own, shared among the matters it went to (two rules on one
    # type each took it whole, and the bound grew with every route at every hop); of a
    # batch, the largest (the turn takes them all at once: never more than their sum,
    # and a person's comment that came with a spent re-check starts a whole chain).
    chain = max(
        (
            ctx.rules.chain(row.event.chain) // max(1, len(row.routes))
            for s in batch
            if (row := st.events.get(s)) is not None
        ),
        default=ctx.rules.chain(m.chain),
    )
    n = st.meta.turns + 1
    turn = f"t{n}"
    ctx.emit(
        f.TurnStarted(
            turn=turn,
            matter=m.id,
            rule=rule.name,
            agent=rule.agent,
            worker=inp.worker,
            kind=kind,
            events=tuple(batch),
            hops=hops,
            session=m.session,
            resume=m.agent_session,
            rules_version=ctx.rules.version,
            fence=n,
            at=ctx.at,
            lease_until=iso(ctx.now + timedelta(seconds=inp.lease_s)),
            repair_of=m.repair if kind == "repair" else None,
            chain=chain,
        )
    )
    return Reply(ok=True, code="started", message=f"turn {turn} started", data={"turn": turn})


def heartbeat(ctx: Context, inp: Heartbeat) -> Reply:
    t = ctx.state.turns.get(inp.turn)
    if t is None or t.state != "running" or t.fence != inp.fence:
        return Reply(ok=False, code="refused", message="the claim is no longer held")
    ctx.emit(
        f.LeaseRenewed(
            turn=t.id, fence=t.fence, lease_until=iso(ctx.now + timedelta(seconds=inp.lease_s))
        )
    )
    return Reply(ok=True, code="renewed")


def finish(ctx: Context, inp: Finish) -> Reply:
    st = ctx.state
    t = st.turns.get(inp.turn)
    if t is None:
        return Reply(ok=False, code="unknown", message=f"no turn {inp.turn!r}")
    if t.state != "running" or t.fence != inp.fence:
        reason = "the turn already ended" if t.state != "running" else "a newer claim holds it"
        ctx.emit(f.ReceiptRefused(turn=t.id, fence=inp.fence, reason=reason, at=ctx.at))
        return Reply(ok=False, code="refused", message=f"receipt for {t.id} refused: {reason}")
    m = st.matters[t.matter]
    rule = ctx.rules.rule(t.rule) or Rule(name=t.rule, agent=t.agent)
    out = inp.outcome
    if not out.ok:
        return failed(ctx, t, m, rule, out)
    parsed = parse_receipt(out.final_message, rule=rule, now=ctx.now)
    base: dict[str, Any] = {
        "turn": t.id,
        "matter": m.id,
        "at": ctx.at,
        "agent_session": out.session,
        "cost_usd": out.cost_usd,
        "tokens": out.tokens,
    }
    if parsed is None:
        ctx.emit(f.TurnFinished(outcome="no_receipt", **base))
        if t.kind_ == "repair":  # asked for a receipt, it gave none: the first one is lost
            ctx.open_card(
                key=f"receipt/{t.id}",
                matter=m.id,
                kind="notice",
                title="The agent's receipt was malformed and not repaired",
                text=(
                    f"Turn {t.id} was asked to rewrite a malformed receipt and ended without "
                    "one. Nothing was applied."
                ),
                turn=t.id,
                hops=t.hops,
            )
        return Reply(ok=True, code="finished", message=f"{t.id} ended without a receipt")
    if isinstance(parsed, ReceiptError):
        error = f"malformed receipt: {parsed.message}"  # (the message names the field)
        if t.kind_ == "repair":
            ctx.emit(f.TurnFinished(outcome="malformed", error=error, **base))
            ctx.open_card(
                key=f"receipt/{t.id}",
                matter=m.id,
                kind="notice",
                title="The agent's receipt was malformed twice",
                text=f"Turn {t.id} could not repair its receipt ({error}). Nothing was applied.",
                turn=t.id,
                hops=t.hops,
            )
        else:
            ctx.emit(f.TurnFinished(outcome="malformed", error=error, repair=True, **base))
        return Reply(ok=True, code="finished", message=f"{t.id}: {error}")
    ctx.emit(f.TurnFinished(outcome="ok", receipt=to_data(parsed), **base))
    _apply_receipt(ctx, t, m, rule, parsed)
    return Reply(ok=True, code="finished", message=f"{t.id} finished")


def failed(
    ctx: Context, t: Turn, m: Matter, rule: Rule, out: AgentOutcome, *, outcome: str = ""
) -> Reply:
    outcome = outcome or ("timeout" if out.timed_out else "failed")
    retry = out.retry and m.failures < rule.max_retries
    wait = retry_wait_s(rule, m.failures) if out.backoff else 0
    ctx.emit(
        f.TurnFinished(
            turn=t.id,
            matter=m.id,
            outcome=outcome,
            at=ctx.at,
            agent_session=out.session if out.started else None,
            cost_usd=out.cost_usd,
            tokens=out.tokens,
            error=out.error,
            retry=retry,
            retry_at=iso(ctx.now + timedelta(seconds=wait)) if retry and wait else "",
            # Started then failed: retry in the same session. Never started: a fresh one.
            keep_session=out.started,
        )
    )
    if not out.retry:  # a retry now would fail the same way
        ctx.open_card(
            key=f"failed/{t.id}",
            matter=m.id,
            kind="notice",
            title=f"Agent {rule.agent!r} could not start",
            text=(
                f"Turn {t.id} of rule {rule.name!r}: {out.error or outcome}. Not retried: "
                f"install the program, or fix agents.{rule.agent} (or the rule's cwd) in "
                f"rules.json where the worker runs (see 'autoloop why {t.id}'). {_NEXT_EVENT}"
            ),
            turn=t.id,
            hops=t.hops,
        )
    elif not retry:
        ctx.open_card(
            key=f"failed/{t.id}",
            matter=m.id,
            kind="notice",
            title=(
                "Agent turn failed"
                if m.failures == 0
                else f"Agent turn failed {m.failures + 1} times"
            ),
            text=(
                f"Turn {t.id} of rule {rule.name!r} ended with: {out.error or outcome}. "
                f"No more retries. Check the agent {rule.agent!r} (run 'autoloop why {t.id}'). "
                f"{_NEXT_EVENT}"
            ),
            turn=t.id,
            hops=t.hops,
        )
    return Reply(ok=True, code="failed", message=f"{t.id} {outcome}: {out.error}")


def _apply_receipt(ctx: Context, t: Turn, m: Matter, rule: Rule, r: Receipt) -> None:
    st = ctx.state
    for key in r.resolve:
        for c in list(st.cards.values()):
            mine = c.matter == m.id and key in (c.key, c.id) and c.state in ("open", "decided")
            if mine and agent_may_resolve(c.key):  # the hub's own cards: the owner's to close
                ctx.emit(f.CardResolved(card=c.id, turn=t.id))
    for ask in r.ask:
        live = ctx.live_card(m.id, ask.key)
        if live is not None and live.kind_ == "ask":
            ctx.emit(
                f.CardUpdated(
                    card=live.id, title=ask.title, text=ask.text, options=ask.options, turn=t.id
                )
            )
            ctx.effects.append(SendCard(card=live.id))
        else:
            ctx.open_card(
                key=ask.key,
                matter=m.id,
                kind="ask",
                title=ask.title,
                text=ask.text,
                options=ask.options,
                turn=t.id,
                hops=t.hops,
            )
    for i, note in enumerate(r.notice):
        ctx.open_card(
            key=note.key or f"notice/{t.id}/{i}",
            matter=m.id,
            kind="notice",
            title=note.title,
            text=note.text,
            turn=t.id,
            hops=t.hops,
        )
    # The chain: a turn may arm as many re-checks and emit as many events as its chain
    # allows (the rules' max_chain_events for one started by an outside event); what is
    # left is shared out among them. So one outside event leads to at most
    # max_chain_events re-checks and emitted events in all, however the turns branch
    # (max_hops bounds only the depth: 20 events a receipt over 8 hops were 20^8 turns,
    # and a re-check that re-armed itself ran until a daily cap, if any, stopped it).
    left = ctx.rules.chain(t.chain)
    deep = t.hops + 1 > ctx.rules.max_hops  # its events are cut by the hop limit
    events = [
        Event(
            source="agent",
            id=f"{t.id}.{i}",
            type=spec.type,
            subject=spec.subject or m.subject,
            summary=spec.summary,
            details=dict(spec.details),
            hops=t.hops + 1,
        )
        for i, spec in enumerate(r.events)
    ]
    # only the events a rule takes count (one no rule takes, "triage.done" said for the
    # record, took a share that then went unused)
    taken = [not deep and bool(route(ctx.rules, ev)) for ev in events]
    wanted = len(r.later) + sum(taken)
    sent = min(wanted, left)
    share = (left - sent) // sent if sent else 0
    room = sent - min(len(r.later), sent)  # for events, after the re-checks
    for i, later in enumerate(r.later[:sent]):
        if later.in_seconds is not None:
            due = ctx.now + timedelta(seconds=later.in_seconds)
        else:
            due = parse_instant(later.at or ctx.at)
        ctx.emit(
            f.TimerArmed(
                timer=f"{t.id}.later{i}",
                matter=m.id,
                due=iso(due),
                why=later.why,
                hops=t.hops,
                turn=t.id,
                chain=share,
            )
        )
    for spec, bare, takes in zip(r.events, events, taken, strict=True):
        ev = replace(bare, chain=share)
        if takes and room <= 0:
            ctx.record_event(ev, reason=f"chain limit {ctx.rules.max_chain_events} reached")
        elif takes:
            room -= 1
            ctx.record_event(ev)
        elif deep:
            ctx.record_event(ev, reason=f"hop limit {ctx.rules.max_hops} reached")
            _cut(
                ctx, m, t,
                f"Turn {t.id} emitted {spec.type!r} at hop {ev.hops}, past max_hops "
                f"{ctx.rules.max_hops}. The event was recorded but not dispatched. "
                "Check the rules' emits for a loop.",
            )  # fmt: skip
        else:
            ctx.record_event(ev)
    if wanted > sent:
        _cut(
            ctx, m, t,
            f"Turn {t.id} asked for {wanted} re-check(s) and event(s); its chain allowed "
            f"{left} (one outside event leads to at most max_chain_events "
            f"{ctx.rules.max_chain_events} re-checks and emitted events in all). "
            f"{wanted - sent} were cut: re-checks not armed, events recorded but not "
            "dispatched. Check the rules' emits and the agent's re-checks for a loop.",
        )  # fmt: skip
    for i, act in enumerate(r.actions):
        aid = f"{t.id}.a{i}"
        params = dict(act.params)
        base: dict[str, Any] = {
            "action": aid,
            "matter": m.id,
            "turn": t.id,
            "do": act.do,
            "params": params,
        }
        if act.do in rule.allow:
            ctx.emit(f.ActionRequested(**base))
            ctx.effects.append(PerformAction(action=aid))
        elif act.do in rule.approve:
            card = ctx.next_card_id()
            ctx.emit(f.ActionRequested(**base, status="awaiting_approval", card=card))
            ctx.open_card(
                key=f"approve/{aid}",
                matter=m.id,
                kind="ask",
                title=f"Approve {act.do}?",
                text=f"Turn {t.id} asks the hub to perform {act.do} with {_brief(params)}.",
                options=("approve", "decline"),
                turn=t.id,
                hops=t.hops,
                action=aid,
            )
        else:
            error = f"{act.do} is in neither allow nor approve of rule {rule.name!r}"
            ctx.emit(f.ActionRequested(**base, status="refused", error=error))
            ctx.open_card(
                key=f"refused/{aid}",
                matter=m.id,
                kind="notice",
                title=f"Refused write-back {act.do}",
                text=f"{error}. Add it to the rule's allow or approve list to permit it.",
                turn=t.id,
                hops=t.hops,
            )


def _brief(params: Mapping[str, Any]) -> str:
    parts = [f"{k}={str(v)[:60]}" for k, v in sorted(params.items())]
    return ", ".join(parts)[:300] or "no parameters"


def _cut(ctx: Context, m: Matter, t: Turn, text: str) -> None:
    """Tell the owner, once a matter, that a chain of its turns was cut (the hop limit,
    the chain limit): the card no agent may close."""
    if ctx.live_card(m.id, HOP_LIMIT_KEY) is None:
        ctx.open_card(
            key=HOP_LIMIT_KEY,
            matter=m.id,
            kind="notice",
            title="A chain of agent turns was cut",
            text=text,
            turn=t.id,
            hops=t.hops,
        )
