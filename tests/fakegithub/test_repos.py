"""The REST routes beyond the OpenAPI subset that the pipeline and the App use."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import pytest

from fakegithub.server import SandboxHandle, running_sandbox

REPO = "/repos/sandbox/demo"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxHandle]:
    with running_sandbox() as handle:
        yield handle


@pytest.fixture(scope="module")
def gh(sandbox: SandboxHandle) -> Iterator[httpx.Client]:
    token = sandbox.world.user_token("maintainer")
    with httpx.Client(
        base_url=sandbox.api_url, headers={"Authorization": f"token {token}"}, timeout=10
    ) as client:
        yield client


def test_contents_are_read_per_ref_and_written_with_the_blob_sha_guard(
    sandbox: SandboxHandle, gh: httpx.Client
) -> None:
    made = gh.put(
        f"{REPO}/contents/docs/notes.md",
        json={"message": "Add notes", "content": base64.b64encode(b"one\n").decode()},
    )
    assert made.status_code == 201
    first_commit = made.json()["commit"]["sha"]
    blob = made.json()["content"]["sha"]
    missing_sha = gh.put(
        f"{REPO}/contents/docs/notes.md",
        json={"message": "Edit", "content": base64.b64encode(b"two\n").decode()},
    )
    assert missing_sha.status_code == 422
    edited = gh.put(
        f"{REPO}/contents/docs/notes.md",
        json={"message": "Edit", "content": base64.b64encode(b"two\n").decode(), "sha": blob},
    )
    assert edited.status_code == 200
    now = gh.get(f"{REPO}/contents/docs/notes.md").json()
    before = gh.get(f"{REPO}/contents/docs/notes.md", params={"ref": first_commit}).json()
    assert base64.b64decode(now["content"]) == b"two\n"
    assert base64.b64decode(before["content"]) == b"one\n"
    assert gh.get(f"{REPO}/contents/nope.txt").status_code == 404
    pushes = [e for e in sandbox.world.events if e.name == "push"]
    assert pushes[-1].payload["commits"][0]["modified"] == ["docs/notes.md"]


def test_compare_reports_identical_ahead_behind_and_diverged(
    sandbox: SandboxHandle, gh: httpx.Client
) -> None:
    base = gh.get(f"{REPO}/commits/main").json()["sha"]
    assert gh.get(f"{REPO}/compare/{base}...main").json()["status"] == "identical"
    sandbox.world.push("maintainer", "side", {"side.txt": "s"})
    assert gh.get(f"{REPO}/compare/main...side").json()["status"] == "ahead"
    assert gh.get(f"{REPO}/compare/side...main").json()["status"] == "behind"
    sandbox.world.push("maintainer", "main", {"main.txt": "m"})
    found = gh.get(f"{REPO}/compare/main...side").json()
    assert (found["status"], found["ahead_by"], found["behind_by"]) == ("diverged", 1, 1)
    assert found["merge_base_commit"]["sha"] == base


def test_issues_are_created_edited_assigned_and_closed(
    sandbox: SandboxHandle, gh: httpx.Client
) -> None:
    made = gh.post(f"{REPO}/issues", json={"title": "Docs are thin", "labels": ["enhancement"]})
    assert made.status_code == 201
    number = made.json()["number"]
    assert gh.post(f"{REPO}/issues", json={"title": ""}).status_code == 422
    assigned = gh.post(f"{REPO}/issues/{number}/assignees", json={"assignees": ["reader"]})
    assert [a["login"] for a in assigned.json()["assignees"]] == ["reader"]
    edited = gh.patch(
        f"{REPO}/issues/{number}",
        json={"title": "Docs are too thin", "labels": ["bug"], "state": "closed"},
    ).json()
    assert (edited["title"], edited["state"], edited["state_reason"]) == (
        "Docs are too thin",
        "closed",
        "completed",
    )
    labels = gh.get(f"{REPO}/issues/{number}/labels").json()
    assert [x["name"] for x in labels] == ["bug"]
    assert gh.get(f"{REPO}/issues/{number}").json()["closed_at"] is not None
    actions = [e.action for e in sandbox.world.events if e.name == "issues"]
    for expected in ("opened", "labeled", "assigned", "edited", "unlabeled", "closed"):
        assert expected in actions


def test_pull_requests_are_listed_and_reviews_read_back(
    sandbox: SandboxHandle, gh: httpx.Client
) -> None:
    number = sandbox.world.open_pr("contributor", "listed", "Listed", files={"l.txt": "l"})
    sandbox.world.approve("maintainer", number, "ship it")
    found = gh.get(f"{REPO}/pulls", params={"head": "sandbox:listed"}).json()
    assert [p["number"] for p in found] == [number]
    reviews = gh.get(f"{REPO}/pulls/{number}/reviews").json()
    assert [(r["user"]["login"], r["state"]) for r in reviews] == [("maintainer", "APPROVED")]
    made = gh.post(f"{REPO}/pulls", json={"head": "side", "base": "main", "title": "Side"})
    assert made.status_code == 201 and made.json()["head"]["ref"] == "side"


def test_lists_are_paginated_with_a_link_header(sandbox: SandboxHandle, gh: httpx.Client) -> None:
    number = sandbox.world.open_issue("reader", "Chatty")
    for n in range(5):
        sandbox.world.comment("reader", number, f"comment {n}")
    first = gh.get(f"{REPO}/issues/{number}/comments", params={"per_page": 2})
    assert len(first.json()) == 2 and 'rel="next"' in first.headers["link"]
    last = gh.get(f"{REPO}/issues/{number}/comments", params={"per_page": 2, "page": 3})
    assert [c["body"] for c in last.json()] == ["comment 4"]


def test_the_control_routes_refuse_bad_calls_with_a_clear_message(sandbox: SandboxHandle) -> None:
    bad = httpx.post(f"{sandbox.control_url}/open_issue", json={"user": "reader"}, timeout=5)
    assert bad.status_code == 400 and "title" in bad.json()["message"]
    unknown = httpx.post(f"{sandbox.control_url}/launch_rockets", json={}, timeout=5)
    assert unknown.status_code == 400 and "GET /_sandbox/" in unknown.json()["message"]
    listing = httpx.get(f"{sandbox.control_url}/", timeout=5).json()
    assert "open_pr" in listing["operations"]
