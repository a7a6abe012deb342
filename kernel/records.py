"""Projection records: the current state of matters, turns, cards, timers and actions,
and :class:`State`, the records a decision sees, by kind and id.

Records are frozen; the fold in :mod:`kernel.state` replaces them. Each has a ``kind``
and an ``id`` and three index values (``matter``, ``state``, ``due``) that stores keep
in columns so that the shell can find runnable matters, due timers and open cards
without reading everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel.model import Event


@dataclass(frozen=True, slots=True, kw_only=True)
class Meta:
    # The last event sequence number is not kept here: it is the highest event row's
    # (``State.last_event``), so recording an event rewrites no counter row.
    turns: int = 0
    cards: int = 0
    ticks: Mapping[str, str] = field(default_factory=dict)  # rule -> last schedule tick (ISO)

    kind = "meta"

    @property
    def id(self) -> str:
        return "counters"


@dataclass(frozen=True, slots=True, kw_only=True)
class EventRow:
    seq: int
    event: Event
    at: str
    routes: tuple[str, ...] = ()  # matters it went to
    dispatched: bool = False
    reason: str = ""  # why it was not dispatched

    kind = "event"

    @property
    def id(self) -> str:
        return f"{self.seq:012d}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Matter:
    id: str
    rule: str
    subject: str
    session: str  # AUTOLOOP_SESSION: stable for the matter
    agent_session: str | None = None  # the agent's own session, to resume
    # Events wait for the next turn as Queued records, one per (matter, event), so that
    # an event into a matter costs the same however many wait there already; the
    # matter only says whether any wait.
    waiting: bool = False
    since: int = 0  # the seq of the oldest event waiting: matters run in arrival order
    running: str | None = None  # the turn running now
    hops: int = 0  # hops of the last batch
    chain: int | None = None  # chain of the last batch (kernel.model.Event.chain)
    repair: str | None = None  # a turn whose malformed receipt must be rewritten
    retry: tuple[int, ...] = ()  # events of a failed turn to run again
    failures: int = 0  # consecutive failed attempts
    retry_after: str = ""  # no turn starts before this instant (a failed turn's backoff)
    turns: int = 0

    kind = "matter"

    @property
    def phase(self) -> str:
        """Where it is in :data:`kernel.lifecycle.MATTER`: running its turn, or free."""
        return "running" if self.running is not None else "free"

    @property
    def runnable(self) -> bool:
        return self.running is None and bool(self.waiting or self.repair or self.retry)


def queued_id(matter: str, seq: int) -> str:
    return f"{matter}|{seq:012d}"  # ordered by seq within a matter


@dataclass(frozen=True, slots=True, kw_only=True)
class Queued:
    """One event waiting in one matter (an event routed to two matters waits in both).
    The turn that takes it removes it: only waiting events have one."""

    matter: str
    seq: int

    kind = "queued"

    @property
    def id(self) -> str:
        return queued_id(self.matter, self.seq)


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    id: str
    matter: str
    rule: str
    agent: str
    worker: str
    kind_: str = "normal"  # normal | repair | retry
    state: str = "running"  # running | done | failed
    events: tuple[int, ...] = ()
    hops: int = 0
    session: str = ""
    resume: str | None = None
    rules_version: str = ""
    fence: int = 0
    lease_until: str = ""
    started_at: str = ""
    ended_at: str = ""
    outcome: str = ""
    agent_session: str | None = None
    cost_usd: float | None = None
    tokens: int | None = None
    error: str = ""
    receipt: Mapping[str, Any] | None = None  # what was applied, as plain data
    cards: tuple[str, ...] = ()
    timers: tuple[str, ...] = ()
    emitted: tuple[int, ...] = ()
    actions: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()  # late or foreign receipts that were refused
    repair_of: str | None = None  # the turn whose receipt this one rewrites
    chain: int | None = None  # the events its receipt may emit, with all they lead to

    kind = "turn"


@dataclass(frozen=True, slots=True, kw_only=True)
class Card:
    id: str
    key: str
    matter: str
    kind_: str  # ask | notice
    state: str = "open"  # open | decided | done | closed
    title: str = ""
    text: str = ""
    options: tuple[str, ...] = ()
    choice: int | None = None  # 1-based
    version: int = 1
    turn: str | None = None
    hops: int = 0
    opened_at: str = ""
    answered_by: str = ""
    answered_via: str = ""
    action: str | None = None  # the action this card approves
    delivered: Mapping[str, Any] = field(default_factory=dict)  # channel -> {version, ref}

    kind = "card"


@dataclass(frozen=True, slots=True, kw_only=True)
class Timer:
    id: str
    matter: str
    due: str  # ISO 8601, UTC
    why: str = ""
    hops: int = 0
    turn: str = ""
    fired: bool = False
    chain: int | None = None  # its event's (None: the matter's, as before it)

    kind = "timer"


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    id: str  # also the idempotency key
    matter: str
    turn: str
    do: str
    params: Mapping[str, Any] = field(default_factory=dict)
    status: str = "allowed"  # allowed | awaiting_approval | refused | declined | done | failed
    card: str | None = None
    result: Mapping[str, Any] = field(default_factory=dict)
    attempts: int = 0
    error: str = ""
    claimed_by: str = ""  # the performer attempting it now (one at a time, across hubs)
    claim_until: str = ""

    kind = "action"


@dataclass(frozen=True, slots=True, kw_only=True)
class Pipeline:
    """One pipeline (a delivery): the stage and state its own machine decided last.

    The kernel keeps it, versions it and wakes it; what ``stage`` and ``data`` mean is
    the pipeline's business (``pipeline/``). ``wake_at`` is when it next wants a
    decision without an event ("" : only an event or an answer moves it)."""

    id: str
    subject: str
    stage: str
    data: Mapping[str, Any] = field(default_factory=dict)
    wake_at: str = ""
    version: int = 0
    ended: bool = False
    cards: Mapping[str, str] = field(default_factory=dict)  # open card key -> card id
    started_at: str = ""
    updated_at: str = ""

    kind = "pipeline"


Record = Meta | EventRow | Matter | Queued | Turn | Card | Timer | Action | Pipeline


Key = tuple[str, str]


@dataclass(slots=True)
class State:
    meta: Meta = field(default_factory=Meta)
    events: dict[int, EventRow] = field(default_factory=dict)
    matters: dict[str, Matter] = field(default_factory=dict)
    queued: dict[str, Queued] = field(default_factory=dict)
    turns: dict[str, Turn] = field(default_factory=dict)
    cards: dict[str, Card] = field(default_factory=dict)
    timers: dict[str, Timer] = field(default_factory=dict)
    actions: dict[str, Action] = field(default_factory=dict)
    pipelines: dict[str, Pipeline] = field(default_factory=dict)
    # The highest event seq handed out. Not a record: a replay keeps it as it folds, and
    # the shell sets it from the store (the highest stored event row) before a decision.
    last_event: int = 0
    # Keys (kernel.facts.event_key, and content keys: kernel.facts.extra_keys) of events
    # known to be recorded: those the shell found stored among the ones Needs.event_keys
    # named, and those the fold recorded since.
    seen_keys: set[str] = field(default_factory=set)

    def put(self, rec: Record) -> Key:
        if isinstance(rec, Meta):
            self.meta = rec
        elif isinstance(rec, EventRow):
            self.events[rec.seq] = rec
            self.last_event = max(self.last_event, rec.seq)
        elif isinstance(rec, Matter):
            self.matters[rec.id] = rec
        elif isinstance(rec, Queued):
            self.queued[rec.id] = rec
        elif isinstance(rec, Turn):
            self.turns[rec.id] = rec
        elif isinstance(rec, Card):
            self.cards[rec.id] = rec
        elif isinstance(rec, Timer):
            self.timers[rec.id] = rec
        elif isinstance(rec, Pipeline):
            self.pipelines[rec.id] = rec
        else:
            self.actions[rec.id] = rec
        return (rec.kind, rec.id)

    def get(self, key: Key) -> Record | None:
        kind, rid = key
        table: dict[Any, Any]
        if kind == "meta":
            return self.meta
        if kind == "event":
            return self.events.get(int(rid))
        tables: dict[str, dict[Any, Any]] = {
            "matter": self.matters,
            "queued": self.queued,
            "turn": self.turns,
            "card": self.cards,
            "timer": self.timers,
            "action": self.actions,
            "pipeline": self.pipelines,
        }
        table = tables[kind]
        rec: Record | None = table.get(rid)
        return rec

    def records(self) -> list[Record]:
        out: list[Record] = [self.meta] if self.meta != Meta() else []
        out.extend(self.events[k] for k in sorted(self.events))
        tables: tuple[dict[str, Any], ...] = (
            self.matters,
            self.queued,
            self.turns,
            self.cards,
            self.timers,
            self.actions,
            self.pipelines,
        )
        for table in tables:
            out.extend(table[k] for k in sorted(table))
        return out

    def pending_of(self, matter: str) -> tuple[int, ...]:
        """Seqs of the events waiting in ``matter`` (those loaded), in order."""
        return tuple(sorted(q.seq for q in self.queued.values() if q.matter == matter))

    def copy(self) -> State:
        return State(
            meta=self.meta,
            events=dict(self.events),
            matters=dict(self.matters),
            queued=dict(self.queued),
            turns=dict(self.turns),
            cards=dict(self.cards),
            timers=dict(self.timers),
            actions=dict(self.actions),
            pipelines=dict(self.pipelines),
            last_event=self.last_event,
            seen_keys=set(self.seen_keys),
        )


def index_of(rec: Record) -> tuple[str, str, str]:
    """(matter, state, due) columns that stores keep for queries."""
    if isinstance(rec, Matter):
        state = "running" if rec.running else ("runnable" if rec.runnable else "idle")
        return rec.id, state, ""
    if isinstance(rec, Turn):
        return rec.matter, rec.state, rec.lease_until if rec.state == "running" else ""
    if isinstance(rec, Card):
        return rec.matter, rec.state, ""
    if isinstance(rec, Timer):
        return rec.matter, "fired" if rec.fired else "armed", rec.due
    if isinstance(rec, Action):
        return rec.matter, rec.status, ""
    if isinstance(rec, Queued):
        return rec.matter, "pending", ""
    if isinstance(rec, Pipeline):
        return rec.subject, "ended" if rec.ended else "active", "" if rec.ended else rec.wake_at
    if isinstance(rec, EventRow):
        return (
            rec.routes[0] if rec.routes else "",
            "dispatched" if rec.dispatched else "not_dispatched",
            "",
        )
    return "", "", ""
