"""Verdicts over a PR snapshot: review, required checks, mergeability, deployment, version."""

from __future__ import annotations

import pytest

from pipeline.policy import Deploy, ReviewRule
from pipeline.snapshot import CommitStatus, Deployment, PrReview, Required, VersionObservation
from pipeline.verdicts import (
    checks_verdict,
    deployment_verdict,
    merge_readiness,
    required_checks,
    review_verdict,
    version_verdict,
)
from tests.pipeline.builders import (
    ACTIONS,
    BOT,
    BOT_APP,
    CIRCLECI,
    H1,
    H2,
    MERGED,
    UPDATED,
    green,
    policy,
    required,
    run,
    snap,
)

TWO = ReviewRule(kind="approvals", approvals=2)


def review(id: int, user: str, state: str, *, commit: str = H1, writer: bool = True) -> PrReview:
    return PrReview(id=id, user=user, state=state, commit_id=commit, author_can_write=writer)


# ------------------------------------------------------------------------------ review


def test_no_review_asked_passes_at_once() -> None:
    assert review_verdict(snap(), ReviewRule()).kind == "passed"


def test_approvals_count_only_approving_writers_on_the_current_head() -> None:
    reviews = (
        review(1, "alice", "APPROVED"),
        review(2, "bob", "APPROVED", commit=H2),  # an older head
        review(3, "carol", "APPROVED", writer=False),  # cannot write
        review(4, "dave", "COMMENTED"),
        review(5, BOT, "APPROVED"),  # ourselves
        review(6, "mona", "APPROVED"),  # the author
    )
    verdict = review_verdict(snap(reviews=reviews), TWO)
    assert (verdict.kind, verdict.approvals, verdict.needed, verdict.by) == (
        "waiting",
        1,
        2,
        ("alice",),
    )
    more = review_verdict(snap(reviews=(*reviews, review(7, "erin", "APPROVED"))), TWO)
    assert (more.kind, more.by) == ("passed", ("alice", "erin"))


def test_a_later_dismissal_or_change_request_replaces_an_approval() -> None:
    reviews = (
        review(2, "alice", "DISMISSED"),  # listed out of order: the id decides
        review(1, "alice", "APPROVED"),
        review(3, "bob", "APPROVED"),
        review(4, "bob", "COMMENTED"),  # a comment does not undo an approval
    )
    assert review_verdict(snap(reviews=reviews), TWO).approvals == 1
    blocked = review_verdict(
        snap(
            reviews=(
                *reviews,
                review(5, "erin", "APPROVED"),
                review(6, "erin", "CHANGES_REQUESTED"),
            )
        ),
        ReviewRule(kind="approvals", approvals=1),
    )
    assert (blocked.kind, blocked.by) == ("changes_requested", ("erin",))


def test_approvals_on_a_head_our_own_update_replaced_still_count() -> None:
    pr = snap(head_sha=UPDATED, reviews=(review(1, "alice", "APPROVED", commit=H1),))
    rule = ReviewRule(kind="approvals", approvals=1)
    assert review_verdict(pr, rule).kind == "waiting"
    assert review_verdict(pr, rule, heads=(UPDATED, H1)).kind == "passed"


def test_an_agent_review_is_needed_once_per_head() -> None:
    rule = ReviewRule(kind="agent", agent="reviewer")
    assert review_verdict(snap(), rule).kind == "agent_needed"
    assert review_verdict(snap(), rule, agent_reviews=[(H2, "COMMENT")]).kind == "agent_needed"
    assert review_verdict(snap(), rule, agent_reviews=[(H1, "COMMENT")]).kind == "passed"
    asked = review_verdict(snap(), rule, agent_reviews=[(H1, "REQUEST_CHANGES")])
    assert asked.kind == "changes_requested"


# ------------------------------------------------------------------------------ checks


def test_required_checks_are_the_union_of_protection_rulesets_and_policy() -> None:
    pr = snap(
        required=(
            Required(name="build", app_id=ACTIONS, source="protection"),
            Required(name="build", app_id=ACTIONS, source="ruleset"),
            Required(name="lint", source="ruleset"),
            Required(name="autoloop/deliver", source="protection"),
        )
    )
    found = required_checks(pr, policy('[deliver]\nrequired_checks = ["e2e", "lint"]\n'))
    assert [(r.name, r.app_id, r.source) for r in found] == [
        ("build", ACTIONS, "protection"),
        ("lint", None, "ruleset"),
        ("e2e", None, "policy"),
    ]


def test_all_required_checks_passing_is_a_pass() -> None:
    verdict = checks_verdict(snap(), policy())
    assert (verdict.kind, verdict.passed) == ("passed", ("build (app 15368)", "test (app 15368)"))


def test_no_required_checks_is_a_pass() -> None:
    assert checks_verdict(snap(required=(), check_runs=()), policy()).kind == "passed"


def test_a_check_that_never_reported_is_missing() -> None:
    verdict = checks_verdict(snap(check_runs=green("build")), policy())
    assert (verdict.kind, verdict.missing) == ("missing", ("test (app 15368)",))


def test_a_running_check_is_pending_and_a_failed_one_fails() -> None:
    runs = (run("build", None, id=1), run("test", "failure", id=2))
    verdict = checks_verdict(snap(check_runs=runs), policy())
    assert (verdict.kind, verdict.pending, verdict.failed) == (
        "failed",
        ("build (app 15368)",),
        ("test (app 15368)",),
    )


def test_a_rerun_from_failure_to_success_counts_as_success() -> None:
    runs = (
        run("build", "success", id=10),
        run("test", "failure", id=11),
        run("test", "success", id=12),
    )
    assert checks_verdict(snap(check_runs=runs), policy()).kind == "passed"
    again = (*runs, run("test", None, id=13))  # and a re-run still going is pending
    assert checks_verdict(snap(check_runs=again), policy()).pending == ("test (app 15368)",)


def test_only_runs_on_the_current_head_count() -> None:
    runs = (run("build", "success", id=1), run("test", "success", id=2, head=H2))
    assert checks_verdict(snap(check_runs=runs), policy()).missing == ("test (app 15368)",)


def test_a_check_of_the_right_name_from_the_wrong_app_does_not_count() -> None:
    runs = (run("build", "success", id=1), run("test", "success", id=2, app=CIRCLECI))
    verdict = checks_verdict(snap(check_runs=runs), policy())
    assert verdict.missing == ("test (app 15368)",)


def test_without_an_app_named_every_app_reporting_the_name_counts() -> None:
    pr = snap(
        required=required("test", app=None),
        check_runs=(run("test", "success", id=1), run("test", "failure", id=2, app=CIRCLECI)),
    )
    assert checks_verdict(pr, policy()).failed == ("test",)
    fixed = snap(
        required=required("test", app=None),
        check_runs=(run("test", "success", id=1, app=CIRCLECI),),
    )
    assert checks_verdict(fixed, policy()).kind == "passed"


def test_commit_statuses_count_by_context() -> None:
    statuses = (
        CommitStatus(id=2, context="ci/jenkins", state="success", sha=H1),
        CommitStatus(id=1, context="ci/jenkins", state="failure", sha=H1),  # older, listed later
        CommitStatus(id=3, context="deploy/preview", state="pending", sha=H1),
    )
    pr = snap(required=required("ci/jenkins", "deploy/preview", app=None), statuses=statuses)
    verdict = checks_verdict(pr, policy())
    assert (verdict.passed, verdict.pending) == (("ci/jenkins",), ("deploy/preview",))
    errored = CommitStatus(id=4, context="deploy/preview", state="error", sha=H1)
    assert checks_verdict(
        snap(required=pr.required, statuses=(*statuses, errored)), policy()
    ).failed == ("deploy/preview",)


def test_a_status_from_another_app_than_the_one_required_does_not_count() -> None:
    pr = snap(
        required=required("ci/jenkins"),
        check_runs=(),
        statuses=(
            CommitStatus(id=1, context="ci/jenkins", state="success", sha=H1, app_id=CIRCLECI),
        ),
    )
    assert checks_verdict(pr, policy()).missing == ("ci/jenkins (app 15368)",)
    right = CommitStatus(id=2, context="ci/jenkins", state="success", sha=H1, app_id=ACTIONS)
    assert checks_verdict(snap(required=pr.required, statuses=(right,)), policy()).kind == "passed"


def test_a_conclusion_we_do_not_know_yet_is_pending() -> None:
    pr = snap(required=required("build"), check_runs=(run("build", "expected", id=1),))
    assert checks_verdict(pr, policy()).pending == ("build (app 15368)",)


def test_our_own_check_runs_and_statuses_never_count() -> None:
    pr = snap(
        required=required("build", app=None),
        check_runs=(run("build", "success", id=5, app=BOT_APP),),
        statuses=(CommitStatus(id=6, context="build", state="success", sha=H1, app_id=BOT_APP),),
    )
    assert checks_verdict(pr, policy()).missing == ("build",)
    own = snap(required=(Required(name="autoloop/deliver"),), check_runs=())
    assert checks_verdict(own, policy()).kind == "passed"


def test_the_policy_adds_required_checks() -> None:
    pr = snap(check_runs=(*green("build", "test"), run("e2e", None, id=9)))
    verdict = checks_verdict(pr, policy('[deliver]\nrequired_checks = ["e2e"]\n'))
    assert (verdict.kind, verdict.pending) == ("pending", ("e2e",))


# ------------------------------------------------------------------------------- merge


@pytest.mark.parametrize(
    ("changes", "update_branch", "kind"),
    [
        ({}, True, "ready"),
        ({"mergeable_state": "unstable"}, True, "ready"),
        ({"mergeable_state": "has_hooks"}, True, "ready"),
        ({"draft": True, "mergeable_state": "draft"}, True, "draft"),
        ({"mergeable": False, "mergeable_state": "dirty"}, True, "conflict"),
        ({"behind_base": True}, True, "update"),
        ({"mergeable_state": "behind"}, True, "update"),
        ({"mergeable_state": "behind"}, False, "behind"),
        ({"behind_base": True}, False, "ready"),
        ({"mergeable": None, "mergeable_state": "unknown"}, True, "unknown"),
        ({"mergeable_state": "blocked"}, True, "blocked"),
    ],
)
def test_merge_readiness(changes: dict[str, object], update_branch: bool, kind: str) -> None:
    text = f"[deliver]\nupdate_branch = {str(update_branch).lower()}\n"
    assert merge_readiness(snap(**changes), policy(text)).kind == kind


# -------------------------------------------------------------------------- deployment


def deployment(id: int, state: str, *, ours: bool = True, env: str = "production") -> Deployment:
    sha = MERGED if ours else H2
    return Deployment(id=id, sha=sha, environment=env, state=state, sha_is_merge_or_descendant=ours)


def test_a_successful_deployment_of_the_merge_or_a_descendant_counts() -> None:
    found = deployment_verdict(snap(deployments=(deployment(7, "success"),)), Deploy())
    assert found.kind == "deployed"
    assert found.deployment is not None and found.deployment.id == 7


@pytest.mark.parametrize(
    ("deployments", "kind"),
    [
        ((), "none"),
        ((deployment(1, "success", ours=False),), "none"),
        ((deployment(1, "success", env="staging"),), "none"),
        ((deployment(1, "in_progress"),), "pending"),
        ((deployment(1, "failure"),), "failed"),
        ((deployment(1, "error"),), "failed"),
        ((deployment(1, "failure"), deployment(2, "queued")), "pending"),
        ((deployment(1, "failure"), deployment(2, "success")), "deployed"),
        ((deployment(1, "success"), deployment(2, "failure")), "deployed"),
        ((deployment(1, "inactive"),), "pending"),
    ],
)
def test_deployment_verdict(deployments: tuple[Deployment, ...], kind: str) -> None:
    assert deployment_verdict(snap(deployments=deployments), Deploy()).kind == kind


def test_the_environment_name_is_matched_without_case() -> None:
    found = deployment_verdict(
        snap(deployments=(deployment(1, "success", env="Production"),)), Deploy()
    )
    assert found.kind == "deployed"


# ----------------------------------------------------------------------------- version


def seen(attempt: int, sha: str | None, matches: bool) -> VersionObservation:
    return VersionObservation(
        attempt=attempt,
        at="2026-03-02T10:00:00+00:00",
        sha=sha,
        matches=matches,
        error="" if sha else "503",
    )


def test_the_version_is_live_after_enough_matches_in_a_row() -> None:
    one = (seen(1, H2, False), seen(2, MERGED, True))
    assert version_verdict(one, since=1, needed=2).kind == "waiting"
    live = version_verdict((*one, seen(3, MERGED, True)), since=1, needed=2)
    assert (live.kind, live.streak, live.last) == ("live", 2, MERGED)


def test_a_match_followed_by_another_commit_is_flapping() -> None:
    flapping = (seen(1, MERGED, True), seen(2, H2, False), seen(3, MERGED, True))
    verdict = version_verdict(flapping, since=1, needed=2)
    assert (verdict.kind, verdict.flaps, verdict.streak) == ("flapping", 1, 1)


def test_a_failed_probe_neither_counts_nor_breaks_a_streak() -> None:
    answers = (seen(1, MERGED, True), seen(2, None, False), seen(3, MERGED, True))
    assert version_verdict(answers, since=1, needed=2).kind == "live"
    assert version_verdict(answers, since=1, needed=3).streak == 2


def test_answers_before_the_current_watch_are_ignored() -> None:
    answers = (seen(1, MERGED, True), seen(2, MERGED, True), seen(3, H2, False))
    assert version_verdict(answers, since=3, needed=1).kind == "waiting"
    assert version_verdict(answers, since=3, needed=1).flaps == 0
