"""The lifecycles of turns, cards, actions, timers and matters, as tables.

Each table maps (state before, fact) to the state after; ``NEW`` is "no record yet".
A fact's label is its type name, plus what picks the end state where one type can end
in several: ``TurnFinished:<outcome>``, ``ActionRequested:<status>``,
``ActionDecided:approved|declined``, ``ActionCompleted:ok|failed``. A row whose two
states are equal is a fact that changes a record without moving it (a card delivered
again, a turn gaining a card after it ended).
"""

from __future__ import annotations

from collections.abc import Mapping

from kernel.errors import IllegalMove

NEW = "new"

Table = Mapping[tuple[str, str], str]

TURN: Table = {
    (NEW, "TurnStarted"): "running",
    ("running", "LeaseRenewed"): "running",
    ("running", "TurnFinished:ok"): "done",  # a receipt (possibly empty) was applied
    ("running", "TurnFinished:no_receipt"): "done",  # no receipt block: no effects
    ("running", "TurnFinished:malformed"): "done",  # nothing applied: a repair turn follows
    ("running", "TurnFinished:failed"): "failed",  # the agent process failed
    ("running", "TurnFinished:timeout"): "failed",  # killed at the rule's timeout_s
    ("running", "TurnFinished:lease_expired"): "failed",  # its worker went away
    ("running", "ReceiptRefused"): "running",  # a receipt with a stale fence
    ("done", "ReceiptRefused"): "done",  # a late receipt
    ("failed", "ReceiptRefused"): "failed",
    ("done", "CardOpened"): "done",  # what the receipt asked for hangs off the turn
    ("failed", "CardOpened"): "failed",  # the notice that no retry is left
    ("done", "CardUpdated"): "done",
    ("done", "TimerArmed"): "done",
    ("done", "ActionRequested"): "done",
}

ASK_CARD: Table = {
    (NEW, "CardOpened"): "open",
    ("open", "CardUpdated"): "open",  # asked again under the same key: a new version
    ("open", "CardAnswered"): "decided",
    ("open", "CardResolved"): "done",
    ("decided", "CardResolved"): "done",
    ("open", "CardDelivered"): "open",
    ("decided", "CardDelivered"): "decided",
    ("done", "CardDelivered"): "done",
}

NOTICE_CARD: Table = {
    (NEW, "CardOpened"): "open",
    ("open", "CardResolved"): "closed",
    ("open", "CardDelivered"): "open",
    ("closed", "CardDelivered"): "closed",
}

ACTION: Table = {
    (NEW, "ActionRequested:allowed"): "allowed",
    (NEW, "ActionRequested:awaiting_approval"): "awaiting_approval",
    (NEW, "ActionRequested:refused"): "refused",
    ("awaiting_approval", "ActionDecided:approved"): "allowed",
    ("awaiting_approval", "ActionDecided:declined"): "declined",
    ("allowed", "ActionAttempted"): "allowed",  # claimed, or an attempt failed
    ("done", "ActionAttempted"): "done",  # a lapsed claim's failure, after another did it
    ("failed", "ActionAttempted"): "failed",
    ("allowed", "ActionCompleted:ok"): "done",
    ("allowed", "ActionCompleted:failed"): "failed",
}

TIMER: Table = {
    (NEW, "TimerArmed"): "armed",
    ("armed", "TimerFired"): "fired",
}

# A matter is free (no turn runs; events may wait) or running its one turn.
MATTER: Table = {
    (NEW, "EventRecorded"): "free",  # founded by its first event
    ("free", "EventRecorded"): "free",
    ("running", "EventRecorded"): "running",  # events wait for the next turn
    ("free", "TurnStarted"): "running",
    ("running", "TurnFinished"): "free",
}

# A pipeline is active until its machine ends it; an ended one takes notes (its data)
# and moves again only for a new run.
PIPELINE: Table = {
    (NEW, "PipelineAdvanced"): "active",
    (NEW, "PipelineAdvanced:ended"): "ended",  # decided and ended at once (a bad policy)
    ("active", "PipelineAdvanced"): "active",
    ("active", "PipelineAdvanced:ended"): "ended",
    ("active", "PipelineWoken"): "active",
    ("ended", "PipelineAdvanced:ended"): "ended",  # a note: its data only (kernel.pipelines)
    ("ended", "PipelineAdvanced:restarted"): "active",  # a new run (labelled again)
    ("ended", "PipelineAdvanced:ended:restarted"): "ended",  # a new run ended at once
}

TABLES: Mapping[str, Table] = {
    "turn": TURN,
    "ask card": ASK_CARD,
    "notice card": NOTICE_CARD,
    "action": ACTION,
    "timer": TIMER,
    "matter": MATTER,
    "pipeline": PIPELINE,
}


def move(table: str, record: str, before: str, fact: str) -> str:
    """The state ``record`` reaches when ``fact`` moves it from ``before``.

    Raises :class:`~kernel.errors.IllegalMove` when ``table`` has no such row: a bug in
    the kernel, or facts that no decision of it could have recorded.
    """
    after = TABLES[table].get((before, fact))
    if after is None:
        raise IllegalMove(table=table, record=record, state=before, fact=fact)
    return after


def allows(table: str, before: str, fact: str) -> bool:
    """Whether ``fact`` may move a record of ``table`` from ``before`` (for handlers that
    answer a reply instead of recording a move the table lacks)."""
    return (before, fact) in TABLES[table]


def card_table(kind: str) -> str:
    """The table of a card of ``kind`` (``ask`` or ``notice``)."""
    return "ask card" if kind == "ask" else "notice card"
