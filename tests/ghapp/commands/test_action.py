"""``autoloop action`` run as a runner runs it: a subprocess with the environment a
workflow step gets (event name and payload file, run id and attempt, output and summary
files, ``GITHUB_TOKEN``, ``GITHUB_API_URL``), against the fake GitHub on loopback
(:mod:`tests.action_runner`). The token is one the fake issues as GitHub Actions would
(``actions_token``): it writes as ``github-actions[bot]``. The agent is the built-in demo
agent (a real subprocess).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.action_runner import (
    AUTOLOOP,
    BOT,
    RULES,
    WEBHOOKS,
    Ran,
    Runner,
    annotations,
    open_and_triage,
    sandbox_runner,
    spent_nothing,
)
from tests.paths import ROOT


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    with sandbox_runner(tmp_path) as made:
        yield made


# --------------------------------------------------------------------------- the loop


def test_an_issue_is_asked_about_then_resumed_by_a_maintainers_answer(runner: Runner) -> None:
    r = runner
    number, first = open_and_triage(r)
    assert first.code == 0, first.stdout + first.stderr
    assert first.outputs == spent_nothing(1, 1)
    (card,) = r.card_comments(number)
    assert card["user"]["login"] == BOT
    assert "How should this issue be triaged?" in card["body"]
    assert "`/answer c1 N`" in card["body"]
    assert (
        "| c1 | How should this issue be triaged? | waiting for `/answer c1 N` |" in first.summary
    )
    assert f"/sandbox/demo/issues/{number}#issuecomment-{card['id']})" in first.summary
    assert "[attempt 1](" in first.summary and "/actions/runs/1001)" in first.summary
    assert not annotations(first.stdout, "error") and "Traceback" not in first.stderr

    # The job has ended; the wait is a row in the ledger. A maintainer answers on GitHub,
    # and that comment is the next run's event.
    comment = r.gh.world.comment("maintainer", number, "Sounds right.\n/answer c1 1\nthanks")
    second = r.run("issue_comment", r.comment_created(number, comment), run_id=1002)
    assert second.code == 0, second.stdout + second.stderr
    assert second.outputs == spent_nothing(1, 0)
    assert "bug" in r.labels(number)
    said = [c for c in r.comments(number) if "Triaged as bug" in c["body"]]
    assert len(said) == 1 and said[0]["user"]["login"] == BOT
    (card,) = r.card_comments(number)
    assert "Answered: **bug** by @maintainer" in card["body"]
    assert "This card is done" in card["body"]
    assert "| `/answer c1 1` | maintainer | taken |" in second.summary
    assert "| c1 | How should this issue be triaged? | done: bug by maintainer |" in second.summary
    assert "| t2 | triage |" in second.summary

    # Each write once: one card comment (then edited), one reply, one label.
    path = f"/repos/{r.gh.repo}/issues/{number}"
    writes = [(e.method, e.path) for e in r.writes()]
    assert writes.count(("POST", path + "/comments")) == 2
    assert writes.count(("POST", path + "/labels")) == 1


def test_a_re_run_of_the_same_run_is_the_same_event(runner: Runner) -> None:
    r = runner
    number, first = open_and_triage(r, run_id=2001)
    assert first.outputs["cards"] == "1"
    before = len(r.writes())
    again = r.run("issues", r.issue_opened(number), run_id=2001, attempt=2)
    assert again.code == 0, again.stdout + again.stderr
    assert again.outputs == spent_nothing(0, 0)
    assert "already recorded (an earlier attempt, or another workflow's run) as action-2001" in (
        again.stdout
    )
    assert "by an earlier attempt (the same event)" in again.summary
    assert "[attempt 2](" in again.summary
    assert len(r.card_comments(number)) == 1
    assert len(r.writes()) == before

    # The answer's run, re-run too: the answer is taken once, the agent resumes once.
    comment = r.gh.world.comment("maintainer", number, "/answer c1 2")
    payload = r.comment_created(number, comment)
    assert r.run("issue_comment", payload, run_id=2002).outputs["turns"] == "1"
    writes = len(r.writes())
    rerun = r.run("issue_comment", payload, run_id=2002, attempt=2)
    assert rerun.code == 0, rerun.stdout + rerun.stderr
    assert rerun.outputs["turns"] == "0"
    assert "| `/answer c1 2` | maintainer | taken before |" in rerun.summary
    assert len(r.writes()) == writes
    assert "feature" in r.labels(number)


def test_a_run_on_a_home_made_afresh_leaves_an_earlier_runs_card_alone(
    runner: Runner, tmp_path: Path
) -> None:
    """A hosted runner without a database starts every job with a new ledger, whose card
    ids start at c1 again: the new run found the earlier run's c1 on the same issue by its
    marker and wrote over it, answer and all."""
    r = runner
    number, made = open_and_triage(r, run_id=2201)
    assert made.code == 0, made.stdout + made.stderr
    comment = r.gh.world.comment("maintainer", number, "/answer c1 1")
    assert r.run("issue_comment", r.comment_created(number, comment), run_id=2202).code == 0
    (answered,) = r.card_comments(number)
    assert "Answered: **bug** by @maintainer" in answered["body"]
    assert "ledger=run2201 -->" in answered["body"]  # the ledger was made by run 2201

    payload = r.issue_opened(number)  # a second workflow on 'issues', a ledger of its own
    fresh = r.run("issues", payload, run_id=2203, AUTOLOOP_HOME=str(tmp_path / "fresh-1"))
    assert fresh.code == 0, fresh.stdout + fresh.stderr
    assert fresh.outputs["cards"] == "1"
    old, new = r.card_comments(number)
    assert old == answered  # untouched
    assert "ledger=run2203 -->" in new["body"] and "`/answer c1 N`" in new["body"]

    # Its re-run, on a home made afresh again, is the same run: it finds its own card.
    writes = len(r.writes())
    rerun = r.run(
        "issues", payload, run_id=2203, attempt=2, AUTOLOOP_HOME=str(tmp_path / "fresh-2")
    )
    assert rerun.code == 0, rerun.stdout + rerun.stderr
    assert r.card_comments(number) == [old, new]
    assert [(w.method, w.path) for w in r.writes()[writes:] if w.method == "POST"] == []


def test_the_same_event_in_two_workflows_sharing_a_ledger_runs_once(runner: Runner) -> None:
    """Two workflow files on 'issues' and one ledger: the event came under two run ids,
    and the rules' turns ran twice."""
    r = runner
    number, first = open_and_triage(r, run_id=2101)
    assert first.outputs["turns"] == "1"
    other = r.run("issues", r.issue_opened(number), run_id=2102)
    assert other.code == 0, other.stdout + other.stderr
    assert other.outputs == spent_nothing(0, 0)
    assert "already recorded (an earlier attempt, or another workflow's run)" in other.stdout
    assert len(r.card_comments(number)) == 1
    # the clock's payload is the same at every tick: each run is its own tick
    tick = {"schedule": "*/15 * * * *", "workflow": ".github/workflows/clock.yml"}
    for run_id in (2103, 2104):
        ran = r.run("schedule", {**tick, "repository": r.repository()}, run_id=run_id)
        assert f"recorded as action-{run_id}-schedule" in ran.stdout


def test_a_read_only_users_answer_is_refused(runner: Runner) -> None:
    r = runner
    number, _ = open_and_triage(r, run_id=3001)
    comment = r.gh.world.comment("reader", number, "/answer c1 1")
    refused = r.run("issue_comment", r.comment_created(number, comment), run_id=3002)
    assert refused.code == 0, refused.stdout + refused.stderr
    assert refused.outputs == spent_nothing(0, 0)
    assert "| `/answer c1 1` | reader | refused (the reply comment says why) |" in refused.summary
    replies = [c for c in r.comments(number) if "was not taken" in c["body"]]
    assert len(replies) == 1 and replies[0]["user"]["login"] == BOT
    assert "only people with write access to sandbox/demo can answer cards" in replies[0]["body"]
    assert "bug" not in r.labels(number)
    (card,) = r.card_comments(number)
    assert "`/answer c1 N`" in card["body"]  # still waiting


@pytest.mark.parametrize("written", ["/answer c1 two", "/answer c1 -1", "/answer 2"])
def test_an_answer_that_is_not_one_gets_a_reply_saying_how(runner: Runner, written: str) -> None:
    """A maintainer's '/answer c1 two' got no reply at all: the job ran and did nothing."""
    r = runner
    number, _ = open_and_triage(r, run_id=3101)
    comment = r.gh.world.comment("maintainer", number, f"{written}\nthanks")
    ran = r.run("issue_comment", r.comment_created(number, comment), run_id=3102)
    assert ran.code == 0, ran.stdout + ran.stderr
    (reply,) = [c["body"] for c in r.comments(number) if "was not taken" in c["body"]]
    assert f"your `{written}` was not taken: it is not an answer: write `/answer c1 N`" in reply
    if written != "/answer 2":  # the card is named: its options are listed
        assert "(1: bug, 2: feature, 3: question)" in reply
    assert "Nothing was changed." in reply
    assert "bug" not in r.labels(number) and "feature" not in r.labels(number)
    again = r.run("issue_comment", r.comment_created(number, comment), run_id=3102, attempt=2)
    assert again.code == 0
    assert len([c for c in r.comments(number) if "was not taken" in c["body"]]) == 1


def test_the_readmes_example_rules_triage_an_issue(runner: Runner) -> None:
    r = runner
    number = r.gh.world.open_issue("reader", "Example rules")
    example = str(ROOT / "examples" / "rules.json")
    ran = r.run("issues", r.issue_opened(number), run_id=4101, AUTOLOOP_RULES=example)
    assert ran.code == 0, ran.stdout + ran.stderr
    assert ran.outputs == spent_nothing(1, 1)
    assert len(r.card_comments(number)) == 1


def test_the_runs_own_comment_is_not_fed_back(runner: Runner) -> None:
    r = runner
    number, _ = open_and_triage(r, run_id=4001)
    (card,) = r.card_comments(number)
    own = r.run("issue_comment", r.comment_created(number, card["id"]), run_id=4002)
    assert own.code == 0, own.stdout + own.stderr
    assert "caused by this run's own identity" in own.stdout
    assert own.outputs["turns"] == "0"


def test_a_scheduled_run_records_its_tick_and_retries_what_github_refused(runner: Runner) -> None:
    r = runner
    number = r.gh.world.open_issue("reader", "Flaky GitHub")
    r.gh.world.faults.add("error_502", method="POST", path="*/comments", times=None)
    first = r.run("issues", r.issue_opened(number), run_id=4301)
    assert first.code == 0, first.stdout + first.stderr
    assert not r.card_comments(number)  # GitHub refused; the card waits to be shown
    (warning,) = annotations(first.stdout, "warning")
    assert warning.startswith("::warning::card c1 not posted yet: ")
    assert warning.endswith("the next run tries again")
    assert "| c1 | How should this issue be triaged? | not posted: " in first.summary
    r.gh.world.faults.clear()
    schedule = {"schedule": "*/15 * * * *", "workflow": ".github/workflows/clock.yml"}
    tick = r.run("schedule", {**schedule, "repository": r.repository()}, run_id=4302)
    assert tick.code == 0, tick.stdout + tick.stderr
    assert "event schedule sandbox/demo: recorded as action-4302-schedule" in tick.stdout
    assert len(r.card_comments(number)) == 1  # shown now, by the clock's run


def test_an_every_rule_fires_from_scheduled_runs_that_start_late(runner: Runner) -> None:
    """GitHub starts scheduled runs minutes after their slot: an `every` rule fired only
    on a run within a minute of a slot, so almost never. With a ledger that outlives the
    job, the first run marks where the schedule stands and the next slot fires however
    late its run starts; where the ledger goes with the job, the run says it never fires."""
    r = runner
    rules = r.tmp / "timed.json"
    rules.write_text(
        json.dumps(
            {
                "agents": {"demo": {"use": "demo"}},
                "rules": [{"name": "tick", "every": "*/15 * * * *", "agent": "demo"}],
            }
        )
    )
    fired = []
    for run_id, clock in ((4401, "10:04"), (4402, "10:19"), (4403, "10:33"), (4404, "10:34")):
        ran = r.run(
            "schedule",
            r.schedule(),
            run_id=run_id,
            AUTOLOOP_RULES=str(rules),
            AUTOLOOP_CLOCK=f"2026-11-30T{clock}:30+00:00",
        )
        assert ran.code == 0, ran.stdout + ran.stderr
        # (the demo agent asks about its tick, a card no issue shows: a warning of its own)
        assert not [w for w in annotations(ran.stdout, "warning") if "'every'" in w]
        fired.append(ran.outputs["turns"])
    assert fired == ["0", "1", "1", "0"]
    hosted = r.run(
        "schedule",
        r.schedule(),
        run_id=4405,
        AUTOLOOP_RULES=str(rules),
        AUTOLOOP_HOME=str(r.tmp / "hosted"),
        RUNNER_ENVIRONMENT="github-hosted",
        AUTOLOOP_CLOCK="2026-11-30T10:45:30+00:00",  # (a slot's first minute: it fires)
    )
    assert hosted.code == 0, hosted.stdout + hosted.stderr
    assert hosted.outputs["turns"] == "1"
    (warning,) = [w for w in annotations(hosted.stdout, "warning") if "'every'" in w]
    assert warning.startswith("::warning::rule(s) tick with 'every' never fire here: ")
    assert "'database-url' (PostgreSQL)" in warning


def test_a_question_shown_nowhere_is_said_not_waited_for(runner: Runner) -> None:
    """A rule without a github-comment channel: the summary said the card waited for an
    answer, and the issue had no comment."""
    r = runner
    quiet = json.loads(json.dumps(RULES))
    for rule in quiet["rules"]:
        rule.pop("notify", None)
    rules = r.tmp / "quiet.json"
    rules.write_text(json.dumps(quiet))
    number = r.gh.world.open_issue("reader", "Nobody sees this")
    ran = r.run("issues", r.issue_opened(number), run_id=4501, AUTOLOOP_RULES=str(rules))
    assert ran.code == 0, ran.stdout + ran.stderr
    assert ran.outputs["cards"] == "1"
    (warning,) = annotations(ran.stdout, "warning")
    assert warning.startswith('::warning::card(s) c1 shown nowhere: its rule has no "notify"')
    assert "waiting for `/answer" not in ran.summary
    assert "| c1 | How should this issue be triaged? | not posted: shown nowhere" in ran.summary
    assert not r.card_comments(number)


def test_with_an_app_it_writes_as_the_app_and_needs_no_warning(runner: Runner) -> None:
    r = runner
    number = r.gh.world.open_issue("reader", "App mode")
    ran = r.run(
        "issues",
        r.issue_opened(number),
        run_id=4201,
        GITHUB_TOKEN="",
        AUTOLOOP_GITHUB_APP_ID=str(r.gh.app_id),
        AUTOLOOP_GITHUB_PRIVATE_KEY=r.gh.private_key_pem,
        AUTOLOOP_MODE="auto",
    )
    assert ran.code == 0, ran.stdout + ran.stderr
    assert not annotations(ran.stdout, "warning")
    (card,) = r.card_comments(number)
    assert card["user"]["login"] == "autoloop-sandbox[bot]"
    assert ran.outputs["cards"] == "1"


# --------------------------------------------------------------------------- token facts


def test_a_pull_request_from_a_fork_is_recorded_and_nothing_is_written(runner: Runner) -> None:
    r = runner
    payload: dict[str, Any] = json.loads((WEBHOOKS / "pull_request" / "opened.json").read_text())
    payload["repository"] = r.repository()
    payload["pull_request"]["base"]["repo"] = r.repository()
    payload["pull_request"]["head"]["repo"]["full_name"] = "contributor/demo"
    before = len(r.gh.world.audit.entries())
    read_only = r.gh.world.actions_token(permissions={"contents": "read", "metadata": "read"})
    ran = r.run("pull_request", payload, run_id=5001, GITHUB_TOKEN=read_only)
    assert ran.code == 0, ran.stdout + ran.stderr
    (warning,) = annotations(ran.stdout, "warning")
    assert "a pull request from a fork gets a read-only token" in warning
    assert "pull_request_target" in warning
    assert "read-only token" in ran.summary
    assert "recorded as action-5001-pull_request" in ran.stdout
    assert ran.outputs == spent_nothing(0, 0)
    assert len(r.gh.world.audit.entries()) == before


def test_a_token_without_write_access_fails_the_job_and_says_which_permissions(
    runner: Runner,
) -> None:
    """A card GitHub refused to post ended the job with exit 0, the summary saying that it
    waited for an answer; no one could see it."""
    r = runner
    number = r.gh.world.open_issue("reader", "Read-only job")
    read_only = r.gh.world.actions_token(
        permissions={"contents": "read", "issues": "read", "pull_requests": "read"}
    )
    ran = r.run("issues", r.issue_opened(number), run_id=5101, GITHUB_TOKEN=read_only)
    assert ran.code == 1, ran.stdout + ran.stderr
    assert "Traceback" not in ran.stderr
    (error,) = annotations(ran.stdout, "error")
    assert error.startswith("::error::card c1 not posted: ")
    assert "403" in error
    assert error.endswith("; the job's token (or the App) needs issues: write"), error
    assert "not shown" not in ran.stderr  # said once (it was said twice, with a retry to come)
    assert "waiting for `/answer" not in ran.summary
    assert "| c1 | How should this issue be triaged? | not posted: " in ran.summary
    assert "> **Not written:** card c1 not posted: " in ran.summary
    assert not r.card_comments(number)
    # on a hosted runner whose ledger goes with the job, an outage is an error too
    r.gh.world.faults.add("error_502", method="POST", path="*/comments", times=None)
    other = r.gh.world.open_issue("reader", "Hosted runner")
    hosted = r.run(
        "issues",
        r.issue_opened(other),
        run_id=5102,
        AUTOLOOP_HOME=str(r.tmp / "hosted-home"),
        RUNNER_ENVIRONMENT="github-hosted",
    )
    assert hosted.code == 1, hosted.stdout + hosted.stderr
    assert any(
        e.startswith("::error::card c1 not posted: ") for e in annotations(hosted.stdout, "error")
    )


def test_the_github_token_warning_is_only_for_runs_that_move_a_delivery(runner: Runner) -> None:
    """That a merge with GITHUB_TOKEN starts no push workflow was said on every run in
    mode deliver or auto (an issue, a comment, the clock), and could not be silenced; runs
    that move a delivery still say it (test_action_deliver)."""
    r = runner
    number = r.gh.world.open_issue("reader", "Deliver me")
    ran = r.run("issues", r.issue_opened(number), run_id=6001, AUTOLOOP_MODE="deliver")
    assert ran.code == 0, ran.stdout + ran.stderr
    assert annotations(ran.stdout, "warning") == []
    assert "push" not in ran.summary
    assert ran.outputs == spent_nothing(0, 0)  # an issue: no delivery
    assert not r.card_comments(number)


def test_a_question_on_a_hosted_runner_without_a_database_is_flagged(runner: Runner) -> None:
    r = runner
    number = r.gh.world.open_issue("reader", "Hosted")
    ran = r.run("issues", r.issue_opened(number), run_id=6002, RUNNER_ENVIRONMENT="github-hosted")
    assert ran.code == 0, ran.stdout + ran.stderr
    (warning,) = annotations(ran.stdout, "warning")
    assert "card(s) c1 cannot be answered" in warning and "'database-url'" in warning
    assert ran.outputs["cards"] == "1"
    # The answer comes in another run, another job: its reply says why the card is not
    # there (it said only "there is no card c1").
    comment = r.gh.world.comment("maintainer", number, "/answer c1 1")
    answered = r.run(
        "issue_comment",
        r.comment_created(number, comment),
        run_id=6003,
        RUNNER_ENVIRONMENT="github-hosted",
        AUTOLOOP_HOME=str(r.tmp / "next-job"),
    )
    assert answered.code == 0, answered.stdout + answered.stderr
    (reply,) = [c["body"] for c in r.comments(number) if "was not taken" in c["body"]]
    assert "there is no card c1 about sandbox/demo. A card asked in another run" in reply
    assert "the workflow needs 'database-url'" in reply


# --------------------------------------------------------------------------- failures


def test_missing_credentials_is_one_error_line(runner: Runner) -> None:
    r = runner
    number = r.gh.world.open_issue("reader", "No token")
    ran = r.run("issues", r.issue_opened(number), run_id=7001, GITHUB_TOKEN="")
    assert ran.code == 2
    (error,) = annotations(ran.stdout, "error")
    assert "give the 'github-token' input" in error
    assert "Traceback" not in ran.stdout + ran.stderr


def test_a_token_github_refuses_fails_the_job_with_one_line(runner: Runner) -> None:
    r = runner
    number = r.gh.world.open_issue("reader", "Bad token")
    ran = r.run("issues", r.issue_opened(number), run_id=7002, GITHUB_TOKEN="ghs_revoked")
    assert ran.code == 1
    (error,) = annotations(ran.stdout, "error")
    assert "GitHub refused the credentials (401 Bad credentials)" in error
    assert "Traceback" not in ran.stdout + ran.stderr


FAILS_ONCE = """\
import pathlib, sys
mark = pathlib.Path(sys.argv[1])
if not mark.exists():
    mark.write_text("failed once")
    sys.exit("the model is overloaded, try again later")
print("looked at it")
"""


def failing_once_job(r: Runner, backoff_s: int, title: str, run_id: int) -> tuple[Ran, float]:
    """A job whose agent fails its first turn, under a rule with ``retry_backoff_s``;
    what it printed, and how long it took (s)."""
    agent = r.tmp / "fails_once.py"
    agent.write_text(FAILS_ONCE)
    rules = json.loads(json.dumps(RULES))
    rules["agents"]["demo"] = {
        "use": "command",
        "command": [sys.executable, str(agent), str(r.tmp / "mark")],
    }
    rules["rules"][0]["retry_backoff_s"] = backoff_s
    (r.workspace / ".github" / "autoloop" / "rules.json").write_text(json.dumps(rules))
    number = r.gh.world.open_issue("reader", title)
    started = time.monotonic()
    ran = r.run("issues", r.issue_opened(number), run_id=run_id)
    return ran, time.monotonic() - started


def test_a_failed_turn_is_retried_in_the_same_job_after_its_backoff(runner: Runner) -> None:
    """The ledger of a job on a hosted runner ends with the job: a retry left for later
    would never run, so the job waits out the backoff and runs it."""
    ran, took = failing_once_job(runner, 2, "Flaky agent", 7100)
    assert ran.code == 0, ran.stdout + ran.stderr
    assert "turn t1 failed: failed: " in ran.stdout
    assert "a failed turn is retried at " in ran.stdout
    assert "turn t2 done: no_receipt" in ran.stdout  # the retry ran in this job (no receipt)
    assert took >= 2  # after its backoff, not at once
    assert annotations(ran.stdout, "warning") == ["::warning::turn t1 failed: failed"]


def test_a_retry_due_past_what_a_job_waits_is_a_warning_not_a_wait(runner: Runner) -> None:
    ran, took = failing_once_job(runner, 3600, "Agent down for an hour", 7101)
    assert took < 60  # the job did not sit out the hour
    assert ran.code == 0, ran.stdout + ran.stderr
    assert "turn t2" not in ran.stdout
    (late,) = [w for w in annotations(ran.stdout, "warning") if "retry is due" in w]
    assert "past what a job waits (300 s)" in late and "retry_backoff_s" in late


def test_a_broken_rules_file_is_named_in_the_error(runner: Runner) -> None:
    r = runner
    rules = r.workspace / ".github" / "autoloop" / "rules.json"
    rules.write_text(
        json.dumps(
            {**RULES, "rules": [{"name": "x", "on": {"source": "github"}, "agent": "nobody"}]}
        )
    )
    number = r.gh.world.open_issue("reader", "Bad rules")
    ran = r.run("issues", r.issue_opened(number), run_id=7003)
    assert ran.code == 2
    (error,) = annotations(ran.stdout, "error")
    assert ".github/autoloop/rules.json" in error
    assert "nobody" in error


def test_a_misspelt_agent_field_in_the_rules_is_named_in_the_error(runner: Runner) -> None:
    r = runner
    rules = r.workspace / ".github" / "autoloop" / "rules.json"
    agents = {name: {**spec, "modle": "x"} for name, spec in RULES["agents"].items()}
    rules.write_text(json.dumps({**RULES, "agents": agents}))
    number = r.gh.world.open_issue("reader", "Bad rules")
    ran = r.run("issues", r.issue_opened(number), run_id=7004)
    assert ran.code == 2
    (error,) = annotations(ran.stdout, "error")
    assert ".github/autoloop/rules.json" in error and 'unknown field "modle"' in error


def test_outside_a_runner_it_says_what_is_missing(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(AUTOLOOP), "action"],
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout.startswith("::error::GITHUB_EVENT_NAME is not set")


def test_an_output_file_it_cannot_write_is_one_error_after_the_work(runner: Runner) -> None:
    """GITHUB_OUTPUT in a folder that does not exist: the turn ran and the card was
    posted, then a traceback."""
    r = runner
    number = r.gh.world.open_issue("reader", "Outputs")
    missing = r.tmp / "no-such-folder" / "output"
    ran = r.run("issues", r.issue_opened(number), run_id=5201, GITHUB_OUTPUT=str(missing))
    assert ran.code == 1
    assert "Traceback" not in ran.stdout + ran.stderr
    (error,) = annotations(ran.stdout, "error")
    assert f"cannot write {missing} (No such file or directory)" in error
    assert "the run's work is done and recorded" in error
    assert len(r.card_comments(number)) == 1
