"""The lifecycle tables: every row is a move the kernel makes, and no other move folds."""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator

import pytest

from kernel import facts as f
from kernel import inputs as k
from kernel import lifecycle, pipeline_state, state
from kernel.errors import IllegalMove, MissingRecord, NoFold
from kernel.lifecycle import TABLES, allows, move
from kernel.model import Event
from kernel.state import FOLD, apply, replay
from tests.kernel.helpers import T0, Kernel, ev, receipt, rule, rules_of

AT = T0.isoformat()


def test_every_fact_type_has_one_fold_function() -> None:
    assert set(FOLD) == set(f.FACT_TYPES.values()) == set(typing.get_args(f.Fact))


def test_a_fact_type_without_a_fold_function_is_a_bug() -> None:
    with pytest.raises(NoFold, match="str"):
        apply(state.State(), "not a fact")  # type: ignore[arg-type]  # a str is no fact


def test_each_row_gives_its_state_and_a_missing_row_raises() -> None:
    for name, table in TABLES.items():
        for (before, fact), after in table.items():
            assert move(name, "x", before, fact) == after
            assert allows(name, before, fact)
        with pytest.raises(IllegalMove) as caught:
            move(name, "x", "no such state", "TurnStarted")
        assert (caught.value.table, caught.value.record) == (name, "x")
        assert "no move from 'no such state' on TurnStarted" in str(caught.value)


@pytest.fixture
def rows_used(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[tuple[str, str, str]]]:
    """Every (table, state, fact) the fold moves a record along while the test runs."""
    used: set[tuple[str, str, str]] = set()

    def recording(table: str, record: str, before: str, fact: str) -> str:
        used.add((table, before, fact))
        return lifecycle.move(table, record, before, fact)

    monkeypatch.setattr(state, "move", recording)
    monkeypatch.setattr(pipeline_state, "move", recording)
    yield used


def _turn(kn: Kernel, message: str) -> str:
    """A new event, a turn that takes it, and the agent's last message."""
    kn.step(k.Ingest(event=ev(f"more-{len(kn.state.events)}")))
    turn = kn.claim("r")
    assert turn is not None
    kn.finish(turn, message)
    return turn


def _receipt(body: object) -> str:
    return receipt(json.dumps(body))


def test_the_kernel_walks_every_row_of_every_table(rows_used: set[tuple[str, str, str]]) -> None:
    kn = Kernel(rules_of(rule(allow=("notes.add",), approve=("notes.drop",), emits=("ping",))))
    kn.step(k.Ingest(event=ev("1")))
    kn.step(k.Ingest(event=ev("2")))  # a free matter takes another event
    t1 = kn.claim("r")
    assert t1
    kn.step(k.Ingest(event=ev("3")))  # a running matter: the event waits
    kn.step(k.Heartbeat(turn=t1, fence=1))
    kn.step(k.Finish(turn=t1, fence=9, outcome=k.AgentOutcome(started=True, ok=True)))
    body = {
        "ask": [{"key": "q", "title": "Pick", "options": ["a", "b"]}],
        "notice": [{"key": "n", "title": "FYI"}],
        "later": [{"in": "1m"}],
        "actions": [{"do": "notes.add"}, {"do": "notes.drop"}, {"do": "notes.drop"}, {"do": "x.y"}],
    }
    kn.finish(t1, receipt(json.dumps(body)))
    kn.step(k.Finish(turn=t1, fence=1, outcome=k.AgentOutcome(started=True, ok=True)))
    ask, notice, approve, decline = "c1", "c2", "c3", "c4"
    for card in (ask, notice, approve):
        kn.step(k.Delivered(card=card, channel="desk", version=1))
    kn.step(k.Answer(card=approve, choice=1, by="owner"))
    kn.step(k.Answer(card=decline, choice=2, by="owner"))
    kn.step(k.ActionTried(action=f"{t1}.a0", by="hub-a", lease_s=60))
    kn.step(k.ActionTried(action=f"{t1}.a0", error="timed out"))
    kn.step(k.ActionDone(action=f"{t1}.a0", ok=True))
    kn.step(k.ActionTried(action=f"{t1}.a0", error="the lapsed claim's late error"))
    kn.step(k.ActionDone(action=f"{t1}.a1", ok=False, error="422"))
    kn.step(k.ActionTried(action=f"{t1}.a1", error="late"))
    kn.step(k.Answer(card=ask, choice=1, by="owner"))
    kn.step(k.Delivered(card=ask, channel="desk", version=2))
    kn.advance(minutes=2)
    kn.step(k.Tick())
    _turn(kn, _receipt({"ask": [{"key": "q2", "title": "Again?", "options": ["y", "n"]}]}))
    _turn(kn, _receipt({"ask": [{"key": "q2", "title": "Again!", "options": ["y", "n"]}]}))
    _turn(kn, _receipt({"resolve": ["q", "q2", "n"]}))
    for card in (ask, notice):
        kn.step(k.Delivered(card=card, channel="desk", version=3))
    for outcome in (
        k.AgentOutcome(started=True, ok=False, error="boom"),
        k.AgentOutcome(started=True, ok=False, timed_out=True),
    ):
        kn.step(k.Ingest(event=ev(f"fail-{outcome.timed_out}")))
        if kn.state.matters["r"].retry_after:
            assert kn.step(k.Claim(matter="r", worker="w")).reply.code == "later"
            kn.advance(minutes=5)  # past the failed turn's backoff
        t = kn.claim("r")
        assert t
        kn.step(k.Finish(turn=t, fence=kn.state.turns[t].fence, outcome=outcome))
    kn.advance(minutes=5)
    t = kn.claim("r")
    assert t  # the retry; its lease lapses, the matter's retries are used up: a notice
    kn.advance(minutes=10)
    kn.step(k.Tick())
    late = k.AgentOutcome(started=True, ok=True)
    kn.step(k.Finish(turn=t, fence=kn.state.turns[t].fence, outcome=late))
    _turn(kn, "no receipt")
    _turn(kn, receipt("{not json"))
    pipe = "deliver/acme/web#7"
    kn.step(k.Advance(pipeline=pipe, subject="acme/web#7", version=0, stage="checks"))
    kn.advance(minutes=1)
    kn.step(k.Wake(pipelines=(pipe,)))
    kn.step(k.Advance(pipeline=pipe, subject="acme/web#7", version=2, stage="merge"))
    kn.step(k.Advance(pipeline=pipe, subject="acme/web#7", version=3, stage="done", ended=True))
    kn.step(  # a note on the ended record: its data only
        k.Advance(
            pipeline=pipe, subject="acme/web#7", version=4, stage="done", ended=True, data={"n": 1}
        )
    )
    kn.step(k.Advance(pipeline="p/2", subject="s", version=0, stage="bad", ended=True))
    kn.step(
        k.Advance(pipeline="p/2", subject="s", version=1, stage="bad", ended=True, restart=True)
    )
    kn.step(k.Advance(pipeline=pipe, subject="acme/web#7", version=5, stage="new", restart=True))
    every = {(name, before, fact) for name, table in TABLES.items() for before, fact in table}
    assert every - rows_used == set()
    assert rows_used <= every
    assert kn.replayed().records() == kn.state.records()


def _started(turn: str = "t1", matter: str = "m") -> f.TurnStarted:
    return f.TurnStarted(
        turn=turn,
        matter=matter,
        rule="r",
        agent="a",
        worker="w",
        kind="normal",
        events=(1,),
        hops=0,
        session="s",
        resume=None,
        rules_version="v",
        fence=int(turn[1:]),
        at=AT,
        lease_until=AT,
    )


def _recorded(seq: int = 1, matter: str = "m") -> f.EventRecorded:
    return f.EventRecorded(
        seq=seq,
        event=Event(source="x", id=str(seq), type="ping", subject="s"),
        at=AT,
        routes=(matter,),
        new_matters=((matter, "r", "s", "sess"),),
        dispatched=True,
    )


RECORDED = _recorded()


def _notice(card: str = "c1") -> f.CardOpened:
    return f.CardOpened(card=card, key="k", matter="m", kind="notice", title="t", at=AT)


@pytest.mark.parametrize(
    ("facts", "table", "where", "label"),
    [
        ([RECORDED, _started("t1"), _started("t2")], "matter", "running", "TurnStarted"),
        (
            [
                RECORDED,
                _started(),
                f.TurnFinished(turn="t1", matter="m", outcome="ok", at=AT),
                f.TurnFinished(turn="t1", matter="m", outcome="failed", at=AT),
            ],
            "matter",
            "None",
            "TurnFinished",
        ),
        (
            [RECORDED, _started(), f.TurnFinished(turn="t1", matter="m", outcome="won", at=AT)],
            "turn",
            "running",
            "TurnFinished:won",
        ),
        (
            [_notice(), f.CardAnswered(card="c1", choice=1, by="me", via="cli", at=AT)],
            "notice card",
            "open",
            "CardAnswered",
        ),
        (
            [_notice(), f.CardResolved(card="c1"), f.CardResolved(card="c1")],
            "notice card",
            "closed",
            "CardResolved",
        ),
        (
            [
                f.TimerArmed(timer="x", matter="m", due=AT),
                f.TimerFired(timer="x", at=AT),
                f.TimerFired(timer="x", at=AT),
            ],
            "timer",
            "fired",
            "TimerFired",
        ),
        (
            [
                f.ActionRequested(action="a", matter="m", turn="t1", do="x.y", status="refused"),
                f.ActionCompleted(action="a", ok=True),
            ],
            "action",
            "refused",
            "ActionCompleted:ok",
        ),
        (
            [
                f.ActionRequested(action="a", matter="m", turn="t1", do="x.y"),
                f.ActionDecided(action="a", approved=True),
            ],
            "action",
            "allowed",
            "ActionDecided:approved",
        ),
    ],
)
def test_a_fact_sequence_no_decision_makes_is_an_illegal_move(
    facts: list[f.Fact], table: str, where: str, label: str
) -> None:
    with pytest.raises(IllegalMove) as caught:
        replay(facts)
    assert (caught.value.table, caught.value.state, caught.value.fact) == (table, where, label)


def test_a_fact_about_a_record_that_is_not_loaded_is_a_missing_record() -> None:
    with pytest.raises(MissingRecord, match="turn 't1' is not loaded"):
        replay([f.LeaseRenewed(turn="t1", fence=1, lease_until=AT)])


def test_a_record_that_exists_cannot_be_created_again() -> None:
    armed = f.TimerArmed(timer="x", matter="m", due=AT)
    with pytest.raises(IllegalMove) as caught:
        replay([armed, armed])
    assert (caught.value.table, caught.value.state) == ("timer", "armed")
    with pytest.raises(IllegalMove) as caught:
        replay([RECORDED, _recorded(2, "m2"), _started("t1"), _started("t1", matter="m2")])
    assert (caught.value.table, caught.value.state) == ("turn", "running")
    with pytest.raises(IllegalMove, match="no move from 'open' on CardOpened"):
        replay([_notice(), _notice()])


def test_an_input_that_asks_for_a_move_the_table_lacks_is_answered_not_recorded() -> None:
    kn = Kernel(rules_of(rule(approve=("notes.drop",))))
    _turn(kn, _receipt({"actions": [{"do": "notes.drop"}, {"do": "x.y"}]}))
    for action in ("t1.a0", "t1.a1"):  # awaiting approval, refused
        for inp in (
            k.ActionTried(action=action, error="timed out"),
            k.ActionTried(action=action),
            k.ActionDone(action=action, ok=True),
        ):
            d = kn.step(inp)
            assert (d.reply.ok, d.reply.code, d.facts) == (False, "not_allowed", ())
    assert kn.state.actions["t1.a0"].status == "awaiting_approval"
