"""The delivery pipeline as a pure state machine: stages, transitions and verdicts."""

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

__all__ = [
    "OWN_CHECK",
    "POLICY_PATH",
    "Deploy",
    "Labels",
    "Policy",
    "PolicyProblem",
    "ReviewRule",
    "parse_policy",
]
