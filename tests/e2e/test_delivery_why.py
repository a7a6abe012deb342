"""``autoloop why owner/repo#N``: the story of a delivery, told from the ledger.

Each test carries one labelled PR through ``autoloop serve`` against the sandbox GitHub
(real HTTP both ways), then runs ``autoloop why`` as a separate process on the same
home, as a person would, and reads the stages it lists, in order, with what each
waited for, the writes made to GitHub, restarts and cards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from fakegithub.server import SandboxHandle
from tests.e2e.test_delivery_cases import at_rest, delivered, label, setup
from tests.e2e.test_delivery_serve import (
    MERGE_TIMEOUT,
    open_pr,
    record,
    serving,
    shown_delivered,
    stage_is,
)
from tests.e2e.test_delivery_serve import sandbox as running
from tests.e2e.test_github_app_sandbox import wait_for

ROOT = Path(__file__).resolve().parents[2]


def why(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return autoloop(home, "why", *args)


def autoloop(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env["AUTOLOOP_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def story(home: Path, ref: str) -> dict[str, Any]:
    done = why(home, ref, "--json")
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def told(home: Path, ref: str) -> str:
    done = why(home, ref)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def stages_of(run: dict[str, Any]) -> list[str]:
    return [s["stage"] for s in run["stages"]]


def writes(run: dict[str, Any], do: str) -> list[dict[str, Any]]:
    return [w for s in run["stages"] for w in s["writes"] if w["do"] == do]


def ref_of(gh: SandboxHandle, number: int) -> str:
    return f"{gh.repo}#{number}"


def test_why_tells_a_delivered_pr_stage_by_stage(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with running() as gh, serving(gh, home) as live:
        setup(gh, ci=None)  # "ci" reports only once the delivery waits for it
        # and the deploy starts only once it waits for that (else on a slow machine the
        # deploy may succeed before the merge's result is read: nothing is waited for).
        gh.world.set_deploy(delay=0.1, on_push=False)
        number, head = open_pr(gh)
        label(gh, number)
        wait_for("checks", lambda: stage_is(live, gh, number, "checks"), MERGE_TIMEOUT)
        gh.world.set_ci({"ci": "success"})
        gh.world.run_ci(head)
        wait_for("deployment", lambda: stage_is(live, gh, number, "deployment"), MERGE_TIMEOUT)
        sha = gh.sandbox.state.repos[gh.repo].pulls[number].merge_commit_sha
        assert sha is not None
        gh.world.run_deploy(sha)
        delivered(live, gh, number)
        wait_for("the last progress", lambda: shown_delivered(gh, number, head))
        at_rest(live, gh)
        merge_sha = gh.sandbox.state.repos[gh.repo].pulls[number].merge_commit_sha
        assert merge_sha is not None
        ref = ref_of(gh, number)
        found = story(home, ref)
        text = told(home, ref)
        # The same story by its pipeline id and by the PR's URL (a person pastes either).
        assert story(home, f"deliver/{ref}") == found
        url = f"https://github.com/{gh.repo}/pull/{number}"
        assert story(home, url)["pipeline"] == f"deliver/{ref}"
        assert story(home, ref.upper())["pipeline"] == f"deliver/{ref}"  # GitHub ignores case
        status = autoloop(home, "status", "--json")
        (listed,) = json.loads(status.stdout)["pipelines"]
        assert (listed["id"], listed["stage"], listed["state"]) == (
            f"deliver/{ref}",
            "delivered",
            "ended",
        )
    assert (found["pipeline"], found["subject"], found["stage"]) == (
        f"deliver/{ref}",
        ref,
        "delivered",
    )
    assert found["ended"] is True
    (run,) = found["runs"]
    assert stages_of(run) == [
        "review", "ready", "checks", "merge", "deployment", "live_version", "delivered",
    ]  # fmt: skip
    assert run["heads"] == [head] and run["merge_sha"] == merge_sha
    at = {s["stage"]: s for s in run["stages"]}
    assert [w["for"] for w in at["checks"]["waited"]] == ["required checks ci"]
    assert at["checks"]["deadline"] > at["checks"]["at"] and at["checks"]["woken"]
    assert at["merge"]["note"] == "required checks passed: ci"
    (merge,) = writes(run, "github.merge")
    assert merge["stage"] == "merge" and merge["params"]["sha"] == head
    assert merge["status"] == "done" and merge["result"]["sha"] == merge_sha
    deploy = at["deployment"]["waited"][0]["for"]
    assert deploy == f"a successful deployment of {merge_sha[:7]} to production"
    assert "succeeded" in at["live_version"]["note"]
    probes = at["live_version"]["probes"]
    assert probes and probes[-1]["sha"] == merge_sha and probes[-1]["matches"]
    # One check run and one sticky comment, each updated in place at every stage.
    shown = writes(run, "github.progress")
    assert [w["params"]["seq"] for w in shown] == list(range(1, len(shown) + 1))
    assert {w["stage"] for w in shown} >= {"checks", "merge", "deployment", "delivered"}
    assert len({w["result"]["check_run"] for w in shown}) == 1
    assert len({w["result"]["comment"] for w in shown}) == 1
    assert shown[-1]["params"]["check_conclusion"] == "success"
    assert found["writes"] == {"github.merge": 1, "github.progress": len(shown)}
    lines = text.splitlines()
    assert lines[0] == f"delivery {ref} (pipeline deliver/{ref}): delivered, ended"
    rows = [line.split()[1] for line in lines if line.startswith("  ") and line[2].isdigit()]
    assert rows == ["review", "ready", "checks", "merge", "deployment", "live", "delivered"]
    assert "waited for required checks ci (webhook" in text
    assert f"write merge {head[:7]} (squash" in text
    assert f"merged, merge commit {merge_sha[:7]}" in text
    assert "probe 1 at " in text


def test_why_tells_a_restart_on_a_new_push(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with running() as gh, serving(gh, home) as live:
        setup(gh, ci=None)
        number, first = open_pr(gh)
        label(gh, number)
        wait_for("checks", lambda: stage_is(live, gh, number, "checks"), MERGE_TIMEOUT)
        second = gh.world.push("contributor", "feature", {"more.py": "y = 2\n"})
        wait_for(
            "the checks of the new head",
            lambda: (
                record(live, gh, number).data["head_sha"] == second
                and stage_is(live, gh, number, "checks")
            ),
            MERGE_TIMEOUT,
        )
        gh.world.set_ci({"ci": "success"})
        gh.world.run_ci(second)
        delivered(live, gh, number)
        at_rest(live, gh)
        ref = ref_of(gh, number)
        found = story(home, ref)
        text = told(home, ref)
    (run,) = found["runs"]
    assert stages_of(run) == [
        "review", "ready", "checks",
        "review", "ready", "checks", "merge", "deployment", "live_version", "delivered",
    ]  # fmt: skip
    again = run["stages"][3]
    assert again["how"] == "new_head" and again["head_sha"] == second
    assert again["note"] == f"new head {second[:7]}"
    assert run["heads"] == [first, second]
    assert [s["head_sha"] for s in run["stages"][:3]] == [first] * 3
    (merge,) = writes(run, "github.merge")
    assert merge["params"]["sha"] == second and merge["status"] == "done"
    heads = {w["params"]["head_sha"] for w in writes(run, "github.progress")}
    assert heads == {first, second}  # the check run followed the head
    assert f"restarted: a new push: new head {second[:7]}" in text
    assert f"from the review again, on the new head {second[:7]}" in text
    assert f"heads {first[:7]}, {second[:7]}" in text


def test_why_tells_a_card_raised_at_a_deadline_and_its_answer(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with running() as gh, serving(gh, home) as live:
        setup(gh, deliver='checks_timeout = "3s"', ci=None)  # "ci" never reports
        number, _ = open_pr(gh)
        label(gh, number)
        wait_for("blocked", lambda: stage_is(live, gh, number, "blocked"), MERGE_TIMEOUT)
        ((_, card_id),) = record(live, gh, number).cards.items()
        ref = ref_of(gh, number)
        waiting = told(home, ref)
        assert f"card {card_id} (checks_timeout) raised at checks" in waiting
        assert "waiting for an answer" in waiting
        assert "blocked, active" in waiting.splitlines()[0]
        status = autoloop(home, "status").stdout
        assert f"  delivery {ref} (deliver/{ref}): blocked, waiting for an answer to: " in status
        gh.world.comment("maintainer", number, f"/answer {card_id} 2")  # stop this delivery
        wait_for("cancelled", lambda: stage_is(live, gh, number, "cancelled"), MERGE_TIMEOUT)
        at_rest(live, gh)
        found = story(home, ref)
        text = told(home, ref)
    (run,) = found["runs"]
    assert stages_of(run) == ["review", "ready", "checks", "blocked", "cancelled"]
    checks, blocked, cancelled = run["stages"][2:]
    assert [w["for"] for w in checks["waited"]] == ["required checks ci"]
    since, deadline = datetime.fromisoformat(checks["at"]), checks["deadline"]
    assert datetime.fromisoformat(deadline) - since == timedelta(seconds=3)
    assert blocked["at"] >= deadline  # the card came at the deadline, not before
    assert blocked["how"] == "timeout"
    (card,) = blocked["cards"]
    assert (card["id"], card["kind"], card["blocked_at"]) == (card_id, "checks_timeout", "checks")
    assert "never reported: ci" in card["text"]
    assert card["options"] == ["wait for the checks again", "stop this delivery"]
    assert (card["choice"], card["answer"], card["answered_by"]) == (
        2, "stop this delivery", "maintainer",
    )  # fmt: skip
    assert card["answered_at"] <= cancelled["at"]
    assert cancelled["how"] == "stop"
    assert cancelled["note"] == "maintainer chose: stop this delivery"
    assert found["writes"].get("github.merge", 0) == 0
    assert "answered 2 (stop this delivery) by maintainer" in text
    assert "cancelled, ended" in text.splitlines()[0]


def test_why_names_what_it_cannot_find_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with running() as gh, serving(gh, home):
        pass
    unknown = why(home, f"{gh.repo}#999")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.splitlines() == [
        f"autoloop: no delivery '{gh.repo}#999' in this ledger; 'autoloop status' lists them"
    ]
    odd = why(home, "no-such-thing", "--json")
    assert odd.returncode == 1 and len(odd.stderr.splitlines()) == 1
    assert "owner/repo#N" in odd.stderr
    # with --json the refusal is JSON on stdout too, for a script that reads it
    line = odd.stderr.strip().removeprefix("autoloop: ")
    assert json.loads(odd.stdout) == {"error": line, "exit": 1}
