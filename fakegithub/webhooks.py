"""Webhook deliveries: signed POSTs to the App's URL by a background sender.

Each event becomes one delivery attempt in the order it happened: compact JSON body,
``X-Hub-Signature-256`` (HMAC-SHA256 hex of the exact bytes with the webhook secret),
``X-GitHub-Event``, ``X-GitHub-Delivery`` (a GUID), ``X-GitHub-Hook-ID``,
``User-Agent: GitHub-Hookshot/...``. Every attempt, failed or not, is kept and listed as
``GET /app/hook/deliveries`` lists it; a redelivery sends the same body and GUID again
as a new attempt with ``redelivery: true``. Sending never blocks the REST answers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fakegithub.faults import Faults
from fakegithub.model import App
from fakegithub.state import Event, State, iso

if TYPE_CHECKING:
    import httpx

USER_AGENT = "GitHub-Hookshot/sandbox"


def signature_256(secret: str | bytes, body: bytes) -> str:
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def signature_1(secret: str | bytes, body: bytes) -> str:
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha1=" + hmac.new(key, body, hashlib.sha1).hexdigest()


@dataclass(slots=True)
class Delivery:
    id: int
    guid: str
    event: str
    action: str | None
    installation_id: int | None
    repository_id: int | None
    body: bytes
    url: str
    redelivery: bool
    delivered_at: datetime
    headers: dict[str, str] = field(default_factory=dict)
    duration: float = 0.0
    status: str = "pending"
    status_code: int = 0
    response_body: str = ""

    def item(self) -> dict[str, Any]:
        """The ``hook-delivery-item`` of GitHub's API."""
        return {
            "id": self.id,
            "guid": self.guid,
            "delivered_at": iso(self.delivered_at),
            "redelivery": self.redelivery,
            "duration": round(self.duration, 3),
            "status": self.status,
            "status_code": self.status_code,
            "event": self.event,
            "action": self.action,
            "installation_id": self.installation_id,
            "repository_id": self.repository_id,
            "throttled_at": None,
        }

    def detail(self) -> dict[str, Any]:
        return {
            **self.item(),
            "url": self.url,
            "request": {"headers": dict(self.headers), "payload": json.loads(self.body)},
            "response": {"headers": {}, "payload": self.response_body},
        }


@dataclass(frozen=True, slots=True)
class _Job:
    guid: str
    event: str
    action: str | None
    installation_id: int | None
    repository_id: int | None
    body: bytes
    redelivery: bool


def delivery_headers(app: App, job: _Job) -> dict[str, str]:
    """The headers GitHub sends with one attempt of ``job``, signed with ``app``'s secret."""
    return {
        "Accept": "*/*",
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-GitHub-Delivery": job.guid,
        "X-GitHub-Event": job.event,
        "X-GitHub-Hook-ID": str(app.hook_id),
        "X-GitHub-Hook-Installation-Target-ID": str(app.id),
        "X-GitHub-Hook-Installation-Target-Type": "integration",
        "X-Hub-Signature": signature_1(app.webhook_secret, job.body),
        "X-Hub-Signature-256": signature_256(app.webhook_secret, job.body),
    }


def again(delivery: Delivery) -> _Job:
    """A redelivery of ``delivery``: the same body and GUID, as a new attempt."""
    return _Job(
        delivery.guid,
        delivery.event,
        delivery.action,
        delivery.installation_id,
        delivery.repository_id,
        delivery.body,
        True,
    )


class WebhookSender:
    """Delivers one App's webhooks from background threads.

    ``senders`` threads take the deliveries in turn: with one (the default) they reach
    the App one at a time, in the order of their events; with more, several are in
    flight at once and may arrive out of order, as GitHub sends them.
    """

    def __init__(
        self, state: State, app: App, faults: Faults, *, timeout: float = 10.0, senders: int = 1
    ) -> None:
        self.state = state
        self.app = app
        self.faults = faults
        self.timeout = timeout
        self.senders = max(1, senders)
        self.dropped: list[Event] = []
        self._deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._client: httpx.Client | None = None
        self._next_id = 100000

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        if not self._threads:
            import httpx  # noqa: PLC0415  # imported late: it is slow to import, and only sending needs it

            limits = httpx.Limits(
                max_connections=self.senders, max_keepalive_connections=self.senders
            )
            self._client = httpx.Client(timeout=self.timeout, trust_env=False, limits=limits)
            for n in range(self.senders):
                thread = threading.Thread(
                    target=self._run, name=f"sandbox-webhooks-{n}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def stop(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=self.timeout + 2)
        self._threads = []
        if self._client is not None:
            self._client.close()
            self._client = None

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Waits until every queued delivery was attempted; True if it got there in time."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    # -- intake --------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if self.app.webhook_url is None or (
            event.installation_id is not None
            and self.state.installations[event.installation_id].app_id != self.app.id
        ):
            return
        if self.faults.drops_webhook(event.name, event.action):
            self.dropped.append(event)
            return
        body = json.dumps(event.payload, separators=(",", ":")).encode()
        self._queue.put(
            _Job(
                str(uuid.uuid4()),
                event.name,
                event.action,
                event.installation_id,
                event.repository_id,
                body,
                False,
            )
        )

    def redeliver(self, delivery_id: int) -> Delivery | None:
        with self._lock:
            found = next((d for d in self._deliveries if d.id == delivery_id), None)
        if found is None:
            return None
        self._queue.put(again(found))
        return found

    # -- reading -------------------------------------------------------------------------

    def deliveries(self) -> list[Delivery]:
        with self._lock:
            return list(self._deliveries)

    def get(self, delivery_id: int) -> Delivery | None:
        with self._lock:
            return next((d for d in self._deliveries if d.id == delivery_id), None)

    # -- sending -------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                self._attempt(job)
            finally:
                self._queue.task_done()

    def _attempt(self, job: _Job) -> None:
        url = self.app.webhook_url
        if url is None:
            return
        headers = delivery_headers(self.app, job)
        with self._lock:
            self._next_id += 1
            delivery_id = self._next_id
        delivery = Delivery(
            id=delivery_id,
            guid=job.guid,
            event=job.event,
            action=job.action,
            installation_id=job.installation_id,
            repository_id=job.repository_id,
            body=job.body,
            url=url,
            redelivery=job.redelivery,
            delivered_at=self.state.now(),
            headers=headers,
        )
        started = time.monotonic()
        assert self._client is not None  # noqa: S101  # set by start()
        import httpx  # noqa: PLC0415  # already imported by start()

        try:
            answer = self._client.post(url, content=job.body, headers=headers)
        except httpx.TimeoutException:
            delivery.status = "timed out"
        except httpx.HTTPError:
            delivery.status = "failed to connect to host"
        else:
            delivery.status_code = answer.status_code
            delivery.status = (
                "OK" if answer.is_success else f"Invalid HTTP Response: {answer.status_code}"
            )
            delivery.response_body = answer.text[:2000]
        delivery.duration = time.monotonic() - started
        with self._lock:
            self._deliveries.append(delivery)
