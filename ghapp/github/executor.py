"""Receipt actions in the ``github`` namespace, each applied to GitHub exactly once.

``hub.executors["github"] = GitHubExecutor(client, bot_login, app_id=app_id)``. The hub records an
attempt in the ledger *before* it calls :meth:`GitHubExecutor.perform`, so an action
that reaches us with ``attempts > 0`` may already have been applied (a crash, a lost
answer, a raised error). Every operation therefore follows one pattern:

- first attempt: write;
- a retry (``attempts > 0``), or a write whose answer was lost
  (:class:`~ghapp.github.errors.AmbiguousWrite`): read GitHub back first, and write only what
  is still missing (or edit what we wrote), never the same thing twice.

What we write is found again by a hidden marker plus our own author
(``<slug>[bot]``): comments carry ``<!-- autoloop:action=<action id> -->``, and so do
review bodies. The action id is the deterministic idempotency key.

| do | params | read back on a retry |
|---|---|---|
| ``github.comment`` | ``body`` | the issue's comments, by marker |
| ``github.label`` | ``labels`` | the issue's labels |
| ``github.unlabel`` | ``label`` or ``labels`` | the issue's labels |
| ``github.close`` / ``github.reopen`` | ``reason`` (close: completed, not_planned) | state |
| ``github.assign`` | ``assignees`` | the issue's assignees |
| ``github.review`` | ``event`` (APPROVE, REQUEST_CHANGES, COMMENT), ``body`` | reviews, by marker |
| ``github.merge`` | ``sha`` (the head decided on), ``method``, ``reconcile`` | the PR: merged? |
| ``github.update_branch`` | ``expected_head_sha`` | the PR: updated from that head? |
| ``github.ready`` | ``head_sha`` | the PR: still a draft? |
| ``github.progress`` | ``seq``, ``head_sha``, the check run's and comment's text | both |
| ``github.delete_branch`` | ``ref`` | the branch: gone? |

The last four are the delivery pipeline's (:mod:`ghapp.github.delivery`, which says
more). The merge answers the merge commit's ``sha``; with ``reconcile: true`` (the
pipeline's merges) a merge that reads back unmerged after an unclear answer is recorded
failed as ``[ambiguous]`` instead of being tried again, since the pipeline reconciles it.

Every action names ``repo`` (``owner/name``) and ``number``. Bad parameters and GitHub's
refusals (404, 403, 409, 422...) raise :class:`~plugins.protocols.ActionFailed`: the action is
recorded failed and a notice card says why; for the writes the pipeline reads back
(merge, review and the delivery's), the error starts with the outcome
(``[head_moved]``, ``[conflict]``, ``[refused]``, ``[ambiguous]``, see
:func:`ghapp.github.outcomes.write_result`). Transient trouble (no answer, 5xx, rate
limits) propagates: the action stays allowed and the next sweep retries it, reading
back first.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ghapp.github.client import GitHubClient
from ghapp.github.delivery import DeliveryWrites
from ghapp.github.errors import (
    AmbiguousWrite,
    GitHubError,
    RateLimited,
    ServerError,
    Unauthorized,
    Unreachable,
)
from ghapp.github.outcomes import TAGGED, outcome_of, refusal
from ghapp.github.snapshot import read_policy
from ghapp.github.writes import (
    MARK,
    Target,
    defuse,
    find_marked,
    login_of,
    marker,
    subject_target,
    target_of,
    thread_mentions,
)
from kernel.records import Action
from pipeline.policy import labels_of
from plugins.protocols import ActionFailed

__all__ = [
    "MARK",
    "GitHubExecutor",
    "Target",
    "defuse",
    "find_marked",
    "marker",
    "subject_target",
    "target_of",
]

log = logging.getLogger("autoloop.github")

MAX_ATTEMPTS = 20  # then the action is recorded failed instead of retried forever
REVIEW_EVENTS = ("APPROVE", "REQUEST_CHANGES", "COMMENT")
MERGE_METHODS = ("merge", "squash", "rebase")
CLOSE_REASONS = ("completed", "not_planned")
TRANSIENT = (AmbiguousWrite, RateLimited, ServerError, Unreachable, Unauthorized)

_SHA = re.compile(r"^[0-9a-fA-F]{7,64}$")

JSON = dict[str, Any]


def _names(params: Mapping[str, Any], key: str, *, single: str | None = None) -> list[str]:
    value = params.get(key)
    if value is None and single is not None and isinstance(params.get(single), str):
        value = [params[single]]
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(v, str) and v.strip() for v in value)
    ):
        what = f"'{key}'" + (f" (or '{single}')" if single else "")
        raise ActionFailed(f"{what} must be a non-empty list of names, not {value!r}")
    return [v.strip() for v in value]


def _text(params: Mapping[str, Any], key: str, *, required: bool = True) -> str:
    value = params.get(key, "" if not required else None)
    if not isinstance(value, str) or (required and not value.strip()):
        raise ActionFailed(f"'{key}' must be non-empty text, not {value!r}")
    return value


# --------------------------------------------------------------------------- the executor


class GitHubExecutor:
    """Performs ``github.*`` actions through one :class:`GitHubClient`."""

    def __init__(
        self,
        client: GitHubClient,
        bot_login: str,
        *,
        app_id: int | None = None,
        max_attempts: int = MAX_ATTEMPTS,
        mentions: Callable[[], Iterable[str]] = tuple,
        ledger: str = "",
    ) -> None:
        self.client = client
        self.bot_login = bot_login
        self.mentions = mentions  # rules.json's "mentions" (see writes.defuse)
        self.ledger = ledger  # the ledger's name, in each write's marker (action ids restart)
        self.max_attempts = max_attempts
        self.delivery = DeliveryWrites(client, bot_login, app_id=app_id, mentions=mentions)
        self._ops: dict[str, Callable[[Action, Target, bool], JSON]] = {
            "comment": self._comment,
            "label": self._label,
            "unlabel": self._unlabel,
            "close": lambda a, t, r: self._state(a, t, r, "closed"),
            "reopen": lambda a, t, r: self._state(a, t, r, "open"),
            "assign": self._assign,
            "review": self._review,
            "merge": self._merge,
            "update_branch": self.delivery.update_branch,
            "ready": self.delivery.ready,
            "progress": self.delivery.progress,
            "delete_branch": self.delivery.delete_branch,
        }

    def perform(self, action: Action) -> Mapping[str, Any]:
        ns, _, verb = action.do.partition(".")
        op = self._ops.get(verb) if ns == "github" else None
        if op is None:
            known = ", ".join(f"github.{v}" for v in self._ops)
            raise ActionFailed(f"unknown action {action.do!r}; this executor knows {known}")
        tagged = action.do in TAGGED
        if action.attempts >= self.max_attempts:
            text = (
                f"gave up after {action.attempts} attempts; the last error was: "
                f"{action.error or 'none recorded'}"
            )
            # Earlier attempts may have been applied: for the pipeline, that is unclear.
            raise refusal("ambiguous", text) if tagged else ActionFailed(text)
        target = target_of(action.params)
        try:
            return op(action, target, action.attempts > 0)
        except TRANSIENT:
            raise
        except GitHubError as exc:
            text = f"GitHub refused {action.do} on {target}: {exc}"
            raise (refusal(outcome_of(exc), text) if tagged else ActionFailed(text)) from exc

    # -- comments ----------------------------------------------------------------------

    def _comment(self, action: Action, t: Target, retry: bool) -> JSON:
        said = _text(action.params, "body")
        body = defuse(said, thread_mentions(self.client, t, [said], self.mentions()))
        text = f"{marker('action', action.id, self.ledger)}\n{body}"
        if not retry:
            try:
                made = self.client.create_comment(t.repo, t.number, text)
            except AmbiguousWrite:
                pass
            else:
                return {"comment": made.get("id"), "url": made.get("html_url")}
        return self.sticky_comment(t, marker("action", action.id, self.ledger), text)

    def sticky_comment(self, t: Target, mark: str, text: str) -> JSON:
        """Find our comment holding ``mark`` and make it say ``text``; create it if missing."""
        found = find_marked(self.client.list_issue_comments(t.repo, t.number), mark, self.bot_login)
        if found is None:
            made = self.client.create_comment(t.repo, t.number, text)
            return {"comment": made.get("id"), "url": made.get("html_url"), "read_back": True}
        if found.get("body") != text:
            self.client.update_comment(t.repo, int(found["id"]), text)
        return {"comment": found.get("id"), "url": found.get("html_url"), "read_back": True}

    # -- labels, state, assignees ----------------------------------------------------

    def _issue(self, t: Target) -> JSON:
        return self.client.get_issue(t.repo, t.number)

    @staticmethod
    def _label_names(issue: Mapping[str, Any]) -> set[str]:
        labels = issue.get("labels")
        out: set[str] = set()
        for label in labels if isinstance(labels, list) else []:
            name = label.get("name") if isinstance(label, Mapping) else label
            if isinstance(name, str):
                out.add(name.lower())
        return out

    def _label(self, action: Action, t: Target, retry: bool) -> JSON:
        want = _names(action.params, "labels", single="label")
        # A delivery label ends in a merge: a person with write access adds it, never an
        # agent (the write-back acts as this App, or in the Action as a person's token,
        # whose label would count).
        ours = {name.casefold() for name in self._delivery_labels(t.repo)}
        if refused := [n for n in want if n.casefold() in ours]:
            raise ActionFailed(
                f"{', '.join(refused)}: a delivery label is for a person with write access "
                "to add, not an agent's write-back"
            )
        todo = want
        if retry:
            have = self._label_names(self._issue(t))
            todo = [n for n in want if n.lower() not in have]
        read_back = retry
        if todo:
            try:
                self.client.add_labels(t.repo, t.number, todo)
            except AmbiguousWrite:
                read_back = True
                have = self._label_names(self._issue(t))
                rest = [n for n in todo if n.lower() not in have]
                if rest:
                    self.client.add_labels(t.repo, t.number, rest)
        return {"labels": want, "added": todo, "read_back": read_back}

    def _delivery_labels(self, repo: str) -> tuple[str, ...]:
        """The delivery labels of ``repo``: the defaults and its policy's own names."""
        names = {"deliver", "deliver-review"}
        try:
            policy = read_policy(self.client, repo)
        except GitHubError as exc:  # the defaults still hold; the policy's names are unknown
            log.warning("the delivery labels of %s cannot be read: %s", repo, exc)
            return tuple(sorted(names))
        labels = labels_of(policy)
        return tuple(sorted(names | {labels.deliver, labels.review}))

    def _unlabel(self, action: Action, t: Target, retry: bool) -> JSON:
        want = _names(action.params, "labels", single="label")
        todo = want
        if retry:
            have = self._label_names(self._issue(t))
            todo = [n for n in want if n.lower() in have]
        removed: list[str] = []
        read_back = retry
        for name in todo:
            try:
                if self.client.remove_label(t.repo, t.number, name):
                    removed.append(name)
            except AmbiguousWrite:
                read_back = True
                if name.lower() in self._label_names(self._issue(t)):
                    raise
                removed.append(name)
        return {"labels": want, "removed": removed, "read_back": read_back}

    def _state(self, action: Action, t: Target, retry: bool, state: str) -> JSON:
        reason = action.params.get("reason")
        if state == "closed" and reason is not None and reason not in CLOSE_REASONS:
            raise ActionFailed(
                f"'reason' must be one of {', '.join(CLOSE_REASONS)}, not {reason!r}"
            )
        if retry and self._issue(t).get("state") == state:
            return {"state": state, "changed": False, "read_back": True}
        try:
            self.client.set_issue_state(
                t.repo,
                t.number,
                "closed" if state == "closed" else "open",
                state_reason=reason if isinstance(reason, str) else None,
            )
        except AmbiguousWrite:
            if self._issue(t).get("state") != state:
                raise
            return {"state": state, "changed": True, "read_back": True}
        return {"state": state, "changed": True, "read_back": retry}

    def _assign(self, action: Action, t: Target, retry: bool) -> JSON:
        want = _names(action.params, "assignees", single="assignee")
        todo = want
        if retry:
            have = {login_of(a) for a in self._issue(t).get("assignees") or []}
            todo = [n for n in want if n.lower() not in have]
        read_back = retry
        if todo:
            try:
                self.client.add_assignees(t.repo, t.number, todo)
            except AmbiguousWrite:
                read_back = True
                have = {login_of(a) for a in self._issue(t).get("assignees") or []}
                rest = [n for n in todo if n.lower() not in have]
                if rest:
                    self.client.add_assignees(t.repo, t.number, rest)
        return {"assignees": want, "added": todo, "read_back": read_back}

    # -- pull requests -----------------------------------------------------------------

    def _reviews(self, t: Target) -> list[JSON]:
        return self.client.list_reviews(t.repo, t.number)

    def _review(self, action: Action, t: Target, retry: bool) -> JSON:
        event = action.params.get("event")
        if event not in REVIEW_EVENTS:
            raise ActionFailed(f"'event' must be one of {', '.join(REVIEW_EVENTS)}, not {event!r}")
        body = _text(action.params, "body", required=event != "APPROVE")
        sha = action.params.get("sha")
        if sha is not None and not (isinstance(sha, str) and _SHA.match(sha)):
            raise ActionFailed(f"'sha' must be a commit sha, not {sha!r}")
        mark = marker("action", action.id, self.ledger)
        text = f"{mark}\n{defuse(body, thread_mentions(self.client, t, [body], self.mentions()))}"
        if retry:
            found = find_marked(self._reviews(t), mark, self.bot_login)
            if found is not None:
                return {"review": found.get("id"), "read_back": True}
        try:
            made = self.client.create_review(
                t.repo, t.number, event=str(event), body=text, commit_id=sha
            )
        except AmbiguousWrite:
            found = find_marked(self._reviews(t), mark, self.bot_login)
            if found is None:
                raise
            return {"review": found.get("id"), "read_back": True}
        return {"review": made.get("id"), "read_back": retry}

    def _merge(self, action: Action, t: Target, retry: bool) -> JSON:
        sha = action.params.get("sha")
        if not isinstance(sha, str) or not _SHA.match(sha):
            raise ActionFailed(
                f"'sha' must be the head commit the merge was decided on, not {sha!r}"
            )
        method = action.params.get("method", "merge")
        if method not in MERGE_METHODS:
            raise ActionFailed(
                f"'method' must be one of {', '.join(MERGE_METHODS)}, not {method!r}"
            )
        # ``reconcile``: the caller (the delivery pipeline) settles an unclear merge by
        # reading the PR back itself, so one that is not merged yet is reported as
        # unclear and never attempted again by this action.
        reconcile = action.params.get("reconcile") is True
        if retry:
            done = self._merged(t, sha)
            if done is not None:
                return done
            if reconcile:
                raise refusal("ambiguous", f"an earlier attempt to merge {t} may be under way")
        try:
            made = self.client.merge_pull(t.repo, t.number, sha=sha, merge_method=str(method))
        except AmbiguousWrite as exc:
            # Never merge twice: read the pull request back; if it is not merged, the
            # next sweep tries again (and reads back first).
            done = self._merged(t, sha)
            if done is not None:
                return done
            if reconcile:
                raise refusal("ambiguous", f"no clear answer to the merge of {t}: {exc}") from exc
            raise
        return {"merged": True, "sha": made.get("sha"), "read_back": retry}

    def _merged(self, t: Target, sha: str) -> JSON | None:
        """The result if the PR is merged already; None if a merge may still be tried."""
        pr = self.client.get_pull(t.repo, t.number)
        if pr.get("merged") is True:
            return {"merged": True, "sha": pr.get("merge_commit_sha"), "read_back": True}
        if pr.get("state") == "closed":
            raise refusal("refused", f"{t} was closed without being merged")
        head = pr.get("head")
        head_sha = head.get("sha") if isinstance(head, Mapping) else None
        if isinstance(head_sha, str) and head_sha.lower() != sha.lower():
            raise refusal(
                "head_moved", f"the head of {t} moved from {sha} to {head_sha}; not merged"
            )
        return None
