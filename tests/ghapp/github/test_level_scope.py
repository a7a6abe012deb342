"""Which pull requests a level-triggered run looks at: those an event names, else the
labelled ones the event may concern."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from ghapp.github.level_scope import concerned, has_label, named_pull, names_none
from kernel.model import Event
from pipeline import Delivery, start

REPO = "acme/web"
NOW = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
HEAD, MERGE, OTHER = "a" * 40, "b" * 40, "c" * 40


def event(type_: str, subject: str = REPO, **details: Any) -> Event:
    return Event(source="github", id="x", type=type_, subject=subject, details=details)


def delivery(stage: str = "checks", **changes: Any) -> Delivery:
    d = start(repo=REPO, number=4, head_sha=HEAD, mode="deliver", now=NOW)
    return replace(d, stage=stage, base_ref="main", **changes)  # type: ignore[arg-type]


PULL: dict[str, Any] = {"state": "open", "head": {"sha": HEAD}}


@pytest.mark.parametrize(
    ("type_", "details", "number"),
    [
        ("pull_request.labeled", {}, 4),
        ("pull_request_review.submitted", {}, 4),
        ("check_suite.completed", {}, 4),
        ("workflow_run.completed", {}, 4),
        ("issue_comment.created", {"is_pull_request": True}, 4),
        ("issue_comment.created", {}, 0),  # on an issue
        ("issues.opened", {}, 0),
    ],
)
def test_events_about_a_pull_request_name_it(
    type_: str, details: dict[str, Any], number: int
) -> None:
    assert named_pull(event(type_, f"{REPO}#4", **details), REPO) == number


def test_a_pull_request_of_another_repository_is_not_named() -> None:
    assert named_pull(event("pull_request.labeled", "acme/other#4"), REPO) == 0


def test_an_issues_own_events_concern_no_delivery_but_the_clock_does() -> None:
    assert not names_none(event("issues.opened", f"{REPO}#4"))
    assert not names_none(event("issue_comment.created", f"{REPO}#4"))
    assert names_none(event("schedule"))
    assert names_none(event("deployment_status.success", f"{REPO}/deployments/9"))


def test_a_status_concerns_the_delivery_of_its_commit_only() -> None:
    assert concerned(delivery(), PULL, [event("status.success", sha=HEAD)])
    assert not concerned(delivery(), PULL, [event("status.success", sha=OTHER)])
    merged = delivery("deployment", merge_sha=MERGE)
    assert concerned(merged, PULL, [event("check_suite.completed", head_sha=MERGE)])


def test_a_deployment_concerns_deliveries_that_watch_deployments() -> None:
    dep = event("deployment_status.success", f"{REPO}/deployments/9", sha=OTHER)
    assert concerned(delivery("deployment", merge_sha=MERGE), PULL, [dep])
    assert concerned(delivery("live_version", merge_sha=MERGE), PULL, [dep])
    assert not concerned(delivery("checks"), PULL, [dep])


def test_a_push_concerns_deliveries_about_to_merge_into_that_branch() -> None:
    push = event("push", branch="main")
    assert concerned(delivery("merge"), PULL, [push])
    assert not concerned(delivery("merge"), PULL, [event("push", branch="docs")])
    assert not concerned(delivery("deployment", merge_sha=MERGE), PULL, [push])
    assert concerned(delivery("review", policy_problem="bad key"), PULL, [push])
    # a push that changes the policy: every delivery decides again under it
    changed = event("push", branch="main", policy_changed=True)
    assert not concerned(delivery("review"), PULL, [push])
    assert concerned(delivery("review"), PULL, [changed])


def test_the_clock_concerns_every_delivery() -> None:
    assert concerned(delivery("live_version", merge_sha=MERGE), PULL, [event("schedule")])


def test_what_the_pull_request_shows_and_the_state_does_not_know_concerns_it() -> None:
    dep = event("deployment_status.success", f"{REPO}/deployments/9", sha=MERGE)
    merged_pull = {"state": "closed", "merged": True, "head": {"sha": HEAD}}
    assert concerned(delivery("checks"), merged_pull, [dep])  # merged by a run that died
    pushed = {"state": "open", "head": {"sha": OTHER}}
    assert concerned(delivery("checks"), pushed, [event("status.success", sha=MERGE)])


def test_labels_are_matched_without_case() -> None:
    assert has_label({"labels": [{"name": "Deliver"}]}, {"deliver"})
    assert not has_label({"labels": [{"name": "bug"}]}, {"deliver"})
    assert not has_label({"labels": "deliver"}, {"deliver"})
