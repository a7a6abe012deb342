"""Run the simulations from the command line, printing what each seed did.

- ``python -m tests.sim --seeds 10 --steps 2000``: the hub over SQLite
  (:mod:`tests.sim.harness`).
- ``python -m tests.sim --system --seeds 20 --steps 5000``: the whole system
  (:mod:`tests.sim.system`): hub, outbox, delivery runner, sweeper and the sandbox GitHub.
- ``python -m tests.sim --long``: the whole system for 10 million steps (2,000 seeds of
  5,000 steps; hours), a progress line every 10,000 steps. ``--steps`` and ``--seeds``
  change the split, ``--total`` the number of steps.

Exit 0 when every invariant held, 1 (with the broken one on stderr) otherwise; with
``--require-reached``, 2 when a fault or path of ``MUST_REACH`` was never reached.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.sim.harness import run
from tests.sim.invariants import InvariantBroken
from tests.sim.system import MUST_REACH, run_system

LONG_TOTAL = 10_000_000
SYSTEM_STEPS = 5_000
VERBOSE_SEEDS = 50  # up to this many seeds, each seed's counters are printed too


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.sim",
        description="Seeded simulations: the hub over SQLite, or (--system) the whole system.",
    )
    parser.add_argument("--system", action="store_true", help="simulate the whole system")
    parser.add_argument(
        "--long", action="store_true", help=f"the whole system for {LONG_TOTAL:,} steps"
    )
    parser.add_argument("--seeds", type=int, help="how many seeds (default 10)")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--steps", type=int, help="steps per seed (default 2000; system: 5000)")
    parser.add_argument("--total", type=int, help="with --long: steps in all (default 10M)")
    parser.add_argument("--check-every", type=int, help="full replay comparison every N steps")
    parser.add_argument("--dir", type=Path, help="keep the ledgers here (default: a temp dir)")
    parser.add_argument(
        "--require-reached",
        action="store_true",
        help="with --system: exit 1 unless every fault and path of MUST_REACH was reached",
    )
    args = parser.parse_args(argv)
    system = args.system or args.long
    steps = args.steps or (SYSTEM_STEPS if system else 2000)
    if args.long:
        total = args.total or LONG_TOTAL
        seeds = args.seeds or -(-total // steps)
    else:
        if args.total is not None:
            parser.error("--total goes with --long")
        seeds = args.seeds or 10
    check_every = args.check_every or (steps if system else 500)
    if seeds < 1 or steps < 1 or check_every < 1:
        parser.error("--seeds, --steps, --total and --check-every must be 1 or more")
    with tempfile.TemporaryDirectory(prefix="autoloop-sim-") as tmp:
        where = args.dir or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        if system:
            code, missing = _system(args.first_seed, seeds, steps, check_every, where)
            return code or (2 if args.require_reached and missing else 0)
        return _hub(args.first_seed, seeds, steps, check_every, where)


def _hub(first: int, seeds: int, steps: int, check_every: int, where: Path) -> int:
    began = time.perf_counter()
    faults: Counter[str] = Counter()
    checks: Counter[str] = Counter()
    total = facts = turns = 0
    for seed in range(first, first + seeds):
        try:
            summary = run(seed, steps, where, check_every=check_every)
        except InvariantBroken as exc:
            print(f"seed {seed}: INVARIANT BROKEN: {exc}", file=sys.stderr)
            return 1
        for line in summary.lines():
            print(line, flush=True)
        total += summary.steps
        facts += summary.facts
        turns += summary.turns
        faults.update(summary.faults)
        checks.update(summary.checks)
    took = time.perf_counter() - began
    print(f"total: {seeds} seeds, {total} steps, {facts} facts, {turns} turns in {took:.1f} s")
    print("  faults: " + ", ".join(f"{n} {c}" for n, c in sorted(faults.items())))
    print("  checks: " + ", ".join(f"{n} {c}" for n, c in sorted(checks.items())))
    print("all invariants held")
    return 0


def _system(
    first: int, seeds: int, steps: int, check_every: int, where: Path
) -> tuple[int, list[str]]:
    """Runs the seeds; the exit code and what of MUST_REACH was never reached."""
    began = time.perf_counter()
    reached: Counter[str] = Counter()
    checks: Counter[str] = Counter()
    ends: Counter[str] = Counter()
    done = facts = requests = webhooks = 0

    def progress(seed: int, step: int) -> None:
        if (done + step) % 10_000 == 0:  # a line every 10,000 steps in all
            took = time.perf_counter() - began
            print(f"  seed {seed}: step {step} ({done + step} in all, {took:.0f} s)", flush=True)

    for seed in range(first, first + seeds):
        try:
            summary = run_system(seed, steps, where, check_every=check_every, progress=progress)
        except InvariantBroken as exc:
            print(f"seed {seed}: INVARIANT BROKEN: {exc}", file=sys.stderr)
            return 1, []
        for line in summary.lines() if seeds <= VERBOSE_SEEDS else summary.lines()[:1]:
            print(line, flush=True)
        done += summary.steps
        facts += summary.facts
        requests += summary.api_requests
        webhooks += summary.webhooks_sent
        reached.update(summary.reached)
        checks.update(summary.checks)
        ends.update(summary.end_states)
        took = time.perf_counter() - began
        print(f"progress: {seed - first + 1}/{seeds} seeds, {done} steps, {took:.0f} s", flush=True)
    took = time.perf_counter() - began
    print(
        f"total: {seeds} seeds, {done} steps, {facts} facts, {requests} API requests, "
        f"{webhooks} webhook attempts in {took:.1f} s"
    )
    print("  reached: " + ", ".join(f"{n} {c}" for n, c in sorted(reached.items())))
    print("  checks:  " + ", ".join(f"{n} {c}" for n, c in sorted(checks.items())))
    print("  pipelines at the end: " + ", ".join(f"{n} {c}" for n, c in sorted(ends.items())))
    missing = [name for name in MUST_REACH if not reached[name]]
    if missing:
        print("  never reached: " + ", ".join(missing))
    print("all invariants held (0 violations)")
    return 0, missing


if __name__ == "__main__":
    sys.exit(main())
