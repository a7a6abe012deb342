"""REST routes for pull requests: list, get, create, update, files, reviews, update-branch,
merge."""

from __future__ import annotations

from starlette.routing import Route

from fakegithub.api import Ctx, Result, endpoint, paginate
from fakegithub.errors import ApiError
from fakegithub.ops import pulls as ops
from fakegithub.render.pulls import file_changes, pull_request, review

PERMS = ("pull_requests",)
REPO = "/repos/{owner}/{repo}"


@endpoint(perms=PERMS)
def list_pulls(ctx: Ctx) -> Result:
    query = ctx.request.query_params
    wanted = query.get("state", "open")
    head = query.get("head")
    base = query.get("base")
    # GitHub's default order is by creation, newest first; ``sort=updated`` orders by the
    # issue's last update (a comment, a label, a merge), ``direction=asc`` reverses.
    if query.get("sort") == "updated":
        order = sorted(
            ctx.repo.pulls.values(),
            key=lambda p: (ctx.repo.issues[p.number].updated_at, p.number),
            reverse=query.get("direction", "desc") != "asc",
        )
    else:
        order = sorted(
            ctx.repo.pulls.values(),
            key=lambda p: p.number,
            reverse=query.get("direction", "desc") != "asc",
        )
    items = []
    for pull in order:
        issue = ctx.repo.issues[pull.number]
        if wanted not in {"all", issue.state}:
            continue
        if head and head.split(":", 1)[-1] != pull.head_ref:
            continue
        if base and base != pull.base_ref:
            continue
        items.append(pull)
    page, headers = paginate(ctx, items)
    return 200, [pull_request(ctx.sandbox.state, ctx.repo, p) for p in page], headers


@endpoint(perms=PERMS)
def get_pull(ctx: Ctx) -> Result:
    pull = ops.get_pull(ctx.repo, ctx.number("number"))
    return 200, pull_request(ctx.sandbox.state, ctx.repo, pull)


@endpoint(perms=PERMS, level="write", user_level="read")
def create_pull(ctx: Ctx) -> Result:
    body = ctx.object_body()
    pull = ops.open_pull(
        ctx.sandbox.state,
        ctx.repo,
        ctx.actor,
        head=str(body.get("head") or ""),
        base=body.get("base"),
        title=str(body.get("title") or ""),
        body=body.get("body"),
        draft=bool(body.get("draft", False)),
    )
    return 201, pull_request(ctx.sandbox.state, ctx.repo, pull)


@endpoint(perms=PERMS, level="write", user_level="write")
def update_pull(ctx: Ctx) -> Result:
    pull = ops.update_pull(
        ctx.sandbox.state, ctx.repo, ctx.actor, ctx.number("number"), ctx.object_body()
    )
    return 200, pull_request(ctx.sandbox.state, ctx.repo, pull)


@endpoint(perms=PERMS)
def list_files(ctx: Ctx) -> Result:
    pull = ops.get_pull(ctx.repo, ctx.number("number"))
    page, headers = paginate(ctx, file_changes(ctx.repo, pull))
    return 200, page, headers


@endpoint(perms=PERMS)
def list_reviews(ctx: Ctx) -> Result:
    number = ctx.number("number")
    ops.get_pull(ctx.repo, number)
    items = sorted((r for r in ctx.repo.reviews.values() if r.number == number), key=lambda r: r.id)
    page, headers = paginate(ctx, items)
    return 200, [review(ctx.sandbox.state, ctx.repo, r) for r in page], headers


@endpoint(perms=PERMS, level="write", user_level="read")
def create_review(ctx: Ctx) -> Result:
    found = ops.create_review(
        ctx.sandbox.state,
        ctx.repo,
        ctx.actor,
        ctx.number("number"),
        event=ctx.field("event"),
        body=ctx.field("body"),
        commit_id=ctx.field("commit_id"),
    )
    return 200, review(ctx.sandbox.state, ctx.repo, found)


@endpoint(perms=("pull_requests", "contents"), level="write", user_level="write")
def update_branch(ctx: Ctx) -> Result:
    number = ctx.number("number")
    ops.update_branch(
        ctx.sandbox.state, ctx.repo, ctx.actor, number, ctx.field("expected_head_sha")
    )
    url = f"{ctx.sandbox.state.base_url}/{ctx.repo.full_name}/pull/{number}"
    return 202, {"message": "Updating pull request branch.", "url": url}


@endpoint(perms=("contents",), level="write", user_level="write")
def merge(ctx: Ctx) -> Result:
    sha = ops.merge(
        ctx.sandbox.state,
        ctx.repo,
        ctx.actor,
        ctx.number("number"),
        sha=ctx.field("sha"),
        merge_method=ctx.field("merge_method") or "merge",
        commit_title=ctx.field("commit_title"),
        commit_message=ctx.field("commit_message"),
    )
    return 200, {"sha": sha, "merged": True, "message": "Pull Request successfully merged"}


@endpoint(perms=PERMS)
def is_merged(ctx: Ctx) -> Result:
    """``GET .../pulls/{n}/merge``: 204 if merged, 404 if not (GitHub's answer)."""
    pull = ops.get_pull(ctx.repo, ctx.number("number"))
    if not pull.merged:
        raise ApiError(404, "Not Found")
    return 204, None


ROUTES = [
    Route(f"{REPO}/pulls", list_pulls, methods=["GET"]),
    Route(f"{REPO}/pulls", create_pull, methods=["POST"]),
    Route(f"{REPO}/pulls/{{number}}", get_pull, methods=["GET"]),
    Route(f"{REPO}/pulls/{{number}}", update_pull, methods=["PATCH"]),
    Route(f"{REPO}/pulls/{{number}}/files", list_files, methods=["GET"]),
    Route(f"{REPO}/pulls/{{number}}/reviews", list_reviews, methods=["GET"]),
    Route(f"{REPO}/pulls/{{number}}/reviews", create_review, methods=["POST"]),
    Route(f"{REPO}/pulls/{{number}}/update-branch", update_branch, methods=["PUT"]),
    Route(f"{REPO}/pulls/{{number}}/merge", merge, methods=["PUT"]),
    Route(f"{REPO}/pulls/{{number}}/merge", is_merged, methods=["GET"]),
]
