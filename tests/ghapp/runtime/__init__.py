"""The runtime: hub, outbox, workers, budget, redaction, logs and settings."""
