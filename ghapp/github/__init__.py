"""The GitHub edge: everything that talks to GitHub, and only that.

- ``client``: ``GitHubClient``, thin typed methods over one HTTP stack
- ``auth``: the App's JWT and cached installation tokens
- ``sansio``: webhook signatures, webhook headers and rate-limit headers, without I/O
- ``errors``: the ``GitHubError`` tree; ``retry``: the one retry policy (reads only)
- ``executor``: ``GitHubExecutor``, receipt actions applied exactly once
- ``writes``: what write-backs share: hidden markers, targets
- ``snapshot``: the delivery's reads: ``read_policy``, ``read_snapshot``;
  ``readcache``: what they remember between snapshots
- ``delivery``: the delivery's writes (update branch, ready, progress, delete branch)
- ``outcomes``: ``effect_action`` (an effect as an action) and ``write_result`` (an
  action's record as the pipeline's answer)
- ``version``: ``probe_version``, the live-version probe
- ``story``: ``read_story``, a delivery's story told from the ledger (``autoloop why``)
- ``level``: ``LevelDeliveries``, the delivery pipeline run level-triggered for the
  Action (``level_carry``: one delivery decided, shown and kept; ``level_scope``: which
  pull requests a run looks at; ``level_cards``: ``/answer d<n>`` on the pull request;
  ``carried``: the delivery's state kept in its check run and sticky comment)
- ``channel``: ``GitHubCommentChannel``, a card as one comment
- ``answers``: ``AnswerDesk``, ``/answer CARD N`` comments as answers
- ``sweeper``: ``Sweeper``, what the webhooks missed, found again

Nothing is imported here.
"""
