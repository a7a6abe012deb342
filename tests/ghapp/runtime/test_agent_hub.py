"""The claude and codex adapters through the hub and the real command line (issue 3).

The fake ``claude`` and ``codex`` CLIs are first on PATH; the rules' agents let the
fakes' control variables through with ``pass_env``. Every step is a real ``autoloop``
process against one SQLite ledger, and every agent run a real subprocess.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.turns import wait_gone
from tests.hub_cli import Home, fake_agent, value_after

CLIS = ("claude", "codex")


def rules_for(use: str, **rule: Any) -> dict[str, Any]:
    return {
        "agents": {"coder": fake_agent(use)},
        "rules": [
            {
                "name": "triage",
                "on": {"source": "local", "type": ["ping"]},
                "agent": "coder",
                "timeout_s": 30,
                **rule,
            }
        ],
    }


def session_in_argv(use: str, argv: list[str]) -> tuple[str, str]:
    """(how, id): how the CLI was told which session to use, in its own syntax."""
    if use == "claude":
        if "--resume" in argv:
            return "resume", value_after(argv, "--resume")
        return "new", value_after(argv, "--session-id")
    if "resume" in argv:
        return "resume", value_after(argv, "resume")
    return "new", ""


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path)


@pytest.mark.parametrize("use", CLIS)
def test_a_two_turn_matter_resumes_the_session_the_cli_reported(home: Home, use: str) -> None:
    home.rules(rules_for(use))
    home.emit("ping", "acme/web#1", "e1")
    home.run("drain")
    st = home.status()
    (t1,) = st["turns"]
    session = t1["agent_session"]
    assert t1["outcome"] == "ok" and session
    # The receipt came from the final message: the question it asked is a card now.
    (card,) = [c for c in st["cards"] if c["state"] == "open"]
    assert (card["title"], card["options"]) == ("Pick a colour", ["red", "green"])
    assert t1["resume"] == ""

    home.run("answer", card["id"], "2")
    home.run("drain")
    st = home.status()
    t2 = st["turns"][1]
    assert (t2["outcome"], t2["resume"], t2["agent_session"]) == ("ok", session, session)
    argv1, argv2 = (r["argv"] for r in home.recorded())
    how1, id1 = session_in_argv(use, argv1)
    assert how1 == "new" and (use == "codex" or id1 == session)
    assert session_in_argv(use, argv2) == ("resume", session)
    cards = {c["id"]: c for c in st["cards"]}
    assert cards[card["id"]]["state"] == "done"  # the second receipt resolved it
    assert any(c["title"] == "Painted" for c in cards.values())
    why = home.json("why", t2["id"])
    assert why["resume"] == session
    assert why["receipt"]["notice"][0]["title"] == "Painted"
    # codex prints an earlier agent message too: only the last one is the receipt.
    assert "early note" not in str(why["receipt"])


@pytest.mark.parametrize("use", CLIS)
def test_started_then_failed_retries_in_the_same_session_then_tells_the_owner(
    home: Home, use: str
) -> None:
    home.rules(rules_for(use, max_retries=1, retry_backoff_s=0))  # (the backoff: below)
    home.emit("ping", "acme/web#1", "e1")
    home.run("drain", FAKE_SCENARIO="error")
    st = home.status()
    assert [(t["kind"], t["outcome"]) for t in st["turns"]] == [
        ("normal", "failed"),
        ("retry", "failed"),
    ]
    first, second = st["turns"]
    assert first["agent_session"] and second["resume"] == first["agent_session"]
    runs = home.recorded()
    assert len(runs) == 2  # one try plus max_retries=1, then no more
    assert session_in_argv(use, runs[1]["argv"]) == ("resume", first["agent_session"])
    (notice,) = [c for c in st["cards"] if c["kind"] == "notice"]
    assert notice["title"] == "Agent turn failed 2 times"
    assert "No more retries" in notice["text"] and f"autoloop why {second['id']}" in notice["text"]
    assert second["id"] in notice["text"]
    home.run("drain")  # nothing left to retry: the failure does not loop
    assert len(home.recorded()) == 2
    # what the notice says brings the work back: emitting the event again is a duplicate,
    # the next event about the subject starts a turn
    assert "emit the event again" not in notice["text"]
    assert "the next event about the same subject" in notice["text"]
    assert "duplicate" in home.emit("ping", "acme/web#1", "e1")
    home.emit("ping", "acme/web#1", "e2")
    home.run("drain")
    assert len(home.recorded()) == 3
    assert home.status()["turns"][-1]["outcome"] == "ok"


def test_a_failed_turn_is_retried_after_its_backoff_and_drain_says_when(home: Home) -> None:
    """An agent that fails (a rate limit, an outage) was run again within 0.1 s, and
    failed again: its retries were spent before anything could change."""
    home.rules(rules_for("claude", max_retries=1, retry_backoff_s=2))
    home.emit("ping", "acme/web#1", "e1")
    first = home.run("drain", FAKE_SCENARIO="error")
    failed_at = time.monotonic()
    assert "< turn t1 failed" in first.stdout
    said = first.stdout.strip().splitlines()[-1]
    assert said.startswith("a failed turn is retried at ") and "(in 2 s" in said
    assert "autoloop drain' again then" in said
    early = home.json("drain")  # before its time: nothing runs
    assert early["turns"] == [] and early["retry_at"]
    assert len(home.recorded()) == 1
    (matter,) = home.status()["matters"]
    assert (matter["state"], matter["retry_after"]) == ("waiting", early["retry_at"])
    assert f"matter {matter['id']}: a failed turn's retry waits until " in home.run("status").stdout
    assert home.json("why", "t1")["retry_at"] == early["retry_at"]
    assert (
        f"its events run again in a retry from {early['retry_at']}" in home.run("why", "t1").stdout
    )
    time.sleep(max(0.0, 2.1 - (time.monotonic() - failed_at)))
    assert "< turn t2 done: ok" in home.run("drain").stdout  # (the agent works again)
    turns = home.status()["turns"]
    assert [(t["kind"], t["outcome"]) for t in turns] == [("normal", "failed"), ("retry", "ok")]
    assert turns[1]["resume"] == turns[0]["agent_session"]  # in the same session
    assert home.json("drain")["retry_at"] is None
    assert home.status()["matters"][0]["retry_after"] == ""
    assert home.json("why", "t1")["retry_at"] is None  # its retry ran


@pytest.mark.parametrize("use", CLIS)
def test_a_turn_that_never_started_is_retried_in_a_fresh_session(home: Home, use: str) -> None:
    home.rules(rules_for(use))
    home.emit("ping", "acme/web#1", "e1")
    home.run("drain")
    old = home.status()["turns"][0]["agent_session"]
    (card,) = [c for c in home.status()["cards"] if c["state"] == "open"]
    shutil.rmtree(home.sessions)  # the CLI forgot the session (e.g. a new machine)
    home.run("answer", card["id"], "1")
    home.run("drain")
    turns = home.status()["turns"]
    assert [(t["kind"], t["outcome"]) for t in turns] == [
        ("normal", "ok"),
        ("normal", "failed"),
        ("retry", "ok"),
    ]
    lost, fresh = turns[1], turns[2]
    assert lost["resume"] == old and "fresh" in home.json("why", lost["id"])["error"]
    assert fresh["resume"] == "" and fresh["agent_session"] not in ("", old)
    assert fresh["events"] == lost["events"]  # the answer was not lost
    argvs = [r["argv"] for r in home.recorded()]
    assert session_in_argv(use, argvs[1]) == ("resume", old)
    how, _ = session_in_argv(use, argvs[2])
    assert how == "new"


@pytest.mark.parametrize("use", CLIS)
def test_a_hung_agent_and_its_children_are_killed_at_timeout_s(home: Home, use: str) -> None:
    home.rules(rules_for(use, timeout_s=1.5, max_retries=0))
    home.emit("ping", "acme/web#1", "e1")
    began = time.monotonic()
    home.run("drain", FAKE_SCENARIO="hang")
    took = time.monotonic() - began
    assert took < 15, took
    (turn,) = home.status()["turns"]
    assert turn["outcome"] == "timeout" and turn["state"] == "failed"
    leader, child = (int(p) for p in home.pids.read_text().split())
    assert wait_gone([leader, child], within_s=3) == []
    why = home.json("why", turn["id"])
    assert "timeout_s" in why["error"]
    (notice,) = [c for c in home.status()["cards"] if c["kind"] == "notice"]
    assert "timeout_s" in notice["text"] and "No more retries" in notice["text"]
