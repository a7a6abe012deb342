"""What ``GET /metrics`` shows, in Prometheus' text format (written by ``prometheus_client``,
every metric with its ``# HELP``).

The server counts webhook deliveries and keeps recent acknowledgement latencies in
:class:`Metrics`; :func:`render_metrics` adds the ingest queue's group commits and the
ledger's turns, cards and outbox actions by state. The page answers even when the
ledger does not (``autoloop_ledger_up 0``). With the webhook inbox (a SQLite ledger),
its commits, deliveries appended and decided, the backlog and the lag from ack to
decision are there too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # prometheus_client loads at the first scrape: an idle server stays small
    from prometheus_client.core import Metric

    from ghapp.runtime.inbox import Inbox
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


#: What each counter of :class:`Metrics` counts, for its ``# HELP`` line.
COUNTERS = {
    "webhook_deliveries": "GitHub webhook deliveries verified and recorded (or found duplicate)",
    "webhook_refused": "GitHub webhook deliveries refused before verification (size, length)",
    "webhook_bad_signature": "GitHub webhook deliveries refused: the signature did not match",
    "events_recorded": "events recorded from webhooks",
    "events_duplicate": "events of webhooks already recorded (redeliveries)",
}
_KINDS = {
    "turn": ("turns", "agent turns in the ledger, by state"),
    "card": ("cards", "cards in the ledger, by state"),
    "action": ("outbox_actions", "write-backs in the outbox, by state"),
}


class _Collector:
    """Reads the server's counters, the ingest queue and the ledger at each scrape."""

    def __init__(
        self, metrics: Metrics, ingest: IngestQueue, store: Store, inbox: Inbox | None
    ) -> None:
        self.metrics, self.ingest, self.store, self.inbox = metrics, ingest, store, inbox

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # noqa: PLC0415

        for name, value in sorted(self.metrics.counters.items()):
            base = name.removesuffix("_total")
            doc = COUNTERS.get(base, base.replace("_", " "))
            yield CounterMetricFamily(f"autoloop_{base}", doc, value=value)
        yield CounterMetricFamily(
            "autoloop_ingest_commits",
            "ledger commits made by the ingest queue (one per group of requests)",
            value=self.ingest.batches,
        )
        yield CounterMetricFamily(
            "autoloop_ingest_requests",
            "requests the ingest queue committed",
            value=self.ingest.items,
        )
        if self.inbox is not None:
            yield from _inbox_metrics(self.inbox)
        lat = sorted(self.metrics.latencies)
        if lat:
            ack = GaugeMetricFamily(
                "autoloop_webhook_ack_seconds",
                "seconds from a webhook's arrival to its answer, quantiles of recent ones",
                labels=["quantile"],
            )
            for q in (0.5, 0.9, 0.99):
                ack.add_metric([str(q)], lat[int(q * (len(lat) - 1))])
            yield ack
        up = GaugeMetricFamily("autoloop_ledger_up", "1 when the ledger answered this scrape")
        try:
            with self.store.read() as tx:
                counts: dict[str, dict[str, int]] = {}
                for kind in _KINDS:
                    for rec in tx.query(kind):
                        st = str(getattr(rec, "state", getattr(rec, "status", "")))
                        by_state = counts.setdefault(kind, {})
                        by_state[st] = by_state.get(st, 0) + 1
                facts = tx.fact_count()
        except Exception:  # the metrics page must answer even when the ledger does not
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield GaugeMetricFamily("autoloop_facts", "facts in the ledger", value=facts)
        for kind, (name, doc) in _KINDS.items():
            family = GaugeMetricFamily(f"autoloop_{name}", doc, labels=["state"])
            for st, n in sorted(counts.get(kind, {}).items()):
                family.add_metric([st], n)
            yield family


def _inbox_metrics(inbox: Inbox) -> Iterator[Metric]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # noqa: PLC0415

    st = inbox.stats
    yield CounterMetricFamily(
        "autoloop_inbox_commits",
        "inbox commits that acknowledged webhooks (one per group of requests)",
        value=st.groups,
    )
    yield CounterMetricFamily(
        "autoloop_inbox_appended", "webhook deliveries appended to the inbox", value=st.acked
    )
    yield CounterMetricFamily(
        "autoloop_inbox_decided", "inbox deliveries decided into the ledger", value=st.decided
    )
    yield GaugeMetricFamily(
        "autoloop_inbox_waiting",
        "deliveries acknowledged and not decided yet",
        value=inbox.waiting(),
    )
    lag = sorted(st.lag)
    family = GaugeMetricFamily(
        "autoloop_inbox_lag_seconds",
        "seconds from a delivery's ack to its events in the ledger, recent quantiles",
        labels=["quantile"],
    )
    for q in (0.5, 0.9, 0.99) if lag else ():  # none yet: the family is listed, empty
        family.add_metric([str(q)], lag[int(q * (len(lag) - 1))])
    yield family


def render_metrics(
    metrics: Metrics, ingest: IngestQueue, store: Store, inbox: Inbox | None = None
) -> str:
    """The page (Prometheus text, by ``prometheus_client``): the server's counters, the
    ingest queue's group commits, webhook acknowledgement latency, and the ledger's
    turns, cards and outbox actions by state."""
    from prometheus_client import CollectorRegistry, generate_latest  # noqa: PLC0415

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(metrics, ingest, store, inbox))
    return generate_latest(registry).decode()
