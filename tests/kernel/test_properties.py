"""Properties of ``step`` alone, over generated sequences of inputs against a small rules set.

- determinism: the same state, input and now give the same decision, however the
  state's records were put in (step by step, replayed, or loaded in another order);
- a duplicate Ingest adds no fact and no effect, and changes no record;
- replaying every fact gives the state reached step by step;
- a Tick always wants to be woken later than its now; no event past the hop limit is
  dispatched.
"""

from __future__ import annotations

import json
from datetime import timedelta, timezone
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import inputs as k
from kernel.durations import iso
from kernel.facts import event_key
from kernel.model import AgentSpec, Event, Rule, Rules, Trigger
from kernel.records import State
from kernel.state import replay
from kernel.step import step
from tests.kernel.helpers import T0, Kernel

ZONE = timezone(timedelta(hours=-5))  # the rules' time zone: schedules follow its wall clock
MAX_HOPS = 3
RULES = Rules(
    version="props",
    timezone="Etc/GMT+5",
    max_hops=MAX_HOPS,
    agents={"bot": AgentSpec(name="bot", use="command", command=("true",))},
    rules=(
        Rule(
            name="triage",
            agent="bot",
            on=Trigger(type=("issue.*",)),
            parallel=True,
            emits=("triage.done", "issue.poke"),
            allow=("notes.add",),
            approve=("notes.drop",),
            max_retries=1,
        ),
        Rule(name="follow", agent="bot", on=Trigger(type=("triage.done",)), parallel=True),
        Rule(name="ops", agent="bot", on=Trigger(type=("ping",)), emits=("ping",)),
        Rule(name="nightly", agent="bot", every="0 2 * * *", emits=("ping",)),
    ),
)
TYPES = ("issue.opened", "issue.poke", "triage.done", "ping", "noise")
SUBJECTS = ("acme#1", "acme#2")
RECEIPTS = (
    "none",
    "ask",
    "notice",
    "later",
    "emit",
    "emit_far",
    "actions",
    "resolve",
    "malformed",
    "failed",
    "never_started",
    "timeout",
    "stale",
)

index = st.integers(min_value=0, max_value=30)
INGEST = st.tuples(
    st.just("ingest"),
    st.integers(0, 6),  # few ids: the same (source, id) comes back often
    st.sampled_from(TYPES),
    st.sampled_from(SUBJECTS),
    st.booleans(),
)
CLAIM = st.tuples(st.just("claim"), index, st.sampled_from((60, 300)))
FINISH = st.tuples(st.just("finish"), index, st.sampled_from(RECEIPTS))
ANSWER = st.tuples(st.just("answer"), index, st.integers(0, 3))
# Mostly a little time (leases are 60 or 300 s), now and then hours (timers, schedules).
TICK = st.tuples(st.just("tick"), st.sampled_from((0, 10, 45, 120, 240, 1800, 7200, 22 * 3600)))
MOVES = st.one_of(  # a strategy listed twice comes up twice as often
    INGEST,
    INGEST,
    CLAIM,
    CLAIM,
    FINISH,
    FINISH,
    FINISH,
    ANSWER,
    ANSWER,
    TICK,
    st.tuples(st.just("heartbeat"), index),
    st.tuples(st.just("clock_back"), st.integers(1, 3600)),
    st.tuples(st.just("deliver"), index),
    st.tuples(st.just("outbox"), index, st.sampled_from(("claim", "error", "ok", "fail"))),
    st.tuples(st.just("owner"), st.sampled_from(("budget", "lost-delivery"))),
    st.tuples(st.just("schedule"), st.integers(0, 1)),
)


def _pick(items: list[Any], i: int) -> Any:
    return items[i % len(items)] if items else None


def _receipt(kind: str, turn_rule: Rule, keys: list[str]) -> str:
    body: dict[str, Any]
    if kind == "none":
        return "nothing to add"
    if kind == "malformed":
        return "```autoloop\n{not json\n```"
    if kind == "ask":
        body = {"ask": [{"key": "colour", "title": "Pick", "options": ["red", "blue"]}]}
    elif kind == "notice":
        body = {"notice": [{"title": "FYI", "key": "fyi"}]}
    elif kind == "later":
        body = {"later": [{"in": "30m", "why": "re-check"}, {"at": "2026-11-30T08:00:00Z"}]}
    elif kind in ("emit", "emit_far"):
        events = [{"type": t} for t in turn_rule.emits]
        if kind == "emit_far":
            events = [{"type": t, "subject": "acme#2"} for t in turn_rule.emits]
        body = {"events": events}
    elif kind == "actions":
        body = {"actions": [{"do": "notes.add"}, {"do": "notes.drop"}, {"do": "x.y"}]}
    else:
        body = {"resolve": keys or ["nothing"]}
    return f"done\n```autoloop\n{json.dumps(body)}\n```\n"


def _input(kn: Kernel, move: tuple[Any, ...]) -> k.Input | None:
    """The input a move means in the current state (None: nothing it could act on)."""
    st_ = kn.state
    name = move[0]
    if name == "ingest":
        _, n, type_, subject, bot = move
        event = Event(source="hub", id=str(n), type=type_, subject=subject)
        return k.Ingest(event=event, ignore="a bot" if bot else "")
    if name == "claim":  # mostly a runnable matter; now and then a busy or idle one
        runnable = sorted(m.id for m in st_.matters.values() if m.runnable)
        m = _pick(runnable if runnable and move[1] % 5 else sorted(st_.matters), move[1])
        return None if m is None else k.Claim(matter=m, worker="w", lease_s=move[2])
    if name in ("finish", "heartbeat"):  # mostly a running turn; now and then an old one
        running = sorted(t.id for t in st_.turns.values() if t.state == "running")
        t = _pick(running if running and move[1] % 5 else sorted(st_.turns), move[1])
        if t is None:
            return None
        turn = st_.turns[t]
        if name == "heartbeat":
            return k.Heartbeat(turn=t, fence=turn.fence)
        kind = move[2]
        rule = RULES.rule(turn.rule)
        assert rule is not None
        keys = sorted(c.key for c in st_.cards.values() if c.matter == turn.matter)
        out = k.AgentOutcome(
            started=kind != "never_started",
            ok=kind not in ("failed", "never_started", "timeout"),
            final_message=_receipt(kind, rule, keys),
            session=f"agent-{turn.matter}",
            timed_out=kind == "timeout",
            error="boom" if kind in ("failed", "never_started", "timeout") else "",
        )
        fence = turn.fence + (7 if kind == "stale" else 0)
        return k.Finish(turn=t, fence=fence, outcome=out)
    if name in ("answer", "deliver"):  # answers mostly go to open questions
        asks = sorted(c.id for c in st_.cards.values() if c.kind_ == "ask" and c.state == "open")
        mostly = asks if name == "answer" and asks and move[1] % 5 else sorted(st_.cards)
        c = _pick(mostly, move[1])
        if c is None:
            return None
        card = st_.cards[c]
        if name == "deliver":
            return k.Delivered(card=c, channel="desk", version=card.version)
        return k.Answer(card=c, choice=move[2], by="owner")
    if name == "outbox":
        a = _pick(sorted(st_.actions), move[1])
        if a is None:
            return None
        what = move[2]
        if what == "claim":
            return k.ActionTried(action=a, by="hub-a", lease_s=60)
        if what == "error":
            return k.ActionTried(action=a, error="timed out")
        return k.ActionDone(action=a, ok=what == "ok", error="" if what == "ok" else "422")
    if name == "owner":
        return k.OwnerNotice(key=move[1], title=move[1], text="told once")
    if name == "schedule":
        day = kn.now - timedelta(days=move[1])
        at = day.astimezone(ZONE).replace(hour=2, minute=0, second=0, microsecond=0)
        return k.ScheduleDue(rule="nightly", at=iso(at))
    if name == "tick":
        kn.advance(seconds=move[1])
        return k.Tick(local_now=kn.now.astimezone(ZONE), look_ahead_s=600)
    kn.advance(seconds=-move[1])  # clock_back
    return k.Tick()


def _reordered(state: State) -> State:
    """The same records put in the other way round (as a store may load them)."""
    out = State(last_event=state.last_event, seen_keys=set(reversed(sorted(state.seen_keys))))
    out.meta = state.meta
    for rec in reversed(state.records()):
        out.put(rec)
    return out


def _same(a: k.Decision, b: k.Decision) -> bool:
    return (a.facts, a.effects, a.reply, a.touched, a.wake_at) == (
        b.facts,
        b.effects,
        b.reply,
        b.touched,
        b.wake_at,
    )


def _run(moves: list[tuple[Any, ...]]) -> tuple[Kernel, list[k.Decision]]:
    kn = Kernel(RULES, now=T0)
    decisions = []
    for move in moves:
        inp = _input(kn, move)
        if inp is None:
            continue
        again = step(_reordered(kn.state), inp, now=kn.now, rules=RULES)
        d = kn.step(inp)
        assert _same(d, again), f"{inp}: the order records were put in changed the decision"
        decisions.append(d)
        if isinstance(inp, k.Ingest):
            twice = step(kn.state.copy(), inp, now=kn.now, rules=RULES)
            assert (twice.reply.code, twice.facts, twice.effects) == ("duplicate", (), ())
        if isinstance(inp, k.Tick):
            assert d.wake_at is None or d.wake_at > kn.now
    return kn, decisions


@settings(max_examples=200, deadline=None)
@given(moves=st.lists(MOVES, min_size=10, max_size=60))
def test_step_is_deterministic_and_a_replay_gives_the_state_reached_step_by_step(
    moves: list[tuple[Any, ...]],
) -> None:
    kn, decisions = _run(moves)
    kn_again, decisions_again = _run(moves)
    assert all(_same(a, b) for a, b in zip(decisions, decisions_again, strict=True))
    replayed = replay(kn.facts)
    assert replayed.records() == kn.state.records()
    assert (replayed.seen_keys, replayed.last_event) == (kn.state.seen_keys, kn.state.last_event)
    assert kn_again.state.records() == kn.state.records()


@settings(max_examples=100, deadline=None)
@given(moves=st.lists(MOVES, min_size=10, max_size=60), n=st.integers(0, 6))
def test_a_duplicate_ingest_adds_no_fact_no_effect_and_changes_no_record(
    moves: list[tuple[Any, ...]], n: int
) -> None:
    kn, _ = _run(moves)
    event = Event(source="hub", id=str(n), type="issue.opened", subject="acme#1")
    seen = event_key(event) in kn.state.seen_keys
    before = kn.state.records()
    d = kn.step(k.Ingest(event=event))
    if seen:
        assert (d.reply.code, d.facts, d.effects, d.touched) == ("duplicate", (), (), frozenset())
        assert kn.state.records() == before
    again = kn.step(k.Ingest(event=event))
    assert (again.reply.code, again.facts, again.effects) == ("duplicate", (), ())


@settings(max_examples=100, deadline=None)
@given(moves=st.lists(MOVES, min_size=10, max_size=60))
def test_no_event_past_the_hop_limit_is_dispatched(moves: list[tuple[Any, ...]]) -> None:
    kn, _ = _run(moves)
    for row in kn.state.events.values():
        if row.event.hops > MAX_HOPS:
            assert not row.dispatched and "hop limit" in row.reason
    assert all(t.hops <= MAX_HOPS for t in kn.state.turns.values())


def test_the_moves_reach_every_kind_of_decision() -> None:
    """The generator is not idle: one fixed walk reaches every input's interesting replies."""
    moves: list[tuple[Any, ...]] = [
        ("ingest", 1, "issue.opened", "acme#1", False),
        ("claim", 0, 300),
        ("finish", 0, "ask"),
        ("answer", 0, 1),
        ("claim", 0, 300),
        ("finish", 1, "actions"),
        ("outbox", 0, "claim"),
        ("outbox", 0, "ok"),
        ("tick", 3600 * 22),  # 02:00 in the rules' zone: the nightly schedule ticks
        ("schedule", 0),
    ]
    _, decisions = _run(moves)
    codes = [d.reply.code for d in decisions]
    assert codes == [
        "recorded",
        "started",
        "finished",
        "answered",
        "started",
        "finished",
        "recorded",
        "recorded",
        "ticked",
        "duplicate",
    ]
    assert decisions[-2].reply.data["schedules"] == 1
