"""Signed card links: ``/cards/<token>`` opens a card and takes its answer for 7 days.

The token is ``<card>.<expiry>.<mac>`` in URL-safe form; the MAC is HMAC-SHA256 with a
key derived from ``master.key`` for this purpose only, so a leaked link key does not
reveal the master key and links can be revoked by rotating ``master.key``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable

LINK_TTL_S = 7 * 24 * 3600


def derive(master: bytes, purpose: str) -> bytes:
    return hmac.new(master, f"autoloop/{purpose}".encode(), hashlib.sha256).digest()


class CardLinks:
    def __init__(
        self, master: bytes, *, base_url: str = "", now: Callable[[], float] = time.time
    ) -> None:
        self.key = derive(master, "card-links")
        self.base_url = base_url.rstrip("/")
        self.now = now

    def _mac(self, body: str) -> str:
        digest = hmac.new(self.key, body.encode(), hashlib.sha256).digest()[:18]
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def token(self, card: str, *, ttl_s: int = LINK_TTL_S) -> str:
        body = f"{card}.{int(self.now()) + ttl_s}"
        return f"{body}.{self._mac(body)}"

    def url(self, card: str) -> str:
        return f"{self.base_url}/cards/{self.token(card)}"

    def verify(self, token: str) -> str | None:
        """The card id of a valid, unexpired token; None otherwise."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        card, expiry, mac = parts
        if not hmac.compare_digest(mac, self._mac(f"{card}.{expiry}")):
            return None
        if not expiry.isdigit() or int(expiry) < self.now():
            return None
        return card
