"""The sandbox GitHub inside the whole-system simulation: in process, on simulated time.

- :class:`SimClock`: the wall clock (it jumps back and forth) and elapsed time (it only
  goes forward); both move only when the simulation says so, or when the client sleeps.
- :class:`Bridge`: an httpx transport that hands each request to the fake GitHub's
  ASGI app on a private event loop (no socket, no thread), with seeded faults: a 502
  before anything, a secondary rate limit, a write applied and its answer lost (no
  response), a write applied and answered 502.
- :class:`SimScheduler`: the fake's scripted CI and deploys, run when simulated time
  reaches them.
- :class:`SimHooks`: the fake's webhook sender, sending only when the simulation says,
  with delivery GUIDs drawn from the seed; every attempt is kept, as GitHub keeps them
  (``GET /app/hook/deliveries``), so that the product's sweeper can ask for redelivery.
"""

from __future__ import annotations

import heapq
import itertools
import json
import random
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx

from fakegithub.faults import SECONDARY_RATE_LIMIT
from fakegithub.state import Event
from fakegithub.webhooks import (
    Delivery,
    WebhookSender,
    _Job,
    again,
    delivery_headers,
)

API = "http://gh.sim"


@dataclass
class SimClock:
    """Simulated time. ``elapsed`` only grows (the true time is ``start + elapsed``, which
    GitHub keeps); the App's wall clock is off by ``skew``, which jumps either way."""

    start: datetime
    elapsed: float = 0.0
    skew: float = 0.0

    def true_now(self) -> datetime:
        return self.start + timedelta(seconds=self.elapsed)

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.elapsed + self.skew)

    def epoch(self) -> float:
        return self.now().timestamp()

    def mono(self) -> float:
        return self.elapsed

    def advance(self, seconds: float) -> None:
        self.elapsed += seconds


class NoAnswer(Exception):
    """The process that should answer died before it did (a webhook sees no response)."""


@dataclass
class ApiFaults:
    """Seeded faults of the REST API: per-request probabilities, with a higher chance on
    the writes whose lost answer matters most (merges and branch updates)."""

    rnd: random.Random
    error_502: float = 0.012
    rate_limit: float = 0.012
    lost: float = 0.012
    lost_502: float = 0.008
    risky_lost: float = 0.3  # a merge or a branch update: its answer lost this often
    on: bool = True
    reached: Counter[str] = field(default_factory=Counter)

    def pick(self, method: str, path: str) -> str | None:
        if not self.on or path.startswith("/_sandbox"):
            return None
        write = method in ("POST", "PUT", "PATCH", "DELETE")
        risky = method == "PUT" and path.endswith(("/merge", "/update-branch"))
        r = self.rnd.random()
        if risky and r < self.risky_lost:
            return "response_lost" if self.rnd.random() < 0.7 else "response_lost_502"
        if r < self.error_502:
            return "error_502"
        r -= self.error_502
        if r < self.rate_limit:
            return "rate_limit"
        r -= self.rate_limit
        if r < self.lost:
            return "response_lost"
        r -= self.lost
        if write and r < self.lost_502:
            return "response_lost_502"
        return None


class Bridge(httpx.BaseTransport):
    """Requests to the fake GitHub's ASGI app, in process, with :class:`ApiFaults`.

    ``watch(request, response)`` is called for every answered request (the invariants
    look at what the App asked GitHub to do)."""

    def __init__(
        self,
        app: Any,
        faults: ApiFaults,
        watch: Callable[[httpx.Request, int], None] | None = None,
    ) -> None:
        self.app = app
        self.faults = faults
        self.watch = watch
        self.requests = 0

    def close(self) -> None:
        pass  # the loop lives as long as the simulation (see shutdown)

    def shutdown(self) -> None:
        pass

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        path = request.url.path
        kind = self.faults.pick(request.method, path)
        if kind is not None:
            what = "write" if request.method != "GET" else "read"
            self.faults.reached[f"api {kind} ({what})"] += 1
            if path.endswith("/merge") and kind.startswith("response_lost"):
                self.faults.reached[f"api {kind} of a merge"] += 1
        if kind == "error_502":
            return _json(request, 502, {"message": "Server Error"})
        if kind == "rate_limit":
            wait = self.faults.rnd.randint(1, 30)
            limited = {"retry-after": str(wait), "x-ratelimit-remaining": "4999"}
            return _json(request, 403, {"message": SECONDARY_RATE_LIMIT}, limited)
        status, headers, body = self._asgi(request)
        if self.watch is not None:
            self.watch(request, status)
        if kind == "response_lost":
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            )
        if kind == "response_lost_502":
            return _json(request, 502, {"message": "Server Error"})
        return httpx.Response(status, headers=headers, content=body, request=request)

    def _asgi(self, request: httpx.Request) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        body = request.read()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?", 1)[0],
            "query_string": request.url.query,
            "root_path": "",
            "headers": [(k.lower(), v) for k, v in request.headers.raw],
            "server": (request.url.host, request.url.port or 80),
            "client": ("127.0.0.1", 40000),
        }
        out: dict[str, Any] = {}
        chunks: list[bytes] = []
        given = False

        async def receive() -> dict[str, Any]:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                out["status"] = message["status"]
                out["headers"] = list(message.get("headers", []))
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        # Nothing the fake GitHub does waits on I/O, so its coroutine runs to its end at
        # the first send, without an event loop (a loop's turns cost more than the route).
        coro = self.app(scope, receive, send)
        try:
            coro.send(None)
        except StopIteration:
            return int(out["status"]), out["headers"], b"".join(chunks)
        coro.close()
        raise RuntimeError(f"the fake GitHub waited on I/O for {request.method} {scope['path']}")


def _json(
    request: httpx.Request, status: int, body: Any, headers: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.Response(
        status,
        headers={"content-type": "application/json", **(headers or {})},
        content=json.dumps(body).encode(),
        request=request,
    )


class SimScheduler:
    """The fake's scheduler on simulated elapsed time: :meth:`run_due` runs what is due."""

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._counter = itertools.count()
        self.ran = 0

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self._heap.clear()

    def later(self, delay: float, callback: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (self.clock.mono() + delay, next(self._counter), callback))

    def idle(self) -> bool:
        return not self._heap

    def next_due(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def run_due(self) -> int:
        n = 0
        while self._heap and self._heap[0][0] <= self.clock.mono():
            _, _, callback = heapq.heappop(self._heap)
            callback()
            n += 1
        self.ran += n
        return n


Receiver = Callable[[dict[str, str], bytes], int]


class SimHooks(WebhookSender):
    """The App's webhooks, queued (:attr:`pending`) until the simulation sends one."""

    def __init__(self, base: WebhookSender, clock: SimClock, rnd: random.Random) -> None:
        super().__init__(base.state, base.app, base.faults)
        self.clock = clock
        self.rnd = rnd
        self.pending: list[_Job] = []
        self.sent = 0

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def on_event(self, event: Event) -> None:
        if self.app.webhook_url is None or (
            event.installation_id is not None
            and self.state.installations[event.installation_id].app_id != self.app.id
        ):
            return
        body = json.dumps(event.payload, separators=(",", ":")).encode()
        guid = str(uuid.UUID(int=self.rnd.getrandbits(128), version=4))
        self.pending.append(
            _Job(
                guid,
                event.name,
                event.action,
                event.installation_id,
                event.repository_id,
                body,
                False,
            )
        )

    def redeliver(self, delivery_id: int) -> Delivery | None:
        found = self.get(delivery_id)
        if found is None:
            return None
        self.pending.append(again(found))
        return found

    def attempt(self, job: _Job, receiver: Receiver) -> Delivery:
        """Send ``job`` to ``receiver`` (the App) and keep the attempt, as GitHub does.
        A :class:`NoAnswer` (the App died) is kept as a failed attempt and raised again."""
        headers = delivery_headers(self.app, job)
        self._next_id += 1
        delivery = Delivery(
            id=self._next_id,
            guid=job.guid,
            event=job.event,
            action=job.action,
            installation_id=job.installation_id,
            repository_id=job.repository_id,
            body=job.body,
            url=str(self.app.webhook_url),
            redelivery=job.redelivery,
            delivered_at=self.state.now(),
            headers=headers,
        )
        self.sent += 1
        try:
            status = receiver(headers, job.body)
        except BaseException:
            delivery.status = "failed to connect to host"
            self._deliveries.append(delivery)
            raise
        delivery.status_code = status
        delivery.status = "OK" if 200 <= status < 300 else f"Invalid HTTP Response: {status}"
        self._deliveries.append(delivery)
        return delivery


__all__ = [
    "API",
    "ApiFaults",
    "Bridge",
    "NoAnswer",
    "SimClock",
    "SimHooks",
    "SimScheduler",
]
