"""The delivery pipeline as a pure state machine: stages, transitions and verdicts.

The shell reads the policy (:func:`parse_policy`) and a :class:`PullSnapshot` from
GitHub, calls :func:`decide` with the stored :class:`Delivery` and ``now``, stores the
new delivery, hands the effects to its outbox and arms a timer at ``wake_at``. Nothing
in this package does I/O or reads a clock.
"""

from pipeline.context import Waiting
from pipeline.delivery import (
    Attempt,
    Delivery,
    HistoryEntry,
    OpenCard,
    Reviewed,
    delivery_from_data,
    delivery_to_data,
    first_in_line,
    start,
)
from pipeline.effects import (
    CARD_SLOT,
    DeleteBranch,
    Effect,
    MarkReady,
    Merge,
    PostReview,
    ProbeVersion,
    Progress,
    RaiseCard,
    RequestReview,
    ResolveCard,
    UpdateBranch,
)
from pipeline.errors import MissingTransition, PipelineError, WrongInput
from pipeline.machine import Step, decide
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
    "CARD_SLOT",
    "OWN_CHECK",
    "POLICY_PATH",
    "TABLE",
    "TERMINAL",
    "Attempt",
    "CardAnswer",
    "CheckRun",
    "CommitStatus",
    "DeleteBranch",
    "Delivery",
    "Deploy",
    "Deployment",
    "Effect",
    "HistoryEntry",
    "Labels",
    "MarkReady",
    "Merge",
    "MissingTransition",
    "Mode",
    "OpenCard",
    "Outcome",
    "PipelineError",
    "Policy",
    "PolicyProblem",
    "PostReview",
    "PrReview",
    "ProbeVersion",
    "Progress",
    "PullSnapshot",
    "RaiseCard",
    "RequestReview",
    "Required",
    "ResolveCard",
    "ReviewFindings",
    "ReviewRule",
    "Reviewed",
    "Stage",
    "Step",
    "UpdateBranch",
    "VersionObservation",
    "Waiting",
    "WriteResult",
    "WrongInput",
    "checks_verdict",
    "decide",
    "delivery_from_data",
    "delivery_to_data",
    "deployment_verdict",
    "first_in_line",
    "merge_readiness",
    "next_stage",
    "parse_policy",
    "review_verdict",
    "start",
    "version_verdict",
]
