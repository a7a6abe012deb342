"""What the kernel asks the shell to load, round by round."""

from __future__ import annotations

import json

from kernel import inputs as k
from kernel.facts import event_key
from kernel.model import Trigger
from kernel.step import needs
from tests.kernel.helpers import Kernel, ev, receipt, rule, rules_of


def test_an_ingest_asks_for_its_key_and_its_matters_and_never_more() -> None:
    rules = rules_of(rule("a"), rule("b", parallel=True))
    kn = Kernel(rules)
    inp = k.Ingest(event=ev("1", subject="x"))
    first = needs(inp, rules)
    assert first == k.Needs(event_keys=frozenset({event_key(inp.event)}), matters={"a", "b/x"})
    assert first.narrow
    kn.step(inp)
    assert needs(inp, rules, kn.state) == first  # narrow needs do not grow
    ignored = needs(k.Ingest(event=ev("2"), ignore="a bot"), rules)
    assert (ignored.matters, ignored.narrow) == (frozenset(), True)


def test_a_finished_turn_asks_next_for_the_matters_its_receipt_emits_into() -> None:
    rules = rules_of(
        rule("a", parallel=True, emits=("done",)),
        rule("b", on=Trigger(type=("done",)), parallel=True),
    )
    kn = Kernel(rules)
    kn.step(k.Ingest(event=ev("1", subject="x")))
    turn = kn.claim("a/x")
    assert turn
    message = receipt(json.dumps({"events": [{"type": "done"}]}))
    out = k.AgentOutcome(started=True, ok=True, final_message=message)
    inp = k.Finish(turn=turn, fence=1, outcome=out)
    first = needs(inp, rules)
    assert (first.turns, first.matters, first.narrow) == ({turn}, frozenset(), False)
    second = needs(inp, rules, kn.state)
    assert second.matters == {"b/x"}  # an emit without a subject takes its matter's
    assert second.beyond(first) == k.Needs(matters=frozenset({"b/x"}), matter_cards=True)
    assert second.beyond(first | second) is None


def test_an_answer_to_an_approval_card_asks_next_for_its_action() -> None:
    rules = rules_of(rule(approve=("notes.drop",)))
    kn = Kernel(rules)
    kn.step(k.Ingest(event=ev("1")))
    turn = kn.claim("r")
    assert turn
    kn.finish(turn, receipt(json.dumps({"actions": [{"do": "notes.drop"}]})))
    inp = k.Answer(card="c1", choice=1, by="owner")
    assert needs(inp, rules).actions == frozenset()
    assert needs(inp, rules, kn.state).actions == {f"{turn}.a0"}


def test_needs_are_narrow_with_nothing_but_event_keys_and_bare_matters() -> None:
    some = frozenset({"x"})
    assert k.Needs(event_keys=some, matters=some, look_ahead_s=5.0).narrow
    wide = {"turns": some, "cards": some, "actions": some, "pipelines": some}
    wide |= {flag: True for flag in ("due_timers", "lapsed_leases", "owner")}
    wide |= {"matter_cards": True, "waiting": True}
    assert set(wide) | {"event_keys", "matters", "look_ahead_s"} == set(k.Needs._fields)
    for field, value in wide.items():
        assert not k.Needs(**{field: value}).narrow, field
