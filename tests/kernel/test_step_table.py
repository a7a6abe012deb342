"""The table at the top of kernel/step.py: every input has a row and a handler, and a
decision that goes beyond its row is a bug."""

from __future__ import annotations

import typing

import pytest

from kernel import inputs as k
from kernel import step as core
from kernel.context import Context
from kernel.errors import OffTable
from kernel.state import State
from tests.kernel.helpers import T0, rules_of


def test_every_input_has_one_row_and_one_handler() -> None:
    inputs = set(typing.get_args(k.Input))
    assert set(core.STEP) == set(core.HANDLERS) == inputs
    effects = set(typing.get_args(k.Effect))
    for row in core.STEP.values():
        assert row.effects <= effects and row.replies


def test_a_decision_beyond_its_row_is_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    def sends_a_card(ctx: Context, inp: k.Delivered) -> k.Reply:
        ctx.effects.append(k.SendCard(card=inp.card))
        return k.Reply(ok=True, code="recorded")

    def odd_code(ctx: Context, inp: k.Delivered) -> k.Reply:
        return k.Reply(ok=True, code="delivered")

    inp = k.Delivered(card="c1", channel="desk", version=1)
    for handler, what in ((sends_a_card, "the effect SendCard"), (odd_code, "the reply code")):
        monkeypatch.setitem(core.HANDLERS, k.Delivered, handler)
        with pytest.raises(OffTable, match=f"Delivered: {what}"):
            core.step(State(), inp, now=T0, rules=rules_of())
