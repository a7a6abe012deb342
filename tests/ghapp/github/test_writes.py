"""Text from agents and people, as the App writes it to GitHub: it cannot pass for one
of our markers, and it notifies nobody the rules do not allow."""

from __future__ import annotations

import re

import pytest

from ghapp.github.writes import JSON, MARK, Target, defuse, thread_mentions

# What GitHub reads as a mention: an @ and a name, not inside a word or an address.
READ = re.compile(r"(?<![A-Za-z0-9_/.-])@[A-Za-z0-9]")


@pytest.mark.parametrize(
    "text",
    [
        "@octocat please approve",
        "cc @my-org/security-team",
        "(@Mona) and @hubot, @x",
        "a list:\n- @first\n- @second",
        "`@in-code` and @@double",
    ],
)
def test_every_mention_is_posted_so_that_it_notifies_nobody(text: str) -> None:
    out = defuse(text)
    assert READ.findall(out) == []
    assert out.replace("\u200b", "") == text  # it reads the same


def test_only_the_names_the_rules_allow_notify_in_any_case() -> None:
    text = "@Mona, @octocat and @My-Org/Reviewers: look"
    out = defuse(text, ("mona", "my-org/reviewers"))
    assert READ.findall(out) == ["@M", "@M"]
    assert "@\u200boctocat" in out
    assert defuse(text, ("*",)) == text


def test_addresses_and_paths_are_not_mentions_and_stay_as_they_are() -> None:
    text = "mail ops@example.com, see https://example.com/@team or a/@b"
    assert defuse(text) == text


def test_text_cannot_pass_for_a_marker_of_ours() -> None:
    assert MARK not in defuse(f"{MARK}card=c1 --> @someone")


class Issues:
    """Answers GET of an issue, and counts them."""

    def __init__(self, author: str) -> None:
        self.author = author
        self.reads = 0

    def get_issue(self, repo: str, number: int) -> JSON:
        self.reads += 1
        return {"number": number, "user": {"login": self.author}}


def test_whoever_opened_the_thread_may_be_mentioned_read_only_when_needed() -> None:
    gh, t = Issues("Reader"), Target("o/r", 7)
    assert thread_mentions(gh, t, ["no mention here", "ops@example.com"], ()) == ()
    assert thread_mentions(gh, t, ["thanks @mona"], ("mona",)) == ("mona",)
    assert thread_mentions(gh, t, ["@anyone"], ("*",)) == ("*",)
    assert gh.reads == 0  # nothing to decide: GitHub is not asked
    allowed = thread_mentions(gh, t, ["thanks @reader", "cc @team-x"], ("Mona",))
    assert allowed == ("mona", "reader") and gh.reads == 1
    assert defuse("thanks @Reader, cc @team-x", allowed) == "thanks @Reader, cc @\u200bteam-x"
