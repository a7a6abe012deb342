"""Fault injection and the audit log: what a client sees, what was really applied."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from githubkit.exception import GitHubException, RequestFailed

from fakegithub.faults import SECONDARY_RATE_LIMIT
from fakegithub.server import SandboxHandle, running_sandbox
from tests.fakegithub.helpers import Receiver, githubkit_for


@pytest.fixture
def sandbox() -> Iterator[SandboxHandle]:
    with running_sandbox() as handle:
        yield handle


def comments(handle: SandboxHandle) -> list[Any]:
    return [e for e in handle.world.audit.entries(method="POST") if e.path.endswith("/comments")]


def test_a_lost_response_leaves_the_write_applied_exactly_once(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_issue("reader", "Lost answers")
    sandbox.world.faults.add("response_lost", method="POST", path="*/comments", times=1)
    gh = githubkit_for(sandbox)
    with pytest.raises(GitHubException) as seen:
        gh.rest.issues.create_comment("sandbox", "demo", number, data={"body": "once"})
    assert not isinstance(seen.value, RequestFailed)  # a network error, no HTTP answer
    [entry] = comments(sandbox)
    assert entry.actor == "autoloop-sandbox[bot]" and entry.status == 201
    listed = gh.rest.issues.list_comments("sandbox", "demo", number).json()
    assert [c["body"] for c in listed] == ["once"]


def test_a_lost_merge_answer_is_reconciled_by_reading_back(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_pr("contributor", "topic", "Topic", files={"a.txt": "1"})
    sandbox.world.faults.add("response_lost", method="PUT", path="*/pulls/*/merge")
    gh = githubkit_for(sandbox)
    head = gh.rest.pulls.get("sandbox", "demo", number).json()["head"]["sha"]
    with pytest.raises(GitHubException):
        gh.rest.pulls.merge("sandbox", "demo", number, data={"sha": head})
    assert gh.rest.pulls.get("sandbox", "demo", number).json()["merged"] is True
    with pytest.raises(RequestFailed) as again:
        gh.rest.pulls.merge("sandbox", "demo", number, data={"sha": head})
    assert again.value.response.status_code == 405
    merges = [e for e in sandbox.world.audit.entries(method="PUT") if e.path.endswith("/merge")]
    assert len(merges) == 1


def test_a_502_after_the_write_is_an_error_but_the_write_happened(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_issue("reader", "Bad gateway after")
    sandbox.world.faults.add("response_lost_502", method="POST", path="*/comments")
    gh = githubkit_for(sandbox)
    with pytest.raises(RequestFailed) as seen:
        gh.rest.issues.create_comment("sandbox", "demo", number, data={"body": "x"})
    assert seen.value.response.status_code == 502
    assert len(comments(sandbox)) == 1


def test_a_502_before_the_write_applies_nothing(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_issue("reader", "Bad gateway before")
    sandbox.world.faults.add("error_502", method="POST", path="*/comments", times=2)
    gh = githubkit_for(sandbox)
    for _ in range(2):
        with pytest.raises(RequestFailed) as seen:
            gh.rest.issues.create_comment("sandbox", "demo", number, data={"body": "x"})
        assert seen.value.response.status_code == 502
    assert comments(sandbox) == []
    gh.rest.issues.create_comment("sandbox", "demo", number, data={"body": "third time"})
    assert len(comments(sandbox)) == 1


def test_a_secondary_rate_limit_says_when_to_retry(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_issue("reader", "Slow down")
    sandbox.world.faults.add("rate_limit", method="POST", path="*/labels", retry_after=30)
    token = sandbox.world.user_token("maintainer")
    answer = httpx.post(
        f"{sandbox.api_url}/repos/sandbox/demo/issues/{number}/labels",
        json={"labels": ["bug"]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=5,
    )
    assert answer.status_code == 403 and answer.headers["retry-after"] == "30"
    assert answer.json()["message"] == SECONDARY_RATE_LIMIT
    assert [e for e in sandbox.world.audit.entries() if "/labels" in e.path] == []


def test_latency_delays_the_answer(sandbox: SandboxHandle) -> None:
    sandbox.world.faults.add("latency", method="GET", path="/repos/*", delay=0.3)
    token = sandbox.world.user_token("maintainer")
    answer = httpx.get(
        f"{sandbox.api_url}/repos/sandbox/demo",
        headers={"Authorization": f"token {token}"},
        timeout=5,
    )
    assert answer.status_code == 200 and answer.elapsed.total_seconds() >= 0.3


def test_random_faults_are_reproducible_with_a_seed() -> None:
    def run(seed: int) -> list[int]:
        with running_sandbox(fault_seed=seed) as handle:
            handle.world.faults.add("error_502", path="/repos/*", times=None, probability=0.5)
            token = handle.world.user_token("maintainer")
            return [
                httpx.get(
                    f"{handle.api_url}/repos/sandbox/demo",
                    headers={"Authorization": f"token {token}"},
                    timeout=5,
                ).status_code
                for _ in range(12)
            ]

    first = run(7)
    assert first == run(7)
    assert {200, 502} == set(first)


def test_a_dropped_webhook_is_not_sent_but_the_next_one_is() -> None:
    with Receiver() as receiver, running_sandbox(app_url=receiver.url) as handle:
        handle.world.faults.add("webhook_drop", path="issues.opened")
        handle.world.open_issue("reader", "Never announced")
        handle.world.open_issue("reader", "Announced")
        assert handle.world.settle()
        titles = [p["issue"]["title"] for e, p in receiver.events() if e == "issues"]
        assert titles == ["Announced"]
        assert [e.payload["issue"]["title"] for e in handle.sandbox.hooks.dropped] == [
            "Never announced"
        ]


def test_faults_and_audit_are_reachable_over_the_control_routes(sandbox: SandboxHandle) -> None:
    control = sandbox.control_url
    made = httpx.post(
        f"{control}/faults",
        json={"kind": "error_502", "method": "POST", "path": "*/comments"},
        timeout=5,
    )
    assert made.status_code == 200 and made.json()["times"] == 1
    assert len(httpx.get(f"{control}/faults", timeout=5).json()["faults"]) == 1
    bad = httpx.post(f"{control}/faults", json={"kind": "gremlins"}, timeout=5)
    assert bad.status_code == 400 and "unknown fault kind" in bad.json()["message"]
    number = httpx.post(
        f"{control}/open_issue", json={"user": "reader", "title": "Via curl"}, timeout=5
    ).json()["result"]
    audit = httpx.get(f"{control}/audit", timeout=5).json()["entries"]
    assert [(e["method"], e["path"], e["actor"]) for e in audit] == [
        ("SCRIPT", "/_sandbox/open_issue", "reader")
    ]
    assert len(audit[0]["body_fingerprint"]) == 64
    assert httpx.delete(f"{control}/faults", timeout=5).json()["faults"] == []
    assert isinstance(number, int)
