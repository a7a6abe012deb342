"""``POST /graphql``: the one mutation REST lacks, with REST's authentication and
GraphQL's way of refusing (a 200 with ``errors``)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from fakegithub.server import SandboxHandle, running_sandbox
from tests.fakegithub.helpers import check_webhook

READY = """mutation($id: ID!) {
  markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { id isDraft } }
}"""


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxHandle]:
    with running_sandbox() as handle:
        yield handle


def post(handle: SandboxHandle, login: str | None, body: object) -> httpx.Response:
    headers = {"Authorization": f"token {handle.world.user_token(login)}"} if login else {}
    return httpx.post(f"{handle.api_url}/graphql", json=body, headers=headers, timeout=10)


def test_a_draft_is_marked_ready_once_by_its_node_id(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_pr("maintainer", "draft-1", "Draft", {"d.txt": "1"}, draft=True)
    token = sandbox.world.user_token("maintainer")
    pr = httpx.get(
        f"{sandbox.api_url}/repos/sandbox/demo/pulls/{number}",
        headers={"Authorization": f"token {token}"},
    ).json()
    answer = post(sandbox, "maintainer", {"query": READY, "variables": {"id": pr["node_id"]}})
    assert answer.status_code == 200
    made = answer.json()["data"]["markPullRequestReadyForReview"]["pullRequest"]
    assert made == {
        "id": pr["node_id"],
        "isDraft": False,
        "number": number,
        "url": pr["html_url"],
    }
    assert sandbox.sandbox.state.repos["sandbox/demo"].pulls[number].draft is False
    ready = [e for e in sandbox.world.events if e.action == "ready_for_review"]
    assert len(ready) == 1
    check_webhook("pull_request", ready[0].payload)
    (audited,) = sandbox.world.audit.entries(method="POST", path_contains="/graphql")
    assert (audited.actor, audited.resource) == ("maintainer", f"sandbox/demo#{number}")


def test_graphql_refuses_as_github_does(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_pr("maintainer", "draft-2", "Draft", {"e.txt": "1"}, draft=True)
    node = f"PR_kwSB{sandbox.sandbox.state.repos['sandbox/demo'].pulls[number].id:08d}"
    anonymous = post(sandbox, None, {"query": READY, "variables": {"id": node}})
    assert anonymous.status_code == 401
    reader = post(sandbox, "reader", {"query": READY, "variables": {"id": node}})
    assert reader.status_code == 200
    assert reader.json()["errors"][0]["type"] == "FORBIDDEN"
    unknown = post(sandbox, "maintainer", {"query": READY, "variables": {"id": "PR_nope"}})
    assert unknown.json()["errors"][0]["type"] == "NOT_FOUND"
    other = post(sandbox, "maintainer", {"query": "{ viewer { login } }"})
    assert "markPullRequestReadyForReview" in other.json()["errors"][0]["message"]
    assert post(sandbox, "maintainer", {"nope": 1}).status_code == 400
    assert sandbox.sandbox.state.repos["sandbox/demo"].pulls[number].draft is True
