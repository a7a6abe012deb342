"""The delivery pipeline in ``autoloop serve``: a labelled PR carried to delivered.

Real HTTP both ways against the sandbox GitHub: its signed webhooks wake the pipeline,
the pipeline's writes go through the outbox to its REST API, and the pipeline record in
the ledger says where each delivery is. Nothing polls GitHub: every move below follows
a webhook, an answer to one of the pipeline's own writes, or its own deadline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fakegithub.server import SandboxHandle, running_sandbox
from ghapp.github import retry
from ghapp.github.deliveries import Deliveries
from ghapp.github.sweeper import Sweeper
from tests.e2e.test_github_app_sandbox import rules, settings_env, wait_for
from tests.servers import Live, live_server

MERGE_TIMEOUT = 20.0


def policy_text(gh: SandboxHandle, *, review: str = "none", deploy: bool = True) -> str:
    text = f'[deliver]\nmerge_method = "squash"\nreview = "{review}"\n'
    if deploy:
        live = f"{gh.api_url}/_sandbox/live/{gh.repo}"
        text += (
            f'\n[deliver.deploy]\nenvironment = "production"\ntimeout = "10m"\n'
            f'version_url = "{live}"\nmatches = 1\n'
        )
    return text


@contextmanager
def sandbox() -> Iterator[SandboxHandle]:
    retry.set_testing(True)
    try:
        with running_sandbox() as gh:
            gh.world.set_collaborator("maintainer", "maintain")
            yield gh
    finally:
        retry.set_testing(False)


@contextmanager
def serving(gh: SandboxHandle, home: Path) -> Iterator[Live]:
    with live_server(home, rules(), env=settings_env(gh), connect_github=True) as live:
        gh.world.set_app_url(live.url + "/github/webhook")
        yield live
    gh.world.set_app_url(None)


def prepare(gh: SandboxHandle, *, review: str = "none", ci: str | None = "success") -> None:
    world = gh.world
    world.push("maintainer", "main", {".github/autoloop.toml": policy_text(gh, review=review)})
    world.set_protection("main", contexts=["ci"])
    if ci is not None:
        world.set_ci({"ci": ci})
    world.set_deploy(delay=0.1)
    assert world.settle()


def open_pr(gh: SandboxHandle) -> tuple[int, str]:
    number = gh.world.open_pr(
        "contributor", "feature", "Add the feature", {"feature.py": "x = 1\n"}
    )
    head = gh.sandbox.state.repos[gh.repo].branches["feature"]
    return number, head


def record(live: Live, gh: SandboxHandle, number: int) -> Any:
    with live.hub.store.read() as tx:
        return tx.get("pipeline", f"deliver/{gh.repo}#{number}")


def stage_is(live: Live, gh: SandboxHandle, number: int, stage: str) -> bool:
    rec = record(live, gh, number)
    return rec is not None and rec.stage == stage


def own(gh: SandboxHandle, method: str, tail: str) -> int:
    bot = f"{gh.sandbox.app.slug}[bot]"
    entries = gh.world.audit.entries(method=method)
    return len([e for e in entries if e.path.endswith(tail) and e.actor == bot])


def bot_comments(gh: SandboxHandle, number: int, mark: str) -> list[str]:
    """The bodies of the App's comments on ``number`` that hold ``mark``."""
    bot = f"{gh.sandbox.app.slug}[bot]"
    comments = gh.sandbox.state.repos[gh.repo].comments.values()
    return [c.body for c in comments if c.user == bot and c.number == number and mark in c.body]


def sticky(gh: SandboxHandle, number: int) -> list[str]:
    return bot_comments(gh, number, "autoloop:deliver=")


def own_runs(gh: SandboxHandle, head: str) -> list[tuple[str, str | None]]:
    runs = gh.sandbox.state.repos[gh.repo].check_runs.values()
    return [(r.status, r.conclusion) for r in runs if r.head_sha == head and r.app_id == gh.app_id]


def shown_delivered(gh: SandboxHandle, number: int, head: str) -> bool:
    """The last progress is shown: the check run first, then the sticky comment."""
    done = own_runs(gh, head) == [("completed", "success")]
    return done and any("Delivered" in body for body in sticky(gh, number))


def assert_delivered(live: Live, gh: SandboxHandle, number: int, head: str) -> None:
    rec = record(live, gh, number)
    assert rec.ended
    stages = [h["stage"] for h in rec.data["history"]]
    assert stages[-4:] == ["merge", "deployment", "live_version", "delivered"]
    assert own(gh, "PUT", "/merge") == 1
    assert own_runs(gh, head) == [("completed", "success")]
    (body,) = sticky(gh, number)
    assert "Delivered" in body


def test_a_labelled_pr_is_merged_deployed_and_live(tmp_path: Path) -> None:
    started = time.monotonic()
    with sandbox() as gh, serving(gh, tmp_path / "home") as live:
        prepare(gh)
        number, head = open_pr(gh)
        gh.world.add_label("maintainer", number, "deliver")
        wait_for("delivered", lambda: stage_is(live, gh, number, "delivered"), MERGE_TIMEOUT)
        wait_for("the last progress", lambda: shown_delivered(gh, number, head))
        assert_delivered(live, gh, number, head)
        assert gh.sandbox.state.repos[gh.repo].pulls[number].merged
    assert time.monotonic() - started < 30


def refusals(gh: SandboxHandle, number: int) -> list[str]:
    return bot_comments(gh, number, "autoloop:refused=")


@pytest.mark.parametrize(("who", "role"), [("reader", "read"), ("triager", "triage")])
def test_a_label_from_someone_who_cannot_merge_starts_nothing(
    tmp_path: Path, who: str, role: str
) -> None:
    """GitHub lets the triage role (and labelling automations) add labels; a ``deliver``
    label from one of them carried the pull request to a merge."""
    with sandbox() as gh, serving(gh, tmp_path / "home") as live:
        prepare(gh)
        gh.world.set_collaborator("triager", "triage")
        number, head = open_pr(gh)
        gh.world.add_label(who, number, "deliver")
        wait_for("the refusal", lambda: len(refusals(gh, number)) == 1)
        (said,) = refusals(gh, number)
        assert (
            f"@{who}: the `deliver` label did not start a delivery: only people with write "
            f"access to {gh.repo} can start a delivery (@{who}: read)."
        ) in said
        assert record(live, gh, number) is None
        assert own(gh, "PUT", "/merge") == 0 and not own_runs(gh, head)
        # The sweep finds the labelled pull request again: GitHub says who labelled it.
        sweeper = next(x for x in live.running.extras if isinstance(x, Sweeper))
        live.settle()
        sweeper.sweep()
        live.settle()
        assert record(live, gh, number) is None and len(refusals(gh, number)) == 1

        # Added again by a maintainer: it counts.
        gh.world.remove_label("maintainer", number, "deliver")
        gh.world.add_label("maintainer", number, "deliver")
        wait_for("delivered", lambda: stage_is(live, gh, number, "delivered"), MERGE_TIMEOUT)
        assert own(gh, "PUT", "/merge") == 1
        first = record(live, gh, number).data["history"][0]
        assert first["note"] == "label deliver added by maintainer"


@pytest.mark.parametrize("whose", ["this app (an agent's write-back)", "another app"])
def test_a_bots_label_starts_nothing_whatever_its_access(tmp_path: Path, whose: str) -> None:
    """An agent's ``github.label`` write-back adds the label as this App, which may merge:
    the webhook was dropped as the App's own doing, and the next sweep (or a restart)
    carried the pull request to a merge. Another App with write access started one too."""
    with sandbox() as gh, serving(gh, tmp_path / "home") as live:
        prepare(gh)
        app = gh.sandbox.app if whose.startswith("this") else gh.sandbox.ci_app
        bot = f"{app.slug}[bot]"
        number, head = open_pr(gh)
        gh.world.add_label(bot, number, "deliver")
        sweeper = next(x for x in live.running.extras if isinstance(x, Sweeper))
        live.settle()  # (the repository is named by an event decided)
        sweeper.sweep()
        wait_for("the refusal", lambda: len(refusals(gh, number)) == 1)
        (said,) = refusals(gh, number)
        assert f"@{bot}: the `deliver` label did not start a delivery: a bot's label" in said
        sweeper.sweep()
        live.settle()
        assert record(live, gh, number) is None and len(refusals(gh, number)) == 1
        assert own(gh, "PUT", "/merge") == 0 and not own_runs(gh, head)


def test_a_label_found_by_the_sweep_counts_by_who_added_it(tmp_path: Path) -> None:
    """A labelled event lost: the pull request is found labelled later, and who added the
    label is read from its history (not taken on trust)."""
    with sandbox() as gh, serving(gh, tmp_path / "home") as live:
        prepare(gh)
        sweeper = next(x for x in live.running.extras if isinstance(x, Sweeper))
        gh.world.set_app_url(None)  # webhooks lost
        number, _ = open_pr(gh)
        gh.world.add_label("reader", number, "deliver")
        other = gh.world.open_pr("contributor", "other", "Other", {"o.py": "o = 1\n"})
        gh.world.add_label("maintainer", other, "deliver")
        gh.world.set_app_url(live.url + "/github/webhook")
        # The sweep looks in the repositories the ledger's events name: the policy's push,
        # acknowledged, could still wait in the inbox under load (the translator defers
        # while webhooks come); the sweep found no repository, and nothing started until
        # the next sweep. It waits for the inbox now: no settle here.
        sweeper.sweep()
        wait_for("delivered", lambda: stage_is(live, gh, other, "delivered"), MERGE_TIMEOUT)
        wait_for("the refusal", lambda: len(refusals(gh, number)) == 1)
        assert "@reader: the `deliver` label did not start a delivery" in refusals(gh, number)[0]
        assert record(live, gh, number) is None
        assert own(gh, "PUT", "/merge") == 1


def test_the_sweep_finds_a_pull_request_by_the_policys_own_label_in_any_case(
    tmp_path: Path,
) -> None:
    """The sweep looked for `deliver` and `deliver-review` alone, and by exact name: a
    pull request labelled with the policy's own label, its webhook lost, was never found."""
    with sandbox() as gh, serving(gh, tmp_path / "home") as live:
        prepare(gh)
        text = policy_text(gh) + '\n[deliver.labels]\ndeliver = "Ship-It"\n'
        gh.world.push("maintainer", "main", {".github/autoloop.toml": text})
        assert gh.world.settle()
        sweeper = next(x for x in live.running.extras if isinstance(x, Sweeper))
        gh.world.set_app_url(None)  # webhooks lost
        number, _ = open_pr(gh)
        gh.world.add_label("maintainer", number, "ship-it")
        gh.world.set_app_url(live.url + "/github/webhook")
        live.settle()  # (the repository is named by an event decided)
        sweeper.sweep()
        wait_for("delivered", lambda: stage_is(live, gh, number, "delivered"), MERGE_TIMEOUT)
        assert own(gh, "PUT", "/merge") == 1
        first = record(live, gh, number).data["history"][0]
        assert first["note"] == "label Ship-It added by maintainer"  # not "deliver"


def test_a_push_that_changes_the_policy_wakes_the_deliveries_it_concerns(
    tmp_path: Path,
) -> None:
    """A delivery waiting for an approval the policy no longer asks for stayed waiting:
    only a delivery with a policy problem was woken by a push to the policy file."""
    with sandbox() as gh, serving(gh, tmp_path / "home") as live:
        prepare(gh, review="approvals:1")
        number, _ = open_pr(gh)
        gh.world.add_label("maintainer", number, "deliver")
        wait_for("waiting for the approval", lambda: stage_is(live, gh, number, "review"))
        live.settle()
        assert stage_is(live, gh, number, "review") and own(gh, "PUT", "/merge") == 0
        gh.world.push("maintainer", "main", {".github/autoloop.toml": policy_text(gh)})
        wait_for("delivered", lambda: stage_is(live, gh, number, "delivered"), MERGE_TIMEOUT)
        assert own(gh, "PUT", "/merge") == 1


def test_a_push_that_fixes_the_policy_moves_the_delivery_on(tmp_path: Path) -> None:
    """The sticky comment says nothing happens until the policy is fixed: the push that
    fixed it woke nothing, and the delivery moved only when serve restarted."""
    with sandbox() as gh, serving(gh, tmp_path / "home") as live:
        prepare(gh)
        broken = policy_text(gh).replace("merge_method", "merge_methd")
        gh.world.push("maintainer", "main", {".github/autoloop.toml": broken})
        number, head = open_pr(gh)
        gh.world.add_label("maintainer", number, "deliver")
        wait_for(
            "the policy problem shown",
            lambda: any("Policy problem" in body for body in sticky(gh, number)),
        )
        assert own(gh, "PUT", "/merge") == 0
        gh.world.push("maintainer", "main", {".github/autoloop.toml": policy_text(gh)})
        wait_for("delivered", lambda: stage_is(live, gh, number, "delivered"), MERGE_TIMEOUT)
        # the fix moved main: the pipeline brought the branch up to date first
        now = gh.sandbox.state.repos[gh.repo].pulls[number].head_sha
        assert now != head
        wait_for("the last progress", lambda: shown_delivered(gh, number, now))
        assert own(gh, "PUT", "/merge") == 1
        # the run on the head it left is completed, not "in progress" on that commit for ever
        assert own_runs(gh, head) == [("completed", "neutral")]


def test_deliver_review_with_no_review_asked_reviews_and_never_merges(tmp_path: Path) -> None:
    with sandbox() as gh, serving(gh, tmp_path / "home") as live:
        prepare(gh)
        number, _ = open_pr(gh)
        gh.world.add_label("maintainer", number, "deliver-review")
        wait_for("reviewed", lambda: stage_is(live, gh, number, "reviewed"), MERGE_TIMEOUT)
        wait_for("the sticky comment", lambda: len(sticky(gh, number)) == 1)
        assert record(live, gh, number).data["mode"] == "review"
        assert own(gh, "PUT", "/merge") == 0
        assert not gh.sandbox.state.repos[gh.repo].pulls[number].merged


def test_deliver_added_during_a_review_only_run_gets_a_reply_saying_how(
    tmp_path: Path,
) -> None:
    """deliver-review, then deliver: the second label was ignored without a word."""
    with sandbox() as gh, serving(gh, tmp_path / "home") as live:
        prepare(gh)
        number, _ = open_pr(gh)
        gh.world.add_label("maintainer", number, "deliver-review")
        wait_for("reviewed", lambda: stage_is(live, gh, number, "reviewed"), MERGE_TIMEOUT)
        gh.world.add_label("maintainer", number, "deliver")
        wait_for("the reply", lambda: len(refusals(gh, number)) == 1)
        assert (
            "a review-only delivery (`deliver-review`) runs on this pull request; remove "
            "`deliver-review`, then add `deliver` again"
        ) in refusals(gh, number)[0]
        gh.world.remove_label("maintainer", number, "deliver-review")
        wait_for("cancelled", lambda: stage_is(live, gh, number, "cancelled"), MERGE_TIMEOUT)
        gh.world.remove_label("maintainer", number, "deliver")
        gh.world.add_label("maintainer", number, "deliver")
        wait_for("delivered", lambda: stage_is(live, gh, number, "delivered"), MERGE_TIMEOUT)
        assert own(gh, "PUT", "/merge") == 1


def test_deliver_review_added_during_a_delivery_gets_a_reply_saying_why(tmp_path: Path) -> None:
    """deliver, then deliver-review: the second label was ignored without a word."""
    with sandbox() as gh, serving(gh, tmp_path / "home") as live:
        prepare(gh, ci=None)  # the required check never reports: the delivery waits
        number, _ = open_pr(gh)
        gh.world.add_label("maintainer", number, "deliver")
        wait_for("checks", lambda: stage_is(live, gh, number, "checks"), MERGE_TIMEOUT)
        gh.world.add_label("maintainer", number, "deliver-review")
        wait_for("the reply", lambda: len(refusals(gh, number)) == 1)
        assert (
            "@maintainer: the `deliver-review` label did not start a delivery: a delivery "
            "(`deliver`) runs on this pull request, and it is reviewed as part of it"
        ) in refusals(gh, number)[0]
        assert record(live, gh, number).data["mode"] == "deliver"


def test_removing_the_label_mid_flight_cancels_without_a_merge(tmp_path: Path) -> None:
    with sandbox() as gh, serving(gh, tmp_path / "home") as live:
        prepare(gh, ci=None)  # the required check "ci" never reports
        number, _ = open_pr(gh)
        gh.world.add_label("maintainer", number, "deliver")
        wait_for("checks", lambda: stage_is(live, gh, number, "checks"), MERGE_TIMEOUT)
        gh.world.remove_label("maintainer", number, "deliver")
        wait_for("cancelled", lambda: stage_is(live, gh, number, "cancelled"), MERGE_TIMEOUT)
        assert record(live, gh, number).ended
        assert own(gh, "PUT", "/merge") == 0
        wait_for("the sticky comment", lambda: "cancelled" in " ".join(sticky(gh, number)).lower())


def test_a_lost_answer_to_the_merge_still_merges_once(tmp_path: Path) -> None:
    with sandbox() as gh, serving(gh, tmp_path / "home") as live:
        prepare(gh)
        fault = gh.world.faults.add("response_lost", method="PUT", path="*/merge")
        number, head = open_pr(gh)
        gh.world.add_label("maintainer", number, "deliver")
        wait_for("delivered", lambda: stage_is(live, gh, number, "delivered"), MERGE_TIMEOUT)
        wait_for("the last progress", lambda: shown_delivered(gh, number, head))
        assert_delivered(live, gh, number, head)
        assert fault.hits == 1  # the merge landed, its answer was lost
        with live.hub.store.read() as tx:
            actions = tx.query("action", matter=f"deliver/{gh.repo}#{number}")
        (merge,) = [a for a in actions if a.do == "github.merge"]
        # The executor read the PR back instead of merging again.
        assert merge.status == "done" and merge.result["read_back"] is True


def test_a_restart_while_waiting_for_checks_finishes_the_delivery(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with sandbox() as gh:
        prepare(gh, ci=None)
        number, head = open_pr(gh)
        with serving(gh, home) as live:
            gh.world.add_label("maintainer", number, "deliver")
            wait_for("checks", lambda: stage_is(live, gh, number, "checks"), MERGE_TIMEOUT)
            runner = next(x for x in live.running.extras if isinstance(x, Deliveries))
            wait_for("the runner to rest", runner.idle)
        # While no server runs, CI reports: its webhooks find nobody.
        gh.world.set_ci({"ci": "success"})
        gh.world.run_ci(head)
        assert gh.world.settle()
        with serving(gh, home) as live:
            wait_for("delivered", lambda: stage_is(live, gh, number, "delivered"), MERGE_TIMEOUT)
            wait_for("the last progress", lambda: shown_delivered(gh, number, head))
            assert_delivered(live, gh, number, head)


def test_a_delivery_a_person_stopped_stays_stopped_across_a_restart(tmp_path: Path) -> None:
    """A person answered "stop this delivery", CI passed, then the server restarted: its
    sweep found the PR still labelled and started a new run, which merged it."""
    home = tmp_path / "home"
    with sandbox() as gh:
        prepare(gh, ci=None)
        text = policy_text(gh).replace(
            'review = "none"\n', 'review = "none"\nchecks_timeout = "1s"\n'
        )
        gh.world.push("maintainer", "main", {".github/autoloop.toml": text})
        number, head = open_pr(gh)
        with serving(gh, home) as live:
            gh.world.add_label("maintainer", number, "deliver")
            wait_for("the card", lambda: stage_is(live, gh, number, "blocked"), MERGE_TIMEOUT)
            card = next(iter(record(live, gh, number).cards.values()))
            gh.world.comment("maintainer", number, f"/answer {card} 2")
            wait_for("stopped", lambda: stage_is(live, gh, number, "cancelled"), MERGE_TIMEOUT)
        gh.world.set_ci({"ci": "success"})
        gh.world.run_ci(head)
        assert gh.world.settle()
        with serving(gh, home) as live:
            sweeper = next(x for x in live.running.extras if isinstance(x, Sweeper))
            wait_for("the sweep at start", lambda: sweeper.passes >= 1)
            sweeper.sweep()
            runner = next(x for x in live.running.extras if isinstance(x, Deliveries))
            live.settle()
            wait_for("the runner to rest", runner.idle)
            assert stage_is(live, gh, number, "cancelled")
            assert own(gh, "PUT", "/merge") == 0
            # A person adds the label again: that is a new run, and it delivers.
            gh.world.remove_label("maintainer", number, "deliver")
            gh.world.add_label("maintainer", number, "deliver")
            wait_for("delivered", lambda: stage_is(live, gh, number, "delivered"), MERGE_TIMEOUT)
            assert own(gh, "PUT", "/merge") == 1


def test_a_failed_deployment_raises_a_card_answered_on_the_pr(tmp_path: Path) -> None:
    with sandbox() as gh, serving(gh, tmp_path / "home") as live:
        prepare(gh)
        gh.world.set_deploy(delay=0.1, result="failure")
        number, _ = open_pr(gh)
        gh.world.add_label("maintainer", number, "deliver")
        wait_for("blocked", lambda: stage_is(live, gh, number, "blocked"), MERGE_TIMEOUT)
        rec = record(live, gh, number)
        ((key, card_id),) = rec.cards.items()
        assert key == rec.data["card"]["key"]
        # The sticky comment names the card, so that a maintainer can answer it there.
        wait_for("the card in the sticky comment", lambda: card_id in " ".join(sticky(gh, number)))
        gh.world.comment("maintainer", number, f"/answer {card_id} 2")  # stop watching
        wait_for("cancelled", lambda: stage_is(live, gh, number, "cancelled"), MERGE_TIMEOUT)
        with live.hub.store.read() as tx:
            card = tx.get("card", card_id)
        assert card.choice == 2 and card.answered_by == "maintainer"
        assert own(gh, "PUT", "/merge") == 1  # the merge stays; nothing is merged again


def test_a_check_whose_webhook_github_never_sent_is_read_again_in_minutes(
    tmp_path: Path,
) -> None:
    """Nothing to redeliver (GitHub never sent it): the runner reads a pipeline that waits
    on webhooks again after ``recheck_s`` (10 minutes; 1 s here), not at the 2 h deadline."""
    with sandbox() as gh, serving(gh, tmp_path / "home") as live:
        runner = next(x for x in live.running.extras if isinstance(x, Deliveries))
        runner.recheck_s = 1.0
        prepare(gh, ci=None)
        for kind in ("check_run.completed", "check_suite.completed", "status"):
            gh.world.faults.add("webhook_drop", path=kind, times=None)
        number, head = open_pr(gh)
        gh.world.add_label("maintainer", number, "deliver")
        wait_for("checks", lambda: stage_is(live, gh, number, "checks"), MERGE_TIMEOUT)
        gh.world.set_ci({"ci": "success"}, delay=0.5)  # created now, completed later
        gh.world.run_ci(head)
        wait_for("the check to complete", lambda: _ci_done(gh, head))
        wait_for("delivered", lambda: stage_is(live, gh, number, "delivered"), MERGE_TIMEOUT)
        assert own(gh, "PUT", "/merge") == 1


def _ci_done(gh: SandboxHandle, head: str) -> bool:
    runs = gh.sandbox.state.repos[gh.repo].check_runs.values()
    return any(r.name == "ci" and r.head_sha == head and r.status == "completed" for r in runs)
