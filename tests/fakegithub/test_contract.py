"""Every operation of the REST subset, driven through githubkit against a running sandbox
(real HTTP on loopback), with each answer checked against GitHub's OpenAPI schemas."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from githubkit.exception import RequestFailed

from fakegithub.server import SandboxHandle, running_sandbox
from tests.fakegithub.helpers import (
    Receiver,
    check_response,
    githubkit_app,
    githubkit_for,
    subset_operations,
)

OWNER, REPO = "sandbox", "demo"
SEEN: set[tuple[str, str]] = set()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver() as found:
        yield found


@pytest.fixture(scope="module")
def sandbox(receiver: Receiver) -> Iterator[SandboxHandle]:
    with running_sandbox(app_url=receiver.url) as handle:
        yield handle


@pytest.fixture(scope="module")
def gh(sandbox: SandboxHandle) -> Any:
    return githubkit_for(sandbox)


def checked(method: str, path: str, call: Any) -> Any:
    """Runs a githubkit call; checks status and body against the subset, error or not."""
    try:
        response = call()
    except RequestFailed as failed:
        response = failed.response
    body = response.json() if response.content else None
    check_response(method, path, response.status_code, body)
    SEEN.add((method, path))
    return response.status_code, body


def a_pull(sandbox: SandboxHandle, branch: str, files: dict[str, str | None] | None = None) -> int:
    return sandbox.world.open_pr(
        "maintainer", branch, f"Change {branch}", files=files or {f"{branch}.txt": branch}
    )


def test_pull_request_operations_match_the_schemas(sandbox: SandboxHandle, gh: Any) -> None:
    number = a_pull(sandbox, "feature-a")
    status, body = checked(
        "GET",
        "/repos/{owner}/{repo}/pulls/{pull_number}",
        lambda: gh.rest.pulls.get(OWNER, REPO, number),
    )
    assert status == 200 and body["number"] == number and body["mergeable_state"] == "clean"
    status, body = checked(
        "PATCH",
        "/repos/{owner}/{repo}/pulls/{pull_number}",
        lambda: gh.rest.pulls.update(OWNER, REPO, number, data={"title": "Renamed"}),
    )
    assert status == 200 and body["title"] == "Renamed"
    status, body = checked(
        "POST",
        "/repos/{owner}/{repo}/pulls/{pull_number}/reviews",
        lambda: gh.rest.pulls.create_review(
            OWNER, REPO, number, data={"event": "COMMENT", "body": "Looks fine"}
        ),
    )
    assert status == 200 and body["state"] == "COMMENTED"
    # main moves on, so the branch can be updated; a wrong expected head sha is refused
    sandbox.world.push("maintainer", "main", {"other.txt": "x"})
    status, body = checked(
        "PUT",
        "/repos/{owner}/{repo}/pulls/{pull_number}/update-branch",
        lambda: gh.rest.pulls.update_branch(
            OWNER, REPO, number, data={"expected_head_sha": "0" * 40}
        ),
    )
    assert status == 422
    head = sandbox.world.events[-1].payload  # noqa: F841  # the world keeps every event
    pr = gh.rest.pulls.get(OWNER, REPO, number).json()
    status, body = checked(
        "PUT",
        "/repos/{owner}/{repo}/pulls/{pull_number}/update-branch",
        lambda: gh.rest.pulls.update_branch(
            OWNER, REPO, number, data={"expected_head_sha": pr["head"]["sha"]}
        ),
    )
    assert status == 202
    stale = pr["head"]["sha"]
    status, body = checked(
        "PUT",
        "/repos/{owner}/{repo}/pulls/{pull_number}/merge",
        lambda: gh.rest.pulls.merge(OWNER, REPO, number, data={"sha": stale}),
    )
    assert (
        status == 409
        and body["message"] == "Head branch was modified. Review and try the merge again."
    )
    fresh = gh.rest.pulls.get(OWNER, REPO, number).json()["head"]["sha"]
    status, body = checked(
        "PUT",
        "/repos/{owner}/{repo}/pulls/{pull_number}/merge",
        lambda: gh.rest.pulls.merge(OWNER, REPO, number, data={"sha": fresh}),
    )
    assert status == 200 and body["merged"] is True
    status, body = checked(
        "PUT",
        "/repos/{owner}/{repo}/pulls/{pull_number}/merge",
        lambda: gh.rest.pulls.merge(OWNER, REPO, number, data={"sha": fresh}),
    )
    assert status == 405
    status, body = checked(
        "GET",
        "/repos/{owner}/{repo}/pulls/{pull_number}",
        lambda: gh.rest.pulls.get(OWNER, REPO, 9999),
    )
    assert status == 404 and body["message"] == "Not Found"


def test_check_and_status_operations_match_the_schemas(sandbox: SandboxHandle, gh: Any) -> None:
    sha = sandbox.world.push("maintainer", "checks-branch", {"c.txt": "c"})
    status, body = checked(
        "POST",
        "/repos/{owner}/{repo}/check-runs",
        lambda: gh.rest.checks.create(
            OWNER, REPO, data={"name": "autoloop/deliver", "head_sha": sha, "status": "in_progress"}
        ),
    )
    assert status == 201 and body["status"] == "in_progress"
    run_id = body["id"]
    status, body = checked(
        "PATCH",
        "/repos/{owner}/{repo}/check-runs/{check_run_id}",
        lambda: gh.rest.checks.update(
            OWNER,
            REPO,
            run_id,
            data={
                "status": "completed",
                "conclusion": "success",
                "output": {"title": "ok", "summary": "done"},
            },
        ),
    )
    assert status == 200 and body["conclusion"] == "success"
    status, body = checked(
        "GET",
        "/repos/{owner}/{repo}/commits/{ref}/check-runs",
        lambda: gh.rest.checks.list_for_ref(OWNER, REPO, sha),
    )
    assert status == 200 and body["total_count"] == 1
    status, body = checked(
        "GET",
        "/repos/{owner}/{repo}/commits/{ref}/status",
        lambda: gh.rest.repos.get_combined_status_for_ref(OWNER, REPO, "checks-branch"),
    )
    assert status == 200 and body["state"] == "pending" and body["sha"] == sha


def test_protection_rules_and_permissions_match_the_schemas(
    sandbox: SandboxHandle, gh: Any
) -> None:
    status, body = checked(
        "GET",
        "/repos/{owner}/{repo}/branches/{branch}/protection/required_status_checks",
        lambda: gh.rest.repos.get_status_checks_protection(OWNER, REPO, "unprotected"),
    )
    assert status == 404
    sandbox.world.set_protection("release", contexts=["ci"], strict=True)
    status, body = checked(
        "GET",
        "/repos/{owner}/{repo}/branches/{branch}/protection/required_status_checks",
        lambda: gh.rest.repos.get_status_checks_protection(OWNER, REPO, "release"),
    )
    assert status == 200 and body["contexts"] == ["ci"] and body["strict"] is True
    sandbox.world.add_ruleset("release rules", ["release*"], required_checks=["ci"], approvals=1)
    status, body = checked(
        "GET",
        "/repos/{owner}/{repo}/rules/branches/{branch}",
        lambda: gh.rest.repos.get_branch_rules(OWNER, REPO, "release-2"),
    )
    assert status == 200 and {r["type"] for r in body} == {"required_status_checks", "pull_request"}
    for login, expected in (("maintainer", "admin"), ("reader", "read"), ("contributor", "none")):
        status, body = checked(
            "GET",
            "/repos/{owner}/{repo}/collaborators/{username}/permission",
            lambda login=login: gh.rest.repos.get_collaborator_permission_level(OWNER, REPO, login),
        )
        assert status == 200 and body["permission"] == expected


def test_deployment_and_release_operations_match_the_schemas(
    sandbox: SandboxHandle, gh: Any
) -> None:
    status, body = checked(
        "GET",
        "/repos/{owner}/{repo}/releases/latest",
        lambda: gh.rest.repos.get_latest_release(OWNER, REPO),
    )
    assert status == 404
    sandbox.world.release("maintainer", "v1.0.0")
    status, body = checked(
        "GET",
        "/repos/{owner}/{repo}/releases/latest",
        lambda: gh.rest.repos.get_latest_release(OWNER, REPO),
    )
    assert status == 200 and body["tag_name"] == "v1.0.0"
    status, body = checked(
        "POST",
        "/repos/{owner}/{repo}/deployments",
        lambda: gh.rest.repos.create_deployment(
            OWNER, REPO, data={"ref": "main", "environment": "staging", "required_contexts": []}
        ),
    )
    assert status == 201 and body["environment"] == "staging"
    deployment_id = body["id"]
    status, body = checked(
        "POST",
        "/repos/{owner}/{repo}/deployments",
        lambda: gh.rest.repos.create_deployment(OWNER, REPO, data={"ref": "no-such-branch"}),
    )
    assert status == 422
    status, body = checked(
        "GET",
        "/repos/{owner}/{repo}/deployments",
        lambda: gh.rest.repos.list_deployments(OWNER, REPO, environment="staging"),
    )
    assert status == 200 and [d["id"] for d in body] == [deployment_id]
    status, body = checked(
        "POST",
        "/repos/{owner}/{repo}/deployments/{deployment_id}/statuses",
        lambda: gh.rest.repos.create_deployment_status(
            OWNER,
            REPO,
            deployment_id,
            data={"state": "success", "environment_url": "http://127.0.0.1/"},
        ),
    )
    assert status == 201 and body["state"] == "success"
    status, body = checked(
        "GET",
        "/repos/{owner}/{repo}/deployments/{deployment_id}/statuses",
        lambda: gh.rest.repos.list_deployment_statuses(OWNER, REPO, deployment_id),
    )
    assert status == 200 and [s["state"] for s in body] == ["success"]


def test_comment_and_label_operations_match_the_schemas(sandbox: SandboxHandle, gh: Any) -> None:
    number = sandbox.world.open_issue("reader", "Crash on start", labels=["bug"])
    status, body = checked(
        "POST",
        "/repos/{owner}/{repo}/issues/{issue_number}/comments",
        lambda: gh.rest.issues.create_comment(OWNER, REPO, number, data={"body": "On it."}),
    )
    assert status == 201 and body["user"]["login"] == "autoloop-sandbox[bot]"
    comment_id = body["id"]
    status, body = checked(
        "PATCH",
        "/repos/{owner}/{repo}/issues/comments/{comment_id}",
        lambda: gh.rest.issues.update_comment(OWNER, REPO, comment_id, data={"body": "Done."}),
    )
    assert status == 200 and body["body"] == "Done."
    status, body = checked(
        "GET",
        "/repos/{owner}/{repo}/issues/{issue_number}/comments",
        lambda: gh.rest.issues.list_comments(OWNER, REPO, number),
    )
    assert status == 200 and [c["body"] for c in body] == ["Done."]
    status, body = checked(
        "POST",
        "/repos/{owner}/{repo}/issues/{issue_number}/labels",
        lambda: gh.rest.issues.add_labels(OWNER, REPO, number, data={"labels": ["triaged", "p1"]}),
    )
    assert status == 200 and [x["name"] for x in body] == ["bug", "triaged", "p1"]
    status, body = checked(
        "DELETE",
        "/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}",
        lambda: gh.rest.issues.remove_label(OWNER, REPO, number, "bug"),
    )
    assert status == 200 and [x["name"] for x in body] == ["triaged", "p1"]
    status, body = checked(
        "DELETE",
        "/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}",
        lambda: gh.rest.issues.remove_label(OWNER, REPO, number, "bug"),
    )
    assert status == 404
    status, body = checked(
        "DELETE",
        "/repos/{owner}/{repo}/issues/{issue_number}/labels",
        lambda: gh.rest.issues.remove_all_labels(OWNER, REPO, number),
    )
    assert status == 204
    assert gh.rest.issues.list_labels_on_issue(OWNER, REPO, number).json() == []


def test_app_operations_match_the_schemas(sandbox: SandboxHandle, receiver: Receiver) -> None:
    app = githubkit_app(sandbox)
    status, body = checked(
        "POST",
        "/app/installations/{installation_id}/access_tokens",
        lambda: app.rest.apps.create_installation_access_token(
            sandbox.installation_id, data={"permissions": {"issues": "read"}}
        ),
    )
    assert status == 201 and body["token"].startswith("ghs_")
    assert body["permissions"] == {"issues": "read"}
    status, body = checked(
        "POST",
        "/app/installations/{installation_id}/access_tokens",
        lambda: app.rest.apps.create_installation_access_token(
            sandbox.installation_id, data={"permissions": {"workflows": "write"}}
        ),
    )
    assert status == 422
    sandbox.world.open_issue("reader", "For the deliveries")
    assert sandbox.world.settle()
    status, body = checked(
        "GET",
        "/app/hook/deliveries",
        lambda: app.rest.apps.list_webhook_deliveries(per_page=2),
    )
    assert status == 200 and len(body) == 2
    first = body[0]
    status, body = checked(
        "POST",
        "/app/hook/deliveries/{delivery_id}/attempts",
        lambda: app.rest.apps.redeliver_webhook_delivery(first["id"]),
    )
    assert status == 202
    assert sandbox.world.settle()
    redelivered = [d for d in sandbox.world.deliveries if d.redelivery]
    assert [d.guid for d in redelivered] == [first["guid"]]


def test_every_operation_of_the_subset_was_exercised() -> None:
    missing = set(subset_operations()) - SEEN
    assert not missing, f"not exercised: {sorted(missing)}"
