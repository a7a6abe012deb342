"""`autoloop demo` runs the whole product offline, end to end, as a new user would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests import paths
from tests.terminal import as_from_a_terminal, signal_state

ROOT = paths.ROOT


def test_demo_runs_to_the_end_in_under_a_minute(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "demo", "--home", str(tmp_path / "demo")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    elapsed = time.monotonic() - started
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert elapsed < 60
    assert "the agent asks, and its turn ends" in out
    assert "Issue sandbox/demo#1, opened just now." in out
    assert "only people with write access" in out  # the read-only answer was refused
    assert "resumes its session" in out
    assert "github.comment -> done" in out and "github.label -> done" in out
    assert "issue #1 now has labels ['bug']" in out
    assert "autoloop why t2" in out and "outcome: ok" in out
    # each of the app's writes happened once: no path repeats for the action comment
    posts = [
        line for line in out.splitlines() if "POST /repos/sandbox/demo/issues/1/labels" in line
    ]
    assert len(posts) == 1
    # the deliver story: every stage of the pipeline record, one merge
    stages = [line.split()[1].rstrip(":") for line in out.splitlines() if "   stage " in line]
    assert stages == [
        "review",
        "ready",
        "checks",
        "merge",
        "deployment",
        "live_version",
        "delivered",
    ], out
    assert "PR #2 is delivered" in out
    assert "merges: 1" in out
    assert "reviews: 1" in out  # the demo agent reviewed the PR once, as the bot
    assert "the bot's review (COMMENTED): Reviewed 1 file: feature.py (+1 -0)." in out
    assert "check run autoloop/deliver: 1 created" in out
    assert "sticky progress comment: 1 created" in out
    # the commands it prints run as printed (they name the demo's home: without it, they
    # read the user's own, or none)
    home = str(tmp_path / "demo")
    (hint,) = [line for line in out.splitlines() if "its story, stage by stage:" in line]
    assert hint.split("stage by stage: ")[1] == f"AUTOLOOP_HOME={home} autoloop why sandbox/demo#2"
    assert f"explore it yourself: AUTOLOOP_HOME={home} autoloop status" in out
    why = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "why", "sandbox/demo#2"],
        cwd=ROOT,
        env={**env, "AUTOLOOP_HOME": home},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert why.returncode == 0 and "delivered" in why.stdout, why.stdout + why.stderr


def test_demo_json_is_one_object_with_both_stories(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    proc = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "demo", "--json", "--only", "deliver"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout)  # the whole of stdout: no story lines around it
    assert summary["stories"] == ["deliver"] and "triage" not in summary
    deliver = summary["deliver"]
    assert deliver["stage"] == "delivered" and deliver["stages"][-1] == "delivered"
    assert (deliver["merges"], deliver["reviews"]) == (1, 1)
    assert deliver["check_runs"]["created"] == 1 and deliver["comments"]["created"] == 1
    assert Path(summary["home"]).is_dir()


def test_try_json_needs_an_answer_and_then_prints_the_trail(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")},
        "AUTOLOOP_HOME": str(tmp_path / "home"),
    }
    cmd = [sys.executable, "-m", "ghapp.commands.cli", "try", "--json"]
    refused = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    why = "--json needs --answer N: there is no one to ask on a terminal"
    assert refused.returncode == 2
    assert json.loads(refused.stdout) == {"error": why, "exit": 2}  # --json: JSON, even so
    assert refused.stderr.strip() == f"autoloop: {why}"
    proc = subprocess.run(
        [*cmd, "--answer", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trail = json.loads(proc.stdout)
    assert trail["answer"] == 2 and trail["card"]["options"][1] == "green"
    assert trail["notices"] == ["Painted it green"]
    first, second = trail["turns"]
    assert second["resume"] == first["agent_session"]  # the answer resumed its session


def test_ctrl_c_during_the_demo_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Ctrl-C in the demo (or in doctor, or serve while it starts) printed a traceback of
    30 to 40 lines: the built-in commands' one line did not cover these."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    with subprocess.Popen(
        [sys.executable, "-m", "ghapp.commands.cli", "demo", "--home", str(tmp_path / "demo")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,  # noqa: PLW1509  # (no threads start before exec)
    ) as proc:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # it runs: the sandbox comes up next
        assert first.startswith("autoloop demo: everything runs on this machine"), first
        state = signal_state(proc.pid)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, f"{state}\n{out}{err}"
    assert err == "autoloop demo: interrupted\n", err
