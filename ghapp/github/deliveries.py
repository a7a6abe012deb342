"""The delivery pipeline in the server: each labelled PR carried through ``pipeline.decide``.

One pipeline record per pull request lives in the ledger (kind ``pipeline``, id
``deliver/owner/repo#N``): the stored :class:`~pipeline.Delivery` as data, plus what the
shell learned for it (``versions``: the live-version probes; ``findings``: the answer to
a review request). :class:`Deliveries` is the one thread that moves them:

- **Woken, never polling.** :meth:`Deliveries.on_events` (called by the webhook route
  after its commit, and by the sweeper for the PRs it reconciles) records a ``Wake`` for
  the pipelines an event concerns: a PR's own events by number; ``check_run``,
  ``check_suite``, ``status``, ``deployment_status`` and ``push`` without a PR number,
  every active pipeline of the repository. A ``deliver`` or ``deliver-review`` label
  (the policy's names) on a PR without an active pipeline starts one. The kernel also
  wakes a pipeline when one of its actions ends or its card is answered. Besides, the
  thread sleeps until the earliest ``wake_at`` of the active pipelines (the deadline
  each decision asked for); the sleep is capped at :data:`BACKSTOP_S` only so that a
  wake-up another replica recorded in the shared ledger is seen within a minute.
- **One decision** (:meth:`Deliveries.process`): read the record, the policy on the
  default branch, the answers to its writes (the outbox's action records, matter = the
  pipeline id), its card's answer, then a snapshot; ``decide``; commit the new delivery
  with ``Advance`` (its writes as actions, its cards as cards); carry the decision's
  effects out through the outbox. A probe of the live version is made inline and kept
  in the record; while a write, a probe or a review answer came back, it decides again
  (at most :data:`MAX_DECISIONS` times a wake), so answers feed back at once.
- **Several at once.** Decisions run on :data:`DECIDERS` threads, never two of one
  pipeline at a time, so a PR whose checks just turned green does not queue behind the
  reads of the others. What must stay one at a time is the merge line of one base: a
  delivery that may merge (one in ``deliver`` mode before its merge) takes the lock of
  its repository and base for the part of its decision after the snapshot (reading the
  line, deciding, committing, carrying out its writes). The snapshot itself (the slow
  part: GitHub's answers) is read outside the lock; if a merge or a push reached that
  base meanwhile and the decision is to merge, the snapshot is read again first.
- **Review agents.** A ``RequestReview`` (``review = "agent:NAME"``) runs that agent
  read-only on a snapshot of the PR, off this thread (:mod:`ghapp.github.reviews`); its
  findings land in the record's data and make the pipeline due, and the next decision
  posts them as one review. After every committed decision a review the delivery still
  waits for and that runs nowhere in this process is started again (a restart).
- **Merge order.** ``merge_queue_first`` comes from :func:`pipeline.first_in_line` over
  the active deliveries holding a place in the line of the same repository and base;
  only the first updates its branch and merges, the others wait their turn. A delivery
  that gives up its place (``Step.line_freed``) wakes the next in line (only it: the
  others would decide nothing new). A wake-up missed across replicas (the next queued
  on another one just after) is made up from the ledger: one that waits its turn and is
  first by the ledger's records is decided again within :data:`LINE_RECHECK_S` plus
  the sleep's backstop.
- **Restarts.** On start every active pipeline is decided once.
- **Trouble.** An error talking to GitHub is one log line; that pipeline is tried again
  after a backoff (5 s, doubling up to 5 minutes), kept in this process only.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from ghapp.github.client import GitHubClient
from ghapp.github.names import REPO_NAME
from ghapp.github.outcomes import effect_action, write_result
from ghapp.github.readcache import ReadCache
from ghapp.github.reviews import ReviewJob, Reviews, waiting_for
from ghapp.github.snapshot import Extras, read_policy, read_snapshot
from ghapp.github.trigger import added_after, other_label, refused_label, say_refused
from ghapp.github.version import compare_with, probe_version
from ghapp.github.writes import Target
from ghapp.runtime.hub import Hub
from ghapp.runtime.ledger import Outcome
from kernel import inputs as k
from kernel.codec import to_data
from kernel.durations import iso
from kernel.model import Event
from kernel.records import Action, Card, Pipeline
from pipeline import (
    CARD_SLOT,
    TERMINAL,
    CardAnswer,
    Delivery,
    Merge,
    Policy,
    PolicyProblem,
    ProbeVersion,
    Progress,
    RaiseCard,
    RequestReview,
    ResolveCard,
    ReviewFindings,
    Step,
    VersionObservation,
    decide,
    delivery_from_data,
    delivery_to_data,
    first_in_line,
    in_line,
    next_in_line,
    start,
)
from pipeline.policy import labels_of as policy_labels
from pipeline.snapshot import PullSnapshot
from pipeline.stages import LINE_STAGES, POST_MERGE, Mode

__all__ = [
    "BACKSTOP_S",
    "DECIDERS",
    "MAX_DECISIONS",
    "Deliveries",
    "pipeline_id",
    "pipeline_subject",
]

log = logging.getLogger("autoloop.github.deliveries")

BACKSTOP_S = 60.0  # the longest sleep: a wake recorded by another replica is seen by then
MAX_DECISIONS = 8  # decisions per wake of one pipeline (answers feed back at once)
DECIDERS = 4  # pipelines decided at once (each mostly waits for GitHub's answers)
MERGE_REREADS = 2  # snapshots read again because the base moved under a decision to merge
# A pipeline that waits on webhooks alone is read again after this long all the same: a
# webhook GitHub never sent (an outage: nothing to redeliver) costs minutes, not the hours
# of the stage's own deadline. One read of the PR per pipeline per interval.
RECHECK_S = 600.0
# A delivery waiting its turn that the ledger shows first in its line is decided again
# after this long at most (a wake-up missed across replicas; see Deliveries._first_now).
LINE_RECHECK_S = 20.0
POLICY_TTL_S = 60.0  # a policy read is kept this long, or until a push to its repository
VERSIONS_KEPT = 20  # probe answers kept in the record (the newest)
RETRY_FIRST_S, RETRY_MAX_S = 5.0, 300.0

_SUBJECT = re.compile(r"^(" + REPO_NAME + r")#([0-9]+)$")
_PULL_EVENTS = ("pull_request.", "pull_request_review.")
_REPO_EVENTS = ("check_run.", "check_suite.", "status.", "deployment_status.", "push")
_SHELL_KEYS = ("versions", "findings", "review_spend")  # kept by the shell, not the machine


# Stages that act on the base branch as it is now: a push to the base concerns them only
# (the others read the base afresh when their own wait ends).
_BASE_STAGES = frozenset({"merge", "update_branch"})
_DEPLOY_STAGES = frozenset({"deployment", "live_version"})


def _with_spend(data: dict[str, Any], rec: Pipeline | None) -> dict[str, Any]:
    """A new run's data, with the review spend of the runs before (``status`` counts the
    spend from the records: a new run dropped the earlier runs' own)."""
    spend = rec.data.get("review_spend") if rec is not None else None
    return {**data, "review_spend": spend} if spend else data


def _concerned(
    active: Iterable[Pipeline], repo: str, event: Event, gone: frozenset[str] = frozenset()
) -> set[str]:
    """The active pipelines of ``repo`` that an event naming no pull request concerns.

    Matched by commit, not by repository, so that one check or status of one PR does not
    wake every delivery in flight: a check or a status wakes the pipelines whose head (or
    merge commit) it is about; a deployment, those watching deployments; a push to a
    branch, the first in the merge line of that base (the others wait their turn, and
    are woken in turn), those updating their branch and those waiting for a fix to the
    policy. An event that names no commit or branch wakes every pipeline of the
    repository (``gone``: merged here already)."""
    d = event.details
    sha = _text(d.get("head_sha")) or _text(d.get("sha"))
    branch = _text(d.get("branch"))
    out: set[str] = set()
    if event.type.startswith("push") and branch:
        mine = [
            p
            for p in active
            if (pipeline_subject(p.id) or "").split("#", 1)[0].lower() == repo.lower()
            and _text(p.data.get("base_ref")) == branch
        ]
        line = [
            delivery_from_data(_delivery_part(p.data))
            for p in mine
            if p.id not in gone
            and (p.stage == "merge" or (p.stage in LINE_STAGES and p.data.get("queued_at")))
        ]
        first = next_in_line(line, line[0].repo, branch) if line else None
        out = {p.id for p in mine if p.stage == "update_branch"}
        # a push may fix the repository's policy (read from its default branch, whatever
        # the pull request's base): the sticky comment promised that it would go on; one
        # that changes the policy file wakes them all (a review no longer asked for, a
        # check no longer required: each decides under the policy as it is now)
        changed = d.get("policy_changed") is True
        out |= {
            p.id
            for p in active
            if (pipeline_subject(p.id) or "").split("#", 1)[0].lower() == repo.lower()
            and (changed or p.data.get("policy_problem"))
        }
        return out | ({first.id} if first is not None else set())
    for p in active:
        if (pipeline_subject(p.id) or "").split("#", 1)[0].lower() != repo.lower():
            continue
        data = p.data
        heads = {_text(data.get("head_sha")), _text(data.get("merge_sha"))} - {""}
        if event.type.startswith("push"):
            about = not branch or (
                _text(data.get("base_ref")) == branch and p.stage in _BASE_STAGES
            )
        elif event.type.startswith("deployment_status."):
            about = p.stage in _DEPLOY_STAGES or sha in heads
        else:
            about = not sha or sha in heads
        if about:
            out.add(p.id)
    return out


def pipeline_id(repo: str, number: int) -> str:
    """The id of the pipeline of ``repo``'s PR ``number`` (the Delivery's id)."""
    return f"deliver/{repo}#{number}"


def pipeline_subject(pid: str) -> str | None:
    """``owner/repo#N`` of a pipeline id ``deliver/owner/repo#N``; None for other ids."""
    if not pid.startswith("deliver/"):
        return None
    subject = pid.removeprefix("deliver/")
    return subject if _SUBJECT.match(subject) else None


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class _Gathered:
    """What one decision read before deciding (outside any lock)."""

    rec: Pipeline
    data: dict[str, Any]
    delivery: Delivery
    versions: list[VersionObservation]
    findings: ReviewFindings | None
    policy: Policy | PolicyProblem
    pr: PullSnapshot
    base: tuple[str, str]  # (repository, base branch), lower-cased repository
    generation: int  # of that base when the snapshot was begun
    others: list[Delivery] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Start:
    repo: str
    number: int
    head_sha: str
    labels: tuple[str, ...]
    by: str  # who added the label (a labelled event's sender); "": found labelled later


class Deliveries:
    """The runner of delivery pipelines (see the module docstring)."""

    def __init__(
        self,
        hub: Hub,
        client: GitHubClient,
        bot_login: str,
        *,
        bot_app_id: int | None,
        backstop_s: float = BACKSTOP_S,
        monotonic: Callable[[], float] = time.monotonic,
        http: httpx.Client | None = None,
    ) -> None:
        self.hub = hub
        # Elapsed time (scans, rechecks, the policy's lifetime, the read cache): injected
        # so that a simulation runs this runner on a simulated clock.
        self._monotonic = monotonic
        self.client = client
        self.bot_login = bot_login
        self.bot_app_id = bot_app_id
        self.backstop_s = backstop_s
        self.cache = ReadCache(clock=monotonic)
        self.http = http if http is not None else httpx.Client()  # the live-version probes
        self._events: list[Event] = []
        self._seen: dict[str, str] = {}  # pipeline -> the wake_at it was last decided at
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._retry: dict[str, tuple[datetime, float]] = {}  # pipeline -> (when, backoff)
        self._decided: dict[str, float] = {}  # pipeline -> when this process last decided it
        self.recheck_s = RECHECK_S
        self._busy = False
        # Decisions run on a few threads; a pipeline is decided by one of them at a time.
        self._deciders = ThreadPoolExecutor(max_workers=DECIDERS, thread_name_prefix="decide")
        self._running: set[str] = set()
        # The merge line of each (repository, base): a lock, and a count of the merges and
        # pushes seen on that base (a snapshot read before one may be out of date).
        self._lines: dict[tuple[str, str], threading.Lock] = {}
        self._gone: set[str] = set()  # merged here, still in merge in the ledger
        self._line_seen: dict[str, frozenset[str]] = {}  # see _first_now
        # The active pipelines as last read: all of them at each full read (on start, when
        # woken from outside, every backstop_s), each again after this process decided or
        # started it. The loop works from it, so a webhook or a finished decision costs
        # no read of every pipeline.
        self._index: dict[str, Pipeline] = {}
        self._direct: set[str] = set()  # woken by events just recorded: due now
        self._scan_wanted = True
        self._next_scan = 0.0
        self._generations: dict[tuple[str, str], int] = {}
        # The policy of each repository, read from its default branch: kept for
        # POLICY_TTL_S, and forgotten at once when a push to the repository arrives.
        self._policies: dict[str, tuple[Policy | PolicyProblem, float]] = {}
        # Progress (the check run and the sticky comment) is shown by a thread of its own,
        # so that a merge never waits behind another delivery's progress; each write is an
        # action in the ledger, and its seq keeps an older one from showing over a newer.
        self._progress = ThreadPoolExecutor(max_workers=1, thread_name_prefix="progress")
        self.reviews = Reviews(hub, client, on_done=self.wake)

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="deliveries", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None
        self._deciders.shutdown(wait=True, cancel_futures=True)
        self._progress.shutdown(wait=True, cancel_futures=False)
        self.reviews.stop()
        self.http.close()

    def wake(self) -> None:
        """Look at the due pipelines now (something may have woken one in the ledger)."""
        with self._lock:
            self._scan_wanted = True
        self._wake.set()

    def idle(self) -> bool:
        """Nothing queued, nothing being decided (for tests)."""
        with self._lock:
            busy = self._events or self._busy or self._running or self._wake.is_set()
        return not busy and not self.reviews.running()

    # -- events ------------------------------------------------------------------------

    def on_events(self, events: Iterable[Event]) -> None:
        """Called after the events were committed (on the request path: only queues; the
        runner's thread records the wake-ups and starts)."""
        found = [e for e in events if e.source == "github"]
        if found:
            with self._lock:
                self._events.extend(found)
            self._wake.set()

    def _take_events(self, events: list[Event]) -> set[str]:
        """Record a ``Wake`` for the active pipelines ``events`` concern, and start one
        for a PR that got one of the delivery labels; returns those (due now)."""
        active = {p.id: p for p in self._indexed()}
        wake: set[str] = set()
        started: set[str] = set()
        for event in events:
            d = event.details
            if event.type.startswith("push"):  # the policy may have changed
                self._policies.pop(_text(d.get("repo")).lower(), None)
                self._moved((_text(d.get("repo")).lower(), _text(d.get("branch"))))
            found = _SUBJECT.match(event.subject)
            repo = _text(d.get("repo")) or (found.group(1) if found else "")
            number = int(found.group(2)) if found else _number(d.get("number"))
            if event.type.startswith(_PULL_EVENTS) and repo and number:
                wake.add(pipeline_id(repo, number))
                if event.type in ("pull_request.labeled", "pull_request.reconciled"):
                    # labeled: only the label just added starts one (not the others
                    # the PR already had); reconciled: any delivery label it carries.
                    labels = (
                        (_text(d.get("label")),)
                        if event.type == "pull_request.labeled"
                        else tuple(_text(x) for x in d.get("labels") or () if _text(x))
                    )
                    started |= self._start(
                        _Start(
                            repo=repo,
                            number=number,
                            head_sha=_text(d.get("head_sha")),
                            labels=labels,
                            by=_text(d.get("sender")),
                        )
                    )
            elif event.type.startswith(_REPO_EVENTS) and repo:
                if number:
                    wake.add(pipeline_id(repo, number))
                else:
                    with self._lock:
                        gone = frozenset(self._gone)
                    wake |= _concerned(active.values(), repo, event, gone)
        wake &= set(active)
        if wake:
            self.hub.ledger.decide(k.Wake(pipelines=tuple(sorted(wake))))
        return wake | started

    # -- the loop ----------------------------------------------------------------------

    def _run(self) -> None:
        for p in self._rescan():  # recovery: every active pipeline once
            if self._stop.is_set():
                return
            self._submit(p.id)
        while not self._stop.is_set():
            self._wake.clear()
            with self._lock:
                events, self._events = self._events, []
                direct, self._direct = self._direct, set()
                scan, self._scan_wanted = self._scan_wanted, False
                self._busy = True
            active: list[Pipeline] = []
            try:
                if events:
                    direct |= self._take_events_safely(events)
                for pid in sorted(direct):
                    self._submit(pid)
                if scan or self._monotonic() >= self._next_scan:
                    active = self._rescan()
                else:
                    active = self._indexed()
                for pid in self._due(active):
                    if self._stop.is_set():
                        break
                    self._submit(pid)
            except Exception as exc:  # the ledger failed: keep going, read all again soon
                log.warning("deliveries: %s: %s", type(exc).__name__, exc)
                with self._lock:
                    self._scan_wanted = True
                self._stop.wait(1.0)
            finally:
                with self._lock:
                    self._busy = False
            until_scan = max(0.0, self._next_scan - self._monotonic())
            self._wake.wait(min(self._sleep_s(active), until_scan))

    def _rescan(self) -> list[Pipeline]:
        """Read every active pipeline again (another replica may have moved them)."""
        active = self._active()
        with self._lock:
            self._index = {p.id: p for p in active}
        self._next_scan = self._monotonic() + self.backstop_s
        return active

    def _indexed(self) -> list[Pipeline]:
        with self._lock:
            return list(self._index.values())

    def _refresh(self, pid: str) -> Pipeline | None:
        """Read ``pid`` again into the index (gone from it once ended)."""
        rec = self._record(pid)
        with self._lock:
            if rec is None or rec.ended:
                self._index.pop(pid, None)
            else:
                self._index[pid] = rec
        return rec

    def _submit(self, pid: str) -> None:
        """Decide ``pid`` on a decider thread, unless one is deciding it already (that
        one's end looks at what is due again)."""
        with self._lock:
            if pid in self._running or self._stop.is_set():
                return
            self._running.add(pid)
        try:
            self._deciders.submit(self._decide_on_thread, pid)
        except RuntimeError:  # shut down meanwhile
            with self._lock:
                self._running.discard(pid)

    def _decide_on_thread(self, pid: str) -> None:
        try:
            self._safely(pid)
            with contextlib.suppress(Exception):  # read again at the next full read
                self._refresh(pid)
        finally:
            with self._lock:
                self._running.discard(pid)
            self._wake.set()  # what woke it meanwhile, or its next deadline, counts now

    def _take_events_safely(self, events: list[Event]) -> set[str]:
        try:
            return self._take_events(events)
        except Exception as exc:  # the ledger or GitHub failed: the sweeper reconciles later
            log.warning("delivery events: %s: %s", type(exc).__name__, exc)
            return set()

    def _safely(self, pid: str) -> None:
        rec = self._record(pid)
        with self._lock:
            if rec is not None:
                self._seen[pid] = rec.wake_at
            self._decided[pid] = self._monotonic()
        try:
            self.process(pid)
        except Exception as exc:  # one pipeline's trouble (GitHub down, ...) must not stop the rest
            with self._lock:
                _, backoff = self._retry.get(pid, (self.hub.clock(), RETRY_FIRST_S / 2))
                backoff = min(backoff * 2, RETRY_MAX_S)
                self._retry[pid] = (self.hub.clock() + timedelta(seconds=backoff), backoff)
            log.warning(
                "delivery %s: %s: %s; again in %.0f s", pid, type(exc).__name__, exc, backoff
            )
        else:
            with self._lock:
                self._retry.pop(pid, None)

    def _active(self) -> list[Pipeline]:
        with self.hub.store.read() as tx:
            found = tx.query("pipeline", states=["active"])
        return [p for p in found if isinstance(p, Pipeline)]

    def _record(self, pid: str) -> Pipeline | None:
        with self.hub.store.read() as tx:
            rec = tx.get("pipeline", pid)
        return rec if isinstance(rec, Pipeline) else None

    def _due(self, active: list[Pipeline]) -> list[str]:
        """Of the ``active`` pipelines, the due ones, but not one whose due time was
        already decided on and left as it was (a decision that changes nothing must not
        spin); those whose retry is due; those not read for :attr:`recheck_s`."""
        now = self.hub.clock()
        with self._lock:
            seen, decided = dict(self._seen), dict(self._decided)
            retry = list(self._retry.items())
        due = [
            p.id
            for p in active
            if p.wake_at
            and seen.get(p.id) != p.wake_at
            and datetime.fromisoformat(p.wake_at) <= now
        ]
        due += [pid for pid, (at, _) in retry if at <= now and pid not in due]
        stale = self._monotonic() - self.recheck_s
        due += [p.id for p in active if p.id not in due and decided.get(p.id, 0) < stale]
        backing_off = {pid for pid, (at, _) in retry if at > now}
        due += [
            pid
            for pid in self._first_now(active, decided)
            if pid not in due and pid not in backing_off
        ]
        return due

    def _first_now(self, active: list[Pipeline], decided: Mapping[str, float]) -> list[str]:
        """Deliveries that wait their turn in a merge line and are first in it by the
        ledger now, not decided for :data:`LINE_RECHECK_S`: the one ahead left the line
        and its wake-up was missed. The one that frees its place wakes the next, but with
        several replicas the next can queue on another replica just after that wake (the
        line it read did not hold it yet): it waited for the sweep, minutes. The ledger
        alone is read here; GitHub only by the decision that follows."""
        waiting = [p for p in active if p.data.get("waiting_on") == "line"]
        with self._lock:  # (those that wait no more are forgotten)
            ids = {p.id for p in waiting}
            self._line_seen = {k: v for k, v in self._line_seen.items() if k in ids}
        if not waiting:
            return []
        lined = [
            delivery_from_data(_delivery_part(p.data))
            for p in active
            if p.stage == "merge" or (p.stage in LINE_STAGES and p.data.get("queued_at"))
        ]
        with self._lock:
            gone = set(self._gone)
        lined = [d for d in lined if in_line(d) and d.id not in gone]
        since = self._monotonic() - LINE_RECHECK_S
        out = []
        for p in waiting:
            me = delivery_from_data(_delivery_part(p.data))
            ahead = frozenset(d.id for d in lined if d.id != p.id)
            if decided.get(p.id, 0) >= since or not first_in_line(
                me, [d for d in lined if d.id != p.id]
            ):
                continue
            with self._lock:  # once per line as it is: a decision that still says "line"
                if self._line_seen.get(p.id) == ahead:  # (the ledger and GitHub disagree)
                    continue  # is not made again and again
                self._line_seen[p.id] = ahead
            out.append(p.id)
        return out

    def _sleep_s(self, active: list[Pipeline]) -> float:
        now = self.hub.clock()
        with self._lock:
            seen, decided = dict(self._seen), dict(self._decided)
            times = [at for at, _ in self._retry.values()]
        for p in active:
            if p.wake_at and seen.get(p.id) != p.wake_at:
                times.append(datetime.fromisoformat(p.wake_at))
        clock = self._monotonic()
        recheck = [decided.get(p.id, 0) + self.recheck_s - clock for p in active]
        if not times:
            return max(0.0, min([self.backstop_s, *recheck]))
        return max(0.0, min([self.backstop_s, *recheck, (min(times) - now).total_seconds()]))

    def labels_of(self, repo: str) -> tuple[str, ...]:
        """The delivery labels of ``repo``: its policy's, the defaults while it has a
        problem or cannot be read (the sweeper then finds what the defaults name)."""
        try:
            policy = self._policy(repo)
        except Exception as exc:  # GitHub unreachable: the next sweep asks again
            log.warning("delivery labels of %s: cannot read the policy: %s", repo, exc)
            policy = Policy()
        labels = policy_labels(policy)
        return (labels.deliver, labels.review)

    def _policy(self, repo: str) -> Policy | PolicyProblem:
        kept = self._policies.get(repo.lower())
        if kept is not None and self._monotonic() - kept[1] < POLICY_TTL_S:
            return kept[0]
        policy = read_policy(self.client, repo, agents=self._agents())
        self._policies[repo.lower()] = (policy, self._monotonic())
        return policy

    def _carry_out(self, out: Outcome, specs: Iterable[k.ActionSpec]) -> None:
        """A decision's effects through the outbox: its writes here and now, its progress
        by the progress thread (a progress left unshown by a crash is swept later)."""
        progress = {a.id for a in specs if a.do == "github.progress"}
        later = [
            e.action
            for e in out.decision.effects
            if isinstance(e, k.PerformAction) and e.action in progress
        ]
        now = tuple(
            e
            for e in out.decision.effects
            if not (isinstance(e, k.PerformAction) and e.action in progress)
        )
        self.hub.outbox.carry_out(replace(out, decision=replace(out.decision, effects=now)))
        for action in later:
            self._progress.submit(self.hub.outbox.perform, action)

    # -- starting ----------------------------------------------------------------------

    def _label_while_running(self, s: _Start, running: str) -> None:
        """The other delivery label added while a run of ``running`` mode goes on: it was
        ignored without a word (one run at a time per pull request). Say why, once."""
        try:
            policy = self._policy(s.repo)
            labels = policy_labels(policy)
            found = next(
                (said for n in s.labels if (said := other_label(running, labels, n))), None
            )
            if found is not None:
                label, why = found
                t = Target(s.repo, s.number)
                say_refused(self.client, self.bot_login, t, label, login=s.by, why=why, then="")
        except Exception as exc:  # the reply is a courtesy: GitHub's trouble stops nothing
            log.warning("delivery %s#%d: could not reply: %s", s.repo, s.number, exc)

    def _start(self, s: _Start, tries: int = 0) -> set[str]:
        pid = pipeline_id(s.repo, s.number)
        rec = self._record(pid)
        if rec is not None and not rec.ended:
            if s.by:  # a label added now (not one a sweep found): the other one?
                self._label_while_running(s, str(rec.data.get("mode") or ""))
            return set()  # already on its way: the wake recorded for the event moves it
        try:
            policy = self._policy(s.repo)
        except Exception as exc:  # GitHub unreachable: the sweeper reconciles the PR later
            log.warning("delivery %s: cannot read the policy: %s", pid, exc)
            return set()
        labels = policy_labels(policy)
        names = {n.casefold() for n in s.labels}
        mode: Mode
        if labels.deliver.casefold() in names:
            mode = "deliver"
        elif labels.review.casefold() in names:
            mode = "review"
        else:
            return set()
        label = labels.deliver if mode == "deliver" else labels.review
        t = Target(s.repo, s.number)
        try:
            by = s.by
            if not by:  # found labelled (a sweep): GitHub's history says who, and when
                by, at = self.client.label_added(s.repo, s.number, label)
                if rec is not None and (not at or added_after(at, rec.updated_at) is False):
                    # Labelled before the last run ended ("stop this delivery", a closed
                    # PR), or when is unknown: a restart of the server started a new run
                    # and merged it. (A run recorded without its end: a new run, as before.)
                    return set()
            login, why = refused_label(self.client, t, label, by)
        except Exception as exc:  # GitHub unreachable: the sweeper reconciles the PR later
            log.warning("delivery %s: cannot read who added the label: %s", pid, exc)
            return set()
        if why:
            say_refused(self.client, self.bot_login, t, label, login=login, why=why)
            return set()
        now = self.hub.clock()
        run = 1
        if rec is not None:
            run = int(rec.data.get("run", 0)) + 1
        head = s.head_sha or str(self.client.get_pull(s.repo, s.number)["head"]["sha"])
        delivery = start(
            repo=s.repo,
            number=s.number,
            head_sha=head,
            mode=mode,
            now=now,
            run=run,
            by=login,
            label=label,
        )
        if rec is not None:  # the progress shown goes on from the last run's numbers
            seq = rec.data.get("progress_seq")
            if isinstance(seq, int) and not isinstance(seq, bool):
                delivery = replace(delivery, progress_seq=seq)
        out = self.hub.ledger.decide(
            k.Advance(
                pipeline=pid,
                subject=f"{s.repo}#{s.number}",
                version=rec.version if rec is not None else 0,
                restart=rec is not None,  # a new run of a pipeline that ended
                stage=delivery.stage,
                data=_with_spend(delivery_to_data(delivery), rec),
                wake_at=iso(now),
            )
        )
        self.hub.outbox.carry_out(out)
        if out.reply.code == "stale" and tries < MAX_DECISIONS:
            # the record moved meanwhile (another replica; a note of an ended one, a review
            # agent's spend): read it again, or the label's run was left for the sweep
            return self._start(s, tries + 1)
        if out.reply.code != "advanced":
            return set()
        log.info("delivery %s: started (%s, run %d)", pid, mode, run)
        self._refresh(pid)
        return {pid}

    # -- one pipeline ------------------------------------------------------------------

    def process(self, pid: str) -> Step | None:
        """Decide ``pid`` until it waits on the world (or :data:`MAX_DECISIONS` times);
        returns the last step, None when there is no active pipeline ``pid``."""
        last: Step | None = None
        stale = 0
        decisions = 0
        while decisions < MAX_DECISIONS:
            decisions += 1
            outcome = self._decide_once(pid)
            if outcome is None:
                return last
            step, code, again = outcome
            if code == "stale":
                stale += 1
                if stale > MAX_DECISIONS // 2:
                    raise RuntimeError("the pipeline record kept moving under this decision")
                continue
            last = step
            if not again or step.delivery.stage in TERMINAL:
                break
        return last

    def _decide_once(self, pid: str) -> tuple[Step, str, bool] | None:
        for reread in range(MERGE_REREADS + 1):
            g = self._gather(pid)
            if g is None:
                return None
            with self._lock:
                merged = pid in self._gone  # merged: it holds the line no more
            in_line = (
                g.delivery.mode == "deliver"
                and g.delivery.stage not in (*POST_MERGE, *TERMINAL)
                and not merged
            )
            with self._line(g.base) if in_line else contextlib.nullcontext():
                if in_line:  # the line as it is now, read under its lock
                    g.others = self._in_line(pid)
                # Placed in the line by the base the snapshot shows (a first decision does
                # not know its base before).
                me = replace(g.delivery, base_ref=g.pr.base_ref)
                first = first_in_line(me, g.others)
                ahead = None if first else next_in_line(g.others, me.repo, me.base_ref)
                pr = replace(
                    g.pr,
                    merge_queue_first=first,
                    merge_queue_ahead=ahead.number if ahead is not None else 0,
                )
                step = decide(g.delivery, pr, g.policy, self.hub.clock())
                merges = any(isinstance(e, Merge) for e in step.effects)
                if merges and reread < MERGE_REREADS and self._generation(g.base) != g.generation:
                    continue  # the base moved since the snapshot was read: read it again
                return self._conclude(pid, g, step)
        raise AssertionError("unreachable")  # the last round always concludes

    def _gather(self, pid: str) -> _Gathered | None:
        """The record, the answers to its writes, its card, the policy and a snapshot."""
        with self.hub.store.read() as tx:
            rec = tx.get("pipeline", pid)
            if not isinstance(rec, Pipeline) or rec.ended:
                return None
            actions = [a for a in tx.query("action", matter=pid) if isinstance(a, Action)]
            cards = [c for c in tx.query("card", matter=pid) if isinstance(c, Card)]
        data = dict(rec.data)
        delivery = delivery_from_data(_delivery_part(data))
        versions = [VersionObservation(**v) for v in data.get("versions") or ()]
        raw = data.get("findings")
        findings = ReviewFindings(**raw) if isinstance(raw, Mapping) else None
        policy = self._policy(delivery.repo)
        results = tuple(r for r in (write_result(a) for a in actions) if r is not None)
        extras = Extras(
            results=results,
            findings=findings,
            versions=tuple(versions),
            answer=_answer(delivery, cards),
        )
        with self._lock:  # the bases' generations before the snapshot (its base unknown yet)
            generations = dict(self._generations)
        pr = read_snapshot(
            self.client,
            delivery,
            bot_login=self.bot_login,
            bot_app_id=self.bot_app_id,
            policy=policy,
            extras=extras,
            cache=self.cache,
        )
        base = (delivery.repo.lower(), pr.base_ref)
        return _Gathered(
            rec=rec,
            data=data,
            delivery=delivery,
            versions=versions,
            findings=findings,
            policy=policy,
            pr=pr,
            base=base,
            generation=generations.get(base, 0),
        )

    def _in_line(self, pid: str) -> list[Delivery]:
        """The other deliveries holding a place in a merge line (only they are decoded),
        but not those this process saw merged (their place is free already)."""
        with self._lock:
            gone = set(self._gone)
        with self.hub.store.read() as tx:
            found = [
                delivery_from_data(_delivery_part(p.data))
                for p in tx.query("pipeline", states=["active"])
                if isinstance(p, Pipeline)
                and p.id != pid
                and p.id not in gone
                and (p.stage == "merge" or (p.stage in LINE_STAGES and p.data.get("queued_at")))
            ]
        return [d for d in found if in_line(d)]

    def _line(self, base: tuple[str, str]) -> threading.Lock:
        with self._lock:
            return self._lines.setdefault(base, threading.Lock())

    def _generation(self, base: tuple[str, str]) -> int:
        with self._lock:
            return self._generations.get(base, 0)

    def _moved(self, base: tuple[str, str]) -> None:
        """A merge or a push reached ``base``: snapshots read before are out of date."""
        with self._lock:
            self._generations[base] = self._generations.get(base, 0) + 1

    def _conclude(self, pid: str, g: _Gathered, step: Step) -> tuple[Step, str, bool]:
        """Commit ``step`` (its writes as actions, its cards) and carry its effects out."""
        rec, data, delivery, versions = g.rec, g.data, g.delivery, g.versions
        findings, policy, others = g.findings, g.policy, g.others
        d = step.delivery

        again = False
        specs: list[Any] = []
        late: list[Any] = []  # progress naming a card raised in this same decision
        new_cards: list[Any] = []
        resolve: list[str] = []
        open_card = d.card.key if d.card is not None else ""
        card_id = str(rec.cards.get(open_card, "")) if open_card else ""
        for effect in step.effects:
            if isinstance(effect, ProbeVersion):
                compare = compare_with(self.client, d.repo, self.cache)
                versions.append(
                    probe_version(
                        self.http,
                        effect.url,
                        effect.field,
                        effect.merge_sha,
                        effect.attempt,
                        compare=compare,
                        now=self.hub.clock,
                    )
                )
                again = True
            elif isinstance(effect, RequestReview):
                pass  # started below once the decision is committed (see _review)
            elif isinstance(effect, RaiseCard):
                new_cards.append(
                    k.CardSpec(
                        key=effect.card,
                        title=effect.title,
                        text=effect.text,
                        options=effect.options,
                    )
                )
            elif isinstance(effect, ResolveCard):
                resolve.append(effect.card)
            else:
                mapped = effect_action(d, effect, card_id=card_id)
                if mapped is None:
                    raise RuntimeError(f"no action carries out {type(effect).__name__}")
                do, params = mapped
                if isinstance(effect, Progress):  # its end is no news to the pipeline
                    params = {**params, "quiet": True}
                spec = k.ActionSpec(id=effect.key, do=do, params=params)
                needs_card = (
                    isinstance(effect, Progress)
                    and CARD_SLOT in effect.comment_body
                    and not card_id
                )
                (late if needs_card else specs).append(spec)

        new_data: dict[str, Any] = delivery_to_data(d)
        kept = [to_data(v) for v in versions[-VERSIONS_KEPT:]]
        if kept:
            new_data["versions"] = kept
        if findings is not None:
            new_data["findings"] = to_data(findings)
        if data.get("review_spend"):
            new_data["review_spend"] = data["review_spend"]
        wake_at = iso(step.wake_at) if step.wake_at is not None else ""
        ended = d.stage in TERMINAL
        unchanged = (
            new_data == data
            and rec.stage == d.stage
            and (rec.wake_at or "") == wake_at
            and not (specs or late or new_cards or resolve)
        )
        if unchanged:
            self._review(pid, new_data, policy)
            return step, "unchanged", again
        out = self.hub.ledger.decide(
            k.Advance(
                pipeline=pid,
                subject=f"{d.repo}#{d.number}",
                version=rec.version,
                stage=d.stage,
                data=new_data,
                wake_at=wake_at,
                ended=ended,
                actions=tuple(specs),
                cards=tuple(new_cards),
                resolve=tuple(resolve),
            )
        )
        if out.reply.code != "advanced":
            return step, out.reply.code, False
        self._review(pid, new_data, policy)
        requested = list(out.reply.data.get("actions") or ())
        second = None
        if late and not ended:
            ids = dict(out.reply.data.get("cards") or {})
            card_id = str(ids.get(open_card, ""))
            filled = [_fill_card(s, card_id) for s in late]
            second = self._add_actions(
                pid,
                d,
                data=new_data,
                wake_at=wake_at,
                version=int(out.reply.data["version"]),
                actions=filled,
            )
            if second.reply.code == "advanced":
                requested += list(second.reply.data.get("actions") or ())
        # Carried out only now: an action that ends moves the record (a wake-up), and the
        # second Advance above must be made on the version the first one left.
        self._carry_out(out, specs)
        if second is not None and second.reply.code == "advanced":
            self._carry_out(second, filled)
        merges = [a for a in specs if a.do == "github.merge"]
        if merges:
            self._moved(g.base)  # whatever GitHub answered, the base may hold it now
            if self._merged(pid, merges[0].id):
                # Merged: its place is free now, before its next decision says so (that
                # one reads the PR again); the next in line need not wait for it.
                with self._lock:
                    self._gone.add(pid)
                self._wake_next(others, d)
        if d.stage != delivery.stage:
            log.info("delivery %s: %s -> %s", pid, delivery.stage, d.stage)
        if step.line_freed:  # the next in line on this base may go on now (only it)
            with self._lock:
                woken = pid in self._gone  # already, when its merge was answered
                self._gone.discard(pid)
            if not woken:
                self._wake_next(others, d)
        # A write we asked for has ended (the outbox performs it inline): decide again,
        # unless all it asked for was showing progress.
        writes = [a for a in specs if a.id in requested and a.do != "github.progress"]
        return step, "advanced", again or bool(writes)

    def _merged(self, pid: str, action_id: str) -> bool:
        """Whether the merge action ``action_id`` of ``pid`` was answered done."""
        with self.hub.store.read() as tx:
            found = [a for a in tx.query("action", matter=pid) if isinstance(a, Action)]
        for a in found:
            if a.id == action_id or a.params.get("key") == action_id:
                result = write_result(a)
                return result is not None and result.outcome == "done"
        return False

    def _wake_next(self, others: list[Delivery], d: Delivery) -> None:
        with self._lock:
            gone = set(self._gone)
        nxt = next_in_line([o for o in others if o.id not in gone], d.repo, d.base_ref)
        if nxt is not None:
            self.hub.ledger.decide(k.Wake(pipelines=(nxt.id,)))
            with self._lock:
                self._direct.add(nxt.id)
            self._wake.set()

    def _add_actions(
        self,
        pid: str,
        d: Delivery,
        *,
        data: dict[str, Any],
        wake_at: str,
        version: int,
        actions: list[Any],
    ) -> Outcome:
        """``actions`` added to the delivery just committed (``version``). A wake-up
        recorded meanwhile (webhooks are taken on another thread) moves only the record's
        version and due time: then it is added to the version the wake-up left, keeping
        the earlier due time, so the wake-up is not lost either."""
        for _ in range(MAX_DECISIONS):
            out = self.hub.ledger.decide(
                k.Advance(
                    pipeline=pid,
                    subject=f"{d.repo}#{d.number}",
                    version=version,
                    stage=d.stage,
                    data=data,
                    wake_at=wake_at,
                    actions=tuple(actions),
                )
            )
            if out.reply.code != "stale":
                return out
            rec = self._record(pid)
            if rec is None or rec.ended or rec.stage != d.stage or dict(rec.data) != data:
                return out  # decided anew meanwhile: the next decision shows its progress
            version = rec.version
            if rec.wake_at and (not wake_at or rec.wake_at < wake_at):
                wake_at = rec.wake_at
        return out

    def _review(self, pid: str, data: Mapping[str, Any], policy: Policy | object) -> None:
        """Start the review the committed delivery ``data`` waits for, unless it runs."""
        request = waiting_for(data)
        req = data.get("review_request")
        if not request or not isinstance(req, Mapping) or not isinstance(policy, Policy):
            return
        agent = policy.review.agent
        repo, number = str(data.get("repo") or ""), int(data.get("number") or 0)
        if not agent or not repo or not number:
            return
        job = ReviewJob(
            pipeline=pid,
            request=request,
            agent=agent,
            repo=repo,
            number=number,
            head_sha=str(req.get("sha") or ""),
        )
        self.reviews.ensure(job)

    def _agents(self) -> frozenset[str]:
        return frozenset(self.hub.rules().agents)


# ------------------------------------------------------------------------------ helpers


def _delivery_part(data: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in _SHELL_KEYS}


def _answer(delivery: Delivery, cards: list[Card]) -> CardAnswer | None:
    """A person's answer to the delivery's open card, if there is one yet."""
    if delivery.card is None:
        return None
    for card in cards:
        if card.key == delivery.card.key and card.choice is not None:
            return CardAnswer(card=card.key, choice=card.choice, by=card.answered_by)
    return None


def _fill_card(spec: Any, card_id: str) -> Any:
    params = dict(spec.params)
    body = params.get("comment_body")
    if isinstance(body, str) and card_id:
        params["comment_body"] = body.replace(CARD_SLOT, card_id)
    return k.ActionSpec(id=spec.id, do=spec.do, params=params)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _number(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
