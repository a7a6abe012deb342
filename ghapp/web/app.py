"""The HTTP face of the hub (DESIGN.md section 8): ``create_app(server) -> Starlette``.

- ``POST /github/webhook``: one log line each (:mod:`ghapp.web.access`); verify
  ``X-Hub-Signature-256`` (401, nothing stored), refuse bodies over GitHub's 25 MB cap
  (413), read JSON or form-encoded (``payload=...``) bodies, route on
  ``X-GitHub-Event``, dedupe on ``X-GitHub-Delivery`` and on the event name and the
  body's signature hashed (a signed body replayed under new delivery ids is recorded
  once, and answered 200 as a duplicate), commit to the ledger, and only then answer 2xx.
- ``POST /v1/in/{source}``: generic sources signed with HMAC-SHA256 over the raw body;
  bodies up to 1 MiB, details nested at most 64 levels (:mod:`ghapp.runtime.details`).
- ``GET/POST /cards/{token}``: the page a signed card link opens, and its answer.
- ``GET /healthz``, ``GET /metrics`` (Prometheus text).

A request the ledger cannot record (a full disk, a lost database) is answered 503, the
server's fault, so the sender tries again; it is logged in one line. ``/healthz`` is
503 too, with the error and its time, until a write appends again. A client that goes
away in the middle of its body is one log line.

The card page is rendered by :mod:`ghapp.web.cards`, the metrics page by
:mod:`ghapp.web.metrics`. No work happens at import; everything the routes need is on
the ``Server`` object.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import html
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ghapp.github.manifest import WEBHOOK_PATH
from ghapp.github.sansio import signature_of
from ghapp.runtime import crash
from ghapp.runtime.details import CONTROL, name_problem, problem
from ghapp.runtime.details import MAX_BYTES as MAX_DETAILS_BYTES
from ghapp.runtime.hub import Hub
from ghapp.runtime.inbox import Inbox, Received
from ghapp.runtime.ingest import ASIDE_BYTES, IngestQueue
from ghapp.runtime.links import CardLinks
from ghapp.runtime.settings import source_secret_var
from ghapp.runtime.webhooks import BadBody, content_digest, inputs_for, webhook_payload
from ghapp.web.access import SourceLog, WebhookLog
from ghapp.web.cards import form_choice, page, render_card_page
from ghapp.web.metrics import Metrics, render_metrics
from kernel import inputs as k
from kernel.model import Event
from kernel.records import Card
from kernel.text import one_line

log = logging.getLogger("autoloop.web")

MAX_BODY = 25 * 1024 * 1024  # GitHub caps webhook payloads at 25 MB
UNRECORDED = "the ledger could not record this (nothing was stored): send it again later"
FORM = "application/x-www-form-urlencoded"
MAX_FORM = 4096  # a card page's answer: choice=N
MAX_DELIVERY_ID = 200  # GitHub's delivery ids are GUIDs (36 characters)
MAX_SOURCE_BODY = MAX_DETAILS_BYTES  # an event for a generic source: details and a few fields
_SOURCE_TOO_LARGE = (
    f"body over {MAX_SOURCE_BODY} bytes: an event's details are kept in the ledger; "
    "send a link to large data instead"
)


@dataclass
class Server:
    hub: Hub
    queue: IngestQueue
    webhook_secret: bytes | None = None
    app_slug: str | None = None
    app_id: int | None = None
    source_secrets: Mapping[str, tuple[str, bytes]] = field(default_factory=dict)
    links: CardLinks | None = None
    metrics: Metrics = field(default_factory=Metrics)
    wake: Callable[[], None] = lambda: None
    on_comment: Callable[[Event], None] | None = None
    on_events: Callable[[list[Event]], None] | None = None  # every recorded webhook's events
    webhook_log: WebhookLog = field(default_factory=WebhookLog)
    source_log: SourceLog = field(default_factory=SourceLog)
    inbox: Inbox | None = None  # with a SQLite ledger: acks wait for the inbox only
    worker_problem: Callable[[], str] = lambda: ""  # why no turn runs ("" when they do)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


def _after_ack() -> BackgroundTask | None:
    """The crash test hook's last point (:mod:`ghapp.runtime.crash`), passed once the
    answer is sent; nothing when the hook is not armed (always, outside those tests)."""
    return BackgroundTask(crash.reach, crash.AFTER_ACK) if crash.armed() else None


def webhook_inputs(
    name: str,
    delivery: str,
    body: bytes,
    *,
    signature: bytes,
    form: bool = False,
    app_slug: str | None = None,
    app_id: int | None = None,
) -> tuple[list[Event], list[k.Input]]:
    """The events of one verified GitHub delivery, and the inputs that record them.

    Raises :class:`BadBody` (a 400) for a body that is not a JSON object. The App's own
    doings translate to no event: the delivery is then recorded as ignored, so that it
    is known (a redelivery of it is a duplicate, the sweeper does not ask for it again).
    """
    payload = webhook_payload(body, form=form)
    digest = content_digest(name, signature)
    return inputs_for(name, delivery, payload, digest, app_slug=app_slug, app_id=app_id)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


_TOO_LARGE = "payload over 25 MB: GitHub never sends one this large"
HEALTH_READ_S = 2.0  # /healthz waits this long for the ledger to answer, then says so
METRICS_READ_S = 5.0  # and /metrics this long
BODY_S = 10.0  # a body has this long to arrive...
BODY_RATE = 64 * 1024  # ... and one more second per this many bytes it says it has
BODY_BUDGET = 128 * 1024 * 1024  # bytes of bodies being read at once, all requests together
EVICT_AFTER_S = 1.0  # a body read this long...
EVICT_RATE = 1024 * 1024  # ... at under this many bytes a second gives its room up when needed
_SIGNED = re.compile(r"\s*sha256=[0-9a-f]{64}\s*", re.IGNORECASE)  # X-Hub-Signature-256
_SOURCE_SIGNED = re.compile(r"(?:sha256=)?[0-9a-f]{64}", re.IGNORECASE)  # a source's header


class BodyBudget:
    """How many bytes of request bodies are held at once, by every request together: the
    bodies are read before they can be verified, so without a bound a few dozen senders
    of unfinished 25 MB bodies took a gigabyte.

    When a body needs room the bound does not have, the slowest bodies being read give
    theirs up (:meth:`take`): one read for at least :data:`EVICT_AFTER_S` at under
    :data:`EVICT_RATE` bytes a second on average is let go (answered 503 "send it again"
    when it ends). Else senders of bodies that stall (no secret needed: a signature
    header of the right shape) held the whole bound for minutes, and every webhook was
    refused meanwhile; now they must keep sending a megabyte a second each to hold it."""

    def __init__(self, limit: int | None = None, clock: Callable[[], float] = time.monotonic):
        self.limit = BODY_BUDGET if limit is None else limit
        self.held = 0
        self.clock = clock
        self._reading: set[Reading] = set()

    def reading(self) -> Reading:
        """A body begins: its share of the bound (give it back with :meth:`done`)."""
        r = Reading(self.clock())
        self._reading.add(r)
        return r

    def take(self, r: Reading, n: int) -> bool:
        """Room for ``n`` more bytes of ``r``'s body, made by letting slower bodies go if
        needed; False when there is none (``r`` lets go of its own then)."""
        if self.held + n > self.limit:
            self._make_room(r, self.held + n - self.limit)
        if self.held + n > self.limit:
            return False
        self.held += n
        r.taken += n
        return True

    def let_go(self, r: Reading) -> None:
        """``r``'s bytes are free for the others; the rest of its body is read and dropped."""
        self.held -= r.taken
        r.taken, r.let_go = 0, True
        r.chunks.clear()

    def done(self, r: Reading) -> None:
        self._reading.discard(r)
        self.held -= r.taken
        r.taken = 0

    def _make_room(self, r: Reading, need: int) -> None:
        now = self.clock()

        def rate(o: Reading) -> float:
            return o.taken / max(now - o.started, 1e-9)

        slow = [
            o
            for o in self._reading
            if o is not r and o.taken and now - o.started >= EVICT_AFTER_S and rate(o) < EVICT_RATE
        ]
        if sum(o.taken for o in slow) < need:
            return  # not enough room even so: no one is let go for nothing
        for o in sorted(slow, key=rate):
            if need <= 0:
                break
            need -= o.taken
            log.warning(
                "a request body read at %d bytes a second (%d bytes in %.1f s) gave its "
                "room to another: it is answered 503 when it ends",
                rate(o), o.taken, now - o.started,
            )  # fmt: skip
            self.let_go(o)


class Reading:
    """One body being read: its bytes so far, what it holds of the bound, since when."""

    __slots__ = ("chunks", "let_go", "started", "taken")

    def __init__(self, started: float) -> None:
        self.started = started
        self.taken = 0
        self.let_go = False
        self.chunks: list[bytes] = []


async def _read_body(
    request: Request,
    limit: int = MAX_BODY,
    too_large: str = _TOO_LARGE,
    *,
    budget: BodyBudget | None = None,
) -> bytes | Response:
    """The request's body, at most ``limit`` bytes, within :data:`BODY_S` plus a second
    per :data:`BODY_RATE` bytes (a sender that stops half-way held its connection, and
    its part of ``budget``, for ever); else the answer to send instead."""
    length = request.headers.get("content-length")
    declared = limit
    if length is not None:
        try:
            declared = int(length)
        except ValueError:
            return _error(400, "bad Content-Length header")
        if declared > limit:
            return _error(413, too_large)
        declared = max(declared, 0)
    reading = budget.reading() if budget is not None else None
    chunks = reading.chunks if reading is not None else []
    size = 0
    try:
        async with asyncio.timeout(BODY_S + declared / BODY_RATE):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    return _error(413, too_large)
                if reading is not None and budget is not None:
                    if reading.let_go:
                        continue  # read and let go (see below)
                    if not budget.take(reading, len(chunk)):
                        log.warning(
                            "%s %s: refused with 503, %d bytes of bodies already being read",
                            request.method, request.url.path, budget.held,
                        )  # fmt: skip
                        # The rest of the body is read and let go before the answer:
                        # closed with bytes unread, the connection was reset, and the
                        # sender often got the reset, not the 503 that says "again".
                        budget.let_go(reading)  # what it held is free for the others now
                        continue
                chunks.append(chunk)
        if reading is not None and reading.let_go:
            return _busy()
    except ClientDisconnect:
        log.warning(
            "%s %s: the client went away after %d byte(s) of its body; nothing was stored",
            request.method,
            request.url.path,
            size,
        )
        return _error(400, "the connection closed before the body was complete")
    except TimeoutError:
        if reading is not None and reading.let_go:
            return _busy()
        log.warning(
            "%s %s: the body did not arrive in time (%d of %s byte(s)); nothing was stored",
            request.method, request.url.path, size, length or "?",
        )  # fmt: skip
        return _closing(_error(408, "the body did not arrive in time; nothing was stored"))
    finally:
        if reading is not None and budget is not None:
            budget.done(reading)
    return b"".join(chunks)


def _busy() -> Response:
    response = _error(503, "too many large requests at once; send it again shortly")
    response.headers["retry-after"] = "5"
    return _closing(response)


def _closing(response: Response) -> Response:
    """``response``, closing its connection: the rest of the body it did not read must not
    be taken for the next request."""
    response.headers["connection"] = "close"
    return response


def _unrecorded(what: str, exc: Exception) -> Response:
    """A request the ledger could not record: one log line, and a 503 (our fault)."""
    log.error(  # one line: libpq's messages hold their hint on a second
        "%s not recorded (answered 503): %s: %s", what, type(exc).__name__, one_line(str(exc))
    )
    return _error(503, UNRECORDED)


def _error_of(response: Response) -> str:
    """The ``error`` of one of our JSON error answers, for the log line."""
    try:
        data = orjson.loads(bytes(response.body))
    except (ValueError, TypeError):
        return ""
    return str(data.get("error", "")) if isinstance(data, dict) else ""


class _App(Starlette):
    """Starlette, with one shortcut: ``POST /github/webhook``, the route every delivery
    takes, goes straight to its endpoint, past the middleware stack and the router (the
    same endpoint, the same ``Request`` and ``Response``). The rest of the app, and any
    other method on that path (405, as before), goes through Starlette as usual.
    Measured in the process, the app called with an ASGI scope and no network: 36-42 us
    a delivery, against 48-57 us through the stack (``bench/README.md``)."""

    def __init__(self, webhook: Callable[[Request], Awaitable[Response]], **kw: Any) -> None:
        super().__init__(**kw)
        # No redirect of "/cards/x/" to "/cards/x": it was built from the request's Host
        # header, so anyone could make the server answer with a redirect to their host.
        self.router.redirect_slashes = False
        self._webhook = webhook

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] == WEBHOOK_PATH
            and not scope.get("root_path")
        ):
            scope["app"] = self
            response = await self._webhook(Request(scope, receive))
            await response(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


class StillReading(Exception):
    """An earlier read of :class:`OneRead` has not returned."""


class OneRead:
    """The ledger reads of a probe (``/healthz``, ``/metrics``), one at a time, on a
    thread of its own. When the ledger does not answer (a PostgreSQL query stuck on a
    silent network), what waits for it is one thread, and the next probe is told at once:
    each probe left one more thread of asyncio's shared pool waiting, and once the pool
    was full, the webhooks' signature checks, which use it, waited too."""

    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._pending: Future[Any] | None = None

    async def run(self, read: Callable[[], Any], within_s: float) -> Any:
        """``read()``'s result; :class:`TimeoutError` past ``within_s``, and
        :class:`StillReading` while a read that timed out has not returned."""
        if self._pending is not None and not self._pending.done():
            raise StillReading
        self._pending = self._pool.submit(read)
        return await asyncio.wait_for(asyncio.wrap_future(self._pending), within_s)


def create_app(server: Server) -> Starlette:
    budget = BodyBudget()

    async def github_webhook(request: Request) -> Response:
        """One log line per received webhook (:mod:`ghapp.web.access`), then its answer."""
        started = time.perf_counter()
        status, error = 500, "the server failed: see the error logged above"
        inbox = server.inbox
        counted = False

        def body_in() -> None:
            # From here the request has work for the processor: the translator waits
            # (see the inbox). Not before: a body that trickles in asks nothing of it, and
            # counted, one slow sender held back the deciding of every delivery for 10 s.
            nonlocal counted
            if inbox is not None:
                inbox.request_in()
                counted = True

        try:
            response = await receive_github_webhook(request, body_in)
            status = response.status_code
            error = _error_of(response) if status >= 400 else ""
            return response
        except asyncio.CancelledError:
            # The server stops, and its grace for requests still running ended (a body
            # that trickles in, an ack waiting for a ledger another process holds): it
            # was a 500 and a traceback each. A delivery whose ack was under way may be
            # in the inbox; GitHub sends it again either way, and a duplicate is known.
            status, error = 503, "the server stopped before it could answer"
            return _closing(_error(503, f"{error}; send it again"))
        finally:
            if counted and inbox is not None:
                inbox.request_out()
            server.webhook_log.received(
                request.headers.get("x-github-event", ""),
                request.headers.get("x-github-delivery", ""),
                status,
                (time.perf_counter() - started) * 1000,
                error,
            )

    async def receive_github_webhook(
        request: Request, body_in: Callable[[], None] = lambda: None
    ) -> Response:
        started = time.perf_counter()
        m = server.metrics
        if server.webhook_secret is None:
            return _error(503, "webhook secret not configured: set AUTOLOOP_GITHUB_WEBHOOK_SECRET")
        if not _SIGNED.fullmatch(request.headers.get("x-hub-signature-256", "")):
            m.inc("webhook_bad_signature_total")  # (its body is not read: no one signed it)
            return _closing(
                _error(401, "bad or missing X-Hub-Signature-256 (check the webhook secret)")
            )
        body = await _read_body(request, budget=budget)
        if isinstance(body, Response):
            m.inc("webhook_refused_total")
            return body
        body_in()
        big = len(body) > ASIDE_BYTES  # hashed, parsed and redacted off the loop and writer
        header = request.headers.get("x-hub-signature-256")
        secret = server.webhook_secret
        if big:
            signature = await asyncio.to_thread(signature_of, secret, body, header)
        else:
            signature = signature_of(secret, body, header)
        if signature is None:
            m.inc("webhook_bad_signature_total")
            return _error(401, "bad or missing X-Hub-Signature-256 (check the webhook secret)")
        name = request.headers.get("x-github-event", "")
        delivery = request.headers.get("x-github-delivery", "")
        if not name or not delivery:
            return _error(400, "missing X-GitHub-Event or X-GitHub-Delivery header")
        if len(delivery) > MAX_DELIVERY_ID:
            return _error(400, f"X-GitHub-Delivery over {MAX_DELIVERY_ID} characters: not a GUID")
        if CONTROL.search(delivery) or CONTROL.search(name):
            # The HTTP servers the hub runs on refuse these already; this holds under any
            # other ASGI server too (the delivery id is a key, and PostgreSQL's text holds
            # no NUL: it was a 503, and /healthz unhealthy, for one sender's header).
            return _error(400, "control characters in X-GitHub-Event or X-GitHub-Delivery")
        form = _media_type(request) == FORM
        inbox = server.inbox
        if inbox is not None:
            digest = content_digest(name, signature)
            item = Received(name=name, delivery=delivery, body=body, form=form, digest=digest)
            return await acknowledge(inbox, item, big=big, started=started)
        found: list[Event] = []

        def prepare() -> list[k.Input]:
            # runs in the ingest writer, beside the rest of its group's work (or aside)
            events, inputs = webhook_inputs(
                name,
                delivery,
                body,
                signature=signature,
                form=form,
                app_slug=server.app_slug,
                app_id=server.app_id,
            )
            found.extend(events)
            return inputs

        try:
            outs = await server.queue.submit(prepare, aside=big)
        except BadBody as exc:
            return _error(400, str(exc))
        except Exception as exc:  # the ledger cannot append (e.g. a full disk)
            m.inc("webhook_unrecorded_total")
            return _unrecorded(f"webhook {delivery} ({name})", exc)
        events = found
        codes = [o.reply.code for o in outs]
        m.inc("webhook_deliveries_total")
        m.inc("events_recorded_total", codes.count("recorded"))
        m.inc("events_duplicate_total", codes.count("duplicate"))
        m.observe(time.perf_counter() - started)
        if "recorded" in codes:
            server.wake()
            if server.on_events is not None and events:
                server.on_events(events)
            if server.on_comment is not None:
                for e in events:
                    if e.type == "issue_comment.created":
                        server.on_comment(e)
        dup = all(c == "duplicate" for c in codes)
        # the same keys as the inbox's answer (acknowledge): its events are decided
        answer = {"delivery": delivery, "duplicate": dup, "queued": False, "events": len(events)}
        return Response(
            orjson.dumps(answer),
            status_code=200,
            media_type="application/json",
            background=_after_ack(),
        )

    async def acknowledge(inbox: Inbox, item: Received, *, big: bool, started: float) -> Response:
        """The inbox's ack: the body is a JSON object, then durable in the inbox (or a
        duplicate); its events are decided right after (:mod:`ghapp.runtime.inbox`)."""
        m = server.metrics
        name, delivery = item.name, item.delivery
        try:
            if big:  # checked off the event loop and the writer
                await asyncio.to_thread(webhook_payload, item.body, form=item.form)
                item.checked = True
            dup = await inbox.submit(item)  # small bodies: checked by the writer
        except BadBody as exc:
            return _error(400, str(exc))
        except Exception as exc:  # the inbox cannot append (e.g. a full disk)
            m.inc("webhook_unrecorded_total")
            return _unrecorded(f"webhook {delivery} ({name})", exc)
        m.inc("webhook_deliveries_total")
        m.observe(time.perf_counter() - started)
        # "queued": its events are decided right after this answer ("events": not known yet;
        # a ledger without an inbox decides them first and says how many)
        answer = {"delivery": delivery, "duplicate": dup, "queued": not dup, "events": None}
        return Response(
            orjson.dumps(answer),
            status_code=200,
            media_type="application/json",
            background=_after_ack(),
        )

    async def generic_source(request: Request) -> Response:
        """One log line per request (:class:`~ghapp.web.access.SourceLog`), then its answer."""
        started = time.perf_counter()
        source = request.path_params["source"]
        seen: dict[str, str] = {}
        status, error = 500, "the server failed: see the error logged above"
        try:
            response = await receive_source(request, source, seen)
            status = response.status_code
            error = _error_of(response) if status >= 400 else ""
            return response
        except asyncio.CancelledError:  # as for a webhook (see github_webhook)
            status, error = 503, "the server stopped before it could answer"
            return _closing(_error(503, f"{error}; send it again"))
        finally:
            spec = server.source_secrets.get(source)
            server.source_log.request(
                source,
                seen.get("id", ""),
                status,
                (time.perf_counter() - started) * 1000,
                error,
                header=spec[0] if spec else "",
                secret_var=_secret_var(source) if spec else "",
            )

    def _secret_var(source: str) -> str:
        try:
            listed = server.hub.rules().sources.get(source)
        except Exception:  # a rules file that does not load now
            listed = None
        var = listed.options.get("secret_env") if listed is not None else None
        return str(var) if var else source_secret_var(source)

    async def receive_source(request: Request, source: str, seen: dict[str, str]) -> Response:
        spec = server.source_secrets.get(source)
        if spec is None:
            # One answer for every name: which ones rules.json lists is not for anyone
            # who asks. The operator reads why in the log.
            try:
                listed = server.hub.rules().sources.get(source)
            except Exception:  # a rules file that does not load now: the start's answer
                listed = None
            if listed is not None and listed.adapter == "hmac":  # secrets are read at start
                log.warning(
                    "source %r was added to rules.json after autoloop serve started: "
                    "restart it to take the source (and its secret)", source[:100],
                )  # fmt: skip
            return _error(404, "no signed source of that name here")
        header, secret = spec
        if not _SOURCE_SIGNED.fullmatch(request.headers.get(header, "")):
            return _closing(
                _error(401, f"bad or missing {header} (sign the raw body with HMAC-SHA256)")
            )
        body = await _read_body(request, MAX_SOURCE_BODY, _SOURCE_TOO_LARGE, budget=budget)
        if isinstance(body, Response):
            return body
        # Compared as bytes: compare_digest refuses str with non-ASCII characters, and a
        # header may hold any byte (Starlette decodes headers as Latin-1, so this is exact).
        given = request.headers.get(header, "").lower().encode("latin-1")  # hex in any case
        want = hmac.new(secret, body, hashlib.sha256).hexdigest().encode("ascii")
        if not (hmac.compare_digest(given, want) or hmac.compare_digest(given, b"sha256=" + want)):
            return _error(401, f"bad or missing {header} (sign the raw body with HMAC-SHA256)")
        try:
            data = orjson.loads(body)
        except ValueError:
            return _error(400, "body is not JSON")
        if not isinstance(data, dict):
            return _error(400, "body must be a JSON object")
        eid = data.get("id")
        etype = data.get("type")
        if isinstance(eid, str):
            seen["id"] = eid
        if not isinstance(eid, str) or not isinstance(etype, str) or not eid or not etype:
            return _error(400, 'body needs string fields "id" and "type"')
        # A field of the wrong kind is the sender's mistake, said: "details": [1] was
        # stored as {} and "subject": 5 as the source's name, and the sender never knew.
        for name, kind, what in (
            ("subject", str, "a string"),
            ("summary", str, "a string"),
            ("link", str, "a string"),
            ("details", dict, "a JSON object"),
        ):
            if data.get(name) is not None and not isinstance(data[name], kind):
                return _error(400, f'"{name}" must be {what} (or left out)')
        named = data.get("subject")
        subject = named if isinstance(named, str) else source
        for name, value in (("id", eid), ("type", etype), ("subject", subject)):
            why = name_problem(name, value)  # (NUL among them: PostgreSQL stores none)
            if why is not None:
                return _error(400, f'"{name}": {why.removeprefix(name + " ")}')
        details = data.get("details") if isinstance(data.get("details"), dict) else {}
        why = problem(details)
        if why is not None:
            return _error(400, f'"details": {why}')
        event = Event(
            source=source,
            id=eid,
            type=etype,
            subject=str(subject),
            summary=str(data.get("summary") or "")[:500],
            link=str(data.get("link") or "")[:500],
            details=details or {},
        )
        try:
            (out,) = await server.queue.submit(
                [k.Ingest(event=event)], aside=len(body) > ASIDE_BYTES
            )
        except Exception as exc:  # the ledger cannot append (e.g. a full disk)
            return _unrecorded(f"event {eid!r} of source {source!r}", exc)
        if out.reply.code == "recorded":
            server.wake()
        return JSONResponse(
            {"code": out.reply.code, **dict(out.reply.data)},
            status_code=200,
            background=_after_ack(),
        )

    async def card_page(request: Request) -> Response:
        links = server.links
        token = request.path_params["token"]
        card_id = links.card_of(token) if links else None
        card: Card | None = None
        if card_id is not None:  # (the ledger is read and written off the event loop)
            found = await ledger_call(read_record, "card", card_id)
            card = found if isinstance(found, Card) else None
        granted = links.grant(token, card.opened_at) if links and card else None
        if card is None or granted is None:
            return page("<p>This card link is invalid or has expired.</p>", 404)
        answers = granted[1]
        if request.method == "POST":
            if not answers:
                return page(
                    "<p>This link only shows the card. Answer it where it was posted "
                    f"(<code>/answer {html.escape(card.id)} N</code>).</p>",
                    403,
                )
            body = await _read_body(request, MAX_FORM, "an answer is a few bytes: choice=N")
            if isinstance(body, Response):
                return body
            choice = form_choice(body)
            if choice is None:
                return page("<p>Pick one of the options.</p>", 400)
            try:
                out = await ledger_call(
                    server.hub.answer, card.id, choice, by="card-link", via="link"
                )
            except Exception as exc:  # the ledger cannot append (e.g. a full disk)
                _unrecorded(f"the answer to card {card.id}", exc)
                return page("<p>Your answer could not be saved; try again later.</p>", 503)
            server.wake()
            # a choice the card does not have is the sender's mistake; a card taken is not
            status = 200 if out.reply.ok else 400 if out.reply.code == "invalid" else 409
            return page(f"<p>{html.escape(out.reply.message)}</p>", status)
        return page(render_card_page(card, answers=answers), title=card.title)

    def read_record(kind: str, rid: str) -> object:
        with server.hub.store.read() as tx:
            return tx.get(kind, rid)

    def fact_count() -> int:
        with server.hub.store.read() as tx:
            return tx.fact_count()

    # A card's page reads and writes the ledger on threads of its own: clicks that wait on
    # a ledger that does not answer take none of asyncio's shared pool, which the
    # webhooks' signature checks use.
    card_threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="card-page")

    async def ledger_call(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(
            card_threads, functools.partial(fn, *args, **kw)
        )

    health_reads = OneRead("healthz")
    metrics_reads = OneRead("metrics")

    async def healthz(request: Request) -> Response:
        # Read off the event loop, and not waited for past HEALTH_READ_S: a ledger that
        # does not answer (a PostgreSQL query stuck on a silent network) held the loop,
        # and with it every request, webhooks too, and /healthz answered nothing at all.
        try:
            n = await health_reads.run(fact_count, HEALTH_READ_S)
        except TimeoutError:
            log.warning("healthz: the ledger did not answer within %g s", HEALTH_READ_S)
            doc = {"ok": False, "ledger": f"did not answer within {HEALTH_READ_S:g} s"}
            return JSONResponse(doc, status_code=503)
        except StillReading:
            doc = {"ok": False, "ledger": "has not answered an earlier read yet"}
            return JSONResponse(doc, status_code=503)
        except Exception as exc:  # the detail is the operator's (the log), not the caller's
            log.warning("healthz: the ledger cannot be read: %s: %s", type(exc).__name__, exc)
            return JSONResponse({"ok": False, "ledger": "cannot be read"}, status_code=503)
        inbox = server.inbox
        failed = (inbox.write_error if inbox else None) or server.hub.ledger.write_error
        waiting = {"waiting": inbox.waiting()} if inbox else {}
        if failed is not None:
            since = datetime.fromtimestamp(failed.at, UTC).isoformat(timespec="seconds")
            doc = {"ok": False, "ledger": f"not writable: {failed.message}", "since": since}
            return JSONResponse({**doc, "facts": n, **waiting}, status_code=503)
        if problem := server.worker_problem():  # the detail goes to the log, as above
            log.warning("healthz: %s", problem)
            doc = {"ok": False, "worker": "runs no turns: see the log"}
            return JSONResponse({**doc, "facts": n, **waiting}, status_code=503)
        return JSONResponse({"ok": True, "facts": n, **waiting})

    def metrics_text() -> str:
        return render_metrics(server.metrics, server.queue, server.hub.store, server.inbox)

    async def metrics(request: Request) -> Response:
        try:  # it reads the ledger: off the event loop, as /healthz does
            text = await metrics_reads.run(metrics_text, METRICS_READ_S)
        except TimeoutError:
            log.warning("metrics: the ledger did not answer within %g s", METRICS_READ_S)
            return PlainTextResponse(
                f"the ledger did not answer within {METRICS_READ_S:g} s\n", status_code=503
            )
        except StillReading:
            return PlainTextResponse(
                "the ledger has not answered an earlier read yet\n", status_code=503
            )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    return _App(
        github_webhook,
        routes=[
            Route(WEBHOOK_PATH, github_webhook, methods=["POST"]),
            Route("/v1/in/{source}", generic_source, methods=["POST"]),
            Route("/cards/{token}", card_page, methods=["GET", "POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ],
    )
