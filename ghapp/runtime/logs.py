"""Logging for the shell, with every record redacted before any handler writes it.

::

    configure_logging("INFO", redactor)             # once, at start-up
    configure_logging("DEBUG", redactor, json=True)  # one JSON object per line instead
    log = get_logger(__name__)
    log.info("minted %s", token)                     # written as "minted [REDACTED:...]"

:func:`configure_logging` does two things. It wraps the log-record factory, so that each
record's message (with its ``%`` arguments merged in), its exception text and its stack
text are redacted when the record is made: every handler sees only redacted records,
also handlers added later by other code or by tests. And it installs one stderr handler
on the root logger whose formatter redacts the final line once more, which covers
anything a formatter adds (fields passed with ``extra=``). Calling it again replaces
the previous handler and redactor; :func:`reset_logging` undoes it.

A line per webhook is the busiest record (hundreds a second), so the text format skips
what it does not need: a record whose message the factory redacted and nobody changed
since is not redacted a second time (the text line adds only the time, the level and the
logger's name), the time's second is formatted once a second, and the caller's file
and line, thread and process, which no format here writes, are not looked up (as the
logging documentation's section on optimization suggests).
"""

from __future__ import annotations

import json as jsonlib
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from ghapp.runtime.redact import Redactor

__all__ = ["configure_logging", "get_logger", "reset_logging"]

_ORIGINAL_FACTORY = logging.getLogRecordFactory()
_ORIGINAL_SRCFILE = logging._srcfile  # restored by reset_logging
_ORIGINAL_FLAGS = (logging.logThreads, logging.logProcesses, logging.logMultiprocessing)
_HANDLER_NAME = "autoloop"
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def get_logger(name: str) -> logging.Logger:
    """The logger for one module of the shell (pass ``__name__``)."""
    return logging.getLogger(name)


def configure_logging(
    level: int | str, redactor: Redactor, json: bool = False, stream: Any = None
) -> logging.Handler:
    """Route all logging to ``stream`` (stderr) at ``level``, redacted by ``redactor``.

    Returns the installed handler. ``level`` is a number or a name such as ``"INFO"``.
    """
    if isinstance(level, str) and level.upper() not in logging.getLevelNamesMapping():
        raise ValueError(
            f"unknown log level {level!r}; use one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
        )
    logging.setLogRecordFactory(_redacting_factory(redactor))
    logging._srcfile = None  # no caller lookup: no format here writes it
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(_JsonFormatter(redactor) if json else _TextFormatter(redactor))
    root = logging.getLogger()
    _remove_our_handlers(root)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler


def reset_logging() -> None:
    """Remove what :func:`configure_logging` installed."""
    logging.setLogRecordFactory(_ORIGINAL_FACTORY)
    logging._srcfile = _ORIGINAL_SRCFILE  # as it was
    logging.logThreads, logging.logProcesses, logging.logMultiprocessing = _ORIGINAL_FLAGS
    _remove_our_handlers(logging.getLogger())


def _remove_our_handlers(root: logging.Logger) -> None:
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
        old.close()


def _redacting_factory(redactor: Redactor) -> Any:
    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = _ORIGINAL_FACTORY(*args, **kwargs)
        redact_record(record, redactor)
        return record

    return factory


def redact_record(record: logging.LogRecord, redactor: Redactor) -> None:
    """Fold the arguments into the message and redact it, the exception and the stack."""
    try:
        message = record.getMessage()
    except (TypeError, ValueError) as exc:  # a bad format string must not hide the record
        message = f"{record.msg!r} (unformattable with its arguments: {exc})"
    record.msg = redactor.redact(message)
    record.args = None
    record._redacted = record.msg  # what the formatter need not redact again (the same object)
    if record.exc_info:
        text = logging.Formatter().formatException(record.exc_info)
        record.exc_text = redactor.redact(text)
        record.exc_info = None  # formatters use exc_text; nothing can format it raw again
    elif record.exc_text:
        record.exc_text = redactor.redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redactor.redact(record.stack_info)


class _TextFormatter(logging.Formatter):
    def __init__(self, redactor: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._redactor = redactor
        self._second = -1
        self._second_text = ""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        clean = (
            getattr(record, "_redacted", None) is record.msg
            and record.args is None
            and not record.exc_text
            and not record.stack_info
        )
        return line if clean else self._redactor.redact(line)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        if second != self._second:  # "2026-12-01T23:31:43"
            text = datetime.fromtimestamp(second, tz=UTC).isoformat(timespec="seconds")
            self._second, self._second_text = second, text[:-6]
        ms = int((record.created - second) * 1000)
        return f"{self._second_text}.{ms:03d}+00:00"


class _JsonFormatter(logging.Formatter):
    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self._redactor = redactor

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            doc["exc"] = record.exc_text
        if record.stack_info:
            doc["stack"] = record.stack_info
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value
        safe = self._redactor.redact_obj(doc)
        return jsonlib.dumps(safe, default=lambda v: self._redactor.redact(repr(v)))
