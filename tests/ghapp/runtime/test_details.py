"""Details from outside are bounded: size, nesting, and numbers the ledger can store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ghapp.runtime.details import MAX_BYTES, DetailsError, parse_details, problem, read_details
from kernel.codec import dumps


def nest(depth: int) -> Any:
    value: Any = 0
    for i in range(depth - 1):
        value = {"k": value} if i % 2 else [value]
    return {"top": value}


def test_depth_counts_objects_and_lists_alike() -> None:
    assert problem(nest(64)) is None
    assert problem(nest(65)) == "nested deeper than 64 levels"
    assert problem(nest(100_000)) == "nested deeper than 64 levels"  # no recursion


def test_integers_must_fit_in_64_bits() -> None:
    assert problem({"a": [-(1 << 63), (1 << 64) - 1, True]}) is None
    assert "64 bits" in (problem({"a": 1 << 64}) or "")
    assert "64 bits" in (problem({"a": [{"b": -(1 << 63) - 1}]}) or "")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"[1]", "must be a JSON object"),
        (b"{", "not JSON"),
        (b"\xff\xfe\x00", "not JSON"),
        (b'{"a": Infinity}', "Infinity is not a JSON number"),
        (b"[" * 100_000, "nested deeper than 64 levels"),
        (b" " * (MAX_BYTES + 1), "more than"),
    ],
)
def test_bad_details_say_why_in_one_line(raw: bytes, why: str) -> None:
    with pytest.raises(DetailsError) as err:
        parse_details(raw)
    assert why in str(err.value) and "\n" not in str(err.value)


def test_a_file_is_read_only_up_to_the_limit(tmp_path: Path) -> None:
    with pytest.raises(DetailsError, match="more than"):
        read_details("/dev/zero")
    path = tmp_path / "d.json"
    path.write_text('{"a": [1, {"b": "c"}]}')
    assert read_details(str(path)) == {"a": [1, {"b": "c"}]}
    assert read_details(None) == {}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


@given(st.dictionaries(st.text(), JSON, max_size=4))
def test_what_passes_the_check_the_ledger_can_store(value: dict[str, Any]) -> None:
    """What the check takes is stored as it came; what it refuses could not be (the
    codec refuses it, or keeps something else: infinity became null)."""
    if problem(value) is None:
        assert json.loads(dumps(value)) == value
        return
    try:
        stored = json.loads(dumps(value))
    except TypeError:
        return
    assert stored != value
