"""Named workers on one shared SQLite ledger: placement, a killed worker, late receipts.

Workers are real ``autoloop work --name W`` processes; events come from ``autoloop emit``;
agents are real subprocesses (``tests/agents/worker_agent.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ghapp.commands.home import Home as OpenedHome
from ghapp.runtime.turns import HOLDER_FILE, abandoned, hold, prepare, run_agent
from kernel import inputs as k
from kernel.records import Turn
from kernel.rules import parse_rules
from plugins.agents.registry import make_agent
from tests.fakes.turns import alive, wait_gone
from tests.hub_cli import ROOT, Home, wait_for

AGENT = ROOT / "tests" / "agents" / "worker_agent.py"


class Workers:
    def __init__(self, home: Home) -> None:
        self.home = home
        self.procs: list[subprocess.Popen[str]] = []
        self.cleanup: list[int] = []  # process groups to kill if a test fails half-way

    def start(self, name: str, **env: str) -> subprocess.Popen[str]:
        proc = self.home.worker(name, **env)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        for group in self.cleanup:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path)


@pytest.fixture
def workers(home: Home) -> Iterator[Workers]:
    w = Workers(home)
    try:
        yield w
    finally:
        w.stop_all()


def agent(worker: str, log: Path, *extra: str) -> dict[str, Any]:
    argv = [sys.executable, str(AGENT), "--log", str(log), *extra, "{prompt}"]
    return {"use": "command", "command": argv, "worker": worker}


def turns_done(home: Home, n: int) -> list[dict[str, Any]] | None:
    turns = home.status()["turns"]
    done = [t for t in turns if t["state"] != "running"]
    return turns if len(done) >= n else None


def test_turns_of_an_agent_placed_on_a_worker_run_only_there(home: Home, workers: Workers) -> None:
    log = home.root / "agent.log"
    home.rules(
        {
            "agents": {"on_a": agent("a", log), "on_b": agent("b", log)},
            "rules": [
                {"name": "ra", "on": {"type": ["for.a"]}, "agent": "on_a", "parallel": True},
                {"name": "rb", "on": {"type": ["for.b"]}, "agent": "on_b", "parallel": True},
            ],
        }
    )
    workers.start("b")
    for i in range(3):
        home.emit("for.a", f"acme/web#{i}", f"a{i}")
        home.emit("for.b", f"acme/web#{i}", f"b{i}")
    wait_for("worker b's three turns", lambda: turns_done(home, 3))
    st = home.status()
    assert {(t["rule"], t["worker"]) for t in st["turns"]} == {("rb", "b")}
    waiting = [m for m in st["matters"] if m["rule"] == "ra"]
    assert len(waiting) == 3 and all(m["pending"] and not m["running"] for m in waiting)

    workers.start("a")
    turns = wait_for("worker a's three turns", lambda: turns_done(home, 6))
    placed = sorted((t["rule"], t["worker"], t["outcome"]) for t in turns)
    assert placed == [("ra", "a", "ok")] * 3 + [("rb", "b", "ok")] * 3
    for t in turns:
        why = home.run("why", t["id"]).stdout
        assert f"claimed by worker {t['worker']} " in why


def killed_mid_turn(
    home: Home, workers: Workers, *, timeout_s: int
) -> tuple[Path, subprocess.Popen[str], list[int]]:
    """Worker ``a`` killed (SIGKILL) while its agent hangs in a turn of a rule with
    ``timeout_s``: the agents' log, the killed worker, and the agent's processes (left
    running: it has a session of its own)."""
    log = home.root / "agent.log"
    hung = home.root / "hung.pids"
    slow = {"name": "r", "on": {"type": ["ping"]}, "agent": "slow", "timeout_s": timeout_s}
    home.rules({"agents": {"slow": agent("a", log, "--hang-once", str(hung))}, "rules": [slow]})
    first = workers.start("a")
    home.emit("ping", "acme/web#1", "e1")
    wait_for("the agent to hang", lambda: hung.exists() and hung.read_text().strip())
    orphans = [int(p) for p in hung.read_text().split()]
    workers.cleanup.append(orphans[0])
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    return log, first, orphans


def test_a_killed_workers_turn_is_claimed_again_after_its_lease_and_the_orphan_is_stopped(
    home: Home, workers: Workers
) -> None:
    home.base["AUTOLOOP_LEASE_MARGIN_S"] = "1"  # a claim lasts 4 + 1 s unless renewed
    log, _, orphans = killed_mid_turn(home, workers, timeout_s=4)
    # The agent has a session of its own: killing the worker does not kill it.
    assert all(alive(p) for p in orphans)
    (t1,) = home.status()["turns"]
    assert (t1["state"], t1["worker"]) == ("running", "a")
    # As if the killed worker had run on another host (sharing this ledger and folder):
    # nothing here can tell it is gone, and its claim lapses.
    holder = home.home / "turns" / t1["id"] / "worker.json"
    holder.write_text(json.dumps({**json.loads(holder.read_text()), "host": "another-host"}))

    workers.start("a")
    turns = wait_for("the re-claimed turn to finish", lambda: turns_done(home, 2))
    first_turn, retry = turns[:2]
    assert (first_turn["id"], first_turn["outcome"]) == (t1["id"], "lease_expired")
    assert (retry["kind"], retry["outcome"], retry["worker"]) == ("retry", "ok", "a")
    assert retry["events"] == t1["events"]
    assert wait_gone(orphans, within_s=1) == []
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["turn"] for r in runs] == [t1["id"], retry["id"]]
    assert runs[1]["earlier_alive"] == []  # the retry never ran beside the orphan
    why = home.json("why", t1["id"])
    assert "lease of worker 'a' expired" in why["error"]
    assert why["claim"]["worker"] == "a"

    # The killed worker's late receipt, with its old fence, changes nothing.
    env = home.env()
    ctx = OpenedHome.open(env=env, home=home.home)
    before = home.status()
    with ctx.store.read() as tx:
        facts_before = tx.fact_count()
    late = ctx.hub().ledger.decide(
        k.Finish(
            turn=t1["id"],
            fence=why["claim"]["fence"],
            outcome=k.AgentOutcome(
                started=True,
                ok=True,
                final_message='```autoloop\n{"notice": [{"title": "late"}]}\n```',
                session="late-session",
            ),
        )
    )
    assert (late.reply.ok, late.reply.code) == (False, "refused")
    assert [type(fact).__name__ for fact in late.decision.facts] == ["ReceiptRefused"]
    assert late.decision.effects == ()
    with ctx.store.read() as tx:
        assert tx.fact_count() == facts_before + 1
    after = home.status()
    assert after["cards"] == before["cards"] and after["matters"] == before["matters"]
    assert [t for t in after["turns"] if t["id"] != t1["id"]] == before["turns"][1:]
    assert "refused receipt" in home.run("why", t1["id"]).stdout
    home.run("rebuild", "--check")
    ctx.store.close()


def test_a_worker_started_where_one_was_killed_takes_its_turn_back_at_once(
    home: Home, workers: Workers
) -> None:
    """After ``kill -9`` of a worker, its turns stayed running until their claims lapsed
    (the rule's timeout_s plus two minutes): the next worker on the same host knows the
    process is gone, stops its agent and runs the turn again at once."""
    log, first, orphans = killed_mid_turn(home, workers, timeout_s=900)
    (t1,) = home.status()["turns"]
    assert t1["state"] == "running" and all(alive(p) for p in orphans)

    began = time.monotonic()
    workers.start("a")
    turns = wait_for("the turn taken back and run again", lambda: turns_done(home, 2))
    assert time.monotonic() - began < 60  # its claim had 900 s and more to run
    first_turn, retry = turns[:2]
    assert (first_turn["id"], first_turn["outcome"]) == (t1["id"], "failed")
    assert (retry["kind"], retry["outcome"], retry["events"]) == ("retry", "ok", t1["events"])
    assert wait_gone(orphans, within_s=1) == []
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["turn"] for r in runs] == [t1["id"], retry["id"]]
    assert runs[1]["earlier_alive"] == []  # the retry never ran beside the orphan
    why = home.json("why", t1["id"])
    assert f"(pid {first.pid}) ended before the turn did" in why["error"]
    assert "taken back by a worker started on this host" in why["error"]


def test_the_lease_margin_setting_rejects_nonsense(home: Home) -> None:
    home.rules({"agents": {}, "rules": []})
    proc = home.run("work", "--name", "a", ok=False, AUTOLOOP_LEASE_MARGIN_S="soon")
    assert proc.returncode == 2
    assert "AUTOLOOP_LEASE_MARGIN_S" in proc.stderr and "seconds" in proc.stderr


def test_a_worker_that_lost_its_claim_stops_its_own_agent(tmp_path: Path) -> None:
    hung = tmp_path / "hung.pids"
    doc = {
        "agents": {"slow": agent("a", tmp_path / "agent.log", "--hang-once", str(hung))},
        "rules": [{"name": "r", "on": {"type": ["ping"]}, "agent": "slow", "timeout_s": 120}],
    }
    rules = parse_rules(json.dumps(doc), path="rules.json")
    rule = rules.rule("r")
    assert rule is not None
    turn = Turn(id="t1", matter="r", rule="r", agent="slow", worker="a", session="s-1")
    prepared = prepare(tmp_path, rules, rule, turn, [])
    beats: list[float] = []

    def refused() -> bool:  # the ledger says another claim holds the matter now
        beats.append(time.monotonic())
        return False

    began = time.monotonic()
    outcome = run_agent(prepared, make_agent, heartbeat=refused, heartbeat_every_s=1.0)
    took = time.monotonic() - began
    assert len(beats) == 1 and took < 20, took  # not the 120 s timeout, nor the 300 s sleep
    assert not outcome.ok and not outcome.timed_out
    assert wait_gone([int(p) for p in hung.read_text().split()], within_s=3) == []


def test_whether_a_turns_process_is_gone_is_told_by_pid_and_start_time(tmp_path: Path) -> None:
    """``worker.json`` names the process running a turn; a live one (this, or another),
    one on another host and one without a start time are never taken for gone; a dead
    one, or another process given the same pid (pid 1 in a restarted container), are."""
    folder = tmp_path / "turn"
    folder.mkdir()
    assert abandoned(folder) == ""  # no worker.json: a turn of a worker from before
    hold(folder)
    assert abandoned(folder) == ""
    script = "import pathlib, sys, time; from ghapp.runtime.turns import hold; "
    script += "hold(pathlib.Path(sys.argv[1])); print('held', flush=True); time.sleep(30)"
    other = subprocess.Popen(
        [sys.executable, "-c", script, str(folder)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        assert abandoned(folder) == ""
    finally:
        other.kill()
        other.wait()
        if other.stdout is not None:
            other.stdout.close()
    assert (
        abandoned(folder)
        == f"the worker process that ran it (pid {other.pid}) ended before the turn did"
    )
    record = json.loads((folder / HOLDER_FILE).read_text())
    for changed, gone in (
        ({"pid": os.getpid()}, True),  # the pid is alive, but it is another process
        ({"host": "another-host"}, False),
        ({"ns": "pid:[4026531999]"}, False),  # another container with the same host name
        ({"mark": None}, False),
    ):
        (folder / HOLDER_FILE).write_text(json.dumps({**record, **changed}))
        assert bool(abandoned(folder)) is gone, changed
    (folder / HOLDER_FILE).write_text("{not json")
    assert abandoned(folder) == ""
