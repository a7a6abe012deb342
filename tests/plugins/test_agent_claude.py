"""The claude adapter drives Claude Code in print mode and reads its JSON result."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from plugins.agents.claude import ClaudeAgent, parse_result
from tests.fakes.turns import (
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


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_two_turn_matter_resumes_with_the_session_claude_reported(tmp_path: Path) -> None:
    agent = ClaudeAgent()
    first = agent.run(make_request(tmp_path, make_turn(tmp_path)))
    assert first.ok and first.started, first.error
    assert first.session is not None
    assert '"ask"' in first.final_message and first.final_message.rstrip().endswith("```")
    assert first.cost_usd == pytest.approx(0.0123)
    assert first.tokens == 100 + 20 + 30 + 50

    turn2 = make_turn(tmp_path, turn="t-2")
    second = agent.run(make_request(tmp_path, turn2, turn="t-2", resume=first.session))
    assert second.ok and second.session == first.session
    assert '"resolve": ["colour"]' in second.final_message
    argv1, argv2 = (r["argv"] for r in recorded(tmp_path))
    assert _value(argv1, "--session-id") == first.session
    assert "--resume" not in argv1
    assert _value(argv2, "--resume") == first.session
    assert "--session-id" not in argv2


def test_argv_is_print_mode_with_json_and_the_prompt_right_after_p(tmp_path: Path) -> None:
    req = make_request(tmp_path, make_turn(tmp_path), budget_usd=2, options={"model": "sonnet"})
    argv = ClaudeAgent().build_argv(req)
    assert argv[:5] == ["claude", "-p", req.prompt, "--output-format", "json"]
    assert _value(argv, "--max-budget-usd") == "2"
    assert _value(argv, "--model") == "sonnet"
    uuid.UUID(_value(argv, "--session-id"))


def test_read_access_is_plan_mode_with_read_only_tools(tmp_path: Path) -> None:
    assert ClaudeAgent().run(make_request(tmp_path, make_turn(tmp_path), access="read")).ok
    argv = recorded(tmp_path)[0]["argv"]
    assert _value(argv, "--permission-mode") == "plan"
    allowed = set(_value(argv, "--allowedTools").split(","))
    assert allowed <= {"Read", "Grep", "Glob", "LS"} and "Read" in allowed
    assert {"Bash", "Edit", "Write"} <= set(_value(argv, "--disallowedTools").split(","))
    assert not any("dangerously" in a for a in argv)


def test_edit_and_full_access_map_to_their_permission_modes(tmp_path: Path) -> None:
    agent = ClaudeAgent()
    edit = agent.build_argv(make_request(tmp_path, make_turn(tmp_path), access="edit"))
    assert _value(edit, "--permission-mode") == "acceptEdits"
    assert {"Edit", "Write", "Read"} <= set(_value(edit, "--allowedTools").split(","))
    assert not any("dangerously" in a for a in edit)
    full = agent.build_argv(make_request(tmp_path, make_turn(tmp_path), access="full"))
    assert _value(full, "--permission-mode") == "bypassPermissions"


def test_a_vanished_session_reports_not_started_so_the_turn_starts_fresh(tmp_path: Path) -> None:
    req = make_request(tmp_path, make_turn(tmp_path), resume="0b7c5e2a-aaaa-4bbb-8ccc-000000000001")
    result = ClaudeAgent().run(req)
    assert not result.started and not result.ok
    assert result.session is None
    assert result.error is not None and "fresh" in result.error


def test_an_error_result_is_started_but_not_ok(tmp_path: Path) -> None:
    result = ClaudeAgent().run(make_request(tmp_path, make_turn(tmp_path), scenario="error"))
    assert result.started and not result.ok
    assert result.session is not None and result.exit_code == 1
    assert result.error is not None and "API Error: 500" in result.error


def test_the_budget_stop_says_so(tmp_path: Path) -> None:
    req = make_request(tmp_path, make_turn(tmp_path), scenario="budget", budget_usd=2)
    result = ClaudeAgent().run(req)
    assert not result.ok and result.cost_usd == pytest.approx(2.01)
    assert result.error == "Claude Code stopped at the rule's budget ($2)"


def test_non_json_output_is_a_clear_failure(tmp_path: Path) -> None:
    result = ClaudeAgent().run(make_request(tmp_path, make_turn(tmp_path), scenario="garbage"))
    assert not result.ok
    assert result.error is not None
    assert "did not print its JSON result" in result.error and "Invalid API key" in result.error


def test_a_missing_binary_never_started(tmp_path: Path) -> None:
    req = make_request(tmp_path, make_turn(tmp_path), options={"binary": "no-such-claude"})
    result = ClaudeAgent().run(req)
    assert not result.started and result.error is not None and "no-such-claude" in result.error


def test_hung_claude_and_its_children_are_killed_at_the_timeout(tmp_path: Path) -> None:
    req = make_request(tmp_path, make_turn(tmp_path), scenario="hang", timeout_s=1.5)
    began = time.monotonic()
    result = ClaudeAgent().run(req)
    assert time.monotonic() - began < 6
    assert result.timed_out and not result.ok
    # The session it was told to use may hold work: the retry continues it.
    assert result.started and result.session == _value(
        recorded(tmp_path)[0]["argv"], "--session-id"
    )
    leader, child = (int(p) for p in (tmp_path / "pids").read_text().split())
    assert wait_gone([leader, child]) == []


def test_claude_env_has_no_hub_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOLOOP_GITHUB_PRIVATE_KEY", "-----BEGIN PRIVATE KEY-----")
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_hub_token")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "agent-own-key")
    assert ClaudeAgent().run(make_request(tmp_path, make_turn(tmp_path))).ok
    env = recorded(tmp_path)[0]["env"]
    assert "AUTOLOOP_GITHUB_PRIVATE_KEY" not in env and "GITHUB_TOKEN" not in env
    assert env["ANTHROPIC_API_KEY"] == "agent-own-key"  # the agent's own key, not the hub's


def test_argv_carries_no_text_from_event_details(tmp_path: Path) -> None:
    assert ClaudeAgent().run(make_request(tmp_path, make_turn(tmp_path))).ok
    run = recorded(tmp_path)[0]
    assert leaks(run["argv"]) == [] and leaks(run["env"].values()) == []


def test_a_prompt_starting_with_a_dash_is_not_taken_for_an_option(tmp_path: Path) -> None:
    req = make_request(tmp_path, make_turn(tmp_path), prompt="--help me triage")
    assert ClaudeAgent().run(req).ok
    assert recorded(tmp_path)[0]["argv"][2] == " --help me triage"


def test_parse_result_tolerates_a_trailing_newline_and_a_preamble() -> None:
    obj = {"type": "result", "subtype": "success", "result": "hi", "session_id": "s"}
    assert parse_result(json.dumps(obj) + "\n") == obj
    assert parse_result("warning: something\n" + json.dumps(obj)) == obj
    assert parse_result("not json at all") is None
    assert parse_result("") is None


def test_a_final_message_quoting_the_missing_session_text_is_still_a_success(
    tmp_path: Path,
) -> None:
    fake = tmp_path / "bin" / "claude"
    fake.parent.mkdir()
    reply = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "The log said: No conversation found with session ID: x",
        "session_id": "11111111-2222-4333-8444-555555555555",
    }
    fake.write_text(f"#!/bin/sh\necho '{json.dumps(reply)}'\n")
    fake.chmod(0o755)
    req = make_request(tmp_path, make_turn(tmp_path), options={"binary": str(fake)})
    result = ClaudeAgent().run(req)
    assert result.ok and result.started
    assert result.session == reply["session_id"]
