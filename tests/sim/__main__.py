"""``python -m tests.sim --seeds 10 --steps 2000``: run seeds, print what each did."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.sim.harness import run
from tests.sim.invariants import InvariantBroken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.sim", description="Seeded simulation of the hub over SQLite."
    )
    parser.add_argument("--seeds", type=int, default=10, help="how many seeds (default 10)")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--steps", type=int, default=2000, help="steps per seed (default 2000)")
    parser.add_argument(
        "--check-every", type=int, default=500, help="full replay comparison every N steps"
    )
    parser.add_argument("--dir", type=Path, help="keep the ledgers here (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.steps < 1 or args.check_every < 1:
        parser.error("--seeds, --steps and --check-every must be 1 or more")
    began = time.perf_counter()
    faults: Counter[str] = Counter()
    checks: Counter[str] = Counter()
    steps = facts = turns = 0
    with tempfile.TemporaryDirectory(prefix="autoloop-sim-") as tmp:
        where = args.dir or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            try:
                summary = run(seed, args.steps, where, check_every=args.check_every)
            except InvariantBroken as exc:
                print(f"seed {seed}: INVARIANT BROKEN: {exc}", file=sys.stderr)
                return 1
            for line in summary.lines():
                print(line, flush=True)
            steps += summary.steps
            facts += summary.facts
            turns += summary.turns
            faults.update(summary.faults)
            checks.update(summary.checks)
    took = time.perf_counter() - began
    print(f"total: {args.seeds} seeds, {steps} steps, {facts} facts, {turns} turns in {took:.1f} s")
    print("  faults: " + ", ".join(f"{n} {c}" for n, c in sorted(faults.items())))
    print("  checks: " + ", ".join(f"{n} {c}" for n, c in sorted(checks.items())))
    print("all invariants held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
