"""A GitHub webhook's body: decoded, named, and made into ledger inputs.

Shared by the webhook route (which checks the body before its ack) and the inbox's
translator (which records it): :func:`webhook_payload` decodes JSON or form-encoded
bodies, :func:`check_json_object` only checks that a JSON body is an object (what the
inbox's ack needs: it builds no Python objects, which made the decode the costliest
step of the ack), :func:`content_digest` names what a delivery is made of (the same
body under a new delivery id is a replay), :func:`inputs_for` makes the events and their
``Ingest`` inputs with the GitHub source's pure translator.

Both readers take the same bodies (a property test holds them to it): a body the check's
shallow pass refuses is decoded in full to be sure (a bad body costs twice, a good one
once), and ``orjson`` refuses a number too large for a double (``1e400``) and nesting
past 1,024 levels, which the shallow pass lets through: such a body is decoded by the
standard library's parser instead, its number read as infinity (or by a parser without
recursion, past the depth the standard library's goes).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from _json import scanstring  # the json module's own, in C
from typing import Any
from urllib.parse import parse_qs

import msgspec
import orjson

from kernel import inputs as k
from kernel.model import Event
from plugins.sources.github import event_type, translate

__all__ = ["BadBody", "check_json_object", "content_digest", "inputs_for", "webhook_payload"]

# Top-level keys decoded, values skipped over (their syntax checked, nothing built).
_SHALLOW = msgspec.json.Decoder(dict[str, msgspec.Raw])


class BadBody(ValueError):
    """A webhook body that is not a JSON object (answered 400)."""


def webhook_payload(body: bytes, *, form: bool) -> dict[str, Any]:
    """The decoded payload of a webhook body, JSON or form-encoded.

    A repository or organization webhook may be set to send
    ``application/x-www-form-urlencoded``: the JSON is then the one ``payload`` field
    (the signature still covers the raw body, checked before this)."""
    raw: str | bytes = body
    if form:
        try:
            fields = parse_qs(
                body.decode("ascii"), keep_blank_values=True, max_num_fields=16, errors="strict"
            )
        except ValueError:  # non-ASCII bytes, bad UTF-8 escapes, too many fields
            raise BadBody("form body is not URL-encoded: send payload=<JSON>") from None
        values = fields.get("payload", [])
        if len(values) != 1:
            raise BadBody('a form-encoded webhook needs one "payload" field holding the JSON')
        raw = values[0]
    try:
        payload = orjson.loads(raw)
    except ValueError:
        payload = _decode_rest(raw, form=form)
    if not isinstance(payload, dict):
        raise BadBody("body must be a JSON object")
    return payload


def _decode_rest(raw: str | bytes, *, form: bool) -> Any:
    """What ``orjson`` refused: valid JSON with a number beyond a double's range (read as
    infinity), an integer of more than 4,300 digits (read as a float: infinity), an
    escaped lone surrogate (made U+FFFD) or more than 1,024 levels of nesting, read by
    the standard library (or, nested past what its recursion allows, by
    :func:`_parse_any_depth`); anything else is not JSON.

    The check at the ack (:func:`check_json_object`) takes every valid JSON object, and
    this must take every one it takes: a delivery acknowledged and then refused here was
    dropped (it was, for an integer of 4,301 digits and for 1,100 to 4,000 levels of
    nesting). A value nested deeper than :data:`MAX_NESTING` levels is read as null,
    whichever parser read it (GitHub's payloads nest a few levels; only a made-up body
    gets there), so that nothing after it (the translator, the redactor) recurses that
    deep."""
    try:
        try:
            value = json.loads(raw, parse_constant=_no_constant, parse_int=_int)
        except RecursionError:
            text = raw.decode(json.detect_encoding(raw), "surrogatepass") if isinstance(
                raw, bytes
            ) else raw  # fmt: skip
            value = _parse_any_depth(text)
        return _mend(value)
    except ValueError:  # UnicodeDecodeError included
        what = "the payload field" if form else "body"
        raise BadBody(f"{what} is not JSON: send application/json payloads") from None


RECURSION_LIMIT = 4_000
MAX_NESTING = 1_100  # levels kept; deeper values are read as null (see _decode_rest)
# Levels refused: past what the check at the ack takes (its parser stops at the recursion
# limit below), so a body refused there is refused here at once, not parsed to its end.
DEPTH_MAX = 10_000
# Raised when the module loads, before any request (see _decode_rest): only ever raised,
# and Python code in this process recurses nowhere near it.
if sys.getrecursionlimit() < RECURSION_LIMIT:
    sys.setrecursionlimit(RECURSION_LIMIT)


def _int(text: str) -> int | float:
    """A JSON integer; past the interpreter's limit on the digits of an int read from
    text (4,300 by default), a float (infinity), as a number beyond a double's range is."""
    limit = sys.get_int_max_str_digits()
    digits = len(text) - text.startswith("-")
    return int(text) if not limit or digits <= limit else float(text)


_WS = re.compile(r"[ \t\n\r]*")
# JSON's numbers, as the json module reads them: ASCII digits only (``\d`` would take
# any Unicode digit)
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_WORDS = (("true", True), ("false", False), ("null", None))


def _parse_any_depth(text: str) -> Any:
    """``text``'s JSON value as ``json.loads`` reads it (strict strings, no NaN or
    Infinity, integers by :func:`_int`), without recursion, up to :data:`DEPTH_MAX`
    levels. Containers nested deeper than :data:`MAX_NESTING` levels are checked but not
    built (read as null)."""
    n = len(text)

    def ws(at: int) -> int:  # past the whitespace at ``at``
        found = _WS.match(text, at)
        return found.end() if found is not None else at

    built: list[list[Any]] = []  # [container, the key its next value goes under]
    deep = bytearray()  # the kinds ("[" or "{") of the levels past MAX_NESTING

    def key_at(i: int) -> tuple[str, int]:
        if i >= n or text[i] != '"':
            raise ValueError(f"a key was expected at {i}")
        key, i = scanstring(text, i + 1, True)
        i = ws(i)
        if i >= n or text[i] != ":":
            raise ValueError(f"':' was expected at {i}")
        return key, ws(i + 1)

    i = ws(0)
    while True:
        if i >= n:  # a value starts here
            raise ValueError("a value was expected at the end")
        c = text[i]
        value: Any
        if c in "[{":
            close = "]" if c == "[" else "}"
            j = ws(i + 1)
            if len(built) + len(deep) >= DEPTH_MAX:
                raise ValueError(f"nested deeper than {DEPTH_MAX} levels")
            shallow = not deep and len(built) < MAX_NESTING
            if j < n and text[j] == close:
                value, i = ([] if c == "[" else {}) if shallow else None, j + 1
            else:
                if shallow:
                    built.append([[] if c == "[" else {}, ""])
                else:
                    deep.append(ord(c))
                i = j
                if c == "{":
                    k_, i = key_at(i)
                    if not deep:
                        built[-1][1] = k_
                continue
        elif c == '"':
            value, i = scanstring(text, i + 1, True)
        elif found := _NUMBER.match(text, i):
            whole, frac, exp = found.groups()
            value = float(whole + (frac or "") + (exp or "")) if frac or exp else _int(whole)
            i = found.end()
        else:
            for word, meant in _WORDS:
                if text.startswith(word, i):
                    value, i = meant, i + len(word)
                    break
            else:
                raise ValueError(f"a value was expected at {i}")
        while True:  # a value ended at i: it goes into its container, which may end too
            i = ws(i)
            if not deep and not built:
                if i != n:
                    raise ValueError(f"extra data at {i}")
                return value
            kind = chr(deep[-1]) if deep else "[" if isinstance(built[-1][0], list) else "{"
            if not deep:
                top = built[-1]
                if kind == "[":
                    top[0].append(value)
                else:
                    top[0][top[1]] = value
            if i < n and text[i] == ",":
                i = ws(i + 1)
                if kind == "{":
                    k_, i = key_at(i)
                    if not deep:
                        built[-1][1] = k_
                break
            if i < n and text[i] == ("]" if kind == "[" else "}"):
                i += 1
                if deep:
                    deep.pop()
                    value = None
                else:
                    value = built.pop()[0]
                continue
            raise ValueError(f"',' or the container's end was expected at {i}")


def _mend(value: Any) -> Any:
    """``value`` (fresh from the parser: changed in place) with every lone surrogate in
    its strings, keys too, made U+FFFD, and every container nested deeper than
    :data:`MAX_NESTING` levels made null. JSON may escape a lone surrogate
    (``"\\ud800"``), and the standard library takes it, but no ledger stores it: the
    delivery's record stayed in the inbox, tried again and again, and held back every
    delivery after it. A valid pair is one character already, kept. Walks without
    recursion."""
    if isinstance(value, str):
        return mended_text(value)
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        inner = depth < MAX_NESTING  # its containers are kept
        if isinstance(item, dict):
            pairs = list(item.items())
            item.clear()
            for k_, v in pairs:
                kept = v
                if isinstance(v, dict | list):
                    if inner:
                        stack.append((v, depth + 1))
                    else:
                        kept = None
                item[mended_text(k_)] = mended_text(v) if isinstance(v, str) else kept
        elif isinstance(item, list):
            for i, v in enumerate(item):
                if isinstance(v, str):
                    item[i] = mended_text(v)
                elif isinstance(v, dict | list):
                    if not inner:
                        item[i] = None
                    else:
                        stack.append((v, depth + 1))
    return value


def mended_text(text: str) -> str:
    """``text`` with each lone surrogate made U+FFFD (a valid pair is kept)."""
    if text.isascii():
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def check_json_object(body: bytes) -> None:
    """Raise :class:`BadBody` unless ``body`` is a JSON object in UTF-8, the way
    :func:`webhook_payload` reads it, without building it."""
    try:
        if not body.isascii():
            body.decode("utf-8")  # the shallow pass does not look inside skipped strings
        _SHALLOW.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        # Refused: the full decode has the last word (it takes a few things the shallow
        # pass does not, such as an escaped lone surrogate), and its reason is the one
        # given (the shallow pass stops at a top-level number before reading the rest).
        webhook_payload(body, form=False)


def content_digest(event_name: str, signature: bytes) -> str:
    """What a delivery is made of, hashed: its event name and its verified signature
    (:func:`ghapp.github.sansio.signature_of`), SHA-256.

    The signature is the HMAC-SHA256 of the raw body under the webhook secret: under one
    secret, two bodies have the same signature only if they are the same body, so it
    names the body as well as a hash of the body itself would, and it is already
    computed (hashing a 17 KB body again cost the ack path about 11 us, and the writer
    thread gave up the GIL for it). A body replayed under a new delivery id carries the
    same signature (it must verify under the same secret), and is a duplicate.
    """
    digest = hashlib.sha256(event_name.encode("latin-1", "replace"))  # as the header came
    digest.update(b"\n")
    digest.update(signature)
    return digest.hexdigest()


def inputs_for(
    name: str,
    delivery: str,
    payload: dict[str, Any],
    digest: str,
    *,
    app_slug: str | None,
    app_id: int | None,
) -> tuple[list[Event], list[k.Input]]:
    """The events of one delivery and the ledger inputs that record them.

    GitHub signs the body only: the same body under a new delivery id is a replay (or
    the same event sent twice), recorded once. Each event of the delivery gets the
    body's key with its own suffix (``:pr<N>``). A delivery that yields no event (the
    App's own doing) is recorded as ignored, so that it is a duplicate next time too."""
    events = translate(name, delivery, payload, app_slug=app_slug, app_id=app_id)
    content = "github:" + digest
    if events:
        return events, [
            k.Ingest(event=e, content_key=content + e.id[len(delivery) :]) for e in events
        ]
    own = Event(source="github", id=delivery, type=event_type(name, payload), subject="github")
    return [], [k.Ingest(event=own, ignore="caused by this app", content_key=content)]
