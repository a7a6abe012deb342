"""Signed card links: ``/cards/<token>`` opens a card and takes its answer for 7 days.

The token is ``<card>.<expiry>.<scope>.<mac>`` in URL-safe form; the MAC is HMAC-SHA256
with a key derived from ``master.key`` for this purpose only, so a leaked link key does
not reveal the master key and links can be revoked by rotating ``master.key``.

- ``scope`` is ``a`` (the link answers) or ``v`` (it only shows the card). A link posted
  where anyone may read it (a comment on GitHub, whose readers may lack write access)
  shows the card only: there, answers are ``/answer`` comments, whose author's access
  GitHub is asked about.
- The MAC also covers when the card was opened, which the link does not carry: card ids
  restart in a ledger restored from a backup, and a link to the old ``c7`` answered the
  new one.

A link is as strong as ``master.key``: :func:`check_master_key` refuses a key shorter
than :data:`MIN_KEY_BYTES` or made of a handful of repeated characters, and
:class:`CardLinks` will not be built on one. ``autoloop init`` writes 32 random bytes
(64 hex digits).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable

from kernel.records import Card

LINK_TTL_S = 7 * 24 * 3600
MIN_KEY_BYTES = 32
MIN_DISTINCT_BYTES = 8


class WeakKeyError(ValueError):
    """A master key too short or too regular to sign anything; ``str()`` says why."""


def check_master_key(key: bytes) -> bytes:
    """``key`` itself when it is strong enough to derive link and turn keys from."""
    if len(key) < MIN_KEY_BYTES:
        raise WeakKeyError(
            f"the key has {len(key)} bytes; it needs at least {MIN_KEY_BYTES} random bytes"
        )
    if len(set(key)) < MIN_DISTINCT_BYTES:
        raise WeakKeyError(
            f"the key uses only {len(set(key))} distinct characters; it must be random"
        )
    return key


def derive(master: bytes, purpose: str) -> bytes:
    return hmac.new(master, f"autoloop/{purpose}".encode(), hashlib.sha256).digest()


#: where a ledger keeps the fingerprint of the key its card links are signed with
LINKS_KEY_INFO = "links-key"
#: where a shared ledger keeps the version of the rules its last started process read
RULES_INFO = "rules-version"


def key_fingerprint(master: bytes) -> str:
    """Twelve hex digits that tell two master keys apart and reveal nothing of either:
    the servers sharing a ledger must sign card links with the same key."""
    return derive(master, "fingerprint")[:6].hex()


class CardLinks:
    def __init__(
        self, master: bytes, *, base_url: str = "", now: Callable[[], float] = time.time
    ) -> None:
        self.key = derive(check_master_key(master), "card-links")
        self.base_url = base_url.rstrip("/")
        self.now = now

    def _mac(self, body: str) -> str:
        digest = hmac.new(self.key, body.encode(), hashlib.sha256).digest()[:18]
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def token(self, card: str | Card, *, ttl_s: int = LINK_TTL_S, answer: bool = True) -> str:
        """A token for ``card`` (a record: its id and when it was opened; an id: a card
        opened at no known time)."""
        ident, opened = (card.id, card.opened_at) if isinstance(card, Card) else (card, "")
        body = f"{ident}.{int(self.now()) + ttl_s}.{'a' if answer else 'v'}"
        return f"{body}.{self._mac(f'{body}.{opened}')}"

    def url(self, card: str | Card, *, answer: bool = True) -> str:
        return f"{self.base_url}/cards/{self.token(card, answer=answer)}"

    @staticmethod
    def card_of(token: str) -> str | None:
        """The card id a token names, not checked yet (:meth:`grant` checks it): None for
        one with a character no token has (a NUL reached PostgreSQL, which refused it)."""
        parts = token.split(".")
        ok = len(parts) == 4 and token.isascii() and token.isprintable()
        return parts[0] if ok else None

    def grant(self, token: str, opened_at: str = "") -> tuple[str, bool] | None:
        """(card id, whether the link answers) of a valid, unexpired token for the card
        opened at ``opened_at``; None otherwise."""
        if not token.isascii():  # compare_digest refuses non-ASCII str: no valid token has any
            return None
        parts = token.split(".")
        if len(parts) != 4:
            return None
        card, expiry, scope, mac = parts
        want = self._mac(f"{card}.{expiry}.{scope}.{opened_at}")
        if not hmac.compare_digest(mac.encode(), want.encode()):
            return None
        if not expiry.isdigit() or int(expiry) < self.now() or scope not in ("a", "v"):
            return None
        return card, scope == "a"

    def verify(self, token: str, opened_at: str = "") -> str | None:
        """The card id of a valid, unexpired token; None otherwise."""
        found = self.grant(token, opened_at)
        return found[0] if found is not None else None
