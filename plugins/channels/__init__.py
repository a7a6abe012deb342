"""Autoloop: plugins/channels -- where cards are shown to people.

- ``local``: ``ConsoleChannel``, ``DesktopChannel`` (``notify-send``), ``WebhookChannel``
  (a JSON POST), ``render`` (a card as text) and ``channel_makers(env)`` (each made
  from a channel spec of the rules, by its ``use``)

The ``github-comment`` channel is part of the GitHub App (``ghapp.github.channel``).
Nothing is imported here.
"""
