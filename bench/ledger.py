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
example payload), spread over ``--subjects`` issues of one ``parallel`` rule, so each
event joins an existing matter. Rounds alternate which side goes first; the figure is
the median round.

The backlog figure: ``--backlog`` events are first queued into one matter (nothing
claims them), then a burst of ``--burst`` events goes into that matter, interleaved
one for one with a burst into a fresh matter. If the partial load were independent of
the backlog both rates would match; the ratio shows whether they do.

``--pg`` repeats the append comparison on PostgreSQL (``AUTOLOOP_PG_URL``, else
``postgresql://postgres@127.0.0.1:5432/test``), each side in a fresh schema that is
dropped afterwards, the raw side committing each row on its own as well.

Usage: python -m bench.ledger [--events 2000] [--rounds 3] [--backlog 1000] [--burst 200]
       [--subjects 100] [--pg]
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
from typing import Any
from urllib.parse import quote

from ghapp.ledger import Ledger
from ghapp.store.base import Store, open_store
from kernel import step as k
from kernel.codec import dump_fact
from kernel.facts import fact_key
from kernel.model import AgentSpec, Event, Rule, Rules, Trigger
from kernel.state import State
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


def expected_rows(events: Sequence[Event], rules: Rules, first: int = 0) -> list[Row]:
    """The facts rows the ledger must store, decided in memory over the whole state."""
    state = State()
    rows: list[Row] = []
    for i, event in enumerate(events, first):
        decision = k.step(state, k.Ingest(event=event), now=instant(i), rules=rules)
        for fact in decision.facts:
            at = str(getattr(fact, "at", "") or "")
            rows.append((at, type(fact).__name__, 1, fact_key(fact), dump_fact(fact)))
    return rows


# ----------------------------------------------------------------------------- runners


def ingest_all(ledger: Ledger, events: Sequence[Event], first: int = 0) -> list[int]:
    """Nanoseconds per ``decide`` (one committed transaction each)."""
    times: list[int] = []
    clock = time.perf_counter_ns
    for i, event in enumerate(events, first):
        inp = k.Ingest(event=event)
        now = instant(i)
        began = clock()
        outcome = ledger.decide(inp, now=now)
        times.append(clock() - began)
        if outcome.reply.code != "recorded":
            raise RuntimeError(f"event {event.id} was not recorded: {outcome.reply.message}")
    return times


def stored_rows(store: Store) -> list[Row]:
    with store.read() as tx:
        tx.cur.execute(  # type: ignore[attr-defined]  # SqlTx: the bench reads the table
            "SELECT at, type, v, fkey, data FROM facts ORDER BY seq"
        )
        rows: list[Row] = [tuple(r) for r in tx.cur.fetchall()]  # type: ignore[attr-defined]
    return rows


def ledger_sqlite(folder: Path, events: Sequence[Event], rules: Rules, rows: list[Row]) -> int:
    store = open_store(f"sqlite:///{folder / 'ledger.db'}")
    try:
        ledger = Ledger(store, lambda: rules, lambda: T0)
        took = sum(ingest_all(ledger, events))
        if stored_rows(store) != rows:
            raise RuntimeError("the ledger stored other rows than the raw side inserts")
    finally:
        store.close()
    return took


def raw_sqlite(folder: Path, rows: Sequence[Row]) -> int:
    """Same rows, same durability: WAL, synchronous=FULL, one transaction per row."""
    conn = sqlite3.connect(str(folder / "raw.db"), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.executescript(RAW_SCHEMA_SQLITE)
        cur = conn.cursor()
        clock = time.perf_counter_ns
        began = clock()
        for row in rows:
            cur.execute("BEGIN IMMEDIATE")
            cur.execute(INSERT, row)
            cur.fetchone()
            cur.execute("COMMIT")
        return clock() - began
    finally:
        conn.close()


def rate(count: int, ns: int) -> float:
    return count / (ns / 1e9) if ns > 0 else float("inf")


def compare(
    rounds: int,
    events: Sequence[Event],
    rows: list[Row],
    ledger_side: Callable[[int], int],
    raw_side: Callable[[int], int],
) -> tuple[float, float]:
    """Median events/s of each side over ``rounds``, alternating which goes first."""
    led: list[float] = []
    raw: list[float] = []
    for r in range(rounds):
        if r % 2 == 0:
            led.append(rate(len(events), ledger_side(r)))
            raw.append(rate(len(rows), raw_side(r)))
        else:
            raw.append(rate(len(rows), raw_side(r)))
            led.append(rate(len(events), ledger_side(r)))
    return statistics.median(led), statistics.median(raw)


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
        cpu_deep = cpu_fresh = 0
        n = backlog
        for a, b in zip(fresh, deep, strict=True):
            c0 = time.process_time_ns()
            t_fresh.extend(ingest_all(ledger, [a], n))
            c1 = time.process_time_ns()
            t_deep.extend(ingest_all(ledger, [b], n + 1))
            c2 = time.process_time_ns()
            cpu_fresh += c1 - c0
            cpu_deep += c2 - c1
            n += 2
        with store.read() as tx:
            sizes = {}
            for mid in ("triage/Codertocat/Hello-World#1", "triage/Codertocat/Hello-World#2"):
                tx.cur.execute(  # type: ignore[attr-defined]  # SqlTx: the bench reads the row
                    "SELECT length(data) FROM records WHERE kind = 'matter' AND id = ?", (mid,)
                )
                sizes[mid] = int(tx.cur.fetchone()[0])  # type: ignore[attr-defined]
    finally:
        store.close()
    deep_bytes, fresh_bytes = sizes.values()
    return {
        "backlog_eps": rate(burst, sum(t_deep)),
        "fresh_eps": rate(burst, sum(t_fresh)),
        "backlog_ratio": rate(burst, sum(t_deep)) / rate(burst, sum(t_fresh)),
        "backlog_p50_us": statistics.median(t_deep) / 1e3,
        "fresh_p50_us": statistics.median(t_fresh) / 1e3,
        "backlog_cpu_us": cpu_deep / burst / 1e3,
        "fresh_cpu_us": cpu_fresh / burst / 1e3,
        "backlog_matter_bytes": float(deep_bytes),
        "fresh_matter_bytes": float(fresh_bytes),
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


def ledger_pg(base: str, events: Sequence[Event], rules: Rules, rows: list[Row]) -> int:
    with pg_schema(base) as url:
        store = open_store(url)
        try:
            ledger = Ledger(store, lambda: rules, lambda: T0)
            took = sum(ingest_all(ledger, events))
            if stored_rows(store) != rows:
                raise RuntimeError("the ledger stored other rows than the raw side inserts")
        finally:
            store.close()
    return took


def raw_pg(base: str, rows: Sequence[Row]) -> int:
    import psycopg  # noqa: PLC0415  # only --pg needs it

    with pg_schema(base) as url, psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RAW_SCHEMA_PG)
        sql = INSERT.replace("?", "%s")
        clock = time.perf_counter_ns
        began = clock()
        for row in rows:
            with conn.transaction():
                cur = conn.execute(sql, row)
                cur.fetchone()
        return clock() - began


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
    pg: bool = False,
    folder: Path | None = None,
    out: Callable[[str], Any] = print,
) -> dict[str, float]:
    """Measure, print, and return the figures (events/s and ratios)."""
    if min(events, rounds, backlog, burst, subjects) < 1:
        raise SystemExit("every size must be at least 1")
    rules = bench_rules()
    evs = events_for("ev", events, range(1, subjects + 1))
    rows = expected_rows(evs, rules)
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="autoloop-bench-", dir=folder) as tmp:
        where = Path(tmp)
        out(
            f"ledger: SQLite {sqlite3.sqlite_version}, WAL, synchronous=FULL, "
            f"one transaction per event, folder {where}"
        )

        def fresh(name: str) -> Path:
            path = where / name
            path.mkdir()
            return path

        # warm-up: imports, code paths, the page cache of the folder
        warm = evs[: min(100, events)]
        warm_rows = expected_rows(warm, rules)
        ledger_sqlite(fresh("warm-ledger"), warm, rules, warm_rows)
        raw_sqlite(fresh("warm-raw"), warm_rows)

        led, raw = compare(
            rounds,
            evs,
            rows,
            lambda r: ledger_sqlite(fresh(f"ledger-{r}"), evs, rules, rows),
            lambda r: raw_sqlite(fresh(f"raw-{r}"), rows),
        )
        figures.update(ledger_eps=led, raw_eps=raw, ratio=led / raw)
        out(
            f"  append   {events} events, {subjects} matters, median of {rounds} rounds\n"
            f"    ledger.decide(Ingest)  {led:9.0f} events/s\n"
            f"    raw insert, same rows  {raw:9.0f} rows/s\n"
            f"    ratio ledger/raw       {led / raw:9.2f}x   (target >= 0.5x)"
        )

        b = backlog_burst(fresh("backlog"), rules, backlog, burst)
        figures.update(b)
        out(
            f"  backlog  burst of {burst} into a matter with {backlog} pending, "
            f"interleaved with a burst into a fresh matter\n"
            f"    fresh matter     {b['fresh_eps']:9.0f} events/s  p50 "
            f"{b['fresh_p50_us']:8.0f} us  cpu {b['fresh_cpu_us']:6.0f} us/event"
            f"  matter row {b['fresh_matter_bytes']:.0f} B\n"
            f"    backlog matter   {b['backlog_eps']:9.0f} events/s  p50 "
            f"{b['backlog_p50_us']:8.0f} us  cpu {b['backlog_cpu_us']:6.0f} us/event"
            f"  matter row {b['backlog_matter_bytes']:.0f} B\n"
            f"    ratio backlog/fresh {b['backlog_ratio']:6.2f}x   (1.00x = no degradation)"
        )

    if pg:
        base = os.environ.get("AUTOLOOP_PG_URL") or PG_DEFAULT
        sync = pg_setting(base, "synchronous_commit")
        fsync = pg_setting(base, "fsync")
        out(f"ledger on PostgreSQL: synchronous_commit={sync}, fsync={fsync}, commit per event")
        ledger_pg(base, warm, rules, warm_rows)
        raw_pg(base, warm_rows)
        led, raw = compare(
            rounds,
            evs,
            rows,
            lambda _r: ledger_pg(base, evs, rules, rows),
            lambda _r: raw_pg(base, rows),
        )
        figures.update(pg_ledger_eps=led, pg_raw_eps=raw, pg_ratio=led / raw)
        out(
            f"  append   {events} events, median of {rounds} rounds\n"
            f"    ledger.decide(Ingest)  {led:9.0f} events/s\n"
            f"    raw psycopg insert     {raw:9.0f} rows/s\n"
            f"    ratio ledger/raw       {led / raw:9.2f}x   (target >= 0.5x)"
        )
    return figures


def summarize(fig: dict[str, float]) -> list[tuple[str, str, str]]:
    """Rows (figure, measured, against the same-run baseline) for ``python -m bench``."""
    rows = [
        (
            "ledger append, SQLite FULL",
            f"{fig['ledger_eps']:.0f} ev/s",
            f"{fig['ratio']:.2f}x raw insert ({fig['raw_eps']:.0f} rows/s; target >= 0.5x)",
        ),
        (
            "ledger append, 1 matter w/ backlog",
            f"{fig['backlog_eps']:.0f} ev/s",
            f"{fig['backlog_ratio']:.2f}x fresh matter ({fig['fresh_eps']:.0f} ev/s)",
        ),
    ]
    if "pg_ratio" in fig:
        rows.append(
            (
                "ledger append, PostgreSQL",
                f"{fig['pg_ledger_eps']:.0f} ev/s",
                f"{fig['pg_ratio']:.2f}x raw insert ({fig['pg_raw_eps']:.0f} rows/s)",
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
        pg=args.pg,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
