"""Fault injection: make the sandbox misbehave the way GitHub and networks do.

Kinds (``FaultRule.kind``):

==================  ==========================================================================
``response_lost``   the write is applied, then the connection is closed without an answer
                    (the client sees a network error such as "Server disconnected")
``response_lost_502``  the write is applied, then the answer is a 502 instead of the real one
``error_502``       502 Bad Gateway before anything is applied
``rate_limit``      403 secondary rate limit with ``retry-after``, nothing applied
``latency``         the answer is delayed by ``delay`` seconds
``webhook_drop``    a webhook is not sent (``path`` matches ``event`` or ``event.action``)
==================  ==========================================================================

A rule matches by method (``*`` for any) and an fnmatch pattern on the path. ``times=N``
fires on the first N matching attempts only; ``times=None`` fires on every attempt;
``probability`` below 1 fires at random from the seeded generator (reproducible).
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import random
import threading
from dataclasses import asdict, dataclass
from typing import Any

from fakegithub.errors import SandboxError

KINDS = (
    "response_lost",
    "response_lost_502",
    "error_502",
    "rate_limit",
    "latency",
    "webhook_drop",
)
SECONDARY_RATE_LIMIT = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
)


@dataclass(slots=True)
class FaultRule:
    id: int
    kind: str
    method: str = "*"
    path: str = "*"
    times: int | None = 1
    probability: float = 1.0
    delay: float = 0.0
    retry_after: int = 60
    hits: int = 0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.hits >= self.times


class Faults:
    def __init__(self, seed: int | None = None) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._rng = random.Random(seed)  # noqa: S311  # reproducible chaos, not security
        self._next = 0

    def seed(self, seed: int) -> None:
        with self._lock:
            self._rng = random.Random(seed)  # noqa: S311  # as above

    def add(
        self,
        kind: str,
        *,
        method: str = "*",
        path: str = "*",
        times: int | None = 1,
        probability: float = 1.0,
        delay: float = 0.0,
        retry_after: int = 60,
    ) -> FaultRule:
        if kind not in KINDS:
            raise SandboxError(f"unknown fault kind {kind!r}; use one of {', '.join(KINDS)}")
        if times is not None and times < 1:
            raise SandboxError("times must be 1 or more, or null for every attempt")
        if not 0 < probability <= 1:
            raise SandboxError("probability must be in (0, 1]")
        with self._lock:
            self._next += 1
            rule = FaultRule(
                self._next, kind, method.upper(), path, times, probability, delay, retry_after
            )
            self._rules.append(rule)
            return rule

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def rules(self) -> list[FaultRule]:
        with self._lock:
            return list(self._rules)

    def pick(self, method: str, path: str, *, webhook: bool = False) -> FaultRule | None:
        """The rule that fires for this attempt, if any (counting the attempt)."""
        with self._lock:
            for rule in self._rules:
                if (rule.kind == "webhook_drop") != webhook or rule.exhausted:
                    continue
                if rule.method not in {"*", method.upper()}:
                    continue
                if not fnmatch.fnmatchcase(path, rule.path):
                    continue
                if rule.probability < 1 and self._rng.random() >= rule.probability:
                    continue
                rule.hits += 1
                return rule
        return None

    def drops_webhook(self, event: str, action: str | None) -> bool:
        name = f"{event}.{action}" if action else event
        rule = self.pick("*", name, webhook=True)
        if rule is None and action:
            rule = self.pick("*", event, webhook=True)
        return rule is not None


Scope = dict[str, Any]


async def _answer(send: Any, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
    raw = json.dumps(body).encode()
    all_headers = [(b"content-type", b"application/json; charset=utf-8")]
    all_headers += [(k.encode(), v.encode()) for k, v in headers.items()]
    all_headers.append((b"content-length", str(len(raw)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": raw})


def _close_connection(send: Any) -> bool:
    """Closes the client's connection without an answer; False if the server won't let us."""
    cycle = getattr(send, "__self__", None)
    transport = getattr(cycle, "transport", None)
    if transport is None:
        return False
    transport.close()
    cycle.disconnected = True  # type: ignore[union-attr]  # uvicorn's cycle: skip its 500
    return True


class FaultMiddleware:
    """ASGI middleware applying :class:`Faults` to the REST API (never to ``/_sandbox/``)."""

    def __init__(self, app: Any, faults: Faults, docs_url: Any) -> None:
        self.app = app
        self.faults = faults
        self.docs_url = docs_url

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path.startswith("/_sandbox"):
            await self.app(scope, receive, send)
            return
        rule = self.faults.pick(scope["method"], path)
        if rule is None:
            await self.app(scope, receive, send)
            return
        doc = f"{self.docs_url()}/_sandbox/docs"
        if rule.kind == "latency":
            await asyncio.sleep(rule.delay)
            await self.app(scope, receive, send)
        elif rule.kind == "error_502":
            await _answer(send, 502, {"message": "Server Error", "documentation_url": doc}, {})
        elif rule.kind == "rate_limit":
            await _answer(
                send,
                403,
                {"message": SECONDARY_RATE_LIMIT, "documentation_url": f"{doc}/rate-limits"},
                {"retry-after": str(rule.retry_after), "x-ratelimit-remaining": "4999"},
            )
        else:

            async def swallow(message: Any) -> None:
                return None

            await self.app(scope, receive, swallow)
            if rule.kind == "response_lost" and _close_connection(send):
                await asyncio.sleep(0)
                return
            await _answer(send, 502, {"message": "Server Error", "documentation_url": doc}, {})
