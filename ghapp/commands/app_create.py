"""``autoloop app create``: register the GitHub App through GitHub's manifest flow.

1. It serves a page on this machine (``http://127.0.0.1:PORT/``). Opened in a browser
   signed in to GitHub, the page posts the App's manifest (name, webhook URL,
   permissions and events from :mod:`ghapp.github.manifest`) to GitHub's "create an App
   from a manifest" page of the organization (``--org``) or of the signed-in user
   (``--user``), with a random ``state``.
2. GitHub creates the App and sends the browser back to ``/callback?code=...&state=...``.
3. The code is exchanged (``POST /app-manifests/{code}/conversions``) for the App's id,
   private key and webhook secret: the key goes to its own file (mode 0600), the id, the
   key's path and the secret to the settings file (``settings.toml`` in the home folder,
   or ``--config``), which ``autoloop serve`` and ``autoloop doctor`` read.

GitHub's web pages live at ``github.com`` for ``api.github.com``, at ``https://HOST``
for an Enterprise server's ``https://HOST/api/v3``, and on the API's own host for the
sandbox; ``--web-url`` overrides that guess. Exit codes: 0 registered, 1 the flow failed
or timed out (nothing written), 2 bad usage or settings.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import secrets
import sys
import threading
import webbrowser
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx

from ghapp.github.manifest import WEBHOOK_PATH, manifest
from ghapp.runtime.settings import (
    DEFAULT_GITHUB_URL,
    SETTINGS_FILE,
    Settings,
    SettingsError,
    write_settings_file,
)
from ghapp.runtime.signals import wait_awake

__all__ = ["main", "web_url"]

PROG = "autoloop app create"
KEY_FILE = "github-app.private-key.pem"
NAME_MAX = 34  # GitHub's limit on an App's name
LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?$")


class FlowError(Exception):
    """The manifest flow failed; ``str()`` is one line saying what to do."""


def web_url(api_url: str) -> str:
    """GitHub's web address for the REST API at ``api_url``."""
    parts = urlsplit(api_url.rstrip("/"))
    if parts.netloc == "api.github.com":
        return f"{parts.scheme}://github.com"
    if parts.path.endswith("/api/v3"):
        return f"{parts.scheme}://{parts.netloc}{parts.path[: -len('/api/v3')]}"
    return api_url.rstrip("/")


@dataclass
class Plan:
    """What one run registers, and where it writes."""

    api_url: str
    web_url: str
    org: str | None
    name: str
    url: str
    webhook_url: str
    public: bool
    settings_file: Path
    key_file: Path
    state: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    def create_url(self) -> str:
        where = f"/organizations/{self.org}" if self.org else ""
        return f"{self.web_url}{where}/settings/apps/new?{urlencode({'state': self.state})}"

    def manifest(self, redirect_url: str) -> dict[str, Any]:
        return manifest(
            name=self.name,
            url=self.url,
            webhook_url=self.webhook_url,
            redirect_url=redirect_url,
            public=self.public,
        )


@dataclass
class Outcome:
    app_id: int
    slug: str
    html_url: str
    owner: str


def start_page(plan: Plan, redirect_url: str) -> str:
    """The local page: a form that posts the manifest to GitHub (sent by itself)."""
    text = json.dumps(plan.manifest(redirect_url))
    where = f"the organization {plan.org}" if plan.org else "your user account"
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        "<title>Register the Autoloop GitHub App</title></head><body>"
        f"<h1>Register {html.escape(plan.name)} on {html.escape(where)}</h1>"
        f"<form id='create' method='post' action='{html.escape(plan.create_url())}'>"
        f"<input type='hidden' name='manifest' value='{html.escape(text)}'>"
        "<p>GitHub will show the App's name, permissions and events; confirm there.</p>"
        "<button type='submit'>Continue on GitHub</button></form>"
        "<script>document.getElementById('create').submit()</script>"
        "</body></html>"
    )


def exchange(plan: Plan, code: str, *, timeout_s: float = 20.0) -> dict[str, Any]:
    """The App's credentials for the manifest ``code``."""
    url = f"{plan.api_url}/app-manifests/{code}/conversions"
    try:
        answer = httpx.post(
            url,
            headers={
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": "autoloop",
            },
            timeout=timeout_s,
        )
    except httpx.HTTPError as exc:
        raise FlowError(
            f"cannot reach GitHub at {plan.api_url} ({exc}); check AUTOLOOP_GITHUB_URL "
            "and the network, then run 'autoloop app create' again"
        ) from None
    if answer.status_code != 201:
        try:
            message = str(answer.json().get("message", ""))
        except ValueError:
            message = answer.text[:200]
        raise FlowError(
            f"GitHub refused the code (POST {url}: {answer.status_code} {message}); a code "
            "works once and for an hour: run 'autoloop app create' again"
        )
    try:
        data: Any = answer.json()
    except ValueError:
        data = None
    if not (
        isinstance(data, dict)
        and isinstance(data.get("id"), int)
        and isinstance(data.get("slug"), str)
        and isinstance(data.get("pem"), str)
        and isinstance(data.get("webhook_secret"), str)
    ):
        raise FlowError(
            f"GitHub's answer to POST {url} has no App id, slug, key or webhook secret; "
            "check AUTOLOOP_GITHUB_URL"
        )
    return data


def _write_key(path: Path, pem: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(pem if pem.endswith("\n") else pem + "\n")
    os.chmod(path, 0o600)


def key_setting(key_file: Path, settings_file: Path) -> str:
    """The key file as the settings name it: its bare name when it is beside the settings
    file (so the folder can move), else its absolute path."""
    if key_file.parent.resolve() == settings_file.parent.resolve():
        return key_file.name
    return str(key_file.resolve())


def save(plan: Plan, data: Mapping[str, Any]) -> Outcome:
    """Write the key file and the settings; answer what was registered."""
    _write_key(plan.key_file, str(data["pem"]))
    updates: dict[str, str | int] = {
        "github_app_id": int(data["id"]),
        "github_private_key": key_setting(plan.key_file, plan.settings_file),
        "github_webhook_secret": str(data["webhook_secret"]),
    }
    if plan.api_url != DEFAULT_GITHUB_URL:
        updates["github_url"] = plan.api_url
    write_settings_file(plan.settings_file, updates)
    owner = data.get("owner")
    login = owner.get("login") if isinstance(owner, dict) else None
    return Outcome(
        app_id=int(data["id"]),
        slug=str(data["slug"]),
        html_url=str(data.get("html_url") or f"{plan.web_url}/apps/{data['slug']}"),
        owner=str(login or plan.org or ""),
    )


class Flow:
    """The local server's state: the one callback that finishes the flow."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.redirect_url = ""
        self.done = threading.Event()
        self.outcome: Outcome | None = None
        self.error: str | None = None
        self._lock = threading.Lock()

    def callback(self, query: Mapping[str, list[str]]) -> tuple[int, str]:
        """Handle ``/callback``: (HTTP status, page text)."""
        code = (query.get("code") or [""])[0]
        state = (query.get("state") or [""])[0]
        if not secrets.compare_digest(state.encode(), self.plan.state.encode()):
            return 400, (
                "This answer does not belong to this run of autoloop app create (its state "
                "differs). Nothing was written."
            )
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,100}", code):
            return 400, "GitHub sent no usable code. Nothing was written."
        with self._lock:
            if self.done.is_set():
                return 409, "This run has already finished; start a new one if needed."
            try:
                self.outcome = save(self.plan, exchange(self.plan, code))
            except FlowError as exc:
                self.error = str(exc)
            except OSError as exc:
                self.error = f"cannot write the settings ({exc}); nothing usable was written"
            self.done.set()
        if self.error is not None:
            return 502, self.error
        assert self.outcome is not None  # noqa: S101  # set together with done
        return 200, (
            f"The GitHub App {self.outcome.slug} (id {self.outcome.app_id}) is registered "
            f"and its settings are in {self.plan.settings_file}. Next, install it: "
            f"{self.outcome.html_url}/installations/new"
        )


def _handler(flow: Flow) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the command prints what matters."""

        def _send(self, status: int, body: str, *, page: bool = False) -> None:
            text = body if page else f"<!doctype html><p>{html.escape(body)}</p>"
            raw = text.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(raw)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            try:
                if parts.path == "/":
                    self._send(200, start_page(flow.plan, flow.redirect_url), page=True)
                elif parts.path == "/callback":
                    status, text = flow.callback(parse_qs(parts.query))
                    self._send(status, text)
                else:
                    self._send(404, "Not found.")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the browser went away; the flow goes on without it
            except Exception as exc:  # one line, never a traceback on the user's terminal
                print(f"{PROG}: {parts.path}: {exc!r}", file=sys.stderr, flush=True)
                self._send(500, "Something went wrong here; see the terminal.")

    return Handler


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Register the Autoloop GitHub App on an organization or your user "
        "account with GitHub's manifest flow, and write its settings.",
    )
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--org", metavar="ORG", help="register the App on this organization")
    who.add_argument(
        "--user", action="store_true", help="register the App on your own user account"
    )
    p.add_argument(
        "--url",
        required=True,
        metavar="URL",
        help="public https address of 'autoloop serve' (webhooks go to URL/github/webhook)",
    )
    p.add_argument(
        "--webhook-url",
        metavar="URL",
        help="the webhook address, when it is not URL/github/webhook",
    )
    p.add_argument(
        "--name",
        help=f"the App's name on GitHub, at most {NAME_MAX} characters "
        "(default autoloop-ORG); GitHub's page lets you change it",
    )
    p.add_argument(
        "--public",
        action="store_true",
        help="let other accounts install the App (default: only its owner)",
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address of the local page (default 127.0.0.1)"
    )
    p.add_argument(
        "--port", type=int, default=0, help="port of the local page (default: a free one)"
    )
    p.add_argument(
        "--config", type=Path, help=f"settings file to write (default HOME/{SETTINGS_FILE})"
    )
    p.add_argument(
        "--key-file", type=Path, help=f"where the private key goes (default HOME/{KEY_FILE})"
    )
    p.add_argument("--web-url", help="GitHub's web address (default: from AUTOLOOP_GITHUB_URL)")
    p.add_argument(
        "--timeout", type=float, default=900.0, help="seconds to wait for the browser (default 900)"
    )
    p.add_argument("--open", action="store_true", help="open the local page in a browser")
    p.add_argument("--force", action="store_true", help="replace an App already in the settings")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return p


def _die(code: int, message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def _http_url(value: str) -> bool:
    parts = urlsplit(value)
    return parts.scheme in {"http", "https"} and bool(parts.netloc)


def make_plan(args: argparse.Namespace, env: Mapping[str, str]) -> Plan:
    """The plan for ``args``, checked before anything is served or written; a
    :class:`SettingsError` says what is wrong."""
    config: Path | None = args.config
    settings = Settings.from_env(env, config if config is not None and config.exists() else None)
    settings_file = config or settings.home / SETTINGS_FILE
    key_file = args.key_file or settings.home / KEY_FILE
    for path in {settings_file, key_file}:
        if not path.parent.is_dir():
            why = "is not a folder" if path.parent.exists() else "does not exist"
            raise SettingsError(
                f"{path.parent} {why}: run 'autoloop init' first (or set AUTOLOOP_HOME), "
                f"or give {path.name} a path in a folder"
            )
    if not args.force:
        known = Settings.from_env({}, settings_file) if settings_file.exists() else None
        if known is not None and known.github_app_id:
            raise SettingsError(
                f"{settings_file} already holds the App {known.github_app_id}: add --force to "
                "replace it with a new App"
            )
        if key_file.exists():
            raise SettingsError(f"{key_file} exists: add --force to replace it, or give --key-file")
    api_url = settings.github_url
    if not _http_url(api_url):
        raise SettingsError(f"AUTOLOOP_GITHUB_URL must be an http(s) URL, not {api_url!r}")
    if args.org is not None and not LOGIN.match(args.org):
        raise SettingsError(f"--org {args.org!r} is not an organization's login on GitHub")
    if not _http_url(args.url):
        raise SettingsError(f"--url {args.url!r}: give the public http(s) address of the server")
    if args.url.rstrip("/").endswith(WEBHOOK_PATH):
        raise SettingsError(
            f"--url {args.url!r} is the webhook's address: give the server's own "
            f"({args.url.rstrip('/').removesuffix(WEBHOOK_PATH)}); webhooks go to "
            f"URL{WEBHOOK_PATH}"
        )
    webhook_url = args.webhook_url or args.url.rstrip("/") + WEBHOOK_PATH
    if not _http_url(webhook_url):
        raise SettingsError(f"--webhook-url {webhook_url!r} is not an http(s) URL")
    name = args.name or (f"autoloop-{args.org}" if args.org else f"autoloop-{secrets.token_hex(3)}")
    if not name.strip() or len(name) > NAME_MAX:
        raise SettingsError(
            f"the App's name {name!r} must have 1 to {NAME_MAX} characters: give --name"
        )
    web = (args.web_url or web_url(api_url)).rstrip("/")
    if not _http_url(web):
        raise SettingsError(f"--web-url {web!r} is not an http(s) URL")
    return Plan(
        api_url=api_url,
        web_url=web,
        org=args.org,
        name=name,
        url=args.url,
        webhook_url=webhook_url,
        public=args.public,
        settings_file=settings_file,
        key_file=key_file,
    )


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "create":
        asked = argv[:1] in (["-h"], ["--help"])  # help asked for goes to stdout
        print(
            "usage: autoloop app create (--org ORG | --user) --url URL [options]\n"
            "  registers the GitHub App with GitHub's manifest flow ('autoloop app create "
            "--help' tells more)",
            file=sys.stdout if asked else sys.stderr,
        )
        return 0 if asked else 2
    try:
        args = _parser().parse_args(argv[1:])
    except SystemExit as exc:
        return int(exc.code or 0)
    env = dict(os.environ)
    try:
        plan = make_plan(args, env)
    except SettingsError as exc:
        return _die(2, str(exc))
    flow = Flow(plan)
    try:
        server = ThreadingHTTPServer((args.host, args.port), _handler(flow))
    except (OSError, OverflowError) as exc:
        return _die(2, f"cannot listen on {args.host}:{args.port} ({exc}): choose another --port")
    host = "127.0.0.1" if args.host in {"", "0.0.0.0"} else args.host  # noqa: S104  # only compared
    local = f"http://{host}:{server.server_address[1]}/"
    flow.redirect_url = local + "callback"
    thread = threading.Thread(target=server.serve_forever, name="app-create", daemon=True)
    thread.start()
    say = sys.stderr if args.json else sys.stdout
    print(
        f"open {local} in a browser signed in to GitHub to register the App "
        f"{plan.name} on {'the organization ' + plan.org if plan.org else 'your account'} "
        f"(waiting up to {args.timeout:g} s; Ctrl-C stops)",
        file=say,
        flush=True,
    )
    if args.open:
        webbrowser.open(local)
    try:
        finished = wait_awake(flow.done, args.timeout)  # Ctrl-C acted on at once
    except KeyboardInterrupt:
        finished = False
        flow.error = "interrupted; nothing was written"
    finally:
        server.shutdown()
        server.server_close()
    if not finished and flow.error is None:
        flow.error = (
            f"no answer from GitHub within {args.timeout:g} s; nothing was written: run "
            "'autoloop app create' again and open the page it prints"
        )
    if flow.error is not None or flow.outcome is None:
        return _die(1, flow.error or "the flow ended without an App")
    return _report(plan, flow.outcome, env, as_json=args.json)


def _report(plan: Plan, outcome: Outcome, env: Mapping[str, str], *, as_json: bool) -> int:
    install_url = f"{outcome.html_url}/installations/new"
    default_file = plan.settings_file == Settings.from_env(env).home / SETTINGS_FILE
    overridden = [
        name
        for name in (
            "AUTOLOOP_GITHUB_APP_ID",
            "AUTOLOOP_GITHUB_PRIVATE_KEY",
            "AUTOLOOP_GITHUB_WEBHOOK_SECRET",
        )
        if (env.get(name) or "").strip()
    ]
    if as_json:
        print(
            json.dumps(
                {
                    "app_id": outcome.app_id,
                    "slug": outcome.slug,
                    "owner": outcome.owner,
                    "settings": str(plan.settings_file),
                    "private_key": str(plan.key_file),
                    "install_url": install_url,
                    "overridden_by_env": overridden,
                },
                sort_keys=True,
            )
        )
        return 0
    print(f"registered the GitHub App {outcome.slug} (id {outcome.app_id}) on {outcome.owner}")
    print(f"wrote the private key to {plan.key_file} (mode 0600)")
    print(f"wrote the App id, key path and webhook secret to {plan.settings_file} (mode 0600)")
    for name in overridden:
        print(f"note: {name} is set in the environment and wins over the file: unset it")
    print(f"next: install the App on {outcome.owner or 'your account'}: {install_url}")
    config = "" if default_file else f" --config {plan.settings_file}"
    print(f"then: 'autoloop doctor{config}' checks everything, 'autoloop serve{config}' runs it")
    return 0
