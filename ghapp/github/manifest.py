"""What the GitHub App needs, and why: the one place that says it.

``autoloop app create`` puts these permissions and events in the manifest it posts to
GitHub, ``autoloop doctor`` compares them with what the App and its installations were
granted, and ``docs/github-app.md`` shows them in a table that a test compares with
:func:`markdown_table`. Change the App's needs here and nowhere else.

GitHub ties each webhook event to a permission (``issues`` needs ``issues``, ``push``
needs ``contents``...): every event below names the permission it comes with, and a
test checks that it is among the permissions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EVENTS",
    "LEVELS",
    "PERMISSIONS",
    "WEBHOOK_PATH",
    "EventNeed",
    "PermissionNeed",
    "events_missing",
    "manifest",
    "markdown_table",
    "permissions_missing",
]

#: Where ``autoloop serve`` receives GitHub's webhooks.
WEBHOOK_PATH = "/github/webhook"
#: Permission levels, lowest first.
LEVELS = ("none", "read", "write", "admin")


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionNeed:
    name: str  # GitHub's name for the permission, as in a manifest's default_permissions
    level: str  # "read" or "write"
    why: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EventNeed:
    name: str  # the X-GitHub-Event name, as in a manifest's default_events
    permission: str  # the permission GitHub delivers it with
    why: str


PERMISSIONS: tuple[PermissionNeed, ...] = (
    PermissionNeed(
        name="metadata",
        level="read",
        why="every App has it: find repositories, and check that a person who answers "
        "with `/answer` has write access",
    ),
    PermissionNeed(
        name="issues",
        level="write",
        why="read issues and comments; post cards and `github.comment`, and apply "
        "`github.label`, `github.unlabel`, `github.close`, `github.reopen`, `github.assign`",
    ),
    PermissionNeed(
        name="pull_requests",
        level="write",
        why="read pull requests and reviews; `github.review`, mark a draft ready, update "
        "a branch, the delivery's sticky comment",
    ),
    PermissionNeed(
        name="contents",
        level="write",
        why="read `.github/autoloop.toml`, commits and comparisons; merge (`github.merge`) "
        "and delete a delivered branch",
    ),
    PermissionNeed(
        name="checks",
        level="write",
        why="read the required check runs; write the `autoloop/deliver` check run",
    ),
    PermissionNeed(
        name="statuses",
        level="read",
        why="read commit statuses that branch protection requires",
    ),
    PermissionNeed(
        name="deployments",
        level="read",
        why="follow the deployment of a merge commit to production",
    ),
    PermissionNeed(
        name="administration",
        level="read",
        why="read branch protection (required checks and approvals) before a merge",
    ),
)

EVENTS: tuple[EventNeed, ...] = (
    EventNeed(
        name="issues",
        permission="issues",
        why="rules on `issues.opened`, `issues.labeled`...",
    ),
    EventNeed(
        name="issue_comment",
        permission="issues",
        why="rules on comments, and `/answer CARD N` answers",
    ),
    EventNeed(
        name="pull_request",
        permission="pull_requests",
        why="the `deliver` and `deliver-review` labels, new pushes to a PR, rules on PRs",
    ),
    EventNeed(
        name="pull_request_review",
        permission="pull_requests",
        why="approvals a delivery waits for; rules on reviews",
    ),
    EventNeed(
        name="check_run",
        permission="checks",
        why="a delivery wakes when a required check finishes",
    ),
    EventNeed(
        name="check_suite",
        permission="checks",
        why="the same, for whole check suites",
    ),
    EventNeed(
        name="status",
        permission="statuses",
        why="a delivery wakes when a required commit status changes",
    ),
    EventNeed(
        name="push",
        permission="contents",
        why="a moved base branch (update the PR's branch) and a changed policy file",
    ),
    EventNeed(
        name="deployment",
        permission="deployments",
        why="a delivery sees its merge commit being deployed",
    ),
    EventNeed(
        name="deployment_status",
        permission="deployments",
        why="a delivery sees that deployment succeed or fail",
    ),
    EventNeed(
        name="release",
        permission="contents",
        why="rules on `release.published`",
    ),
)


def _rank(level: str | None) -> int:
    return LEVELS.index(level) if level in LEVELS else 0


def permissions_missing(granted: Mapping[str, Any]) -> list[str]:
    """The needed permissions ``granted`` lacks, as ``name:level`` (``name:level (has
    read)`` when a lower level was granted); empty when nothing is missing."""
    out = []
    for need in PERMISSIONS:
        have = granted.get(need.name)
        have_text = have if isinstance(have, str) else None
        if _rank(have_text) < _rank(need.level):
            out.append(f"{need.name}:{need.level}" + (f" (has {have_text})" if have_text else ""))
    return out


def events_missing(subscribed: Iterable[object]) -> list[str]:
    """The needed events missing from ``subscribed``."""
    have = {e for e in subscribed if isinstance(e, str)}
    return [e.name for e in EVENTS if e.name not in have]


def manifest(
    *,
    name: str,
    url: str,
    webhook_url: str,
    redirect_url: str,
    public: bool = False,
    description: str = "",
) -> dict[str, Any]:
    """The manifest GitHub's "create an App from a manifest" page takes (as the form
    field ``manifest``, JSON text)."""
    return {
        "name": name,
        "url": url,
        "description": description
        or "Runs command-line coding agents on GitHub events and delivers labelled pull "
        "requests (Autoloop).",
        "hook_attributes": {"url": webhook_url, "active": True},
        "redirect_url": redirect_url,
        "public": public,
        "default_permissions": {p.name: p.level for p in PERMISSIONS},
        "default_events": [e.name for e in EVENTS],
    }


def markdown_table() -> str:
    """The permissions and events as the Markdown table of ``docs/github-app.md``."""
    lines = ["| permission or event | access | why Autoloop needs it |", "|---|---|---|"]
    lines += [f"| `{p.name}` | {p.level} | {p.why} |" for p in PERMISSIONS]
    lines += [f"| event `{e.name}` | (with `{e.permission}`) | {e.why} |" for e in EVENTS]
    return "\n".join(lines) + "\n"
