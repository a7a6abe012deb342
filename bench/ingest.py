"""Webhook ingest: ``autoloop serve`` beside a bare endpoint, a durable floor and Probot.

The servers (``bench/ingest_sides.py``) run side by side in one run, each a process
pinned to the same single core when the machine has two or more; this process, the load
generator, runs on the others:

- ``bare``: Starlette, verify the signature, answer; stores nothing (uvloop, httptools).
- ``floor``: the same, plus the raw delivery appended to SQLite (WAL, FULL) with group
  commit in a writer thread, answered after the commit: the least that keeps the promise.
- ``ours``: ``autoloop serve`` as users start it, with a webhook secret and its defaults.
- ``probot``: Probot as it ships, handling every event with a no-op (stores nothing),
  when ``node`` and ``npm`` are on PATH; else reported as not available.

The load is a mix of GitHub's own example payloads of eleven kinds (issues, comments,
pull requests, reviews, checks, workflow runs, pushes), each body made unique, every
request signed and prepared before timing starts. The client is a small HTTP/1.1 client
on raw asyncio streams (uvloop when installed), loopback only. Phases, in this order:

1. memory: ``VmRSS`` of each server idle (after a warm-up), then with ``--connections``
   slow senders open at once (headers and half a body each); every one must get its 200.
2. ack latency at ``--rate`` deliveries/s (open loop, from each request's scheduled send
   time to its full answer) for ``--rate-seconds`` (30) a side, the sides taking turns in
   slices of :data:`RATE_SLICE_S` (2 s). The p99 of 6,000 deliveries rests on its 60
   slowest: one stall of the machine (a virtual disk's flush, the host taking the core
   away) that falls on one side's turn moves it only if it lasts over about 300 ms at
   200/s. With 10 s a side it took 100 ms: two runs of the same code read 0.74x and
   23.7x the floor's p99 (bench/README.md).
3. throughput: ``--concurrency`` connections send, await, send again for ``--seconds``;
   rounds interleave (the order rotates), the median round counts. CPU time per
   delivery is each server's over its window; for ``ours`` also over the window and the
   time its translator then needed to decide what the window acknowledged ("all work").
   Before the next side runs, ours' backlog is decided, so that it takes no processor
   from the others.
4. end to end (ours): deliveries at ``--rate``/s for ``--e2e-seconds``; the time from
   each ack until its events are in the ledger (what ``autoloop status --json`` shows:
   the event routed to its matter), watched on the ledger file every millisecond; then
   the same at five times the rate (1,000/s by default), a stream with an answer every
   millisecond, which leaves the translator no quiet moment.
5. sustained (ours): ``--sustain-seconds`` at a fixed rate; the backlog (``/healthz``
   ``waiting``) is read every second. A rate holds when every delivery is acknowledged
   at it, 99% of them within :data:`SUSTAINED_P99_S` (1 s; GitHub gives up on a
   delivery after 10 s), and the backlog does not grow over the second half of the
   window, and stays under 90% of the inbox's limit (pressed against it, acks wait for
   the translator). The first rate tried is just under what acknowledging and deciding
   can do together (``1 / (1/acks + 1/drain)``, from the throughput rounds and the
   drain after them); then 0.85x of it, and so on, up to five.

Afterwards every 2xx ``ours`` gave is checked against its ledger, and ``autoloop
status --json`` must list them.

Usage: python -m bench.ingest [--seconds 5] [--concurrency 16] [--rate 200]
       [--rate-seconds 30] [--connections 1000] [--rounds 3] [--e2e-seconds 10]
       [--sustain-seconds 60] [--no-probot] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.ingest_sides import (
    ROOT,
    SECRET,
    Child,
    probot_ready,
    probot_version,
    serve_child,
    spawn,
    stop,
)
from bench.stats import percentile
from ghapp.github.sansio import sign
from ghapp.runtime.inbox import BACKLOG_MAX

WEBHOOKS = ROOT / "tests" / "fixtures" / "github" / "webhooks"
# (X-GitHub-Event, example payload): the mix, one of each in turn
MIX = (
    ("issues", "issues/opened.json"),
    ("issues", "issues/labeled.json"),
    ("issue_comment", "issue_comment/created.json"),
    ("pull_request", "pull_request/opened.json"),
    ("pull_request", "pull_request/synchronize.json"),
    ("pull_request", "pull_request/labeled.json"),
    ("pull_request_review", "pull_request_review/submitted.json"),
    ("check_run", "check_run/completed.json"),
    ("check_suite", "check_suite/completed.json"),
    ("workflow_run", "workflow_run/completed.json"),
    ("push", "push/payload.json"),
)
ALL_SIDES = ("bare", "floor", "ours", "probot")
TARGETS = {
    "floor_ratio": 0.9,  # ours/floor deliveries/s, at least
    "probot_ratio": 0.8,  # ours/probot, at least
    "cpu_ratio": 2.0,  # ours/bare cpu per delivery, at most
    "p99_ratio": 1.5,  # ours/floor p99 ack at the fixed rate, at most
    "e2e_p99_ms": 50.0,  # ack -> routed, under
    "rss_idle_mb": 45.0,
    "rss_held_mb": 80.0,
}
FAST_E2E_X = 5  # ack -> routed also at this many times --rate: a stream with no quiet moment
RATE_SLICE_S = 2.0  # the sides take turns at the fixed rate, this long each
IDLE_S = 2.0  # the pause after the warm-up before the idle RSS is read
SUSTAINED_P99_S = 1.0  # a sustained rate holds only with 99% of its acks within this
MAX_PACED_CONNS = 256  # connections a paced client opens at most (a slow server: requests wait)


# ------------------------------------------------------------------------------ client


class Deliveries:
    """Signed requests of the mix, prepared ahead: each body its own (a marker field
    made unique), spread over ``subjects`` issue and pull request numbers."""

    MARK = "BENCH-000000000000"

    def __init__(self, subjects: int) -> None:
        self.kinds: list[tuple[str, list[bytes]]] = []
        for name, file in MIX:
            payload = json.loads((WEBHOOKS / file).read_text())
            payload["bench"] = self.MARK
            bodies = []
            for n in range(subjects):
                for key in ("issue", "pull_request"):
                    if isinstance(payload.get(key), dict):
                        payload[key]["number"] = n + 1
                if isinstance(payload.get("number"), int):
                    payload["number"] = n + 1
                bodies.append(json.dumps(payload).encode())
            self.kinds.append((name, bodies))
        self.n = 0

    def make(self, count: int, tag: str) -> list[tuple[bytes, bytes]]:
        """``count`` requests as (headers, body) bytes, the kinds in turn."""
        out = []
        mark = self.MARK.encode()
        for _ in range(count):
            name, bodies = self.kinds[self.n % len(self.kinds)]
            body = bodies[(self.n // len(self.kinds)) % len(bodies)]
            body = body.replace(mark, f"BENCH-{self.n:012d}".encode())
            self.n += 1
            head = (
                "POST /github/webhook HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                f"content-type: application/json\r\nx-github-event: {name}\r\n"
                f"x-github-delivery: {tag}-{self.n}\r\n"
                f"x-hub-signature-256: {sign(SECRET, body)}\r\n"
                f"content-length: {len(body)}\r\n\r\n"
            ).encode()
            out.append((head, body))
        return out

    def mean_bytes(self) -> float:
        sizes = [len(bodies[0]) for _, bodies in self.kinds]
        return sum(sizes) / len(sizes)


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
    acked_at: list[float] = field(default_factory=list)  # time.monotonic() of each 2xx
    cpu_s: float = 0.0

    def record(self, head: bytes, status: int, latency: float) -> None:
        self.statuses.append(status)
        self.latencies.append(latency)
        if 200 <= status < 300:
            self.acked.append(head)
            self.acked_at.append(time.monotonic())

    @property
    def ok(self) -> int:
        return sum(1 for s in self.statuses if 200 <= s < 300)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0


def run_async(coro: Any) -> Any:
    """Run the client on uvloop when it is installed (a faster client disturbs less)."""
    try:
        import uvloop  # noqa: PLC0415  # optional

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


async def closed_loop(
    port: int, requests: list[tuple[bytes, bytes]], conns: int, seconds: float | None
) -> Window:
    """Each connection sends, awaits the answer, sends again: for ``seconds``, or until
    ``requests`` are all sent when ``seconds`` is None."""
    todo = iter(requests)
    window = Window(seconds or 0.0)
    end = time.perf_counter() + (seconds if seconds is not None else 1e9)
    pool = [await Conn.open(port) for _ in range(conns)]

    async def one(conn: Conn) -> None:
        while time.perf_counter() < end:
            request = next(todo, None)
            if request is None:
                if seconds is None:
                    return
                raise RuntimeError("ran out of prepared requests: raise the estimate")
            began = time.perf_counter()
            status = await conn.send(request)
            window.record(request[0], status, time.perf_counter() - began)

    started = time.perf_counter()
    await asyncio.gather(*(one(c) for c in pool))
    window.seconds = time.perf_counter() - started
    for c in pool:
        c.close()
    return window


async def paced(
    port: int,
    requests: list[tuple[bytes, bytes]],
    rate: float,
    on_ack: Callable[[bytes, float], None] | None = None,
    every_s: Callable[[float], None] | None = None,
    *,
    max_conns: int = MAX_PACED_CONNS,
) -> Window:
    """Send ``requests`` at ``rate`` per second whatever the answers do (open loop),
    each timed from when it was due; ``every_s`` is called about once a second. At most
    ``max_conns`` connections: past that, a request waits for one (and is late). A
    request whose connection fails twice is recorded with status 0."""
    window = Window(len(requests) / rate)
    idle = [await Conn.open(port) for _ in range(8)]
    slots = asyncio.Semaphore(max_conns)
    now = time.perf_counter  # (uvloop's loop.time() counts whole milliseconds)
    t0 = now() + 0.05
    tasks: set[asyncio.Task[None]] = set()

    async def fire(request: tuple[bytes, bytes], due: float) -> None:
        # The client's timers fire up to a millisecond late (uvloop's granularity): that
        # slack is the client's, so a request sent within 2 ms of its due time is timed
        # from its sending; one held up longer (the server slow to answer earlier ones,
        # every connection busy) is timed from when it was due.
        sent = now()
        if sent - due < 0.002:
            due = sent
        async with slots:
            conn: Conn | None = None
            try:
                conn = idle.pop() if idle else await Conn.open(port)
                try:
                    status = await conn.send(request)
                except (asyncio.IncompleteReadError, ConnectionError):
                    # closed after its keep-alive timeout while it sat unused: send again
                    conn.close()
                    conn = None
                    conn = await Conn.open(port)
                    status = await conn.send(request)
            except (asyncio.IncompleteReadError, OSError):  # the server shed it, or gave up
                if conn is not None:
                    conn.close()
                window.record(request[0], 0, now() - due)
                return
        window.record(request[0], status, now() - due)
        if on_ack is not None and 200 <= status < 300:
            on_ack(request[0], time.monotonic())
        idle.append(conn)

    next_tick = t0 + 1.0
    for i, request in enumerate(requests):
        due = t0 + i / rate
        wait = due - now()
        if wait > 0:
            await asyncio.sleep(wait)
        if every_s is not None and now() >= next_tick:
            every_s(next_tick - t0)
            next_tick += 1.0
        task = asyncio.ensure_future(fire(request, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
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
    if any(s != 200 for s in statuses):
        raise RuntimeError(f"{child.side}: slow senders got {sorted(set(statuses))}")
    return {"rss_idle_mb": before / 1024, "rss_held_mb": held / 1024, "held_sockets": fds}


# ----------------------------------------------------------------------- ours' ledger


def ledger_file(child: Child) -> Path:
    return child.home / "ledger.db"


def settle(child: Child, timeout: float = 300.0) -> float:
    """Wait until ``ours`` decided every delivery it acknowledged; the seconds it took."""
    began = time.monotonic()
    while child.health().get("waiting", 0):
        if time.monotonic() - began > timeout:
            raise RuntimeError(f"ours: backlog not decided within {timeout:.0f} s")
        time.sleep(0.01)
    return time.monotonic() - began


class Watcher:
    """Watches ours' ledger file for the events of acknowledged deliveries, every
    millisecond, and keeps each one's time from its ack to its first event."""

    def __init__(self, ledger: Path) -> None:
        self.conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, check_same_thread=False)
        self.pending: dict[str, float] = {}
        self.lags: list[float] = []
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def acked(self, head: bytes, at: float) -> None:
        (delivery,) = _ids([head])
        with self.lock:
            self.pending[delivery] = at

    def _run(self) -> None:
        while not self.halt.wait(0.001):
            with self.lock:
                ids = list(self.pending)
            if not ids:
                continue
            now = time.monotonic()
            found: set[str] = set()
            for start in range(0, len(ids), 400):
                part = ids[start : start + 400]
                keys = [f"event:github:{d}" for d in part]
                rows = self.conn.execute(
                    f"SELECT fkey FROM facts WHERE fkey IN ({','.join('?' * len(keys))})", keys
                ).fetchall()
                found |= {r[0].removeprefix("event:github:") for r in rows}
                pr = [f"event:github:{d}:" for d in part]  # fan-out: one event per PR
                for d, p in zip(part, pr, strict=True):
                    if (
                        d not in found
                        and self.conn.execute(
                            "SELECT 1 FROM facts WHERE fkey >= ? AND fkey < ? LIMIT 1", (p, p + "~")
                        ).fetchone()
                    ):
                        found.add(d)
            with self.lock:
                for d in found:
                    self.lags.append(now - self.pending.pop(d))

    def close(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.01)
        self.halt.set()
        self.thread.join()
        self.conn.close()
        return len(self.pending)


def ledger_ids(home: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{home / 'ledger.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT fkey FROM facts WHERE fkey LIKE 'event:github:%'").fetchall()
    finally:
        conn.close()
    return {r[0].removeprefix("event:github:").split(":pr", 1)[0] for r in rows}


def status_json(home: Path) -> tuple[dict[str, Any], float]:
    env = {**os.environ, "AUTOLOOP_HOME": str(home), "PYTHONPATH": str(ROOT)}
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "status", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    took = time.perf_counter() - began
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc, took


def _ids(heads: list[bytes]) -> set[str]:
    """The delivery ids named in request heads."""
    out: set[str] = set()
    marker = b"x-github-delivery: "
    for head in heads:
        start = head.index(marker) + len(marker)
        out.add(head[start : head.index(b"\r\n", start)].decode())
    return out


# --------------------------------------------------------------------------------- run


@contextlib.contextmanager
def servers(
    folder: Path, cpu: int | None, sides: Sequence[str], out: Callable[[str], None]
) -> Iterator[dict[str, Child]]:
    children: dict[str, Child] = {}
    try:
        for side in sides:
            try:
                children[side] = spawn(side, folder / side, cpu)
            except RuntimeError as exc:
                if side != "probot":
                    raise
                out(f"probot: not available ({exc})")
        yield children
    finally:
        for child in children.values():
            stop(child)


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


@dataclass
class Run:
    kids: dict[str, Child]
    deliveries: Deliveries
    out: Callable[[str], None]
    figures: dict[str, float] = field(default_factory=dict)
    acked: set[str] = field(default_factory=set)  # by ours

    def note(self, side: str, w: Window, *, strict: bool = True) -> None:
        bad = sorted({s for s in w.statuses if not 200 <= s < 300})
        if bad and strict:
            raise RuntimeError(f"{side}: non-2xx answers {bad}")
        if side == "ours":
            self.acked |= _ids(w.acked)


def run(
    *,
    seconds: float = 5.0,
    concurrency: int = 16,
    rate: float = 200.0,
    rate_seconds: float = 30.0,
    connections: int = 1000,
    rounds: int = 3,
    subjects: int = 100,
    warmup: int = 300,
    e2e_seconds: float = 10.0,
    sustain_seconds: float = 60.0,
    sustain_tries: int = 5,
    probot: bool = True,
    pin: bool = True,
    out: Callable[[str], None] = print,
) -> dict[str, float]:
    sides = [s for s in ALL_SIDES if s != "probot" or (probot and probot_ready(out))]
    deliveries = Deliveries(subjects)
    with (
        pinned(pin) as server_cpu,
        tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp,
        servers(Path(tmp), server_cpu, sides, out) as kids,
    ):
        where = f"pinned to cpu {server_cpu}" if server_cpu is not None else "not pinned"
        folder = probot_ready(lambda _: None) if "probot" in kids else None
        peers = f"probot {probot_version(folder)}" if folder else "probot not available"
        out(
            f"servers: {', '.join(kids)} ({peers}), one process each, {where}; load "
            f"generator on cpus {sorted(os.sched_getaffinity(0))}; mix of {len(MIX)} "
            f"payload kinds, {deliveries.mean_bytes() / 1024:.1f} KiB a body on average; "
            f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus"
        )
        r = Run(kids, deliveries, out)
        r.figures["probot_available"] = 1.0 if "probot" in kids else 0.0
        try:
            warm_up(r, warmup, concurrency)
            memory(r, connections)
            ack_latency(r, rate, rate_seconds)
            throughput(r, rounds, seconds, concurrency)
            end_to_end(r, rate, e2e_seconds)
            end_to_end(r, FAST_E2E_X * rate, e2e_seconds, key="e2e_fast")
            sustained(r, sustain_seconds, sustain_tries)
        finally:
            stop(kids["ours"])  # decides what it acknowledged, then exits
        found = ledger_ids(kids["ours"].home)
        missing = r.acked - found
        if missing:
            raise RuntimeError(f"{len(missing)} acknowledged deliveries are not in the ledger")
        r.figures["ours_acked"] = float(len(r.acked))
        r.figures["ours_found"] = float(len(r.acked & found))
        doc, took = status_json(kids["ours"].home)
        shown = {e["id"].split(":pr", 1)[0] for e in doc["events"] if e["source"] == "github"}
        r.figures["status_listed"] = float(len(r.acked & shown))
        r.figures["status_json_s"] = took
    r.figures.update(cli_start())
    r.figures.update({"concurrency": concurrency, "rate": rate, "sustain_s": sustain_seconds})
    report(r.figures, rate=rate, connections=connections, concurrency=concurrency, out=out)
    return r.figures


def cli_start(runs: int = 5) -> dict[str, float]:
    """``autoloop --help`` and ``autoloop status`` (on a small home), each started
    ``runs`` times as a new process, as users run them (the ``autoloop`` script, compiled
    modules cached as an install leaves them): the median wall time of each."""
    script = Path(sys.executable).with_name("autoloop")
    argv0 = [str(script)] if script.exists() else [sys.executable, "-m", "ghapp.commands.cli"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as home:
        env["AUTOLOOP_HOME"] = home
        for args in (["init"], ["emit", "local", "hello.world", "demo", "--id", "1"]):
            subprocess.run([*argv0, *args], env=env, capture_output=True, check=True)
        for name, args in (("help", ["--help"]), ("status", ["status"])):
            subprocess.run([*argv0, *args], env=env, capture_output=True, check=True)  # caches
            took = []
            for _ in range(runs):
                began = time.perf_counter()
                subprocess.run([*argv0, *args], env=env, capture_output=True, check=True)
                took.append(time.perf_counter() - began)
            out[f"cli_{name}_ms"] = sorted(took)[len(took) // 2] * 1e3
    return out


def warm_up(r: Run, count: int, concurrency: int) -> None:
    for side, child in r.kids.items():  # imports, first pages, JIT of the peer
        w = run_async(closed_loop(child.port, r.deliveries.make(count, f"warm-{side}"), 4, None))
        r.note(side, w)
        if side == "ours":
            settle(child)
    # Idle is after a pause, for every side alike (ours tidies its inbox, and gives back
    # the memory a backlog took, once nothing arrived for half a second).
    time.sleep(IDLE_S)
    for side, child in r.kids.items():
        r.figures[f"{side}_rss_idle_mb"] = child.rss_kb() / 1024


def memory(r: Run, connections: int) -> None:
    for side, child in r.kids.items():
        reqs = r.deliveries.make(connections, f"held-{side}")
        mem = run_async(hold_open(child, reqs))
        if side == "ours":  # hold_open raises unless every one got its 200
            r.acked |= _ids([head for head, _ in reqs])
            settle(child)
        r.figures[f"{side}_rss_held_mb"] = mem["rss_held_mb"]
        r.figures[f"{side}_held_sockets"] = mem["held_sockets"]


def ack_latency(r: Run, rate: float, rate_seconds: float) -> None:
    """Open loop at ``rate``, in slices, the sides taking turns (a slow spell of the
    disk then falls on each of them alike)."""
    n = max(1, int(rate * rate_seconds))
    slices = max(1, min(round(rate_seconds / RATE_SLICE_S), n // 50))
    order = list(r.kids)
    lat: dict[str, list[float]] = {s: [] for s in order}
    for sl in range(slices):
        part = n // slices + (1 if sl < n % slices else 0)
        turn = order[sl % len(order) :] + order[: sl % len(order)]
        for side in turn:
            child = r.kids[side]
            w = run_async(paced(child.port, r.deliveries.make(part, f"rate-{side}-{sl}"), rate))
            r.note(side, w)
            if w.ok != part:
                raise RuntimeError(f"{side}: {part - w.ok} deliveries not 2xx at {rate}/s")
            lat[side] += w.latencies
            if side == "ours":
                settle(child)
    r.figures["rate_count"] = float(len(lat["ours"]))  # each side's deliveries, alike
    for side, values in lat.items():
        r.figures[f"{side}_rate_p50_ms"] = percentile(values, 0.5) * 1e3
        r.figures[f"{side}_rate_p99_ms"] = percentile(values, 0.99) * 1e3


def throughput(r: Run, rounds: int, seconds: float, concurrency: int) -> None:
    windows: dict[str, list[Window]] = {s: [] for s in r.kids}
    all_work: list[float] = []  # ours: cpu s per delivery, window + deciding its backlog
    drain_rates: list[float] = []
    budget = int(seconds * 20_000) + 1000
    order = list(r.kids)
    for n in range(rounds):
        for side in order[n % len(order) :] + order[: n % len(order)]:
            child = r.kids[side]
            reqs = r.deliveries.make(budget, f"tp-{side}-{n}")
            cpu0 = child.cpu_s()
            w = run_async(closed_loop(child.port, reqs, concurrency, seconds))
            w.cpu_s = child.cpu_s() - cpu0
            r.note(side, w)
            windows[side].append(w)
            extra = ""
            if side == "ours":
                waiting = int(child.health().get("waiting", 0))
                cpu1 = child.cpu_s()
                took = settle(child)
                drain_cpu = child.cpu_s() - cpu1
                all_work.append((w.cpu_s + drain_cpu) / w.ok)
                if waiting and took > 0.05:
                    drain_rates.append(waiting / took)
                extra = f"; backlog after the window {waiting}, decided in {took:.2f} s"
            r.out(
                f"  round {n + 1} {side:6s}: {w.rate:7.0f} deliveries/s  "
                f"p50 {percentile(w.latencies, 0.5) * 1e3:6.2f} ms  "
                f"p99 {percentile(w.latencies, 0.99) * 1e3:6.2f} ms  "
                f"server cpu {w.cpu_s / w.seconds * 100:4.0f}% of one core{extra}"
            )
    for side, got in windows.items():
        ws = sorted(got, key=lambda w: w.rate)
        mid = ws[len(ws) // 2]
        r.figures[f"{side}_rps"] = mid.rate
        r.figures[f"{side}_cpu"] = mid.cpu_s / mid.seconds
        per = [w.cpu_s / w.ok for w in ws if w.cpu_s > 0 and w.ok]  # 0: under a tick
        r.figures[f"{side}_cpu_us"] = sorted(per)[len(per) // 2] * 1e6 if per else math.nan
    r.figures["ours_all_cpu_us"] = (
        sorted(all_work)[len(all_work) // 2] * 1e6 if all_work else math.nan
    )
    r.figures["ours_drain_rps"] = max(drain_rates) if drain_rates else math.nan


def end_to_end(r: Run, rate: float, e2e_seconds: float, key: str = "e2e") -> None:
    child = r.kids["ours"]
    settle(child)
    watcher = Watcher(ledger_file(child))
    n = max(1, int(rate * e2e_seconds))
    w = run_async(paced(child.port, r.deliveries.make(n, key), rate, on_ack=watcher.acked))
    r.note("ours", w)
    unseen = watcher.close()
    if unseen:
        raise RuntimeError(f"ours: {unseen} acknowledged deliveries never reached the ledger")
    r.figures[f"{key}_p50_ms"] = percentile(watcher.lags, 0.5) * 1e3
    r.figures[f"{key}_p99_ms"] = percentile(watcher.lags, 0.99) * 1e3
    r.figures[f"{key}_count"] = float(len(watcher.lags))
    r.figures[f"{key}_rate"] = rate


def sustained(r: Run, sustain_seconds: float, tries: int) -> None:
    """The highest rate tried at which ours' backlog does not grow (see the module)."""
    child = r.kids["ours"]
    acks, drain = r.figures["ours_rps"], r.figures.get("ours_drain_rps", math.nan)
    # Each delivery is acknowledged, then decided, on the same core: the rate both can
    # keep up with together is at most 1 / (1/acks + 1/drain); start just under it.
    start = 0.95 / (1 / acks + 1 / drain) if math.isfinite(drain) and drain > 0 else acks / 2
    rate = max(20.0, min(start, acks))
    r.figures["sustained_rps"] = 0.0
    for attempt in range(tries):
        n = max(1, int(rate * sustain_seconds))
        backlog: list[tuple[float, int]] = []

        def sample(at: float, backlog: list[tuple[float, int]] = backlog) -> None:
            # read beside the client's loop (a slow /healthz must not pause the sending)
            def read() -> None:
                with contextlib.suppress(OSError):
                    backlog.append((at, int(child.health().get("waiting", 0))))

            threading.Thread(target=read, daemon=True).start()

        w = run_async(
            paced(child.port, r.deliveries.make(n, f"sus-{attempt}"), rate, every_s=sample)
        )
        r.note("ours", w, strict=False)  # a rate that does not hold may time out
        settle(child)
        backlog.sort()
        grows = _slope(backlog[len(backlog) // 2 :]) if len(backlog) >= 4 else 0.0
        peak = max((b for _, b in backlog), default=0)
        # Held: every delivery acknowledged at the rate, a backlog that stops growing,
        # and one that stops short of the inbox's limit (pressed against it, the acks
        # wait for the translator: it is not keeping up, whatever the slope says).
        failed = sum(1 for s in w.statuses if not 200 <= s < 300)
        p99 = percentile(w.latencies, 0.99) if w.latencies else math.inf
        held = (
            w.rate >= 0.97 * rate
            and not failed
            and p99 <= SUSTAINED_P99_S
            and grows < 0.02 * rate
            and peak < 0.9 * BACKLOG_MAX
        )
        r.out(
            f"  sustained {rate:.0f}/s for {sustain_seconds:.0f} s: acked {w.rate:.0f}/s, "
            f"p99 ack {p99 * 1e3:.0f} ms, "
            f"{f'{failed} not acknowledged (connections failed), ' if failed else ''}"
            f"backlog peak {peak}, growing {grows:+.1f}/s over the second half: "
            f"{'holds' if held else 'does not hold'}"
        )
        if held:
            r.figures["sustained_rps"] = rate
            r.figures["sustained_backlog_peak"] = float(peak)
            return
        rate *= 0.85


def _slope(points: list[tuple[float, int]]) -> float:
    """Least-squares slope of backlog over time (deliveries per second)."""
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(b for _, b in points) / n
    den = sum((t - mx) ** 2 for t, _ in points)
    return sum((t - mx) * (b - my) for t, b in points) / den if den else 0.0


# ------------------------------------------------------------------------------ report


def ratio(f: dict[str, float], a: str, b: str) -> float:
    x, y = f.get(a, math.nan), f.get(b, math.nan)
    return x / y if y and math.isfinite(y) else math.nan


def rows(f: dict[str, float]) -> list[tuple[str, str, str]]:
    """The summary: (figure, measured, baseline in the same run; target and verdict)."""

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    probot = f.get("probot_available", 0.0) == 1.0
    vs_floor = ratio(f, "ours_rps", "floor_rps")
    vs_probot = ratio(f, "ours_rps", "probot_rps")
    vs_bare = ratio(f, "ours_rps", "bare_rps")
    cpu_x = ratio(f, "ours_all_cpu_us", "bare_cpu_us")
    ack_cpu_x = ratio(f, "ours_cpu_us", "bare_cpu_us")
    p99_x = ratio(f, "ours_rate_p99_ms", "floor_rate_p99_ms")
    out = [
        (
            f"ingest deliveries/s, {f['concurrency']:.0f} connections",
            f"{f['ours_rps']:,.0f}/s",
            f"{vs_floor:.2f}x floor ({f['floor_rps']:,.0f}/s; >= 0.9x "
            f"{verdict(vs_floor >= TARGETS['floor_ratio'])}), "
            + (
                f"{vs_probot:.2f}x Probot ({f['probot_rps']:,.0f}/s; >= 0.8x "
                f"{verdict(vs_probot >= TARGETS['probot_ratio'])}), "
                if probot
                else "Probot not available, "
            )
            + f"{vs_bare:.2f}x bare ({f['bare_rps']:,.0f}/s)",
        ),
        (
            "ingest cpu per delivery",
            f"{f['ours_all_cpu_us']:.0f} us all work ({f['ours_cpu_us']:.0f} in the ack window)",
            f"{cpu_x:.2f}x bare ({f['bare_cpu_us']:.0f} us; <= 2x {verdict(cpu_x <= 2)}); "
            f"ack window alone {ack_cpu_x:.2f}x; floor {f['floor_cpu_us']:.0f} us"
            + (f", Probot {f['probot_cpu_us']:.0f} us" if probot else ""),
        ),
        (
            f"ingest ack p50 / p99 at {f['rate']:.0f}/s",
            f"{f['ours_rate_p50_ms']:.2f} / {f['ours_rate_p99_ms']:.2f} ms",
            f"{p99_x:.2f}x floor p99 ({f['floor_rate_p99_ms']:.2f} ms; <= 1.5x "
            f"{verdict(p99_x <= TARGETS['p99_ratio'])}); bare {f['bare_rate_p99_ms']:.2f} ms"
            + (f", Probot {f['probot_rate_p99_ms']:.2f} ms" if probot else "")
            + f"; {f['rate_count']:,.0f} deliveries a side",
        ),
        (
            f"ingest ack -> routed p50 / p99, {f['rate']:.0f}/s",
            f"{f['e2e_p50_ms']:.1f} / {f['e2e_p99_ms']:.1f} ms",
            f"p99 < 50 ms {verdict(f['e2e_p99_ms'] < TARGETS['e2e_p99_ms'])} "
            f"({f['e2e_count']:.0f} deliveries watched on the ledger)",
        ),
        (
            f"ingest ack -> routed p50 / p99, {f['e2e_fast_rate']:.0f}/s",
            f"{f['e2e_fast_p50_ms']:.1f} / {f['e2e_fast_p99_ms']:.1f} ms",
            f"reported: a paced stream with an answer every "
            f"{1e3 / f['e2e_fast_rate']:.1f} ms, never a quiet moment",
        ),
        (
            f"ingest sustained, {f['sustain_s']:.0f} s, no growing backlog",
            (
                f"{f['sustained_rps']:,.0f}/s (backlog peak {f['sustained_backlog_peak']:,.0f})"
                if f["sustained_rps"]
                else "none of the rates tried"
            ),
            (
                f"{ratio(f, 'sustained_rps', 'floor_rps'):.2f}x the floor's saturated rate; "
                if f["sustained_rps"]
                else ""
            )
            + f"decided alone while draining: {f['ours_drain_rps']:,.0f}/s",
        ),
        (
            "ingest RSS idle / 1,000 connections",
            f"{f['ours_rss_idle_mb']:.1f} / {f['ours_rss_held_mb']:.1f} MB",
            f"<= 45 {verdict(f['ours_rss_idle_mb'] <= TARGETS['rss_idle_mb'])}, <= 80 "
            f"{verdict(f['ours_rss_held_mb'] <= TARGETS['rss_held_mb'])}; bare "
            f"{f['bare_rss_idle_mb']:.1f} / {f['bare_rss_held_mb']:.1f}, floor "
            f"{f['floor_rss_idle_mb']:.1f} / {f['floor_rss_held_mb']:.1f}"
            + (
                f", Probot {f['probot_rss_idle_mb']:.1f} / {f['probot_rss_held_mb']:.1f}"
                if probot
                else ""
            ),
        ),
        (
            "CLI start --help / status (median of 5)",
            f"{f['cli_help_ms']:.0f} / {f['cli_status_ms']:.0f} ms",
            f"< 100 ms: {verdict(f['cli_help_ms'] < 100)} / {verdict(f['cli_status_ms'] < 100)}",
        ),
        (
            "ingest acked deliveries in the ledger",
            f"{f['ours_found']:,.0f} of {f['ours_acked']:,.0f}",
            f"{f['status_listed']:,.0f} listed by status --json ({f['status_json_s']:.1f} s)",
        ),
    ]
    return out


def summarize(figures: dict[str, float]) -> list[tuple[str, str, str]]:
    return rows(figures)


def report(
    f: dict[str, float],
    *,
    rate: float,
    connections: int,
    concurrency: int,
    out: Callable[[str], None],
) -> None:
    out(
        f"({concurrency} connections for throughput, {rate:.0f}/s for latency, "
        f"{connections} slow senders for memory; medians of the rounds)"
    )
    width = max(len(a) for a, _, _ in rows(f))
    for label, value, against in rows(f):
        out(f"{label:{width}s}  {value}  |  {against}")


QUICK: dict[str, Any] = {
    "seconds": 0.5,
    "concurrency": 4,
    "rate": 50.0,
    "rate_seconds": 0.5,
    "connections": 20,
    "rounds": 1,
    "subjects": 3,
    "warmup": 11,
    "e2e_seconds": 0.5,
    "sustain_seconds": 1.0,
    "sustain_tries": 1,
}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--rate-seconds", type=float, default=30.0)
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--e2e-seconds", type=float, default=10.0)
    p.add_argument("--sustain-seconds", type=float, default=60.0)
    p.add_argument("--no-probot", action="store_true", help="leave Probot out")
    p.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs")
    p.add_argument("--serve", choices=("bare", "floor"), help=argparse.SUPPRESS)
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
            "e2e_seconds": args.e2e_seconds,
            "sustain_seconds": args.sustain_seconds,
        }
    )
    run(pin=not args.no_pin, probot=not args.no_probot, **sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
