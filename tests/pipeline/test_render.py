"""What people read: the check run's title and conclusion, the sticky comment."""

from __future__ import annotations

from dataclasses import replace

from pipeline.delivery import HistoryEntry, OpenCard, Reviewed
from pipeline.effects import CARD_SLOT
from pipeline.policy import PolicyProblem
from pipeline.render import Rendered, marker, render
from pipeline.stages import Stage
from tests.pipeline.builders import H1
from tests.pipeline.driver import begin

AT = "2026-03-02T09:30:00.000000+00:00"


def test_the_comment_starts_with_a_hidden_marker_naming_the_delivery() -> None:
    shown = render(begin(), waiting="the review")
    assert shown.comment_body.startswith("<!-- autoloop/deliver deliver/acme/web#12 -->\n")
    assert marker(begin()) == "<!-- autoloop/deliver deliver/acme/web#12 -->"
    assert "<!--" not in shown.check_summary


def test_a_waiting_stage_is_in_progress_with_what_it_waits_for() -> None:
    shown = render(replace(begin(), stage="checks"), waiting="required checks build")
    assert shown.check_title == "Checks: waiting for required checks build"
    assert (shown.check_status, shown.check_conclusion) == ("in_progress", None)
    assert "Waiting for required checks build." in shown.comment_body
    assert f"Head {H1}" in shown.comment_body  # a bare SHA: GitHub links it


def test_a_blocked_delivery_shows_the_stage_the_card_and_how_to_answer() -> None:
    card = OpenCard(
        key="deliver/acme/web#12/r1/card/1/checks_timeout",
        kind="checks_timeout",
        title="Required checks never reported on acme/web#12",
        text="never reported: test",
        options=("wait for the checks again", "stop this delivery"),
        blocked_at="checks",
    )
    shown = render(replace(begin(), stage="blocked", card=card), waiting="an answer")
    assert shown.check_title == "Blocked at checks: Required checks never reported on acme/web#12"
    assert shown.check_status == "in_progress"
    assert "> **Blocked at checks:** Required checks never reported" in shown.comment_body
    assert (
        f"`/answer {CARD_SLOT} 1` to wait for the checks again; "
        f"`/answer {CARD_SLOT} 2` to stop this delivery"
    ) in shown.comment_body


def test_a_conflict_notice_asks_for_a_push() -> None:
    card = OpenCard(
        key="k", kind="conflict", title="conflicts", text="resolve", options=(), blocked_at="merge"
    )
    shown = render(replace(begin(), stage="blocked", card=card), waiting="a push")
    assert "> Push to the branch to go on." in shown.comment_body
    assert "/answer" not in shown.comment_body


def ended(stage: Stage, outcome: str, *reviews: Reviewed) -> Rendered:
    d = begin()
    entry = HistoryEntry(stage=stage, at=AT, outcome=outcome, note="why")
    return render(
        replace(d, stage=stage, history=(*d.history, entry), reviewed=reviews), waiting=""
    )


def test_endings_complete_the_check_with_their_conclusion() -> None:
    cases = [
        (ended("delivered", "live"), "success"),
        (ended("cancelled", "unlabeled"), "neutral"),
        (ended("cancelled", "stop"), "failure"),
        (ended("reviewed", "passed", Reviewed(sha=H1, event="COMMENT")), "success"),
        (
            ended("reviewed", "changes_requested", Reviewed(sha=H1, event="REQUEST_CHANGES")),
            "failure",
        ),
        (ended("reviewed", "skipped"), "neutral"),
    ]
    for shown, conclusion in cases:
        assert (shown.check_status, shown.check_conclusion) == ("completed", conclusion)
    assert ended("delivered", "live").check_title == "Delivered: why"


def test_a_cancelled_delivery_says_how_to_start_a_new_one() -> None:
    """A PR closed and reopened keeps its label and is not delivered: the comment said
    only "Cancelled: the PR was closed"."""
    hint = "To start a new delivery, add its label again (remove it first"
    assert hint in ended("cancelled", "closed").comment_body
    assert hint not in ended("delivered", "live").comment_body


def test_a_policy_problem_names_the_key() -> None:
    problem = PolicyProblem(key="deliver.deploy.matches", message="expected 1 to 100, got 0")
    shown = render(begin(), waiting="a fix", problem=problem)
    assert shown.check_title == "Policy problem: deliver.deploy.matches"
    assert (
        "The policy `.github/autoloop.toml` on the default branch is not accepted: "
        "deliver.deploy.matches: expected 1 to 100, got 0" in shown.comment_body
    )
    assert shown.comment_body.count(".github/autoloop.toml") == 1  # (it was said twice)
    assert "Nothing else happens until it is fixed there." in shown.comment_body


def test_outside_text_cannot_break_the_table_or_open_html() -> None:
    entry = HistoryEntry(
        stage="checks", at=AT, outcome="waiting", note="lint | <!-- x --> <script>\nnext"
    )
    shown = render(replace(begin(), history=(entry,)), waiting="check `a|b` <b>")
    body = shown.comment_body
    assert "lint \\| &lt;!-- x --&gt; &lt;script&gt; next" in body
    assert "<script>" not in body and "<b>" not in body
    assert body.count("<!--") == 1


def test_the_title_is_short_and_the_table_keeps_the_latest_rows() -> None:
    shown = render(replace(begin(), stage="checks"), waiting="required checks " + "x" * 300)
    assert len(shown.check_title) == 120 and shown.check_title.endswith("…")
    many = tuple(
        HistoryEntry(stage="checks", at=AT, outcome="waiting", note=f"row {i}") for i in range(45)
    )
    body = render(replace(begin(), history=many), waiting="w").comment_body
    assert "| … | | | 15 earlier rows |" in body
    assert "row 14 |" not in body and "row 15 |" in body and "row 44 |" in body
