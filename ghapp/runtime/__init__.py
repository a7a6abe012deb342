"""The runtime: what runs the ledger for every entry point (CLI, HTTP server, worker).

- ``hub``: ``Hub``, the service layer (record events, claim and run turns, fire timers,
  deliver cards, perform write-backs through the outbox)
- ``ledger``: ``Ledger``, one decision against the store; ``ingest``: ``IngestQueue``,
  group commit for the HTTP handlers
- ``worker``: ``WorkerLoop``; ``turns``: one claimed turn's folder and agent run;
  ``budget``: the daily spend cap; ``days``: local days and what the turns in them used
- ``redact``: ``Redactor``; ``logs``: redacted logging; ``links``: signed card links;
  ``settings``: ``Settings`` from the environment or a TOML file; ``details``: an event's
  details from outside, bounded (size, depth, 64-bit integers)

It knows nothing of GitHub's API or of HTTP. Nothing is imported here.
"""
