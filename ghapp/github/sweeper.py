"""The sweeper: what the webhooks missed, found again, at start and every few minutes.

- **Missed deliveries.** GitHub keeps the App's webhook deliveries for a few days and
  does not resend a failed one by itself. Each pass lists the deliveries of the last 3
  days; a delivery GUID whose latest attempt failed and that the ledger does not hold
  (no fact key ``event:github:<guid>...``) is redelivered, at most once per pass and
  :data:`MAX_REDELIVERIES` times in all (a redelivery asked for in the first pass, while
  the server is still starting, may fail too). What was redelivered is remembered, so a
  delivery that keeps failing is not resent in a loop; the ledger's dedupe on the
  delivery id makes even a needless redelivery harmless.
- **Labelled pull requests.** An open PR labelled ``deliver`` or ``deliver-review`` about
  which the ledger recorded no event since this process started gets one synthetic
  ``pull_request.reconciled`` event (id ``reconcile:<repo>#<n>@<head sha>``: one per
  head, whatever the number of passes or restarts), so the delivery pipeline picks up
  PRs whose webhooks were lost while we were down. The repositories looked at are those
  the ledger's recent GitHub events name. A labelled PR without a pipeline record is
  handed to the runner on every pass, whatever was recorded about it before: the event
  that should have started it may have been recorded by a server killed before its
  runner took it (the runner's queue is in memory), or starting may have failed.
- **The outbox.** Actions left ``allowed`` after a transient failure and cards a channel
  did not take are retried (``hub.sweep_actions()``, ``hub.sweep_cards()``) every
  ``outbox_every_s``; the hub records each attempt first, so the executor reads back.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ghapp.github.client import GitHubClient
from ghapp.github.deliveries import pipeline_id
from ghapp.github.errors import AmbiguousWrite, GitHubError
from ghapp.github.names import REPO_NAME
from ghapp.runtime.hub import Hub
from kernel.model import Event
from kernel.records import EventRow

__all__ = ["DELIVER_LABELS", "SweepReport", "Sweeper"]

log = logging.getLogger("autoloop.github.sweeper")

DELIVER_LABELS = ("deliver", "deliver-review")
WINDOW_S = 3 * 24 * 3600.0
MAX_REDELIVERIES = 3  # per delivery GUID, one per pass
REPO_SCAN_EVENTS = 5000
UNREADABLE_SAY_S = 3600.0  # one line this often per repository that cannot be listed
_REPO_OF = re.compile(r"^(" + REPO_NAME + r")(?:#[0-9]+|@[0-9a-fA-F]+)?$")


@dataclass
class SweepReport:
    redelivered: list[str] = field(default_factory=list)  # delivery GUIDs
    reconciled: list[str] = field(default_factory=list)  # synthetic event ids recorded


def _failed(item: Mapping[str, Any]) -> bool:
    code = item.get("status_code")
    return not (isinstance(code, int) and 200 <= code < 300)


def _order(item: Mapping[str, Any]) -> tuple[str, int]:
    at, ident = item.get("delivered_at"), item.get("id")
    return (at if isinstance(at, str) else "", ident if isinstance(ident, int) else 0)


class Sweeper:
    def __init__(
        self,
        client: GitHubClient,
        hub: Hub,
        *,
        every_s: float = 300.0,
        outbox_every_s: float = 30.0,
        window_s: float = WINDOW_S,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.hub = hub
        self.every_s = every_s
        self.outbox_every_s = outbox_every_s
        self.window_s = window_s
        self.now = now
        # Told of each synthetic event recorded (the delivery runner starts its pipeline).
        self.on_events: Callable[[list[Event]], None] = lambda events: None
        # The delivery labels of a repository (its policy's ``[deliver.labels]``; the
        # runner knows them): a pull request labelled with one is handed over.
        self.labels_of: Callable[[str], tuple[str, ...]] = lambda repo: DELIVER_LABELS
        # Called before the pull requests are reconciled: the repositories are those the
        # ledger's events name, and webhooks acknowledged a moment ago may still wait in
        # the inbox (the server waits, boundedly, until they are decided).
        self.before_reconcile: Callable[[], object] = lambda: None
        self.redelivered: dict[str, int] = {}  # delivery GUID -> redeliveries asked for
        self._start_seq = self._last_event()
        self.passes = 0  # sweeps completed (the first runs at start)
        self._unreadable: dict[str, float] = {}  # repository -> when last said
        self._lock = threading.Lock()  # one sweep at a time: the thread's, or a caller's
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="github-sweeper", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None

    def _run(self) -> None:
        next_sweep = 0.0
        next_outbox = 0.0  # at start too: write-backs a killed server left half done
        while not self._stop.is_set():
            at = time.monotonic()
            if at >= next_sweep:
                self._safely(self.sweep)
                next_sweep = at + self.every_s
            if at >= next_outbox:
                self._safely(self.sweep_outbox)
                next_outbox = at + self.outbox_every_s
            self._stop.wait(max(0.05, min(next_sweep, next_outbox) - time.monotonic()))

    @staticmethod
    def _safely(work: Callable[[], object]) -> None:
        try:
            work()
        except Exception as exc:  # keep sweeping; the next pass tries again
            log.error(
                "sweep failed: %s: %s", type(exc).__name__, exc,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )  # fmt: skip

    # -- one pass ----------------------------------------------------------------------

    def sweep(self) -> SweepReport:
        with self._lock:
            report = SweepReport()
            try:
                try:  # the redeliveries' trouble (GitHub's deliveries API) stops nothing else
                    report.redelivered = self.redeliver_missed()
                finally:
                    report.reconciled = self.reconcile_pulls()
            finally:
                self.passes += 1
            return report

    def sweep_outbox(self) -> None:
        self.hub.sweep_actions()
        self.hub.sweep_cards()

    def redeliver_missed(self) -> list[str]:
        latest: dict[str, dict[str, Any]] = {}
        for item in self.client.list_webhook_deliveries(since=self.now() - self.window_s):
            guid = item.get("guid")
            if not isinstance(guid, str) or not guid:
                continue
            if guid not in latest or _order(item) > _order(latest[guid]):
                latest[guid] = item
        out: list[str] = []
        for guid, item in sorted(latest.items(), key=lambda kv: _order(kv[1])):
            if self.redelivered.get(guid, 0) >= MAX_REDELIVERIES or not _failed(item):
                continue
            with self.hub.store.read() as tx:
                if tx.has_key_prefix(f"event:github:{guid}"):
                    continue
            delivery_id = item.get("id")
            if not isinstance(delivery_id, int):
                continue
            # A lost answer: it may have been asked for; count it, never ask in a loop.
            with contextlib.suppress(AmbiguousWrite):
                self.client.redeliver(delivery_id)
            self.redelivered[guid] = self.redelivered.get(guid, 0) + 1
            out.append(guid)
        return out

    # -- labelled pull requests --------------------------------------------------------

    def _last_event(self) -> int:
        with self.hub.store.read() as tx:
            return tx.last_event()

    def _recent(self) -> tuple[set[str], set[str]]:
        """Repositories named by recent GitHub events, and subjects seen since start."""
        repos: set[str] = set()
        seen: set[str] = set()
        last = self._last_event()
        with self.hub.store.read() as tx:
            for seq in range(max(1, last - REPO_SCAN_EVENTS + 1), last + 1):
                row = tx.get("event", f"{seq:012d}")
                if not isinstance(row, EventRow) or row.event.source != "github":
                    continue
                found = _REPO_OF.match(row.event.subject)
                if found:
                    repos.add(found.group(1))
                if seq > self._start_seq and not row.event.id.startswith("reconcile:"):
                    seen.add(row.event.subject.lower())
        return repos, seen

    def reconcile_pulls(self) -> list[str]:
        self.before_reconcile()
        repos, seen = self._recent()
        out: list[str] = []
        for repo in sorted(repos):
            try:
                pulls = self.client.list_pulls(repo, state="open")
            except GitHubError as exc:  # one repository gone (or never one) stops no other
                self._cannot_read(repo, exc)
                continue
            ours = {name.casefold() for name in self.labels_of(repo)}  # GitHub ignores case
            for pr in pulls:
                labels = [
                    lb.get("name") for lb in pr.get("labels") or [] if isinstance(lb, Mapping)
                ]
                wanted = [n for n in labels if isinstance(n, str) and n.casefold() in ours]
                number = pr.get("number")
                head = pr.get("head")
                sha = head.get("sha") if isinstance(head, Mapping) else None
                if not wanted or not isinstance(number, int) or not isinstance(sha, str):
                    continue
                subject = f"{repo}#{number}"
                event = Event(
                    source="github",
                    id=f"reconcile:{subject}@{sha}",
                    type="pull_request.reconciled",
                    subject=subject,
                    summary=f"open pull request #{number} labelled {', '.join(wanted)}",
                    link=str(pr.get("html_url") or ""),
                    details={
                        "repo": repo,
                        "number": number,
                        "head_sha": sha,
                        "labels": [n for n in labels if isinstance(n, str)],
                        "reconciled": True,
                    },
                )
                if subject.lower() in seen:
                    if not self._has_pipeline(repo, number):
                        self.on_events([event])  # seen, yet not started: hand it over again
                    continue
                if self.hub.emit(event).reply.code == "recorded":
                    out.append(event.id)
                    self.on_events([event])
                elif not self._has_pipeline(repo, number):
                    self.on_events([event])  # reconciled before, yet never started
        return out

    def _cannot_read(self, repo: str, exc: GitHubError) -> None:
        """One line an hour per repository whose pull requests cannot be listed (an App
        removed from it, the subject of a ping that names no repository)."""
        now = time.monotonic()
        if now - self._unreadable.get(repo, float("-inf")) >= UNREADABLE_SAY_S:
            self._unreadable[repo] = now
            log.warning(
                "sweep: the pull requests of %s cannot be listed (%s: %s); the other "
                "repositories are swept", repo, type(exc).__name__, exc,
            )  # fmt: skip

    def _has_pipeline(self, repo: str, number: int) -> bool:
        with self.hub.store.read() as tx:
            return tx.get("pipeline", pipeline_id(repo, number)) is not None
