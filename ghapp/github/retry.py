"""The one retry policy for calls to GitHub, and how an error answer becomes an exception.

Reads (GET, HEAD, and calls the caller marks ``idempotent``) are retried on
transient failures: a 5xx answer, no answer at all (connection error, timeout),
and rate limits. Writes are never resent blindly: a write whose outcome is unknown
(no answer, or a 5xx answer: the change may or may not have been applied) raises
:class:`AmbiguousWrite`, and the caller reconciles by reading GitHub back. The one
write that is retried is a rate-limited one: GitHub documents that it refused the
request, so sending it again after the wait cannot apply it twice.

Rate limits (GitHub's "Rate limits for the REST API"): a 429, or a 403 with
``retry-after`` or with ``x-ratelimit-remaining: 0``. The wait is ``retry-after``
seconds, else the time until ``x-ratelimit-reset``, else one minute. A wait longer
than :attr:`Policy.max_wait_s` is not slept: :class:`RateLimited` is raised at once
with ``retry_after_s`` so the caller can schedule a later attempt instead.

Tests call :func:`set_testing` to make every wait a no-op (the computed waits are
still passed to an injected ``sleep`` when there is one).

The errors those calls raise are :mod:`ghapp.github.errors` (re-exported here).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import tenacity

from ghapp.github.errors import (
    AmbiguousWrite,
    Conflict,
    Forbidden,
    GitHubError,
    NotFound,
    RateLimited,
    ServerError,
    Unauthorized,
    Unprocessable,
    Unreachable,
)
from ghapp.github.sansio import parse_rate_limit

__all__ = [
    "DEFAULT_POLICY",
    "SAFE_METHODS",
    "AmbiguousWrite",
    "Conflict",
    "Forbidden",
    "GitHubError",
    "NotFound",
    "Policy",
    "RateLimited",
    "ServerError",
    "Unauthorized",
    "Unprocessable",
    "Unreachable",
    "call",
    "error_for",
    "set_testing",
]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_RATE_LIMIT_WAIT_S = 60.0  # GitHub: "wait for at least one minute" without headers


# ---------------------------------------------------------------------- error answers

_BY_STATUS: dict[int, type[GitHubError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: Unprocessable,
}


def _body(response: httpx.Response) -> tuple[str, str | None]:
    """GitHub's ``message`` and ``documentation_url``, leniently."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict):
        message = data.get("message")
        doc = data.get("documentation_url")
        errors = data.get("errors")
        text = message if isinstance(message, str) and message else response.reason_phrase
        if isinstance(errors, list) and errors:
            details: list[str] = []
            for item in errors:
                detail = item.get("message") or item.get("code") if isinstance(item, dict) else None
                if isinstance(detail, str):
                    details.append(detail)
            if details:
                text = f"{text} ({'; '.join(details)})"
        return text, doc if isinstance(doc, str) else None
    text = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
    return text or response.reason_phrase or "error", None


def _rate_limit_wait(response: httpx.Response, message: str, now: float) -> float | None:
    """Seconds to wait if ``response`` is a rate-limit refusal, else None."""
    if response.status_code not in (403, 429):
        return None
    limit = parse_rate_limit(response.headers)
    wait = limit.wait_s(now)
    if wait is not None:
        return wait
    if response.status_code == 429 or "rate limit" in message.lower():
        return DEFAULT_RATE_LIMIT_WAIT_S
    return None


def error_for(
    method: str, url: str, response: httpx.Response, *, safe: bool, now: float
) -> GitHubError:
    """The exception an error ``response`` stands for (pure)."""
    message, doc = _body(response)
    kw: dict[str, Any] = {
        "status": response.status_code,
        "documentation_url": doc,
        "method": method,
        "url": url,
    }
    wait = _rate_limit_wait(response, message, now)
    if wait is not None:
        return RateLimited(message, retry_after_s=wait, **kw)
    if response.status_code >= 500:
        if safe:
            return ServerError(message, **kw)
        return AmbiguousWrite(f"{message}; the write may or may not have been applied", **kw)
    return _BY_STATUS.get(response.status_code, GitHubError)(message, **kw)


# --------------------------------------------------------------------------- policy


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    attempts: int = 4  # tries in all, the first included
    max_wait_s: float = 60.0  # longest rate-limit wait we sleep through
    backoff_s: float = 0.5  # first pause after a 5xx or a lost answer; doubles
    max_backoff_s: float = 8.0


DEFAULT_POLICY = Policy()

_testing = False


def set_testing(on: bool) -> None:
    """Tests: make every wait a no-op (an injected ``sleep`` still sees the waits)."""
    global _testing  # noqa: PLW0603 - one process-wide test switch, as in stamina
    _testing = on


def _default_sleep(seconds: float) -> None:
    if not _testing:
        time.sleep(seconds)


def _retryable(exc: BaseException, safe: bool, policy: Policy) -> bool:
    if isinstance(exc, RateLimited):
        return exc.retry_after_s <= policy.max_wait_s
    return safe and isinstance(exc, ServerError | Unreachable)


def _wait(state: tenacity.RetryCallState, policy: Policy) -> float:
    exc = state.outcome.exception() if state.outcome is not None else None
    if isinstance(exc, RateLimited):
        return min(exc.retry_after_s, policy.max_wait_s)
    backoff: float = policy.backoff_s * 2 ** (state.attempt_number - 1)
    return min(backoff, policy.max_backoff_s)


def call(
    method: str,
    url: str,
    send: Callable[[], httpx.Response],
    *,
    policy: Policy = DEFAULT_POLICY,
    idempotent: bool | None = None,
    now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] | None = None,
) -> httpx.Response:
    """Run ``send`` under the policy; return a successful response or raise a GitHubError.

    ``send`` performs one HTTP exchange and returns the response whatever its status,
    or raises ``httpx.TransportError`` when no answer came. ``idempotent`` marks a
    non-GET call that is safe to repeat (default: GET/HEAD/OPTIONS only).
    """
    method = method.upper()
    safe = method in SAFE_METHODS if idempotent is None else idempotent

    def once() -> httpx.Response:
        try:
            response = send()
        except httpx.TransportError as exc:
            reason = f"no answer ({type(exc).__name__}: {exc})"
            if safe:
                raise Unreachable(reason, cause=exc, method=method, url=url) from exc
            raise AmbiguousWrite(
                f"{reason}; the write may or may not have been applied",
                cause=exc,
                method=method,
                url=url,
            ) from exc
        if response.request.method.upper() != method and response.history:
            # httpx turns a redirected POST into a GET: the write was not made.
            raise GitHubError(
                "moved: the resource has a new address; update the repository name",
                status=response.history[0].status_code,
                method=method,
                url=url,
            )
        if response.is_error:
            raise error_for(method, url, response, safe=safe, now=now())
        return response

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(policy.attempts),
        wait=lambda state: _wait(state, policy),
        retry=tenacity.retry_if_exception(lambda exc: _retryable(exc, safe, policy)),
        sleep=sleep or _default_sleep,
        reraise=True,
    )
    response: httpx.Response = retrying(once)
    return response
