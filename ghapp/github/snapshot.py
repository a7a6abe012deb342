"""What the delivery pipeline reads from GitHub before each decision.

:func:`read_policy` reads ``.github/autoloop.toml`` from the repository's default branch
(never from the pull request's head: a PR that edits its own policy changes nothing).
:func:`read_snapshot` fills a :class:`pipeline.snapshot.PullSnapshot` for one delivery,
and passes through what the shell learned on the pipeline's behalf (:class:`Extras`).
Answers are read leniently: a field GitHub leaves out is a default, never an error.

Only what the delivery's stage can use is read, so that a snapshot costs few calls:

========================================  =================================================
read                                      when
========================================  =================================================
``GET pulls/N``                           always (1)
``GET commits/<head>`` (its parents)      once per head (cached: commits never change)
``GET compare/<base>...<head>``           before the merge, in ``deliver`` (behind_base)
``GET commits/<head>/check-runs``         before the merge, in ``deliver`` (all runs, re-runs
                                          included; 1 per 100)
``GET commits/<head>/status``             before the merge, in ``deliver``
``GET branches/<base>/protection/...``    before the merge, in ``deliver``
``GET rules/branches/<base>``             before the merge, in ``deliver``
``GET pulls/N/reviews``                   before the merge, when the review is ``approvals:N``
``GET collaborators/<u>/permission``      per reviewer, cached for five minutes
``GET compare/<head>...<base>``           while the delivery reconciles an unclear merge
``GET deployments?environment=E``         once merged, with ``[deliver.deploy]`` (the newest
                                          ten)
``GET compare/<merge>...<sha>``           per deployed commit (cached: commits never change)
``GET deployments/D/statuses``            per deployment of the merge commit or a descendant
========================================  =================================================

So a delivery waiting for checks costs 6 calls a snapshot (7 on a new head; reviews and
new reviewers add theirs), one waiting for its deployment 2 plus one per deployment of
the merge commit or a descendant, and a ``deliver-review`` delivery 1. :func:`read_policy`
costs 2 (the repository, then the file).

Required checks come from classic branch protection (its ``checks``, each with the
``app_id`` that must report it, and plain ``contexts``) and from rulesets
(``required_status_checks`` rules, ``integration_id`` naming the app). A 403 on the
protection (an installation without the Administration permission) reads as none: GitHub
still reports such a PR ``blocked`` until the checks pass, and the pipeline waits on that.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard

from ghapp.github.client import WRITERS, GitHubClient
from ghapp.github.errors import Forbidden, NotFound, Unprocessable
from ghapp.github.readcache import CONTAINS, DEFAULT_CACHE, ReadCache
from pipeline.delivery import Delivery
from pipeline.policy import POLICY_PATH, Policy, PolicyProblem, parse_policy
from pipeline.snapshot import (
    CardAnswer,
    CheckRun,
    CommitStatus,
    Deployment,
    PrReview,
    PullSnapshot,
    Required,
    ReviewFindings,
    VersionObservation,
    WriteResult,
)

__all__ = ["DEPLOYMENTS_READ", "Extras", "read_policy", "read_snapshot"]

DEPLOYMENTS_READ = 10  # the newest deployments of the environment looked at
_DECISIVE = frozenset({"APPROVED", "CHANGES_REQUESTED", "DISMISSED"})

JSON = Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Extras:
    """What the shell learned on the pipeline's behalf, put into the snapshot as it is."""

    merge_queue_first: bool = True
    merge_queue_ahead: int = 0  # when not first: the pull request first in line
    results: tuple[WriteResult, ...] = ()
    findings: ReviewFindings | None = None
    versions: tuple[VersionObservation, ...] = ()
    answer: CardAnswer | None = None


# ------------------------------------------------------------------------------- policy


def read_policy(
    client: GitHubClient, repo: str, *, agents: frozenset[str] | None = None
) -> Policy | PolicyProblem:
    """The delivery policy on ``repo``'s default branch (missing file: the defaults).

    ``agents``: the agent names of rules.json, to check ``review = "agent:NAME"``.
    Errors reading GitHub propagate; a bad file is a :class:`PolicyProblem`.
    """
    default = _str(client.get_repo(repo), "default_branch")
    if not default:
        return PolicyProblem(
            key="", message=f"GitHub did not say which branch of {repo} is default"
        )
    text = client.get_file_contents(repo, POLICY_PATH, default)
    return parse_policy(text, agents=agents)


# ----------------------------------------------------------------------------- snapshot


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _reads() -> ThreadPoolExecutor:
    """The threads that make a snapshot's independent reads at once (made on first use)."""
    global _POOL  # noqa: PLW0603  # one pool per process, made lazily: no work at import
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=5, thread_name_prefix="github-reads")
        return _POOL


def read_snapshot(
    client: GitHubClient,
    delivery: Delivery,
    *,
    bot_login: str,
    bot_app_id: int | None,
    policy: Policy | PolicyProblem,
    extras: Extras = Extras(),
    cache: ReadCache | None = None,
) -> PullSnapshot:
    """The pull request of ``delivery`` as GitHub shows it now (see the module docstring
    for what is read when)."""
    cache = cache or DEFAULT_CACHE
    repo, number = delivery.repo, delivery.number
    pull = client.get_pull(repo, number)
    head, base = _dict(pull, "head"), _dict(pull, "base")
    head_sha = _str(head, "sha") or delivery.head_sha
    base_ref = _str(base, "ref") or delivery.base_ref or "main"
    head_repo = _str(_dict(head, "repo"), "full_name")
    merged = pull.get("merged") is True
    state: Literal["open", "closed"] = "closed" if pull.get("state") == "closed" else "open"
    rules = policy if isinstance(policy, Policy) else None

    deliver = delivery.mode == "deliver"
    before_merge = deliver and delivery.merge_sha is None and not merged and state == "open"
    reviews: tuple[PrReview, ...] = ()
    runs: tuple[CheckRun, ...] = ()
    statuses: tuple[CommitStatus, ...] = ()
    required: tuple[Required, ...] = ()
    behind = False
    if before_merge:
        # Independent reads, made at once: a decision waits for the slowest, not the sum.
        pool = _reads()
        behind_f = pool.submit(_behind, client, repo, base_ref, head_sha)
        runs_f = pool.submit(_check_runs, client, repo, head_sha)
        statuses_f = pool.submit(_statuses, client, repo, head_sha)
        protection_f = pool.submit(_protection, client, repo, base_ref)
        rulesets_f = pool.submit(_rulesets, client, repo, base_ref)
        if rules is not None and rules.review.kind == "approvals":
            reviews = _reviews(client, cache, repo, number, bot_login)
        behind, runs, statuses = behind_f.result(), runs_f.result(), statuses_f.result()
        required = protection_f.result() + rulesets_f.result()

    contains: bool | None = None
    if delivery.reconciling:
        status = _base_status(client, repo, head_sha, base_ref)
        contains = None if not status else status in CONTAINS

    merge_sha = _merge_sha(delivery, pull, merged, extras)
    deployments: tuple[Deployment, ...] = ()
    if deliver and merge_sha and rules is not None and rules.deploy is not None:
        deployments = _deployments(client, cache, repo, rules.deploy.environment, merge_sha)

    return PullSnapshot(
        repo=repo,
        number=number,
        head_sha=head_sha,
        base_ref=base_ref,
        head_ref=_str(head, "ref"),
        head_repo="" if head_repo.lower() in ("", repo.lower()) else head_repo,
        head_parents=cache.parents(client, repo, head_sha) if head_sha else (),
        state=state,
        merged=merged,
        merged_by=_str(_dict(pull, "merged_by"), "login"),
        # An open PR's merge_commit_sha is GitHub's test merge: it means nothing yet.
        merge_commit_sha=_str(pull, "merge_commit_sha") or None if merged else None,
        draft=pull.get("draft") is True,
        labels=tuple(_str(label, "name") for label in _list(pull, "labels") if _str(label, "name")),
        author=_str(_dict(pull, "user"), "login"),
        mergeable=pull.get("mergeable") if isinstance(pull.get("mergeable"), bool) else None,
        mergeable_state=_str(pull, "mergeable_state") or "unknown",
        behind_base=behind,
        base_contains_head=contains,
        reviews=reviews,
        check_runs=runs,
        statuses=statuses,
        required=required,
        deployments=deployments,
        versions=extras.versions,
        merge_queue_first=extras.merge_queue_first,
        merge_queue_ahead=extras.merge_queue_ahead,
        results=extras.results,
        findings=extras.findings,
        answer=extras.answer,
        bot_login=bot_login,
        bot_app_id=bot_app_id,
    )


def _merge_sha(delivery: Delivery, pull: JSON, merged: bool, extras: Extras) -> str | None:
    """The merge commit, as the pipeline will take it: ours, the answer to our merge, or
    GitHub's once the PR shows merged."""
    if delivery.merge_sha:
        return delivery.merge_sha
    attempt = delivery.merge_attempt
    if attempt is not None:
        for result in extras.results:
            if result.key == attempt.key and result.outcome == "done" and result.merge_commit_sha:
                return result.merge_commit_sha
    return (_str(pull, "merge_commit_sha") or None) if merged else None


def _behind(client: GitHubClient, repo: str, base_ref: str, head_sha: str) -> bool:
    """compare base...head: the base has commits the head lacks (False when GitHub cannot
    compare them, say the base branch is gone: the PR's merge state still tells)."""
    try:
        return _int(client.compare(repo, base_ref, head_sha), "behind_by") > 0
    except (NotFound, Unprocessable):
        return False


def _base_status(client: GitHubClient, repo: str, head_sha: str, base_ref: str) -> str:
    """compare head...base: "ahead" or "identical" when the base holds the head."""
    try:
        return _str(client.compare(repo, head_sha, base_ref), "status")
    except (NotFound, Unprocessable):
        return ""


def _check_runs(client: GitHubClient, repo: str, sha: str) -> tuple[CheckRun, ...]:
    out = []
    for run in client.list_check_runs_for_ref(repo, sha, latest=False):
        ident, name = run.get("id"), _str(run, "name")
        if not isinstance(ident, int) or not name:
            continue
        conclusion = run.get("conclusion")
        out.append(
            CheckRun(
                id=ident,
                name=name,
                app_id=_app_id(run.get("app")),
                status=_str(run, "status") or "queued",
                conclusion=conclusion if isinstance(conclusion, str) else None,
                head_sha=_str(run, "head_sha") or sha,
                completed_at=_str(run, "completed_at") or None,
            )
        )
    return tuple(out)


def _statuses(client: GitHubClient, repo: str, sha: str) -> tuple[CommitStatus, ...]:
    combined = client.get_combined_status(repo, sha)
    out = []
    for status in _list(combined, "statuses"):
        ident, context, state = status.get("id"), _str(status, "context"), _str(status, "state")
        if isinstance(ident, int) and context and state:
            out.append(
                CommitStatus(
                    id=ident, context=context, state=state, sha=_str(combined, "sha") or sha
                )
            )
    return tuple(out)


def _protection(client: GitHubClient, repo: str, branch: str) -> tuple[Required, ...]:
    try:
        found = client.get_required_status_checks(repo, branch)
    except Forbidden:
        return ()
    if found is None:
        return ()
    out: list[Required] = []
    named: set[str] = set()
    for check in _list(found, "checks"):
        name = _str(check, "context")
        if name:
            app = check.get("app_id")
            out.append(Required(name=name, app_id=app if _is_int(app) else None))
            named.add(name)
    for context in found.get("contexts") or ():
        if isinstance(context, str) and context and context not in named:
            out.append(Required(name=context))
            named.add(context)
    return tuple(out)


def _rulesets(client: GitHubClient, repo: str, branch: str) -> tuple[Required, ...]:
    out: list[Required] = []
    for rule in client.get_branch_rules(repo, branch):
        if rule.get("type") != "required_status_checks":
            continue
        for check in _list(_dict(rule, "parameters"), "required_status_checks"):
            name = _str(check, "context")
            if name:
                app = check.get("integration_id")
                out.append(
                    Required(name=name, app_id=app if _is_int(app) else None, source="ruleset")
                )
    return tuple(out)


def _reviews(
    client: GitHubClient, cache: ReadCache, repo: str, number: int, bot_login: str
) -> tuple[PrReview, ...]:
    out = []
    for review in client.list_reviews(repo, number):
        ident, user = review.get("id"), _str(_dict(review, "user"), "login")
        state = _str(review, "state").upper()
        if not isinstance(ident, int) or not user:
            continue
        # Only a decisive review by someone else than us is worth a permission lookup.
        asks = state in _DECISIVE and user.lower() != bot_login.lower()
        can_write = asks and cache.permission(client, repo, user) in WRITERS
        out.append(
            PrReview(
                id=ident,
                user=user,
                state=state,
                commit_id=_str(review, "commit_id"),
                author_can_write=can_write,
            )
        )
    return tuple(out)


def _deployments(
    client: GitHubClient, cache: ReadCache, repo: str, environment: str, merge_sha: str
) -> tuple[Deployment, ...]:
    """The newest deployments to ``environment`` of the merge commit or a descendant, each
    with its latest status (deployments of other commits are left out: they never count)."""
    out = []
    for found in client.list_deployments(repo, environment=environment, limit=DEPLOYMENTS_READ):
        ident, sha = found.get("id"), _str(found, "sha")
        if not isinstance(ident, int) or not sha:
            continue
        if cache.compare_status(client, repo, merge_sha, sha) not in CONTAINS:
            continue
        latest = client.list_deployment_statuses(repo, ident, limit=1)
        state = _str(latest[0], "state") if latest else ""
        out.append(
            Deployment(
                id=ident,
                sha=sha,
                environment=_str(found, "environment") or environment,
                state=state or "pending",
                sha_is_merge_or_descendant=True,
            )
        )
    return tuple(out)


# ------------------------------------------------------------------------------ lenient


def _dict(data: object, key: str) -> JSON:
    value = data.get(key) if isinstance(data, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _list(data: object, key: str) -> list[JSON]:
    value = data.get(key) if isinstance(data, Mapping) else None
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _str(data: object, key: str) -> str:
    value = data.get(key) if isinstance(data, Mapping) else None
    return value if isinstance(value, str) else ""


def _int(data: object, key: str) -> int:
    value = data.get(key) if isinstance(data, Mapping) else None
    return value if _is_int(value) else 0


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _app_id(app: object) -> int | None:
    ident = app.get("id") if isinstance(app, Mapping) else None
    return ident if isinstance(ident, int) and not isinstance(ident, bool) else None
