"""The delivery pipeline as a pure state machine: stages, transitions and verdicts."""

from pipeline.errors import MissingTransition, PipelineError, WrongInput
from pipeline.policy import (
    OWN_CHECK,
    POLICY_PATH,
    Deploy,
    Labels,
    Policy,
    PolicyProblem,
    ReviewRule,
    parse_policy,
)
from pipeline.stages import CARDS, TABLE, TERMINAL, Mode, Outcome, Stage, next_stage

__all__ = [
    "CARDS",
    "OWN_CHECK",
    "POLICY_PATH",
    "TABLE",
    "TERMINAL",
    "Deploy",
    "Labels",
    "MissingTransition",
    "Mode",
    "Outcome",
    "PipelineError",
    "Policy",
    "PolicyProblem",
    "ReviewRule",
    "Stage",
    "WrongInput",
    "next_stage",
    "parse_policy",
]
