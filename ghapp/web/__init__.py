"""The HTTP face of the hub: ``create_app(server)`` and the ``Server`` its routes use.

- ``app``: ``create_app``, ``Server``: webhooks (verified, committed, then answered),
  signed generic sources, card pages, ``/healthz`` and ``/metrics``
- ``cards``: the page a signed card link opens, and the answer its form sends
- ``metrics``: ``Metrics`` and the ``/metrics`` page (Prometheus text)
- ``connections``: ``http_config`` (uvicorn with a header deadline and shedding of idle
  connections) and ``raise_open_files``

Nothing is imported here, and ``create_app`` does no work until it is called.
"""
