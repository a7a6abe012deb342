"""``autoloop serve`` as a user runs it: a process, its log on stderr, the sandbox GitHub.

What a first hour with the server meets: rules edited while it runs, a wrong App id, a
wrong webhook secret, a bad port, a missing home. Each case is one clear line where the
user looks (the log, or stderr and the exit code), never a traceback or a silent drop.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakegithub.server import SandboxHandle, running_sandbox
from ghapp.commands.home import init_home
from ghapp.github import retry
from tests import paths
from tests.e2e.test_github_app_sandbox import CARD_MARK, rules, settings_env
from tests.servers import free_port

ROOT = paths.ROOT


class Serve:
    """One ``autoloop serve`` process on a free port; its stdout and stderr in one file."""

    def __init__(self, home: Path, env: dict[str, str], log: Path) -> None:
        self.home = home
        self.log = log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")},
            "AUTOLOOP_HOME": str(home),
            "AUTOLOOP_LOG_LEVEL": "INFO",
            "PYTHONPATH": str(ROOT),
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *args: str) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ghapp.commands.cli", "serve", "--port", str(self.port)]
                + list(args),
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"serve exited: {self.text()}"
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"serve did not start: {self.text()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def lines(self, needle: str) -> list[str]:
        return [line for line in self.text().splitlines() if needle in line]


@contextmanager
def sandbox() -> Iterator[SandboxHandle]:
    retry.set_testing(True)
    try:
        with running_sandbox() as gh:
            gh.world.set_collaborator("maintainer", "maintain")
            yield gh
    finally:
        retry.set_testing(False)


@contextmanager
def serving(gh: SandboxHandle, tmp_path: Path, doc: dict[str, Any]) -> Iterator[Serve]:
    home = tmp_path / "home"
    init_home(home, rules_text=json.dumps(doc))
    server = Serve(home, settings_env(gh), tmp_path / "serve.log")
    server.start()
    gh.world.set_app_url(server.url + "/github/webhook")
    try:
        yield server
    finally:
        gh.world.set_app_url(None)
        server.stop()


def wait_for(what: str, check: Any, within_s: float = 30.0, *, log: Serve | None = None) -> Any:
    deadline = time.monotonic() + within_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            tail = f"\n--- serve's log:\n{log.text()[-3000:]}" if log else ""
            raise AssertionError(f"timed out waiting for {what}{tail}")
        time.sleep(0.1)


def card_comments(gh: SandboxHandle, number: int) -> list[str]:
    comments = gh.sandbox.state.repos[gh.repo].comments.values()
    return [c.body for c in comments if c.number == number and CARD_MARK in c.body]


def edit_rules(home: Path, doc: dict[str, Any]) -> None:
    path = home / "rules.json"
    before = path.stat().st_mtime_ns
    path.write_text(json.dumps(doc, indent=1))
    if path.stat().st_mtime_ns == before:  # a coarse clock: the edit must be seen
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


# ------------------------------------------------------------------ rules edited live


@pytest.mark.parametrize("edit", ["renamed", "added"])
def test_a_github_comment_channel_edited_in_while_serving_posts_the_card(
    tmp_path: Path, edit: str
) -> None:
    first = rules()
    if edit == "added":  # no channel at first: the rule notifies nobody
        first["channels"] = {}
        first["rules"][0]["notify"] = []
    with sandbox() as gh, serving(gh, tmp_path, first) as server:
        changed = rules()
        changed["channels"] = {"issues": {"use": "github-comment"}}
        changed["rules"][0]["notify"] = ["issues"]
        edit_rules(server.home, changed)
        number = gh.world.open_issue("reader", "Crash on start")
        wait_for("the card's comment", lambda: card_comments(gh, number), log=server)
        (body,) = card_comments(gh, number)
        assert "How should this issue be triaged?" in body
        assert "/cards/" not in body  # the new channel has no "links": true
    assert "Traceback" not in server.text()
