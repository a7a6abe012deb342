"""What every fuzz target shares: its shape, its failure, and the strategies of JSON.

A target has a Hypothesis strategy and ``check(example)``, which raises
:class:`FuzzFailure` (an :class:`AssertionError`) when the input made the code under test
fail: an exception that escaped, an HTTP status of 500 or more, a traceback in the
answer, or a log record at ERROR or with a traceback. ``check_bytes(data)`` feeds the
same code raw bytes, for atheris. A target is entered (``with``) around a run of many
inputs: that builds what it needs (an app, a home) once.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from hypothesis import strategies as st

TRACEBACK = "Traceback (most recent call last)"


class FuzzFailure(AssertionError):
    """An input that made the code under test fail; the message says how."""


# ------------------------------------------------------------------------ shared strategies

JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | st.sampled_from(["", "\x00", "\u2028", "é", "../..", "%00", "${x}", "<script>", "a" * 300])
    | st.sampled_from(["\ud800", "a\udfffb", "\udbff\udfff", "\ud83d\ude00"])  # surrogates
)
JSON = st.recursive(
    JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=10,
)


def nested(depth: int, *, array: bool = False) -> bytes:
    """A JSON document nested ``depth`` levels deep."""
    if array:
        return b"[" * depth + b"1" + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


DEEP = st.builds(nested, st.integers(min_value=1, max_value=20_000), array=st.booleans())
HEADER_BYTES = st.binary(max_size=80).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))


def signature(kinds: list[str]) -> st.SearchStrategy[str | bytes]:
    """One of ``kinds``; for ``"other"``, the bytes of a made-up signature header."""
    return st.sampled_from(kinds).flatmap(
        lambda kind: HEADER_BYTES if kind == "other" else st.just(kind)
    )


def json_bytes(value: Any) -> bytes:
    """``value`` as JSON in UTF-8; a lone surrogate escaped (``\\ud800``), as JSON can
    carry one (raw, it is no UTF-8: ``st.binary`` sends such bytes)."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value).encode("ascii")


class Target:
    name = ""

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()  # what the inputs gave, for the report

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    # Every target of tests/fuzz/targets.py and web.py defines the three below.

    def strategy(self) -> st.SearchStrategy[Any]:
        """The Hypothesis strategy of this target's inputs."""
        raise NotImplementedError

    def check(self, example: Any) -> None:
        """Feed one input; raise :class:`FuzzFailure` on a crash, a 5xx or a traceback."""
        raise NotImplementedError

    def check_bytes(self, data: bytes) -> None:
        """The same from raw bytes (atheris)."""
        raise NotImplementedError
