"""``autoloop --help`` and ``autoloop status`` start fast: they import only what they use.

Start-up time is measured by the bench, not asserted here; these tests check the cause
of a slow start instead, in a fresh interpreter: which modules a command imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ghapp.commands.home import init_home
from tests import paths

# What --help never needs: the hub and everything behind it, the ledger, the stores,
# the kernel, the HTTP server and the output library.
HEAVY = (
    "ghapp.runtime.hub",
    "ghapp.runtime.ledger",
    "ghapp.runtime.ingest",
    "ghapp.store.base",
    "ghapp.store.sqlite",
    "ghapp.web.app",
    "kernel.step",
    "kernel.records",
    "kernel.rules",
    "plugins.agents.claude",
    "starlette",
    "uvicorn",
    "rich",
    "importlib.metadata",
)
# What status reads the ledger and the rules with, and still never needs.
NOT_FOR_STATUS = (
    "ghapp.runtime.hub",
    "ghapp.runtime.ledger",
    "ghapp.runtime.ingest",
    "ghapp.web.app",
    "kernel.step",
    "kernel.state",
    "kernel.inputs",
    "plugins.agents.claude",
    "starlette",
    "uvicorn",
)

# What status never loads once the home remembers the rules' timezone and caps: the
# kernel's classes (creating their dataclasses was most of its start), the rules parser,
# the GitHub source, the agent adapters, the budget's meter and the libraries they bring.
STATUS_NEVER = (
    *NOT_FOR_STATUS,
    "ghapp.commands.home",
    "ghapp.runtime.budget",
    "kernel.codec",
    "kernel.config",
    "kernel.cron",
    "kernel.facts",
    "kernel.model",
    "kernel.records",
    "kernel.rules",
    "plugins",
    "dataclasses",
    "hashlib",
    "logging",
    "orjson",
    "rich",
    "tomllib",
    "zoneinfo",  # the starter rules' zone is UTC
)


def imported_by(argv: list[str], env: dict[str, str] | None = None) -> set[str]:
    """The modules loaded once ``autoloop ARGV`` ran, in a fresh interpreter."""
    code = (
        "import sys, json\n"
        "from ghapp.commands.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write('\\nMODULES ' + json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=paths.ROOT,
        env={**os.environ, "PYTHONPATH": str(paths.ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "MODULES " in done.stderr, done.stderr
    return set(json.loads(done.stderr.rsplit("MODULES ", 1)[1]))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in modules or any(m.startswith(n + ".") for m in modules))


def test_help_imports_none_of_the_heavy_modules() -> None:
    modules = imported_by(["--help"])
    assert "ghapp.commands.cli" in modules  # it did run
    assert loaded(modules, HEAVY) == []


def test_status_reads_the_ledger_without_the_hub_or_the_server(tmp_path: Path) -> None:
    init_home(tmp_path, rules_text=json.dumps({"rules": []}))
    modules = imported_by(["status", "--json"], {"AUTOLOOP_HOME": str(tmp_path)})
    assert "ghapp.store.sqlite" in modules  # it did read the ledger
    assert loaded(modules, NOT_FOR_STATUS) == []


def test_status_reads_stored_data_without_the_kernel_classes_or_the_rules_parser(
    tmp_path: Path,
) -> None:
    init_home(tmp_path)  # the starter rules
    env = {"AUTOLOOP_HOME": str(tmp_path)}
    emitted = imported_by(["emit", "local", "hello.world", "demo", "--id", "1"], env)
    assert "ghapp.runtime.hub" in emitted  # it did record the event
    first = imported_by(["status"], env)
    assert "kernel.rules" in first  # the parser read the rules, and the home remembers
    for argv in (["status"], ["status", "--json"]):
        modules = imported_by(argv, env)
        assert {"ghapp.commands.status", "ghapp.store.sqlite"} <= modules  # it did run
        assert loaded(modules, STATUS_NEVER) == []
