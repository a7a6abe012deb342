"""What delivery reads may remember between snapshots, per process and GitHub.

Facts about commits never change (a commit's parents, whether one commit holds
another), so they are kept for good; people's permissions are kept for a short while.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping

from ghapp.github.client import GitHubClient
from ghapp.github.errors import NotFound, Unprocessable

__all__ = ["CACHE_SIZE", "CONTAINS", "DEFAULT_CACHE", "PERMISSION_TTL_S", "ReadCache"]

PERMISSION_TTL_S = 300.0
CACHE_SIZE = 4096
CONTAINS = frozenset({"identical", "ahead"})  # compare base...head: the head holds the base


class ReadCache:
    """What snapshots may remember, per process and GitHub: facts about commits (their
    parents, whether one contains another) for good, and people's permissions for a
    short while. Thread-safe; the oldest entries go first past ``size``."""

    def __init__(
        self,
        *,
        permission_ttl_s: float = PERMISSION_TTL_S,
        size: int = CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.permission_ttl_s = permission_ttl_s
        self.size = size
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[float | None, object]] = OrderedDict()

    def _get(self, key: Hashable) -> tuple[bool, object]:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return False, None
            expires, value = found
            if expires is not None and expires <= self._clock():
                del self._entries[key]
                return False, None
            return True, value

    def _put(self, key: Hashable, value: object, ttl_s: float | None) -> None:
        with self._lock:
            expires = None if ttl_s is None else self._clock() + ttl_s
            self._entries[key] = (expires, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def permission(self, client: GitHubClient, repo: str, login: str) -> str:
        key = ("permission", client.base_url, repo.lower(), login.lower())
        hit, value = self._get(key)
        if hit and isinstance(value, str):
            return value
        found = client.get_collaborator_permission(repo, login)
        self._put(key, found, self.permission_ttl_s)
        return found

    def parents(self, client: GitHubClient, repo: str, sha: str) -> tuple[str, ...]:
        key = ("parents", client.base_url, repo.lower(), sha)
        hit, value = self._get(key)
        if hit and isinstance(value, tuple):
            return value
        commit = client.get_commit(repo, sha)
        parents = commit.get("parents")
        found = (
            tuple(_text(p, "sha") for p in parents if _text(p, "sha"))
            if isinstance(parents, list)
            else ()
        )
        if _text(commit, "sha") == sha:  # only an answer about this very commit is kept
            self._put(key, found, None)
        return found

    def compare_status(self, client: GitHubClient, repo: str, base: str, head: str) -> str:
        """GitHub's compare ``status`` of two commits (identical, ahead, behind, diverged),
        "" when GitHub knows no such commit. Only for shas: branch names move."""
        key = ("compare", client.base_url, repo.lower(), base, head)
        hit, value = self._get(key)
        if hit and isinstance(value, str):
            return value
        try:
            status = _text(client.compare(repo, base, head), "status")
        except (NotFound, Unprocessable):
            return ""
        if status:
            self._put(key, status, None)
        return status


DEFAULT_CACHE = ReadCache()


def _text(data: object, key: str) -> str:
    value = data.get(key) if isinstance(data, Mapping) else None
    return value if isinstance(value, str) else ""
