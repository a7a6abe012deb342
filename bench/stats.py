"""The one percentile of the benchmarks (and of the tests that read their figures)."""

from __future__ import annotations

from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The value at rank ``round(q * (n - 1))`` of the sorted ``values`` (nearest rank,
    no interpolation): ``q`` 0.5 is the median of an odd count, 0.99 the p99."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))])
