"""Each benchmark runs end to end at tiny sizes and produces its figures.

Timings are not asserted (performance is measured by running the benches, not by
tests); these tests check that every figure is there and is a real measurement.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench import __main__ as runner
from bench import decision, ledger
from bench.stats import percentile


def assert_measured(figures: dict[str, float], keys: set[str]) -> None:
    missing = keys - set(figures)
    assert not missing, f"figures missing: {sorted(missing)}"
    for key in keys:
        value = figures[key]
        assert math.isfinite(value) and value > 0, f"{key} = {value}"


def test_the_one_percentile_takes_the_nearest_rank() -> None:
    values = list(range(100, 0, -1))
    assert (percentile(values, 0.5), percentile(values, 0.99), percentile(values, 1)) == (
        51.0,  # rank round(49.5) = 50 of 0..99
        99.0,
        100.0,
    )
    assert percentile([7], 0.99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_ledger_bench_reports_append_rates_and_the_backlog_burst(tmp_path: Path) -> None:
    lines: list[str] = []
    figures = ledger.run(
        events=12,
        rounds=2,
        backlog=6,
        burst=4,
        subjects=3,
        group=4,
        folder=tmp_path,
        out=lines.append,
    )
    assert_measured(
        figures,
        {
            "ledger_eps",
            "raw_eps",
            "ratio",
            "ledger_p50_us",
            "ledger_p99_us",
            "raw_p50_us",
            "ledger_cpu_us",
            "raw_cpu_us",
            "group_ledger_eps",
            "group_raw_eps",
            "group_ratio",
            "backlog_eps",
            "fresh_eps",
            "backlog_ratio",
            "backlog_matter_bytes",
            "fresh_matter_bytes",
            "backlog_waiting",
            "fresh_waiting",
        },
    )
    assert figures["ratio"] == pytest.approx(figures["ledger_eps"] / figures["raw_eps"])
    # the backlog matter really holds more waiting events than the fresh one, and its
    # record does not grow with them (they are rows of their own)
    assert figures["backlog_waiting"] > figures["fresh_waiting"]
    assert figures["backlog_matter_bytes"] == figures["fresh_matter_bytes"]
    text = "\n".join(lines)
    assert "synchronous=FULL" in text and "ratio ledger/raw" in text
    assert list(tmp_path.iterdir()) == [], "the bench leaves its temporary files behind"


@pytest.mark.parametrize("group", [1, 3])
def test_ledger_bench_inserts_exactly_the_rows_the_ledger_stored(
    tmp_path: Path, group: int
) -> None:
    rules = ledger.bench_rules()
    events = ledger.events_for("ev", 5, [1, 2])
    rows = ledger.expected_rows(events, rules, group)
    assert [[r[1] for r in per] for per in rows] == [["EventRecorded"]] * 5
    assert len({per[0][3] for per in rows}) == 5  # one unique key per event
    led, raw = ledger.round_sqlite(tmp_path, events, rules, rows, group)  # checks the rows
    assert led.events == raw.events == 5
    assert len(led.wall) == len(raw.wall) == -(-5 // group)  # one commit per group
    with pytest.raises(RuntimeError, match="other rows"):
        ledger.round_sqlite(tmp_path / "again", events, rules, [*rows[:-1], []], group)


def test_decision_bench_reports_percentiles_for_each_input_and_the_baseline() -> None:
    lines: list[str] = []
    figures = decision.run(iterations=20, matters=12, warmup=2, out=lines.append)
    keys = {
        f"{op}_{fig}"
        for op in ("ingest", "claim", "finish", "baseline")
        for fig in ("p50_us", "p99_us", "cpu_p99_us")
    }
    keys |= {"ingest_ratio_p50", "claim_ratio_p50", "finish_ratio_p50", "worst_p99_us"}
    assert_measured(figures, keys)
    for op in ("ingest", "claim", "finish"):
        assert figures[f"{op}_p99_us"] >= figures[f"{op}_p50_us"]
    assert "target p99 < 1500 us" in "\n".join(lines)


def test_decision_bench_times_inputs_that_do_their_real_work() -> None:
    scene = decision.build_scene(12)
    decision.check_scene(scene)  # raises if an input is refused or the receipt not applied
    assert len(scene.state.cards) == 12  # six finished turns, an ask and a notice each


def test_bench_runner_prints_a_summary_of_every_bench_it_ran(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert runner.main(["--quick", "--only", "decision,ledger"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("machine: ")
    assert "sqlite" in out.splitlines()[0]
    summary = out.split("\nsummary ", 1)[1]
    for label in ("decision finish", "ledger append, SQLite FULL", "1 matter w/ backlog"):
        assert label in summary


def test_bench_runner_refuses_an_unknown_bench_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        runner.main(["--only", "nope"])
    assert exc.value.code == 2
    assert "unknown bench nope" in capsys.readouterr().err


def test_bench_runner_runs_a_script_bench_with_only_its_own_arguments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert runner.main(["--quick", "--only", "agent_spawn"]) == 0
    out = capsys.readouterr().out
    assert "(5 runs each)" in out  # the --quick arguments reached the script, not ours
    assert "agent_spawn  ran" in out.split("\nsummary ", 1)[1]


def test_bench_runner_skips_a_bench_that_is_not_in_the_checkout(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(runner.OTHERS, "not_here", ([], []))
    assert runner.main(["--only", "not_here"]) == 0
    out = capsys.readouterr().out
    assert "not_here: skipped, bench/not_here.py is not in this checkout" in out
    assert "not_here  skipped" in out.split("\nsummary ", 1)[1]
