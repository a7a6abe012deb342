"""One log line per received webhook (event, delivery, status and milliseconds), and per
request to a signed source (:class:`SourceLog`: source, event id, status, milliseconds).

::

    INFO autoloop.webhook: webhook issues delivery 72d3162e-...: 200 in 3.1 ms
    WARNING autoloop.webhook: webhook issues delivery 72d3162e-...: 401 in 0.4 ms:
        its X-Hub-Signature-256 does not match AUTOLOOP_GITHUB_WEBHOOK_SECRET; ...

The fields also ride on the record (``extra``), so ``AUTOLOOP_LOG_FORMAT=json`` gives
them as keys. A bad signature is a WARNING that says the secret does not match, at most
once a minute (a wrong secret refuses every delivery; the others of that minute are
counted in the next warning and logged at INFO like any webhook).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ghapp.runtime.logs import info_line
from kernel.text import escaped_line

__all__ = ["SourceLog", "WebhookLog"]

log = logging.getLogger("autoloop.webhook")

BAD_SIGNATURE = (
    "its X-Hub-Signature-256 does not match AUTOLOOP_GITHUB_WEBHOOK_SECRET; it must be the "
    "webhook secret of the App's settings page (the delivery was refused, nothing stored)"
)


HEADER_SHOWN = 100  # characters of a header value a log line shows


def _cut(value: str) -> str:
    return value if len(value) <= HEADER_SHOWN else f"{value[:HEADER_SHOWN]}...({len(value)})"


class WebhookLog:
    def __init__(
        self, *, warn_every_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.warn_every_s = warn_every_s
        self.clock = clock
        self._lock = threading.Lock()
        self._warned_at: float | None = None
        self._unwarned = 0  # bad signatures since the last warning

    def received(self, event: str, delivery: str, status: int, ms: float, error: str = "") -> None:
        """Log one received webhook; ``error`` is what the answer said went wrong. The
        event and delivery are headers anyone may send (signed or not): each is cut to
        :data:`HEADER_SHOWN` characters (a 60,000-character header made as long a line)."""
        event, delivery = escaped_line(_cut(event)), escaped_line(_cut(delivery))
        fields = {"event": event, "delivery": delivery, "status": status, "ms": round(ms, 1)}
        line = f"webhook {event or '?'} delivery {delivery or '?'}: {status} in {ms:.1f} ms"
        if status == 401 and self._warn_now():
            with self._lock:
                more, self._unwarned = self._unwarned, 0
            since = f" ({more} more refused since the last warning)" if more else ""
            log.warning("%s: %s%s", line, BAD_SIGNATURE, since, extra=fields)
            return
        if status == 401:
            with self._lock:
                self._unwarned += 1
        info_line(log, f"{line}: {error}" if error else line, fields)

    def _warn_now(self) -> bool:
        now = self.clock()
        with self._lock:
            if self._warned_at is not None and now - self._warned_at < self.warn_every_s:
                return False
            self._warned_at = now
            return True


class SourceLog(WebhookLog):
    """The same line for each request to a signed source (``POST /v1/in/NAME``): its
    name, the event's id when the body was read, the status, the time and what went
    wrong; a bad signature is a WARNING at most once a minute, naming the header and the
    variable its secret is read from (an operator debugging a sender had no line)."""

    def request(
        self, source: str, event_id: str, status: int, ms: float, error: str = "", *,
        header: str = "", secret_var: str = "",
    ) -> None:  # fmt: skip
        source, event_id = escaped_line(_cut(source)), escaped_line(_cut(event_id))
        error = escaped_line(error)
        fields = {"source": source, "event_id": event_id, "status": status, "ms": round(ms, 1)}
        line = f"source {source} event {event_id or '?'}: {status} in {ms:.1f} ms"
        if status == 401 and secret_var and self._warn_now():
            with self._lock:
                more, self._unwarned = self._unwarned, 0
            since = f" ({more} more refused since the last warning)" if more else ""
            log.warning(
                "%s: its %s is not the HMAC-SHA256 of the body under %s; the sender must "
                "sign with the same secret (refused, nothing stored)%s",
                line, header, secret_var, since, extra=fields,
            )  # fmt: skip
            return
        if status == 401:
            with self._lock:
                self._unwarned += 1
        info_line(log, f"{line}: {error}" if error else line, fields)
