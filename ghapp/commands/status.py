"""``autoloop status``: turns, matters, cards, timers, deliveries, events and usage, as
tables for people or as one JSON object (``--json``).

Status starts about as fast as ``--help``: it reads what it shows straight from the
store's rows (``Tx.data``, the records' stored JSON decoded by the standard library) and
loads neither the kernel's record classes and codec, nor the rules parser, nor the hub.
Two things stand in for them:

- :data:`DEFAULTS`, the value each record class gives a field that a row written by an
  older autoloop lacks (the same values as ``kernel.records``: a test holds them
  together, and another compares this reading with one through the record classes);
- the rules' timezone and daily caps as the rules parser read them, remembered in the
  home (:data:`RULES_CHECKED`) with the digest of the rules file and the stamps of the
  code that read it. A rules file or code that changed since is read by the parser
  again, so a broken file is reported as before: one line on stderr, and the usage in
  UTC without caps. Only a file the parser accepted is remembered.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ghapp.commands.home_ledger import home_from_env, open_ledger, require_home
from ghapp.runtime.days import day_bounds, review_runs, spent_between, zone
from ghapp.runtime.rules_file import clock_from_env, rules_path
from kernel.durations import iso
from kernel.errors import ConfigError

if TYPE_CHECKING:
    from ghapp.commands.show import Out
    from ghapp.store.base import Store

__all__ = ["DEFAULTS", "RULES_CHECKED", "Limits", "read_status", "rules_limits", "show"]

#: The defaults of the record fields (``kernel.records``, and ``kernel.model.Event`` for
#: an event row's ``event``) by record kind: what a row from an older autoloop lacks.
DEFAULTS: dict[str, dict[str, Any]] = {
    "turn": {
        "kind_": "normal",
        "state": "running",
        "events": (),
        "hops": 0,
        "session": "",
        "resume": None,
        "rules_version": "",
        "fence": 0,
        "lease_until": "",
        "started_at": "",
        "ended_at": "",
        "outcome": "",
        "agent_session": None,
        "cost_usd": None,
        "tokens": None,
        "error": "",
        "receipt": None,
        "cards": (),
        "timers": (),
        "emitted": (),
        "actions": (),
        "refused": (),
        "repair_of": None,
        "chain": None,
    },
    "card": {
        "state": "open",
        "title": "",
        "text": "",
        "options": (),
        "choice": None,
        "version": 1,
        "turn": None,
        "hops": 0,
        "opened_at": "",
        "answered_by": "",
        "answered_via": "",
        "action": None,
        "delivered": {},
    },
    "event": {"routes": (), "dispatched": False, "reason": ""},
    "event.event": {
        "summary": "",
        "link": "",
        "hops": 0,
        "chain": None,
        "details": {},
        "matter": None,
    },
    "timer": {"why": "", "hops": 0, "turn": "", "fired": False, "chain": None},
    "matter": {
        "agent_session": None,
        "waiting": False,
        "since": 0,
        "running": None,
        "hops": 0,
        "repair": None,
        "retry": (),
        "failures": 0,
        "retry_after": "",
        "turns": 0,
        "chain": None,
    },
    "pipeline": {
        "data": {},
        "wake_at": "",
        "version": 0,
        "ended": False,
        "cards": {},
        "started_at": "",
        "updated_at": "",
    },
}
#: The fields of a timer, in order: ``--json`` lists every one.
TIMER_FIELDS = ("id", "matter", "due", "why", "hops", "turn", "fired", "chain")
#: Where the home remembers the timezone and caps of the rules file the parser accepted.
RULES_CHECKED = "rules-checked.json"
_CHECKED_VERSION = 2  # 2: the workers of the rules too
_CODE_PACKAGES = ("ghapp", "kernel", "plugins")
#: Where this process's Autoloop packages are (another install or checkout may read the
#: same home with other code).
_CODE_ROOT = str(Path(__file__).parents[2])

#: (timezone, max_usd_per_day, max_tokens_per_day) of the rules.
Limits = tuple[str, float | None, int | None]
#: Rule name -> the worker its agent runs on, for agents not on "any" worker.
Workers = dict[str, str]


def read_status(env: Mapping[str, str]) -> dict[str, Any]:
    """Everything ``autoloop status --json`` prints, from the home named by ``env``.

    Opens the ledger as every command does (a home that is not there is refused, a new
    ledger is made and remembered, an older one migrated); ConfigError and StoreError
    say what is wrong in one line."""
    home = home_from_env(env)
    require_home(home, env)
    clock = clock_from_env(env)
    store = open_ledger(env, home)
    return status_data(store, home, clock())


def status_data(store: Store, home: Path, now: datetime) -> dict[str, Any]:
    facts = rules_facts(home)
    limits, workers = facts if facts is not None else (None, {})
    with store.read() as tx:
        turns = _filled("turn", tx.data("turn"))
        cards = _filled("card", tx.data("card"))
        events = _filled("event", tx.data("event"))
        timers = _filled("timer", tx.data("timer"))
        matters = _filled("matter", tx.data("matter"))
        pipelines = _filled("pipeline", tx.data("pipeline"))
        waiting: dict[str, list[int]] = {}
        for q in tx.data("queued", states=["pending"]):
            waiting.setdefault(q["matter"], []).append(q["seq"])
    reviews = [run for p in pipelines for run in review_runs(p["data"])]
    usage = usage_data(turns, now, limits, reviews)  # summed in the order of turn ids
    turns.sort(key=lambda t: t["fence"])
    event_defaults = DEFAULTS["event.event"]
    return {
        "turns": [
            {
                "id": t["id"],
                "rule": t["rule"],
                "matter": t["matter"],
                "state": t["state"],
                "outcome": t["outcome"],
                "kind": t["kind_"],
                "agent": t["agent"],
                "worker": t["worker"],
                "session": t["session"],
                "resume": t["resume"] or "",
                "agent_session": t["agent_session"] or "",
                "events": list(t["events"]),
                "hops": t["hops"],
                "chain": t["chain"],
                "started_at": t["started_at"],
                "ended_at": t["ended_at"],
                "lease_until": t["lease_until"] if t["state"] == "running" else "",
                "tokens": t["tokens"],
                "cost_usd": t["cost_usd"],
            }
            for t in turns
        ],
        "cards": [
            {
                "id": c["id"],
                "key": c["key"],
                "matter": c["matter"],
                "kind": c["kind_"],
                "state": c["state"],
                "title": c["title"],
                "text": c["text"],
                "options": list(c["options"]),
                "choice": c["choice"],
                "version": c["version"],
                "turn": c["turn"],
                "answered_by": c["answered_by"],
            }
            for c in cards
        ],
        "events": [
            {
                "seq": e["seq"],
                "source": e["event"]["source"],
                "id": e["event"]["id"],
                "type": e["event"]["type"],
                "subject": e["event"]["subject"],
                "hops": e["event"].get("hops", event_defaults["hops"]),
                "chain": e["event"].get("chain", event_defaults["chain"]),
                "dispatched": e["dispatched"],
                "routes": list(e["routes"]),
                "reason": e["reason"],
            }
            for e in events
        ],
        "timers": [{name: t[name] for name in TIMER_FIELDS} for t in timers],
        "matters": [
            {
                "id": m["id"],
                "rule": m["rule"],
                "subject": m["subject"],
                "state": "running" if m["running"] else ("waiting" if _runnable(m) else "idle"),
                "pending": waiting.get(m["id"], []),
                "worker": workers.get(m["rule"], "any"),
                "running": m["running"],
                "session": m["session"],
                "agent_session": m["agent_session"] or "",
                "chain": m["chain"],
                "retry_after": m["retry_after"],
            }
            for m in matters
        ],
        "pipelines": [
            {
                "id": p["id"],
                "subject": p["subject"],
                "stage": p["stage"],
                "state": "ended" if p["ended"] else "active",
                "waiting_for": str(p["data"].get("waiting_for") or ""),
                "wake_at": p["wake_at"],
                "cards": dict(p["cards"]),
                "started_at": p["started_at"],
                "updated_at": p["updated_at"],
            }
            for p in pipelines
        ],
        "usage": usage,
    }


def _filled(kind: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with the record class's defaults for the fields it lacks."""
    defaults = DEFAULTS[kind]
    return [{**defaults, **row} for row in rows]


def _runnable(m: Mapping[str, Any]) -> bool:
    """``kernel.records.Matter.runnable``: free, and something to run."""
    return m["running"] is None and bool(m["waiting"] or m["repair"] or m["retry"])


def usage_data(
    turns: Iterable[Mapping[str, Any]],
    now: datetime,
    limits: Limits | None,
    reviews: Iterable[tuple[str, int, float, str]] = (),
) -> dict[str, Any]:
    """Turns, review agents' runs, tokens and cost of today and of the last 7 days (local
    days of the rules), as the daily caps count them; ``limits`` None: the rules could not
    be read (UTC, no caps)."""
    tz, max_usd, max_tokens = limits if limits is not None else ("UTC", None, None)
    spent = [(t["started_at"], t["tokens"], t["cost_usd"]) for t in turns]
    runs = [(at, tokens, usd) for at, tokens, usd, _ in reviews]
    out: dict[str, Any] = {"timezone": tz}
    day = ""
    for name, days in (("today", 1), ("week", 7)):
        day, start, end = day_bounds(now, tz, days=days)
        n, tokens, cost = spent_between(spent, start, end)
        r, r_tokens, r_cost = spent_between(runs, start, end)
        out[name] = {
            "turns": n,
            "reviews": r,
            "tokens": tokens + r_tokens,
            "cost_usd": round(cost + r_cost, 6),
            "since": start,
        }
    out["today"]["day"] = day
    out["caps"] = {"max_usd_per_day": max_usd, "max_tokens_per_day": max_tokens}
    return out


# ------------------------------------------------------------------- the rules' limits


def rules_limits(home: Path) -> Limits | None:
    """The timezone and daily caps of the rules of ``home`` (see :func:`rules_facts`)."""
    facts = rules_facts(home)
    return None if facts is None else facts[0]


def rules_facts(home: Path) -> tuple[Limits, Workers] | None:
    """The timezone, daily caps and workers of the rules of ``home``: as remembered when
    the rules file and the code that read it are the same as then, else read by the rules
    parser (and remembered). None, with one line on stderr, when the rules cannot be
    read."""
    path = rules_path(home)
    try:
        raw: bytes | None = path.read_bytes()
    except OSError:
        raw = None
    if raw is not None and (known := _remembered(home, path, raw)) is not None:
        return known
    from ghapp.commands.home import read_rules  # noqa: PLC0415  # imported late: only a changed rules file needs the parser

    try:
        rules = read_rules(home)
    except ConfigError as exc:  # status still works with a broken rules file
        print(f"autoloop: {exc} (usage shown in UTC, without caps)", file=sys.stderr)
        return None
    limits: Limits = (rules.timezone, rules.max_usd_per_day, rules.max_tokens_per_day)
    workers: Workers = {}
    for rule in rules.rules:
        spec = rules.agents.get(rule.agent)
        if spec is not None and spec.worker != "any":
            workers[rule.name] = spec.worker
    if raw is not None:
        _remember(home, path, raw, limits, workers)
    return limits, workers


def _digest(raw: bytes) -> str:
    try:
        from _blake2 import blake2b  # noqa: PLC0415  # hashlib's own source of it; hashlib loads OpenSSL
    except ImportError:  # pragma: no cover  # a Python built without it
        from hashlib import blake2b  # noqa: PLC0415  # the same digest, a few ms more

    return blake2b(raw, digest_size=32).hexdigest()


def _remembered(home: Path, path: Path, raw: bytes) -> tuple[Limits, Workers] | None:
    """The limits remembered for this rules file, read by this code; None when there are
    none, or when the file, the code (or where it is), Python or the time zone database
    changed since."""
    try:
        doc = json.loads((home / RULES_CHECKED).read_text(encoding="utf-8"))
        if (
            doc["version"] != _CHECKED_VERSION
            or doc["rules"] != str(path)
            or doc["digest"] != _digest(raw)
            or doc["python"] != sys.version
            or doc["code_root"] != _CODE_ROOT
        ):
            return None
        for file, mtime_ns, size in doc["code"]:
            st = os.stat(file)
            if st.st_mtime_ns != mtime_ns or st.st_size != size:
                return None
        tz, max_usd, max_tokens = doc["timezone"], doc["max_usd_per_day"], doc["max_tokens_per_day"]
        if not isinstance(tz, str) or not _number(max_usd) or not _number(max_tokens, whole=True):
            return None
        workers = doc["workers"]
        if not isinstance(workers, dict) or not all(isinstance(v, str) for v in workers.values()):
            return None
        zone(tz)  # still known here (day_bounds needs it); not found is a KeyError
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (tz, max_usd, max_tokens), workers


def _number(value: object, *, whole: bool = False) -> bool:
    """None, or a number (a whole one when ``whole``), never a boolean."""
    if value is None:
        return True
    kinds: tuple[type, ...] = (int,) if whole else (int, float)
    return isinstance(value, kinds) and not isinstance(value, bool)


def _remember(home: Path, path: Path, raw: bytes, limits: Limits, workers: Workers) -> None:
    """Keep the limits the parser read from ``raw``, when the file still holds it (it may
    have changed while it was parsed); nothing when the home cannot be written."""
    with contextlib.suppress(OSError):
        if path.read_bytes() != raw:
            return
        tz, max_usd, max_tokens = limits
        doc = {
            "version": _CHECKED_VERSION,
            "rules": str(path),
            "digest": _digest(raw),
            "python": sys.version,
            "code_root": _CODE_ROOT,
            "code": _code_stamps(),
            "timezone": tz,
            "max_usd_per_day": max_usd,
            "max_tokens_per_day": max_tokens,
            "workers": workers,
        }
        tmp = home / f".{RULES_CHECKED}.{os.getpid()}"
        try:
            tmp.write_text(json.dumps(doc) + "\n", encoding="utf-8")
            os.replace(tmp, home / RULES_CHECKED)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()


def _code_stamps() -> list[list[Any]]:
    """(file, mtime_ns, size) of every Autoloop module loaded now, the rules parser's too:
    an upgrade or an edit of any of them reads the rules again."""
    stamps: list[list[Any]] = []
    for name, module in sorted(list(sys.modules.items())):
        file = getattr(module, "__file__", None)
        if name.partition(".")[0] in _CODE_PACKAGES and file:
            st = os.stat(file)
            stamps.append([file, st.st_mtime_ns, st.st_size])
    return stamps


# ------------------------------------------------------------------------------ output

RECENT_TURNS = 10
REASONS_SHOWN = 3  # why events were not dispatched, the commonest first


def show(data: Mapping[str, Any], out: Out) -> None:
    """The status for people: counts, then tables of what needs attention."""
    states = Counter(t["state"] for t in data["turns"])
    by_state = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "none"
    out.line(f"turns: {len(data['turns'])} ({by_state})")
    recent = data["turns"][-RECENT_TURNS:]
    if recent:
        out.table(
            f"recent turns (last {len(recent)}; 'autoloop why TURN' tells one)",
            ["turn", "kind", "rule", "matter", "state", "outcome", "started", "ended"],
            [
                [
                    t["id"],
                    t["kind"],
                    t["rule"],
                    t["matter"],
                    t["state"],
                    t["outcome"] or "",
                    _short_time(t["started_at"]),
                    _short_time(t["ended_at"]),
                ]
                for t in reversed(recent)
            ],
        )
    for t in data["turns"]:
        if t["state"] == "running" and t.get("lease_until"):
            # A worker killed mid-turn leaves it "running" until its claim lapses: say so
            out.line(
                f"turn {t['id']} runs on worker {t['worker'] or '?'}, claimed until "
                f"{_short_time(t['lease_until'])} (renewed while its agent runs; if that "
                "worker is gone, the turn runs again once the claim lapses)"
            )
    if data["matters"]:
        out.table(
            "matters",
            ["matter", "rule", "subject", "state", "pending", "session"],
            [
                [m["id"], m["rule"], m["subject"], m["state"], len(m["pending"]), m["session"]]
                for m in data["matters"]
            ],
        )
    for m in data["matters"]:
        if m["state"] == "waiting" and m.get("retry_after"):
            # (the ledger's instants, and iso's, are fixed-width UTC: they compare as text)
            due = "is due since" if m["retry_after"] <= iso(datetime.now(UTC)) else "waits until"
            out.line(
                f"  matter {m['id']}: a failed turn's retry {due} "
                f"{_short_time(m['retry_after'])} (its rule's retry_backoff_s)"
            )
        if m["state"] == "waiting" and m.get("worker", "any") != "any":
            # Nothing else said why it did not run: only that worker takes it.
            out.line(
                f"  matter {m['id']} waits for a worker named {m['worker']!r} (its agent's "
                f"\"worker\"): 'autoloop work --name {m['worker']}' runs it"
            )
    waiting = [c for c in data["cards"] if c["state"] == "open" and c["kind"] == "ask"]
    for c in waiting:
        out.line(f"  waiting for an answer: card {c['id']} {c['title']!r} (matter {c['matter']})")
    opened = [c for c in data["cards"] if c["state"] == "open"]
    if opened:
        out.table(
            "open cards ('autoloop answer CARD N', or 'autoloop cards dismiss CARD' a notice)",
            ["card", "kind", "title", "matter", "options"],
            [
                [c["id"], c["kind"], c["title"], c["matter"], " / ".join(c["options"])]
                for c in opened
            ],
        )
    armed = [t for t in data["timers"] if not t["fired"]]
    if armed:
        out.table(
            "timers",
            ["timer", "matter", "due", "why"],
            [[t["id"], t["matter"], t["due"], t["why"]] for t in armed],
        )
    active = [p for p in data["pipelines"] if p["state"] == "active"]
    if data["pipelines"]:
        ended = len(data["pipelines"]) - len(active)
        out.line(f"deliveries: {len(active)} active, {ended} ended ('autoloop why OWNER/REPO#N')")
    for p in active:
        waits = f", waiting for {p['waiting_for']}" if p["waiting_for"] else ""
        out.line(f"  delivery {p['subject']} ({p['id']}): {p['stage']}{waits}")
    not_disp = [e for e in data["events"] if not e["dispatched"]]
    # why, by count: "33 not dispatched" alone read as 33 failures (most: no rule takes them)
    reasons = Counter(e["reason"] or "no reason given" for e in not_disp).most_common()
    why = "; ".join(f"{n} {reason}" for reason, n in reasons[:REASONS_SHOWN])
    if len(reasons) > REASONS_SHOWN:
        why += f"; {sum(n for _, n in reasons[REASONS_SHOWN:])} for other reasons"
    why = f": {why}" if why else ""
    out.line(f"events: {len(data['events'])} ({len(not_disp)} not dispatched{why})")
    out.line(f"open cards: {len(opened)}")
    usage = data["usage"]
    for span in ("today", "week"):
        u = usage[span]
        label = "today" if span == "today" else "last 7 days"
        runs = f" and {u['reviews']} review(s)" if u["reviews"] else ""
        out.line(f"{label}: {u['turns']} turns{runs}, {u['tokens']} tokens, ${u['cost_usd']:.4f}")
    caps = usage["caps"]
    today = usage["today"]
    if caps["max_usd_per_day"] is not None or caps["max_tokens_per_day"] is not None:
        limits = []
        if caps["max_usd_per_day"] is not None:
            limits.append(f"${caps['max_usd_per_day']:g}")
        if caps["max_tokens_per_day"] is not None:
            limits.append(f"{caps['max_tokens_per_day']} tokens")
        reached = (
            caps["max_usd_per_day"] is not None and today["cost_usd"] >= caps["max_usd_per_day"]
        ) or (
            caps["max_tokens_per_day"] is not None and today["tokens"] >= caps["max_tokens_per_day"]
        )
        state = "REACHED: no new turns today" if reached else "not reached"
        out.line(f"daily cap ({usage['timezone']}): {' or '.join(limits)}, {state}")


def _short_time(value: object) -> str:
    """``2026-11-30T09:00:01.234+00:00`` as ``2026-11-30 09:00:01`` (empty for none)."""
    text = str(value or "")
    return text[:19].replace("T", " ")
