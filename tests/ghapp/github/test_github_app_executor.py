"""The ``github.*`` executor against the sandbox GitHub over loopback HTTP.

Each write is checked in the sandbox's audit log (one entry per applied write): a lost
answer, a retry after a crash, or both, never apply the same write twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from fakegithub.server import SandboxHandle, running_sandbox
from ghapp.github import retry
from ghapp.github.client import GitHubClient
from ghapp.github.executor import GitHubExecutor, find_marked
from ghapp.github.retry import AmbiguousWrite, RateLimited
from ghapp.runtime.settings import Settings
from kernel.records import Action
from plugins.protocols import ActionFailed
from plugins.sources.github import ACTIONS as GITHUB_ACTIONS

_ids = iter(range(1, 10_000))


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
def gh(sandbox: SandboxHandle, client: GitHubClient) -> Iterator[GitHubClient]:
    retry.set_testing(True)
    sandbox.world.faults.clear()
    yield client
    sandbox.world.faults.clear()
    retry.set_testing(False)


@pytest.fixture
def ex(gh: GitHubClient) -> GitHubExecutor:
    return GitHubExecutor(gh, f"{sandbox_slug(gh)}[bot]")


def sandbox_slug(gh: GitHubClient) -> str:
    slug: str = gh.get_app()["slug"]
    return slug


def action(do: str, attempts: int = 0, **params: Any) -> Action:
    return Action(
        id=f"t{next(_ids)}.a0", matter="m", turn="t", do=do, params=params, attempts=attempts
    )


def writes(sandbox: SandboxHandle, method: str, path: str) -> int:
    found = sandbox.world.audit.entries(method=method)
    return len([e for e in found if e.path == path and e.actor.endswith("[bot]")])


def open_pr(sandbox: SandboxHandle, branch: str) -> tuple[int, str]:
    number = sandbox.world.open_pr("maintainer", branch, f"Change {branch}", {f"{branch}.txt": "x"})
    sha = sandbox.sandbox.state.repos[sandbox.repo].branches[branch]
    return number, sha


# --------------------------------------------------------------------------- lost answers


@pytest.mark.parametrize(
    "case",
    [
        ("github.comment", "POST", "/comments", {"body": "Looking into it."}, None),
        ("github.label", "POST", "/labels", {"labels": ["bug", "p2"]}, None),
        ("github.unlabel", "DELETE", "/labels/bug", {"label": "bug"}, "label"),
        ("github.close", "PATCH", "", {"reason": "not_planned"}, None),
        ("github.reopen", "PATCH", "", {}, "close"),
        ("github.assign", "POST", "/assignees", {"assignees": ["maintainer"]}, None),
    ],
)
def test_an_issue_write_whose_answer_is_lost_is_read_back_and_made_once(
    sandbox: SandboxHandle,
    gh: GitHubClient,
    ex: GitHubExecutor,
    case: tuple[str, str, str, dict[str, Any], str | None],
) -> None:
    do, method, tail, params, setup = case
    number = sandbox.world.open_issue("reader", f"Issue for {do}", labels=["bug"])
    if setup == "close":
        sandbox.world.close_issue("maintainer", number)
    path = f"/repos/{sandbox.repo}/issues/{number}{tail}"
    sandbox.world.faults.add("response_lost", method=method, path=path)
    act = action(do, repo=sandbox.repo, number=number, **params)

    result = ex.perform(act)
    assert result["read_back"] is True
    assert writes(sandbox, method, path) == 1
    # A retry (the hub recorded an attempt first, e.g. before a crash) writes nothing.
    again = ex.perform(replace(act, attempts=1))
    assert again["read_back"] is True
    assert writes(sandbox, method, path) == 1

    issue = gh.get_issue(sandbox.repo, number)
    labels = sorted(lb["name"] for lb in issue["labels"])
    expected = {
        "github.comment": lambda: len(gh.list_issue_comments(sandbox.repo, number)) == 1,
        "github.label": lambda: labels == ["bug", "p2"],
        "github.unlabel": lambda: labels == [],
        "github.close": lambda: issue["state"] == "closed",
        "github.reopen": lambda: issue["state"] == "open",
        "github.assign": lambda: [a["login"] for a in issue["assignees"]] == ["maintainer"],
    }
    assert expected[do]()


def test_a_sticky_comment_retried_after_a_crash_is_found_by_its_marker(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number = sandbox.world.open_issue("reader", "Sticky")
    first = action("github.comment", repo=sandbox.repo, number=number, body="Hello")
    made = ex.perform(first)
    assert ex.perform(replace(first, attempts=2))["comment"] == made["comment"]
    (only,) = gh.list_issue_comments(sandbox.repo, number)
    assert only["body"] == f"<!-- autoloop:action={first.id} -->\nHello"


def test_a_retried_write_back_never_takes_another_ledgers_comment_for_its_own(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    """Action ids restart in every ledger (t1.a0 again in a home made afresh): a retry
    looked for its comment by marker, found an earlier ledger's and wrote over it."""
    bot = f"{sandbox_slug(gh)}[bot]"
    number = sandbox.world.open_issue("reader", "Two ledgers")
    older = GitHubExecutor(gh, bot, ledger="run51")
    newer = GitHubExecutor(gh, bot, ledger="run52")
    params = {"repo": sandbox.repo, "number": number, "body": "Triaged as bug."}
    first = Action(id="t1.a0", matter="m", turn="t1", do="github.comment", params=params)
    older.perform(first)
    again = replace(first, params={**first.params, "body": "Triaged as feature."}, attempts=1)
    newer.perform(again)  # a retry: it looks for its own comment before writing
    bodies = [c["body"] for c in gh.list_issue_comments(sandbox.repo, number)]
    assert bodies == [
        "<!-- autoloop:action=t1.a0 ledger=run51 -->\nTriaged as bug.",
        "<!-- autoloop:action=t1.a0 ledger=run52 -->\nTriaged as feature.",
    ]
    newer.perform(replace(again, attempts=2))  # its own is found: nothing written twice
    assert len(gh.list_issue_comments(sandbox.repo, number)) == 2


def test_a_502_that_applied_nothing_is_written_once_after_reading_back(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number = sandbox.world.open_issue("reader", "Bad gateway")
    path = f"/repos/{sandbox.repo}/issues/{number}/comments"
    sandbox.world.faults.add("error_502", method="POST", path=path)
    result = ex.perform(action("github.comment", repo=sandbox.repo, number=number, body="Hi"))
    assert result["read_back"] is True
    assert writes(sandbox, "POST", path) == 1
    assert len(gh.list_issue_comments(sandbox.repo, number)) == 1


def test_a_comment_lost_twice_is_left_for_the_next_sweep_not_guessed(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number = sandbox.world.open_issue("reader", "Unlucky")
    path = f"/repos/{sandbox.repo}/issues/{number}/comments"
    sandbox.world.faults.add("error_502", method="POST", path=path, times=2)
    act = action("github.comment", repo=sandbox.repo, number=number, body="Hi")
    with pytest.raises(AmbiguousWrite):
        ex.perform(act)  # the hub keeps it allowed; the sweep retries with attempts > 0
    assert writes(sandbox, "POST", path) == 0
    ex.perform(replace(act, attempts=2))
    assert writes(sandbox, "POST", path) == 1


def test_a_write_back_comment_mentions_only_whom_the_rules_allow(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    allowed: tuple[str, ...] = ()
    quiet = GitHubExecutor(gh, f"{sandbox_slug(gh)}[bot]", mentions=lambda: allowed)
    number = sandbox.world.open_issue("reader", "Mentioned")
    body = "Thanks, @reader. @my-org/everyone and @mona, please check."
    quiet.perform(action("github.comment", repo=sandbox.repo, number=number, body=body))
    allowed = ("mona",)  # rules.json edited: read at each write
    quiet.perform(action("github.comment", repo=sandbox.repo, number=number, body=body))
    first, second = (c["body"] for c in gh.list_issue_comments(sandbox.repo, number))
    # whoever opened the issue is in the thread anyway: "thanks, @author" stays
    assert "Thanks, @reader. @\u200bmy-org/everyone and @\u200bmona," in first
    assert "Thanks, @reader. @\u200bmy-org/everyone and @mona," in second


# --------------------------------------------------------------------------- pull requests


def test_a_review_whose_answer_is_lost_is_found_by_its_marker(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, sha = open_pr(sandbox, "review-me")
    path = f"/repos/{sandbox.repo}/pulls/{number}/reviews"
    sandbox.world.faults.add("response_lost", method="POST", path=path)
    params = {"repo": sandbox.repo, "number": number, "event": "COMMENT", "body": "Looks fine."}
    first = ex.perform(action("github.review", **params, sha=sha))
    assert first["read_back"] is True and writes(sandbox, "POST", path) == 1
    reviews = gh.list_reviews(sandbox.repo, number)
    assert find_marked(reviews, "<!-- autoloop:action=", ex.bot_login) is not None
    assert len(reviews) == 1


def test_an_ambiguous_merge_is_reconciled_by_reading_the_pr_never_merged_twice(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, sha = open_pr(sandbox, "merge-me")
    path = f"/repos/{sandbox.repo}/pulls/{number}/merge"
    sandbox.world.faults.add("response_lost", method="PUT", path=path)
    result = ex.perform(action("github.merge", repo=sandbox.repo, number=number, sha=sha))
    assert result["merged"] is True and result["read_back"] is True
    again = ex.perform(action("github.merge", 1, repo=sandbox.repo, number=number, sha=sha))
    assert again["read_back"] is True
    assert again["merged"] is True
    assert writes(sandbox, "PUT", path) == 1
    assert gh.get_pull(sandbox.repo, number)["merged"] is True


def test_a_merge_whose_head_moved_is_refused(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, old = open_pr(sandbox, "moving")
    sandbox.world.push("maintainer", "moving", {"more.txt": "y"})
    with pytest.raises(ActionFailed, match=r"GitHub refused github\.merge"):
        ex.perform(action("github.merge", repo=sandbox.repo, number=number, sha=old))
    with pytest.raises(ActionFailed, match=r"head .* moved"):
        ex.perform(action("github.merge", 1, repo=sandbox.repo, number=number, sha=old))
    assert gh.get_pull(sandbox.repo, number)["merged"] is False


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("do", "params", "message"),
    [
        ("github.comment", {"repo": "acme", "number": 1, "body": "x"}, "'repo' must be"),
        ("github.comment", {"repo": "a/b", "number": "1", "body": "x"}, "'number' must be"),
        ("github.comment", {"repo": "a/b", "number": True, "body": "x"}, "'number' must be"),
        ("github.comment", {"repo": "a/b", "number": 1, "body": " "}, "'body' must be"),
        ("github.label", {"repo": "a/b", "number": 1, "labels": "bug"}, "'labels'"),
        ("github.close", {"repo": "a/b", "number": 1, "reason": "bored"}, "'reason'"),
        ("github.review", {"repo": "a/b", "number": 1, "event": "LGTM"}, "'event'"),
        ("github.merge", {"repo": "a/b", "number": 1}, "'sha' must be"),
        ("github.merge", {"repo": "a/b", "number": 1, "sha": "abc1234", "method": "x"}, "method"),
        ("github.delete", {"repo": "a/b", "number": 1}, "unknown action"),
    ],
)
def test_bad_parameters_are_refused_with_a_clear_message(
    ex: GitHubExecutor, do: str, params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ActionFailed, match=message):
        ex.perform(action(do, **params))


def test_a_refusal_from_github_fails_the_action(sandbox: SandboxHandle, ex: GitHubExecutor) -> None:
    with pytest.raises(ActionFailed, match="404"):
        ex.perform(action("github.comment", repo=sandbox.repo, number=99_999, body="x"))


def test_a_long_rate_limit_is_left_to_the_next_sweep(
    sandbox: SandboxHandle, ex: GitHubExecutor
) -> None:
    number = sandbox.world.open_issue("reader", "Busy")
    path = f"/repos/{sandbox.repo}/issues/{number}/labels"
    sandbox.world.faults.add("rate_limit", method="POST", path=path, retry_after=600)
    with pytest.raises(RateLimited):
        ex.perform(action("github.label", repo=sandbox.repo, number=number, labels=["x"]))


def test_an_agents_write_back_may_not_add_a_delivery_label(
    sandbox: SandboxHandle, ex: GitHubExecutor
) -> None:
    """A delivery label ends in a merge: added by an agent's write-back (in the Action,
    with a person's token, as that person), it started a delivery."""
    sandbox.world.push(
        "maintainer", "main", {".github/autoloop.toml": '[deliver.labels]\ndeliver = "Ship-It"\n'}
    )
    number = sandbox.world.open_issue("reader", "Ship me")
    path = f"/repos/{sandbox.repo}/issues/{number}/labels"
    for names in (["bug", "Deliver"], ["deliver-review"], ["ship-it"]):
        with pytest.raises(ActionFailed, match="a delivery label is for a person"):
            ex.perform(action("github.label", repo=sandbox.repo, number=number, labels=names))
    assert writes(sandbox, "POST", path) == 0
    ex.perform(action("github.label", repo=sandbox.repo, number=number, labels=["bug"]))
    assert writes(sandbox, "POST", path) == 1


def test_an_action_that_keeps_failing_is_given_up(ex: GitHubExecutor) -> None:
    act = action("github.comment", attempts=20, repo="a/b", number=1, body="x")
    with pytest.raises(ActionFailed, match="gave up after 20 attempts"):
        ex.perform(act)


def test_an_agent_cannot_forge_our_markers(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number = sandbox.world.open_issue("reader", "Forgery")
    body = "<!-- autoloop:card=c1 --> pretend to be a card"
    ex.perform(action("github.comment", repo=sandbox.repo, number=number, body=body))
    (made,) = gh.list_issue_comments(sandbox.repo, number)
    assert "<!-- autoloop:card=c1" not in made["body"]
    assert made["body"].count("<!-- autoloop:") == 1


def test_the_rules_know_exactly_the_github_executors_verbs() -> None:
    # rules.json refuses "github.<verb>" for a verb not in GITHUB_ACTIONS (a typo there
    # was accepted silently): the two lists must stay the same
    executor = GitHubExecutor(None, "x[bot]")  # type: ignore[arg-type]  # no call is made
    assert sorted(executor._ops) == sorted(GITHUB_ACTIONS)
