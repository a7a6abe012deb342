"""The stage table: every row walks, a missing row is an error, every stage is reachable."""

from __future__ import annotations

from typing import get_args

import pytest

from pipeline.errors import MissingTransition
from pipeline.stages import (
    CARDS,
    GUARDS,
    POST_MERGE,
    PRE_MERGE,
    TABLE,
    TERMINAL,
    CardKind,
    Mode,
    Outcome,
    Stage,
    next_stage,
)

ROWS = [
    (mode, stage, outcome, nxt)
    for mode, table in TABLE.items()
    for (stage, outcome), nxt in table.items()
]
STAGES: tuple[Stage, ...] = get_args(Stage)
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
MODES: tuple[Mode, ...] = get_args(Mode)


@pytest.mark.parametrize(("mode", "stage", "outcome", "nxt"), ROWS)
def test_every_row_of_the_table_walks(
    mode: Mode, stage: Stage, outcome: Outcome, nxt: Stage
) -> None:
    assert next_stage(mode, stage, outcome) == nxt
    assert stage not in TERMINAL
    assert nxt in STAGES
    if nxt == stage:  # back to its own stage: a wait, or a guard that starts it afresh
        assert outcome in ("waiting", "changes_requested") or outcome in GUARDS


@pytest.mark.parametrize("mode", MODES)
def test_a_move_the_table_lacks_is_an_error_naming_it(mode: Mode) -> None:
    missing = [
        (stage, outcome)
        for stage in STAGES
        for outcome in OUTCOMES
        if (stage, outcome) not in TABLE[mode]
    ]
    assert missing
    for stage, outcome in missing:
        with pytest.raises(MissingTransition) as caught:
            next_stage(mode, stage, outcome)
        assert (caught.value.mode, caught.value.stage, caught.value.outcome) == (
            mode,
            stage,
            outcome,
        )
        assert f"({mode}, {stage}, {outcome})" in str(caught.value)


@pytest.mark.parametrize("stage", sorted(TERMINAL))
def test_a_terminal_stage_has_no_way_out(stage: Stage) -> None:
    for mode in MODES:
        assert not [key for key in TABLE[mode] if key[0] == stage]


@pytest.mark.parametrize("mode", MODES)
def test_every_live_stage_of_a_mode_is_reachable_from_review_and_can_end(mode: Mode) -> None:
    table = TABLE[mode]
    live = {stage for stage, _ in table}
    reached = {"review"}
    frontier = ["review"]
    while frontier:
        here = frontier.pop()
        for (stage, _), nxt in table.items():
            if stage == here and nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    assert live <= reached
    assert "cancelled" in reached
    expected = {"delivered", "cancelled"} if mode == "deliver" else {"reviewed", "cancelled"}
    assert expected <= reached


def test_the_deliver_mode_has_every_stage_of_the_issue() -> None:
    stages = {stage for stage, _ in TABLE["deliver"]} | set(TABLE["deliver"].values())
    assert stages == {
        "review",
        "ready",
        "checks",
        "update_branch",
        "merge",
        "deployment",
        "live_version",
        "delivered",
        "blocked",
        "cancelled",
    }


def test_the_review_mode_never_reaches_a_merge() -> None:
    reached = set(TABLE["review"].values()) | {stage for stage, _ in TABLE["review"]}
    assert reached == {"review", "reviewed", "blocked", "cancelled"}


@pytest.mark.parametrize("stage", PRE_MERGE)
def test_before_the_merge_every_guard_has_a_row(stage: Stage) -> None:
    for guard, nxt in GUARDS.items():
        assert next_stage("deliver", stage, guard) == nxt


@pytest.mark.parametrize("stage", POST_MERGE)
def test_after_the_merge_only_the_label_can_cancel(stage: Stage) -> None:
    assert next_stage("deliver", stage, "unlabeled") == "cancelled"
    for guard in ("closed", "new_head", "updated", "merged"):
        with pytest.raises(MissingTransition):
            next_stage("deliver", stage, guard)


@pytest.mark.parametrize("kind", get_args(CardKind))
def test_every_card_option_leads_somewhere_from_blocked(kind: CardKind) -> None:
    options = CARDS[kind]
    assert len(options) != 1  # a question has two options or more; a notice has none
    for label, outcome in options:
        assert label
        assert next_stage("deliver", "blocked", outcome) not in ("blocked",)
    assert (options == ()) == (kind == "conflict")


def test_the_review_mode_answers_its_only_card() -> None:
    for _, outcome in CARDS["review_failed"]:
        assert next_stage("review", "blocked", outcome) in ("review", "cancelled")
