"""The webhook server over real HTTP on loopback, with GitHub's own example payloads."""

from __future__ import annotations

import json
import socket
import uuid
from pathlib import Path

import httpx
import pytest

from ghapp.github.sansio import sign
from kernel.records import EventRow
from tests import paths
from tests.ghapp.web.logged import logs
from tests.servers import live_server, stuck_ledger

FIXTURES = paths.FIXTURES / "github" / "webhooks"
SECRET = "webhook-secret-for-tests"
RULES = {
    "agents": {"demo": {"use": "demo"}},
    "rules": [{"name": "triage", "on": {"source": "github", "type": "issues.*"}, "agent": "demo"}],
}
ENV = {"AUTOLOOP_GITHUB_WEBHOOK_SECRET": SECRET}


def post(
    url: str, event: str, body: bytes, *, secret: str = SECRET, delivery: str = ""
) -> httpx.Response:
    headers = {
        "content-type": "application/json",
        "x-github-event": event,
        "x-github-delivery": delivery or str(uuid.uuid4()),
        "x-hub-signature-256": sign(secret.encode(), body),
    }
    return httpx.post(f"{url}/github/webhook", content=body, headers=headers, timeout=10)


def events_in(live: object) -> list[EventRow]:
    live.settle()  # type: ignore[attr-defined]  # acknowledged deliveries are decided right after
    with live.ctx.store.read() as tx:  # type: ignore[attr-defined]
        return [e for e in tx.query("event") if isinstance(e, EventRow)]


def test_signed_delivery_is_stored_before_the_answer(tmp_path: Path) -> None:
    body = json.dumps(json.loads((FIXTURES / "issues" / "opened.json").read_text())).encode()
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        inbox = live.running.inbox
        assert inbox is not None
        inbox.stats.decided = -(10**9)  # (a marker: nothing decided before the answer below)
        resp = post(live.url, "issues", body, delivery="d-1")
        assert resp.status_code == 200
        assert resp.json() == {
            "delivery": "d-1",
            "duplicate": False,
            "queued": True,
            "events": None,
        }
        # durable at the answer: in the inbox, or already decided into the ledger
        with live.ctx.store.read() as tx:
            in_ledger = tx.has_key("event:github:d-1")
        assert in_ledger or [d for d, _ in inbox.rows()] == ["d-1"]
        (row,) = events_in(live)  # and decided right after
        assert inbox.stats.decided == -(10**9) + 1
        assert list(inbox.rows()) == []  # the raw body is gone
        assert (row.event.type, row.event.id) == ("issues.opened", "d-1")
        assert row.dispatched


def test_the_answer_has_the_same_keys_on_every_ledger(
    tmp_path: Path, ledger_env: dict[str, str]
) -> None:
    """The answer was {delivery, duplicate, queued} on SQLite (its inbox decides after the
    answer) and {delivery, events, duplicate} on PostgreSQL (decided before it)."""
    body = (FIXTURES / "issues" / "opened.json").read_bytes()
    env = {**ENV, **ledger_env}
    with live_server(tmp_path / "h", RULES, env=env, start_worker=False) as live:
        first = post(live.url, "issues", body, delivery="d-keys").json()
        again = post(live.url, "issues", body, delivery="d-keys").json()
        keys = {"delivery", "duplicate", "queued", "events"}
        assert set(first) == keys and set(again) == keys
        if live.running.inbox is not None:  # decided right after the answer
            assert (first["queued"], first["events"]) == (True, None)
        else:  # decided before it: how many events it made
            assert (first["queued"], first["events"]) == (False, 1)
        assert (first["duplicate"], again["duplicate"], again["queued"]) == (False, True, False)
        assert len(events_in(live)) == 1


def test_forged_or_missing_signature_is_401_and_stores_nothing(tmp_path: Path) -> None:
    body = b'{"action": "opened"}'
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        assert post(live.url, "issues", body, secret="wrong").status_code == 401
        resp = httpx.post(
            f"{live.url}/github/webhook",
            content=body,
            headers={"x-github-event": "issues", "x-github-delivery": "x"},
        )
        assert resp.status_code == 401
        assert "X-Hub-Signature-256" in resp.json()["error"]
        assert events_in(live) == []


def test_same_delivery_twice_is_one_event(tmp_path: Path) -> None:
    body = (FIXTURES / "issues" / "opened.json").read_bytes()
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        first = post(live.url, "issues", body, delivery="same")
        second = post(live.url, "issues", body, delivery="same")
        assert (first.json()["duplicate"], second.json()["duplicate"]) == (False, True)
        assert len(events_in(live)) == 1


def test_malformed_json_and_oversized_bodies_are_refused(tmp_path: Path) -> None:
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        bad = post(live.url, "issues", b"{not json")
        assert bad.status_code == 400 and "JSON" in bad.json()["error"]
        host, port = live.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(
                b"POST /github/webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: issues\r\n"
                + f"X-Hub-Signature-256: sha256={'0' * 64}\r\n".encode()
                + f"Content-Length: {26 * 1024 * 1024}\r\n\r\n".encode()
            )
            status_line = conn.recv(200).split(b"\r\n", 1)[0]
        assert b" 413 " in status_line
        assert events_in(live) == []


def test_healthz_and_metrics_answer(tmp_path: Path) -> None:
    body = (FIXTURES / "issues" / "opened.json").read_bytes()
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        before = httpx.get(f"{live.url}/metrics").text  # listed before any delivery
        assert "# TYPE autoloop_inbox_lag_seconds gauge" in before
        assert "autoloop_inbox_lag_seconds{" not in before
        post(live.url, "issues", body)
        live.settle()
        health = httpx.get(f"{live.url}/healthz").json()
        assert health["ok"] is True and health["facts"] >= 1 and health["waiting"] == 0
        text = httpx.get(f"{live.url}/metrics").text
        assert "autoloop_webhook_deliveries_total 1" in text
        assert "autoloop_ledger_up 1" in text
        # group commit: one request went through one inbox commit, then was decided
        assert "autoloop_inbox_appended_total 1" in text
        assert "autoloop_inbox_commits_total 1" in text
        assert "autoloop_inbox_decided_total 1" in text
        assert "autoloop_inbox_waiting 0" in text
        assert 'autoloop_inbox_lag_seconds{quantile="0.99"}' in text


def test_healthz_says_when_the_ledger_does_not_answer_and_the_server_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger that does not answer (a PostgreSQL query stuck on a silent network):
    /healthz read it on the event loop, held every request behind it, and answered
    nothing at all."""
    import time

    from ghapp.web import app as web_app

    monkeypatch.setattr(web_app, "HEALTH_READ_S", 0.5)
    monkeypatch.setattr(web_app, "METRICS_READ_S", 0.5)
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        with stuck_ledger(live.hub.store) as entered:
            started = time.monotonic()
            health = httpx.get(f"{live.url}/healthz", timeout=5)
            assert time.monotonic() - started < 3
            assert health.status_code == 503
            assert health.json() == {"ok": False, "ledger": "did not answer within 0.5 s"}
            other = httpx.get(f"{live.url}/nowhere", timeout=2)  # the loop is free
            assert other.status_code == 404
            # Probes that come meanwhile are told at once, and wait on no more threads:
            # each one left a thread of asyncio's shared pool waiting, and once the pool
            # was full the webhooks' signature checks, which use it, waited too.
            for _ in range(8):
                again = httpx.get(f"{live.url}/healthz", timeout=2)
                assert again.status_code == 503
                assert again.json() == {
                    "ok": False,
                    "ledger": "has not answered an earlier read yet",
                }
            scraped = [httpx.get(f"{live.url}/metrics", timeout=8) for _ in range(3)]
            assert [r.status_code for r in scraped] == [503, 503, 503]
            assert scraped[0].text == "the ledger did not answer within 0.5 s\n"
            assert scraped[1].text == "the ledger has not answered an earlier read yet\n"
            assert len(entered) == 2, entered  # one for /healthz, one for /metrics
        # the read that waited returns (a moment after the release), and probes read again
        deadline = time.monotonic() + 5
        while (health := httpx.get(f"{live.url}/healthz").json())["ok"] is not True:
            assert time.monotonic() < deadline, health
            time.sleep(0.05)
        assert httpx.get(f"{live.url}/metrics").status_code == 200


def test_the_webhook_path_answers_other_methods_and_paths_as_starlette_does(
    tmp_path: Path,
) -> None:
    """POST /github/webhook goes straight to its endpoint; anything else on or near the
    path still goes through the router: 405 for another method, as before."""
    body = json.dumps(json.loads((FIXTURES / "issues" / "opened.json").read_text())).encode()
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        got = httpx.get(f"{live.url}/github/webhook", timeout=10)
        assert got.status_code == 405
        assert got.headers["allow"] == "POST"
        assert (
            httpx.post(f"{live.url}/github/webhooks", content=b"{}", timeout=10).status_code == 404
        )
        posted = post(live.url, "issues", body, delivery="d-fast")
        assert posted.status_code == 200
        assert posted.headers["content-type"] == "application/json"
        assert posted.json() == {
            "delivery": "d-fast",
            "duplicate": False,
            "queued": True,
            "events": None,
        }
        assert [e.event.id for e in events_in(live)] == ["d-fast"]


def test_a_trailing_slash_is_not_found_never_a_redirect_to_the_hosts_header(
    tmp_path: Path,
) -> None:
    """Starlette redirected "/cards/x/" to "/cards/x" on the host the request named:
    anyone could make the server answer with a redirect to their own site."""
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        for path in ("/cards/x/", "/github/webhook/", "/healthz/"):
            got = httpx.post(
                f"{live.url}{path}", headers={"host": "evil.example"}, follow_redirects=False
            )
            assert got.status_code in (404, 405), (path, got.status_code)
            assert "location" not in got.headers


def test_healthz_tells_a_caller_the_ledger_is_unreadable_not_why(tmp_path: Path) -> None:
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live, logs() as seen:
        live.hub.store.close()  # every read fails from here
        got = httpx.get(f"{live.url}/healthz")
        assert got.status_code == 503
        assert got.json() == {"ok": False, "ledger": "cannot be read"}
        said = [r.getMessage() for r in seen.records if r.getMessage().startswith("healthz")]
        assert len(said) == 1 and said[0].startswith("healthz: the ledger cannot be read: ")


def test_healthz_tells_a_worker_that_runs_no_turns(tmp_path: Path) -> None:
    """A server whose worker had died answered {"ok": true} for ever."""
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live, logs() as seen:
        assert httpx.get(f"{live.url}/healthz").json()["ok"] is True
        live.running.server.worker_problem = lambda: "the worker stopped: OSError: lost"
        got = httpx.get(f"{live.url}/healthz")
        assert got.status_code == 503
        assert got.json() == {
            "ok": False,
            "worker": "runs no turns: see the log",
            "facts": 0,
            "waiting": 0,
        }
        said = [r.getMessage() for r in seen.records if r.getMessage().startswith("healthz")]
        assert said == ["healthz: the worker stopped: OSError: lost"]


def test_a_header_anyone_may_send_is_cut_in_the_log(tmp_path: Path) -> None:
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live, logs() as seen:
        long = "e" * 60_000
        httpx.post(
            f"{live.url}/github/webhook",
            content=b"{}",
            headers={"x-github-event": long, "x-github-delivery": "d-long"},
        )
        (line,) = [r.getMessage() for r in seen.records if "d-long" in r.getMessage()]
        assert f"webhook {'e' * 100}...(60000) delivery d-long: 401" in line
        assert len(line) < 1000
