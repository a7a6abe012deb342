"""The delivery pipeline as a pure state machine: stages, transitions and verdicts."""
