"""The persisted state of one delivery (one pipeline run on one pull request).

A :class:`Delivery` is what the shell stores between decisions and hands back to
:func:`pipeline.machine.decide`; it is plain data (see :func:`delivery_to_data` and
:func:`delivery_from_data`). :func:`start` makes a new one when the label appears;
:func:`first_in_line` tells the shell which delivery on a base may merge next.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from kernel.codec import to_data
from kernel.durations import iso
from pipeline.stages import LINE_STAGES, CardKind, Mode, Stage

__all__ = [
    "Attempt",
    "Delivery",
    "HistoryEntry",
    "OpenCard",
    "Reviewed",
    "delivery_from_data",
    "delivery_to_data",
    "first_in_line",
    "in_line",
    "next_in_line",
    "start",
]

AttemptState = Literal["", "done", "head_moved", "conflict", "refused", "ambiguous"]


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryEntry:
    stage: Stage
    at: str  # ISO 8601 UTC
    outcome: str  # what led here ("started", or an Outcome)
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Reviewed:
    """A review the pipeline posted: the same head is never reviewed twice."""

    sha: str
    event: Literal["COMMENT", "REQUEST_CHANGES"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """A write (or agent run) we asked for, and what we heard back (``""``: nothing yet)."""

    key: str
    sha: str  # the head it was about
    at: str  # when we asked, ISO 8601 UTC
    outcome: AttemptState = ""
    heard: str = ""  # when the answer came (or was given up as lost), ISO 8601 UTC


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenCard:
    key: str
    kind: CardKind
    title: str
    text: str
    options: tuple[str, ...]
    blocked_at: Stage  # the stage that raised it


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    id: str  # deliver/owner/repo#12, one per pull request
    run: int  # 1, then 2 if the label comes back after the first run ended
    repo: str
    number: int
    mode: Mode
    stage: Stage
    head_sha: str
    base_ref: str = ""
    heads: tuple[str, ...] = ()  # this change: the head, then heads our own updates replaced
    stage_since: str = ""
    deadline: str | None = None  # ISO 8601 UTC: when the current stage's wait ends
    polls: int = 0  # consecutive re-reads while GitHub computes mergeability
    next_poll_at: str | None = None  # when the next of those re-reads is due
    reviewed: tuple[Reviewed, ...] = ()
    review_request: Attempt | None = None
    ready_request: Attempt | None = None
    update_request: Attempt | None = None  # its sha: the head we asked GitHub to update
    merge_attempt: Attempt | None = None  # set: that merge may have happened; settle first
    tries: int = 0  # writes asked for in this run: numbers their keys
    merge_sha: str | None = None
    probe_since: int = 1  # the first probe attempt of the current watch
    probe_attempt: int = 0  # the last probe asked for
    next_probe_at: str | None = None
    card: OpenCard | None = None
    cards: int = 0
    history: tuple[HistoryEntry, ...] = ()
    progress_seq: int = 0
    progress_digest: str = ""
    policy_problem: str = ""  # the policy problem last shown, "" when none
    # When it took its place in the merge line of its base; kept while its own branch
    # update takes it back through checks (it keeps its place), "" once it leaves.
    queued_at: str = ""
    # What it waits for at rest (the decision's Waiting), kept so that the ledger tells
    # the delivery's story: "" once it has ended.
    waiting_on: str = ""
    waiting_for: str = ""
    # The label that started it, as the policy spelt it then ("" in records from before
    # it was kept): a policy that renames its label later ends no delivery under way.
    label: str = ""

    @property
    def terminal(self) -> bool:
        return self.stage in ("delivered", "cancelled")

    @property
    def reconciling(self) -> bool:
        """The shell should fill ``base_contains_head`` in the next snapshot."""
        attempt = self.merge_attempt
        return self.merge_sha is None and attempt is not None and attempt.outcome == "ambiguous"

    def key(self, *parts: object) -> str:
        """An idempotency key of this run: ``deliver/acme/web#12/r1/merge/<sha>/3``."""
        return "/".join((self.id, f"r{self.run}", *(str(p) for p in parts)))


def start(
    *,
    repo: str,
    number: int,
    head_sha: str,
    mode: Mode,
    now: datetime,
    run: int = 1,
    by: str = "",
    label: str = "",
) -> Delivery:
    """A new delivery at ``review``; the shell calls :func:`~pipeline.machine.decide` next.
    ``label``: the label's name as the policy spells it (default: the mode's own)."""
    at = iso(now)
    label = label or ("deliver" if mode == "deliver" else "deliver-review")
    note = f"label {label} added by {by}" if by else f"label {label}"
    return Delivery(
        id=f"deliver/{repo}#{number}",
        run=run,
        repo=repo,
        number=number,
        mode=mode,
        stage="review",
        head_sha=head_sha,
        heads=(head_sha,),
        stage_since=at,
        history=(HistoryEntry(stage="review", at=at, outcome="started", note=note),),
        label=label,
    )


def in_line(delivery: Delivery) -> bool:
    """Whether ``delivery`` holds a place in the merge line of its base: it waits in
    ``merge``, or its place is kept while its branch is updated and checked again."""
    return delivery.stage == "merge" or (bool(delivery.queued_at) and delivery.stage in LINE_STAGES)


def _place(d: Delivery) -> tuple[str, int]:
    return (d.queued_at or d.stage_since, d.number)


def first_in_line(delivery: Delivery, others: Iterable[Delivery]) -> bool:
    """Whether ``delivery`` may merge now: no other live delivery on the same repository
    and base holds a place in the line ahead of it (it took its place earlier, then lower
    number). A delivery not in the line yet queues behind all that are."""
    mine = _place(delivery) if in_line(delivery) else None
    for other in others:
        if other.id == delivery.id or not in_line(other):
            continue
        if other.repo != delivery.repo or other.base_ref != delivery.base_ref:
            continue
        if mine is None or _place(other) < mine:
            return False
    return True


def next_in_line(others: Iterable[Delivery], repo: str, base_ref: str) -> Delivery | None:
    """The delivery whose turn it is on ``repo``'s ``base_ref`` (None: the line is empty)."""
    line = [d for d in others if in_line(d) and d.repo == repo and d.base_ref == base_ref]
    return min(line, key=_place, default=None)


# ------------------------------------------------------------------------------- codec


def delivery_to_data(delivery: Delivery) -> dict[str, Any]:
    """Plain JSON-able data; :func:`delivery_from_data` rebuilds the same value."""
    data: dict[str, Any] = to_data(delivery)
    return data


def delivery_from_data(data: Mapping[str, Any]) -> Delivery:
    def attempt(raw: Mapping[str, Any] | None) -> Attempt | None:
        return None if raw is None else Attempt(**raw)

    card = data.get("card")
    fields = dict(data)
    fields.update(
        heads=tuple(data.get("heads", ())),
        reviewed=tuple(Reviewed(**r) for r in data.get("reviewed", ())),
        review_request=attempt(data.get("review_request")),
        ready_request=attempt(data.get("ready_request")),
        update_request=attempt(data.get("update_request")),
        merge_attempt=attempt(data.get("merge_attempt")),
        card=None if card is None else OpenCard(**{**card, "options": tuple(card["options"])}),
        history=tuple(HistoryEntry(**h) for h in data.get("history", ())),
    )
    return Delivery(**fields)
