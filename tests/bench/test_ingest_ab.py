"""The A/B ingest bench runs two trees (here: this one twice, under two log levels) and
reports both; a folder that is not a source tree is one line and exit 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import ingest_ab
from tests import paths


def test_ab_runs_both_sides_in_alternating_rounds_and_reports_each(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = str(paths.ROOT)
    argv = [root, root, "--rounds", "2", "--seconds", "0.3", "--concurrency", "4"]
    assert ingest_ab.main([*argv, "--env-b", "AUTOLOOP_LOG_LEVEL=WARNING"]) == 0
    out = capsys.readouterr().out
    assert re.findall(r"round (\d) ([AB]):", out) == [
        ("1", "A"),
        ("1", "B"),
        ("2", "B"),
        ("2", "A"),
    ]
    for side in ("A", "B"):
        found = re.search(rf"^{side} .*: (\d+) deliveries/s, cpu (\d+) us", out, re.M)
        assert found is not None, out
        assert int(found.group(1)) > 0 and int(found.group(2)) > 0
    assert "(AUTOLOOP_LOG_LEVEL=WARNING)" in out


def test_ab_refuses_a_folder_that_is_not_a_source_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ingest_ab.main([str(tmp_path), str(paths.ROOT)]) == 2
    assert "is not a source tree of this project" in capsys.readouterr().err


@pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(),
    reason="--threads reads each thread's CPU time from /proc (Linux only)",
)
def test_ab_threads_reports_the_cpu_of_each_named_thread(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = str(paths.ROOT)
    argv = [root, root, "--rounds", "1", "--seconds", "0.5", "--concurrency", "4", "--threads"]
    assert ingest_ab.main(argv) == 0
    out = capsys.readouterr().out
    for side in ("A", "B"):
        block = out.split(f"\n{side} ", 1)[1].split("\nB ", 1)[0]  # (A's ends where B's begins)
        rows = dict(re.findall(r"thread (\S+) +([\d.]+) us a delivery in the window", block))
        # the event loop and the inbox's writer, each under its own name, did work
        assert float(rows["main"]) > 0 and float(rows["inbox-writer"]) > 0, out
        assert "python" not in rows, out  # every thread but the main one named


def test_ab_rate_sends_a_paced_stream_of_that_many_a_second(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = str(paths.ROOT)
    argv = [root, root, "--rounds", "1", "--seconds", "1", "--rate", "100"]
    assert ingest_ab.main(argv) == 0
    out = capsys.readouterr().out
    for side in ("A", "B"):
        found = re.search(rf"^{side} .*: (\d+) deliveries/s", out, re.M)
        assert found is not None, out
        assert 80 <= int(found.group(1)) <= 110, out  # paced, not as fast as it can
    assert ingest_ab.main([root, root, "--rate", "-1"]) == 2
    assert "--rate >= 0" in capsys.readouterr().err
