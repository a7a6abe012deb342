"""Ledger append rate: ``Ledger.decide(Ingest)`` against a raw insert of the same rows.

Both sides run in the same process, on the same disk (one temporary folder), with the
same durability: a fresh SQLite file in WAL mode with ``synchronous=FULL`` and one
transaction per event, which is what acknowledging a webhook needs.

- ``ledger``: ``Ledger(store, rules, clock).decide(Ingest(event))`` per event: dedupe
  check, partial load, ``kernel.step.step``, fact insert, record upserts, commit.
- ``raw``: ``BEGIN IMMEDIATE; INSERT ... RETURNING seq; COMMIT`` per row into a table of
  the same shape (a unique index on the same key) holding the *same* rows: the JSON
  fact text the ledger wrote, byte for byte (the bench checks that).

Events are GitHub ``issues.opened`` deliveries (the translator run over GitHub's own
example payload), spread over ``--subjects`` issues of one ``parallel`` rule, so most
events join an existing matter. Each event goes through both sides one after the other
(alternating which goes first), so that load from other programs hits both alike; the
figure is the median of ``--rounds`` rounds, each on fresh files. Besides events/s the
bench prints per-event latency and the process CPU time per event: the CPU time leaves
out the wait for the disk, so it shows what the ledger costs beyond the fsync.

The backlog figure: ``--backlog`` events are first queued into one matter (nothing
claims them), then a burst of ``--burst`` events goes into that matter, interleaved
one for one with a burst into a fresh matter. If the partial load were independent of
the backlog both rates would match; the ratio shows whether they do.

``--pg`` repeats the append comparison on PostgreSQL (``AUTOLOOP_PG_URL``, else
``postgresql://postgres@127.0.0.1:5432/test``), each side in a fresh schema that is
dropped afterwards, the raw side committing each row on its own as well.

``--group`` (default 20; 1 skips it) adds group commit: ``Ledger.decide_many`` of that many
events per transaction, against the raw insert of the same rows, as many per transaction.

Usage: python -m bench.ledger [--events 2000] [--rounds 3] [--backlog 1000] [--burst 200]
       [--subjects 100] [--group 20] [--pg]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from bench.stats import percentile
from ghapp.runtime.ledger import Ledger
from ghapp.store.base import Store
from ghapp.store.open import open_store
from kernel import inputs as k
from kernel.codec import dump_fact
from kernel.facts import fact_key
from kernel.model import AgentSpec, Event, Rule, Rules, Trigger
from kernel.state import State
from kernel.step import step
from plugins.sources.github import translate

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = ROOT / "tests" / "fixtures" / "github" / "webhooks" / "issues" / "opened.json"
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)

Row = tuple[str, str, int, str | None, str]  # (at, type, v, fkey, data): a facts row

RAW_SCHEMA_SQLITE = """
CREATE TABLE facts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    type TEXT NOT NULL,
    v INTEGER NOT NULL,
    fkey TEXT UNIQUE,
    data TEXT NOT NULL
);
"""
RAW_SCHEMA_PG = """
CREATE TABLE facts (
    seq BIGSERIAL PRIMARY KEY,
    at TEXT NOT NULL,
    type TEXT NOT NULL,
    v INTEGER NOT NULL,
    fkey TEXT UNIQUE,
    data TEXT NOT NULL
)
"""
INSERT = "INSERT INTO facts (at, type, v, fkey, data) VALUES (?, ?, ?, ?, ?) RETURNING seq"


# ------------------------------------------------------------------------------ inputs


def bench_rules() -> Rules:
    rule = Rule(
        name="triage",
        agent="coder",
        on=Trigger(source=("github",), type=("issues.*",)),
        parallel=True,
        allow=("github.comment", "github.label"),
    )
    agent = AgentSpec(name="coder", use="command", command=("true",))
    return Rules(version="bench", agents={"coder": agent}, rules=(rule,))


def template_event() -> Event:
    """One ``issues.opened`` event as the GitHub source makes it from a real payload."""
    try:
        payload = json.loads(PAYLOAD.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SystemExit(f"cannot read the example payload {PAYLOAD}: {exc}") from exc
    (event,) = translate("issues", "bench", payload)
    return event


def events_for(tag: str, count: int, subjects: Sequence[int]) -> list[Event]:
    """``count`` distinct deliveries; event ``i`` is about issue ``subjects[i % len]``."""
    base = template_event()
    repo = str(base.details.get("repo", "acme/web"))
    out = []
    for i in range(count):
        number = subjects[i % len(subjects)]
        details = dict(base.details)
        details["number"] = number
        out.append(
            dataclasses.replace(
                base, id=f"{tag}-{i:06d}", subject=f"{repo}#{number}", details=details
            )
        )
    return out


def instant(i: int) -> datetime:
    """A fixed clock per event, so the rows each side stores are identical."""
    return T0 + timedelta(milliseconds=i)


def expected_rows(events: Sequence[Event], rules: Rules, group: int = 1) -> list[list[Row]]:
    """The facts rows the ledger must store per event, decided in memory on the whole state.

    Events decided together in one group commit share the instant of the group's first.
    """
    state = State()
    rows: list[list[Row]] = []
    for i, event in enumerate(events):
        now = instant(i - i % group)
        decision = step(state, k.Ingest(event=event), now=now, rules=rules)
        rows.append(
            [
                (str(getattr(f, "at", "") or ""), type(f).__name__, 1, fact_key(f), dump_fact(f))
                for f in decision.facts
            ]
        )
    return rows


# ----------------------------------------------------------------------------- runners


def ingest_all(ledger: Ledger, events: Sequence[Event], first: int = 0) -> list[int]:
    """Nanoseconds per ``decide`` (one committed transaction each)."""
    return [ingest_one(ledger, event, i) for i, event in enumerate(events, first)]


def ingest_one(ledger: Ledger, event: Event, i: int) -> int:
    inp = k.Ingest(event=event)
    now = instant(i)
    began = time.perf_counter_ns()
    outcome = ledger.decide(inp, now=now)
    took = time.perf_counter_ns() - began
    if outcome.reply.code != "recorded":
        raise RuntimeError(f"event {event.id} was not recorded: {outcome.reply.message}")
    return took


def ingest_group(ledger: Ledger, events: Sequence[Event], first: int) -> int:
    """Nanoseconds for one ``decide_many`` (one committed transaction for the group)."""
    inputs: list[k.Input] = [k.Ingest(event=event) for event in events]
    began = time.perf_counter_ns()
    outcomes = ledger.decide_many(inputs, now=instant(first))
    took = time.perf_counter_ns() - began
    for event, outcome in zip(events, outcomes, strict=True):
        if outcome.reply.code != "recorded":
            raise RuntimeError(f"event {event.id} was not recorded: {outcome.reply.message}")
    return took


def stored_rows(store: Store) -> list[Row]:
    with store.read() as tx:
        tx.cur.execute(  # type: ignore[attr-defined]  # SqlTx: the bench reads the table
            "SELECT at, type, v, fkey, data FROM facts ORDER BY seq"
        )
        rows: list[Row] = [tuple(r) for r in tx.cur.fetchall()]  # type: ignore[attr-defined]  # the SQL transaction has a cursor; the Tx protocol does not name it
    return rows


class RawSqlite:
    """Same rows, same durability: WAL, synchronous=FULL, one transaction per event."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(str(path), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.executescript(RAW_SCHEMA_SQLITE)
        self.cur = self.conn.cursor()

    def insert(self, rows: Sequence[Row]) -> int:
        cur = self.cur
        began = time.perf_counter_ns()
        cur.execute("BEGIN IMMEDIATE")
        for row in rows:
            cur.execute(INSERT, row)
            cur.fetchone()
        cur.execute("COMMIT")
        return time.perf_counter_ns() - began

    def close(self) -> None:
        self.conn.close()


class RawPg:
    """A plain psycopg insert of the same rows, one committed transaction per event."""

    def __init__(self, url: str) -> None:
        import psycopg  # noqa: PLC0415  # only --pg needs it

        self.conn: Any = psycopg.connect(url, autocommit=True)
        self.conn.execute(RAW_SCHEMA_PG)
        self.sql = INSERT.replace("?", "%s")

    def insert(self, rows: Sequence[Row]) -> int:
        began = time.perf_counter_ns()
        with self.conn.transaction():
            for row in rows:
                self.conn.execute(self.sql, row).fetchone()
        return time.perf_counter_ns() - began

    def close(self) -> None:
        self.conn.close()


class Raw(Protocol):
    def insert(self, rows: Sequence[Row]) -> int: ...


@dataclasses.dataclass
class Side:
    wall: list[int] = dataclasses.field(default_factory=list)  # ns per commit
    cpu: int = 0  # process CPU ns, all events
    events: int = 0


def interleave(
    ledger: Ledger,
    raw: Raw,
    events: Sequence[Event],
    rows: Sequence[list[Row]],
    group: int = 1,
) -> tuple[Side, Side]:
    """Each event (or group of events) through the ledger and its rows through the raw side,
    one after the other (alternating which goes first), so that load hits both alike."""
    led, bare = Side(), Side()
    cpu = time.process_time_ns
    for n, start in enumerate(range(0, len(events), group)):
        batch = events[start : start + group]
        batch_rows = [row for per in rows[start : start + group] for row in per]
        for which in (0, 1) if n % 2 == 0 else (1, 0):
            c0 = cpu()
            if which == 0:
                if group == 1:
                    led.wall.append(ingest_one(ledger, batch[0], start))
                else:
                    led.wall.append(ingest_group(ledger, batch, start))
                led.cpu += cpu() - c0
                led.events += len(batch)
            else:
                bare.wall.append(raw.insert(batch_rows))
                bare.cpu += cpu() - c0
                bare.events += len(batch)
    return led, bare


def round_sqlite(
    folder: Path, events: Sequence[Event], rules: Rules, rows: list[list[Row]], group: int = 1
) -> tuple[Side, Side]:
    store = open_store(f"sqlite:///{folder / 'ledger.db'}")
    raw = RawSqlite(folder / "raw.db")
    try:
        sides = interleave(Ledger(store, lambda: rules, lambda: T0), raw, events, rows, group)
        if stored_rows(store) != [r for per in rows for r in per]:
            raise RuntimeError("the ledger stored other rows than the raw side inserts")
    finally:
        store.close()
        raw.close()
    return sides


def round_pg(
    base: str, events: Sequence[Event], rules: Rules, rows: list[list[Row]], group: int = 1
) -> tuple[Side, Side]:
    with pg_schema(base) as url_led, pg_schema(base) as url_raw:
        store = open_store(url_led)
        raw = RawPg(url_raw)
        try:
            sides = interleave(Ledger(store, lambda: rules, lambda: T0), raw, events, rows, group)
            if stored_rows(store) != [r for per in rows for r in per]:
                raise RuntimeError("the ledger stored other rows than the raw side inserts")
        finally:
            store.close()
            raw.close()
    return sides


def rate(count: int, ns: int) -> float:
    return count / (ns / 1e9) if ns > 0 else float("inf")


def compare(rounds: int, one_round: Callable[[int], tuple[Side, Side]]) -> dict[str, float]:
    """Median events/s per side over ``rounds``; latency percentiles over all events."""
    led_rates: list[float] = []
    raw_rates: list[float] = []
    led_all: list[int] = []
    raw_all: list[int] = []
    led_cpu = raw_cpu = count = 0
    for r in range(rounds):
        led, raw = one_round(r)
        led_rates.append(rate(led.events, sum(led.wall)))
        raw_rates.append(rate(raw.events, sum(raw.wall)))
        led_all += led.wall
        raw_all += raw.wall
        led_cpu += led.cpu
        raw_cpu += raw.cpu
        count += led.events
    led_eps = statistics.median(led_rates)
    raw_eps = statistics.median(raw_rates)
    return {
        "ledger_eps": led_eps,
        "raw_eps": raw_eps,
        "ratio": led_eps / raw_eps,
        "ledger_p50_us": statistics.median(led_all) / 1e3,
        "ledger_p99_us": percentile(led_all, 0.99) / 1e3,
        "raw_p50_us": statistics.median(raw_all) / 1e3,
        "raw_p99_us": percentile(raw_all, 0.99) / 1e3,
        "ledger_cpu_us": led_cpu / count / 1e3,
        "raw_cpu_us": raw_cpu / count / 1e3,
    }


def show(
    fig: dict[str, float],
    out: Callable[[str], Any],
    raw_name: str,
    led_name: str = "ledger.decide(Ingest)",
    target: str = "  (target >= 0.5x)",
) -> None:
    """Latencies are per commit: every event of a group waits for its group's commit."""
    out(
        f"    {led_name:21s} {fig['ledger_eps']:8.0f} events/s  p50 "
        f"{fig['ledger_p50_us']:7.0f} us  p99 {fig['ledger_p99_us']:7.0f} us  "
        f"cpu {fig['ledger_cpu_us']:5.0f} us/event\n"
        f"    {raw_name:21s} {fig['raw_eps']:8.0f} events/s  p50 "
        f"{fig['raw_p50_us']:7.0f} us  p99 {fig['raw_p99_us']:7.0f} us  "
        f"cpu {fig['raw_cpu_us']:5.0f} us/event\n"
        f"    ratio ledger/raw      {fig['ratio']:8.2f}x{target}"
    )


# ---------------------------------------------------------------------------- backlog


def backlog_burst(folder: Path, rules: Rules, backlog: int, burst: int) -> dict[str, float]:
    """One matter with ``backlog`` pending events versus a fresh one, bursts interleaved."""
    store = open_store(f"sqlite:///{folder / 'backlog.db'}")
    try:
        ledger = Ledger(store, lambda: rules, lambda: T0)
        ingest_all(ledger, events_for("queued", backlog, [1]))
        deep = events_for("deep", burst, [1])
        fresh = events_for("fresh", burst, [2])
        t_deep: list[int] = []
        t_fresh: list[int] = []
        cpu = {"deep": 0, "fresh": 0}
        n = backlog
        for i, pair in enumerate(zip(fresh, deep, strict=True)):
            for which in (0, 1) if i % 2 == 0 else (1, 0):
                c0 = time.process_time_ns()
                took = ingest_one(ledger, pair[which], n)
                kind, times = ("fresh", t_fresh) if which == 0 else ("deep", t_deep)
                cpu[kind] += time.process_time_ns() - c0
                times.append(took)
                n += 1
        sizes = []
        waiting = []
        with store.read() as tx:
            for event in (deep[0], fresh[0]):
                mid = f"triage/{event.subject}"
                tx.cur.execute(  # type: ignore[attr-defined]  # SqlTx: the bench reads the row
                    "SELECT length(data) FROM records WHERE kind = 'matter' AND id = ?", (mid,)
                )
                sizes.append(int(tx.cur.fetchone()[0]))  # type: ignore[attr-defined]  # the SQL transaction has a cursor; the Tx protocol does not name it
                waiting.append(len(tx.query("queued", matter=mid, states=["pending"])))
    finally:
        store.close()
    deep_bytes, fresh_bytes = sizes
    return {
        "backlog_eps": rate(burst, sum(t_deep)),
        "fresh_eps": rate(burst, sum(t_fresh)),
        "backlog_ratio": rate(burst, sum(t_deep)) / rate(burst, sum(t_fresh)),
        "backlog_p50_us": statistics.median(t_deep) / 1e3,
        "fresh_p50_us": statistics.median(t_fresh) / 1e3,
        "backlog_cpu_us": cpu["deep"] / burst / 1e3,
        "fresh_cpu_us": cpu["fresh"] / burst / 1e3,
        "backlog_matter_bytes": float(deep_bytes),
        "fresh_matter_bytes": float(fresh_bytes),
        "backlog_waiting": float(waiting[0]),
        "fresh_waiting": float(waiting[1]),
    }


# -------------------------------------------------------------------------- PostgreSQL


@contextmanager
def pg_schema(base: str) -> Iterator[str]:
    """A URL whose search_path is a new, empty schema; the schema is dropped afterwards."""
    import psycopg  # noqa: PLC0415  # only --pg needs it

    schema = "bench_" + uuid.uuid4().hex[:12]
    try:
        with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
    except psycopg.OperationalError as exc:
        raise SystemExit(
            f"--pg: cannot reach PostgreSQL at {base} ({exc}); start it or set AUTOLOOP_PG_URL"
        ) from exc
    sep = "&" if "?" in base else "?"
    try:
        yield f"{base}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def pg_setting(base: str, name: str) -> str:
    import psycopg  # noqa: PLC0415  # only --pg needs it

    with psycopg.connect(base, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    return str(row[0]) if row else "?"


# -------------------------------------------------------------------------------- run


def run(
    *,
    events: int = 2000,
    rounds: int = 3,
    backlog: int = 1000,
    burst: int = 200,
    subjects: int = 100,
    group: int = 20,
    pg: bool = False,
    folder: Path | None = None,
    out: Callable[[str], Any] = print,
) -> dict[str, float]:
    """Measure, print, and return the figures (events/s, microseconds, ratios)."""
    if min(events, rounds, backlog, burst, subjects, group) < 1:
        raise SystemExit("every size must be at least 1")
    rules = bench_rules()
    evs = events_for("ev", events, range(1, subjects + 1))
    rows = expected_rows(evs, rules)
    warm = min(100, events)
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="autoloop-bench-", dir=folder) as tmp:
        where = Path(tmp)
        out(
            f"ledger: SQLite {sqlite3.sqlite_version}, WAL, synchronous=FULL, one transaction "
            f"per event, both sides interleaved event by event in {where}"
        )

        def fresh(name: str) -> Path:
            path = where / name
            path.mkdir()
            return path

        # warm-up: imports, code paths, the page cache of the folder
        round_sqlite(fresh("warm"), evs[:warm], rules, rows[:warm])
        fig = compare(rounds, lambda r: round_sqlite(fresh(f"round-{r}"), evs, rules, rows))
        figures.update(fig)
        out(f"  append   {events} events into {subjects} matters, median of {rounds} rounds")
        show(fig, out, "raw insert, same rows")

        if group > 1:
            grows = expected_rows(evs, rules, group)
            fig = compare(
                rounds,
                lambda r: round_sqlite(fresh(f"group-{r}"), evs, rules, grows, group),
            )
            figures.update({f"group_{key}": value for key, value in fig.items()})
            out(
                f"  group commit: {group} events per transaction on both sides "
                "(Ledger.decide_many; the raw side inserts the same rows)"
            )
            show(fig, out, "raw insert, same rows", "ledger.decide_many", "")
            per_event = figures["ledger_eps"]
            out(f"    decide_many/decide    {fig['ledger_eps'] / per_event:8.2f}x")

        b = backlog_burst(fresh("backlog"), rules, backlog, burst)
        figures.update(b)
        out(
            f"  backlog  burst of {burst} into a matter with {backlog} pending, "
            f"interleaved with a burst into a fresh matter\n"
            f"    fresh matter     {b['fresh_eps']:9.0f} events/s  p50 "
            f"{b['fresh_p50_us']:8.0f} us  cpu {b['fresh_cpu_us']:6.0f} us/event"
            f"  matter row {b['fresh_matter_bytes']:.0f} B, {b['fresh_waiting']:.0f} waiting\n"
            f"    backlog matter   {b['backlog_eps']:9.0f} events/s  p50 "
            f"{b['backlog_p50_us']:8.0f} us  cpu {b['backlog_cpu_us']:6.0f} us/event"
            f"  matter row {b['backlog_matter_bytes']:.0f} B, {b['backlog_waiting']:.0f} waiting\n"
            f"    ratio backlog/fresh {b['backlog_ratio']:6.2f}x   (1.00x = no degradation)"
        )

    if pg:
        base = os.environ.get("AUTOLOOP_PG_URL") or PG_DEFAULT
        out(
            f"ledger on PostgreSQL: synchronous_commit={pg_setting(base, 'synchronous_commit')}, "
            f"fsync={pg_setting(base, 'fsync')}, one transaction per event, interleaved, "
            "each side in a fresh schema"
        )
        round_pg(base, evs[:warm], rules, rows[:warm])
        fig = compare(rounds, lambda _r: round_pg(base, evs, rules, rows))
        figures.update({f"pg_{key}": value for key, value in fig.items()})
        out(f"  append   {events} events into {subjects} matters, median of {rounds} rounds")
        show(fig, out, "raw psycopg insert")
    return figures


def summarize(fig: dict[str, float]) -> list[tuple[str, str, str]]:
    """Rows (figure, measured, against the same-run baseline) for ``python -m bench``."""
    rows = [
        (
            "ledger append, SQLite FULL",
            f"{fig['ledger_eps']:.0f} ev/s",
            f"{fig['ratio']:.2f}x raw insert ({fig['raw_eps']:.0f} ev/s; target >= 0.5x)",
        ),
        (
            "ledger append, 1 matter w/ backlog",
            f"{fig['backlog_eps']:.0f} ev/s",
            f"{fig['backlog_ratio']:.2f}x fresh matter ({fig['fresh_eps']:.0f} ev/s)",
        ),
    ]
    if "group_ratio" in fig:
        rows.append(
            (
                "ledger group commit (decide_many)",
                f"{fig['group_ledger_eps']:.0f} ev/s",
                f"{fig['group_ratio']:.2f}x raw insert, same groups "
                f"({fig['group_raw_eps']:.0f} ev/s)",
            )
        )
    if "pg_ratio" in fig:
        rows.append(
            (
                "ledger append, PostgreSQL",
                f"{fig['pg_ledger_eps']:.0f} ev/s",
                f"{fig['pg_ratio']:.2f}x raw insert ({fig['pg_raw_eps']:.0f} ev/s)",
            )
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backlog", type=int, default=1000)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--subjects", type=int, default=100)
    parser.add_argument(
        "--group", type=int, default=20, help="events per group commit (1: skip that part)"
    )
    parser.add_argument("--pg", action="store_true", help="also measure on PostgreSQL")
    args = parser.parse_args(argv)
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} cpus, {platform.platform()}"
    )
    run(
        events=args.events,
        rounds=args.rounds,
        backlog=args.backlog,
        burst=args.burst,
        subjects=args.subjects,
        group=args.group,
        pg=args.pg,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
