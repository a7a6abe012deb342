"""Delivery: merge latency with many pipelines in flight, and what waiting costs.

Run as users run it: ``autoloop serve`` as a process, pointed at the fake GitHub (in this
process, on loopback), which runs scripted CI and sends signed webhooks.

1. **Merge latency.** ``--pipelines`` PRs on one base are opened, then labelled
   ``deliver``, ``--label-rate`` a second (0: all at once, a burst); a required check
   ``ci`` completes on each ``--ci-delay`` seconds after it was opened, plus a seeded share
   of ``--ci-spread`` seconds (100: about one a second over the 100 s, with bursts), so
   with the defaults all of them are in flight when the first checks complete. With
   ``--ci-spread 0`` they all complete within a few seconds of each other: merges on one
   base go one at a time, so that run measures how fast the merge line moves. For each
   PR (a check that passed before the label counts from the label):
   the time from its last required check completing (the fake records the instant) to
   the merge call reaching the fake (``PUT .../merge``), p50/p99: receiving the webhook,
   deciding, re-reading the PR and its checks, and the merge call itself. The fake sends
   ``--senders`` webhooks at once (8), as GitHub sends them concurrently; ``--senders 1``
   sends them one at a time, in order, and then most of the time is the check's webhook
   waiting in the fake's queue. The time from the fake *sending* that webhook to the
   merge call is given too.
2. **Waiting costs nothing.** ``--waiting`` PRs are labelled while their checks take
   longer than the window; once every pipeline waits, the server's CPU seconds over
   ``--window`` seconds (from ``/proc``), against the same server over the same window
   with no pipeline at all (measured first).

Usage: python -m bench.delivery [--pipelines 100] [--waiting 50] [--window 60] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.stats import percentile
from fakegithub.ops import checks as fake_checks
from fakegithub.server import SandboxHandle, free_port, running_sandbox

ROOT = Path(__file__).resolve().parent.parent
POLICY = """\
[deliver]
merge_method = "squash"
required_checks = ["ci"]
update_branch = false
"""
RULES = {"agents": {"demo": {"use": "demo"}}, "rules": []}
# Webhook deliveries the fake GitHub has in flight at once. GitHub sends them concurrently
# (and so not always in order); one sender would queue every check's webhook behind all
# the others, and measure the fake's queue instead of the server.
SENDERS = 8


# ------------------------------------------------------------------------------ server


@contextmanager
def serving(gh: SandboxHandle, home: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``autoloop serve`` as a process, with the fake GitHub's App settings."""
    port = free_port()
    home.mkdir(parents=True, exist_ok=True)
    (home / "rules.json").write_text(json.dumps(RULES))
    subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "init"],
        env={**os.environ, "AUTOLOOP_HOME": str(home), "PYTHONPATH": str(ROOT)},
        check=True,
        capture_output=True,
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AUTOLOOP_HOME": str(home),
        "AUTOLOOP_GITHUB_APP_ID": str(gh.app_id),
        "AUTOLOOP_GITHUB_PRIVATE_KEY": str(gh.private_key_path),
        "AUTOLOOP_GITHUB_WEBHOOK_SECRET": gh.webhook_secret,
        "AUTOLOOP_GITHUB_URL": gh.api_url,
        "AUTOLOOP_LOG_LEVEL": os.environ.get("AUTOLOOP_LOG_LEVEL", "WARNING"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "ghapp.commands.cli", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    gh.world.set_app_url(f"http://127.0.0.1:{port}/github/webhook")
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("autoloop serve did not start") from None
            time.sleep(0.05)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------- world


class Timings:
    """Precise instants GitHub (and so the fake) keeps only to the second: our merge calls
    and the completion of CI's check runs, recorded as they happen."""

    def __init__(self, gh: SandboxHandle) -> None:
        self.merges: dict[int, datetime] = {}
        self.checks: dict[str, datetime] = {}  # head sha -> when its last ci run completed
        self.sent: dict[str, datetime] = {}  # head sha -> when its completion's webhook left
        self.lock = threading.Lock()
        hooks = gh.sandbox.hooks
        attempt = hooks._attempt

        def sending(job: Any) -> None:
            if job.event == "check_run" and job.action == "completed":
                run = json.loads(job.body).get("check_run") or {}
                if run.get("name") == "ci":
                    with self.lock:
                        self.sent[str(run.get("head_sha"))] = datetime.now(UTC)
            attempt(job)

        hooks._attempt = sending  # type: ignore[method-assign]  # the bench's own probe
        update = fake_checks.update_check_run

        def completing(*args: Any, **kw: Any) -> Any:
            run = update(*args, **kw)
            if run.status == "completed" and run.name == "ci":
                with self.lock:
                    self.checks[run.head_sha] = datetime.now(UTC)
            return run

        # the bench's own probe on the fake: CI's completions, to the microsecond
        setattr(fake_checks, "update_check_run", completing)  # noqa: B010  # mypy refuses the plain assignment to a module's function
        audit = gh.world.audit
        record = audit.record

        def recording(**kw: Any) -> Any:
            entry = record(**kw)
            path = str(kw.get("path", ""))
            if kw.get("method") == "PUT" and path.endswith("/merge") and entry.status < 300:
                number = int(path.rsplit("/", 2)[-2])
                with self.lock:
                    self.merges.setdefault(number, datetime.now(UTC))
            return entry

        audit.record = recording  # type: ignore[method-assign]  # the bench's own probe on the fake


def prepare(gh: SandboxHandle, ci_delay: float) -> None:
    world = gh.world
    world.push("maintainer", "main", {".github/autoloop.toml": POLICY}, "delivery policy")
    world.set_protection(branch="main", contexts=["ci"])
    world.set_ci({"ci": "success"}, delay=ci_delay)
    world.settle(timeout=30)


def open_prs(
    gh: SandboxHandle, n: int, tag: str, ci_delay: float | None = None, spread: float = 0.0
) -> list[int]:
    """``n`` PRs; with ``ci_delay``, each one's CI takes that long plus a share of
    ``spread`` (seeded: the same run gives the same times)."""
    rng = random.Random(n)  # reproducible times, not security
    numbers = []
    for i in range(n):
        if ci_delay is not None:
            gh.world.set_ci({"ci": "success"}, delay=ci_delay + rng.uniform(0, spread))
        files: dict[str, str | None] = {f"{tag}/{i}.txt": "x\n"}
        numbers.append(gh.world.open_pr("contributor", f"{tag}-{i}", f"{tag} {i}", files=files))
    return numbers


def check_done_at(gh: SandboxHandle, timings: Timings, number: int) -> datetime | None:
    """When the last ``ci`` run on the merged head completed."""
    head = gh.world.state.repos[gh.repo.lower()].pulls[number].head_sha
    return timings.checks.get(head)


# --------------------------------------------------------------------------- the runs


def merge_latency(
    n: int,
    ci_delay: float,
    rate: float,
    timeout: float,
    *,
    senders: int = SENDERS,
    spread: float = 0.0,
) -> dict[str, Any]:
    with (
        running_sandbox(webhook_senders=senders) as gh,
        tempfile.TemporaryDirectory() as tmp,
    ):
        prepare(gh, ci_delay)
        timings = Timings(gh)
        with serving(gh, Path(tmp) / "home") as proc:
            numbers = open_prs(gh, n, "lat", ci_delay, spread)
            requests_before = len(gh.world.audit.entries())
            cpu_before = cpu_s(proc.pid)
            started = time.monotonic()
            labelled: dict[int, datetime] = {}
            for number in numbers:
                labelled[number] = datetime.now(UTC)
                gh.world.add_label("maintainer", number, "deliver")
                if rate > 0:
                    time.sleep(1 / rate)
            while len(timings.merges) < n and time.monotonic() - started < timeout:
                time.sleep(0.2)
            took = time.monotonic() - started
            server_cpu = cpu_s(proc.pid) - cpu_before
            requests = len(gh.world.audit.entries()) - requests_before
        merges = [e for e in gh.world.audit.entries(method="PUT") if e.path.endswith("/merge")]
        lat: list[float] = []
        ours: list[float] = []
        for number, merged_at in sorted(timings.merges.items()):
            # A check that passed before the label was added counts from the label.
            done = check_done_at(gh, timings, number)
            if done is not None:
                lat.append((merged_at - max(done, labelled[number])).total_seconds())
            head = gh.world.state.repos[gh.repo.lower()].pulls[number].head_sha
            if head in timings.sent:
                sent = max(timings.sent[head], labelled[number])
                ours.append((merged_at - sent).total_seconds())
    return {
        "pipelines": n,
        "senders": senders,
        "spread_s": spread,
        "merged": len(timings.merges),
        "merge_calls": len(merges),
        "seconds": round(took, 1),
        "p50_s": percentile(lat, 0.5) if lat else None,
        "p99_s": percentile(lat, 0.99) if lat else None,
        "max_s": max(lat) if lat else None,
        "ours_p50_s": percentile(ours, 0.5) if ours else None,
        "ours_p99_s": percentile(ours, 0.99) if ours else None,
        # Work, whatever else the machine does: the server's CPU seconds and the requests
        # it made to GitHub, from the first label to the last merge, per pipeline.
        "server_cpu_ms_per_pipeline": round(server_cpu * 1000 / n, 1),
        "github_requests_per_pipeline": round(requests / n, 1),
    }


def waiting_cost(n: int, window: float) -> dict[str, Any]:
    with running_sandbox() as gh, tempfile.TemporaryDirectory() as tmp:
        prepare(gh, ci_delay=window * 10 + 600)  # the checks outlast the window by far
        with serving(gh, Path(tmp) / "home") as proc:
            time.sleep(2)
            before = cpu_s(proc.pid)
            time.sleep(window)
            idle = cpu_s(proc.pid) - before
            numbers = open_prs(gh, n, "wait")
            for number in numbers:
                gh.world.add_label("maintainer", number, "deliver")
            gh.world.settle(timeout=60)
            time.sleep(5)  # every pipeline has read its PR and waits for its checks
            before = cpu_s(proc.pid)
            time.sleep(window)
            waiting = cpu_s(proc.pid) - before
    return {"pipelines": n, "window_s": window, "idle_cpu_s": idle, "waiting_cpu_s": waiting}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.delivery", description=__doc__)
    p.add_argument("--pipelines", type=int, default=100, help="PRs delivered at once")
    p.add_argument("--waiting", type=int, default=50, help="PRs waiting for their checks")
    p.add_argument("--window", type=float, default=60.0, help="seconds of CPU measured")
    p.add_argument("--ci-delay", type=float, default=25.0, help="seconds the ci check takes")
    p.add_argument("--label-rate", type=float, default=5.0, help="labels a second (0: a burst)")
    p.add_argument(
        "--ci-spread",
        type=float,
        default=100.0,
        help="each PR's ci takes --ci-delay plus up to this many seconds more (0: all at once)",
    )
    p.add_argument(
        "--senders",
        type=int,
        default=SENDERS,
        help="webhooks the fake GitHub sends at once (1: one at a time, in order)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs")
    args = p.parse_args(argv)
    if args.quick:
        args.pipelines, args.waiting, args.window, args.ci_delay = 3, 3, 2.0, 2.0
        args.ci_spread = 1.0
    lat = merge_latency(
        args.pipelines,
        args.ci_delay,
        args.label_rate,
        timeout=120 + args.ci_spread + args.pipelines * 2,
        senders=args.senders,
        spread=args.ci_spread,
    )
    print(
        f"merge latency, {lat['pipelines']} pipelines on one base "
        f"(labelled {args.label_rate:g}/s, ci takes {args.ci_delay:g} s plus up to "
        f"{args.ci_spread:g} s, the fake sends "
        f"{lat['senders']} webhooks at once): "
        f"{lat['merged']} merged with {lat['merge_calls']} merge calls in {lat['seconds']} s; "
        f"from the last required check completing to the merge call: "
        f"p50 {fmt(lat['p50_s'])}, p99 {fmt(lat['p99_s'])}, max {fmt(lat['max_s'])} "
        f"(target p99 < 1 s: {'met' if (lat['p99_s'] or 99) < 1 else 'MISSED'}); "
        f"from the fake GitHub sending that check's webhook to the merge call: "
        f"p50 {fmt(lat['ours_p50_s'])}, p99 {fmt(lat['ours_p99_s'])}; "
        f"per pipeline until the last merge: {lat['server_cpu_ms_per_pipeline']} ms of server "
        f"CPU, {lat['github_requests_per_pipeline']} requests to GitHub"
    )
    cost = waiting_cost(args.waiting, args.window)
    print(
        f"waiting: {cost['pipelines']} pipelines waiting for checks, server CPU over "
        f"{cost['window_s']:.0f} s: {cost['waiting_cpu_s']:.3f} s, against "
        f"{cost['idle_cpu_s']:.3f} s with no pipeline over the same window"
    )
    ok = lat["merged"] == lat["pipelines"] and lat["merge_calls"] == lat["pipelines"]
    return 0 if ok else 1


def fmt(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.0f} ms"


if __name__ == "__main__":
    raise SystemExit(main())
