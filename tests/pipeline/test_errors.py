"""The pipeline's exceptions carry their data and one root."""

from __future__ import annotations

from pipeline.errors import MissingTransition, PipelineError, WrongInput


def test_a_missing_transition_names_the_move() -> None:
    error = MissingTransition("deliver", "delivered", "merged")
    assert isinstance(error, PipelineError)
    assert (error.mode, error.stage, error.outcome) == ("deliver", "delivered", "merged")
    assert str(error) == "no transition for (deliver, delivered, merged) in the stage table"


def test_wrong_input_names_the_delivery_and_the_problem() -> None:
    error = WrongInput("deliver/acme/web#12", "handed a snapshot of acme/web#13")
    assert isinstance(error, PipelineError)
    assert (error.delivery, error.problem) == (
        "deliver/acme/web#12",
        "handed a snapshot of acme/web#13",
    )
    assert str(error) == "delivery deliver/acme/web#12: handed a snapshot of acme/web#13"
