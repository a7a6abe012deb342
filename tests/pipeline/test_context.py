"""The working state of one decision and its small helpers."""

from __future__ import annotations

import pytest

from pipeline.context import Ctx, Waiting, instant, probe_delay, short, span
from tests.pipeline.builders import H1, T0, at, policy, snap
from tests.pipeline.driver import begin


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (90, "1m30s"), (7200, "2h"), (5400, "1h30m"), (86400 + 60, "1d1m")],
)
def test_span_writes_durations_as_the_policy_does(seconds: int, text: str) -> None:
    assert span(seconds) == text


def test_short_shas_and_instants() -> None:
    assert short(H1) == "3f78685" and short(None) == ""
    assert instant("2026-03-02T09:30:00.000000+00:00") == T0


def test_writes_of_one_run_are_numbered_in_order() -> None:
    ctx = Ctx(begin(), snap(), policy(), T0)
    assert [ctx.tries(), ctx.tries(), ctx.d.tries] == [1, 2, 2]


def test_a_wait_names_what_brings_it_and_when_to_wake() -> None:
    ctx = Ctx(begin(), snap(), policy(), T0)
    ctx.wait("timer", "GitHub to compute mergeability", at(1))
    assert ctx.waiting == Waiting(on="timer", what="GitHub to compute mergeability")
    assert ctx.wake == at(1)
    assert ctx.past(at(0)) and not ctx.past(at(1)) and not ctx.past(None)


@pytest.mark.parametrize(
    ("timeout_s", "delays"),
    [
        (3600, [5, 10, 20, 40, 80, 160, 300, 300]),  # the default hour
        (120, [5, 10, 12, 12]),  # at most a tenth of the timeout apart
        (40, [2, 4, 4]),  # a twentieth of it first
        (6, [1, 1, 1]),  # never more than once a second
        (1, [1, 1]),
    ],
)
def test_the_live_version_is_read_soon_then_less_often_within_the_timeout(
    timeout_s: int, delays: list[float]
) -> None:
    assert [probe_delay(n, timeout_s) for n in range(len(delays))] == delays
