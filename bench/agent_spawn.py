"""Turn start overhead of the command adapter, against a bare subprocess.run of the same argv.

For each argv (a trivial ``python3 -c 'print(1)'`` and ``/bin/echo``) it times, in the
same run and interleaved so machine noise hits all alike:

- ``bare``: ``subprocess.run(argv)``, wall time to exit;
- ``first``: ``run_process`` -- spawn to the first byte on stdout (what a person waits
  for before the agent shows a sign of life);
- ``adapter``: ``CommandAgent().run(req)`` wall time: env building, placeholder
  substitution, process group, report file, result.

Prints p50/p99 in milliseconds and each ratio against ``bare``.
Usage: python bench/agent_spawn.py [--runs 50]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stats import percentile  # noqa: E402 - after the path set-up above
from plugins.agents.command import CommandAgent  # noqa: E402 - after the path set-up above
from plugins.agents.common import build_env  # noqa: E402  # after the sys.path set-up above
from plugins.agents.process import run_process  # noqa: E402  # after the sys.path set-up above
from plugins.protocols import AgentRequest  # noqa: E402  # after the sys.path set-up above


def request(folder: Path, argv: list[str]) -> AgentRequest:
    return AgentRequest(
        turn="bench",
        prompt="print one",
        cwd=folder,
        turn_dir=folder,
        env={"AUTOLOOP_TURN": "bench", "AUTOLOOP_SESSION": "bench", "AUTOLOOP_RESUME": ""},
        resume=None,
        access="read",
        timeout_s=30,
        command=tuple(argv),
    )


def measure(argv: list[str], runs: int, folder: Path) -> dict[str, list[float]]:
    req = request(folder, argv)
    env = build_env(req)
    agent = CommandAgent()
    times: dict[str, list[float]] = {"bare": [], "first": [], "adapter": []}
    for _ in range(3):  # warm the page cache and the interpreter
        subprocess.run(argv, capture_output=True, check=True, env=env)
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True, env=env)
        times["bare"].append(time.perf_counter() - began)

        proc = run_process(argv, cwd=folder, env=env, timeout_s=30)
        assert proc.exit_code == 0 and proc.first_output_s is not None
        times["first"].append(proc.first_output_s)

        began = time.perf_counter()
        result = agent.run(req)
        times["adapter"].append(time.perf_counter() - began)
        assert result.ok, result.error
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    python3 = shutil.which("python3") or sys.executable
    cases = {
        "python3 -c 'print(1)'": [python3, "-c", "print(1)"],
        "/bin/echo 1": ["/bin/echo", "1"],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for label, argv in cases.items():
            times = measure(argv, args.runs, Path(tmp))
            bare50 = statistics.median(times["bare"])
            bare99 = percentile(times["bare"], 0.99)
            print(f"{label}  ({args.runs} runs each)")
            for kind in ("bare", "first", "adapter"):
                p50 = statistics.median(times[kind])
                p99 = percentile(times[kind], 0.99)
                print(
                    f"  {kind:8s} p50 {p50 * 1000:7.2f} ms  p99 {p99 * 1000:7.2f} ms"
                    f"  ratio p50 {p50 / bare50:5.2f}  p99 {p99 / bare99:5.2f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
