"""Cards go out: each card to the channels its rule names, once per version.

A card is shown on every channel its rule's ``notify`` lists (the owner's cards on
``owner_notify``); the ledger records which version each channel has shown
(``Delivered``), so a restart or a sweep sends only what a channel has not seen. A
channel that fails leaves the card undelivered there; the next sweep tries again.

The channels follow ``rules.json``: each is made from its spec by the maker registered
for its ``use`` (``makers``), and made again when the rules add, rename or change it, so
an edit takes effect without a restart. A channel whose ``use`` nothing in this process
can make (a ``github-comment`` channel without the GitHub App) is logged once, in one
line that says what to do; its cards wait in the ledger for a process that can show
them. ``channels`` holds channels given by name, which win over the rules' specs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from ghapp.runtime.ledger import Ledger, Outcome
from ghapp.store.base import Store
from kernel import inputs as k
from kernel.model import OWNER_MATTER, ChannelSpec, Rules
from kernel.records import Card, Matter
from plugins.protocols import Channel

__all__ = ["Cards", "ChannelMaker"]

log = logging.getLogger("autoloop.cards")

#: Makes the channel a spec of ``rules.json`` describes (one per ``use``).
ChannelMaker = Callable[[ChannelSpec], Channel]


class Cards:
    def __init__(
        self,
        store: Store,
        ledger: Ledger,
        rules: Callable[[], Rules],
        *,
        channels: Mapping[str, Channel] | None = None,
        makers: Mapping[str, ChannelMaker] | None = None,
        on_card: Callable[[Card], None] | None = None,
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.rules = rules
        self.channels: dict[str, Channel] = dict(channels or {})
        self.makers: dict[str, ChannelMaker] = dict(makers or {})
        #: what to do when no maker is registered for a ``use``, said in the log line
        self.hints: dict[str, str] = {}
        self.on_card = on_card
        self._made: dict[str, tuple[ChannelSpec, Channel]] = {}
        self._told: dict[str, ChannelSpec] = {}  # channel -> the spec logged as not shown
        self._failed: set[tuple[str, str, int]] = set()  # (card, channel, version) logged
        #: why a card is not shown on a channel yet, the last try's reason (a run that
        #: has no next sweep, such as the Action's, reports them)
        self.unshown: dict[tuple[str, str], str] = {}
        #: log a card a channel did not take (off where the run reports ``unshown``
        #: itself: the Action printed each refusal twice, once saying a sweep that never
        #: comes would try again)
        self.say_unshown = True
        self._lock = threading.Lock()
        self._stripes = [threading.RLock() for _ in range(32)]  # see deliver()

    def channel(self, name: str) -> Channel | None:
        """The channel called ``name`` now: given by name, or made from the rules' spec
        (again when the spec changed); None, logged once, when nothing here can make it."""
        given = self.channels.get(name)
        if given is not None:
            return given
        spec = self.rules().channels.get(name)
        if spec is None:
            return None
        with self._lock:
            made = self._made.get(name)
            if made is not None and made[0] == spec:
                return made[1]
            maker = self.makers.get(spec.use)
            if maker is None:
                self._made.pop(name, None)
                if self._told.get(name) != spec:
                    self._told[name] = spec
                    hint = self.hints.get(spec.use) or "no adapter for it is loaded"
                    log.warning(
                        'cards for channel "%s" ("use": "%s") are not shown by this process: '
                        "%s; they wait in the ledger",
                        name,
                        spec.use,
                        hint,
                    )
                return None
            try:
                channel = maker(spec)
            except Exception as exc:  # a bad spec must not stop the other channels
                if self._told.get(name) != spec:
                    self._told[name] = spec
                    log.warning('channel "%s" could not be made: %s', name, exc)
                return None
            self._made[name] = (spec, channel)
            self._told.pop(name, None)
            log.info('channel "%s" ("use": "%s") ready', name, spec.use)
            return channel

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
        return [n for n in names if self.channel(n) is not None]

    def deliver(self, card_id: str, *, announce: bool = True) -> None:
        with self.store.read() as tx:
            card = tx.get("card", card_id)
            matter = tx.get("matter", card.matter) if isinstance(card, Card) else None
        if not isinstance(card, Card):
            return
        if announce and self.on_card is not None:
            self.on_card(card)
        for name in self.channels_for(card):
            # One sender at a time per card and channel, and the card read again inside:
            # two sweeps at start (or a turn's thread and a sweep) both saw it unsent,
            # and a new channel got the card twice.
            with self._stripes[hash((card.id, name)) % len(self._stripes)]:
                self._send(card.id, name, matter)

    def _send(self, card_id: str, name: str, matter: object) -> None:
        """Show the card on channel ``name`` unless it shows this version already (read
        afresh: another thread may have sent it meanwhile)."""
        with self.store.read() as tx:
            card = tx.get("card", card_id)
        if not isinstance(card, Card):
            return
        prev = card.delivered.get(name) or {}
        if int(prev.get("version", 0)) >= card.version:
            return
        channel = self.channel(name)
        if channel is None:  # the rules changed meanwhile
            return
        try:
            ref = channel.send(
                card,
                matter if isinstance(matter, Matter) else None,
                previous_ref=str(prev.get("ref", "")),
            )
        except Exception as exc:  # an outage leaves the card undelivered; the sweep retries
            self.unshown[(card.id, name)] = str(exc) or type(exc).__name__
            if self.say_unshown and (card.id, name, card.version) not in self._failed:
                self._failed.add((card.id, name, card.version))
                log.warning(
                    'card %s not shown on channel "%s": %s; the next sweep tries again',
                    card.id,
                    name,
                    str(exc) or type(exc).__name__,
                )
            return
        self.ledger.decide(k.Delivered(card=card.id, channel=name, version=card.version, ref=ref))
        self.unshown.pop((card.id, name), None)

    def sweep(self) -> None:
        with self.store.read() as tx:
            cards = [c for c in tx.query("card") if isinstance(c, Card)]
        for c in cards:
            if any(
                int((c.delivered.get(n) or {}).get("version", 0)) < c.version
                for n in self.channels_for(c)
            ):
                self.deliver(c.id)
