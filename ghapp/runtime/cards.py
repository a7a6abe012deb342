"""Cards go out: each card to the channels its rule names, once per version.

A card is shown on every channel its rule's ``notify`` lists (the owner's cards on
``owner_notify``); the ledger records which version each channel has shown
(``Delivered``), so a restart or a sweep sends only what a channel has not seen. A
channel that fails leaves the card undelivered there; the next sweep tries again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ghapp.runtime.ledger import Ledger, Outcome
from ghapp.store.base import Store
from kernel import inputs as k
from kernel.model import OWNER_MATTER, Rules
from kernel.records import Card, Matter
from plugins.protocols import Channel

__all__ = ["Cards"]


class Cards:
    def __init__(
        self,
        store: Store,
        ledger: Ledger,
        rules: Callable[[], Rules],
        *,
        channels: Mapping[str, Channel] | None = None,
        on_card: Callable[[Card], None] | None = None,
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.rules = rules
        self.channels: dict[str, Channel] = dict(channels or {})
        self.on_card = on_card

    def send_effects(self, out: Outcome, sent: set[str]) -> None:
        """A card the decision changed without a SendCard (a receipt's "resolve" bumps its
        version) is shown again too, now rather than at the next sweep."""
        for kind, rid in sorted(out.decision.touched):
            if kind == "card" and rid not in sent:
                self.deliver(rid, announce=False)

    def channels_for(self, card: Card) -> list[str]:
        rules = self.rules()
        if card.matter == OWNER_MATTER:
            names = list(rules.owner_notify) or sorted({n for r in rules.rules for n in r.notify})
        else:
            with self.store.read() as tx:
                m = tx.get("matter", card.matter)
            if isinstance(m, Matter):
                rule = rules.rule(m.rule)
                names = list(rule.notify) if rule else []
            else:  # a pipeline's card: its pull request shows it; the owner's channels too
                names = list(rules.owner_notify)
        return [n for n in names if n in self.channels]

    def deliver(self, card_id: str, *, announce: bool = True) -> None:
        with self.store.read() as tx:
            card = tx.get("card", card_id)
            matter = tx.get("matter", card.matter) if isinstance(card, Card) else None
        if not isinstance(card, Card):
            return
        if announce and self.on_card is not None:
            self.on_card(card)
        for name in self.channels_for(card):
            prev = card.delivered.get(name) or {}
            if int(prev.get("version", 0)) >= card.version:
                continue
            try:
                ref = self.channels[name].send(
                    card,
                    matter if isinstance(matter, Matter) else None,
                    previous_ref=str(prev.get("ref", "")),
                )
            except Exception:  # noqa: S112  # a channel outage leaves the card undelivered; retried by sweep
                continue
            self.ledger.decide(
                k.Delivered(card=card.id, channel=name, version=card.version, ref=ref)
            )

    def sweep(self) -> None:
        with self.store.read() as tx:
            cards = [c for c in tx.query("card") if isinstance(c, Card)]
        for c in cards:
            if any(
                int((c.delivered.get(n) or {}).get("version", 0)) < c.version
                for n in self.channels_for(c)
            ):
                self.deliver(c.id)
