"""Autoloop: plugins/channels -- where cards are shown to people.

- ``local``: ``ConsoleChannel``, ``DesktopChannel`` (``notify-send``), ``WebhookChannel``
  (a JSON POST), ``render`` (a card as text) and ``make_channels(rules, env)``

The ``github-comment`` channel is part of the GitHub App (``ghapp.github.channel``).
Nothing is imported here.
"""
