"""Fuzzing of the inputs from outside: Hypothesis always, atheris when it is installed.

Six targets (:mod:`tests.fuzz.targets`): the webhook endpoint, the generic source and the
card pages (through the app of ``create_app``, called as ASGI in this process, over a
real ledger), the receipt parser, the rules loader and the card-link verifier (called
directly). Each input must end without an escaping exception, with an HTTP status below
500, and with no traceback in the answer or in the logs.

- CI runs a slice: ``tests/fuzz/test_fuzz.py``.
- The long run: ``python -m tests.fuzz --inputs 1000000`` (progress and per-target counts
  on stdout), or ``pytest --slow tests/fuzz``. ``--engine atheris`` drives one target with
  atheris (coverage-guided, on bytes) instead, when ``pip install atheris`` worked (the
  extra ``fuzz``); every target but the webhook endpoint (see ``tests/fuzz/__main__.py``).

Modules: ``base`` (a target's shape, the JSON strategies), ``web`` (the app and the three
HTTP targets), ``targets`` (the other three, and all six by name), ``driver`` (the long
run), ``test_fuzz`` (CI's slice).
"""
