"""A single background thread that runs callbacks after a delay, in time order."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable


class Scheduler:
    def __init__(self, on_error: Callable[[BaseException], None] | None = None) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._counter = itertools.count()
        self._cond = threading.Condition()
        self._running = 0
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.errors: list[BaseException] = []
        self._on_error = on_error

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sandbox-world", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def later(self, delay: float, callback: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._counter), callback))
            self._cond.notify_all()

    def idle(self) -> bool:
        with self._cond:
            return not self._heap and self._running == 0

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout=wait)
                if self._stopped:
                    return
                _, _, callback = heapq.heappop(self._heap)
                self._running += 1
            try:
                callback()
            except Exception as exc:  # a scripted step failing must not stop the world
                self.errors.append(exc)
                if self._on_error is not None:
                    self._on_error(exc)
            finally:
                with self._cond:
                    self._running -= 1
