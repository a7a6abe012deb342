"""The inbox's check of a webhook body before its ack, against the decode after it.

The ack checks that a body is a JSON object without building it
(``check_json_object``); the translator decodes it later (``webhook_payload``). A body
the check accepts and the decode refuses would be acknowledged and then lost; one the
check refuses and the decode takes would be a 400 for a good delivery. So the two must
agree on every body, and say the same thing when they refuse.
"""

from __future__ import annotations

import json
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ghapp.runtime.webhooks import (
    MAX_NESTING,
    BadBody,
    _int,
    _no_constant,
    _parse_any_depth,
    check_json_object,
    webhook_payload,
)
from tests import paths

FIXTURES = sorted((paths.ROOT / "tests" / "fixtures" / "github" / "webhooks").rglob("*.json"))
BODIES = [f.read_bytes() for f in FIXTURES]
EDIT_BYTES = b'{}[]",:\\0123456789-+.eE \x00\x1f\x7f\x80\xbf\xc3\xed\xf4\xffntfua'


def verdict_of_check(body: bytes) -> str:
    try:
        check_json_object(body)
    except BadBody as exc:
        return str(exc)
    return "accepted"


def verdict_of_decode(body: bytes) -> str:
    try:
        webhook_payload(body, form=False)
    except BadBody as exc:
        return str(exc)
    return "accepted"


def agree(body: bytes) -> None:
    assert verdict_of_check(body) == verdict_of_decode(body), body[:200]


@pytest.mark.parametrize(
    "body",
    [
        b'{"a": 1}',
        b'  {"a": [1, {"b": null}]}\n',
        b"{}",
        b"[1, 2]",
        b'"text"',
        b"12",
        b"",
        b"   ",
        b'{"a": 1e400}',  # beyond a double: both take it (read as infinity)
        b'{"a": -1e400}',
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b'{"a": 123456789012345678901234567890}',
        b'{"a": "\\ud800"}',  # a lone surrogate, escaped
        b'{"a": "\xff"}',  # not UTF-8 inside a string the check skips over
        b'{"a": "\xed\xa0\x80"}',  # a surrogate encoded in UTF-8
        b'{"a": "\xc3\xa9"}',
        b'\xef\xbb\xbf{"a": 1}',  # a byte order mark
        b'{"a": "\x01"}',  # a raw control character
        b'{"a": 1,}',
        b'{"a": 01}',
        b'{"a": 1.}',
        b'{"a": tru}',
        b'{"a": 1} {"b": 2}',
        b'{"a": 1}x',
        b'{"a" 1}',
        b'{"\\u0000": 1}',
        b'{"a": 1, "a": 2}',
        # nested deep: the shallow pass gives up near 1,000 levels, orjson at 1,024,
        # the standard library's parser at the interpreter's recursion limit
        *(b'{"a": ' + b"[" * n + b"]" * n + b"}" for n in (900, 1000, 1023, 1024, 5000)),
        *(b'{"a": ' + b'{"b": ' * n + b"1" + b"}" * n + b"}" for n in (1000, 1024, 5000)),
        # what orjson refuses, deep: the standard library reads it, and must read every
        # depth the check takes (acknowledged, then refused by the decode, it was dropped)
        *(
            b'{"a": ' + b'{"b": ' * n + leaf + b"}" * n + b"}"
            for n in (400, 500, 990, 1000, 1020, 1023)
            for leaf in (b"1e400", b'"\\ud800"', b"123456789012345678901234567890")
        ),
        *(b'{"a": ' + b"[" * n + b"1e400" + b"]" * n + b"}" for n in (500, 1000, 1023)),
        # deeper than the standard library's parser goes, and deeper than the levels kept
        # (acknowledged, then refused by the decode, these were dropped)
        *(b'{"a": ' + b"[" * n + b"]" * n + b"}" for n in (1099, 1100, 1101, 2000, 3990, 20_000)),
        *(b'{"a": ' + b'{"b": ' * n + b"1" + b"}" * n + b"}" for n in (1100, 3990, 20_000)),
        b'{"a": ' + b"[" * 20_000 + b"]" * 19_999 + b"}",  # one level left open
        b'{"a": ' + b"[" * 20_000 + b"1,]" + b"]" * 19_999 + b"}",
        # integers past Python's 4,300 digits (read as a float: infinity)
        b'{"a": ' + b"1" * 4300 + b"}",
        b'{"a": ' + b"1" * 4301 + b"}",
        b'{"a": -' + b"1" * 10_000 + b"}",
        b'{"a": ' + b"[" * 2000 + b"1" * 5000 + b"]" * 2000 + b"}",
    ],
)
def test_the_check_and_the_decode_agree_on_edge_cases(body: bytes) -> None:
    agree(body)


@pytest.mark.parametrize("body", BODIES, ids=[f.parent.name + "/" + f.name for f in FIXTURES])
def test_every_payload_of_github_passes_the_check(body: bytes) -> None:
    assert verdict_of_check(body) == "accepted"
    agree(body)


@settings(max_examples=600, deadline=None)
@given(
    st.sampled_from(range(len(BODIES))),
    st.lists(
        st.tuples(
            st.floats(0, 1, exclude_max=True), st.sampled_from(range(3)), st.integers(0, 255)
        ),
        min_size=1,
        max_size=4,
    ),
    st.booleans(),
)
def test_the_check_and_the_decode_agree_on_damaged_payloads(
    which: int, edits: list[tuple[float, int, int]], syntax: bool
) -> None:
    damaged = bytearray(BODIES[which])
    for where, op, value in edits:
        at = int(where * len(damaged))
        byte = EDIT_BYTES[value % len(EDIT_BYTES)] if syntax else value
        if op == 0 and damaged:
            damaged[min(at, len(damaged) - 1)] = byte
        elif op == 1 and damaged:
            del damaged[min(at, len(damaged) - 1)]
        else:
            damaged.insert(at, byte)
    agree(bytes(damaged))


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(JSON_VALUES, st.booleans())
def test_the_check_and_the_decode_agree_on_any_json(value: object, ascii_only: bool) -> None:
    body = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    agree(body)


def test_a_lone_surrogate_is_mended_to_u_fffd_keys_too_and_a_pair_is_kept() -> None:
    body = b'{"a": ["x\\ud800", {"\\udc00k": "\\ud83d\\ude00"}], "n": 1e400}'
    assert webhook_payload(body, form=False) == {
        "a": ["x\ufffd", {"\ufffdk": "\U0001f600"}],
        "n": float("inf"),
    }
    deep = b'{"a": ' + b"[" * 900 + b'"\\udfff"' + b"]" * 900 + b"}"
    value = webhook_payload(deep, form=False)["a"]
    for _ in range(899):
        (value,) = value
    assert value == ["\ufffd"]


def test_a_body_nested_past_the_levels_kept_reads_null_there_whichever_parser_reads_it() -> None:
    for n in (1099, 1100, 1101, 3000, 3990, 9_998):  # json.loads up to about 3,990
        value = webhook_payload(b'{"a": ' + b"[" * n + b"]" * n + b"}", form=False)["a"]
        depth = 1
        while isinstance(value, list) and value:
            (value,) = value
            depth += 1
        kept = min(n, MAX_NESTING)  # the object is the first level
        assert (depth, value) == (kept, [] if n < MAX_NESTING else None), n
    big = webhook_payload(b'{"a": ' + b"7" * 4301 + b', "b": ' + b"7" * 4300 + b"}", form=False)
    assert big["a"] == float("inf") and big["b"] == int("7" * 4300)


@pytest.mark.parametrize("number", ["1\u0661", "\u0661", "1.\u0661", "1e\u0661", "-\u0661"])
def test_a_number_with_a_digit_that_is_not_ascii_is_refused_at_any_depth(number: str) -> None:
    """``\\d`` in the parser without recursion took any Unicode digit: deep enough, such
    a body was acknowledged where a shallow one was refused."""
    for depth in (1, 5000):
        body = ('{"a": ' + "[" * depth + number + "]" * depth + "}").encode()
        assert verdict_of_check(body).startswith("body is not JSON"), depth
        assert verdict_of_decode(body).startswith("body is not JSON"), depth


def test_an_integer_of_exactly_the_digits_allowed_is_kept_whatever_its_sign() -> None:
    limit = sys.get_int_max_str_digits()
    for text in ("7" * limit, "-" + "7" * limit):
        assert webhook_payload(f'{{"a": {text}}}'.encode(), form=False)["a"] == int(text)
    assert webhook_payload(b'{"a": -' + b"7" * (limit + 1) + b"}", form=False)["a"] == float("-inf")


def read_both(text: str) -> tuple[object, object]:
    """``json.loads`` and the parser without recursion, each: its value, or "refused"."""
    out: list[object] = []
    for parse in (
        lambda t: json.loads(t, parse_constant=_no_constant, parse_int=_int),
        _parse_any_depth,
    ):
        try:
            out.append(parse(text))
        except ValueError:
            out.append("refused")
    return out[0], out[1]


@settings(max_examples=400, deadline=None)
@given(JSON_VALUES, st.sampled_from(["", " ", "\n\t", "\r "]))
def test_the_parser_without_recursion_reads_any_json_as_json_loads_does(
    value: object, space: str
) -> None:
    text = json.dumps(value, indent=space or None)
    left, right = read_both(space + text + space)
    assert left == right and right != "refused"


@settings(max_examples=600, deadline=None)
@given(
    st.sampled_from(range(len(BODIES))),
    st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=4),
)
def test_the_parser_without_recursion_refuses_what_json_loads_refuses(
    which: int, edits: list[tuple[float, int]]
) -> None:
    damaged = bytearray(BODIES[which])
    for where, value in edits:
        at = min(int(where * len(damaged)), len(damaged) - 1)
        damaged[at] = EDIT_BYTES[value % len(EDIT_BYTES)]
    left, right = read_both(bytes(damaged).decode("utf-8", "replace"))
    assert left == right


def test_a_body_nested_past_what_the_check_takes_is_refused_by_both_at_once() -> None:
    """The parser without recursion stops at DEPTH_MAX levels (the check's own parser
    stops well before, at the recursion limit): a body of 20 MB of ``[`` is refused in
    milliseconds, not parsed to its end in pure Python."""
    body = b'{"a": ' + b"[" * 20_000_000 + b"]" * 20_000_000 + b"}"
    started = time.monotonic()
    assert (
        verdict_of_check(body)
        == verdict_of_decode(body)
        == ("body is not JSON: send application/json payloads")
    )
    assert time.monotonic() - started < 5
