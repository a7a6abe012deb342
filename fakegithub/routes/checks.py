"""REST routes for check runs, commit statuses, deployments and releases."""

from __future__ import annotations

from starlette.routing import Route

from fakegithub.api import Ctx, Result, endpoint, paginate
from fakegithub.errors import ApiError, not_found
from fakegithub.ops import checks as ops
from fakegithub.ops.git import resolve
from fakegithub.render.checks import (
    check_run,
    combined_status,
    commit_status,
    deployment,
    deployment_status,
    release,
)

REPO = "/repos/{owner}/{repo}"


def _sha(ctx: Ctx) -> str:
    try:
        return resolve(ctx.repo, ctx.param("ref"))
    except ApiError as exc:
        raise not_found() from exc


@endpoint(perms=("checks",), level="write", user_level="write")
def create_check_run(ctx: Ctx) -> Result:
    run = ops.create_check_run(ctx.sandbox.state, ctx.repo, ctx.actor, ctx.object_body())
    return 201, check_run(ctx.sandbox.state, ctx.repo, run)


@endpoint(perms=("checks",), level="write", user_level="write")
def update_check_run(ctx: Ctx) -> Result:
    run = ops.update_check_run(
        ctx.sandbox.state, ctx.repo, ctx.actor, ctx.number("run_id"), ctx.object_body()
    )
    return 200, check_run(ctx.sandbox.state, ctx.repo, run)


@endpoint(perms=("checks",))
def get_check_run(ctx: Ctx) -> Result:
    run = ctx.repo.check_runs.get(ctx.number("run_id"))
    if run is None:
        raise not_found()
    return 200, check_run(ctx.sandbox.state, ctx.repo, run)


@endpoint(perms=("checks",))
def list_check_runs(ctx: Ctx) -> Result:
    sha = _sha(ctx)
    query = ctx.request.query_params
    runs = sorted(
        (r for r in ctx.repo.check_runs.values() if r.head_sha == sha), key=lambda r: -r.id
    )
    if query.get("check_name"):
        runs = [r for r in runs if r.name == query["check_name"]]
    if query.get("status"):
        runs = [r for r in runs if r.status == query["status"]]
    if query.get("app_id"):
        runs = [r for r in runs if str(r.app_id) == query["app_id"]]
    if query.get("filter", "latest") == "latest":
        seen: set[tuple[int, str]] = set()
        latest = []
        for run in runs:
            if (run.app_id, run.name) not in seen:
                seen.add((run.app_id, run.name))
                latest.append(run)
        runs = latest
    page, headers = paginate(ctx, runs)
    data = {
        "total_count": len(runs),
        "check_runs": [check_run(ctx.sandbox.state, ctx.repo, r) for r in page],
    }
    return 200, data, headers


@endpoint(perms=("statuses", "contents"))
def get_combined_status(ctx: Ctx) -> Result:
    return 200, combined_status(ctx.sandbox.state, ctx.repo, _sha(ctx))


@endpoint(perms=("statuses",), level="write", user_level="write")
def create_status(ctx: Ctx) -> Result:
    found = ops.create_status(
        ctx.sandbox.state, ctx.repo, ctx.actor, ctx.param("sha"), ctx.object_body()
    )
    return 201, commit_status(ctx.sandbox.state, ctx.repo, found)


@endpoint(perms=("deployments",))
def list_deployments(ctx: Ctx) -> Result:
    query = ctx.request.query_params
    items = sorted(ctx.repo.deployments.values(), key=lambda d: -d.id)
    for name in ("sha", "ref", "task", "environment"):
        if query.get(name):
            items = [d for d in items if getattr(d, name) == query[name]]
    page, headers = paginate(ctx, items)
    return 200, [deployment(ctx.sandbox.state, ctx.repo, d) for d in page], headers


@endpoint(perms=("deployments",), level="write", user_level="write")
def create_deployment(ctx: Ctx) -> Result:
    found = ops.create_deployment(ctx.sandbox.state, ctx.repo, ctx.actor, ctx.object_body())
    return 201, deployment(ctx.sandbox.state, ctx.repo, found)


@endpoint(perms=("deployments",))
def list_deployment_statuses(ctx: Ctx) -> Result:
    found = ctx.repo.deployments.get(ctx.number("deployment_id"))
    if found is None:
        raise not_found()
    items = list(reversed(found.statuses))
    page, headers = paginate(ctx, items)
    state = ctx.sandbox.state
    return 200, [deployment_status(state, ctx.repo, found, s) for s in page], headers


@endpoint(perms=("deployments",), level="write", user_level="write")
def create_deployment_status(ctx: Ctx) -> Result:
    deployment_id = ctx.number("deployment_id")
    status = ops.create_deployment_status(
        ctx.sandbox.state, ctx.repo, ctx.actor, deployment_id, ctx.object_body()
    )
    found = ctx.repo.deployments[deployment_id]
    return 201, deployment_status(ctx.sandbox.state, ctx.repo, found, status)


@endpoint(perms=("contents",))
def latest_release(ctx: Ctx) -> Result:
    return 200, release(ctx.sandbox.state, ctx.repo, ops.latest_release(ctx.repo))


@endpoint(perms=("contents",), level="write", user_level="write")
def create_release(ctx: Ctx) -> Result:
    found = ops.create_release(ctx.sandbox.state, ctx.repo, ctx.actor, ctx.object_body())
    return 201, release(ctx.sandbox.state, ctx.repo, found)


ROUTES = [
    Route(f"{REPO}/check-runs", create_check_run, methods=["POST"]),
    Route(f"{REPO}/check-runs/{{run_id}}", get_check_run, methods=["GET"]),
    Route(f"{REPO}/check-runs/{{run_id}}", update_check_run, methods=["PATCH"]),
    Route(f"{REPO}/commits/{{ref:path}}/check-runs", list_check_runs, methods=["GET"]),
    Route(f"{REPO}/commits/{{ref:path}}/status", get_combined_status, methods=["GET"]),
    Route(f"{REPO}/statuses/{{sha}}", create_status, methods=["POST"]),
    Route(f"{REPO}/deployments", list_deployments, methods=["GET"]),
    Route(f"{REPO}/deployments", create_deployment, methods=["POST"]),
    Route(
        f"{REPO}/deployments/{{deployment_id}}/statuses", list_deployment_statuses, methods=["GET"]
    ),
    Route(
        f"{REPO}/deployments/{{deployment_id}}/statuses", create_deployment_status, methods=["POST"]
    ),
    Route(f"{REPO}/releases/latest", latest_release, methods=["GET"]),
    Route(f"{REPO}/releases", create_release, methods=["POST"]),
]
