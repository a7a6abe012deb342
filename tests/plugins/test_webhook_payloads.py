"""Every example payload GitHub publishes, signed and posted over real HTTP, lands in the
ledger as the expected events; bad signatures store nothing; redeliveries and bursts of
concurrent deliveries are recorded exactly once.

The expected (type, subject) table is the one the translator's own tests use
(``tests/plugins/test_github_source.py``): the endpoint must yield exactly what the pure
translator yields, and the table is written once.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest

from ghapp.github.sansio import sign
from kernel.records import EventRow
from tests import paths
from tests.plugins.test_github_source import EXPECTED, MANIFEST
from tests.servers import Live, live_server

FIXTURES = paths.FIXTURES / "github"
SECRET = "payload-test-secret"
ENV = {"AUTOLOOP_GITHUB_WEBHOOK_SECRET": SECRET}
RULES: dict[str, Any] = {
    "agents": {"demo": {"use": "demo"}},
    "rules": [{"name": "triage", "on": {"source": "github", "type": "issues.*"}, "agent": "demo"}],
}
VECTOR = json.loads((FIXTURES / "signature_test_vector.json").read_text())


def headers(event: str, delivery: str, body: bytes, *, secret: str = SECRET) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "x-github-event": event,
        "x-github-delivery": delivery,
        "x-hub-signature-256": sign(secret.encode(), body),
    }


def stored(live: Live) -> list[EventRow]:
    live.settle()  # acknowledged deliveries are decided right after their ack
    with live.ctx.store.read() as tx:
        return [e for e in tx.query("event") if isinstance(e, EventRow)]


def by_delivery(rows: list[EventRow]) -> dict[str, list[tuple[str, str]]]:
    """Events grouped by the delivery they came from (``ID`` or ``ID:prN`` for fan-out)."""
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: r.seq):
        out[row.event.id.split(":", 1)[0]].append((row.event.type, row.event.subject))
    return dict(out)


def test_every_example_payload_becomes_its_expected_events_through_the_endpoint(
    tmp_path: Path,
) -> None:
    sent: dict[str, str] = {}  # delivery id -> payload file
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        with httpx.Client(base_url=live.url, timeout=10) as client:
            for n, entry in enumerate(MANIFEST["files"]):
                name = entry["file"].removeprefix("webhooks/")
                body = (FIXTURES / entry["file"]).read_bytes()  # the file's exact bytes
                delivery = f"delivery-{n:03d}"
                resp = client.post(
                    "/github/webhook", content=body, headers=headers(entry["event"], delivery, body)
                )
                assert resp.status_code == 200, (name, resp.text)
                # acknowledged once durable; its events are checked in the ledger below
                assert resp.json() == {
                    "delivery": delivery,
                    "duplicate": False,
                    "queued": True,
                    "events": None,
                }
                sent[delivery] = name
        got = by_delivery(stored(live))
    assert len(sent) == len(EXPECTED) == len(MANIFEST["files"])
    assert {sent[d]: events for d, events in got.items()} == EXPECTED


def test_githubs_documented_signature_vector_passes_the_signature_check(tmp_path: Path) -> None:
    body = VECTOR["payload"].encode()
    env = {"AUTOLOOP_GITHUB_WEBHOOK_SECRET": VECTOR["secret"]}
    with live_server(tmp_path / "h", RULES, env=env, start_worker=False) as live:
        hdrs = {
            "x-github-event": "ping",
            "x-github-delivery": "vector-1",
            "x-hub-signature-256": VECTOR["expected_x_hub_signature_256"],
        }
        resp = httpx.post(f"{live.url}/github/webhook", content=body, headers=hdrs)
        # The signature is accepted; "Hello, World!" is then refused as not JSON.
        assert resp.status_code == 400
        assert "not JSON" in resp.json()["error"]
        one_bit_off = {**hdrs, "x-hub-signature-256": hdrs["x-hub-signature-256"][:-1] + "f"}
        assert (
            httpx.post(f"{live.url}/github/webhook", content=body, headers=one_bit_off).status_code
            == 401
        )
        assert stored(live) == []


@pytest.mark.parametrize(
    "signature",
    [
        None,
        "",
        "sha256=",
        "sha1=01dc10d0c83e72ed246219cdd91669667fe2ca59",
        "sha256=" + "0" * 64,
        "wrong-secret",
        "other-body",
        "truncated",
    ],
)
def test_a_forged_or_missing_signature_is_401_and_stores_nothing(
    tmp_path: Path, signature: str | None
) -> None:
    body = (FIXTURES / "webhooks" / "issues" / "opened.json").read_bytes()
    hdrs = headers("issues", "forged-1", body)
    if signature is None:
        del hdrs["x-hub-signature-256"]
    elif signature == "wrong-secret":
        hdrs["x-hub-signature-256"] = sign(b"not-the-secret", body)
    elif signature == "other-body":
        hdrs["x-hub-signature-256"] = sign(SECRET.encode(), body + b" ")
    elif signature == "truncated":
        hdrs["x-hub-signature-256"] = sign(SECRET.encode(), body)[:-1]
    else:
        hdrs["x-hub-signature-256"] = signature
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        resp = httpx.post(f"{live.url}/github/webhook", content=body, headers=hdrs)
        assert resp.status_code == 401
        assert "X-Hub-Signature-256" in resp.json()["error"]
        assert stored(live) == []
        # the same body, signed properly, is then accepted: the 401 was the signature
        good = httpx.post(
            f"{live.url}/github/webhook", content=body, headers=headers("issues", "forged-1", body)
        )
        assert good.status_code == 200
        assert len(stored(live)) == 1


async def post_all(
    url: str, deliveries: list[tuple[str, str, bytes]], *, connections: int
) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        return await asyncio.gather(
            *(
                client.post("/github/webhook", content=body, headers=headers(event, d, body))
                for event, d, body in deliveries
            )
        )


def test_the_same_delivery_posted_twice_is_one_event(tmp_path: Path) -> None:
    body = (FIXTURES / "webhooks" / "pull_request" / "labeled.json").read_bytes()
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        with httpx.Client(base_url=live.url, timeout=10) as client:
            first, second = (
                client.post(
                    "/github/webhook", content=body, headers=headers("pull_request", "same", body)
                )
                for _ in range(2)
            )
        assert (first.status_code, second.status_code) == (200, 200)
        assert (first.json()["duplicate"], second.json()["duplicate"]) == (False, True)
        assert [(r.event.id, r.event.type) for r in stored(live)] == [
            ("same", "pull_request.labeled")
        ]


def test_a_redelivery_racing_the_original_is_still_one_event(tmp_path: Path) -> None:
    body = (FIXTURES / "webhooks" / "issues" / "opened.json").read_bytes()
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        answers = asyncio.run(post_all(live.url, [("issues", "racy", body)] * 20, connections=20))
        assert [a.status_code for a in answers] == [200] * 20
        assert sorted(a.json()["duplicate"] for a in answers) == [False] + [True] * 19
        assert len(stored(live)) == 1


def test_two_hundred_concurrent_deliveries_are_two_hundred_events(tmp_path: Path) -> None:
    entries = MANIFEST["files"]
    deliveries = []
    for n in range(200):
        entry = entries[n % len(entries)]
        if len(EXPECTED[entry["file"].removeprefix("webhooks/")]) != 1:
            entry = entries[0]
        # each body its own, as GitHub's are: the same body under a new delivery id is
        # a replay, recorded once (a key of GitHub's example payload, made unique)
        payload = json.loads((FIXTURES / entry["file"]).read_bytes())
        payload["sender"] = {**payload.get("sender", {}), "node_id": f"burst-{n:03d}"}
        deliveries.append((entry["event"], f"burst-{n:03d}", json.dumps(payload).encode()))
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        answers = asyncio.run(post_all(live.url, deliveries, connections=200))
        codes = [a.status_code for a in answers]
        assert codes == [200] * 200, sorted(set(codes))
        rows = stored(live)
        assert sorted(r.event.id for r in rows) == [d for _, d, _ in deliveries]
        inbox = live.running.inbox
        assert inbox is not None
        # group commit did group: fewer transactions than deliveries
        assert inbox.stats.acked == 200
        assert inbox.stats.groups < 200
