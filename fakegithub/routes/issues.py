"""REST routes for issues, comments, labels and assignees."""

from __future__ import annotations

from starlette.routing import Route

from fakegithub.api import Ctx, Result, endpoint, paginate
from fakegithub.errors import ApiError
from fakegithub.ops import issues as ops
from fakegithub.render.core import comment, issue, label, node_id, user
from fakegithub.state import iso

ISSUE_PERMS = ("issues", "pull_requests")
REPO = "/repos/{owner}/{repo}"


@endpoint(perms=ISSUE_PERMS, level="write", user_level="read")
def create_issue(ctx: Ctx) -> Result:
    body = ctx.object_body()
    found = ops.open_issue(
        ctx.sandbox.state,
        ctx.repo,
        ctx.actor,
        title=body.get("title") or "",
        body=body.get("body"),
        labels=body.get("labels"),
        assignees=body.get("assignees") or ([body["assignee"]] if body.get("assignee") else None),
    )
    return 201, issue(ctx.sandbox.state, ctx.repo, found)


@endpoint(perms=ISSUE_PERMS)
def get_issue(ctx: Ctx) -> Result:
    found = ops.get_issue(ctx.repo, ctx.number("number"))
    return 200, issue(ctx.sandbox.state, ctx.repo, found)


@endpoint(perms=ISSUE_PERMS)
def list_issues(ctx: Ctx) -> Result:
    wanted = ctx.request.query_params.get("state", "open")
    items = [
        i
        for i in sorted(ctx.repo.issues.values(), key=lambda i: -i.number)
        if wanted in {"all", i.state}
    ]
    page, headers = paginate(ctx, items)
    return 200, [issue(ctx.sandbox.state, ctx.repo, i) for i in page], headers


@endpoint(perms=ISSUE_PERMS, level="write", user_level="triage")
def update_issue(ctx: Ctx) -> Result:
    found = ops.update_issue(
        ctx.sandbox.state, ctx.repo, ctx.actor, ctx.number("number"), ctx.object_body()
    )
    return 200, issue(ctx.sandbox.state, ctx.repo, found)


@endpoint(perms=ISSUE_PERMS, level="write", user_level="triage")
def add_assignees(ctx: Ctx) -> Result:
    logins = ctx.field("assignees") or []
    found = ops.add_assignees(ctx.sandbox.state, ctx.repo, ctx.actor, ctx.number("number"), logins)
    return 201, issue(ctx.sandbox.state, ctx.repo, found)


@endpoint(perms=ISSUE_PERMS)
def list_comments(ctx: Ctx) -> Result:
    number = ctx.number("number")
    ops.get_issue(ctx.repo, number)
    items = sorted(
        (c for c in ctx.repo.comments.values() if c.number == number), key=lambda c: c.id
    )
    page, headers = paginate(ctx, items)
    return 200, [comment(ctx.sandbox.state, ctx.repo, c) for c in page], headers


@endpoint(perms=ISSUE_PERMS)
def list_events(ctx: Ctx) -> Result:
    """The issue's events, oldest first (only labels are kept: what the hub reads)."""
    found = ops.get_issue(ctx.repo, ctx.number("number"))
    state = ctx.sandbox.state
    items = [
        {
            "id": ident,
            "node_id": node_id("LE", ident),
            "url": f"{state.base_url}/repos/{ctx.repo.full_name}/issues/events/{ident}",
            "actor": user(state, login),
            "event": event,
            "commit_id": None,
            "commit_url": None,
            "created_at": iso(at),
            "label": {"name": name, "color": _color(ctx, name)},
        }
        for ident, event, login, name, at in found.timeline
    ]
    page, headers = paginate(ctx, items)
    return 200, page, headers


def _color(ctx: Ctx, name: str) -> str:
    found = ctx.repo.labels.get(name)
    return found.color if found is not None else "ededed"


@endpoint(perms=ISSUE_PERMS, level="write", user_level="read")
def create_comment(ctx: Ctx) -> Result:
    found = ops.create_comment(
        ctx.sandbox.state, ctx.repo, ctx.actor, ctx.number("number"), ctx.field("body")
    )
    url = f"{ctx.sandbox.state.base_url}/repos/{ctx.repo.full_name}/issues/comments/{found.id}"
    return 201, comment(ctx.sandbox.state, ctx.repo, found), {"location": url}


@endpoint(perms=ISSUE_PERMS, level="write", user_level="read")
def update_comment(ctx: Ctx) -> Result:
    found = ops.update_comment(
        ctx.sandbox.state, ctx.repo, ctx.actor, ctx.number("comment_id"), ctx.field("body")
    )
    return 200, comment(ctx.sandbox.state, ctx.repo, found)


@endpoint(perms=ISSUE_PERMS)
def list_labels(ctx: Ctx) -> Result:
    found = ops.get_issue(ctx.repo, ctx.number("number"))
    items = [ctx.repo.labels[n] for n in found.labels]
    page, headers = paginate(ctx, items)
    return 200, [label(ctx.sandbox.state, ctx.repo, x) for x in page], headers


@endpoint(perms=ISSUE_PERMS, level="write", user_level="triage")
def add_labels(ctx: Ctx) -> Result:
    body = ctx.body
    names = body.get("labels") if isinstance(body, dict) else body
    if not isinstance(names, list) or not names:
        raise ApiError(
            422,
            'Invalid request.\n\nNo subschema in "anyOf" matched.',
            errors=[{"resource": "Label", "code": "missing_field", "field": "labels"}],
        )
    found = ops.add_labels(ctx.sandbox.state, ctx.repo, ctx.actor, ctx.number("number"), names)
    return 200, [label(ctx.sandbox.state, ctx.repo, x) for x in found]


@endpoint(perms=ISSUE_PERMS, level="write", user_level="triage")
def remove_label(ctx: Ctx) -> Result:
    found = ops.remove_label(
        ctx.sandbox.state, ctx.repo, ctx.actor, ctx.number("number"), ctx.param("name")
    )
    return 200, [label(ctx.sandbox.state, ctx.repo, x) for x in found]


@endpoint(perms=ISSUE_PERMS, level="write", user_level="triage")
def remove_all_labels(ctx: Ctx) -> Result:
    ops.remove_all_labels(ctx.sandbox.state, ctx.repo, ctx.actor, ctx.number("number"))
    return 204, None


ROUTES = [
    Route(f"{REPO}/issues", create_issue, methods=["POST"]),
    Route(f"{REPO}/issues", list_issues, methods=["GET"]),
    Route(f"{REPO}/issues/comments/{{comment_id}}", update_comment, methods=["PATCH"]),
    Route(f"{REPO}/issues/{{number}}", get_issue, methods=["GET"]),
    Route(f"{REPO}/issues/{{number}}", update_issue, methods=["PATCH"]),
    Route(f"{REPO}/issues/{{number}}/assignees", add_assignees, methods=["POST"]),
    Route(f"{REPO}/issues/{{number}}/comments", list_comments, methods=["GET"]),
    Route(f"{REPO}/issues/{{number}}/events", list_events, methods=["GET"]),
    Route(f"{REPO}/issues/{{number}}/comments", create_comment, methods=["POST"]),
    Route(f"{REPO}/issues/{{number}}/labels", list_labels, methods=["GET"]),
    Route(f"{REPO}/issues/{{number}}/labels", add_labels, methods=["POST"]),
    Route(f"{REPO}/issues/{{number}}/labels", remove_all_labels, methods=["DELETE"]),
    Route(f"{REPO}/issues/{{number}}/labels/{{name}}", remove_label, methods=["DELETE"]),
]
