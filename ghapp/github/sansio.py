"""GitHub's wire conventions, without I/O: webhook signatures, headers, rate limits.

Everything here is a pure function of bytes and headers (the gidgethub ``sansio``
idea): the webhook endpoint and the HTTP client both use it, and tests need no
network and no mocks.

Facts used (GitHub's documentation, "Validating webhook deliveries" and "Rate limits
for the REST API"):

- ``X-Hub-Signature-256`` is ``sha256=`` followed by the hex HMAC-SHA256 of the raw
  request body keyed with the webhook secret; compare it in constant time.
- ``X-GitHub-Event`` names the event, ``X-GitHub-Delivery`` is a unique id per
  delivery (the same id when a delivery is redelivered).
- ``x-ratelimit-remaining`` / ``x-ratelimit-reset`` (epoch seconds) describe the
  primary rate limit; ``retry-after`` (seconds) comes with secondary limits.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "HOOK_ID_HEADER",
    "SIGNATURE_HEADER",
    "TARGET_ID_HEADER",
    "TARGET_TYPE_HEADER",
    "WEBHOOK_HEADERS",
    "RateLimit",
    "WebhookHeaders",
    "parse_rate_limit",
    "parse_webhook_headers",
    "sign",
    "signature_of",
    "verify_signature",
]

EVENT_HEADER = "X-GitHub-Event"
DELIVERY_HEADER = "X-GitHub-Delivery"
SIGNATURE_HEADER = "X-Hub-Signature-256"
HOOK_ID_HEADER = "X-GitHub-Hook-ID"
TARGET_TYPE_HEADER = "X-GitHub-Hook-Installation-Target-Type"
TARGET_ID_HEADER = "X-GitHub-Hook-Installation-Target-ID"

#: The headers GitHub sends with every webhook delivery that we read.
WEBHOOK_HEADERS: tuple[str, ...] = (
    EVENT_HEADER,
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    HOOK_ID_HEADER,
    TARGET_TYPE_HEADER,
    TARGET_ID_HEADER,
)

_PREFIX = "sha256="
_HEX_LEN = 64


def sign(secret: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub would send for ``body``."""
    return _PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """True only if ``header`` is a well-formed signature of ``body`` under ``secret``
    (see :func:`signature_of`)."""
    return signature_of(secret, body, header) is not None


def signature_of(secret: bytes, body: bytes, header: str | None) -> bytes | None:
    """The 32 bytes of ``header`` when it is a well-formed signature of ``body`` under
    ``secret`` (its HMAC-SHA256), else None.

    A missing, empty or malformed header is simply None; the comparison of the
    digests is constant-time. An empty secret never verifies anything (it would let
    anyone sign).
    """
    if not secret or not header:
        return None
    value = header.strip()
    if not value.lower().startswith(_PREFIX):
        return None
    digest = value[len(_PREFIX) :]
    if len(digest) != _HEX_LEN or not digest.isascii():
        return None
    try:
        given = bytes.fromhex(digest)  # either case; spaces inside make it 63 bytes or less
    except ValueError:
        return None
    if len(given) != _HEX_LEN // 2:
        return None
    return given if hmac.compare_digest(hmac.digest(secret, body, "sha256"), given) else None


def _get(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup over any mapping (httpx and starlette headers
    are already case-insensitive; a plain dict may not be)."""
    value = headers.get(name)
    if value is None:
        value = headers.get(name.lower())
    if value is None:
        lowered = name.lower()
        for key, candidate in headers.items():
            if key.lower() == lowered:
                value = candidate
                break
    return None if value is None else str(value).strip()


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookHeaders:
    """The parts of a webhook delivery's headers we act on; absent ones are None."""

    event: str | None
    delivery: str | None
    signature: str | None
    hook_id: str | None = None
    target_type: str | None = None
    target_id: str | None = None


def parse_webhook_headers(headers: Mapping[str, str]) -> WebhookHeaders:
    def opt(name: str) -> str | None:
        value = _get(headers, name)
        return value or None

    return WebhookHeaders(
        event=opt(EVENT_HEADER),
        delivery=opt(DELIVERY_HEADER),
        signature=opt(SIGNATURE_HEADER),
        hook_id=opt(HOOK_ID_HEADER),
        target_type=opt(TARGET_TYPE_HEADER),
        target_id=opt(TARGET_ID_HEADER),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimit:
    """What a response says about rate limits; None where a header is absent or bad."""

    limit: int | None = None
    remaining: int | None = None
    reset: int | None = None  # epoch seconds when the window resets
    retry_after: float | None = None  # seconds to wait (secondary limits)
    resource: str | None = None

    @property
    def exhausted(self) -> bool:
        return self.remaining == 0

    def wait_s(self, now: float) -> float | None:
        """Seconds to wait before trying again, or None if the headers do not say.

        ``retry-after`` wins; otherwise an exhausted window waits until its reset.
        """
        if self.retry_after is not None:
            return self.retry_after
        if self.exhausted and self.reset is not None:
            return max(0.0, self.reset - now)
        return None


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def parse_rate_limit(headers: Mapping[str, str]) -> RateLimit:
    """Read the rate-limit headers leniently: a malformed value counts as absent."""
    retry_after: float | None = None
    raw = _get(headers, "retry-after")
    if raw is not None:
        seconds = _int(raw)
        if seconds is not None and seconds >= 0:
            retry_after = float(seconds)
    return RateLimit(
        limit=_int(_get(headers, "x-ratelimit-limit")),
        remaining=_int(_get(headers, "x-ratelimit-remaining")),
        reset=_int(_get(headers, "x-ratelimit-reset")),
        retry_after=retry_after,
        resource=_get(headers, "x-ratelimit-resource") or None,
    )
