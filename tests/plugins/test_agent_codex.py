"""The codex adapter drives ``codex exec --json`` and folds its JSON Lines events."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from plugins.agents.codex import CodexAgent, read_events
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


def test_two_turn_matter_resumes_the_thread_codex_started(tmp_path: Path) -> None:
    agent = CodexAgent()
    first = agent.run(make_request(tmp_path, make_turn(tmp_path)))
    assert first.ok and first.started, first.error
    assert first.session is not None
    assert '"ask"' in first.final_message  # the last agent_message, not the early note
    assert "early note" not in first.final_message
    assert first.tokens == 24763 + 122 and first.cost_usd is None

    turn2 = make_turn(tmp_path, turn="t-2")
    req2 = make_request(tmp_path, turn2, turn="t-2", resume=first.session)
    second = agent.run(req2)
    assert second.ok and second.session == first.session
    assert '"resolve": ["colour"]' in second.final_message
    argv1, argv2 = (r["argv"][1:] for r in recorded(tmp_path))
    assert "resume" not in argv1
    at = argv2.index("resume")
    assert argv2[at + 1] == first.session
    assert argv2[at + 2 :] == ["--", req2.prompt]
    # exec's own options come before the subcommand
    assert argv2.index("--sandbox") < at and argv2.index("--json") < at


def test_read_access_is_the_read_only_sandbox(tmp_path: Path) -> None:
    assert CodexAgent().run(make_request(tmp_path, make_turn(tmp_path), access="read")).ok
    argv = recorded(tmp_path)[0]["argv"]
    assert argv[argv.index("--sandbox") + 1] == "read-only"
    assert "--full-auto" not in argv
    assert not any("dangerously" in a for a in argv)


@pytest.mark.parametrize(
    ("access", "sandbox"), [("edit", "workspace-write"), ("full", "danger-full-access")]
)
def test_edit_and_full_access_map_to_their_sandboxes(
    tmp_path: Path, access: str, sandbox: str
) -> None:
    req = make_request(tmp_path, make_turn(tmp_path), access=access)  # type: ignore[arg-type]
    argv = CodexAgent().build_argv(req)
    assert argv[argv.index("--sandbox") + 1] == sandbox
    assert argv[:3] == ["codex", "exec", "--json"]
    assert "--skip-git-repo-check" in argv


def test_model_and_binary_come_from_the_options(tmp_path: Path) -> None:
    req = make_request(
        tmp_path, make_turn(tmp_path), options={"model": "gpt-x", "binary": "/opt/codex"}
    )
    argv = CodexAgent().build_argv(req)
    assert argv[0] == "/opt/codex" and argv[argv.index("--model") + 1] == "gpt-x"


def test_a_vanished_thread_reports_not_started_so_the_turn_starts_fresh(tmp_path: Path) -> None:
    req = make_request(tmp_path, make_turn(tmp_path), resume="0199a213-81c0-7800-8aa1-bbab2a035a53")
    result = CodexAgent().run(req)
    assert not result.started and not result.ok and result.session is None
    assert result.error is not None and "fresh" in result.error


def test_a_failed_turn_is_started_but_not_ok(tmp_path: Path) -> None:
    result = CodexAgent().run(make_request(tmp_path, make_turn(tmp_path), scenario="error"))
    assert result.started and not result.ok and result.session is not None
    assert result.error is not None and "stream disconnected" in result.error


def test_a_missing_binary_never_started(tmp_path: Path) -> None:
    req = make_request(tmp_path, make_turn(tmp_path), options={"binary": "no-such-codex"})
    result = CodexAgent().run(req)
    assert not result.started and result.error is not None and "no-such-codex" in result.error


def test_hung_codex_and_its_children_are_killed_at_the_timeout(tmp_path: Path) -> None:
    req = make_request(tmp_path, make_turn(tmp_path), scenario="hang", timeout_s=1.5)
    began = time.monotonic()
    result = CodexAgent().run(req)
    assert time.monotonic() - began < 6
    assert result.timed_out and not result.ok
    assert result.started and result.session is not None  # thread.started came first
    leader, child = (int(p) for p in (tmp_path / "pids").read_text().split())
    assert wait_gone([leader, child]) == []


def test_codex_env_has_no_hub_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOLOOP_GITHUB_PRIVATE_KEY", "-----BEGIN PRIVATE KEY-----")
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_hub_token")
    monkeypatch.setenv("GH_TOKEN", "gho_hub_token")
    assert CodexAgent().run(make_request(tmp_path, make_turn(tmp_path))).ok
    env = recorded(tmp_path)[0]["env"]
    assert not {"AUTOLOOP_GITHUB_PRIVATE_KEY", "GITHUB_TOKEN", "GH_TOKEN"} & set(env)


def test_argv_carries_no_text_from_event_details(tmp_path: Path) -> None:
    assert CodexAgent().run(make_request(tmp_path, make_turn(tmp_path))).ok
    run = recorded(tmp_path)[0]
    assert leaks(run["argv"]) == [] and leaks(run["env"].values()) == []


def test_a_prompt_that_reads_like_a_subcommand_stays_a_prompt(tmp_path: Path) -> None:
    req = make_request(tmp_path, make_turn(tmp_path), prompt="resume")
    assert CodexAgent().run(req).ok
    assert recorded(tmp_path)[0]["argv"][-2:] == ["--", "resume"]


def test_events_fold_ignores_noise_and_sums_turn_usage() -> None:
    lines = [
        "not json",
        json.dumps({"type": "thread.started", "thread_id": "th-1"}),
        json.dumps({"type": "item.completed", "item": {"type": "agent_message", "text": "a"}}),
        json.dumps({"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}}),
        json.dumps({"type": "item.completed", "item": {"type": "reasoning", "text": "r"}}),
        json.dumps({"type": "turn.completed", "usage": {"input_tokens": 5, "output_tokens": 1}}),
        json.dumps([1, 2]),
    ]
    seen = read_events("\n".join(lines))
    assert (seen.thread_id, seen.final, seen.tokens, seen.errors) == ("th-1", "a", 18, [])
