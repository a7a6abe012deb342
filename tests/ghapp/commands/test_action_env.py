"""What ``autoloop action`` reads from a runner's environment, checked before anything runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ghapp.commands.action_env import (
    ActionError,
    prepare_home,
    read_only_reason,
    read_payload,
    runner_env,
)

RUNNER = {
    "GITHUB_EVENT_NAME": "issues",
    "GITHUB_EVENT_PATH": "event.json",
    "GITHUB_REPOSITORY": "acme/web",
    "GITHUB_RUN_ID": "42",
}


def test_a_run_is_one_event_whatever_the_attempt() -> None:
    first = runner_env({**RUNNER, "GITHUB_RUN_ATTEMPT": "1"})
    again = runner_env({**RUNNER, "GITHUB_RUN_ATTEMPT": "3"})
    assert first.delivery == again.delivery == "action-42-issues"
    assert again.run_attempt == 3


def test_defaults_are_github_com_mode_auto_and_the_home_of_the_design() -> None:
    renv = runner_env(RUNNER)
    assert renv.api_url == "https://api.github.com"
    assert renv.run_url == "https://github.com/acme/web/actions/runs/42"
    assert renv.mode == "auto"
    assert renv.home == Path.home() / ".autoloop"
    assert renv.output is None and renv.summary is None


def test_an_enterprise_server_is_reached_at_its_api_url() -> None:
    renv = runner_env(
        {
            **RUNNER,
            "GITHUB_API_URL": "https://ghe.example/api/v3/",
            "GITHUB_SERVER_URL": "https://ghe.example",
        }
    )
    assert renv.api_url == "https://ghe.example/api/v3"
    assert renv.run_url.startswith("https://ghe.example/acme/web/")


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"GITHUB_RUN_ID": ""}, "GITHUB_RUN_ID is not set"),
        ({"GITHUB_RUN_ID": "x1"}, "is not a run id"),
        ({"GITHUB_REPOSITORY": "web"}, "is not 'owner/name'"),
        ({"GITHUB_EVENT_NAME": "Issues;rm"}, "is not an event name"),
        ({"AUTOLOOP_MODE": "ship"}, "give one of auto, triage, deliver"),
    ],
)
def test_a_bad_environment_is_one_line_saying_what_to_do(change: dict[str, str], says: str) -> None:
    with pytest.raises(ActionError) as caught:
        runner_env({**RUNNER, **change})
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.code == 2


def test_rules_are_found_in_the_checkout(tmp_path: Path) -> None:
    renv = runner_env({**RUNNER, "GITHUB_WORKSPACE": str(tmp_path), "AUTOLOOP_RULES": "r.json"})
    assert renv.rules == tmp_path / "r.json"


def test_the_rules_are_copied_into_the_home_each_run(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[rules]]\nname = "x"\nagent = "a"\nevery = "0 9 * * *"\n[agents.a]\nuse = "demo"\n'
    )
    home = tmp_path / "home"
    (home).mkdir()
    (home / "rules.json").write_text("{}")
    renv = runner_env({**RUNNER, "AUTOLOOP_HOME": str(home), "AUTOLOOP_RULES": str(rules)})
    prepare_home(renv)
    assert (home / "rules.toml").read_text() == rules.read_text()
    assert not (home / "rules.json").exists()
    assert (home / "master.key").exists()


def test_a_home_that_cannot_be_made_names_the_input(tmp_path: Path) -> None:
    """`/proc/nope` failed with "FileNotFoundError: ... '/proc/nope'" and exit 1."""
    renv = runner_env({**RUNNER, "AUTOLOOP_HOME": "/proc/autoloop-cannot-be-here"})
    with pytest.raises(ActionError) as refused:
        prepare_home(renv)
    assert refused.value.code == 2
    assert str(refused.value).startswith(
        "AUTOLOOP_HOME (the 'home' input): cannot make the folder /proc/autoloop-cannot-be-here: "
    )


def test_no_rules_anywhere_is_refused(tmp_path: Path) -> None:
    renv = runner_env({**RUNNER, "AUTOLOOP_HOME": str(tmp_path / "home")})
    with pytest.raises(ActionError, match="give the 'rules' input"):
        prepare_home(renv)


def test_an_unreadable_event_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ActionError, match="holds no JSON object"):
        read_payload(tmp_path / "list.json")
    with pytest.raises(ActionError, match="cannot read"):
        read_payload(tmp_path / "missing.json")


def pull(head: str | None) -> dict[str, Any]:
    repo = {"full_name": head} if head else None
    return {"pull_request": {"head": {"repo": repo}, "base": {"repo": {"full_name": "acme/web"}}}}


def by_dependabot() -> dict[str, Any]:
    payload = pull("acme/web")
    payload["pull_request"]["user"] = {"login": "dependabot[bot]"}
    return payload


def test_a_review_of_a_fork_is_told_what_moves_it_not_a_target_event_that_does_not_exist() -> None:
    renv = runner_env({**RUNNER, "GITHUB_EVENT_NAME": "pull_request_review"})
    said = read_only_reason(renv, pull("fork/web"))
    assert "the next scheduled run (or a pull_request_target run) moves its delivery" in said
    assert "run on pull_request_target to act on it" not in said


@pytest.mark.parametrize(
    ("event", "actor", "payload", "read_only"),
    [
        ("pull_request", "octocat", pull("acme/web"), False),
        ("pull_request", "octocat", pull("fork/web"), True),
        ("pull_request", "octocat", pull(None), True),  # the fork was deleted
        ("pull_request_review", "octocat", pull("fork/web"), True),
        ("pull_request_target", "octocat", pull("fork/web"), False),
        ("push", "dependabot[bot]", {}, True),
        ("pull_request", "dependabot[bot]", pull("acme/web"), True),
        ("issues", "dependabot[bot]", {}, False),
        # GitHub's documentation: Dependabot's runs of these get a read-only token too,
        ("deployment_status", "dependabot[bot]", {}, True),
        ("create", "dependabot[bot]", {}, True),
        # and of pull_request_target when Dependabot opened the pull request (it failed
        # the job with a 403, or a missing App key, where it was to be told).
        ("pull_request_target", "dependabot[bot]", by_dependabot(), True),
        ("pull_request_target", "dependabot[bot]", pull("acme/web"), False),
    ],
)
def test_read_only_tokens_are_told_apart(
    event: str, actor: str, payload: dict[str, Any], read_only: bool
) -> None:
    renv = runner_env({**RUNNER, "GITHUB_EVENT_NAME": event, "GITHUB_ACTOR": actor})
    assert bool(read_only_reason(renv, json.loads(json.dumps(payload)))) is read_only
