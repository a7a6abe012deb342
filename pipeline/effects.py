"""What the pipeline asks the shell to do: imperative, frozen values.

Every effect carries ``key``, a deterministic idempotency key derived from the delivery
and the commit it is about (``deliver/acme/web#12/r1/merge/<sha>/1``), so that the
shell's outbox performs each exactly once however often a decision is replayed. The
shell reports how a write ended as a :class:`~pipeline.snapshot.WriteResult` with the
same key in the next snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.policy import MergeMethod

__all__ = [
    "CARD_SLOT",
    "DeleteBranch",
    "Effect",
    "MarkReady",
    "Merge",
    "PostReview",
    "ProbeVersion",
    "Progress",
    "RaiseCard",
    "RequestReview",
    "ResolveCard",
    "UpdateBranch",
]

CARD_SLOT = "{card}"  # in a Progress comment: the shell puts the card's id here


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestReview:
    """Run ``agent`` read-only on a snapshot of the PR at ``head_sha`` (its diff and file
    list given as data files, never checked out or run), then report its findings as a
    :class:`~pipeline.snapshot.ReviewFindings` whose ``request`` is this ``key``."""

    key: str
    agent: str
    head_sha: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PostReview:
    key: str
    head_sha: str  # the review's commit_id
    event: Literal["COMMENT", "REQUEST_CHANGES", "APPROVE"]
    body: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkReady:
    """Turn the draft PR into one ready for review (only if its head is still ``head_sha``)."""

    key: str
    head_sha: str


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateBranch:
    """``PUT .../update-branch`` with ``expected_head_sha``."""

    key: str
    expected_head_sha: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Merge:
    """``PUT .../merge`` with ``sha`` as the guard; never retried blindly on a lost answer:
    report ``ambiguous`` and the pipeline reconciles by reading the PR back."""

    key: str
    sha: str
    method: MergeMethod


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteBranch:
    key: str
    ref: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeVersion:
    """GET ``url``, read ``field`` of the JSON answer, say whether that commit is
    ``merge_sha`` or a descendant, and report a
    :class:`~pipeline.snapshot.VersionObservation` with this ``attempt``."""

    key: str
    url: str
    field: str
    merge_sha: str
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RaiseCard:
    """Ask a person (``options``: a question, answered with ``/answer CARD N``) or tell
    them (no options). ``card`` is the card key answers name."""

    key: str
    card: str
    title: str
    text: str
    options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolveCard:
    key: str
    card: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """Update, in place, the check run ``autoloop/deliver`` on ``head_sha`` and the one
    sticky comment. ``seq`` grows with each one: the shell applies a Progress only when
    its ``seq`` is above the last one it applied. ``CARD_SLOT`` in the comment is to be
    replaced with the id of the delivery's open card."""

    key: str
    seq: int
    head_sha: str
    check_title: str
    check_status: Literal["in_progress", "completed"]
    check_conclusion: Literal["success", "failure", "neutral"] | None
    check_summary: str
    comment_body: str


Effect = (
    RequestReview
    | PostReview
    | MarkReady
    | UpdateBranch
    | Merge
    | DeleteBranch
    | ProbeVersion
    | RaiseCard
    | ResolveCard
    | Progress
)
