"""After the merge: a deployment of the merge commit (or a descendant) succeeds, then
the version URL reports it ``matches`` times in a row. Nothing is merged again here.
"""

from __future__ import annotations

from datetime import timedelta

from kernel.durations import iso
from pipeline.context import Ctx, in_a_row, instant, probe_delay, short, span, times
from pipeline.effects import ProbeVersion
from pipeline.stages import Outcome
from pipeline.verdicts import VersionVerdict, deployment_verdict, version_verdict

__all__ = ["deployment", "live_version"]


def deployment(ctx: Ctx) -> Outcome:
    d, pr, deploy = ctx.d, ctx.pr, ctx.policy.deploy
    if deploy is None:
        ctx.note = "merged; no [deliver.deploy] table to watch"
        return "nothing_to_watch"
    verdict = deployment_verdict(pr, deploy)
    found = verdict.deployment
    if verdict.kind == "deployed" and found is not None:
        ctx.note = f"deployment {found.id} of {short(found.sha)} to {found.environment} succeeded"
        return "deployed"
    if verdict.kind == "failed" and found is not None:
        ctx.raise_card(
            "deploy_failed",
            f"Deployment of {pr.repo}#{pr.number} failed",
            f"Deployment {found.id} of {found.sha} to {found.environment} ended {found.state}. "
            "The merge stays; nothing is merged again. Start a new deployment before "
            "answering to wait again: this one failed, and would block again at once (a "
            "deployment that succeeds meanwhile closes this card by itself).",
        )
        return "failed"
    deadline = ctx.deadline()
    if ctx.past(deadline):
        ctx.raise_card(
            "deploy_timeout",
            f"No deployment of {pr.repo}#{pr.number}",
            f"No successful deployment of {d.merge_sha} (or a later commit) to "
            f"{deploy.environment} within {span(deploy.timeout_s)}. The merge stays.",
        )
        return "timeout"
    what = f"a successful deployment of {short(d.merge_sha)} to {deploy.environment}"
    # GitHub does not promise to send every webhook: the deployments are read again
    # meanwhile, on the live version's schedule (as often as it, from the stage's start).
    since = max((ctx.now - instant(d.stage_since)).total_seconds(), 0.0) if d.stage_since else 0.0
    step = min(max(since, probe_delay(0, deploy.timeout_s)), probe_delay(16, deploy.timeout_s))
    again = ctx.now + timedelta(seconds=step)
    ctx.wait("webhook", what, again if deadline is None else min(deadline, again))
    return "waiting"


def failed_probe(verdict: VersionVerdict) -> str:
    """Why the newest probe got no answer, for the wait and the card: a wrong
    ``version_url`` or ``version_field`` is told from a slow rollout ("" when it got one)."""
    return f"; its last answer: {verdict.error}" if verdict.error else ""


def live_version(ctx: Ctx) -> Outcome:
    d, pr, deploy = ctx.d, ctx.pr, ctx.policy.deploy
    if deploy is None or not deploy.version_url:
        ctx.note = "no version_url to probe"
        return "nothing_to_watch"
    verdict = version_verdict(pr.versions, since=d.probe_since, needed=deploy.matches)
    if verdict.kind == "live":
        ctx.note = f"{deploy.version_url} reported {short(verdict.last)}{in_a_row(verdict.streak)}"
        return "live"
    deadline = ctx.deadline()
    if ctx.past(deadline):
        how = (
            f"it flapped {times(verdict.flaps)}, last reporting {verdict.last}"
            if verdict.kind == "flapping"
            else f"it last reported {verdict.last or 'nothing'}"
        ) + failed_probe(verdict)
        ctx.raise_card(
            "version_timeout",
            f"{pr.repo}#{pr.number} is not live",
            f"{deploy.version_url} did not report {d.merge_sha} (or a later commit)"
            f"{in_a_row(deploy.matches)} within {span(deploy.timeout_s)}: {how}.",
        )
        return "timeout"
    due = None if d.next_probe_at is None else instant(d.next_probe_at)
    if due is None or ctx.past(due):
        attempt = d.probe_attempt + 1
        delay = probe_delay(attempt - d.probe_since, deploy.timeout_s)
        due = ctx.now + timedelta(seconds=delay)
        ctx.emit(
            ProbeVersion(
                key=d.key("probe", attempt),
                url=deploy.version_url,
                field=deploy.version_field,
                merge_sha=d.merge_sha or d.head_sha,
                attempt=attempt,
            )
        )
        ctx.set(probe_attempt=attempt, next_probe_at=iso(due))
    what = (
        f"{deploy.version_url} to report {short(d.merge_sha)} ({verdict.streak}/{deploy.matches})"
        + failed_probe(verdict)
    )
    ctx.wait("timer", what, min(due, deadline) if deadline is not None else due)
    return "waiting"
