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
import threading
import time
from datetime import UTC, datetime
from typing import Any

from ghapp.runtime.redact import Redactor
from kernel.text import for_terminal

__all__ = ["batch_lines", "configure_logging", "get_logger", "info_line", "reset_logging"]

_ORIGINAL_FACTORY = logging.getLogRecordFactory()
_ORIGINAL_SRCFILE = logging._srcfile  # restored by reset_logging
_ORIGINAL_FLAGS = (logging.logThreads, logging.logProcesses, logging.logMultiprocessing)
_HANDLER_NAME = "autoloop"
MAX_PENDING = 256  # batched INFO lines wait until this many wait, at most
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
    handler = _BatchedStreamHandler(sys.stderr if stream is None else stream)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(_JsonFormatter(redactor) if json else _TextFormatter(redactor))
    root = logging.getLogger()
    _remove_our_handlers(root)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler


def info_line(logger: logging.Logger, message: str, fields: dict[str, Any]) -> None:
    """Log ``message`` at INFO on ``logger``, with ``fields`` as the record's extras (the
    line per webhook comes here). When the only handler it would reach is ours, in the
    text format and batching (``autoloop serve``), the line is formatted and redacted
    here and handed to it, without a ``LogRecord`` (measured in the server: the line
    per webhook cost 43 us of the 310 us a delivery took; the same line, the same
    redaction). Anything else (JSON, a handler or filter added by other code or a test,
    another level) goes through ``logging`` as before."""
    handlers = logging.root.handlers
    handler = handlers[0] if len(handlers) == 1 else None
    if (
        type(handler) is _BatchedStreamHandler
        and handler.batch_s > 0
        and not handler.filters
        and type(handler.formatter) is _TextFormatter
        and logger.isEnabledFor(logging.INFO)
        and _only_root_handles(logger)
    ):
        handler.write_line(handler.formatter.line(logger.name, message))
        return
    logger.info("%s", message, extra=fields)


def _only_root_handles(logger: logging.Logger) -> bool:
    """Nothing between ``logger`` and the root logger handles or filters a record."""
    node: logging.Logger | None = logger
    while node is not None and node is not logging.root:
        if node.handlers or node.filters or node.disabled or not node.propagate:
            return False
        node = node.parent
    return not logging.root.filters


def batch_lines(seconds: float) -> None:
    """Let INFO and DEBUG lines wait up to ``seconds`` to be written together (0: each
    at once, the default); see :class:`_BatchedStreamHandler`."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, _BatchedStreamHandler):
            handler.flush()
            handler.batch_s = seconds


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


class _BatchedStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]  # of a text stream
    """A stream handler that, once :func:`batch_lines` asked it to (``autoloop serve``
    does), writes INFO and DEBUG lines at most ``batch_s`` after they were logged, many
    in one write, and a WARNING or worse at once (with what was waiting before it, in
    order). Until then, or with ``batch_s`` 0, every line is written at once.

    A write to stderr is a system call, and Python gives up the GIL around it: with a
    line per webhook, every request cost the event loop a hand-off of the GIL to the
    inbox's threads and back (measured: 16 connections, one core, 2,969 -> 3,587
    deliveries/s without the line; this handler keeps the line and most of the gain).
    The price: a process killed with SIGKILL loses the INFO lines of its last
    ``batch_s`` (never a warning or an error, which are written before ``emit``
    returns); a normal exit, ``flush`` and ``close`` write everything.
    """

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.batch_s = 0.0
        self._closing = False
        self._pending: list[str] = []
        self._due = threading.Event()
        self._flusher: threading.Thread | None = None

    def emit(self, record: logging.LogRecord) -> None:  # called with self.lock held
        try:
            line = self.format(record)
            self._queue(line, at_once=record.levelno >= logging.WARNING or self.batch_s <= 0)
        except RecursionError:  # as logging's own handlers
            raise
        except Exception:  # logging reports it on stderr, as for any handler
            self.handleError(record)

    def write_line(self, line: str) -> None:
        """An INFO line already formatted and redacted (:func:`info_line`)."""
        self.acquire()
        try:
            self._queue(line, at_once=False)
        finally:
            self.release()

    def _queue(self, line: str, *, at_once: bool) -> None:
        """Add ``line``; write what waits now, or let the flusher do it (lock held)."""
        self._pending.append(line + self.terminator)
        if at_once or len(self._pending) >= MAX_PENDING:
            self._write_pending()
        elif len(self._pending) == 1:
            if self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._flush_loop, name="log-flush", daemon=True
                )
                self._flusher.start()
            self._due.set()

    def _write_pending(self) -> None:
        if self._pending:
            text, self._pending = "".join(self._pending), []
            self.stream.write(text)
        super().flush()

    def _flush_loop(self) -> None:
        while not self._closing:
            self._due.wait()
            time.sleep(self.batch_s)
            self._due.clear()
            self.flush()

    def close(self) -> None:
        self._closing = True
        self.flush()
        self._due.set()  # the flusher ends
        super().close()

    def flush(self) -> None:
        self.acquire()
        try:
            if self.stream is not None and not getattr(self.stream, "closed", False):
                self._write_pending()
        finally:
            self.release()


class _TextFormatter(logging.Formatter):
    def __init__(self, redactor: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._redactor = redactor
        self._second = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        clean = (
            getattr(record, "_redacted", None) is record.msg
            and record.args is None
            and not record.exc_text
            and not record.stack_info
        )
        # a title or header written by others drives no terminal that shows the log
        return for_terminal(line if clean else self._redactor.redact(line))

    def line(self, name: str, message: str) -> str:
        """The INFO line :meth:`format` would write for ``message`` on logger ``name``,
        now, redacted."""
        text = for_terminal(self._redactor.redact(message))
        return f"{self._stamp(time.time())} INFO {name}: {text}"

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return self._stamp(record.created)

    def _stamp(self, created: float) -> str:
        second = int(created)
        cached, text = self._second  # one tuple: two threads may stamp lines at once
        if second != cached:  # "2026-12-01T23:31:43"
            text = datetime.fromtimestamp(second, tz=UTC).isoformat(timespec="seconds")[:-6]
            self._second = (second, text)
        ms = int((created - second) * 1000)
        return f"{text}.{ms:03d}+00:00"


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
