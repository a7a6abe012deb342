"""REST routes of the App itself (JWT-authenticated): the App, installation tokens,
the installation of a repository, and the webhook deliveries with redelivery."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.routing import Route

from fakegithub.api import Ctx, Result, endpoint
from fakegithub.errors import ApiError, not_found
from fakegithub.model import Installation
from fakegithub.render.core import app, node_id, repository, user
from fakegithub.state import iso
from fakegithub.webhooks import Delivery


def _app_of(ctx: Ctx) -> Any:
    assert ctx.principal is not None and ctx.principal.app_id is not None  # noqa: S101  # app_jwt
    return ctx.sandbox.state.apps[ctx.principal.app_id]


def _installation(ctx: Ctx, found: Installation) -> dict[str, Any]:
    state = ctx.sandbox.state
    account = user(state, found.account)
    return {
        "id": found.id,
        "node_id": node_id("MDIzOkludGVncmF0aW9u", found.id),
        "account": account,
        "repository_selection": "selected",
        "access_tokens_url": f"{state.base_url}/app/installations/{found.id}/access_tokens",
        "repositories_url": f"{state.base_url}/installation/repositories",
        "html_url": (
            f"{state.base_url}/organizations/{found.account}/settings/installations/{found.id}"
        ),
        "app_id": found.app_id,
        "app_slug": state.apps[found.app_id].slug,
        "target_id": account["id"],
        "target_type": account["type"],
        "permissions": dict(found.permissions),
        "events": list(state.apps[found.app_id].events),
        "created_at": iso(found.created_at),
        "updated_at": iso(found.created_at),
        "single_file_name": None,
        "has_multiple_single_files": False,
        "single_file_paths": [],
        "suspended_by": None,
        "suspended_at": None,
    }


def _own_installation(ctx: Ctx) -> Installation:
    found = ctx.sandbox.state.installations.get(ctx.number("installation_id"))
    if found is None or found.app_id != _app_of(ctx).id:
        raise not_found()
    return found


@endpoint(app_jwt=True)
def get_app(ctx: Ctx) -> Result:
    data = app(ctx.sandbox.state, _app_of(ctx))
    data["installations_count"] = sum(
        1 for i in ctx.sandbox.state.installations.values() if i.app_id == data["id"]
    )
    return 200, data


@endpoint(app_jwt=True)
def get_installation(ctx: Ctx) -> Result:
    return 200, _installation(ctx, _own_installation(ctx))


@endpoint(app_jwt=True)
def list_installations(ctx: Ctx) -> Result:
    mine = _app_of(ctx).id
    found = [i for i in ctx.sandbox.state.installations.values() if i.app_id == mine]
    return 200, [_installation(ctx, i) for i in found]


@endpoint(app_jwt=True)
def create_token(ctx: Ctx) -> Result:
    found = _own_installation(ctx)
    body = ctx.object_body()
    token = ctx.sandbox.auth.mint_installation_token(
        _app_of(ctx),
        found,
        permissions=body.get("permissions"),
        repositories=body.get("repositories"),
        repository_ids=body.get("repository_ids"),
    )
    data: dict[str, Any] = {
        "token": token.value,
        "expires_at": iso(token.expires_at),
        "permissions": token.permissions,
        "repository_selection": token.repository_selection,
    }
    if token.repository_selection == "selected" and (
        body.get("repositories") or body.get("repository_ids")
    ):
        state = ctx.sandbox.state
        data["repositories"] = [repository(state, state.repo_by_id(r)) for r in token.repo_ids]
    return 201, data


@endpoint(app_jwt=True, repo=False)
def repo_installation(ctx: Ctx) -> Result:
    state = ctx.sandbox.state
    repo = state.repo(ctx.param("owner"), ctx.param("repo"))
    found = state.installation_for(repo)
    if found is None or found.app_id != _app_of(ctx).id:
        raise not_found()
    return 200, _installation(ctx, found)


def _deliveries(ctx: Ctx) -> list[Delivery]:
    """The calling App's deliveries: only the sandbox's own App sends webhooks."""
    if _app_of(ctx).id != ctx.sandbox.app.id:
        return []
    return ctx.sandbox.hooks.deliveries()


@endpoint(app_jwt=True)
def list_deliveries(ctx: Ctx) -> Result:
    query = ctx.request.query_params
    try:
        per_page = max(1, min(100, int(query.get("per_page", "30"))))
    except ValueError as exc:
        raise ApiError(400, "Bad request: per_page must be a number") from exc
    items = sorted(_deliveries(ctx), key=lambda d: -d.id)
    cursor = query.get("cursor")
    if cursor:
        if not cursor.startswith("v1_") or not cursor[3:].isdigit():
            raise ApiError(400, "Bad request: the cursor is not one this API gave out")
        below = int(cursor[3:])
        items = [d for d in items if d.id < below]
    wanted = query.get("status")
    if wanted == "success":
        items = [d for d in items if d.status == "OK"]
    elif wanted == "failure":
        items = [d for d in items if d.status != "OK"]
    page = items[:per_page]
    headers = {}
    if len(items) > per_page:
        base = str(ctx.request.url.replace(query=""))
        params = {k: v for k, v in query.items() if k != "cursor"}
        params["per_page"] = str(per_page)
        params["cursor"] = f"v1_{page[-1].id}"
        headers["link"] = f'<{base}?{urlencode(params)}>; rel="next"'
    return 200, [d.item() for d in page], headers


@endpoint(app_jwt=True)
def get_delivery(ctx: Ctx) -> Result:
    found = ctx.sandbox.hooks.get(ctx.number("delivery_id"))
    if found is None or _app_of(ctx).id != ctx.sandbox.app.id:
        raise not_found()
    return 200, found.detail()


@endpoint(app_jwt=True)
def redeliver(ctx: Ctx) -> Result:
    if _app_of(ctx).id != ctx.sandbox.app.id:
        raise not_found()
    if ctx.sandbox.hooks.redeliver(ctx.number("delivery_id")) is None:
        raise not_found()
    return 202, {}


ROUTES = [
    Route("/app", get_app, methods=["GET"]),
    Route("/app/installations", list_installations, methods=["GET"]),
    Route("/app/installations/{installation_id}", get_installation, methods=["GET"]),
    Route("/app/installations/{installation_id}/access_tokens", create_token, methods=["POST"]),
    Route("/app/hook/deliveries", list_deliveries, methods=["GET"]),
    Route("/app/hook/deliveries/{delivery_id}", get_delivery, methods=["GET"]),
    Route("/app/hook/deliveries/{delivery_id}/attempts", redeliver, methods=["POST"]),
    Route("/repos/{owner}/{repo}/installation", repo_installation, methods=["GET"]),
]
