"""Shared test switches: --slow for long soak and simulation runs, PostgreSQL opt-in."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ("tests.stores",)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", help="also run long soak and simulation runs")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--slow"):
        skip = pytest.mark.skip(reason="long run: use --slow (CI runs a bounded slice)")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)


def pg_url() -> str | None:
    """The PostgreSQL URL for tests, or None with the reason given by :func:`pg_skip_reason`."""
    url = os.environ.get("AUTOLOOP_PG_URL")
    if url:
        return url
    if os.environ.get("AUTOLOOP_TEST_PG") == "1":
        return "postgresql://postgres@127.0.0.1:5432/test"
    return None


PG_SKIP_REASON = (
    "PostgreSQL tests are off: set AUTOLOOP_TEST_PG=1 (server at 127.0.0.1:5432, database "
    "'test') or AUTOLOOP_PG_URL=postgresql://... to run them"
)
