"""GitHub's JSON for commits, check runs and suites, statuses, deployments and releases."""

from __future__ import annotations

import hashlib

from fakegithub.model import (
    CheckRun,
    CheckSuite,
    Commit,
    CommitStatus,
    Deployment,
    DeploymentStatus,
    Release,
    Repo,
)
from fakegithub.render.core import Json, app, app_or_none, node_id, repository, user
from fakegithub.render.pulls import pull_minimal
from fakegithub.state import State, iso

_TREES: dict[str, str] = {}  # commit sha -> its tree's sha (a commit never changes)
_TREES_KEPT = 20_000


def tree_sha(found: Commit) -> str:
    kept = _TREES.get(found.sha)
    if kept is not None:
        return kept
    digest = hashlib.sha1(usedforsecurity=False)
    for path in sorted(found.files):
        digest.update(path.encode() + b"\0" + found.files[path])
    if len(_TREES) >= _TREES_KEPT:
        _TREES.clear()
    _TREES[found.sha] = digest.hexdigest()
    return _TREES[found.sha]


def person(state: State, login: str, found: Commit) -> Json:
    return {
        "name": login,
        "email": f"{login}@users.noreply.sandbox",
        "date": iso(found.time),
    }


def commit(state: State, repo: Repo, found: Commit) -> Json:
    """The REST commit object (``GET .../commits/{ref}``), also used by the status event."""
    api = f"{state.base_url}/repos/{repo.full_name}"
    author = user(state, found.author) if found.author in state.users else None
    return {
        "sha": found.sha,
        "node_id": node_id("C", int(found.sha[:8], 16)),
        "commit": {
            "author": person(state, found.author, found),
            "committer": person(state, found.author, found),
            "message": found.message,
            "tree": {"sha": tree_sha(found), "url": f"{api}/git/trees/{tree_sha(found)}"},
            "url": f"{api}/git/commits/{found.sha}",
            "comment_count": 0,
            "verification": {
                "verified": False,
                "reason": "unsigned",
                "signature": None,
                "payload": None,
            },
        },
        "url": f"{api}/commits/{found.sha}",
        "html_url": f"{state.base_url}/{repo.full_name}/commit/{found.sha}",
        "comments_url": f"{api}/commits/{found.sha}/comments",
        "author": author,
        "committer": author,
        "parents": [
            {
                "sha": p,
                "url": f"{api}/commits/{p}",
                "html_url": f"{state.base_url}/{repo.full_name}/commit/{p}",
            }
            for p in found.parents
        ],
    }


def push_commit(state: State, repo: Repo, found: Commit, *, distinct: bool = True) -> Json:
    """A commit as the push event lists it."""
    parent = repo.commits.get(found.parents[0]) if found.parents else None
    before = parent.files if parent else {}
    after = found.files
    who = {
        "name": found.author,
        "email": f"{found.author}@users.noreply.sandbox",
        "username": found.author,
    }
    return {
        "id": found.sha,
        "tree_id": tree_sha(found),
        "distinct": distinct,
        "message": found.message,
        "timestamp": iso(found.time),
        "url": f"{state.base_url}/{repo.full_name}/commit/{found.sha}",
        "author": who,
        "committer": who,
        "added": sorted(set(after) - set(before)),
        "removed": sorted(set(before) - set(after)),
        "modified": sorted(p for p in set(after) & set(before) if after[p] != before[p]),
    }


def head_commit(state: State, repo: Repo, found: Commit) -> Json:
    who = {"name": found.author, "email": f"{found.author}@users.noreply.sandbox"}
    return {
        "id": found.sha,
        "tree_id": tree_sha(found),
        "message": found.message,
        "timestamp": iso(found.time),
        "author": who,
        "committer": who,
    }


def _pulls_for(state: State, repo: Repo, sha: str) -> list[Json]:
    return [
        pull_minimal(state, repo, p)
        for p in repo.pulls.values()
        if p.head_sha == sha and repo.issues[p.number].state == "open"
    ]


def check_suite(state: State, repo: Repo, suite: CheckSuite) -> Json:
    found_app = state.apps[suite.app_id]
    api = f"{state.base_url}/repos/{repo.full_name}"
    head = repo.commits.get(suite.head_sha)
    parent = head.parents[0] if head and head.parents else None
    conclusion = suite.conclusion
    return {
        "id": suite.id,
        "node_id": node_id("CS", suite.id),
        "head_branch": suite.head_branch,
        "head_sha": suite.head_sha,
        "status": suite.status,
        "conclusion": "neutral" if conclusion == "skipped" else conclusion,
        "url": f"{state.base_url}/repos/{repo.full_name}/check-suites/{suite.id}",
        "before": parent,
        "after": suite.head_sha,
        "pull_requests": _pulls_for(state, repo, suite.head_sha),
        "app": app(state, found_app),
        "created_at": iso(suite.created_at),
        "updated_at": iso(suite.updated_at),
        "latest_check_runs_count": sum(
            1 for r in repo.check_runs.values() if r.suite_id == suite.id
        ),
        "check_runs_url": f"{api}/check-suites/{suite.id}/check-runs",
        "head_commit": head_commit(state, repo, head) if head else None,
    }


def check_run(state: State, repo: Repo, run: CheckRun) -> Json:
    suite = repo.check_suites[run.suite_id]
    api = f"{state.base_url}/repos/{repo.full_name}"
    suite_json = check_suite(state, repo, suite)
    del suite_json["latest_check_runs_count"], suite_json["check_runs_url"]
    del suite_json["head_commit"], suite_json["node_id"]
    output = {
        "title": run.output.get("title"),
        "summary": run.output.get("summary"),
        "text": run.output.get("text"),
        "annotations_count": 0,
        "annotations_url": f"{api}/check-runs/{run.id}/annotations",
    }
    return {
        "id": run.id,
        "node_id": node_id("CR", run.id),
        "head_sha": run.head_sha,
        "external_id": run.external_id or "",
        "url": f"{state.base_url}/repos/{repo.full_name}/check-runs/{run.id}",
        "html_url": f"{state.base_url}/{repo.full_name}/runs/{run.id}",
        "details_url": run.details_url or f"{state.base_url}/{repo.full_name}/runs/{run.id}",
        "status": run.status,
        "conclusion": run.conclusion,
        "started_at": iso(run.started_at or suite.created_at),
        "completed_at": iso(run.completed_at),
        "output": output,
        "name": run.name,
        "check_suite": suite_json,
        "app": app(state, state.apps[run.app_id]),
        "pull_requests": _pulls_for(state, repo, run.head_sha),
    }


def commit_status(state: State, repo: Repo, status: CommitStatus) -> Json:
    creator = state.users.get(status.creator)
    return {
        "url": f"{state.base_url}/repos/{repo.full_name}/statuses/{status.sha}",
        "avatar_url": f"{state.base_url}/_sandbox/avatars/{creator.id if creator else 0}",
        "id": status.id,
        "node_id": node_id("SC", status.id),
        "state": status.state,
        "description": status.description,
        "target_url": status.target_url,
        "context": status.context,
        "created_at": iso(status.created_at),
        "updated_at": iso(status.updated_at),
        "required": False,
    }


def combined_status(state: State, repo: Repo, sha: str) -> Json:
    latest: dict[str, CommitStatus] = {}
    for status in sorted((s for s in repo.statuses if s.sha == sha), key=lambda s: s.id):
        latest[status.context] = status
    states = [s.state for s in latest.values()]
    if any(s in {"error", "failure"} for s in states):
        combined = "failure"
    elif not states or "pending" in states:
        combined = "pending"
    else:
        combined = "success"
    api = f"{state.base_url}/repos/{repo.full_name}/commits/{sha}"
    return {
        "state": combined,
        "statuses": [commit_status(state, repo, s) for s in latest.values()],
        "sha": sha,
        "total_count": len(latest),
        "repository": repository(state, repo),
        "commit_url": api,
        "url": f"{api}/status",
    }


def deployment(state: State, repo: Repo, found: Deployment) -> Json:
    api = f"{state.base_url}/repos/{repo.full_name}/deployments/{found.id}"
    updated = found.statuses[-1].created_at if found.statuses else found.created_at
    return {
        "url": api,
        "id": found.id,
        "node_id": node_id("DE", found.id),
        "sha": found.sha,
        "ref": found.ref,
        "task": found.task,
        "payload": found.payload,
        "original_environment": found.environment,
        "environment": found.environment,
        "transient_environment": found.transient_environment,
        "production_environment": found.production_environment,
        "description": found.description,
        "creator": user(state, found.creator),
        "created_at": iso(found.created_at),
        "updated_at": iso(updated),
        "statuses_url": f"{api}/statuses",
        "repository_url": f"{state.base_url}/repos/{repo.full_name}",
        "performed_via_github_app": app_or_none(state, found.app_id),
    }


def deployment_status(
    state: State, repo: Repo, found: Deployment, status: DeploymentStatus
) -> Json:
    api = f"{state.base_url}/repos/{repo.full_name}/deployments/{found.id}"
    data: Json = {
        "url": f"{api}/statuses/{status.id}",
        "id": status.id,
        "node_id": node_id("DES", status.id),
        "state": status.state,
        "creator": user(state, status.creator),
        "description": status.description,
        "environment": status.environment,
        "environment_url": status.environment_url,
        "log_url": status.log_url,
        "target_url": status.target_url,
        "created_at": iso(status.created_at),
        "updated_at": iso(status.created_at),
        "deployment_url": api,
        "repository_url": f"{state.base_url}/repos/{repo.full_name}",
        "performed_via_github_app": app_or_none(state, status.app_id),
    }
    # An empty URL matches two branches of the webhook schema's oneOf; GitHub's own
    # empty values are a known quirk there, so leave empty optional URLs out.
    for key in ("environment_url", "log_url"):
        if not data[key]:
            del data[key]
    return data


def release(state: State, repo: Repo, found: Release) -> Json:
    api = f"{state.base_url}/repos/{repo.full_name}/releases/{found.id}"
    return {
        "url": api,
        "assets_url": f"{api}/assets",
        "upload_url": f"{state.base_url}/uploads/repos/{repo.full_name}/releases/{found.id}"
        "/assets{?name,label}",
        "html_url": f"{state.base_url}/{repo.full_name}/releases/tag/{found.tag_name}",
        "id": found.id,
        "node_id": node_id("RE", found.id),
        "tag_name": found.tag_name,
        "target_commitish": found.target_commitish,
        "name": found.name,
        "draft": found.draft,
        "author": user(state, found.author),
        "prerelease": found.prerelease,
        "created_at": iso(found.created_at),
        "published_at": iso(found.published_at),
        "assets": [],
        "tarball_url": f"{state.base_url}/repos/{repo.full_name}/tarball/{found.tag_name}",
        "zipball_url": f"{state.base_url}/repos/{repo.full_name}/zipball/{found.tag_name}",
        "body": found.body or "",
    }
