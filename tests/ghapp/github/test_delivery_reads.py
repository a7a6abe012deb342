"""What the delivery reads from GitHub: the policy and the PR snapshot, against the
sandbox GitHub over loopback HTTP, checked through the pipeline's own verdicts."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from fakegithub.server import SandboxHandle, running_sandbox
from ghapp.github import retry
from ghapp.github.client import GitHubClient
from ghapp.github.readcache import ReadCache
from ghapp.github.snapshot import Extras, read_policy, read_snapshot
from ghapp.github.version import compare_with, probe_version
from pipeline import (
    Attempt,
    Delivery,
    Deploy,
    Policy,
    PolicyProblem,
    ReviewRule,
    VersionObservation,
    WriteResult,
    checks_verdict,
    deployment_verdict,
    merge_readiness,
    review_verdict,
    start,
    version_verdict,
)
from pipeline.snapshot import GITHUB_ACTIONS_APP_ID, PullSnapshot

NOW = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
POLICY = "[deliver]\n"


class Counting(httpx.HTTPTransport):
    """A real transport that also notes each request: (method, path)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            self.seen.append((request.method, request.url.path))
        return super().handle_request(request)

    def api_calls(self) -> list[tuple[str, str]]:
        """Requests to the REST API (not finding the installation, not its tokens)."""
        with self._lock:
            return [
                (m, p)
                for m, p in self.seen
                if not p.startswith("/app/") and not p.endswith("/installation")
            ]


@pytest.fixture
def sandbox() -> Iterator[SandboxHandle]:
    retry.set_testing(True)
    with running_sandbox() as handle:
        yield handle
    retry.set_testing(False)


@pytest.fixture
def transport() -> Counting:
    return Counting()


@pytest.fixture
def gh(sandbox: SandboxHandle, transport: Counting) -> Iterator[GitHubClient]:
    with GitHubClient(
        app_id=sandbox.app_id,
        private_key=sandbox.private_key_pem,
        base_url=sandbox.api_url,
        transport=transport,
    ) as client:
        yield client


def bot(sandbox: SandboxHandle) -> str:
    return f"{sandbox.sandbox.app.slug}[bot]"


def open_pr(sandbox: SandboxHandle, branch: str, files: dict[str, str | None] | None = None) -> int:
    return sandbox.world.open_pr(
        "contributor", branch, f"Change {branch}", files or {f"{branch}.txt": branch}
    )


def delivery_for(sandbox: SandboxHandle, number: int) -> Delivery:
    pull = sandbox.sandbox.state.repos[sandbox.repo].pulls[number]
    return start(repo=sandbox.repo, number=number, head_sha=pull.head_sha, mode="deliver", now=NOW)


def snap(
    gh: GitHubClient,
    sandbox: SandboxHandle,
    delivery: Delivery,
    policy: Policy | PolicyProblem = Policy(),  # noqa: B008 - a frozen value
    **kw: Any,
) -> PullSnapshot:
    return read_snapshot(
        gh,
        delivery,
        bot_login=bot(sandbox),
        bot_app_id=sandbox.app_id,
        policy=policy,
        cache=kw.pop("cache", ReadCache()),
        **kw,
    )


def ci_app(sandbox: SandboxHandle) -> int:
    return sandbox.sandbox.ci_app.id


# ------------------------------------------------------------------------------ policy


def test_the_policy_is_read_from_the_default_branch_not_the_prs_edit(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    sandbox.world.push(
        "maintainer", "main", {".github/autoloop.toml": '[deliver]\nmerge_method = "rebase"\n'}
    )
    open_pr(
        sandbox, "edits-policy", {".github/autoloop.toml": '[deliver]\nmerge_method = "merge"\n'}
    )
    found = read_policy(gh, sandbox.repo)
    assert isinstance(found, Policy)
    assert found.merge_method == "rebase"


def test_the_seeded_policy_reads_as_required_ci_and_a_production_deploy(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    found = read_policy(gh, sandbox.repo)
    assert isinstance(found, Policy)
    assert found.required_checks == ("ci",)
    assert found.deploy == Deploy(environment="production")


def test_a_missing_policy_file_means_the_defaults(sandbox: SandboxHandle, gh: GitHubClient) -> None:
    sandbox.world.push("maintainer", "main", {".github/autoloop.toml": None})
    assert read_policy(gh, sandbox.repo) == Policy()


def test_a_bad_policy_is_a_problem_naming_the_key(sandbox: SandboxHandle, gh: GitHubClient) -> None:
    sandbox.world.push(
        "maintainer", "main", {".github/autoloop.toml": '[deliver]\nreview = "two people"\n'}
    )
    found = read_policy(gh, sandbox.repo)
    assert isinstance(found, PolicyProblem)
    assert found.key == "deliver.review"
    assert "two people" in str(found)


def test_an_agent_review_names_an_agent_of_the_rules(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    sandbox.world.push(
        "maintainer", "main", {".github/autoloop.toml": '[deliver]\nreview = "agent:critic"\n'}
    )
    assert isinstance(read_policy(gh, sandbox.repo, agents=frozenset({"critic"})), Policy)
    missing = read_policy(gh, sandbox.repo, agents=frozenset({"coder"}))
    assert isinstance(missing, PolicyProblem) and missing.key == "deliver.review"


# ------------------------------------------------------------------------------ the PR


def test_the_snapshot_reads_the_pr_as_github_shows_it(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    number = sandbox.world.open_pr(
        "contributor", "shape", "Shape", {"s.txt": "1"}, draft=True, labels=["deliver"]
    )
    delivery = delivery_for(sandbox, number)
    found = snap(gh, sandbox, delivery)
    head = sandbox.sandbox.state.repos[sandbox.repo].commits[delivery.head_sha]
    main = sandbox.sandbox.state.repos[sandbox.repo].branches["main"]
    assert (found.head_sha, found.head_ref, found.base_ref) == (delivery.head_sha, "shape", "main")
    assert found.head_parents == head.parents == (main,)
    assert (found.state, found.merged, found.draft, found.author) == (
        "open",
        False,
        True,
        "contributor",
    )
    assert found.labels == ("deliver",)
    assert (found.mergeable, found.mergeable_state) == (True, "draft")
    assert found.head_repo == "" and not found.fork
    assert found.merge_commit_sha is None  # an open PR's test merge means nothing
    assert (found.bot_login, found.bot_app_id) == (bot(sandbox), sandbox.app_id)
    assert found.base_contains_head is None


def test_what_the_shell_learned_is_passed_through(sandbox: SandboxHandle, gh: GitHubClient) -> None:
    number = open_pr(sandbox, "extras")
    result = WriteResult(key="k", outcome="refused", message="no")
    extras = Extras(merge_queue_first=False, results=(result,))
    found = snap(gh, sandbox, delivery_for(sandbox, number), extras=extras)
    assert (found.merge_queue_first, found.results) == (False, (result,))


def test_behind_base_is_read_after_the_base_moved(sandbox: SandboxHandle, gh: GitHubClient) -> None:
    number = open_pr(sandbox, "behind")
    delivery = delivery_for(sandbox, number)
    assert snap(gh, sandbox, delivery).behind_base is False
    sandbox.world.push("maintainer", "main", {"elsewhere.txt": "moved"})
    found = snap(gh, sandbox, delivery)
    assert found.behind_base is True
    assert merge_readiness(found, Policy()).kind == "update"
    assert merge_readiness(found, Policy(update_branch=False)).kind != "update"


# ------------------------------------------------------------------------------ checks


def test_required_checks_come_from_branch_protection_alone(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    sandbox.world.set_protection(
        "main", contexts=["lint"], checks=[{"context": "ci", "app_id": ci_app(sandbox)}]
    )
    sandbox.world.set_ci({"ci": "success"}, statuses={"lint": "success"})
    number = open_pr(sandbox, "protected")
    assert sandbox.world.settle()
    found = snap(gh, sandbox, delivery_for(sandbox, number))
    assert {(r.name, r.app_id, r.source) for r in found.required} == {
        ("lint", None, "protection"),
        ("ci", ci_app(sandbox), "protection"),
    }
    assert [(s.context, s.state) for s in found.statuses] == [("lint", "success")]
    verdict = checks_verdict(found, Policy())
    assert verdict.kind == "passed"
    assert set(verdict.passed) == {"lint", f"ci (app {ci_app(sandbox)})"}


def test_required_checks_come_from_a_ruleset_alone(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    sandbox.world.add_ruleset(
        "ci", ["main"], [{"context": "ci", "integration_id": ci_app(sandbox)}, "docs"]
    )
    sandbox.world.set_ci({"ci": "success"}, delay=30)
    number = open_pr(sandbox, "ruled")
    found = snap(gh, sandbox, delivery_for(sandbox, number))
    assert {(r.name, r.app_id, r.source) for r in found.required} == {
        ("ci", ci_app(sandbox), "ruleset"),
        ("docs", None, "ruleset"),
    }
    verdict = checks_verdict(found, Policy())
    assert verdict.kind == "pending"
    assert verdict.missing == ("docs",)


def test_a_check_of_the_right_name_from_the_wrong_app_does_not_count(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    required = {"context": "ci", "integration_id": GITHUB_ACTIONS_APP_ID}
    sandbox.world.add_ruleset("actions-ci", ["main"], [required])
    sandbox.world.set_ci({"ci": "success"})  # reported by the sandbox's CI app, not Actions
    number = open_pr(sandbox, "wrong-app")
    assert sandbox.world.settle()
    found = snap(gh, sandbox, delivery_for(sandbox, number))
    (run,) = found.check_runs
    assert (run.name, run.app_id, run.conclusion) == ("ci", ci_app(sandbox), "success")
    verdict = checks_verdict(found, Policy())
    assert verdict.kind == "missing"
    assert verdict.missing == (f"ci (app {GITHUB_ACTIONS_APP_ID})",)


def test_a_rerun_from_failure_to_success_passes(sandbox: SandboxHandle, gh: GitHubClient) -> None:
    sandbox.world.set_protection("main", contexts=["ci"])
    sandbox.world.set_ci({"ci": "failure"})
    number = open_pr(sandbox, "flaky")
    assert sandbox.world.settle()
    delivery = delivery_for(sandbox, number)
    assert checks_verdict(snap(gh, sandbox, delivery), Policy()).kind == "failed"
    sandbox.world.set_ci({"ci": "success"})
    sandbox.world.run_ci(delivery.head_sha)  # the re-run: a new run of the same check
    assert sandbox.world.settle()
    found = snap(gh, sandbox, delivery)
    runs = sorted((r.id, r.conclusion) for r in found.check_runs if r.name == "ci")
    assert [c for _, c in runs] == ["failure", "success"]  # both read, the newest counts
    assert checks_verdict(found, Policy()).kind == "passed"


# ----------------------------------------------------------------------------- reviews


def test_reviews_say_whether_their_author_can_write(
    sandbox: SandboxHandle, gh: GitHubClient, transport: Counting
) -> None:
    number = open_pr(sandbox, "reviewed")
    sandbox.world.approve("maintainer", number)
    sandbox.world.approve("reader", number)
    sandbox.world.review("reader", number, "COMMENT", "nice")
    policy = Policy(review=ReviewRule(kind="approvals", approvals=1))
    cache = ReadCache()
    delivery = delivery_for(sandbox, number)
    found = snap(gh, sandbox, delivery, policy, cache=cache)
    assert [(r.user, r.state, r.author_can_write) for r in found.reviews] == [
        ("maintainer", "APPROVED", True),
        ("reader", "APPROVED", False),
        ("reader", "COMMENTED", False),
    ]
    verdict = review_verdict(found, policy.review)
    assert (verdict.kind, verdict.by) == ("passed", ("maintainer",))
    asked = [p for _, p in transport.api_calls() if p.endswith("/permission")]
    assert len(asked) == 2  # one per decisive reviewer
    snap(gh, sandbox, delivery, policy, cache=cache)
    assert len([p for _, p in transport.api_calls() if p.endswith("/permission")]) == 2


# ------------------------------------------------------------------------- after merge


def test_a_deployment_of_a_descendant_of_the_merge_counts(
    sandbox: SandboxHandle, gh: GitHubClient, transport: Counting
) -> None:
    world = sandbox.world
    world.set_deploy(delay=0)
    world.push("maintainer", "main", {"before.txt": "old"})  # deployed: not the merge's
    assert world.settle()
    world.set_deploy(enabled=False)
    number = open_pr(sandbox, "deployed")
    merge_sha = world.merge("maintainer", number, "squash")  # not deployed itself
    world.set_deploy(delay=0)
    later = world.push("maintainer", "main", {"after.txt": "new"})  # deployed: a descendant
    assert world.settle()
    policy = Policy(deploy=Deploy(environment="production"))
    delivery = replace(delivery_for(sandbox, number), stage="deployment", merge_sha=merge_sha)
    cache = ReadCache()
    found = snap(gh, sandbox, delivery, policy, cache=cache)
    assert [(d.sha, d.state, d.sha_is_merge_or_descendant) for d in found.deployments] == [
        (later, "success", True)
    ]
    before = len(transport.api_calls())
    assert snap(gh, sandbox, delivery, policy, cache=cache) == found
    # The PR, the deployments, the one counting deployment's status: commits are cached.
    assert len(transport.api_calls()) - before == 3
    assert found.merged and found.merge_commit_sha == merge_sha
    verdict = deployment_verdict(found, policy.deploy or Deploy())
    assert verdict.kind == "deployed" and verdict.deployment is not None
    assert verdict.deployment.sha == later


def test_a_merge_seen_first_in_the_snapshot_already_reads_its_deployments(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    sandbox.world.set_deploy(delay=0)
    number = open_pr(sandbox, "merged-behind-our-back")
    delivery = delivery_for(sandbox, number)  # still before the merge, as far as it knows
    merge_sha = sandbox.world.merge("maintainer", number)
    assert sandbox.world.settle()
    found = snap(gh, sandbox, delivery, Policy(deploy=Deploy()))
    assert [(d.sha, d.state) for d in found.deployments] == [(merge_sha, "success")]
    assert found.check_runs == () and found.required == ()  # nothing left to check


def test_an_unclear_merge_reads_whether_the_base_holds_the_head(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    number = open_pr(sandbox, "unclear")
    delivery = delivery_for(sandbox, number)
    attempt = Attempt(
        key="k", sha=delivery.head_sha, at="2026-07-01T12:00:00Z", outcome="ambiguous"
    )
    reconciling = replace(delivery, stage="merge", merge_attempt=attempt)
    assert reconciling.reconciling
    assert snap(gh, sandbox, reconciling).base_contains_head is False
    # Someone fast-forwarded main onto the head by hand: the base holds it, the PR is open.
    state = sandbox.sandbox.state
    with state.lock:
        state.repos[sandbox.repo].branches["main"] = delivery.head_sha
    assert snap(gh, sandbox, reconciling).base_contains_head is True
    assert snap(gh, sandbox, delivery).base_contains_head is None  # only while reconciling


# ------------------------------------------------------------------------------- costs


def test_a_snapshot_waiting_for_checks_costs_six_calls(
    sandbox: SandboxHandle, gh: GitHubClient, transport: Counting
) -> None:
    sandbox.world.set_protection("main", contexts=["ci"])
    number = open_pr(sandbox, "cheap")
    delivery = delivery_for(sandbox, number)
    cache = ReadCache()
    snap(gh, sandbox, delivery, cache=cache)
    first = len(transport.api_calls())
    snap(gh, sandbox, delivery, cache=cache)
    second = len(transport.api_calls()) - first
    assert (first, second) == (7, 6)  # the head commit's parents are read once


def test_a_review_only_delivery_reads_the_pr_alone(
    sandbox: SandboxHandle, gh: GitHubClient, transport: Counting
) -> None:
    number = open_pr(sandbox, "review-only")
    delivery = replace(delivery_for(sandbox, number), mode="review")
    cache = ReadCache()
    snap(gh, sandbox, delivery, cache=cache)
    before = len(transport.api_calls())
    snap(gh, sandbox, delivery, cache=cache)
    assert len(transport.api_calls()) - before == 1


def test_permissions_are_remembered_for_a_short_while_only(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    clock = [0.0]
    cache = ReadCache(permission_ttl_s=60, clock=lambda: clock[0])
    assert cache.permission(gh, sandbox.repo, "reader") == "read"
    sandbox.world.set_collaborator("reader", "write")
    assert cache.permission(gh, sandbox.repo, "reader") == "read"
    clock[0] = 61.0
    assert cache.permission(gh, sandbox.repo, "reader") == "write"


# ------------------------------------------------------------------------ live version


def live_url(sandbox: SandboxHandle) -> str:
    return f"{sandbox.api_url}/_sandbox/live/{sandbox.repo}"


def test_the_live_version_matches_once_the_merge_or_a_descendant_is_deployed(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    number = open_pr(sandbox, "live")
    merge_sha = sandbox.world.merge("maintainer", number)
    compare = compare_with(gh, sandbox.repo, ReadCache())
    with httpx.Client() as http:
        before = probe_version(http, live_url(sandbox), "sha", merge_sha, 1, compare=compare)
        initial = sandbox.world.live()["sha"]
        assert (before.sha, before.matches, before.error) == (initial, False, "")
        sandbox.world.set_deploy(delay=0)
        later = sandbox.world.push("maintainer", "main", {"later.txt": "1"})
        assert sandbox.world.settle()
        after = probe_version(
            http, live_url(sandbox), "sha", merge_sha, 2, compare=compare, now=lambda: NOW
        )
    assert after == VersionObservation(
        attempt=2, at="2026-07-01T12:00:00.000000+00:00", sha=later, matches=True
    )
    obs = (before, after)
    assert version_verdict(obs, since=1, needed=1).kind == "live"


def test_a_version_probe_that_gets_no_answer_says_why(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    compare = compare_with(gh, sandbox.repo, ReadCache())
    head = sandbox.world.live()["sha"]
    with httpx.Client() as http:
        missing = probe_version(
            http, f"{sandbox.api_url}/_sandbox/live/sandbox/none", "sha", head, 1, compare=compare
        )
        no_field = probe_version(http, live_url(sandbox), "commit", head, 2, compare=compare)
        nested = probe_version(http, live_url(sandbox), "build.sha", head, 3, compare=compare)
    assert (missing.sha, missing.matches) == (None, False)
    assert missing.error.startswith("HTTP 400 from ")  # the sandbox has no such repository
    assert no_field.sha is None and "'commit'" in no_field.error
    assert nested.sha is None

    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    with httpx.Client(transport=httpx.MockTransport(hang)) as slow:
        late = probe_version(slow, "https://example.test/version", "sha", head, 4, compare=compare)
    assert late.sha is None and "within 5s" in late.error

    def not_json(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>ok</html>")

    with httpx.Client(transport=httpx.MockTransport(not_json)) as html:
        odd = probe_version(html, "https://example.test/version", "sha", head, 5, compare=compare)
    assert odd.sha is None and "not JSON" in odd.error


def test_a_reported_version_github_does_not_know_never_matches(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    compare = compare_with(gh, sandbox.repo, ReadCache())

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"build": {"sha": "v1.2.3"}})

    head = sandbox.world.live()["sha"]
    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        found = probe_version(http, "https://example.test/v", "build.sha", head, 1, compare=compare)
    assert (found.sha, found.matches, found.error) == ("v1.2.3", False, "")
