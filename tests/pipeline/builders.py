"""Realistic values for the pipeline's tests: SHAs, app ids, check runs, snapshots.

Not a test module: the tests import it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pipeline.policy import Policy, parse_policy
from pipeline.snapshot import CheckRun, PullSnapshot, Required

T0 = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
REPO = "acme/web"
NUMBER = 12
ACTIONS = 15368  # GitHub Actions
CIRCLECI = 18001
BOT_APP = 271828  # our App
BOT = "autoloop[bot]"

BASE = "5d41402abc4b2a76b9719d911017c592ae4f1c0e"
H1 = "3f786850e387550fdab836ed7e6dc881de23001b"
H2 = "89e6c98d92887913cadf06b2adb97f26cde4849b"
H3 = "2b66fd261ee5c6cfc8de7fa466bab600bcfe4f69"
UPDATED = "9c1185a5c5e9fc54612808977ee8f548b2258d31"  # H1 with the base merged in
MERGED = "e4da3b7fbbce2345d7772b0674a318d5c3f1d8a6"  # the squash commit on main


def at(minutes: float = 0) -> datetime:
    return T0 + timedelta(minutes=minutes)


def policy(text: str = "") -> Policy:
    parsed = parse_policy(text)
    assert isinstance(parsed, Policy), parsed
    return parsed


DEPLOYED = policy(
    '[deliver.deploy]\nenvironment = "production"\ntimeout = "1h"\n'
    'version_url = "https://web.acme.example/version"\nmatches = 2\n'
)


def run(
    name: str, conclusion: str | None, *, id: int = 1, head: str = H1, app: int = ACTIONS
) -> CheckRun:
    return CheckRun(
        id=id,
        name=name,
        app_id=app,
        status="in_progress" if conclusion is None else "completed",
        conclusion=conclusion,
        head_sha=head,
    )


def green(*names: str, head: str = H1, first_id: int = 100) -> tuple[CheckRun, ...]:
    return tuple(run(n, "success", id=first_id + i, head=head) for i, n in enumerate(names))


def required(*names: str, app: int | None = ACTIONS) -> tuple[Required, ...]:
    return tuple(Required(name=n, app_id=app) for n in names)


def snap(**changes: Any) -> PullSnapshot:
    """A mergeable open PR labelled ``deliver`` at H1 whose required build and test passed."""
    base = PullSnapshot(
        repo=REPO,
        number=NUMBER,
        head_sha=H1,
        base_ref="main",
        head_ref="fix-login-redirect",
        head_parents=(BASE,),
        labels=("deliver",),
        author="mona",
        mergeable=True,
        mergeable_state="clean",
        required=required("build", "test"),
        check_runs=green("build", "test"),
        bot_login=BOT,
        bot_app_id=BOT_APP,
    )
    return replace(base, **changes)
