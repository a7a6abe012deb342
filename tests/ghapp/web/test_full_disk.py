"""The server on a full disk: a 503 in one log line for what it cannot record, and a
``/healthz`` that says so; and a client that drops in the middle of its body.

The disk fills for real as far as SQLite can tell: the server's own ledger connection
gets ``PRAGMA max_page_count`` at its present size, so the next write that needs a new
page fails with ``SQLITE_FULL`` ("database or disk is full"), the very error a full
file system gives. The webhook inbox writes over segments filled beforehand and needs
space only for a new segment: its cap (``max_bytes``) at its present size makes that
fail with ``ENOSPC``, as a full disk does. Raising the caps again is freeing space.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import socket
import time
import uuid
from pathlib import Path

import httpx

from ghapp.store.sqlite import SqliteStore
from kernel.records import EventRow
from tests.ghapp.web.logged import logs
from tests.ghapp.web.test_app import FIXTURES, SECRET, post
from tests.servers import Live, live_server

RULES = {
    "agents": {"demo": {"use": "demo"}},
    "sources": {"shop": {"adapter": "hmac"}},
    "rules": [{"name": "triage", "on": {"source": "github", "type": "issues.*"}, "agent": "demo"}],
}
SHOP_SECRET = "shop-secret-for-tests"
ENV = {"AUTOLOOP_GITHUB_WEBHOOK_SECRET": SECRET, "AUTOLOOP_SOURCE_SHOP_SECRET": SHOP_SECRET}
BODY = (FIXTURES / "issues" / "opened.json").read_bytes()


def body(tag: str) -> bytes:
    """GitHub's example payload made a delivery of its own (bodies differ, as GitHub's
    do: the same body under a new delivery id is a replay, recorded once)."""
    payload = json.loads(BODY)
    payload["issue"]["updated_at"] = tag
    return json.dumps(payload).encode()


def set_disk_pages(live: Live, pages: int | None) -> None:
    """Cap the server's ledger at ``pages`` pages and its webhook inbox (files on the
    same disk) at its present size (None), or lift the inbox's cap (a number)."""
    store = live.hub.store
    assert isinstance(store, SqliteStore)
    inbox = live.running.inbox
    assert inbox is not None
    with store._lock:
        cap = pages
        if cap is None:
            (cap,) = store._conn.execute("PRAGMA page_count").fetchone()
        store._conn.execute(f"PRAGMA max_page_count={cap}")
    segments = inbox._log
    segments.max_bytes = sum(p.stat().st_size for p in segments.files()) if pages is None else None


def big_body(tag: str) -> bytes:
    """A delivery of about 200 KiB (GitHub allows 25 MB): the inbox's room, filled
    beforehand, is used up in a few dozen."""
    payload = json.loads(BODY)
    payload["issue"]["updated_at"] = tag
    payload["issue"]["body"] = "a long description " * 10_000
    return json.dumps(payload).encode()


def delivery_ids(live: Live) -> set[str]:
    live.settle()  # acknowledged deliveries are decided right after their ack
    with live.ctx.store.read() as tx:
        return {e.event.id for e in tx.query("event") if isinstance(e, EventRow)}


def no_tracebacks(records: list[logging.LogRecord]) -> None:
    for r in records:
        assert r.exc_info is None and not r.exc_text, r.getMessage()
        assert "Exception in ASGI application" not in r.getMessage()


def shop(url: str, doc: dict[str, object]) -> httpx.Response:
    body = json.dumps(doc).encode()
    signature = "sha256=" + hmac.new(SHOP_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return httpx.post(
        f"{url}/v1/in/shop", content=body, headers={"x-signature-256": signature}, timeout=10
    )


def test_a_full_disk_is_a_503_in_one_line_and_healthz_says_why(tmp_path: Path) -> None:
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live, logs() as seen:
        assert post(live.url, "issues", body("before"), delivery="before").status_code == 200
        assert httpx.get(f"{live.url}/healthz").json()["ok"] is True

        set_disk_pages(live, None)
        acked = {"before"}
        answers: list[int] = []
        for i in range(200):  # the inbox takes them while its last segment has room
            delivery = f"full-{i}"
            resp = post(live.url, "issues", big_body(delivery), delivery=delivery)
            answers.append(resp.status_code)
            if resp.status_code == 200:
                acked.add(delivery)
                continue
            assert resp.status_code == 503, resp.text
            assert "send it again later" in resp.json()["error"]
            break
        assert answers[-1] == 503, answers

        health = httpx.get(f"{live.url}/healthz")
        assert health.status_code == 503
        doc = health.json()
        assert doc["ok"] is False
        assert doc["ledger"] == "not writable: OSError: [Errno 28] No space left on device"
        assert doc["since"].startswith(time.strftime("%Y-", time.gmtime()))

        order = {"id": "o-1", "type": "order.paid", "details": {"lines": ["item"] * 4000}}
        failed = shop(live.url, order)  # pages of its own: it cannot fit in a last gap
        assert failed.status_code == 503 and "send it again later" in failed.json()["error"]

        lines = [r.getMessage() for r in seen.records if "not recorded" in r.getMessage()]
        assert lines == [
            f"webhook full-{len(answers) - 1} (issues) not recorded (answered 503): "
            "OSError: [Errno 28] No space left on device",
            "event 'o-1' of source 'shop' not recorded (answered 503): "
            "OperationalError: database or disk is full",
        ]
        no_tracebacks(seen.records)

        set_disk_pages(live, 1_000_000)  # space again
        assert post(live.url, "issues", body("after"), delivery="after").status_code == 200
        acked.add("after")
        live.settle()
        assert httpx.get(f"{live.url}/healthz").json()["ok"] is True
        assert shop(live.url, order).json()["code"] == "recorded"
        assert acked <= delivery_ids(live)  # nothing acknowledged was lost


def test_a_client_that_drops_mid_body_is_one_line_and_nothing_stored(tmp_path: Path) -> None:
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live, logs() as seen:
        host, port = live.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            head = (
                "POST /github/webhook HTTP/1.1\r\n"
                f"Host: {host}\r\n"
                "Content-Type: application/json\r\n"
                "X-GitHub-Event: issues\r\n"
                f"X-GitHub-Delivery: {uuid.uuid4()}\r\n"
                f"X-Hub-Signature-256: sha256={'0' * 64}\r\n"
                f"Content-Length: {len(BODY)}\r\n\r\n"
            )
            sock.sendall(head.encode() + BODY[:100])
            time.sleep(0.2)  # the handler is reading the body now
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not [
            r for r in seen.records if "went away" in r.getMessage()
        ]:
            time.sleep(0.02)
        time.sleep(0.2)  # whatever else would be logged about it
        (line,) = [r.getMessage() for r in seen.records if "went away" in r.getMessage()]
        assert line == (
            "POST /github/webhook: the client went away after 100 byte(s) of its body; "
            "nothing was stored"
        )
        no_tracebacks(seen.records)
        assert delivery_ids(live) == set()
        assert post(live.url, "issues", BODY).status_code == 200  # and it serves on


def test_healthz_is_ok_again_only_after_a_write_appends(tmp_path: Path) -> None:
    """A commit that appends nothing (a quiet tick) proves nothing about the disk."""
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        set_disk_pages(live, None)
        for i in range(200):
            if post(live.url, "issues", big_body(f"d-{i}"), delivery=f"d-{i}").status_code == 503:
                break
        assert httpx.get(f"{live.url}/healthz").status_code == 503
        live.hub.tick()  # commits, but appends no fact
        assert httpx.get(f"{live.url}/healthz").status_code == 503
        set_disk_pages(live, 1_000_000)
        assert post(live.url, "issues", body("again"), delivery="again").status_code == 200
        live.settle()  # what was acknowledged before is decided once the ledger appends
        assert httpx.get(f"{live.url}/healthz").status_code == 200
