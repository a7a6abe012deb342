"""Webhook ingest: our endpoint against a bare endpoint that only verifies the signature.

Two server processes run side by side in one run, started the same way (uvicorn, one
process, the same ``uvicorn.Config`` as ``autoloop serve``: asyncio loop, h11, no access
log) and pinned to the same single core when the machine has two or more:

- ``ours``: ``ghapp.commands.serve.build`` with a webhook secret only (ingest: verify, route on
  ``X-GitHub-Event``, translate, dedupe, decide and commit in the SQLite ledger with WAL
  and ``synchronous=FULL``, group commit; the 2xx goes out after the commit). The worker
  loop is not started, so nothing but ingest runs in the process. Deliveries are
  ``issues.labeled`` (GitHub's example payload) over ``--subjects`` issues of one
  ``parallel`` rule, so each joins an existing matter.
- ``bare``: a Starlette app with one route that reads the body and checks
  ``X-Hub-Signature-256`` (the same ``ghapp.github.sansio.verify_signature``), then answers 200;
  it stores nothing.

The load generator is this process, pinned to another core: a small HTTP/1.1 client on
raw asyncio streams over keep-alive connections, loopback only, with every request
(signature included) prepared before timing starts. The phases, in this order (both
servers warmed up first; the heaviest phase last, so that the earlier ones do not run on
a server bloated by it):

1. memory: ``VmRSS`` of each server with ``--connections`` sockets open at once, each a
   slow sender that sent the headers and half the body of a delivery and waits; then the
   bodies are completed and every one must get its 200.
2. ack latency at a fixed offered rate (``--rate`` deliveries/s for ``--rate-seconds``):
   open loop, measured from each request's scheduled send time to its full answer. The
   floor beside it: one-row commits of a bare SQLite file with the same durability on
   the same disk, paced at the same rate and timed the same way (an acknowledged write
   cannot cost less than that). The window is cut in five slices and ours, bare and the
   floor take turns, so that a slow spell of the disk (on a shared virtual disk an fsync
   now and then takes 100 ms or more) falls on each of them alike.
3. throughput: ``--concurrency`` connections each send, await the answer, send again,
   for ``--seconds``; rounds alternate which server goes first; the median round counts.
   Each server's CPU time over the window is reported (``/proc/PID/stat``), to show which
   side was saturated, and as CPU time per delivery: on a shared machine where neither
   server gets its whole core, bare/ours CPU per delivery is the throughput ratio one
   whole core each would give.

Afterwards every 2xx ``ours`` gave is checked against its ledger: each acknowledged
delivery must be there (committed before its 2xx).

Usage: python -m bench.ingest [--seconds 5] [--concurrency 32] [--rate 200]
       [--rate-seconds 10] [--connections 1000] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.stats import percentile
from ghapp.github.sansio import sign

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = ROOT / "tests" / "fixtures" / "github" / "webhooks" / "issues" / "labeled.json"
SECRET = b"bench-ingest-secret"
SIDES = ("bare", "ours")
RULES = {
    "agents": {"demo": {"use": "demo"}},
    "rules": [
        {
            "name": "triage",
            "on": {"source": "github", "type": "issues.*"},
            "agent": "demo",
            "parallel": True,
        }
    ],
}
TARGETS = {"ratio": 0.5, "p99_ms": 5.0, "rss_mb": 80.0}
RATE_SLICES = 5  # the fixed-rate window is cut in this many turns per side


# ----------------------------------------------------------------------------- servers


def uvicorn_config(app: Any, port: int) -> Any:
    """The settings ``autoloop serve`` uses, for both sides."""
    import uvicorn  # noqa: PLC0415  # only the server processes need it

    return uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )


def bare_app() -> Any:
    from starlette.applications import Starlette  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from starlette.requests import Request  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from starlette.responses import JSONResponse, Response  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from starlette.routing import Route  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    from ghapp.github.sansio import verify_signature  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    async def webhook(request: Request) -> Response:
        body = await request.body()
        if not verify_signature(SECRET, body, request.headers.get("x-hub-signature-256")):
            return JSONResponse({"error": "bad signature"}, status_code=401)
        return JSONResponse({"ok": True})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/github/webhook", webhook, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )


def serve_child(side: str, port: int, home: Path) -> None:
    """The body of a server process (``--serve SIDE``)."""
    import uvicorn  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    from ghapp.commands.serve import settle_heap  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    if side == "bare":
        app = bare_app()
        settle_heap()
        uvicorn.Server(uvicorn_config(app, port)).run()
        return
    from ghapp.commands.home import Home, init_home  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from ghapp.commands.serve import build  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from ghapp.runtime.settings import Settings  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from ghapp.web.app import create_app  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    init_home(home, rules_text=json.dumps(RULES))
    env = {"AUTOLOOP_HOME": str(home), "AUTOLOOP_GITHUB_WEBHOOK_SECRET": SECRET.decode()}
    ctx = Home.open(env=env, home=home)
    running = build(ctx, Settings.from_env(env), connect_github=False)
    running.start(worker=False)  # the bench measures ingest alone
    app = create_app(running.server)
    settle_heap()  # as autoloop serve does
    try:
        uvicorn.Server(uvicorn_config(app, port)).run()
    finally:
        running.queue.stop()
        ctx.store.close()


@dataclass
class Child:
    side: str
    port: int
    proc: subprocess.Popen[bytes]
    home: Path
    acked: int = 0

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS in /proc status")

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


def free_port() -> int:
    import socket  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def spawn(side: str, home: Path, cpu: int | None) -> Child:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.ingest", "--serve", side, "--port", str(port),
         "--home", str(home)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    if cpu is not None:
        os.sched_setaffinity(proc.pid, {cpu})
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                if r.status == 200:
                    return Child(side, port, proc, home)
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"{side} server did not start") from None
            time.sleep(0.05)


def stop(child: Child) -> None:
    if child.proc.poll() is None:
        child.proc.send_signal(signal.SIGTERM)
        try:
            child.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.proc.kill()
            child.proc.wait()


# ------------------------------------------------------------------------------ client


class Deliveries:
    """Signed requests, prepared ahead: a body per subject, a fresh delivery id each.

    Each body differs from every other by its ``issue.updated_at``, as GitHub's do (the
    hub records a body sent again under a new delivery id once: a replay)."""

    MARK = b"UPDATED-AT"

    def __init__(self, subjects: int) -> None:
        payload = json.loads(PAYLOAD.read_text())
        payload["issue"]["updated_at"] = self.MARK.decode()
        self.bodies: list[bytes] = []
        for n in range(subjects):
            payload["issue"]["number"] = n + 1
            self.bodies.append(json.dumps(payload).encode())
        self.n = 0

    def make(self, count: int, tag: str) -> list[tuple[bytes, bytes]]:
        """``count`` requests as (headers, body) bytes."""
        out = []
        for _ in range(count):
            at = f"2026-01-01T00:00:00.{self.n:09d}Z".encode()
            body = self.bodies[self.n % len(self.bodies)].replace(self.MARK, at)
            signature = sign(SECRET, body)
            self.n += 1
            head = (
                "POST /github/webhook HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                "content-type: application/json\r\nx-github-event: issues\r\n"
                f"x-github-delivery: {tag}-{self.n}\r\nx-hub-signature-256: {signature}\r\n"
                f"content-length: {len(body)}\r\n\r\n"
            ).encode()
            out.append((head, body))
        return out


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def answer(self) -> int:
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await self.reader.readexactly(length)
        return status

    async def send(self, request: tuple[bytes, bytes]) -> int:
        self.writer.write(request[0] + request[1])
        await self.writer.drain()
        return await self.answer()

    def close(self) -> None:
        self.writer.close()


@dataclass
class Window:
    seconds: float
    statuses: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    acked: list[bytes] = field(default_factory=list)  # request heads answered 2xx
    cpu_s: float = 0.0

    def record(self, head: bytes, status: int, latency: float) -> None:
        self.statuses.append(status)
        self.latencies.append(latency)
        if 200 <= status < 300:
            self.acked.append(head)

    @property
    def ok(self) -> int:
        return sum(1 for s in self.statuses if 200 <= s < 300)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds


async def closed_loop(
    port: int, requests: list[tuple[bytes, bytes]], conns: int, seconds: float | None
) -> Window:
    """Each connection sends, awaits the answer, sends again: for ``seconds``, or until
    ``requests`` are all sent when ``seconds`` is None."""
    todo = iter(requests)
    window = Window(seconds or 0.0)
    end = time.perf_counter() + (seconds if seconds is not None else 1e9)
    pool = [await Conn.open(port) for _ in range(conns)]

    async def run(conn: Conn) -> None:
        while time.perf_counter() < end:
            request = next(todo, None)
            if request is None:
                if seconds is None:
                    return  # send them all, then stop
                raise RuntimeError("ran out of prepared requests: raise the estimate")
            began = time.perf_counter()
            status = await conn.send(request)
            window.record(request[0], status, time.perf_counter() - began)

    started = time.perf_counter()
    await asyncio.gather(*(run(c) for c in pool))
    window.seconds = time.perf_counter() - started
    for c in pool:
        c.close()
    return window


async def open_loop(port: int, requests: list[tuple[bytes, bytes]], rate: float) -> Window:
    """Send ``requests`` at ``rate`` per second whatever the answers do (open loop)."""
    window = Window(len(requests) / rate)
    idle = [await Conn.open(port) for _ in range(8)]
    loop = asyncio.get_running_loop()
    t0 = loop.time() + 0.05

    async def fire(i: int, request: tuple[bytes, bytes]) -> None:
        due = t0 + i / rate
        await asyncio.sleep(max(0.0, due - loop.time()))
        conn = idle.pop() if idle else await Conn.open(port)
        try:
            status = await conn.send(request)
        except (asyncio.IncompleteReadError, ConnectionError):
            # the server closed this connection after its keep-alive timeout (5 s) while
            # it sat unused in the pool: nothing was read, so send again on a fresh one
            conn.close()
            conn = await Conn.open(port)
            status = await conn.send(request)
        window.record(request[0], status, loop.time() - due)  # from the scheduled time
        idle.append(conn)

    await asyncio.gather(*(fire(i, r) for i, r in enumerate(requests)))
    for c in idle:
        c.close()
    return window


async def hold_open(child: Child, requests: list[tuple[bytes, bytes]]) -> dict[str, float]:
    """Open one slow sender per request (headers and half the body), measure, finish."""
    before = child.rss_kb()
    fds_before = child.open_fds()
    sem = asyncio.Semaphore(100)

    async def opened(request: tuple[bytes, bytes]) -> Conn:
        async with sem:
            conn = await Conn.open(child.port)
            head, body = request
            conn.writer.write(head + body[: len(body) // 2])
            await conn.writer.drain()
            return conn

    conns = await asyncio.gather(*(opened(r) for r in requests))
    await asyncio.sleep(1.0)  # let the server accept and read what was sent
    held = child.rss_kb()
    fds = child.open_fds() - fds_before

    async def finish(conn: Conn, request: tuple[bytes, bytes]) -> int:
        body = request[1]
        conn.writer.write(body[len(body) // 2 :])
        await conn.writer.drain()
        status = await conn.answer()
        conn.close()
        return status

    statuses = await asyncio.gather(*(finish(c, r) for c, r in zip(conns, requests, strict=True)))
    child.acked += sum(1 for s in statuses if 200 <= s < 300)
    if any(s != 200 for s in statuses):
        raise RuntimeError(f"{child.side}: slow senders got {sorted(set(statuses))}")
    return {"rss_before_mb": before / 1024, "rss_held_mb": held / 1024, "held_sockets": fds}


# --------------------------------------------------------------------------------- run


@contextlib.contextmanager
def servers(folder: Path, cpu: int | None) -> Iterator[dict[str, Child]]:
    children: dict[str, Child] = {}
    try:
        for side in SIDES:
            children[side] = spawn(side, folder / side, cpu)
        yield children
    finally:
        for child in children.values():
            stop(child)


def commit_floor(folder: Path, count: int, rate: float | None = None) -> list[float]:
    """Seconds per one-row commit of a bare SQLite file with the ledger's durability
    (WAL, ``synchronous=FULL``) on the same disk: the least an acknowledged write costs.

    With ``rate``, one commit is due every ``1/rate`` s and each is timed from when it
    was due, as the server's deliveries are: a stall of the disk then delays the
    commits queued behind it too, exactly as it delays the webhooks behind it."""
    import sqlite3  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    conn = sqlite3.connect(str(folder / "floor.db"), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v TEXT)")
        times = []
        start = time.perf_counter()
        for n in range(count):
            due = time.perf_counter()
            if rate is not None:
                due = start + n / rate
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (?, ?)", (os.urandom(12).hex(), "x" * 500))
            conn.execute("COMMIT")
            times.append(time.perf_counter() - due)
        return times
    finally:
        conn.close()


def ledger_ids(home: Path) -> set[str]:
    from ghapp.commands.home import Home  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from kernel.records import EventRow  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    ctx = Home.open(env={"AUTOLOOP_HOME": str(home)}, home=home)
    try:
        with ctx.store.read() as tx:
            return {e.event.id for e in tx.query("event") if isinstance(e, EventRow)}
    finally:
        ctx.store.close()


@contextlib.contextmanager
def pinned(pin: bool) -> Iterator[int | None]:
    """The core for the servers (None: no pinning); this process moves to the others
    for the duration, and back afterwards."""
    saved = os.sched_getaffinity(0)
    cpus = sorted(saved)
    if not pin or len(cpus) < 2:
        yield None
        return
    os.sched_setaffinity(0, set(cpus[1:]))
    try:
        yield cpus[0]
    finally:
        os.sched_setaffinity(0, saved)


def run(
    *,
    seconds: float = 5.0,
    concurrency: int = 32,
    rate: float = 200.0,
    rate_seconds: float = 10.0,
    connections: int = 1000,
    rounds: int = 3,
    subjects: int = 100,
    warmup: int = 200,
    pin: bool = True,
    out: Callable[[str], None] = print,
) -> dict[str, float]:
    deliveries = Deliveries(subjects)
    figures: dict[str, float] = {}
    acked_ids: set[str] = set()
    with (
        pinned(pin) as server_cpu,
        tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp,
        servers(Path(tmp), server_cpu) as kids,
    ):
        where = f"pinned to cpu {server_cpu}" if server_cpu is not None else "not pinned"
        out(
            f"servers: one uvicorn process each, {where}; load generator on cpus "
            f"{sorted(os.sched_getaffinity(0))}; loopback; "
            f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus"
        )
        try:
            for side in SIDES:  # warm up both (imports, first pages of the ledger)
                reqs = deliveries.make(warmup, f"warm-{side}")
                w = asyncio.run(closed_loop(kids[side].port, reqs, concurrency, None))
                kids[side].acked += w.ok
            # 1. memory with many open connections, on a warmed-up server
            for side in SIDES:
                reqs = deliveries.make(connections, f"held-{side}")
                mem = asyncio.run(hold_open(kids[side], reqs))
                if side == "ours":  # hold_open raises unless every one got its 200
                    acked_ids.update(_ids([head for head, _ in reqs]))
                for key, value in mem.items():
                    figures[f"{side}_{key}"] = value
            # 2. ack latency at a fixed offered rate, on a small ledger: in slices, the
            #    sides taking turns with the disk floor, so that a slow spell of the disk
            #    falls on all of them alike rather than on whichever ran then
            n = max(1, int(rate * rate_seconds))
            slices = max(1, min(RATE_SLICES, n // 50))
            lat: dict[str, list[float]] = {"ours": [], "bare": [], "floor": []}
            for sl in range(slices):
                part = n // slices + (1 if sl < n % slices else 0)
                order = ["ours", "bare", "floor"]
                order = order[sl % 3 :] + order[: sl % 3]
                for side in order:
                    if side == "floor":
                        lat["floor"] += commit_floor(Path(tmp), part, rate)
                        continue
                    reqs = deliveries.make(part, f"rate-{side}-{sl}")
                    w = asyncio.run(open_loop(kids[side].port, reqs, rate))
                    kids[side].acked += w.ok
                    if side == "ours":
                        acked_ids.update(_ids(w.acked))
                    if w.ok != part:
                        raise RuntimeError(f"{side}: {part - w.ok} deliveries not 2xx at {rate}/s")
                    lat[side] += w.latencies
            for side, values in lat.items():
                figures[f"{side}_rate_p50_ms"] = percentile(values, 0.5) * 1e3
                figures[f"{side}_rate_p99_ms"] = percentile(values, 0.99) * 1e3
                figures[f"{side}_rate_max_ms"] = max(values) * 1e3
            # 3. throughput, closed loop; rounds alternate which side goes first
            windows: dict[str, list[Window]] = {s: [] for s in SIDES}
            budget = int(seconds * 20_000) + 1000
            for r in range(rounds):
                for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                    child = kids[side]
                    reqs = deliveries.make(budget, f"tp-{side}-{r}")
                    cpu0 = child.cpu_s()
                    w = asyncio.run(closed_loop(child.port, reqs, concurrency, seconds))
                    w.cpu_s = child.cpu_s() - cpu0
                    child.acked += w.ok
                    if side == "ours":
                        acked_ids.update(_ids(w.acked))
                    bad = [s for s in w.statuses if not 200 <= s < 300]
                    if bad:
                        raise RuntimeError(f"{side}: non-2xx answers {sorted(set(bad))}")
                    windows[side].append(w)
                    out(
                        f"  round {r + 1} {side:4s}: {w.rate:8.0f} deliveries/s  "
                        f"p50 {percentile(w.latencies, 0.5) * 1e3:6.2f} ms  "
                        f"p99 {percentile(w.latencies, 0.99) * 1e3:6.2f} ms  "
                        f"server cpu {w.cpu_s / w.seconds * 100:4.0f}% of one core"
                    )
            for side in SIDES:
                ws = sorted(windows[side], key=lambda w: w.rate)
                mid = ws[len(ws) // 2]
                figures[f"{side}_rps"] = mid.rate
                figures[f"{side}_cpu"] = mid.cpu_s / mid.seconds
                per = [w.cpu_s / w.ok for w in ws if w.cpu_s > 0 and w.ok]  # 0: under a tick
                figures[f"{side}_cpu_us"] = min(per) * 1e6 if per else math.nan
                figures[f"{side}_closed_p50_ms"] = percentile(mid.latencies, 0.5) * 1e3
                figures[f"{side}_closed_p99_ms"] = percentile(mid.latencies, 0.99) * 1e3
            figures["ratio"] = figures["ours_rps"] / figures["bare_rps"]
            figures["cpu_ratio"] = figures["bare_cpu_us"] / figures["ours_cpu_us"]  # nan-safe
        finally:
            for child in kids.values():
                stop(child)
        found = ledger_ids(kids["ours"].home)
        missing = acked_ids - found
        if missing:
            raise RuntimeError(f"{len(missing)} acknowledged deliveries are not in the ledger")
        figures["ours_acked"] = float(len(acked_ids))
        figures["ours_found"] = float(len(acked_ids & found))
    report(figures, rate=rate, connections=connections, concurrency=concurrency, out=out)
    return figures


def _ids(heads: list[bytes]) -> set[str]:
    """The delivery ids named in request heads."""
    out: set[str] = set()
    marker = b"x-github-delivery: "
    for head in heads:
        start = head.index(marker) + len(marker)
        out.add(head[start : head.index(b"\r\n", start)].decode())
    return out


def report(
    f: dict[str, float],
    *,
    rate: float,
    connections: int,
    concurrency: int,
    out: Callable[[str], None],
) -> None:
    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    out(
        f"throughput ({concurrency} connections, median round): ours {f['ours_rps']:.0f}/s "
        f"(cpu {f['ours_cpu'] * 100:.0f}%), bare {f['bare_rps']:.0f}/s "
        f"(cpu {f['bare_cpu'] * 100:.0f}%); ratio ours/bare {f['ratio']:.2f}x "
        f"(target >= {TARGETS['ratio']}x: {verdict(f['ratio'] >= TARGETS['ratio'])}); "
        "every delivery of ours committed before its 2xx"
    )
    out(
        f"server cpu per delivery (least of the rounds): ours {f['ours_cpu_us']:.0f} us, "
        f"bare {f['bare_cpu_us']:.0f} us; throughput with one whole core each would be "
        f"{f['cpu_ratio']:.2f}x (bare/ours cpu)"
    )
    out(
        f"ack latency at {rate:.0f} deliveries/s offered: ours p50 {f['ours_rate_p50_ms']:.2f} ms, "
        f"p99 {f['ours_rate_p99_ms']:.2f} ms (target < {TARGETS['p99_ms']} ms: "
        f"{verdict(f['ours_rate_p99_ms'] < TARGETS['p99_ms'])}); "
        f"bare p50 {f['bare_rate_p50_ms']:.2f} ms, p99 {f['bare_rate_p99_ms']:.2f} ms; "
        f"disk floor (one bare SQLite commit per delivery, WAL, FULL, at the same rate, "
        f"timed from when due) p50 {f['floor_rate_p50_ms']:.2f} ms, p99 "
        f"{f['floor_rate_p99_ms']:.2f} ms, worst {f['floor_rate_max_ms']:.1f} ms (ours worst "
        f"{f['ours_rate_max_ms']:.1f} ms)"
    )
    out(
        f"memory with {connections} slow senders open: ours VmRSS {f['ours_rss_held_mb']:.1f} MB "
        f"(idle {f['ours_rss_before_mb']:.1f} MB, {f['ours_held_sockets']:.0f} sockets) "
        f"(target < {TARGETS['rss_mb']} MB: {verdict(f['ours_rss_held_mb'] < TARGETS['rss_mb'])}); "
        f"bare {f['bare_rss_held_mb']:.1f} MB (idle {f['bare_rss_before_mb']:.1f} MB)"
    )
    out(
        f"ledger check: {f['ours_found']:.0f} of {f['ours_acked']:.0f} deliveries acknowledged "
        "by ours are in its ledger"
    )


QUICK: dict[str, Any] = {
    "seconds": 0.5,
    "concurrency": 4,
    "rate": 50.0,
    "rate_seconds": 0.5,
    "connections": 20,
    "rounds": 1,
    "subjects": 5,
    "warmup": 5,
}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--rate-seconds", type=float, default=10.0)
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs")
    p.add_argument("--serve", choices=SIDES, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve_child(args.serve, args.port, args.home)
        return 0
    sizes: dict[str, Any] = (
        dict(QUICK)
        if args.quick
        else {
            "seconds": args.seconds,
            "concurrency": args.concurrency,
            "rate": args.rate,
            "rate_seconds": args.rate_seconds,
            "connections": args.connections,
            "rounds": args.rounds,
        }
    )
    run(pin=not args.no_pin, **sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
