"""Writes about commits: check runs and suites, commit statuses, deployments, releases."""

from __future__ import annotations

from typing import Any

from fakegithub.errors import ApiError, not_found
from fakegithub.events import emit
from fakegithub.merging import context_results
from fakegithub.model import (
    CheckRun,
    CheckSuite,
    CommitStatus,
    Deployment,
    DeploymentStatus,
    Release,
    Repo,
)
from fakegithub.ops.git import resolve
from fakegithub.render.checks import check_run as render_run
from fakegithub.render.checks import check_suite as render_suite
from fakegithub.render.checks import commit, deployment, deployment_status, release
from fakegithub.state import Actor, State, iso

CONCLUSIONS = {
    "action_required",
    "cancelled",
    "failure",
    "neutral",
    "success",
    "skipped",
    "stale",
    "timed_out",
}
STATUSES = {"queued", "in_progress", "completed"}
STATUS_STATES = {"error", "failure", "pending", "success"}
DEPLOY_STATES = {"error", "failure", "inactive", "in_progress", "queued", "pending", "success"}


def _invalid(resource: str, field: str) -> ApiError:
    return ApiError(
        422, "Validation Failed", errors=[{"resource": resource, "code": "invalid", "field": field}]
    )


def _suite(state: State, repo: Repo, app_id: int, sha: str) -> CheckSuite:
    for suite in repo.check_suites.values():
        if suite.app_id == app_id and suite.head_sha == sha:
            return suite
    branch = next((b for b, s in repo.branches.items() if s == sha), None)
    now = state.now()
    suite = CheckSuite(state.new_id(), sha, branch, app_id, now, now)
    repo.check_suites[suite.id] = suite
    return suite


def _after_run_change(state: State, repo: Repo, actor: Actor, run: CheckRun, action: str) -> None:
    emit(
        state,
        "check_run",
        {"action": action, "check_run": render_run(state, repo, run)},
        repo=repo,
        actor=actor,
    )
    suite = repo.check_suites[run.suite_id]
    runs = [r for r in repo.check_runs.values() if r.suite_id == suite.id]
    suite.updated_at = state.now()
    if all(r.status == "completed" for r in runs):
        conclusions = {r.conclusion for r in runs}
        for worst in ("action_required", "cancelled", "timed_out", "failure", "stale"):
            if worst in conclusions:
                suite.conclusion = worst
                break
        else:
            suite.conclusion = "success" if "success" in conclusions else "neutral"
        suite.status = "completed"
        emit(
            state,
            "check_suite",
            {"action": "completed", "check_suite": render_suite(state, repo, suite)},
            repo=repo,
            actor=actor,
        )
    else:
        suite.status = "in_progress"
        suite.conclusion = None


def create_check_run(state: State, repo: Repo, actor: Actor, body: dict[str, Any]) -> CheckRun:
    if actor.app_id is None:
        raise ApiError(403, "You must authenticate via a GitHub App.")
    name, head_sha = body.get("name"), body.get("head_sha")
    if not isinstance(name, str) or not name:
        raise ApiError(
            422,
            "Validation Failed",
            errors=[{"resource": "CheckRun", "code": "missing_field", "field": "name"}],
        )
    if not isinstance(head_sha, str) or head_sha not in repo.commits:
        raise ApiError(422, "No commit found for SHA: " + str(head_sha))
    status = body.get("status", "queued")
    conclusion = body.get("conclusion")
    if conclusion is not None:
        status = "completed"
    if status not in STATUSES:
        raise _invalid("CheckRun", "status")
    if status == "completed" and conclusion not in CONCLUSIONS:
        raise ApiError(
            422,
            "Validation Failed",
            errors=[{"resource": "CheckRun", "code": "missing_field", "field": "conclusion"}],
        )
    with state.lock:
        now = state.now()
        suite = _suite(state, repo, actor.app_id, head_sha)
        run = CheckRun(
            id=state.new_id(),
            suite_id=suite.id,
            app_id=actor.app_id,
            name=name,
            head_sha=head_sha,
            status=status,
            conclusion=conclusion,
            started_at=now,
            completed_at=now if status == "completed" else None,
            external_id=body.get("external_id"),
            details_url=body.get("details_url"),
            output=_output(body.get("output")),
        )
        repo.check_runs[run.id] = run
        _after_run_change(state, repo, actor, run, "created")
        if status == "completed":
            emit(
                state,
                "check_run",
                {"action": "completed", "check_run": render_run(state, repo, run)},
                repo=repo,
                actor=actor,
            )
        return run


def _output(raw: Any) -> dict[str, str | None]:
    if not isinstance(raw, dict):
        return {}
    return {k: raw.get(k) for k in ("title", "summary", "text") if k in raw}


def update_check_run(
    state: State, repo: Repo, actor: Actor, run_id: int, body: dict[str, Any]
) -> CheckRun:
    with state.lock:
        run = repo.check_runs.get(run_id)
        if run is None:
            raise not_found()
        if actor.app_id != run.app_id:
            raise ApiError(
                403,
                f"Invalid app_id `{actor.app_id}` - check run can only be modified by its creator.",
            )
        was_completed = run.status == "completed"
        status = body.get("status", run.status)
        conclusion = body.get("conclusion", run.conclusion)
        if "conclusion" in body and body["conclusion"] is not None:
            status = "completed"
        if status not in STATUSES | {"waiting", "requested", "pending"}:
            raise _invalid("CheckRun", "status")
        if status == "completed" and conclusion not in CONCLUSIONS:
            raise ApiError(
                422,
                "Validation Failed",
                errors=[{"resource": "CheckRun", "code": "missing_field", "field": "conclusion"}],
            )
        run.status, run.conclusion = status, conclusion if status == "completed" else None
        for field in ("name", "external_id", "details_url"):
            if isinstance(body.get(field), str):
                setattr(run, field, body[field])
        if "output" in body:
            run.output.update(_output(body["output"]))
        if status == "completed" and not was_completed:
            run.completed_at = state.now()
            _after_run_change(state, repo, actor, run, "completed")
        return run


def create_status(
    state: State, repo: Repo, actor: Actor, sha: str, body: dict[str, Any]
) -> CommitStatus:
    st = body.get("state")
    if st not in STATUS_STATES:
        raise _invalid("Status", "state")
    with state.lock:
        full = resolve(repo, sha)
        now = state.now()
        found = CommitStatus(
            state.new_id(),
            full,
            st,
            str(body.get("context") or "default"),
            body.get("description"),
            body.get("target_url"),
            actor.login,
            now,
            now,
        )
        repo.statuses.append(found)
        branches = [
            {
                "name": b,
                "commit": {"sha": s, "url": f"{state.base_url}/repos/{repo.full_name}/commits/{s}"},
                "protected": b in repo.protections,
            }
            for b, s in repo.branches.items()
            if s == full
        ]
        emit(
            state,
            "status",
            {
                "id": found.id,
                "sha": full,
                "name": repo.full_name,
                "target_url": found.target_url,
                "context": found.context,
                "description": found.description,
                "state": found.state,
                "commit": commit(state, repo, repo.commits[full]),
                "branches": branches,
                "created_at": iso(now),
                "updated_at": iso(now),
            },
            repo=repo,
            actor=actor,
        )
        return found


def create_deployment(state: State, repo: Repo, actor: Actor, body: dict[str, Any]) -> Deployment:
    ref = body.get("ref")
    if not isinstance(ref, str) or not ref:
        raise ApiError(
            422,
            "Validation Failed",
            errors=[{"resource": "Deployment", "code": "missing_field", "field": "ref"}],
        )
    with state.lock:
        try:
            sha = resolve(repo, ref)
        except ApiError as exc:
            raise ApiError(422, f"No ref found for: {ref}") from exc
        results = context_results(repo, sha)
        required = body.get("required_contexts")
        wanted = list(results) if required is None else list(required)
        failing = [c for c in wanted if results.get(c) != "success"]
        if failing:
            raise ApiError(
                409,
                f"Conflict: Commit status checks failed for {ref}.",
                errors=[
                    {
                        "contexts": [
                            {"context": c, "state": results.get(c, "missing")} for c in failing
                        ],
                        "resource": "Deployment",
                        "field": "required_contexts",
                        "code": "invalid",
                    }
                ],
            )
        payload = body.get("payload") or {}
        if isinstance(payload, str):
            payload = {"raw": payload}
        environment = str(body.get("environment") or "production")
        found = Deployment(
            id=state.new_id(),
            sha=sha,
            ref=ref,
            task=str(body.get("task") or "deploy"),
            environment=environment,
            description=body.get("description"),
            creator=actor.login,
            created_at=state.now(),
            payload=payload,
            production_environment=bool(
                body.get("production_environment", environment == "production")
            ),
            transient_environment=bool(body.get("transient_environment", False)),
            app_id=actor.app_id,
        )
        repo.deployments[found.id] = found
        emit(
            state,
            "deployment",
            {
                "action": "created",
                "deployment": deployment(state, repo, found),
                "workflow": None,
                "workflow_run": None,
            },
            repo=repo,
            actor=actor,
        )
        return found


def create_deployment_status(
    state: State, repo: Repo, actor: Actor, deployment_id: int, body: dict[str, Any]
) -> DeploymentStatus:
    st = body.get("state")
    if st not in DEPLOY_STATES:
        raise _invalid("DeploymentStatus", "state")
    with state.lock:
        found = repo.deployments.get(deployment_id)
        if found is None:
            raise not_found()
        status = DeploymentStatus(
            id=state.new_id(),
            state=st,
            description=str(body.get("description") or ""),
            environment=str(body.get("environment") or found.environment),
            creator=actor.login,
            created_at=state.now(),
            target_url=str(body.get("target_url") or body.get("log_url") or ""),
            log_url=str(body.get("log_url") or body.get("target_url") or ""),
            environment_url=str(body.get("environment_url") or ""),
            app_id=actor.app_id,
        )
        found.statuses.append(status)
        emit(
            state,
            "deployment_status",
            {
                "action": "created",
                "deployment_status": deployment_status(state, repo, found, status),
                "deployment": deployment(state, repo, found),
            },
            repo=repo,
            actor=actor,
        )
        return status


def create_release(state: State, repo: Repo, actor: Actor, body: dict[str, Any]) -> Release:
    tag = body.get("tag_name")
    if not isinstance(tag, str) or not tag:
        raise ApiError(
            422,
            "Validation Failed",
            errors=[{"resource": "Release", "code": "missing_field", "field": "tag_name"}],
        )
    with state.lock:
        if any(r.tag_name == tag for r in repo.releases):
            raise ApiError(
                422,
                "Validation Failed",
                errors=[{"resource": "Release", "code": "already_exists", "field": "tag_name"}],
            )
        target = str(body.get("target_commitish") or repo.default_branch)
        resolve(repo, target)
        draft = bool(body.get("draft", False))
        now = state.now()
        found = Release(
            state.new_id(),
            tag,
            target,
            body.get("name") or tag,
            body.get("body"),
            actor.login,
            now,
            None if draft else now,
            draft,
            bool(body.get("prerelease", False)),
        )
        repo.releases.append(found)
        rendered = release(state, repo, found)
        emit(state, "release", {"action": "created", "release": rendered}, repo=repo, actor=actor)
        if not draft:
            emit(
                state,
                "release",
                {"action": "published", "release": rendered},
                repo=repo,
                actor=actor,
            )
        return found


def latest_release(repo: Repo) -> Release:
    published = [r for r in repo.releases if not r.draft and not r.prerelease]
    if not published:
        raise not_found()
    return max(published, key=lambda r: (r.created_at, r.id))
