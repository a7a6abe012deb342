"""The worker loop's timing: it looks at the ledger with one read, and ticks (a write)
only when woken, when something was written, at the kernel's wake_at, or when the last
tick is too old."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ghapp.runtime.hub import Hub
from ghapp.runtime.worker import MIN_SLEEP_S, WorkerLoop
from ghapp.store.sqlite import SqliteStore
from kernel import inputs as k
from kernel.model import AgentSpec
from tests.kernel.helpers import ev, rule, rules_of

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


class FakeTx:
    def __init__(self, hub: FakeHub) -> None:
        self.hub = hub

    def last_fact(self) -> int:
        return self.hub.last_fact


class FakeStore:
    def __init__(self, hub: FakeHub) -> None:
        self.hub = hub

    @contextlib.contextmanager
    def read(self) -> Iterator[FakeTx]:
        yield FakeTx(self.hub)


class FakeHub:
    """What the loop reads of a hub: the store, the clock, the ticks it asks for."""

    def __init__(self) -> None:
        self.now = T0
        self.last_fact = 7
        self.wake_at: datetime | None = None
        self.retry_at: datetime | None = None  # what runnable() found of a failed turn's retry
        self.ticks: list[float] = []
        self.store = FakeStore(self)

    def clock(self) -> datetime:
        return self.now

    def tick(self, *, look_ahead_s: float = 0.0) -> int:
        self.ticks.append(look_ahead_s)
        return 0

    def runnable(self, worker: str = "local") -> list[Any]:
        return []

    next_wake = Hub.next_wake


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def loop_of(hub: FakeHub, clock: Clock) -> WorkerLoop:
    return WorkerLoop(hub, poll_s=1.0, tick_every_s=30.0, monotonic=clock)


def test_a_quiet_ledger_costs_one_read_per_look_and_no_tick() -> None:
    hub, clock = FakeHub(), Clock()
    loop = loop_of(hub, clock)
    loop.look(woken=True)
    assert hub.ticks == [30.0]  # each tick looks as far ahead as the longest sleep
    for _ in range(20):
        clock.t += 1
        loop.look(woken=False)
    assert len(hub.ticks) == 1


def test_a_write_by_another_process_a_wake_up_or_an_old_tick_each_make_a_pass() -> None:
    hub, clock = FakeHub(), Clock()
    loop = loop_of(hub, clock)
    loop.look(woken=True)
    hub.last_fact = 8  # another worker claimed, a CLI answered...
    loop.look(woken=False)
    loop.look(woken=True)
    assert len(hub.ticks) == 3
    clock.t += 30
    loop.look(woken=False)
    assert len(hub.ticks) == 4


def test_the_kernels_wake_at_sets_the_next_tick() -> None:
    hub, clock = FakeHub(), Clock()
    loop = loop_of(hub, clock)
    loop.look(woken=True)
    assert loop.sleep_s() == 1.0  # nothing due: the next look at the ledger
    hub.wake_at = T0 + timedelta(milliseconds=250)
    assert loop.sleep_s() == 0.25
    loop.look(woken=False)
    assert len(hub.ticks) == 1
    hub.now += timedelta(milliseconds=250)
    assert loop.sleep_s() == MIN_SLEEP_S  # due now: no spinning, a short sleep
    loop.look(woken=False)
    assert len(hub.ticks) == 2
    hub.wake_at = None
    clock.t += 29.5
    assert loop.sleep_s() == 0.5  # the longest gap between ticks comes first


def test_a_failed_turns_retry_wakes_the_loop_when_its_backoff_ends() -> None:
    hub, clock = FakeHub(), Clock()
    loop = loop_of(hub, clock)
    loop.look(woken=True)
    hub.retry_at = T0 + timedelta(milliseconds=400)  # runnable() left a matter for then
    hub.wake_at = T0 + timedelta(seconds=5)
    assert loop.sleep_s() == 0.4  # the earlier of the two
    loop.look(woken=False)
    assert len(hub.ticks) == 1  # not due yet: no pass
    hub.now += timedelta(milliseconds=400)
    loop.look(woken=False)
    assert len(hub.ticks) == 2  # due: a pass, which claims it


class DownHub(FakeHub):
    """A hub whose ledger cannot be read while ``down`` (a database that went away)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True
        self.reads = 0
        down_hub = self

        class Store:
            @contextlib.contextmanager
            def read(self) -> Iterator[FakeTx]:
                down_hub.reads += 1
                if down_hub.down:
                    raise OSError("the connection is lost")
                yield FakeTx(down_hub)

        self.store = Store()  # type: ignore[assignment]  # the same read() as FakeStore's

    def take_back(self) -> list[str]:  # reads the running turns, as the hub's
        with self.store.read():
            return []

    def sweep_cards(self) -> None: ...

    def sweep_actions(self) -> None: ...


def test_a_ledger_that_stays_unreachable_is_one_line_and_passes_that_back_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A PostgreSQL outage failed every pass, woken by every webhook: a hundred lines a
    second from each process."""
    hub = DownHub()
    loop = WorkerLoop(hub, poll_s=0.01)  # type: ignore[arg-type]  # what the loop reads of a hub
    caplog.set_level(logging.WARNING, logger="autoloop.worker")
    loop.start()
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            loop.wake()  # a stream of webhooks
            time.sleep(0.005)
        failed = [r.getMessage() for r in caplog.records if "step failed" in r.getMessage()]
        assert failed == ["worker loop step failed: OSError: the connection is lost"]
        assert hub.reads <= 6  # 0.1 s, then 0.2, 0.4, 0.8: backing off, not spinning
        hub.down = False
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
            "works again" in r.getMessage() for r in caplog.records
        ):
            time.sleep(0.05)
        (back,) = [r.getMessage() for r in caplog.records if "works again" in r.getMessage()]
        assert back.startswith("worker loop works again after ")
    finally:
        loop.stop()


class SweepFailsHub(DownHub):
    """A hub whose first sweep fails (a connection dropped at start, a damaged page)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.sweeps = 0

    def sweep_cards(self) -> None:
        self.sweeps += 1
        if self.sweeps == 1:
            raise OSError("the connection is lost")


def test_a_first_sweep_that_fails_is_retried_not_the_end_of_the_worker() -> None:
    """The sweeps ran before the loop, outside its guard: one failure ended the worker's
    thread, and serve ran with no worker while /healthz said ok."""
    hub = SweepFailsHub()
    loop = WorkerLoop(hub, poll_s=0.01)  # type: ignore[arg-type]  # what the loop reads of a hub
    loop.start()
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and hub.sweeps < 2:
            time.sleep(0.01)
        assert hub.sweeps == 2 and loop.problem() == ""
        assert loop._thread is not None and loop._thread.is_alive()
    finally:
        loop.stop()


def test_a_worker_that_fails_for_long_or_stopped_says_so() -> None:
    clock = Clock()
    hub = DownHub()
    loop = WorkerLoop(hub, poll_s=0.01, monotonic=clock)  # type: ignore[arg-type]  # (as above)
    loop.start()
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and loop._failing < 1:
            time.sleep(0.01)
        assert loop.problem() == ""  # a failed pass or two: not yet
        clock.t += 31
        assert loop.problem() == (
            f"the worker's passes fail ({loop._failing} in a row): OSError: the connection is lost"
        )
    finally:
        loop.stop()
    assert loop.problem() == ""  # stopped on purpose


def test_a_second_signal_during_the_rest_of_the_stop_is_not_lost() -> None:
    """A second Ctrl-C or SIGTERM that came while the server stopped its other parts was
    taken by the first stop's handler, and the turns were waited for all the same."""
    import threading

    from ghapp.runtime.worker import wait_for_turns

    class Busy:
        stopped: list[str] = []

        def running_turns(self) -> list[str]:
            return [] if self.stopped else ["t1"]

        def stop_turns_now(self) -> list[str]:
            self.stopped.append("t1")
            return ["t1"]

    import signal

    now = threading.Event()
    now.set()  # asked twice already
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        started = time.monotonic()
        assert wait_for_turns(Busy(), None, now=now) == 1  # type: ignore[arg-type]  # (a fake)
        assert time.monotonic() - started < 2 and Busy.stopped == ["t1"]
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)


def test_runnable_leaves_a_matter_backing_off_and_names_when_only_for_its_worker(
    tmp_path: Path,
) -> None:
    """A matter whose failed turn waits out its backoff is not offered to claim; the
    hub says when (the worker sleeps until then), but not to a worker that would not
    take it: the Action's job waited for another worker's retry."""
    rules = dataclasses.replace(
        rules_of(rule("mine", retry_backoff_s=30), rule("theirs", retry_backoff_s=10)),
        agents={
            "a": AgentSpec(name="a", use="command", command=("true",)),
            "b": AgentSpec(name="b", use="command", command=("true",), worker="gpu"),
        },
    )
    rules = dataclasses.replace(
        rules, rules=(rules.rules[0], dataclasses.replace(rules.rules[1], agent="b"))
    )
    now = [T0]
    store = SqliteStore(f"sqlite:///{tmp_path / 'ledger.db'}")
    hub = Hub(home=tmp_path, store=store, rules=lambda: rules, clock=lambda: now[0], agent_for=str)
    try:
        hub.ledger.decide(k.Ingest(event=ev("1")))  # to both rules' matters
        failed = k.AgentOutcome(started=True, ok=False, error="rate limited")
        for matter, worker in (("mine", "local"), ("theirs", "gpu")):
            turn = hub.claim(matter, worker)
            assert turn is not None
            hub.ledger.decide(k.Finish(turn=turn.id, fence=turn.fence, outcome=failed))
        assert hub.runnable("local") == [] and hub.retry_at == T0 + timedelta(seconds=30)
        assert hub.runnable("gpu") == [] and hub.retry_at == T0 + timedelta(seconds=10)
        assert hub.next_wake() == T0 + timedelta(seconds=10)
        now[0] = T0 + timedelta(seconds=10)
        # (an agent of worker "any" runs on the gpu worker too: its retry is one to wait for)
        assert [m.id for m in hub.runnable("gpu")] == ["theirs"]
        assert hub.retry_at == T0 + timedelta(seconds=30)
        assert hub.runnable("local") == [] and hub.retry_at == T0 + timedelta(seconds=30)
        now[0] = T0 + timedelta(seconds=30)
        assert [m.id for m in hub.runnable("local")] == ["mine"] and hub.retry_at is None
    finally:
        store.close()


class SlowlyFailingHub(Hub):
    """A hub whose agent works a while, then fails (a real one: minutes)."""

    def run(self, turn: Any, **kw: Any) -> Any:
        time.sleep(1.2)
        failed = k.AgentOutcome(started=True, ok=False, error="overloaded")
        return self.ledger.decide(k.Finish(turn=turn.id, fence=turn.fence, outcome=failed))


def test_a_drain_that_waits_for_retries_counts_its_waits_not_the_turns(tmp_path: Path) -> None:
    """The Action's job (300 s of waiting) skipped the retry of any turn whose agent had
    run longer than that: the time the turn ran was counted as waiting."""
    rules = rules_of(rule("r", retry_backoff_s=1, max_retries=1))
    store = SqliteStore(f"sqlite:///{tmp_path / 'ledger.db'}")
    hub = SlowlyFailingHub(
        home=tmp_path, store=store, rules=lambda: rules, clock=lambda: datetime.now(UTC),
        agent_for=str,
    )  # fmt: skip
    try:
        hub.ledger.decide(k.Ingest(event=ev("1")))
        waited: list[datetime] = []
        report = hub.drain(wait_retries_s=1.5, waiting=waited.append)
        assert report.turns == ["t1", "t2"]  # the retry ran, after its 1 s
        assert len(waited) == 1 and report.retry_at is None
        hub.ledger.decide(k.Ingest(event=ev("2")))
        report = hub.drain(wait_retries_s=0.5)  # a wait longer than allowed: left, and said
        assert report.turns == ["t3"] and report.retry_at is not None
    finally:
        store.close()


class InterruptedHub(Hub):
    """A hub whose agent is running when Ctrl-C comes (the drain's own thread)."""

    ledger_fails = False

    def run(self, turn: Any, **kw: Any) -> Any:
        if self.ledger_fails:  # the Ctrl-C came in the middle of a write of the turn's

            def refused(*args: Any, **kw: Any) -> Any:
                raise sqlite3.OperationalError("cannot start a transaction within a transaction")

            self.ledger.decide = refused  # type: ignore[method-assign]
        raise KeyboardInterrupt


@pytest.mark.parametrize("ledger_fails", [False, True])
def test_a_drain_interrupted_ends_the_turn_it_ran_or_leaves_it_to_the_next(
    tmp_path: Path, ledger_fails: bool, caplog: pytest.LogCaptureFixture
) -> None:
    rules = rules_of(rule("r", retry_backoff_s=30))
    store = SqliteStore(f"sqlite:///{tmp_path / 'ledger.db'}")
    hub = InterruptedHub(
        home=tmp_path, store=store, rules=lambda: rules, clock=lambda: datetime.now(UTC),
        agent_for=str,
    )  # fmt: skip
    hub.ledger_fails = ledger_fails
    try:
        hub.ledger.decide(k.Ingest(event=ev("1")))
        with pytest.raises(KeyboardInterrupt):
            hub.drain()
        with store.read() as tx:
            (turn,) = tx.query("turn")
        if ledger_fails:  # left running: the next drain on this host takes it back
            assert turn.state == "running"  # type: ignore[attr-defined]
            assert "its end could not be recorded now" in caplog.text
            assert "within a transaction" in caplog.text
        else:  # failed, no backoff: the next drain runs it again at once
            assert turn.state == "failed"  # type: ignore[attr-defined]
            assert "interrupted (Ctrl-C)" in turn.error  # type: ignore[attr-defined]
            with store.read() as tx:
                (matter,) = tx.query("matter")
            assert matter.retry_after == ""  # type: ignore[attr-defined]
    finally:
        store.close()
