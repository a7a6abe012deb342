"""The delivery's writes against the sandbox GitHub over loopback HTTP: each applied once
(the sandbox's audit log counts applied writes), whatever answers are lost, and each
ending in the outcome the pipeline reads (:func:`write_result`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from fakegithub.server import SandboxHandle, running_sandbox
from ghapp.github import retry
from ghapp.github.client import GitHubClient
from ghapp.github.executor import GitHubExecutor
from ghapp.github.outcomes import effect_action, write_result
from kernel.records import Action
from pipeline import (
    DeleteBranch,
    Effect,
    MarkReady,
    Merge,
    PostReview,
    ProbeVersion,
    Progress,
    UpdateBranch,
    WriteResult,
    start,
)
from pipeline.snapshot import WriteOutcome
from plugins.protocols import ActionFailed

NOW = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
_ids = iter(range(1, 100_000))


@pytest.fixture
def sandbox() -> Iterator[SandboxHandle]:
    retry.set_testing(True)
    with running_sandbox() as handle:
        yield handle
    retry.set_testing(False)


@pytest.fixture
def gh(sandbox: SandboxHandle) -> Iterator[GitHubClient]:
    with GitHubClient(
        app_id=sandbox.app_id, private_key=sandbox.private_key_pem, base_url=sandbox.api_url
    ) as client:
        yield client


@pytest.fixture
def ex(sandbox: SandboxHandle, gh: GitHubClient) -> GitHubExecutor:
    return GitHubExecutor(gh, f"{sandbox.sandbox.app.slug}[bot]", app_id=sandbox.app_id)


def action(do: str, **params: Any) -> Action:
    return Action(id=f"deliver-{next(_ids)}", matter="m", turn="t", do=do, params=params)


def outbox(ex: GitHubExecutor, act: Action) -> Action:
    """One attempt as the hub makes it: the count of earlier attempts goes in, and the
    action comes out done, failed, or still allowed with the error (to be retried)."""
    try:
        result = ex.perform(act)
    except ActionFailed as exc:
        return replace(act, status="failed", error=str(exc), attempts=act.attempts + 1)
    except Exception as exc:
        return replace(act, error=str(exc), attempts=act.attempts + 1)
    return replace(act, status="done", result=dict(result), attempts=act.attempts + 1)


def writes(sandbox: SandboxHandle, method: str, tail: str) -> int:
    found = sandbox.world.audit.entries(method=method)
    return len([e for e in found if e.path.endswith(tail) and e.actor.endswith("[bot]")])


def open_pr(sandbox: SandboxHandle, branch: str, **kw: Any) -> tuple[int, str]:
    number = sandbox.world.open_pr("contributor", branch, f"Change {branch}", {branch: "1"}, **kw)
    return number, sandbox.sandbox.state.repos[sandbox.repo].branches[branch]


# ------------------------------------------------------------------------------ progress


def progress(sandbox: SandboxHandle, number: int, seq: int, head: str, **kw: Any) -> Action:
    params: dict[str, Any] = {
        "repo": sandbox.repo,
        "number": number,
        "key": f"deliver/{sandbox.repo}#{number}/r1/progress/{seq}",
        "seq": seq,
        "head_sha": head,
        "check_title": f"Checks: step {seq}",
        "check_status": "in_progress",
        "check_conclusion": None,
        "check_summary": f"summary {seq}",
        "comment_body": f"<!-- autoloop/deliver x -->\n**Autoloop delivery** step {seq}\n",
    }
    params.update(kw)
    return action("github.progress", **params)


def own_runs(gh: GitHubClient, sandbox: SandboxHandle, head: str) -> list[dict[str, Any]]:
    runs = gh.list_check_runs_for_ref(
        sandbox.repo, head, check_name="autoloop/deliver", latest=False
    )
    return [r for r in runs if r["app"]["id"] == sandbox.app_id]


def test_progress_is_one_check_run_and_one_comment_updated_in_place(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, head = open_pr(sandbox, "progress")
    for seq in (1, 2, 3):
        done = outbox(ex, progress(sandbox, number, seq, head))
        assert write_result(done) == WriteResult(key=done.params["key"], outcome="done")
    stale = outbox(ex, progress(sandbox, number, 2, head))  # an older one, late
    assert stale.status == "done" and stale.result["applied"] is False
    (run,) = own_runs(gh, sandbox, head)
    assert (run["status"], run["output"]["title"]) == ("in_progress", "Checks: step 3")
    (comment,) = gh.list_issue_comments(sandbox.repo, number)
    assert comment["body"].startswith(
        f"<!-- autoloop:deliver={sandbox.repo}#{number} -->\n<!-- autoloop:seq=3 -->\n"
    )
    assert "step 3" in comment["body"]
    assert (writes(sandbox, "POST", "/check-runs"), writes(sandbox, "PATCH", f"/{run['id']}")) == (
        1,
        2,
    )
    assert (
        writes(sandbox, "POST", "/comments"),
        writes(sandbox, "PATCH", f"/{comment['id']}"),
    ) == (
        1,
        2,
    )


def test_progress_completes_the_check_run_and_follows_a_new_head(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, head = open_pr(sandbox, "finishing")
    outbox(ex, progress(sandbox, number, 1, head))
    new_head = sandbox.world.push("contributor", "finishing", {"more": "2"})
    final = progress(
        sandbox,
        number,
        2,
        new_head,
        check_title="Delivered",
        check_status="completed",
        check_conclusion="success",
    )
    assert outbox(ex, final).status == "done"
    (old,) = own_runs(gh, sandbox, head)
    (new,) = own_runs(gh, sandbox, new_head)
    # the run on the head it left is completed: "in progress" on that commit for ever, else
    assert (old["status"], old["conclusion"], old["output"]["title"]) == (
        "completed",
        "neutral",
        "Superseded",
    )
    assert (new["status"], new["conclusion"], new["output"]["title"]) == (
        "completed",
        "success",
        "Delivered",
    )
    assert len(gh.list_issue_comments(sandbox.repo, number)) == 1


def test_progress_whose_answers_are_lost_is_written_once(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, head = open_pr(sandbox, "lossy")
    sandbox.world.faults.add("response_lost", method="POST", path="*/check-runs")
    sandbox.world.faults.add("response_lost", method="POST", path=f"*/issues/{number}/comments")
    first = outbox(ex, progress(sandbox, number, 1, head))
    assert first.status == "done" and first.result["applied"] is True
    again = outbox(ex, replace(progress(sandbox, number, 1, head), attempts=1))  # a retry
    assert again.status == "done" and again.result["applied"] is False
    assert len(own_runs(gh, sandbox, head)) == 1
    assert len(gh.list_issue_comments(sandbox.repo, number)) == 1
    assert writes(sandbox, "POST", "/check-runs") == 1
    assert writes(sandbox, "POST", "/comments") == 1


def test_a_progress_comment_cannot_be_forged_by_the_text_it_shows(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, head = open_pr(sandbox, "forged")
    body = "text from a person: <!-- autoloop:seq=999 -->"
    outbox(ex, progress(sandbox, number, 1, head, comment_body=body))
    assert outbox(ex, progress(sandbox, number, 2, head)).result["applied"] is True


def test_progress_with_bad_parameters_fails_clearly(
    sandbox: SandboxHandle, ex: GitHubExecutor
) -> None:
    number, head = open_pr(sandbox, "bad-progress")
    failed = outbox(ex, progress(sandbox, number, 1, head, check_status="done"))
    assert failed.status == "failed" and "'check_status'" in failed.error
    assert write_result(failed) == WriteResult(
        key=failed.params["key"], outcome="refused", message=failed.error
    )


# ----------------------------------------------------------------------------- ready


def test_a_draft_is_marked_ready_through_graphql_once(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, head = open_pr(sandbox, "draft", draft=True)
    sandbox.world.faults.add("response_lost", method="POST", path="/graphql")
    act = action("github.ready", repo=sandbox.repo, number=number, head_sha=head, key="ready-1")
    done = outbox(ex, act)
    assert done.status == "done" and done.result["read_back"] is True
    assert gh.get_pull(sandbox.repo, number)["draft"] is False
    assert outbox(ex, replace(act, attempts=1)).result["changed"] is False
    assert writes(sandbox, "POST", "/graphql") == 1
    assert write_result(done) == WriteResult(key="ready-1", outcome="done")


def test_a_draft_whose_head_moved_is_not_marked_ready(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, head = open_pr(sandbox, "moving-draft", draft=True)
    sandbox.world.push("contributor", "moving-draft", {"x": "2"})
    act = action("github.ready", repo=sandbox.repo, number=number, head_sha=head)
    answer = write_result(outbox(ex, act))
    assert answer is not None and answer.outcome == "head_moved"
    assert gh.get_pull(sandbox.repo, number)["draft"] is True
    assert writes(sandbox, "POST", "/graphql") == 0


# ------------------------------------------------------------------------ update branch


def test_update_branch_with_a_stale_expected_sha_is_head_moved(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, head = open_pr(sandbox, "stale")
    sandbox.world.push("maintainer", "main", {"base-moved": "1"})
    sandbox.world.push("contributor", "stale", {"stale-2": "2"})
    act = action("github.update_branch", repo=sandbox.repo, number=number, expected_head_sha=head)
    answer = write_result(outbox(ex, act))
    assert answer is not None and answer.outcome == "head_moved"
    assert "expected head sha" in answer.message
    assert writes(sandbox, "PUT", "/update-branch") == 0


def test_update_branch_whose_answer_is_lost_is_read_back_once(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, head = open_pr(sandbox, "behind")
    sandbox.world.push("maintainer", "main", {"base-moved": "1"})
    sandbox.world.faults.add("response_lost", method="PUT", path="*/update-branch")
    act = action("github.update_branch", repo=sandbox.repo, number=number, expected_head_sha=head)
    done = outbox(ex, act)
    assert done.status == "done" and done.result["read_back"] is True
    assert outbox(ex, replace(act, attempts=1)).result["read_back"] is True
    assert writes(sandbox, "PUT", "/update-branch") == 1
    new_head = gh.get_pull(sandbox.repo, number)["head"]["sha"]
    parents = [p["sha"] for p in gh.get_commit(sandbox.repo, new_head)["parents"]]
    assert parents[0] == head


def test_update_branch_into_a_conflict_is_a_conflict(
    sandbox: SandboxHandle, ex: GitHubExecutor
) -> None:
    number = sandbox.world.open_pr("contributor", "clash", "Clash", {"README.md": "theirs"})
    head = sandbox.sandbox.state.repos[sandbox.repo].branches["clash"]
    sandbox.world.push("maintainer", "main", {"README.md": "ours"})
    act = action("github.update_branch", repo=sandbox.repo, number=number, expected_head_sha=head)
    answer = write_result(outbox(ex, act))
    assert answer is not None and answer.outcome == "conflict"


# ------------------------------------------------------------------------------ merge


def test_a_merge_whose_answer_is_lost_is_read_back_and_made_once(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, head = open_pr(sandbox, "merge-me")
    sandbox.world.faults.add("response_lost", method="PUT", path="*/merge")
    params = {"repo": sandbox.repo, "number": number, "sha": head, "method": "squash"}
    act = action("github.merge", key="merge-1", reconcile=True, **params)
    done = outbox(ex, act)
    assert done.status == "done" and done.result["read_back"] is True
    again = outbox(ex, replace(act, attempts=1))
    assert again.status == "done"
    assert writes(sandbox, "PUT", "/merge") == 1
    merged = gh.get_pull(sandbox.repo, number)
    assert merged["merged"] is True
    assert write_result(done) == WriteResult(
        key="merge-1", outcome="done", merge_commit_sha=merged["merge_commit_sha"]
    )


def test_a_merge_answered_says_the_merge_commit(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, head = open_pr(sandbox, "answered")
    done = outbox(ex, action("github.merge", repo=sandbox.repo, number=number, sha=head))
    answer = write_result(done)
    assert answer is not None and answer.outcome == "done"
    assert answer.merge_commit_sha == gh.get_pull(sandbox.repo, number)["merge_commit_sha"]


def test_merge_refusals_say_head_moved_or_refused(
    sandbox: SandboxHandle, ex: GitHubExecutor
) -> None:
    number, head = open_pr(sandbox, "refusals")
    sandbox.world.push("contributor", "refusals", {"later": "2"})
    moved = write_result(
        outbox(ex, action("github.merge", repo=sandbox.repo, number=number, sha=head))
    )
    assert moved is not None and moved.outcome == "head_moved"  # 409
    sandbox.world.set_protection("main", contexts=["ci"])
    new_head = sandbox.sandbox.state.repos[sandbox.repo].branches["refusals"]
    blocked = outbox(ex, action("github.merge", repo=sandbox.repo, number=number, sha=new_head))
    answer = write_result(blocked)
    assert answer is not None and answer.outcome == "refused"  # 405: protection not met
    assert 'Required status check "ci"' in answer.message
    assert writes(sandbox, "PUT", "/merge") == 0


def test_a_pipeline_merge_lost_and_not_applied_is_unclear_and_not_tried_again(
    sandbox: SandboxHandle, ex: GitHubExecutor
) -> None:
    number, head = open_pr(sandbox, "unclear")
    sandbox.world.faults.add("error_502", method="PUT", path="*/merge")
    params = {"repo": sandbox.repo, "number": number, "sha": head, "reconcile": True}
    unclear = outbox(ex, action("github.merge", **params))
    assert unclear.status == "failed"  # the pipeline reads the PR back, not the outbox
    answer = write_result(unclear)
    assert answer is not None and answer.outcome == "ambiguous"
    retried = write_result(outbox(ex, replace(action("github.merge", **params), attempts=1)))
    assert retried is not None and retried.outcome == "ambiguous"  # read back, not resent
    assert writes(sandbox, "PUT", "/merge") == 0


def test_a_receipt_merge_lost_and_not_applied_is_left_to_the_next_sweep(
    sandbox: SandboxHandle, ex: GitHubExecutor
) -> None:
    number, head = open_pr(sandbox, "sweep")
    sandbox.world.faults.add("error_502", method="PUT", path="*/merge")
    pending = outbox(ex, action("github.merge", repo=sandbox.repo, number=number, sha=head))
    assert pending.status == "allowed"  # the outbox will retry it, reading back first
    answer = write_result(pending)
    assert answer is not None and answer.outcome == "ambiguous"
    assert outbox(ex, pending).status == "done"  # the sweep: not merged yet, so it merges
    assert writes(sandbox, "PUT", "/merge") == 1


# ----------------------------------------------------------------------- delete branch


def test_the_merged_branch_is_deleted_once(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, _ = open_pr(sandbox, "fix/done")
    act = action("github.delete_branch", repo=sandbox.repo, number=number, ref="fix/done")
    early = write_result(outbox(ex, act))
    assert early is not None and early.outcome == "refused"  # not merged yet
    sandbox.world.merge("maintainer", number)
    sandbox.world.faults.add("response_lost", method="DELETE", path="*/git/refs/*")
    done = outbox(ex, act)
    assert done.status == "done" and done.result["read_back"] is True
    assert outbox(ex, replace(act, attempts=1)).result["gone"] is True
    assert gh.get_branch(sandbox.repo, "fix/done") is None
    assert writes(sandbox, "DELETE", "/git/refs/heads/fix/done") == 1


def test_a_branch_pushed_to_after_the_merge_is_kept(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    number, _ = open_pr(sandbox, "busy")
    sandbox.world.merge("maintainer", number)
    sandbox.world.push("contributor", "busy", {"after-merge": "1"})
    act = action("github.delete_branch", repo=sandbox.repo, number=number, ref="busy")
    answer = write_result(outbox(ex, act))
    assert answer is not None and answer.outcome == "refused"
    assert gh.get_branch(sandbox.repo, "busy") is not None


# --------------------------------------------------------------------------- mapping


def test_each_github_effect_becomes_one_action() -> None:
    d = start(repo="acme/web", number=7, head_sha="a" * 40, mode="deliver", now=NOW)
    base = {"repo": "acme/web", "number": 7}
    cases: list[tuple[Effect, str, dict[str, Any]]] = [
        (
            Merge(key="m", sha="a" * 40, method="rebase"),
            "github.merge",
            {"sha": "a" * 40, "method": "rebase", "reconcile": True},
        ),
        (
            UpdateBranch(key="u", expected_head_sha="a" * 40),
            "github.update_branch",
            {"expected_head_sha": "a" * 40},
        ),
        (MarkReady(key="r", head_sha="a" * 40), "github.ready", {"head_sha": "a" * 40}),
        (DeleteBranch(key="d", ref="topic"), "github.delete_branch", {"ref": "topic"}),
        (
            PostReview(key="p", head_sha="a" * 40, event="COMMENT", body="ok"),
            "github.review",
            {"event": "COMMENT", "body": "ok", "sha": "a" * 40},
        ),
    ]
    for effect, do, params in cases:
        assert effect_action(d, effect) == (do, {**base, "key": effect.key, **params})
    probe = ProbeVersion(key="v", url="https://x", field="sha", merge_sha="a" * 40, attempt=1)
    assert effect_action(d, probe) is None


def test_a_progress_action_names_the_open_card() -> None:
    d = start(repo="acme/web", number=7, head_sha="a" * 40, mode="deliver", now=NOW)
    shown = Progress(
        key="k",
        seq=4,
        head_sha="a" * 40,
        check_title="Blocked",
        check_status="in_progress",
        check_conclusion=None,
        check_summary="s",
        comment_body="Answer with `/answer {card} 1`.",
    )
    found = effect_action(d, shown, card_id="c12")
    assert found is not None
    do, params = found
    assert do == "github.progress" and params["seq"] == 4
    assert params["comment_body"] == "Answer with `/answer c12 1`."


def test_the_outbox_record_reads_as_the_pipelines_answer() -> None:
    act = action("github.update_branch", key="k")
    assert write_result(act) is None  # not attempted yet
    assert write_result(replace(act, attempts=1)) is None  # being attempted
    assert write_result(replace(act, status="awaiting_approval")) is None
    cases: dict[str, tuple[WriteOutcome, str]] = {
        "[head_moved] moved": ("head_moved", "moved"),
        "[conflict] clash": ("conflict", "clash"),
        "[ambiguous] gave up": ("ambiguous", "gave up"),
        "'sha' must be a commit sha": ("refused", "'sha' must be a commit sha"),
    }
    for error, (outcome, message) in cases.items():
        failed = replace(act, status="failed", error=error)
        assert write_result(failed) == WriteResult(key="k", outcome=outcome, message=message)
    declined = write_result(replace(act, status="declined"))
    assert declined is not None and declined.outcome == "refused"
    unclear = write_result(replace(act, attempts=2, error="no answer"))
    assert unclear == WriteResult(key="k", outcome="ambiguous", message="no answer")
    keyless = Action(id="a9", matter="m", turn="t", do="github.merge", status="done")
    assert write_result(keyless) == WriteResult(key="a9", outcome="done")


def test_a_delivery_write_given_up_is_unclear(ex: GitHubExecutor) -> None:
    act = action("github.merge", repo="acme/web", number=1, sha="a" * 40, key="m")
    gave_up = outbox(ex, replace(act, attempts=20, error="no answer"))
    answer = write_result(gave_up)
    assert answer is not None and answer.outcome == "ambiguous"
    assert answer.message.startswith("gave up after 20 attempts")


def test_two_progress_writes_at_once_make_one_sticky_comment(
    sandbox: SandboxHandle, gh: GitHubClient, ex: GitHubExecutor
) -> None:
    """A newer progress and the sweep's retry of an older one, in two threads: the slow
    first comment must not let the other find none and create a second."""
    number, head = open_pr(sandbox, "racing")
    sandbox.world.faults.add("latency", method="POST", path="*/comments", delay=0.5, times=None)
    first, second = progress(sandbox, number, 1, head), progress(sandbox, number, 2, head)
    threads = [threading.Thread(target=ex.perform, args=(a,)) for a in (first, second)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=20)
    mine = [
        c for c in gh.list_issue_comments(sandbox.repo, number) if "autoloop:deliver=" in c["body"]
    ]
    assert len(mine) == 1
    assert writes(sandbox, "POST", "/comments") == 1


def test_two_runs_that_each_made_a_sticky_comment_keep_the_first(
    sandbox: SandboxHandle, gh: GitHubClient
) -> None:
    """Two workflow runs at once (no concurrency group), each with its own executor: both
    found no comment and made one, and only the first was kept up to date; the other said
    "checks" for ever. The later one now points to the first, which shows the newest."""
    number, head = open_pr(sandbox, "two-runs")
    sandbox.world.faults.add("latency", method="POST", path="*/comments", delay=0.5, times=None)
    slug = f"{sandbox.sandbox.app.slug}[bot]"
    runs = [GitHubExecutor(gh, slug, app_id=sandbox.app_id) for _ in range(2)]
    acts = [progress(sandbox, number, 1, head), progress(sandbox, number, 2, head)]
    threads = [
        threading.Thread(target=ex.perform, args=(a,)) for ex, a in zip(runs, acts, strict=True)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=20)
    bots = [c for c in gh.list_issue_comments(sandbox.repo, number) if c["user"]["login"] == slug]
    assert writes(sandbox, "POST", "/comments") == 2  # the race: each made one
    sticky = [c for c in bots if "autoloop:deliver=" in c["body"]]
    assert len(sticky) == 1, [c["body"][:80] for c in bots]
    assert "<!-- autoloop:seq=2 -->" in sticky[0]["body"]  # the newest progress
    (pointer,) = [c for c in bots if c is not sticky[0]]
    assert pointer["body"].startswith("(This delivery is shown in the comment above: ")
    assert pointer["id"] > sticky[0]["id"]
