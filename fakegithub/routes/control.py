"""Control routes under ``/_sandbox/``: JSON, no auth, loopback clients only.

``POST /_sandbox/<op>`` calls :class:`~fakegithub.world.World`'s method ``<op>`` with
the JSON body as keyword arguments and answers ``{"result": ...}``; ``GET /_sandbox/``
lists the operations and their parameters. Also: ``GET|POST|DELETE /_sandbox/faults``,
``GET /_sandbox/audit``, ``GET /_sandbox/deliveries``, ``GET /_sandbox/events`` (and
``GET /_sandbox/events/{n}``: the payload of one, ``-1`` the newest, ``?event=NAME``
among those of one name),
``GET /_sandbox/live/{owner}/{repo}``, ``GET /_sandbox/info``.
"""

from __future__ import annotations

import inspect
import ipaddress
import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fakegithub.errors import ApiError, SandboxError
from fakegithub.sandbox import Sandbox

OPERATIONS = (
    "open_issue",
    "comment",
    "add_label",
    "remove_label",
    "close_issue",
    "push",
    "force_push",
    "open_pr",
    "ready_for_review",
    "review",
    "approve",
    "merge",
    "release",
    "set_protection",
    "add_ruleset",
    "set_collaborator",
    "install_app",
    "set_mergeability_lag",
    "set_ci",
    "run_ci",
    "set_deploy",
    "run_deploy",
    "live",
    "set_app_url",
    "user_token",
    "actions_token",
    "settle",
)


def _loopback(request: Request) -> bool:
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host in {"testclient", "localhost"}


def control(
    fn: Callable[[Request, Sandbox], Awaitable[Any]],
) -> Callable[[Request], Awaitable[Response]]:
    async def handler(request: Request) -> Response:
        if not _loopback(request):
            return JSONResponse({"message": "control routes answer loopback clients only"}, 403)
        try:
            data = await fn(request, request.app.state.sandbox)
        except (SandboxError, TypeError, ValueError) as exc:
            return JSONResponse({"message": str(exc)}, 400)
        except ApiError as exc:
            return JSONResponse({"message": exc.message, "status": exc.status}, exc.status)
        return JSONResponse(data)

    handler.__name__ = fn.__name__
    return handler


async def _json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise SandboxError(f"the body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SandboxError("the body must be a JSON object of keyword arguments")
    return data


@control
async def index(request: Request, sandbox: Sandbox) -> Any:
    ops = {}
    for name in OPERATIONS:
        method = getattr(sandbox.world, name)
        params = inspect.signature(method).parameters
        ops[name] = {
            "params": [p for p in params if p != "self"],
            "doc": (inspect.getdoc(method) or "").split("\n")[0],
        }
    return {"operations": ops, "api_url": sandbox.state.base_url}


@control
async def run_op(request: Request, sandbox: Sandbox) -> Any:
    name = request.path_params["op"]
    if name not in OPERATIONS:
        raise SandboxError(f"unknown operation {name!r}; GET /_sandbox/ lists them")
    kwargs = await _json(request)
    method = getattr(sandbox.world, name)
    try:
        inspect.signature(method).bind(**kwargs)
    except TypeError as exc:
        raise SandboxError(f"{name}: {exc}; GET /_sandbox/ lists the parameters") from exc
    return {"result": await run_in_threadpool(method, **kwargs)}


@control
async def info(request: Request, sandbox: Sandbox) -> Any:
    return {
        "api_url": sandbox.state.base_url,
        "app_id": sandbox.app.id,
        "app_slug": sandbox.app.slug,
        "installation_id": sandbox.installation_id,
        "repo": sandbox.repo,
        "webhook_url": sandbox.app.webhook_url,
    }


@control
async def faults(request: Request, sandbox: Sandbox) -> Any:
    if request.method == "DELETE":
        sandbox.faults.clear()
    elif request.method == "POST":
        body = await _json(request)
        if "seed" in body:
            sandbox.faults.seed(int(body.pop("seed")))
        every = bool(body.pop("every", False))
        if every:
            body["times"] = None
        if "kind" in body:
            rule = sandbox.faults.add(body.pop("kind"), **body)
            return rule.as_json()
    return {"faults": [r.as_json() for r in sandbox.faults.rules()]}


@control
async def audit(request: Request, sandbox: Sandbox) -> Any:
    query = request.query_params
    entries = sandbox.audit.entries(method=query.get("method"), path_contains=query.get("path"))
    return {"entries": [e.as_json() for e in entries]}


@control
async def deliveries(request: Request, sandbox: Sandbox) -> Any:
    return {"deliveries": [d.item() for d in sandbox.hooks.deliveries()]}


@control
async def events(request: Request, sandbox: Sandbox) -> Any:
    return {
        "events": [
            {"event": e.name, "action": e.action, "repository_id": e.repository_id}
            for e in sandbox.world.events
        ]
    }


@control
async def event_payload(request: Request, sandbox: Sandbox) -> Any:
    """The payload GitHub would send for one event (``-1``: the newest), e.g. to give
    ``autoloop action`` the event file a runner would. ``?event=NAME`` (and ``&action=A``)
    counts only the events of that name (and action): ``/events/-1?event=check_suite`` is
    the newest check suite event."""
    raw = request.path_params["index"]
    name, action = request.query_params.get("event"), request.query_params.get("action")
    found = [
        e
        for e in sandbox.world.events
        if (name is None or e.name == name) and (action is None or e.action == action)
    ]
    try:
        return found[int(raw)].payload
    except (ValueError, IndexError):
        which = f" named {name!r}" if name else ""
        raise SandboxError(
            f"no event {raw!r}{which}: give a position in GET /_sandbox/events "
            f"({len(found)} so far), or -1 for the newest"
        ) from None


@control
async def live(request: Request, sandbox: Sandbox) -> Any:
    name = f"{request.path_params['owner']}/{request.path_params['repo']}"
    found = sandbox.world.live(name)
    if not found:
        raise ApiError(404, f"nothing is deployed for {name}")
    return found


@control
async def docs(request: Request, sandbox: Sandbox) -> Any:
    return {"message": "This is the sandbox GitHub; see fakegithub/README.md."}


ROUTES = [
    Route("/_sandbox", index, methods=["GET"]),
    Route("/_sandbox/", index, methods=["GET"]),
    Route("/_sandbox/info", info, methods=["GET"]),
    Route("/_sandbox/faults", faults, methods=["GET", "POST", "DELETE"]),
    Route("/_sandbox/audit", audit, methods=["GET"]),
    Route("/_sandbox/deliveries", deliveries, methods=["GET"]),
    Route("/_sandbox/events", events, methods=["GET"]),
    Route("/_sandbox/events/{index}", event_payload, methods=["GET"]),
    Route("/_sandbox/live/{owner}/{repo}", live, methods=["GET"]),
    Route("/_sandbox/docs/{topic:path}", docs, methods=["GET"]),
    Route("/_sandbox/{op}", run_op, methods=["POST"]),
]
