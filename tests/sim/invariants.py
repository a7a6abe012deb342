"""The invariants, checked against what the ledger really committed.

:class:`Observer` reads the facts each decision committed (``tx.facts(after=...)``),
folds them into its own state with :func:`kernel.state.apply` (an incremental replay,
independent of the ledger's partial loads) and checks, after every decision:

- each ``(source, id)`` is recorded once among the EventRecorded facts;
- each turn has at most one TurnFinished, and everything a turn's receipt produced
  (cards, card updates and resolutions, timers, emitted events, actions) is committed in
  the same transaction as that TurnFinished: a receipt is applied at most once, atomically;
- at most one turn runs per matter, and the matter's ``running`` names it;
- every projection record the decision touched (by the ledger's account or by the fold's)
  equals the record the replay gives.

:meth:`Observer.full_check` compares every projection with the replay (and asks
``Ledger.check()`` for its own rebuild); :meth:`Observer.final_check` runs after the
drain and checks that every accepted event was consumed by exactly one turn per route.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from ghapp.runtime.ledger import Ledger
from ghapp.store.base import Store, Tx
from kernel import facts as f
from kernel.codec import dump_fact, dump_record
from kernel.records import Matter, Turn
from kernel.state import Key, State, apply


class InvariantBroken(AssertionError):
    """An invariant does not hold; the message says which, where and at which step."""


def _producer(fact: f.Fact) -> str | None:
    """The turn whose receipt produced ``fact``, if it is a receipt consequence."""
    if isinstance(fact, f.CardOpened | f.CardUpdated | f.CardResolved | f.ActionRequested):
        return fact.turn or None
    if isinstance(fact, f.TimerArmed):
        return fact.turn or None
    if isinstance(fact, f.EventRecorded) and fact.event.source == "agent":
        return fact.event.id.split(".", 1)[0]
    return None


@dataclass
class Observer:
    fold: State = field(default_factory=State)
    last_seq: int = 0
    events: dict[int, f.EventRecorded] = field(default_factory=dict)
    keys: set[tuple[str, str]] = field(default_factory=set)
    started: dict[str, f.TurnStarted] = field(default_factory=dict)
    finished: dict[str, f.TurnFinished] = field(default_factory=dict)
    finished_in: dict[str, int] = field(default_factory=dict)  # turn -> transaction number
    transactions: int = 0
    checks: Counter[str] = field(default_factory=Counter)
    digest: Any = field(default_factory=hashlib.sha256)
    where: str = ""

    def fail(self, what: str) -> InvariantBroken:
        return InvariantBroken(f"{self.where}: {what}")

    # -- after each decision ------------------------------------------------------------

    def observe(self, store: Store, ledger_touched: frozenset[Key] = frozenset()) -> int:
        """Read and check the facts committed since the last call; returns their number."""
        with store.read() as tx:
            rows = tx.facts(after=self.last_seq)
            if not rows:
                return 0
            self.transactions += 1
            touched: set[Key] = set(ledger_touched)
            for seq, _at, fact in rows:
                if seq != self.last_seq + 1:
                    raise self.fail(f"fact seq {seq} follows {self.last_seq}: a gap")
                self.last_seq = seq
                self.digest.update(dump_fact(fact).encode())
                self.digest.update(b"\n")
                self._one(fact)
                touched |= apply(self.fold, fact)
            self._same_transaction([fact for _, _, fact in rows])
            for kind, rid in sorted(touched):
                mine = self.fold.get((kind, rid))
                live = tx.get(kind, rid)
                a = dump_record(mine) if mine is not None else None
                b = dump_record(live) if live is not None else None
                if a != b:
                    raise self.fail(
                        f"projection {kind} {rid} differs from the replay:\n"
                        f"  store:  {b}\n  replay: {a}"
                    )
            self.checks["records compared"] += len(touched)
            self._running(tx)
        self.checks["decisions checked"] += 1
        return len(rows)

    def _one(self, fact: f.Fact) -> None:
        if isinstance(fact, f.EventRecorded):
            key = (fact.event.source, fact.event.id)
            if key in self.keys:
                raise self.fail(f"event {key} recorded twice")
            self.keys.add(key)
            self.events[fact.seq] = fact
            if fact.dispatched != bool(fact.routes) or (not fact.routes and not fact.reason):
                raise self.fail(f"event {fact.seq} has routes {fact.routes} but {fact}")
        elif isinstance(fact, f.TurnStarted):
            if fact.turn in self.started:
                raise self.fail(f"turn {fact.turn} started twice")
            self.started[fact.turn] = fact
        elif isinstance(fact, f.TurnFinished):
            if fact.turn in self.finished:
                raise self.fail(f"turn {fact.turn} finished twice: a receipt applied again")
            if fact.turn not in self.started:
                raise self.fail(f"turn {fact.turn} finished but never started")
            self.finished[fact.turn] = fact
            self.finished_in[fact.turn] = self.transactions

    def _same_transaction(self, facts: list[f.Fact]) -> None:
        for fact in facts:
            turn = _producer(fact)
            if turn is None:
                continue
            if self.finished_in.get(turn) != self.transactions:
                raise self.fail(
                    f"{type(fact).__name__} of turn {turn} was committed outside the "
                    f"transaction of its TurnFinished: {fact}"
                )
        self.checks["transactions checked"] += 1

    def _running(self, tx: Tx) -> None:
        query = tx.query
        per_matter: dict[str, list[str]] = defaultdict(list)
        for t in query("turn", states=["running"]):
            assert isinstance(t, Turn)
            per_matter[t.matter].append(t.id)
        for mid, turns in sorted(per_matter.items()):
            if len(turns) > 1:
                raise self.fail(f"matter {mid} has {len(turns)} running turns: {turns}")
        running = {}
        for m in query("matter", states=["running"]):
            assert isinstance(m, Matter)
            running[m.id] = m.running
        expected = {mid: turns[0] for mid, turns in per_matter.items()}
        if running != expected:
            raise self.fail(f"matters say {running} run, the turns say {expected}")
        self.checks["running checked"] += 1

    # -- now and then -------------------------------------------------------------------

    def full_check(self, ledger: Ledger) -> None:
        """Every projection row equals a full replay of the facts (``Ledger.check()``)."""
        diffs = ledger.check()
        if diffs:
            raise self.fail(f"Ledger.check() found {len(diffs)} differences: {diffs[:10]}")
        self.checks["full replays"] += 1

    def fact_hash(self) -> str:
        return str(self.digest.hexdigest())

    # -- after the drain ----------------------------------------------------------------

    def final_check(self) -> None:
        """Every accepted event ends in exactly one consuming turn's batch per route, and
        every malformed receipt in exactly one repair turn that did not fail to run."""
        unfinished = sorted(set(self.started) - set(self.finished))
        if unfinished:
            raise self.fail(f"turns still unfinished after the drain: {unfinished[:10]}")
        consumed: Counter[tuple[int, str]] = Counter()
        for tid, start in self.started.items():
            for seq in start.events:
                ev = self.events.get(seq)
                if ev is None or start.matter not in ev.routes:
                    raise self.fail(
                        f"turn {tid} of {start.matter} ran event {seq} not routed there"
                    )
                if not self.finished[tid].retry:
                    consumed[(seq, start.matter)] += 1
        for seq, ev in sorted(self.events.items()):
            if not ev.dispatched:
                if ev.routes or not ev.reason:
                    raise self.fail(f"event {seq} not dispatched without a reason")
                self.checks["events not dispatched, with reason"] += 1
                continue
            for mid in ev.routes:
                n = consumed[(seq, mid)]
                if n != 1:
                    raise self.fail(
                        f"event {seq} ({ev.event.source}, {ev.event.id}) was consumed by "
                        f"{n} turns of {mid}, not exactly one"
                    )
                self.checks["routes consumed once"] += 1
        for tid, fin in sorted(self.finished.items()):
            if not fin.repair:
                continue
            repairs = [s.turn for s in self.started.values() if s.repair_of == tid]
            ended = [r for r in repairs if not self.finished[r].retry]
            if len(ended) != 1:
                raise self.fail(
                    f"turn {tid}'s malformed receipt was owed one repair; repair turns "
                    f"{repairs} ended it {len(ended)} times"
                )
            self.checks["repairs owed and run once"] += 1
        for m in self.fold.matters.values():
            if m.waiting or m.retry or m.running or m.repair:
                raise self.fail(f"matter {m.id} is not quiet after the drain: {m}")
