"""Hostile and unusual input at the HTTP edge, over real HTTP on loopback.

Webhooks are built from GitHub's own example payloads (``tests/fixtures/github``) and
signed as GitHub signs them; the generic source is signed as its docs say. Every bad
request gets a 4xx with one line saying what is wrong, and nothing is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from pathlib import Path
from typing import Any

import httpx

from kernel.records import EventRow
from tests import paths
from tests.servers import Live, live_server

FIXTURES = paths.FIXTURES / "github" / "webhooks"
SOURCE_SECRET = "source-secret-for-tests"
RULES: dict[str, Any] = {
    "agents": {"demo": {"use": "demo"}},
    "sources": {"shop": {"adapter": "hmac"}},
    "rules": [{"name": "triage", "on": {"source": "github", "type": "issues.*"}, "agent": "demo"}],
}
ENV = {"AUTOLOOP_SOURCE_SHOP_SECRET": SOURCE_SECRET}


def events_in(live: Live) -> list[EventRow]:
    with live.ctx.store.read() as tx:
        return [e for e in tx.query("event") if isinstance(e, EventRow)]


def post_source(
    live: Live, body: bytes, *, signature: bytes | None = None, source: str = "shop"
) -> httpx.Response:
    mac = hmac.new(SOURCE_SECRET.encode(), body, hashlib.sha256).hexdigest()
    sig = signature if signature is not None else f"sha256={mac}".encode()
    return httpx.post(
        f"{live.url}/v1/in/{source}",
        content=body,
        headers={b"content-type": b"application/json", b"x-signature-256": sig},
        timeout=30,
    )


def source_event(**extra: Any) -> bytes:
    return json.dumps({"id": str(uuid.uuid4()), "type": "order.paid", **extra}).encode()


# ---------------------------------------------------------------- generic source


def test_generic_source_takes_a_signed_event(tmp_path: Path) -> None:
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        resp = post_source(live, source_event(subject="order-7", details={"total": 12}))
        assert resp.status_code == 200, resp.text
        (row,) = events_in(live)
        assert (row.event.source, row.event.type, row.event.subject) == (
            "shop",
            "order.paid",
            "order-7",
        )
        assert dict(row.event.details) == {"total": 12}


def test_non_ascii_bytes_in_the_source_signature_are_401_not_500(tmp_path: Path) -> None:
    body = source_event()
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        for sig in (b"sha256=\xff\xfe" + b"0" * 62, "sha256=é".encode(), b"\x80"):
            resp = post_source(live, body, signature=sig)
            assert resp.status_code == 401, (sig, resp.status_code, resp.text)
            assert "x-signature-256" in resp.json()["error"]
        assert events_in(live) == []
