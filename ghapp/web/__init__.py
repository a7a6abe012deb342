"""The HTTP face of the hub: ``create_app(server)`` and the ``Server`` its routes use.

- ``app``: webhooks (verified, committed, then answered), signed generic sources, card
  pages, ``/healthz`` and ``/metrics``

Nothing is imported here, and ``create_app`` does no work until it is called.
"""
