"""A against B: ``autoloop serve`` from two source trees, for one change to the ack path.

    git worktree add /tmp/before HEAD~1
    python -m bench.ingest_ab /tmp/before . [--rounds 6] [--seconds 4] [--env-b K=V ...]

Both servers run side by side, each a process pinned to the same core (the load
generator on the others), started as ``bench.ingest`` starts ``ours`` but with
``PYTHONPATH`` set to their own tree. Their rounds alternate (A B, then B A, and so on),
16 connections in a closed loop, so that what else the machine does in a minute hits
both alike; after each round the server decides what it acknowledged. Printed per side:
the median deliveries/s, the median CPU time per delivery inside the window and with
the deciding after it, and every round's rate. ``--env-a``/``--env-b`` set environment
variables on one side only (e.g. ``AUTOLOOP_LOG_LEVEL=WARNING``), so one tree can be
compared with itself under two settings. ``--threads`` also prints, per side, the CPU
time of each of the server's threads per delivery (the event loop is ``main``; the
inbox's writer, translator and segments' thread by name), in the window and with the
deciding after it (Linux: the servers name their threads for the system). ``--rate R``
sends R deliveries a second for ``--seconds`` instead (open loop, as GitHub sends them),
for what a change costs at a paced load rather than in a burst.

On a shared or virtual machine, rounds of the same code differ by 10% and more from
minute to minute: a difference under that needs more rounds, and one run is one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.ingest import Deliveries, closed_loop, paced, run_async, settle
from bench.ingest_sides import spawn, stop


@dataclass
class Side:
    name: str
    root: Path
    env: dict[str, str]
    rounds: list[tuple[float, float, float]] = field(default_factory=list)  # rate, cpu, all
    # thread name -> per round, us a delivery: (in the window, with the deciding after)
    threads: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"bench.ingest_ab: {pair!r} is not KEY=VALUE")
        out[key] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ingest_ab", description=__doc__)
    p.add_argument("a", type=Path, help="source tree of side A (e.g. a worktree of HEAD~1)")
    p.add_argument("b", type=Path, help="source tree of side B")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--env-a", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--env-b", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--threads", action="store_true", help="CPU per delivery of each thread")
    p.add_argument(
        "--rate", type=float, default=0.0, help="deliveries a second, open loop (0: closed loop)"
    )
    args = p.parse_args(argv)
    if args.rate < 0 or args.rounds < 1 or args.seconds <= 0:
        print("bench.ingest_ab: --rate >= 0, --rounds >= 1, --seconds > 0", file=sys.stderr)
        return 2
    for tree in (args.a, args.b):
        if not (tree / "ghapp" / "commands" / "cli.py").is_file():
            print(f"bench.ingest_ab: {tree} is not a source tree of this project", file=sys.stderr)
            return 2
    sides = [
        Side("A", args.a.resolve(), parse_env(args.env_a)),
        Side("B", args.b.resolve(), parse_env(args.env_b)),
    ]
    saved = os.sched_getaffinity(0)
    cpus = sorted(saved)
    cpu = cpus[0] if len(cpus) > 1 else None
    if cpu is not None:
        os.sched_setaffinity(0, set(cpus[1:]))
    try:
        run(
            sides,
            cpu,
            args.rounds,
            args.seconds,
            args.concurrency,
            threads=args.threads,
            rate=args.rate,
        )
    finally:
        os.sched_setaffinity(0, saved)
    for side in sides:
        rates = [r[0] for r in side.rounds]
        extra = f" ({' '.join(f'{k}={v}' for k, v in side.env.items())})" if side.env else ""
        print(
            f"{side.name} {side.root}{extra}: {statistics.median(rates):.0f} deliveries/s, "
            f"cpu {statistics.median(r[1] for r in side.rounds):.0f} us a delivery in the "
            f"window, {statistics.median(r[2] for r in side.rounds):.0f} us with deciding; "
            f"rounds {[round(r) for r in rates]}"
        )
        for name, values in sorted(side.threads.items(), key=lambda kv: -kv[1][0][1]):
            window = statistics.median(v[0] for v in values)
            with_deciding = statistics.median(v[1] for v in values)
            if with_deciding >= 0.5:  # (threads that did nothing to speak of: left out)
                print(
                    f"    thread {name:16s} {window:6.1f} us a delivery in the window, "
                    f"{with_deciding:6.1f} with deciding"
                )
    return 0


def run(
    sides: list[Side],
    cpu: int | None,
    rounds: int,
    seconds: float,
    conns: int,
    *,
    threads: bool = False,
    rate: float = 0.0,
) -> None:
    deliveries = Deliveries(100)
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        kids = [
            spawn(
                "ours",
                Path(tmp) / s.name,
                cpu,
                tree=s.root,
                extra_env=s.env,
                log_name=s.name,
                thread_names=threads,
            )
            for s in sides
        ]
        try:
            for side, kid in zip(sides, kids, strict=True):
                warm = deliveries.make(500, f"warm-{side.name}")
                run_async(closed_loop(kid.port, warm, 4, None))
                settle(kid)
            for n in range(rounds):
                order = (0, 1) if n % 2 == 0 else (1, 0)
                for i in order:
                    side, kid = sides[i], kids[i]
                    count = max(1, int(seconds * (rate or 8000)))
                    todo = deliveries.make(count, f"r{n}-{side.name}")
                    t0 = kid.thread_cpu_s() if threads else {}
                    before = kid.cpu_s()
                    if rate:
                        w = run_async(paced(kid.port, todo, rate))
                    else:
                        w = run_async(closed_loop(kid.port, todo, conns, seconds))
                    window = kid.cpu_s()
                    t1 = kid.thread_cpu_s() if threads else {}
                    settle(kid)
                    done = kid.cpu_s()
                    t2 = kid.thread_cpu_s() if threads else {}
                    ok = max(1, w.ok)
                    for name in t2:
                        start = t0.get(name, 0.0)
                        side.threads.setdefault(name, []).append(
                            (
                                (t1.get(name, start) - start) / ok * 1e6,
                                (t2[name] - start) / ok * 1e6,
                            )
                        )
                    side.rounds.append(
                        (w.rate, (window - before) / ok * 1e6, (done - before) / ok * 1e6)
                    )
                    print(f"  round {n + 1} {side.name}: {w.rate:7.0f} deliveries/s", flush=True)
        finally:
            for kid in kids:
                stop(kid)


if __name__ == "__main__":
    sys.exit(main())
