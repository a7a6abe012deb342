"""``autoloop action`` in modes ``deliver`` and ``auto``, run as a runner runs it.

Each run is a subprocess with the environment a workflow step gets (event name, an
event file built from GitHub's own example payloads, output and summary files,
``GITHUB_TOKEN`` for the sandbox), against the sandbox GitHub on loopback
(:mod:`tests.action_runner`). No webhook reaches the runs: as on GitHub, each event
starts a new job, and a job ends as soon as its delivery waits on the world.

One delivery crosses several workflow runs: ``pull_request`` labelled ``deliver``, then
``check_suite`` completed, then ``deployment_status`` success, then (the live version
wants two answers in a row) a scheduled run. It is done once with a home that outlives
the jobs (a self-hosted runner) and once with a fresh home on every run (a hosted runner
without a database), where each run rebuilds the delivery from its own check run and
sticky comment on the pull request.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fakegithub.server import SandboxHandle
from ghapp.github import retry
from ghapp.github.carried import decode_state
from tests.action_runner import BOT, Ran, Runner, annotations, sandbox_runner, spent_nothing

CHECK = "autoloop/deliver"
MARK = "<!-- autoloop:deliver="


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    retry.set_testing(True)
    try:
        with sandbox_runner(tmp_path) as made:
            yield made
    finally:
        retry.set_testing(False)


def policy(gh: SandboxHandle, *, matches: int = 2) -> str:
    live = f"{gh.api_url}/_sandbox/live/{gh.repo}"
    return (
        '[deliver]\nmerge_method = "squash"\nrequired_checks = ["ci"]\n'
        f'\n[deliver.deploy]\nenvironment = "production"\ntimeout = "30m"\n'
        f'version_url = "{live}"\nmatches = {matches}\n'
    )


def prepare(r: Runner, *, matches: int = 2) -> tuple[int, str]:
    """The policy on main, ``ci`` required, deploys of main that take a while, and a pull
    request from a contributor; CI has not reported on it yet."""
    world = r.gh.world
    world.push("maintainer", "main", {".github/autoloop.toml": policy(r.gh, matches=matches)})
    world.set_protection("main", contexts=["ci"])
    world.set_deploy(delay=1.5)
    number = world.open_pr("contributor", "feature", "Add the feature", {"feature.py": "x = 1\n"})
    assert world.settle()
    return number, r.gh.sandbox.state.repos[r.gh.repo].branches["feature"]


def ci_passes(r: Runner, head: str) -> None:
    r.gh.world.set_ci({"ci": "success"})
    r.gh.world.run_ci(head)
    assert r.gh.world.settle()


def merges(r: Runner, actor: str = BOT) -> int:
    entries = r.gh.world.audit.entries(method="PUT")
    return len([e for e in entries if e.path.endswith("/merge") and e.actor == actor])


def sticky(r: Runner, number: int) -> list[dict[str, Any]]:
    return [c for c in r.comments(number) if MARK in c["body"]]


def own_runs(r: Runner, head: str) -> list[tuple[str, str | None]]:
    runs = r.gh.sandbox.state.repos[r.gh.repo].check_runs.values()
    return [(x.status, x.conclusion) for x in runs if x.head_sha == head and x.name == CHECK]


def stage_shown(r: Runner, number: int) -> str:
    (comment,) = sticky(r, number)
    state = decode_state(comment["body"])
    assert state is not None
    return str(state["stage"])


def ok(ran: Ran) -> Ran:
    assert ran.code == 0, ran.stdout + ran.stderr
    assert not annotations(ran.stdout, "error"), ran.stdout
    assert "Traceback" not in ran.stdout + ran.stderr
    return ran


def later(minutes: int) -> str:
    return (datetime.now(UTC) + timedelta(minutes=minutes)).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- the sequence


def deliver_across_runs(r: Runner, *, fresh: bool) -> tuple[int, str, list[Ran]]:
    """labelled, check suite completed, deployment status, the clock: four runs."""
    number, head = prepare(r)
    r.gh.world.add_label("maintainer", number, "deliver")
    homes = iter(range(1, 10))

    def run(event: str, payload: dict[str, Any], run_id: int, **extra: str) -> Ran:
        home = str(r.tmp / f"home-{next(homes)}") if fresh else str(r.home)
        started = time.monotonic()
        ran = r.run(
            event, payload, run_id=run_id, AUTOLOOP_MODE="deliver", AUTOLOOP_HOME=home, **extra
        )
        # Nothing waits in the job: each run ends as soon as its delivery waits.
        assert time.monotonic() - started < 30
        return ok(ran)

    labelled = run("pull_request", r.pull_labeled(number, "deliver", "maintainer"), 8001)
    assert labelled.outputs == spent_nothing(0, 0, "checks")
    assert own_runs(r, head) == [("in_progress", None)]
    assert stage_shown(r, number) == "checks"
    assert merges(r) == 0

    ci_passes(r, head)
    checked = run("check_suite", r.check_suite_completed(number), 8002)
    assert checked.outputs == spent_nothing(0, 0, "deployment")
    assert merges(r) == 1
    assert r.reader.get_pull(r.gh.repo, number)["merged"] is True

    assert r.gh.world.settle()  # the deployment of the merge commit succeeds
    deployed = run("deployment_status", r.deployment_status(), 8003)
    # The live version is read as soon as the deployment succeeded, and again 5 s later
    # (a wait that short is taken within the run): both match, so it ends delivered.
    assert deployed.outputs == spent_nothing(0, 0, "delivered")

    # The clock's run (a scheduled workflow) a minute later finds nothing left to do: a
    # delivered PR is no longer among those it looks at.
    ticked = run("schedule", r.schedule(), 8004, AUTOLOOP_CLOCK=later(1))
    assert ticked.outputs == spent_nothing(0, 0)
    return number, head, [labelled, checked, deployed, ticked]


def assert_delivered_once(r: Runner, number: int, head: str) -> None:
    assert merges(r) == 1
    assert own_runs(r, head) == [("completed", "success")]
    (comment,) = sticky(r, number)
    assert comment["user"]["login"] == BOT
    assert "**Delivered" in comment["body"]
    state = decode_state(comment["body"])
    assert state is not None and state["stage"] == "delivered"
    stages = [h["stage"] for h in state["history"]]
    assert stages == [
        "review",
        "ready",
        "checks",
        "merge",
        "deployment",
        "live_version",
        "delivered",
    ]


def test_a_delivery_crosses_four_workflow_runs_with_a_home_that_outlives_them(
    runner: Runner,
) -> None:
    r = runner
    number, head, runs = deliver_across_runs(r, fresh=False)
    assert_delivered_once(r, number, head)
    labelled, checked, deployed, _ticked = runs

    # The summary tables each run's delivery, linked to its sticky comment.
    (comment,) = sticky(r, number)
    link = f"/sandbox/demo/issues/{number}#issuecomment-{comment['id']})"
    assert link in labelled.summary
    assert "| started → `checks` | required checks ci |" in labelled.summary
    assert "| `checks` → `deployment` | a successful deployment of" in checked.summary
    assert "`github.merge:done`" in checked.summary
    assert "| `deployment` → `delivered` | - |" in deployed.summary, deployed.summary
    assert "Nothing waits in this job" in checked.summary
    # GITHUB_TOKEN merged it, which starts no push workflow: every run that moved the
    # delivery says so; the clock's run, which found nothing to move, does not.
    *moving, ticked = runs
    for ran in moving:
        (warning,) = annotations(ran.stdout, "warning")
        assert "GITHUB_TOKEN does not start 'push' workflows" in warning
    assert annotations(ticked.stdout, "warning") == []


def test_a_fresh_home_on_every_run_rebuilds_from_the_pull_request_and_merges_once(
    runner: Runner,
) -> None:
    r = runner
    fault = r.gh.world.faults.add("response_lost", method="PUT", path="*/merge")
    number, head, runs = deliver_across_runs(r, fresh=True)
    assert_delivered_once(r, number, head)
    assert fault.hits == 1  # the merge landed and its answer was lost: read back, not redone
    labelled, checked, deployed, _ticked = runs
    assert "started at checks" in labelled.stdout
    for ran in (checked, deployed):
        assert "(state read from its comment)" in ran.stdout
    assert "`github.merge:done`" in checked.summary


def test_a_run_that_finds_nothing_new_writes_nothing(runner: Runner) -> None:
    r = runner
    number, head = prepare(r)
    r.gh.world.add_label("maintainer", number, "deliver")
    payload = r.pull_labeled(number, "deliver", "maintainer")
    ok(r.run("pull_request", payload, run_id=8101, AUTOLOOP_MODE="deliver"))
    before = len(r.writes())
    # A re-run of the same run, and the clock's run in a fresh home: both read the same
    # state back from the pull request and have nothing to change.
    again = ok(r.run("pull_request", payload, run_id=8101, attempt=2, AUTOLOOP_MODE="deliver"))
    assert again.outputs["stage"] == "checks"
    tick = ok(
        r.run(
            "schedule",
            r.schedule(),
            run_id=8102,
            AUTOLOOP_MODE="deliver",
            AUTOLOOP_HOME=str(r.tmp / "elsewhere"),
        )
    )
    assert "#1: still checks" in tick.stdout, tick.stdout
    assert len(r.writes()) == before
    assert own_runs(r, head) == [("in_progress", None)]


def test_a_run_that_died_before_showing_its_state_is_taken_over_by_the_next(
    runner: Runner,
) -> None:
    """The merge happened, but neither the check run nor the comment took the new state
    (their writes fail): the next run starts from the state before the merge, reads the
    pull request merged, and goes on to the deployment without merging again."""
    r = runner
    number, head = prepare(r, matches=1)
    r.gh.world.add_label("maintainer", number, "deliver")
    home = {"AUTOLOOP_MODE": "deliver"}
    ok(r.run("pull_request", r.pull_labeled(number, "deliver", "maintainer"), run_id=8201, **home))
    ci_passes(r, head)
    for path in ("*/check-runs/*", "*/issues/comments/*"):
        r.gh.world.faults.add("error_502", method="PATCH", path=path, times=None)
    broken = r.run("check_suite", r.check_suite_completed(number), run_id=8202, **home)
    assert broken.code == 1
    (error,) = annotations(broken.stdout, "error")
    assert f"delivery sandbox/demo#{number}: GitHub:" in error
    assert merges(r) == 1
    assert stage_shown(r, number) == "checks"  # the state on the PR is the one before
    r.gh.world.faults.clear()
    assert r.gh.world.settle()
    done = ok(
        r.run(
            "deployment_status",
            r.deployment_status(),
            run_id=8203,
            AUTOLOOP_HOME=str(r.tmp / "fresh"),
            **home,
        )
    )
    assert done.outputs["stage"] == "delivered"
    assert merges(r) == 1
    assert stage_shown(r, number) == "delivered"


def test_the_check_run_carries_the_state_when_the_comment_did_not_take_it(
    runner: Runner,
) -> None:
    r = runner
    number, head = prepare(r, matches=1)
    r.gh.world.add_label("maintainer", number, "deliver")
    home = {"AUTOLOOP_MODE": "deliver"}
    ok(r.run("pull_request", r.pull_labeled(number, "deliver", "maintainer"), run_id=8301, **home))
    ci_passes(r, head)
    r.gh.world.faults.add("error_502", method="PATCH", path="*/issues/comments/*", times=None)
    assert r.run("check_suite", r.check_suite_completed(number), run_id=8302, **home).code == 1
    assert stage_shown(r, number) == "checks"
    r.gh.world.faults.clear()
    assert r.gh.world.settle()
    done = ok(
        r.run(
            "deployment_status",
            r.deployment_status(),
            run_id=8303,
            AUTOLOOP_HOME=str(r.tmp / "fresh"),
            **home,
        )
    )
    assert "deployment -> delivered (state read from its check run)" in done.stdout
    assert merges(r) == 1
    assert stage_shown(r, number) == "delivered"


def test_a_delivery_that_ended_starts_again_only_on_a_new_label(runner: Runner) -> None:
    r = runner
    number, head = prepare(r)
    r.gh.world.add_label("maintainer", number, "deliver")
    labelled = r.pull_labeled(number, "deliver", "maintainer")
    ok(r.run("pull_request", labelled, run_id=8151, AUTOLOOP_MODE="deliver"))
    r.gh.world.remove_label("maintainer", number, "deliver")
    unlabelled = r.pull_labeled(number, "deliver", "maintainer", action="unlabeled")
    cancelled = ok(r.run("pull_request", unlabelled, run_id=8152, AUTOLOOP_MODE="deliver"))
    assert cancelled.outputs["stage"] == "cancelled"
    assert own_runs(r, head) == [("completed", "neutral")]

    # Someone re-runs the first run in a fresh home, with the label back on: its event is
    # older than the end of the delivery, so nothing starts again.
    r.gh.world.add_label("maintainer", number, "deliver")
    before = len(r.writes())
    fresh = str(r.tmp / "rerun")
    rerun = ok(
        r.run(
            "pull_request",
            labelled,
            run_id=8151,
            attempt=2,
            AUTOLOOP_MODE="deliver",
            AUTOLOOP_HOME=fresh,
        )
    )
    assert rerun.outputs["stage"] == "cancelled"  # where its delivery is, unmoved
    assert f"#{number}: still cancelled" in rerun.stdout, rerun.stdout
    assert "cancelled -> cancelled" not in rerun.stdout
    assert len(r.writes()) == before

    # The new label event starts run 2 of the delivery; its progress is shown (its seq
    # goes on from the one the pull request shows).
    again = r.pull_labeled(number, "deliver", "maintainer")
    restarted = ok(r.run("pull_request", again, run_id=8153, AUTOLOOP_MODE="deliver"))
    assert restarted.outputs["stage"] == "checks", restarted.stdout
    (comment,) = sticky(r, number)
    state = decode_state(comment["body"])
    assert state is not None and (state["run"], state["stage"]) == (2, "checks")
    assert own_runs(r, head) == [("in_progress", None)]
    assert merges(r) == 0


def test_a_rerun_of_a_failed_relabel_run_starts_the_delivery_in_the_same_home(
    runner: Runner,
) -> None:
    """With a home that outlives the job, the re-run of a label run that failed found its
    event recorded already, and the delivery stayed cancelled with the label on."""
    r = runner
    number, _ = prepare(r)
    r.gh.world.add_label("maintainer", number, "deliver")
    labelled = r.pull_labeled(number, "deliver", "maintainer")
    ok(r.run("pull_request", labelled, run_id=8161, AUTOLOOP_MODE="deliver"))
    r.gh.world.remove_label("maintainer", number, "deliver")
    unlabelled = r.pull_labeled(number, "deliver", "maintainer", action="unlabeled")
    ok(r.run("pull_request", unlabelled, run_id=8162, AUTOLOOP_MODE="deliver"))
    time.sleep(1.1)  # GitHub's times are to the second: the label comes after the end
    r.gh.world.add_label("maintainer", number, "deliver")
    again = r.pull_labeled(number, "deliver", "maintainer")
    r.gh.world.faults.add("error_502", method="GET", path="*/pulls/*", times=None)
    failed = r.run("pull_request", again, run_id=8163, AUTOLOOP_MODE="deliver")
    assert failed.code == 1, failed.stdout + failed.stderr
    r.gh.world.faults.clear()
    rerun = ok(r.run("pull_request", again, run_id=8163, attempt=2, AUTOLOOP_MODE="deliver"))
    assert "already recorded" in rerun.stdout
    assert rerun.outputs["stage"] == "checks", rerun.stdout
    assert merges(r) == 0


# --------------------------------------------------------------------------- cards


def test_a_label_from_someone_who_cannot_merge_starts_nothing(runner: Runner) -> None:
    """The triage role may label; a ``deliver`` label from it carried the pull request to
    a merge. Who added it is the labelled event's sender, or for a run on another event,
    the pull request's own history."""
    r = runner
    number, head = prepare(r)
    r.gh.world.set_collaborator("triager", "triage")
    r.gh.world.add_label("triager", number, "deliver")
    home = {"AUTOLOOP_MODE": "deliver", "AUTOLOOP_HOME": str(r.home)}
    payload = r.pull_labeled(number, "deliver", "triager")
    labelled = ok(r.run("pull_request", payload, run_id=8601, **home))
    assert labelled.outputs["stage"] == ""
    refused = [c["body"] for c in r.comments(number) if "autoloop:refused=" in c["body"]]
    assert len(refused) == 1
    assert (
        f"@triager: the `deliver` label did not start a delivery: only people with write "
        f"access to {r.gh.repo} can start a delivery (@triager: read)."
    ) in refused[0]
    ci_passes(r, head)
    checked = ok(r.run("check_suite", r.check_suite_completed(number), run_id=8602, **home))
    assert checked.outputs["stage"] == ""  # read from the history: still the triager's
    assert merges(r) == 0 and not own_runs(r, head) and not sticky(r, number)
    assert len([c for c in r.comments(number) if "autoloop:refused=" in c["body"]]) == 1


def test_deliver_review_added_during_a_delivery_gets_one_reply(runner: Runner) -> None:
    """The other delivery label, added while a run goes on, was ignored without a word
    (the server replied; the Action did not)."""
    r = runner
    number, _ = prepare(r)
    home = {"AUTOLOOP_MODE": "deliver", "AUTOLOOP_HOME": str(r.home)}
    r.gh.world.add_label("maintainer", number, "deliver")
    started = ok(r.run("pull_request", r.pull_labeled(number, "deliver", "maintainer"),
                       run_id=8701, **home))  # fmt: skip
    assert started.outputs["stage"] == "checks"
    r.gh.world.add_label("maintainer", number, "deliver-review")
    payload = r.pull_labeled(number, "deliver-review", "maintainer")
    for run_id in (8702, 8703):  # a re-run says nothing more
        ok(r.run("pull_request", payload, run_id=run_id, **home))
    refused = [c["body"] for c in r.comments(number) if "autoloop:refused=" in c["body"]]
    assert len(refused) == 1
    assert (
        "@maintainer: the `deliver-review` label did not start a delivery: a delivery "
        "(`deliver`) runs on this pull request, and it is reviewed as part of it"
    ) in refused[0]


def test_both_labels_added_at_once_start_the_delivery_and_the_other_gets_its_reply(
    runner: Runner,
) -> None:
    """``deliver`` and ``deliver-review`` added together: whichever event came first
    started the delivery (``deliver`` wins), and ``deliver-review`` got no word, where
    added a moment later it got a reply."""
    r = runner
    number, _ = prepare(r)
    home = {"AUTOLOOP_MODE": "deliver", "AUTOLOOP_HOME": str(r.home)}
    r.gh.world.add_label("maintainer", number, "deliver")
    r.gh.world.add_label("maintainer", number, "deliver-review")
    for run_id, label in ((8711, "deliver-review"), (8712, "deliver")):
        ran = ok(r.run("pull_request", r.pull_labeled(number, label, "maintainer"),
                       run_id=run_id, **home))  # fmt: skip
    assert ran.outputs["stage"] == "checks"
    refused = [c["body"] for c in r.comments(number) if "autoloop:refused=" in c["body"]]
    assert len(refused) == 1, refused
    assert "the `deliver-review` label did not start a delivery" in refused[0]


def test_a_scheduled_run_moves_a_delivery_whose_label_the_policy_renamed(
    runner: Runner,
) -> None:
    """The policy renamed its label (``deliver`` to ``ship``) while a delivery labelled
    ``deliver`` waited for its checks: a run of the clock looked only for ``ship`` and
    never moved it (only an event of the pull request's own did)."""
    r = runner
    number, _ = prepare(r)
    home = {"AUTOLOOP_MODE": "deliver", "AUTOLOOP_HOME": str(r.home)}
    r.gh.world.add_label("maintainer", number, "deliver")
    labelled = r.pull_labeled(number, "deliver", "maintainer")
    assert ok(r.run("pull_request", labelled, run_id=8731, **home)).outputs["stage"] == "checks"
    renamed = policy(r.gh) + '\n[deliver.labels]\ndeliver = "ship"\n'
    r.gh.world.push("maintainer", "main", {".github/autoloop.toml": renamed})
    assert r.gh.world.settle()
    ci_passes(r, r.gh.sandbox.state.repos[r.gh.repo].branches["feature"])
    ticked = ok(r.run("schedule", r.schedule(), run_id=8732, **home))
    assert f"#{number}" in ticked.stdout, ticked.stdout  # it was looked at
    assert stage_shown(r, number) != "cancelled"


def pull_comment(r: Runner, login: str, number: int, text: str) -> dict[str, Any]:
    """``login`` comments ``text`` on pull request ``number``: the event's payload."""
    said = r.gh.world.comment(login, number, text)
    payload = r.comment_created(number, said)
    payload["issue"]["pull_request"] = {"url": f"{r.gh.api_url}/pulls/{number}"}
    return payload


def blocked_on_a_failed_deployment(
    r: Runner, home: dict[str, str], *, first_run_id: int
) -> tuple[int, Ran]:
    """A pull request labelled, its checks passed and merged, its deployment failed: the
    delivery blocked on card d1, in three runs from ``first_run_id``."""
    number, head = prepare(r, matches=1)
    r.gh.world.set_deploy(delay=0.2, result="failure")
    r.gh.world.add_label("maintainer", number, "deliver")
    labelled = r.pull_labeled(number, "deliver", "maintainer")
    ok(r.run("pull_request", labelled, run_id=first_run_id, **home))
    ci_passes(r, head)
    ok(r.run("check_suite", r.check_suite_completed(number), run_id=first_run_id + 1, **home))
    assert r.gh.world.settle()
    blocked = ok(r.run("deployment_status", r.deployment_status(), run_id=first_run_id + 2, **home))
    return number, blocked


def test_a_failed_deployment_is_a_card_answered_on_the_pull_request(runner: Runner) -> None:
    r = runner
    home = {"AUTOLOOP_MODE": "deliver"}
    number, blocked = blocked_on_a_failed_deployment(r, home, first_run_id=8401)
    assert blocked.outputs == spent_nothing(0, 1, "blocked")
    assert "`d1` (`/answer d1 N` on the pull request)" in blocked.summary
    (comment,) = sticky(r, number)
    assert "`/answer d1 2` to stop watching (the merge stays)" in comment["body"]

    # A reader's answer is refused with one reply; a maintainer's is taken, each by the
    # run its comment starts, in a home of its own.
    for login, run_id in (("reader", 8404), ("maintainer", 8405)):
        payload = pull_comment(r, login, number, "/answer d1 2")
        answered = ok(
            r.run("issue_comment", payload, run_id=run_id, AUTOLOOP_HOME=str(r.tmp / login), **home)
        )
    assert answered.outputs["stage"] == "cancelled"
    assert "/answer d1 2 by maintainer" in answered.stdout
    replies = [c for c in r.comments(number) if "was not taken" in c["body"]]
    assert len(replies) == 1 and "@reader" in replies[0]["body"]
    assert "only people with write access" in replies[0]["body"]
    assert merges(r) == 1  # the merge stays; nothing is merged again
    assert stage_shown(r, number) == "cancelled"


def test_a_wrong_delivery_answer_gets_one_reply_and_the_rules_desk_leaves_it_alone(
    runner: Runner,
) -> None:
    """In mode auto (the rules' answer desk and the delivery in one run), `/answer d1 2`
    got a reply saying it was no answer while the delivery took it; an answer naming
    another card, or no number, got nothing at all."""
    r = runner
    home = {"AUTOLOOP_MODE": "auto"}
    number, blocked = blocked_on_a_failed_deployment(r, home, first_run_id=8411)
    assert blocked.outputs["stage"] == "blocked"

    def say(text: str, run_id: int) -> Ran:
        payload = pull_comment(r, "maintainer", number, text)
        return ok(r.run("issue_comment", payload, run_id=run_id, **home))

    def replies() -> list[str]:
        return [c["body"] for c in r.comments(number) if "was not taken" in c["body"]]

    time.sleep(1.1)  # GitHub's times are to the second: a later one than the card's
    say("/answer d2 1", 8414)
    say("/answer d1 one", 8415)
    wrong = replies()
    assert len(wrong) == 2, wrong
    assert "your `/answer d2 1` was not taken: card d1 is the one open" in wrong[0]
    assert "your `/answer d1 one` was not taken: card d1 is the one open" in wrong[1]
    assert all("`/answer d1 N` on a line of its own, N from 1 to 2" in w for w in wrong)
    taken = say("/answer d1 2", 8416)
    assert taken.outputs["stage"] == "cancelled"
    assert "/answer d1 2 by maintainer" in taken.stdout
    assert "refused" not in taken.summary and len(replies()) == 2  # no reply to the answer
    say("/answer d7 1", 8417)
    say("/answer d1 1", 8418)  # the card that was answered: no reply (a re-run sees it too)
    after = replies()
    assert len(after) == 3, after
    assert "there is no card d7 on this pull request, and no delivery card is open" in after[2]
    assert merges(r) == 1


# --------------------------------------------------------------------------- tokens


MINIMAL = {
    "contents": "write",  # the merge
    "pull_requests": "write",  # the sticky comment, a review, ready for review
    "checks": "write",  # the autoloop/deliver check run
    "statuses": "read",
    "deployments": "read",
    "metadata": "read",  # GitHub grants it to every workflow token
}


def test_the_documented_minimal_permissions_of_a_token_are_enough(runner: Runner) -> None:
    r = runner
    number, head = prepare(r, matches=1)
    r.gh.world.add_label("maintainer", number, "deliver")
    token = r.gh.world.actions_token(permissions=MINIMAL)
    home = {"AUTOLOOP_MODE": "deliver", "GITHUB_TOKEN": token}
    ok(r.run("pull_request", r.pull_labeled(number, "deliver", "maintainer"), run_id=8501, **home))
    ci_passes(r, head)
    ok(r.run("check_suite", r.check_suite_completed(number), run_id=8502, **home))
    assert r.gh.world.settle()
    done = ok(r.run("deployment_status", r.deployment_status(), run_id=8503, **home))
    assert done.outputs["stage"] == "delivered"


def test_without_checks_write_the_run_fails_with_what_to_give(runner: Runner) -> None:
    r = runner
    number, _ = prepare(r)
    r.gh.world.add_label("maintainer", number, "deliver")
    token = r.gh.world.actions_token(permissions={**MINIMAL, "checks": "read"})
    ran = r.run(
        "pull_request",
        r.pull_labeled(number, "deliver", "maintainer"),
        run_id=8601,
        AUTOLOOP_MODE="deliver",
        GITHUB_TOKEN=token,
    )
    assert ran.code == 1
    (error,) = annotations(ran.stdout, "error")
    assert "checks: write" in error and "Traceback" not in ran.stdout + ran.stderr


def test_with_an_app_the_merge_is_the_apps_and_no_warning_is_given(runner: Runner) -> None:
    r = runner
    number, head = prepare(r, matches=1)
    r.gh.world.add_label("maintainer", number, "deliver")
    app = {
        "AUTOLOOP_MODE": "auto",
        "GITHUB_TOKEN": "",
        "AUTOLOOP_GITHUB_APP_ID": str(r.gh.app_id),
        "AUTOLOOP_GITHUB_PRIVATE_KEY": r.gh.private_key_pem,
        "AUTOLOOP_HOME": str(r.tmp / "app-home"),
    }
    first = ok(
        r.run("pull_request", r.pull_labeled(number, "deliver", "maintainer"), run_id=8701, **app)
    )
    assert not annotations(first.stdout, "warning")
    ci_passes(r, head)
    ok(r.run("check_suite", r.check_suite_completed(number), run_id=8702, **app))
    assert merges(r, actor="autoloop-sandbox[bot]") == 1 and merges(r) == 0
    assert r.gh.world.settle()
    done = ok(r.run("deployment_status", r.deployment_status(), run_id=8703, **app))
    assert done.outputs["stage"] == "delivered"
    (comment,) = sticky(r, number)
    assert comment["user"]["login"] == "autoloop-sandbox[bot]"


def test_a_fork_pull_request_with_a_read_only_token_is_told_not_failed(runner: Runner) -> None:
    r = runner
    number, _ = prepare(r)
    r.gh.world.add_label("maintainer", number, "deliver")
    payload = r.pull_labeled(number, "deliver", "maintainer")
    payload["pull_request"]["head"]["repo"] = {
        **payload["pull_request"]["head"]["repo"],
        "full_name": "contributor/demo",
    }
    token = r.gh.world.actions_token(permissions={"contents": "read", "metadata": "read"})
    before = len(r.gh.world.audit.entries())
    ran = ok(
        r.run("pull_request", payload, run_id=8801, AUTOLOOP_MODE="deliver", GITHUB_TOKEN=token)
    )
    (warning,) = annotations(ran.stdout, "warning")
    assert "a pull request from a fork gets a read-only token" in warning
    assert "run on pull\\_request\\_target to act on it" in ran.summary
    assert ran.outputs == spent_nothing(0, 0)
    assert len(r.gh.world.audit.entries()) == before


def test_the_summary_names_the_card_of_a_triage_and_the_stage_of_a_delivery_in_auto(
    runner: Runner,
) -> None:
    """mode auto: an issue is triaged (a card), a labelled pull request is delivered."""
    r = runner
    number, _ = prepare(r)
    r.gh.world.add_label("maintainer", number, "deliver")
    ran = ok(
        r.run(
            "pull_request",
            r.pull_labeled(number, "deliver", "maintainer"),
            run_id=8901,
            AUTOLOOP_MODE="auto",
        )
    )
    assert ran.outputs["stage"] == "checks"
    issue = r.gh.world.open_issue("reader", "Crash", body="It crashes.")
    triaged = ok(r.run("issues", r.issue_opened(issue), run_id=8902, AUTOLOOP_MODE="auto"))
    assert triaged.outputs == spent_nothing(1, 1)
    assert not re.search(r"\| delivery \|", triaged.summary)


def test_a_review_agent_runs_in_the_job_and_reviews_each_head_once(runner: Runner) -> None:
    """``review = "agent:demo"`` with ``deliver-review``: the agent reviews the PR's data
    files in the job, and its findings are one review by the token's bot."""
    r = runner
    world = r.gh.world
    world.push(
        "maintainer", "main", {".github/autoloop.toml": '[deliver]\nreview = "agent:demo"\n'}
    )
    number = world.open_pr("contributor", "feature", "Add it", {"feature.py": "x = 1\n"})
    head = r.gh.sandbox.state.repos[r.gh.repo].branches["feature"]
    world.add_label("maintainer", number, "deliver-review")
    payload = r.pull_labeled(number, "deliver-review", "maintainer")
    fresh = {"AUTOLOOP_MODE": "deliver", "AUTOLOOP_HOME": str(r.tmp / "review-1")}
    reviewed = ok(r.run("pull_request", payload, run_id=9001, **fresh))
    assert reviewed.outputs["stage"] == "reviewed"
    assert "`github.review:done`" in reviewed.summary
    reviews = [
        (x.state, x.commit_id)
        for x in r.gh.sandbox.state.repos[r.gh.repo].reviews.values()
        if x.number == number and x.user == BOT
    ]
    assert reviews == [("COMMENTED", head)]
    assert own_runs(r, head) == [("completed", "success")]
    # The clock's run, in another fresh home, finds the head reviewed: nothing to do.
    before = len(r.writes())
    fresh["AUTOLOOP_HOME"] = str(r.tmp / "review-2")
    ok(r.run("schedule", r.schedule(), run_id=9002, **fresh))
    assert len(r.writes()) == before


COSTLY = """\
import json, os, pathlib
spent = {"cost_usd": 0.25, "tokens": 1234}
pathlib.Path(os.environ["AUTOLOOP_REPORT"]).write_text(json.dumps(spent))
print("```autoloop\\n" + json.dumps({"review": {"event": "COMMENT", "body": "Fine."}}) + "\\n```")
"""


def reviewed_by(r: Runner, agent: str, command: list[str], run_id: int) -> Ran:
    """A job of the pull request labelled ``deliver-review`` whose policy asks the
    rules' agent ``agent`` (a command) for the review."""
    rules_file = r.workspace / ".github" / "autoloop" / "rules.json"
    rules = json.loads(rules_file.read_text())
    rules["agents"][agent] = {"use": "command", "command": command}
    rules_file.write_text(json.dumps(rules))
    world = r.gh.world
    policy = f'[deliver]\nreview = "agent:{agent}"\n'
    world.push("maintainer", "main", {".github/autoloop.toml": policy})
    number = world.open_pr("contributor", "feature", "Add it", {"feature.py": "x = 1\n"})
    world.add_label("maintainer", number, "deliver-review")
    payload = r.pull_labeled(number, "deliver-review", "maintainer")
    return ok(r.run("pull_request", payload, run_id=run_id, AUTOLOOP_MODE="deliver"))


def test_a_review_agents_spend_is_in_the_outputs_the_summary_and_the_log(runner: Runner) -> None:
    """What a review agent reported spending was shown nowhere in the job: the outputs,
    the summary and the last log line said nothing of it."""
    r = runner
    script = r.tmp / "costly.py"
    script.write_text(COSTLY)
    ran = reviewed_by(r, "costly", [sys.executable, str(script)], 9201)
    assert ran.outputs == {
        "turns": "0",
        "cards": "0",
        "stage": "reviewed",
        "cost-usd": "0.2500",
        "tokens": "1234",
    }
    assert "| deliver | 0 | 0 | reviewed | $0.25, 1,234 tokens |" in ran.summary
    assert "| 1 run(s): $0.25, 1,234 tokens |" in ran.summary
    assert "agents spent $0.25, 1,234 tokens" in ran.stdout + ran.stderr
    # The clock's run finds the head reviewed: no agent runs, nothing is spent.
    again = ok(r.run("schedule", r.schedule(), run_id=9202, AUTOLOOP_MODE="deliver"))
    assert again.outputs["cost-usd"] == "0.0000" and again.outputs["tokens"] == "0"
    assert "agents spent" not in again.stdout + again.stderr


def test_a_review_agent_that_could_not_start_is_no_run(runner: Runner) -> None:
    """An agent whose program is missing spent nothing: it was counted as a run, and
    the job said "1 run(s): not reported" and "agents spent not reported"."""
    r = runner
    ran = reviewed_by(r, "missing", [str(r.tmp / "no-such-agent")], 9301)
    assert ran.outputs["stage"] == "blocked" and ran.outputs["cards"] == "1"
    assert ran.outputs["cost-usd"] == "0.0000" and ran.outputs["tokens"] == "0"
    assert "| deliver | 0 | 1 | blocked | - |" in ran.summary
    assert "run(s)" not in ran.summary
    assert "agents spent" not in ran.stdout + ran.stderr


def test_an_issue_in_mode_auto_reads_nothing_for_the_delivery(runner: Runner) -> None:
    """The delivery's policy is never read for an issue's event: a GitHub that cannot
    serve it does not fail the triage."""
    r = runner
    r.gh.world.faults.add("error_502", method="GET", path="*/contents/*", times=None)
    issue = r.gh.world.open_issue("reader", "Crash", body="It crashes.")
    ran = ok(r.run("issues", r.issue_opened(issue), run_id=9101, AUTOLOOP_MODE="auto"))
    assert ran.outputs == spent_nothing(1, 1)


def test_deliver_mode_needs_no_rules_file(runner: Runner) -> None:
    """The README's deliver workflow gives no 'rules': the default path then names no
    file, and the job failed with 'cannot read .github/autoloop/rules.json'."""
    r = runner
    (r.workspace / ".github" / "autoloop" / "rules.json").unlink()
    number, head = prepare(r)
    r.gh.world.add_label("maintainer", number, "deliver")
    ran = ok(
        r.run(
            "pull_request",
            r.pull_labeled(number, "deliver", "maintainer"),
            run_id=8101,
            AUTOLOOP_MODE="deliver",
        )
    )
    assert ran.outputs["stage"] == "checks"
    assert own_runs(r, head) == [("in_progress", None)]
    # triage still needs its rules, and says so
    triage = r.run("issues", r.issue_opened(r.gh.world.open_issue("reader", "x")), run_id=8102)
    assert triage.code == 2
    assert "cannot read" in triage.stdout and "rules.json" in triage.stdout


def test_a_token_without_the_checks_permission_is_named_in_the_error(runner: Runner) -> None:
    r = runner
    number, _ = prepare(r)
    r.gh.world.add_label("maintainer", number, "deliver")
    token = r.gh.world.actions_token(
        permissions={
            "contents": "read",
            "metadata": "read",
            "issues": "write",
            "pull_requests": "write",
        }
    )
    ran = r.run(
        "pull_request",
        r.pull_labeled(number, "deliver", "maintainer"),
        run_id=8201,
        AUTOLOOP_MODE="deliver",
        GITHUB_TOKEN=token,
    )
    assert ran.code == 1 and "Traceback" not in ran.stderr
    (error,) = [e for e in annotations(ran.stdout, "error") if "check-runs" in e]
    assert "403" in error
    assert error.endswith("the job's token (or the App) needs checks: read")


def test_an_answer_to_a_card_of_an_ended_run_is_not_taken_by_the_next_runs_card(
    runner: Runner,
) -> None:
    """A maintainer stops a delivery on its card (``/answer d1 2``), then labels the pull
    request again: the new run's card was named d1 too, and any later run took the old
    answer, within the clocks' slack, for it and cancelled the delivery again. Card
    names go on counting across the runs of a pull request's deliveries."""
    r = runner
    blocked = reviewed_by(r, "missing", [str(r.tmp / "no-such-agent")], 9311)
    assert blocked.outputs["stage"] == "blocked"
    (number,) = {int(n) for n in re.findall(r"#(\d+)", blocked.stdout)}
    stop = pull_comment(r, "maintainer", number, "/answer d1 2")
    stopped = ok(r.run("issue_comment", stop, run_id=9312, AUTOLOOP_MODE="deliver"))
    assert stopped.outputs["stage"] == "cancelled", stopped.stdout

    time.sleep(1.1)  # the label comes back in a later second than the end was shown
    world = r.gh.world
    world.remove_label("maintainer", number, "deliver-review")
    world.add_label("maintainer", number, "deliver-review")
    again = r.pull_labeled(number, "deliver-review", "maintainer")
    restarted = ok(r.run("pull_request", again, run_id=9313, AUTOLOOP_MODE="deliver"))
    assert restarted.outputs["stage"] == "blocked", restarted.stdout
    (comment,) = sticky(r, number)
    state = decode_state(comment["body"])
    assert state is not None and (state["run"], state["cards"]) == (2, 2)
    assert "`/answer d2 2`" in comment["body"]

    later_run = ok(r.run("schedule", r.schedule(), run_id=9314, AUTOLOOP_MODE="deliver"))
    assert f"#{number}: still blocked" in later_run.stdout, later_run.stdout
    assert "/answer d1 2 by maintainer" not in later_run.stdout
    assert stage_shown(r, number) == "blocked"
    # the old answer was the first run's, taken by it: no reply says it was not taken
    assert not [c for c in r.comments(number) if "was not taken" in c["body"]]
