"""One log line per received webhook: event, delivery, status and milliseconds.

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

__all__ = ["WebhookLog"]

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
        event, delivery = _cut(event), _cut(delivery)
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
