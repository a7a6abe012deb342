"""The stored delivery: how it starts, its keys, the merge line, and its plain-data form."""

from __future__ import annotations

import json
from dataclasses import replace

from pipeline.delivery import (
    Attempt,
    Delivery,
    OpenCard,
    Reviewed,
    delivery_from_data,
    delivery_to_data,
    first_in_line,
    in_line,
    next_in_line,
    start,
)
from pipeline.effects import RaiseCard
from pipeline.snapshot import CardAnswer
from tests.pipeline.builders import H1, H2, T0, snap
from tests.pipeline.driver import Driver, begin, of


def test_a_delivery_starts_at_review_with_one_history_row() -> None:
    d = start(repo="acme/web", number=12, head_sha=H1, mode="deliver", now=T0, by="mona")
    assert (d.id, d.run, d.stage, d.heads) == ("deliver/acme/web#12", 1, "review", (H1,))
    assert d.stage_since == "2026-03-02T09:30:00.000000+00:00"
    (first,) = d.history
    assert (first.stage, first.outcome, first.note) == (
        "review",
        "started",
        "label deliver added by mona",
    )
    review = start(repo="acme/web", number=12, head_sha=H1, mode="review", now=T0, run=2)
    assert (
        review.history[0].note == "label deliver-review"
        and review.key("x") == "deliver/acme/web#12/r2/x"
    )


def test_keys_name_the_delivery_the_run_and_the_commit() -> None:
    assert begin().key("merge", H1, 3) == f"deliver/acme/web#12/r1/merge/{H1}/3"


def test_a_delivery_reconciles_only_an_ambiguous_unsettled_merge() -> None:
    d = begin()
    unclear = Attempt(key="k", sha=H1, at="2026-03-02T09:30:00.000000+00:00", outcome="ambiguous")
    assert not d.reconciling
    assert replace(d, merge_attempt=unclear).reconciling
    assert not replace(d, merge_attempt=replace(unclear, outcome="")).reconciling
    assert not replace(d, merge_attempt=unclear, merge_sha=H2).reconciling


def in_merge(number: int, since: str, base: str = "main", repo: str = "acme/web") -> Delivery:
    d = start(repo=repo, number=number, head_sha=H1, mode="deliver", now=T0)
    return replace(d, stage="merge", stage_since=since, base_ref=base)


def test_the_first_delivery_in_merge_on_a_base_goes_first() -> None:
    early = in_merge(30, "2026-03-02T09:00:00.000000+00:00")
    late = in_merge(7, "2026-03-02T09:05:00.000000+00:00")
    same_time = in_merge(31, "2026-03-02T09:00:00.000000+00:00")
    everyone = (early, late, same_time)
    assert first_in_line(early, everyone)
    assert not first_in_line(late, everyone)
    assert not first_in_line(same_time, everyone)  # the lower number wins a tie


def test_deliveries_elsewhere_or_not_in_merge_do_not_hold_the_line() -> None:
    me = in_merge(5, "2026-03-02T09:10:00.000000+00:00")
    others = (
        in_merge(1, "2026-03-02T09:00:00.000000+00:00", base="release"),
        in_merge(2, "2026-03-02T09:00:00.000000+00:00", repo="acme/api"),
        replace(in_merge(3, "2026-03-02T09:00:00.000000+00:00"), stage="checks"),
    )
    assert first_in_line(me, others)
    newcomer = replace(in_merge(9, ""), stage="checks")
    assert first_in_line(newcomer, others)
    assert not first_in_line(newcomer, (*others, me))  # it queues behind those in merge


def test_a_delivery_survives_its_plain_data_form() -> None:
    drive = Driver()
    drive(snap(check_runs=()))
    card = of(drive(snap(check_runs=()), 120), RaiseCard)[0]
    d = replace(
        drive.delivery,
        reviewed=(Reviewed(sha=H1, event="COMMENT"),),
        merge_attempt=Attempt(key="k", sha=H1, at="t", outcome="ambiguous", heard="t2"),
        heads=(H2, H1),
    )
    assert isinstance(d.card, OpenCard) and d.card.key == card.card
    data = json.loads(json.dumps(delivery_to_data(d)))
    assert delivery_from_data(data) == d
    answered = drive(snap(answer=CardAnswer(card=card.card, choice=2)), 121).delivery
    assert delivery_from_data(json.loads(json.dumps(delivery_to_data(answered)))) == answered


def test_a_place_in_line_is_kept_through_checks_and_the_next_is_named() -> None:
    updating = replace(
        in_merge(40, "2026-03-02T09:20:00.000000+00:00"),
        stage="checks",
        queued_at="2026-03-02T09:00:00.000000+00:00",
    )
    waiting = in_merge(3, "2026-03-02T09:05:00.000000+00:00")
    assert not first_in_line(waiting, (updating, waiting))  # the one checking is ahead
    assert first_in_line(updating, (updating, waiting))
    assert next_in_line((waiting, updating), "acme/web", "main") == updating
    assert next_in_line((waiting,), "acme/web", "main") == waiting
    assert next_in_line((waiting,), "acme/web", "release") is None
    checking = replace(in_merge(5, ""), stage="checks")  # never in the line: holds no place
    assert not in_line(checking) and next_in_line((checking,), "acme/web", "main") is None
