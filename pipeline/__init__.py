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
from pipeline.snapshot import (
    CardAnswer,
    CheckRun,
    CommitStatus,
    Deployment,
    PrReview,
    PullSnapshot,
    Required,
    ReviewFindings,
    VersionObservation,
    WriteResult,
)
from pipeline.stages import CARDS, TABLE, TERMINAL, Mode, Outcome, Stage, next_stage
from pipeline.verdicts import (
    checks_verdict,
    deployment_verdict,
    merge_readiness,
    review_verdict,
    version_verdict,
)

__all__ = [
    "CARDS",
    "OWN_CHECK",
    "POLICY_PATH",
    "TABLE",
    "TERMINAL",
    "CardAnswer",
    "CheckRun",
    "CommitStatus",
    "Deploy",
    "Deployment",
    "Labels",
    "MissingTransition",
    "Mode",
    "Outcome",
    "PipelineError",
    "Policy",
    "PolicyProblem",
    "PrReview",
    "PullSnapshot",
    "Required",
    "ReviewFindings",
    "ReviewRule",
    "Stage",
    "VersionObservation",
    "WriteResult",
    "WrongInput",
    "checks_verdict",
    "deployment_verdict",
    "merge_readiness",
    "next_stage",
    "parse_policy",
    "review_verdict",
    "version_verdict",
]
