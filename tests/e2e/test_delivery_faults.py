"""Deliveries under seeded faults on every GitHub call and ``kill -9`` of the server.

``autoloop serve`` runs as a process (so that it can be killed) against the fake GitHub
in this process. The fake answers a seeded share of every API call with a secondary
rate limit or a 502, applies a share of the writes and loses their answer (the
connection closes, or a 502 comes back), and drops a few webhooks. Meanwhile the server
gets SIGKILL at seeded instants and is started again on the same home and port.

Many PRs (different files, no conflicts) are labelled ``deliver``, a few
``deliver-review``, and a few lose their label mid-flight. The run ends when every
pipeline is over (delivered, cancelled, reviewed) or waits on an open card. Then, from
the fake's audit log and state and from the ledger:

- no PR is merged twice, and the merged PRs are those whose pipeline was delivered
  (or that lost their label, or wait on a card, after the merge);
- at most one sticky delivery comment per PR, one ``autoloop/deliver`` check run per
  head, and no review by the App;
- every pipeline is over or waits on an open card (none is stuck without one);
- ``autoloop rebuild --check``: the projections equal a replay of the facts;
- each fault kind fired (``GET /_sandbox/faults`` counts how often each rule did).

The CI runs a bounded slice; ``--slow`` runs at least 200 pipelines, 10 kills, several
seeds. Each run prints its seed and outcomes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakegithub.server import SandboxHandle, running_sandbox
from ghapp.commands.home import init_home
from ghapp.store.open import open_store
from kernel.records import Card, Pipeline
from tests import paths
from tests.e2e.test_github_app_sandbox import settings_env
from tests.servers import free_port

ROOT = paths.ROOT
RULES: dict[str, Any] = {"agents": {"demo": {"use": "demo"}}, "rules": []}
OVER = ("delivered", "cancelled", "reviewed")
WRITES = ("POST", "PATCH", "PUT", "DELETE")
MARKER = "<!-- autoloop:deliver="
CHECK_NAME = "autoloop/deliver"
SWEEP_S = 3  # the server's sweeper: failed webhooks redelivered, labelled PRs reconciled
DROPPED = ("pull_request.labeled", "check_run.completed", "deployment_status", "check_suite")


@dataclass(frozen=True)
class Plan:
    seed: int
    pipelines: int
    kills: int
    seconds: float  # the time bound for the run
    fault_p: float = 0.03  # each kind's probability on each matching call
    deploy: bool = True


@dataclass
class Outcome:
    seed: int
    pipelines: int = 0
    stages: Counter[str] = field(default_factory=Counter)
    merges: int = 0
    kills: int = 0
    seconds: float = 0.0
    fired: dict[str, int] = field(default_factory=dict)
    redelivered: int = 0

    def line(self) -> str:
        return (
            f"seed {self.seed}: {self.pipelines} pipelines in {self.seconds:.0f} s, "
            f"{self.kills} kills; stages {dict(sorted(self.stages.items()))}; "
            f"{self.merges} merges; faults fired {self.fired}; "
            f"webhooks redelivered {self.redelivered}"
        )


# ------------------------------------------------------------------------------ the server


class Server:
    """``autoloop serve`` on one home and port, killed and started again at will."""

    def __init__(self, gh: SandboxHandle, home: Path, log: Path) -> None:
        self.gh = gh
        self.home = home
        self.log = log
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.env = {
            **os.environ,
            **settings_env(gh),
            "AUTOLOOP_HOME": str(home),
            "AUTOLOOP_GITHUB_SWEEP_S": str(SWEEP_S),
            "AUTOLOOP_LOG_LEVEL": "INFO",
            "PYTHONPATH": str(ROOT),
        }
        init_home(home, rules_text=json.dumps(RULES))

    def start(self) -> None:
        # Starting asks GitHub who the App is; under faults that may fail: start again.
        for _ in range(5):
            if self._start_once():
                self.gh.world.set_app_url(f"http://127.0.0.1:{self.port}/github/webhook")
                return
        raise AssertionError(f"serve would not start: {self.log.read_text()[-4000:]}")

    def _start_once(self) -> bool:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ghapp.commands.cli", "serve", "--port", str(self.port)],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                url = f"http://127.0.0.1:{self.port}/healthz"
                if httpx.get(url, timeout=1).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.kill()
        return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


# ------------------------------------------------------------------------------- the world


def policy_text(gh: SandboxHandle, deploy: bool) -> str:
    text = (
        '[deliver]\nmerge_method = "squash"\nrequired_checks = ["ci"]\n'
        'checks_timeout = "10m"\nupdate_branch = false\n'
    )
    if deploy:
        live = f"{gh.api_url}/_sandbox/live/{gh.repo}"
        text += (
            '\n[deliver.deploy]\nenvironment = "production"\ntimeout = "10m"\n'
            f'version_url = "{live}"\nmatches = 1\n'
        )
    return text


def prepare(gh: SandboxHandle, plan: Plan) -> list[int]:
    world = gh.world
    world.set_collaborator("maintainer", "maintain")
    world.push("maintainer", "main", {".github/autoloop.toml": policy_text(gh, plan.deploy)})
    world.set_protection("main", contexts=["ci"])
    world.set_ci({"ci": "success"}, delay=0.3)
    if plan.deploy:
        world.set_deploy(delay=0.2)
    numbers = [
        world.open_pr("contributor", f"f-{i}", f"Change {i}", files={f"f/{i}.txt": f"{i}\n"})
        for i in range(plan.pipelines)
    ]
    assert world.settle(timeout=60)
    return numbers


def add_faults(gh: SandboxHandle, plan: Plan) -> None:
    faults = gh.world.faults
    faults.seed(plan.seed)
    p = plan.fault_p
    faults.add("rate_limit", probability=p, times=None, retry_after=1)
    faults.add("error_502", probability=p, times=None)
    for method in WRITES:
        faults.add("response_lost", method=method, probability=p * 2, times=None)
        faults.add("response_lost_502", method=method, probability=p * 2, times=None)
    for name in DROPPED:
        faults.add("webhook_drop", path=name, times=1)


def fired(gh: SandboxHandle) -> dict[str, int]:
    """How often each kind fired, from the fake's own ``GET /_sandbox/faults``."""
    rules = httpx.get(f"{gh.control_url}/faults", timeout=10).json()["faults"]
    out: Counter[str] = Counter()
    for rule in rules:
        out[rule["kind"]] += int(rule["hits"])
    return dict(out)


# ------------------------------------------------------------------------------ the ledger


def pipelines(home: Path) -> tuple[dict[str, Pipeline], dict[str, Card]]:
    store = open_store(f"sqlite:///{home}/ledger.db")
    try:
        with store.read() as tx:
            found = {p.id: p for p in tx.query("pipeline") if isinstance(p, Pipeline)}
            cards = {c.id: c for c in tx.query("card") if isinstance(c, Card)}
    finally:
        store.close()
    return found, cards


def waits_on_card(p: Pipeline, cards: dict[str, Card]) -> bool:
    return p.stage == "blocked" and any(
        cards.get(cid) is not None and cards[cid].state == "open" for cid in p.cards.values()
    )


def settled(p: Pipeline, cards: dict[str, Card]) -> bool:
    # "reviewed" stays active (a deliver label may follow); the others are ended
    return p.stage in OVER or waits_on_card(p, cards)


def all_settled(home: Path, gh: SandboxHandle, numbers: list[int], removed: set[int]) -> bool:
    found, cards = pipelines(home)
    for n in numbers:
        p = found.get(f"deliver/{gh.repo}#{n}")
        if p is None:
            if n in removed:
                continue  # the label went before a pipeline started: nothing to do
            return False
        if not settled(p, cards):
            return False
    return True


# ---------------------------------------------------------------------------------- a run


def run(tmp_path: Path, plan: Plan) -> Outcome:
    rng = random.Random(plan.seed)  # reproducible chaos, not security
    out = Outcome(seed=plan.seed, pipelines=plan.pipelines)
    home = tmp_path / f"home-{plan.seed}"
    log = tmp_path / f"serve-{plan.seed}.log"
    with running_sandbox() as gh:
        numbers = prepare(gh, plan)
        review = set(rng.sample(numbers, max(1, plan.pipelines // 10)))
        removed = set(rng.sample(sorted(set(numbers) - review), max(1, plan.pipelines // 10)))
        server = Server(gh, home, log)
        server.start()
        add_faults(gh, plan)
        began = time.monotonic()
        # kills at seeded instants over the first part of the run, while labels go on
        spread = min(plan.seconds / 2, 3.0 + plan.pipelines * 0.25)
        kills = sorted(began + rng.uniform(1.0, spread) for _ in range(plan.kills))
        pending = list(numbers)
        unlabel = {n: began + rng.uniform(0.5, spread) for n in removed}
        try:
            while time.monotonic() - began < plan.seconds:
                now = time.monotonic()
                for _ in range(5):  # 5 labels a tick
                    if pending:
                        n = pending.pop(0)
                        label = "deliver-review" if n in review else "deliver"
                        gh.world.add_label("maintainer", n, label)
                for n, at in list(unlabel.items()):
                    if at <= now and n not in pending:
                        gh.world.remove_label("maintainer", n, "deliver")
                        del unlabel[n]
                if kills and kills[0] <= now:
                    kills.pop(0)
                    server.kill()
                    out.kills += 1
                    time.sleep(rng.uniform(0.0, 1.0))  # webhooks meanwhile find nobody
                    server.start()
                quiet = not pending and not unlabel and not kills
                if quiet and all_settled(home, gh, numbers, removed):
                    break
                time.sleep(0.2)
        finally:
            out.seconds = time.monotonic() - began
            out.fired = fired(gh)
            gh.world.faults.clear()
            server.stop()
            gh.world.set_app_url(None)
        out.redelivered = len([d for d in gh.world.deliveries if d.redelivery])
        check_invariants(gh, home, numbers=numbers, removed=removed, out=out, log=log)
    return out


def check_invariants(
    gh: SandboxHandle, home: Path, *, numbers: list[int], removed: set[int], out: Outcome, log: Path
) -> None:
    repo = gh.sandbox.state.repos[gh.repo.lower()]
    bot = f"{gh.sandbox.app.slug}[bot]"
    found, cards = pipelines(home)
    by_number = {n: found.get(f"deliver/{gh.repo}#{n}") for n in numbers}
    out.stages = Counter(p.stage if p is not None else "none" for p in by_number.values())

    stuck = {
        n: (p.stage, p.wake_at) if p is not None else None
        for n, p in by_number.items()
        if (p is None and n not in removed) or (p is not None and not settled(p, cards))
    }
    assert not stuck, f"{out.line()}\nstuck without a card: {stuck}\n{tail(log)}"

    merges = Counter(
        int(e.path.rsplit("/", 2)[-2])
        for e in gh.world.audit.entries(method="PUT")
        if e.path.endswith("/merge") and e.status < 300
    )
    out.merges = sum(merges.values())
    twice = {n: c for n, c in merges.items() if c > 1}
    assert not twice, f"{out.line()}\nmerged more than once: {twice}"
    merged = {n for n in numbers if repo.pulls[n].merged}
    delivered = {n for n, p in by_number.items() if p is not None and p.stage == "delivered"}
    assert delivered <= merged
    assert set(merges) == merged  # only the App merges here
    # merged but not delivered: the label went after the merge, or it waits on a card
    blocked = {n for n, p in by_number.items() if p is not None and p.stage == "blocked"}
    others = merged - delivered - removed - blocked
    assert not others, f"merged yet neither delivered, cancelled nor waiting: {others}"

    sticky = Counter(c.number for c in repo.comments.values() if c.user == bot and MARKER in c.body)
    assert all(c == 1 for c in sticky.values()), f"sticky comments: {sticky}"
    runs = Counter(
        r.head_sha
        for r in repo.check_runs.values()
        if r.app_id == gh.app_id and r.name == CHECK_NAME
    )
    assert all(c == 1 for c in runs.values()), f"check runs per head: {runs}"
    reviews = Counter(r.number for r in repo.reviews.values() if r.user == bot)
    assert all(c <= 1 for c in reviews.values()), f"reviews: {reviews}"

    check = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "rebuild", "--check"],
        cwd=ROOT,
        env={**os.environ, "AUTOLOOP_HOME": str(home), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "projections equal a replay" in check.stdout


def tail(log: Path, lines: int = 60) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


# ---------------------------------------------------------------------------------- tests


def test_sixteen_deliveries_under_faults_and_two_kills(tmp_path: Path) -> None:
    out = run(tmp_path, Plan(seed=20260101, pipelines=16, kills=2, seconds=240.0))
    print("\n" + out.line())
    assert out.kills == 2
    assert out.stages["delivered"] >= 1


@pytest.mark.slow
@pytest.mark.timeout(1800)  # merges on one base go one at a time: about 20 minutes a seed
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_two_hundred_deliveries_under_faults_and_kills(tmp_path: Path, seed: int) -> None:
    out = run(tmp_path, Plan(seed=seed, pipelines=200, kills=10, seconds=1500.0))
    print("\n" + out.line())
    assert out.kills == 10
    for kind in ("rate_limit", "error_502", "response_lost", "response_lost_502", "webhook_drop"):
        assert out.fired.get(kind, 0) >= 1, (kind, out.fired)
