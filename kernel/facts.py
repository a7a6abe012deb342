"""Facts: what happened, in the past tense. The ledger stores them; state is their fold.

Each fact carries everything its fold needs, so a replay never consults anything but
the facts themselves (no rules file, no clock).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel.model import Event


@dataclass(frozen=True, slots=True, kw_only=True)
class EventRecorded:
    seq: int
    event: Event
    at: str
    routes: tuple[str, ...] = ()  # matters the event joins as pending
    new_matters: tuple[tuple[str, str, str, str], ...] = ()  # (matter, rule, subject, session)
    dispatched: bool = False
    reason: str = ""
    content_key: str = ""  # Ingest.content_key: stored, unique, like the (source, id) key


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStarted:
    turn: str
    matter: str
    rule: str
    agent: str
    worker: str
    kind: str  # normal | repair | retry
    events: tuple[int, ...]
    hops: int
    session: str
    resume: str | None
    rules_version: str
    fence: int
    at: str
    lease_until: str
    repair_of: str | None = None
    chain: int | None = None  # see Event.chain (None: a ledger from before it)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRenewed:
    turn: str
    fence: int
    lease_until: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnFinished:
    turn: str
    matter: str
    outcome: str
    at: str
    agent_session: str | None = None
    cost_usd: float | None = None
    tokens: int | None = None
    error: str = ""
    receipt: Mapping[str, Any] | None = None
    repair: bool = False  # the matter now owes one repair turn
    retry: bool = False  # the batch goes back to run again
    retry_at: str = ""  # ... not before this instant (empty: at once)
    keep_session: bool = True  # False: the next attempt starts a fresh agent session


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceiptRefused:
    turn: str
    fence: int
    reason: str
    at: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CardOpened:
    card: str
    key: str
    matter: str
    kind: str
    title: str
    text: str = ""
    options: tuple[str, ...] = ()
    turn: str | None = None
    hops: int = 0
    at: str = ""
    action: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CardUpdated:
    card: str
    title: str
    text: str
    options: tuple[str, ...]
    turn: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CardAnswered:
    card: str
    choice: int
    by: str
    via: str
    at: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CardResolved:
    card: str
    turn: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CardDelivered:
    card: str
    channel: str
    version: int
    ref: str = ""  # channel's own handle, e.g. a comment id, so updates edit in place


@dataclass(frozen=True, slots=True, kw_only=True)
class TimerArmed:
    timer: str
    matter: str
    due: str
    why: str = ""
    hops: int = 0
    turn: str = ""
    chain: int | None = None  # its event's (kernel.model.Event.chain; None: as before it)


@dataclass(frozen=True, slots=True, kw_only=True)
class TimerFired:
    timer: str
    at: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleTicked:
    rule: str
    at: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionRequested:
    action: str
    matter: str
    turn: str
    do: str
    params: Mapping[str, Any] = field(default_factory=dict)
    status: str = "allowed"  # allowed | awaiting_approval | refused
    card: str | None = None
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionDecided:
    action: str
    approved: bool
    by: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionAttempted:
    action: str
    at: str
    error: str = ""
    by: str = ""  # the performer that claimed it (empty: released, or no claim)
    until: str = ""  # the claim holds until then


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionCompleted:
    action: str
    ok: bool
    result: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""
    at: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineAdvanced:
    """A pipeline's machine decided: its new stage, state and wake-up time (version + 1)."""

    pipeline: str
    subject: str
    version: int  # the version this makes
    stage: str
    data: Mapping[str, Any] = field(default_factory=dict)
    wake_at: str = ""
    ended: bool = False
    cards: Mapping[str, str] = field(default_factory=dict)  # open card key -> card id
    at: str = ""
    restarted: bool = False  # a new run of a pipeline that had ended


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineWoken:
    """Something it waits on happened (an event, an answer, a write's result): due now."""

    pipeline: str
    at: str


Fact = (
    EventRecorded
    | TurnStarted
    | LeaseRenewed
    | TurnFinished
    | ReceiptRefused
    | CardOpened
    | CardUpdated
    | CardAnswered
    | CardResolved
    | CardDelivered
    | TimerArmed
    | TimerFired
    | ScheduleTicked
    | ActionRequested
    | ActionDecided
    | ActionAttempted
    | ActionCompleted
    | PipelineAdvanced
    | PipelineWoken
)

FACT_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        EventRecorded,
        TurnStarted,
        LeaseRenewed,
        TurnFinished,
        ReceiptRefused,
        CardOpened,
        CardUpdated,
        CardAnswered,
        CardResolved,
        CardDelivered,
        TimerArmed,
        TimerFired,
        ScheduleTicked,
        ActionRequested,
        ActionDecided,
        ActionAttempted,
        ActionCompleted,
        PipelineAdvanced,
        PipelineWoken,
    )
}


def event_key(event: Event) -> str:
    """The key of an event's EventRecorded fact: one per (source, id)."""
    return f"event:{event.source}:{event.id}"


CONTENT_PREFIX = "content:"


def content_key(key: str) -> str:
    """The stored form of an :attr:`kernel.inputs.Ingest.content_key`: never equal to an
    event key, nor to any other fact's key."""
    return CONTENT_PREFIX + key


def is_extra_key(key: str) -> bool:
    """True for the keys :func:`extra_keys` gives (the ledger keeps them apart)."""
    return key.startswith(CONTENT_PREFIX)


def extra_keys(fact: Fact) -> tuple[str, ...]:
    """Unique keys a fact holds besides :func:`fact_key` (the ledger enforces them too)."""
    if isinstance(fact, EventRecorded) and fact.content_key:
        return (content_key(fact.content_key),)
    return ()


def fact_key(fact: Fact) -> str | None:
    """A unique key for facts that must never be stored twice (the ledger enforces it)."""
    if isinstance(fact, EventRecorded):
        return event_key(fact.event)
    if isinstance(fact, TurnFinished):
        return f"finished:{fact.turn}"
    if isinstance(fact, TurnStarted):
        return f"started:{fact.turn}"
    if isinstance(fact, CardAnswered):
        return f"answered:{fact.card}"
    if isinstance(fact, TimerFired):
        return f"fired:{fact.timer}"
    if isinstance(fact, ActionCompleted):
        return f"completed:{fact.action}"
    if isinstance(fact, PipelineAdvanced):
        return f"pipeline:{fact.pipeline}:{fact.version}"
    return None
