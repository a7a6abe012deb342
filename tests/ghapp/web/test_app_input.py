"""Hostile and unusual input at the HTTP edge, over real HTTP on loopback.

Webhooks are built from GitHub's own example payloads (``tests/fixtures/github``) and
signed as GitHub signs them; the generic source is signed as its docs say. Every bad
request gets a 4xx with one line saying what is wrong, and nothing is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from ghapp.github.sansio import sign
from kernel.records import EventRow
from tests import paths
from tests.fuzz import web as fuzz_web
from tests.ghapp.web.logged import logs
from tests.servers import Live, live_server

FIXTURES = paths.FIXTURES / "github" / "webhooks"
SOURCE_SECRET = "source-secret-for-tests"
RULES: dict[str, Any] = {
    "agents": {"demo": {"use": "demo"}},
    "sources": {"shop": {"adapter": "hmac"}},
    "rules": [{"name": "triage", "on": {"source": "github", "type": "issues.*"}, "agent": "demo"}],
}
ENV = {"AUTOLOOP_SOURCE_SHOP_SECRET": SOURCE_SECRET}
FORM = "application/x-www-form-urlencoded"


def events_in(live: Live) -> list[EventRow]:
    live.settle()  # acknowledged deliveries are decided right after their ack
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
        # a body over 64 KiB is prepared beside the ingest writer: the same result
        big = {"lines": ["x" * 100] * 2_000}
        assert post_source(live, source_event(id="big", details=big)).status_code == 200
        (row,) = [e for e in events_in(live) if e.event.id == "big"]
        assert dict(row.event.details) == big


def test_a_newline_in_a_source_name_or_an_event_id_stays_on_its_log_line(
    tmp_path: Path,
) -> None:
    """A percent-encoded newline in the path (no secret needed) or in a signed event's id
    began a line of the sender's own in the server's log (a forged ERROR line)."""
    forged = "x\n2026-12-08T00:00:00.000+00:00 ERROR autoloop.inbox: FORGED\u2028LINE"
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live, logs() as seen:
        unknown = post_source(live, b"{}", source=forged.replace("\n", "%0A"))
        assert unknown.status_code == 404
        bad_id = post_source(live, json.dumps({"id": "a\nb\tc", "type": "order.paid"}).encode())
        assert bad_id.status_code in (200, 400)
        said = [r.getMessage() for r in seen.records if r.name == "autoloop.webhook"]
        assert len(said) == 2, said
        for line in said:
            assert "\n" not in line and "\u2028" not in line and "\t" not in line, line
        assert said[0].startswith("source x\\n2026-12-08T00:00:00.000+00:00 ERROR"), said[0]
        assert "FORGED\\u2028LINE" in said[0]
        assert said[1].startswith("source shop event a\\nb\\tc: "), said[1]


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("details", [1], '"details" must be a JSON object (or left out)'),
        ("details", "text", '"details" must be a JSON object (or left out)'),
        ("subject", 5, '"subject" must be a string (or left out)'),
        ("summary", {"a": 1}, '"summary" must be a string (or left out)'),
        ("link", ["x"], '"link" must be a string (or left out)'),
    ],
)
def test_a_source_field_of_the_wrong_kind_is_refused_not_changed(
    tmp_path: Path, field: str, value: object, said: str
) -> None:
    """``"details": [1]`` was stored as ``{}`` and ``"subject": 5`` as the source's
    name: the event the sender meant was not the one recorded, and it was answered 200."""
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        body = json.dumps({"id": "o-1", "type": "order.paid", field: value}).encode()
        resp = post_source(live, body)
        assert resp.status_code == 400 and resp.json() == {"error": said}
        fine = json.dumps({"id": "o-1", "type": "order.paid", field: None}).encode()
        assert post_source(live, fine).status_code == 200  # null: as if left out


def test_a_c1_control_in_a_webhook_header_is_escaped_on_its_log_line(tmp_path: Path) -> None:
    """A header byte of 0x85 (NEL, a line break to some readers) or 0x9b (CSI, a
    terminal's command) reached the webhook's log line as it came."""
    body = json.dumps({"action": "opened"}).encode()
    with (
        live_server(tmp_path / "h", RULES, env=GITHUB_ENV, start_worker=False) as live,
        logs() as seen,
    ):
        headers = {
            "content-type": "application/json",
            "x-github-event": b"issues\x9b2J",
            "x-github-delivery": b"d-1\x85forged",
            "x-hub-signature-256": sign(WEBHOOK_SECRET.encode(), body),
        }
        resp = httpx.post(f"{live.url}/github/webhook", content=body, headers=headers)
        (line,) = [r.getMessage() for r in seen.records if r.name == "autoloop.webhook"]
        said = f"webhook issues\\x9b2J delivery d-1\\x85forged: {resp.status_code} in "
        assert line.startswith(said), line


def test_a_source_added_while_serving_is_logged_to_restart_and_answered_as_any_unknown(
    tmp_path: Path,
) -> None:
    """The answer said "no source 'shop' in rules.json" for a source that was there; then
    it said which names rules.json lists, to whoever asked. The operator reads it in the
    log; every unknown name gets the same answer."""
    home = tmp_path / "h"
    with live_server(home, RULES, env=ENV, start_worker=False) as live, logs() as seen:
        edited = {**RULES, "sources": {**RULES["sources"], "till": {"adapter": "hmac"}}}
        path = home / "rules.json"
        before = path.stat().st_mtime_ns
        path.write_text(json.dumps(edited))
        if path.stat().st_mtime_ns == before:  # a coarse clock: the edit must be seen
            os.utime(path, ns=(before + 1_000_000, before + 1_000_000))
        answers = [post_source(live, source_event(), source=name) for name in ("till", "nope")]
        assert [r.status_code for r in answers] == [404, 404]
        assert (
            answers[0].json()
            == answers[1].json()
            == {"error": "no signed source of that name here"}
        )
        said = [r.getMessage() for r in seen.records if "added to rules.json" in r.getMessage()]
        assert said == [
            "source 'till' was added to rules.json after autoloop serve started: restart it "
            "to take the source (and its secret)"
        ]


def test_non_ascii_bytes_in_the_source_signature_are_401_not_500(tmp_path: Path) -> None:
    body = source_event()
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        for sig in (b"sha256=\xff\xfe" + b"0" * 62, "sha256=é".encode(), b"\x80"):
            resp = post_source(live, body, signature=sig)
            assert resp.status_code == 401, (sig, resp.status_code, resp.text)
            assert "x-signature-256" in resp.json()["error"]
        assert events_in(live) == []


def test_a_source_signature_in_upper_case_hex_is_taken(tmp_path: Path) -> None:
    """Hex is hex in either case (the GitHub webhook's was taken so): a sender writing
    its signature in upper case was refused."""
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        for n, prefix in enumerate((b"sha256=", b"SHA256=", b"")):
            body = source_event()
            mac = hmac.new(SOURCE_SECRET.encode(), body, hashlib.sha256).hexdigest().upper()
            resp = post_source(live, body, signature=prefix + mac.encode())
            assert resp.status_code == 200, (n, resp.text)
        assert len(events_in(live)) == 3


def test_deeply_nested_source_details_are_400_not_500(tmp_path: Path) -> None:
    deep: Any = 1
    for _ in range(900):  # within orjson's own limit: the body parses, then is refused
        deep = {"a": deep}
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        resp = post_source(live, source_event(details=deep))
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"] == '"details": nested deeper than 64 levels'
        resp = post_source(live, b'{"id": "x", "type": "t", "details": ' + b"[" * 5000)
        assert resp.status_code == 400, resp.text
        shallow: Any = 1
        for _ in range(63):
            shallow = {"a": shallow}
        assert post_source(live, source_event(details=shallow)).status_code == 200
        assert len(events_in(live)) == 1


def test_a_source_body_over_a_mebibyte_is_413(tmp_path: Path) -> None:
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        resp = post_source(live, source_event(details={"blob": "x" * (1 << 20)}))
        assert resp.status_code == 413
        assert "link" in resp.json()["error"]
        assert events_in(live) == []


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"id": "i" * 201}, '"id": has 201 characters; at most 200'),
        ({"subject": "s" * 301}, '"subject": has 301 characters; at most 300'),
        ({"type": "t" * 101}, '"type": has 101 characters; at most 100'),
        ({"subject": "line one\nline two"}, '"subject": holds a control character'),
    ],
)
def test_a_source_events_names_are_bounded_and_on_one_line(
    tmp_path: Path, fields: dict[str, str], error: str
) -> None:
    """A 100,000-character id was taken (status grew to 2.7 MB), and a newline in a
    subject split every line that showed it."""
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        resp = post_source(live, source_event(**fields))
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"].startswith(error)
        assert events_in(live) == []


@pytest.mark.parametrize(
    "fields",
    [{"id": "a\u0000b"}, {"type": "order.\u0000"}, {"subject": "order-\u00007"}],
)
def test_a_nul_character_in_a_source_event_key_is_400_on_each_ledger(
    tmp_path: Path, ledger_env: dict[str, str], fields: dict[str, str]
) -> None:
    """PostgreSQL's text holds no NUL: it was a 503, and /healthz said the ledger was not
    writable, for one client's body."""
    with live_server(tmp_path / "h", RULES, env={**ENV, **ledger_env}, start_worker=False) as live:
        resp = post_source(live, source_event(**fields))
        assert resp.status_code == 400, resp.text
        (name,) = fields
        assert resp.json()["error"] == (
            f'"{name}": holds a control character (a newline, a tab...); use plain text'
        )
        assert events_in(live) == []
        # NUL in the text that is kept as data is stored as it came
        ok = post_source(live, source_event(summary="a\u0000b", details={"k\u0000": "v\u0000"}))
        assert ok.status_code == 200, ok.text
        (row,) = events_in(live)
        assert (row.event.summary, dict(row.event.details)) == ("a\x00b", {"k\x00": "v\x00"})
        assert httpx.get(f"{live.url}/healthz", timeout=10).json()["ok"] is True


# ---------------------------------------------------------------- GitHub webhooks


WEBHOOK_SECRET = "webhook-secret-for-tests"
GITHUB_ENV = {**ENV, "AUTOLOOP_GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET}


def post_webhook(
    live: Live,
    event: str,
    body: bytes,
    *,
    delivery: str = "",
    content_type: str = "application/json",
    timeout: float = 30,
) -> httpx.Response:
    headers = {
        "content-type": content_type,
        "x-github-event": event,
        "x-github-delivery": delivery or str(uuid.uuid4()),
        "x-hub-signature-256": sign(WEBHOOK_SECRET.encode(), body),
    }
    return httpx.post(f"{live.url}/github/webhook", content=body, headers=headers, timeout=timeout)


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


@pytest.mark.parametrize(
    ("event", "name"),
    [("issues", "issues/opened.json"), ("pull_request", "pull_request/labeled.json")],
)
def test_a_form_encoded_webhook_is_recorded_like_its_json_twin(
    tmp_path: Path, event: str, name: str
) -> None:
    payload = fixture(name)
    form = urlencode({"payload": payload.decode()}).encode()
    with live_server(tmp_path / "h", RULES, env=GITHUB_ENV, start_worker=False) as live:
        as_form = post_webhook(live, event, form, delivery="form", content_type=FORM)
        as_json = post_webhook(live, event, payload, delivery="json")
        assert (as_form.status_code, as_json.status_code) == (200, 200), as_form.text
        rows = {row.event.id: row.event for row in events_in(live)}
    assert set(rows) == {"form", "json"}
    assert replace(rows["form"], id="json") == rows["json"]


@pytest.mark.parametrize(
    "body",
    [
        b"payload=%7Bnot-json",
        b"other=1",
        b"payload=%7B%7D&payload=%7B%7D",
        b"payload=\xff\xfe",
        b"payload=%ff%fe",
        b"payload=%5B1%5D",
    ],
)
def test_a_bad_form_encoded_webhook_is_400_with_one_line(tmp_path: Path, body: bytes) -> None:
    with live_server(tmp_path / "h", RULES, env=GITHUB_ENV, start_worker=False) as live:
        resp = post_webhook(live, "issues", body, content_type=f"{FORM}; charset=utf-8")
        assert resp.status_code == 400, resp.text
        assert "\n" not in resp.json()["error"]
        assert events_in(live) == []


def test_a_huge_field_is_stored_cut_and_does_not_hold_other_acks(tmp_path: Path) -> None:
    """A 4 MB repository.full_name of words the redactor must look at: before the caps,
    and with its preparation in the ingest writer, it was stored whole (twice: subject
    and details) and a small delivery sent meanwhile waited 9.3 s and 20.9 s for its ack
    in two runs on the development machine (GitHub gives up after 10 s). Now it is cut
    to 2,048 characters and prepared aside: the small ones took 0.06-0.5 s there."""
    small = fixture("issues/opened.json")
    big = json.loads(small)
    big["repository"]["full_name"] = "o/" + ("token " * 700_000)[:4_000_000]
    body = json.dumps(big).encode()
    with live_server(tmp_path / "h", RULES, env=GITHUB_ENV, start_worker=False) as live:
        done: dict[str, Any] = {}

        def send_big() -> None:
            started = time.perf_counter()
            resp = post_webhook(live, "issues", body, delivery="big", timeout=60)
            done["big"] = (resp.status_code, time.perf_counter() - started)

        sender = threading.Thread(target=send_big)
        sender.start()
        waits: list[float] = []
        while sender.is_alive() or not waits:
            started = time.perf_counter()
            assert post_webhook(live, "issues", small).status_code == 200
            waits.append(time.perf_counter() - started)
        sender.join()
        status, big_s = done["big"]
        print(f"big delivery acked in {big_s:.2f} s; small ones meanwhile: {waits}")
        assert status == 200 and big_s < 10
        assert max(waits) < 2.0, waits
        live.settle()  # decided right after its ack
        with live.ctx.store.read() as tx:
            tx.cur.execute("SELECT max(length(data)) FROM facts")
            (longest,) = tx.cur.fetchone()
        assert longest < 20_000  # the fact was 8 MB
        (row,) = [e for e in events_in(live) if e.event.id == "big"]
        assert len(row.event.subject) == 2_048 + len("#1")


def test_a_nul_character_in_a_webhook_subject_is_stored_as_u_fffd_on_each_ledger(
    tmp_path: Path, ledger_env: dict[str, str]
) -> None:
    """A subject is part of a matter's id, a key of the ledger: on PostgreSQL a NUL in
    ``repository.full_name`` was a 503 for every redelivery, and /healthz went unhealthy."""
    payload = json.loads(fixture("issues/opened.json"))
    payload["repository"]["full_name"] = "octo\u0000cat/hello"
    body = json.dumps(payload).encode()
    with live_server(
        tmp_path / "h", RULES, env={**GITHUB_ENV, **ledger_env}, start_worker=False
    ) as live:
        resp = post_webhook(live, "issues", body, delivery="nul")
        assert resp.status_code == 200, resp.text
        (row,) = events_in(live)
        assert row.event.subject.startswith("octo\ufffdcat/hello#")
        assert httpx.get(f"{live.url}/healthz", timeout=10).json()["ok"] is True


def test_a_lone_surrogate_escaped_in_a_webhook_is_stored_as_u_fffd_on_each_ledger(
    tmp_path: Path, ledger_env: dict[str, str]
) -> None:
    """JSON may escape a lone surrogate (``"\\ud800"``); no ledger stores one. The
    delivery was acknowledged, then its record was tried again and again and held back
    every delivery after it."""
    payload = json.loads(fixture("issues/opened.json"))
    payload["issue"]["title"] = "TITLE"
    body = json.dumps(payload).replace("TITLE", "bad \\ud800 title \\ud83d\\ude00").encode()
    with live_server(
        tmp_path / "h", RULES, env={**GITHUB_ENV, **ledger_env}, start_worker=False
    ) as live:
        assert post_webhook(live, "issues", body, delivery="lone").status_code == 200
        after = fixture("issues/labeled.json")
        assert post_webhook(live, "issues", after, delivery="after").status_code == 200
        rows = {row.event.id: row.event for row in events_in(live)}
        assert set(rows) == {"lone", "after"}
        assert rows["lone"].summary.endswith("bad \ufffd title \U0001f600")  # a pair is kept


# ---------------------------------------------------------------- replays


def answers(resps: list[httpx.Response]) -> list[tuple[int, bool]]:
    return [(r.status_code, r.json()["duplicate"]) for r in resps]


def test_a_signed_body_replayed_under_new_delivery_ids_is_recorded_once(
    tmp_path: Path, ledger_env: dict[str, str]
) -> None:
    """On each ledger: the content keys live in ``fact_keys`` (append-only)."""
    body = fixture("issues/opened.json")
    home = tmp_path / "h"
    env = {**GITHUB_ENV, **ledger_env}
    with live_server(home, RULES, env=env, start_worker=False) as live:
        first = post_webhook(live, "issues", body, delivery="original")
        replays = [post_webhook(live, "issues", body) for _ in range(50)]
        # GitHub's own redelivery: the same id and body
        again = post_webhook(live, "issues", body, delivery="original")
        assert answers([first]) == [(200, False)]
        assert answers([*replays, again]) == [(200, True)] * 51
        assert [row.event.id for row in events_in(live)] == ["original"]
    # the key is in the ledger: a restart remembers it
    with live_server(home, RULES, env=env, start_worker=False) as live:
        assert answers([post_webhook(live, "issues", body)]) == [(200, True)]
        # the same body under another event name is another delivery
        assert answers([post_webhook(live, "issue_comment", body)]) == [(200, False)]
        # and one changed byte makes another body
        edited = body.replace(b'"opened"', b'"reopened"', 1)
        assert answers([post_webhook(live, "issues", edited)]) == [(200, False)]
        assert len(events_in(live)) == 3


def test_a_replayed_delivery_of_several_events_is_a_duplicate_for_each(
    tmp_path: Path, ledger_env: dict[str, str]
) -> None:
    payload = json.loads(fixture("check_suite/completed.json"))
    second = dict(payload["check_suite"]["pull_requests"][0], number=7)
    payload["check_suite"]["pull_requests"].append(second)
    body = json.dumps(payload).encode()
    env = {**GITHUB_ENV, **ledger_env}
    with live_server(tmp_path / "h", RULES, env=env, start_worker=False) as live:
        first = post_webhook(live, "check_suite", body, delivery="d1")
        replay = post_webhook(live, "check_suite", body, delivery="d2")
        assert first.json()["duplicate"] is False
        assert (replay.status_code, replay.json()["duplicate"]) == (200, True)
        assert sorted(row.event.id for row in events_in(live)) == ["d1:pr2", "d1:pr7"]


def test_replays_in_one_burst_are_recorded_once(tmp_path: Path, ledger_env: dict[str, str]) -> None:
    body = fixture("pull_request/opened.json")
    env = {**GITHUB_ENV, **ledger_env}
    with live_server(tmp_path / "h", RULES, env=env, start_worker=False) as live:
        with ThreadPoolExecutor(max_workers=16) as pool:
            resps = list(pool.map(lambda _: post_webhook(live, "pull_request", body), range(32)))
        assert {r.status_code for r in resps} == {200}
        assert sorted(r.json()["duplicate"] for r in resps) == [False] + [True] * 31
        assert len(events_in(live)) == 1


@pytest.mark.parametrize("header", ["x-github-delivery", "x-github-event"])
def test_a_control_character_in_a_webhook_header_is_400_on_each_ledger(
    ledger_env: dict[str, str], header: str
) -> None:
    """uvicorn refuses such a header before the app; under another ASGI server a NUL in
    the delivery id (a key of the ledger) was a 503 on PostgreSQL: the app refuses it."""
    app = fuzz_web.App.start(db_url=ledger_env.get("AUTOLOOP_DB"))  # ASGI, in process
    try:
        body = fixture("issues/opened.json")
        good = {
            "content-type": "application/json",
            "x-github-event": "issues",
            "x-github-delivery": "d-1",
            "x-hub-signature-256": sign(fuzz_web.WEBHOOK_SECRET.encode(), body),
        }
        for bad in ["a\x00b", "\x00", "a\x1fb", "a\x7f"]:
            headers = {**good, header: bad}
            raw = [(k.encode(), v.encode()) for k, v in headers.items()]
            answer = app.call("POST", "/github/webhook", raw, [body])
            assert answer.status == 400, answer.body
            assert json.loads(answer.body)["error"] == (
                "control characters in X-GitHub-Event or X-GitHub-Delivery"
            )
        raw = [(k.encode(), v.encode()) for k, v in good.items()]
        assert app.call("POST", "/github/webhook", raw, [body]).status == 200
        inbox = app.running.inbox
        assert inbox is None or inbox.settle(10)
        with app.ctx.store.read() as tx:
            ids = [e.event.id for e in tx.query("event") if isinstance(e, EventRow)]
        assert ids == ["d-1"]
    finally:
        app.close()


def test_each_source_request_is_one_log_line_and_a_bad_signature_names_the_secret(
    tmp_path: Path,
) -> None:
    """A signed source logged nothing, taken or refused: an operator debugging a sender's
    signature had no line to look at."""
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live, logs() as seen:
        taken = post_source(live, json.dumps({"id": "o-1", "type": "order.paid"}).encode())
        assert taken.status_code == 200
        forged = post_source(live, source_event(), signature=b"sha256=" + b"0" * 64)
        again = post_source(live, source_event(), signature=b"sha256=" + b"1" * 64)
        assert [forged.status_code, again.status_code] == [401, 401]
        not_json = post_source(live, b"[1]")
        assert not_json.status_code == 400
        lines = [r for r in seen.records if r.name == "autoloop.webhook"]
        said = [r.getMessage() for r in lines]
        assert len(said) == 4, said
        assert said[0].startswith("source shop event o-1: 200 in ")
        assert lines[1].levelname == "WARNING" and said[1].startswith("source shop event ?: 401")
        assert (
            "its x-signature-256 is not the HMAC-SHA256 of the body under "
            "AUTOLOOP_SOURCE_SHOP_SECRET" in said[1]
        )
        assert lines[2].levelname == "INFO" and ": 401 in " in said[2]  # one warning a minute
        assert said[3].startswith("source shop event ?: 400 in ") and "JSON object" in said[3]
        assert SOURCE_SECRET not in "\n".join(said)
