"""A delivery's state carried on its own pull request, for runs that keep nothing.

The Action on a runner without a persistent home or database keeps no ledger from one
job to the next, so each delivery's state travels with the progress it shows: the write
that updates the ``autoloop/deliver`` check run and the sticky comment
(``github.progress``) also puts the delivery's record there, as one hidden marker
``<!-- autoloop:state=<base64url of zlib of JSON> -->`` in the comment and in the check
run's ``output.text``. The record is the same data ``autoloop serve`` keeps in its ledger
(:func:`pipeline.delivery_to_data` plus the shell's ``versions`` and ``findings``), and
its ``progress_seq`` is the seq the comment shows, so both are written together.

:func:`read_carried` finds it again: our sticky comment (by its marker and our login)
and our newest check run on the head, the one with the higher seq winning (the check run
is written first, so it can be ahead when the comment's write was lost).

Trust: only our own comment and our own check run are read. People with write access to
the repository can edit any comment; that is harmless, because every decision reads
GitHub afresh (checks, reviews, mergeability, the head-SHA guard of the merge), so a
forged state cannot make anything merge that GitHub would not.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ghapp.github.delivery import DeliveryWrites, shown_seq
from ghapp.github.writes import MARK, Target, find_marked, marker

__all__ = [
    "DECODED_MAX",
    "STATE_MAX",
    "Carried",
    "decode_state",
    "encode_state",
    "read_carried",
]

STATE_MAX = 32_000  # characters of encoded state (GitHub takes 65536 a comment)
DECODED_MAX = 1 << 20  # a state that inflates past 1 MiB is not one of ours
HISTORY_KEPT_MIN = 8  # history rows a state keeps when it must shrink to fit

_STATE = re.compile(re.escape(MARK) + r"state=([A-Za-z0-9_-]{1,64000}) -->")
PAYLOAD = re.compile(r"^[A-Za-z0-9_-]{1,64000}$")

JSON = dict[str, Any]


def _pack(data: Mapping[str, Any]) -> str:
    raw = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    packed = zlib.compress(raw.encode("utf-8"), 9)
    return base64.urlsafe_b64encode(packed).decode("ascii").rstrip("=")


def encode_state(data: Mapping[str, Any]) -> str:
    """``data`` as the marker's payload, at most :data:`STATE_MAX` characters: the oldest
    history rows and probe answers go first when it would be longer."""
    out = dict(data)
    text = _pack(out)
    while len(text) > STATE_MAX:
        history = list(out.get("history") or ())
        versions = list(out.get("versions") or ())
        if len(history) > HISTORY_KEPT_MIN:
            out["history"] = history[-max(HISTORY_KEPT_MIN, len(history) // 2) :]
        elif len(versions) > 1:
            out["versions"] = versions[-1:]
        elif out.get("findings") is not None:
            out.pop("findings")
        else:
            raise ValueError(f"a delivery's state takes {len(text)} characters even trimmed")
        text = _pack(out)
    return text


def decode_state(text: str) -> JSON | None:
    """The state held by the marker in ``text``, or None (none, or not readable)."""
    found = _STATE.search(text)
    if found is None:
        return None
    payload = found.group(1)
    try:
        packed = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        inflate = zlib.decompressobj()
        raw = inflate.decompress(packed, DECODED_MAX)
        if inflate.unconsumed_tail or not inflate.eof:
            return None
        data = json.loads(raw.decode("utf-8"))
    except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Carried:
    """A delivery's state as found on its pull request."""

    data: JSON  # the record: delivery_to_data plus "versions" and "findings"
    seq: int  # the progress seq it was shown with
    where: Literal["comment", "check run"]
    comment: JSON | None  # our sticky comment, as read (None when there is none)


def read_carried(
    writes: DeliveryWrites, t: Target, head_sha: str, comments: list[JSON]
) -> Carried | None:
    """The newest state of ``t``'s delivery: from our sticky comment among ``comments``
    (as just listed) or our check run on ``head_sha``, whichever shows the higher seq;
    None when neither holds one that belongs to ``t``."""
    found = find_marked(comments, marker("deliver", str(t)), writes.bot_login)
    best: Carried | None = None
    if found is not None:
        data = decode_state(str(found.get("body") or ""))
        if data is not None and _belongs(data, t):
            best = Carried(data=data, seq=shown_seq(found), where="comment", comment=found)
    run = writes.own_check_run(t, head_sha) if head_sha else None
    output = run.get("output") if run is not None else None
    text = output.get("text") if isinstance(output, Mapping) else None
    data = decode_state(text) if isinstance(text, str) else None
    if data is not None and _belongs(data, t):
        seq = data.get("progress_seq")
        seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else 0
        if best is None or seq > best.seq:
            best = Carried(data=data, seq=seq, where="check run", comment=found)
    return best


def _belongs(data: Mapping[str, Any], t: Target) -> bool:
    repo, number = data.get("repo"), data.get("number")
    return isinstance(repo, str) and repo.lower() == t.repo.lower() and number == t.number
