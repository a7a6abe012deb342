"""Writes to branches and files: pushes, force-pushes, the contents API.

Every branch move goes through :func:`move_branch`, which emits the ``push`` event and a
``pull_request.synchronize`` for each open pull request whose head is that branch.
"""

from __future__ import annotations

import base64
import hashlib
import time

from fakegithub import git
from fakegithub.errors import ApiError, not_found
from fakegithub.events import emit
from fakegithub.model import Commit, Repo
from fakegithub.render.checks import push_commit
from fakegithub.render.core import Json
from fakegithub.render.pulls import pull_request
from fakegithub.state import Actor, State, iso

ZERO = "0" * 40


def resolve(repo: Repo, ref: str) -> str:
    """A branch name, ``refs/heads/...``, a full or abbreviated sha -> a commit sha."""
    name = ref.removeprefix("refs/heads/")
    if name in repo.branches:
        return repo.branches[name]
    if ref in repo.commits:
        return ref
    if len(ref) >= 7:
        matches = [sha for sha in repo.commits if sha.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
    for rel in repo.releases:
        if rel.tag_name == ref:
            return resolve(repo, rel.target_commitish)
    raise ApiError(422, f"No commit found for SHA: {ref}")


def blob_sha(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


def move_branch(
    state: State, repo: Repo, actor: Actor, branch: str, after: str, *, forced: bool = False
) -> None:
    before = repo.branches.get(branch, ZERO)
    repo.branches[branch] = after
    repo.pushed_at = state.now()
    new = git.ancestors(repo, after) - (git.ancestors(repo, before) if before != ZERO else set())
    commits = sorted((repo.commits[s] for s in new), key=lambda c: (c.time, c.sha))[-20:]
    emit(
        state,
        "push",
        {
            "ref": f"refs/heads/{branch}",
            "before": before,
            "after": after,
            "created": before == ZERO,
            "deleted": False,
            "forced": forced,
            "base_ref": None,
            "compare": f"{state.base_url}/{repo.full_name}/compare/{before[:12]}...{after[:12]}",
            "commits": [push_commit(state, repo, c) for c in commits],
            "head_commit": push_commit(state, repo, repo.commits[after]),
            "pusher": {"name": actor.login, "email": f"{actor.login}@users.noreply.sandbox"},
        },
        repo=repo,
        actor=actor,
    )
    for pull in repo.pulls.values():
        issue = repo.issues[pull.number]
        if repo.mergeability_lag and branch in {pull.head_ref, pull.base_ref}:
            pull.unknown_until = time.monotonic() + repo.mergeability_lag
        if pull.head_ref == branch and issue.state == "open" and pull.head_sha != after:
            old = pull.head_sha
            pull.head_sha = after
            issue.updated_at = state.now()
            emit(
                state,
                "pull_request",
                {
                    "action": "synchronize",
                    "number": pull.number,
                    "before": old,
                    "after": after,
                    "pull_request": pull_request(state, repo, pull),
                },
                repo=repo,
                actor=actor,
            )


def delete_branch(state: State, repo: Repo, actor: Actor, branch: str) -> None:
    """``DELETE .../git/refs/heads/<branch>``: GitHub's 422 "Reference does not exist" for a
    missing branch; the default branch cannot go. Emits ``push`` with ``deleted: true``.
    (Pull requests from the branch are left as they are.)"""
    with state.lock:
        before = repo.branches.get(branch)
        if before is None:
            raise ApiError(422, "Reference does not exist")
        if branch == repo.default_branch:
            raise ApiError(422, "Cannot delete the default branch")
        del repo.branches[branch]
        repo.pushed_at = state.now()
        emit(
            state,
            "push",
            {
                "ref": f"refs/heads/{branch}",
                "before": before,
                "after": ZERO,
                "created": False,
                "deleted": True,
                "forced": False,
                "base_ref": None,
                "compare": f"{state.base_url}/{repo.full_name}/compare/{before[:12]}...{ZERO[:12]}",
                "commits": [],
                "head_commit": None,
                "pusher": {"name": actor.login, "email": f"{actor.login}@users.noreply.sandbox"},
            },
            repo=repo,
            actor=actor,
        )


def push(
    state: State,
    repo: Repo,
    actor: Actor,
    branch: str,
    files: dict[str, str | bytes | None],
    *,
    message: str = "Update files",
    force: bool = False,
    from_ref: str | None = None,
) -> Commit:
    """A new commit on ``branch`` (created from ``from_ref`` or the default branch if new).

    ``force`` rewrites the branch's last commit: the new commit replaces the old head, so
    the old head is no longer reachable, as after ``git commit --amend && git push -f``.
    A file mapped to None is deleted.
    """
    with state.lock:
        current = repo.branches.get(branch)
        if current is None:
            parent = resolve(repo, from_ref or repo.default_branch)
        elif force:
            old = repo.commits[current]
            parent = old.parents[0] if old.parents else current
        else:
            parent = current
        tree = dict(repo.commits[parent].files)
        for path, content in files.items():
            if content is None:
                tree.pop(path, None)
            else:
                tree[path] = content.encode() if isinstance(content, str) else content
        commit = git.make_commit(
            repo,
            parents=(parent,),
            files=tree,
            message=message,
            author=actor.login,
            time=state.now(),
        )
        move_branch(state, repo, actor, branch, commit.sha, forced=force and current is not None)
        return commit


def contents(state: State, repo: Repo, path: str, ref: str | None) -> Json:
    sha = resolve(repo, ref or repo.default_branch)
    files = repo.commits[sha].files
    path = path.strip("/")
    api = f"{state.base_url}/repos/{repo.full_name}/contents/{path}"
    if path in files:
        data = files[path]
        blob = blob_sha(data)
        html = f"{state.base_url}/{repo.full_name}/blob/{ref or repo.default_branch}/{path}"
        git_url = f"{state.base_url}/repos/{repo.full_name}/git/blobs/{blob}"
        return {
            "type": "file",
            "encoding": "base64",
            "size": len(data),
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "content": base64.encodebytes(data).decode(),
            "sha": blob,
            "url": api,
            "git_url": git_url,
            "html_url": html,
            "download_url": f"{state.base_url}/_sandbox/raw/{repo.full_name}/{sha}/{path}",
            "_links": {"self": api, "git": git_url, "html": html},
        }
    raise not_found()


def put_contents(
    state: State,
    repo: Repo,
    actor: Actor,
    path: str,
    *,
    content_b64: str,
    message: str,
    branch: str | None,
    sha: str | None,
) -> Json:
    path = path.strip("/")
    branch = branch or repo.default_branch
    if branch not in repo.branches:
        raise ApiError(404, f"Branch {branch} not found")
    try:
        data = base64.b64decode(content_b64, validate=False)
    except ValueError as exc:
        raise ApiError(422, "content is not valid Base64") from exc
    existing = repo.commits[repo.branches[branch]].files.get(path)
    if existing is not None and sha is None:
        raise ApiError(422, 'Invalid request.\n\n"sha" wasn\'t supplied.')
    if existing is not None and sha != blob_sha(existing):
        raise ApiError(409, f"{path} does not match {sha}")
    commit = push(state, repo, actor, branch, {path: data}, message=message)
    return {
        "content": contents(state, repo, path, commit.sha),
        "commit": {
            "sha": commit.sha,
            "message": commit.message,
            "url": f"{state.base_url}/repos/{repo.full_name}/git/commits/{commit.sha}",
            "html_url": f"{state.base_url}/{repo.full_name}/commit/{commit.sha}",
            "parents": [{"sha": p} for p in commit.parents],
            "author": {"name": actor.login, "date": iso(commit.time)},
            "committer": {"name": actor.login, "date": iso(commit.time)},
        },
    }
