"""The webhook channel, posting to a real receiver on loopback: a card as JSON or as a
chat message, and with ``"links": true`` under ``autoloop serve``, the signed link to the
card's page (answerable in a browser)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from kernel.model import ChannelSpec, Event
from kernel.records import Card
from plugins.channels.local import WebhookChannel
from tests.servers import live_server


@contextmanager
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    got: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
    finally:
        server.shutdown()
        server.server_close()


CARD = Card(id="c1", key="k", matter="m", kind_="ask", title="Ship it?", options=("yes", "no"))


def test_a_channel_whose_url_variable_is_unset_names_it() -> None:
    spec = ChannelSpec(name="c", use="webhook", options={"url_env": "HOOK_URL"})
    with pytest.raises(RuntimeError, match=r"has no URL: set HOOK_URL \(its url_env\)$"):
        WebhookChannel(spec, {}).send(CARD, None, previous_ref="")


def test_a_card_is_posted_as_json_or_as_text() -> None:
    with receiver() as (url, got):
        spec = ChannelSpec(name="c", use="webhook", options={"url_env": "HOOK"})
        WebhookChannel(spec, {"HOOK": url}).send(CARD, None, previous_ref="")
        text = ChannelSpec(name="c", use="webhook", options={"url": url, "format": "slack"})
        WebhookChannel(text, {}).send(CARD, None, previous_ref="")
    assert got[0]["card"] == "c1" and got[0]["options"] == ["yes", "no"]
    assert "link" not in got[0]
    assert got[1] == {
        "text": "[c1] Ship it?\n    1) yes  2) no\n    answer with: autoloop answer c1 N"
    }


@pytest.mark.parametrize("fmt", ["json", "slack"])
def test_with_links_under_serve_the_card_carries_its_page(tmp_path: Path, fmt: str) -> None:
    """``"links": true`` on a webhook channel (the example in docs/rules.md puts it on a
    Slack one) added nothing: only the GitHub comment channel made links."""
    with receiver() as (url, got):
        rules = {
            "agents": {"demo": {"use": "demo"}},
            "channels": {
                "chat": {"use": "webhook", "format": fmt, "url_env": "HOOK", "links": True}
            },
            "rules": [
                {"name": "hello", "on": {"source": "local", "type": "hello.*"}, "agent": "demo",
                 "notify": ["chat"]},
            ],
        }  # fmt: skip
        with live_server(tmp_path / "home", rules, env={"HOOK": url}) as live:
            live.hub.emit(Event(source="local", id="1", type="hello.world", subject="wall"))
            live.running.worker.wake()
            deadline = time.monotonic() + 20
            while not got and time.monotonic() < deadline:
                time.sleep(0.05)
            (body,) = got
            if fmt == "json":
                link = body["link"]
            else:
                (line,) = [x for x in body["text"].splitlines() if "in a browser" in x]
                link = line.split("in a browser: ", 1)[1]
            assert link.startswith(f"{live.url}/cards/")
            page = httpx.get(link, timeout=10)
            assert page.status_code == 200 and "Pick a colour" in page.text
