"""The context of one decision: the state, the clock reading, the rules, and what the
decision has recorded and asked for so far. The handlers of :mod:`kernel.step` write
through it; nothing else does.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from operator import attrgetter
from typing import Any

from kernel import facts as f
from kernel.durations import iso, parse_instant
from kernel.inputs import Decision, Effect, Reply, SendCard
from kernel.model import Event, Rules
from kernel.records import Card, State
from kernel.routing import route, session_of
from kernel.state import apply

__all__ = ["Context"]

# The facts that set a time to wake up at: a timer armed, a lease taken or renewed.
_WAKES: dict[type[Any], Callable[[Any], str]] = {
    f.TimerArmed: attrgetter("due"),
    f.TurnStarted: attrgetter("lease_until"),
    f.LeaseRenewed: attrgetter("lease_until"),
}


class Context:
    """One decision being made: the facts it records are folded into ``state`` at once,
    so each later check of the same decision sees them."""

    def __init__(self, state: State, now: datetime, rules: Rules) -> None:
        self.state = state
        self.now = now
        self.at = iso(now)
        self.rules = rules
        self.facts: list[f.Fact] = []
        self.effects: list[Effect] = []
        self.touched: set[tuple[str, str]] = set()
        self.wakes: list[str] = []  # instants (iso) the decision wants to be woken at

    def emit(self, fact: f.Fact) -> None:
        self.facts.append(fact)
        self.touched |= apply(self.state, fact)
        when = _WAKES.get(type(fact))
        if when is not None:
            self.wakes.append(when(fact))

    def wake(self, instant: str) -> None:
        self.wakes.append(instant)

    def done(self, reply: Reply) -> Decision:
        """The decision; its ``wake_at`` is the earliest of the instants asked for with
        :meth:`wake` and of the timers armed and the leases taken or renewed by it (no
        decision both takes a lease and ends its turn, or arms a timer and fires it)."""
        wakes = self.wakes
        return Decision(
            facts=tuple(self.facts),
            effects=tuple(self.effects),
            reply=reply,
            touched=frozenset(self.touched),
            wake_at=parse_instant(min(wakes)) if wakes else None,
        )

    # -- helpers --------------------------------------------------------------------

    def next_card_id(self) -> str:
        return f"c{self.state.meta.cards + 1}"

    def open_card(
        self,
        *,
        key: str,
        matter: str,
        kind: str,
        title: str,
        text: str = "",
        options: tuple[str, ...] = (),
        turn: str | None = None,
        hops: int = 0,
        action: str | None = None,
    ) -> str:
        card = self.next_card_id()
        self.emit(
            f.CardOpened(
                card=card,
                key=key,
                matter=matter,
                kind=kind,
                title=title,
                text=text,
                options=options,
                turn=turn,
                hops=hops,
                at=self.at,
                action=action,
            )
        )
        self.effects.append(SendCard(card=card))
        return card

    def live_card(self, matter: str, key: str) -> Card | None:
        for c in self.state.cards.values():
            if c.matter == matter and (key in (c.key, c.id)) and c.state == "open":
                return c
        return None

    def record_event(
        self,
        event: Event,
        *,
        reason: str = "",
        create: tuple[str, str, str, str] | None = None,
        content_key: str = "",
    ) -> f.EventRecorded:
        """Route and record one event; ``reason`` forces it to be recorded undispatched.

        ``create`` names a matter (id, rule, subject, session) the event founds;
        ``content_key`` is the ingest's second key (:attr:`kernel.inputs.Ingest.content_key`).
        """
        seq = self.state.last_event + 1
        routes: list[str] = []
        new: list[tuple[str, str, str, str]] = [create] if create else []
        if reason:
            pass
        elif event.matter is not None:
            if event.matter in self.state.matters or create is not None:
                routes.append(event.matter)
            else:
                reason = f"matter {event.matter!r} does not exist"
        else:
            for rule, mid in route(self.rules, event):
                if mid not in routes:
                    routes.append(mid)
                if mid not in self.state.matters and all(n[0] != mid for n in new):
                    new.append((mid, rule.name, event.subject, session_of(mid)))
            if not routes:
                reason = "no rule matches"
        fact = f.EventRecorded(
            seq=seq,
            event=event,
            at=self.at,
            routes=tuple(routes),
            new_matters=tuple(new),
            dispatched=bool(routes),
            reason=reason,
            content_key=content_key,
        )
        self.emit(fact)
        return fact
