"""Run every benchmark in sequence and print a compact summary table.

``python -m bench`` runs ``decision``, ``ledger`` and ``ingest`` (this package's own,
whose figures go into the summary table), then the benches other parts of the project
add when they are present (``agent_spawn``, ``redact``); a missing one is skipped with
a note. Every figure is measured
against a baseline taken in the same run on the same machine; see ``bench/README.md``.

Usage: python -m bench [--quick] [--pg] [--no-probot] [--only decision,ledger,ingest,...]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import platform
import runpy
import sqlite3
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

OWN = ("decision", "ledger", "ingest")
# Benches that print their own figures from main(); the argv each gets (full, --quick).
OTHERS: dict[str, tuple[list[str], list[str]]] = {
    "agent_spawn": ([], ["--runs", "5"]),
    "redact": ([], []),
}
QUICK: dict[str, dict[str, Any]] = {
    "decision": {"iterations": 200, "matters": 30, "warmup": 20},
    "ledger": {"events": 40, "rounds": 1, "backlog": 40, "burst": 10, "subjects": 5},
    "ingest": {},  # bench.ingest.QUICK
}


def machine_facts() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {os.cpu_count()} cpus "
        f"(load average {load:.2f}); python {platform.python_version()} "
        f"({platform.python_implementation()}); sqlite {sqlite3.sqlite_version}; "
        f"{platform.platform()}"
    )


def present(name: str) -> bool:
    """Whether ``bench/<name>.py`` is in this checkout (found without importing it)."""
    if importlib.util.find_spec(f"bench.{name}") is None:
        print(f"-- {name}: skipped, bench/{name}.py is not in this checkout")
        return False
    return True


def run_script(name: str, argv: list[str]) -> int:
    """Run ``bench/<name>.py`` as ``python -m bench.<name> ARGV`` would, in this process."""
    with argv_of(argv):
        try:
            runpy.run_module(f"bench.{name}", run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


@contextlib.contextmanager
def argv_of(argv: list[str]) -> Iterator[None]:
    """Some benches read ``sys.argv`` in ``main()``; give them only their own arguments."""
    saved = sys.argv
    sys.argv = [saved[0], *argv]
    try:
        yield
    finally:
        sys.argv = saved


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs")
    parser.add_argument("--pg", action="store_true", help="also run the ledger on PostgreSQL")
    parser.add_argument("--only", default="", help="comma-separated bench names")
    parser.add_argument("--no-probot", action="store_true", help="ingest: leave Probot out")
    args = parser.parse_args(argv)
    names = [*OWN, *OTHERS]
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            parser.error(f"unknown bench {', '.join(unknown)}; choose from {', '.join(names)}")
        names = [n for n in names if n in wanted]

    print(f"machine: {machine_facts()}")
    table: list[tuple[str, str, str]] = []
    for name in names:
        print(f"\n== {name}")
        if not present(name):
            table.append((name, "skipped", "not in this checkout"))
            continue
        began = time.perf_counter_ns()
        if name in OWN:
            module = importlib.import_module(f"bench.{name}")
            sizes: dict[str, Any] = dict(QUICK[name] or module.QUICK) if args.quick else {}
            if name == "ledger":
                sizes["pg"] = args.pg
            if name == "ingest":
                sizes["probot"] = not args.no_probot
            figures = module.run(**sizes)
            table.extend(module.summarize(figures))
        else:
            full, quick = OTHERS[name]
            code = run_script(name, quick if args.quick else full)
            status = "ran" if code == 0 else f"exit {code}"
            table.append((name, status, "figures printed above"))
        print(f"-- {name}: {(time.perf_counter_ns() - began) / 1e9:.1f} s")

    print("\nsummary (one run; ratios are against a baseline measured in the same run)")
    width = max((len(row[0]) for row in table), default=0)
    middle = max((len(row[1]) for row in table), default=0)
    for label, value, against in table:
        print(f"  {label:{width}s}  {value:{middle}s}  {against}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
