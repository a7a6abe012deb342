"""What the Action's tests need of the fake: ``GET /user``, a workflow's ``GITHUB_TOKEN``
(``actions_token``) and an event's payload as a runner's event file."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from fakegithub.auth import NOT_FOR_INTEGRATION
from fakegithub.server import SandboxHandle, running_sandbox

REPO = "/repos/sandbox/demo"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxHandle]:
    with running_sandbox() as handle:
        yield handle


def client(sandbox: SandboxHandle, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"token {token}"} if token else {}
    return httpx.Client(base_url=sandbox.api_url, headers=headers, timeout=10)


def test_a_personal_token_answers_who_it_acts_as(sandbox: SandboxHandle) -> None:
    with client(sandbox, sandbox.world.user_token("reader")) as gh:
        answer = gh.get("/user")
    assert answer.status_code == 200
    assert answer.json()["login"] == "reader"
    assert answer.json()["type"] == "User"


def test_user_refuses_integration_tokens_and_anonymous_calls(sandbox: SandboxHandle) -> None:
    with client(sandbox, sandbox.world.actions_token()) as gh:
        refused = gh.get("/user")
    assert refused.status_code == 403
    assert refused.json()["message"] == NOT_FOR_INTEGRATION
    with client(sandbox, None) as gh:
        assert gh.get("/user").status_code == 401


def test_an_actions_token_writes_as_github_actions_bot(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_issue("reader", "Crash")
    with client(sandbox, sandbox.world.actions_token()) as gh:
        made = gh.post(f"{REPO}/issues/{number}/comments", json={"body": "hello"})
    assert made.status_code == 201
    assert made.json()["user"]["login"] == "github-actions[bot]"
    assert made.json()["user"]["type"] == "Bot"
    assert made.json()["performed_via_github_app"]["slug"] == "github-actions"


def test_a_read_only_actions_token_may_read_but_not_write(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_issue("reader", "Crash")
    token = sandbox.world.actions_token(
        permissions={"contents": "read", "issues": "read", "metadata": "read"}
    )
    with client(sandbox, token) as gh:
        assert gh.get(f"{REPO}/issues/{number}").status_code == 200
        refused = gh.post(f"{REPO}/issues/{number}/comments", json={"body": "hello"})
    assert refused.status_code == 403
    assert refused.json()["message"] == NOT_FOR_INTEGRATION


def test_the_control_route_hands_out_an_actions_token(sandbox: SandboxHandle) -> None:
    with httpx.Client(base_url=sandbox.control_url, timeout=10) as control:
        token = control.post("/actions_token", json={}).json()["result"]
    assert token.startswith("ghs_")
    with client(sandbox, token) as gh:
        assert gh.get(REPO).status_code == 200


def test_an_events_payload_is_served_as_a_runners_event_file(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_issue("reader", "Payload please")
    with httpx.Client(base_url=sandbox.control_url, timeout=10) as control:
        payload = control.get("/events/-1").json()
        missing = control.get("/events/100000")
    assert payload["action"] == "opened"
    assert payload["issue"]["number"] == number
    assert payload["repository"]["full_name"] == "sandbox/demo"
    assert payload["sender"]["login"] == "reader"
    assert missing.status_code == 400 and "-1 for the newest" in missing.json()["message"]


def test_the_newest_event_of_one_name_is_served(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_issue("reader", "First")
    sandbox.world.comment("maintainer", number, "A comment after it")
    with httpx.Client(base_url=sandbox.control_url, timeout=10) as control:
        issue = control.get("/events/-1", params={"event": "issues"}).json()
        comment = control.get("/events/-1", params={"event": "issue_comment"}).json()
        none = control.get("/events/-1", params={"event": "issues", "action": "closed"})
    assert (issue["action"], issue["issue"]["number"]) == ("opened", number)
    assert comment["comment"]["body"] == "A comment after it"
    assert none.status_code == 400 and "named 'issues'" in none.json()["message"]
