"""Where the suite's files are, the same from any test module under ``tests/``."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"  # third-party material: GitHub payloads, a fake-secrets corpus
