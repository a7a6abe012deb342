"""Take one decision against the store: load, step, commit facts with their records.

``Ledger.decide(input)`` runs inside one write transaction: it loads the records the
kernel needs, calls :func:`kernel.step.step`, and writes the new facts and every record
they changed before committing. Nothing is acknowledged before that commit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ghapp.store.base import Store, Tx, rebuild_records
from kernel import inputs as k
from kernel import step as core
from kernel.durations import iso
from kernel.facts import event_key
from kernel.model import OWNER_MATTER, Event, Rules
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


def load_state(
    tx: Tx, needs: k.Needs, now: datetime, *, with_events: bool = False, with_cards: bool = True
) -> State:
    st = State(last_event=tx.last_event())
    meta = tx.get("meta", "counters")
    if meta is not None:
        st.put(meta)
    matters: set[str] = set(needs.matters)

    def add(rec: Record | None) -> None:
        if rec is None:
            return
        st.put(rec)
        if isinstance(rec, Turn | Card | Timer):
            matters.add(rec.matter)

    for tid in needs.turns:
        add(tx.get("turn", tid))
    for cid in needs.cards:
        add(tx.get("card", cid))
    at = iso(now) if needs.due_timers or needs.lapsed_leases else ""
    if needs.due_timers:
        for rec in tx.query("timer", states=["armed"], due_before=at):
            add(rec)
    if needs.lapsed_leases:
        for rec in tx.query("turn", states=["running"], due_before=at):
            add(rec)
    if needs.owner:
        for rec in tx.query("card", matter=OWNER_MATTER):
            st.put(rec)
    for mid in sorted(matters):
        m = tx.get("matter", mid)
        if not isinstance(m, Matter):
            continue
        st.put(m)
        if with_cards:
            for rec in tx.query("card", matter=mid, states=["open", "decided"]):
                st.put(rec)
        if m.running and m.running not in st.turns:
            t = tx.get("turn", m.running)
            if t is not None:
                st.put(t)
        if with_events:
            waiting = tx.query("queued", matter=mid, states=["pending"]) if m.waiting else []
            for q in waiting:
                st.put(q)
            for seq in (*m.retry, *(q.seq for q in waiting if isinstance(q, Queued))):
                ev = tx.get("event", f"{seq:012d}")
                if ev is not None:
                    st.put(ev)
    return st


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


def _duplicate(event: Event) -> k.Decision:
    reply = k.Reply(
        ok=True,
        code="duplicate",
        message=f"duplicate: ({event.source}, {event.id}) was recorded before",
    )
    return k.Decision(facts=(), effects=(), reply=reply, touched=frozenset())


class Ledger:
    def __init__(self, store: Store, rules: Callable[[], Rules], clock: Clock) -> None:
        self.store = store
        self.rules = rules
        self.clock = clock

    def decide(self, inp: k.Input, *, now: datetime | None = None) -> Outcome:
        return self.decide_many([inp], now=now)[0]

    def decide_many(self, inputs: list[k.Input], *, now: datetime | None = None) -> list[Outcome]:
        """Several decisions in one transaction (group commit): all commit, or none."""
        rules = self.rules()
        when = now or self.clock()
        outs: list[Outcome] = []
        with self.store.write() as tx:
            if inputs and all(isinstance(i, k.Ingest) for i in inputs):
                return self._ingest_many(tx, inputs, rules, when)  # type: ignore[arg-type]
            for inp in inputs:
                outs.append(self._decide(tx, inp, rules, when))
        return outs

    def _ingest_many(
        self, tx: Tx, inputs: list[k.Ingest], rules: Rules, when: datetime
    ) -> list[Outcome]:
        """Record a group of events (a burst of webhooks) in one pass: one read for all
        they need, the kernel deciding each in turn on one shared state, one write.

        The same decisions as one ``_decide`` each: an ingest reads only the counters,
        the matters its event routes to, and whether its key is stored; each decision
        sees the records the ones before it changed.
        """
        keys = [event_key(i.event) for i in inputs]
        wanted = [m for i in inputs for m in core.needs(i, rules).matters]
        stored, last, recs = tx.ingest_view(keys, wanted)
        state = State(last_event=last)
        for rec in recs:
            state.put(rec)
        decisions: list[k.Decision | None] = []
        facts: list[Any] = []
        touched: set[Key] = set()
        for inp, key in zip(inputs, keys, strict=True):
            if key in stored:
                decisions.append(None)
                continue
            stored.add(key)  # the same event twice in one group: the second is a duplicate
            decided = core.step(state, inp, now=when, rules=rules)
            decisions.append(decided)
            facts.extend(decided.facts)
            touched |= decided.touched
        seqs = iter(tx.append(facts, *_changes(state, touched)) if facts else [])
        outs: list[Outcome] = []
        for inp, done in zip(inputs, decisions, strict=True):
            if done is None:
                outs.append(Outcome(_duplicate(inp.event), ()))
            else:
                outs.append(Outcome(done, tuple(next(seqs) for _ in done.facts)))
        return outs

    def _decide(self, tx: Tx, inp: k.Input, rules: Rules, when: datetime) -> Outcome:
        if isinstance(inp, k.Ingest) and tx.has_key(event_key(inp.event)):
            return Outcome(_duplicate(inp.event), ())
        needs = core.needs(inp, rules)
        # An ingest only routes the event to matters: it reads no cards.
        state = load_state(
            tx,
            needs,
            when,
            with_events=isinstance(inp, k.Claim),
            with_cards=not isinstance(inp, k.Ingest),
        )
        if isinstance(inp, k.Finish):
            t = state.turns.get(inp.turn)
            if t is not None:
                m = state.matters.get(t.matter)
                subject = m.subject if m is not None else ""
                extra = core.emitted_matters(inp, rules, rules.rule(t.rule), subject)
                if extra - set(state.matters):
                    more = load_state(tx, k.Needs(matters=extra), when)
                    for rec in more.records():
                        if rec.kind != "meta":
                            state.put(rec)
        aid: str | None = None
        if isinstance(inp, k.ActionTried | k.ActionDone):
            aid = inp.action
        elif isinstance(inp, k.Answer) and (card := state.cards.get(inp.card)) is not None:
            aid = card.action  # answering an approval card decides its action
        if aid is not None and (act := tx.get("action", aid)) is not None:
            state.put(act)
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

        fresh = {(r.kind, r.id): dump_record(r) for r in self.replayed().records()}
        with self.store.read() as tx:
            live = {(k_, i): d for k_, i, d in tx.raw_records()}
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
        with self.store.write() as tx:
            return rebuild_records(tx)
