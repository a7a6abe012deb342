"""Reading the receipt: the fenced ``autoloop`` block at the end of an agent's last message.

:func:`kernel.fence.find_block` locates the block; :func:`parse_receipt` turns it into a
:class:`~kernel.model.Receipt`, or a :class:`~kernel.model.ReceiptError` that says
exactly what is wrong and where
(``ask[0].options: needs 2 or more options, got 1``), or None when there is no block.
It never raises on any text: a malformed block is a value, the turn's repair is
decided elsewhere. Whether an action is allowed is decided later, not here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NoReturn

from kernel.durations import MAX_DURATION_S, parse_duration, parse_iso
from kernel.fence import find_block
from kernel.model import (
    HOP_LIMIT_KEY,
    ActionSpec,
    AskSpec,
    EmitSpec,
    LaterSpec,
    NoticeSpec,
    Receipt,
    ReceiptError,
    Rule,
)

__all__ = [
    "ACTION_NAME",
    "CARD_KEY",
    "EVENT_TYPE",
    "MAX_BLOCK_BYTES",
    "MAX_ENTRIES",
    "MAX_OPTIONS",
    "MAX_TITLE",
    "agent_may_resolve",
    "parse_receipt",
]

MAX_BLOCK_BYTES = 64 * 1024
MAX_ENTRIES = 20  # per list
MAX_OPTIONS = 10
MAX_TITLE = 200

#: ``triage.done``, ``issues.opened``, ``hello``: dot-separated words.
EVENT_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(?:\.[A-Za-z0-9][A-Za-z0-9_-]*)*")
#: ``<namespace>.<verb>``, e.g. ``notes.append``.
ACTION_NAME = re.compile(r"[a-z][a-z0-9_-]*\.[a-z][a-z0-9_-]*")
#: card keys: identifier-like, at most 64 characters.
CARD_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
MAX_EVENT_TYPE = 100


_KEYS = ("ask", "notice", "later", "resolve", "events", "actions")
_ASK_KEYS = ("key", "title", "text", "options")
_NOTICE_KEYS = ("title", "text", "key")
_LATER_KEYS = ("in", "at", "why")
_EVENT_KEYS = ("type", "subject", "summary", "details")


def parse_receipt(
    message: str, *, rule: Rule, now: datetime | None = None
) -> Receipt | ReceiptError | None:
    """Parse and validate the receipt of ``message`` for a turn of ``rule``; ``now``, the
    decision's, bounds a ``later`` at an instant (at most ten years away, as ``in``).

    None: no block. :class:`ReceiptError`: a block that cannot be applied, with what is
    wrong and where. Never raises for any ``message``.
    """
    block = find_block(message)
    if block is None:
        return None
    if not block.closed:
        return ReceiptError(
            message=f"the autoloop block opened at line {block.line} is never closed: "
            f"end it with a line holding only {block.fence}",
            where=f"line {block.line}",
        )
    size = len(block.text.encode("utf-8", "surrogatepass"))
    if size > MAX_BLOCK_BYTES:
        return ReceiptError(
            message=f"the autoloop block at line {block.line} is {size} bytes; "
            f"at most {MAX_BLOCK_BYTES} are allowed: keep long text in files instead",
            where=f"line {block.line}",
        )
    if not block.text.strip():
        return ReceiptError(
            message=f"the autoloop block at line {block.line} is empty: "
            "put one JSON object in it, e.g. {}",
            where=f"line {block.line}",
        )
    try:
        data = json.loads(block.text, object_pairs_hook=_unique_pairs, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        line = block.line + exc.lineno
        return ReceiptError(
            message=f"the autoloop block is not valid JSON: {exc.msg} "
            f"(message line {line}, column {exc.colno})",
            where=f"line {line}",
        )
    except _Invalid as exc:
        return ReceiptError(message=f"the autoloop block is not valid JSON: {exc.problem}")
    except RecursionError:
        return ReceiptError(message="the autoloop block is nested too deeply to read")
    try:
        return _receipt(data, rule, now)
    except _Invalid as exc:
        where = exc.where or "receipt"
        return ReceiptError(message=f"{where}: {exc.problem}", where=exc.where)


# --------------------------------------------------------------------------- validation


class _Invalid(Exception):
    """Internal: carries one problem to :func:`parse_receipt`, which makes it a value."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def _fail(where: str, problem: str) -> NoReturn:
    raise _Invalid(where, problem)


_PLAIN = re.compile(r"[A-Za-z0-9_.-]{1,40}")


def _quoted(value: str) -> str:
    """``value`` quoted when it is a plain word, else only its length. A receipt's error
    goes back into the agent's prompt (a repair turn) and onto the owner's card: a key or
    name the agent copied from an issue must not carry the issue's words there."""
    return repr(value) if _PLAIN.fullmatch(value) else f"a text of {len(value)} characters"


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            _fail("", f"the key {_quoted(key)} appears twice in one object")
        out[key] = value
    return out


def _no_constant(name: str) -> NoReturn:
    _fail("", f"{name} is not a JSON number")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__  # pragma: no cover - json gives only the kinds above


def _object(value: object, where: str, known: tuple[str, ...] | None) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        _fail(where, f"must be an object, got {_kind(value)}")
    if known is not None:
        for key in value:
            if key not in known:
                _fail(where, f"unknown key {_quoted(key)} (allowed: {', '.join(known)})")
    return value


def _list(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        _fail(key, f"must be a list, got {_kind(value)}")
    if len(value) > MAX_ENTRIES:
        _fail(key, f"has {len(value)} entries; at most {MAX_ENTRIES} are allowed")
    return value


def _text(
    obj: Mapping[str, Any], key: str, where: str, *, max_len: int | None = None
) -> str | None:
    value = obj.get(key)
    at = f"{where}.{key}"
    if value is None:
        return None
    if not isinstance(value, str):
        _fail(at, f"must be a string, got {_kind(value)}")
    if max_len is not None and len(value) > max_len:
        _fail(at, f"is {len(value)} characters; at most {max_len} are allowed")
    return value


def _required(obj: Mapping[str, Any], key: str, where: str, *, max_len: int | None = None) -> str:
    value = _text(obj, key, where, max_len=max_len)
    if value is None:
        _fail(f"{where}.{key}", "is required")
    if not value.strip():
        _fail(f"{where}.{key}", "must not be empty")
    return value


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_SUBJECT = 300  # as an event from outside (a subject is a key, shown on one line)


def _one_line(value: str | None, at: str) -> str | None:
    """``value``, refused when it holds a line break or another control character: a
    title, an option or a subject is shown on one line, and a title with a newline wrote
    lines that looked like the hub's own ("> turn t9 done: ok") on the console."""
    if value is not None and _CONTROL.search(value):
        _fail(at, "must be one line, without line breaks or control characters")
    return value


def _card_key(key: str | None, where: str) -> str | None:
    if key is not None and not CARD_KEY.fullmatch(key):
        _fail(
            f"{where}.key",
            f"{_quoted(key)} is not a key: use letters, digits, _ . and -, start with a letter "
            "or _, at most 64 characters",
        )
    if key == HOP_LIMIT_KEY:
        _fail(f"{where}.key", f"{key!r} is the hub's own card: choose another key")
    return key


def agent_may_resolve(key: str) -> bool:
    """Whether a receipt's ``resolve`` may close the card of ``key``: the cards agents
    raise (an ask's key, a notice's own or default key), not the hub's (a hop limit, a
    failed turn, an unreadable receipt, an approval, a refused or failed write-back).
    An agent closed its own matter's hop-limit card, the one that told the owner it
    looped."""
    if key.startswith("notice/"):
        return True
    return bool(CARD_KEY.fullmatch(key)) and key != HOP_LIMIT_KEY


def _ask(value: object, where: str) -> AskSpec:
    obj = _object(value, where, _ASK_KEYS)
    key = _required(obj, "key", where)
    _card_key(key, where)
    title = _required(obj, "title", where, max_len=MAX_TITLE)
    _one_line(title, f"{where}.title")
    text = _text(obj, "text", where) or ""
    options = obj.get("options")
    at = f"{where}.options"
    if not isinstance(options, list):
        _fail(at, f"must be a list of 2 to {MAX_OPTIONS} strings, got {_kind(options)}")
    if len(options) < 2:
        _fail(at, f"needs 2 or more options, got {len(options)}")
    if len(options) > MAX_OPTIONS:
        _fail(at, f"has {len(options)} options; at most {MAX_OPTIONS} are allowed")
    seen: set[str] = set()
    for index, option in enumerate(options):
        if not isinstance(option, str):
            _fail(f"{at}[{index}]", f"must be a string, got {_kind(option)}")
        if not option.strip():
            _fail(f"{at}[{index}]", "must not be empty")
        if len(option) > MAX_TITLE:
            _fail(f"{at}[{index}]", f"is {len(option)} characters; at most {MAX_TITLE}")
        _one_line(option, f"{at}[{index}]")
        if option in seen:
            _fail(f"{at}[{index}]", "is given twice")
        seen.add(option)
    return AskSpec(key=key, title=title, text=text, options=tuple(options))


def _notice(value: object, where: str) -> NoticeSpec:
    obj = _object(value, where, _NOTICE_KEYS)
    title = _required(obj, "title", where, max_len=MAX_TITLE)
    _one_line(title, f"{where}.title")
    return NoticeSpec(
        title=title,
        text=_text(obj, "text", where) or "",
        key=_card_key(_text(obj, "key", where), where),
    )


def _later(value: object, where: str, now: datetime | None = None) -> LaterSpec:
    obj = _object(value, where, _LATER_KEYS)
    why = _text(obj, "why", where) or ""
    has_in, has_at = obj.get("in") is not None, obj.get("at") is not None
    if has_in == has_at:
        which = "not both" if has_in else "one is required"
        _fail(where, f'give either "in" (e.g. "30m") or "at" (ISO 8601 with offset), {which}')
    if has_in:
        try:
            seconds = parse_duration(obj["in"])
        except ValueError as exc:
            _fail(f"{where}.in", str(exc))
        return LaterSpec(in_seconds=seconds, why=why)
    try:
        at = parse_iso(obj["at"])
        utc = at.astimezone(UTC)  # (year 9999 at -01:00 is out of range: it crashed)
    except ValueError as exc:
        _fail(f"{where}.at", str(exc))
    except OverflowError:
        _fail(f"{where}.at", f"{_quoted(obj['at'])} is out of the range of dates")
    if now is not None and abs((utc - now).total_seconds()) > MAX_DURATION_S:
        _fail(f"{where}.at", 'must be within ten years of now, as "in" is')
    return LaterSpec(at=at.isoformat(), why=why)


def _resolve(value: object, where: str) -> str:
    if not isinstance(value, str):
        _fail(where, f"must be a card key or id (a string), got {_kind(value)}")
    if not value.strip():
        _fail(where, "must not be empty")
    if len(value) > MAX_TITLE:
        _fail(where, f"is {len(value)} characters; at most {MAX_TITLE} are allowed")
    return value


def _event(value: object, where: str, rule: Rule) -> EmitSpec:
    obj = _object(value, where, _EVENT_KEYS)
    kind = _required(obj, "type", where, max_len=MAX_EVENT_TYPE)
    if not EVENT_TYPE.fullmatch(kind):
        _fail(f"{where}.type", f"{_quoted(kind)} is not an event type like triage.done")
    if kind not in rule.emits:
        allowed = ", ".join(rule.emits) if rule.emits else "none: the rule has no emits"
        _fail(
            f"{where}.type",
            f"{kind!r} is not in the emits of rule {rule.name!r} (allowed: {allowed})",
        )
    details = obj.get("details")
    if details is None:
        details = {}
    _object(details, f"{where}.details", None)
    return EmitSpec(
        type=kind,
        subject=_one_line(_text(obj, "subject", where, max_len=MAX_SUBJECT), f"{where}.subject"),
        summary=_text(obj, "summary", where) or "",
        details=details,
    )


def _action(value: object, where: str) -> ActionSpec:
    obj = _object(value, where, None)
    name = _required(obj, "do", where)
    if not ACTION_NAME.fullmatch(name):
        _fail(
            f"{where}.do", f"{_quoted(name)} is not an action name of the form <namespace>.<verb>"
        )
    params = {key: item for key, item in obj.items() if key != "do"}
    return ActionSpec(do=name, params=params)


def _receipt(data: object, rule: Rule, now: datetime | None = None) -> Receipt:
    if not isinstance(data, dict):
        _fail("", f"the autoloop block must hold one JSON object, got {_kind(data)}")
    for key in data:
        if key not in _KEYS:
            where = key if _PLAIN.fullmatch(key) else ""
            _fail(where, f"unknown key {_quoted(key)} (allowed: {', '.join(_KEYS)})")
    ask = tuple(_ask(item, f"ask[{i}]") for i, item in enumerate(_list(data, "ask")))
    notice = tuple(_notice(item, f"notice[{i}]") for i, item in enumerate(_list(data, "notice")))
    owners: dict[str, str] = {}
    keyed: list[tuple[str, str | None]] = [(f"ask[{i}]", card.key) for i, card in enumerate(ask)]
    keyed += [(f"notice[{i}]", card.key) for i, card in enumerate(notice)]
    for where, key in keyed:
        if key is None:
            continue
        if key in owners:
            _fail(f"{where}.key", f"{key!r} is already used by {owners[key]}: keys must be unique")
        owners[key] = where
    return Receipt(
        ask=ask,
        notice=notice,
        later=tuple(
            _later(item, f"later[{i}]", now) for i, item in enumerate(_list(data, "later"))
        ),
        resolve=tuple(
            _resolve(item, f"resolve[{i}]") for i, item in enumerate(_list(data, "resolve"))
        ),
        events=tuple(
            _event(item, f"events[{i}]", rule) for i, item in enumerate(_list(data, "events"))
        ),
        actions=tuple(
            _action(item, f"actions[{i}]") for i, item in enumerate(_list(data, "actions"))
        ),
    )
