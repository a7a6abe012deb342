"""The whole system, simulated: the hub, the outbox, the delivery pipeline, the sandbox GitHub.

One :class:`SystemSim` runs, in one thread and on simulated time
(:class:`~tests.sim.sandbox.SimClock`), the product's own parts as ``autoloop serve``
wires them: a :class:`~ghapp.runtime.hub.Hub` on a real SQLite ledger file, its outbox
and :class:`~ghapp.github.executor.GitHubExecutor`, the delivery runner
(:class:`~ghapp.github.deliveries.Deliveries`, its loop body called in turn instead of
its threads), the :class:`~ghapp.github.sweeper.Sweeper`, and the webhook endpoint's
own translation (:func:`ghapp.web.app.webhook_inputs`), all talking to the real
:class:`~ghapp.github.client.GitHubClient`, whose requests reach the fake GitHub's
ASGI app in process (:class:`~tests.sim.sandbox.Bridge`). The fake GitHub's scripted
people, CI and deploys act on the same clock; its webhooks wait in a queue until a
step sends one.

Each step picks one move by weight from ``random.Random(seed)``: people open, label,
push, approve, comment; CI and deploys finish; a webhook is sent (or lost, sent late,
sent twice); the runner, the sweeper, the outbox, the hub's ticks and agent turns
run; time passes; and faults strike. Faults: REST answers lost (the write applied),
502s before or after a write, secondary rate limits; ``kill -9`` at a named commit
point of the next ledger write (``before_insert``, ``before_commit``,
``after_commit``: the answer never given) or between steps (``after_ack``), with a
restart (the in-memory parts abandoned, the ledger file opened again, recovery as on
start); the hub's clock jumping forward or back (GitHub's stays true); webhooks
duplicated, late (out of order) and missing (never sent, so never redelivered); a
full disk (the next ledger writes fail with SQLite's "database or disk is full").

Invariants, after every step: each fact the ledger committed is folded into an
independent replay, and every record it touched equals the replay's
(:class:`~tests.sim.invariants.Observer`, which also checks that each event is
recorded once and each receipt applied once, atomically); every acknowledged webhook
is in the ledger; no GitHub write of the App was applied twice (comments and reviews
by their action marker, the sticky comment and the check run per PR and head, the
same write sent and applied twice); no merge was sent for a PR GitHub had merged
already; nothing unexpected was raised. Every ``check_every`` steps, after every
restart and at the end: every acknowledged webhook is in the ledger file as it is on
disk, every projection equals a full replay (``Ledger.check()``), every active
pipeline waits on a deadline or a card. At the end the faults stop, the world is
drained (webhooks sent, CI and deploys done, the clock past every deadline) and no
pipeline may be left active without a card, except one that waits by design (a
reviewed PR waiting for its next push).

"Sometimes" counters (:attr:`SystemSummary.reached`) count each fault and each path
worth reaching; the CI test asserts each of :data:`MUST_REACH` over its slice.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import random
import re
import shutil
import sqlite3
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

import fakegithub.sandbox as sandbox_module
import ghapp.github.snapshot as snapshot_module
from fakegithub.sandbox import Sandbox
from fakegithub.server import create_app
from fakegithub.webhooks import _Job
from ghapp.github.auth import signing_key
from ghapp.github.client import API_VERSION, GitHubClient
from ghapp.github.deliveries import Deliveries
from ghapp.github.errors import GitHubError
from ghapp.github.executor import GitHubExecutor
from ghapp.github.sansio import signature_of
from ghapp.github.sweeper import Sweeper
from ghapp.runtime.hub import Hub
from ghapp.runtime.webhooks import BadBody
from ghapp.store.base import StoreError, Tx
from ghapp.store.sqlite import SqliteStore
from ghapp.web.app import webhook_inputs
from kernel import inputs as k
from kernel.facts import content_key
from kernel.model import AgentSpec, Rule, Rules, Trigger
from kernel.records import Action, Card, Pipeline, Timer, Turn
from pipeline.stages import TERMINAL
from tests.sim.invariants import InvariantBroken, Observer
from tests.sim.sandbox import API, ApiFaults, Bridge, NoAnswer, SimClock, SimHooks, SimScheduler

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
REPO = "sandbox/demo"
KILL_POINTS = ("before_insert", "before_commit", "after_commit")
DISK_FULL = "database or disk is full"
PROGRESS_EVERY = 1000  # steps between progress calls
PRUNE_EVERY = 500  # steps between the simulated GitHub's forgetting (see SystemSim.prune)
KEPT_S = 2 * 3600.0  # webhook attempts and events the simulated GitHub keeps

RULES = Rules(
    version="sim-system-1",
    agents={"bot": AgentSpec(name="bot", use="command", command=("true",))},
    rules=(
        Rule(
            name="triage",
            agent="bot",
            on=Trigger(source=("github",), type=("issues.opened", "issue_comment.created")),
            parallel=True,
            allow=("github.comment", "github.label"),
            max_retries=1,
        ),
    ),
)

POLICY = """[deliver]
merge_method = "{method}"
review = "{review}"
required_checks = ["ci"]
checks_timeout = "40m"
update_branch = true
delete_branch = {delete}

[deliver.deploy]
environment = "production"
timeout = "30m"
version_url = "{api}/_sandbox/live/{repo}"
version_field = "sha"
matches = 2
"""

MOVE_WEIGHTS: dict[str, float] = {
    # people, CI and deploys
    "open_pr": 1.2,
    "label": 1.6,
    "unlabel": 0.25,
    "push_pr": 0.6,
    "push_main": 0.4,
    "approve": 0.8,
    "close_pr": 0.1,
    "open_issue": 2,
    "comment": 1.5,
    "ci_script": 0.2,
    "answer_card": 0.6,
    # the network between GitHub and the App
    "webhook": 10,
    # the App's own loops
    "runner": 5,
    "sweep": 0.3,
    "sweep_outbox": 1,
    "tick": 1.5,
    "claim": 2.5,
    "finish": 2.5,
    # time
    "time": 7,
    "clock_jump": 0.2,
    "clock_fix": 0.8,
    # faults of the App's host
    "kill": 0.06,
    "crash": 0.03,
    "disk_full": 0.2,
}

#: What the CI slice must see reached at least once (faults and paths).
MUST_REACH = (
    "api error_502 (read)",
    "api rate_limit (read)",
    "api response_lost (write)",
    "api response_lost_502 (write)",
    "api response_lost of a merge",
    "kill before_insert",
    "kill before_commit",
    "kill after_commit",
    "kill after_ack",
    "restart",
    "clock jump forward",
    "clock jump backward",
    "webhook duplicate",
    "webhook late",
    "webhook missing",
    "webhook unanswered (killed)",
    "webhook answered 503",
    "disk full: write refused",
    "redelivered by the sweeper",
    "pipeline started",
    "merge applied",
    "pipeline delivered",
    "pipeline cancelled",
    "pipeline blocked on a card",
    "card answered",
    "agent action performed",
    "action read back after an unclear attempt",
)


class Killed(BaseException):
    """``kill -9`` of the App's process at a named commit point (a BaseException, so that
    no ``except Exception`` of the product can swallow it)."""

    def __init__(self, point: str) -> None:
        super().__init__(point)
        self.point = point


class FaultyStore:
    """The real SQLite store, with a kill armed at a named point of the next write and
    writes that fail as on a full disk."""

    def __init__(self, path: Path, reached: Counter[str]) -> None:
        self.inner = SqliteStore(f"sqlite:///{path}?sync=off", checkpoint_s=None)
        self.path = path
        self.reached = reached
        self.kill_at: str | None = None
        self.full_writes = 0
        self._depth = 0

    def _last_fact(self) -> int:
        with self.inner.read() as tx:
            return tx.last_fact()

    @contextlib.contextmanager
    def write(self, *, durable: bool = True, long: bool = False) -> Iterator[Tx]:
        outer = self._depth == 0
        point = self.kill_at if outer else None
        full = outer and self.full_writes > 0
        if point is not None:
            self.kill_at = None
        if point == "before_insert":
            raise Killed(point)
        before = self._last_fact() if point == "before_commit" else 0
        self._depth += 1
        try:
            with self.inner.write() as tx:
                yield tx
                if full:
                    self.full_writes -= 1
                    self.reached["disk full: write refused"] += 1
                    raise sqlite3.OperationalError(DISK_FULL)
                if point == "before_commit":
                    raise Killed(point)
        except Killed:
            if self._last_fact() != before:
                raise InvariantBroken("a write killed before its COMMIT left facts") from None
            raise
        finally:
            self._depth -= 1
        if point == "after_commit":
            raise Killed(point)

    def read(self) -> contextlib.AbstractContextManager[Tx]:
        return self.inner.read()

    def close(self) -> None:
        self.inner.close()


class InlinePool:
    """The runner's progress thread, run inline: what it submits runs at once, and what
    it raises is kept from the caller (as a thread pool's future keeps it)."""

    def __init__(self, on_error: Callable[[BaseException], None]) -> None:
        self.on_error = on_error

    def submit(self, fn: Callable[..., object], *args: object) -> None:
        try:
            fn(*args)
        except Exception as exc:
            self.on_error(exc)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


class SimClient(GitHubClient):
    """The product's GitHub client, sending straight to the bridge.

    Only the HTTP stack beneath ``_send_once`` (githubkit's request building over httpx)
    is skipped, for speed: retries, errors, authentication, token caches and pagination
    are the product's own. What githubkit adds on this path (headers, JSON encoding, the
    answer or the transport error handed back as they are) is done here the same way."""

    bridge: Bridge

    def _send_once(
        self,
        method: str,
        url: str,
        authorization: str,
        params: Mapping[str, Any] | None,
        body: Any,
    ) -> httpx.Response:
        headers = {
            "Authorization": authorization,
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": "autoloop",
        }
        full = url if url.startswith("http") else self.base_url + url
        request = httpx.Request(
            method,
            full,
            params=dict(params) if params else None,
            json=body,
            headers=headers,
        )
        return self.bridge.handle_request(request)


class InlineReads:
    """The snapshot's pool of parallel reads, made one after the other in a fixed order
    (threads would draw the seeded faults in an order of their own)."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        done: Future[Any] = Future()
        try:
            done.set_result(fn(*args))
        except Exception as exc:
            done.set_exception(exc)
        return done


class SimDeliveries(Deliveries):
    """The delivery runner with its threads taken away: :meth:`pass_once` is one turn of
    its loop, and a decision runs inline where the loop would hand it to a thread."""

    on_error: Callable[[str, BaseException], None] = staticmethod(lambda where, exc: None)

    def _submit(self, pid: str) -> None:
        with self._lock:
            if pid in self._running:
                return
            self._running.add(pid)
        self._decide_on_thread(pid)

    def process(self, pid: str) -> Any:
        try:
            return super().process(pid)
        except Exception as exc:
            self.on_error("runner", exc)
            raise

    def recover(self) -> None:
        """What the loop does first on start: every active pipeline decided once."""
        for p in self._rescan():
            self._submit(p.id)

    def pass_once(self) -> None:
        """One turn of the runner's loop (``Deliveries._run``), without its wait."""
        with self._lock:
            events, self._events = self._events, []
            direct, self._direct = self._direct, set()
            scan, self._scan_wanted = self._scan_wanted, False
        if events:
            direct |= self._take_events_safely(events)
        for pid in sorted(direct):
            self._submit(pid)
        rescan = scan or self._monotonic() >= self._next_scan
        active = self._rescan() if rescan else self._indexed()
        for pid in self._due(active):
            self._submit(pid)


@dataclass
class SystemSummary:
    seed: int
    steps: int
    seconds: float = 0.0
    facts: int = 0
    fact_hash: str = ""
    sim_hours: float = 0.0
    api_requests: int = 0
    webhooks_sent: int = 0
    webhooks_acked: int = 0
    reached: Counter[str] = field(default_factory=Counter)
    moves: Counter[str] = field(default_factory=Counter)
    checks: Counter[str] = field(default_factory=Counter)
    end_states: Counter[str] = field(default_factory=Counter)

    def lines(self) -> list[str]:
        def fmt(c: Counter[str]) -> str:
            return ", ".join(f"{name} {n}" for name, n in sorted(c.items()))

        return [
            f"seed {self.seed}: {self.steps} steps in {self.seconds:.1f} s "
            f"({self.sim_hours:.0f} simulated hours); {self.facts} facts, "
            f"{self.api_requests} API requests, {self.webhooks_sent} webhook attempts "
            f"({self.webhooks_acked} acknowledged); facts sha256 {self.fact_hash[:16]}",
            f"  reached: {fmt(self.reached)}",
            f"  moves:   {fmt(self.moves)}",
            f"  checks:  {fmt(self.checks)}",
            f"  pipelines at the end: {fmt(self.end_states)}",
        ]


_MARK = re.compile(r"<!-- autoloop:(action|deliver)=(\S+) -->")
_NUMBER = re.compile(r"#([0-9]+)$")
_PULL_MERGE = re.compile(r"/repos/([^/]+/[^/]+)/pulls/([0-9]+)/merge$")


class Node:
    """One life of the App's process: everything in memory that a ``kill -9`` loses."""

    def __init__(self, sim: SystemSim, generation: int) -> None:
        self.sim = sim
        self.generation = generation
        sb = sim.sandbox
        self.store = FaultyStore(sim.db, sim.reached)
        self.hub = Hub(
            home=sim.home,
            store=self.store,  # type: ignore[arg-type]
            rules=lambda: RULES,
            clock=sim.clock.now,
            agent_for=lambda name: None,
        )
        self.hub.outbox.performer = f"node-{generation}"  # the default names host and pid
        self.client = SimClient(
            app_id=sb.app.id,
            private_key=sb.private_key_pem,
            base_url=API,
            transport=sim.bridge,
            now=sim.clock.epoch,
            sleep=sim.sleep,
        )
        self.bot = f"{sb.app.slug}[bot]"
        executor = GitHubExecutor(self.client, self.bot)
        perform = executor.perform

        def performed(action: Action) -> Mapping[str, Any]:
            if action.attempts > 0:  # an earlier attempt may have landed: it reads back
                sim.reached["action read back after an unclear attempt"] += 1
            return perform(action)

        executor.perform = performed  # type: ignore[method-assign]
        self.hub.executors["github"] = executor
        self.client.bridge = sim.bridge
        self.client._jwt._parsed = sim.signing_key  # type: ignore[union-attr]  # parsed once
        self.deliveries = SimDeliveries(
            self.hub,
            self.client,
            self.bot,
            bot_app_id=sb.app.id,
            monotonic=sim.clock.mono,
            http=sim.probes,
        )
        self.deliveries.on_error = sim.product_error
        self.deliveries._progress = InlinePool(  # type: ignore[assignment]
            lambda exc: sim.product_error("progress", exc)
        )
        # GitHub keeps deliveries 3 days; this one keeps KEPT_S (see SystemSim.prune).
        self.sweeper = Sweeper(self.client, self.hub, now=sim.clock.epoch, window_s=KEPT_S)
        self.sweeper.on_events = self.deliveries.on_events
        self.secret = sb.app.webhook_secret.encode()
        self.held: dict[str, Turn] = {}  # turns this process's agents run

    def close(self) -> None:
        """The process is gone: its memory with it; the ledger file stays."""
        self.store.close()

    # -- POST /github/webhook, as the route does it --------------------------------------

    def receive(self, headers: dict[str, str], body: bytes) -> int:
        sim = self.sim
        signature = signature_of(self.secret, body, headers.get("X-Hub-Signature-256"))
        if signature is None:
            return 401
        name = headers["X-GitHub-Event"]
        delivery = headers["X-GitHub-Delivery"]
        try:
            events, inputs = webhook_inputs(
                name,
                delivery,
                body,
                signature=signature,
                app_slug=sim.sandbox.app.slug,
                app_id=sim.sandbox.app.id,
            )
        except BadBody:
            return 400
        try:
            outs = self.hub.ledger.decide_many(inputs)
        except Exception as exc:  # the ledger cannot append: 503, the sender tries again
            sim.expected(exc, "webhook")
            sim.reached["webhook answered 503"] += 1
            return 503
        codes = [o.reply.code for o in outs]
        for inp in inputs:
            assert isinstance(inp, k.Ingest)
            sim.acked[delivery] = inp.content_key
        if "recorded" in codes and events:
            self.deliveries.on_events(events)
        return 200


class SystemSim:
    def __init__(self, seed: int, steps: int, directory: Path, *, check_every: int = 5000) -> None:
        self.seed = seed
        self.steps = steps
        self.check_every = check_every
        self.rnd = random.Random(seed)
        self.home = Path(directory) / f"home-{seed}"
        self.home.mkdir(parents=True, exist_ok=True)
        self.db = self.home / "ledger.db"
        for leftover in self.home.glob("ledger.db*"):
            leftover.unlink()
        self.clock = SimClock(start=T0)
        self.summary = SystemSummary(seed=seed, steps=steps)
        self.reached = self.summary.reached
        self.moves = self.summary.moves
        self.checks = self.summary.checks
        self.step_no = 0
        self.acked: dict[str, str] = {}  # delivery GUID -> its content key
        self.same_body: set[str] = set()  # acked as a duplicate of another GUID's body
        self.obs = Observer()
        self.errors: list[str] = []

        # The fake GitHub: ids the same for the same seed, whatever ran before in this
        # process (from a range of bases of their own; other sandboxes count on as before).
        counter = sandbox_module._INSTANCES
        sandbox_module._INSTANCES = itertools.count(1000 + seed % 1000)
        try:
            self.sandbox = Sandbox(
                app_url="http://hub.sim/github/webhook",
                base_url=API,
                clock=self.clock.true_now,
            )
        finally:
            sandbox_module._INSTANCES = counter
        sb = self.sandbox
        # The webhook secret of the seed too: a delivery's content key is made from its
        # signature (ghapp.runtime.webhooks.content_digest), so it goes into the facts.
        sb.app.webhook_secret = f"sim-webhook-secret-{seed}"
        self.scheduler = SimScheduler(self.clock)
        sb.scheduler = self.scheduler  # type: ignore[assignment]
        self.hooks = SimHooks(sb.hooks, self.clock, random.Random(seed * 7919 + 1))
        sb.state.listeners[sb.state.listeners.index(sb.hooks.on_event)] = self.hooks.on_event
        sb.hooks = self.hooks
        self.faults = ApiFaults(random.Random(seed * 7919 + 2), reached=self.reached)
        self.bridge = Bridge(create_app(sb).app, self.faults, watch=self._watch)
        self.probes = httpx.Client(transport=self.bridge)  # live versions
        self.signing_key = signing_key(sb.private_key_pem)
        self.world = sb.world
        self._setup_world()
        self.node = Node(self, 0)
        self.generation = 0
        self._audit_seen = 0
        self._comments_seen = 0
        self._marks: Counter[str] = Counter()
        self._checkruns: Counter[tuple[str, str]] = Counter()
        self._applied: Counter[tuple[str, str, str]] = Counter()
        self.prs: list[int] = []
        self.issues: list[int] = []
        self.branch_no = itertools.count(1)
        self._names = list(MOVE_WEIGHTS)
        self._weights = list(itertools.accumulate(MOVE_WEIGHTS[n] for n in self._names))
        self._moves: dict[str, Callable[[], None]] = {
            n: getattr(self, f"_{n}") for n in self._names
        }

    # -- set-up -------------------------------------------------------------------------

    def _setup_world(self) -> None:
        rnd = self.rnd
        policy = POLICY.format(
            method=rnd.choice(("squash", "merge", "rebase")),
            review=rnd.choice(("none", "none", "approvals:1")),
            delete=rnd.choice(("true", "false")),
            api=API,
            repo=REPO,
        )
        self.world.push("maintainer", "main", {".github/autoloop.toml": policy}, "policy")
        self.world.set_protection("main", contexts=["ci"])
        self.world.set_ci({"ci": "success"}, delay=rnd.randint(30, 300))
        self.world.set_deploy(delay=rnd.randint(30, 300))
        self.hooks.pending.clear()  # the set-up happened before the App was installed
        self.scheduler.run_due()
        self.hooks.pending.clear()

    # -- plumbing -------------------------------------------------------------------------

    def sleep(self, seconds: float) -> None:
        """The client's retry waits: simulated time passes."""
        self.reached["client slept (retry wait)"] += 1
        self.clock.advance(max(0.0, seconds))

    def fail(self, what: str) -> InvariantBroken:
        return InvariantBroken(f"seed {self.seed} step {self.step_no}: {what}")

    def expected(self, exc: BaseException, where: str) -> None:
        """An exception the world may cause (GitHub trouble, a full disk); anything else
        is a bug in the product."""
        chain: list[BaseException] = []
        cur: BaseException | None = exc
        while cur is not None and len(chain) < 10:
            chain.append(cur)
            cur = cur.__cause__ or cur.__context__
        if any(isinstance(e, GitHubError) for e in chain):
            self.reached[f"github trouble surfaced ({where})"] += 1
            return
        if any(DISK_FULL in str(e) for e in chain) or any(isinstance(e, StoreError) for e in chain):
            self.reached[f"disk full surfaced ({where})"] += 1
            return
        self.errors.append(
            f"{where}: {type(exc).__name__}: {exc}\n" + "".join(traceback.format_exception(exc))
        )

    def product_error(self, where: str, exc: BaseException) -> None:
        self.expected(exc, where)

    def _watch(self, request: httpx.Request, status: int) -> None:
        """Every request GitHub answered: a merge sent for a PR already merged is a double
        merge (checked before GitHub's answer is looked at, on GitHub's own state)."""
        if request.method != "PUT":
            return
        found = _PULL_MERGE.search(request.url.path)
        if found is None:
            return
        if status == 405:
            self.errors.append(f"a merge was sent for {found.group(1)}#{found.group(2)}, merged")
        elif 200 <= status < 300:
            self.reached["merge applied"] += 1

    def pick(self, items: list[Any]) -> Any:
        return items[self.rnd.randrange(len(items))]

    def open_prs(self) -> list[int]:
        repo = self.sandbox.state.repos[REPO]
        return [n for n in self.prs if not repo.pulls[n].merged and repo.issues[n].state == "open"]

    # -- the run --------------------------------------------------------------------------

    def run(self, progress: Callable[[int, int], None] | None = None) -> SystemSummary:
        began = time.perf_counter()
        logging.disable(logging.CRITICAL)  # the product's warnings are expected here
        pool = snapshot_module._POOL
        snapshot_module._POOL = InlineReads()  # type: ignore[assignment]
        try:
            self._start_node()
            for n in range(1, self.steps + 1):
                self.step_no = n
                pick = self.rnd.random() * self._weights[-1]
                name = self._names[_index(self._weights, pick)]
                self.moves[name] += 1
                self._guarded(self._moves[name])
                self._after_step()
                if n % self.check_every == 0:
                    self.full_check()
                if n % PRUNE_EVERY == 0:
                    self.prune()
                if progress is not None and n % PROGRESS_EVERY == 0:
                    progress(self.seed, n)
            if self.steps % self.check_every:
                self.full_check()
            self.drain()
            self.full_check()
            self.final_check()
        finally:
            snapshot_module._POOL = pool
            logging.disable(logging.NOTSET)
            self.node.close()
            self.probes.close()
            self.bridge.shutdown()
        s = self.summary
        s.seconds = time.perf_counter() - began
        s.facts = self.obs.last_seq
        s.fact_hash = self.obs.fact_hash()
        s.sim_hours = self.clock.elapsed / 3600
        s.api_requests = self.bridge.requests
        s.webhooks_sent = self.hooks.sent
        s.webhooks_acked = len(self.acked)
        s.checks.update(self.obs.checks)
        self.reached["webhook acked as the duplicate of another's body"] = len(self.same_body)
        return s

    def _guarded(self, move: Callable[[], object]) -> None:
        try:
            move()
        except Killed as killed:
            self.reached[f"kill {killed.point}"] += 1
            self._restart()
        except InvariantBroken:
            raise
        except Exception as exc:
            self.expected(exc, "caller")

    def prune(self) -> None:
        """What GitHub forgets: webhook attempts older than :data:`KEPT_S` (GitHub keeps
        them 3 days: the sweeper looks back as far as they are kept), and the log of
        events (only tests read it). Keeps a long run's memory and pages bounded."""
        cutoff = self.clock.true_now() - timedelta(seconds=KEPT_S)
        kept = self.hooks._deliveries
        first = next((i for i, d in enumerate(kept) if d.delivered_at >= cutoff), len(kept))
        del kept[:first]
        self.sandbox.state.events.clear()

    def _after_step(self) -> None:
        if self.errors:
            raise self.fail("unexpected error in the product: " + "; ".join(self.errors[:5]))
        self.scheduler.run_due()
        self.obs.where = f"seed {self.seed} step {self.step_no}"
        self.obs.observe(self.node.store)  # type: ignore[arg-type]
        self._check_github()
        self.checks["steps checked"] += 1

    def _start_node(self) -> None:
        """A process starts: the runner decides every active pipeline once, the sweeper
        makes its first pass, the outbox sweeps."""
        node = self.node
        self._guarded(node.deliveries.recover)
        self._guarded(node.sweeper.sweep)
        self._guarded(node.sweeper.sweep_outbox)

    def _restart(self) -> None:
        self.reached["restart"] += 1
        full = self.node.store.full_writes  # the disk is still full after a restart
        self.node.close()
        self.generation += 1
        self.node = Node(self, self.generation)
        self.node.store.full_writes = full
        self.obs.where = f"seed {self.seed} step {self.step_no} after restart"
        self.obs.observe(self.node.store)  # type: ignore[arg-type]
        self.check_acked()
        self._start_node()

    # -- invariants -----------------------------------------------------------------------

    def _check_github(self) -> None:
        """The App's writes GitHub applied since the last look: none applied twice."""
        sb = self.sandbox
        bot = self.node.bot
        entries = sb.audit._entries
        for entry in entries[self._audit_seen :]:
            if entry.actor != bot:
                continue
            kind = _write_kind(entry.method, entry.path)
            if kind is None:
                continue
            key = (entry.method, entry.path, entry.body_fingerprint)
            self._applied[key] += 1
            if self._applied[key] > 1:
                raise self.fail(f"GitHub write applied twice: {entry.method} {entry.path}")
            self.checks["github writes checked"] += 1
        self._audit_seen = len(entries)
        repo = sb.state.repos[REPO]
        new = len(repo.comments) - self._comments_seen
        for c in reversed(list(itertools.islice(reversed(repo.comments.values()), new))):
            if c.user != bot:
                continue
            for found in _MARK.finditer(c.body):
                mark = f"{found.group(1)}={found.group(2)}"
                if found.group(1) == "deliver":
                    mark += f"@{c.number}"
                self._marks[mark] += 1
                if self._marks[mark] > 1:
                    raise self.fail(f"two comments of the App carry {mark}")
            self.checks["github comments checked"] += 1
        self._comments_seen = len(repo.comments)

    def check_checkruns(self) -> None:
        repo = self.sandbox.state.repos[REPO]
        per: Counter[tuple[str, str]] = Counter()
        for run in repo.check_runs.values():
            if run.app_id == self.sandbox.app.id:
                per[(run.name, run.head_sha)] += 1
        twice = [key for key, n in per.items() if n > 1]
        if twice:
            raise self.fail(f"the App made its check run twice on one head: {twice[:3]}")
        self.checks["check runs checked"] += len(per)

    def check_acked(self) -> None:
        """Every acknowledged webhook is in the ledger file (read afresh)."""
        with self.node.store.read() as tx:
            cur = tx.cur  # type: ignore[attr-defined]
            cur.execute(
                "SELECT fkey FROM facts WHERE fkey >= ? AND fkey < ?",
                ("event:github:", "event:github:\U0010ffff"),
            )
            held = {str(row[0]).split(":", 2)[2].split(":", 1)[0] for row in cur.fetchall()}
            for guid, content in self.acked.items():
                if guid in held:
                    continue
                if content and tx.has_key(content_key(content)):
                    self.same_body.add(guid)
                    continue
                raise self.fail(f"webhook {guid} was acknowledged but is not in the ledger")
        self.checks["acknowledged webhooks found"] += len(self.acked)

    def check_pipelines(self, *, final: bool = False) -> None:
        with self.node.store.read() as tx:
            pipes = [p for p in tx.query("pipeline") if isinstance(p, Pipeline)]
            every = [c for c in tx.query("card") if isinstance(c, Card)]
        open_cards = {c.matter for c in every if c.state == "open"}
        # answered, the runner not yet woken to take the answer (a moment, mid-run only)
        answered = {c.matter for c in every if c.state == "decided" and not final}
        for p in pipes:
            if p.ended or p.stage in TERMINAL:
                if final:
                    self.summary.end_states[p.stage] += 1
                continue
            if p.stage == "blocked" and p.id in answered and p.id not in open_cards:
                self.reached["pipeline blocked, its card answered, not yet taken"] += 1
                continue
            if p.stage == "blocked" or p.id in open_cards:
                if p.id not in open_cards:
                    its = [c for c in every if c.matter == p.id]
                    raise self.fail(f"pipeline {p.id} is blocked without an open card: {p}; {its}")
                if final:
                    self.summary.end_states["blocked on a card"] += 1
                continue
            if p.stage == "reviewed":
                if final:
                    self.summary.end_states["reviewed, waits for a push"] += 1
                continue
            if p.stage == "review" and p.data.get("waiting_on") == "webhook":
                if final:  # a person's review (or push) is what it waits for, as the PR shows
                    self.summary.end_states["waits for a person's review"] += 1
                continue
            if final:
                raise self.fail(f"pipeline {p.id} is stuck at {p.stage} without a card: {p}")
            if not p.wake_at:
                self.reached["pipeline waiting on webhooks alone"] += 1
        self.checks["pipelines checked"] += len(pipes)

    def full_check(self) -> None:
        node = self.node
        diffs = node.hub.ledger.check()
        if diffs:
            raise self.fail(f"projections differ from a replay: {diffs[:5]}")
        self.checks["full replays"] += 1
        self.check_acked()
        self.check_pipelines()
        self.check_checkruns()

    def final_check(self) -> None:
        self.check_pipelines(final=True)
        self.obs.final_check()

    # -- the drain ------------------------------------------------------------------------

    def drain(self, rounds: int = 200) -> None:
        """No more faults: every webhook sent, CI and deploys done, the clock past every
        deadline, the runner, the sweeper and the outbox run until nothing changes."""
        self.faults.on = False
        self.node.store.kill_at = None
        self.node.store.full_writes = 0
        self.clock.skew = 0.0
        quiet = 0
        for n in range(rounds):
            self.step_no += 1
            before = self.obs.last_seq
            while self.hooks.pending:
                self._send(self.hooks.pending.pop(0))
                self._after_step()
            moves = [self._runner, self._sweep_outbox, self._tick]
            if n % 3 == 0:
                moves.append(self._sweep)
            for move in moves:
                self._guarded(move)
                self._after_step()
            for turn in list(self.node.held.values()):
                self._finish_turn(turn, actions=False)
            self._claim_all()
            self._after_step()
            self.clock.advance(900 + self._past_leases())
            self.scheduler.run_due()
            quiet = quiet + 1 if self.obs.last_seq == before and not self.hooks.pending else 0
            if quiet >= 10:  # nothing for 150 simulated minutes, past every deadline
                return
        raise self.fail(f"the world did not become quiet in {rounds} drain rounds")

    def _past_leases(self) -> float:
        """Seconds until every running turn's lease and every armed timer is due (a lease
        taken while the clock ran ahead lasts that much longer once it is set right)."""
        with self.node.store.read() as tx:
            dues = [
                t.lease_until for t in tx.query("turn", states=["running"]) if isinstance(t, Turn)
            ]
            dues += [t.due for t in tx.query("timer", states=["armed"]) if isinstance(t, Timer)]
        if not dues:
            return 0.0
        latest = max(datetime.fromisoformat(d) for d in dues)
        return max(0.0, (latest - self.clock.now()).total_seconds() + 1)

    # -- moves: people, CI and deploys --------------------------------------------------

    def _open_pr(self) -> None:
        if len(self.open_prs()) >= 8:
            return self._label()
        n = next(self.branch_no)
        number = self.world.open_pr(
            "contributor",
            f"change-{n}",
            f"Change {n}",
            files={f"src/f{n % 5}.py": f"print({n})\n"},
            draft=self.rnd.random() < 0.15,
        )
        self.prs.append(number)
        return None

    def _label(self) -> None:
        prs = self.open_prs()
        if not prs:
            return
        number = self.pick(prs)
        label = "deliver" if self.rnd.random() < 0.85 else "deliver-review"
        issue = self.sandbox.state.repos[REPO].issues[number]
        if label in issue.labels:
            self.world.remove_label("maintainer", number, label)  # labelled again below
        self.world.add_label("maintainer", number, label)

    def _unlabel(self) -> None:
        prs = [
            n
            for n in self.open_prs()
            if "deliver" in self.sandbox.state.repos[REPO].issues[n].labels
        ]
        if prs:
            self.world.remove_label("maintainer", self.pick(prs), "deliver")

    def _push_pr(self) -> None:
        prs = self.open_prs()
        if not prs:
            return
        pull = self.sandbox.state.repos[REPO].pulls[self.pick(prs)]
        n = next(self.branch_no)
        files: dict[str, str | None] = {f"src/f{n % 5}.py": f"print({n})\n"}
        if self.rnd.random() < 0.3:
            self.world.force_push("contributor", pull.head_ref, files)
        else:
            self.world.push("contributor", pull.head_ref, files)

    def _push_main(self) -> None:
        n = next(self.branch_no)
        # Mostly files no PR touches; now and then one they do (a conflict).
        path = f"docs/d{n % 10}.md" if self.rnd.random() < 0.85 else f"src/f{n % 5}.py"
        self.world.push("maintainer", "main", {path: f"main {n}\n"})

    def _approve(self) -> None:
        prs = self.open_prs()
        if prs:
            event = "APPROVE" if self.rnd.random() < 0.85 else "REQUEST_CHANGES"
            self.world.review("maintainer", self.pick(prs), event, body="looked at it")

    def _close_pr(self) -> None:
        prs = self.open_prs()
        if prs:
            self.world.close_issue("contributor", self.pick(prs))

    def _open_issue(self) -> None:
        n = next(self.branch_no)
        self.issues.append(self.world.open_issue("reader", f"Problem {n}", body="it broke"))

    def _comment(self) -> None:
        if self.issues:
            self.world.comment("reader", self.pick(self.issues), "any news?")

    def _ci_script(self) -> None:
        ci = "success" if self.rnd.random() < 0.8 else "failure"
        self.world.set_ci({"ci": ci}, delay=self.rnd.randint(20, 600))
        deploy = "success" if self.rnd.random() < 0.85 else "failure"
        self.world.set_deploy(delay=self.rnd.randint(20, 600), result=deploy)

    def _answer_card(self) -> None:
        with self.node.store.read() as tx:
            cards = [
                c
                for c in tx.query("card", states=["open"])
                if isinstance(c, Card) and c.kind_ == "ask" and c.matter.startswith("deliver/")
            ]
        if not cards:
            return
        card: Card = self.pick(cards)
        choice = self.rnd.randint(1, len(card.options))
        out = self.node.hub.answer(card.id, choice, by="maintainer")
        if out.reply.code == "answered":
            self.reached["card answered"] += 1
        self.node.deliveries.wake()

    # -- moves: the network -------------------------------------------------------------

    def _webhook(self) -> None:
        """GitHub sends what it has queued (a few at a time, as they come): now and then
        one is never sent, one comes after later ones, one comes twice."""
        pending = self.hooks.pending
        for _ in range(min(len(pending), self.rnd.randint(1, 6))):
            if not pending:
                return
            roll = self.rnd.random()
            if roll < 0.03:
                pending.pop(0)  # GitHub never sent it: there is no attempt to redeliver
                self.reached["webhook missing"] += 1
                continue
            if roll < 0.1 and len(pending) > 1:
                late = pending.pop(0)  # it comes after the next few
                pending.insert(self.rnd.randint(1, min(len(pending), 5)), late)
                self.reached["webhook late"] += 1
            job = pending.pop(0)
            self._send(job)
            if self.rnd.random() < 0.04:
                pending.insert(self.rnd.randrange(len(pending) + 1), job)
                self.reached["webhook duplicate"] += 1

    def _send(self, job: _Job) -> None:
        if job.redelivery:
            self.reached["redelivered by the sweeper"] += 1
        try:
            self.hooks.attempt(job, self.node.receive)
        except Killed as killed:
            self.reached["webhook unanswered (killed)"] += 1
            self.reached[f"kill {killed.point}"] += 1
            self._restart()
        except NoAnswer:
            self.reached["webhook unanswered"] += 1

    # -- moves: the App -------------------------------------------------------------------

    def _runner(self) -> None:
        before = self._active_stages()
        self.node.deliveries.pass_once()
        after = self._active_stages()
        for pid in sorted(set(before) - set(after)):  # ended in this pass
            with self.node.store.read() as tx:
                rec = tx.get("pipeline", pid)
            if isinstance(rec, Pipeline):
                after[pid] = rec.stage
        for pid, stage in after.items():
            if before.get(pid) == stage:
                continue
            if pid not in before:
                self.reached["pipeline started"] += 1
            if stage == "blocked":
                self.reached["pipeline blocked on a card"] += 1
            elif stage in TERMINAL:
                self.reached[f"pipeline {stage}"] += 1

    def _active_stages(self) -> dict[str, str]:
        with self.node.store.read() as tx:
            found = tx.query("pipeline", states=["active"])
        return {p.id: p.stage for p in found if isinstance(p, Pipeline)}

    def _sweep(self) -> None:
        self.node.sweeper.sweep()

    def _sweep_outbox(self) -> None:
        self.node.sweeper.sweep_outbox()

    def _tick(self) -> None:
        self.node.hub.tick()

    def _claim(self) -> None:
        node = self.node
        runnable = node.hub.runnable()
        if not runnable:
            return self._finish()
        turn = node.hub.claim(self.pick(runnable).id, "w1")
        if turn is not None:
            node.held[turn.id] = turn
        return None

    def _claim_all(self) -> None:
        for _ in range(20):
            runnable = self.node.hub.runnable()
            if not runnable:
                return
            for m in runnable:
                turn = self.node.hub.claim(m.id, "drain")
                if turn is not None:
                    self._finish_turn(turn, actions=False)

    def _finish(self) -> None:
        node = self.node
        if not node.held:
            return
        turn = node.held[self.pick(sorted(node.held))]
        self._finish_turn(turn, actions=True)

    def _finish_turn(self, turn: Turn, *, actions: bool) -> None:
        node = self.node
        node.held.pop(turn.id, None)
        found = _NUMBER.search(turn.matter)
        body: list[dict[str, Any]] = []
        if actions and found is not None:
            number = int(found.group(1))
            body.append({"do": "github.comment", "repo": REPO, "number": number, "body": "Looked."})
            if self.rnd.random() < 0.5:
                body.append(
                    {"do": "github.label", "repo": REPO, "number": number, "labels": ["bug"]}
                )
        message = "Done.\n\n```autoloop\n" + _json({"actions": body}) + "\n```\n"
        outcome = k.AgentOutcome(started=True, ok=True, final_message=message)
        out = node.hub.ledger.decide(k.Finish(turn=turn.id, fence=turn.fence, outcome=outcome))
        node.hub.outbox.carry_out(out)
        if body and out.reply.ok:
            self.reached["agent action performed"] += 1

    # -- moves: time ----------------------------------------------------------------------

    def _time(self) -> None:
        roll = self.rnd.random()
        seconds = self.rnd.randint(1, 5) if roll < 0.85 else self.rnd.randint(20, 300)
        self.clock.advance(seconds)

    def _clock_jump(self) -> None:
        # Mostly small (NTP steps); now and then hours, when GitHub refuses our JWTs.
        seconds = self.rnd.choice((20, 120, 600, 600, 2 * 3600, 30 * 3600))
        seconds *= self.rnd.choice((1, 1, -1))
        self.clock.skew += seconds
        self.reached["clock jump forward" if seconds > 0 else "clock jump backward"] += 1

    def _clock_fix(self) -> None:
        if self.clock.skew:
            self.reached["clock set right again"] += 1
        self.clock.skew = 0.0

    # -- moves: faults of the host --------------------------------------------------------

    def _kill(self) -> None:
        self.node.store.kill_at = self.pick(list(KILL_POINTS))

    def _crash(self) -> None:
        self.reached["kill after_ack"] += 1
        self._restart()

    def _disk_full(self) -> None:
        self.node.store.full_writes = self.rnd.randint(1, 8)


def _index(cumulative: list[float], x: float) -> int:
    lo, hi = 0, len(cumulative) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if cumulative[mid] > x:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _write_kind(method: str, path: str) -> str | None:
    """The App's writes that must never be applied twice with the same body."""
    if method == "POST" and path.endswith(("/comments", "/reviews")):
        return "post"
    if method == "PUT" and path.endswith(("/merge", "/update-branch")):
        return "put"
    return None


def run_system(
    seed: int,
    steps: int,
    directory: Path,
    *,
    check_every: int = 5000,
    progress: Callable[[int, int], None] | None = None,
    keep: bool = False,
) -> SystemSummary:
    """One seed; its ledger folder is removed once every invariant held, unless ``keep``
    (a long run makes thousands of them)."""
    sim = SystemSim(seed, steps, directory, check_every=check_every)
    summary = sim.run(progress)
    if not keep:
        shutil.rmtree(sim.home, ignore_errors=True)
    return summary


__all__ = ["MOVE_WEIGHTS", "MUST_REACH", "SystemSim", "SystemSummary", "run_system"]
