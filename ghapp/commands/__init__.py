"""The ``autoloop`` command line and the wiring behind each command.

- ``cli``: ``main``, the entry point; subcommands below load lazily
- ``home``: ``Home``, the opened home (ledger, rules, clock, master key) and the hub it makes;
  ``home_ledger``: where the home is and the ledger it uses (found, refused when lost, opened)
- ``status``: ``autoloop status``, read from the stored data without the kernel's classes
- ``serve``: ``autoloop serve``; ``work``: ``autoloop work``; ``demo``: ``autoloop demo``
- ``github_app``: ``attach``, the GitHub App wired into a running server

Nothing is imported here.
"""
