"""A seeded, deterministic simulation of the hub on the real Ledger and a real SQLite file.

One :class:`Simulation` drives ``Ledger.decide`` with a ``random.Random(seed)`` and a
simulated clock (aware UTC datetimes handed in as ``now=``). Each step picks one move by
weight: a new external event, an old one sent again (a lost acknowledgement), a claim, an
agent finishing with a random outcome, an old or forgotten turn finishing late, a stale
fence, a heartbeat, an answer (sometimes twice, wrong, late, to a notice, to no card),
a tick, a clock jump forward or back, a schedule tick, the outbox reporting actions and
deliveries, an owner notice, a restart (the store is closed and reopened; in-flight
agents are forgotten) or a crash that kills the next transaction before COMMIT.

After every decision :class:`~tests.sim.invariants.Observer` checks the invariants
against what was committed; every ``check_every`` steps, after every restart and at
the end it compares all projections with a replay. At the end the faults stop, the world
is drained (answers given, clock past every timer and lease, every matter run to quiet)
and every accepted event must have been consumed by exactly one turn per route.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ghapp.runtime.ledger import Ledger
from ghapp.store.base import Tx
from ghapp.store.sqlite import SqliteStore
from kernel import inputs as k
from kernel.durations import iso, parse_instant
from kernel.model import Event
from kernel.records import Action, Card, Matter, Timer, Turn
from tests.sim import world
from tests.sim.invariants import InvariantBroken, Observer


class SimulatedCrash(Exception):
    """The process died after the decision was made and before the COMMIT."""


class CrashingStore:
    """The real SQLite store, except that a write can be told to die before COMMIT."""

    def __init__(self, url: str) -> None:
        self.inner = SqliteStore(url, durable=False)
        self.url = url
        self.crash_next = False

    @contextlib.contextmanager
    def write(self, *, durable: bool = True, long: bool = False) -> Iterator[Tx]:
        with self.inner.write() as tx:
            yield tx
            if self.crash_next:
                self.crash_next = False
                raise SimulatedCrash("killed before COMMIT")

    def read(self) -> contextlib.AbstractContextManager[Tx]:
        return self.inner.read()

    def close(self) -> None:
        self.inner.close()


@dataclass(frozen=True, slots=True)
class Held:
    """A turn an agent of this process is running: what it needs to report back."""

    turn: str
    fence: int
    matter: str
    rule: str


@dataclass
class Summary:
    seed: int
    steps: int
    facts: int = 0
    events: int = 0
    turns: int = 0
    cards: int = 0
    hop_cuts: int = 0
    seconds: float = 0.0
    fact_hash: str = ""
    faults: Counter[str] = field(default_factory=Counter)
    moves: Counter[str] = field(default_factory=Counter)
    checks: Counter[str] = field(default_factory=Counter)

    def lines(self) -> list[str]:
        def fmt(c: Counter[str]) -> str:
            return ", ".join(f"{name} {n}" for name, n in sorted(c.items()))

        return [
            f"seed {self.seed}: {self.steps} steps in {self.seconds:.1f} s; {self.facts} facts, "
            f"{self.events} events, {self.turns} turns, {self.cards} cards, "
            f"{self.hop_cuts} hop cuts; facts sha256 {self.fact_hash[:16]}",
            f"  faults: {fmt(self.faults)}",
            f"  moves:  {fmt(self.moves)}",
            f"  checks: {fmt(self.checks)}",
        ]


MOVE_WEIGHTS: dict[str, float] = {
    "ingest": 14,
    "group_ingest": 2,
    "duplicate": 5,
    "claim": 16,
    "finish": 18,
    "late_finish": 3,
    "stale_fence": 1,
    "heartbeat": 4,
    "answer": 8,
    "tick": 6,
    "clock_forward": 4,
    "clock_backward": 1.5,
    "schedule": 1,
    "outbox": 3,
    "owner_notice": 0.5,
    "restart": 0.5,
    "crash": 1,
}


class Simulation:
    def __init__(self, seed: int, steps: int, path: Path, *, check_every: int = 500) -> None:
        self.seed = seed
        self.steps = steps
        self.path = Path(path)
        self.check_every = check_every
        self.rnd = random.Random(seed)
        self.now = world.T0
        self.obs = Observer()
        self.held: dict[str, Held] = {}  # turns this process's agents are running
        self.sent: list[Event] = []  # external events sent at least once
        self.crash_next = False
        self.step_no = 0
        self.summary = Summary(seed=seed, steps=steps)
        self.faults = self.summary.faults
        self.moves = self.summary.moves
        self.store, self.ledger = self._open()
        self._names = list(MOVE_WEIGHTS)
        self._weights = [MOVE_WEIGHTS[n] for n in self._names]
        self._moves: dict[str, Callable[[], None]] = {
            n: getattr(self, f"_{n}") for n in self._names
        }

    # -- plumbing -------------------------------------------------------------------------

    def _open(self) -> tuple[CrashingStore, Ledger]:
        store = CrashingStore(f"sqlite:///{self.path}?sync=off")
        return store, Ledger(store, lambda: world.RULES, self._no_clock)

    @staticmethod
    def _no_clock() -> datetime:
        raise AssertionError("the simulation passes now= to every decision")

    def fail(self, what: str) -> InvariantBroken:
        return InvariantBroken(f"seed {self.seed} step {self.step_no}: {what}")

    def decide(self, inp: k.Input) -> k.Reply | None:
        """One decision, then the invariants; None when a simulated crash killed it."""
        self.obs.where = f"seed {self.seed} step {self.step_no} {type(inp).__name__}"
        crash = self.crash_next
        self.crash_next = False
        self.store.crash_next = crash
        try:
            out = self.ledger.decide(inp, now=self.now)
        except SimulatedCrash:
            if self.obs.observe(self.store):
                raise self.fail(f"a transaction killed before COMMIT left facts ({inp})") from None
            self.faults["crash_before_commit"] += 1
            if self.rnd.random() < 0.5:  # the caller saw no answer and sends it again
                self.faults["resent_after_crash"] += 1
                return self.decide(inp)
            return None
        self.obs.observe(self.store, out.decision.touched)
        return out.reply

    def decide_many(self, inputs: list[k.Input]) -> list[k.Reply] | None:
        """A group commit: several decisions in one transaction, then the invariants."""
        self.obs.where = f"seed {self.seed} step {self.step_no} group of {len(inputs)}"
        self.store.crash_next, self.crash_next = self.crash_next, False
        try:
            outs = self.ledger.decide_many(inputs, now=self.now)
        except SimulatedCrash:
            if self.obs.observe(self.store):
                raise self.fail("a group commit killed before COMMIT left facts") from None
            self.faults["crash_before_commit"] += 1
            return None
        touched = frozenset().union(*(out.decision.touched for out in outs))
        self.obs.observe(self.store, touched)
        return [out.reply for out in outs]

    def expect(self, reply: k.Reply | None, *codes: str) -> None:
        if reply is not None and reply.code not in codes:
            raise self.fail(f"expected {codes}, got {reply}")

    def query(self, kind: str, **kw: Any) -> list[Any]:
        with self.store.read() as tx:
            return tx.query(kind, **kw)

    def cards(self, kind: str, *states: str) -> list[Card]:
        """Cards by kind and state, from the replay (checked equal to the store's rows)."""
        return [c for c in self.obs.fold.cards.values() if c.kind_ == kind and c.state in states]

    def pick(self, items: list[Any]) -> Any:
        return items[self.rnd.randrange(len(items))]

    # -- the run --------------------------------------------------------------------------

    def run(self) -> Summary:
        began = time.perf_counter()
        try:
            for n in range(1, self.steps + 1):
                self.step_no = n
                name = self.rnd.choices(self._names, self._weights)[0]
                self._moves[name]()
                if self.step_no % self.check_every == 0:
                    self.obs.full_check(self.ledger)
            self.obs.full_check(self.ledger)
            self.drain()
            self.obs.full_check(self.ledger)
            self.obs.final_check()
        finally:
            self.store.close()
        s = self.summary
        s.seconds = time.perf_counter() - began
        s.facts = self.obs.last_seq
        s.events = len(self.obs.events)
        s.turns = len(self.obs.started)
        s.cards = self.obs.fold.meta.cards
        s.hop_cuts = sum(1 for e in self.obs.events.values() if "hop limit" in e.reason)
        s.fact_hash = self.obs.fact_hash()
        s.checks.update(self.obs.checks)
        return s

    # -- moves ----------------------------------------------------------------------------

    def _new_event(self) -> Event:
        rnd = self.rnd
        source = rnd.choice(world.SOURCES)
        n = len(self.sent) + 1
        event = Event(
            source=source,
            id=f"{source}-{n}",
            type=rnd.choice(world.EXTERNAL_TYPES),
            subject=rnd.choice(world.SUBJECTS),
            summary=f"external {n}",
            details={"n": n, "title": "text written by others, kept as data"},
        )
        self.sent.append(event)
        return event

    def _ingest(self) -> None:
        rnd = self.rnd
        event = self._new_event()
        self.moves["ingest"] += 1
        ignore = "sent by a bot account" if rnd.random() < 0.05 else ""  # kept, not dispatched
        reply = self.decide(k.Ingest(event=event, ignore=ignore))
        self.expect(reply, "recorded")
        if reply is not None and rnd.random() < 0.08:  # committed, but the answer was lost
            self.faults["lost_ack_resent"] += 1
            self.expect(self.decide(k.Ingest(event=event)), "duplicate")

    def _group_ingest(self) -> None:
        """Webhooks arriving together share one commit; a redelivery may sit in the group."""
        group: list[Event] = []
        for _ in range(self.rnd.randint(2, 6)):
            roll = self.rnd.random()
            if roll < 0.2 and group:
                group.append(self.pick(group))  # the same delivery twice in one group
                self.faults["duplicate_in_group"] += 1
            elif roll < 0.35 and self.sent:
                group.append(self.pick(self.sent))
                self.faults["duplicate_delivery"] += 1
            else:
                group.append(self._new_event())
        seen = set(self.obs.keys)
        replies = self.decide_many([k.Ingest(event=e) for e in group])
        self.moves["group commit"] += 1
        if replies is None:
            return
        for event, reply in zip(group, replies, strict=True):
            key = (event.source, event.id)
            self.expect(reply, "duplicate" if key in seen else "recorded")
            seen.add(key)

    def _duplicate(self) -> None:
        if not self.sent:
            return self._ingest()
        event = self.pick(self.sent)
        if self.rnd.random() < 0.3:  # a redelivery may differ in what it carries
            event = dataclasses.replace(event, summary="redelivered", details={})
        seen = (event.source, event.id) in self.obs.keys
        self.faults["duplicate_delivery"] += 1
        self.expect(self.decide(k.Ingest(event=event)), "duplicate" if seen else "recorded")
        return None

    def _claim(self) -> None:
        runnable = self.query("matter", states=["runnable"])
        at = iso(self.now)
        backing_off = [m for m in runnable if m.retry_after > at]
        if backing_off and self.rnd.random() < 0.2:  # a failed turn's retry, before its time
            m = self.pick(backing_off)
            self.faults["claim_before_retry_due"] += 1
            self.expect(self.decide(k.Claim(matter=m.id, worker="w9")), "later")
            return
        runnable = [m for m in runnable if m.retry_after <= at]
        if not runnable or self.rnd.random() < 0.05:
            busy = self.query("matter", states=["running", "idle"])
            if busy:
                m = self.pick(busy)
                self.faults["claim_not_runnable"] += 1
                self.expect(self.decide(k.Claim(matter=m.id, worker="w9")), "busy", "idle")
            return
        m = self.pick(runnable)
        lease = self.rnd.choice((60, 300, 900))
        reply = self.decide(
            k.Claim(matter=m.id, worker=self.rnd.choice(("w1", "w2")), lease_s=lease)
        )
        self.moves["claim"] += 1
        self.expect(reply, "started")
        if reply is None:
            return
        turn = str(reply.data["turn"])
        start = self.obs.started[turn]
        if self.rnd.random() < 0.04:  # the claim committed but the worker never heard
            self.faults["claim_ack_lost"] += 1
            return
        self.held[turn] = Held(turn=turn, fence=start.fence, matter=m.id, rule=start.rule)

    def _outcome(self, held: Held) -> tuple[str, k.AgentOutcome]:
        names = list(world.OUTCOME_WEIGHTS)
        kind = self.rnd.choices(names, [world.OUTCOME_WEIGHTS[n] for n in names])[0]
        rule = world.RULES.rule(held.rule)
        assert rule is not None
        cards = self.query("card", matter=held.matter, states=["open", "decided"])
        keys = sorted({c.key for c in cards} | {c.id for c in cards})
        return kind, world.outcome(self.rnd, kind, rule, self.now, keys)

    def _finish(self) -> None:
        if not self.held:
            return self._claim()
        held = self.held[self.pick(sorted(self.held))]
        kind, out = self._outcome(held)
        ended = held.turn in self.obs.finished  # e.g. its lease expired at a tick
        reply = self.decide(k.Finish(turn=held.turn, fence=held.fence, outcome=out))
        if reply is None:
            return None  # the worker saw no answer; it reports again later
        self.moves[f"finish:{kind}"] += 1
        if ended:
            self.faults["finish_after_lease_expired"] += 1
            self.expect(reply, "refused")
        else:
            self.expect(reply, "finished", "failed")
        del self.held[held.turn]
        if not ended and self.rnd.random() < 0.05:  # the receipt is sent again
            self.faults["receipt_resent"] += 1
            self.expect(
                self.decide(k.Finish(turn=held.turn, fence=held.fence, outcome=out)), "refused"
            )
        return None

    def _late_finish(self) -> None:
        old = sorted(set(self.obs.started) - set(self.held))
        if not old:
            return
        start = self.obs.started[self.pick(old)]
        held = Held(turn=start.turn, fence=start.fence, matter=start.matter, rule=start.rule)
        _, out = self._outcome(held)
        ended = start.turn in self.obs.finished
        reply = self.decide(k.Finish(turn=start.turn, fence=start.fence, outcome=out))
        if ended:
            self.faults["late_receipt"] += 1
            self.expect(reply, "refused")
        else:  # a forgotten agent (restart, lost claim ack) reports while still leased
            self.faults["forgotten_turn_reports"] += 1
            self.expect(reply, "finished", "failed")

    def _stale_fence(self) -> None:
        if not self.held:
            return
        held = self.held[self.pick(sorted(self.held))]
        fence = held.fence + self.rnd.choice((-1, 1, 1000))
        _, out = self._outcome(held)
        self.faults["stale_fence"] += 1
        self.expect(self.decide(k.Finish(turn=held.turn, fence=fence, outcome=out)), "refused")

    def _heartbeat(self) -> None:
        old = sorted(self.obs.finished)
        if old and (not self.held or self.rnd.random() < 0.2):
            start = self.obs.started[self.pick(old)]
            self.faults["stale_heartbeat"] += 1
            self.expect(self.decide(k.Heartbeat(turn=start.turn, fence=start.fence)), "refused")
            return
        if not self.held:
            return
        held = self.held[self.pick(sorted(self.held))]
        ended = held.turn in self.obs.finished
        reply = self.decide(k.Heartbeat(turn=held.turn, fence=held.fence, lease_s=300))
        self.moves["heartbeat"] += 1
        self.expect(reply, "refused" if ended else "renewed")

    def _answer(self) -> None:
        rnd = self.rnd
        roll = rnd.random()
        if roll < 0.72:
            asks = self.cards("ask", "open")
            if not asks:
                return
            card: Card = self.pick(asks)
            choice = rnd.randint(1, len(card.options))
            self.moves["answer"] += 1
            reply = self.decide(k.Answer(card=card.id, choice=choice, by="owner"))
            self.expect(reply, "answered")
            if reply is not None and rnd.random() < 0.15:
                self.faults["answer_twice"] += 1
                again = rnd.randint(1, len(card.options))
                self.expect(
                    self.decide(k.Answer(card=card.id, choice=again, by="other")), "refused"
                )
        elif roll < 0.8:
            asks = self.cards("ask", "open")
            if asks:
                card = self.pick(asks)
                self.faults["answer_bad_choice"] += 1
                bad = rnd.choice((0, len(card.options) + 1, 99))
                self.expect(self.decide(k.Answer(card=card.id, choice=bad, by="owner")), "invalid")
        elif roll < 0.92:
            gone = self.cards("ask", "decided", "done")
            if gone:
                card = self.pick(gone)
                self.faults["late_answer"] += 1
                self.expect(self.decide(k.Answer(card=card.id, choice=1, by="late")), "refused")
        elif roll < 0.96:
            notices = self.cards("notice", "open")
            if notices:
                card = self.pick(notices)
                self.faults["answer_to_notice"] += 1
                self.expect(self.decide(k.Answer(card=card.id, choice=1, by="owner")), "refused")
        else:
            self.faults["answer_unknown_card"] += 1
            self.expect(self.decide(k.Answer(card="c999999", choice=1, by="owner")), "unknown")

    def _tick(self) -> None:
        reply = self.decide(k.Tick())
        self.moves["tick"] += 1
        if reply is not None:
            self.moves["timers fired"] += int(reply.data["timers_fired"])
            self.faults["lease_expired"] += int(reply.data["leases_expired"])

    def _clock_forward(self) -> None:
        scale = self.rnd.choice(("seconds", "minutes", "hours", "days"))
        amount = {"seconds": (20, 600), "minutes": (5, 180), "hours": (2, 30), "days": (1, 3)}
        self.now += timedelta(**{scale: self.rnd.randint(*amount[scale])})
        self.faults[f"clock_forward_{scale}"] += 1

    def _clock_backward(self) -> None:
        self.now -= timedelta(minutes=self.rnd.randint(1, 240))
        self.faults["clock_backward"] += 1

    def _schedule(self) -> None:
        day = self.now - timedelta(days=self.rnd.choice((0, 0, 1)))
        at = day.replace(hour=2, minute=0, second=0, microsecond=0)
        reply = self.decide(k.ScheduleDue(rule="nightly", at=iso(at)))
        self.moves["schedule"] += 1
        self.expect(reply, "recorded", "duplicate")

    def _outbox(self) -> None:
        rnd = self.rnd
        if rnd.random() < 0.5:
            allowed = self.query("action", states=["allowed"])
            if not allowed:
                return
            act: Action = self.pick(allowed)
            # Two hubs share the ledger: a claim is refused while the other's is live.
            performer = rnd.choice(("hub-a", "hub-b"))
            claim = self.decide(k.ActionTried(action=act.id, by=performer, lease_s=600))
            self.expect(claim, "recorded", "busy")
            if claim is None:
                return  # the decision was lost in a crash
            if claim.code == "busy":
                self.faults["action_claim_busy"] += 1
                return
            roll = rnd.random()
            if roll < 0.1:
                self.faults["performer_died_mid_attempt"] += 1  # its claim lapses later
                return
            if roll < 0.3:
                self.moves["action attempt failed"] += 1
                self.expect(
                    self.decide(k.ActionTried(action=act.id, error="read timed out")), "recorded"
                )
                return
            ok = rnd.random() < 0.85
            self.moves["action done" if ok else "action failed"] += 1
            self.expect(
                self.decide(k.ActionDone(action=act.id, ok=ok, error="" if ok else "422")),
                "recorded",
            )
            if rnd.random() < 0.1:
                self.faults["action_result_resent"] += 1
                self.expect(self.decide(k.ActionDone(action=act.id, ok=True)), "duplicate")
            return
        cards = self.cards("ask", "open") + self.cards("notice", "open")
        if cards:
            card: Card = self.pick(cards)
            channel = rnd.choice(("desk", "chat"))
            self.moves["card delivered"] += 1
            self.expect(
                self.decide(
                    k.Delivered(card=card.id, channel=channel, version=card.version, ref="r1")
                ),
                "recorded",
            )

    def _owner_notice(self) -> None:
        key = self.rnd.choice(("budget", "lost-delivery"))
        self.moves["owner notice"] += 1
        self.expect(
            self.decide(k.OwnerNotice(key=key, title=key, text="told once")),
            "recorded",
            "duplicate",
        )

    def _restart(self) -> None:
        self.faults["restart"] += 1
        self.faults["turns_forgotten_by_restart"] += len(self.held)
        self.held.clear()
        self.store.close()
        self.store, self.ledger = self._open()
        self.obs.full_check(self.ledger)

    def _crash(self) -> None:
        self.crash_next = True

    # -- the drain ------------------------------------------------------------------------

    def drain(self, rounds: int = 400) -> None:
        """No more faults: answer, let time pass, run every matter until all is quiet."""
        self.crash_next = False
        for _ in range(rounds):
            self.step_no += 1
            asks = [c for c in self.query("card", states=["open"]) if c.kind_ == "ask"]
            for card in asks:
                self.expect(self.decide(k.Answer(card=card.id, choice=1, by="drain")), "answered")
            timers: list[Timer] = self.query("timer", states=["armed"])
            running: list[Turn] = self.query("turn", states=["running"])
            runnable: list[Matter] = self.query("matter", states=["runnable"])
            dues = [t.due for t in timers] + [t.lease_until for t in running]
            dues += [m.retry_after for m in runnable if m.retry_after]
            if dues:
                latest = max(parse_instant(d) for d in dues)
                self.now = max(self.now, latest) + timedelta(seconds=1)
                self.expect(self.decide(k.Tick()), "ticked")
            self.held.clear()
            runnable = self.query("matter", states=["runnable"])
            for m in runnable:
                reply = self.decide(k.Claim(matter=m.id, worker="drain"))
                self.expect(reply, "started")
                assert reply is not None
                turn = str(reply.data["turn"])
                quiet = k.AgentOutcome(started=True, ok=True, final_message="nothing more")
                fence = self.obs.started[turn].fence
                self.expect(
                    self.decide(k.Finish(turn=turn, fence=fence, outcome=quiet)), "finished"
                )
            if not (asks or dues or runnable):
                return
        raise self.fail(f"the world did not become quiet in {rounds} drain rounds")


def run(seed: int, steps: int, directory: Path, *, check_every: int = 500) -> Summary:
    return Simulation(
        seed, steps, Path(directory) / f"sim-{seed}.db", check_every=check_every
    ).run()


__all__ = [
    "MOVE_WEIGHTS",
    "CrashingStore",
    "Held",
    "SimulatedCrash",
    "Simulation",
    "Summary",
    "run",
]
