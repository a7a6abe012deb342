"""A fake GitHub for the demo and the tests: the REST API, App auth and signed webhooks,
in memory, on loopback (see README.md in this folder). ``autoloop sandbox`` starts it.

It imports no Autoloop package, and among them only the demo and the command line
import it (the import contracts in ``pyproject.toml``).

- ``server``: ``running_sandbox``, ``SandboxHandle``, ``Sandbox``, ``create_app``,
  ``serve_in_thread``, ``free_port``, ``write_private_key``
- ``cli``: ``main`` (``autoloop sandbox``)
- ``world``: ``World``, the scripted people, CI and deploys (also the control routes)
- ``routes/``, ``ops/``, ``render/``: the REST routes, the writes, GitHub's JSON shapes
- ``api``: the REST plumbing of the routes; ``auth``: JWTs and tokens;
  ``webhooks``: signed deliveries; ``faults``: fault injection; ``audit``: the write log
- ``state``, ``model``, ``git``, ``merging``, ``events``, ``errors``, ``seed``,
  ``keys``, ``scheduler``: the records and the machinery beneath them

Nothing is imported here, so ``autoloop sandbox`` can start its key before the server loads.
"""
