"""The ``autoloop`` command line (DESIGN.md section 7).

Exit codes: 0 success, 1 failure of what was asked, 2 bad usage or configuration;
every failure prints one line on stderr that says what to do.

Subcommands that live in their own modules are dispatched lazily, so that
``autoloop status`` never imports the HTTP server.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from kernel.text import for_terminal

if TYPE_CHECKING:  # the commands import what they use: --help and status start fast
    from datetime import datetime

    from ghapp.commands.home import Home
    from ghapp.commands.show import Out
    from kernel.model import Event
    from kernel.records import Card, Matter, Turn

# The commands that start alone, not through the parser below: name -> ("module:function",
# what ``autoloop --help`` says of it without importing it). Each function takes the
# remaining argv and returns an exit code.
EXTERNAL: dict[str, tuple[str, str]] = {
    "action": (
        "ghapp.commands.action:main",
        "the composite GitHub Action's entry: one run per workflow event",
    ),
    "app": (
        "ghapp.commands.app_create:main",
        "register the GitHub App: 'app create' (GitHub's manifest flow)",
    ),
    "doctor": (
        "ghapp.commands.doctor:main",
        "check the settings, home, rules, agents and the GitHub App",
    ),
    "sandbox": ("fakegithub.cli:main", "a local GitHub: REST API, webhooks, scripted people, CI"),
    "serve": (
        "ghapp.commands.serve:main",
        "the GitHub App: webhooks, sources, card pages, a worker",
    ),
    "demo": (
        "ghapp.commands.demo:main",
        "the whole product offline: sandbox GitHub, App and demo agent",
    ),
    "work": ("ghapp.commands.work:main", "a worker only: claims turns from a shared ledger"),
}


class UsageError(Exception):
    pass


def _show(text: str, *, file: TextIO | None = None) -> None:
    """One line of output for people: what others wrote in it drives no terminal."""
    print(for_terminal(text), file=file or sys.stdout, flush=True)


# Set for a command run with --json: its refusal is a JSON object on stdout as well, so
# that a script reading stdout gets an answer it can parse (the line on stderr stays).
class _Errors:
    as_json = False


def _die(code: int, message: str) -> int:
    _show(f"autoloop: {message}", file=sys.stderr)
    if _Errors.as_json:
        _print_json({"error": message, "exit": code})
    return code


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=None, sort_keys=True, default=str))


def _open(*, writes: bool = False) -> Home:
    """The home named by AUTOLOOP_HOME; a folder that holds none is refused (exit 2)
    before the ledger is made there, so a typo never looks like an empty install.

    ``writes``: the command records something (emit, drain, answer, dismiss, rebuild): a
    damaged SQLite ledger is refused in one line before it is opened, as serve and work
    refuse it (written into, the damage spreads where no write had reached). The check
    reads the whole file: about a second a gigabyte whose pages are cached."""
    from ghapp.commands.home import Home, home_from_env, require_home  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    env = dict(os.environ)
    home = home_from_env(env)
    require_home(home, env)
    if writes:
        from ghapp.commands.home_ledger import db_url  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
        from ghapp.store.sqlite import refuse_damaged  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

        refuse_damaged(db_url(env, home))
    ctx = Home.open(env=env, home=home)
    _OPENED.append(ctx)
    return ctx


# Homes a command opened, closed when it ends: a SQLite ledger's last close copies its
# write-ahead log into ledger.db. Left open at exit, every command's writes stayed in
# ledger.db-wal, and a copy of ledger.db alone (a plain backup) held no ledger at all.
_OPENED: list[Any] = []


def _close_opened() -> None:
    while _OPENED:
        ctx = _OPENED.pop()
        with contextlib.suppress(Exception):  # (what it wrote is committed already)
            ctx.store.close()


class _Lines:
    """A text stream whose lines go to :meth:`Out.line` (console cards during a drain)."""

    def __init__(self, out: Out) -> None:
        self.out = out
        self._buffer = ""

    def write(self, text: str) -> int:
        self._buffer += text
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            self.out.line(line)
        return len(text)

    def flush(self) -> None:
        pass


# ------------------------------------------------------------------------------ commands


def cmd_init(args: argparse.Namespace) -> int:
    from ghapp.commands.home import Home, db_url, home_from_env, init_home, start_new_ledger  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    home = home_from_env(os.environ)
    made = init_home(home)
    ledger = None
    if args.new_ledger:
        ledger = start_new_ledger(home, db_url(os.environ, home))
        Home.open(home=home).store.close()  # creates it, and the home remembers it
    if args.json:
        doc: dict[str, Any] = {"home": str(home), "created": made}
        if ledger is not None:
            doc["new_ledger"] = str(ledger)
        _print_json(doc)
        return 0
    for path in made:
        print(f"created {path}")
    if ledger is not None:
        print(f"started a new, empty ledger at {ledger}")
    elif not made:
        print(f"{home} is already set up (rules.json and master.key kept)")
    rules = home / "rules.json"
    if str(rules) in {str(p) for p in made}:  # the starter rules: their own event
        print(f"next: edit {rules}, then 'autoloop emit local hello.world demo --id 1'")
    else:  # rules of the user's: that event may be one no rule takes
        print(
            f"next: 'autoloop doctor' checks {rules}; 'autoloop emit SOURCE TYPE SUBJECT "
            "--id ID' records an event your rules take"
        )
    return 0


def cmd_emit(args: argparse.Namespace) -> int:
    from ghapp.runtime.details import name_problem, read_details  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from kernel.model import Event  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    empty = [name for name in ("source", "type", "id") if not getattr(args, name).strip()]
    if empty:
        return _die(
            2, f"emit: {empty[0]} must not be empty (e.g. emit local hello.world demo --id 1)"
        )
    for name in ("source", "type", "id", "subject"):
        why = name_problem(name, getattr(args, name))
        if why is not None:
            return _die(2, f"emit: {why}")
    ctx = _open(writes=True)
    try:
        details = read_details(args.details)
    except OSError as exc:  # the file's name once, and why: not "[Errno 2] ..."
        why = exc.strerror or str(exc)
        return _die(2, f"--details {args.details}: {why}; give a file holding one JSON object")
    except ValueError as exc:
        return _die(2, f"--details: {exc}; give a file holding one JSON object")
    event = Event(
        source=args.source,
        id=args.id,
        type=args.type,
        subject=args.subject,
        summary=args.summary or "",
        link=args.link or "",
        details=details,
    )
    out = ctx.hub().emit(event)
    r = out.reply
    if args.json:
        _print_json({"code": r.code, "message": r.message, **dict(r.data)})
    else:
        _show(r.message)
    if r.code == "duplicate":
        other = _recorded_as(ctx, event)
        if other:  # an id reused for another event: it was dropped without a word
            print(
                f"autoloop: warning: ({event.source}, {event.id}) was {other}; this "
                f"{event.type} about {event.subject} was not recorded: give it another --id",
                file=sys.stderr,
            )
    return 0


def _recorded_as(ctx: Home, event: Event) -> str:
    """How the event recorded under ``event``'s (source, id) differs from it: "" when it
    is the same type about the same subject (a command run twice)."""
    with ctx.store.read() as tx:
        for row in tx.data("event"):
            first = row.get("event") or {}
            if first.get("source") != event.source or first.get("id") != event.id:
                continue
            if (first.get("type"), first.get("subject")) == (event.type, event.subject):
                return ""
            return f"{first.get('type')} about {first.get('subject')} (event {row.get('seq')})"
    return ""


def _turn_line(turn: Turn) -> str:
    return f"turn {turn.id} ({turn.kind_}) rule {turn.rule}, matter {turn.matter}"


def cmd_drain(args: argparse.Namespace) -> int:
    from ghapp.commands.show import Out  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from kernel.durations import iso  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    ctx = _open(writes=True)
    quiet = args.json
    out = Out()
    done: list[str] = []
    progress: list[Any] = []  # the progress display's say(), while it runs

    def on_turn(phase: str, turn: Turn) -> None:
        if phase == "start" and progress:
            progress[0](f"turn {turn.id} ({len(done)} done)")
        elif phase != "start":
            done.append(turn.id)
        if quiet:
            return
        if phase == "start":
            resume = f", resuming {turn.resume}" if turn.resume else ""
            out.line(f"> {_turn_line(turn)}: {len(turn.events)} event(s){resume}")
        else:
            extra = f": {turn.error}" if turn.error else ""
            out.line(f"< turn {turn.id} {turn.state}: {turn.outcome}{extra}")

    def on_card(card: Card) -> None:
        if quiet or shown_on_console(card):  # the console channel prints it: once
            return
        from plugins.channels.local import render  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

        out.line(render(card))

    def shown_on_console(card: Card) -> bool:
        from plugins.channels.local import ConsoleChannel  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

        cards = hub.cards
        return any(isinstance(cards.channel(n), ConsoleChannel) for n in cards.channels_for(card))

    # Console channels print on this command's output (stderr under --json, as before).
    console: Any = None if quiet else _Lines(out)
    hub = ctx.hub(on_turn=on_turn, on_card=on_card, console=console)
    with out.progress("running turns") as say:
        progress.append(say)
        report = hub.drain(worker=args.worker)
    retry_at = report.retry_at
    if args.json:
        data: dict[str, Any] = {"turns": report.turns, "timers_fired": report.timers}
        data["retry_at"] = iso(retry_at) if retry_at else None  # as status and why write it
        _print_json(data)
    elif retry_at is not None:
        out.line(_retry_line(retry_at, hub.clock()))
    elif not report.turns:
        out.line(_nothing_to_run(ctx))
    return 0


def _retry_line(at: datetime, now: datetime) -> str:
    """What a drain that left a failed turn's retry for later says of it."""
    import math  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    left = max(0, math.ceil((at - now).total_seconds()))
    return (
        f"a failed turn is retried at {at:%H:%M:%S} UTC (in {left} s, its rule's "
        "retry_backoff_s): run 'autoloop drain' again then, or keep 'autoloop work' (or "
        "'autoloop serve') running, which starts it on time"
    )


def _nothing_to_run(ctx: Home) -> str:
    """Why a drain ran nothing: a turn that still runs holds its matter (it may belong to
    another process, or to one that died: then its claim lapses at ``lease_until``)."""
    from kernel.records import Turn  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    with ctx.store.read() as tx:
        running = [t for t in tx.query("turn", states=["running"]) if isinstance(t, Turn)]
    if not running:
        return "nothing to run"
    t = min(running, key=lambda t: t.lease_until)
    more = f" (and {len(running) - 1} more turn(s))" if len(running) > 1 else ""
    return (
        f"nothing to run now: turn {t.id} of matter {t.matter} is running on worker "
        f"{t.worker!r}{more}; its matter waits until it ends or its claim lapses "
        f"at {t.lease_until or 'an unknown time'} (see 'autoloop status')"
    )


def card_data(c: Card) -> dict[str, Any]:
    return {
        "id": c.id,
        "key": c.key,
        "matter": c.matter,
        "kind": c.kind_,
        "state": c.state,
        "title": c.title,
        "text": c.text,
        "options": list(c.options),
        "choice": c.choice,
        "version": c.version,
        "turn": c.turn,
        "answered_by": c.answered_by,
    }


def cmd_status(args: argparse.Namespace) -> int:
    from ghapp.commands.status import read_status, show  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    data = read_status(os.environ)
    if args.json:
        _print_json(data)
        return 0
    from ghapp.commands.show import Out  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    show(data, Out())
    return 0


def why_trail(store: Any, turn_id: str) -> dict[str, Any] | None:
    """The trail of one turn as data: rules version, events, claim, agent, receipt, cards."""
    from kernel.codec import to_data  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from kernel.facts import EventRecorded  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from kernel.records import Card, EventRow, Matter, Turn  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    with store.read() as tx:
        turn = tx.get("turn", turn_id)
        if not isinstance(turn, Turn):
            return None
        matter = tx.get("matter", turn.matter)
        events = [tx.get("event", f"{s:012d}") for s in turn.events]
        cards = [tx.get("card", c) for c in turn.cards]
        actions = [tx.get("action", a) for a in turn.actions]
        emitted = []  # its receipt's events, and where each went (or why it went nowhere)
        fact_with_key = getattr(tx, "fact_with_key", None)
        receipt = turn.receipt if isinstance(turn.receipt, Mapping) else {}
        count = len(receipt.get("events") or ()) if fact_with_key is not None else 0
        for i in range(count):
            fact = fact_with_key(f"event:agent:{turn.id}.{i}") if fact_with_key else None
            if isinstance(fact, EventRecorded):
                emitted.append(
                    {
                        "seq": fact.seq,
                        "type": fact.event.type,
                        "subject": fact.event.subject,
                        "routes": list(fact.routes),
                        "reason": fact.reason,
                    }
                )
    return {
        "turn": turn.id,
        "kind": turn.kind_,
        "rule": turn.rule,
        "rules_version": turn.rules_version,
        "matter": turn.matter,
        "hops": turn.hops,
        "chain": turn.chain,  # None: a turn of a ledger from before chains
        "events": [
            {
                "seq": e.seq,
                "source": e.event.source,
                "id": e.event.id,
                "type": e.event.type,
                "subject": e.event.subject,
                "hops": e.event.hops,
                "chain": e.event.chain,
            }
            for e in events
            if isinstance(e, EventRow)
        ],
        "claim": {
            "worker": turn.worker,
            "fence": turn.fence,
            "started_at": turn.started_at,
            "lease_until": turn.lease_until,
        },
        "agent": turn.agent,
        "session": turn.session,
        "resume": turn.resume or "",
        "agent_session": turn.agent_session or "",
        "receipt": turn.receipt,
        "cards": [card_data(c) for c in cards if isinstance(c, Card)],
        "actions": [to_data(a) for a in actions if a is not None],
        "timers": list(turn.timers),
        "emitted": emitted,
        "outcome": turn.outcome or turn.state,
        "error": turn.error,
        "refused_receipts": list(turn.refused),
        "ended_at": turn.ended_at,
        # its events wait for a retry (after its rule's backoff): from then, or now ("")
        "retry_at": _retry_of(turn, matter) if isinstance(matter, Matter) else None,
    }


def _retry_of(turn: Turn, m: Matter) -> str | None:
    """When the retry of a failed turn, still to run, may start ("" at once); None when
    none waits (it ran, or none is left)."""
    waits = turn.state == "failed" and not m.running and bool(m.retry or m.repair)
    if not waits or (turn.events and not set(turn.events) <= set(m.retry)):
        return None
    return m.retry_after


def why_lines(store: Any, turn_id: str) -> list[str]:
    t = why_trail(store, turn_id)
    if t is None:
        return [f"no turn {turn_id!r}"]
    claim = t["claim"]
    out = [
        f"turn {t['turn']} ({t['kind']}) under rules version {t['rules_version']}",
        f"  rule {t['rule']}, matter {t['matter']}, hops {t['hops']}"
        + (f", chain {t['chain']}" if t["chain"] is not None else ""),
    ]
    for e in t["events"]:
        out.append(
            f"  event {e['seq']}: {e['source']} {e['type']} {e['subject']} (hops {e['hops']})"
        )
    out.append(
        f"  claimed by worker {claim['worker']} at {claim['started_at']} (fence {claim['fence']})"
    )
    out.append(f"  agent {t['agent']}, session {t['session']}, resume {t['resume'] or '-'}")
    out.append(f"  agent's own session: {t['agent_session'] or '-'}")
    if t["receipt"]:
        out.append(f"  receipt: {json.dumps(t['receipt'], sort_keys=True)[:400]}")
    for c in t["cards"]:
        out.append(f"  card {c['id']} [{c['kind']}] {c['title']!r}: {c['state']}")
    for a in t["actions"]:
        out.append(f"  action {a['id']} {a['do']}: {a['status']}")
    for e in t["emitted"]:
        went = f"to {', '.join(e['routes'])}" if e["routes"] else f"not dispatched: {e['reason']}"
        out.append(f"  emitted event {e['seq']}: {e['type']} {e['subject']}, {went}")
    for r in t["refused_receipts"]:
        out.append(f"  refused receipt: {r}")
    err = f": {t['error']}" if t["error"] else ""
    out.append(f"  outcome: {t['outcome']}{err}")
    if t["retry_at"] is not None:
        when = f"from {t['retry_at']} (its rule's retry_backoff_s)" if t["retry_at"] else "now"
        out.append(f"  its events run again in a retry {when}")
    return out


def cmd_why(args: argparse.Namespace) -> int:
    ctx = _open()
    trail = why_trail(ctx.store, args.turn)
    if trail is None and (turn := _turn_of_card(ctx, args.turn)):
        if not args.json:
            _show(f"card {args.turn} was raised by turn {turn}:")
        args.turn = turn  # a card's story is its turn's
        trail = why_trail(ctx.store, turn)
    if trail is None:
        return _why_delivery(ctx, args)
    if args.json:
        _print_json(trail)
        return 0
    for line in why_lines(ctx.store, args.turn):
        _show(line)
    return 0


def _turn_of_card(ctx: Home, card_id: str) -> str:
    """The turn that raised card ``card_id`` ("" when it is no such card, or a card no
    turn raised: a delivery's, an owner notice)."""
    from kernel.records import Card  # noqa: PLC0415  # imported late: only this path needs it

    with ctx.store.read() as tx:
        card = tx.get("card", card_id)
    return card.turn or "" if isinstance(card, Card) else ""


def _why_delivery(ctx: Home, args: argparse.Namespace) -> int:
    """The story of a delivery, stage by stage (``owner/repo#12``, or its pipeline id)."""
    from ghapp.github.story import parse_ref, read_story, story_lines  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    story = read_story(ctx.store, args.turn)
    if story is None:
        if parse_ref(args.turn) is not None:
            return _die(
                1, f"no delivery {args.turn!r} in this ledger; 'autoloop status' lists them"
            )
        return _die(
            1,
            f"no turn {args.turn!r}; give a turn id, a card id or a delivery as owner/repo#N "
            "('autoloop status' lists them)",
        )
    if args.json:
        _print_json(story)
        return 0
    for line in story_lines(story):
        _show(line)
    return 0


def cmd_cards(args: argparse.Namespace) -> int:
    from ghapp.commands.show import Out  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from kernel.records import Card  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    if getattr(args, "cards_command", None) == "dismiss":
        return cmd_dismiss(args)
    ctx = _open()
    with ctx.store.read() as tx:
        cards = [c for c in tx.query("card") if isinstance(c, Card)]
    if not args.all:
        cards = [c for c in cards if c.state == "open"]
    cards.sort(key=lambda c: int(c.id.lstrip("c") or 0))
    if args.json:
        _print_json({"cards": [card_data(c) for c in cards]})
        return 0
    from plugins.channels.local import render  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    out = Out()
    if not cards:
        out.line("no open cards" if not args.all else "no cards")
    elif out.tty:
        out.table(
            "cards" if args.all else "open cards",
            ["card", "kind", "state", "title", "matter", "options", "to do"],
            [
                [
                    c.id,
                    c.kind_,
                    c.state,
                    c.title,
                    c.matter,
                    " / ".join(f"{i}) {o}" for i, o in enumerate(c.options, 1)),
                    _next_step(c),
                ]
                for c in cards
            ],
        )
    else:
        for c in cards:
            out.line(f"{render(c)}  [{c.state}, matter {c.matter}]")
    return 0


def _next_step(card: Card) -> str:
    if card.state != "open":
        return ""
    if card.kind_ == "ask":
        return f"autoloop answer {card.id} N"
    return f"autoloop cards dismiss {card.id}"


def _who() -> str:
    """Who answers on this command line: ``$USER``, else the account's name (a container
    often has no ``$USER``: the trail said "by cli via cli")."""
    import getpass  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    try:
        return os.environ.get("USER") or getpass.getuser()
    except (OSError, KeyError):  # no name for this uid (a container's arbitrary user)
        return f"uid {os.getuid()}"


def cmd_dismiss(args: argparse.Namespace) -> int:
    ctx = _open(writes=True)
    by = _who()
    out = ctx.hub().dismiss(args.card, by=by)
    if not out.reply.ok:
        return _die(1, out.reply.message)
    if args.json:
        _print_json({"card": args.card, "state": "closed", "message": out.reply.message})
    else:
        _show(out.reply.message)
    return 0


def cmd_answer(args: argparse.Namespace) -> int:
    ctx = _open(writes=True)
    try:
        choice = int(args.choice)
    except ValueError:
        return _die(2, f"choice {args.choice!r} is not a number: give the option's number, e.g. 2")
    by = args.by or _who()
    hub = ctx.hub()
    out = hub.answer(args.card, choice, by=by, via="cli")
    if not out.reply.ok:
        return _die(1, out.reply.message)
    then = _after_approval(ctx, args.card, hub.outbox.waiting)
    if args.json:
        _print_json({"card": args.card, "choice": choice, "message": out.reply.message})
        return 0
    _show(f"answered {out.reply.message}; {then or DRAIN_TO_RESUME}")
    return 0


# (a server or worker running on this ledger resumes it by itself: 'drain' would run the
# agent here, on this machine, beside it)
DRAIN_TO_RESUME = (
    "the agent resumes in the running 'autoloop serve' or 'autoloop work' (its own "
    "'work --name', if its rules name a worker); with none running, 'autoloop drain' "
    "resumes it here"
)


def _after_approval(ctx: Any, card_id: str, waiting: Mapping[str, str]) -> str:
    """What became of the write-back an approval card was about ("" for other cards): an
    approval resumes no agent, and the hint to drain said nothing happened."""
    from kernel.records import Action, Card  # noqa: PLC0415  # only this path needs them

    with ctx.store.read() as tx:
        card = tx.get("card", card_id)
        action = tx.get("action", card.action) if isinstance(card, Card) and card.action else None
        delivery = isinstance(card, Card) and tx.get("pipeline", card.matter) is not None
    if delivery:  # no agent to resume: the delivery's runner reads the answer
        return "'autoloop serve' moves the delivery on (no drain needed)"
    if not isinstance(action, Action):
        return ""
    what = f"the write-back {action.do} ({action.id})"
    if action.status == "declined":
        return f"{what} is not made (no agent is resumed by an approval)"
    if action.status == "done":
        return f"{what} is made (no agent is resumed by an approval)"
    if action.status == "failed":
        return f"{what} failed: {action.error}"
    who = waiting.get(action.do.split(".", 1)[0])
    return f"{what} waits to be made: {who}" if who else f"{what} is being made"


def cmd_rebuild(args: argparse.Namespace) -> int:
    from ghapp.commands.show import Out  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    ctx = _open(writes=not args.check)
    from ghapp.runtime.ledger import Ledger  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    ledger = Ledger(ctx.store, ctx.rules, ctx.clock)
    out = Out()
    if args.check:
        with out.progress("replaying the facts"):
            diffs = ledger.check()
        if args.json:
            _print_json({"equal": not diffs, "differences": diffs})
            return 1 if diffs else 0
        if diffs:
            for d in diffs[:50]:
                out.line(d)
            return _die(
                1, f"{len(diffs)} projection row(s) differ from a replay; run 'autoloop rebuild'"
            )
        out.line("projections equal a replay of the facts")
        return 0
    with out.progress("rebuilding the projections from the facts"):
        n = ledger.rebuild()
    if args.json:
        _print_json({"rows": n})
        return 0
    out.line(f"rebuilt {n} projection rows from the facts")
    return 0


TRY_RULES = {
    "max_hops": 8,
    "agents": {"demo": {"use": "demo"}},
    "channels": {},
    "rules": [
        {
            "name": "try",
            "on": {"source": "local", "type": "try.*"},
            "agent": "demo",
            "access": "read",
            "timeout_s": 60,
        }
    ],
}


def _ask_option(prompt: str, n: int, tries: int = 5) -> int | None:
    """An option's number from 1 to ``n``, asked on the terminal again after a wrong one;
    None at the end of input or after ``tries`` wrong answers."""
    for _ in range(tries):
        try:
            raw = input(prompt).strip()
        except EOFError:
            print(flush=True)
            return None
        if raw.isdigit() and 1 <= int(raw) <= n:
            return int(raw)
        print(f"   give the number of an option, from 1 to {n}", flush=True)
    return None


def cmd_try(args: argparse.Namespace) -> int:
    import tempfile  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    import time  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    import uuid  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from pathlib import Path  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    from ghapp.commands.home import Home, init_home  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from ghapp.commands.home_ledger import not_a_folder  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from kernel.model import Event  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from kernel.records import Turn  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from plugins.agents.demo_script import COLOURS  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    if args.json and args.answer is None:
        return _die(2, "--json needs --answer N: there is no one to ask on a terminal")
    if args.answer is not None and not 1 <= args.answer <= len(COLOURS):
        # Before the trial runs: it ran, then refused the number (the demo agent's
        # question is always the same one).
        offered = ", ".join(f"{i}) {c}" for i, c in enumerate(COLOURS, 1))
        n = len(COLOURS)
        return _die(
            2, f"--answer {args.answer} is not an option: the demo agent asks for 1-{n} ({offered})"
        )
    base = os.environ.get("AUTOLOOP_HOME")
    if base:
        not_a_folder(Path(base).expanduser())
        # A folder of its own for each trial: in one shared folder a second trial resumed
        # the first one's session and listed its turns, as if they were its own.
        trials = Path(base).expanduser() / "try"
        trials.mkdir(parents=True, exist_ok=True)
        home = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=trials))
    else:
        home = Path(tempfile.mkdtemp(prefix="autoloop-try-"))
    init_home(home, rules_text=json.dumps(TRY_RULES, indent=2))
    env = dict(os.environ)
    env["AUTOLOOP_HOME"] = str(home)
    env.pop("AUTOLOOP_DB", None)
    ctx = Home.open(env=env, home=home)

    def say(text: str) -> None:
        if not args.json:
            _show(text)

    opened: list[Card] = []

    def on_card(card: Card) -> None:
        if card.state == "open":
            opened.append(card)

    def on_turn(phase: str, turn: Turn) -> None:
        if phase == "start":
            how = f"resuming its session {turn.resume}" if turn.resume else "in a fresh session"
            say(f"  agent turn {turn.id} starts {how} (a real subprocess)")
        else:
            say(f"  agent turn {turn.id} ended: {turn.outcome}; the process is gone")

    hub = ctx.hub(on_card=on_card, on_turn=on_turn)
    say(f"autoloop try: a trial in {home}")
    say("1. an event arrives: local try.start")
    hub.emit(
        Event(source="local", id=f"try-{uuid.uuid4().hex[:8]}", type="try.start", subject="demo")
    )
    hub.drain()
    asks = [c for c in opened if c.kind_ == "ask"]
    if not asks:
        return _die(1, "the demo agent did not ask; see 'autoloop why' in " + str(home))
    card = asks[-1]
    say(f"2. the agent asks, and its turn ends. Card {card.id}: {card.title}")
    for i, o in enumerate(card.options, 1):
        say(f"     {i}) {o}")
    say("   nothing runs while the card waits: the wait is a row in the ledger")
    n = len(card.options)
    later = (
        f"card {card.id} waits: 'AUTOLOOP_HOME={home} autoloop answer {card.id} N', "
        "then 'autoloop drain' there, resumes the agent"
    )
    if args.answer is not None:
        choice = args.answer
        if not 1 <= choice <= n:
            return _die(2, f"--answer {choice} is not an option of 1-{n}; {later}")
        say(f"3. you answer {choice} (--answer)")
    else:
        if not sys.stdin.isatty():
            return _die(2, f"no terminal to ask on: use 'autoloop try --answer N'; {later}")
        asked = _ask_option(f"3. your answer [1-{n}]: ", n)
        if asked is None:
            return _die(2, f"no answer given; {later}")
        choice = asked
    out = hub.answer(card.id, choice, by=_who(), via="cli")
    if not out.reply.ok:
        return _die(1, out.reply.message)
    opened.clear()
    hub.drain()
    notices = [c for c in opened if c.kind_ == "notice"]
    for c in notices:
        say(f"4. the agent finished: {c.title}")
    with ctx.store.read() as tx:
        turns = sorted((t for t in tx.query("turn") if isinstance(t, Turn)), key=lambda t: t.fence)
    if args.json:
        _print_json(
            {
                "home": str(home),
                "card": {"id": card.id, "title": card.title, "options": list(card.options)},
                "answer": choice,
                "notices": [c.title for c in notices],
                "turns": [
                    {
                        "id": t.id,
                        "outcome": t.outcome,
                        "session": t.session,
                        "resume": t.resume,
                        "agent_session": t.agent_session,
                    }
                    for t in turns
                ],
            }
        )
        return 0
    say("5. the trail:")
    for t in turns:
        say(
            f"   {t.id}: {t.outcome}, session {t.session}, resumed {t.resume or '-'}, "
            f"agent session {t.agent_session or '-'}"
        )
    say(f"explore it: AUTOLOOP_HOME={home} autoloop why {turns[-1].id}")
    return 0


# --------------------------------------------------------------------------------- parser


def _version() -> str:
    import importlib.metadata  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    try:
        return importlib.metadata.version("autoloop")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout, not installed
        return "unknown"


class _VersionAction(argparse.Action):
    """``--version``: the installed version, looked up only when asked (reading the
    package metadata costs more than the rest of ``--help``)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(f"autoloop {_version()}")  # on stdout, as argparse's own version action
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """A subcommand's parser: an unknown argument is reported with this subcommand's
    usage (argparse hands it up, and the top-level usage said nothing useful)."""

    def parse_known_args(  # type: ignore[override]  # same call, stricter answer
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        found, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return found, extra


JSON_HELP = "print one JSON object instead of text"


def _add_init(sub: Any) -> None:
    s = sub.add_parser("init", help="create AUTOLOOP_HOME, a starter rules.json and master.key")
    s.add_argument(
        "--new-ledger",
        action="store_true",
        help="start an empty ledger where this home's ledger is missing or empty",
    )
    s.add_argument("--json", action="store_true", help=JSON_HELP)
    s.set_defaults(func=cmd_init)


def _add_emit(sub: Any) -> None:
    s = sub.add_parser("emit", help="record a local event")
    s.add_argument("source", help="where the event comes from, e.g. local")
    s.add_argument("type", help="the event's type, e.g. hello.world (rules match on it)")
    s.add_argument("subject", help="what the event is about, e.g. acme/web#12")
    s.add_argument("--id", required=True, help="the event's id; (source, id) is recorded once")
    s.add_argument("--summary", help="one line about the event (kept as data)")
    s.add_argument("--link", help="a URL for the event (kept as data)")
    s.add_argument("--details", help="a file holding a JSON object (kept as data only)")
    s.add_argument("--json", action="store_true", help=JSON_HELP)
    s.set_defaults(func=cmd_emit)


def _add_drain(sub: Any) -> None:
    s = sub.add_parser("drain", help="run hub and worker here until nothing is runnable now")
    s.add_argument(
        "--worker", default="local", help="run the turns of agents for this worker (default local)"
    )
    s.add_argument("--json", action="store_true", help=JSON_HELP)
    s.set_defaults(func=cmd_drain)


def _add_status(sub: Any) -> None:
    s = sub.add_parser("status", help="recent turns, matters, cards, timers, deliveries, usage")
    s.add_argument("--json", action="store_true", help=JSON_HELP + " (every record)")
    s.set_defaults(func=cmd_status)


def _add_why(sub: Any) -> None:
    s = sub.add_parser(
        "why", help="the trail of one turn, or the story of one delivery (owner/repo#N)"
    )
    s.add_argument(
        "turn",
        metavar="TURN_OR_DELIVERY",
        help="a turn id, or a delivery: owner/repo#N, deliver/owner/repo#N or the PR's URL",
    )
    s.add_argument("--json", action="store_true", help=JSON_HELP)
    s.set_defaults(func=cmd_why)


def _add_cards(sub: Any) -> None:
    s = sub.add_parser("cards", help="list open cards (--all: every card); 'cards dismiss CARD'")
    s.add_argument("--all", action="store_true", help="every card, answered and closed too")
    s.add_argument("--json", action="store_true", help=JSON_HELP)
    s.set_defaults(func=cmd_cards)
    cards_sub = s.add_subparsers(
        dest="cards_command", metavar="[dismiss CARD]", title="to close a notice card"
    )
    d = cards_sub.add_parser("dismiss", help="close an open notice card")
    d.add_argument("card", help="the notice card's id, e.g. c3")
    d.add_argument("--json", action="store_true", help=JSON_HELP)


def _add_answer(sub: Any) -> None:
    s = sub.add_parser("answer", help="answer a card with the number of an option")
    s.add_argument("card", help="the card's id, e.g. c1")
    s.add_argument("choice", help="the number of the option, from 1")
    s.add_argument("--by", help="who answers (default: $USER)")
    s.add_argument("--json", action="store_true", help=JSON_HELP)
    s.set_defaults(func=cmd_answer)


def _add_rebuild(sub: Any) -> None:
    s = sub.add_parser("rebuild", help="rebuild projections from the facts")
    s.add_argument("--check", action="store_true", help="compare only; exit 1 on a difference")
    s.add_argument("--json", action="store_true", help=JSON_HELP)
    s.set_defaults(func=cmd_rebuild)


def _add_try(sub: Any) -> None:
    s = sub.add_parser("try", help="an offline trial with a built-in demo agent")
    s.add_argument("--answer", type=int, help="answer the question without a prompt")
    s.add_argument(
        "--json", action="store_true", help="one JSON object at the end, no story (needs --answer)"
    )
    s.set_defaults(func=cmd_try)


# name -> what adds its parser, in the order --help lists them (then EXTERNAL's, sorted)
COMMANDS: dict[str, Callable[[Any], None]] = {
    "init": _add_init,
    "emit": _add_emit,
    "drain": _add_drain,
    "status": _add_status,
    "why": _add_why,
    "cards": _add_cards,
    "answer": _add_answer,
    "rebuild": _add_rebuild,
    "try": _add_try,
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of the command line. With ``command`` (one of :data:`COMMANDS`) it holds
    that subcommand's parser alone: the same parse of its arguments, the same usage and
    errors, and a faster start (argparse builds each parser slowly, ``status`` noticed)."""
    p = argparse.ArgumentParser(
        prog="autoloop",
        description="Run command-line coding agents on events; ask people when it matters.",
    )
    p.add_argument("--version", action=_VersionAction, help="show the version and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    if command in COMMANDS:
        COMMANDS[command](sub)
        return p
    for add in COMMANDS.values():
        add(sub)
    for name in sorted(EXTERNAL):
        sub.add_parser(name, help=EXTERNAL[name][1], add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(args_list)
    except BrokenPipeError:
        # The reader went away (autoloop status | head): nothing was lost, nothing to say.
        # stdout now points at /dev/null, so the flush at exit cannot fail again.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0


def _not_utf8(args_list: list[str]) -> str | None:
    """The first argument that is not valid UTF-8 (the shell passed bytes that are not:
    Python keeps them as lone surrogates, which no ledger or terminal takes), shown
    escaped."""
    for arg in args_list:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return repr(arg.encode("utf-8", "surrogateescape"))[2:-1]
    return None


def ledger_failure(exc: BaseException) -> str | None:
    """One line for an error of the SQLite ledger that no command expects (a home made
    read-only, a damaged file), or None when ``exc`` is not one."""
    sqlite3 = sys.modules.get("sqlite3")  # not imported: the error is not one of its
    if sqlite3 is None or not isinstance(exc, sqlite3.Error):
        return None
    text = str(exc)
    low = text.lower()
    if "readonly" in low or "read-only" in low:
        return (
            f"the ledger cannot be written ({text}): give this user write access to "
            "AUTOLOOP_HOME and its ledger.db, or run where it may write"
        )
    if any(w in low for w in ("malformed", "not a database", "decode", "corrupt")):
        return (
            f"the ledger is damaged ({text}): restore ledger.db from a backup; "
            "'autoloop doctor' checks it"
        )
    return f"the ledger failed: {type(exc).__name__}: {text}"


def _failed(exc: Exception, prefix: str = "") -> int:
    """Exit 2 with one line for an error of the user's setup that reached the top: a
    refused configuration, a ledger that cannot be opened, a folder that cannot be made
    or read (a home under a file, no permission); anything else is a bug, raised."""
    from ghapp.store.base import StoreError  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from kernel.errors import ConfigError  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    if isinstance(exc, ConfigError | StoreError):
        line = str(exc)
    elif isinstance(exc, OSError) and exc.filename is not None:
        # a file or folder the setup names (AUTOLOOP_HOME, --home, --key-dir, a key's
        # path...): its name and the system's reason say what to fix
        line = (
            f"{exc.filename}: {exc.strerror or exc}: check this path and this user's access to it"
        )
    else:
        line = ledger_failure(exc) or ""
        if not line:
            raise exc
    if prefix:
        print(f"{prefix}: {line}", file=sys.stderr)
        return 2
    return _die(2, line)


def _main(args_list: list[str]) -> int:
    bad = _not_utf8(args_list)
    if bad is not None:
        return _die(2, f"an argument is not valid UTF-8: {bad}")
    if args_list and args_list[0] in EXTERNAL:
        module, func = EXTERNAL[args_list[0]][0].split(":")
        entry = getattr(importlib.import_module(module), func)
        try:
            code: int = entry(args_list[1:])
        except Exception as exc:
            return _failed(exc, f"autoloop {args_list[0]}")
        except KeyboardInterrupt:  # (where the command does not say more itself)
            print(f"autoloop {args_list[0]}: interrupted", file=sys.stderr)
            return 1
        return code
    parser = build_parser(args_list[0] if args_list else None)
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:
        return int(exc.code or 0)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    _Errors.as_json = bool(getattr(args, "json", False))
    try:
        result: int = args.func(args)
        return result
    except Exception as exc:
        return _failed(exc)
    except KeyboardInterrupt:
        return _die(1, "interrupted; nothing accepted was lost")
    finally:
        _close_opened()


if __name__ == "__main__":
    raise SystemExit(main())
