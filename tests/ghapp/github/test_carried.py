"""A delivery's state carried on its pull request: encoded into the progress it shows,
read back from our sticky comment or our check run (the newer one), never from anyone
else's text, and refused when it is not readable."""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fakegithub.server import SandboxHandle, running_sandbox
from ghapp.github import retry
from ghapp.github.carried import STATE_MAX, decode_state, encode_state, read_carried
from ghapp.github.client import GitHubClient
from ghapp.github.executor import GitHubExecutor
from ghapp.github.writes import Target, marker
from kernel.records import Action
from pipeline import HistoryEntry, delivery_from_data, delivery_to_data, start

NOW = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


def state(number: int = 7, *, rows: int = 3, repo: str = "sandbox/demo") -> dict[str, Any]:
    """A delivery's record with ``rows`` more history rows of some 200 characters each
    (digests: they compress as badly as real notes)."""
    d = start(repo=repo, number=number, head_sha="a" * 40, mode="deliver", now=NOW)
    more = tuple(
        HistoryEntry(
            stage="checks",
            at=(NOW + timedelta(minutes=i)).isoformat(),
            outcome="waiting",
            note=f"row {i} " + hashlib.sha256(str(i).encode()).hexdigest() * 3,
        )
        for i in range(rows)
    )
    return delivery_to_data(replace(d, history=(*d.history, *more)))


# ------------------------------------------------------------------------------ codec


def test_a_state_comes_back_as_it_went() -> None:
    data = state()
    payload = encode_state(data)
    assert decode_state(f"text\n{marker('state', payload)}\nmore") == data
    assert delivery_from_data(decode_state(marker("state", payload)) or {}).number == 7


def test_a_large_history_is_trimmed_to_fit_oldest_rows_first() -> None:
    data = state(rows=2000)
    payload = encode_state(data)
    assert len(payload) <= STATE_MAX
    back = decode_state(marker("state", payload))
    assert back is not None and 8 <= len(back["history"]) < len(data["history"])
    assert back["history"][-1] == data["history"][-1]


@pytest.mark.parametrize(
    "text",
    [
        "no marker at all",
        marker("state", "not*base64"),
        marker("state", "AAAA"),  # base64, not zlib
        marker("state", base64.urlsafe_b64encode(zlib.compress(b"[1, 2]")).decode().rstrip("=")),
        marker("state", base64.urlsafe_b64encode(zlib.compress(b"{nope")).decode().rstrip("=")),
    ],
)
def test_what_is_not_a_state_reads_as_none(text: str) -> None:
    assert decode_state(text) is None


def test_a_state_that_inflates_past_a_mebibyte_is_refused() -> None:
    bomb = zlib.compress(b'{"a": "' + b"x" * (3 << 20) + b'"}', 9)
    payload = base64.urlsafe_b64encode(bomb).decode().rstrip("=")
    assert len(payload) < 20_000
    assert decode_state(marker("state", payload)) is None


# ------------------------------------------------------------------------------ on GitHub


@pytest.fixture
def sandbox() -> Iterator[SandboxHandle]:
    retry.set_testing(True)
    with running_sandbox() as handle:
        yield handle
    retry.set_testing(False)


@pytest.fixture
def ex(sandbox: SandboxHandle) -> Iterator[GitHubExecutor]:
    with GitHubClient(
        app_id=sandbox.app_id, private_key=sandbox.private_key_pem, base_url=sandbox.api_url
    ) as client:
        yield GitHubExecutor(client, f"{sandbox.sandbox.app.slug}[bot]", app_id=sandbox.app_id)


def show(ex: GitHubExecutor, t: Target, head: str, seq: int, data: dict[str, Any]) -> None:
    params = {
        "repo": t.repo,
        "number": t.number,
        "key": f"k{seq}",
        "seq": seq,
        "head_sha": head,
        "check_title": f"step {seq}",
        "check_status": "in_progress",
        "check_conclusion": None,
        "check_summary": f"summary {seq}",
        "comment_body": f"step {seq}\n",
        "state": encode_state({**data, "progress_seq": seq}),
    }
    ex.perform(Action(id=f"p{seq}", matter="m", turn="", do="github.progress", params=params))


def open_pr(sandbox: SandboxHandle) -> tuple[Target, str]:
    number = sandbox.world.open_pr("contributor", "carried", "Carried", {"c.txt": "c\n"})
    return Target(sandbox.repo, number), sandbox.sandbox.state.repos[sandbox.repo].branches[
        "carried"
    ]


def test_the_state_is_read_back_from_our_comment(
    sandbox: SandboxHandle, ex: GitHubExecutor
) -> None:
    t, head = open_pr(sandbox)
    data = state(t.number)
    show(ex, t, head, 3, data)
    comments = ex.client.list_issue_comments(t.repo, t.number)
    found = read_carried(ex.delivery, t, head, comments)
    assert found is not None and found.where == "comment" and found.seq == 3
    assert found.data == {**data, "progress_seq": 3}
    (run,) = ex.client.list_check_runs_for_ref(t.repo, head, check_name="autoloop/deliver")
    assert decode_state(run["output"]["text"]) == found.data


def test_the_check_run_wins_when_the_comment_did_not_take_the_newer_state(
    sandbox: SandboxHandle, ex: GitHubExecutor
) -> None:
    t, head = open_pr(sandbox)
    data = state(t.number)
    show(ex, t, head, 1, data)
    sandbox.world.faults.add("error_502", method="PATCH", path="*/issues/comments/*")
    with pytest.raises(Exception, match="502"):
        show(ex, t, head, 2, {**data, "stage": "merge"})
    comments = ex.client.list_issue_comments(t.repo, t.number)
    found = read_carried(ex.delivery, t, head, comments)
    assert found is not None and (found.where, found.seq) == ("check run", 2)
    assert found.data["stage"] == "merge"


def test_a_state_in_someone_elses_comment_or_about_another_pr_is_not_read(
    sandbox: SandboxHandle, ex: GitHubExecutor
) -> None:
    t, head = open_pr(sandbox)
    forged = marker("state", encode_state({**state(t.number), "stage": "merge"}))
    text = f"{marker('deliver', str(t))}\n{marker('seq', '99')}\n{forged}\n"
    sandbox.world.comment("contributor", t.number, text)
    comments = ex.client.list_issue_comments(t.repo, t.number)
    assert read_carried(ex.delivery, t, head, comments) is None
    show(ex, t, head, 1, state(t.number + 1))  # ours, but about another pull request
    comments = ex.client.list_issue_comments(t.repo, t.number)
    assert read_carried(ex.delivery, t, head, comments) is None


def test_a_bad_state_parameter_is_refused(sandbox: SandboxHandle, ex: GitHubExecutor) -> None:
    t, head = open_pr(sandbox)
    params = {
        "repo": t.repo,
        "number": t.number,
        "key": "k",
        "seq": 1,
        "head_sha": head,
        "check_title": "t",
        "check_status": "in_progress",
        "check_conclusion": None,
        "check_summary": "",
        "comment_body": "b",
        "state": "--> <script>",
    }
    with pytest.raises(Exception, match="'state' must be base64url"):
        ex.perform(Action(id="bad", matter="m", turn="", do="github.progress", params=params))
