"""GitHub's JSON for pull requests and reviews."""

from __future__ import annotations

import difflib
import hashlib
import time

from fakegithub import git, merging
from fakegithub.model import Pull, Repo, Review
from fakegithub.render.core import (
    Json,
    author_association,
    issue,
    labels,
    node_id,
    repository,
    user,
)
from fakegithub.state import State, iso


def _ref(state: State, repo: Repo, ref: str, sha: str) -> Json:
    return {
        "label": f"{repo.owner}:{ref}",
        "ref": ref,
        "sha": sha,
        "user": user(state, repo.owner),
        "repo": repository(state, repo),
    }


def changed_files(repo: Repo, pull: Pull) -> list[str]:
    base_sha = repo.branches.get(pull.base_ref, pull.head_sha)
    fork_point = git.merge_base(repo, base_sha, pull.head_sha)
    before = repo.commits[fork_point].files if fork_point else {}
    after = repo.commits[pull.head_sha].files
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def file_changes(repo: Repo, pull: Pull) -> list[Json]:
    """``GET .../pulls/{n}/files``: each changed file with its status, counts and patch."""
    base_sha = repo.branches.get(pull.base_ref, pull.head_sha)
    fork_point = git.merge_base(repo, base_sha, pull.head_sha)
    before = repo.commits[fork_point].files if fork_point else {}
    after = repo.commits[pull.head_sha].files
    out: list[Json] = []
    for path in changed_files(repo, pull):
        old, new = before.get(path), after.get(path)
        status = "added" if old is None else "removed" if new is None else "modified"
        a = (old or b"").decode("utf-8", "replace").splitlines()
        b = (new or b"").decode("utf-8", "replace").splitlines()
        lines = list(difflib.unified_diff(a, b, lineterm=""))[2:]  # GitHub omits ---/+++
        adds = sum(1 for x in lines if x.startswith("+"))
        dels = sum(1 for x in lines if x.startswith("-"))
        out.append(
            {
                "sha": _blob_sha(new) if new is not None else None,
                "filename": path,
                "status": status,
                "additions": adds,
                "deletions": dels,
                "changes": adds + dels,
                "patch": "\n".join(lines),
            }
        )
    return out


def _blob_sha(content: bytes) -> str:
    """Git's blob id of ``content`` (an identifier, not a security hash)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


def pull_request(state: State, repo: Repo, pull: Pull) -> Json:
    the_issue = repo.issues[pull.number]
    api = f"{state.base_url}/repos/{repo.full_name}/pulls/{pull.number}"
    issue_api = f"{state.base_url}/repos/{repo.full_name}/issues/{pull.number}"
    html = f"{state.base_url}/{repo.full_name}/pull/{pull.number}"
    statuses = f"{state.base_url}/repos/{repo.full_name}/statuses/{pull.head_sha}"
    base_sha = repo.branches.get(pull.base_ref, pull.head_sha)
    mergeable, mergeable_state = merging.mergeable_state(repo, pull)
    if pull.unknown_until > time.monotonic() and not pull.merged:
        mergeable, mergeable_state = None, "unknown"  # GitHub is still computing it
    head_commits = git.ancestors(repo, pull.head_sha)
    base_commits = git.ancestors(repo, base_sha)
    changed = changed_files(repo, pull)
    issue_json = issue(state, repo, the_issue)
    return {
        "url": api,
        "id": pull.id,
        "node_id": node_id("PR", pull.id),
        "html_url": html,
        "diff_url": f"{html}.diff",
        "patch_url": f"{html}.patch",
        "issue_url": issue_api,
        "number": pull.number,
        "state": the_issue.state,
        "locked": False,
        "title": the_issue.title,
        "user": user(state, the_issue.user),
        "body": the_issue.body,
        "created_at": iso(the_issue.created_at),
        "updated_at": iso(the_issue.updated_at),
        "closed_at": iso(the_issue.closed_at),
        "merged_at": iso(pull.merged_at),
        "merge_commit_sha": pull.merge_commit_sha,
        "assignee": issue_json["assignee"],
        "assignees": issue_json["assignees"],
        "requested_reviewers": [],
        "requested_teams": [],
        "labels": labels(state, repo, the_issue.labels),
        "milestone": None,
        "commits_url": f"{api}/commits",
        "review_comments_url": f"{api}/comments",
        "review_comment_url": f"{state.base_url}/repos/{repo.full_name}/pulls/comments{{/number}}",
        "comments_url": f"{issue_api}/comments",
        "statuses_url": statuses,
        "head": _ref(state, repo, pull.head_ref, pull.head_sha),
        "base": _ref(state, repo, pull.base_ref, base_sha),
        "_links": {
            "self": {"href": api},
            "html": {"href": html},
            "issue": {"href": issue_api},
            "comments": {"href": f"{issue_api}/comments"},
            "review_comments": {"href": f"{api}/comments"},
            "review_comment": {
                "href": f"{state.base_url}/repos/{repo.full_name}/pulls/comments{{/number}}"
            },
            "commits": {"href": f"{api}/commits"},
            "statuses": {"href": statuses},
        },
        "author_association": author_association(repo, the_issue.user),
        "auto_merge": None,
        "active_lock_reason": None,
        "draft": pull.draft,
        "merged": pull.merged,
        "mergeable": mergeable,
        "rebaseable": mergeable,
        "mergeable_state": mergeable_state,
        "merged_by": user(state, pull.merged_by) if pull.merged_by else None,
        "comments": issue_json["comments"],
        "review_comments": 0,
        "maintainer_can_modify": pull.maintainer_can_modify,
        "commits": len(head_commits - base_commits) if not pull.merged else 1,
        "additions": len(changed),
        "deletions": 0,
        "changed_files": len(changed),
    }


FULL_ONLY = (
    "additions",
    "changed_files",
    "comments",
    "commits",
    "deletions",
    "maintainer_can_modify",
    "mergeable",
    "mergeable_state",
    "merged",
    "merged_by",
    "rebaseable",
    "review_comments",
)


def simple_pull_request(state: State, repo: Repo, pull: Pull) -> Json:
    """The shorter pull request that review events carry."""
    data = pull_request(state, repo, pull)
    for key in FULL_ONLY:
        del data[key]
    return data


def pull_minimal(state: State, repo: Repo, pull: Pull) -> Json:
    """The short form check runs and check suites carry."""
    base_sha = repo.branches.get(pull.base_ref, pull.head_sha)
    small_repo = {
        "id": repo.id,
        "url": f"{state.base_url}/repos/{repo.full_name}",
        "name": repo.name,
    }
    return {
        "id": pull.id,
        "number": pull.number,
        "url": f"{state.base_url}/repos/{repo.full_name}/pulls/{pull.number}",
        "head": {"ref": pull.head_ref, "sha": pull.head_sha, "repo": small_repo},
        "base": {"ref": pull.base_ref, "sha": base_sha, "repo": small_repo},
    }


def review(state: State, repo: Repo, found: Review) -> Json:
    html = f"{state.base_url}/{repo.full_name}/pull/{found.number}"
    return {
        "id": found.id,
        "node_id": node_id("PRR", found.id),
        "user": user(state, found.user),
        "body": found.body,
        "state": found.state,
        "html_url": f"{html}#pullrequestreview-{found.id}",
        "pull_request_url": f"{state.base_url}/repos/{repo.full_name}/pulls/{found.number}",
        "_links": {
            "html": {"href": f"{html}#pullrequestreview-{found.id}"},
            "pull_request": {
                "href": f"{state.base_url}/repos/{repo.full_name}/pulls/{found.number}"
            },
        },
        "submitted_at": iso(found.submitted_at),
        "commit_id": found.commit_id,
        "author_association": author_association(repo, found.user),
    }
