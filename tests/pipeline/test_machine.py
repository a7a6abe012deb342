"""``decide``: the guards, the policy, progress, and properties over random histories."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pipeline.effects import Merge, PostReview, Progress, RaiseCard, RequestReview, ResolveCard
from pipeline.errors import MissingTransition, PipelineError, WrongInput
from pipeline.machine import HANDLERS, HISTORY_LIMIT, decide
from pipeline.policy import PolicyProblem, parse_policy
from pipeline.snapshot import CardAnswer, ReviewFindings, WriteResult
from pipeline.stages import Mode
from tests.pipeline.builders import DEPLOYED, H1, H2, H3, MERGED, at, green, policy, run, snap
from tests.pipeline.driver import Driver, begin, of
from tests.pipeline.world import Fate, World

AGENT = policy('[deliver]\nreview = "agent:reviewer"\n')


def pending() -> tuple[object, ...]:
    return (run("build", None, id=1),)


# ------------------------------------------------------------------------------ guards


@pytest.mark.parametrize("minutes_in", [0, 5])
def test_a_removed_label_cancels_at_the_next_decision(minutes_in: float) -> None:
    drive = Driver()
    drive(snap(check_runs=()))
    step = drive(snap(check_runs=(), labels=("bug",)), minutes_in)
    assert step.delivery.stage == "cancelled" and step.waiting is None
    (progress,) = of(step, Progress)
    assert (progress.check_status, progress.check_conclusion) == ("completed", "neutral")
    assert progress.check_title == "Cancelled: label deliver removed"


def test_a_policy_that_renames_its_label_ends_no_delivery_under_way() -> None:
    """The policy's label became "ship" while a delivery labelled "deliver" waited for its
    checks: the next decision cancelled it, saying "label ship removed", a label no one
    had added or removed. The delivery keeps the label that started it."""
    drive = Driver()
    assert drive(snap(check_runs=pending())).delivery.stage == "checks"
    drive.policy = policy('[deliver.labels]\ndeliver = "ship"\n')
    # still labelled "deliver": on it goes
    assert drive(snap(check_runs=pending()), 1).delivery.stage == "checks"
    step = drive(snap(check_runs=pending(), labels=("bug",)), 2)  # removed: cancelled, said so
    assert step.delivery.stage == "cancelled"
    assert of(step, Progress)[0].check_title == "Cancelled: label deliver removed"
    # a delivery from before the label was kept follows the policy's, as before
    old = Driver(delivery=replace(begin(), label=""))
    old.policy = policy('[deliver.labels]\ndeliver = "ship"\n')
    assert old(snap(labels=("ship",))).delivery.stage == "merge"


def test_labels_match_without_case() -> None:
    assert Driver()(snap(labels=("Deliver",))).delivery.stage == "merge"


def test_a_removed_label_cancels_after_the_merge_too() -> None:
    drive = Driver(policy=DEPLOYED)
    (merge,) = of(drive(snap()), Merge)
    drive(snap(results=(WriteResult(key=merge.key, outcome="done", merge_commit_sha=MERGED),)), 1)
    assert drive.delivery.stage == "deployment"
    step = drive(snap(merged=True, state="closed", labels=()), 2)
    assert step.delivery.stage == "cancelled"
    # It said "add its label again" of a pull request it had merged: the merge stays.
    (progress,) = of(step, Progress)
    assert progress.check_title == (
        "Cancelled: label deliver removed: the merge stays, its deployment is no longer followed"
    )
    assert f"The merge ({MERGED}) stays" in progress.comment_body
    assert "add its label again" not in progress.comment_body


def test_a_label_removed_while_the_merge_is_under_way_is_seen_after_the_merge() -> None:
    """The label went while the merge call was in flight: the delivery was cancelled, and
    the merge it had made was shown nowhere (no merge commit, "Cancelled")."""
    drive = Driver(policy=DEPLOYED)
    (merge,) = of(drive(snap()), Merge)
    waiting = drive(snap(labels=()), 1)  # the merge's answer is not in yet
    assert waiting.delivery.stage == "merge"
    answered = (WriteResult(key=merge.key, outcome="done", merge_commit_sha=MERGED),)
    merged = drive(snap(results=answered, merged=True, state="closed", labels=()), 2)
    assert merged.delivery.merge_sha == MERGED
    assert "merged" in [h.note for h in merged.delivery.history]
    step = drive(snap(results=answered, merged=True, state="closed", labels=()), 3)
    assert step.delivery.stage == "cancelled" and step.delivery.merge_sha == MERGED
    assert len(drive.merges()) == 1


def test_checks_that_pass_after_their_card_resolve_the_card_and_go_on() -> None:
    """A check reported after the deadline: the card stayed open and the check run
    spinning until someone answered "wait for the checks again"."""
    drive = Driver()
    drive(snap(check_runs=()))
    (card,) = of(drive(snap(check_runs=()), 120), RaiseCard)
    step = drive(snap(), 121)  # the required check is in, green
    assert [r.card for r in of(step, ResolveCard)] == [card.card]
    assert step.delivery.card is None and step.delivery.stage == "merge"
    assert len(of(step, Merge)) == 1


def test_a_closed_pr_cancels_and_resolves_its_card() -> None:
    drive = Driver()
    drive(snap(check_runs=()))
    card = of(drive(snap(check_runs=()), 120), RaiseCard)[0]
    step = drive(snap(check_runs=(), state="closed"), 121)
    assert step.delivery.stage == "cancelled"
    assert [r.card for r in of(step, ResolveCard)] == [card.card]
    assert step.delivery.card is None


def test_merged_by_a_person_skips_to_the_deployment() -> None:
    drive = Driver(policy=DEPLOYED)
    drive(snap(check_runs=()))
    step = drive(snap(merged=True, state="closed", merged_by="hubot", merge_commit_sha=MERGED), 3)
    assert step.delivery.stage == "deployment" and step.delivery.merge_sha == MERGED
    # before its required checks passed: said, not taken for a delivery that checked them
    assert step.delivery.history[-1].note == "merged by hubot while the delivery was at checks"
    assert drive.merges() == []


def test_merged_by_a_person_without_a_deploy_table_is_delivered() -> None:
    drive = Driver()
    drive(snap(check_runs=()))
    step = drive(snap(merged=True, state="closed", merge_commit_sha=MERGED), 3)
    assert step.delivery.stage == "delivered"


def test_a_new_head_restarts_from_the_review() -> None:
    drive = Driver(policy=AGENT)
    (ask,) = of(drive(snap()), RequestReview)
    drive(snap(findings=ReviewFindings(request=ask.key, head_sha=H1, event="COMMENT")), 2)
    assert drive.delivery.stage == "merge"
    step = drive(snap(head_sha=H2, check_runs=green("build", "test", head=H2)), 3)
    assert step.delivery.stage == "review" and step.delivery.heads == (H2,)
    assert [r.head_sha for r in of(step, RequestReview)] == [H2]
    back = drive(snap(head_sha=H1), 4)  # a force-push back to a reviewed head
    assert of(back, RequestReview) == [] and of(back, PostReview) == []


# ------------------------------------------------------------------------------ policy


def test_a_policy_problem_is_one_comment_naming_the_key_and_no_action() -> None:
    problem = parse_policy('[deliver]\nreview = "approvals:0"\n')
    assert isinstance(problem, PolicyProblem)
    drive = Driver(policy=problem)
    step = drive(snap())
    (progress,) = step.effects
    assert isinstance(progress, Progress)
    assert progress.check_title == "Policy problem: deliver.review"
    assert "deliver.review" in progress.comment_body and "approvals:0" in progress.comment_body
    assert step.waiting is not None and step.waiting.on == "policy" and step.wake_at is None
    assert drive(snap(), 5).effects == ()
    drive.policy = policy()
    fixed = drive(snap(), 9)
    assert [type(e).__name__ for e in fixed.effects] == ["Merge", "Progress"]


def test_a_toml_error_names_its_line_in_the_title() -> None:
    problem = parse_policy("[deliver\n")
    assert isinstance(problem, PolicyProblem)
    (progress,) = Driver(policy=problem)(snap()).effects
    assert isinstance(progress, Progress) and progress.check_title == "Policy problem: line 1"


def test_a_closed_pr_is_cancelled_even_with_a_policy_problem() -> None:
    problem = PolicyProblem(key="deliver.merge_method", message="expected ...")
    assert Driver(policy=problem)(snap(state="closed")).delivery.stage == "cancelled"


# ---------------------------------------------------------------------------- progress


def test_the_delivery_keeps_what_it_waits_for_until_it_ends() -> None:
    drive = Driver()
    step = drive(snap(check_runs=pending()))
    assert step.waiting is not None and step.delivery.stage == "checks"
    assert step.delivery.waiting_on == "webhook"
    assert step.delivery.waiting_for == step.waiting.what
    assert step.waiting.what.startswith("required checks build (app ")
    done = drive(snap(labels=()), 1)
    assert done.waiting is None and done.delivery.stage == "cancelled"
    assert (done.delivery.waiting_on, done.delivery.waiting_for) == ("", "")


def test_progress_is_sent_only_when_it_changes() -> None:
    drive = Driver()
    first = drive(snap(check_runs=pending()))
    assert [p.seq for p in of(first, Progress)] == [1]
    assert drive(snap(check_runs=pending()), 1).effects == ()
    nxt = drive(snap(check_runs=(run("build", "failure", id=2),)), 2)
    assert [(p.seq, p.key) for p in of(nxt, Progress)] == [(2, "deliver/acme/web#12/r1/progress/2")]


def test_the_history_keeps_its_latest_rows() -> None:
    drive = Driver()
    heads = [H1, H2, H3]
    for i in range(HISTORY_LIMIT):
        drive(snap(head_sha=heads[i % 3], check_runs=()), i)
    assert len(drive.delivery.history) == HISTORY_LIMIT


# -------------------------------------------------------------------------- deliver-review


def test_deliver_review_posts_one_review_per_head_and_never_merges() -> None:
    drive = Driver(policy=AGENT, delivery=begin("review"))
    labels = ("deliver-review",)
    (ask,) = of(drive(snap(labels=labels)), RequestReview)
    found = ReviewFindings(request=ask.key, head_sha=H1, event="COMMENT", body="Two nits.")
    step = drive(snap(labels=labels, findings=found), 4)
    assert [p.event for p in of(step, PostReview)] == ["COMMENT"]
    assert step.delivery.stage == "reviewed" and drive.merges() == []
    (progress,) = of(step, Progress)
    assert (progress.check_status, progress.check_conclusion) == ("completed", "success")
    assert drive(snap(labels=labels, findings=found), 9).effects == ()
    pushed = drive(snap(labels=labels, head_sha=H2), 20)
    assert [r.head_sha for r in of(pushed, RequestReview)] == [H2]
    assert drive.merges() == []


def test_deliver_review_without_an_agent_in_the_policy_ends_neutral() -> None:
    step = Driver(delivery=begin("review"))(snap(labels=("deliver-review",)))
    assert step.delivery.stage == "reviewed"
    (progress,) = of(step, Progress)
    assert progress.check_conclusion == "neutral"
    assert 'deliver-review needs "agent:NAME"' in progress.check_title


def test_deliver_review_stops_when_the_pr_is_merged() -> None:
    drive = Driver(policy=AGENT, delivery=begin("review"))
    drive(snap(labels=("deliver-review",)))
    step = drive(snap(labels=("deliver-review",), merged=True, state="closed"), 1)
    assert step.delivery.stage == "cancelled"


# ------------------------------------------------------------------------------ misuse


def test_a_terminal_delivery_does_nothing() -> None:
    drive = Driver()
    drive(snap(labels=()))
    assert drive(snap(), 1).effects == ()
    assert drive.steps[-1].wake_at is None and drive.steps[-1].waiting is None


def test_a_snapshot_of_another_pull_request_is_refused() -> None:
    with pytest.raises(WrongInput, match="acme/web#13"):
        decide(begin(), snap(number=13), policy(), at())


def test_a_naive_now_is_refused() -> None:
    with pytest.raises(WrongInput, match="no UTC offset"):
        decide(begin(), snap(), policy(), datetime(2026, 3, 2, 9, 30))  # noqa: DTZ001  # the point: a naive time


def test_an_answer_chooses_among_the_card_options_it_raised() -> None:
    drive = Driver()
    drive(snap(check_runs=()))
    card = of(drive(snap(check_runs=()), 120), RaiseCard)[0]
    assert card.key == f"{card.card}/raise" and card.card.startswith(
        "deliver/acme/web#12/r1/card/1/"
    )
    step = drive(snap(answer=CardAnswer(card=card.card, choice=1, by="mona")), 121)
    assert len(of(step, Merge)) == 1


# ------------------------------------------------------------------------------- bugs


def test_a_move_the_table_lacks_is_raised_not_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(HANDLERS, "checks", lambda ctx: "deployed")
    with pytest.raises(MissingTransition, match=r"\(deliver, checks, deployed\)"):
        Driver()(snap())


def test_a_stage_at_rest_must_say_what_it_waits_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(HANDLERS, "checks", lambda ctx: "waiting")
    with pytest.raises(PipelineError, match="rests at checks without saying what it waits for"):
        Driver()(snap())


def test_blocking_needs_a_card(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(HANDLERS, "checks", lambda ctx: "timeout")
    with pytest.raises(PipelineError, match="blocks at checks without a card"):
        Driver()(snap())
    with pytest.raises(PipelineError, match="is blocked without a card"):
        decide(replace(begin(), stage="blocked"), snap(), policy(), at())


def test_a_decision_that_never_rests_is_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(HANDLERS, "checks", lambda ctx: "draft")
    with pytest.raises(PipelineError, match="moved more than 16 times"):
        Driver()(snap())


# -------------------------------------------------------------------------- properties

POLICIES = (
    policy(),
    AGENT,
    policy('[deliver]\nreview = "approvals:1"\nupdate_branch = false\n'),
    DEPLOYED,
    policy('[deliver]\nreview = "agent:reviewer"\nmerge_method = "merge"\n[deliver.deploy]\n'),
)
_MOVES = (
    st.tuples(st.just("tick"), st.sampled_from([0.1, 0.5, 1, 4, 11, 30, 61, 121])),
    st.tuples(st.just("push")),
    st.tuples(st.just("base_moved")),
    st.tuples(st.just("checks"), st.sampled_from(["success", "failure", None])),
    st.tuples(
        st.just("mergeable"), st.sampled_from(["clean", "unknown", "dirty", "blocked", "unstable"])
    ),
    st.tuples(st.just("approve")),
    st.tuples(st.just("answers")),
    st.tuples(st.just("visible")),
    st.tuples(st.just("update_lands"), st.sampled_from(["lands", "conflict", "refused"])),
    st.tuples(st.just("findings"), st.sampled_from(["COMMENT", "REQUEST_CHANGES", None])),
    st.tuples(st.just("answer"), st.sampled_from([1, 2])),
    st.tuples(st.just("deploy"), st.sampled_from(["success", "failure", "in_progress"])),
    st.tuples(st.just("probe"), st.booleans()),
    st.tuples(st.just("draft"), st.booleans()),
    st.tuples(st.just("line"), st.booleans()),
)
ENDINGS = (
    st.tuples(st.just("unlabel")),
    st.tuples(st.just("close")),
    st.tuples(st.just("person_merges")),
)
MOVES = st.one_of(*_MOVES, *ENDINGS)
STEADY_MOVES = st.one_of(*_MOVES)  # no person ends the delivery early
FATES = st.lists(
    st.builds(
        Fate,
        lands=st.booleans(),
        report=st.sampled_from(["done", "head_moved", "refused", "ambiguous", "lost"]),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy_at=st.integers(min_value=0, max_value=len(POLICIES) - 1),
    mode=st.sampled_from(["deliver", "deliver", "review"]),
    fates=FATES,
    moves=st.lists(MOVES, max_size=40),
)
def test_decide_keeps_its_promises_whatever_happens(
    policy_at: int, mode: Mode, fates: list[Fate], moves: list[tuple[object, ...]]
) -> None:
    """Deterministic; never a Merge after the PR merged, nor while an earlier merge may
    still be answered; every effect key used once; a head reviewed once; a delivery at
    rest waits on something a webhook brings or has a wake-up time; blocked iff a card is
    open; nothing after the end."""
    world = World(policy=POLICIES[policy_at], mode=mode, fates=fates)
    world.decide()
    for move in moves:
        world.apply(move)
        world.decide()
    event(f"ended at {world.delivery.stage}")
    event(f"merges asked: {min(len(world.merges), 3)}")


MERGE_MOVES = st.one_of(
    st.tuples(st.just("tick"), st.sampled_from([0.5, 1, 4, 6, 11])),
    st.tuples(st.just("answers")),
    st.tuples(st.just("visible")),
    st.tuples(st.just("push")),
    st.tuples(st.just("checks"), st.sampled_from(["success", "success", "failure"])),
    st.tuples(st.just("mergeable"), st.sampled_from(["clean", "unknown", "dirty"])),
    st.tuples(st.just("base_moved")),
    st.tuples(st.just("update_lands"), st.sampled_from(["lands", "refused"])),
    st.tuples(st.just("answer"), st.sampled_from([1, 2])),
)
LOSSY = st.lists(
    st.builds(
        Fate,
        lands=st.booleans(),
        report=st.sampled_from(["ambiguous", "lost", "head_moved", "refused", "done"]),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(
    method=st.sampled_from(["squash", "merge"]),
    fates=LOSSY,
    moves=st.lists(MERGE_MOVES, min_size=10, max_size=80),
)
def test_no_history_makes_it_merge_twice(
    method: str, fates: list[Fate], moves: list[tuple[object, ...]]
) -> None:
    """Lost, late and ambiguous answers, pushes and branch updates around the merge: a
    merge that landed is never followed by another Merge (the World asserts it)."""
    world = World(
        policy=policy(f'[deliver]\nmerge_method = "{method}"\n'), mode="deliver", fates=fates
    )
    world.decide()
    for move in moves:
        world.apply(move)
        world.decide()
    event(f"ended at {world.delivery.stage}")
    event(f"merges asked: {min(len(world.merges), 3)}")
    event(f"landed: {world.landed_at is not None}")
