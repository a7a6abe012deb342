"""The pipeline's effects as outbox actions, and the outbox's records as its answers.

:func:`effect_action` turns an effect of :func:`pipeline.decide` into the ``(do, params)``
of the ``github.*`` action that carries it out (the effect's key goes along as
``params["key"]``). :func:`write_result` reads the outbox's record of that action back
as the :class:`~pipeline.snapshot.WriteResult` the next snapshot carries.

The outbox keeps a failed action's error as text only, so the executor writes the
outcome first in the error of the writes the pipeline reads (:data:`TAGGED`):
``[head_moved] ...``, ``[conflict] ...``, ``[refused] ...``, ``[ambiguous] ...``
(:func:`refusal`; :func:`outcome_of` says what a GitHub refusal means).
"""

from __future__ import annotations

import re
from typing import Any

from ghapp.github.errors import Conflict, GitHubError, Unprocessable
from kernel.records import Action
from pipeline.delivery import Delivery
from pipeline.effects import (
    CARD_SLOT,
    DeleteBranch,
    Effect,
    MarkReady,
    Merge,
    PostReview,
    Progress,
    UpdateBranch,
)
from pipeline.snapshot import WriteOutcome, WriteResult
from plugins.protocols import ActionFailed

__all__ = ["TAGGED", "effect_action", "outcome_of", "refusal", "write_result"]

#: The actions whose refusals carry their outcome (the pipeline reads their answers).
TAGGED = frozenset(
    {
        "github.merge",
        "github.review",
        "github.update_branch",
        "github.ready",
        "github.progress",
        "github.delete_branch",
    }
)
OUTCOMES: tuple[WriteOutcome, ...] = ("done", "head_moved", "conflict", "refused", "ambiguous")

_TAG = re.compile(r"^\[(done|head_moved|conflict|refused|ambiguous)\] ?")


# ---------------------------------------------------------------------------- outcomes


def refusal(outcome: WriteOutcome, text: str) -> ActionFailed:
    """A refusal whose recorded error says its outcome first (``[head_moved] ...``)."""
    return ActionFailed(f"[{outcome}] {text}")


def outcome_of(exc: GitHubError) -> WriteOutcome:
    """What a refusal from GitHub means to the pipeline.

    409 (the merge's "Head branch was modified") and a 422 "expected head sha didn't
    match" are ``head_moved``; a 422 about a merge conflict (a branch update) is
    ``conflict``; anything else (405 not mergeable, 403, 404, other 422s) ``refused``.
    """
    message = exc.message.lower()
    if isinstance(exc, Conflict) or "expected head sha" in message:
        return "head_moved"
    if isinstance(exc, Unprocessable) and "conflict" in message:
        return "conflict"
    return "refused"


def write_result(action: Action) -> WriteResult | None:
    """How the outbox says ``action`` ended, as the pipeline's answer to the effect whose
    key the action carries (``params["key"]``, else the action id).

    done: ``done`` (a merge's ``merge_commit_sha`` is the commit it made); failed: the
    outcome its error names (an error without one is ``refused``); refused or declined
    by the rules or a person: ``refused``; still to be retried after an attempt that
    left an error (no answer, 5xx, rate limit): ``ambiguous``, as it may yet happen.
    None while nothing is known (not attempted yet, awaiting approval, being attempted).
    """
    key = action.params.get("key")
    key = key if isinstance(key, str) and key else action.id
    if action.status == "done":
        sha = action.result.get("sha") if action.do == "github.merge" else None
        return WriteResult(
            key=key, outcome="done", merge_commit_sha=sha if isinstance(sha, str) else None
        )
    if action.status == "failed":
        found = _TAG.match(action.error)
        outcome: WriteOutcome = "refused"
        for known in OUTCOMES:
            if found is not None and found.group(1) == known:
                outcome = known
        message = action.error[found.end() :] if found else action.error
        return WriteResult(key=key, outcome=outcome, message=message)
    if action.status in ("refused", "declined"):
        return WriteResult(key=key, outcome="refused", message=action.error or action.status)
    if action.status == "allowed" and action.attempts > 0 and action.error:
        return WriteResult(key=key, outcome="ambiguous", message=action.error)
    return None


# ----------------------------------------------------------------------------- effects


def effect_action(
    delivery: Delivery, effect: Effect, *, card_id: str = ""
) -> tuple[str, dict[str, Any]] | None:
    """The ``(do, params)`` of the action that carries out ``effect`` on GitHub, or None
    for an effect that is not a GitHub write (agent runs, cards, probes).

    ``card_id``: the id of the delivery's open card, put in place of ``{card}`` in a
    progress comment.
    """
    base: dict[str, Any] = {"repo": delivery.repo, "number": delivery.number, "key": effect.key}
    if isinstance(effect, Merge):
        # The pipeline reconciles an unclear merge itself: the outbox must not retry it.
        params = {**base, "sha": effect.sha, "method": effect.method, "reconcile": True}
        return "github.merge", params
    if isinstance(effect, UpdateBranch):
        return "github.update_branch", {**base, "expected_head_sha": effect.expected_head_sha}
    if isinstance(effect, MarkReady):
        return "github.ready", {**base, "head_sha": effect.head_sha}
    if isinstance(effect, DeleteBranch):
        return "github.delete_branch", {**base, "ref": effect.ref}
    if isinstance(effect, PostReview):
        params = {**base, "event": effect.event, "body": effect.body, "sha": effect.head_sha}
        return "github.review", params
    if isinstance(effect, Progress):
        body = effect.comment_body.replace(CARD_SLOT, card_id) if card_id else effect.comment_body
        return "github.progress", {
            **base,
            "seq": effect.seq,
            "head_sha": effect.head_sha,
            "check_title": effect.check_title,
            "check_status": effect.check_status,
            "check_conclusion": effect.check_conclusion,
            "check_summary": effect.check_summary,
            "comment_body": body,
        }
    return None
