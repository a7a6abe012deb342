"""What GitHub decides about a pull request before a merge: required checks, approvals,
conflicts, and the resulting ``mergeable`` / ``mergeable_state``."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from fakegithub import git
from fakegithub.model import Pull, Repo

PASSING = {"success", "neutral", "skipped"}


@dataclass(frozen=True, slots=True)
class Requirements:
    contexts: tuple[str, ...]
    strict: bool
    approvals: int
    apps: dict[str, int]  # a context that only counts when this app (integration) reports it


def requirements(repo: Repo, branch: str) -> Requirements:
    """Branch protection and active rulesets for ``branch``, combined."""
    contexts: list[str] = []
    apps: dict[str, int] = {}
    strict = False
    approvals = 0
    protection = repo.protections.get(branch)
    if protection is not None:
        contexts.extend(protection.contexts)
        apps.update(protection.apps)
        strict = protection.strict
        approvals = protection.required_approvals
    for ruleset in repo.rulesets:
        if not any(fnmatch.fnmatchcase(branch, p) for p in ruleset.branches):
            continue
        for rule in ruleset.rules:
            params = rule.get("parameters")
            if not isinstance(params, dict):
                continue
            if rule.get("type") == "required_status_checks":
                for check in params.get("required_status_checks", []):
                    contexts.append(str(check["context"]))
                    if isinstance(check.get("integration_id"), int):
                        apps[str(check["context"])] = check["integration_id"]
                strict = strict or bool(params.get("strict_required_status_checks_policy"))
            elif rule.get("type") == "pull_request":
                approvals = max(approvals, int(params.get("required_approving_review_count", 0)))
    return Requirements(tuple(dict.fromkeys(contexts)), strict, approvals, apps)


def context_results(repo: Repo, sha: str, *, app_id: int | None = None) -> dict[str, str]:
    """Latest result per check name or status context on ``sha``:
    "success", "pending" or "failure" (``app_id``: only what that app reported)."""
    results: dict[str, str] = {}
    statuses = (s for s in repo.statuses if s.sha == sha and app_id is None)
    for status in sorted(statuses, key=lambda s: s.id):
        results[status.context] = {"success": "success", "pending": "pending"}.get(
            status.state, "failure"
        )
    for run in sorted(
        (r for r in repo.check_runs.values() if r.head_sha == sha and app_id in (None, r.app_id)),
        key=lambda r: r.id,
    ):
        if run.status != "completed":
            results[run.name] = "pending"
        else:
            results[run.name] = "success" if run.conclusion in PASSING else "failure"
    return results


def approvals(repo: Repo, pull: Pull) -> int:
    """Approving reviews by people with write access, latest review per person."""
    latest: dict[str, str] = {}
    for review in sorted(repo.reviews.values(), key=lambda r: r.id):
        if review.number == pull.number and review.state != "COMMENTED":
            latest[review.user] = review.state
    return sum(
        1
        for login, state in latest.items()
        if state == "APPROVED" and repo.collaborators.get(login) in {"write", "maintain", "admin"}
    )


def conflicts(repo: Repo, pull: Pull) -> bool:
    base_sha = repo.branches.get(pull.base_ref)
    if base_sha is None:
        return True
    return git.merged_tree(repo, base_sha, pull.head_sha) is None


def blockers(repo: Repo, pull: Pull) -> list[str]:
    """Why a merge is refused by protection, in GitHub's words; empty when it may merge."""
    need = requirements(repo, pull.base_ref)
    reasons: list[str] = []
    results = context_results(repo, pull.head_sha)
    for context in need.contexts:
        app_id = need.apps.get(context)
        if app_id is None:
            state = results.get(context)
        else:  # a rule naming an app: the same name from another app does not count
            state = context_results(repo, pull.head_sha, app_id=app_id).get(context)
        if state is None or state == "pending":
            reasons.append(f'Required status check "{context}" is expected.')
        elif state == "failure":
            reasons.append(f'Required status check "{context}" is failing.')
    if need.approvals and approvals(repo, pull) < need.approvals:
        reasons.append(
            f"At least {need.approvals} approving review is required by reviewers with "
            "write access."
        )
    base_sha = repo.branches.get(pull.base_ref, "")
    if need.strict and need.contexts and not git.is_ancestor(repo, base_sha, pull.head_sha):
        reasons.append("Head branch is not up to date with the base branch.")
    return reasons


def mergeable_state(repo: Repo, pull: Pull) -> tuple[bool | None, str]:
    """(mergeable, mergeable_state) as GitHub reports them on an open pull request."""
    if pull.merged:
        return None, "unknown"
    if conflicts(repo, pull):
        return False, "dirty"
    if pull.draft:
        return True, "draft"
    need = requirements(repo, pull.base_ref)
    base_sha = repo.branches.get(pull.base_ref, "")
    behind = not git.is_ancestor(repo, base_sha, pull.head_sha)
    if blockers(repo, pull):
        return True, "behind" if need.strict and behind and need.contexts else "blocked"
    if any(v == "failure" for v in context_results(repo, pull.head_sha).values()):
        return True, "unstable"
    return True, "clean"
