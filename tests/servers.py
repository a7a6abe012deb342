"""Run the real HTTP server in-process on loopback: uvicorn in a thread, a free port."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ghapp.commands.home import Home, init_home
from ghapp.commands.serve import Running, build, serving_in_thread
from ghapp.runtime.settings import Settings


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

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until every acknowledged webhook is decided (they are, right after
        their ack: see ghapp.runtime.inbox)."""
        inbox = self.running.inbox
        if inbox is not None:
            assert inbox.settle(timeout), f"{inbox.waiting()} deliveries still waiting"


@contextlib.contextmanager
def live_server(
    home: Path,
    rules: dict[str, Any],
    *,
    env: dict[str, str] | None = None,
    start_worker: bool = True,
    connect_github: bool = False,
    http: dict[str, Any] | None = None,
) -> Iterator[Live]:
    """A full ``autoloop serve`` (hub, ingest queue, worker, app) on 127.0.0.1; ``http``:
    options of :func:`ghapp.commands.serve.serving_in_thread` (header deadline, cap)."""
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
    running.start(worker=start_worker)
    try:
        with serving_in_thread(running, port, **(http or {})) as url:
            yield Live(url=url, running=running, ctx=ctx)
    finally:
        running.stop()
        ctx.store.close()


@contextlib.contextmanager
def stuck_ledger(store: Any) -> Iterator[list[str]]:
    """``store``'s reads wait (at most 10 s) as a query no answer comes to, until the
    block ends: yields the names of the threads that started one, in order."""
    real_read = store.read
    release = threading.Event()
    entered: list[str] = []

    @contextlib.contextmanager
    def stuck() -> Iterator[Any]:
        entered.append(threading.current_thread().name)
        release.wait(10)
        with real_read() as tx:
            yield tx

    store.read = stuck
    try:
        yield entered
    finally:
        release.set()
        store.read = real_read
