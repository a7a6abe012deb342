"""Every log record of a test's server, ours and uvicorn's (which do not reach the root)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Records", "logs"]


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def logs() -> Iterator[Records]:
    """Every record of our loggers and of uvicorn's (which do not reach the root)."""
    handler = Records()
    names = ("", "uvicorn", "uvicorn.error")
    for name in names:
        logging.getLogger(name).addHandler(handler)
    old = logging.getLogger().level
    logging.getLogger().setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logging.getLogger().setLevel(old)
        for name in names:
            logging.getLogger(name).removeHandler(handler)
