"""The hub: the shell's service layer over the ledger.

It records events, claims and runs turns, fires timers and schedules, delivers cards to
channels and performs write-backs through the outbox. The CLI, the HTTP server and the
worker loop all go through it.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from ghapp.runtime.budget import UsageMeter, cap_notice, day_bounds
from ghapp.runtime.cards import Cards, ChannelMaker
from ghapp.runtime.ledger import Ledger, Outcome
from ghapp.runtime.outbox import Outbox
from ghapp.runtime.redact import is_maskable, is_secret_key, mask, masked_with_escapes
from ghapp.runtime.rules_file import real_clock
from ghapp.runtime.turns import (
    PreparedTurn,
    abandoned,
    hold,
    prepare,
    run_agent,
    stop_leftovers,
)
from ghapp.store.base import Store
from kernel import facts as f
from kernel import inputs as k
from kernel.durations import iso, parse_instant
from kernel.model import OWNER_MATTER, Event, Rules
from kernel.records import Card, EventRow, Matter, Turn
from plugins.protocols import Channel, Executor

log = logging.getLogger("autoloop.hub")

Redact = Callable[[str], str]
# A claim lasts the rule's timeout_s plus this margin, and is renewed by heartbeats while
# the agent runs; AUTOLOOP_LEASE_MARGIN_S changes it (tests, or workers on slow links).
LEASE_MARGIN_S = 120.0
HEARTBEAT_EVERY_S = 30.0


def _reason(exc: BaseException) -> str:
    """An exception as one short line: ``OSError`` keeps its errno name (``ENOSPC``)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{name}: {exc.strerror or exc}{where}"
    return f"{type(exc).__name__}: {exc}"


def scrub(value: Any, redact: Redact) -> Any:
    """``value`` with ``redact`` applied to every string in it (dicts, lists, tuples), and
    every value under a secret-looking key (``password``, ``token``...) masked whole: the
    redactor sees one string at a time, so ``{"password": "p@ss"}`` kept its value."""
    kind = type(value)  # exact types first: decoded JSON holds nothing else
    if kind is str:
        return redact(value)
    if kind is dict:
        out = {}
        for k_, v in value.items():  # strings and scalars inline: most values are one
            t = type(v)
            if type(k_) is not str:
                out[k_] = scrub(v, redact)
            elif _secret_key(k_):
                out[redact(k_)] = mask("secret") if is_maskable(v) else v
            else:  # a key is text from outside too (the redactor remembers short texts)
                out[redact(k_)] = redact(v) if t is str else v if t in _PLAIN else scrub(v, redact)
        return out
    if kind is list:
        return [
            redact(v) if type(v) is str else v if type(v) in _PLAIN else scrub(v, redact)
            for v in value
        ]
    if kind in _PLAIN:
        return value
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return scrub(dict(value), redact)
    if isinstance(value, list | tuple):
        return type(value)(scrub(v, redact) for v in value)
    return value


_SECRET_KEYS: dict[str, bool] = {}  # the few key names of events, looked at once each


def _secret_key(name: str) -> bool:
    """:func:`is_secret_key`, remembered: a webhook's details repeat the same keys, and the
    regular expression costs about 3 us a key."""
    found = _SECRET_KEYS.get(name)
    if found is None:
        if len(_SECRET_KEYS) >= 4096:  # keys from anywhere: the memory stays bounded
            _SECRET_KEYS.clear()
        found = _SECRET_KEYS[name] = is_secret_key(name)
    return found


_PLAIN = (int, float, bool, type(None))


def masked_key(redact: Redact, value: str, key: bytes = b"") -> str:
    """``value``, a key of the ledger (an event's id, a matter), as it may be stored: as it
    is when it holds no secret, else masked and followed by the first 16 hex digits of
    its HMAC-SHA-256 under ``key`` (a key of this install's: a plain digest would let a
    guess of a short secret be checked against it), so that a key the masks would make
    equal to another stays apart from it and the same key sent again is still found a
    duplicate. Without ``key``, a plain SHA-256."""
    shown = redact(value)
    if shown == value:
        return value
    data = value.encode("utf-8", "surrogatepass")
    digest = hmac.new(key, data, "sha256") if key else hashlib.sha256(data)
    return f"{shown}~{digest.hexdigest()[:16]}"


class RedactingLedger(Ledger):
    """The ledger as the hub uses it: text from outside is redacted before it is stored.

    Every input that carries text someone else wrote passes here, whoever sends it (the
    CLI, the HTTP ingest queue, the worker): an event's subject, summary, link and
    details; an agent's final message and error; a write-back's result and error; an
    owner notice. Ids, sources and types are kept as they are, so that deduplication and
    routing do not change, unless a secret hides in an id or a matter: then the masked text
    with a digest of the original is stored (:func:`masked_key`: the same id gives the
    same key, two ids the masks would make equal stay two). A NUL character in a subject
    becomes U+FFFD, which every ledger can store (a subject is part of a matter's id). A
    comment body the hub will post for an agent is masked too: a secret posted where
    people read it is worse than a masked word in a comment.
    """

    def __init__(
        self,
        store: Store,
        rules: Callable[[], Rules],
        clock: Callable[[], datetime],
        redact: Redact,
        id_key: bytes = b"",
    ) -> None:
        super().__init__(store, rules, clock)
        self.redact = redact
        self.id_key = id_key  # keys the digest of an id or matter that held a secret

    def clean(self, inp: k.Input) -> k.Input:
        r = self.redact
        if type(inp) is k.Ingest:  # every webhook: built directly, not by replace()
            ev = inp.event
            return k.Ingest(
                event=Event(
                    source=ev.source,
                    id=masked_key(r, ev.id, self.id_key),
                    type=ev.type,
                    # a subject is part of a matter's id, a key of the ledger: PostgreSQL
                    # refuses NUL characters in keys (SQLite would take them)
                    subject=r(ev.subject).replace("\x00", "\ufffd"),
                    summary=r(ev.summary),
                    link=r(ev.link),
                    hops=ev.hops,
                    chain=ev.chain,
                    details=scrub(dict(ev.details), r),
                    matter=masked_key(r, ev.matter, self.id_key) if ev.matter else ev.matter,
                ),
                ignore=inp.ignore,
                content_key=inp.content_key,
            )
        if isinstance(inp, k.Finish):
            out = inp.outcome
            return replace(
                inp,
                outcome=replace(
                    out, final_message=masked_with_escapes(r, out.final_message), error=r(out.error)
                ),
            )
        if isinstance(inp, k.ActionDone):
            return replace(inp, result=scrub(dict(inp.result), r), error=r(inp.error))
        if isinstance(inp, k.ActionTried):
            return replace(inp, error=r(inp.error))
        if isinstance(inp, k.OwnerNotice):
            return replace(inp, title=r(inp.title), text=r(inp.text))
        return inp


@dataclass
class DrainReport:
    turns: list[str] = field(default_factory=list)
    cards: list[str] = field(default_factory=list)
    timers: int = 0
    retry_at: datetime | None = None  # a failed turn's retry is due then, not run yet


class Hub:
    def __init__(
        self,
        *,
        home: Path,
        store: Store,
        rules: Callable[[], Rules],
        clock: Callable[[], datetime] = real_clock,
        agent_for: Callable[[str], object],
        channels: Mapping[str, Channel] | None = None,
        channel_makers: Mapping[str, ChannelMaker] | None = None,
        executors: Mapping[str, Executor] | None = None,
        redact: Redact = lambda s: s,
        on_card: Callable[[Card], None] | None = None,
        on_turn: Callable[[str, Turn], None] | None = None,
        lease_margin_s: float = LEASE_MARGIN_S,
        id_key: bytes = b"",
    ) -> None:
        self.home = home
        self.store = store
        self.rules = rules
        self.clock = clock
        self.ledger: Ledger = RedactingLedger(store, rules, clock, redact, id_key)
        self.agent_for = agent_for
        self.redact = redact
        self.on_turn = on_turn
        self.cards = Cards(
            store, self.ledger, rules, channels=channels, makers=channel_makers, on_card=on_card
        )
        self.outbox = Outbox(store, self.ledger, executors=executors, redact=redact)
        self.outbox.cards = self.cards.deliver
        self.outbox.after = self.cards.send_effects
        self.channels = self.cards.channels  # channels given by name (the Action's)
        self.channel_makers = self.cards.makers  # the App adds github-comment's maker here
        self.executors = self.outbox.executors
        self.lease_margin_s = lease_margin_s
        self._usage = UsageMeter()  # today's spend, read incrementally from the facts
        self._usage_lock = threading.Lock()
        self.wake_at: datetime | None = None  # when the last tick asked for the next one
        self.retry_at: datetime | None = None  # the next retry after a failed turn's backoff
        # turns whose agents a stop killed (a second Ctrl-C): not the agent's failure, so
        # their retry, at the next start, waits out no backoff
        self.stopped: set[str] = set()
        self._orphans_told: set[str] = set()  # matters said to wait for a rule that is gone

    # -- inputs ---------------------------------------------------------------------------

    def emit(self, event: Event, *, content_key: str = "") -> Outcome:
        """Record ``event`` (once per source and id; once per ``content_key`` too, when
        one is given: the same content under another id is a duplicate)."""
        out = self.ledger.decide(k.Ingest(event=event, content_key=content_key))
        self._after(out)
        return out

    def answer(self, card: str, choice: int, *, by: str, via: str = "cli") -> Outcome:
        out = self.ledger.decide(k.Answer(card=card, choice=choice, by=by, via=via))
        self._after(out)
        return out

    def dismiss(self, card: str, *, by: str = "") -> Outcome:
        """Close an open notice card; its channels show it closed."""
        out = self.ledger.decide(k.Dismiss(card=card, by=by))
        self._after(out)
        return out

    def tick(self, *, look_ahead_s: float = 0.0) -> int:
        """Fire due timers, expire lapsed leases, tick due schedules (the kernel decides
        which, from now in the rules' time zone); returns how many timers and schedules
        fired. ``wake_at`` becomes the next instant the kernel wants a tick, among the
        timers and leases due within ``look_ahead_s`` and the schedules."""
        rules = self.rules()
        now = self.clock()
        local = now.astimezone(ZoneInfo(rules.timezone))
        out = self.ledger.decide(k.Tick(local_now=local, look_ahead_s=look_ahead_s), now=now)
        self._after(out)
        self.wake_at = out.decision.wake_at
        for fact in out.decision.facts:
            if isinstance(fact, f.TurnFinished) and fact.outcome == "lease_expired":
                self.stop_orphans(fact.turn)
        return int(out.reply.data.get("timers_fired", 0)) + int(out.reply.data.get("schedules", 0))

    # -- turns ----------------------------------------------------------------------------

    def runnable(self, worker: str = "local") -> list[Matter]:
        """The matters ``worker`` may start a turn of now; :attr:`retry_at` becomes the
        earliest instant one of its matters waits for (the backoff after a failed turn),
        or None."""
        rules = self.rules()
        with self.store.read() as tx:
            ms = [m for m in tx.query("matter", states=["runnable"]) if isinstance(m, Matter)]
        now = iso(self.clock())
        later: list[str] = []
        out = []
        for m in ms:
            rule = rules.rule(m.rule)
            if rule is None:
                if m.id not in self._orphans_told:  # once a process, not every pass
                    self._orphans_told.add(m.id)
                    log.warning(
                        "matter %s waits for rule %r, which the rules no longer have: its "
                        "events wait in the ledger until a rule of that name is back",
                        m.id, m.rule,
                    )  # fmt: skip
                continue
            spec = rules.agents.get(rule.agent)
            want = spec.worker if spec else "any"
            if not (want in ("any", worker) or worker == "*"):
                continue  # another worker's (nor its retry's time this one's to wake for)
            if m.retry_after > now:
                later.append(m.retry_after)
            else:
                out.append(m)
        self.retry_at = parse_instant(min(later)) if later else None
        # The oldest waiting first (a retry or a repair before any), not by name: a
        # matter named late in the alphabet waited behind every newer one.
        out.sort(key=lambda m: (m.since if m.waiting and not (m.retry or m.repair) else 0, m.id))
        return out

    def lease_s(self, timeout_s: float) -> int:
        return max(1, math.ceil(timeout_s + self.lease_margin_s))

    def over_budget(self) -> bool:
        """True when today's turns reached a daily cap; tells the owner once a day."""
        rules = self.rules()
        if rules.max_usd_per_day is None and rules.max_tokens_per_day is None:
            return False
        now = self.clock()
        _, start, end = day_bounds(now, rules.timezone)
        with self._usage_lock, self.store.read() as tx:
            self._usage.refresh(tx, since=start)
            used = self._usage.usage(start, end)
            owner = [c for c in tx.query("card", matter=OWNER_MATTER) if isinstance(c, Card)]
        told = {c.key for c in owner}
        notice = cap_notice(rules, now, used)
        # A cap card whose day is over (or whose cap was raised) says nothing true now:
        # it stayed open after turns ran again.
        for card in owner:
            stale = notice is None or card.key != notice.key
            if card.key.startswith("budget/") and card.state == "open" and stale:
                self.dismiss(card.id, by="autoloop")
        if notice is None:
            return False
        if notice.key not in told:
            self._after(self.ledger.decide(notice))
        return True

    def claim(self, matter: str, worker: str) -> Turn | None:
        """Start a turn of ``matter`` for ``worker``; None when it may not start now."""
        if self.over_budget():  # its events stay pending until the cap allows
            return None
        rules = self.rules()
        with self.store.read() as tx:
            m = tx.get("matter", matter)
        rule = rules.rule(m.rule) if isinstance(m, Matter) else None
        lease = self.lease_s(rule.timeout_s if rule else 1800)
        out = self.ledger.decide(k.Claim(matter=matter, worker=worker, lease_s=lease))
        if not out.reply.ok:
            return None
        with self.store.read() as tx:
            t = tx.get("turn", str(out.reply.data["turn"]))
        return t if isinstance(t, Turn) else None

    def stop_orphans(self, turn_id: str) -> list[int]:
        """Kill what still runs, on this host, for a turn whose worker lost its claim.

        A worker killed mid-turn leaves its agent running (the agent has a session of its
        own). Once the lease has lapsed, the retry must not run beside it in the same
        folder and agent session, so whoever sees the lapse here stops it first.
        """
        return stop_leftovers(self.home / "turns" / turn_id)

    def take_back(self) -> list[str]:
        """End the running turns whose worker process on this host is gone (killed with
        SIGKILL, or the machine lost power), as failed, so that they run again now, as
        their rules' retries allow, and not when their claims lapse (the rule's timeout_s
        plus the lease margin later). Whatever still runs for them is stopped first.
        For a worker when it starts, and for a drain."""
        with self.store.read() as tx:
            running = [t for t in tx.query("turn", states=["running"]) if isinstance(t, Turn)]
        taken: list[str] = []
        for t in running:
            why = abandoned(self.home / "turns" / t.id)
            if not why:
                continue
            self.stop_orphans(t.id)
            error = f"{why}; taken back by a worker started on this host"
            outcome = k.AgentOutcome(started=True, ok=False, error=error, backoff=False)
            out = self.ledger.decide(k.Finish(turn=t.id, fence=t.fence, outcome=outcome))
            self._after(out)
            if out.reply.ok:
                log.warning("turn %s taken back: %s", t.id, why)
                taken.append(t.id)
        return taken

    def interrupted(self, turn: Turn) -> None:
        """A drain was stopped (Ctrl-C) while ``turn`` ran here: its agent, in a session
        of its own that the terminal's signal does not reach, is stopped (it ran on
        unwatched, its turn "running" until its claim lapsed), and the turn ends failed,
        to run again at once at the next drain, as its rule's retries allow."""
        self.stopped.add(turn.id)
        self.stop_orphans(turn.id)
        error = "stopped: the drain that ran it was interrupted (Ctrl-C)"
        outcome = k.AgentOutcome(started=True, ok=False, error=error, backoff=False)
        try:
            out = self.ledger.decide(k.Finish(turn=turn.id, fence=turn.fence, outcome=outcome))
        except Exception as exc:  # (the Ctrl-C came in the middle of a write of the turn's)
            log.warning(
                "turn %s: its end could not be recorded now (%s); the next drain on this "
                "host takes it back", turn.id, exc,
            )  # fmt: skip
            return
        self._after(out)
        self._tell_end(turn.id)

    def _tell_end(self, turn_id: str) -> None:
        """``on_turn("end", ...)`` with the turn as the ledger holds it now."""
        if self.on_turn is None:
            return
        with self.store.read() as tx:
            done = tx.get("turn", turn_id)
        if isinstance(done, Turn):
            self.on_turn("end", done)

    def run(self, turn: Turn, *, heartbeat_every_s: float = HEARTBEAT_EVERY_S) -> Outcome:
        rules = self.rules()
        rule = rules.rule(turn.rule)
        events: list[EventRow] = []
        repair_error = ""
        lapsed: list[Turn] = []
        with self.store.read() as tx:
            if turn.kind_ == "retry":
                lapsed = [
                    t
                    for t in tx.query("turn", matter=turn.matter, states=["failed"])
                    if isinstance(t, Turn) and t.outcome == "lease_expired"
                ]
            for seq in turn.events:
                row = tx.get("event", f"{seq:012d}")
                if isinstance(row, EventRow):
                    events.append(row)
            waiting = [
                c
                for c in tx.query("card", matter=turn.matter, states=["open"])
                if isinstance(c, Card) and c.kind_ == "ask"
            ]
            if turn.repair_of:
                prev = tx.get("turn", turn.repair_of)
                if isinstance(prev, Turn):
                    repair_error = prev.error
        if lapsed:  # the attempt this retry repeats may still run where its worker died
            self.stop_orphans(max(lapsed, key=lambda t: t.fence).id)
        prepared: PreparedTurn | None = None
        if rule is None:
            outcome = k.AgentOutcome(
                started=False, ok=False, error=f"rule {turn.rule!r} is no longer in rules.json"
            )
        else:
            try:
                prepared = prepare(
                    self.home,
                    rules,
                    rule,
                    turn,
                    events,
                    repair_error=repair_error,
                    redact=self.redact,
                    open_cards=waiting,
                )
                hold(prepared.folder)
            except Exception as exc:  # e.g. a full disk, or turns/ is not a folder
                # The agent never ran: the turn ends failed (and is retried, in a fresh
                # session, as far as the rule allows), so its matter is not blocked.
                error = self.redact(f"the turn folder could not be prepared: {_reason(exc)}")
                log.error("turn %s could not start: %s", turn.id, error)
                outcome = k.AgentOutcome(started=False, ok=False, error=error)
        if rule is not None and prepared is not None:
            lease = self.lease_s(rule.timeout_s)
            # Renew well inside the lease, so that a short lease does not lapse under us.
            heartbeat_every_s = min(heartbeat_every_s, lease / 3)

            def heartbeat() -> bool:
                out = self.ledger.decide(k.Heartbeat(turn=turn.id, fence=turn.fence, lease_s=lease))
                return out.reply.ok

            outcome = run_agent(
                prepared,
                self.agent_for,
                redact=self.redact,
                heartbeat=heartbeat,
                heartbeat_every_s=heartbeat_every_s,
            )
        if turn.id in self.stopped:
            outcome = replace(outcome, backoff=False)
        finish = k.Finish(turn=turn.id, fence=turn.fence, outcome=outcome)
        try:
            out = self.ledger.decide(finish)
        except (ArithmeticError, LookupError, TypeError, ValueError) as exc:
            # Not the ledger's trouble (that raises its own errors): this end could not be
            # applied. The turn ends failed, saying why, rather than stay running until its
            # claim lapsed, with every pass failing on it and the cause recorded nowhere.
            log.error(
                "turn %s: its end could not be applied: %s: %s", turn.id, type(exc).__name__, exc
            )
            why = f"the hub could not apply the turn's end ({type(exc).__name__}: {exc})"
            failed = replace(outcome, ok=False, final_message="", error=why, retry=False)
            out = self.ledger.decide(replace(finish, outcome=failed))
        self._after(out)
        return out

    # -- effects --------------------------------------------------------------------------

    def _after(self, out: Outcome) -> None:
        """Carry out a decision's effects: cards go out, allowed write-backs are made."""
        self.outbox.carry_out(out)

    # -- the outbox and the cards, by their own names ------------------------------------

    def perform(self, action_id: str) -> None:
        self.outbox.perform(action_id)

    def sweep_actions(self) -> None:
        self.outbox.sweep()

    def deliver_card(self, card_id: str, *, announce: bool = True) -> None:
        self.cards.deliver(card_id, announce=announce)

    def sweep_cards(self) -> None:
        self.cards.sweep()

    # -- loops ----------------------------------------------------------------------------

    def next_wake(self) -> datetime | None:
        """The earliest of what the last tick asked for and the next retry's time."""
        wakes = [w for w in (self.wake_at, self.retry_at) if w is not None]
        return min(wakes) if wakes else None

    def drain(
        self,
        *,
        worker: str = "local",
        max_turns: int = 1000,
        wait_retries_s: float = 0.0,
        waiting: Callable[[datetime], None] | None = None,
    ) -> DrainReport:
        """Run hub and worker here until nothing is runnable now. ``wait_retries_s``: also
        wait for the retries of failed turns, as long as the waits add up to no more than
        that (a run whose ledger does not outlive it; the time the turns run is not
        counted), calling ``waiting`` with the time of each first; the report's
        ``retry_at`` names the one not waited for."""
        report = DrainReport()
        self.take_back()
        self.sweep_cards()
        self.sweep_actions()
        left_s = wait_retries_s
        while len(report.turns) < max_turns:
            report.timers += self.tick()
            ms = self.runnable(worker)
            report.retry_at = self.retry_at
            if not ms and self.retry_at is not None:
                wait = max(0.0, (self.retry_at - self.clock()).total_seconds()) + 0.01
                if wait <= left_s:
                    if waiting is not None:
                        waiting(self.retry_at)
                    time.sleep(wait)
                    left_s -= wait
                    continue
            if not ms:
                break
            progressed = False
            for m in ms:
                turn = self.claim(m.id, worker)
                if turn is None:
                    continue
                progressed = True
                if self.on_turn is not None:
                    self.on_turn("start", turn)
                try:
                    self.run(turn)
                except KeyboardInterrupt:
                    self.interrupted(turn)
                    raise
                report.turns.append(turn.id)
                self._tell_end(turn.id)
            if not progressed:
                break
        return report
