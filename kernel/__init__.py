"""The deterministic core of Autoloop: pure, stdlib only, no I/O, no clock.

Time comes in as an argument and ids are derived from inputs, so the same ledger and
the same inputs always give the same decisions. The modules, by what they hold:

- ``model``: configuration, receipts and events (values); ``facts``: what happened;
  ``records``: the projections and the ``State`` holding them; ``inputs``: inputs,
  effects, replies, decisions and needs.
- ``step``: the one decision function, opening with its table (input, facts, effects,
  reply codes), and ``needs``; its handlers by what they decide about: ``events``,
  ``turns``, ``cards``, ``actions``, ``timers``, through one decision's ``context``.
- ``lifecycle``: the tables of turns, cards, actions, timers and matters; ``state``:
  the fold, one small function per fact, checked against those tables.
- ``rules`` and ``config`` (reading rules.json), ``receipt`` and ``fence`` (reading an
  agent's receipt), ``routing``, ``cron``, ``durations``, ``prompt``, ``codec``,
  ``errors`` (the exception tree).
"""
