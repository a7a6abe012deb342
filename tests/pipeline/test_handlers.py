"""The stages before the merge (review, ready, checks) and blocked, through ``decide``."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pipeline.effects import (
    CARD_SLOT,
    MarkReady,
    Merge,
    PostReview,
    Progress,
    RaiseCard,
    RequestReview,
    ResolveCard,
)
from pipeline.snapshot import CardAnswer, PrReview, ReviewFindings, WriteResult
from tests.pipeline.builders import H1, H2, at, green, policy, run, snap
from tests.pipeline.driver import Driver, begin, of

AGENT = policy('[deliver]\nreview = "agent:reviewer"\n')
APPROVALS = policy('[deliver]\nreview = "approvals:1"\n')


def findings(
    request: str,
    event: Literal["COMMENT", "REQUEST_CHANGES"] | None,
    *,
    head: str = H1,
    body: str = "",
) -> ReviewFindings:
    error = "" if event else "exit 1"
    return ReviewFindings(request=request, head_sha=head, event=event, body=body, error=error)


# ------------------------------------------------------------------------------ review


def test_no_review_goes_straight_on_to_the_merge() -> None:
    drive = Driver()
    step = drive(snap())
    assert [type(e).__name__ for e in step.effects] == ["Merge", "Progress"]
    assert [h.stage for h in step.delivery.history] == ["review", "ready", "checks", "merge"]


def test_an_agent_review_is_requested_once_and_posted_as_one_review() -> None:
    drive = Driver(policy=AGENT)
    first = drive(snap())
    (ask,) = of(first, RequestReview)
    assert (ask.agent, ask.head_sha) == ("reviewer", H1)
    assert first.waiting is not None and first.waiting.on == "agent"
    assert first.wake_at == at() + timedelta(hours=2)
    assert of(drive(snap(), 5), RequestReview) == []
    done = drive(snap(findings=findings(ask.key, "COMMENT", body="Looks fine.")), 9)
    (posted,) = of(done, PostReview)
    assert (posted.key, posted.head_sha, posted.event) == (
        f"deliver/acme/web#12/review/{H1}",
        H1,
        "COMMENT",
    )
    assert posted.body.startswith("Looks fine.")
    assert len(of(done, Merge)) == 1
    again = drive(snap(findings=findings(ask.key, "COMMENT")), 10)
    assert of(again, PostReview) == []


def test_an_agent_asking_for_changes_waits_for_the_next_push() -> None:
    drive = Driver(policy=AGENT)
    (ask,) = of(drive(snap()), RequestReview)
    step = drive(
        snap(findings=findings(ask.key, "REQUEST_CHANGES", body="SQL injection in login.")), 3
    )
    assert [p.event for p in of(step, PostReview)] == ["REQUEST_CHANGES"]
    assert step.delivery.stage == "review"
    assert step.waiting is not None and step.waiting.on == "webhook" and step.wake_at is None
    assert of(drive(snap(), 60), RequestReview) == []
    pushed = drive(snap(head_sha=H2, check_runs=green("build", "test", head=H2)), 90)
    assert [r.head_sha for r in of(pushed, RequestReview)] == [H2]


def test_findings_for_another_request_are_ignored() -> None:
    drive = Driver(policy=AGENT)
    drive(snap())
    step = drive(snap(findings=findings("deliver/acme/web#12/r1/review-request/x/9", "COMMENT")), 1)
    assert of(step, PostReview) == [] and step.delivery.stage == "review"


def test_a_failed_review_agent_raises_a_card_and_can_be_asked_again() -> None:
    drive = Driver(policy=AGENT)
    (ask,) = of(drive(snap()), RequestReview)
    failed = drive(snap(findings=findings(ask.key, None)), 4)
    (card,) = of(failed, RaiseCard)
    assert card.options == ("request the review again", "stop this delivery")
    assert "exit 1" in card.text and failed.delivery.stage == "blocked"
    again = drive(snap(answer=CardAnswer(card=card.card, choice=1, by="mona")), 20)
    assert of(again, ResolveCard)[0].card == card.card
    (second,) = of(again, RequestReview)
    assert second.key != ask.key and second.head_sha == H1


def test_a_silent_review_agent_raises_a_card_after_two_hours() -> None:
    drive = Driver(policy=AGENT)
    drive(snap())
    assert drive(snap(), 119).delivery.stage == "review"
    late = drive(snap(), 120)
    assert late.delivery.stage == "blocked"
    assert of(late, RaiseCard)[0].title == "The review agent reviewer did not answer on acme/web#12"


def test_approvals_wait_for_an_approving_writer_on_the_head() -> None:
    drive = Driver(policy=APPROVALS)
    step = drive(snap())
    assert step.delivery.stage == "review" and step.wake_at is None
    assert step.waiting is not None and "1 more approving review" in step.waiting.what
    stale = PrReview(id=1, user="alice", state="APPROVED", commit_id=H2, author_can_write=True)
    assert drive(snap(reviews=(stale,)), 5).delivery.stage == "review"
    fresh = PrReview(id=2, user="alice", state="APPROVED", commit_id=H1, author_can_write=True)
    assert len(of(drive(snap(reviews=(stale, fresh)), 6), Merge)) == 1


# ------------------------------------------------------------------------------- ready


def test_a_draft_is_marked_ready_once_then_goes_on() -> None:
    drive = Driver()
    step = drive(snap(draft=True, mergeable_state="draft"))
    (ready,) = of(step, MarkReady)
    assert (ready.head_sha, step.delivery.stage) == (H1, "ready")
    assert of(drive(snap(draft=True, mergeable_state="draft"), 1), MarkReady) == []
    assert len(of(drive(snap(), 2), Merge)) == 1


def test_a_refused_mark_ready_raises_a_card() -> None:
    drive = Driver()
    (ready,) = of(drive(snap(draft=True)), MarkReady)
    refused = WriteResult(
        key=ready.key, outcome="refused", message="Resource not accessible by integration"
    )
    step = drive(snap(draft=True, results=(refused,)), 1)
    (card,) = of(step, RaiseCard)
    assert "Resource not accessible by integration" in card.text
    assert step.delivery.card is not None and step.delivery.card.blocked_at == "ready"


def test_a_pr_still_a_draft_long_after_we_marked_it_ready_raises_a_card() -> None:
    drive = Driver()
    drive(snap(draft=True))
    assert drive(snap(draft=True), 9).delivery.stage == "ready"
    assert drive(snap(draft=True), 10).delivery.stage == "blocked"


# ------------------------------------------------------------------------------ checks


def test_merge_waits_for_required_checks() -> None:
    drive = Driver()
    step = drive(snap(check_runs=(run("build", "success", id=1), run("test", None, id=2))))
    assert of(step, Merge) == [] and step.delivery.stage == "checks"
    assert step.wake_at == at(120)
    assert step.waiting is not None and step.waiting.what == "required checks test (app 15368)"
    (progress,) = of(step, Progress)
    assert progress.check_title == "Checks: waiting for required checks test (app 15368)"
    assert progress.check_status == "in_progress" and progress.check_conclusion is None
    assert len(of(drive(snap(), 14), Merge)) == 1


def test_failed_checks_wait_for_a_rerun_or_a_push() -> None:
    drive = Driver()
    failed = (run("build", "success", id=1), run("test", "failure", id=2))
    step = drive(snap(check_runs=failed))
    assert step.waiting is not None and "failed: test (app 15368)" in step.waiting.what
    rerun = (*failed, run("test", "success", id=3))
    assert len(of(drive(snap(check_runs=rerun), 30), Merge)) == 1


def test_checks_timeout_raises_a_card_naming_the_checks_that_never_reported() -> None:
    drive = Driver()
    never = snap(check_runs=(run("build", None, id=1),))
    drive(never)
    assert of(drive(never, 119), RaiseCard) == []
    step = drive(never, 120)
    (card,) = of(step, RaiseCard)
    assert card.title == "Required checks never reported on acme/web#12"
    assert "never reported: test (app 15368)" in card.text
    assert "still running: build (app 15368)" in card.text
    assert card.options == ("wait for the checks again", "stop this delivery")
    (progress,) = of(step, Progress)
    assert progress.check_title == (
        "Blocked at checks: Required checks never reported on acme/web#12"
    )
    assert f"`/answer {CARD_SLOT} 1` to wait for the checks again" in progress.comment_body
    assert step.waiting is not None and step.waiting.on == "answer" and step.wake_at is None


def test_checks_timeout_after_a_failure_says_the_checks_failed() -> None:
    # Seen in the whole-system simulation: a check that failed and was never run again
    # was shown as "Required checks never reported", though the text said "failed: ci".
    drive = Driver()
    failed = snap(check_runs=(run("build", "success", id=1), run("test", "failure", id=2)))
    drive(failed)
    (card,) = of(drive(failed, 120), RaiseCard)
    assert card.title == "Required checks failed on acme/web#12"
    assert "failed: test (app 15368)" in card.text
    running = snap(check_runs=(run("build", "success", id=1), run("test", None, id=2)))
    drive = Driver()
    drive(running)
    (card,) = of(drive(running, 120), RaiseCard)
    assert card.title == "Required checks still running on acme/web#12"


def test_waiting_again_after_a_checks_timeout_starts_a_new_deadline() -> None:
    drive = Driver()
    never = snap(check_runs=(run("build", None, id=1),))
    drive(never)
    card = of(drive(never, 120), RaiseCard)[0]
    step = drive(
        snap(check_runs=never.check_runs, answer=CardAnswer(card=card.card, choice=1)), 130
    )
    assert step.delivery.stage == "checks" and step.wake_at == at(250)
    assert [r.card for r in of(step, ResolveCard)] == [card.card]


def test_a_stop_answer_cancels_and_fails_the_check() -> None:
    drive = Driver()
    never = snap(check_runs=())
    drive(never)
    card = of(drive(never, 120), RaiseCard)[0]
    step = drive(snap(check_runs=(), answer=CardAnswer(card=card.card, choice=2, by="mona")), 125)
    assert step.delivery.stage == "cancelled" and step.waiting is None and step.wake_at is None
    (progress,) = of(step, Progress)
    assert (progress.check_status, progress.check_conclusion) == ("completed", "failure")
    assert "mona chose: stop this delivery" in progress.comment_body


def test_an_answer_to_another_card_or_out_of_range_is_ignored() -> None:
    drive = Driver()
    drive(snap(check_runs=()))
    card = of(drive(snap(check_runs=()), 120), RaiseCard)[0]
    for answer in (CardAnswer(card=card.card, choice=3), CardAnswer(card="other", choice=1)):
        step = drive(snap(check_runs=(), answer=answer), 121)
        assert step.delivery.stage == "blocked" and step.effects == ()


def test_a_conflict_raises_one_notice_and_waits_for_the_next_push() -> None:
    drive = Driver()
    dirty = snap(mergeable=False, mergeable_state="dirty")
    step = drive(dirty)
    (card,) = of(step, RaiseCard)
    assert card.options == () and "conflicts with main" in card.title
    assert step.waiting is not None and step.waiting.on == "webhook"
    assert drive(dirty, 30).effects == ()
    fixed = drive(snap(head_sha=H2, check_runs=green("build", "test", head=H2)), 60)
    assert [r.card for r in of(fixed, ResolveCard)] == [card.card]
    assert [m.sha for m in of(fixed, Merge)] == [H2]


def test_a_pr_turned_back_into_a_draft_goes_back_to_ready() -> None:
    drive = Driver()
    drive(snap(check_runs=()))
    step = drive(snap(check_runs=(), draft=True), 5)
    assert step.delivery.stage == "ready"
    assert begin().stage == "review"
