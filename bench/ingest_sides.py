"""The servers of the ingest bench, each a process of its own (see ``bench/ingest.py``).

- ``bare``: a Starlette route that reads the body, checks ``X-Hub-Signature-256`` and
  answers 200; it stores nothing. uvicorn on uvloop and httptools, no access log: the
  fastest Python stack.
- ``floor``: the least work that keeps our promise. The same route, then the raw
  delivery (id, event name, body) is appended to a SQLite file (WAL,
  ``synchronous=FULL``) by one writer thread that commits everything queued in one
  transaction (group commit), and each request is answered after its commit.
- ``ours``: ``autoloop serve`` started as users start it (``python -m
  ghapp.commands.cli serve``), with a webhook secret only, on its defaults.
- ``probot``: Probot as it ships (``run`` with an app that handles every event and does
  nothing), installed from the npm registry into a cache folder outside the checkout,
  when ``node`` and ``npm`` are on PATH.

``ours`` and ``probot`` run with their default log level (a line per webhook for each),
written to a file beside their folders.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SECRET = b"bench-ingest-secret"
GC_YOUNG = 20_000  # as autoloop serve sets it (ghapp.commands.serve.GC_YOUNG; a test checks)
PROBOT = "probot@14"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "autoloop-bench"
PROBOT_APP = """\
import { run } from "probot";
run((app) => { app.onAny(async () => {}); });
"""
KINDS = (
    "issues.*",
    "issue_comment.*",
    "pull_request.*",
    "pull_request_review.*",
    "check_run.*",
    "check_suite.*",
    "workflow_run.*",
    "push",
)
# Every event routes to a rule, into a matter per subject. Its agent runs on another
# worker ("elsewhere"), so this server's worker starts no turn: ingest is measured, not
# the demo agent.
RULES = {
    "agents": {"demo": {"use": "demo", "worker": "elsewhere"}},
    "rules": [
        {
            "name": "triage",
            "on": {"source": "github", "type": list(KINDS)},
            "agent": "demo",
            "parallel": True,
        }
    ],
}


# ------------------------------------------------------------------- in the child process


def uvicorn_run(app: Any, port: int) -> None:
    import uvicorn  # noqa: PLC0415  # only the server processes need it

    uvicorn.Config  # noqa: B018  # (imported for the side effect of failing early)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        ws="none",
        log_level="warning",
        access_log=False,
    )


def bare_app(append: Any = None) -> Any:
    """The bare route; with ``append`` (a coroutine function of delivery, name and body),
    the floor's."""
    from starlette.applications import Starlette  # noqa: PLC0415  # child process only
    from starlette.requests import Request  # noqa: PLC0415  # child process only
    from starlette.responses import JSONResponse, Response  # noqa: PLC0415  # child process only
    from starlette.routing import Route  # noqa: PLC0415  # child process only

    from ghapp.github.sansio import verify_signature  # noqa: PLC0415  # child process only

    async def webhook(request: Request) -> Response:
        body = await request.body()
        if not verify_signature(SECRET, body, request.headers.get("x-hub-signature-256")):
            return JSONResponse({"error": "bad signature"}, status_code=401)
        if append is not None:
            h = request.headers
            await append(h.get("x-github-delivery", ""), h.get("x-github-event", ""), body)
        return JSONResponse({"ok": True})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/github/webhook", webhook, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )


class FloorWriter:
    """Group commit of raw deliveries in one writer thread, answers after the commit."""

    def __init__(self, path: Path) -> None:
        import sqlite3  # noqa: PLC0415  # child process only

        self.conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS inbox (delivery TEXT PRIMARY KEY, name TEXT, body BLOB)"
        )
        self.q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._run, daemon=True).start()

    async def append(self, delivery: str, name: str, body: bytes) -> None:
        import asyncio  # noqa: PLC0415  # child process only

        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.q.put((delivery, name, body, loop, fut))
        await fut

    def _run(self) -> None:
        while True:
            batch = [self.q.get()]
            while True:
                try:
                    batch.append(self.q.get_nowait())
                except queue.Empty:
                    break
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany(
                "INSERT OR IGNORE INTO inbox VALUES (?, ?, ?)", [b[:3] for b in batch]
            )
            self.conn.execute("COMMIT")
            by_loop: dict[Any, list[Any]] = {}
            for item in batch:
                by_loop.setdefault(item[3], []).append(item[4])
            for loop, futs in by_loop.items():
                loop.call_soon_threadsafe(_resolve, futs)


def _resolve(futs: list[Any]) -> None:
    for fut in futs:
        if not fut.done():
            fut.set_result(None)


def serve_child(side: str, port: int, home: Path) -> None:
    """The body of a ``bare`` or ``floor`` server process."""
    import gc  # noqa: PLC0415  # child process only

    if side == "bare":
        app = bare_app()
    else:
        home.mkdir(parents=True, exist_ok=True)
        app = bare_app(FloorWriter(home / "floor.db").append)
    gc.collect()
    gc.freeze()  # as autoloop serve does (ghapp.commands.serve.settle_heap) ...
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])  # ... and this too
    uvicorn_run(app, port)


# ------------------------------------------------------------------ in the bench process


def _cpu_of(stat: Path) -> float:
    """CPU seconds (user + system) of a process or thread, from its ``/proc/.../stat``."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Child:
    side: str
    port: int
    proc: subprocess.Popen[bytes]
    home: Path
    acked: int = 0

    def cpu_s(self) -> float:
        return _cpu_of(Path(f"/proc/{self.proc.pid}/stat"))

    def thread_cpu_s(self) -> dict[str, float]:
        """CPU seconds by thread name (``comm``; the main thread is ``main``): names are
        given by the server only when spawned with ``thread_names`` (else ``python``)."""
        out: dict[str, float] = {}
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                comm = (task / "comm").read_text().strip()
                cpu = _cpu_of(task / "stat")
            except OSError:  # (a thread that ended meanwhile)
                continue
            name = "main" if task.name == str(self.proc.pid) else comm
            out[name] = out.get(name, 0.0) + cpu
        return out

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS in /proc status")

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def health(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=30) as r:
            doc: dict[str, Any] = json.loads(r.read())
            return doc


def free_port() -> int:
    import socket  # noqa: PLC0415  # only this path needs it

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def probot_ready(out: Any = print) -> Path | None:
    """The folder holding Probot (installed there on first use), or None without node."""
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        return None
    folder = CACHE / "probot"
    if not (folder / "node_modules" / "probot" / "package.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        # a package of its own, so that npm installs here and nowhere above
        package = {"name": "autoloop-bench-probot", "private": True, "type": "module"}
        (folder / "package.json").write_text(json.dumps(package))
        out(f"installing {PROBOT} into {folder} (once)")
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", PROBOT],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            out(f"probot: npm install failed: {done.stderr.strip()[-300:]}")
            return None
    (folder / "app.mjs").write_text(PROBOT_APP)
    return folder


def probot_version(folder: Path) -> str:
    doc = json.loads((folder / "node_modules" / "probot" / "package.json").read_text())
    return str(doc.get("version", "?"))


def _private_key() -> str:
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415  # probot only
    from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415  # probot only

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()


# Runs ``autoloop`` with each thread's Python name given to the system (``prctl``, 15
# bytes), so that /proc/<pid>/task/*/comm tells the threads apart: Python 3.11 leaves
# them all named ``python``. Given to ``python -c``, so that it needs nothing from the
# tree it runs (bench.ingest_ab runs an older tree too). Linux only.
NAMED_THREADS = """
import ctypes, runpy, sys, threading
_prctl = ctypes.CDLL(None).prctl
_inner = threading.Thread._bootstrap_inner
def _named(self):
    _prctl(15, self.name[:15].encode(), 0, 0, 0)  # PR_SET_NAME
    _inner(self)
threading.Thread._bootstrap_inner = _named
sys.argv[0] = "autoloop"
runpy.run_module("ghapp.commands.cli", run_name="__main__", alter_sys=True)
"""


def command_for(side: str, port: int, home: Path) -> tuple[list[str], dict[str, str], Path]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if side == "ours":
        from ghapp.commands.home import init_home  # noqa: PLC0415  # only this path needs it

        init_home(home, rules_text=json.dumps(RULES))
        env |= {
            "AUTOLOOP_HOME": str(home),
            "AUTOLOOP_GITHUB_WEBHOOK_SECRET": SECRET.decode(),
        }
        env.pop("AUTOLOOP_LOG_LEVEL", None)  # its default: one line per webhook
        argv = [sys.executable, "-m", "ghapp.commands.cli", "serve", "--port", str(port)]
        return argv, env, ROOT
    if side == "probot":
        folder = probot_ready()
        if folder is None:
            raise RuntimeError("probot is not available")
        env |= {
            "PORT": str(port),
            "HOST": "127.0.0.1",
            "APP_ID": "1",
            "PRIVATE_KEY": _private_key(),
            "WEBHOOK_SECRET": SECRET.decode(),
            "WEBHOOK_PATH": "/github/webhook",
            "NODE_ENV": "production",
        }
        return [shutil.which("node") or "node", "app.mjs"], env, folder
    argv = [sys.executable, "-m", "bench.ingest", "--serve", side, "--port", str(port)]
    return [*argv, "--home", str(home)], env, ROOT


def spawn(
    side: str,
    home: Path,
    cpu: int | None,
    *,
    tree: Path | None = None,
    extra_env: dict[str, str] | None = None,
    log_name: str | None = None,
    thread_names: bool = False,
) -> Child:
    """Start one server and wait until it answers. ``tree``: run the code of another
    source tree (``bench.ingest_ab``); ``extra_env``: variables for this server only;
    ``thread_names``: ours names its threads for the system (:data:`NAMED_THREADS`)."""
    port = free_port()
    argv, env, cwd = command_for(side, port, home)
    if thread_names and argv[1:3] == ["-m", "ghapp.commands.cli"]:
        argv = [argv[0], "-c", NAMED_THREADS, *argv[3:]]
    if tree is not None:
        env["PYTHONPATH"], cwd = str(tree), tree
    env |= extra_env or {}
    log = home.with_name(f"{log_name or side}.log")  # what it writes (ours: a line a webhook)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as sink:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT)
    if cpu is not None:
        os.sched_setaffinity(proc.pid, {cpu})
    deadline = time.monotonic() + 60
    while True:
        try:
            path = "/healthz" if side != "probot" else "/"
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1):
                return Child(side, port, proc, home)
        except urllib.error.HTTPError:  # it answers (Probot has no /healthz): it is up
            return Child(side, port, proc, home)
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"{log_name or side} server did not start") from None
            time.sleep(0.05)


def stop(child: Child) -> None:
    if child.proc.poll() is None:
        child.proc.send_signal(signal.SIGTERM)
        try:
            child.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.proc.kill()
            child.proc.wait()
