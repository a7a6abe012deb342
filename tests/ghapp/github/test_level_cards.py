"""Answers to a level-triggered delivery's card, read from the pull request's comments
on the sandbox GitHub: a writer's answer written after the card was raised is taken;
an older one, a reader's, or one out of range is not (the last two get one reply)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from fakegithub.server import SandboxHandle, running_sandbox
from ghapp.github import retry
from ghapp.github.client import GitHubClient
from ghapp.github.executor import GitHubExecutor
from ghapp.github.level_cards import ANSWER_SLACK, CardAnswers, card_name
from ghapp.github.writes import Target
from kernel.durations import iso
from pipeline import CardAnswer, Delivery, HistoryEntry, OpenCard, start


@pytest.fixture
def sandbox() -> Iterator[SandboxHandle]:
    retry.set_testing(True)
    with running_sandbox() as handle:
        handle.world.set_collaborator("maintainer", "maintain")
        yield handle
    retry.set_testing(False)


@pytest.fixture
def ex(sandbox: SandboxHandle) -> Iterator[GitHubExecutor]:
    with GitHubClient(
        app_id=sandbox.app_id, private_key=sandbox.private_key_pem, base_url=sandbox.api_url
    ) as client:
        yield GitHubExecutor(client, f"{sandbox.sandbox.app.slug}[bot]", app_id=sandbox.app_id)


def blocked(t: Target, raised: datetime, cards: int = 1) -> Delivery:
    d = start(repo=t.repo, number=t.number, head_sha="a" * 40, mode="deliver", now=raised)
    card = OpenCard(
        key=d.key("card", cards, "deploy_failed"),
        kind="deploy_failed",
        title="Deployment failed",
        text="...",
        options=("wait for a deployment again", "stop watching (the merge stays)"),
        blocked_at="deployment",
    )
    row = HistoryEntry(stage="blocked", at=iso(raised), outcome="failed")
    return replace(d, stage="blocked", card=card, cards=cards, history=(*d.history, row))


def pull(sandbox: SandboxHandle) -> Target:
    number = sandbox.world.open_pr("contributor", "cards", "Cards", {"c.txt": "c\n"})
    return Target(sandbox.repo, number)


def test_a_writers_answer_after_the_card_is_its_answer(
    sandbox: SandboxHandle, ex: GitHubExecutor
) -> None:
    t = pull(sandbox)
    d = blocked(t, datetime.now(UTC))
    assert card_name(d) == "d1"
    sandbox.world.comment("maintainer", t.number, "Looked at it.\n/answer d1 2\n")
    comments = ex.client.list_issue_comments(t.repo, t.number)
    answer, said = CardAnswers(ex.client, ex, ex.bot_login).answer(t, d, comments)
    assert answer == CardAnswer(card=d.card.key, choice=2, by="maintainer")  # type: ignore[union-attr]
    assert said == "/answer d1 2 by maintainer"


def test_an_answer_older_than_the_card_is_for_an_earlier_card(
    sandbox: SandboxHandle, ex: GitHubExecutor
) -> None:
    t = pull(sandbox)
    sandbox.world.comment("maintainer", t.number, "/answer d1 2")
    d = blocked(t, datetime.now(UTC) + ANSWER_SLACK + timedelta(minutes=1))
    comments = ex.client.list_issue_comments(t.repo, t.number)
    assert CardAnswers(ex.client, ex, ex.bot_login).answer(t, d, comments) == (None, "")


def test_a_readers_answer_and_a_choice_out_of_range_get_one_reply_each(
    sandbox: SandboxHandle, ex: GitHubExecutor
) -> None:
    t = pull(sandbox)
    d = blocked(t, datetime.now(UTC))
    sandbox.world.comment("reader", t.number, "/answer d1 1")
    sandbox.world.comment("maintainer", t.number, "/answer d1 5")
    sandbox.world.comment("maintainer", t.number, "/answer d2 1")  # another card: not this one
    for _ in range(2):  # a second run replies to nobody again
        comments = ex.client.list_issue_comments(t.repo, t.number)
        answers = CardAnswers(ex.client, ex, ex.bot_login)
        assert answers.answer(t, d, comments) == (None, "")
    replies = [
        c["body"]
        for c in ex.client.list_issue_comments(t.repo, t.number)
        if "was not taken" in c["body"]
    ]
    assert len(replies) == 2
    assert "@reader" in replies[0] and "only people with write access" in replies[0]
    assert "card d1 has options 1 to 2" in replies[1]


def test_a_notice_and_no_card_have_no_answer(sandbox: SandboxHandle, ex: GitHubExecutor) -> None:
    t = pull(sandbox)
    d = blocked(t, datetime.now(UTC))
    notice = replace(d, card=replace(d.card, kind="conflict", options=()))  # type: ignore[type-var]
    sandbox.world.comment("maintainer", t.number, "/answer d1 1")
    comments = ex.client.list_issue_comments(t.repo, t.number)
    answers = CardAnswers(ex.client, ex, ex.bot_login)
    assert answers.answer(t, notice, comments) == (None, "")
    assert answers.answer(t, replace(d, card=None), comments) == (None, "")


def test_an_answer_to_the_card_before_gets_the_clocks_slack_before_a_reply() -> None:
    """A runner whose clock is behind GitHub's saw the answer that its own run took (to
    d1) written after d2 was raised, and told its author it was not taken."""
    from ghapp.github.level_cards import _after

    raised = "2026-11-30T09:00:05.500000+00:00"  # the runner's clock
    assert _after("2026-11-30T09:00:06Z", raised)  # a later second: a new comment
    assert not _after("2026-11-30T09:00:05Z", raised)  # the same second: maybe before
    assert not _after("2026-11-30T09:01:30Z", raised, ANSWER_SLACK)  # within the slack
    assert _after("2026-11-30T09:02:06Z", raised, ANSWER_SLACK)
