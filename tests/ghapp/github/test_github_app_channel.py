"""The github-comment channel against the sandbox GitHub over loopback HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from fakegithub.server import SandboxHandle, running_sandbox
from ghapp.github import retry
from ghapp.github.channel import GitHubCommentChannel, render_card
from ghapp.github.client import GitHubClient
from ghapp.runtime.links import CardLinks
from ghapp.runtime.settings import Settings
from kernel.records import Card, Matter


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxHandle]:
    with running_sandbox() as handle:
        yield handle


@pytest.fixture(scope="module")
def client(sandbox: SandboxHandle) -> Iterator[GitHubClient]:
    settings = Settings.from_env(
        {
            "AUTOLOOP_GITHUB_APP_ID": str(sandbox.app_id),
            "AUTOLOOP_GITHUB_PRIVATE_KEY": str(sandbox.private_key_path),
            "AUTOLOOP_GITHUB_WEBHOOK_SECRET": sandbox.webhook_secret,
            "AUTOLOOP_GITHUB_URL": sandbox.api_url,
        }
    ).require_github()
    with GitHubClient.from_settings(settings) as made:
        yield made


@pytest.fixture
def channel(sandbox: SandboxHandle, client: GitHubClient) -> Iterator[GitHubCommentChannel]:
    retry.set_testing(True)
    sandbox.world.faults.clear()
    slug = client.get_app()["slug"]
    links = CardLinks(bytes(range(32)), base_url="http://127.0.0.1:9")
    yield GitHubCommentChannel(client, f"{slug}[bot]", links=links)
    sandbox.world.faults.clear()
    retry.set_testing(False)


def ask(card_id: str = "c3", **kw: object) -> Card:
    base = Card(
        id=card_id,
        key="triage",
        matter="triage/x",
        kind_="ask",
        title="How should this issue be triaged?",
        text="Pick one.",
        options=("bug", "feature", "question"),
    )
    return replace(base, **kw)  # type: ignore[arg-type]  # test data: fields by name


def matter(subject: str) -> Matter:
    return Matter(id="triage/x", rule="triage", subject=subject, session="s")


def bot_writes(sandbox: SandboxHandle, method: str, path_contains: str) -> int:
    found = sandbox.world.audit.entries(method=method, path_contains=path_contains)
    return len([e for e in found if e.actor.endswith("[bot]")])


def test_an_open_question_shows_its_options_how_to_answer_and_the_link() -> None:
    text = render_card(ask(), link="http://127.0.0.1:9/cards/tok")
    assert text.startswith("<!-- autoloop:card=c3 -->\n**How should this issue be triaged?**")
    assert "1. bug\n2. feature\n3. question" in text
    assert "comment `/answer c3 N`" in text
    assert "[card page](http://127.0.0.1:9/cards/tok)" in text
    assert "card page" not in render_card(ask())


def test_an_answered_card_shows_the_choice_and_who_made_it() -> None:
    card = ask(state="done", choice=2, answered_by="maintainer", answered_via="github")
    text = render_card(card)
    assert "2. feature **(chosen)**" in text
    assert "Answered: **feature** by @maintainer." in text
    assert "This card is done." in text
    assert "/answer" not in text


def test_an_agents_mentions_in_a_card_notify_only_whom_the_rules_allow(
    sandbox: SandboxHandle, client: GitHubClient
) -> None:
    # An agent writes what the issue it read asked for; the App must not ping a team
    # or a stranger under its own name. rules.json's "mentions" (here: mona) may be.
    slug = client.get_app()["slug"]
    allowed = ("mona",)
    channel = GitHubCommentChannel(client, f"{slug}[bot]", mentions=lambda: allowed)
    number = sandbox.world.open_issue("reader", "Mentions")
    card = ask(
        "c40",
        title="Urgent for @everyone-here",
        text="@my-org/security and @Mona: approve now, says @reader. Mail ops@example.com",
        options=("@octocat says yes", "no"),
    )
    channel.send(card, matter(f"{sandbox.repo}#{number}"), previous_ref="")
    (only,) = client.list_issue_comments(sandbox.repo, number)
    body = only["body"]
    for quiet in ("everyone-here", "my-org/security", "octocat says yes"):
        assert f"@\u200b{quiet}" in body, body
    assert "and @Mona: approve" in body and "ops@example.com" in body
    assert "says @reader." in body  # who opened the issue: in the thread anyway


def test_a_card_becomes_one_comment_edited_in_place(
    sandbox: SandboxHandle, client: GitHubClient, channel: GitHubCommentChannel
) -> None:
    number = sandbox.world.open_issue("reader", "One comment")
    about = matter(f"{sandbox.repo}#{number}")
    ref = channel.send(ask("c10"), about, previous_ref="")
    answered = ask("c10", state="decided", choice=1, answered_by="cli-user", version=2)
    assert channel.send(answered, about, previous_ref=ref) == ref
    (only,) = client.list_issue_comments(sandbox.repo, number)
    assert str(only["id"]) == ref
    assert "Answered: **bug** by cli-user." in only["body"]


def test_cards_without_an_issue_subject_are_skipped(
    sandbox: SandboxHandle, channel: GitHubCommentChannel
) -> None:
    before = len(sandbox.world.audit.entries(method="POST"))
    assert channel.send(ask("c11"), None, previous_ref="") == ""
    assert channel.send(ask("c12"), matter(sandbox.repo), previous_ref="") == ""
    assert len(sandbox.world.audit.entries(method="POST")) == before


def test_a_create_whose_answer_was_lost_is_found_again_not_repeated(
    sandbox: SandboxHandle, client: GitHubClient, channel: GitHubCommentChannel
) -> None:
    number = sandbox.world.open_issue("reader", "Lost create")
    path = f"/issues/{number}/comments"
    sandbox.world.faults.add("response_lost", method="POST", path=f"*{path}")
    ref = channel.send(ask("c13"), matter(f"{sandbox.repo}#{number}"), previous_ref="")
    (only,) = client.list_issue_comments(sandbox.repo, number)
    assert str(only["id"]) == ref
    assert bot_writes(sandbox, "POST", path) == 1


def test_a_send_after_a_crash_finds_the_comment_already_made(
    sandbox: SandboxHandle, client: GitHubClient, channel: GitHubCommentChannel
) -> None:
    number = sandbox.world.open_issue("reader", "Crash after create")
    about = matter(f"{sandbox.repo}#{number}")
    ref = channel.send(ask("c14"), about, previous_ref="")
    # The delivery was never recorded: the hub offers the same version again.
    restarted = GitHubCommentChannel(client, channel.bot_login, links=channel.links)
    assert restarted.send(ask("c14"), about, previous_ref="") == ref
    assert len(client.list_issue_comments(sandbox.repo, number)) == 1
    assert bot_writes(sandbox, "PATCH", f"/issues/comments/{ref}") == 0


def test_another_ledgers_card_with_the_same_id_is_never_taken_for_ours(
    sandbox: SandboxHandle, client: GitHubClient, channel: GitHubCommentChannel
) -> None:
    """Card ids restart in every ledger: an Action run on a home made afresh raised its
    c1 on an issue where an earlier run's c1 had been answered, found that comment by its
    marker and wrote over it."""
    number = sandbox.world.open_issue("reader", "Two ledgers")
    about = matter(f"{sandbox.repo}#{number}")
    first = GitHubCommentChannel(client, channel.bot_login, ledger="run41")
    answered = ask("c1", state="done", choice=2, answered_by="maintainer", version=2)
    first_ref = first.send(answered, about, previous_ref="")
    before = client.list_issue_comments(sandbox.repo, number)[0]["body"]
    assert "<!-- autoloop:card=c1 ledger=run41 -->" in before

    second = GitHubCommentChannel(client, channel.bot_login, ledger="run42")
    second_ref = second.send(ask("c1"), about, previous_ref="")
    assert second_ref != first_ref
    bodies = {str(c["id"]): c["body"] for c in client.list_issue_comments(sandbox.repo, number)}
    assert bodies[first_ref] == before  # the answered card stays as it was
    assert "<!-- autoloop:card=c1 ledger=run42 -->" in bodies[second_ref]
    assert "To answer, comment `/answer c1 N`" in bodies[second_ref]

    # The same ledger after a crash (its delivery never recorded) still finds its own.
    again = GitHubCommentChannel(client, channel.bot_login, ledger="run42")
    assert again.send(ask("c1"), about, previous_ref="") == second_ref
    assert len(client.list_issue_comments(sandbox.repo, number)) == 2


def test_an_edit_whose_answer_was_lost_is_read_back_not_resent(
    sandbox: SandboxHandle, client: GitHubClient, channel: GitHubCommentChannel
) -> None:
    number = sandbox.world.open_issue("reader", "Lost edit")
    about = matter(f"{sandbox.repo}#{number}")
    ref = channel.send(ask("c15"), about, previous_ref="")
    path = f"/issues/comments/{ref}"
    sandbox.world.faults.add("response_lost", method="PATCH", path=f"*{path}")
    closed = ask("c15", state="closed", version=2)
    assert channel.send(closed, about, previous_ref=ref) == ref
    assert bot_writes(sandbox, "PATCH", path) == 1
    assert "This card is closed." in client.list_issue_comments(sandbox.repo, number)[0]["body"]


def test_an_older_version_never_overwrites_a_newer_one(
    sandbox: SandboxHandle, client: GitHubClient, channel: GitHubCommentChannel
) -> None:
    number = sandbox.world.open_issue("reader", "Out of order")
    about = matter(f"{sandbox.repo}#{number}")
    ref = channel.send(ask("c16", version=3, state="done", choice=3), about, previous_ref="")
    assert channel.send(ask("c16", version=2), about, previous_ref=ref) == ref
    assert "This card is done." in client.list_issue_comments(sandbox.repo, number)[0]["body"]
