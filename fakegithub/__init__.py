"""A fake GitHub for the demo and the tests: the REST API, App auth and signed webhooks,
in memory, on loopback (see README.md in this folder). ``autoloop sandbox`` starts it.

It imports no Autoloop package, and among them only the demo and the command line
import it (the import contracts in ``pyproject.toml``).

- ``server``: ``running_sandbox``, ``SandboxHandle``, ``create_app`` (the one place that
  joins the route tables), ``serve_in_thread``, ``free_port``, ``write_private_key``
- ``cli``: ``main`` (``autoloop sandbox``)
- ``sandbox``: ``Sandbox``, the whole fake GitHub in memory, not yet serving
- ``world``: ``World``, the scripted people, CI and deploys (also the control routes)
- ``routes/``, ``ops/``, ``render/``: the REST routes, the writes, GitHub's JSON shapes
- ``api``: the REST plumbing of the routes; ``auth``: JWTs and tokens;
  ``webhooks``: signed deliveries; ``faults``: fault injection; ``audit``: the write log
- ``state``, ``model``, ``git``, ``merging``, ``events``, ``errors``, ``seed``,
  ``keys``, ``scheduler``: the records and the machinery beneath them

Imports point one way: ``cli`` > ``server`` > ``routes`` > ``api`` > ``sandbox`` > ``world``
> ``ops`` > ``events`` > ``render`` > ``merging`` > ``git`` > ``state`` > ``model`` >
``errors``. Nothing is imported here, so ``autoloop sandbox`` can start its key before the
server loads.
"""
