"""Run the real HTTP server in-process on loopback: uvicorn in a thread, a free port."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from ghapp.commands.home import Home, init_home
from ghapp.commands.serve import Running, build
from ghapp.runtime.settings import Settings
from ghapp.web.app import create_app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Live:
    url: str
    running: Running
    ctx: Home

    @property
    def hub(self) -> Any:
        return self.running.server.hub


@contextlib.contextmanager
def live_server(
    home: Path,
    rules: dict[str, Any],
    *,
    env: dict[str, str] | None = None,
    start_worker: bool = True,
    connect_github: bool = False,
) -> Iterator[Live]:
    """A full ``autoloop serve`` (hub, ingest queue, worker, app) on 127.0.0.1."""
    init_home(home, rules_text=json.dumps(rules))
    full_env = {"AUTOLOOP_HOME": str(home), **(env or {})}
    settings = Settings.from_env(full_env)
    ctx = Home.open(env=full_env, home=home)
    port = free_port()
    running = build(
        ctx,
        settings,
        base_url=f"http://127.0.0.1:{port}",
        poll_s=0.2,
        connect_github=connect_github,
    )
    running.queue.start()
    if start_worker:
        running.worker.start()
    for extra in running.extras:
        start = getattr(extra, "start", None)
        if start is not None:
            start()
    config = uvicorn.Config(
        create_app(running.server), host="127.0.0.1", port=port, log_level="error"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.01)
    try:
        yield Live(url=f"http://127.0.0.1:{port}", running=running, ctx=ctx)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        running.stop()
        ctx.store.close()
