"""``python -m tests.fuzz --inputs 1000000``: the long fuzz run (see :mod:`tests.fuzz`)."""

from __future__ import annotations

import argparse
import sys

# The targets of tests.fuzz.targets.TARGETS, named here so that atheris can instrument
# the project's modules before anything imports them.
NAMES = ("webhook", "source", "cards", "receipt", "rules", "links")
# Instrumented for atheris' coverage: the parsers and checkers the targets reach.
INSTRUMENTED = ["ghapp.web", "ghapp.github.sansio", "ghapp.runtime.links",
                "ghapp.runtime.details", "kernel.receipt", "kernel.fence", "kernel.rules",
                "kernel.config"]  # fmt: skip
# Not under atheris: the webhook target. Its requests are parsed, translated and redacted
# on the ingest writer's thread, and under atheris 2.3.0 (CPython 3.11) that thread
# crashes with SIGSEGV at its first input, even with no module instrumented and Python
# coverage off; never without atheris (its hooks are not thread-safe). Hypothesis
# fuzzes it.
NOT_UNDER_ATHERIS = ("webhook",)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    p.add_argument("--inputs", type=int, default=1_000_000, help="inputs in all (default 1M)")
    p.add_argument(
        "--target",
        action="append",
        choices=NAMES,
        help="a target to fuzz (repeatable; default: all six, sharing the inputs)",
    )
    p.add_argument("--chunk", type=int, default=20_000, help="inputs per Hypothesis run")
    p.add_argument("--seed", type=int, default=None, help="seed of the chunk seeds")
    p.add_argument(
        "--engine",
        choices=["hypothesis", "atheris"],
        default="hypothesis",
        help="atheris: one --target, coverage-guided on bytes (pip install atheris)",
    )
    args = p.parse_args(argv)
    names = args.target or list(NAMES)
    if args.inputs < 1:
        p.error("--inputs must be at least 1")
    if args.engine == "atheris":
        if len(names) != 1:
            p.error("--engine atheris fuzzes one --target at a time")
        if names[0] in NOT_UNDER_ATHERIS:
            p.error(f"--target {names[0]} does not run under atheris (see NOT_UNDER_ATHERIS)")
        return atheris_main(names[0], args.inputs)
    from tests.fuzz.driver import run  # see NAMES

    tallies = run(names, args.inputs, chunk=args.chunk, base_seed=args.seed)
    return 1 if any(t.failures for t in tallies) else 0


def atheris_main(name: str, runs: int) -> int:
    """One target under atheris, the project's modules instrumented for coverage;
    libFuzzer ends the process (non-zero on a failure, with the input saved), without
    Python's exit handlers: the target's temporary folder stays (under ``TMPDIR``)."""
    try:
        import atheris  # type: ignore[import-not-found]  # optional
    except ImportError:
        print("atheris is not installed: pip install atheris", file=sys.stderr)
        return 2
    with atheris.instrument_imports(include=INSTRUMENTED):
        from tests.fuzz.targets import TARGETS  # instrumented imports

    target = TARGETS[name]()
    target.__enter__()
    atheris.Setup([sys.argv[0], f"-runs={runs}"], target.check_bytes)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
