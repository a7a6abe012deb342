"""Decision time: ``kernel.step.step`` alone, pure and in memory, p50/p99 per input.

A realistic state is built first through ``step`` itself: ``--matters`` issues of one
``parallel`` rule, each with a pending event; two thirds claimed; half finished with a
typical receipt (one ask, one notice, one allowed action), leaving a few hundred open
cards and a few dozen running turns. Then, interleaved so that machine noise hits all
alike, each iteration times on a fresh shallow copy of that state (the copy is not
timed):

- ``ingest``: an ``issues.opened`` event into an existing matter;
- ``claim``: a worker claims a matter with pending events;
- ``finish``: a running turn ends with the typical receipt (parsed, validated, applied);
- ``baseline``: ``json.loads`` of the webhook payload the event was made from (GitHub's
  own ``issues.opened`` example), the least work any webhook needs.

Prints p50/p99 in microseconds and each against the baseline (target: p99 < 1.5 ms).
Usage: python -m bench.decision [--iterations 5000] [--matters 300]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.stats import percentile
from kernel import inputs as k
from kernel.model import AgentSpec, Event, Rule, Rules, Trigger
from kernel.state import State
from kernel.step import step
from plugins.sources.github import translate

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = ROOT / "tests" / "fixtures" / "github" / "webhooks" / "issues" / "opened.json"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)

RECEIPT = """Labelled the issue as a bug and drafted a fix plan.

```autoloop
{
  "ask": [{"key": "fix-now", "title": "Fix it now or next sprint?",
           "text": "The spelling error is in the README only.",
           "options": ["now", "next sprint"]}],
  "notice": [{"title": "Triage done", "text": "Labelled bug, severity low."}],
  "actions": [{"do": "github.comment", "repo": "Codertocat/Hello-World", "number": %d,
               "body": "Thanks! This is a typo in the README; a fix is planned."}]
}
```
"""

OPS = ("ingest", "claim", "finish", "baseline")


def bench_rules() -> Rules:
    rule = Rule(
        name="triage",
        agent="coder",
        on=Trigger(source=("github",), type=("issues.*",)),
        parallel=True,
        allow=("github.comment", "github.label"),
        approve=("github.close",),
    )
    agent = AgentSpec(name="coder", use="command", command=("true",))
    return Rules(version="bench", agents={"coder": agent}, rules=(rule,))


def payload_text() -> str:
    try:
        return PAYLOAD.read_text(encoding="utf-8")
    except OSError as exc:
        raise SystemExit(f"cannot read the example payload {PAYLOAD}: {exc}") from exc


def issue_event(template: Event, tag: str, number: int) -> Event:
    repo = str(template.details.get("repo", "acme/web"))
    details = dict(template.details)
    details["number"] = number
    return dataclasses.replace(
        template, id=f"{tag}-{number}", subject=f"{repo}#{number}", details=details
    )


def finish_input(state: State, turn: str, number: int) -> k.Finish:
    outcome = k.AgentOutcome(
        started=True,
        ok=True,
        final_message=RECEIPT % number,
        session="agent-session-1",
        cost_usd=0.02,
        tokens=1200,
    )
    return k.Finish(turn=turn, fence=state.turns[turn].fence, outcome=outcome)


@dataclasses.dataclass(frozen=True, slots=True)
class Scene:
    state: State
    rules: Rules
    inputs: dict[str, k.Input]
    now: datetime


def build_scene(matters: int) -> Scene:
    """The state the timed inputs meet, and one input of each kind."""
    if matters < 6:
        raise SystemExit("--matters must be at least 6")
    rules = bench_rules()
    template = translate("issues", "bench", json.loads(payload_text()))[0]
    state = State()
    now = T0
    for n in range(1, matters + 1):
        step(state, k.Ingest(event=issue_event(template, "d", n)), now=now, rules=rules)
    mids = sorted(state.matters)
    claimed = mids[: matters * 2 // 3]
    for mid in claimed:
        step(state, k.Claim(matter=mid, worker="w1"), now=now, rules=rules)
    now += timedelta(minutes=5)
    for number, mid in enumerate(claimed[: matters // 2], 1):
        turn = state.matters[mid].running
        assert turn is not None
        step(state, finish_input(state, turn, number), now=now, rules=rules)
    # a matter with a pending event and nothing running, one with a running turn
    idle = next(m for m in mids if state.matters[m].runnable)
    running = next(m.running for m in state.matters.values() if m.running is not None)
    assert running is not None
    number = int(state.matters[idle].subject.rsplit("#", 1)[1])
    inputs: dict[str, k.Input] = {
        "ingest": k.Ingest(event=issue_event(template, "again", number)),
        "claim": k.Claim(matter=idle, worker="w2"),
        "finish": finish_input(state, running, number),
    }
    return Scene(state=state, rules=rules, inputs=inputs, now=now + timedelta(minutes=1))


def check_scene(scene: Scene) -> None:
    """Each timed input must do its real work, or the figures would mean nothing."""
    want = {"ingest": "recorded", "claim": "started", "finish": "finished"}
    for op, inp in scene.inputs.items():
        d = step(scene.state.copy(), inp, now=scene.now, rules=scene.rules)
        if d.reply.code != want[op]:
            raise RuntimeError(f"{op}: expected {want[op]}, got {d.reply.code}: {d.reply.message}")
    d = step(scene.state.copy(), scene.inputs["finish"], now=scene.now, rules=scene.rules)
    kinds = sorted(type(e).__name__ for e in d.effects)
    if kinds != ["PerformAction", "SendCard", "SendCard"]:
        raise RuntimeError(f"finish: the receipt was not applied as expected ({kinds})")


def measure(scene: Scene, iterations: int, warmup: int) -> dict[str, list[int]]:
    """Wall-clock and thread CPU nanoseconds per call; the garbage collector is paused
    while timing (as ``timeit`` does), since the garbage is mostly the bench's own copies.
    """
    text = payload_text()
    wall = time.perf_counter_ns
    cpu = time.thread_time_ns
    decide = step
    times: dict[str, list[int]] = {f"{op}{kind}": [] for op in OPS for kind in ("", "_cpu")}
    gc.collect()
    gc.disable()
    try:
        for i in range(warmup + iterations):
            keep = i >= warmup
            for op, inp in scene.inputs.items():
                st = scene.state.copy()
                c0 = cpu()
                w0 = wall()
                decide(st, inp, now=scene.now, rules=scene.rules)
                w1 = wall()
                c1 = cpu()
                if keep:
                    times[op].append(w1 - w0)
                    times[f"{op}_cpu"].append(c1 - c0)
            c0 = cpu()
            w0 = wall()
            json.loads(text)
            w1 = wall()
            c1 = cpu()
            if keep:
                times["baseline"].append(w1 - w0)
                times["baseline_cpu"].append(c1 - c0)
    finally:
        gc.enable()
    return times


def run(
    *,
    iterations: int = 5000,
    matters: int = 300,
    warmup: int = 500,
    out: Callable[[str], Any] = print,
) -> dict[str, float]:
    """Measure, print, and return p50/p99 (microseconds) and ratios to the baseline."""
    if iterations < 1 or warmup < 0:
        raise SystemExit("--iterations must be at least 1 and --warmup at least 0")
    scene = build_scene(matters)
    check_scene(scene)
    st = scene.state
    open_cards = sum(1 for c in st.cards.values() if c.state == "open")
    running = sum(1 for t in st.turns.values() if t.state == "running")
    out(
        f"decision: kernel.step.step in memory, {iterations} iterations each after "
        f"{warmup} warm-up; state: {len(st.matters)} matters, {len(st.turns)} turns "
        f"({running} running), {len(st.cards)} cards ({open_cards} open), "
        f"{len(st.actions)} actions, {len(st.events)} events"
    )
    times = measure(scene, iterations, warmup)
    size = len(payload_text().encode())
    base50 = statistics.median(times["baseline"]) / 1e3
    base99 = percentile(times["baseline"], 0.99) / 1e3
    figures: dict[str, float] = {}
    labels = {
        "ingest": "Ingest (event into a matter)",
        "claim": "Claim (start a turn)",
        "finish": "Finish (ask+notice+action)",
        "baseline": f"json.loads webhook {size} B",
    }
    for op in OPS:
        p50 = statistics.median(times[op]) / 1e3
        p99 = percentile(times[op], 0.99) / 1e3
        cpu99 = percentile(times[f"{op}_cpu"], 0.99) / 1e3
        figures[f"{op}_p50_us"] = p50
        figures[f"{op}_p99_us"] = p99
        figures[f"{op}_cpu_p99_us"] = cpu99
        if op != "baseline":
            figures[f"{op}_ratio_p50"] = p50 / base50
        out(
            f"  {labels[op]:30s} p50 {p50:8.1f} us  p99 {p99:8.1f} us  (cpu p99 {cpu99:7.1f} us)"
            f"  ratio p50 {p50 / base50:5.2f}  p99 {p99 / base99:5.2f}"
        )
    worst = max(figures[f"{op}_p99_us"] for op in OPS if op != "baseline")
    worst_cpu = max(figures[f"{op}_cpu_p99_us"] for op in OPS if op != "baseline")
    figures["worst_p99_us"] = worst
    figures["worst_cpu_p99_us"] = worst_cpu
    verdict = "met" if worst < 1500 else "NOT met"
    out(
        f"  worst p99 {worst:.1f} us wall, {worst_cpu:.1f} us cpu: target p99 < 1500 us {verdict}"
        f" (load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus; when the"
        " wall p99 far exceeds the cpu p99, the difference is time the thread was not"
        " running)"
    )
    return figures


def summarize(fig: dict[str, float]) -> list[tuple[str, str, str]]:
    """Rows (figure, measured, against the same-run baseline) for ``python -m bench``."""
    base = fig["baseline_p50_us"]
    return [
        (
            f"decision {op} p50 / p99",
            f"{fig[f'{op}_p50_us']:.0f} / {fig[f'{op}_p99_us']:.0f} us"
            f" (cpu p99 {fig[f'{op}_cpu_p99_us']:.0f})",
            f"{fig[f'{op}_ratio_p50']:.1f}x json.loads of the payload ({base:.0f} us)",
        )
        for op in ("ingest", "claim", "finish")
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--matters", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=500)
    args = parser.parse_args(argv)
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus, {platform.platform()}")
    run(iterations=args.iterations, matters=args.matters, warmup=args.warmup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
