"""``kill -9`` of ``autoloop serve`` in the middle of a webhook stream loses no acked delivery.

The server runs as a real subprocess (``python -m ghapp.commands.cli serve``) with only a webhook
secret. Several senders stream signed deliveries at it concurrently; once a share of them
has been acknowledged the server gets SIGKILL, with requests still in flight. It is then
restarted on the same home: every delivery that got a 2xx must be in the ledger, the
projections must equal a replay of the facts (``autoloop rebuild --check``), and
redelivering everything that was not acknowledged (as GitHub's "redeliver" does) must
leave exactly one event per delivery.
"""

from __future__ import annotations

import asyncio
import json
import os
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


def env_for(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AUTOLOOP_HOME": str(home),
        "AUTOLOOP_GITHUB_WEBHOOK_SECRET": SECRET,
        "PYTHONPATH": str(ROOT),
    }


def start_server(home: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ghapp.commands.cli", "serve", "--port", str(port)],
            cwd=ROOT,
            env=env_for(home),
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


def bodies(count: int) -> list[tuple[str, bytes]]:
    """Deliveries over SUBJECTS issues, each body its own (GitHub's differ at least by
    ``updated_at``; the same body under a new delivery id is recorded once, a replay)."""
    payload = json.loads(PAYLOAD.read_text())
    out = []
    for n in range(count):
        payload["issue"]["number"] = 1 + n % SUBJECTS
        payload["issue"]["updated_at"] = f"2026-01-01T00:00:00.{n:06d}Z"
        out.append((f"crash-{n:05d}", json.dumps(payload).encode()))
    return out


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


def events_in(home: Path) -> list[str]:
    ctx = Home.open(env={"AUTOLOOP_HOME": str(home)}, home=home)
    try:
        with ctx.store.read() as tx:
            return [e.event.id for e in tx.query("event") if isinstance(e, EventRow)]
    finally:
        ctx.store.close()


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
