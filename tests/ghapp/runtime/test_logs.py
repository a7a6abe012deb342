"""Logging: whatever a record carries, handlers only ever see it redacted."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ghapp.runtime.logs import (
    batch_lines,
    configure_logging,
    get_logger,
    info_line,
    reset_logging,
)
from ghapp.runtime.redact import Redactor
from tests import paths

CORPUS = paths.FIXTURES / "secrets"
MANIFEST: dict[str, Any] = json.loads((CORPUS / "manifest.json").read_text())
REDACTOR = Redactor(MANIFEST["extra_values"])
ENV_FILE = (CORPUS / "app.env").read_text()
ENV_SECRETS = [entry["value"] for entry in MANIFEST["planted"]["app.env"]]
HOOK = next(v for v in MANIFEST["extra_values"] if v.isalnum() and len(v) == 32)


def leaks(output: str, secrets: list[str]) -> list[str]:
    """Secrets (or any 12-character slice of one) found in output."""
    return [s for s in secrets if any(s[i : i + 12] in output for i in range(max(1, len(s) - 11)))]


@pytest.fixture(autouse=True)
def clean_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    reset_logging()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_the_check_sees_the_secrets_when_nothing_redacts() -> None:
    assert len(leaks(ENV_FILE, ENV_SECRETS)) == len(ENV_SECRETS) > 10


def test_messages_arguments_and_exceptions_are_redacted_in_text_output() -> None:
    out = io.StringIO()
    configure_logging("INFO", REDACTOR, stream=out)
    log = get_logger("ghapp.test")
    log.info("environment of the failed turn:\n%s", ENV_FILE)
    log.warning("webhook secret was %r", HOOK)
    try:
        raise RuntimeError("agent crashed with " + ENV_SECRETS[0])
    except RuntimeError:
        log.exception("turn failed")
    log.debug("not shown at INFO %s", ENV_SECRETS[1])
    text = out.getvalue()
    assert leaks(text, [*ENV_SECRETS, HOOK]) == []
    assert "environment of the failed turn" in text and "turn failed" in text
    assert "RuntimeError: agent crashed with [REDACTED:github-token]" in text
    assert "webhook secret was '[REDACTED:value]'" in text
    assert "not shown" not in text


def test_json_output_is_one_redacted_object_per_line_with_extra_fields() -> None:
    out = io.StringIO()
    configure_logging(logging.DEBUG, REDACTOR, json=True, stream=out)
    log = get_logger("ghapp.worker")
    log.info("claimed %d events", 3, extra={"token": "plain-token-value", "turn": "t-1"})
    log.error("bad header %s", "Authorization: Bearer " + ENV_SECRETS[0])
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["msg"] for line in lines] == [
        "claimed 3 events",
        "bad header Authorization: Bearer [REDACTED:authorization]",
    ]
    assert lines[0]["token"] == "[REDACTED:secret]" and lines[0]["turn"] == "t-1"
    assert lines[0]["level"] == "INFO" and lines[0]["logger"] == "ghapp.worker"
    assert "plain-token-value" not in out.getvalue()


def test_handlers_added_by_other_code_also_get_redacted_records(
    caplog: pytest.LogCaptureFixture,
) -> None:
    configure_logging("INFO", REDACTOR, stream=io.StringIO())
    theirs = io.StringIO()
    other = logging.getLogger("some.library")
    handler = logging.StreamHandler(theirs)
    other.addHandler(handler)
    try:
        with caplog.at_level(logging.INFO):
            other.info("connecting with %s", ENV_FILE)
    finally:
        other.removeHandler(handler)
    assert "connecting with" in theirs.getvalue()
    assert leaks(theirs.getvalue(), ENV_SECRETS) == []
    assert leaks(caplog.text, ENV_SECRETS) == []


def test_configuring_again_replaces_the_handler_and_reset_undoes_it() -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    configure_logging("INFO", REDACTOR, stream=io.StringIO())
    second = configure_logging("INFO", Redactor(), stream=io.StringIO())
    assert [h for h in root.handlers if h not in before] == [second]
    reset_logging()
    assert root.handlers == before
    record = logging.makeLogRecord({"msg": "raw %s", "args": (HOOK,)})
    assert HOOK in record.getMessage()


def test_a_bad_format_string_still_logs_and_stays_redacted() -> None:
    out = io.StringIO()
    configure_logging("INFO", REDACTOR, stream=out)
    get_logger("ghapp.test").info("two %s %s", ENV_SECRETS[0])
    assert "unformattable" in out.getvalue()
    assert leaks(out.getvalue(), ENV_SECRETS) == []


def test_an_unknown_level_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown log level 'LOUD'; use one of DEBUG"):
        configure_logging("LOUD", REDACTOR)


def test_a_message_changed_after_the_record_was_made_is_redacted_by_the_text_format() -> None:
    # The text format skips a second redaction only for the message the record factory
    # redacted itself; a filter that rewrites the message afterwards gets redacted too.
    out = io.StringIO()
    handler = configure_logging("INFO", REDACTOR, stream=out)

    def rewrite(record: logging.LogRecord) -> bool:
        record.msg = f"rewritten with {HOOK}"
        return True

    handler.addFilter(rewrite)
    get_logger("ghapp.test").info("plain")
    assert HOOK not in out.getvalue()
    assert "rewritten with [REDACTED:value]" in out.getvalue()


def test_the_text_line_is_stamped_in_utc_to_the_millisecond() -> None:
    out = io.StringIO()
    configure_logging("INFO", REDACTOR, stream=out)
    get_logger("ghapp.test").info("first")
    get_logger("ghapp.test").info("second")
    lines = out.getvalue().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        "INFO ghapp.test: first",
        "INFO ghapp.test: second",
    ]
    stamp = lines[0].split(" ", 1)[0]
    parsed = datetime.fromisoformat(stamp)
    assert parsed.utcoffset() == timedelta(0) and len(stamp) == len("2026-12-01T23:31:43.018+00:00")
    assert abs((datetime.now(UTC) - parsed).total_seconds()) < 60


def test_batched_info_lines_are_written_together_and_a_warning_at_once_after_them() -> None:
    out = io.StringIO()
    configure_logging("INFO", REDACTOR, stream=out)
    log = get_logger("ghapp.test")
    log.info("at once")  # not batched until asked (every command but serve)
    assert "at once" in out.getvalue()
    batch_lines(60.0)  # longer than the test: only a warning, flush or close writes
    log.info("first %s", ENV_SECRETS[0])
    log.info("second")
    assert "first" not in out.getvalue()
    log.warning("third")
    text = out.getvalue()
    assert text.index("first") < text.index("second") < text.index("third")
    assert leaks(text, ENV_SECRETS) == []
    log.info("fourth")
    assert "fourth" not in out.getvalue()
    logging.getLogger().handlers[-1].flush()  # as logging.shutdown() does at exit
    assert out.getvalue().endswith("ghapp.test: fourth\n")


def test_batched_lines_are_written_within_their_delay() -> None:
    out = io.StringIO()
    configure_logging("INFO", REDACTOR, stream=out)
    batch_lines(0.05)
    get_logger("ghapp.test").info("soon")
    deadline = time.monotonic() + 10
    while "soon" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "soon" in out.getvalue()


def test_reset_writes_the_batched_lines_before_the_handler_goes() -> None:
    out = io.StringIO()
    configure_logging("INFO", REDACTOR, stream=out)
    batch_lines(60.0)
    get_logger("ghapp.test").info("last words")
    reset_logging()
    assert "last words" in out.getvalue()


def test_an_info_line_handed_straight_to_the_batching_handler_reads_as_a_logged_one() -> None:
    out = io.StringIO()
    configure_logging("INFO", REDACTOR, stream=out)
    batch_lines(60.0)
    log = get_logger("autoloop.webhook")
    log.info("webhook issues delivery d-1: 200 in 1.0 ms %s", ENV_SECRETS[0])
    info_line(log, f"webhook issues delivery d-2: 200 in 1.0 ms {ENV_SECRETS[0]}", {"status": 200})
    reset_logging()
    logged, direct = out.getvalue().splitlines()
    assert leaks(out.getvalue(), ENV_SECRETS) == []
    # the same shape: time to the millisecond, level, logger, the redacted message
    assert logged[:11] == direct[:11] and len(logged.split(" ")[0]) == len(direct.split(" ")[0])
    assert logged.split(" ", 1)[1].replace("d-1", "d-2") == direct.split(" ", 1)[1]


def test_an_info_line_goes_through_logging_when_another_handler_listens() -> None:
    out = io.StringIO()
    configure_logging("INFO", REDACTOR, stream=out)
    batch_lines(60.0)
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    keep = Keep()
    logging.getLogger().addHandler(keep)  # as pytest's caplog does
    try:
        info_line(get_logger("autoloop.webhook"), "webhook ping delivery d-3", {"status": 200})
    finally:
        logging.getLogger().removeHandler(keep)
    assert [(r.getMessage(), r.status) for r in seen] == [("webhook ping delivery d-3", 200)]  # type: ignore[attr-defined]
    get_logger("autoloop.webhook").setLevel(logging.WARNING)
    try:
        info_line(get_logger("autoloop.webhook"), "not at this level", {})
    finally:
        get_logger("autoloop.webhook").setLevel(logging.NOTSET)
    reset_logging()
    assert "d-3" in out.getvalue() and "not at this level" not in out.getvalue()


def test_a_control_character_in_a_log_line_is_shown_escaped() -> None:
    """An issue title or a request header with ESC in it drives no terminal that shows
    the log: in a record's message, its arguments, and the server's line per webhook."""
    out = io.StringIO()
    configure_logging("INFO", REDACTOR, stream=out)
    log = get_logger("ghapp.test")
    log.info("issue opened: %s", "Crash\x1b[2J\x1b]0;pwned\x07 on start")
    log.info("from the message itself\r\x1b[1A")
    batch_lines(60.0)  # as 'autoloop serve': the line per webhook skips the LogRecord
    info_line(log, "webhook x\x1b[31my", {})
    logging.getLogger().handlers[-1].flush()
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "issue opened: Crash\\x1b[2J\\x1b]0;pwned\\x07 on start" in text
    assert "from the message itself\\r\\x1b[1A" in text
    assert text.endswith("ghapp.test: webhook x\\x1b[31my\n")
