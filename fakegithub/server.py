"""The sandbox GitHub served: an ASGI app, and a server running in a thread.

Python API::

    from fakegithub.server import running_sandbox

    with running_sandbox(app_url="http://127.0.0.1:8080/github/webhook") as gh:
        gh.api_url            # REST base URL, e.g. http://127.0.0.1:53211
        gh.control_url        # gh.api_url + "/_sandbox"
        gh.app_id, gh.private_key_pem, gh.private_key_path, gh.webhook_secret
        gh.installation_id, gh.repo            # "sandbox/demo"
        gh.world.open_issue("reader", "Crash on start", labels=["bug"])
        gh.world.push("maintainer", "fix", {"app.py": "print('ok')\\n"})
        number = gh.world.open_pr("maintainer", "fix", "Fix the crash")
        gh.world.set_ci({"ci": "success"}, delay=0.2)
        gh.world.set_deploy(delay=0.2)
        gh.world.approve("maintainer", number)     # people act without tokens
        gh.world.user_token("reader")              # or get a token to use the REST API
        gh.world.faults.add("response_lost", method="PUT", path="*/merge")
        gh.world.audit.entries(method="PUT")       # every applied write
        gh.world.deliveries                        # every webhook attempt
        gh.world.set_app_url(url)
        gh.world.settle()                          # wait for CI, deploys and webhooks

``create_app(sandbox)`` builds the Starlette app around a
:class:`~fakegithub.sandbox.Sandbox` (REST API + ``/_sandbox/`` control routes) without
starting anything. It is the one place that joins the route tables: this module imports
the routes, and nothing below it imports this module.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette

from fakegithub.faults import FaultMiddleware
from fakegithub.routes import app as routes_app
from fakegithub.routes import checks as routes_checks
from fakegithub.routes import control as routes_control
from fakegithub.routes import graphql as routes_graphql
from fakegithub.routes import issues as routes_issues
from fakegithub.routes import manifests as routes_manifests
from fakegithub.routes import pulls as routes_pulls
from fakegithub.routes import repos as routes_repos
from fakegithub.routes import users as routes_users
from fakegithub.sandbox import Sandbox
from fakegithub.state import utc_now
from fakegithub.world import World


def create_app(sandbox: Sandbox) -> Any:
    """The ASGI app: the REST API and ``/_sandbox/`` control routes, behind fault injection."""
    routes = [
        *routes_app.ROUTES,
        *routes_issues.ROUTES,
        *routes_pulls.ROUTES,
        *routes_checks.ROUTES,
        *routes_repos.ROUTES,
        *routes_users.ROUTES,
        *routes_graphql.ROUTES,
        *routes_manifests.ROUTES,
        *routes_control.ROUTES,
    ]
    app = Starlette(routes=routes)
    app.state.sandbox = sandbox
    return FaultMiddleware(app, sandbox.faults, lambda: sandbox.state.base_url)


@dataclass(frozen=True, slots=True)
class SandboxHandle:
    sandbox: Sandbox
    api_url: str
    private_key_path: Path

    @property
    def control_url(self) -> str:
        return f"{self.api_url}/_sandbox"

    @property
    def world(self) -> World:
        return self.sandbox.world

    @property
    def app_id(self) -> int:
        return self.sandbox.app.id

    @property
    def private_key_pem(self) -> str:
        return self.sandbox.private_key_pem

    @property
    def webhook_secret(self) -> str:
        return self.sandbox.app.webhook_secret

    @property
    def installation_id(self) -> int:
        return self.sandbox.installation_id

    @property
    def repo(self) -> str:
        return self.sandbox.repo


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def write_private_key(pem: str, folder: Path) -> Path:
    path = folder / "sandbox-app.private-key.pem"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(pem)
    path.chmod(0o600)
    return path


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:
        """The thread that runs us is not the main thread: leave signals alone."""


def serve_in_thread(app: Any, host: str, port: int) -> tuple[_Server, threading.Thread]:
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        http="h11",
        lifespan="off",
        loop="asyncio",
    )
    server = _Server(config)
    # A port in use is the caller's one line, not uvicorn's error line before it: tried
    # here first (uvicorn binds it again just after).
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise RuntimeError(
                f"the sandbox could not listen on {host}:{port} ({exc.strerror or exc})"
            ) from None
    thread = threading.Thread(target=server.run, name="sandbox-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the sandbox could not listen on {host}:{port}")
        time.sleep(0.005)
    return server, thread


@contextmanager
def running_sandbox(
    app_url: str | None = None,
    port: int = 0,
    *,
    host: str = "127.0.0.1",
    token_lifetime: timedelta = timedelta(hours=1),
    clock: Callable[[], datetime] = utc_now,
    fault_seed: int | None = None,
    webhook_senders: int = 1,
) -> Iterator[SandboxHandle]:
    """Runs a fresh sandbox on loopback in a background thread for the ``with`` block
    (``webhook_senders``: deliveries in flight at once, see
    :class:`~fakegithub.webhooks.WebhookSender`)."""
    port = port or free_port(host)
    api_url = f"http://{host}:{port}"
    sandbox = Sandbox(
        app_url=app_url,
        base_url=api_url,
        clock=clock,
        token_lifetime=token_lifetime,
        fault_seed=fault_seed,
        webhook_senders=webhook_senders,
    )
    with tempfile.TemporaryDirectory(prefix="autoloop-sandbox-") as folder:
        key_path = write_private_key(sandbox.private_key_pem, Path(folder))
        sandbox.start()
        server, thread = serve_in_thread(create_app(sandbox), host, port)
        try:
            yield SandboxHandle(sandbox, api_url, key_path)
        finally:
            server.should_exit = True
            thread.join(timeout=10)
            sandbox.stop()
