"""GitHub's JSON for users, apps, repositories, labels, issues and comments.

One shape per object serves both the REST answers and the webhook payloads: it carries
every field that GitHub's REST schema requires and nothing that the (stricter, closed)
webhook schemas forbid. URLs are built on the sandbox's own base URL.
"""

from __future__ import annotations

from typing import Any

from fakegithub.model import App, Comment, Issue, Label, Repo, User, level_at_least
from fakegithub.state import State, iso

Json = dict[str, Any]


def node_id(kind: str, ident: int) -> str:
    return f"{kind}_kwSB{ident:08d}"


def user(state: State, who: User | str) -> Json:
    found = state.user(who) if isinstance(who, str) else who
    api = f"{state.base_url}/users/{found.login}"
    return {
        "login": found.login,
        "id": found.id,
        "node_id": node_id("U" if found.type == "User" else found.type[0] + "O", found.id),
        "avatar_url": f"{state.base_url}/_sandbox/avatars/{found.id}",
        "gravatar_id": "",
        "url": api,
        "html_url": f"{state.base_url}/{found.login}",
        "followers_url": f"{api}/followers",
        "following_url": f"{api}/following{{/other_user}}",
        "gists_url": f"{api}/gists{{/gist_id}}",
        "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{api}/subscriptions",
        "organizations_url": f"{api}/orgs",
        "repos_url": f"{api}/repos",
        "events_url": f"{api}/events{{/privacy}}",
        "received_events_url": f"{api}/received_events",
        "type": found.type,
        "site_admin": False,
    }


def app(state: State, found: App) -> Json:
    return {
        "id": found.id,
        "slug": found.slug,
        "node_id": node_id("A", found.id),
        "owner": user(state, found.owner),
        "name": found.name,
        "description": "An app installed in the sandbox GitHub.",
        "external_url": f"{state.base_url}/_sandbox/apps/{found.slug}",
        "html_url": f"{state.base_url}/apps/{found.slug}",
        "created_at": iso(found.created_at),
        "updated_at": iso(found.created_at),
        "permissions": dict(found.permissions),
        "events": list(found.events),
    }


def app_or_none(state: State, app_id: int | None) -> Json | None:
    found = state.apps.get(app_id) if app_id is not None else None
    return app(state, found) if found else None


_SIZES: dict[int, tuple[int, str, int]] = {}  # repo id -> (commits, the last one, files)


def _size(repo: Repo) -> int:
    """The files of every commit, counted again only when commits were added (they are
    only ever added: their number and the newest one's sha, which hashes its whole
    history, say whether the sum kept is still right)."""
    last = next(reversed(repo.commits), "")
    kept = _SIZES.get(repo.id)
    if kept is not None and kept[:2] == (len(repo.commits), last):
        return kept[2]
    size = sum(len(c.files) for c in repo.commits.values())
    _SIZES[repo.id] = (len(repo.commits), last, size)
    return size


def repository(state: State, repo: Repo, *, viewer_level: str | None = None) -> Json:
    api = f"{state.base_url}/repos/{repo.full_name}"
    html = f"{state.base_url}/{repo.full_name}"
    open_issues = sum(1 for i in repo.issues.values() if i.state == "open")
    data: Json = {
        "id": repo.id,
        "node_id": node_id("R", repo.id),
        "name": repo.name,
        "full_name": repo.full_name,
        "private": repo.private,
        "owner": user(state, repo.owner),
        "html_url": html,
        "description": repo.description,
        "fork": False,
        "url": api,
        "forks_url": f"{api}/forks",
        "keys_url": f"{api}/keys{{/key_id}}",
        "collaborators_url": f"{api}/collaborators{{/collaborator}}",
        "teams_url": f"{api}/teams",
        "hooks_url": f"{api}/hooks",
        "issue_events_url": f"{api}/issues/events{{/number}}",
        "events_url": f"{api}/events",
        "assignees_url": f"{api}/assignees{{/user}}",
        "branches_url": f"{api}/branches{{/branch}}",
        "tags_url": f"{api}/tags",
        "blobs_url": f"{api}/git/blobs{{/sha}}",
        "git_tags_url": f"{api}/git/tags{{/sha}}",
        "git_refs_url": f"{api}/git/refs{{/sha}}",
        "trees_url": f"{api}/git/trees{{/sha}}",
        "statuses_url": f"{api}/statuses/{{sha}}",
        "languages_url": f"{api}/languages",
        "stargazers_url": f"{api}/stargazers",
        "contributors_url": f"{api}/contributors",
        "subscribers_url": f"{api}/subscribers",
        "subscription_url": f"{api}/subscription",
        "commits_url": f"{api}/commits{{/sha}}",
        "git_commits_url": f"{api}/git/commits{{/sha}}",
        "comments_url": f"{api}/comments{{/number}}",
        "issue_comment_url": f"{api}/issues/comments{{/number}}",
        "contents_url": f"{api}/contents/{{+path}}",
        "compare_url": f"{api}/compare/{{base}}...{{head}}",
        "merges_url": f"{api}/merges",
        "archive_url": f"{api}/{{archive_format}}{{/ref}}",
        "downloads_url": f"{api}/downloads",
        "issues_url": f"{api}/issues{{/number}}",
        "pulls_url": f"{api}/pulls{{/number}}",
        "milestones_url": f"{api}/milestones{{/number}}",
        "notifications_url": f"{api}/notifications{{?since,all,participating}}",
        "labels_url": f"{api}/labels{{/name}}",
        "releases_url": f"{api}/releases{{/id}}",
        "deployments_url": f"{api}/deployments",
        "created_at": iso(repo.created_at),
        "updated_at": iso(repo.pushed_at or repo.created_at),
        "pushed_at": iso(repo.pushed_at or repo.created_at),
        "git_url": f"{html}.git",
        "ssh_url": f"{html}.git",
        "clone_url": f"{html}.git",
        "svn_url": html,
        "homepage": None,
        "size": _size(repo),
        "stargazers_count": 0,
        "watchers_count": 0,
        "language": "Python",
        "has_issues": True,
        "has_projects": False,
        "has_downloads": True,
        "has_wiki": False,
        "has_pages": False,
        "has_discussions": False,
        "forks_count": 0,
        "mirror_url": None,
        "archived": False,
        "disabled": False,
        "open_issues_count": open_issues,
        "license": None,
        "allow_forking": False,
        "is_template": False,
        "web_commit_signoff_required": False,
        "topics": [],
        "visibility": "private" if repo.private else "public",
        "forks": 0,
        "open_issues": open_issues,
        "watchers": 0,
        "default_branch": repo.default_branch,
        "allow_squash_merge": True,
        "allow_merge_commit": True,
        "allow_rebase_merge": True,
        "allow_update_branch": True,
        "delete_branch_on_merge": False,
        "custom_properties": {},
    }
    if viewer_level is not None:
        data["permissions"] = {
            "admin": level_at_least(viewer_level, "admin"),
            "maintain": level_at_least(viewer_level, "maintain"),
            "push": level_at_least(viewer_level, "write"),
            "triage": level_at_least(viewer_level, "triage"),
            "pull": level_at_least(viewer_level, "read"),
        }
    return data


def label(state: State, repo: Repo, found: Label) -> Json:
    return {
        "id": found.id,
        "node_id": node_id("LA", found.id),
        "url": f"{state.base_url}/repos/{repo.full_name}/labels/{found.name}",
        "name": found.name,
        "description": found.description,
        "color": found.color,
        "default": found.default,
    }


def labels(state: State, repo: Repo, names: list[str]) -> list[Json]:
    return [label(state, repo, repo.labels[n]) for n in names if n in repo.labels]


def reactions(url: str) -> Json:
    counts = dict.fromkeys(
        ("+1", "-1", "laugh", "confused", "heart", "hooray", "eyes", "rocket"), 0
    )
    return {"url": f"{url}/reactions", "total_count": 0, **counts}


def author_association(repo: Repo, login: str) -> str:
    if login == repo.owner:
        return "OWNER"
    level = repo.collaborators.get(login)
    if level is None:
        return "NONE"
    return "MEMBER" if level_at_least(level, "write") else "COLLABORATOR"


def issue(state: State, repo: Repo, found: Issue) -> Json:
    api = f"{state.base_url}/repos/{repo.full_name}/issues/{found.number}"
    kind = "pull" if found.is_pull else "issues"
    html = f"{state.base_url}/{repo.full_name}/{kind}/{found.number}"
    assignees = [user(state, a) for a in found.assignees]
    data: Json = {
        "url": api,
        "repository_url": f"{state.base_url}/repos/{repo.full_name}",
        "labels_url": f"{api}/labels{{/name}}",
        "comments_url": f"{api}/comments",
        "events_url": f"{api}/events",
        "html_url": html,
        "id": found.id,
        "node_id": node_id("I", found.id),
        "number": found.number,
        "title": found.title,
        "user": user(state, found.user),
        "labels": labels(state, repo, found.labels),
        "state": found.state,
        "locked": False,
        "assignee": assignees[0] if assignees else None,
        "assignees": assignees,
        "milestone": None,
        "comments": sum(1 for c in repo.comments.values() if c.number == found.number),
        "created_at": iso(found.created_at),
        "updated_at": iso(found.updated_at),
        "closed_at": iso(found.closed_at),
        "author_association": author_association(repo, found.user),
        "active_lock_reason": None,
        "body": found.body,
        "reactions": reactions(api),
        "timeline_url": f"{api}/timeline",
        "performed_via_github_app": None,
        "state_reason": found.state_reason,
    }
    if found.is_pull:
        pull = repo.pulls[found.number]
        pr_api = f"{state.base_url}/repos/{repo.full_name}/pulls/{found.number}"
        data["draft"] = pull.draft
        data["pull_request"] = {
            "url": pr_api,
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "merged_at": iso(pull.merged_at),
        }
    return data


def comment(state: State, repo: Repo, found: Comment) -> Json:
    api = f"{state.base_url}/repos/{repo.full_name}/issues/comments/{found.id}"
    kind = "pull" if repo.issues[found.number].is_pull else "issues"
    return {
        "url": api,
        "html_url": (
            f"{state.base_url}/{repo.full_name}/{kind}/{found.number}#issuecomment-{found.id}"
        ),
        "issue_url": f"{state.base_url}/repos/{repo.full_name}/issues/{found.number}",
        "id": found.id,
        "node_id": node_id("IC", found.id),
        "user": user(state, found.user),
        "created_at": iso(found.created_at),
        "updated_at": iso(found.updated_at),
        "author_association": author_association(repo, found.user),
        "body": found.body,
        "reactions": reactions(api),
        "performed_via_github_app": app_or_none(state, found.app_id),
    }
