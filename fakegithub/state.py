"""The world state of the sandbox GitHub: every record, one lock, one clock, one id counter.

All reads and writes of records happen under ``state.lock`` (a re-entrant lock, because the
HTTP server's thread and a test's thread both change the world). Every state change
publishes an :class:`Event` to the listeners: the webhook sender, the scripted world, and
the in-memory event log that tests read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fakegithub.errors import not_found
from fakegithub.model import App, Installation, ManifestCode, Repo, User


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    """GitHub's timestamp format: UTC, whole seconds, a trailing Z."""
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Actor:
    """Who does something: a user, or an app's bot acting through an installation token."""

    login: str
    app_id: int | None = None
    installation_id: int | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """One webhook-worthy change, with the payload GitHub would send for it."""

    name: str
    action: str | None
    payload: dict[str, Any]
    repository_id: int | None
    installation_id: int | None


@dataclass(slots=True)
class State:
    clock: Callable[[], datetime] = utc_now
    base_url: str = "http://127.0.0.1"
    lock: threading.RLock = field(default_factory=threading.RLock)
    users: dict[str, User] = field(default_factory=dict)
    apps: dict[int, App] = field(default_factory=dict)
    installations: dict[int, Installation] = field(default_factory=dict)
    repos: dict[str, Repo] = field(default_factory=dict)
    manifest_codes: dict[str, ManifestCode] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    listeners: list[Callable[[Event], None]] = field(default_factory=list)
    _next_id: int = 1000

    def now(self) -> datetime:
        return self.clock().astimezone(UTC).replace(microsecond=0)

    def first_ids(self, base: int) -> None:
        """Numbers the objects made from now on from ``base`` up."""
        with self.lock:
            self._next_id = base

    def new_id(self) -> int:
        with self.lock:
            self._next_id += 1
            return self._next_id

    def user(self, login: str) -> User:
        found = self.users.get(login)
        if found is None:
            raise not_found()
        return found

    def add_user(self, login: str, *, type_: str = "User", name: str | None = None) -> User:
        with self.lock:
            if login not in self.users:
                self.users[login] = User(login, self.new_id(), type_, name)
            return self.users[login]

    def repo(self, owner: str, name: str) -> Repo:
        found = self.repos.get(f"{owner}/{name}".lower())
        if found is None:
            raise not_found()
        return found

    def repo_by_id(self, repo_id: int) -> Repo:
        for repo in self.repos.values():
            if repo.id == repo_id:
                return repo
        raise not_found()

    def installation_for(self, repo: Repo) -> Installation | None:
        for inst in self.installations.values():
            if repo.id in inst.repo_ids:
                return inst
        return None

    def app_of(self, actor: Actor) -> App | None:
        return self.apps.get(actor.app_id) if actor.app_id is not None else None

    def publish(self, event: Event) -> None:
        with self.lock:
            self.events.append(event)
            listeners = list(self.listeners)
        for listener in listeners:
            listener(event)
