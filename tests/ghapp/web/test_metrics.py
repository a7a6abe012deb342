"""``GET /metrics``: Prometheus text written by prometheus_client, each metric explained."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.ghapp.web.test_app import ENV, FIXTURES, RULES, post
from tests.servers import live_server


def test_every_metric_has_help_and_the_page_parses(tmp_path: Path) -> None:
    body = (FIXTURES / "issues" / "opened.json").read_bytes()
    with live_server(tmp_path / "h", RULES, env=ENV, start_worker=False) as live:
        post(live.url, "issues", body)
        text = httpx.get(f"{live.url}/metrics").text
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    helps = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")}
    assert types and set(types) == helps
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["autoloop_webhook_deliveries"].type == "counter"
    assert families["autoloop_webhook_deliveries"].samples[0].value == 1
    assert families["autoloop_ledger_up"].samples[0].value == 1
    quantiles = {s.labels["quantile"] for s in families["autoloop_webhook_ack_seconds"].samples}
    assert quantiles == {"0.5", "0.9", "0.99"}
