"""A seeded deterministic simulation of the hub over the real Ledger and SQLite store.

Faults injected (each counted in :class:`Summary.faults`): duplicate deliveries and
redeliveries with other content, lost acknowledgements (an ingest, a receipt, an action
result sent again after a commit whose answer was lost), duplicates inside one group
commit, transactions killed before COMMIT (half of them sent again), claims whose answer
the worker never saw, restarts (store closed and reopened, in-flight agents forgotten),
lease expiry, late receipts and stale fences, stale heartbeats, clock jumps forward
(seconds to days) and backward, answers given twice, late, with a bad choice, to a
notice or to no card. Agents end with valid receipts (ask, notice, later, resolve,
events, actions), no receipt, malformed receipts, failures (started or not) or timeouts.

Invariants (:mod:`tests.sim.invariants`): each ``(source, id)`` stored once; at most one
running turn per matter; every receipt applied at most once and atomically; every
accepted event consumed by exactly one turn per route, or recorded as not dispatched with
a reason; every malformed receipt repaired once; projections equal a replay of the facts.

``python -m tests.sim --seeds 10 --steps 2000`` runs it from the command line;
``tests/e2e/test_simulation.py`` runs a bounded slice in CI and a long run with ``--slow``.

:mod:`tests.sim.system` simulates the whole system the same way (the hub, the outbox,
the delivery runner, the sweeper and the sandbox GitHub, in process, on simulated time):
``python -m tests.sim --system`` and ``--long``; ``tests/e2e/test_system_simulation.py``.
"""

from tests.sim.harness import MOVE_WEIGHTS, Simulation, Summary, run
from tests.sim.invariants import InvariantBroken, Observer

__all__ = ["MOVE_WEIGHTS", "InvariantBroken", "Observer", "Simulation", "Summary", "run"]
