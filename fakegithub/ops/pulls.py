"""Writes to pull requests: open, edit, review, update the branch, merge (with its guards).

The merge guards follow GitHub's documented answers: 409 "Head branch was modified..."
when ``sha`` is not the head; 405 when the pull request cannot be merged (closed, already
merged, draft, conflicting, or branch protection unmet).
"""

from __future__ import annotations

import time
from typing import Any

from fakegithub import git, merging
from fakegithub.errors import ApiError, not_found
from fakegithub.events import emit
from fakegithub.model import Issue, Pull, Repo, Review
from fakegithub.ops.git import move_branch
from fakegithub.ops.issues import add_labels, issue_event, set_state
from fakegithub.render.pulls import review as render_review
from fakegithub.render.pulls import simple_pull_request
from fakegithub.state import Actor, State

NOT_MERGEABLE = "Pull Request is not mergeable"
HEAD_MODIFIED = "Head branch was modified. Review and try the merge again."
HEAD_SHA_MISMATCH = "expected head sha didn't match current head ref."
NO_NEW_COMMITS = "There are no new commits on the base branch."


def get_pull(repo: Repo, number: int) -> Pull:
    found = repo.pulls.get(number)
    if found is None:
        raise not_found()
    return found


def open_pull(
    state: State,
    repo: Repo,
    actor: Actor,
    *,
    head: str,
    base: str | None = None,
    title: str,
    body: str | None = None,
    draft: bool = False,
    labels: list[str] | None = None,
) -> Pull:
    with state.lock:
        base = base or repo.default_branch
        head = head.split(":", 1)[-1]
        if head not in repo.branches or base not in repo.branches:
            raise ApiError(
                422,
                "Validation Failed",
                errors=[
                    {
                        "resource": "PullRequest",
                        "code": "invalid",
                        "field": "head" if head not in repo.branches else "base",
                    }
                ],
            )
        if git.is_ancestor(repo, repo.branches[head], repo.branches[base]):
            raise ApiError(
                422,
                "Validation Failed",
                errors=[
                    {
                        "resource": "PullRequest",
                        "code": "custom",
                        "message": f"No commits between {base} and {head}",
                    }
                ],
            )
        now = state.now()
        number = repo.next_number
        repo.next_number += 1
        issue = Issue(number, state.new_id(), title, body, actor.login, now, now, is_pull=True)
        repo.issues[number] = issue
        pull = Pull(number, state.new_id(), head, base, repo.branches[head], draft=draft)
        if repo.mergeability_lag:
            pull.unknown_until = time.monotonic() + repo.mergeability_lag
        repo.pulls[number] = pull
        issue_event(state, repo, issue, actor, "opened")
        if labels:
            add_labels(state, repo, actor, number, labels)
        return pull


def update_pull(
    state: State, repo: Repo, actor: Actor, number: int, changes: dict[str, Any]
) -> Pull:
    with state.lock:
        pull = get_pull(repo, number)
        issue = repo.issues[number]
        edited: dict[str, Any] = {}
        for field in ("title", "body"):
            if field in changes and changes[field] != getattr(issue, field):
                edited[field] = {"from": getattr(issue, field)}
                setattr(issue, field, changes[field])
        if "base" in changes and changes["base"] != pull.base_ref:
            if changes["base"] not in repo.branches:
                raise ApiError(
                    422,
                    "Validation Failed",
                    errors=[{"resource": "PullRequest", "code": "invalid", "field": "base"}],
                )
            edited["base"] = {
                "ref": {"from": pull.base_ref},
                "sha": {"from": repo.branches[pull.base_ref]},
            }
            pull.base_ref = changes["base"]
        if "maintainer_can_modify" in changes:
            pull.maintainer_can_modify = bool(changes["maintainer_can_modify"])
        issue.updated_at = state.now()
        if edited:
            issue_event(state, repo, issue, actor, "edited", changes=edited)
        new_state = changes.get("state")
        if new_state not in (None, "open", "closed"):
            raise ApiError(
                422,
                "Validation Failed",
                errors=[{"resource": "PullRequest", "code": "invalid", "field": "state"}],
            )
        if new_state and new_state != issue.state:
            if pull.merged:
                raise ApiError(
                    422,
                    "Validation Failed",
                    errors=[
                        {
                            "resource": "PullRequest",
                            "code": "custom",
                            "message": "Cannot reopen a merged pull request",
                        }
                    ],
                )
            set_state(state, repo, actor, issue, new_state, reason=None)
        return pull


def ready_for_review(state: State, repo: Repo, actor: Actor, number: int) -> Pull:
    with state.lock:
        pull = get_pull(repo, number)
        if pull.draft:
            pull.draft = False
            issue_event(state, repo, repo.issues[number], actor, "ready_for_review")
        return pull


def create_review(
    state: State,
    repo: Repo,
    actor: Actor,
    number: int,
    *,
    event: str | None,
    body: str | None = None,
    commit_id: str | None = None,
) -> Review:
    states = {"APPROVE": "APPROVED", "REQUEST_CHANGES": "CHANGES_REQUESTED", "COMMENT": "COMMENTED"}
    if event is not None and event not in states:
        raise ApiError(422, "Unprocessable Entity", errors=["Invalid value for event"])
    with state.lock:
        pull = get_pull(repo, number)
        issue = repo.issues[number]
        if event == "APPROVE" and issue.user == actor.login:
            raise ApiError(
                422, "Unprocessable Entity", errors=["Can not approve your own pull request"]
            )
        if event in {"REQUEST_CHANGES", "COMMENT"} and not body:
            raise ApiError(422, "Unprocessable Entity", errors=[f"Body is required for {event}"])
        found = Review(
            state.new_id(),
            number,
            actor.login,
            body or "",
            states[event] if event else "PENDING",
            commit_id or pull.head_sha,
            state.now(),
        )
        repo.reviews[found.id] = found
        if event is not None:
            review_json = render_review(state, repo, found)
            review_json["state"] = found.state.lower()
            emit(
                state,
                "pull_request_review",
                {
                    "action": "submitted",
                    "review": review_json,
                    "pull_request": simple_pull_request(state, repo, pull),
                },
                repo=repo,
                actor=actor,
            )
        return found


def update_branch(
    state: State, repo: Repo, actor: Actor, number: int, expected_head_sha: str | None
) -> None:
    with state.lock:
        pull = get_pull(repo, number)
        if expected_head_sha is not None and expected_head_sha != pull.head_sha:
            raise ApiError(422, HEAD_SHA_MISMATCH)
        base_sha = repo.branches[pull.base_ref]
        if git.is_ancestor(repo, base_sha, pull.head_sha):
            raise ApiError(422, NO_NEW_COMMITS)
        tree = git.merged_tree(repo, pull.head_sha, base_sha)
        if tree is None:
            raise ApiError(422, "merge conflict between base and head")
        commit = git.make_commit(
            repo,
            parents=(pull.head_sha, base_sha),
            files=tree,
            message=f"Merge branch '{pull.base_ref}' into {pull.head_ref}",
            author=actor.login,
            time=state.now(),
        )
        move_branch(state, repo, actor, pull.head_ref, commit.sha)


def merge(
    state: State,
    repo: Repo,
    actor: Actor,
    number: int,
    *,
    sha: str | None = None,
    merge_method: str = "merge",
    commit_title: str | None = None,
    commit_message: str | None = None,
) -> str:
    """Merges and returns the merge commit's sha, or refuses as GitHub does."""
    if merge_method not in {"merge", "squash", "rebase"}:
        raise ApiError(
            422,
            "Validation Failed",
            errors=[{"resource": "PullRequest", "code": "invalid", "field": "merge_method"}],
        )
    with state.lock:
        pull = get_pull(repo, number)
        issue = repo.issues[number]
        if pull.merged or issue.state != "open":
            raise ApiError(405, NOT_MERGEABLE)
        if sha is not None and sha != pull.head_sha:
            raise ApiError(409, HEAD_MODIFIED)
        if pull.draft:
            raise ApiError(405, "Pull Request is still a draft")
        base_sha = repo.branches[pull.base_ref]
        tree = git.merged_tree(repo, base_sha, pull.head_sha)
        if tree is None:
            raise ApiError(405, NOT_MERGEABLE)
        reasons = merging.blockers(repo, pull)
        if reasons:
            raise ApiError(
                405,
                "\n".join(reasons)
                if len(reasons) == 1
                else "Repository rule violations found\n\n" + "\n".join(reasons),
            )
        title = commit_title or (
            f"Merge pull request #{number} from {repo.owner}/{pull.head_ref}"
            if merge_method == "merge"
            else f"{issue.title} (#{number})"
        )
        parents = (base_sha, pull.head_sha) if merge_method == "merge" else (base_sha,)
        commit = git.make_commit(
            repo,
            parents=parents,
            files=tree,
            message=title + (f"\n\n{commit_message}" if commit_message else ""),
            author=actor.login,
            time=state.now(),
        )
        pull.merged = True
        pull.merged_at = state.now()
        pull.merged_by = actor.login
        pull.merge_commit_sha = commit.sha
        issue.state = "closed"
        issue.closed_at = pull.merged_at
        issue.updated_at = pull.merged_at
        move_branch(state, repo, actor, pull.base_ref, commit.sha)
        issue_event(state, repo, issue, actor, "closed")
        return commit.sha
