"""GitHub's App manifest flow: the pages standing in for GitHub's, and the conversion.

- ``POST /settings/apps/new`` and ``POST /organizations/{org}/settings/apps/new``: the
  "create an App from a manifest" page. It takes the form field ``manifest`` (JSON) and
  ``?state=``, registers the App at once (GitHub first shows the page, where a person
  confirms the name: the sandbox has no one to click) and redirects to the manifest's
  ``redirect_url`` with ``?code=...&state=...``. A user's App belongs to ``maintainer``
  (the sandbox has no sign-in); an organization named here is made on first use, as
  people are. A manifest GitHub would refuse gets a 422 page saying why.
- ``POST /app-manifests/{code}/conversions``: the code, once and within an hour, for the
  App's id, ``pem``, ``webhook_secret``, ``client_id`` and ``client_secret`` (201), as
  GitHub answers it; no token needed. An unknown, used or old code: 404.
- ``GET|POST /apps/{slug}/installations/new``: the install page; the form field
  ``account`` (default: the App's owner) names the user or organization whose
  repositories it gets.
"""

from __future__ import annotations

import html
import json
import secrets
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from fakegithub.api import error_body, json_response
from fakegithub.errors import ApiError, SandboxError
from fakegithub.ops import apps as ops_apps
from fakegithub.render.core import app as render_app
from fakegithub.sandbox import Sandbox

SIGNED_IN = "maintainer"  # who creates a user's App: the sandbox has no sign-in


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    text = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )
    return HTMLResponse(text, status_code=status)


async def _form(request: Request) -> dict[str, str]:
    raw = (await request.body()).decode("utf-8", errors="replace")
    return {k: v[-1] for k, v in parse_qs(raw, keep_blank_values=True).items()}


def _with_query(url: str, params: dict[str, str]) -> str:
    parts = urlsplit(url)
    query = f"{parts.query}&{urlencode(params)}" if parts.query else urlencode(params)
    return urlunsplit(parts._replace(query=query))


async def new_app(request: Request) -> Response:
    sandbox: Sandbox = request.app.state.sandbox
    org = request.path_params.get("org")
    if request.method == "GET":
        return _page(
            "Create a GitHub App from a manifest",
            "<p>POST a form here with the field <code>manifest</code> (the App's manifest, "
            "JSON) and <code>?state=</code>; the sandbox registers the App and redirects to "
            "the manifest's <code>redirect_url</code> with a code.</p>",
        )
    form = await _form(request)
    state_param = request.query_params.get("state") or form.get("state", "")
    try:
        manifest: Any = json.loads(form.get("manifest", ""))
    except ValueError:
        return _page("Invalid manifest", "<p>The field manifest is not JSON.</p>", 422)
    if org:
        sandbox.state.add_user(org, type_="Organization")
    owner = org or SIGNED_IN
    try:
        app, code = await run_in_threadpool(
            ops_apps.create_from_manifest, sandbox.state, manifest, owner
        )
    except ops_apps.ManifestError as exc:
        return _page("Invalid manifest", f"<p>{html.escape(str(exc))}</p>", 422)
    sandbox.audit.record(
        method="POST",
        path=request.url.path,
        actor=owner,
        resource=f"apps/{app.slug}",
        status=302,
        body={"manifest": manifest, "state": state_param},
    )
    params = {"code": code}
    if state_param:
        params["state"] = state_param
    redirect = manifest.get("redirect_url") if isinstance(manifest, dict) else None
    if not redirect:
        return _page("App created", f"<p>Exchange the code <code>{html.escape(code)}</code>.</p>")
    return RedirectResponse(_with_query(str(redirect), params), status_code=302)


async def conversion(request: Request) -> Response:
    sandbox: Sandbox = request.app.state.sandbox
    try:
        app, pem = ops_apps.convert_code(sandbox.state, request.path_params["code"])
    except ApiError as err:
        return json_response(sandbox, err.status, error_body(sandbox, err), err.headers)
    data = render_app(sandbox.state, app)
    data.update(
        {
            "client_id": f"Iv1.{secrets.token_hex(8)}",
            "client_secret": secrets.token_hex(20),
            "webhook_secret": app.webhook_secret,
            "pem": pem,
        }
    )
    sandbox.audit.record(
        method="POST",
        path=request.url.path,
        actor="",
        resource=f"apps/{app.slug}",
        status=201,
        body=None,
    )
    return json_response(sandbox, 201, data, {})


async def install(request: Request) -> Response:
    sandbox: Sandbox = request.app.state.sandbox
    slug = request.path_params["slug"]
    try:
        app = ops_apps.app_by_slug(sandbox.state, slug)
    except ApiError:
        return _page("Not Found", f"<p>No App {html.escape(slug)}.</p>", 404)
    if request.method == "GET":
        return _page(
            f"Install {app.name}",
            f"<form method='post'><label>Account <input name='account' "
            f"value='{html.escape(app.owner)}'></label><button>Install</button></form>",
        )
    account = (await _form(request)).get("account") or app.owner
    try:
        made = ops_apps.install(sandbox.state, app, account)
    except SandboxError as exc:
        return _page("Cannot install", f"<p>{html.escape(str(exc))}</p>", 422)
    return _page(
        f"{app.name} is installed",
        f"<p>On {html.escape(account)}: installation <code>{made.id}</code>, "
        f"{len(made.repo_ids)} repositories.</p>",
    )


ROUTES = [
    Route("/settings/apps/new", new_app, methods=["GET", "POST"]),
    Route("/organizations/{org}/settings/apps/new", new_app, methods=["GET", "POST"]),
    Route("/app-manifests/{code}/conversions", conversion, methods=["POST"]),
    Route("/apps/{slug}/installations/new", install, methods=["GET", "POST"]),
]
