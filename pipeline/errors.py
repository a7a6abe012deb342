"""The pipeline's exceptions.

Domain outcomes (a bad policy, a failed check, a refused merge) are values; these
exceptions mean a bug in the pipeline or a misuse by its caller::

    PipelineError          root of everything the pipeline raises on purpose
    ├── MissingTransition  the stage table has no row for a move the machine tried (a bug)
    └── WrongInput         the shell handed ``decide`` something unusable (misuse)
"""

from __future__ import annotations

__all__ = ["MissingTransition", "PipelineError", "WrongInput"]


class PipelineError(Exception):
    """Root of the exceptions the pipeline raises on purpose."""


class MissingTransition(PipelineError):
    """The machine reached ``(mode, stage, outcome)`` and the table has no row for it."""

    def __init__(self, mode: str, stage: str, outcome: str) -> None:
        self.mode = mode
        self.stage = stage
        self.outcome = outcome
        super().__init__(f"no transition for ({mode}, {stage}, {outcome}) in the stage table")


class WrongInput(PipelineError):
    """``decide`` was given a snapshot of another pull request, or a naive ``now``."""

    def __init__(self, delivery: str, problem: str) -> None:
        self.delivery = delivery
        self.problem = problem
        super().__init__(f"delivery {delivery}: {problem}")
