"""The records the sandbox GitHub keeps: plain mutable dataclasses, one per GitHub object.

The sandbox is shell code (it owns a clock, threads and sockets), so unlike the kernel's
frozen facts these records are updated in place, always under the world lock
(:class:`fakegithub.state.State`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

# Repository permission levels, lowest first ("maintain" counts as write, "triage" as read).
LEVELS = ("none", "read", "triage", "write", "maintain", "admin")


def level_at_least(have: str, need: str) -> bool:
    return LEVELS.index(have) >= LEVELS.index(need)


@dataclass(slots=True)
class User:
    login: str
    id: int
    type: str = "User"  # "User", "Bot" or "Organization"
    name: str | None = None


@dataclass(slots=True)
class App:
    id: int
    slug: str
    name: str
    owner: str
    public_key_pem: bytes
    webhook_secret: str
    bot: User
    permissions: dict[str, str]
    events: list[str]
    created_at: datetime
    hook_id: int
    webhook_url: str | None = None


@dataclass(slots=True)
class ManifestCode:
    """The code GitHub's "create an App from a manifest" page redirects back with: it is
    exchanged once, within an hour, for the new App's credentials."""

    code: str
    app_id: int
    private_key_pem: str
    created_at: datetime
    used: bool = False


@dataclass(slots=True)
class Installation:
    id: int
    app_id: int
    account: str
    repo_ids: list[int]
    permissions: dict[str, str]
    created_at: datetime


@dataclass(slots=True)
class Commit:
    sha: str
    parents: tuple[str, ...]
    files: dict[str, bytes]  # the whole tree: path -> content
    message: str
    author: str
    time: datetime


@dataclass(slots=True)
class Label:
    id: int
    name: str
    color: str = "ededed"
    description: str | None = None
    default: bool = False


@dataclass(slots=True)
class Issue:
    """An issue, or the issue half of a pull request (GitHub shares the numbering)."""

    number: int
    id: int
    title: str
    body: str | None
    user: str
    created_at: datetime
    updated_at: datetime
    state: str = "open"
    labels: list[str] = field(default_factory=list)
    assignees: list[str] = field(default_factory=list)
    closed_at: datetime | None = None
    state_reason: str | None = None
    is_pull: bool = False
    #: what ``GET .../issues/{n}/events`` lists: (id, event, actor login, label, when)
    timeline: list[tuple[int, str, str, str, datetime]] = field(default_factory=list)


@dataclass(slots=True)
class Pull:
    number: int
    id: int
    head_ref: str
    base_ref: str
    head_sha: str
    draft: bool = False
    merged: bool = False
    merged_at: datetime | None = None
    merged_by: str | None = None
    merge_commit_sha: str | None = None
    maintainer_can_modify: bool = False
    unknown_until: float = 0.0  # time.monotonic() until which mergeability is "unknown"


@dataclass(slots=True)
class Comment:
    id: int
    number: int
    user: str
    body: str
    created_at: datetime
    updated_at: datetime
    app_id: int | None = None


@dataclass(slots=True)
class Review:
    id: int
    number: int
    user: str
    body: str
    state: str  # APPROVED, CHANGES_REQUESTED, COMMENTED, DISMISSED
    commit_id: str
    submitted_at: datetime


@dataclass(slots=True)
class CheckSuite:
    id: int
    head_sha: str
    head_branch: str | None
    app_id: int
    created_at: datetime
    updated_at: datetime
    status: str = "queued"
    conclusion: str | None = None


@dataclass(slots=True)
class CheckRun:
    id: int
    suite_id: int
    app_id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    started_at: datetime | None
    completed_at: datetime | None
    external_id: str | None = None
    details_url: str | None = None
    output: dict[str, str | None] = field(default_factory=dict)


@dataclass(slots=True)
class CommitStatus:
    id: int
    sha: str
    state: str
    context: str
    description: str | None
    target_url: str | None
    creator: str
    created_at: datetime
    updated_at: datetime


@dataclass(slots=True)
class Protection:
    branch: str
    contexts: list[str]
    strict: bool = False
    required_approvals: int = 0
    apps: dict[str, int] = field(default_factory=dict)  # context -> the app that must report it


@dataclass(slots=True)
class Ruleset:
    id: int
    name: str
    branches: list[str]  # fnmatch patterns of branch names
    rules: list[dict[str, object]]  # GitHub rule objects: {"type": ..., "parameters": ...}


@dataclass(slots=True)
class DeploymentStatus:
    id: int
    state: str
    description: str
    environment: str
    creator: str
    created_at: datetime
    target_url: str = ""
    log_url: str = ""
    environment_url: str = ""
    app_id: int | None = None


@dataclass(slots=True)
class Deployment:
    id: int
    sha: str
    ref: str
    task: str
    environment: str
    description: str | None
    creator: str
    created_at: datetime
    payload: dict[str, object] = field(default_factory=dict)
    production_environment: bool = True
    transient_environment: bool = False
    app_id: int | None = None
    statuses: list[DeploymentStatus] = field(default_factory=list)


@dataclass(slots=True)
class Release:
    id: int
    tag_name: str
    target_commitish: str
    name: str | None
    body: str | None
    author: str
    created_at: datetime
    published_at: datetime | None
    draft: bool = False
    prerelease: bool = False


@dataclass(slots=True)
class Repo:
    id: int
    owner: str
    name: str
    created_at: datetime
    default_branch: str = "main"
    private: bool = True
    description: str | None = None
    pushed_at: datetime | None = None
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)
    labels: dict[str, Label] = field(default_factory=dict)
    collaborators: dict[str, str] = field(default_factory=dict)  # login -> level
    issues: dict[int, Issue] = field(default_factory=dict)
    pulls: dict[int, Pull] = field(default_factory=dict)
    comments: dict[int, Comment] = field(default_factory=dict)
    reviews: dict[int, Review] = field(default_factory=dict)
    check_suites: dict[int, CheckSuite] = field(default_factory=dict)
    check_runs: dict[int, CheckRun] = field(default_factory=dict)
    statuses: list[CommitStatus] = field(default_factory=list)
    protections: dict[str, Protection] = field(default_factory=dict)
    rulesets: list[Ruleset] = field(default_factory=list)
    deployments: dict[int, Deployment] = field(default_factory=dict)
    releases: list[Release] = field(default_factory=list)
    next_number: int = 1
    mergeability_lag: float = 0.0  # seconds GitHub takes to recompute mergeability

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"
