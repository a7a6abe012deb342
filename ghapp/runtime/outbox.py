"""The outbox: write-backs the kernel allowed, each performed once by one hub.

An action is claimed in the ledger (``ActionTried`` with this hub's name and a lease)
before its executor is called, so two hubs on one ledger (replicas) never perform the
same action at once, and an attempt that may have landed is known on the next try
(``attempts > 0``: the executor reads back before it writes). A refusal
(:class:`~plugins.protocols.ActionFailed`) is recorded failed with a notice card;
anything else leaves the action allowed for the next sweep.

An action whose executor is missing fails with a notice card, unless its namespace is in
``waiting``: an executor that is coming (the GitHub App while the server cannot reach
GitHub yet to learn who it is), or one another process has (``autoloop drain``,
``answer`` and ``work`` leave ``github.*`` to ``autoloop serve``, which holds the App's
key: an approval answered on the command line used the approval up and failed the
write-back for good). Such an action stays allowed, untouched (no attempt is recorded),
until the executor is there and a sweep performs it; the first one of a namespace logs
one line saying who makes it (``waiting[ns]``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import assert_never

from ghapp.runtime.ledger import Ledger, Outcome
from ghapp.store.base import Store
from kernel import inputs as k
from kernel.records import Action
from plugins.protocols import ActionFailed, Executor

__all__ = ["ACTION_CLAIM_S", "Outbox", "gone", "performer_name"]

log = logging.getLogger("autoloop.outbox")

# How long a hub's claim on one write-back lasts: longer than any one attempt (every
# GitHub call has a timeout, and reads are retried a few times), so that another hub
# takes over only from one that died mid-attempt. The taker reads back before writing.
ACTION_CLAIM_S = 300


def _pid_namespace() -> str:
    """This process's PID namespace (Linux), "" where it cannot be told."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


_ours: set[str] = set()  # the performers of this process (one per outbox)


def performer_name() -> str:
    """``host:pid-namespace:pid:token``: one process of one machine, told apart from a
    later one that got the same pid by the random token."""
    name = f"{socket.gethostname()}:{_pid_namespace()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    _ours.add(name)
    return name


def gone(claimant: str, me: str) -> bool:
    """Whether ``claimant`` is a process of this machine and PID namespace that is gone:
    the server killed before a restart. Its claims need not wait for their lease.

    Only what can be told for sure counts: another machine, another namespace, an
    unknown namespace or a pid that is running (maybe another process by now) wait for
    the lease. A claimant with our own pid that is none of this process's outboxes is
    an earlier life of a process that was given our pid (a container's first process
    after a restart).
    """
    theirs, mine = claimant.split(":"), me.split(":")
    if len(theirs) != 4 or len(mine) != 4 or claimant == me:
        return False
    if theirs[0] != mine[0] or not theirs[1] or theirs[1] != mine[1]:
        return False
    if not theirs[2].isdigit():
        return False
    pid = int(theirs[2])
    if pid == os.getpid():
        return claimant not in _ours
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # running as another user: alive
    return False


class Outbox:
    def __init__(
        self,
        store: Store,
        ledger: Ledger,
        *,
        executors: Mapping[str, Executor] | None = None,
        redact: Callable[[str], str] = lambda s: s,
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.executors: dict[str, Executor] = dict(executors or {})
        # Namespaces ("github") whose executor is not here (yet): their actions wait,
        # allowed, instead of failing for want of an executor; the value says who makes
        # them ("" when the executor is coming to this process).
        self.waiting: dict[str, str] = {}
        self._told: set[str] = set()
        self.redact = redact
        self.cards: Callable[[str], None] = lambda card: None
        self.after: Callable[[Outcome, set[str]], None] = lambda out, sent: None
        self._performing: set[str] = set()  # actions being performed by this process now
        self._performing_lock = threading.Lock()
        # Who performs write-backs here: another hub on the same ledger (a replica) is
        # refused an action while this one's claim on it is live.
        self.performer = performer_name()

    def carry_out(self, out: Outcome) -> None:
        """A decision's effects: its cards go out, its allowed write-backs are made."""
        sent: set[str] = set()
        for eff in out.decision.effects:
            match eff:
                case k.SendCard(card=card):
                    self.cards(card)
                    sent.add(card)
                case k.PerformAction(action=action):
                    self.perform(action)
                case _:
                    assert_never(eff)
        self.after(out, sent)

    def perform(self, action_id: str) -> None:
        """Perform one allowed action; the ledger records each attempt before it is made.

        A turn's thread and a sweep may reach the same action at once: only one of them
        performs it in this process, and the other returns (the state is re-read after).
        """
        with self._performing_lock:
            if action_id in self._performing:
                return
            self._performing.add(action_id)
        try:
            self._perform(action_id)
        finally:
            with self._performing_lock:
                self._performing.discard(action_id)

    def _perform(self, action_id: str) -> None:
        with self.store.read() as tx:
            action = tx.get("action", action_id)
        if not isinstance(action, Action) or action.status != "allowed":
            return
        ns = action.do.split(".", 1)[0]
        executor = self.executors.get(ns)
        if executor is None and ns in self.waiting:
            who = self.waiting[ns]
            if who and ns not in self._told:
                self._told.add(ns)
                log.warning(
                    "write-back %s (%s) is not made by this process: %s; it waits in the "
                    "ledger ('autoloop why %s' shows it)", action.do, action.id, who, action.turn,
                )  # fmt: skip
            return  # performed by a sweep once its executor is there
        if executor is None:
            out = self.ledger.decide(
                k.ActionDone(
                    action=action.id,
                    ok=False,
                    error=f"no executor for {action.do!r} here (is the GitHub App configured?)",
                )
            )
            self.carry_out(out)  # the failure's notice card goes out now
            return
        lapsed = action.claimed_by if gone(action.claimed_by, self.performer) else ""
        claim = self.ledger.decide(
            k.ActionTried(
                action=action.id, by=self.performer, lease_s=ACTION_CLAIM_S, lapsed=lapsed
            )
        )
        if not claim.reply.ok:
            return  # done meanwhile, or another hub is performing it now
        # The count at claim time, under the ledger's write lock: more than 0 tells the
        # executor that an earlier attempt may have landed, so it reads back first.
        action = replace(action, attempts=int(claim.reply.data.get("attempts", action.attempts)))
        try:
            result = executor.perform(action)
        except ActionFailed as exc:
            out = self.ledger.decide(
                k.ActionDone(action=action.id, ok=False, error=self.redact(str(exc)))
            )
            self.carry_out(out)
            return
        except Exception as exc:
            self.ledger.decide(k.ActionTried(action=action.id, error=self.redact(str(exc))))
            return
        self.ledger.decide(k.ActionDone(action=action.id, ok=True, result=dict(result)))

    def sweep(self) -> None:
        with self.store.read() as tx:
            pending = [a for a in tx.query("action", states=["allowed"]) if isinstance(a, Action)]
        for a in pending:
            self.perform(a.id)
