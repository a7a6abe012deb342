"""A driver that steps one delivery through snapshots, for the machine's tests.

Not a test module: the tests import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline import (
    Delivery,
    Effect,
    Merge,
    Mode,
    Policy,
    PolicyProblem,
    PullSnapshot,
    Step,
    decide,
    start,
)
from tests.pipeline.builders import H1, NUMBER, REPO, T0, at


def begin(mode: Mode = "deliver", head: str = H1) -> Delivery:
    return start(repo=REPO, number=NUMBER, head_sha=head, mode=mode, now=T0)


def of(step: Step, kind: type[Any]) -> list[Any]:
    return [e for e in step.effects if isinstance(e, kind)]


@dataclass
class Driver:
    """Steps one delivery through snapshots and keeps every effect it asked for."""

    policy: Policy | PolicyProblem = field(default_factory=Policy)
    delivery: Delivery = field(default_factory=begin)
    effects: list[Effect] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    def __call__(self, pr: PullSnapshot, minutes: float = 0) -> Step:
        step = decide(self.delivery, pr, self.policy, at(minutes))
        self.delivery = step.delivery
        self.effects.extend(step.effects)
        self.steps.append(step)
        return step

    def merges(self) -> list[Merge]:
        return [e for e in self.effects if isinstance(e, Merge)]
