"""The HTTP targets: the webhook endpoint, the generic source and the card pages.

They run the app of :func:`ghapp.web.app.create_app`, wired as ``autoloop serve`` wires
it (:func:`ghapp.commands.serve.build`: hub, ingest queue, card links), on a SQLite ledger
in a temporary home (``sync=off``: durability is not what is fuzzed here) or on the
PostgreSQL ledger given. Requests are ASGI calls on one event loop of this process: no
sockets, so the count is of inputs, not of connections.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from hypothesis import strategies as st

from ghapp.commands.home import Home, init_home
from ghapp.commands.serve import Running, build
from ghapp.github.sansio import sign
from ghapp.runtime.settings import Settings
from ghapp.web.app import create_app
from kernel.model import Event
from kernel.records import Card
from tests import paths
from tests.fuzz.base import (
    DEEP,
    HEADER_BYTES,
    JSON,
    JSON_LEAVES,
    TRACEBACK,
    FuzzFailure,
    Target,
    json_bytes,
    signature,
)

WEBHOOK_SECRET = "fuzz-webhook-secret"
SOURCE_SECRET = "fuzz-source-secret"
FORM = "application/x-www-form-urlencoded"
FIXTURES = paths.FIXTURES / "github" / "webhooks"
RULES: dict[str, Any] = {
    "agents": {"demo": {"use": "demo"}},
    "sources": {"shop": {"adapter": "hmac"}},
    "rules": [
        {"name": "gh", "on": {"source": "github"}, "agent": "demo", "parallel": True},
        {"name": "shop", "on": {"source": "shop"}, "agent": "demo", "parallel": True},
        {"name": "paint", "on": {"source": "local"}, "agent": "demo", "parallel": True},
    ],
}

# ------------------------------------------------------------------------ the HTTP harness


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.bad: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info or record.levelno >= logging.ERROR or TRACEBACK in text:
            self.bad.append(f"{record.levelname} {record.name}: {text[:300]}")


@dataclass
class Answer:
    status: int
    body: bytes


@dataclass
class App:
    """``autoloop serve``'s app on a fresh home, called as ASGI on one event loop."""

    root: Path
    running: Running
    ctx: Home
    app: Any
    loop: asyncio.AbstractEventLoop
    records: _Records
    cards: list[str] = field(default_factory=list)  # open questions, for the card pages
    statuses: Counter[int] = field(default_factory=Counter)  # answers by status

    @classmethod
    def start(cls, *, cards: int = 0, db_url: str | None = None) -> App:
        """``db_url``: the ledger (default: SQLite in the home, without fsync)."""
        root = Path(tempfile.mkdtemp(prefix="autoloop-fuzz-"))
        home = root / "home"
        init_home(home, rules_text=json.dumps(RULES))
        env = {
            "AUTOLOOP_HOME": str(home),
            "AUTOLOOP_DB": db_url or f"sqlite:///{home / 'ledger.db'}?sync=off",
            "AUTOLOOP_GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "AUTOLOOP_SOURCE_SHOP_SECRET": SOURCE_SECRET,
        }
        ctx = Home.open(env=env, home=home)
        running = build(
            ctx, Settings.from_env(env), base_url="http://fuzz", poll_s=0.2, connect_github=False
        )
        running.start(worker=False)
        loop = asyncio.new_event_loop()
        records = _Records()
        logging.getLogger().addHandler(records)
        made = cls(root, running, ctx, create_app(running.server), loop, records)
        made._open_questions(cards)
        return made

    def _open_questions(self, count: int) -> None:
        """``count`` open questions, asked by the demo agent (one matter each)."""
        hub = self.running.server.hub
        for n in range(count):
            hub.emit(Event(source="local", id=f"q{n}", type="hello.world", subject=f"wall-{n}"))
        if count:
            hub.drain()
        with hub.store.read() as tx:
            self.cards = sorted(
                c.id for c in tx.query("card") if isinstance(c, Card) and c.kind_ == "ask"
            )

    def close(self) -> None:
        logging.getLogger().removeHandler(self.records)
        self.running.stop()
        self.ctx.store.close()
        self.loop.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def call(
        self,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]],
        chunks: list[bytes],
        *,
        disconnect: bool = False,
        what: str = "",
    ) -> Answer:
        """One request; a :class:`FuzzFailure` when it breaks a rule of the target."""
        self.records.bad.clear()
        try:
            answer = self.loop.run_until_complete(
                self._asgi(method, path, headers, chunks, disconnect=disconnect)
            )
        except Exception as exc:
            raise FuzzFailure(f"{what}: {type(exc).__name__} escaped: {exc}"[:2000]) from exc
        self.statuses[answer.status] += 1
        if answer.status >= 500:
            raise FuzzFailure(f"{what}: answered {answer.status}: {answer.body[:500]!r}")
        if TRACEBACK.encode() in answer.body:
            raise FuzzFailure(f"{what}: a traceback in the answer: {answer.body[:500]!r}")
        if answer.status == 200 and path == "/github/webhook":
            self.settle(what)  # its record is decided after the ack: that must hold too
        if self.records.bad:
            raise FuzzFailure(f"{what}: logged {self.records.bad[:3]}")
        return answer

    def settle(self, what: str) -> None:
        """Wait until the inbox has decided what it acknowledged (a SQLite ledger's path):
        a record no ledger takes was logged, and tried again for ever, after the answer."""
        inbox = self.running.inbox
        if inbox is not None and not inbox.settle(10, released=False):
            raise FuzzFailure(f"{what}: {inbox.waiting()} acknowledged deliveries not decided")

    async def _asgi(
        self,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]],
        chunks: list[bytes],
        *,
        disconnect: bool,
    ) -> Answer:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": quote(path, safe="/%").encode("ascii"),
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 40000),
            "server": ("fuzz", 80),
            "state": {},
        }
        todo = list(chunks) or [b""]
        status = 0
        body: list[bytes] = []

        async def receive() -> dict[str, Any]:
            if todo:
                chunk = todo.pop(0)
                if disconnect and not todo:
                    return {"type": "http.disconnect"}
                return {"type": "http.request", "body": chunk, "more_body": bool(todo)}
            await asyncio.sleep(0)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                body.append(bytes(message.get("body", b"")))

        await self.app(scope, receive, send)
        if status == 0:
            raise FuzzFailure(f"{method} {path}: the app answered nothing")
        return Answer(status, b"".join(body))


def _chunked(body: bytes, cuts: list[int]) -> list[bytes]:
    """``body`` cut at the given offsets (taken modulo its length)."""
    if not body or not cuts:
        return [body]
    points = sorted({c % len(body) for c in cuts} - {0})
    return [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]


class HttpTarget(Target):
    """A target that needs the app: one fresh app per run of many inputs."""

    cards = 0  # open questions the app needs (the card pages)

    def __init__(self, *, db_url: str | None = None) -> None:
        super().__init__()
        self.db_url = db_url  # the ledger (see App.start)
        self.app: App | None = None

    def __enter__(self) -> HttpTarget:
        self.app = App.start(cards=self.cards, db_url=self.db_url)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.app is not None:
            self.outcomes.update(f"HTTP {code}" for code in self.app.statuses.elements())
            self.app.close()
            self.app = None


def _fixtures() -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(FIXTURES.glob("*/*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict):
            out.append((path.parent.name, data))
    return out


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value[:5]):
            yield from _paths(inner, (*prefix, i))


def mutate(doc: Any, edits: list[tuple[int, Any, bool]]) -> Any:
    """``doc`` with each edit applied: (which path, new value, delete instead)."""
    doc = json.loads(json.dumps(doc))
    for which, value, delete in edits:
        spots = [p for p in _paths(doc) if p]
        if not spots:
            return value
        where = spots[which % len(spots)]
        parent = doc
        for part in where[:-1]:
            parent = parent[part]
        if delete and isinstance(parent, dict):
            del parent[where[-1]]
        else:
            parent[where[-1]] = value
    return doc


EDITS = st.lists(st.tuples(st.integers(0, 10**6), JSON, st.booleans()), max_size=3)


class Webhook(HttpTarget):
    """``POST /github/webhook``: GitHub's example payloads changed here and there, other
    JSON, form bodies, bytes; signed right most of the time, so the parser and the
    translator see them."""

    name = "webhook"

    def __init__(self, *, db_url: str | None = None) -> None:
        super().__init__(db_url=db_url)
        self.fixtures = _fixtures()
        self.names = sorted({name for name, _ in self.fixtures})
        self.n = 0  # deliveries sent: each gets its own id unless the input names one

    def strategy(self) -> st.SearchStrategy[Any]:
        # Mostly what GitHub sends, a little changed (so the translator is reached);
        # now and then anything at all. ``None`` keeps the GitHub-like choice.
        def mostly(other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
            return st.sampled_from([False] * 7 + [True]).flatmap(
                lambda change: other if change else st.none()
            )

        return st.fixed_dictionaries(
            {
                "fixture": st.integers(0, len(self.fixtures) - 1),
                "edits": EDITS,
                "other": mostly(JSON.map(json_bytes) | st.binary(max_size=2_000) | DEEP),
                "event": mostly(st.sampled_from(self.names) | st.text(max_size=20)),
                "form": st.sampled_from([False] * 4 + [True]),
                "content_type": mostly(HEADER_BYTES),
                "delivery": mostly(st.text(max_size=30) | st.text(min_size=190, max_size=260)),
                "signature": signature(["good"] * 6 + ["none", "other"]),
                "length": mostly(HEADER_BYTES),
                "cuts": st.lists(st.integers(0, 10**6), max_size=3),
                "disconnect": st.sampled_from([False] * 29 + [True]),
            }
        )

    def check(self, ex: dict[str, Any]) -> None:
        assert self.app is not None
        name, doc = self.fixtures[ex["fixture"]]
        body: bytes = ex["other"] or json_bytes(mutate(doc, ex["edits"]))
        if ex["form"]:
            body = urlencode({"payload": body.decode("utf-8", "replace")}).encode()
        content_type = ex["content_type"] or (FORM if ex["form"] else "application/json").encode()
        event = ex["event"] if ex["event"] is not None else name
        self.n += 1
        delivery = ex["delivery"] if ex["delivery"] is not None else f"fuzz-{self.n}"
        headers = [
            (b"content-type", content_type),
            (b"x-github-event", event.encode("utf-8")),
            (b"x-github-delivery", delivery.encode("utf-8")),
        ]
        if ex["signature"] == "good":
            headers.append((b"x-hub-signature-256", sign(WEBHOOK_SECRET.encode(), body).encode()))
        elif isinstance(ex["signature"], bytes):
            headers.append((b"x-hub-signature-256", ex["signature"]))
        if ex["length"] is not None:
            headers.append((b"content-length", ex["length"]))
        self.app.call(
            "POST",
            "/github/webhook",
            headers,
            _chunked(body, ex["cuts"]),
            disconnect=ex["disconnect"],
            what=f"webhook {event!r}",
        )

    def check_bytes(self, data: bytes) -> None:
        assert self.app is not None
        event = self.names[data[0] % len(self.names)] if data else "issues"
        body = data[1:]
        headers = [
            (b"content-type", b"application/json"),
            (b"x-github-event", event.encode()),
            (b"x-github-delivery", hashlib.sha256(data).hexdigest().encode()),
            (b"x-hub-signature-256", sign(WEBHOOK_SECRET.encode(), body).encode()),
        ]
        self.app.call("POST", "/github/webhook", headers, [body], what="webhook")


def _source_signature(body: bytes) -> bytes:
    return hmac.new(SOURCE_SECRET.encode(), body, hashlib.sha256).hexdigest().encode()


class Source(HttpTarget):
    """``POST /v1/in/{source}``: events of any shape, bytes, nested details; signed right
    most of the time."""

    name = "source"

    def strategy(self) -> st.SearchStrategy[Any]:
        text = st.text(max_size=24) | JSON_LEAVES.filter(lambda v: isinstance(v, str))
        name = st.text(min_size=1, max_size=24) | st.sampled_from(
            ["a\x00b", "\x00", "é", "a" * 300]
        )
        fields = st.fixed_dictionaries(
            {"id": name, "type": name},
            optional={
                "subject": text | JSON,
                "summary": text | JSON,
                "link": text | JSON,
                "details": st.dictionaries(st.text(max_size=12), JSON, max_size=5) | JSON,
                "hops": JSON,
                "x": JSON,
            },
        )
        anything = st.dictionaries(
            st.sampled_from(["id", "type", "subject", "summary", "link", "details", "hops", "x"]),
            JSON,
            max_size=7,
        )
        event = st.one_of(fields, fields, fields, anything)
        return st.fixed_dictionaries(
            {
                "body": st.one_of(
                    *[event.map(json_bytes)] * 3,
                    JSON.map(json_bytes),
                    st.binary(max_size=2_000),
                    DEEP,
                ),
                "source": st.sampled_from(["shop"] * 6 + ["nope"]).flatmap(
                    lambda name: st.text(max_size=12) if name == "nope" else st.just(name)
                ),
                "signature": signature(["hex"] * 3 + ["prefixed"] * 3 + ["none", "other"]),
                "cuts": st.lists(st.integers(0, 10**6), max_size=3),
            }
        )

    def check(self, ex: dict[str, Any]) -> None:
        assert self.app is not None
        body: bytes = ex["body"]
        headers = [(b"content-type", b"application/json")]
        mac = _source_signature(body)
        if ex["signature"] == "hex":
            headers.append((b"x-signature-256", mac))
        elif ex["signature"] == "prefixed":
            headers.append((b"x-signature-256", b"sha256=" + mac))
        elif isinstance(ex["signature"], bytes):
            headers.append((b"x-signature-256", ex["signature"]))
        self.app.call(
            "POST", f"/v1/in/{ex['source']}", headers, _chunked(body, ex["cuts"]), what="source"
        )

    def check_bytes(self, data: bytes) -> None:
        assert self.app is not None
        headers = [
            (b"content-type", b"application/json"),
            (b"x-signature-256", _source_signature(data)),
        ]
        self.app.call("POST", "/v1/in/shop", headers, [data], what="source")


class CardPages(HttpTarget):
    """``GET`` and ``POST /cards/{token}``: tokens of open questions, of unknown cards,
    changed, expired, made up; form bodies, right and wrong."""

    name = "cards"
    cards = 2

    def __enter__(self) -> CardPages:
        super().__enter__()
        assert self.app is not None
        links = self.app.running.server.links
        assert links is not None and self.app.cards, "the demo agent asked no question"
        self.links = links
        hub = self.app.running.server.hub
        with hub.store.read() as tx:  # the records: a token covers when its card opened
            records = [tx.get("card", c) for c in self.app.cards]
        cards: list[Card | str] = [c for c in records if isinstance(c, Card)]
        first = cards[0]
        self.tokens = [
            *(links.token(c) for c in [*cards, "c999999", "", "nope"]),
            links.token(first, ttl_s=-1),  # expired
            links.token(first, answer=False),  # a link that shows the card only
        ]
        return self

    def strategy(self) -> st.SearchStrategy[Any]:
        issued = st.integers(0, 10**6).map(lambda i: ("issued", i, ""))
        token = st.one_of(
            issued,
            issued,
            issued,
            st.tuples(st.just("changed"), st.integers(0, 10**6), st.text(max_size=3)),
            st.text(max_size=80).map(lambda t: ("text", 0, t)),
        )
        form = st.one_of(
            st.integers(-3, 12).map(lambda n: f"choice={n}".encode()),
            st.text(max_size=40).map(lambda t: urlencode({"choice": t}).encode()),
            st.binary(max_size=200),
            st.lists(st.tuples(st.text(max_size=8), st.text(max_size=8)), max_size=12).map(
                lambda kv: urlencode(kv).encode()
            ),
        )
        return st.fixed_dictionaries(
            {"method": st.sampled_from(["GET", "POST"]), "token": token, "form": form}
        )

    def token_of(self, spec: tuple[str, int, str]) -> str:
        kind, n, text = spec
        if kind == "text":
            return text
        token = self.tokens[n % len(self.tokens)]
        if kind == "changed":
            at = n % (len(token) + 1)
            return token[:at] + text + token[at + 1 :]
        return token

    def check(self, ex: dict[str, Any]) -> None:
        assert self.app is not None
        token = self.token_of(ex["token"])
        headers = [(b"content-type", FORM.encode())]
        chunks = [ex["form"]] if ex["method"] == "POST" else []
        self.app.call(ex["method"], f"/cards/{token}", headers, chunks, what=f"card {token!r}")

    def check_bytes(self, data: bytes) -> None:
        assert self.app is not None
        token, _, form = data.partition(b"\n")
        method = "POST" if form else "GET"
        text = token.decode("utf-8", "replace")
        headers = [(b"content-type", FORM.encode())]
        self.app.call(method, f"/cards/{text}", headers, [form], what="card")
