"""The delivery's stages and every move between them, as tables.

``TABLE[mode][(stage, outcome)]`` is the next stage. The machine computes an outcome
at the current stage (a verdict, an answer to one of our writes, a person's choice)
and looks the move up here; a row the table lacks raises
:class:`~pipeline.errors.MissingTransition`, never a silent no-op. A row that leads
back to its own stage is a wait.

``CARDS`` lists the cards a delivery can raise when it blocks: their options, in order,
and the outcome each choice leads to from ``blocked``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pipeline.errors import MissingTransition

__all__ = [
    "CARDS",
    "GUARDS",
    "LINE_STAGES",
    "POST_MERGE",
    "PRE_MERGE",
    "TABLE",
    "TERMINAL",
    "CardKind",
    "Mode",
    "Outcome",
    "Stage",
    "next_stage",
]

Mode = Literal["deliver", "review"]
Stage = Literal[
    "review",  # the review the policy asks for (none, approvals:N, agent:NAME)
    "ready",  # draft to ready for review
    "checks",  # the required checks on the head
    "update_branch",  # bring the branch up to date with its base
    "merge",  # merge with the head-SHA guard, one delivery per base at a time
    "deployment",  # a deployment of the merge commit (or a descendant) succeeded
    "live_version",  # the version URL reports the merge commit, `matches` times in a row
    "delivered",  # terminal: merged and (when asked) deployed and live
    "reviewed",  # deliver-review: the head is reviewed; waits for the next push
    "blocked",  # a card is out: a person decides (or, for a conflict, pushes)
    "cancelled",  # terminal: label removed, PR closed, or a person said stop
]
Outcome = Literal[
    # guards, checked before the stage itself
    "closed",  # the PR was closed without merging (in deliver-review: or merged)
    "unlabeled",  # the label that started the delivery is gone
    "new_head",  # someone pushed: start again from the review
    "updated",  # the new head is our own branch update: back to the checks
    "merged",  # the PR is merged (by us or by a person)
    # stage outcomes
    "waiting",
    "passed",
    "changes_requested",
    "skipped",
    "failed",
    "timeout",
    "ready",
    "refused",
    "conflict",
    "draft",
    "update",
    "checks_changed",
    "review_changed",
    "unclear",
    "not_merged",
    "deployed",
    "nothing_to_watch",
    "live",
    # a person's answer to a card
    "retry_review",
    "retry_ready",
    "wait_checks",
    "retry_merge",
    "is_merged",
    "wait_deploy",
    "watch_version",
    "stop",
]
CardKind = Literal[
    "review_failed",
    "ready_refused",
    "checks_timeout",
    "conflict",
    "update_failed",
    "merge_refused",
    "merge_unclear",
    "not_mergeable",
    "deploy_failed",
    "deploy_timeout",
    "version_timeout",
]

TERMINAL: frozenset[Stage] = frozenset({"delivered", "cancelled"})
PRE_MERGE: tuple[Stage, ...] = ("review", "ready", "checks", "update_branch", "merge", "blocked")
POST_MERGE: tuple[Stage, ...] = ("deployment", "live_version")
# The stages a delivery keeps its place in the merge line through (its own branch update
# takes it from merge back through checks).
LINE_STAGES: tuple[Stage, ...] = ("update_branch", "checks", "merge")

# The guards, checked at every decision before the stage itself. Before the merge a
# delivery can be closed, unlabeled, pushed to or merged by a person; after it, only the
# label can go away.
GUARDS: Mapping[Outcome, Stage] = {
    "closed": "cancelled",
    "unlabeled": "cancelled",
    "new_head": "review",
    "updated": "checks",
    "merged": "deployment",
}

_DELIVER: dict[tuple[Stage, Outcome], Stage] = {
    **{(stage, guard): nxt for stage in PRE_MERGE for guard, nxt in GUARDS.items()},
    **{(stage, "unlabeled"): "cancelled" for stage in POST_MERGE},
    ("review", "waiting"): "review",  # approvals, or the agent's findings, not in yet
    ("review", "changes_requested"): "review",  # until the next push
    ("review", "passed"): "ready",
    ("review", "failed"): "blocked",  # the review agent failed
    ("review", "timeout"): "blocked",  # the review agent never answered
    ("ready", "waiting"): "ready",
    ("ready", "ready"): "checks",
    ("ready", "refused"): "blocked",
    ("checks", "waiting"): "checks",
    ("checks", "passed"): "merge",
    ("checks", "draft"): "ready",
    ("checks", "conflict"): "blocked",
    ("checks", "timeout"): "blocked",  # a card names the checks that never reported
    ("update_branch", "waiting"): "update_branch",  # for GitHub to push the update
    ("update_branch", "conflict"): "blocked",
    ("update_branch", "refused"): "blocked",
    ("update_branch", "timeout"): "blocked",
    ("merge", "waiting"): "merge",  # mergeability, the line, our merge's answer
    ("merge", "update"): "update_branch",
    ("merge", "draft"): "ready",
    ("merge", "checks_changed"): "checks",
    ("merge", "review_changed"): "review",
    ("merge", "conflict"): "blocked",
    ("merge", "refused"): "blocked",
    ("merge", "unclear"): "blocked",  # the base holds the head, the PR looks unmerged
    ("merge", "timeout"): "blocked",  # GitHub would not call it mergeable in time
    ("merge", "not_merged"): "checks",  # an unclear merge, read back: it did not happen
    ("deployment", "waiting"): "deployment",
    ("deployment", "deployed"): "live_version",
    ("deployment", "nothing_to_watch"): "delivered",  # no [deliver.deploy] table
    ("deployment", "failed"): "blocked",
    ("deployment", "timeout"): "blocked",
    ("live_version", "waiting"): "live_version",
    ("live_version", "live"): "delivered",
    ("live_version", "nothing_to_watch"): "delivered",  # no version_url
    ("live_version", "timeout"): "blocked",  # never matched, or flapped past the deadline
    ("blocked", "waiting"): "blocked",
    ("blocked", "retry_review"): "review",
    ("blocked", "retry_ready"): "ready",
    ("blocked", "wait_checks"): "checks",
    ("blocked", "retry_merge"): "checks",
    ("blocked", "is_merged"): "deployment",
    ("blocked", "wait_deploy"): "deployment",
    ("blocked", "watch_version"): "live_version",
    ("blocked", "stop"): "cancelled",
}

_REVIEW: dict[tuple[Stage, Outcome], Stage] = {
    **{
        (stage, guard): GUARDS[guard]
        for stage in ("review", "reviewed", "blocked")
        for guard in ("closed", "unlabeled", "new_head")
    },
    ("review", "waiting"): "review",  # the agent's findings
    ("review", "passed"): "reviewed",  # posted as COMMENT (or already was, for this head)
    ("review", "changes_requested"): "reviewed",  # posted as REQUEST_CHANGES
    ("review", "skipped"): "reviewed",  # the policy's review is not an agent
    ("review", "failed"): "blocked",
    ("review", "timeout"): "blocked",
    ("reviewed", "waiting"): "reviewed",  # for the next push
    ("blocked", "waiting"): "blocked",
    ("blocked", "retry_review"): "review",
    ("blocked", "stop"): "cancelled",
}

TABLE: Mapping[Mode, Mapping[tuple[Stage, Outcome], Stage]] = {
    "deliver": _DELIVER,
    "review": _REVIEW,
}

Option = tuple[str, Outcome]  # what a person reads, and where choosing it leads
_STOP: Option = ("stop this delivery", "stop")
_STOP_WATCHING: Option = ("stop watching (the merge stays)", "stop")
CARDS: Mapping[CardKind, tuple[Option, ...]] = {
    "review_failed": (("request the review again", "retry_review"), _STOP),
    "ready_refused": (("mark it ready again", "retry_ready"), _STOP),
    "checks_timeout": (("wait for the checks again", "wait_checks"), _STOP),
    "conflict": (),  # a notice: the next push resolves it
    "update_failed": (("try again from the checks", "retry_merge"), _STOP),
    "merge_refused": (("try the merge again from the checks", "retry_merge"), _STOP),
    "merge_unclear": (("it is merged: go on to the deployment", "is_merged"), _STOP),
    "not_mergeable": (("wait again from the checks", "retry_merge"), _STOP),
    "deploy_failed": (("wait for a deployment again", "wait_deploy"), _STOP_WATCHING),
    "deploy_timeout": (("wait for a deployment again", "wait_deploy"), _STOP_WATCHING),
    "version_timeout": (("watch the live version again", "watch_version"), _STOP_WATCHING),
}


def next_stage(mode: Mode, stage: Stage, outcome: Outcome) -> Stage:
    """The stage ``outcome`` leads to from ``stage``; a missing row is a bug."""
    try:
        return TABLE[mode][(stage, outcome)]
    except KeyError:
        raise MissingTransition(mode, stage, outcome) from None
