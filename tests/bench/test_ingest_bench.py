"""The ingest benchmark runs end to end at tiny sizes and every figure is a measurement.

Timings are not asserted here (performance is measured by running the bench); this checks
that both servers ran, that the figures are there and finite, and that the bench's own
ledger check really compared acknowledged deliveries with the ledger.
"""

from __future__ import annotations

import math

from bench import ingest


def test_ingest_bench_measures_both_servers_and_checks_the_ledger() -> None:
    lines: list[str] = []
    sizes = dict(ingest.QUICK)
    figures = ingest.run(pin=False, out=lines.append, **sizes)
    for side in ingest.SIDES:
        for key in ("rps", "rate_p50_ms", "rate_p99_ms", "rss_held_mb", "rss_before_mb"):
            value = figures[f"{side}_{key}"]
            assert math.isfinite(value) and value > 0, (side, key, value)
        assert figures[f"{side}_held_sockets"] >= sizes["connections"]
    assert figures["ratio"] == figures["ours_rps"] / figures["bare_rps"]
    assert "cpu_ratio" in figures  # nan when a window was too short to register cpu time
    # warm-up + throughput + fixed rate + held connections, all acknowledged and found
    assert figures["ours_acked"] >= sizes["warmup"] + sizes["connections"]
    assert figures["ours_found"] == figures["ours_acked"]
    text = "\n".join(lines)
    assert "ratio ours/bare" in text and "VmRSS" in text and "floor" in text


def test_delivery_ids_are_read_back_from_the_prepared_requests() -> None:
    deliveries = ingest.Deliveries(subjects=3)
    requests = deliveries.make(4, "t")
    assert ingest._ids([head for head, _ in requests]) == {"t-1", "t-2", "t-3", "t-4"}
    head, body = requests[0]
    assert f"content-length: {len(body)}".encode() in head
    # every body differs, as GitHub's do: the same body again would be a replay
    assert len({body for _, body in requests}) == 4
