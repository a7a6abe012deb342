"""Run the fuzz targets with Hypothesis for a number of inputs (atheris: ``__main__``).

Hypothesis runs each target in chunks of ``chunk`` examples, each chunk with a seed of
its own and a fresh app (a new home and ledger), until the target's share of the
inputs is tried. Every call of a target's check counts as one input tried (the
shrinking of a failure too). A failure is reported with the input Hypothesis shrank it
to; a target stops after ``max_failures``.
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.fuzz.targets import TARGETS, Target


@dataclass
class Tally:
    target: str
    inputs: int = 0
    chunks: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)


def run_chunk(target: Target, examples: int, chunk_seed: int, tally: Tally) -> None:
    """One Hypothesis run of ``examples`` inputs against ``target`` (already entered)."""

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.generate, Phase.shrink),
        report_multiple_bugs=False,
        print_blob=True,
    )
    @seed(chunk_seed)
    @given(target.strategy())
    def fuzz(example: Any) -> None:
        tally.inputs += 1
        target.check(example)

    try:
        fuzz()
    except Exception as exc:  # a FuzzFailure, shrunk; anything else is a harness bug
        text = f"{type(exc).__name__}: {exc}".strip()
        notes = getattr(exc, "__notes__", [])
        tally.failures.append("\n".join([text[:3000], *notes]))


def run(
    names: Sequence[str],
    inputs: int,
    *,
    chunk: int = 20_000,
    base_seed: int | None = None,
    max_failures: int = 3,
    out: TextIO = sys.stdout,
    make: Callable[[str], Target] | None = None,
) -> list[Tally]:
    """At least ``inputs`` inputs in all, shared evenly by the targets ``names``."""
    rng = random.Random(base_seed)
    share = -(-inputs // len(names))
    tallies = []
    began = time.monotonic()
    for name in names:
        tally = Tally(name)
        tallies.append(tally)
        started = time.monotonic()
        shown = 0
        while tally.inputs < share and len(tally.failures) < max_failures:
            chunk_seed = rng.randrange(2**32)
            with (make or (lambda n: TARGETS[n]()))(name) as target:
                before = tally.inputs
                run_chunk(target, min(chunk, share - tally.inputs), chunk_seed, tally)
                if tally.inputs == before:  # Hypothesis generated nothing more
                    tally.failures.append(f"chunk with seed {chunk_seed} tried no input")
            tally.outcomes.update(target.outcomes)
            tally.chunks += 1
            tally.seconds = time.monotonic() - started
            rate = tally.inputs / tally.seconds if tally.seconds else 0.0
            print(
                f"fuzz {name}: {tally.inputs:,}/{share:,} inputs, {len(tally.failures)} "
                f"failures, {rate:,.0f}/s (chunk seed {chunk_seed}), "
                f"{time.monotonic() - began:,.0f} s in all",
                file=out,
                flush=True,
            )
            for failure in tally.failures[shown:]:
                print(f"  FAILURE {name}: {failure}", file=out, flush=True)
            shown = len(tally.failures)
        seen = ", ".join(f"{what} {n:,}" for what, n in sorted(tally.outcomes.items()))
        print(f"fuzz {name}: outcomes: {seen}", file=out, flush=True)
    total = sum(t.inputs for t in tallies)
    fails = sum(len(t.failures) for t in tallies)
    print(
        "fuzz summary: "
        + ", ".join(f"{t.target} {t.inputs:,} ({len(t.failures)} failures)" for t in tallies)
        + f"; {total:,} inputs in all, {fails} failures, {time.monotonic() - began:,.0f} s",
        file=out,
        flush=True,
    )
    return tallies
