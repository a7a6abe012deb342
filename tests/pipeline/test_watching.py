"""After the merge: the deployment, then the live version; nothing is merged again."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pipeline.effects import Merge, ProbeVersion, Progress, RaiseCard, ResolveCard
from pipeline.policy import Policy
from pipeline.snapshot import (
    CardAnswer,
    Deployment,
    PullSnapshot,
    VersionObservation,
    WriteResult,
)
from tests.pipeline.builders import DEPLOYED, H2, MERGED, at, policy, snap
from tests.pipeline.driver import Driver, of

URL = "https://web.acme.example/version"


def merged_pr(policy: Policy = DEPLOYED) -> Driver:
    """A driver whose delivery merged MERGED at minute 0 (by us)."""
    drive = Driver(policy=policy)
    (merge,) = of(drive(snap()), Merge)
    done = WriteResult(key=merge.key, outcome="done", merge_commit_sha=MERGED)
    drive(snap(results=(done,), merged=True, state="closed", merge_commit_sha=MERGED))
    return drive


def after(**changes: Any) -> PullSnapshot:
    return snap(merged=True, state="closed", merge_commit_sha=MERGED, **changes)


def deployed(state: str = "success", id: int = 4242, ours: bool = True) -> tuple[Deployment, ...]:
    sha = MERGED if ours else H2
    return (
        Deployment(
            id=id, sha=sha, environment="production", state=state, sha_is_merge_or_descendant=ours
        ),
    )


def seen(attempt: int, sha: str | None, at_minute: float = 0) -> VersionObservation:
    return VersionObservation(
        attempt=attempt,
        at=at(at_minute).isoformat(),
        sha=sha,
        matches=sha == MERGED,
        error="" if sha else "503 Service Unavailable",
    )


def test_without_a_deploy_table_the_delivery_ends_when_merged() -> None:
    drive = Driver()
    (merge,) = of(drive(snap()), Merge)
    step = drive(snap(results=(WriteResult(key=merge.key, outcome="done"),)), 1)
    assert step.delivery.stage == "delivered"
    (progress,) = of(step, Progress)
    assert (progress.check_status, progress.check_conclusion) == ("completed", "success")
    assert "no [deliver.deploy] table" in progress.check_title


def test_the_deployment_waits_for_a_webhook_and_reads_again_meanwhile() -> None:
    """GitHub may never send the deployment's webhook: the deployments are read again
    5 s after the merge, then at doubling steps up to 5 minutes (for the default hour),
    and the last wake is the deadline."""
    drive = merged_pr()
    step = drive(after(deployments=deployed("in_progress")), 0)
    assert step.delivery.stage == "deployment" and step.wake_at == at(0) + timedelta(seconds=5)
    assert step.waiting is not None and step.waiting.on == "webhook"
    assert "to production" in step.waiting.what
    step = drive(after(deployments=deployed("in_progress")), 1)  # 60 s in: again in 60 s
    assert step.wake_at == at(2)
    step = drive(after(deployments=deployed("in_progress")), 5)  # at most 5 minutes apart
    assert step.wake_at == at(10)
    step = drive(after(deployments=deployed("in_progress")), 57)
    assert step.wake_at == at(60)  # the deadline
    assert of(drive(after(deployments=deployed("in_progress")), 60), RaiseCard)


def test_a_successful_deployment_then_matching_versions_deliver() -> None:
    drive = merged_pr()
    step = drive(after(deployments=deployed()), 7)
    (probe,) = of(step, ProbeVersion)
    assert (probe.url, probe.field, probe.merge_sha, probe.attempt) == (URL, "sha", MERGED, 1)
    assert step.delivery.stage == "live_version" and step.wake_at == at(7) + timedelta(seconds=5)
    one = drive(after(deployments=deployed(), versions=(seen(1, MERGED, 7.05),)), 7.05)
    assert of(one, ProbeVersion) == []
    assert (
        of(one, Progress)[0].check_title
        == f"Live version: waiting for {URL} to report e4da3b7 (1/2)"
    )
    second = drive(after(deployments=deployed(), versions=(seen(1, MERGED),)), 7.1)
    assert [p.attempt for p in of(second, ProbeVersion)] == [2]
    live = drive(after(deployments=deployed(), versions=(seen(1, MERGED), seen(2, MERGED))), 7.15)
    assert live.delivery.stage == "delivered" and live.waiting is None
    assert len(drive.merges()) == 1


ONCE = policy(
    '[deliver.deploy]\nenvironment = "production"\ntimeout = "1h"\n'
    f'version_url = "{URL}"\nmatches = 1\n'
)


def test_one_matching_answer_is_said_as_one_not_1_times_in_a_row() -> None:
    drive = merged_pr(ONCE)
    drive(after(deployments=deployed()), 7)
    live = drive(after(deployments=deployed(), versions=(seen(1, MERGED),)), 7.05)
    assert live.delivery.stage == "delivered"
    notes = [h.note for h in live.delivery.history]
    assert f"{URL} reported e4da3b7" in notes
    drive = merged_pr(ONCE)
    drive(after(deployments=deployed()), 1)
    (card,) = of(drive(after(deployments=deployed(), versions=(seen(1, H2),)), 61), RaiseCard)
    assert f"did not report {MERGED} (or a later commit) within 1h: it last" in card.text


def test_version_probes_back_off_up_to_five_minutes() -> None:
    drive = merged_pr()
    minutes, delays = 5.0, []
    for _ in range(8):
        step = drive(after(deployments=deployed()), minutes)
        assert step.wake_at is not None
        delay = (step.wake_at - at(minutes)).total_seconds()
        delays.append(delay)
        minutes += delay / 60
    assert delays == [5, 10, 20, 40, 80, 160, 300, 300]
    probes = [e.attempt for e in drive.effects if isinstance(e, ProbeVersion)]
    assert probes == [1, 2, 3, 4, 5, 6, 7, 8]


def test_a_short_deploy_timeout_reads_the_version_every_second_until_it() -> None:
    short_watch = policy(
        '[deliver.deploy]\ntimeout = "6s"\nversion_url = "https://web.acme.example/version"\n'
    )
    drive = merged_pr(short_watch)
    seconds, delays = 1.0, []
    while True:
        step = drive(after(deployments=deployed()), seconds / 60)
        if step.delivery.stage != "live_version":
            break
        assert step.wake_at is not None
        delays.append((step.wake_at - at(seconds / 60)).total_seconds())
        seconds += delays[-1]
    assert step.delivery.card is not None and step.delivery.card.kind == "version_timeout"
    probes = [e.attempt for e in drive.effects if isinstance(e, ProbeVersion)]
    assert delays == [1.0] * 6 and probes == [1, 2, 3, 4, 5, 6]


def test_a_failed_deployment_raises_a_card_and_nothing_is_merged_again() -> None:
    drive = merged_pr()
    step = drive(after(deployments=deployed("failure")), 9)
    (card,) = of(step, RaiseCard)
    assert card.title == "Deployment of acme/web#12 failed"
    assert card.options == ("wait for a deployment again", "stop watching (the merge stays)")
    # (waiting again without a new deployment blocks at once: the card says so)
    assert "Start a new deployment before answering to wait again" in card.text
    assert step.delivery.card is not None and step.delivery.card.blocked_at == "deployment"
    again = drive(
        after(deployments=deployed("failure"), answer=CardAnswer(card=card.card, choice=1)), 20
    )
    assert again.delivery.stage == "blocked"  # the same failure blocks again at once
    assert len(drive.merges()) == 1


def test_a_deployment_that_succeeds_after_its_card_resolves_the_card_and_goes_on() -> None:
    """The deployment failed, a person ran it again and it succeeded: the card stayed
    open and the comment said "Blocked at deployment" until someone answered it."""
    drive = merged_pr()
    (card,) = of(drive(after(deployments=deployed("failure")), 9), RaiseCard)
    step = drive(after(deployments=(*deployed("failure"), *deployed(id=4243))), 12)
    assert [r.card for r in of(step, ResolveCard)] == [card.card]
    assert step.delivery.card is None and step.delivery.stage == "live_version"
    notes = [h.note for h in step.delivery.history]
    assert "a deployment succeeded after all: the card is not needed" in notes
    assert len(drive.merges()) == 1


def test_no_deployment_by_the_deadline_raises_a_card() -> None:
    drive = merged_pr()
    assert drive(after(deployments=deployed(ours=False)), 59).delivery.stage == "deployment"
    step = drive(after(), 60)
    assert step.delivery.card is not None and step.delivery.card.kind == "deploy_timeout"


def test_a_version_that_never_matches_raises_a_card_at_the_deadline() -> None:
    drive = merged_pr()
    drive(after(deployments=deployed()), 1)
    step = drive(after(deployments=deployed(), versions=(seen(1, H2),)), 61)
    (card,) = of(step, RaiseCard)
    assert "it last reported " + H2 in card.text


def test_a_probe_that_keeps_failing_says_why_while_waiting_and_on_its_card() -> None:
    """A wrong version_url or version_field failed every probe: the comment said only
    "(0/2)" and, an hour later, the card "it last reported nothing", never what to fix."""
    drive = merged_pr()
    drive(after(deployments=deployed()), 1)
    failing = drive(after(deployments=deployed(), versions=(seen(1, None, 1.05),)), 1.1)
    (progress,) = of(failing, Progress)
    said = "(0/2); its last answer: 503 Service Unavailable."
    assert said in progress.comment_body, progress.comment_body
    # an answer after a failed one: the error is no longer the news
    good = drive(after(deployments=deployed(), versions=(seen(1, None), seen(2, H2))), 1.2)
    assert "its last answer" not in of(good, Progress)[0].comment_body
    failed = (seen(1, None), seen(2, H2), seen(3, None))
    step = drive(after(deployments=deployed(), versions=failed), 61)
    (card,) = of(step, RaiseCard)
    assert f"it last reported {H2}; its last answer: 503 Service Unavailable" in card.text


def test_flapping_past_the_deadline_raises_a_card() -> None:
    drive = merged_pr()
    drive(after(deployments=deployed()), 1)
    flapping = (seen(1, MERGED), seen(2, H2), seen(3, MERGED), seen(4, H2))
    assert (
        drive(after(deployments=deployed(), versions=flapping), 30).delivery.stage == "live_version"
    )
    step = drive(after(deployments=deployed(), versions=flapping), 61)
    (card,) = of(step, RaiseCard)
    assert "it flapped 2 times" in card.text
    again = drive(
        after(
            deployments=deployed(), versions=flapping, answer=CardAnswer(card=card.card, choice=1)
        ),
        62,
    )
    assert again.delivery.stage == "live_version"
    assert [p.attempt for p in of(again, ProbeVersion)] == [again.delivery.probe_since]


def test_without_a_version_url_a_deployment_delivers() -> None:
    drive = merged_pr(policy("[deliver.deploy]\n"))
    step = drive(after(deployments=deployed()), 3)
    assert step.delivery.stage == "delivered"
    assert [h.stage for h in step.delivery.history][-3:] == [
        "deployment",
        "live_version",
        "delivered",
    ]
