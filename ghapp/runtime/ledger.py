"""Take one decision against the store: load, step, commit facts with their records.

``Ledger.decide(input)`` runs inside one write transaction: needs, load, step, append.
It asks the kernel what to load (:func:`kernel.step.needs`, again with what it loaded
until nothing new is asked), loads it, lets :func:`kernel.step.step` decide, and writes
the new facts and every record they changed before committing. Nothing is acknowledged
before that commit. The shell decides nothing here: not even whether an event is a
duplicate (the kernel answers that from the keys it asked to have checked).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ghapp.runtime import crash
from ghapp.store.base import DuplicateFact, SqlTx, Store, Tx, rebuild_records
from kernel import inputs as k
from kernel import step as core
from kernel.durations import iso
from kernel.facts import Fact
from kernel.model import OWNER_MATTER, Rules
from kernel.records import Card, Matter, Queued, Record, Timer, Turn
from kernel.state import Key, State, replay

Clock = Callable[[], datetime]


@dataclass(frozen=True, slots=True)
class Outcome:
    decision: k.Decision
    seqs: tuple[int, ...]

    @property
    def reply(self) -> k.Reply:
        return self.decision.reply


def load(tx: Tx, state: State, needs: k.Needs, now: datetime) -> None:
    """Load what ``needs`` names into ``state`` (see :class:`kernel.inputs.Needs`); a
    matter already in ``state`` is not read again."""
    for key in needs.event_keys:
        if tx.has_key(key):
            state.seen_keys.add(key)
    matters: set[str] = set(needs.matters)

    def add(rec: Record | None) -> None:
        if rec is None:
            return
        state.put(rec)
        if isinstance(rec, Turn | Card | Timer):
            matters.add(rec.matter)

    for tid in needs.turns:
        add(tx.get("turn", tid))
    for cid in needs.cards:
        add(tx.get("card", cid))
    for aid in needs.actions:
        if (act := tx.get("action", aid)) is not None:
            state.put(act)
    for pid in needs.pipelines:
        if pid not in state.pipelines and (p := tx.get("pipeline", pid)) is not None:
            state.put(p)
            for rec in tx.query("card", matter=pid, states=["open", "decided"]):
                state.put(rec)
    due = now + timedelta(seconds=needs.look_ahead_s)
    at = iso(due) if needs.due_timers or needs.lapsed_leases else ""
    if needs.due_timers:
        for rec in tx.query("timer", states=["armed"], due_before=at):
            add(rec)
    if needs.lapsed_leases:
        for rec in tx.query("turn", states=["running"], due_before=at):
            add(rec)
    if needs.owner:
        for rec in tx.query("card", matter=OWNER_MATTER):
            state.put(rec)
    for mid in sorted(matters - set(state.matters)):
        m = tx.get("matter", mid)
        if not isinstance(m, Matter):
            continue
        state.put(m)
        if needs.matter_cards:
            for rec in tx.query("card", matter=mid, states=["open", "decided"]):
                state.put(rec)
        if m.running and m.running not in state.turns:
            t = tx.get("turn", m.running)
            if t is not None:
                state.put(t)
        if needs.waiting:
            waiting = tx.query("queued", matter=mid, states=["pending"]) if m.waiting else []
            for q in waiting:
                state.put(q)
            for seq in (*m.retry, *(q.seq for q in waiting if isinstance(q, Queued))):
                ev = tx.get("event", f"{seq:012d}")
                if ev is not None:
                    state.put(ev)


def _changes(state: State, touched: Iterable[Key]) -> tuple[list[Record], list[Key]]:
    """The records to write, and the keys to delete (a record the fold removed)."""
    records: list[Record] = []
    gone: list[Key] = []
    for key in sorted(touched):
        rec = state.get(key)
        if rec is None:
            gone.append(key)
        else:
            records.append(rec)
    return records, gone


# needs -> load -> needs again with what was loaded -> ... : a few rounds at most (a
# finished turn's receipt is read once its turn is loaded). More is a bug in needs.
MAX_ROUNDS = 4


@dataclass(frozen=True, slots=True)
class WriteError:
    """The last ledger transaction that failed: its error, and when (epoch seconds)."""

    message: str
    at: float


class Ledger:
    def __init__(self, store: Store, rules: Callable[[], Rules], clock: Clock) -> None:
        self.store = store
        self.rules = rules
        self.clock = clock
        self.write_error: WriteError | None = None  # set while the ledger cannot append

    def clean(self, inp: k.Input) -> k.Input:
        """``inp`` as it may be stored (a subclass redacts text from outside here)."""
        return inp

    def decide(self, inp: k.Input, *, now: datetime | None = None) -> Outcome:
        return self.decide_many([inp], now=now)[0]

    def decide_many(
        self,
        inputs: list[k.Input],
        *,
        now: datetime | None = None,
        cleaned: bool = False,
        points: Callable[[str], None] | None = None,
        durable: bool = True,
    ) -> list[Outcome]:
        """Several decisions in one transaction (group commit): all commit, or none.

        ``cleaned``: the caller passed every input through :meth:`clean` already (the
        ingest queue does, for a big delivery, outside its writer thread).

        ``durable=False``: the commit need not wait for the disk (the store's
        ``write(durable=False)``), for a caller that keeps its own copy until it syncs.

        ``points``: called with the name of each point of the commit protocol this
        transaction passes (``before_insert`` once the write transaction is open,
        ``after_insert_before_commit`` before it commits): the crash test hook
        (:mod:`ghapp.runtime.crash`).

        A transaction that fails is remembered (:attr:`write_error`: what and when, for
        ``/healthz``) until one that appends facts commits: a commit that appends
        nothing proves nothing about a full disk."""
        if not cleaned:
            inputs = [self.clean(i) for i in inputs]
        rules = self.rules()
        when = now or self.clock()
        try:
            with self.store.write(durable=durable) as tx:
                if points is not None:
                    points(crash.BEFORE_INSERT)
                first = [core.needs(inp, rules) for inp in inputs]
                if inputs and all(n.narrow for n in first):
                    outs = self._decide_together(tx, inputs, first, rules, when)
                else:
                    outs = [self._decide(tx, inp, rules, when) for inp in inputs]
                if points is not None:
                    points(crash.AFTER_INSERT_BEFORE_COMMIT)
        except DuplicateFact:
            raise  # a race between two writers on one key: the ledger itself is fine
        except Exception as exc:
            self.write_error = WriteError(message=f"{type(exc).__name__}: {exc}", at=time.time())
            raise
        if any(o.seqs for o in outs):
            self.write_error = None
        return outs

    def _decide_together(
        self, tx: Tx, inputs: list[k.Input], needs: list[k.Needs], rules: Rules, when: datetime
    ) -> list[Outcome]:
        """Decide a group whose needs are narrow (a burst of webhooks) in one pass: one
        read for the keys and matters all of them need, the kernel deciding each in turn
        on one shared state (each sees what the ones before it changed), one write.

        The same decisions as one :meth:`_decide` each: narrow needs never grow."""
        keys = [key for n in needs for key in n.event_keys]
        wanted = [m for n in needs for m in n.matters]
        stored, last, recs = tx.ingest_view(keys, wanted)
        state = State(last_event=last, seen_keys=stored)
        for rec in recs:
            state.put(rec)
        decisions: list[k.Decision] = []
        facts: list[Fact] = []
        touched: set[Key] = set()
        for inp in inputs:
            decided = core.step(state, inp, now=when, rules=rules)
            decisions.append(decided)
            facts.extend(decided.facts)
            touched |= decided.touched
        seqs = iter(tx.append(facts, *_changes(state, touched)) if facts else [])
        return [Outcome(d, tuple(next(seqs) for _ in d.facts)) for d in decisions]

    def _decide(self, tx: Tx, inp: k.Input, rules: Rules, when: datetime) -> Outcome:
        """needs -> load -> step -> append, for one input."""
        state = State(last_event=tx.last_event())
        if (meta := tx.get("meta", "counters")) is not None:
            state.put(meta)
        asked = k.Needs()
        for _ in range(MAX_ROUNDS):
            fresh = core.needs(inp, rules, state).beyond(asked)
            if fresh is None:
                break
            load(tx, state, fresh, when)
            asked = asked | fresh
        else:
            raise RuntimeError(f"the needs of {type(inp).__name__} kept growing")  # a bug
        decision = core.step(state, inp, now=when, rules=rules)
        seqs = tx.append(decision.facts, *_changes(state, decision.touched))
        return Outcome(decision, tuple(seqs))

    # -- rebuild ------------------------------------------------------------------------

    def replayed(self) -> State:
        with self.store.read() as tx:
            facts = [fact for _, _, fact in tx.facts()]
        return replay(facts)

    def check(self) -> list[str]:
        """Differences between the live projections and a replay of the facts."""
        from kernel.codec import dump_record  # noqa: PLC0415  # only rebuild needs it

        # One read for both (a server may be writing): the facts and the projections
        # read in two gave differences that were not there, and advised a rebuild.
        with self.store.read() as tx:
            if isinstance(tx, SqlTx):
                tx.snapshot()
            facts = [fact for _, _, fact in tx.facts()]
            live = {(k_, i): d for k_, i, d in tx.raw_records()}
        fresh = {(r.kind, r.id): dump_record(r) for r in replay(facts).records()}
        diffs: list[str] = []
        for key in sorted(set(fresh) | set(live)):
            a, b = live.get(key), fresh.get(key)
            if a is None:
                diffs.append(f"missing {key[0]} {key[1]}")
            elif b is None:
                diffs.append(f"extra {key[0]} {key[1]}")
            elif a != b:
                diffs.append(f"differs {key[0]} {key[1]}")
        return diffs

    def rebuild(self) -> int:
        with self.store.write(long=True) as tx:
            return rebuild_records(tx)
