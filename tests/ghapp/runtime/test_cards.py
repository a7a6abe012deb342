"""Cards shown on channels: each version of a card once per channel, whoever sends it."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from ghapp.commands.home import Home, init_home
from kernel.model import Event
from kernel.records import Card, Matter

RULES = {
    "agents": {"demo": {"use": "demo"}},
    "channels": {"slow": {"use": "console"}},  # given to the hub as SlowChannel below
    "rules": [
        {"name": "hello", "on": {"source": "local", "type": "hello.*"}, "agent": "demo",
         "notify": ["slow"]},
    ],
}  # fmt: skip


class SlowChannel:
    """A channel whose sends take a while (a webhook across the world), counted."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []
        self.down = False
        self._lock = threading.Lock()

    def send(self, card: Card, matter: Matter | None, *, previous_ref: str) -> str:
        if self.down:
            raise OSError("the receiver is down")
        time.sleep(0.2)
        with self._lock:
            self.sent.append((card.id, card.version))
        return f"slow:{card.id}"


def test_two_senders_at_once_show_a_card_once(tmp_path: Path) -> None:
    """Two sweeps at start (or a turn's thread and a sweep) both read the card unsent: a
    channel added to a rule got the open card twice."""
    home = tmp_path / "home"
    init_home(home, rules_text=json.dumps(RULES))
    ctx = Home.open(env={"AUTOLOOP_HOME": str(home)}, home=home)
    channel = SlowChannel()
    hub = ctx.hub(channels={"slow": channel})
    try:
        channel.down = True  # the card is asked, but not shown yet
        hub.emit(Event(source="local", id="1", type="hello.world", subject="wall"))
        hub.drain()
        with ctx.store.read() as tx:
            (card,) = [c for c in tx.query("card") if isinstance(c, Card)]
        assert channel.sent == [] and not card.delivered
        channel.down = False
        senders = [threading.Thread(target=hub.cards.deliver, args=(card.id,)) for _ in range(3)]
        for t in senders:
            t.start()
        hub.cards.sweep()
        for t in senders:
            t.join()
        assert channel.sent == [(card.id, card.version)]
        with ctx.store.read() as tx:
            shown = tx.get("card", card.id)
        assert isinstance(shown, Card) and shown.delivered["slow"]["version"] == card.version
    finally:
        ctx.store.close()
