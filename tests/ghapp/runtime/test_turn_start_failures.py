"""A turn that fails before its agent runs ends failed, in one log line, and blocks nothing.

Its folder cannot be laid out: ``turns/`` is a file, or the disk is full (a file of the
folder that is ``/dev/full`` gives the real ``ENOSPC``). The turn must still end (the
kernel sees a failure, retries the matter's events in a fresh session as far as the
rule allows, then raises a notice card), never stay ``running`` until its lease lapses.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from ghapp.commands.home import Home as OpenedHome
from ghapp.runtime.worker import WorkerLoop
from kernel.model import Event
from kernel.records import Turn
from tests.hub_cli import Home, wait_for

RULES = {
    "agents": {"demo": {"use": "demo"}},
    "rules": [
        # retried at once (no backoff): each retry fails the same way, in one line
        {
            "name": "hello",
            "on": {"source": "local", "type": "hello.*"},
            "agent": "demo",
            "retry_backoff_s": 0,
        }
    ],
}


def test_drain_with_turns_not_a_folder_records_each_failure_in_one_line(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.rules(RULES)
    (home.home / "turns").write_text("not a folder")
    home.emit("hello.world", "demo", "1")

    drained = home.run("drain")

    assert "Traceback" not in drained.stderr
    said = drained.stderr.strip().splitlines()
    assert said == [
        f"turn {t} could not start: the turn folder could not be prepared: ENOTDIR: "
        f"Not a directory ({home.home / 'turns' / t / 'data'})"
        for t in ("t1", "t2", "t3")  # the first try and the rule's two retries
    ]
    assert "< turn t1 failed: failed: the turn folder could not be prepared" in drained.stdout
    status = home.status()
    assert {t["id"]: t["state"] for t in status["turns"]} == dict.fromkeys(
        ("t1", "t2", "t3"), "failed"
    )
    assert [c["title"] for c in status["cards"]] == ["Agent turn failed 3 times"]

    # The matter is not blocked: once the folder can be made, the next event runs.
    (home.home / "turns").unlink()
    home.emit("hello.world", "demo", "2")
    assert "< turn t4 done: ok" in home.run("drain").stdout


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_the_worker_ends_a_turn_whose_folder_hits_a_full_disk(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = Home(tmp_path)
    home.rules(RULES)
    folder = home.home / "turns" / "t1"
    folder.mkdir(parents=True)
    (folder / "context.json").symlink_to("/dev/full")  # its writes fail with ENOSPC
    ctx = OpenedHome.open(env={"AUTOLOOP_HOME": str(home.home)}, home=home.home)
    hub = ctx.hub()
    loop = WorkerLoop(hub, max_parallel=1, poll_s=0.05)
    caplog.set_level(logging.INFO)
    try:
        hub.emit(Event(source="local", id="1", type="hello.world", subject="demo"))
        loop.start()

        def turn(tid: str) -> Turn | None:
            with hub.store.read() as tx:
                found = tx.get("turn", tid)
            return found if isinstance(found, Turn) and found.state != "running" else None

        # Its matter runs again at once (a retry in a fresh folder), not after the lease.
        retry = wait_for("the retry to end", lambda: turn("t2"), 20)
        assert (retry.kind_, retry.state) == ("retry", "done")
    finally:
        loop.stop()
    first = turn("t1")
    ctx.store.close()
    assert first is not None and (first.state, first.outcome) == ("failed", "failed")
    assert "ENOSPC" in first.error
    (line,) = [r for r in caplog.records if "could not start" in r.getMessage()]
    assert line.levelno == logging.ERROR and line.exc_info is None and not line.exc_text
    assert line.getMessage().startswith("turn t1 could not start: ")
    assert "ENOSPC" in line.getMessage()


def test_drain_says_which_turn_holds_a_matter_instead_of_nothing_to_run(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.rules(RULES)
    home.emit("hello.world", "demo", "1")
    ctx = OpenedHome.open(env={"AUTOLOOP_HOME": str(home.home)}, home=home.home)
    try:
        hub = ctx.hub()
        (matter,) = hub.runnable()
        turn = hub.claim(matter.id, "elsewhere")  # another worker took it and never ended
        assert turn is not None
    finally:
        ctx.store.close()
    home.emit("hello.world", "demo", "2")

    said = home.run("drain").stdout.strip()

    assert said.startswith("nothing to run now: turn t1 of matter hello is running on worker ")
    assert "'elsewhere'" in said and turn.lease_until in said
    assert json.loads(home.run("status", "--json").stdout)["turns"][0]["state"] == "running"


def test_an_end_the_kernel_cannot_apply_ends_the_turn_failed_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A receipt the kernel failed on (a `later` at year 9999 west of UTC raised an
    OverflowError) left the turn running until its claim lapsed, failing every pass, with
    the cause recorded nowhere. Whatever such a slip is, the turn ends failed and says it."""
    import kernel.turns as kernel_turns

    home = Home(tmp_path)
    home.rules(RULES)
    ctx = OpenedHome.open(env={"AUTOLOOP_HOME": str(home.home)}, home=home.home)
    hub = ctx.hub()
    real = kernel_turns.parse_receipt
    calls = []

    def slip(*args: object, **kw: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise OverflowError("date value out of range")
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(kernel_turns, "parse_receipt", slip)
    hub.emit(Event(source="local", id="1", type="hello.world", subject="demo"))
    caplog.set_level(logging.ERROR)
    hub.drain()
    with hub.store.read() as tx:
        t1 = tx.get("turn", "t1")
    assert isinstance(t1, Turn) and t1.state == "failed", t1
    assert "the hub could not apply the turn's end (OverflowError: date value out of range)" in (
        t1.error
    )
    assert "turn t1: its end could not be applied: OverflowError" in caplog.text


def test_a_folder_left_by_an_earlier_turn_of_the_same_id_is_moved_aside(tmp_path: Path) -> None:
    """A ledger restored from an older backup numbers its turns again from there: the new
    t1 ran in the old t1's folder, and read the old report.json as its own (its session
    was resumed by the next turn)."""
    home = Home(tmp_path)
    quiet = [sys.executable, "-c", 'print("```autoloop\\n{}\\n```")']  # no report of its own
    home.rules(
        {
            "agents": {"q": {"use": "command", "command": quiet}},
            "rules": [{"name": "r", "on": {"source": "local", "type": "x"}, "agent": "q"}],
        }
    )
    old = home.home / "turns" / "t1"
    (old / "data").mkdir(parents=True)
    (old / "output.log").write_text("the old turn's output")
    (old / "report.json").write_text(json.dumps({"session": "stale-session"}))
    (old / "data" / "event-9.json").write_text("{}")
    home.emit("x", "s", "1")
    drained = home.run("drain")
    assert "turn t1: its folder held an earlier turn of that id" in drained.stderr
    (aside,) = [p for p in (home.home / "turns").iterdir() if p.name.startswith("t1.before-")]
    assert (aside / "output.log").read_text() == "the old turn's output"
    assert sorted(p.name for p in (old / "data").iterdir()) == ["event-1.json"]
    (turn,) = home.status()["turns"]
    assert turn["agent_session"] == ""
