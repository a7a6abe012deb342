"""The delivery's acceptance cases in ``autoloop serve``, one test each, end to end.

Each test scripts the sandbox GitHub (people, CI, deploys, faults) around one labelled
PR and asserts from what GitHub holds afterwards (the audit log of writes, the PR, the
check runs, the sticky comment) and from the pipeline record in the ledger.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakegithub.server import SandboxHandle
from ghapp.github.deliveries import Deliveries
from tests.e2e.test_delivery_serve import (
    MERGE_TIMEOUT,
    assert_delivered,
    open_pr,
    own,
    record,
    serving,
    shown_delivered,
    stage_is,
    sticky,
)
from tests.e2e.test_delivery_serve import sandbox as running
from tests.e2e.test_github_app_sandbox import wait_for
from tests.servers import Live


def policy(
    gh: SandboxHandle,
    deliver: str = "",
    deploy: str | None = 'timeout = "10m"',
    matches: int = 1,
) -> str:
    """The policy file: ``deliver`` lines go to ``[deliver]``; ``deploy`` lines to
    ``[deliver.deploy]`` (None: no deploy table, the pipeline ends at the merge)."""
    text = f'[deliver]\nmerge_method = "squash"\nreview = "none"\n{deliver}\n'
    if deploy is not None:
        live = f"{gh.api_url}/_sandbox/live/{gh.repo}"
        text += (
            f'\n[deliver.deploy]\nenvironment = "production"\n'
            f'version_url = "{live}"\nmatches = {matches}\n{deploy}\n'
        )
    return text


def setup(
    gh: SandboxHandle,
    *,
    deliver: str = "",
    deploy: str | None = 'timeout = "10m"',
    ci: str | None = "success",
    contexts: list[str] | None = None,
    matches: int = 1,
    **protection: Any,
) -> None:
    """Policy on main, protection (``contexts``, default ``["ci"]``; ``[]``: none), CI."""
    world = gh.world
    text = policy(gh, deliver, deploy, matches)
    world.push("maintainer", "main", {".github/autoloop.toml": text})
    names = ["ci"] if contexts is None else contexts
    if names or protection:
        world.set_protection("main", contexts=names, **protection)
    if ci is not None:
        world.set_ci({"ci": ci})
    world.set_deploy(delay=0.1)
    assert world.settle()


def runner_of(live: Live) -> Deliveries:
    return next(x for x in live.running.extras if isinstance(x, Deliveries))


def at_rest(live: Live, gh: SandboxHandle) -> None:
    """GitHub has nothing left to send, and the runner nothing left to decide."""
    assert gh.world.settle()
    wait_for("the runner to rest", runner_of(live).idle)


def head_of(gh: SandboxHandle, number: int) -> str:
    return gh.sandbox.state.repos[gh.repo].pulls[number].head_sha


def merged_head(gh: SandboxHandle, number: int) -> str:
    """The head the PR had when it was merged (the head stays after a merge)."""
    pull = gh.sandbox.state.repos[gh.repo].pulls[number]
    assert pull.merged
    return pull.head_sha


def label(gh: SandboxHandle, number: int) -> None:
    gh.world.add_label("maintainer", number, "deliver")


def delivered(live: Live, gh: SandboxHandle, number: int) -> None:
    wait_for("delivered", lambda: stage_is(live, gh, number, "delivered"), MERGE_TIMEOUT)


def stages(live: Live, gh: SandboxHandle, number: int) -> list[str]:
    return [h["stage"] for h in record(live, gh, number).data["history"]]


# Each case's budget tells seconds from the minutes of the waits it must not sit out (a
# merge's answer grace is 10 minutes, a deploy timeout 10): twice what a quiet machine
# needs, so that a busy CI machine does not fail a case that did not wait for them.
SLACK = 2.0


def timed(budget: float) -> Callable[[], None]:
    started = time.monotonic()

    def check() -> None:
        took = time.monotonic() - started
        assert took < budget * SLACK, f"took {took:.1f} s, budget {budget} s x {SLACK}"

    return check


# -------------------------------------------------------------------------------- cases


def test_a_push_while_the_merge_is_asked_for_merges_the_new_head_once(tmp_path: Path) -> None:
    """The merge PUT takes a while; the contributor force-pushes meanwhile: GitHub says
    409 (head moved), and the delivery goes back to the checks of the new head."""
    done = timed(20)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh)
        slow = gh.world.faults.add("latency", method="PUT", path="*/merge", delay=1.0)
        number, first = open_pr(gh)
        label(gh, number)
        wait_for("the merge to be asked for", lambda: slow.hits == 1, MERGE_TIMEOUT)
        second = gh.world.force_push("contributor", "feature", {"feature.py": "x = 2\n"})
        delivered(live, gh, number)
        wait_for("the last progress", lambda: shown_delivered(gh, number, second))
        assert_delivered(live, gh, number, second)
        assert merged_head(gh, number) == second != first
        with live.hub.store.read() as tx:
            actions = tx.query("action", matter=f"deliver/{gh.repo}#{number}")
        merges = sorted((a.params["sha"], a.status) for a in actions if a.do == "github.merge")
        assert merges == sorted([(first, "failed"), (second, "done")])
        history = stages(live, gh, number)
        assert history.count("merge") == 2 and "checks" in history[history.index("merge") :]
    done()


def test_a_base_that_moved_is_brought_up_to_date_then_merged(tmp_path: Path) -> None:
    done = timed(20)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh, deliver="update_branch = true", strict=True)
        number, first = open_pr(gh)
        gh.world.push("maintainer", "main", {"other.py": "y = 1\n"})  # the base moves on
        assert gh.world.settle()
        label(gh, number)
        delivered(live, gh, number)
        head = merged_head(gh, number)
        assert head != first  # the bot's update of the branch is what was merged
        wait_for("the last progress", lambda: shown_delivered(gh, number, head))
        assert own(gh, "PUT", "/update-branch") == 1
        assert own(gh, "PUT", "/merge") == 1
        runs = gh.sandbox.state.repos[gh.repo].check_runs.values()
        ci = {r.head_sha for r in runs if r.name == "ci" and r.conclusion == "success"}
        assert {first, head} <= ci  # the checks ran again on the updated head
        history = stages(live, gh, number)
        assert history.index("update_branch") < len(history) - 1 - history[::-1].index("checks")
    done()


def test_a_required_check_that_never_reports_raises_a_card_naming_it(tmp_path: Path) -> None:
    done = timed(20)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh, deliver='checks_timeout = "3s"', ci=None, contexts=["ci", "lint"])
        gh.world.set_ci({"lint": "success"})  # "ci" never reports
        number, _ = open_pr(gh)
        label(gh, number)
        wait_for("blocked", lambda: stage_is(live, gh, number, "blocked"), MERGE_TIMEOUT)
        rec = record(live, gh, number)
        assert rec.data["card"]["kind"] == "checks_timeout"
        ((_, card_id),) = rec.cards.items()
        with live.hub.store.read() as tx:
            card = tx.get("card", card_id)
        assert "never reported: ci" in card.text
        wait_for("the card in the sticky comment", lambda: card_id in " ".join(sticky(gh, number)))
        assert own(gh, "PUT", "/merge") == 0
    done()


def test_a_check_rerun_from_failure_to_success_counts_as_success(tmp_path: Path) -> None:
    done = timed(20)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh, ci="failure")
        number, head = open_pr(gh)
        label(gh, number)
        wait_for("checks", lambda: stage_is(live, gh, number, "checks"), MERGE_TIMEOUT)
        at_rest(live, gh)
        assert own(gh, "PUT", "/merge") == 0
        gh.world.set_ci({"ci": "success"})
        gh.world.run_ci(head)  # the re-run: a new run of the same check on the same head
        delivered(live, gh, number)
        wait_for("the last progress", lambda: shown_delivered(gh, number, head))
        assert_delivered(live, gh, number, head)
    done()


def test_a_check_from_the_wrong_app_does_not_count(tmp_path: Path) -> None:
    done = timed(20)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        ci_app = gh.sandbox.ci_app.id
        setup(gh, ci=None, contexts=[], checks=[{"context": "ci", "app_id": ci_app}])
        number, head = open_pr(gh)
        label(gh, number)
        wait_for("checks", lambda: stage_is(live, gh, number, "checks"), MERGE_TIMEOUT)
        # A workflow (another app) reports a check of the same name, successfully.
        token = gh.world.actions_token()
        answer = httpx.post(
            f"{gh.api_url}/repos/{gh.repo}/check-runs",
            headers={"Authorization": f"token {token}"},
            json={"name": "ci", "head_sha": head, "status": "completed", "conclusion": "success"},
        )
        assert answer.status_code == 201, answer.text
        at_rest(live, gh)
        assert stage_is(live, gh, number, "checks")
        assert own(gh, "PUT", "/merge") == 0
        gh.world.set_ci({"ci": "success"})
        gh.world.run_ci(head)  # now the CI app the protection names
        delivered(live, gh, number)
        wait_for("the last progress", lambda: shown_delivered(gh, number, head))
        assert_delivered(live, gh, number, head)
    done()


def test_a_check_required_by_a_ruleset_only_is_waited_for(tmp_path: Path) -> None:
    done = timed(20)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh, ci=None, contexts=[])
        gh.world.add_ruleset("ci required", ["main"], ["ci"])
        number, head = open_pr(gh)
        label(gh, number)
        wait_for("checks", lambda: stage_is(live, gh, number, "checks"), MERGE_TIMEOUT)
        at_rest(live, gh)
        assert stage_is(live, gh, number, "checks")
        assert own(gh, "PUT", "/merge") == 0
        gh.world.set_ci({"ci": "success"})
        gh.world.run_ci(head)
        delivered(live, gh, number)
        wait_for("the last progress", lambda: shown_delivered(gh, number, head))
        assert_delivered(live, gh, number, head)
    done()


def test_a_pr_closed_mid_flight_is_cancelled_without_a_merge(tmp_path: Path) -> None:
    done = timed(20)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh, ci=None)
        number, _ = open_pr(gh)
        label(gh, number)
        wait_for("checks", lambda: stage_is(live, gh, number, "checks"), MERGE_TIMEOUT)
        gh.world.close_issue("maintainer", number)
        wait_for("cancelled", lambda: stage_is(live, gh, number, "cancelled"), MERGE_TIMEOUT)
        assert record(live, gh, number).ended
        gh.world.set_ci({"ci": "success"})
        gh.world.run_ci(head_of(gh, number))
        at_rest(live, gh)
        assert own(gh, "PUT", "/merge") == 0
        assert not gh.sandbox.state.repos[gh.repo].pulls[number].merged
    done()


def test_a_pr_merged_by_a_person_goes_on_to_the_deployment(tmp_path: Path) -> None:
    done = timed(20)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        # "lint" is required by the policy alone and never reports: GitHub lets a person
        # merge while the delivery still waits for it.
        setup(gh, deliver='required_checks = ["lint"]', contexts=[])
        number, _ = open_pr(gh)
        label(gh, number)
        wait_for("checks", lambda: stage_is(live, gh, number, "checks"), MERGE_TIMEOUT)
        gh.world.merge("maintainer", number)
        delivered(live, gh, number)
        history = stages(live, gh, number)
        assert history[-3:] == ["deployment", "live_version", "delivered"]
        assert "merge" not in history
        assert own(gh, "PUT", "/merge") == 0
        pull = gh.sandbox.state.repos[gh.repo].pulls[number]
        assert pull.merged and pull.merged_by == "maintainer"
        assert record(live, gh, number).data["merge_sha"] == pull.merge_commit_sha
        wait_for("the sticky comment", lambda: "Delivered" in " ".join(sticky(gh, number)))
    done()


def test_a_conflict_blocks_until_a_push_resolves_it(tmp_path: Path) -> None:
    done = timed(20)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh)
        number, _ = open_pr(gh)
        gh.world.push("maintainer", "main", {"feature.py": "x = 0\n"})  # the same file
        assert gh.world.settle()
        label(gh, number)
        wait_for("blocked", lambda: stage_is(live, gh, number, "blocked"), MERGE_TIMEOUT)
        assert record(live, gh, number).data["card"]["kind"] == "conflict"
        wait_for("the sticky comment", lambda: "conflict" in " ".join(sticky(gh, number)).lower())
        at_rest(live, gh)
        assert len(sticky(gh, number)) == 1
        assert own(gh, "PUT", "/merge") == 0
        # The contributor takes main's version of the file: no conflict any more.
        head = gh.world.push(
            "contributor", "feature", {"feature.py": "x = 0\n", "more.py": "z = 1\n"}
        )
        delivered(live, gh, number)
        head = merged_head(gh, number)  # the push, or the bot's update of it with main
        wait_for("the last progress", lambda: shown_delivered(gh, number, head))
        assert_delivered(live, gh, number, head)
    done()


def test_a_mergeability_github_still_computes_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitHub says ``mergeable: null`` for 3 s after the push: the delivery re-reads it
    on its timer (5 s), and a webhook arriving meanwhile does not use up a re-read."""
    done = timed(20)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh)
        gh.world.set_mergeability_lag(3.0)
        runner = runner_of(live)
        real = runner._decide_once
        polls: list[int] = []

        def watching(pid: str) -> Any:
            out = real(pid)
            if out is not None and out[0].delivery.stage == "merge":
                polls.append(out[0].delivery.polls)
            return out

        monkeypatch.setattr(runner, "_decide_once", watching)
        number, head = open_pr(gh)
        asked = time.monotonic()
        label(gh, number)
        delivered(live, gh, number)
        assert 3.0 <= time.monotonic() - asked < 9.0  # one re-read, after the lag
        assert max(polls) == 1
        wait_for("the last progress", lambda: shown_delivered(gh, number, head))
        assert_delivered(live, gh, number, head)
    done()


def test_a_merge_answered_502_after_it_happened_merges_once(tmp_path: Path) -> None:
    done = timed(20)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh)
        fault = gh.world.faults.add("response_lost_502", method="PUT", path="*/merge")
        number, head = open_pr(gh)
        label(gh, number)
        delivered(live, gh, number)
        wait_for("the last progress", lambda: shown_delivered(gh, number, head))
        assert_delivered(live, gh, number, head)
        assert fault.hits == 1
        merges = [e for e in gh.world.audit.entries(method="PUT") if e.path.endswith("/merge")]
        assert len(merges) == 1
    done()


def test_a_live_version_that_never_matches_raises_a_card(tmp_path: Path) -> None:
    done = timed(20)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh, deploy='timeout = "3s"\nversion_field = "version"')
        old = gh.sandbox.state.repos[gh.repo].branches["main"]
        gh.world.set_deploy(delay=0.1, version=old)  # the service keeps reporting the old one
        number, _ = open_pr(gh)
        label(gh, number)
        wait_for("blocked", lambda: stage_is(live, gh, number, "blocked"), MERGE_TIMEOUT)
        rec = record(live, gh, number)
        assert rec.data["card"]["kind"] == "version_timeout"
        assert [h["stage"] for h in rec.data["history"]][-2:] == ["live_version", "blocked"]
        ((_, card_id),) = rec.cards.items()
        wait_for("the card in the sticky comment", lambda: card_id in " ".join(sticky(gh, number)))
        at_rest(live, gh)
        assert own(gh, "PUT", "/merge") == 1  # nothing is merged again
    done()


def test_a_live_version_that_flaps_raises_a_card_and_never_merges_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Half the service still runs the old version: the version URL answers the merge
    commit and an older one in turn, so two matching answers in a row never come before
    the deploy timeout (6 s; the URL is read every second): a card, and one merge."""
    done = timed(20)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh, deploy='timeout = "6s"', matches=2)
        old = gh.sandbox.state.repos[gh.repo].branches["main"]
        deployed = gh.world.live
        answers = itertools.count()

        def flapping(repo: str | None = None) -> dict[str, str]:
            now = deployed(repo)  # the merge commit, once its deployment succeeded
            return now if next(answers) % 2 == 0 else {"sha": old, "version": "v-old"}

        monkeypatch.setattr(gh.world, "live", flapping)
        number, _ = open_pr(gh)
        label(gh, number)
        wait_for("blocked", lambda: stage_is(live, gh, number, "blocked"), MERGE_TIMEOUT)
        rec = record(live, gh, number)
        assert rec.data["card"]["kind"] == "version_timeout"
        assert [h["stage"] for h in rec.data["history"]][-2:] == ["live_version", "blocked"]
        seen = [v["matches"] for v in rec.data["versions"]]
        assert len(seen) >= 4  # read about once a second, not once in the whole timeout
        assert all(a != b for a, b in itertools.pairwise(seen))  # never twice in a row
        ((_, card_id),) = rec.cards.items()
        with live.hub.store.read() as tx:
            card = tx.get("card", card_id)
        assert "flapped" in card.text and "2 times in a row within 6s" in card.text
        wait_for("the card in the sticky comment", lambda: card_id in " ".join(sticky(gh, number)))
        at_rest(live, gh)
        merges = [e for e in gh.world.audit.entries(method="PUT") if e.path.endswith("/merge")]
        assert len(merges) == 1  # nothing is merged again
    done()


def test_a_burst_of_prs_under_secondary_rate_limits_merges_each_once(tmp_path: Path) -> None:
    done = timed(60)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh, deploy=None)
        numbers = [
            gh.world.open_pr("contributor", f"burst-{i}", f"Part {i}", {f"part_{i}.py": f"{i}\n"})
            for i in range(20)
        ]
        assert gh.world.settle()
        gh.world.faults.seed(7)
        limit = gh.world.faults.add("rate_limit", times=None, probability=0.1, retry_after=1)
        for number in numbers:
            label(gh, number)
        for number in numbers:
            wait_for(
                f"#{number} delivered",
                lambda n=number: stage_is(live, gh, n, "delivered"),  # type: ignore[misc]
                45,
            )
        assert limit.hits > 0
        pulls = gh.sandbox.state.repos[gh.repo].pulls
        assert all(pulls[n].merged for n in numbers)
        merges = [e.path for e in gh.world.audit.entries(method="PUT") if e.path.endswith("/merge")]
        assert sorted(merges) == sorted(f"/repos/{gh.repo}/pulls/{n}/merge" for n in numbers)
    done()


def test_the_bots_own_events_do_not_wake_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = timed(20)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh)
        number, head = open_pr(gh)
        label(gh, number)
        delivered(live, gh, number)
        wait_for("the last progress", lambda: shown_delivered(gh, number, head))
        at_rest(live, gh)
        runner = runner_of(live)
        decided: list[str] = []
        real = runner._decide_once

        def counting(pid: str) -> Any:
            decided.append(pid)
            return real(pid)

        monkeypatch.setattr(runner, "_decide_once", counting)
        sent = len(gh.world.deliveries)
        time.sleep(2.0)
        assert decided == []
        assert runner.idle()
        assert len(gh.world.deliveries) == sent  # and nothing more was written
        assert own(gh, "PUT", "/merge") == 1
    done()


def test_the_next_in_line_goes_on_when_its_wake_up_was_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With several replicas, the next in line can queue on one replica just after
    another woke the line it read (without it): it waited for the sweep, 4 to 5 minutes
    (seen with two replicas on PostgreSQL). Here that wake-up is lost outright, and so
    are the webhooks of the merge that would wake the line too: the runner finds from
    the ledger alone that it is first now."""
    import ghapp.github.deliveries as runner_module

    monkeypatch.setattr(Deliveries, "_wake_next", lambda self, others, d: None)
    monkeypatch.setattr(runner_module, "LINE_RECHECK_S", 1.0)
    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh, deploy=None)
        runner_of(live).backstop_s = 1.0
        gh.world.set_mergeability_lag(3.0)  # #1 waits in merge (first in line) a while
        first = gh.world.open_pr("contributor", "one", "One", {"one.py": "1\n"})
        second = gh.world.open_pr("contributor", "two", "Two", {"two.py": "2\n"})
        assert gh.world.settle()
        label(gh, first)
        wait_for("#1 in merge", lambda: stage_is(live, gh, first, "merge"), MERGE_TIMEOUT)
        label(gh, second)
        wait_for("#2 waiting its turn", lambda: waiting_on(live, gh, second) == "line")
        for kind in ("push", "check_run", "check_suite", "status"):  # what the merge sends
            gh.world.faults.add("webhook_drop", path=kind, times=None)
        wait_for("#1 delivered", lambda: stage_is(live, gh, first, "delivered"), MERGE_TIMEOUT)
        assert gh.world.settle()
        gh.world.faults.clear()  # #2's own checks, after its branch is brought up to date
        wait_for("#2 delivered", lambda: stage_is(live, gh, second, "delivered"), 30)
        pulls = gh.sandbox.state.repos[gh.repo].pulls
        assert pulls[first].merged and pulls[second].merged


def test_a_label_added_again_starts_its_run_though_the_record_moved_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ended delivery's record moves when a note lands on it (a review agent's spend
    after the end) or another replica moves it: the new run's start, decided on the
    version read before, was refused as stale and left for the sweep, minutes later."""
    from kernel import inputs as k

    with running() as gh, serving(gh, tmp_path / "home") as live:
        setup(gh, deploy=None, ci=None)
        number, _ = open_pr(gh)
        label(gh, number)
        wait_for("checks", lambda: stage_is(live, gh, number, "checks"), MERGE_TIMEOUT)
        gh.world.remove_label("maintainer", number, "deliver")
        wait_for("cancelled", lambda: stage_is(live, gh, number, "cancelled"), MERGE_TIMEOUT)
        real = live.hub.ledger.decide
        noted: list[str] = []

        def deciding(inp: Any, **kw: Any) -> Any:
            if isinstance(inp, k.Advance) and inp.restart and not noted:
                rec = record(live, gh, number)  # a note lands first: the start is stale
                note = k.Advance(
                    pipeline=inp.pipeline,
                    subject=rec.subject,
                    version=rec.version,
                    stage=rec.stage,
                    data={**rec.data, "noted": True},
                    ended=True,
                )
                noted.append(real(note).reply.code)
            return real(inp, **kw)

        monkeypatch.setattr(live.hub.ledger, "decide", deciding)
        label(gh, number)
        wait_for("run 2", lambda: record(live, gh, number).data.get("run") == 2, 30)
        assert noted == ["advanced"]
        assert not record(live, gh, number).ended


def waiting_on(live: Live, gh: SandboxHandle, number: int) -> str:
    rec = record(live, gh, number)
    return str(rec.data.get("waiting_on") or "") if rec is not None else ""
