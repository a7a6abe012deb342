"""The words between the shell and the core: inputs, effects, replies, decisions, needs.

Inputs are what the shell observed (an event arrived, a worker wants a turn, an agent
finished, a person answered, time passed) and hands to :func:`kernel.step.step`. A
:class:`Decision` is what the core answers: the facts to commit, the effects to carry
out after the commit, a :class:`Reply` for the caller. :class:`Needs` names what the
shell must load before a decision. All of them are frozen values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from kernel import facts as f
from kernel.model import Event

__all__ = [
    "ActionDone",
    "ActionSpec",
    "ActionTried",
    "Advance",
    "AgentOutcome",
    "Answer",
    "CardSpec",
    "Claim",
    "Decision",
    "Delivered",
    "Dismiss",
    "Effect",
    "Finish",
    "Heartbeat",
    "Ingest",
    "Input",
    "Needs",
    "Outcomes",
    "OwnerNotice",
    "PerformAction",
    "Reply",
    "ScheduleDue",
    "SendCard",
    "Tick",
    "Wake",
]

# ----------------------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True, kw_only=True)
class Ingest:
    event: Event
    ignore: str = ""  # non-empty: record it, but dispatch it nowhere, for this reason
    # A second key the event is recorded once under, besides (source, id): what it was
    # made of (a webhook's event name and signed body, hashed), so that the same signed body
    # sent again under a new delivery id is a duplicate. "" for none.
    content_key: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    matter: str
    worker: str
    lease_s: int = 300


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentOutcome:
    started: bool
    ok: bool
    final_message: str = ""
    session: str | None = None
    cost_usd: float | None = None
    tokens: int | None = None
    error: str = ""
    timed_out: bool = False
    retry: bool = True  # False: running it again cannot help (its program is missing)
    # False: the worker ended it, not the agent (its lease lapsed, or it was taken back
    # from a dead worker): the retry need not wait out the rule's backoff
    backoff: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    turn: str
    fence: int
    outcome: AgentOutcome


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    turn: str
    fence: int
    lease_s: int = 300


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    card: str
    choice: int  # 1-based
    by: str
    via: str = "cli"


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    """Time passed: fire due timers, expire lapsed leases, tick the schedules that came due.

    ``local_now`` is the decision's ``now`` in the rules' time zone (the shell has the
    time zone database, the kernel does not); without it no schedule is looked at.
    ``look_ahead_s``: the timers and leases due that much later are loaded too, so that
    the decision's ``wake_at`` names the next of them (the shell ticks again by then).
    """

    local_now: datetime | None = None
    look_ahead_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleDue:
    rule: str
    at: str  # the cron instant, ISO


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivered:
    card: str
    channel: str
    version: int
    ref: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionTried:
    """Before a write-back is attempted (``error`` empty): claim it for ``by`` for
    ``lease_s`` seconds, refused while another performer's claim is live. After a failed
    attempt (``error`` set): record the error and release the claim."""

    action: str
    error: str = ""
    by: str = ""  # who performs it (a hub process); empty: no claim is taken
    lease_s: int = 0
    # A claimant the caller found dead (a process of its own machine that is gone): its
    # claim is taken over at once instead of when its lease ends.
    lapsed: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionDone:
    action: str
    ok: bool
    result: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnerNotice:
    """The shell has something to tell the owner once (budget cap, lost delivery...)."""

    key: str
    title: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionSpec:
    """A write-back a pipeline asks for; ``id`` is its idempotency key."""

    id: str
    do: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class CardSpec:
    """A card a pipeline raises (no options: a notice)."""

    key: str
    title: str
    text: str = ""
    options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Advance:
    """Record one decision of a pipeline's own machine, made on record ``version``.

    Actions whose id is already recorded are not requested again; a card key already
    open on the pipeline is left as it is; ``resolve`` closes open card keys."""

    pipeline: str
    subject: str
    version: int  # 0: a new pipeline
    stage: str
    data: Mapping[str, Any] = field(default_factory=dict)
    wake_at: str = ""
    ended: bool = False
    actions: tuple[ActionSpec, ...] = ()
    cards: tuple[CardSpec, ...] = ()
    resolve: tuple[str, ...] = ()
    restart: bool = False  # a new run of a pipeline that ended (refused while it is active)


@dataclass(frozen=True, slots=True, kw_only=True)
class Dismiss:
    """A person closes an open notice card (``autoloop cards dismiss CARD``)."""

    card: str
    by: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Wake:
    """Something these pipelines wait on happened: each active one is due now."""

    pipelines: tuple[str, ...]


Input = (
    Ingest
    | Claim
    | Finish
    | Heartbeat
    | Answer
    | Tick
    | ScheduleDue
    | Delivered
    | ActionTried
    | ActionDone
    | OwnerNotice
    | Advance
    | Wake
    | Dismiss
)

# ---------------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True, kw_only=True)
class SendCard:
    card: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PerformAction:
    action: str


Effect = SendCard | PerformAction

# ---------------------------------------------------------------------------- replies


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    ok: bool
    code: str  # one of the codes in the table at the top of kernel/step.py
    message: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Outcomes:
    """A row of the table at the top of :mod:`kernel.step`: what one input may lead to."""

    facts: frozenset[type[Any]]  # the fact types a decision on it may record
    effects: frozenset[type[Any]]  # the effects it may ask for
    replies: frozenset[str]  # the reply codes it may answer with

    @classmethod
    def of(
        cls, facts: tuple[type[Any], ...], effects: tuple[type[Any], ...], replies: str
    ) -> Outcomes:
        """A row from tuples and the reply codes separated by spaces."""
        return cls(frozenset(facts), frozenset(effects), frozenset(replies.split()))


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    facts: tuple[f.Fact, ...]
    effects: tuple[Effect, ...]
    reply: Reply
    touched: frozenset[tuple[str, str]]
    # The earliest instant the kernel next wants to be woken (a Tick, for the next timer,
    # lease or schedule it knows of); None: no wish. Always later than a Tick's now.
    wake_at: datetime | None = None


# ------------------------------------------------------------------------------ needs


class Needs(NamedTuple):
    """What the shell loads before a decision, besides the counters and the last event seq.

    Named records are loaded with the matters around them (a turn's, a card's, a due
    timer's), and each matter with its running turn; ``matter_cards`` adds each loaded
    matter's open and decided cards, ``waiting`` the events waiting in it or left to run
    again. ``event_keys`` are checked, not loaded: those stored go into
    :attr:`kernel.records.State.seen_keys`. Actions are loaded alone.

    :func:`kernel.step.needs` may ask again once these are loaded (a finished turn's rule
    says where its receipt's events go); the shell loads what is new until it asks for
    nothing more. Needs that are :attr:`narrow` never grow, and a group of decisions with
    narrow needs can share one read and one state.

    A NamedTuple (as immutable as the frozen dataclasses here, pass its fields by name):
    one is made for every input, and a frozen dataclass of these eleven fields takes
    0.9 µs to make against 0.25 µs for the tuple, on the path of every webhook.
    """

    event_keys: frozenset[str] = frozenset()
    matters: frozenset[str] = frozenset()
    turns: frozenset[str] = frozenset()
    cards: frozenset[str] = frozenset()
    actions: frozenset[str] = frozenset()
    due_timers: bool = False
    lapsed_leases: bool = False
    owner: bool = False  # the owner's cards (OWNER_MATTER)
    matter_cards: bool = False
    waiting: bool = False
    look_ahead_s: float = 0.0  # due timers and lapsed leases: also those due this much later
    pipelines: frozenset[str] = frozenset()  # loaded with their open cards

    @property
    def narrow(self) -> bool:
        """Only event keys and bare matters: one read can serve a whole group."""
        # Every field from turns to waiting at its default, in one comparison of tuples:
        # each webhook's needs are asked this.
        return self[2:10] == _NOTHING_BUT_KEYS_AND_MATTERS and not self.pipelines

    def beyond(self, asked: Needs) -> Needs | None:
        """What this asks for that ``asked`` did not (None: nothing); the modes
        (``matter_cards``, ``waiting``, ``look_ahead_s``) carry over to what is still to load."""
        fresh = Needs(
            event_keys=self.event_keys - asked.event_keys,
            matters=self.matters - asked.matters,
            turns=self.turns - asked.turns,
            cards=self.cards - asked.cards,
            actions=self.actions - asked.actions,
            due_timers=self.due_timers and not asked.due_timers,
            lapsed_leases=self.lapsed_leases and not asked.lapsed_leases,
            owner=self.owner and not asked.owner,
            matter_cards=self.matter_cards,
            waiting=self.waiting,
            look_ahead_s=self.look_ahead_s,
            pipelines=self.pipelines - asked.pipelines,
        )
        asks = (
            fresh.event_keys
            or fresh.matters
            or fresh.turns
            or fresh.cards
            or fresh.actions
            or fresh.due_timers
            or fresh.lapsed_leases
            or fresh.owner
            or fresh.pipelines
        )
        return fresh if asks else None

    def __or__(self, other: Needs) -> Needs:
        return Needs(
            event_keys=self.event_keys | other.event_keys,
            matters=self.matters | other.matters,
            turns=self.turns | other.turns,
            cards=self.cards | other.cards,
            actions=self.actions | other.actions,
            due_timers=self.due_timers or other.due_timers,
            lapsed_leases=self.lapsed_leases or other.lapsed_leases,
            owner=self.owner or other.owner,
            matter_cards=self.matter_cards or other.matter_cards,
            waiting=self.waiting or other.waiting,
            look_ahead_s=max(self.look_ahead_s, other.look_ahead_s),
            pipelines=self.pipelines | other.pipelines,
        )


_NOTHING_BUT_KEYS_AND_MATTERS = Needs()[2:10]
