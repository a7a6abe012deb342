"""The fuzz targets in CI (a slice), the long run (``--slow``), and atheris when installed.

See :mod:`tests.fuzz`: no input may make an exception escape, an HTTP status of 500 or
more, or a traceback in an answer or the logs.
"""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests import paths
from tests.fuzz.driver import run
from tests.fuzz.targets import (
    TARGETS,
    CardPages,
    LinkVerifier,
    ReceiptParser,
    RulesLoader,
    Source,
    Target,
    Webhook,
)
from tests.stores import pg_schema

SLICE = 150  # inputs per target in CI


def entered(target: Target) -> Iterator[Target]:
    with target:
        yield target


@pytest.fixture(scope="module")
def webhook() -> Iterator[Target]:
    yield from entered(Webhook())


@pytest.fixture(scope="module")
def source() -> Iterator[Target]:
    yield from entered(Source())


@pytest.fixture(scope="module")
def cards() -> Iterator[Target]:
    yield from entered(CardPages())


@pytest.fixture(scope="module")
def receipt() -> Iterator[Target]:
    yield from entered(ReceiptParser())


@pytest.fixture(scope="module")
def rules() -> Iterator[Target]:
    yield from entered(RulesLoader())


@pytest.fixture(scope="module")
def links() -> Iterator[Target]:
    yield from entered(LinkVerifier())


SLICE_SETTINGS = settings(
    max_examples=SLICE,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SLICE_SETTINGS
@given(data=Webhook().strategy())
def test_no_webhook_gets_a_5xx_or_a_traceback(webhook: Target, data: object) -> None:
    webhook.check(data)


@SLICE_SETTINGS
@given(data=Source().strategy())
def test_no_source_event_gets_a_5xx_or_a_traceback(source: Target, data: object) -> None:
    source.check(data)


@SLICE_SETTINGS
@given(data=CardPages().strategy())
def test_no_card_page_request_gets_a_5xx_or_a_traceback(cards: Target, data: object) -> None:
    cards.check(data)


@SLICE_SETTINGS
@given(data=ReceiptParser().strategy())
def test_the_receipt_parser_never_raises(receipt: Target, data: object) -> None:
    receipt.check(data)


@SLICE_SETTINGS
@given(data=RulesLoader().strategy())
def test_the_rules_loader_gives_rules_or_one_line(rules: Target, data: object) -> None:
    rules.check(data)


@SLICE_SETTINGS
@given(data=LinkVerifier().strategy())
def test_only_issued_unexpired_links_verify(links: Target, data: object) -> None:
    links.check(data)


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with pg_schema() as url:
        yield url


@pytest.mark.pg
@pytest.mark.parametrize("name", ["webhook", "source", "cards"])
def test_on_postgresql_no_request_gets_a_5xx_or_a_traceback(pg_url: str, name: str) -> None:
    """The same HTTP targets over a PostgreSQL ledger (its text holds no NUL: a NUL in a
    key was a 503 there, and only there)."""
    (tally,) = run([name], SLICE * 2, chunk=SLICE * 2, make=lambda n: TARGETS_PG[n](pg_url))
    assert tally.failures == []
    assert tally.outcomes["HTTP 200"] > 0


TARGETS_PG = {
    "webhook": lambda url: Webhook(db_url=url),
    "source": lambda url: Source(db_url=url),
    "cards": lambda url: CardPages(db_url=url),
}


def test_the_driver_counts_inputs_per_target_and_reports_failures() -> None:
    out = io.StringIO()
    (tally,) = run(["links"], 300, chunk=100, base_seed=1, out=out)
    assert (tally.inputs, tally.chunks, tally.failures) == (300, 3, [])
    assert "fuzz summary: links 300 (0 failures)" in out.getvalue()

    class Broken(LinkVerifier):
        def check(self, example: object) -> None:
            raise AssertionError("found one")

    out = io.StringIO()
    (tally,) = run(["links"], 300, chunk=100, base_seed=1, out=out, make=lambda _: Broken())
    assert len(tally.failures) == 3 and "found one" in tally.failures[0]
    assert "FAILURE links: AssertionError: found one" in out.getvalue()


@pytest.mark.slow
@pytest.mark.timeout(6 * 3600)
def test_a_million_inputs_over_the_six_targets_make_no_failure() -> None:
    tallies = run(list(TARGETS), 1_000_000)
    assert sum(t.inputs for t in tallies) >= 1_000_000
    assert {t.target: t.failures for t in tallies} == {name: [] for name in TARGETS}


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris not installed")
@pytest.mark.parametrize("name", ["source", "cards", "receipt", "rules", "links"])
def test_atheris_finds_nothing_in_a_short_run(name: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fuzz", "--engine", "atheris", "--target", name,
         "--inputs", "3000"],
        cwd=paths.ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # libFuzzer's exit leaves its folder
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Done 3000 runs" in proc.stderr
