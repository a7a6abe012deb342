"""A seeded deterministic simulation of the hub over the real Ledger and SQLite store.

``python -m tests.sim --seeds 10 --steps 2000`` runs it from the command line;
``tests/test_simulation.py`` runs a bounded slice in CI and a long run with ``--slow``.
"""

from tests.sim.harness import MOVE_WEIGHTS, Simulation, Summary, run
from tests.sim.invariants import InvariantBroken, Observer

__all__ = ["MOVE_WEIGHTS", "InvariantBroken", "Observer", "Simulation", "Summary", "run"]
