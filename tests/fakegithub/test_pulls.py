"""Pull request behaviour: merge guards, update-branch, mergeability, protection."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from fakegithub.server import SandboxHandle, running_sandbox
from tests.fakegithub.helpers import check_webhook


@pytest.fixture
def sandbox() -> Iterator[SandboxHandle]:
    with running_sandbox() as handle:
        yield handle


def client(handle: SandboxHandle, login: str = "maintainer") -> httpx.Client:
    token = handle.world.user_token(login)
    return httpx.Client(
        base_url=handle.api_url, headers={"Authorization": f"token {token}"}, timeout=10
    )


def merges(handle: SandboxHandle) -> list[str]:
    return [e.path for e in handle.world.audit.entries(method="PUT") if e.path.endswith("/merge")]


def test_a_stale_sha_is_refused_with_409_and_nothing_merges(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_pr("contributor", "topic", "Topic", files={"a.txt": "1"})
    old = sandbox.world.push("contributor", "topic", {"a.txt": "2"})
    sandbox.world.push("contributor", "topic", {"a.txt": "3"})
    with client(sandbox) as gh:
        answer = gh.put(f"/repos/sandbox/demo/pulls/{number}/merge", json={"sha": old})
        assert answer.status_code == 409
        assert (
            answer.json()["message"] == "Head branch was modified. Review and try the merge again."
        )
        assert gh.get(f"/repos/sandbox/demo/pulls/{number}").json()["merged"] is False
    assert merges(sandbox) == []


def test_an_already_merged_pull_request_is_not_merged_again(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_pr("contributor", "topic", "Topic", files={"a.txt": "1"})
    with client(sandbox) as gh:
        head = gh.get(f"/repos/sandbox/demo/pulls/{number}").json()["head"]["sha"]
        first = gh.put(f"/repos/sandbox/demo/pulls/{number}/merge", json={"sha": head})
        assert first.status_code == 200 and first.json()["merged"] is True
        main_after_first = gh.get("/repos/sandbox/demo/commits/main").json()["sha"]
        second = gh.put(f"/repos/sandbox/demo/pulls/{number}/merge", json={"sha": head})
        assert second.status_code == 405
        assert second.json()["message"] == "Pull Request is not mergeable"
        assert gh.get("/repos/sandbox/demo/commits/main").json()["sha"] == main_after_first
        pr = gh.get(f"/repos/sandbox/demo/pulls/{number}").json()
        assert pr["merged"] and pr["merge_commit_sha"] == first.json()["sha"] == main_after_first
    assert len(merges(sandbox)) == 1


def test_a_conflicting_pull_request_is_dirty_and_not_mergeable(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_pr("contributor", "topic", "Topic", files={"README.md": "theirs"})
    sandbox.world.push("maintainer", "main", {"README.md": "ours"})
    with client(sandbox) as gh:
        pr = gh.get(f"/repos/sandbox/demo/pulls/{number}").json()
        assert (pr["mergeable"], pr["mergeable_state"]) == (False, "dirty")
        assert gh.put(f"/repos/sandbox/demo/pulls/{number}/merge").status_code == 405


def test_required_checks_block_until_ci_passes(sandbox: SandboxHandle) -> None:
    sandbox.world.set_protection("main", contexts=["ci"])
    # CI reports after 2 s: long enough that the reads below come first on a busy machine
    # (with 0.2 s, one run in three failed under a load of 6 on 2 cores).
    sandbox.world.set_ci({"ci": "success"}, delay=2.0)
    number = sandbox.world.open_pr("contributor", "topic", "Topic", files={"a.txt": "1"})
    with client(sandbox) as gh:
        pr = gh.get(f"/repos/sandbox/demo/pulls/{number}").json()
        assert pr["mergeable_state"] == "blocked"
        refused = gh.put(f"/repos/sandbox/demo/pulls/{number}/merge")
        assert refused.status_code == 405
        assert refused.json()["message"] == 'Required status check "ci" is expected.'
        assert sandbox.world.settle()
        pr = gh.get(f"/repos/sandbox/demo/pulls/{number}").json()
        assert pr["mergeable_state"] == "clean"
        assert gh.put(f"/repos/sandbox/demo/pulls/{number}/merge").status_code == 200


def test_update_branch_merges_the_base_in_and_guards_the_head(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_pr("contributor", "topic", "Topic", files={"a.txt": "1"})
    sandbox.world.push("maintainer", "main", {"b.txt": "2"})
    with client(sandbox) as gh:
        pr = gh.get(f"/repos/sandbox/demo/pulls/{number}").json()
        compare = gh.get(f"/repos/sandbox/demo/compare/main...{pr['head']['sha']}").json()
        assert (compare["status"], compare["ahead_by"], compare["behind_by"]) == ("diverged", 1, 1)
        wrong = gh.put(
            f"/repos/sandbox/demo/pulls/{number}/update-branch",
            json={"expected_head_sha": "f" * 40},
        )
        assert wrong.status_code == 422
        right = gh.put(
            f"/repos/sandbox/demo/pulls/{number}/update-branch",
            json={"expected_head_sha": pr["head"]["sha"]},
        )
        assert right.status_code == 202
        new_head = gh.get(f"/repos/sandbox/demo/pulls/{number}").json()["head"]["sha"]
        compare = gh.get(f"/repos/sandbox/demo/compare/main...{new_head}").json()
        assert (compare["status"], compare["behind_by"]) == ("ahead", 0)
    kinds = [(e.name, e.action) for e in sandbox.world.events]
    assert ("pull_request", "synchronize") in kinds


def test_mergeability_is_unknown_while_github_recomputes_it(sandbox: SandboxHandle) -> None:
    sandbox.world.set_mergeability_lag(0.3)
    number = sandbox.world.open_pr("contributor", "topic", "Topic", files={"a.txt": "1"})
    with client(sandbox) as gh:
        pr = gh.get(f"/repos/sandbox/demo/pulls/{number}").json()
        assert (pr["mergeable"], pr["mergeable_state"]) == (None, "unknown")
        time.sleep(0.35)
        pr = gh.get(f"/repos/sandbox/demo/pulls/{number}").json()
        assert (pr["mergeable"], pr["mergeable_state"]) == (True, "clean")


def test_is_merged_answers_204_only_after_the_merge(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_pr("contributor", "topic", "Topic", files={"a.txt": "1"})
    with client(sandbox) as gh:
        assert gh.get(f"/repos/sandbox/demo/pulls/{number}/merge").status_code == 404
        assert gh.put(f"/repos/sandbox/demo/pulls/{number}/merge").status_code == 200
        assert gh.get(f"/repos/sandbox/demo/pulls/{number}/merge").status_code == 204
        branch = gh.get("/repos/sandbox/demo/branches/main").json()
        merged = gh.get(f"/repos/sandbox/demo/pulls/{number}").json()["merge_commit_sha"]
        assert branch["commit"]["sha"] == merged


def test_a_force_push_rewrites_the_head(sandbox: SandboxHandle) -> None:
    number = sandbox.world.open_pr("contributor", "topic", "Topic", files={"a.txt": "1"})
    first = sandbox.sandbox.state.repos["sandbox/demo"].pulls[number].head_sha
    second = sandbox.world.force_push("contributor", "topic", {"a.txt": "1b"})
    with client(sandbox) as gh:
        compare = gh.get(f"/repos/sandbox/demo/compare/{first}...{second}").json()
        assert compare["status"] == "diverged"
    push = next(e for e in reversed(sandbox.world.events) if e.name == "push")
    assert push.payload["forced"] is True and push.payload["before"] == first


def test_a_ruleset_check_naming_an_app_counts_only_that_apps_report(
    sandbox: SandboxHandle,
) -> None:
    other_app = sandbox.app_id  # the check must come from our App, CI reports it
    sandbox.world.add_ruleset(
        "ci-from-app", ["main"], [{"context": "ci", "integration_id": other_app}]
    )
    sandbox.world.set_ci({"ci": "success"})
    number = sandbox.world.open_pr("contributor", "topic", "Topic", files={"a.txt": "1"})
    assert sandbox.world.settle()
    with client(sandbox) as gh:
        rules = gh.get("/repos/sandbox/demo/rules/branches/main").json()
        (rule,) = [r for r in rules if r["type"] == "required_status_checks"]
        assert rule["parameters"]["required_status_checks"] == [
            {"context": "ci", "integration_id": other_app}
        ]
        pr = gh.get(f"/repos/sandbox/demo/pulls/{number}").json()
        assert pr["mergeable_state"] == "blocked"
        refused = gh.put(f"/repos/sandbox/demo/pulls/{number}/merge")
        assert refused.json()["message"] == 'Required status check "ci" is expected.'


def test_protection_lists_its_checks_with_their_apps(sandbox: SandboxHandle) -> None:
    ci_app = sandbox.sandbox.ci_app.id
    sandbox.world.set_protection(
        "main", contexts=["lint"], checks=[{"context": "ci", "app_id": ci_app}]
    )
    with client(sandbox) as gh:
        found = gh.get("/repos/sandbox/demo/branches/main/protection/required_status_checks")
        assert found.json()["contexts"] == ["lint", "ci"]
        assert found.json()["checks"] == [
            {"context": "lint", "app_id": None},
            {"context": "ci", "app_id": ci_app},
        ]


def test_a_merged_branch_is_deleted_once_and_the_default_branch_never(
    sandbox: SandboxHandle,
) -> None:
    number = sandbox.world.open_pr("contributor", "fix/gone", "Gone", files={"a.txt": "1"})
    sandbox.world.merge("maintainer", number)
    with client(sandbox) as gh:
        assert gh.get("/repos/sandbox/demo/branches/fix/gone").json()["name"] == "fix/gone"
        assert gh.delete("/repos/sandbox/demo/git/refs/heads/fix/gone").status_code == 204
        again = gh.delete("/repos/sandbox/demo/git/refs/heads/fix/gone")
        assert (again.status_code, again.json()["message"]) == (422, "Reference does not exist")
        assert gh.get("/repos/sandbox/demo/branches/fix/gone").status_code == 404
        assert gh.delete("/repos/sandbox/demo/git/refs/heads/main").status_code == 422
        protection = gh.get("/repos/sandbox/demo/branches/main/protection/required_status_checks")
        assert protection.json()["message"] == "Branch not protected"
    (deleted,) = [e for e in sandbox.world.events if e.name == "push" and e.payload["deleted"]]
    assert deleted.payload["ref"] == "refs/heads/fix/gone"
    check_webhook("push", deleted.payload)
