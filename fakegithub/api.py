"""The REST plumbing shared by the route modules: authentication, permission checks,
JSON in and out, GitHub-shaped errors, pagination, and the audit record of each write."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fakegithub.auth import JWT_UNDECODABLE, Principal, authorize_repo
from fakegithub.errors import ApiError
from fakegithub.model import Repo
from fakegithub.sandbox import Sandbox
from fakegithub.state import Actor

WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
Result = tuple[int, Any] | tuple[int, Any, dict[str, str]]
Handler = Callable[[Request], Awaitable[Response]]


@dataclass(slots=True)
class Ctx:
    request: Request
    sandbox: Sandbox
    principal: Principal | None
    body: Any
    repo_or_none: Repo | None

    @property
    def repo(self) -> Repo:
        assert self.repo_or_none is not None  # noqa: S101  # only repo routes ask for it
        return self.repo_or_none

    @property
    def actor(self) -> Actor:
        if self.principal is None:
            raise ApiError(401, "Requires authentication")
        return self.principal.actor

    def param(self, name: str) -> str:
        return str(self.request.path_params[name])

    def number(self, name: str) -> int:
        raw = self.request.path_params[name]
        try:
            return int(raw)
        except (TypeError, ValueError) as exc:
            raise ApiError(404, "Not Found") from exc

    def field(self, name: str, default: Any = None) -> Any:
        return self.body.get(name, default) if isinstance(self.body, dict) else default

    def object_body(self) -> dict[str, Any]:
        if self.body is None:
            return {}
        if not isinstance(self.body, dict):
            raise ApiError(400, "Problems parsing JSON")
        return self.body


def error_body(sandbox: Sandbox, err: ApiError) -> dict[str, Any]:
    body: dict[str, Any] = {
        "message": err.message,
        "documentation_url": f"{sandbox.state.base_url}/_sandbox/docs/{err.doc}",
        "status": str(err.status),
    }
    if err.errors is not None:
        body["errors"] = err.errors
    return body


def json_response(sandbox: Sandbox, status: int, data: Any, headers: dict[str, str]) -> Response:
    headers = {
        "x-github-request-id": uuid.uuid4().hex[:16].upper(),
        "x-github-api-version-selected": "2022-11-28",
        "x-ratelimit-limit": "5000",
        "x-ratelimit-remaining": "4999",
        "x-ratelimit-used": "1",
        "x-ratelimit-resource": "core",
        "x-ratelimit-reset": str(int(sandbox.state.now().timestamp()) + 3600),
        **headers,
    }
    if status == 204 or data is None:
        return Response(status_code=status, headers=headers)
    return JSONResponse(data, status_code=status, headers=headers)


async def _read_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, "Problems parsing JSON") from exc


def endpoint(
    *,
    perms: tuple[str, ...] = (),
    level: str = "read",
    user_level: str = "read",
    app_jwt: bool = False,
    repo: bool = True,
) -> Callable[[Callable[[Ctx], Result]], Handler]:
    """Wraps a synchronous handler: it runs under the world lock with an authenticated,
    authorized context; an :class:`ApiError` becomes GitHub's error body."""

    def deco(fn: Callable[[Ctx], Result]) -> Handler:
        async def handler(request: Request) -> Response:
            sandbox: Sandbox = request.app.state.sandbox
            principal: Principal | None = None
            body: Any = None
            try:
                body = await _read_body(request)
                with sandbox.state.lock:
                    principal = sandbox.auth.authenticate(request.headers.get("authorization"))
                    found_repo = None
                    if app_jwt:
                        if principal is None or principal.kind != "app":
                            raise ApiError(401, JWT_UNDECODABLE)
                    elif repo:
                        params = request.path_params
                        found_repo = sandbox.state.repo(params["owner"], params["repo"])
                        authorize_repo(
                            principal, found_repo, perms=perms, level=level, user_level=user_level
                        )
                    elif principal is None:
                        raise ApiError(401, "Requires authentication")
                    result = fn(Ctx(request, sandbox, principal, body, found_repo))
            except ApiError as err:
                return json_response(sandbox, err.status, error_body(sandbox, err), err.headers)
            status, data = result[0], result[1]
            headers = result[2] if len(result) == 3 else {}  # (status, data, headers)
            if request.method in WRITE_METHODS and status < 300:
                sandbox.audit.record(
                    method=request.method,
                    path=request.url.path,
                    actor=principal.login if principal else "",
                    resource=request.url.path,
                    status=status,
                    body=body,
                )
            return json_response(sandbox, status, data, headers)

        handler.__name__ = fn.__name__
        return handler

    return deco


def paginate(ctx: Ctx, items: list[Any]) -> tuple[list[Any], dict[str, str]]:
    """GitHub's page/per_page pagination with a ``Link`` header."""
    query = ctx.request.query_params
    try:
        per_page = max(1, min(100, int(query.get("per_page", "30"))))
        page = max(1, int(query.get("page", "1")))
    except ValueError as exc:
        raise ApiError(422, "Validation Failed") from exc
    start = (page - 1) * per_page
    chosen = items[start : start + per_page]
    last = max(1, -(-len(items) // per_page))
    links = []
    base = str(ctx.request.url.replace(query=""))
    params = {k: v for k, v in query.items() if k not in {"page", "per_page"}}

    def link(number: int, rel: str) -> str:
        return (
            f'<{base}?{urlencode({**params, "per_page": per_page, "page": number})}>; rel="{rel}"'
        )

    if page < last:
        links += [link(page + 1, "next"), link(last, "last")]
    if page > 1:
        links += [link(1, "first"), link(page - 1, "prev")]
    return chosen, ({"link": ", ".join(links)} if links else {})
