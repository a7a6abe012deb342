"""One delivery driven end to end against the sandbox GitHub, without the ledger.

A small loop in the test (not the product's: that one persists deliveries in the ledger
and wakes on webhooks) reads the policy and a snapshot, calls the pure
``pipeline.decide``, carries out the effects through :class:`GitHubExecutor` (action id
= the effect's key, so a replay would be the same action) and the version probe, and
feeds the answers back, until the delivery waits on something the world brings (a
webhook) or on a timer. The test then moves the world (CI, deploys) with the sandbox's
control operations, or the clock to the timer, and goes on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from fakegithub.model import CheckRun
from fakegithub.server import SandboxHandle, running_sandbox
from ghapp.github import retry
from ghapp.github.client import GitHubClient
from ghapp.github.executor import GitHubExecutor
from ghapp.github.outcomes import effect_action, write_result
from ghapp.github.readcache import ReadCache
from ghapp.github.snapshot import Extras, read_policy, read_snapshot
from ghapp.github.version import compare_with, probe_version
from kernel.records import Action
from pipeline import (
    Delivery,
    ProbeVersion,
    Progress,
    Step,
    VersionObservation,
    WriteResult,
    decide,
    start,
)
from plugins.protocols import ActionFailed

START = datetime(2026, 7, 1, 9, 0, tzinfo=UTC)
ATTEMPTS = 3  # an action still unanswered after this many tries fails the test


@pytest.fixture
def sandbox() -> Iterator[SandboxHandle]:
    retry.set_testing(True)
    with running_sandbox() as handle:
        yield handle
    retry.set_testing(False)


@dataclass
class Drive:
    """The test's loop around one delivery (see the module docstring)."""

    gh: GitHubClient
    ex: GitHubExecutor
    http: httpx.Client
    delivery: Delivery
    now: datetime
    actions: dict[str, Action] = field(default_factory=dict)
    versions: list[VersionObservation] = field(default_factory=list)
    cache: ReadCache = field(default_factory=ReadCache)
    steps: list[Step] = field(default_factory=list)

    def results(self) -> tuple[WriteResult, ...]:
        found = (write_result(a) for a in self.actions.values())
        return tuple(r for r in found if r is not None)

    def decide(self) -> Step:
        policy = read_policy(self.gh, self.delivery.repo)
        extras = Extras(results=self.results(), versions=tuple(self.versions))
        pr = read_snapshot(
            self.gh,
            self.delivery,
            bot_login=self.ex.bot_login,
            bot_app_id=self.ex.delivery.app_id,
            policy=policy,
            extras=extras,
            cache=self.cache,
        )
        step = decide(self.delivery, pr, policy, self.now)
        self.delivery = step.delivery
        self.steps.append(step)
        for effect in step.effects:
            if isinstance(effect, ProbeVersion):
                compare = compare_with(self.gh, self.delivery.repo, self.cache)
                self.versions.append(
                    probe_version(
                        self.http,
                        effect.url,
                        effect.field,
                        effect.merge_sha,
                        effect.attempt,
                        compare=compare,
                        now=lambda: self.now,
                    )
                )
                continue
            mapped = effect_action(self.delivery, effect)
            if mapped is None:
                raise AssertionError(f"this delivery should not need {effect}")
            do, params = mapped
            self.perform(Action(id=effect.key, matter="m", turn="t", do=do, params=params))
        return step

    def perform(self, act: Action) -> None:
        """The outbox, reduced: attempt until done or failed, recording as the hub does."""
        for _ in range(ATTEMPTS):
            try:
                result = self.ex.perform(act)
            except ActionFailed as exc:
                act = replace(act, status="failed", error=str(exc), attempts=act.attempts + 1)
                break
            except Exception as exc:
                act = replace(act, error=str(exc), attempts=act.attempts + 1)
                continue
            act = replace(act, status="done", result=dict(result), attempts=act.attempts + 1)
            break
        self.actions[act.id] = act

    def run(self) -> Step:
        """Decide until the delivery ends, or waits on a webhook or a timer with no new
        answer to hear (an answer to one of its writes or probes is a reason to decide)."""
        for _ in range(20):
            step = self.decide()
            answered = any(not isinstance(e, Progress) for e in step.effects)
            if step.waiting is None:
                return step
            if not answered and step.waiting.on in ("webhook", "timer"):
                return step
        raise AssertionError("the delivery kept deciding without waiting")

    def wake(self) -> Step:
        """The timer it asked for fires."""
        step = self.steps[-1]
        assert step.waiting is not None and step.waiting.on == "timer" and step.wake_at
        self.now = step.wake_at
        return self.run()


def own(sandbox: SandboxHandle, method: str, tail: str) -> int:
    bot = f"{sandbox.sandbox.app.slug}[bot]"
    entries = sandbox.world.audit.entries(method=method)
    return len([e for e in entries if e.path.endswith(tail) and e.actor == bot])


def test_a_deliver_pr_goes_from_checks_to_merge_to_deployment_to_live(
    sandbox: SandboxHandle,
) -> None:
    world = sandbox.world
    live = f"{sandbox.api_url}/_sandbox/live/{sandbox.repo}"
    policy = (
        '[deliver]\nmerge_method = "squash"\n\n'
        f'[deliver.deploy]\nenvironment = "production"\nversion_url = "{live}"\nmatches = 2\n'
    )
    world.push("maintainer", "main", {".github/autoloop.toml": policy})
    world.set_protection("main", contexts=["ci"])
    number = world.open_pr(
        "contributor", "feature", "Add the feature", {"feature.py": "x = 1\n"}, labels=["deliver"]
    )
    head = sandbox.sandbox.state.repos[sandbox.repo].branches["feature"]
    delivery = start(repo=sandbox.repo, number=number, head_sha=head, mode="deliver", now=START)
    bot = f"{sandbox.sandbox.app.slug}[bot]"
    with (
        GitHubClient(
            app_id=sandbox.app_id, private_key=sandbox.private_key_pem, base_url=sandbox.api_url
        ) as gh,
        httpx.Client() as http,
    ):
        drive = Drive(gh, GitHubExecutor(gh, bot, app_id=sandbox.app_id), http, delivery, START)

        waiting = drive.run()  # review "none" passes, the PR is ready: CI has not reported
        assert drive.delivery.stage == "checks"
        assert waiting.waiting is not None and "required checks ci" in waiting.waiting.what

        world.set_ci({"ci": "success"})
        world.set_deploy(delay=0.2)
        world.run_ci(head)  # CI reports on the head
        assert world.settle()
        drive.now += timedelta(minutes=3)
        drive.run()  # checks pass, it merges, GitHub answers with the merge commit
        merged = gh.get_pull(sandbox.repo, number)
        assert merged["merged"] is True
        assert drive.delivery.merge_sha == merged["merge_commit_sha"]

        assert world.settle()  # the merge commit is deployed, the live version follows
        drive.now += timedelta(minutes=2)
        step = drive.run()  # the deployment succeeded: probe the live version
        assert drive.delivery.stage == "live_version"
        assert step.waiting is not None and step.waiting.on == "timer"
        step = drive.wake()  # the second probe: two matches in a row
        assert step.waiting is None and drive.delivery.stage == "delivered"

    stages = [h.stage for h in drive.delivery.history]
    assert stages == [
        "review",
        "ready",
        "checks",
        "merge",
        "deployment",
        "live_version",
        "delivered",
    ]
    assert [(v.attempt, v.matches) for v in drive.versions] == [(1, True), (2, True)]
    assert own(sandbox, "PUT", "/merge") == 1
    assert own(sandbox, "POST", "/check-runs") == 1
    assert own(sandbox, "POST", "/comments") == 1
    runs = gh_runs(sandbox, head)
    assert [(r.status, r.conclusion) for r in runs] == [("completed", "success")]
    (comment,) = sandbox.sandbox.state.repos[sandbox.repo].comments.values()
    assert comment.user == bot and "Delivered" in comment.body
    # Every write the pipeline asked for is done, and an action id is its effect's key.
    assert all(a.status == "done" for a in drive.actions.values())
    assert all(a.id == a.params["key"] for a in drive.actions.values())


def gh_runs(sandbox: SandboxHandle, head: str) -> list[CheckRun]:
    """Our App's check runs on ``head``, as the sandbox keeps them."""
    repo = sandbox.sandbox.state.repos[sandbox.repo]
    return [
        r for r in repo.check_runs.values() if r.head_sha == head and r.app_id == sandbox.app_id
    ]
