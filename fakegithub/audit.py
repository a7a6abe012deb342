"""The audit log: one entry per applied write, so tests can prove exactly-once."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict, dataclass
from typing import Any

from fakegithub.state import State, iso


@dataclass(frozen=True, slots=True)
class AuditEntry:
    seq: int
    method: str
    path: str
    actor: str
    resource: str
    status: int
    body_fingerprint: str
    at: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def fingerprint(body: Any) -> str:
    """sha256 of the body as canonical JSON (sorted keys, compact); "" for no body."""
    if body is None:
        return ""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


class AuditLog:
    def __init__(self, state: State) -> None:
        self.state = state
        self._lock = threading.Lock()
        self._entries: list[AuditEntry] = []

    def record(
        self, *, method: str, path: str, actor: str, resource: str, status: int, body: Any
    ) -> AuditEntry:
        with self._lock:
            entry = AuditEntry(
                len(self._entries) + 1,
                method,
                path,
                actor,
                resource,
                status,
                fingerprint(body),
                iso(self.state.now()) or "",
            )
            self._entries.append(entry)
            return entry

    def entries(
        self, *, method: str | None = None, path_contains: str | None = None
    ) -> list[AuditEntry]:
        with self._lock:
            found = list(self._entries)
        if method is not None:
            found = [e for e in found if e.method == method.upper()]
        if path_contains is not None:
            found = [e for e in found if path_contains in e.path]
        return found
