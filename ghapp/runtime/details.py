"""An event's details from outside, bounded before they reach the ledger.

Details come from ``autoloop emit --details FILE`` (or ``-``, stdin) and from the
generic sources (``POST /v1/in/{source}``). They are kept in the ledger as data, so:

- they are one JSON object, read up to :data:`MAX_BYTES` and never further (a file such
  as ``/dev/zero`` is refused after that many bytes, not read until memory runs out);
- they nest at most :data:`MAX_DEPTH` levels (deeper data would exhaust the recursion
  of every walk over it: the redactor, the encoder);
- their integers fit in 64 bits, and there is no ``NaN`` or ``Infinity``: the ledger's
  JSON encoder stores nothing else.

:class:`DetailsError` says what is wrong in one line.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

__all__ = [
    "CONTROL",
    "MAX_BYTES",
    "MAX_DEPTH",
    "NAME_LIMITS",
    "DetailsError",
    "name_problem",
    "parse_details",
    "problem",
    "read_details",
]

MAX_BYTES = 1 << 20  # 1 MiB: details are data for an agent, not a place for files
MAX_DEPTH = 64
CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # a control character: no key or name holds one
#: The longest source, type, id and subject an event from outside may have: they are
#: keys and names shown on one line (a 100,000-character id made a 2.7 MB status).
NAME_LIMITS = {"source": 64, "type": 100, "id": 200, "subject": 300}


def name_problem(field: str, value: str) -> str | None:
    """Why an event's ``field`` (source, type, id, subject) cannot be kept, or None:
    longer than :data:`NAME_LIMITS` says, or holding a control character (a newline in
    a subject split every line that showed it)."""
    limit = NAME_LIMITS[field]
    if len(value) > limit:
        return f"{field} has {len(value)} characters; at most {limit}"
    if CONTROL.search(value):
        return f"{field} holds a control character (a newline, a tab...); use plain text"
    return None


_INT_MIN, _INT_END = -(1 << 63), 1 << 64  # what the ledger's encoder takes (i64 and u64)


class DetailsError(ValueError):
    """Details that cannot be kept; ``str()`` says why in one line."""


def problem(value: object, *, max_depth: int = MAX_DEPTH) -> str | None:
    """Why decoded JSON ``value`` cannot be stored, or None. Walks without recursion."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = [*item.keys(), *item.values()]
        elif isinstance(item, list):
            children = item
        else:
            if type(item) is int and not _INT_MIN <= item < _INT_END:
                return f"the integer {str(item)[:20]}... does not fit in 64 bits"
            if type(item) is float and not math.isfinite(item):  # 1e400: stored as null
                return "a number is beyond a double's range (such as 1e400)"
            if type(item) is str and not item.isascii() and _lone_surrogate(item):
                return "a string holds a lone surrogate (such as \\ud800): not valid Unicode"
            continue
        if depth > max_depth:
            return f"nested deeper than {max_depth} levels"
        stack.extend((child, depth + 1) for child in children)
    return None


def _lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _no_constant(name: str) -> Any:
    raise DetailsError(f"{name} is not a JSON number")


def parse_details(raw: bytes | str) -> dict[str, Any]:
    """One JSON object from ``raw``, checked by :func:`problem`."""
    if len(raw) > MAX_BYTES:
        raise DetailsError(f"more than {MAX_BYTES} bytes")
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise DetailsError(f"nested deeper than {MAX_DEPTH} levels") from None
    except DetailsError:
        raise
    except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8/16/32
        raise DetailsError(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DetailsError("must be a JSON object")
    why = problem(data)
    if why is not None:
        raise DetailsError(why)
    return data


def read_details(path: str | None) -> dict[str, Any]:
    """The details in the file at ``path`` (``-``: stdin); ``{}`` when there is none.

    Raises :class:`DetailsError` or :class:`OSError`, each one line."""
    if not path:
        return {}
    if path == "-":
        raw = sys.stdin.buffer.read(MAX_BYTES + 1)
    else:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    return parse_details(raw)
