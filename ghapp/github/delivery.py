"""The delivery pipeline's own writes to GitHub, each made exactly once.

:class:`~ghapp.github.executor.GitHubExecutor` performs these ``do`` kinds beside
``github.merge`` and ``github.review`` (which it already had). Like the others, a first
attempt writes; a retry (``attempts > 0``) or a lost answer reads GitHub back first:

- ``github.update_branch`` (``expected_head_sha``): ``PUT .../update-branch``; read back:
  is the PR's head now a merge commit whose first parent is that sha?
- ``github.ready`` (``head_sha``): GraphQL's ``markPullRequestReadyForReview`` (GitHub has
  no REST call for it), by the PR's ``node_id``; read back: is it still a draft?
- ``github.progress`` (``seq``, ``head_sha``, ``check_title``, ``check_status``,
  ``check_conclusion``, ``check_summary``, ``comment_body``, and optionally ``state``):
  our check run ``autoloop/deliver`` on the head, found by name and our app, and our one
  sticky comment, found by its marker ``<!-- autoloop:deliver=<repo>#<n> -->``, each
  created or updated in place. ``state`` (the delivery's record, encoded by
  :mod:`ghapp.github.carried`) goes into both as a hidden marker, for runs that keep no
  ledger.
- ``github.delete_branch`` (``ref``): ``DELETE .../git/refs/heads/<ref>``, only for the
  merged PR's own branch still at the merged head; read back: is the branch gone?

``github.progress`` is applied only when its ``seq`` is above the one written in the
sticky comment (``<!-- autoloop:seq=N -->``): an older progress never overwrites a newer
one. It updates the check run first and the comment last, so the comment's seq says the
whole progress was shown.

How a write ended reaches the pipeline through :mod:`ghapp.github.outcomes`: a refusal
raised here names its outcome first (``[head_moved] ...``), see
:func:`~ghapp.github.outcomes.refusal`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ghapp.github.client import GitHubClient
from ghapp.github.errors import AmbiguousWrite, GitHubError, Unprocessable
from ghapp.github.outcomes import refusal
from ghapp.github.writes import JSON, Target, defuse, find_marked, marker, thread_mentions
from kernel.records import Action
from pipeline.policy import OWN_CHECK
from plugins.protocols import ActionFailed

__all__ = ["DeliveryWrites", "shown_seq"]

CHECK_STATUSES = ("in_progress", "completed")
CHECK_CONCLUSIONS = ("success", "failure", "neutral")
SUMMARY_MAX = 65_000  # GitHub refuses a check run summary over 65535 characters

_SHA = re.compile(r"^[0-9a-fA-F]{7,64}$")
log = logging.getLogger("autoloop.github.delivery")
_SEQ = re.compile(r"<!-- autoloop:seq=([0-9]{1,12}) -->")
_HEAD = re.compile(r"<!-- autoloop:head=([0-9a-f]{40}) -->")  # the head the comment showed
_STATE = re.compile(r"^[A-Za-z0-9_-]{1,64000}$")  # base64url, as ghapp.github.carried writes it


# ------------------------------------------------------------------------------ params


def _sha(params: Mapping[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not _SHA.match(value):
        raise ActionFailed(f"'{key}' must be a commit sha, not {value!r}")
    return value


def _string(params: Mapping[str, Any], key: str, *, allow_empty: bool = False) -> str:
    value = params.get(key)
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise ActionFailed(f"'{key}' must be non-empty text, not {value!r}")
    return value


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _head(pull: Mapping[str, Any]) -> str:
    head = pull.get("head")
    sha = head.get("sha") if isinstance(head, Mapping) else None
    return sha.lower() if isinstance(sha, str) else ""


def _same(a: str, b: str) -> bool:
    return bool(a) and a.lower() == b.lower()


# ------------------------------------------------------------------------------ writes


class DeliveryWrites:
    """The ``github.*`` kinds the delivery adds, for :class:`GitHubExecutor` to call.

    ``app_id``: our App's id, to know our own check runs (else they are known by the
    App's slug, taken from ``bot_login``).
    """

    def __init__(
        self,
        client: GitHubClient,
        bot_login: str,
        *,
        app_id: int | None = None,
        mentions: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        self.client = client
        self.bot_login = bot_login
        self.app_id = app_id
        self.mentions = mentions  # rules.json's "mentions" (see writes.defuse)
        self.slug = bot_login.lower().removesuffix("[bot]")
        # One progress write per pull request at a time in this process: two of them (a
        # newer one, and the sweep's retry of an older one) must not both find no sticky
        # comment and both create one.
        self._shown: dict[str, threading.Lock] = {}
        self._shown_guard = threading.Lock()

    # -- update the branch ----------------------------------------------------------------

    def update_branch(self, action: Action, t: Target, retry: bool) -> JSON:
        expected = _sha(action.params, "expected_head_sha")
        if retry:
            done = self._updated(t, expected)
            if done is not None:
                return done
        try:
            self.client.update_branch(t.repo, t.number, expected_head_sha=expected)
        except AmbiguousWrite:
            done = self._updated(t, expected)
            if done is None:
                raise
            return done
        except Unprocessable as exc:
            if "no new commits" in exc.message.lower():
                return {"updated": False, "up_to_date": True, "read_back": retry}
            raise
        return {"updated": True, "read_back": retry}

    def _updated(self, t: Target, expected: str) -> JSON | None:
        """The result if the branch was updated from ``expected`` already; None if the
        head is still ``expected`` (an update may still be asked for)."""
        head = _head(self.client.get_pull(t.repo, t.number))
        if not head or _same(head, expected):
            return None
        commit = self.client.get_commit(t.repo, head)
        parents = [p.get("sha") for p in commit.get("parents") or [] if isinstance(p, Mapping)]
        if len(parents) == 2 and isinstance(parents[0], str) and _same(parents[0], expected):
            return {"updated": True, "head": head, "read_back": True}
        raise refusal("head_moved", f"the head of {t} moved from {expected} to {head}")

    # -- ready for review ----------------------------------------------------------------

    def ready(self, action: Action, t: Target, retry: bool) -> JSON:
        head_sha = _sha(action.params, "head_sha")
        pull = self.client.get_pull(t.repo, t.number)
        if pull.get("draft") is not True:
            return {"ready": True, "changed": False, "read_back": True}
        head = _head(pull)
        if not _same(head, head_sha):
            raise refusal("head_moved", f"the head of {t} moved from {head_sha} to {head}")
        if pull.get("state") == "closed":
            raise refusal("refused", f"{t} is closed")
        node = pull.get("node_id")
        if not isinstance(node, str) or not node:
            raise refusal("refused", f"GitHub gave no node_id for {t}")
        try:
            self.client.mark_ready_for_review(t.repo, node)
        except AmbiguousWrite:
            if self.client.get_pull(t.repo, t.number).get("draft") is True:
                raise
            return {"ready": True, "changed": True, "read_back": True}
        return {"ready": True, "changed": True, "read_back": retry}

    # -- delete the branch ---------------------------------------------------------------

    def delete_branch(self, action: Action, t: Target, retry: bool) -> JSON:
        """Only the merged PR's own branch, only while it still points at the merged head."""
        ref = _string(action.params, "ref")
        pull = self.client.get_pull(t.repo, t.number)
        head = _mapping(pull.get("head"))
        head_repo = _mapping(head.get("repo"))
        if pull.get("merged") is not True:
            raise refusal("refused", f"{t} is not merged; its branch stays")
        if head.get("ref") != ref or str(head_repo.get("full_name", "")).lower() != t.repo.lower():
            raise refusal("refused", f"{ref!r} is not the branch of {t} in {t.repo}")
        if head_repo.get("default_branch") == ref:
            raise refusal("refused", f"{ref!r} is the default branch of {t.repo}")
        branch = self.client.get_branch(t.repo, ref)
        if branch is None:
            return {"deleted": False, "gone": True, "read_back": True}
        commit = branch.get("commit")
        tip = commit.get("sha") if isinstance(commit, Mapping) else None
        if not isinstance(tip, str) or not _same(tip, _head(pull)):
            raise refusal("refused", f"{ref!r} has commits pushed after {t} was merged; it stays")
        try:
            existed = self.client.delete_branch(t.repo, ref)
        except AmbiguousWrite:
            if self.client.get_branch(t.repo, ref) is not None:
                raise
            return {"deleted": True, "read_back": True}
        return {"deleted": existed, "gone": True, "read_back": retry}

    # -- progress ------------------------------------------------------------------------

    def progress(self, action: Action, t: Target, retry: bool) -> JSON:
        with self._shown_guard:
            lock = self._shown.setdefault(str(t), threading.Lock())
        with lock:
            return self._show(action, t, retry)

    def _show(self, action: Action, t: Target, retry: bool) -> JSON:
        p = action.params
        seq = p.get("seq")
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise ActionFailed(f"'seq' must be a whole number from 1, not {seq!r}")
        head_sha = _sha(p, "head_sha")
        status = p.get("check_status")
        if status not in CHECK_STATUSES:
            raise ActionFailed(f"'check_status' must be one of {CHECK_STATUSES}, not {status!r}")
        conclusion = p.get("check_conclusion")
        if conclusion is not None and conclusion not in CHECK_CONCLUSIONS:
            raise ActionFailed(
                f"'check_conclusion' must be null or one of {CHECK_CONCLUSIONS}, not {conclusion!r}"
            )
        title = _string(p, "check_title")
        summary = _string(p, "check_summary", allow_empty=True)
        body = _string(p, "comment_body")
        state = p.get("state")
        if state is not None and (not isinstance(state, str) or not _STATE.match(state)):
            raise ActionFailed("'state' must be base64url text (an encoded delivery state)")
        mark = marker("deliver", str(t))
        comments = self.client.list_issue_comments(t.repo, t.number)
        found = find_marked(comments, mark, self.bot_login)
        shown = shown_seq(found)
        if found is not None and shown >= seq:
            # This progress, or a newer one, is shown already: nothing older overwrites it.
            return {"applied": False, "seq": shown, "comment": found.get("id"), "read_back": True}
        fields: dict[str, Any] = {
            "status": status,
            "external_id": mark.removeprefix("<!-- ").removesuffix(" -->"),
            "output": {"title": title, "summary": summary[:SUMMARY_MAX]},
        }
        held = f"{marker('state', state)}\n" if state else ""
        if state:
            fields["output"]["text"] = held
        if status == "completed":
            fields["conclusion"] = conclusion or "neutral"
        run = self._check_run(t, head_sha, fields)
        before = _HEAD.search(str(found.get("body") or "")) if found is not None else None
        if before is not None and before.group(1) != head_sha.lower():
            self._supersede(t, before.group(1), head_sha)
        allowed = thread_mentions(self.client, t, [body], self.mentions())
        head = marker("head", head_sha.lower())
        text = f"{mark}\n{marker('seq', str(seq))}\n{head}\n{held}{defuse(body, allowed)}"
        comment = self._comment(t, mark, text, found)
        return {
            "applied": True,
            "seq": seq,
            "check_run": run,
            "comment": comment,
            "read_back": retry,
        }

    def _supersede(self, t: Target, old: str, new: str) -> None:
        """Our run on the head the delivery left (its branch was updated, or pushed to),
        completed: it stayed "in progress" on that commit for ever. Shown only: a failure
        here is logged and changes nothing else."""
        try:
            run = self._own_run(t, old)
            if run is None or run.get("status") == "completed":
                return
            self.client.update_check_run(
                t.repo,
                int(run["id"]),
                status="completed",
                conclusion="neutral",
                output={
                    "title": "Superseded",
                    "summary": f"The delivery goes on at {new[:7]}, the head of {t} now.",
                },
            )
        except GitHubError as exc:
            log.warning("the check run of %s on %s left as it was: %s", t, old[:7], exc)

    def _ours(self, run: Mapping[str, Any]) -> bool:
        app = run.get("app")
        if not isinstance(app, Mapping):
            return False
        if self.app_id is not None:
            return app.get("id") == self.app_id
        return str(app.get("slug", "")).lower() == self.slug

    def own_check_run(self, t: Target, head_sha: str) -> JSON | None:
        """Our newest ``autoloop/deliver`` check run on ``head_sha`` (None: there is none)."""
        return self._own_run(t, head_sha)

    def _own_run(self, t: Target, head_sha: str) -> JSON | None:
        runs = self.client.list_check_runs_for_ref(
            t.repo, head_sha, check_name=OWN_CHECK, latest=False
        )
        mine = [r for r in runs if r.get("name") == OWN_CHECK and self._ours(r)]
        newest = max(mine, key=lambda r: int(r.get("id") or 0), default=None)
        return None if newest is None else dict(newest)

    @staticmethod
    def _shows(run: Mapping[str, Any], fields: Mapping[str, Any]) -> bool:
        output = _mapping(run.get("output"))
        want = fields["output"]
        return (
            run.get("status") == fields["status"]
            and run.get("conclusion") == fields.get("conclusion")
            and output.get("title") == want["title"]
            and output.get("summary") == want["summary"]
            and ("text" not in want or output.get("text") == want["text"])
        )

    def _check_run(self, t: Target, head_sha: str, fields: dict[str, Any]) -> int | None:
        """Our ``autoloop/deliver`` run on ``head_sha`` made to show ``fields``."""
        run = self._own_run(t, head_sha)
        if run is None:
            try:
                made = self.client.create_check_run(
                    t.repo, name=OWN_CHECK, head_sha=head_sha, **fields
                )
            except AmbiguousWrite:
                run = self._own_run(t, head_sha)
                if run is None:
                    raise
            else:
                ident = made.get("id")
                return ident if isinstance(ident, int) else None
        ident = int(run["id"])
        if self._shows(run, fields):
            return ident
        try:
            self.client.update_check_run(t.repo, ident, **fields)
        except AmbiguousWrite:
            again = self._own_run(t, head_sha)
            if again is None or not self._shows(again, fields):
                raise
        return ident

    def _comment(self, t: Target, mark: str, text: str, found: JSON | None) -> int | None:
        """The sticky comment made to say ``text`` (``found``: it, as just read)."""
        if found is None:
            try:
                made = self.client.create_comment(t.repo, t.number, text)
            except AmbiguousWrite:
                comments = self.client.list_issue_comments(t.repo, t.number)
                found = find_marked(comments, mark, self.bot_login)
                if found is None or found.get("body") != text:
                    raise
                return int(found["id"])
            ident = made.get("id")
            if not isinstance(ident, int):
                return None
            return self._first_of_a_race(t, mark, text, ident)
        ident = int(found["id"])
        if found.get("body") == text:
            return ident
        try:
            self.client.update_comment(t.repo, ident, text)
        except AmbiguousWrite:
            comments = self.client.list_issue_comments(t.repo, t.number)
            again = find_marked(comments, mark, self.bot_login)
            if again is None or again.get("body") != text:
                raise
        return ident

    def _first_of_a_race(self, t: Target, mark: str, text: str, made: int) -> int:
        """The sticky comment, once ``made`` was created: runs that started at once each
        found none and made one, and only the first was kept up to date (the others
        said "checks" for ever). Read again: when an older one holds ``mark``, ours
        becomes a pointer to it (it is no sticky any more), and the older one shows
        ``text`` unless it shows a newer progress already."""
        comments = self.client.list_issue_comments(t.repo, t.number)
        first = find_marked(comments, mark, self.bot_login)
        if first is None or int(first["id"]) >= made:
            return made
        older = int(first["id"])
        where = first.get("html_url") or f"comment {older}"
        self.client.update_comment(
            t.repo, made, f"(This delivery is shown in the comment above: {where}.)"
        )
        if shown_seq(first) < (shown_seq({"body": text}) or 0):
            self.client.update_comment(t.repo, older, text)
        return older


def shown_seq(comment: Mapping[str, Any] | None) -> int:
    """The progress seq a sticky comment shows (0: none)."""
    body = comment.get("body") if comment is not None else None
    found = _SEQ.search(body) if isinstance(body, str) else None
    return int(found.group(1)) if found else 0
