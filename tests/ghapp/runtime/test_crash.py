"""The crash test hook: ``AUTOLOOP_CRASH_AT=POINT:N`` kills the process at the Nth passage."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ghapp.commands.home import init_home
from ghapp.runtime import crash
from tests import paths


@pytest.fixture(autouse=True)
def disarmed() -> Iterator[None]:
    yield
    crash.arm(None)


def test_a_point_and_a_passage_are_parsed() -> None:
    assert crash.parse("after_ack:3") == ("after_ack", 3)
    assert crash.parse(" before_insert:1 ") == ("before_insert", 1)


@pytest.mark.parametrize(
    "spec", ["", "after_ack", "after_ack:", "after_ack:0", "after_ack:-1", "nowhere:2", "x:y"]
)
def test_a_bad_value_is_one_line_naming_the_points(spec: str) -> None:
    with pytest.raises(ValueError, match="not valid: use POINT:N") as exc:
        crash.parse(spec)
    assert "\n" not in str(exc.value)
    assert all(point in str(exc.value) for point in crash.POINTS)


def test_unset_the_points_do_nothing() -> None:
    crash.arm(None)
    assert not crash.armed()
    for point in crash.POINTS:
        crash.reach(point)  # still here
    crash.arm("")
    assert not crash.armed()


def test_armed_the_process_is_killed_at_the_nth_passage_of_its_point() -> None:
    code = (
        "import sys\n"
        "from ghapp.runtime import crash\n"
        "crash.arm('after_insert_before_commit:3')\n"
        "for i in range(1, 10):\n"
        "    crash.reach('before_insert')\n"
        "    crash.reach('after_insert_before_commit')\n"
        "    print(i, flush=True)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=paths.ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout.split() == ["1", "2"]
    assert proc.stderr == (
        "autoloop: AUTOLOOP_CRASH_AT: killed at after_insert_before_commit (passage 3)\n"
    )


def test_serve_refuses_a_bad_value_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "h"
    init_home(home)
    env = {**os.environ, "AUTOLOOP_HOME": str(home), crash.ENV: "after_ack:zero"}
    proc = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "serve", "--port", "0"],
        cwd=paths.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("autoloop serve: AUTOLOOP_CRASH_AT='after_ack:zero' is not valid")
