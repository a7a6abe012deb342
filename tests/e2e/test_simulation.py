"""The seeded simulation of the hub on the real Ledger and SQLite, and what it found.

CI runs a bounded slice; ``scripts/test --slow`` (or ``pytest --slow``) runs 20,000+
steps; ``python -m tests.sim --seeds 10 --steps 2000`` runs it by hand with summaries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ghapp.runtime.ledger import Ledger
from ghapp.store.base import StoreError
from ghapp.store.sqlite import SqliteStore
from kernel import inputs as k
from kernel import step as core
from kernel.model import Rule, Rules, Trigger
from kernel.records import Action, Matter, Turn
from tests.kernel.helpers import T0, ev, receipt, rule, rules_of
from tests.sim import InvariantBroken, Simulation, run

# ------------------------------------------------------------------ the bounded CI slice


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_invariants_hold_over_a_seeded_slice(seed: int, tmp_path: Path) -> None:
    summary = run(seed, 1500, tmp_path)
    assert summary.steps == 1500
    assert summary.checks["decisions checked"] > 750
    assert summary.checks["full replays"] >= 4  # every 500 steps, after the drain, ...
    assert summary.turns > 100 and summary.facts > 1000
    for fault in ("duplicate_delivery", "crash_before_commit", "late_receipt", "clock_backward"):
        assert summary.faults[fault] > 0, fault


def test_the_same_seed_commits_the_same_facts(tmp_path: Path) -> None:
    first = run(7, 400, tmp_path / "a")
    second = run(7, 400, tmp_path / "b")
    other = run(8, 400, tmp_path / "c")
    assert first.fact_hash == second.fact_hash
    assert first.facts == second.facts and first.faults == second.faults
    assert other.fact_hash != first.fact_hash
    # Another process with another string-hash seed commits the same facts too.
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    cmd = [sys.executable, "-m", "tests.sim", "--seeds", "1", "--first-seed", "7", "--steps", "400"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, timeout=300)
    assert f"facts sha256 {first.fact_hash[:16]}" in done.stdout
    assert "all invariants held" in done.stdout


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_any_seed_holds_the_invariants_for_200_steps(seed: int) -> None:
    with tempfile.TemporaryDirectory(prefix="autoloop-sim-") as tmp:
        summary = run(seed, 200, Path(tmp), check_every=100)
    assert summary.checks["full replays"] >= 3


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_invariants_hold_over_twenty_thousand_steps(tmp_path: Path) -> None:
    total = 0
    for seed in range(100, 110):
        summary = run(seed, 2000, tmp_path)
        total += summary.steps
    assert total >= 20_000


# ---------------------------------------------------------------- the harness can fail


def test_a_projection_written_behind_the_folds_back_is_caught(tmp_path: Path) -> None:
    sim = Simulation(5, 50, tmp_path / "l.db")
    for _ in range(30):
        sim._ingest()
    with sim.store.write() as tx:
        tx.tamper(
            "matter",
            "ops",
            json.dumps({"id": "ops", "rule": "ops", "subject": "ops", "session": "s"}),
        )
    with pytest.raises(InvariantBroken, match="differences"):
        sim.obs.full_check(sim.ledger)
    with pytest.raises(InvariantBroken, match="projection matter ops differs from the replay"):
        sim.decide(k.Ingest(event=ev("late", type_="ping")))  # the next write of that row
    sim.store.close()


def test_the_simulation_finds_the_emit_routing_bug_when_it_is_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixed = core.emitted_matters

    def routed_without_the_matters_subject(
        inp: k.Finish, rules: Rules, rule: Rule | None, subject: str = ""
    ) -> frozenset[str]:
        return fixed(inp, rules, rule)

    monkeypatch.setattr(core, "emitted_matters", routed_without_the_matters_subject)
    with pytest.raises(InvariantBroken, match=r"projection matter follow/\S+ differs"):
        run(2, 200, tmp_path)


# ------------------------------------------------------------- what the simulation found


def _ledger(tmp_path: Path, *rules: object) -> Ledger:
    store = SqliteStore(f"sqlite:///{tmp_path / 'l.db'}?sync=off")
    r = rules_of(*rules)  # type: ignore[arg-type]
    return Ledger(store, lambda: r, lambda: T0)


def _finish(led: Ledger, matter: str, body: object) -> None:
    turn = str(led.decide(k.Claim(matter=matter, worker="w")).reply.data["turn"])
    with led.store.read() as tx:
        fence = tx.get("turn", turn).fence  # type: ignore[union-attr]
    msg = receipt(json.dumps(body))
    out = k.AgentOutcome(started=True, ok=True, final_message=msg)
    assert led.decide(k.Finish(turn=turn, fence=fence, outcome=out)).reply.ok


def test_answering_an_approval_card_through_the_ledger_decides_its_action(
    tmp_path: Path,
) -> None:
    led = _ledger(tmp_path, rule(approve=("repo.close",)))
    led.decide(k.Ingest(event=ev("1")))
    _finish(led, "r", {"actions": [{"do": "repo.close", "number": 1}]})
    reply = led.decide(k.Answer(card="c1", choice=1, by="owner")).reply
    assert (reply.ok, reply.code) == (True, "answered")
    with led.store.read() as tx:
        act = tx.get("action", "t1.a0")
    assert isinstance(act, Action) and act.status == "allowed"
    assert led.check() == []
    led.store.close()


def test_an_emit_without_subject_joins_the_existing_matter_of_its_subject(
    tmp_path: Path,
) -> None:
    led = _ledger(
        tmp_path,
        rule("a", parallel=True, emits=("done",)),
        rule("b", on=Trigger(type=("done",)), parallel=True),
    )
    led.decide(k.Ingest(event=ev("0", type_="done", subject="x")))  # b/x waits with event 1
    led.decide(k.Ingest(event=ev("1", subject="x")))
    _finish(led, "a/x", {"events": [{"type": "done"}]})  # subject defaults to x
    with led.store.read() as tx:
        follow = tx.get("matter", "b/x")
        waiting = [q.seq for q in tx.query("queued", matter="b/x", states=["pending"])]  # type: ignore[union-attr]
    assert isinstance(follow, Matter) and follow.waiting and waiting == [1, 3]
    assert led.check() == []
    led.store.close()


def test_a_repair_turn_that_fails_to_run_is_tried_again(tmp_path: Path) -> None:
    led = _ledger(tmp_path, rule(max_retries=2))
    led.decide(k.Ingest(event=ev("1")))
    _finish(led, "r", {"ask": [{"key": "x", "title": "t", "options": ["only one"]}]})
    t2 = str(led.decide(k.Claim(matter="r", worker="w")).reply.data["turn"])
    crashed = k.AgentOutcome(started=True, ok=False, error="exit 1")
    assert led.decide(k.Finish(turn=t2, fence=2, outcome=crashed)).reply.code == "failed"
    assert led.decide(k.Claim(matter="r", worker="w")).reply.code == "later"  # its backoff
    again = led.decide(k.Claim(matter="r", worker="w"), now=T0 + timedelta(seconds=30)).reply
    assert again.code == "started"
    with led.store.read() as tx:
        t3 = tx.get("turn", str(again.data["turn"]))
    assert isinstance(t3, Turn) and (t3.kind_, t3.repair_of) == ("repair", "t1")
    assert led.check() == []
    led.store.close()


# ------------------------------------------------------------------ the sync=off switch


def test_sync_off_is_an_opt_in_of_the_url_or_the_constructor(tmp_path: Path) -> None:
    def sync_of(store: SqliteStore) -> int:
        with store.read() as tx:
            tx.cur.execute("PRAGMA synchronous")
            value = int(tx.cur.fetchone()[0])
        store.close()
        return value

    db = tmp_path / "l.db"
    assert sync_of(SqliteStore(f"sqlite:///{db}")) == 2  # FULL stays the default
    assert sync_of(SqliteStore(f"sqlite:///{db}?sync=off")) == 0
    assert sync_of(SqliteStore(f"sqlite:///{db}?sync=full")) == 2
    assert sync_of(SqliteStore(f"sqlite:///{db}", durable=False)) == 0
    assert SqliteStore(f"sqlite:///{db}?sync=off").path == db
    with pytest.raises(StoreError, match="sync=full"):
        SqliteStore(f"sqlite:///{db}?sync=sometimes")
    with pytest.raises(StoreError, match="unknown option 'mode'"):
        SqliteStore(f"sqlite:///{db}?mode=ro")
