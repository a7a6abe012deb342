"""``autoloop serve`` started while GitHub is out of reach: it serves, and catches up.

The sandbox GitHub is made but its API does not listen yet (its port is closed), while
its webhook sender already works: the served App cannot ask ``GET /app`` who it is, the
way a restart during a GitHub or network outage finds it. The server must start anyway
(ingest is local and durable), say so in one line, record the signed webhooks it gets,
and hold its write-backs. Once the API listens, the App is learned in the background
and the card and the receipt's actions that waited are written, each once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from fakegithub.sandbox import Sandbox
from fakegithub.server import (
    create_app,
    free_port,
    running_sandbox,
    serve_in_thread,
    write_private_key,
)
from ghapp.commands.home import init_home
from ghapp.github.client import GitHubClient
from ghapp.store.open import open_store
from kernel.records import Action, Card
from tests import paths
from tests.e2e.test_github_app_sandbox import CARD_MARK, rules

ROOT = paths.ROOT


def wait_for(what: str, check: Callable[[], Any], timeout: float = 40.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@dataclass
class Offline:
    """A sandbox whose API is not served yet; ``serve()`` opens its port."""

    sandbox: Sandbox
    api_url: str
    port: int
    key_path: Path
    stops: list[Callable[[], None]]

    def serve(self) -> None:
        server, thread = serve_in_thread(create_app(self.sandbox), "127.0.0.1", self.port)

        def stop() -> None:
            server.should_exit = True
            thread.join(timeout=10)

        self.stops.append(stop)


@contextlib.contextmanager
def offline_sandbox() -> Iterator[Offline]:
    port = free_port()
    api_url = f"http://127.0.0.1:{port}"
    sandbox = Sandbox(base_url=api_url)
    with tempfile.TemporaryDirectory(prefix="autoloop-outage-") as folder:
        key = write_private_key(sandbox.private_key_pem, Path(folder))
        sandbox.start()
        handle = Offline(sandbox, api_url, port, key, [])
        try:
            yield handle
        finally:
            for stop in handle.stops:
                stop()
            sandbox.stop()


@contextlib.contextmanager
def serve(env: dict[str, str], port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ghapp.commands.cli", "serve", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def healthy(proc: subprocess.Popen[bytes], url: str, log: Path) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"serve exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def records(home: Path, kind: str) -> list[Any]:
    store = open_store(f"sqlite:///{home / 'ledger.db'}")
    try:
        with store.read() as tx:
            return list(tx.query(kind))
    finally:
        store.close()


def test_serve_starts_records_webhooks_and_writes_back_once_github_answers(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    init_home(home, rules_text=json.dumps(rules()))
    log = tmp_path / "serve.log"
    with offline_sandbox() as gh:
        world = gh.sandbox.world
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {
            **os.environ,
            "AUTOLOOP_HOME": str(home),
            "AUTOLOOP_GITHUB_APP_ID": str(gh.sandbox.app.id),
            "AUTOLOOP_GITHUB_PRIVATE_KEY": str(gh.key_path),
            "AUTOLOOP_GITHUB_WEBHOOK_SECRET": gh.sandbox.app.webhook_secret,
            "AUTOLOOP_GITHUB_URL": gh.api_url,  # nobody listens there yet
            "AUTOLOOP_LOG_LEVEL": "INFO",
            "PYTHONPATH": str(ROOT),
        }
        with serve(env, port, log) as proc:
            wait_for("serve to listen", lambda: healthy(proc, url, log), 30)
            world.set_app_url(url + "/github/webhook")
            world.set_collaborator("maintainer", "maintain")
            number = world.open_issue("reader", "Crash on start", body="it breaks")

            # The signed webhook is recorded and answered 2xx while GitHub is unreachable.
            def answered() -> list[Any]:
                return [d for d in world.deliveries if d.event == "issues" and d.status_code]

            (delivery,) = wait_for("the webhook's answer", answered)
            assert 200 <= delivery.status_code < 300, delivery.response_body
            card = wait_for("the triage card", lambda: records(home, "card"))[0]
            assert isinstance(card, Card) and card.kind_ == "ask"

            # Answered locally meanwhile: the receipt's write-backs wait, they do not fail.
            answer = subprocess.run(
                [sys.executable, "-m", "ghapp.commands.cli", "answer", card.id, "1"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            assert answer.returncode == 0, answer.stderr

            def allowed() -> list[Action]:
                found = [a for a in records(home, "action") if isinstance(a, Action)]
                return found if len(found) == 2 else []

            actions = wait_for("the receipt's actions", allowed)
            assert sorted(a.do for a in actions) == ["github.comment", "github.label"]
            time.sleep(1.0)  # a sweep or two would have failed them without a wait
            actions = allowed()
            assert [(a.status, a.attempts) for a in actions] == [("allowed", 0)] * 2
            bot = [e for e in gh.sandbox.audit.entries() if e.actor.endswith("[bot]")]
            assert not bot  # nothing the App wrote reached GitHub

            gh.serve()  # GitHub is back

            reader = GitHubClient(
                app_id=gh.sandbox.app.id,
                private_key=gh.sandbox.private_key_pem,
                base_url=gh.api_url,
            )
            with reader:
                repo = gh.sandbox.repo

                def triaged() -> bool:
                    issue = reader.get_issue(repo, number)
                    labels = [lb["name"] for lb in issue["labels"]]
                    said = [c for c in reader.list_issue_comments(repo, number)]
                    return "bug" in labels and any("Triaged as bug" in c["body"] for c in said)

                wait_for("the write-backs that waited", triaged)
                comments = reader.list_issue_comments(repo, number)
            cards = [c for c in comments if CARD_MARK in c["body"]]
            assert len(cards) == 1  # the card that waited, shown once
            assert len([c for c in comments if "Triaged as bug" in c["body"]]) == 1
            done = [a for a in records(home, "action") if isinstance(a, Action)]
            assert [a.status for a in done] == ["done", "done"]
        assert proc.returncode == 0
    text = log.read_text()
    assert "Traceback" not in text, text
    assert text.count("GitHub is out of reach") == 1, text


def test_credentials_github_refuses_at_start_are_one_line_and_exit_2(tmp_path: Path) -> None:
    home = tmp_path / "home"
    init_home(home, rules_text=json.dumps(rules()))
    with running_sandbox() as gh:
        env = {
            **os.environ,
            "AUTOLOOP_HOME": str(home),
            "AUTOLOOP_GITHUB_APP_ID": str(gh.app_id + 7),  # not this App: GitHub says 401
            "AUTOLOOP_GITHUB_PRIVATE_KEY": str(gh.private_key_path),
            "AUTOLOOP_GITHUB_WEBHOOK_SECRET": gh.webhook_secret,
            "AUTOLOOP_GITHUB_URL": gh.api_url,
            "PYTHONPATH": str(ROOT),
        }
        done = subprocess.run(
            [sys.executable, "-m", "ghapp.commands.cli", "serve", "--port", str(free_port())],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    (line,) = [x for x in lines if x.startswith("autoloop serve:")]
    assert line == lines[-1]
    assert "GitHub refused the App's credentials" in line
    assert "AUTOLOOP_GITHUB_APP_ID" in line
