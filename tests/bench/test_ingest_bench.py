"""The ingest benchmark runs end to end at tiny sizes and every figure is a measurement.

Timings are not asserted here (performance is measured by running the bench); this checks
that every server ran, that the figures are there and finite, that the bench's own
ledger check really compared acknowledged deliveries with ours' ledger, and that the
summary rows come out. Probot is left out (it would be installed from the npm registry).
"""

from __future__ import annotations

import math
from collections import defaultdict

from bench import ingest, ingest_sides
from ghapp.commands import serve


def test_ingest_bench_measures_every_server_and_checks_the_ledger() -> None:
    lines: list[str] = []
    sizes = dict(ingest.QUICK)
    figures = ingest.run(pin=False, probot=False, out=lines.append, **sizes)
    for side in ("bare", "floor", "ours"):
        for key in ("rps", "rate_p50_ms", "rate_p99_ms", "rss_held_mb", "rss_idle_mb"):
            value = figures[f"{side}_{key}"]
            assert math.isfinite(value) and value > 0, (side, key, value)
        assert figures[f"{side}_held_sockets"] >= sizes["connections"]
    for key in ("e2e_p50_ms", "e2e_p99_ms", "e2e_fast_p50_ms", "e2e_fast_p99_ms"):
        assert math.isfinite(figures[key]) and figures[key] > 0, key
    assert math.isfinite(figures["ours_all_cpu_us"]) and figures["ours_all_cpu_us"] > 0
    assert figures["e2e_count"] == round(sizes["rate"] * sizes["e2e_seconds"])
    assert figures["e2e_fast_rate"] == ingest.FAST_E2E_X * sizes["rate"]
    assert figures["e2e_fast_count"] == round(figures["e2e_fast_rate"] * sizes["e2e_seconds"])
    assert figures["rate_count"] == round(sizes["rate"] * sizes["rate_seconds"])
    assert figures["probot_available"] == 0.0
    # warm-up + held connections + fixed rate + throughput + e2e, all acknowledged and found
    assert figures["ours_acked"] >= sizes["warmup"] + sizes["connections"]
    assert figures["ours_found"] == figures["ours_acked"]
    assert figures["status_listed"] == figures["ours_acked"]
    summary = ingest.summarize(figures)
    assert [label for label, _, _ in summary][:3] == [
        f"ingest deliveries/s, {sizes['concurrency']} connections",
        "ingest cpu per delivery",
        f"ingest ack p50 / p99 at {sizes['rate']:.0f}/s",
    ]
    assert figures["cli_help_ms"] > 0 and figures["cli_status_ms"] > 0
    text = "\n".join(lines)
    assert "Probot not available" in text and "x floor" in text and "RSS" in text
    assert f"{figures['rate_count']:,.0f} deliveries a side" in text


def test_the_mix_is_signed_and_every_body_differs() -> None:
    deliveries = ingest.Deliveries(subjects=3)
    requests = deliveries.make(len(ingest.MIX) * 2, "t")
    assert ingest._ids([head for head, _ in requests]) == {
        f"t-{n}" for n in range(1, len(requests) + 1)
    }
    names = {head.split(b"x-github-event: ")[1].split(b"\r\n")[0] for head, _ in requests}
    assert len(names) == len({name for name, _ in ingest.MIX}) == 8
    head, body = requests[0]
    assert f"content-length: {len(body)}".encode() in head
    assert len({body for _, body in requests}) == len(requests)


def test_a_run_where_no_sustained_rate_held_says_so_without_a_ratio() -> None:
    # every other figure the summary reads: 1.0
    figures = defaultdict(lambda: 1.0, sustained_rps=0.0, ours_drain_rps=3000.0, sustain_s=60.0)
    (row,) = [r for r in ingest.summarize(figures) if r[0].startswith("ingest sustained")]
    assert row[1] == "none of the rates tried"
    assert row[2] == "decided alone while draining: 3,000/s"
    held = ingest.summarize(figures | {"sustained_rps": 500.0, "floor_rps": 2000.0})
    (row,) = [r for r in held if r[0].startswith("ingest sustained")]
    assert row[1] == "500/s (backlog peak 1)"
    assert row[2].startswith("0.25x the floor's saturated rate; ")


def test_the_floor_and_bare_servers_collect_garbage_as_autoloop_serve_does() -> None:
    assert ingest_sides.GC_YOUNG == serve.GC_YOUNG
