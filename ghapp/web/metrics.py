"""What ``GET /metrics`` shows, in Prometheus' text format.

The server counts webhook deliveries and keeps recent acknowledgement latencies in
:class:`Metrics`; :func:`render_metrics` adds the ingest queue's group commits and the
ledger's turns, cards and outbox actions by state. The page answers even when the
ledger does not (``autoloop_ledger_up 0``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ghapp.runtime.ingest import IngestQueue
from ghapp.store.base import Store

__all__ = ["Metrics", "render_metrics"]


@dataclass
class Metrics:
    counters: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)

    def inc(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def observe(self, seconds: float) -> None:
        self.latencies.append(seconds)
        if len(self.latencies) > 10_000:
            del self.latencies[:5_000]


def render_metrics(metrics: Metrics, ingest: IngestQueue, store: Store) -> str:
    """The page: the server's counters, the ingest queue's group commits, webhook
    acknowledgement latency, and the ledger's turns, cards and outbox actions by state."""
    lines: list[str] = []
    for name, value in sorted(metrics.counters.items()):
        lines.append(f"# TYPE autoloop_{name} counter")
        lines.append(f"autoloop_{name} {value}")
    lines.append("# TYPE autoloop_ingest_commits_total counter")
    lines.append(f"autoloop_ingest_commits_total {ingest.batches}")
    lines.append("# TYPE autoloop_ingest_requests_total counter")
    lines.append(f"autoloop_ingest_requests_total {ingest.items}")
    lat = sorted(metrics.latencies)
    if lat:
        lines.append("# TYPE autoloop_webhook_ack_seconds summary")
        for q in (0.5, 0.9, 0.99):
            lines.append(
                f'autoloop_webhook_ack_seconds{{quantile="{q}"}} {lat[int(q * (len(lat) - 1))]:.6f}'
            )
        lines.append(f"autoloop_webhook_ack_seconds_count {len(lat)}")
    try:
        with store.read() as tx:
            counts: dict[str, dict[str, int]] = {}
            for kind in ("turn", "card", "action"):
                for rec in tx.query(kind):
                    st = str(getattr(rec, "state", getattr(rec, "status", "")))
                    counts.setdefault(kind, {})[st] = counts.setdefault(kind, {}).get(st, 0) + 1
            facts = tx.fact_count()
    except Exception:  # the metrics page must answer even when the ledger does not
        return "\n".join(lines) + "\nautoloop_ledger_up 0\n"
    lines.append("autoloop_ledger_up 1")
    lines.append(f"autoloop_facts_total {facts}")
    names = {"turn": "turns", "card": "cards", "action": "outbox_actions"}
    for kind, by_state in sorted(counts.items()):
        lines.append(f"# TYPE autoloop_{names[kind]} gauge")
        for st, n in sorted(by_state.items()):
            lines.append(f'autoloop_{names[kind]}{{state="{st}"}} {n}')
    return "\n".join(lines) + "\n"
