"""Webhooks the sandbox sends: GitHub's payload schemas, signatures, headers, deliveries."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fakegithub.errors import SandboxError
from fakegithub.server import SandboxHandle, running_sandbox
from fakegithub.webhooks import signature_256
from tests.fakegithub.helpers import FIXTURES, Receiver, check_webhook, githubkit_app, githubkit_for


def test_the_signing_function_matches_githubs_documented_test_vector() -> None:
    vector = json.loads((FIXTURES / "signature_test_vector.json").read_text())
    secret, payload = vector["secret"], vector["payload"]
    assert signature_256(secret, payload.encode()) == vector["expected_x_hub_signature_256"]


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[SandboxHandle, Receiver]]:
    """One sandbox that went through every kind of change, and what its App received."""
    with Receiver() as receiver, running_sandbox(app_url=receiver.url) as gh:
        w = gh.world
        w.set_ci({"ci": "success", "lint": "failure"}, statuses={"legacy": "success"})
        w.set_deploy(delay=0.05)
        issue = w.open_issue("reader", "Crash on start", body="It crashes.", labels=["bug"])
        w.comment("maintainer", issue, "Thanks")
        w.remove_label("maintainer", issue, "bug")
        w.close_issue("maintainer", issue)
        client = githubkit_for(gh)
        client.rest.issues.update(
            "sandbox",
            "demo",
            issue,
            data={"state": "open", "title": "Crash at start", "assignees": ["maintainer"]},
        )
        made = client.rest.issues.create_comment("sandbox", "demo", issue, data={"body": "bot"})
        client.rest.issues.update_comment("sandbox", "demo", made.json()["id"], data={"body": "b"})
        number = w.open_pr(
            "contributor", "topic", "Add a", files={"a.txt": "1"}, draft=True, labels=["deliver"]
        )
        w.push("contributor", "topic", {"a.txt": "2"})
        w.ready_for_review("contributor", number)
        w.approve("maintainer", number)
        client.rest.issues.remove_label("sandbox", "demo", number, "deliver")
        assert w.settle()
        client.rest.pulls.merge("sandbox", "demo", number)
        w.release("maintainer", "v1.0.0")
        assert w.settle()
        time.sleep(0.2)
        assert w.settle()
        yield gh, receiver


def test_every_change_sends_the_event_github_would(world: tuple[SandboxHandle, Receiver]) -> None:
    _, receiver = world
    kinds = {(e, p.get("action")) for e, p in receiver.events()}
    expected = {
        ("issues", "opened"),
        ("issues", "labeled"),
        ("issues", "unlabeled"),
        ("issues", "closed"),
        ("issues", "reopened"),
        ("issues", "edited"),
        ("issues", "assigned"),
        ("issue_comment", "created"),
        ("issue_comment", "edited"),
        ("pull_request", "opened"),
        ("pull_request", "labeled"),
        ("pull_request", "unlabeled"),
        ("pull_request", "synchronize"),
        ("pull_request", "ready_for_review"),
        ("pull_request", "closed"),
        ("pull_request_review", "submitted"),
        ("check_run", "created"),
        ("check_run", "completed"),
        ("check_suite", "completed"),
        ("status", None),
        ("push", None),
        ("deployment", "created"),
        ("deployment_status", "created"),
        ("release", "created"),
        ("release", "published"),
    }
    assert expected <= kinds, f"missing: {expected - kinds}"


def test_every_payload_validates_against_githubs_schema(
    world: tuple[SandboxHandle, Receiver],
) -> None:
    _, receiver = world
    events = receiver.events()
    assert len(events) > 40
    for event, payload in events:
        check_webhook(event, payload)
        assert payload["installation"]["id"] == world[0].installation_id
        assert payload["repository"]["full_name"] == "sandbox/demo"


def test_every_delivery_is_signed_and_carries_githubs_headers(
    world: tuple[SandboxHandle, Receiver],
) -> None:
    gh, receiver = world
    guids = set()
    for headers, body in receiver.received:
        expected = (
            "sha256=" + hmac.new(gh.webhook_secret.encode(), body, hashlib.sha256).hexdigest()
        )
        assert headers["X-Hub-Signature-256"] == expected
        assert headers["User-Agent"].startswith("GitHub-Hookshot/")
        assert headers["Content-Type"] == "application/json"
        assert headers["X-GitHub-Hook-ID"].isdigit()
        assert json.dumps(json.loads(body), separators=(",", ":")).encode() == body
        guids.add(headers["X-GitHub-Delivery"])
    assert len(guids) == len(receiver.received)


def test_the_merge_is_reported_as_closed_and_merged_by_the_bot(
    world: tuple[SandboxHandle, Receiver],
) -> None:
    _, receiver = world
    closed = [p for e, p in receiver.events() if e == "pull_request" and p["action"] == "closed"]
    assert len(closed) == 1 and closed[0]["pull_request"]["merged"] is True
    assert closed[0]["sender"] == {
        **closed[0]["sender"],
        "login": "autoloop-sandbox[bot]",
        "type": "Bot",
    }


def test_a_merge_to_main_is_deployed_and_goes_live(world: tuple[SandboxHandle, Receiver]) -> None:
    gh, receiver = world
    main = gh.sandbox.state.repos["sandbox/demo"].branches["main"]
    live = httpx.get(f"{gh.control_url}/live/sandbox/demo", timeout=5).json()
    assert live["sha"] == main
    states = [
        p["deployment_status"]["state"]
        for e, p in receiver.events()
        if e == "deployment_status" and p["deployment"]["sha"] == main
    ]
    assert states == ["in_progress", "success"]


def test_a_deploy_held_from_pushes_starts_when_run() -> None:
    """``set_deploy(on_push=False)``: a push to main deploys nothing until ``run_deploy``."""
    with Receiver() as receiver, running_sandbox(app_url=receiver.url) as gh:
        w = gh.world
        w.set_deploy(on_push=False)
        before = w.live()  # what the sandbox's service reports at its start
        w.push("maintainer", "main", {"held.txt": "1"})
        assert w.settle()
        main = gh.sandbox.state.repos["sandbox/demo"].branches["main"]
        assert [e for e, _ in receiver.events() if e.startswith("deployment")] == []
        assert w.live() == before and before.get("sha") != main
        w.run_deploy(main)
        assert w.settle()
        states = [
            p["deployment_status"]["state"]
            for e, p in receiver.events()
            if e == "deployment_status" and p["deployment"]["sha"] == main
        ]
        assert states == ["in_progress", "success"]
        assert w.live()["sha"] == main
        with pytest.raises(SandboxError, match="no commit"):
            w.run_deploy("0" * 40)
        w.set_deploy(enabled=False)
        with pytest.raises(SandboxError, match="no deploy is scripted"):
            w.run_deploy(main)


def test_deliveries_are_listed_with_cursor_pagination(
    world: tuple[SandboxHandle, Receiver],
) -> None:
    gh, receiver = world
    app = githubkit_app(gh)
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        answer = app.rest.apps.list_webhook_deliveries(
            per_page=10, **({"cursor": cursor} if cursor else {})
        )
        seen.extend(answer.json())
        link = answer.headers.get("link")
        if not link:
            break
        cursor = link.split("cursor=")[1].split(">")[0].split("&")[0]
    assert len(seen) == len(receiver.received)
    assert [d["id"] for d in seen] == sorted((d["id"] for d in seen), reverse=True)
    assert all(d["status"] == "OK" and d["status_code"] == 200 for d in seen)


def test_failed_deliveries_are_recorded_and_can_be_redelivered() -> None:
    with Receiver(status=500) as receiver, running_sandbox(app_url=receiver.url) as gh:
        gh.world.open_issue("reader", "Nobody home")
        assert gh.world.settle()
        [failed] = gh.world.deliveries
        assert (failed.status, failed.status_code) == ("Invalid HTTP Response: 500", 500)
        receiver.status = 200
        app = githubkit_app(gh)
        assert app.rest.apps.redeliver_webhook_delivery(failed.id).status_code == 202
        assert gh.world.settle()
        first, second = gh.world.deliveries
        assert second.guid == first.guid and second.redelivery and second.status == "OK"
        assert receiver.received[0][1] == receiver.received[1][1]


def test_an_unreachable_app_gets_failed_to_connect_deliveries() -> None:
    with running_sandbox(app_url="http://127.0.0.1:9/github/webhook") as gh:
        gh.world.open_issue("reader", "Nobody listens")
        assert gh.world.settle()
        [failed] = gh.world.deliveries
        assert (failed.status, failed.status_code) == ("failed to connect to host", 0)


def test_a_slow_app_does_not_slow_the_rest_api() -> None:
    with Receiver() as receiver, running_sandbox(app_url=receiver.url) as gh:
        original = receiver.server.RequestHandlerClass.do_POST  # type: ignore[attr-defined]

        def slow(handler: Any) -> None:
            time.sleep(0.5)
            original(handler)

        receiver.server.RequestHandlerClass.do_POST = slow  # type: ignore[attr-defined]
        client = githubkit_for(gh)
        number = gh.world.open_issue("reader", "Slow")
        started = time.monotonic()
        for n in range(3):
            client.rest.issues.create_comment("sandbox", "demo", number, data={"body": str(n)})
        assert time.monotonic() - started < 1.0
        assert gh.world.settle(timeout=10)
        assert len(receiver.received) == 4


@pytest.mark.parametrize("senders", [1, 4])
def test_several_senders_have_deliveries_in_flight_at_once(senders: int) -> None:
    """One sender delivers one at a time, in order; several overlap, as GitHub's do."""
    with (
        Receiver() as receiver,
        running_sandbox(app_url=receiver.url, webhook_senders=senders) as gh,
    ):
        original = receiver.server.RequestHandlerClass.do_POST  # type: ignore[attr-defined]
        in_flight, most = [0], [0]

        def slow(handler: Any) -> None:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
            time.sleep(0.3)
            in_flight[0] -= 1
            original(handler)

        receiver.server.RequestHandlerClass.do_POST = slow  # type: ignore[attr-defined]
        numbers = [gh.world.open_issue("reader", f"Issue {n}") for n in range(4)]
        assert gh.world.settle(timeout=10)
        assert len(receiver.received) == 4
        if senders == 1:
            assert most[0] == 1
            seen = [json.loads(body)["issue"]["number"] for _, body in receiver.received]
            assert seen == numbers  # in the order of the events
        else:
            assert most[0] > 1
