"""Updating the branch, merging with the head guard, and settling unclear merges."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from pipeline.effects import DeleteBranch, Merge, RaiseCard, RequestReview, UpdateBranch
from pipeline.snapshot import CardAnswer, PrReview, ReviewFindings, WriteOutcome, WriteResult
from tests.pipeline.builders import BASE, BOT, H1, H2, MERGED, UPDATED, at, green, policy, run, snap
from tests.pipeline.driver import Driver, of

BEHIND = {"behind_base": True, "mergeable_state": "behind"}


def answer(
    merge: Merge, outcome: WriteOutcome, message: str = "", sha: str | None = None
) -> WriteResult:
    return WriteResult(key=merge.key, outcome=outcome, message=message, merge_commit_sha=sha)


# ------------------------------------------------------------------------------ update


def test_a_branch_behind_its_base_is_updated_with_the_expected_head() -> None:
    drive = Driver()
    step = drive(snap(**BEHIND))
    (update,) = of(step, UpdateBranch)
    assert update.expected_head_sha == H1
    assert step.delivery.stage == "update_branch" and of(step, Merge) == []
    assert step.wake_at == at(15)
    assert of(drive(snap(**BEHIND), 1), UpdateBranch) == []


def test_our_own_update_goes_back_to_the_checks_without_a_new_review() -> None:
    drive = Driver(policy=policy('[deliver]\nreview = "agent:reviewer"\n'))
    drive(snap(**BEHIND))
    (ask,) = [e for e in drive.effects if isinstance(e, RequestReview)]
    done = ReviewFindings(request=ask.key, head_sha=H1, event="COMMENT", body="ok")
    step = drive(snap(findings=done, **BEHIND), 2)
    assert step.delivery.stage == "update_branch"
    updated = snap(head_sha=UPDATED, head_parents=(H1, BASE), check_runs=())
    after = drive(updated, 4)
    assert after.delivery.stage == "checks"
    assert after.delivery.heads == (UPDATED, H1)
    assert of(after, RequestReview) == []
    merged = drive(
        snap(
            head_sha=UPDATED,
            head_parents=(H1, BASE),
            check_runs=green("build", "test", head=UPDATED),
        ),
        9,
    )
    assert [m.sha for m in of(merged, Merge)] == [UPDATED]


def test_a_push_by_a_person_during_an_update_is_reviewed_again() -> None:
    drive = Driver(policy=policy('[deliver]\nreview = "agent:reviewer"\n'))
    drive(snap())
    pushed = drive(snap(head_sha=H2, head_parents=(H1,)), 3)
    assert [r.head_sha for r in of(pushed, RequestReview)] == [H2]


@pytest.mark.parametrize(
    ("outcome", "kind"),
    [("conflict", "conflict"), ("refused", "update_failed")],
)
def test_an_update_that_fails_raises_a_card(outcome: WriteOutcome, kind: str) -> None:
    drive = Driver()
    (update,) = of(drive(snap(**BEHIND)), UpdateBranch)
    result = WriteResult(key=update.key, outcome=outcome, message="merge conflict")
    step = drive(snap(results=(result,), **BEHIND), 1)
    assert step.delivery.card is not None and step.delivery.card.kind == kind


def test_an_update_that_never_lands_raises_a_card() -> None:
    drive = Driver()
    drive(snap(**BEHIND))
    step = drive(snap(**BEHIND), 15)
    assert step.delivery.card is not None and step.delivery.card.kind == "update_failed"
    retry = drive(snap(answer=CardAnswer(card=step.delivery.card.key, choice=1), **BEHIND), 20)
    assert len(of(retry, UpdateBranch)) == 1


def test_behind_without_update_branch_waits_for_a_push() -> None:
    drive = Driver(policy=policy("[deliver]\nupdate_branch = false\n"))
    step = drive(snap(**BEHIND))
    assert of(step, UpdateBranch) == [] and of(step, Merge) == []
    assert step.waiting is not None and "update_branch is false" in step.waiting.what
    assert len(of(drive(snap(behind_base=True), 3), Merge)) == 1  # not required up to date


# ------------------------------------------------------------------------------- merge


def test_merge_uses_the_policy_method_and_the_head_sha_guard() -> None:
    drive = Driver(policy=policy('[deliver]\nmerge_method = "rebase"\n'))
    (merge,) = of(drive(snap()), Merge)
    assert (merge.sha, merge.method, merge.key) == (
        H1,
        "rebase",
        f"deliver/acme/web#12/r1/merge/{H1}/1",
    )


def test_an_unknown_mergeable_state_waits_with_a_bounded_backoff() -> None:
    drive = Driver()
    unknown = snap(mergeable=None, mergeable_state="unknown")
    minutes, delays = 0.0, []
    for _ in range(10):
        step = drive(unknown, minutes)
        assert step.wake_at is not None and of(step, Merge) == []
        delay = (step.wake_at - at(minutes)).total_seconds()
        delays.append(delay)
        minutes += delay / 60
    assert delays == [5, 10, 20, 40, 60, 60, 60, 60, 60, 60]
    last = drive(unknown, minutes)
    assert last.delivery.card is not None and last.delivery.card.kind == "not_mergeable"


def test_a_wake_before_the_re_read_is_due_keeps_the_same_timer() -> None:
    """A webhook wakes the delivery while GitHub computes mergeability: the re-read
    it waits for stays the same, and no re-read is used up."""
    drive = Driver()
    unknown = snap(mergeable=None, mergeable_state="unknown")
    first = drive(unknown, 0.0)
    assert first.wake_at == at(5 / 60)
    again = drive(unknown, 1 / 60)
    assert (again.wake_at, again.delivery.polls) == (first.wake_at, 1)
    due = drive(unknown, 5 / 60)
    assert (due.wake_at, due.delivery.polls) == (at(15 / 60), 2)


def test_a_merge_blocked_by_protection_waits_until_the_deadline() -> None:
    drive = Driver()
    step = drive(snap(mergeable_state="blocked"))
    assert step.wake_at == at(120) and step.waiting is not None and step.waiting.on == "webhook"
    late = drive(snap(mergeable_state="blocked"), 120)
    assert late.delivery.card is not None and late.delivery.card.kind == "not_mergeable"


def test_a_merged_answer_moves_on_and_deletes_the_branch_when_asked() -> None:
    drive = Driver(policy=policy("[deliver]\ndelete_branch = true\n"))
    (merge,) = of(drive(snap()), Merge)
    step = drive(snap(results=(answer(merge, "done", sha=MERGED),)), 1)
    assert step.delivery.stage == "delivered" and step.delivery.merge_sha == MERGED
    assert [d.ref for d in of(step, DeleteBranch)] == ["fix-login-redirect"]
    assert step.line_freed


def test_a_fork_branch_is_never_deleted() -> None:
    drive = Driver(policy=policy("[deliver]\ndelete_branch = true\n"))
    (merge,) = of(drive(snap(head_repo="mona/web")), Merge)
    step = drive(snap(head_repo="mona/web", results=(answer(merge, "done"),)), 1)
    assert of(step, DeleteBranch) == []


def test_a_409_goes_back_to_checks_on_the_new_head() -> None:
    drive = Driver()
    (merge,) = of(drive(snap()), Merge)
    moved = (answer(merge, "head_moved", message="Head branch was modified"),)
    waiting = drive(snap(results=moved), 1)
    assert of(waiting, Merge) == [] and waiting.delivery.stage == "merge"
    pushed = drive(snap(head_sha=H2, results=moved, check_runs=()), 2)
    assert pushed.delivery.stage == "checks" and of(pushed, Merge) == []
    green_h2 = drive(
        snap(head_sha=H2, results=moved, check_runs=green("build", "test", head=H2)), 9
    )
    assert [m.sha for m in of(green_h2, Merge)] == [H2]


def test_never_merges_twice_after_an_ambiguous_answer() -> None:
    drive = Driver()
    (merge,) = of(drive(snap()), Merge)
    unclear = (answer(merge, "ambiguous", message="502 Bad Gateway"),)
    step = drive(snap(results=unclear), 1)
    assert step.delivery.reconciling and step.wake_at == at(1) + timedelta(seconds=2)
    # read back 2 s after the answer, then with a doubling step of at most 15 s
    wakes = []
    for seconds in (2, 4, 8, 16):
        step = drive(snap(results=unclear, base_contains_head=False), 1 + seconds / 60)
        assert of(step, Merge) == []
        wakes.append(round((step.wake_at - at(1)).total_seconds()))
    assert wakes == [4, 8, 16, 30]
    read_back = drive(
        snap(results=unclear, merged=True, state="closed", merge_commit_sha=MERGED), 1.9
    )
    assert read_back.delivery.stage == "delivered" and read_back.delivery.merge_sha == MERGED
    assert len(drive.merges()) == 1


def test_an_unanswered_merge_is_read_back_after_a_grace() -> None:
    drive = Driver()
    drive(snap())
    assert drive(snap(), 9).wake_at == at(10)
    step = drive(snap(), 10)
    assert step.delivery.reconciling and of(step, Merge) == []


def test_an_ambiguous_merge_with_the_base_holding_the_head_asks_a_person() -> None:
    drive = Driver(policy=policy("[deliver.deploy]\n"))
    (merge,) = of(drive(snap()), Merge)
    unclear = (answer(merge, "ambiguous"),)
    drive(snap(results=unclear), 1)
    step = drive(snap(results=unclear, base_contains_head=True), 2)
    (card,) = of(step, RaiseCard)
    assert card.options[0] == "it is merged: go on to the deployment"
    assert "main already holds" in card.text
    yes = drive(
        snap(results=unclear, base_contains_head=True, answer=CardAnswer(card=card.card, choice=1)),
        30,
    )
    assert yes.delivery.stage == "deployment" and yes.delivery.merge_sha == H1
    assert len(drive.merges()) == 1


def test_an_ambiguous_merge_read_back_as_not_merged_returns_to_checks() -> None:
    drive = Driver()
    (merge,) = of(drive(snap()), Merge)
    unclear = (answer(merge, "ambiguous"),)
    drive(snap(results=unclear), 1)
    assert of(drive(snap(results=unclear, base_contains_head=False), 1.45), Merge) == []
    step = drive(snap(results=unclear, base_contains_head=False), 1.5)
    assert [h.outcome for h in step.delivery.history][-2:] == ["not_merged", "passed"]
    (second,) = of(step, Merge)
    assert second.key == f"deliver/acme/web#12/r1/merge/{H1}/2"


def test_a_refused_merge_raises_a_card_and_a_retry_merges_again() -> None:
    drive = Driver()
    (merge,) = of(drive(snap()), Merge)
    refused = (answer(merge, "refused", message='Required status check "e2e" is expected'),)
    step = drive(snap(results=refused), 1)
    (card,) = of(step, RaiseCard)
    assert 'Required status check "e2e" is expected' in card.text
    assert of(drive(snap(results=refused), 5), Merge) == []
    retry = drive(snap(results=refused, answer=CardAnswer(card=card.card, choice=1)), 9)
    assert len(of(retry, Merge)) == 1 and len(drive.merges()) == 2


def test_deliveries_on_one_base_merge_one_at_a_time() -> None:
    drive = Driver()
    step = drive(snap(merge_queue_first=False))
    assert of(step, Merge) == [] and step.waiting is not None and step.waiting.on == "line"
    assert step.wake_at is None
    assert len(of(drive(snap(merge_queue_first=True), 4), Merge)) == 1


def test_while_waiting_in_line_a_re_read_can_send_it_back() -> None:
    drive = Driver(policy=policy('[deliver]\nreview = "approvals:1"\n'))
    approved = (
        PrReview(id=1, user="alice", state="APPROVED", commit_id=H1, author_can_write=True),
    )
    line = {"merge_queue_first": False, "reviews": approved}
    assert drive(snap(**line)).delivery.stage == "merge"
    failed = (run("build", "success", id=1), run("test", "failure", id=2))
    assert drive(snap(check_runs=failed, **line), 1).delivery.stage == "checks"
    assert drive(snap(**line), 2).delivery.stage == "merge"
    dismissed = (
        *approved,
        PrReview(id=2, user="alice", state="DISMISSED", commit_id=H1, author_can_write=True),
    )
    assert drive(snap(merge_queue_first=False, reviews=dismissed), 3).delivery.stage == "review"
    assert drive(snap(**line), 4).delivery.stage == "merge"
    assert drive(snap(draft=True, **line), 5).delivery.stage == "ready"
    assert drive(snap(**line), 6).delivery.stage == "merge"
    dirty = drive(snap(mergeable=False, mergeable_state="dirty", **line), 7)
    assert dirty.delivery.card is not None and dirty.delivery.card.kind == "conflict"
    assert drive.merges() == []


def test_a_merge_refused_for_conflicts_raises_the_conflict_notice() -> None:
    drive = Driver()
    (merge,) = of(drive(snap()), Merge)
    step = drive(snap(results=(answer(merge, "conflict", "Merge conflict"),)), 1)
    assert step.delivery.card is not None and step.delivery.card.kind == "conflict"
    assert step.delivery.merge_attempt is None


def test_a_merge_refused_as_not_mergeable_while_the_pr_reads_dirty_is_the_conflict_notice() -> None:
    """GitHub answers a merge of a pull request that a push to its base just put in
    conflict with "405 Pull Request is not mergeable": a card asked a person to try the
    merge again or stop, where the notice says to resolve the conflicts and push."""
    drive = Driver()
    (merge,) = of(drive(snap()), Merge)
    refused = (answer(merge, "refused", "Pull Request is not mergeable"),)
    dirty = {"mergeable": False, "mergeable_state": "dirty"}
    step = drive(snap(results=refused, **dirty), 1)
    assert step.delivery.card is not None and step.delivery.card.kind == "conflict"
    assert step.delivery.merge_attempt is None
    assert len(drive.merges()) == 1


def test_a_409_whose_new_head_never_shows_is_tried_again_after_a_grace() -> None:
    drive = Driver()
    (merge,) = of(drive(snap()), Merge)
    moved = (answer(merge, "head_moved"),)
    assert drive(snap(results=moved), 1).wake_at == at(11)
    again = drive(snap(results=moved), 11)
    assert [m.key for m in of(again, Merge)] == [f"deliver/acme/web#12/r1/merge/{H1}/2"]


def test_a_lost_merge_answer_read_back_as_merged_by_us_deletes_the_branch() -> None:
    drive = Driver(policy=policy("[deliver]\ndelete_branch = true\n"))
    drive(snap())
    step = drive(snap(merged=True, state="closed", merged_by=BOT, merge_commit_sha=MERGED), 11)
    assert step.delivery.stage == "delivered"
    assert [d.ref for d in of(step, DeleteBranch)] == ["fix-login-redirect"]
    assert step.delivery.history[-2].note == "merged"


def test_a_branch_merged_by_a_person_is_left_alone() -> None:
    drive = Driver(policy=policy("[deliver]\ndelete_branch = true\n"))
    drive(snap(check_runs=()))
    step = drive(snap(merged=True, state="closed", merged_by="hubot", merge_commit_sha=MERGED), 3)
    assert of(step, DeleteBranch) == []


# -------------------------------------------------------------------------------- line


def test_only_the_first_in_line_updates_its_branch() -> None:
    """Several deliveries behind their base: the others wait their turn instead of each
    updating (and re-running its checks) after every merge on the base."""
    drive = Driver()
    waiting = drive(snap(merge_queue_first=False, merge_queue_ahead=7, **BEHIND))
    assert of(waiting, UpdateBranch) == [] and waiting.delivery.stage == "merge"
    assert waiting.waiting is not None and waiting.waiting.on == "line"
    assert "another delivery (#7) on main merges first" in waiting.waiting.what
    queued_at = waiting.delivery.queued_at
    assert queued_at  # it took its place in the line
    (update,) = of(drive(snap(merge_queue_first=True, **BEHIND), 1), UpdateBranch)
    assert update.expected_head_sha == H1


def test_a_delivery_keeps_its_place_while_its_branch_is_updated_and_checked() -> None:
    drive = Driver()
    first = drive(snap(**BEHIND))
    queued_at = first.delivery.queued_at
    assert first.delivery.stage == "update_branch" and not first.line_freed
    updated = snap(head_sha=UPDATED, head_parents=(H1, BASE), check_runs=())
    checking = drive(updated, 1)
    assert checking.delivery.stage == "checks" and not checking.line_freed
    assert checking.delivery.queued_at == queued_at  # still its place, ahead of later ones
    green_again = snap(
        head_sha=UPDATED, head_parents=(H1, BASE), check_runs=green("build", "test", head=UPDATED)
    )
    (merge,) = of(drive(green_again, 2), Merge)
    done = drive(
        snap(
            head_sha=UPDATED,
            head_parents=(H1, BASE),
            check_runs=green("build", "test", head=UPDATED),
            results=(answer(merge, "done", sha=MERGED),),
        ),
        3,
    )
    assert done.delivery.stage == "delivered" and done.line_freed
    assert done.delivery.queued_at == ""


def test_a_new_push_gives_up_the_place_in_line() -> None:
    drive = Driver()
    drive(snap(merge_queue_first=False))
    assert drive.delivery.queued_at
    pushed = drive(snap(head_sha=H2, head_parents=(H1,), check_runs=()), 1)
    assert pushed.delivery.queued_at == "" and pushed.line_freed


def test_checks_that_fail_after_an_update_give_up_the_place_in_line() -> None:
    """The checks of a delivery's updated branch failed: it waits for a person (a re-run,
    a push), and every green delivery behind it on the base waited with it until its
    checks' deadline (two hours by default). It queues again, at the back, once green."""
    drive = Driver()
    first = drive(snap(**BEHIND))
    assert first.delivery.queued_at and first.delivery.stage == "update_branch"
    updated: dict[str, Any] = {"head_sha": UPDATED, "head_parents": (H1, BASE)}
    checking = drive(snap(**updated, check_runs=()), 1)
    assert checking.delivery.queued_at and not checking.line_freed
    failed = (run("build", "failure", head=UPDATED), *green("test", head=UPDATED))
    red = drive(snap(**updated, check_runs=failed), 2)
    assert red.delivery.stage == "checks" and red.line_freed
    assert red.delivery.queued_at == ""
    rerun = (run("build", "success", id=7, head=UPDATED), *green("test", head=UPDATED))
    green_again = drive(snap(**updated, merge_queue_first=False, check_runs=rerun), 3)
    assert green_again.delivery.stage == "merge" and of(green_again, Merge) == []
    assert green_again.delivery.queued_at > first.delivery.queued_at  # at the back
