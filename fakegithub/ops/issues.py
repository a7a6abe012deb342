"""Writes to issues: open, edit, close, labels, assignees, comments.

Pull requests are issues too; for them the events are ``pull_request`` events.
"""

from __future__ import annotations

from typing import Any

from fakegithub.errors import ApiError, not_found
from fakegithub.events import emit
from fakegithub.model import Comment, Issue, Label, Repo
from fakegithub.render.core import comment as render_comment
from fakegithub.render.core import issue as render_issue
from fakegithub.render.core import label as render_label
from fakegithub.render.core import user as render_user
from fakegithub.render.pulls import pull_request
from fakegithub.state import Actor, State


def get_issue(repo: Repo, number: int) -> Issue:
    found = repo.issues.get(number)
    if found is None:
        raise not_found()
    return found


def issue_event(
    state: State, repo: Repo, issue: Issue, actor: Actor, action: str, **extra: Any
) -> None:
    """``issues.<action>``, or ``pull_request.<action>`` when the issue is a pull request."""
    label = extra.get("label")
    if action in ("labeled", "unlabeled") and isinstance(label, dict):
        issue.timeline.append(
            (state.new_id(), action, actor.login, str(label.get("name")), state.now())
        )
    if issue.is_pull:
        pull = repo.pulls[issue.number]
        body = {
            "action": action,
            "number": issue.number,
            **extra,
            "pull_request": pull_request(state, repo, pull),
        }
        emit(state, "pull_request", body, repo=repo, actor=actor)
    else:
        body = {"action": action, **extra, "issue": render_issue(state, repo, issue)}
        emit(state, "issues", body, repo=repo, actor=actor)


def ensure_label(state: State, repo: Repo, name: str) -> Label:
    for existing in repo.labels.values():
        if existing.name.lower() == name.lower():
            return existing
    created = Label(state.new_id(), name)
    repo.labels[name] = created
    return created


def open_issue(
    state: State,
    repo: Repo,
    actor: Actor,
    *,
    title: str,
    body: str | None = None,
    labels: list[str] | None = None,
    assignees: list[str] | None = None,
) -> Issue:
    if not title or not title.strip():
        raise ApiError(
            422,
            "Validation Failed",
            errors=[{"resource": "Issue", "code": "missing_field", "field": "title"}],
        )
    with state.lock:
        now = state.now()
        number = repo.next_number
        repo.next_number += 1
        issue = Issue(number, state.new_id(), title, body, actor.login, now, now)
        repo.issues[number] = issue
        for login in assignees or []:
            state.user(login)
        issue.assignees = list(dict.fromkeys(assignees or []))
        issue_event(state, repo, issue, actor, "opened")
        if labels:
            add_labels(state, repo, actor, number, labels)
        return issue


def update_issue(
    state: State, repo: Repo, actor: Actor, number: int, changes: dict[str, Any]
) -> Issue:
    """PATCH semantics: title, body, state (+ state_reason), labels, assignees."""
    with state.lock:
        issue = get_issue(repo, number)
        edited: dict[str, Any] = {}
        for field in ("title", "body"):
            if field in changes and changes[field] != getattr(issue, field):
                edited[field] = {"from": getattr(issue, field)}
                setattr(issue, field, changes[field])
        issue.updated_at = state.now()
        if edited:
            issue_event(state, repo, issue, actor, "edited", changes=edited)
        if "labels" in changes and changes["labels"] is not None:
            wanted = [_label_name(x) for x in changes["labels"]]
            for name in list(issue.labels):
                if name not in wanted:
                    remove_label(state, repo, actor, number, name)
            add_labels(state, repo, actor, number, [n for n in wanted if n not in issue.labels])
        if "assignees" in changes and changes["assignees"] is not None:
            for login in list(issue.assignees):
                if login not in changes["assignees"]:
                    issue.assignees.remove(login)
                    issue_event(
                        state, repo, issue, actor, "unassigned", assignee=render_user(state, login)
                    )
            add_assignees(state, repo, actor, number, list(changes["assignees"]))
        new_state = changes.get("state")
        if new_state not in (None, "open", "closed"):
            raise ApiError(
                422,
                "Validation Failed",
                errors=[{"resource": "Issue", "code": "invalid", "field": "state"}],
            )
        if new_state and new_state != issue.state:
            set_state(state, repo, actor, issue, new_state, reason=changes.get("state_reason"))
        return issue


def set_state(
    state: State, repo: Repo, actor: Actor, issue: Issue, new_state: str, *, reason: str | None
) -> None:
    issue.state = new_state
    issue.updated_at = state.now()
    if new_state == "closed":
        issue.closed_at = state.now()
        issue.state_reason = None if issue.is_pull else (reason or "completed")
        issue_event(state, repo, issue, actor, "closed")
    else:
        issue.closed_at = None
        issue.state_reason = None if issue.is_pull else "reopened"
        issue_event(state, repo, issue, actor, "reopened")


def _label_name(item: Any) -> str:
    if isinstance(item, dict) and isinstance(item.get("name"), str):
        return str(item["name"])
    if isinstance(item, str) and item:
        return item
    raise ApiError(
        422,
        "Validation Failed",
        errors=[{"resource": "Label", "code": "invalid", "field": "labels"}],
    )


def add_labels(
    state: State, repo: Repo, actor: Actor, number: int, names: list[Any]
) -> list[Label]:
    with state.lock:
        issue = get_issue(repo, number)
        for raw in names:
            found = ensure_label(state, repo, _label_name(raw))
            if found.name in issue.labels:
                continue
            issue.labels.append(found.name)
            issue.updated_at = state.now()
            issue_event(
                state, repo, issue, actor, "labeled", label=render_label(state, repo, found)
            )
        return [repo.labels[n] for n in issue.labels]


def remove_label(state: State, repo: Repo, actor: Actor, number: int, name: str) -> list[Label]:
    with state.lock:
        issue = get_issue(repo, number)
        match = next((n for n in issue.labels if n.lower() == name.lower()), None)
        if match is None:
            raise ApiError(404, "Label does not exist")
        issue.labels.remove(match)
        issue.updated_at = state.now()
        found = repo.labels[match]
        issue_event(state, repo, issue, actor, "unlabeled", label=render_label(state, repo, found))
        return [repo.labels[n] for n in issue.labels]


def remove_all_labels(state: State, repo: Repo, actor: Actor, number: int) -> None:
    with state.lock:
        for name in list(get_issue(repo, number).labels):
            remove_label(state, repo, actor, number, name)


def add_assignees(state: State, repo: Repo, actor: Actor, number: int, logins: list[str]) -> Issue:
    with state.lock:
        issue = get_issue(repo, number)
        for login in logins:
            if login not in state.users or login in issue.assignees:
                continue  # GitHub silently skips people who cannot be assigned
            issue.assignees.append(login)
            issue.updated_at = state.now()
            issue_event(state, repo, issue, actor, "assigned", assignee=render_user(state, login))
        return issue


def create_comment(state: State, repo: Repo, actor: Actor, number: int, body: str) -> Comment:
    if not isinstance(body, str) or not body:
        raise ApiError(
            422,
            "Validation Failed",
            errors=[{"resource": "IssueComment", "code": "missing_field", "field": "body"}],
        )
    with state.lock:
        issue = get_issue(repo, number)
        now = state.now()
        found = Comment(state.new_id(), number, actor.login, body, now, now, actor.app_id)
        repo.comments[found.id] = found
        issue.updated_at = now
        emit(
            state,
            "issue_comment",
            {
                "action": "created",
                "issue": render_issue(state, repo, issue),
                "comment": render_comment(state, repo, found),
            },
            repo=repo,
            actor=actor,
        )
        return found


def update_comment(state: State, repo: Repo, actor: Actor, comment_id: int, body: str) -> Comment:
    if not isinstance(body, str) or not body:
        raise ApiError(
            422,
            "Validation Failed",
            errors=[{"resource": "IssueComment", "code": "missing_field", "field": "body"}],
        )
    with state.lock:
        found = repo.comments.get(comment_id)
        if found is None:
            raise not_found()
        if actor.login != found.user and not actor.app_id:
            raise ApiError(403, "Must have admin rights to Repository.")
        old = found.body
        found.body = body
        found.updated_at = state.now()
        emit(
            state,
            "issue_comment",
            {
                "action": "edited",
                "changes": {"body": {"from": old}},
                "issue": render_issue(state, repo, repo.issues[found.number]),
                "comment": render_comment(state, repo, found),
            },
            repo=repo,
            actor=actor,
        )
        return found
