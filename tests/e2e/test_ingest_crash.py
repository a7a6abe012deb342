"""``kill -9`` of ``autoloop serve`` in the middle of a webhook stream loses no acked delivery.

The server runs as a real subprocess (``python -m ghapp.commands.cli serve``) with only a webhook
secret. Several senders stream signed deliveries at it concurrently; once a share of them
has been acknowledged the server gets SIGKILL, with requests still in flight. It is then
restarted on the same home: every delivery that got a 2xx must be in the ledger, the
projections must equal a replay of the facts (``autoloop rebuild --check``), and
redelivering everything that was not acknowledged (as GitHub's "redeliver" does) must
leave exactly one event per delivery.

With a SQLite ledger the commit acknowledged is the webhook inbox's (the events follow
from it, and a restart records what it still holds before the server listens): right
after a kill an acknowledged delivery must be in the ledger or in the inbox, and after
the restart in the ledger.

The second half kills the server at each named point of the commit protocol in turn,
with the crash test hook (``AUTOLOOP_CRASH_AT``, :mod:`ghapp.runtime.crash`), on SQLite
and on PostgreSQL: 4 kills over 400 deliveries in CI, 60 over 12,000 with ``--slow``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from ghapp.commands.home import Home, init_home
from ghapp.github.sansio import sign
from ghapp.runtime import crash
from ghapp.runtime.segments import SUFFIX, scan
from kernel.records import EventRow
from tests import paths
from tests.servers import free_port

ROOT = paths.ROOT
PAYLOAD = ROOT / "tests" / "fixtures" / "github" / "webhooks" / "issues" / "labeled.json"
SECRET = "crash-test-secret"
RULES: dict[str, Any] = {
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
SUBJECTS = 10  # deliveries spread over this many issues, so several matters grow


@dataclass
class Tally:
    sent: set[str] = field(default_factory=set)
    acked: set[str] = field(default_factory=set)
    refused: dict[str, int] = field(default_factory=dict)  # delivery -> non-2xx status
    failed: set[str] = field(default_factory=set)  # no answer (connection reset or refused)


def env_for(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``extra`` on top (the ledger URL, the crash hook); the
    crash hook only when ``extra`` names it."""
    inherited = {k: v for k, v in os.environ.items() if k != crash.ENV}
    return {
        **inherited,
        "AUTOLOOP_HOME": str(home),
        "AUTOLOOP_GITHUB_WEBHOOK_SECRET": SECRET,
        "PYTHONPATH": str(ROOT),
        **(extra or {}),
    }


def start_server(
    home: Path, port: int, log: Path, extra: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ghapp.commands.cli", "serve", "--port", str(port)],
            cwd=ROOT,
            env=env_for(home, extra),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited with {proc.returncode}: {log.read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"serve did not answer /healthz within 30 s: {log.read_text()}")


def delivery(n: int, payload: dict[str, Any] | None = None) -> tuple[str, bytes]:
    """Delivery ``n``: over SUBJECTS issues, each body its own (GitHub's differ at least
    by ``updated_at``; the same body under a new delivery id is recorded once, a replay)."""
    payload = payload if payload is not None else json.loads(PAYLOAD.read_text())
    payload["issue"]["number"] = 1 + n % SUBJECTS
    payload["issue"]["updated_at"] = f"2026-01-01T00:00:00.{n:06d}Z"
    return f"crash-{n:05d}", json.dumps(payload).encode()


def bodies(count: int) -> list[tuple[str, bytes]]:
    payload = json.loads(PAYLOAD.read_text())
    return [delivery(n, payload) for n in range(count)]


async def stream(
    url: str,
    deliveries: list[tuple[str, bytes]],
    tally: Tally,
    *,
    senders: int,
    kill_after: int | None = None,
    kill: Any = None,
) -> None:
    """``senders`` concurrent senders share the list; SIGKILL once ``kill_after`` acked.

    After the kill each sender stops at its first unanswered request (the server is gone).
    """
    todo = iter(deliveries)
    limits = httpx.Limits(max_connections=senders, max_keepalive_connections=senders)

    async def sender(client: httpx.AsyncClient) -> None:
        for delivery, body in todo:
            hdrs = {
                "content-type": "application/json",
                "x-github-event": "issues",
                "x-github-delivery": delivery,
                "x-hub-signature-256": sign(SECRET.encode(), body),
            }
            tally.sent.add(delivery)
            try:
                resp = await client.post("/github/webhook", content=body, headers=hdrs)
            except httpx.TransportError:
                tally.failed.add(delivery)
                if kill_after is not None and len(tally.acked) >= kill_after:
                    return
                continue
            if 200 <= resp.status_code < 300:
                tally.acked.add(delivery)
                if kill_after is not None and len(tally.acked) == kill_after:
                    kill()
            else:
                tally.refused[delivery] = resp.status_code

    async with httpx.AsyncClient(base_url=url, timeout=10, limits=limits) as client:
        await asyncio.gather(*(sender(client) for _ in range(senders)))


def events_in(home: Path, extra: dict[str, str] | None = None) -> list[str]:
    ctx = Home.open(env={"AUTOLOOP_HOME": str(home), **(extra or {})}, home=home)
    try:
        with ctx.store.read() as tx:
            return [e.event.id for e in tx.query("event") if isinstance(e, EventRow)]
    finally:
        ctx.store.close()


def durable_in(home: Path, extra: dict[str, str] | None = None) -> set[str]:
    """Deliveries stored where a restart finds them: events in the ledger, and with a
    SQLite ledger the webhook inbox's rows (acknowledged, decided at the next start)."""
    found = set(events_in(home, extra))
    inbox = home / "ledger.inbox"
    if "AUTOLOOP_DB" not in (extra or {}) and inbox.exists():
        for segment in inbox.glob("*" + SUFFIX):  # read as a restart reads them, changing nothing
            records, _ = scan(segment.read_bytes())
            found |= {record.delivery for record, _, _ in records}
    return found


def crash_and_recover(tmp_path: Path, *, total: int, kill_after: int, senders: int) -> Tally:
    home = tmp_path / "home"
    init_home(home, rules_text=json.dumps(RULES))
    log = tmp_path / "serve.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    deliveries = bodies(total)
    tally = Tally()
    proc = start_server(home, port, log)
    try:
        assert "GitHub write-backs are off" in log.read_text()
        began = time.monotonic()
        asyncio.run(
            stream(
                url,
                deliveries,
                tally,
                senders=senders,
                kill_after=kill_after,
                kill=lambda: os.kill(proc.pid, signal.SIGKILL),
            )
        )
        streamed = time.monotonic() - began
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not tally.refused, f"deliveries refused: {tally.refused}"
    assert len(tally.acked) >= kill_after

    proc = start_server(home, port, log)  # same home, same port
    try:
        found = set(events_in(home))
        lost = tally.acked - found
        unacked_but_stored = (tally.sent - tally.acked) & found
        print(
            f"\nkill -9 during a stream of {total} deliveries from {senders} senders: "
            f"sent {len(tally.sent)}, acked {len(tally.acked)}, acked and found "
            f"{len(tally.acked & found)}, lost {len(lost)}; unanswered {len(tally.failed)} "
            f"(of which stored anyway: {len(unacked_but_stored)}); "
            f"streamed for {streamed:.1f} s before the kill"
        )
        assert lost == set(), f"{len(lost)} acknowledged deliveries are not in the ledger"
        assert found <= tally.sent  # nothing invented

        # GitHub-style redelivery of everything not acknowledged, to the restarted server
        again = [(d, b) for d, b in deliveries if d not in tally.acked]
        retry = Tally()
        asyncio.run(stream(url, again, retry, senders=senders))
        assert retry.acked == {d for d, _ in again}, (retry.failed, retry.refused)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()

    ids = events_in(home)
    assert sorted(ids) == sorted(d for d, _ in deliveries)  # each delivery exactly once
    check = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "rebuild", "--check"],
        cwd=ROOT,
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "projections equal a replay" in check.stdout
    return tally


def test_kill_9_mid_stream_loses_no_acknowledged_delivery(tmp_path: Path) -> None:
    crash_and_recover(tmp_path, total=300, kill_after=120, senders=8)


@pytest.mark.slow
def test_kill_9_mid_stream_of_two_thousand_deliveries_loses_none(tmp_path: Path) -> None:
    crash_and_recover(tmp_path, total=2000, kill_after=900, senders=16)


# ---------------------------------------------------------------- named crash points
#
# The server is started with the crash test hook armed (AUTOLOOP_CRASH_AT=POINT:N, see
# ghapp.runtime.crash): it kills itself with SIGKILL at the Nth passage through one named
# point of the ingest commit protocol, with requests of several senders in flight. Each
# restart arms the next point, in turn. Before each restart the ledger is read: every
# delivery acknowledged so far must be in it. What was not acknowledged is redelivered
# to the next server, as GitHub's "redeliver" does; at the end every delivery has been
# acknowledged and is in the ledger exactly once, and the projections equal a replay.


@dataclass
class Cycle:
    kills: dict[str, int] = field(default_factory=lambda: dict.fromkeys(crash.POINTS, 0))
    sent: set[str] = field(default_factory=set)  # distinct deliveries sent at least once
    requests: int = 0  # every POST, redeliveries included
    acked: set[str] = field(default_factory=set)
    # after a kill: in the ledger, though never answered (committed, then killed)
    stored_unacked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(crash.POINTS, 0))
    failed: int = 0  # requests without an answer
    found: int = 0


class Feed:
    """What the senders send: the deliveries not yet acknowledged first (redelivered),
    then new ones, numbered on (as many as the run needs until its kill)."""

    def __init__(self) -> None:
        self.payload: dict[str, Any] = json.loads(PAYLOAD.read_text())
        self.bodies: dict[str, bytes] = {}
        self.unacked: dict[str, None] = {}  # in order
        self.fresh = 0

    def take(self, *, fresh_limit: int | None = None) -> tuple[str, bytes] | None:
        if self.unacked:
            d = next(iter(self.unacked))
            del self.unacked[d]
            return d, self.bodies[d]
        if fresh_limit is not None and self.fresh >= fresh_limit:
            return None
        d, body = delivery(self.fresh, self.payload)
        self.fresh += 1
        self.bodies[d] = body
        return d, body


async def crash_segment(
    url: str,
    feed: Feed,
    cycle: Cycle,
    proc: subprocess.Popen[bytes],
    *,
    senders: int,
    fresh_limit: int | None = None,
) -> None:
    """Send until the server is gone (or, with ``fresh_limit``, until the feed is empty);
    a delivery without a 2xx goes back to the feed."""
    limits = httpx.Limits(max_connections=senders, max_keepalive_connections=senders)

    async def gone() -> bool:
        # A killed process closes its sockets a moment before it can be waited for.
        for _ in range(200):
            if proc.poll() is not None:
                return True
            await asyncio.sleep(0.01)
        return False

    async def sender(client: httpx.AsyncClient) -> None:
        while (item := feed.take(fresh_limit=fresh_limit)) is not None:
            d, body = item
            hdrs = {
                "content-type": "application/json",
                "x-github-event": "issues",
                "x-github-delivery": d,
                "x-hub-signature-256": sign(SECRET.encode(), body),
            }
            cycle.sent.add(d)
            cycle.requests += 1
            try:
                resp = await client.post("/github/webhook", content=body, headers=hdrs)
            except httpx.TransportError:
                cycle.failed += 1
                feed.unacked[d] = None
                if await gone():
                    return
                continue
            assert resp.status_code == 200, (d, resp.status_code, resp.text)
            cycle.acked.add(d)

    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        await asyncio.gather(*(sender(client) for _ in range(senders)))


def crash_points_run(
    tmp_path: Path,
    ledger_env: dict[str, str],
    *,
    deliveries: int,
    kills: int,
    senders: int = 8,
    seed: int = 13,
) -> Cycle:
    """``kills`` kills at the named points in turn, then one run without the hook that
    brings the deliveries sent to at least ``deliveries`` and redelivers what is left."""
    rng = random.Random(seed)
    home = tmp_path / "home"
    init_home(home, rules_text=json.dumps(RULES))
    log = tmp_path / "serve.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    feed = Feed()
    cycle = Cycle()
    share = max(1, deliveries // (kills + 1))  # requests per run, about
    per_group = senders / 2  # requests per group commit, estimated on from what is seen
    began = time.monotonic()
    for i in range(kills):
        point = crash.POINTS[i % len(crash.POINTS)]
        per_pass = 1.0 if point == crash.AFTER_ACK else per_group
        nth = max(1, round(rng.uniform(0.5, 1.5) * share / per_pass))
        requests_before = cycle.requests
        proc = start_server(home, port, log, {**ledger_env, crash.ENV: f"{point}:{nth}"})
        try:
            asyncio.run(crash_segment(url, feed, cycle, proc, senders=senders))
            assert proc.wait(timeout=30) == -signal.SIGKILL, log.read_text()[-2000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert f"killed at {point} (passage {nth})" in log.read_text()
        cycle.kills[point] += 1
        if point != crash.AFTER_ACK:
            seen = (cycle.requests - requests_before) / nth
            per_group = max(1.0, (per_group + seen) / 2)
        found = durable_in(home, ledger_env)  # the ledger, or the inbox for the next start
        lost = cycle.acked - found
        assert lost == set(), f"kill {i + 1} at {point}: {len(lost)} acknowledged, not stored"
        assert found <= cycle.sent  # nothing invented
        cycle.stored_unacked[point] += len(found & set(feed.unacked))
    # the last run: no hook; new deliveries up to the total, and every redelivery
    proc = start_server(home, port, log, ledger_env)
    try:
        asyncio.run(
            crash_segment(
                url, feed, cycle, proc, senders=senders, fresh_limit=max(deliveries, feed.fresh)
            )
        )
        assert not feed.unacked, f"{len(feed.unacked)} deliveries never acknowledged"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-2000:]
    ids = events_in(home, ledger_env)
    store = "PostgreSQL" if "AUTOLOOP_DB" in ledger_env else "SQLite"
    cycle.found = len(set(ids) & cycle.acked)
    lost = cycle.acked - set(ids)
    print(
        f"\nkill -9 at named commit points ({store}): kills {sum(cycle.kills.values())} "
        f"{cycle.kills}; deliveries sent "
        f"{len(cycle.sent)} ({cycle.requests} requests with redeliveries, "
        f"{cycle.failed} unanswered), acked {len(cycle.acked)}, found {cycle.found}, "
        f"lost {len(lost)}; stored though unanswered at the kill: {cycle.stored_unacked}; "
        f"{time.monotonic() - began:.0f} s"
    )
    assert lost == set()
    assert sorted(ids) == sorted(cycle.sent)  # each delivery exactly once
    assert cycle.acked == cycle.sent
    check = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "rebuild", "--check"],
        cwd=ROOT,
        env=env_for(home, ledger_env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "projections equal a replay" in check.stdout
    # a kill between the commit and the answers leaves committed, unanswered deliveries
    # (answered "duplicate" when redelivered): the point was reached with work in hand
    if cycle.kills[crash.AFTER_COMMIT_BEFORE_ACK]:
        assert cycle.stored_unacked[crash.AFTER_COMMIT_BEFORE_ACK] > 0
    return cycle


def test_kill_9_at_each_commit_point_loses_no_acknowledged_delivery(
    tmp_path: Path, ledger_env: dict[str, str]
) -> None:
    cycle = crash_points_run(tmp_path, ledger_env, deliveries=400, kills=4)
    assert all(n == 1 for n in cycle.kills.values())
    assert len(cycle.sent) >= 400


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_kill_9_fifty_times_at_the_commit_points_over_ten_thousand_deliveries(
    tmp_path: Path, ledger_env: dict[str, str]
) -> None:
    cycle = crash_points_run(tmp_path, ledger_env, deliveries=12_000, kills=60)
    assert sum(cycle.kills.values()) >= 50
    assert min(cycle.kills.values()) >= 12
    assert len(cycle.sent) >= 10_000
