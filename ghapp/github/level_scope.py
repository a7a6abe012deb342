"""Which pull requests one level-triggered run looks at (:mod:`ghapp.github.level`).

- An event about a pull request names it: its own events (``pull_request``, reviews,
  review comments), a comment on it, a check run, check suite or workflow run that lists
  it (:func:`named_pull`).
- An event that names none (a commit status, a check on a commit no pull request lists,
  a deployment, a push, the clock, a manual dispatch) looks at the pull requests that
  carry a delivery label: the open ones, and those merged within the policy's deployment
  watch (twice its ``timeout`` and an hour; none when it watches no deployment)
  (:func:`labelled_pulls`). Of those, a delivery is moved when the event may concern it
  (:func:`concerned`): a check or a status on its head or merge commit, a deployment while
  it watches deployments, a push to the base it is about to merge into (or that may fix a
  policy problem); the clock and anything else concern every one; and so does any event
  when the pull request shows what the delivery's state does not know yet (merged,
  closed, a new head: a run that saw it ended before it could show it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ghapp.github.client import GitHubClient
from ghapp.github.level_cards import instant
from ghapp.github.names import REPO_NAME
from kernel.model import Event
from pipeline import Delivery, Labels, Policy, PolicyProblem

__all__ = ["WATCH_MARGIN_S", "concerned", "labelled_pulls", "named_pull"]

WATCH_MARGIN_S = 3600  # merged pull requests are looked at for 2 deploy timeouts plus this

_SUBJECT = re.compile(r"^(" + REPO_NAME + r")#([0-9]+)$")
_PULL_EVENTS = ("pull_request.", "pull_request_review.", "pull_request_review_comment.")
_LISTING_EVENTS = ("check_run.", "check_suite.", "workflow_run.")
_COMMIT_EVENTS = ("status.", *_LISTING_EVENTS)
_DEPLOY_EVENTS = ("deployment.", "deployment_status.")
_BASE_STAGES = frozenset({"checks", "update_branch", "merge"})
_DEPLOY_STAGES = frozenset({"deployment", "live_version"})

JSON = dict[str, Any]


def named_pull(event: Event, repo: str) -> int:
    """The pull request of ``repo`` that ``event`` is about, or 0 (none, or an issue)."""
    found = _SUBJECT.match(event.subject)
    if found is None or found.group(1).lower() != repo.lower():
        return 0
    number = int(found.group(2))
    if event.type.startswith(_PULL_EVENTS) or event.type.startswith(_LISTING_EVENTS):
        return number
    if event.type.startswith("issue_comment.") and event.details.get("is_pull_request"):
        return number
    return 0


def names_none(event: Event) -> bool:
    """An event about no pull request, that may concern deliveries all the same (an
    issue's own events and comments on issues concern none)."""
    return not event.type.startswith(("issues.", "issue_comment."))


def concerned(d: Delivery, pull: Mapping[str, Any], about: Iterable[Event]) -> bool:
    """Whether one of ``about`` (events naming no pull request) may move ``d``; always
    when ``pull`` (as just read) says what ``d`` does not know yet: merged, closed, or
    pushed to (a run that knew it ended before it could show it)."""
    head = _text(pull.get("head") if isinstance(pull.get("head"), Mapping) else {}, "sha")
    if head and head != d.head_sha and not d.merge_sha:
        return True
    if pull.get("state") == "closed" and d.stage not in _DEPLOY_STAGES:
        return True
    commits = {d.head_sha, d.merge_sha or ""} - {""}
    for event in about:
        details = event.details
        sha = _text(details, "head_sha") or _text(details, "sha")
        if event.type.startswith(_COMMIT_EVENTS):
            if not sha or sha in commits:
                return True
        elif event.type.startswith(_DEPLOY_EVENTS):
            if d.stage in _DEPLOY_STAGES or sha in commits:
                return True
        elif event.type == "push":
            branch = _text(details, "branch")
            on_base = branch == d.base_ref and d.stage in _BASE_STAGES
            changed = details.get("policy_changed") is True  # decide under the new policy
            if not branch or on_base or d.policy_problem or changed:
                return True
        else:
            return True  # the clock, a dispatch, anything else
    return False


def labelled_pulls(
    client: GitHubClient,
    repo: str,
    labels: Labels,
    policy: Policy | PolicyProblem,
    now: datetime,
) -> list[JSON]:
    """Open pull requests carrying a delivery label, and those merged with the ``deliver``
    label within the deployment watch (only when the policy watches deployments). The
    default names count too: a delivery keeps the label that started it, and one
    labelled ``deliver`` before the policy renamed its label was never moved by the
    clock (a pull request with one of them and no delivery starts nothing)."""
    default = Labels()
    names = {n.casefold() for n in (labels.deliver, labels.review, default.deliver, default.review)}
    found = [p for p in client.list_pulls(repo, state="open") if has_label(p, names)]
    deploy = policy.deploy if isinstance(policy, Policy) else None
    if deploy is None:
        return found
    cutoff = now - timedelta(seconds=2 * deploy.timeout_s + WATCH_MARGIN_S)

    def recent(pull: JSON) -> bool:
        updated = _text(pull, "updated_at")
        return not updated or instant(updated) >= cutoff

    deliver = {labels.deliver.casefold(), default.deliver.casefold()}
    for pull in client.list_pulls(
        repo, state="closed", sort="updated", direction="desc", keep=recent
    ):
        merged = _text(pull, "merged_at")
        if merged and instant(merged) >= cutoff and has_label(pull, deliver):
            found.append(pull)
    return found


def has_label(pull: Mapping[str, Any], names: set[str]) -> bool:
    """Whether ``pull`` carries one of ``names`` (case-folded)."""
    labels = pull.get("labels")
    if not isinstance(labels, list):
        return False
    return any(
        isinstance(label, Mapping) and _text(label, "name").casefold() in names for label in labels
    )


def _text(data: object, key: str) -> str:
    value = data.get(key) if isinstance(data, Mapping) else None
    return value if isinstance(value, str) else ""
