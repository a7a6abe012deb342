"""Signed card links: the page a link opens, its answer over real HTTP, and the key behind it."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from ghapp.commands.home import Home, init_home, read_master_key
from ghapp.commands.serve import build
from ghapp.runtime.links import CardLinks, WeakKeyError, check_master_key
from ghapp.runtime.settings import Settings, SettingsError
from ghapp.web.cards import form_choice
from kernel.model import Event
from kernel.records import Card
from tests import paths
from tests.servers import Live, live_server, stuck_ledger

RULES = {
    "agents": {"demo": {"use": "demo"}},
    "rules": [{"name": "paint", "on": {"source": "local", "type": "hello.*"}, "agent": "demo"}],
}
ROOT = paths.ROOT


def open_question(live: object) -> Card:
    hub = live.hub  # type: ignore[attr-defined]
    hub.emit(Event(source="local", id="e1", type="hello.world", subject="wall"))
    hub.drain()
    with hub.store.read() as tx:
        (card,) = [c for c in tx.query("card") if isinstance(c, Card) and c.kind_ == "ask"]
    return card


def links_of(live: Live) -> CardLinks:
    links = live.running.server.links
    assert links is not None
    return links


def test_answering_from_the_card_page_is_taken_once(tmp_path: Path) -> None:
    with live_server(tmp_path / "h", RULES, start_worker=False) as live:
        card = open_question(live)
        url = links_of(live).url(card)
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200
        assert 'name="choice" value="2"' in page.text
        # posted back to the page's own address (a --base-url with a path keeps it)
        assert '<form method="post">' in page.text
        first = httpx.post(url, data={"choice": "2"}, timeout=10)
        assert first.status_code == 200, first.text
        with live.hub.store.read() as tx:
            answered = tx.get("card", card.id)
        assert isinstance(answered, Card)
        assert (answered.state, answered.choice) == ("decided", 2)
        again = httpx.post(url, data={"choice": "1"}, timeout=10)
        assert again.status_code == 409
        assert "already" in again.text


def test_card_page_refuses_bad_forms_and_tokens_with_one_line(tmp_path: Path) -> None:
    with live_server(tmp_path / "h", RULES, start_worker=False) as live:
        card = open_question(live)
        url = links_of(live).url(card)
        for body in (b"", b"choice=", b"choice=x", b"choice=%C2%B2", b"choice=1&choice=2"):
            resp = httpx.post(
                url,
                content=body,
                headers={"content-type": "application/x-www-form-urlencoded"},
                timeout=10,
            )
            assert resp.status_code == 400, body
        for token in ("é.1.x", "c1.99999999999.%E2%82%AC", "not-a-token"):
            resp = httpx.get(f"{live.url}/cards/{token}", timeout=10)
            assert resp.status_code == 404, token
        forged = CardLinks(os.urandom(32)).token(card)
        assert httpx.post(f"{live.url}/cards/{forged}", data={"choice": "1"}).status_code == 404
        with live.hub.store.read() as tx:
            still = tx.get("card", card.id)
        assert isinstance(still, Card) and still.state == "open"


def test_a_token_with_a_control_character_or_an_answer_out_of_range_is_a_4xx_on_each_ledger(
    tmp_path: Path, ledger_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A NUL in a link's card id reached PostgreSQL, which holds no NUL in text: a 500
    and a traceback, asking no valid link. A choice the card does not have was a 409, as
    if the card were taken."""
    with live_server(tmp_path / "h", RULES, env=ledger_env, start_worker=False) as live:
        card = open_question(live)
        for token in ("c1%00.x.a.y", "c1%0A.1.a.y", "c1%7F.1.a.y"):
            for method in ("GET", "POST"):
                resp = httpx.request(
                    method, f"{live.url}/cards/{token}", data={"choice": "1"}, timeout=10
                )
                assert resp.status_code == 404, (method, token, resp.text)
        url = links_of(live).url(card)
        for choice in ("0", "4", "999999"):
            resp = httpx.post(url, data={"choice": choice}, timeout=10)
            assert resp.status_code == 400, (choice, resp.text)
            assert "is not an option" in resp.text
        assert httpx.post(url, data={"choice": "1"}, timeout=10).status_code == 200
        assert not [r.getMessage() for r in caplog.records if r.exc_info or r.levelname == "ERROR"]


def test_a_link_posted_where_anyone_reads_it_shows_the_card_and_never_answers(
    tmp_path: Path,
) -> None:
    """A card comment on GitHub carried a link that answered: whoever could read the
    issue (no write access, or anyone, on a public repository) answered through it."""
    with live_server(tmp_path / "h", RULES, start_worker=False) as live:
        card = open_question(live)
        url = links_of(live).url(card, answer=False)
        shown = httpx.get(url, timeout=10)
        assert shown.status_code == 200
        assert "<form" not in shown.text
        assert f"<code>/answer {card.id} N</code>" in shown.text
        for option in card.options:
            assert f"<li>{option}</li>" in shown.text
        tried = httpx.post(url, data={"choice": "1"}, timeout=10)
        assert tried.status_code == 403 and "only shows the card" in tried.text
        # the scope is signed: turning the view into an answer breaks the link
        token = url.rsplit("/", 1)[1]
        ident, expiry, scope, mac = token.split(".")
        assert scope == "v"
        turned = f"{live.url}/cards/{ident}.{expiry}.a.{mac}"
        assert httpx.post(turned, data={"choice": "1"}, timeout=10).status_code == 404
        with live.hub.store.read() as tx:
            still = tx.get("card", card.id)
        assert isinstance(still, Card) and still.state == "open"


def test_a_link_answers_only_the_card_it_was_made_for_not_a_later_one_with_its_id(
    tmp_path: Path,
) -> None:
    """Card ids restart in a ledger restored from a backup: a link kept from before the
    restore opened and answered the new card with the same id."""
    with live_server(tmp_path / "h", RULES, start_worker=False) as live:
        card = open_question(live)
        links = links_of(live)
        earlier = replace(card, opened_at="2026-01-02T03:04:05+00:00")  # the same id, before
        stale = links.url(earlier)
        assert httpx.get(stale, timeout=10).status_code == 404
        assert httpx.post(stale, data={"choice": "1"}, timeout=10).status_code == 404
        assert httpx.get(links.url(card), timeout=10).status_code == 200
        with live.hub.store.read() as tx:
            still = tx.get("card", card.id)
        assert isinstance(still, Card) and still.state == "open"


def test_every_card_page_is_kept_out_of_caches_frames_and_referrers(tmp_path: Path) -> None:
    """The link is the capability to answer: the page, its answers and its refusals are
    never cached, framed or referred from, run nothing but their own form, and fit a
    phone's width."""
    with live_server(tmp_path / "h", RULES, start_worker=False) as live:
        card = open_question(live)
        url = links_of(live).url(card)
        answers = [
            httpx.get(url, timeout=10),
            httpx.post(url, data={"choice": "x"}, timeout=10),
            httpx.post(url, data={"choice": "1"}, timeout=10),
            httpx.post(url, data={"choice": "1"}, timeout=10),
            httpx.get(f"{live.url}/cards/not-a-token", timeout=10),
        ]
        assert [r.status_code for r in answers] == [200, 400, 200, 409, 404]
        for resp in answers:
            assert resp.headers["cache-control"] == "no-store"
            assert resp.headers["referrer-policy"] == "no-referrer"
            assert resp.headers["x-frame-options"] == "DENY"
            assert resp.headers["x-content-type-options"] == "nosniff"
            csp = resp.headers["content-security-policy"]
            assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
            assert "form-action 'self'" in csp
            assert resp.text.startswith("<!doctype html>")
            assert 'name="viewport" content="width=device-width' in resp.text
        assert f"<title>{card.title}</title>" in answers[0].text


def test_form_choice_reads_one_small_number() -> None:
    assert form_choice(b"choice=3") == 3
    assert form_choice(b"x=1&choice=12") == 12
    assert form_choice(b"choice=" + b"9" * 5000) is None
    assert form_choice(b"\xff\xfe") is None
    assert form_choice(b"choice=-1") is None


@pytest.mark.parametrize(
    "key",
    [b"", b"short", b"k" * 32, b"ab" * 40, b"0123456" * 10],
    ids=["empty", "short", "one-char", "two-chars", "seven-chars"],
)
def test_a_weak_master_key_is_refused(key: bytes) -> None:
    with pytest.raises(WeakKeyError):
        check_master_key(key)
    with pytest.raises(WeakKeyError):
        CardLinks(key)


def test_the_key_init_writes_is_accepted(tmp_path: Path) -> None:
    init_home(tmp_path)
    key = read_master_key(tmp_path)
    assert len(key) == 64
    assert CardLinks(key).verify(CardLinks(key).token("c1")) == "c1"


@pytest.mark.parametrize("content", [b"", b"\n", b"letmein\n", b"a" * 64])
def test_serve_refuses_a_weak_master_key_before_it_starts(tmp_path: Path, content: bytes) -> None:
    home = tmp_path / "h"
    init_home(home)
    (home / "master.key").write_bytes(content)
    env = {
        "AUTOLOOP_HOME": str(home),
        "AUTOLOOP_GITHUB_WEBHOOK_SECRET": "card-links-webhook-secret-32chars",
    }
    ctx = Home.open(env=env, home=home)
    try:
        with pytest.raises(SettingsError, match=r"master\.key is refused.*autoloop init"):
            build(ctx, Settings.from_env(env), connect_github=False)
    finally:
        ctx.store.close()


def test_autoloop_serve_with_an_empty_key_exits_2_with_one_line(tmp_path: Path) -> None:
    home = tmp_path / "h"
    init_home(home)
    (home / "master.key").write_bytes(b"")
    env = {
        **os.environ,
        "AUTOLOOP_HOME": str(home),
        "AUTOLOOP_GITHUB_WEBHOOK_SECRET": "card-links-webhook-secret-32chars",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "serve", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "master.key is refused" in lines[0]
    assert "Traceback" not in proc.stderr


def test_clicks_on_a_ledger_that_does_not_answer_wait_on_threads_of_their_own(
    tmp_path: Path,
) -> None:
    """Each click waited on a thread of asyncio's shared pool, which the webhooks'
    signature checks use: a few clicks on a stuck ledger held them all."""
    from concurrent.futures import ThreadPoolExecutor

    with live_server(tmp_path / "h", RULES, start_worker=False) as live:
        card = open_question(live)
        url = links_of(live).url(card)

        def click() -> str:
            try:
                return str(httpx.get(url, timeout=1).status_code)
            except httpx.TimeoutException:
                return "waited"

        with stuck_ledger(live.hub.store) as entered:
            with ThreadPoolExecutor(8) as clicks:
                said = list(clicks.map(lambda _: click(), range(8)))
            assert said == ["waited"] * 8
            assert len(entered) == 2 and all(n.startswith("card-page") for n in entered), entered
        assert httpx.get(url, timeout=10).status_code == 200
