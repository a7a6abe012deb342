"""``autoloop status`` reads the stored data itself: it shows what a reading through the
kernel's record classes shows, and remembers the rules' limits only for a file the
rules parser accepted.

``reference_status`` below is how status read the ledger before (every row decoded into
its record class, the rules read by the parser): the new reading must equal it on
ledgers with every kind of record, on rows written by an older autoloop (fields
missing) or a newer one (fields unknown), and on both backends.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ghapp.commands import status
from ghapp.commands.cli import card_data
from ghapp.commands.home import init_home, read_rules
from ghapp.commands.show import Out
from ghapp.runtime.budget import day_bounds, usage_between
from ghapp.runtime.ledger import Ledger
from ghapp.store.base import Store
from ghapp.store.open import open_store
from kernel import inputs as k
from kernel import records
from kernel.codec import to_data
from kernel.errors import ConfigError
from kernel.model import Event, Rules
from tests import paths
from tests.kernel.helpers import T0, ev, receipt, rule, rules_of

NOW = T0 + timedelta(hours=3)
RULES_DOC: dict[str, Any] = {
    "timezone": "Asia/Shanghai",
    "max_usd_per_day": 1,
    "max_tokens_per_day": 5000,
    "agents": {"demo": {"use": "demo"}},
    "rules": [{"name": "hello", "on": {"type": "hello.*"}, "agent": "demo"}],
}


# ------------------------------------------------------------- the reading before


def worker_of(rules: Rules | None, rule_name: str) -> str:
    """The worker that runs the turns of ``rule_name``, as the hub reads it."""
    rule = rules.rule(rule_name) if rules is not None else None
    spec = rules.agents.get(rule.agent) if rules is not None and rule is not None else None
    return spec.worker if spec is not None else "any"


def reference_status(store: Store, rules: Rules | None, now: datetime) -> dict[str, Any]:
    """``status --json`` as the record classes read it (the code before, unchanged)."""
    with store.read() as tx:
        turns = [t for t in tx.query("turn") if isinstance(t, records.Turn)]
        cards = [c for c in tx.query("card") if isinstance(c, records.Card)]
        events = [e for e in tx.query("event") if isinstance(e, records.EventRow)]
        timers = [t for t in tx.query("timer") if isinstance(t, records.Timer)]
        matters = [m for m in tx.query("matter") if isinstance(m, records.Matter)]
        pipelines = [p for p in tx.query("pipeline") if isinstance(p, records.Pipeline)]
        waiting: dict[str, list[int]] = {}
        for q in tx.query("queued", states=["pending"]):
            if isinstance(q, records.Queued):
                waiting.setdefault(q.matter, []).append(q.seq)
    usage = reference_usage(list(turns), rules, now, pipelines)
    turns.sort(key=lambda t: t.fence)
    return {
        "turns": [
            {
                "id": t.id,
                "rule": t.rule,
                "matter": t.matter,
                "state": t.state,
                "outcome": t.outcome,
                "kind": t.kind_,
                "agent": t.agent,
                "worker": t.worker,
                "session": t.session,
                "resume": t.resume or "",
                "agent_session": t.agent_session or "",
                "events": list(t.events),
                "hops": t.hops,
                "chain": t.chain,
                "started_at": t.started_at,
                "ended_at": t.ended_at,
                "lease_until": t.lease_until if t.state == "running" else "",
                "tokens": t.tokens,
                "cost_usd": t.cost_usd,
            }
            for t in turns
        ],
        "cards": [card_data(c) for c in cards],
        "events": [
            {
                "seq": e.seq,
                "source": e.event.source,
                "id": e.event.id,
                "type": e.event.type,
                "subject": e.event.subject,
                "hops": e.event.hops,
                "chain": e.event.chain,
                "dispatched": e.dispatched,
                "routes": list(e.routes),
                "reason": e.reason,
            }
            for e in events
        ],
        "timers": [to_data(t) for t in timers],
        "matters": [
            {
                "id": m.id,
                "rule": m.rule,
                "subject": m.subject,
                "state": "running" if m.running else ("waiting" if m.runnable else "idle"),
                "pending": waiting.get(m.id, []),
                "worker": worker_of(rules, m.rule),
                "running": m.running,
                "session": m.session,
                "agent_session": m.agent_session or "",
                "chain": m.chain,
                "retry_after": m.retry_after,
            }
            for m in matters
        ],
        "pipelines": [
            {
                "id": p.id,
                "subject": p.subject,
                "stage": p.stage,
                "state": "ended" if p.ended else "active",
                "waiting_for": str(p.data.get("waiting_for") or ""),
                "wake_at": p.wake_at,
                "cards": dict(p.cards),
                "started_at": p.started_at,
                "updated_at": p.updated_at,
            }
            for p in pipelines
        ],
        "usage": usage,
    }


def reference_usage(
    turns: list[records.Turn],
    rules: Rules | None,
    now: datetime,
    pipelines: list[records.Pipeline],
) -> Any:
    tz = rules.timezone if rules is not None else "UTC"
    out: dict[str, Any] = {"timezone": tz}
    runs = [e for p in pipelines for e in p.data.get("review_spend") or ()]
    for name, days in (("today", 1), ("week", 7)):
        day, start, end = day_bounds(now, tz, days=days)
        used = usage_between(turns, start, end)
        since = datetime.fromisoformat(start)
        until = datetime.fromisoformat(end)
        mine = [e for e in runs if since <= datetime.fromisoformat(e["at"]) < until]
        out[name] = {
            "turns": used.turns,
            "reviews": len(mine),
            "tokens": used.tokens + sum(e.get("tokens") or 0 for e in mine),
            "cost_usd": round(used.cost_usd + sum(e.get("cost_usd") or 0.0 for e in mine), 6),
            "since": start,
        }
    out["today"]["day"] = day
    out["caps"] = {
        "max_usd_per_day": getattr(rules, "max_usd_per_day", None),
        "max_tokens_per_day": getattr(rules, "max_tokens_per_day", None),
    }
    return out


# ------------------------------------------------------------------ a full ledger


def fill(store: Store) -> None:
    """Turns done and running, cards asked, answered and noticed, a timer, events routed
    and not, a queued event, pipelines active and ended: every kind status shows."""
    clock = [T0]
    led = Ledger(store, lambda: rules_of(rule(emits=("ping",))), lambda: clock[0])
    for i in range(3):
        led.decide(k.Ingest(event=ev(str(i), summary="s")))
    led.decide(k.Ingest(event=ev("odd", type_="nobody.listens")))  # not dispatched
    t1 = led.decide(k.Claim(matter="r", worker="w")).reply.data["turn"]
    body = receipt(
        '{"ask": [{"key": "q", "title": "Pick \\u00e9", "options": ["a", "b"]}], '
        '"notice": [{"title": "noted"}], "later": [{"in": "30m", "why": "look again"}]}'
    )
    done = k.AgentOutcome(
        started=True, ok=True, final_message=body, session="s1", cost_usd=0.1, tokens=10
    )
    led.decide(k.Finish(turn=str(t1), fence=1, outcome=done))
    clock[0] = T0 + timedelta(minutes=40)
    led.decide(k.Tick())  # the timer fires
    led.decide(k.Answer(card="c1", choice=2, by="ana"))
    t2 = led.decide(k.Claim(matter="r", worker="w")).reply.data["turn"]
    body = receipt(
        '{"ask": [{"key": "go", "title": "Go on?", "options": ["yes", "no"]}], '
        '"later": [{"in": "2h", "why": "remind"}]}'
    )
    again = k.AgentOutcome(
        started=True, ok=True, final_message=body, session="s1", cost_usd=0.2, tokens=5
    )
    led.decide(k.Finish(turn=str(t2), fence=2, outcome=again))
    led.decide(k.Ingest(event=ev("later")))
    led.decide(k.Claim(matter="r", worker="w"))  # runs now
    led.decide(k.Ingest(event=ev("waits")))  # queued behind the running turn
    led.decide(
        k.Advance(
            pipeline="deliver/a/b#1",
            subject="a/b#1",
            version=0,
            stage="checks",
            data={
                "waiting_for": "ci",
                "review_spend": [  # two runs of its review agent: one today, one a week ago
                    {"request": "q1", "at": T0.isoformat(), "tokens": 7, "cost_usd": 0.05},
                    {"request": "q2", "at": (T0 - timedelta(days=8)).isoformat(), "tokens": 9},
                ],
            },
            wake_at="2026-11-30T12:00:00.000000+00:00",
            cards=(k.CardSpec(key="k", title="look"),),
        )
    )
    led.decide(
        k.Advance(pipeline="deliver/a/b#2", subject="a/b#2", version=0, stage="y", ended=True)
    )


def test_a_full_ledger_reads_as_through_the_record_classes(store: Store, tmp_path: Path) -> None:
    init_home(tmp_path, rules_text=json.dumps(RULES_DOC))
    fill(store)
    want = reference_status(store, read_rules(tmp_path), NOW)
    got = status.status_data(store, tmp_path, NOW)
    assert got == want
    assert {name: bool(got[name]) for name in got} == dict.fromkeys(got, True)  # all shown
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
    assert [m["state"] for m in got["matters"]] == ["running"]
    assert got["usage"]["today"]["cost_usd"] == pytest.approx(0.35)  # 0.05 of a review
    assert (got["usage"]["today"]["reviews"], got["usage"]["week"]["reviews"]) == (1, 1)


def test_rows_of_an_older_or_newer_autoloop_read_as_the_record_classes_read_them(
    store: Store, tmp_path: Path
) -> None:
    """A row lacks every field that has a default (an older autoloop), and holds one
    this autoloop does not know (a newer one): both readings fill and drop alike."""
    init_home(tmp_path, rules_text=json.dumps(RULES_DOC))
    fill(store)
    with store.write() as tx:
        for kind, rid, text in tx.raw_records():
            if kind in ("queued", "meta"):
                continue
            row = {
                name: value
                for name, value in json.loads(text).items()
                if name not in status.DEFAULTS[kind]
            }
            if kind == "event":
                row["event"] = {
                    n: v for n, v in row["event"].items() if n not in status.DEFAULTS["event.event"]
                }
            tx.tamper(kind, rid, json.dumps({**row, "from_a_newer_autoloop": [1]}))
    want = reference_status(store, read_rules(tmp_path), NOW)
    assert status.status_data(store, tmp_path, NOW) == want
    assert want["turns"][0]["cost_usd"] is None  # the defaults did fill in


def test_the_defaults_are_those_of_the_record_classes() -> None:
    classes = {
        "turn": records.Turn,
        "card": records.Card,
        "event": records.EventRow,
        "event.event": Event,
        "timer": records.Timer,
        "matter": records.Matter,
        "pipeline": records.Pipeline,
    }
    assert set(status.DEFAULTS) == set(classes)
    for kind, cls in classes.items():
        defaults = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                defaults[f.name] = f.default_factory()
        assert status.DEFAULTS[kind] == defaults, kind
    timer_fields = tuple(f.name for f in dataclasses.fields(records.Timer))
    assert timer_fields == status.TIMER_FIELDS


# ---------------------------------------------------------------- the rules' limits


def checked(home: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((home / status.RULES_CHECKED).read_text())
    return doc


def test_the_limits_are_remembered_once_the_parser_read_them(tmp_path: Path) -> None:
    init_home(tmp_path, rules_text=json.dumps(RULES_DOC))
    assert not (tmp_path / status.RULES_CHECKED).exists()
    assert status.rules_limits(tmp_path) == ("Asia/Shanghai", 1, 5000)
    doc = checked(tmp_path)
    assert doc["rules"] == str(tmp_path / "rules.json")
    assert doc["timezone"] == "Asia/Shanghai"
    assert type(doc["max_usd_per_day"]) is type(read_rules(tmp_path).max_usd_per_day)
    files = {Path(f).name for f, _, _ in doc["code"]}
    assert {"rules.py", "config.py", "rules_file.py", "github.py"} <= files
    # As remembered: the same answer, without the parser (the stamps are read).
    assert status.rules_limits(tmp_path) == ("Asia/Shanghai", 1, 5000)


def test_a_changed_rules_file_is_read_again(tmp_path: Path) -> None:
    init_home(tmp_path, rules_text=json.dumps({**RULES_DOC, "max_usd_per_day": 1.5}))
    assert status.rules_limits(tmp_path) == ("Asia/Shanghai", 1.5, 5000)
    stat = (tmp_path / "rules.json").stat()
    # Same size, same modification time: only the content tells.
    (tmp_path / "rules.json").write_text(json.dumps({**RULES_DOC, "max_usd_per_day": 2.5}))
    os.utime(tmp_path / "rules.json", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert status.rules_limits(tmp_path) == ("Asia/Shanghai", 2.5, 5000)
    assert checked(tmp_path)["max_usd_per_day"] == 2.5
    (tmp_path / "rules.json").unlink()
    toml = 'timezone = "Europe/Berlin"\n[agents.demo]\nuse = "demo"\n'
    (tmp_path / "rules.toml").write_text(toml)
    assert status.rules_limits(tmp_path) == ("Europe/Berlin", None, None)
    assert checked(tmp_path)["rules"] == str(tmp_path / "rules.toml")


@pytest.mark.parametrize(
    "change",
    [
        "code",  # a module of the parser changed (an upgrade, an edit)
        "python",  # another Python reads the file
        "root",  # another install or checkout reads the same home
        "garbage",  # the remembered file is damaged
        "types",  # ... or edited by hand
    ],
)
def test_remembered_limits_of_other_code_are_not_trusted(tmp_path: Path, change: str) -> None:
    init_home(tmp_path, rules_text=json.dumps(RULES_DOC))
    status.rules_limits(tmp_path)
    doc = checked(tmp_path)
    lie = {**doc, "timezone": "Europe/Paris"}
    if change == "code":
        lie["code"] = [[f, mtime + 1, size] for f, mtime, size in doc["code"]]
    elif change == "python":
        lie["python"] = "2.7"
    elif change == "root":
        lie["code_root"] = "/elsewhere"
    elif change == "types":
        lie = {**doc, "max_tokens_per_day": 1.5}
    (tmp_path / status.RULES_CHECKED).write_text("{" if change == "garbage" else json.dumps(lie))
    assert status.rules_limits(tmp_path) == ("Asia/Shanghai", 1, 5000)
    assert checked(tmp_path) == doc  # read again, and remembered anew


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps({**RULES_DOC, "timezone": "Mars/Olympus"}),
        # Its timezone and caps are fine, and still the parser refuses the file.
        json.dumps({**RULES_DOC, "rules": [{"name": "x", "on": {}, "agent": "nobody"}]}),
    ],
)
def test_a_broken_rules_file_is_one_line_on_stderr_every_time(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    init_home(tmp_path, rules_text=text)
    with pytest.raises(ConfigError) as refused:
        read_rules(tmp_path)
    for _ in range(2):
        assert status.rules_limits(tmp_path) is None
        err = capsys.readouterr().err
        assert err == f"autoloop: {refused.value} (usage shown in UTC, without caps)\n"
    assert not (tmp_path / status.RULES_CHECKED).exists()
    usage = status.usage_data([], NOW, None)
    assert usage["timezone"] == "UTC"
    assert usage["caps"] == {"max_usd_per_day": None, "max_tokens_per_day": None}


def test_a_home_that_cannot_be_written_still_gets_its_limits(tmp_path: Path) -> None:
    init_home(tmp_path, rules_text=json.dumps(RULES_DOC))
    (tmp_path / status.RULES_CHECKED).mkdir()  # in the way: nothing can be written there
    assert status.rules_limits(tmp_path) == ("Asia/Shanghai", 1, 5000)
    assert status.rules_limits(tmp_path) == ("Asia/Shanghai", 1, 5000)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# -------------------------------------------------------------- the command itself


def autoloop(home: Path, db: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env.update(AUTOLOOP_HOME=str(home), AUTOLOOP_DB=db, AUTOLOOP_CLOCK=NOW.isoformat())
    return subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", *args],
        cwd=paths.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def shown(data: dict[str, Any]) -> str:
    buf = io.StringIO()
    status.show(data, Out(buf))
    return buf.getvalue()


@pytest.mark.parametrize("rules_text", [json.dumps(RULES_DOC), "{broken"])
def test_the_command_prints_what_the_record_classes_read(
    tmp_path: Path, store_url: str, rules_text: str
) -> None:
    """On SQLite and PostgreSQL, with good rules and broken ones, twice (the rules read
    by the parser, then as remembered)."""
    home = tmp_path / "home"
    init_home(home, rules_text=rules_text)
    store = open_store(store_url)
    try:
        fill(store)
        try:
            rules: Rules | None = read_rules(home)
        except ConfigError:
            rules = None
        want = reference_status(store, rules, NOW)
    finally:
        store.close()
    for _ in range(2):
        as_json = autoloop(home, store_url, "status", "--json")
        assert json.loads(as_json.stdout) == want
        assert as_json.stdout == json.dumps(want, sort_keys=True, default=str) + "\n"
        text = autoloop(home, store_url, "status")
        assert text.stdout == shown(want)
        assert text.stderr == as_json.stderr
        assert (text.stderr == "") == (rules is not None)
    # fill() leaves one turn running: who holds it, and until when, is said
    (running,) = [t for t in want["turns"] if t["state"] == "running"]
    assert running["lease_until"]
    assert f"turn {running['id']} runs on worker w, claimed until " in text.stdout
    if rules is not None:
        assert "daily cap (Asia/Shanghai): $1 or 5000 tokens, not reached" in text.stdout
    # why an event was not dispatched, not only how many were not
    (odd,) = [e for e in want["events"] if not e["dispatched"]]
    assert odd["reason"]
    assert f"(1 not dispatched: 1 {odd['reason']})" in text.stdout


def test_a_matter_for_a_named_worker_says_which_worker_runs_it(
    tmp_path: Path, store_url: str
) -> None:
    """An agent with "worker": "gpu-box" runs only there: status said the matter was
    waiting, and not for what."""
    home = tmp_path / "home"
    doc = {
        "agents": {"big": {"use": "demo", "worker": "gpu-box"}, "demo": {"use": "demo"}},
        "rules": [
            {"name": "heavy", "on": {"type": "heavy.*"}, "agent": "big"},
            {"name": "light", "on": {"type": "light.*"}, "agent": "demo"},
        ],
    }
    init_home(home, rules_text=json.dumps(doc))
    autoloop(home, store_url, "emit", "local", "heavy.job", "x", "--id", "1")
    autoloop(home, store_url, "emit", "local", "light.job", "y", "--id", "2")
    for _ in range(2):  # the rules read by the parser, then as remembered
        data = json.loads(autoloop(home, store_url, "status", "--json").stdout)
        workers = {m["rule"]: (m["state"], m["worker"]) for m in data["matters"]}
        assert workers == {"heavy": ("waiting", "gpu-box"), "light": ("waiting", "any")}
        text = autoloop(home, store_url, "status").stdout
        (line,) = [x for x in text.splitlines() if "waits for a worker" in x]
        assert line.strip().endswith(
            "waits for a worker named 'gpu-box' (its agent's \"worker\"): "
            "'autoloop work --name gpu-box' runs it"
        ), line
