"""Turn facts and records into plain JSON-able data and back.

Stored form of a fact: ``{"type": "TurnStarted", "v": 1, "data": {...}}``. Records are
stored as their ``data`` alone, under their kind.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from kernel import records
from kernel.facts import FACT_TYPES, Fact
from kernel.model import Event

FACT_VERSION = 1

RECORD_TYPES: dict[str, type[Any]] = {
    "meta": records.Meta,
    "event": records.EventRow,
    "matter": records.Matter,
    "queued": records.Queued,
    "turn": records.Turn,
    "card": records.Card,
    "timer": records.Timer,
    "action": records.Action,
    "pipeline": records.Pipeline,
}


_PRIMITIVE = (str, int, float, bool, type(None))
_FIELDS: dict[type[Any], tuple[str, ...]] = {}


def _field_names(cls: type[Any]) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def to_data(obj: Any) -> Any:
    """Plain JSON-able data: primitives first, dataclass fields cached per class."""
    cls = type(obj)
    if cls in _PRIMITIVE:
        return obj
    if cls is dict:
        return {str(k): to_data(v) for k, v in obj.items()}
    if cls is tuple or cls is list:
        return [to_data(x) for x in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {name: to_data(getattr(obj, name)) for name in _field_names(cls)}
    if isinstance(obj, tuple | list):
        return [to_data(x) for x in obj]
    if isinstance(obj, Mapping):
        return {str(k): to_data(v) for k, v in obj.items()}
    return obj


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


Converter = Callable[[Any], Any]


def _converter(hint: Any) -> Converter | None:
    """How to turn stored data back into a field's value; None when it is used as is."""
    origin = typing.get_origin(hint)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            item = _converter(args[0])
            if item is None:
                return lambda v: None if v is None else tuple(v)
            conv_item: Converter = item
            return lambda v: None if v is None else tuple(conv_item(x) for x in v)
        convs = [_converter(a) or (lambda x: x) for a in args]
        return lambda v: None if v is None else tuple(c(x) for c, x in zip(convs, v, strict=True))
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            if arg is not type(None):
                some = _converter(arg)
                if some is None:
                    return None
                conv_some: Converter = some
                return lambda v: None if v is None else conv_some(v)
    if hint is Event:
        return lambda v: None if v is None else from_data(Event, v)
    return None


_PLANS: dict[type[Any], tuple[tuple[str, Converter | None], ...]] = {}


def _plan(cls: type[Any]) -> tuple[tuple[str, Converter | None], ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        hints = _hints(cls)
        plan = _PLANS[cls] = tuple(
            (f.name, _converter(hints[f.name])) for f in dataclasses.fields(cls)
        )
    return plan


def from_data(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """Rebuild a dataclass from stored data, with a conversion plan cached per class."""
    kwargs = {}
    for name, conv in _plan(cls):
        if name in data:
            value = data[name]
            kwargs[name] = value if conv is None else conv(value)
    return cls(**kwargs)


# Stored text is canonical: keys sorted, no spaces, UTF-8. orjson writes dataclasses
# (slots included) field by field natively; anything else goes through ``_default``.
_OPTS = orjson.OPT_SORT_KEYS


def _default(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): v for k, v in obj.items()}
    if isinstance(obj, tuple | list | set | frozenset):
        return list(obj)
    raise TypeError(f"cannot store a {type(obj).__name__} in the ledger")


def dumps(data: Any) -> str:
    """Canonical JSON text of plain data, dataclasses included."""
    try:
        return orjson.dumps(data, default=_default, option=_OPTS).decode()
    except TypeError:
        # e.g. a dict with non-string keys: make it plain first (keys become strings)
        return orjson.dumps(to_data(data), default=_default, option=_OPTS).decode()


def loads(text: str | bytes) -> Any:
    return orjson.loads(text)


def dump_fact(fact: Fact) -> str:
    return dumps({"type": type(fact).__name__, "v": FACT_VERSION, "data": fact})


def load_fact(text: str) -> Fact:
    raw = orjson.loads(text)
    cls = FACT_TYPES[raw["type"]]
    fact: Fact = from_data(cls, raw["data"])
    return fact


def dump_record(rec: records.Record) -> str:
    return dumps(rec)


def load_record(kind: str, text: str) -> records.Record:
    rec: records.Record = from_data(RECORD_TYPES[kind], orjson.loads(text))
    return rec
