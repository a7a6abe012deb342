"""Driving the real ``autoloop`` program for the hub's end-to-end tests.

Each helper runs ``python -m ghapp.commands.cli`` in a subprocess against one AUTOLOOP_HOME with
a real SQLite ledger; agents are real subprocesses (the fake ``claude`` and ``codex`` of
``tests/fakes/bin`` first on PATH, or small scripts). Nothing of the hub is patched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FAKES_BIN = ROOT / "tests" / "fakes" / "bin"
FAKE_ENV = ("FAKE_RECORD", "FAKE_STATE", "FAKE_SCENARIO", "FAKE_CHILD_PID")


class Home:
    """One AUTOLOOP_HOME and the commands a person would type against it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.record = root / "record.jsonl"
        self.sessions = root / "fake-sessions"
        self.pids = root / "pids"
        self.base: dict[str, str] = {}

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOLOOP_", "FAKE_"))}
        env["AUTOLOOP_HOME"] = str(self.home)
        env["PATH"] = f"{FAKES_BIN}{os.pathsep}{env.get('PATH', os.defpath)}"
        env["FAKE_RECORD"] = str(self.record)
        env["FAKE_STATE"] = str(self.sessions)
        env["FAKE_CHILD_PID"] = str(self.pids)
        env.update(self.base)
        env.update(extra)
        return env

    def write_rules(self, doc: dict[str, Any]) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "rules.json").write_text(json.dumps(doc, indent=2))

    def rules(self, doc: dict[str, Any]) -> None:
        self.write_rules(doc)
        self.run("init")

    def run(self, *args: str, ok: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "ghapp.commands.cli", *args],
            cwd=ROOT,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if ok:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def json(self, *args: str, **env: str) -> Any:
        return json.loads(self.run(*args, "--json", **env).stdout)

    def emit(self, type_: str, subject: str, id_: str, **env: str) -> str:
        return self.run("emit", "local", type_, subject, "--id", id_, **env).stdout

    def worker(self, name: str, *extra: str, **env: str) -> subprocess.Popen[str]:
        """``autoloop work --name NAME`` as a long-running subprocess."""
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ghapp.commands.cli",
                "work",
                "--name",
                name,
                "--poll",
                "0.1",
                *extra,
            ],
            cwd=ROOT,
            env=self.env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def recorded(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def status(self) -> dict[str, Any]:
        data: dict[str, Any] = self.json("status")
        return data


def fake_agent(use: str, **extra: Any) -> dict[str, Any]:
    """An agent spec for a fake CLI that lets the fake's control variables through."""
    return {"use": use, "pass_env": list(FAKE_ENV), **extra}


def value_after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def wait_for(what: str, check: Callable[[], Any], within_s: float = 30.0) -> Any:
    deadline = time.monotonic() + within_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
