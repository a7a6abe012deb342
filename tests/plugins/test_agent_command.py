"""The command adapter runs any program as an argv list, with a clean environment."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from plugins.agents.command import CommandAgent, substitute
from plugins.agents.common import Report, build_env, read_report
from tests.fakes.turns import (
    FAKES_BIN,
    leaks,
    make_request,
    make_turn,
    recorded,
    use_fakes,
    wait_gone,
)


@pytest.fixture(autouse=True)
def _fakes_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    use_fakes(monkeypatch)


def test_placeholders_are_replaced_once_and_never_re_expanded() -> None:
    values = {"prompt": "say {resume} {session}", "session": "S", "resume": "R", "context": "C"}
    argv = substitute(["agent", "{prompt}", "--resume={resume}", "{context}", "{other}"], values)
    assert argv == ["agent", "say {resume} {session}", "--resume=R", "C", "{other}"]


def test_format_syntax_in_a_prompt_is_left_alone() -> None:
    values = {"prompt": "{0.__class__} {prompt!r} %s", "session": "", "resume": "", "context": ""}
    assert substitute(["{prompt}"], values) == ["{0.__class__} {prompt!r} %s"]


def test_two_turn_matter_reports_and_resumes_the_session(tmp_path: Path) -> None:
    agent = CommandAgent()
    turn_dir = make_turn(tmp_path)
    command = ("plain-agent", "{prompt}", "--session={session}", "--resume={resume}", "{context}")
    first = agent.run(make_request(tmp_path, turn_dir, command=command))
    assert first.ok and first.started, first.error
    assert first.session == "plain-t-1"
    assert (first.tokens, first.cost_usd) == (42, 0.5)
    assert '"ask"' in first.final_message

    second_dir = make_turn(tmp_path, turn="t-2")
    req = make_request(tmp_path, second_dir, turn="t-2", resume=first.session, command=command)
    second = agent.run(req)
    assert second.ok and second.session == "plain-t-1"
    assert '"resolve": ["colour"]' in second.final_message
    argvs = [r["argv"][1:] for r in recorded(tmp_path)]
    assert argvs[1] == [
        req.prompt,
        "--session=matter-session-1",
        "--resume=plain-t-1",
        str(second_dir / "context.json"),
    ]
    assert argvs[0][2] == "--resume="


def test_a_prompt_holding_placeholders_reaches_the_program_verbatim(tmp_path: Path) -> None:
    turn_dir = make_turn(tmp_path)
    prompt = "literal {resume} and {context} stay"
    req = make_request(tmp_path, turn_dir, command=("plain-agent", "{prompt}"), prompt=prompt)
    assert CommandAgent().run(req).ok
    assert recorded(tmp_path)[0]["argv"][1:] == [prompt]


def test_a_resumed_program_that_reports_nothing_keeps_its_session(tmp_path: Path) -> None:
    req = make_request(
        tmp_path,
        make_turn(tmp_path),
        command=("python3", "-c", "print('still here')"),
        resume="plain-t-0",
    )
    result = CommandAgent().run(req)
    assert result.ok and result.session == "plain-t-0"


def test_session_on_stderr_is_the_last_resort(tmp_path: Path) -> None:
    req = make_request(
        tmp_path, make_turn(tmp_path), command=("plain-agent",), scenario="stderr-session"
    )
    result = CommandAgent().run(req)
    assert result.ok and result.session == "plain-t-1"
    assert result.tokens is None


def test_a_stale_report_from_an_earlier_attempt_is_not_believed(tmp_path: Path) -> None:
    turn_dir = make_turn(tmp_path)
    (turn_dir / "report.json").write_text(json.dumps({"session": "stale-session"}))
    req = make_request(tmp_path, turn_dir, command=("plain-agent",), scenario="silent")
    result = CommandAgent().run(req)
    assert result.session is None
    assert not result.started and not result.ok
    assert result.exit_code == 3 and result.error is not None and "code 3" in result.error


def test_a_program_that_spoke_then_failed_has_started(tmp_path: Path) -> None:
    req = make_request(
        tmp_path, make_turn(tmp_path), command=("plain-agent",), scenario="crash-after-output"
    )
    result = CommandAgent().run(req)
    assert result.started and not result.ok
    assert result.session == "plain-t-1" and result.exit_code == 1


def test_a_missing_program_never_started(tmp_path: Path) -> None:
    req = make_request(tmp_path, make_turn(tmp_path), command=("no-such-agent-program", "x"))
    result = CommandAgent().run(req)
    assert not result.started and not result.ok
    assert result.error is not None and "no-such-agent-program" in result.error


def test_a_missing_command_is_a_clear_error_not_an_exception(tmp_path: Path) -> None:
    result = CommandAgent().run(make_request(tmp_path, make_turn(tmp_path)))
    assert not result.started and result.error is not None
    assert '"command"' in result.error


def test_command_may_come_from_the_agent_options(tmp_path: Path) -> None:
    req = make_request(tmp_path, make_turn(tmp_path), options={"command": ["plain-agent"]})
    assert CommandAgent().run(req).ok


def test_a_resume_id_that_looks_like_an_option_is_refused(tmp_path: Path) -> None:
    req = make_request(
        tmp_path, make_turn(tmp_path), command=("plain-agent",), resume="--rm-everything"
    )
    result = CommandAgent().run(req)
    assert not result.started and recorded(tmp_path) == []


def test_hung_agent_and_its_children_are_killed_at_the_timeout(tmp_path: Path) -> None:
    req = make_request(
        tmp_path, make_turn(tmp_path), command=("plain-agent",), scenario="hang", timeout_s=1.5
    )
    began = time.monotonic()
    result = CommandAgent().run(req)
    took = time.monotonic() - began
    assert result.timed_out and not result.ok
    assert result.started  # it printed "working..." before hanging
    assert 1.4 < took < 6
    leader, child = (int(p) for p in (tmp_path / "pids").read_text().split())
    assert leader == result.pid
    assert wait_gone([leader, child]) == []


def test_agent_env_has_no_hub_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "AUTOLOOP_GITHUB_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----",
        "AUTOLOOP_GITHUB_WEBHOOK_SECRET": "hook-secret-for-agent-tests",
        "GITHUB_TOKEN": "ghs_secret",
        "GH_TOKEN": "gho_secret",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "SOME_OTHER_PARENT_VARIABLE": "parent-only",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOME", str(tmp_path))
    req = make_request(tmp_path, make_turn(tmp_path), command=("plain-agent",))
    assert CommandAgent().run(req).ok
    env = recorded(tmp_path)[0]["env"]
    assert not set(secrets) & set(env)
    assert not any(v in env.values() for v in secrets.values())
    assert env["HOME"] == str(tmp_path)
    assert env["PATH"].startswith(str(FAKES_BIN))
    for name in ("AUTOLOOP_TURN", "AUTOLOOP_SESSION", "AUTOLOOP_CONTEXT", "AUTOLOOP_DATA"):
        assert env[name] == req.env[name]
    assert env["AUTOLOOP_RESUME"] == ""


def test_pass_env_lets_named_variables_through_but_never_hub_ones(tmp_path: Path) -> None:
    parent = {
        "PATH": "/bin",
        "HTTPS_PROXY": "http://proxy:3128",
        "MY_AGENT_KEY": "k",
        "GITHUB_TOKEN": "t",
        "AUTOLOOP_DB": "db",
        "UNLISTED": "u",
    }
    req = make_request(
        tmp_path,
        make_turn(tmp_path),
        options={"pass_env": ["MY_AGENT_KEY", "GITHUB_TOKEN", "AUTOLOOP_DB"]},
    )
    env = build_env(req, parent=parent)
    assert env["MY_AGENT_KEY"] == "k"
    assert "GITHUB_TOKEN" not in env and "AUTOLOOP_DB" not in env and "UNLISTED" not in env
    assert (env["PATH"], env["HTTPS_PROXY"]) == ("/bin", "http://proxy:3128")


def test_argv_and_env_carry_no_text_from_event_details(tmp_path: Path) -> None:
    req = make_request(
        tmp_path,
        make_turn(tmp_path),
        command=("plain-agent", "{prompt}", "{session}", "{resume}", "{context}"),
    )
    assert CommandAgent().run(req).ok
    run = recorded(tmp_path)[0]
    assert leaks(run["argv"]) == []
    assert leaks(run["env"].values()) == []
    assert leaks([req.prompt]) == []


def test_malformed_reports_are_ignored_field_by_field(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"session": "-x", "tokens": True, "cost_usd": -1}))
    assert read_report(path) == Report(refused_session="'-x'")
    assert read_report(tmp_path / "missing.json") == Report()
    path.write_text("not json")
    assert read_report(path, "noise\nAUTOLOOP_SESSION_ID=abc-1\n").session == "abc-1"
    path.write_text(json.dumps({"session": "s-1", "tokens": 7, "cost_usd": 0.25}))
    report = read_report(path)
    assert (report.session, report.tokens, report.cost_usd) == ("s-1", 7, 0.25)


def test_a_reported_session_that_is_no_session_id_is_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An agent's "--dangerous flag" session was dropped without a trace: its next turn
    started afresh, and nothing said why."""
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"session": "--dangerous flag"}))
    report = read_report(path)
    assert report.session is None and report.refused_session == "'--dangerous flag'"
    path.write_text(json.dumps({"session": "s-1"}))
    assert read_report(path).refused_session == ""


def test_a_report_that_is_no_regular_file_is_ignored_without_blocking(tmp_path: Path) -> None:
    """The agent makes its report file: a FIFO there blocked the worker for ever (the
    agent had exited; its timeout no longer applied)."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert read_report(fifo) == read_report(tmp_path / "missing.json")
    assert time.monotonic() - started < 2
    real = tmp_path / "real.json"
    real.write_text(json.dumps({"session": "s-1", "tokens": 7}))
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert read_report(link).session is None  # not through a link (to the hub's files)


@pytest.mark.parametrize(
    ("field", "value"), [("cost_usd", 1e308), ("cost_usd", 100_001), ("tokens", 10**18)]
)
def test_reported_usage_beyond_belief_is_ignored(tmp_path: Path, field: str, value: float) -> None:
    """1e308 dollars made the day's total infinite (status --json printed Infinity, and
    every rule's daily cap was reached)."""
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"session": "s-1", field: value}))
    report = read_report(path)
    assert report.session == "s-1" and getattr(report, field) is None


def test_the_fakes_are_executables(tmp_path: Path) -> None:
    for name in ("claude", "codex", "plain-agent"):
        assert os.access(FAKES_BIN / name, os.X_OK), name


@pytest.mark.parametrize(
    ("stderr", "reason"),
    [
        ("", "nothing on stderr (its output: {dir}/output.log)"),
        ("starting\nTraceback (most recent call last):\nValueError: no such order\n\n",
         "ValueError: no such order"),
    ],
)  # fmt: skip
def test_a_failed_exit_gives_the_last_line_it_said_on_stderr(
    tmp_path: Path, stderr: str, reason: str
) -> None:
    """An agent that printed its receipt and exited 1 failed 'with code 1: ```' (the
    last line of its stdout, the receipt's closing fence)."""
    script = tmp_path / "agent.py"
    script.write_text(
        "import sys\n"
        "print('```autoloop')\nprint('{}')\nprint('```')\n"
        f"sys.stderr.write({stderr!r})\n"
        "sys.exit(1)\n"
    )
    req = make_request(tmp_path, make_turn(tmp_path), command=(sys.executable, str(script)))
    result = CommandAgent().run(req)
    assert not result.ok and result.exit_code == 1
    want = reason.format(dir=req.turn_dir)
    assert result.error == f"the agent exited with code 1: {want}"
