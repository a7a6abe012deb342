"""Two hubs on one ledger (replicas) never perform the same write-back twice.

Each hub has its own connection to the same SQLite file or PostgreSQL schema, as two
``autoloop serve`` processes would. Both reach one allowed action at the same moment;
the ledger's claim lets exactly one of them perform it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ghapp.runtime.hub import Hub
from ghapp.runtime.outbox import gone, performer_name
from ghapp.store.base import Store
from ghapp.store.open import open_store
from kernel import inputs as k
from kernel.records import Action
from tests.kernel.helpers import T0, ev, receipt, rule, rules_of

RULES = rules_of(rule(allow=("github.comment",)))


class SlowExecutor:
    """Counts the writes it makes; each takes a while, like a call to GitHub."""

    def __init__(self, calls: list[tuple[str, int]], lock: threading.Lock) -> None:
        self.calls = calls
        self.lock = lock

    def perform(self, action: Action) -> Mapping[str, Any]:
        with self.lock:
            self.calls.append((action.id, action.attempts))
        time.sleep(0.3)
        return {"comment": 1}


def hub_on(store: Store, home: Path, executor: SlowExecutor) -> Hub:
    return Hub(
        home=home,
        store=store,
        rules=lambda: RULES,
        clock=lambda: T0,
        agent_for=lambda name: None,
        executors={"github": executor},
    )


def allowed_action(hub: Hub) -> str:
    led = hub.ledger
    led.decide(k.Ingest(event=ev("1")))
    turn = str(led.decide(k.Claim(matter="r", worker="w")).reply.data["turn"])
    body = {"actions": [{"do": "github.comment", "repo": "o/r", "number": 1, "body": "hi"}]}
    out = k.AgentOutcome(started=True, ok=True, final_message=receipt(json.dumps(body)))
    led.decide(k.Finish(turn=turn, fence=1, outcome=out))
    return f"{turn}.a0"


def test_two_hubs_reaching_one_action_at_once_perform_it_once(
    store_url: str, tmp_path: Path
) -> None:
    calls: list[tuple[str, int]] = []
    lock = threading.Lock()
    stores = [open_store(store_url), open_store(store_url)]
    try:
        hubs = [
            hub_on(s, tmp_path / f"h{i}", SlowExecutor(calls, lock)) for i, s in enumerate(stores)
        ]
        aid = allowed_action(hubs[0])
        start = threading.Barrier(2)

        def go(hub: Hub) -> None:
            start.wait()
            hub.perform(aid)

        threads = [threading.Thread(target=go, args=(h,)) for h in hubs]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=30)
        assert calls == [(aid, 0)]  # one write, made as a first attempt
        with stores[1].read() as tx:
            done = tx.get("action", aid)
        assert isinstance(done, Action)
        assert (done.status, done.attempts, done.claimed_by) == ("done", 1, "")
        for h in hubs:  # later sweeps find nothing left to do
            h.sweep_actions()
        assert len(calls) == 1
        assert hubs[0].ledger.check() == []
    finally:
        for s in stores:
            s.close()


def test_a_hub_that_died_mid_attempt_is_taken_over_with_a_read_back(
    store_url: str, tmp_path: Path
) -> None:
    calls: list[tuple[str, int]] = []
    lock = threading.Lock()
    store = open_store(store_url)
    try:
        now = [T0]
        hub = hub_on(store, tmp_path / "h", SlowExecutor(calls, lock))
        hub.clock = lambda: now[0]
        hub.ledger.clock = hub.clock
        aid = allowed_action(hub)
        # another hub claimed it and vanished (no result, no error recorded)
        hub.ledger.decide(k.ActionTried(action=aid, by="gone:1:x", lease_s=300))
        hub.perform(aid)
        assert calls == []  # its claim is still live
        now[0] = T0.replace(minute=10)
        hub.perform(aid)
        assert calls == [(aid, 1)]  # attempts 1: the executor reads back before writing
    finally:
        store.close()


def dead_pid() -> int:
    """The pid of a process of this machine that has ended."""
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    pid = int(proc.stdout)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return pid
    raise AssertionError(f"pid {pid} was given to another process meanwhile: run again")


def test_a_claimant_counts_as_gone_only_when_that_can_be_told_for_sure() -> None:
    me = performer_name()
    host, ns, _pid, _token = me.split(":")
    dead = dead_pid()
    assert ns, "the PID namespace is known on Linux"
    assert gone(f"{host}:{ns}:{dead}:0badc0de", me)
    assert not gone(f"other-host:{ns}:{dead}:0badc0de", me)  # another machine: the lease
    assert not gone(f"{host}:1:{dead}:0badc0de", me)  # another PID namespace
    assert not gone(f"{host}::{dead}:0badc0de", me)  # namespace unknown
    assert not gone(f"{host}:{ns}:{os.getppid()}:0badc0de", me)  # a running process
    assert not gone(f"{host}:{dead}:0badc0de", me)  # the older three-part name
    assert not gone(me, me)
    # our own pid: an earlier life of it (a restarted container's first process) is gone,
    # another outbox of this very process (a replica in a test) is not
    assert gone(f"{host}:{ns}:{os.getpid()}:0badc0de", me)
    assert not gone(performer_name(), me)


def test_a_write_claimed_by_a_killed_server_is_taken_over_at_once(
    store_url: str, tmp_path: Path
) -> None:
    calls: list[tuple[str, int]] = []
    store = open_store(store_url)
    try:
        hub = hub_on(store, tmp_path / "h", SlowExecutor(calls, threading.Lock()))
        aid = allowed_action(hub)
        ns = os.stat("/proc/self/ns/pid").st_ino
        killed = f"{socket.gethostname()}:{ns}:{dead_pid()}:0badc0de"
        # the killed server had claimed it for 300 s, then died mid-attempt
        assert hub.ledger.decide(k.ActionTried(action=aid, by=killed, lease_s=300)).reply.ok
        hub.perform(aid)
        assert calls == [(aid, 1)]  # at once, and told to read back first
        with store.read() as tx:
            action = tx.get("action", aid)
        assert isinstance(action, Action) and action.status == "done"
    finally:
        store.close()
