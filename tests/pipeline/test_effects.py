"""Effects: frozen imperative values, each with its idempotency key."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from pipeline import effects
from pipeline.effects import Effect, Merge


def test_every_effect_is_a_frozen_keyed_value() -> None:
    kinds = typing.get_args(Effect)
    assert {k.__name__ for k in kinds} == {
        name for name in effects.__all__ if name not in ("CARD_SLOT", "Effect")
    }
    for kind in kinds:
        fields = dataclasses.fields(kind)
        assert kind.__dataclass_params__.frozen and kind.__slots__
        assert fields[0].name == "key"
        assert all(f.kw_only for f in fields)


def test_an_effect_cannot_be_changed() -> None:
    merge = Merge(key="deliver/acme/web#12/r1/merge/3f78/1", sha="3f78", method="squash")
    with pytest.raises(dataclasses.FrozenInstanceError):
        merge.sha = "89e6"  # type: ignore[misc]  # the point: assignment must fail
