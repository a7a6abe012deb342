"""GitHub App authentication: the App's JWT, and cached installation tokens.

GitHub's documented scheme ("Authenticating as a GitHub App"):

- The App signs a JWT with its private key (RS256) with ``iss`` = the App id,
  ``iat`` 60 s in the past (clock skew) and ``exp`` at most 10 minutes ahead; we
  use 9 minutes.
- With that JWT it asks ``POST /app/installations/{id}/access_tokens`` for an
  installation token valid one hour (``expires_at``), and uses it for repository
  calls. ``GET /repos/{owner}/{repo}/installation`` says which installation
  covers a repository.

This module holds no HTTP code: the client passes in the functions that make the
exchange, and the clock, so tests run without a network and without sleeping.
Caches are thread-safe; two threads needing the same missing token make one
exchange.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

import jwt
from jwt.algorithms import RSAAlgorithm

__all__ = [
    "AppJWT",
    "InstallationToken",
    "InstallationTokens",
    "RepoInstallations",
    "app_jwt",
    "parse_installation_token",
    "signing_key",
]

JWT_BACKDATE_S = 60
JWT_LIFETIME_S = 9 * 60
REFRESH_BEFORE_S = 5 * 60

K = TypeVar("K")
V = TypeVar("V")


def app_jwt(app_id: int, private_key: Any, *, now: float) -> str:
    """A JWT that authenticates as the App itself (``private_key``: PEM text, or the key
    parsed by :func:`signing_key`)."""
    issued = int(now)
    claims = {"iat": issued - JWT_BACKDATE_S, "exp": issued + JWT_LIFETIME_S, "iss": str(app_id)}
    return jwt.encode(claims, private_key, algorithm="RS256")


def signing_key(private_key: str) -> Any:
    """The App's PEM private key, parsed (about 50 ms for an RSA key: once, not per JWT)."""
    return RSAAlgorithm(RSAAlgorithm.SHA256).prepare_key(private_key)


class AppJWT:
    """The App's JWT, minted again once less than a minute of it is left, or when the
    clock went back before the time it was minted at (a clock set right after running
    ahead: the kept JWT was issued in GitHub's future, and GitHub refuses it until then),
    or after :meth:`invalidate` (GitHub refused it). The key is parsed on the first mint
    and kept."""

    def __init__(
        self, app_id: int, private_key: str, *, now: Callable[[], float] = time.time
    ) -> None:
        self.app_id = app_id
        self._key = private_key
        self._parsed: Any = None
        self._now = now
        self._lock = threading.Lock()
        self._token: str | None = None
        self._issued = 0.0
        self._expires = 0.0

    def token(self) -> str:
        with self._lock:
            now = self._now()
            if self._token is None or now >= self._expires - 60 or now < self._issued:
                if self._parsed is None:
                    self._parsed = signing_key(self._key)
                self._token = app_jwt(self.app_id, self._parsed, now=now)
                self._issued = int(now)
                self._expires = int(now) + JWT_LIFETIME_S
            return self._token

    def invalidate(self) -> None:
        """GitHub refused the JWT (401): the next call mints a new one."""
        with self._lock:
            self._token = None


@dataclass(frozen=True, slots=True, kw_only=True)
class InstallationToken:
    token: str
    expires_at: float  # epoch seconds
    permissions: Mapping[str, str] = field(default_factory=dict)


def parse_installation_token(data: Mapping[str, Any]) -> InstallationToken:
    """Read the answer of ``POST /app/installations/{id}/access_tokens``."""
    token, expires = data.get("token"), data.get("expires_at")
    if not isinstance(token, str) or not token or not isinstance(expires, str):
        raise ValueError("the access token answer has no 'token' or 'expires_at'")
    moment = datetime.fromisoformat(expires.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"'expires_at' has no time zone: {expires!r}")
    perms = data.get("permissions")
    permissions = {str(k): str(v) for k, v in perms.items()} if isinstance(perms, Mapping) else {}
    return InstallationToken(token=token, expires_at=moment.timestamp(), permissions=permissions)


class _KeyedCache(Generic[K, V]):
    """A thread-safe map filled on demand; one fill per key at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[K, V] = {}
        self._key_locks: dict[K, threading.Lock] = {}

    def get(self, key: K, fresh: Callable[[V], bool], fill: Callable[[], V]) -> V:
        with self._lock:
            value = self._values.get(key)
            if value is not None and fresh(value):
                return value
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                value = self._values.get(key)
            if value is not None and fresh(value):
                return value  # another thread filled it while we waited
            value = fill()
            with self._lock:
                self._values[key] = value
            return value

    def drop(self, key: K) -> None:
        with self._lock:
            self._values.pop(key, None)


class InstallationTokens:
    """Installation tokens by installation id, renewed ``refresh_before_s`` before expiry.

    ``exchange(installation_id)`` makes the HTTP call and returns the new token.
    """

    def __init__(
        self,
        exchange: Callable[[int], InstallationToken],
        *,
        now: Callable[[], float] = time.time,
        refresh_before_s: float = REFRESH_BEFORE_S,
    ) -> None:
        self._exchange = exchange
        self._now = now
        self._margin = refresh_before_s
        self._cache: _KeyedCache[int, InstallationToken] = _KeyedCache()

    def get(self, installation_id: int) -> str:
        def fresh(tok: InstallationToken) -> bool:
            return self._now() < tok.expires_at - self._margin

        return self._cache.get(
            installation_id, fresh, lambda: self._exchange(installation_id)
        ).token

    def invalidate(self, installation_id: int) -> None:
        """Forget a token GitHub refused (revoked, or the installation changed)."""
        self._cache.drop(installation_id)


class RepoInstallations:
    """Which installation covers ``owner/repo``; looked up once, then remembered."""

    def __init__(self, lookup: Callable[[str], int]) -> None:
        self._lookup = lookup
        self._cache: _KeyedCache[str, int] = _KeyedCache()

    def get(self, repo: str) -> int:
        key = repo.lower()  # GitHub names are case-insensitive
        return self._cache.get(key, lambda _: True, lambda: self._lookup(repo))

    def invalidate(self, repo: str) -> None:
        self._cache.drop(repo.lower())
