"""``autoloop serve`` as a user runs it: a process, its log on stderr, the sandbox GitHub.

What a first hour with the server meets: rules edited while it runs, a wrong App id, a
wrong webhook secret, a bad port, a missing home. Each case is one clear line where the
user looks (the log, or stderr and the exit code), never a traceback or a silent drop.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import signal
import socket
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
from ghapp.runtime.turns import leftover_processes
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

    def start(self, *args: str, launcher: tuple[str, ...] = ()) -> None:
        """``launcher``: what runs the command (``nohup``, ...)."""
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    *launcher,
                    sys.executable,
                    "-m",
                    "ghapp.commands.cli",
                    "serve",
                    "--port",
                    str(self.port),
                    *args,
                ],
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
        assert server.lines("rules.json changed: the new rules are in force (1 rules)")
    assert "Traceback" not in server.text()


# ------------------------------------------------------------------ stopping


def test_ctrl_c_stops_serve_without_a_traceback(webhooks_only: Serve) -> None:
    """uvicorn raises the Ctrl-C again once it has stopped: it ended as a traceback."""
    webhooks_only.start()
    assert webhooks_only.proc is not None
    assert post_webhook(webhooks_only.url, SECRET, "before") == 200
    webhooks_only.proc.send_signal(signal.SIGINT)
    assert webhooks_only.proc.wait(timeout=30) == 0
    assert "Traceback" not in webhooks_only.text()
    assert "KeyboardInterrupt" not in webhooks_only.text()
    assert webhooks_only.text().rstrip().endswith("stopped")  # its last line says so


def test_a_stop_says_which_turns_it_waits_for_and_a_second_one_stops_them(
    tmp_path: Path,
) -> None:
    """Ctrl-C while an agent ran: the process waited in silence for its thread (up to the
    rule's timeout_s), and a second Ctrl-C or SIGTERM changed nothing."""
    home = tmp_path / "home"
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    doc = {
        "agents": {"slow": {"use": "command", "command": sleeper}},
        "rules": [{"name": "r", "on": {"source": "local", "type": "t.*"}, "agent": "slow"}],
    }
    init_home(home, rules_text=json.dumps(doc))
    server = Serve(home, {"AUTOLOOP_GITHUB_WEBHOOK_SECRET": SECRET}, tmp_path / "serve.log")
    server.start()
    try:
        emitted = subprocess.run(
            [sys.executable, "-m", "ghapp.commands.cli", "emit", "local", "t.x", "s", "--id", "1"],
            cwd=ROOT, env=server.env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert emitted.returncode == 0, emitted.stderr
        wait_for("the turn to start", lambda: server.lines("turn t1 started"), log=server)
        agent = home / "turns" / "t1"
        wait_for("the agent", lambda: leftover_processes(agent), log=server)
        assert server.proc is not None
        server.proc.send_signal(signal.SIGINT)
        waiting = "stopping: waiting for turn(s) t1 to end"
        wait_for("the line that says what it waits for", lambda: server.lines(waiting), log=server)
        assert server.proc.poll() is None  # it waits, saying so
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(timeout=20) == 1
        assert server.lines("stopped turn(s) t1 now")
        assert leftover_processes(agent) == []
        assert "Traceback" not in server.text()
        # its end is no failure of the agent's: the next start retries it at once
        status = subprocess.run(
            [*CLI, "status", "--json"],
            cwd=ROOT, env=server.env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        (matter,) = json.loads(status.stdout)["matters"]
        assert (matter["state"], matter["retry_after"]) == ("waiting", "")
    finally:
        server.stop()


CLI = [sys.executable, "-m", "ghapp.commands.cli"]


def slow_turn_in_a_worker(
    tmp_path: Path, *flags: str
) -> tuple[Path, dict[str, str], Path, subprocess.Popen[bytes]]:
    """A home whose agent sleeps two minutes, one event for it, and ``autoloop work``
    (with ``flags``) started on it, writing to the log file: (home, env, log, worker)."""
    home = tmp_path / "home"
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    doc = {
        "agents": {"slow": {"use": "command", "command": sleeper}},
        "rules": [{"name": "r", "on": {"source": "local", "type": "t.*"}, "agent": "slow"}],
    }
    init_home(home, rules_text=json.dumps(doc))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env["AUTOLOOP_HOME"] = str(home)
    subprocess.run(
        [*CLI, "emit", "local", "t.x", "s", "--id", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    log = tmp_path / "work.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            [*CLI, "work", "--poll", "0.1", *flags], cwd=ROOT, env=env, stdout=out, stderr=out
        )
    return home, env, log, worker


def test_a_workers_stop_says_which_turns_it_waits_for_and_a_second_one_stops_them(
    tmp_path: Path,
) -> None:
    """`autoloop work` said "stopped" at SIGTERM and went on until the agent's timeout,
    deaf to a second signal; it now stops as serve does."""
    home, env, log, worker = slow_turn_in_a_worker(tmp_path)
    try:
        agent = home / "turns" / "t1"
        wait_for("the agent", lambda: leftover_processes(agent))
        worker.send_signal(signal.SIGTERM)
        waiting = "stopping: waiting for turn(s) t1 to end"
        wait_for("the line that says what it waits for", lambda: waiting in log.read_text())
        assert worker.poll() is None  # it waits, saying so
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=20) == 1
        said = log.read_text()
        assert "stopped turn(s) t1 now" in said and "Traceback" not in said
        assert leftover_processes(agent) == []
        # Its end is recorded: the next start runs it again at once, not once its claim
        # lapsed (the rule's timeout_s and two minutes later).
        status = subprocess.run(
            [*CLI, "status", "--json"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        (t1,) = [t for t in json.loads(status.stdout)["turns"] if t["id"] == "t1"]
        assert t1["state"] != "running", t1
    finally:
        worker.kill()
        worker.wait(timeout=10)


def test_a_stop_with_stop_wait_stops_the_turns_itself_in_time(tmp_path: Path) -> None:
    """Under systemd or Docker no second signal comes: their stop timeout killed the
    process, and its turns stayed "running" until their claims lapsed."""
    home, _, log, worker = slow_turn_in_a_worker(tmp_path, "--stop-wait", "1")
    try:
        agent = home / "turns" / "t1"
        wait_for("the agent", lambda: leftover_processes(agent))
        started = time.monotonic()
        worker.send_signal(signal.SIGTERM)  # once
        assert worker.wait(timeout=20) == 1
        assert time.monotonic() - started < 15
        said = log.read_text()
        assert "stopping: waiting for turn(s) t1 to end (at most 1 s)" in said
        assert "stopped turn(s) t1 now" in said and leftover_processes(agent) == []
    finally:
        worker.kill()
        worker.wait(timeout=10)


# ------------------------------------------------------------------ refused at start


def serve_once(env: dict[str, str], *args: str, home: Path | None = None) -> Any:
    """``autoloop serve`` expected to refuse to start: its CompletedProcess."""
    full = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")},
        "PYTHONPATH": str(ROOT),
        "AUTOLOOP_LOG_LEVEL": "WARNING",  # the request log of GET /app aside
        **({"AUTOLOOP_HOME": str(home)} if home is not None else {}),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "serve", *args],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def one_line(proc: Any) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return str(lines[0])


def test_a_wrong_app_id_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    init_home(tmp_path / "home")
    with sandbox() as gh:
        env = {**settings_env(gh), "AUTOLOOP_GITHUB_APP_ID": str(gh.app_id + 4242)}
        line = one_line(serve_once(env, "--port", str(free_port()), home=tmp_path / "home"))
    assert "GET /app: 401" in line
    assert "AUTOLOOP_GITHUB_APP_ID" in line and str(gh.app_id + 4242) in line
    assert "listening" not in line


def test_a_wrong_api_url_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    init_home(tmp_path / "home")
    with sandbox() as gh:
        env = {**settings_env(gh), "AUTOLOOP_GITHUB_URL": gh.api_url + "/nothing-here"}
        line = one_line(serve_once(env, "--port", str(free_port()), home=tmp_path / "home"))
    assert "404" in line and "AUTOLOOP_GITHUB_URL" in line


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_a_port_out_of_range_is_one_line_and_exit_2(tmp_path: Path, port: str) -> None:
    init_home(tmp_path / "home")
    line = one_line(serve_once({}, "--port", port, home=tmp_path / "home"))
    assert f"--port {port}" in line and "1 to 65535" in line


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import socket

    init_home(tmp_path / "home")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line(serve_once({}, "--port", str(port), home=tmp_path / "home"))
    assert f"cannot listen on 127.0.0.1:{port}" in line


def test_a_webhook_inbox_that_cannot_be_opened_is_one_line_and_exit_2(tmp_path: Path) -> None:
    home = tmp_path / "home"
    init_home(home)
    (home / "ledger.inbox").write_text("a file where the inbox's folder goes\n")
    env = {"AUTOLOOP_GITHUB_WEBHOOK_SECRET": "0123456789abcdef0123456789abcdef"}
    line = one_line(serve_once(env, "--port", str(free_port()), home=home))
    assert line == (
        f"autoloop serve: the webhook inbox {home / 'ledger.inbox'} cannot be opened: "
        "File exists (FileExistsError); it must be a folder this user can write"
    )


@pytest.mark.parametrize("how", ["unset", "mistyped"])
def test_serve_without_a_home_refuses_before_making_one(tmp_path: Path, how: str) -> None:
    user = tmp_path / "user"
    user.mkdir()
    env = {"HOME": str(user)}
    if how == "mistyped":
        env["AUTOLOOP_HOME"] = str(tmp_path / "hmoe")
    line = one_line(serve_once(env, "--port", str(free_port())))
    assert "no Autoloop home here" in line and "autoloop init" in line
    assert list(user.iterdir()) == []  # no ~/.autoloop/ledger.db made before refusing
    assert not (tmp_path / "hmoe").exists()


# ------------------------------------------------------------------ webhooks in the log

SECRET = "it-is-the-right-secret"


def post_webhook(url: str, secret: str, delivery: str, event: str = "ping") -> int:
    body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    sig = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sig,
        "Content-Type": "application/json",
    }
    return httpx.post(url + "/github/webhook", content=body, headers=headers).status_code


@pytest.fixture
def webhooks_only(tmp_path: Path) -> Iterator[Serve]:
    """``autoloop serve`` with a webhook secret only (no App): it verifies and records."""
    home = tmp_path / "home"
    init_home(home)
    server = Serve(home, {"AUTOLOOP_GITHUB_WEBHOOK_SECRET": SECRET}, tmp_path / "serve.log")
    yield server
    server.stop()


def test_a_second_serve_on_the_same_home_is_one_line_and_exit_2(webhooks_only: Serve) -> None:
    """Two serves on one SQLite home wrote the same inbox files."""
    webhooks_only.start()
    assert webhooks_only.proc is not None
    env = {"AUTOLOOP_GITHUB_WEBHOOK_SECRET": SECRET}
    line = one_line(serve_once(env, "--port", str(free_port()), home=webhooks_only.home))
    assert line.startswith(
        f"autoloop serve: another autoloop serve (pid {webhooks_only.proc.pid}) is using "
        f"the webhook inbox {webhooks_only.home / 'ledger.inbox'} of this home"
    )
    assert post_webhook(webhooks_only.url, SECRET, "after") == 200  # the first goes on


def test_each_webhook_is_one_info_line_with_event_delivery_status_and_ms(
    webhooks_only: Serve,
) -> None:
    server = webhooks_only
    server.start()
    assert post_webhook(server.url, SECRET, "d-good-1") == 200
    assert post_webhook(server.url, SECRET, "d-good-1") == 200  # a redelivery
    server.stop()
    lines = server.lines("d-good-1")
    assert len(lines) == 2, server.text()
    for line in lines:
        assert " INFO autoloop.webhook: webhook ping delivery d-good-1: 200 in " in line
        assert line.endswith(" ms")


def test_a_wrong_webhook_secret_is_401_and_one_warning_a_minute_saying_so(
    webhooks_only: Serve,
) -> None:
    server = webhooks_only
    server.start()
    codes = [post_webhook(server.url, "the-wrong-secret", f"d-bad-{i}") for i in range(3)]
    assert codes == [401, 401, 401]
    server.stop()
    warnings = server.lines("WARNING")
    assert len(warnings) == 1, server.text()
    assert "delivery d-bad-0: 401" in warnings[0]
    assert (
        "does not match AUTOLOOP_GITHUB_WEBHOOK_SECRET; it must be the webhook secret"
        in (warnings[0])
    )
    assert "REDACTED" not in server.text()  # the logs' masking took "SECRET: set" for a key
    for i in (1, 2):  # the others of that minute: one plain line each
        (line,) = server.lines(f"d-bad-{i}")
        assert " INFO " in line and ": 401 in " in line


def test_json_logs_carry_the_webhook_fields(webhooks_only: Serve) -> None:
    server = webhooks_only
    server.env["AUTOLOOP_LOG_FORMAT"] = "json"
    server.start()
    assert post_webhook(server.url, SECRET, "d-json-1", event="issues") == 200
    server.stop()
    (line,) = server.lines("d-json-1")
    doc = json.loads(line)
    assert doc["logger"] == "autoloop.webhook" and doc["level"] == "INFO"
    assert (doc["event"], doc["delivery"], doc["status"]) == ("issues", "d-json-1", 200)
    assert isinstance(doc["ms"], float)


def test_a_bad_log_format_is_one_line(tmp_path: Path) -> None:
    init_home(tmp_path / "home")
    env = {"AUTOLOOP_LOG_FORMAT": "yaml", "AUTOLOOP_GITHUB_WEBHOOK_SECRET": SECRET}
    line = one_line(serve_once(env, "--port", str(free_port()), home=tmp_path / "home"))
    assert "AUTOLOOP_LOG_FORMAT" in line and "json" in line


# ------------------------------------------------------------------ an agent that is missing


def test_a_missing_agent_is_tried_once_and_its_details_stay_off_the_issue(
    tmp_path: Path,
) -> None:
    doc = rules()
    doc["agents"] = {"demo": {"use": "command", "command": ["no-such-agent-here", "{prompt}"]}}
    with sandbox() as gh, serving(gh, tmp_path, doc) as server:
        number = gh.world.open_issue("reader", "Crash on start")
        wait_for("the card's comment", lambda: card_comments(gh, number), log=server)
        time.sleep(1.0)  # a retry would come at once: give it the time to show
        (body,) = card_comments(gh, number)
    assert "Autoloop could not finish its work here." in body
    for private in ("no-such-agent-here", "autoloop why", "rules.json", "No such file"):
        assert private not in body, body
    status = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "status", "--json"],
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data = json.loads(status.stdout)
    assert [t["state"] for t in data["turns"]] == ["failed"]  # tried once, not three times
    (card,) = data["cards"]
    assert card["title"] == "Agent 'demo' could not start"
    assert "no-such-agent-here" in card["text"]  # the details stay local


def _lag_p99(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    for line in text.splitlines():
        if line.startswith('autoloop_inbox_lag_seconds{quantile="0.99"}'):
            return float(line.split()[-1])
    raise AssertionError(f"no inbox lag in /metrics:\n{text}")


def test_a_steady_paced_stream_is_decided_within_milliseconds_not_after_the_deferral(
    webhooks_only: Serve,
) -> None:
    # 200 webhooks a second, one at a time: the translator decides in the pauses between
    # them (a version that only looked when a commit woke it found none, and every event
    # waited the 10 s deferral)
    server = webhooks_only
    server.start()
    if len(os.sched_getaffinity(0)) > 1:  # its threads on one core, as the bench runs it
        os.sched_setaffinity(server.proc.pid, {min(os.sched_getaffinity(0))})
    body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    with httpx.Client(base_url=server.url) as client:
        began = time.monotonic()
        for n in range(400):
            due = began + n * 0.005
            time.sleep(max(0.0, due - time.monotonic()))
            answer = client.post(
                "/github/webhook",
                content=body,
                headers={
                    "X-GitHub-Event": "ping",
                    "X-GitHub-Delivery": f"d-paced-{n}",
                    "X-Hub-Signature-256": sig,
                    "Content-Type": "application/json",
                },
            )
            assert answer.status_code == 200
    wait_for("all decided", lambda: httpx.get(server.url + "/healthz").json()["waiting"] == 0)
    assert _lag_p99(server.url) < 1.0


def test_a_ledger_error_at_start_is_one_line_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A home mounted read-only, with the GitHub App configured: serve ended in a
    traceback from the first write (the ledger's name)."""
    import sqlite3

    from ghapp.commands import serve

    home = tmp_path / "home"
    init_home(home)
    monkeypatch.setenv("AUTOLOOP_HOME", str(home))

    def read_only(*args: object, **kw: object) -> object:
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(serve, "build", read_only)
    assert serve.main(["--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "autoloop serve: the ledger cannot be written (attempt to write a readonly database): "
        "give this user write access to AUTOLOOP_HOME and its ledger.db, or run where it may "
        "write\n"
    )


def trickle_at_stop(serve: Serve, head: bytes, body: bytes) -> bytes:
    """Send ``head`` and the body's first bytes, stop ``serve`` (SIGTERM), go on sending
    the body slowly (a sender within the server's allowance for it); the answer."""
    assert serve.proc is not None
    with socket.create_connection(("127.0.0.1", serve.port), timeout=30) as conn:
        conn.sendall(head + body[:1000])
        time.sleep(0.5)
        serve.proc.send_signal(signal.SIGTERM)
        answer = b""
        sent = 1000
        deadline = time.monotonic() + 20
        conn.setblocking(False)
        while time.monotonic() < deadline and b"\r\n\r\n" not in answer:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                answer += conn.recv(65536)
            if sent < len(body):  # a sender still trickling its body in
                with contextlib.suppress(BlockingIOError, BrokenPipeError, ConnectionError):
                    conn.send(body[sent : sent + 2000])
                    sent += 2000
            time.sleep(0.05)
    return answer


def stopped_with_a_503(serve: Serve, answer: bytes) -> None:
    """``answer`` is a 503, and ``serve`` stopped cleanly, without a traceback."""
    assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
    assert serve.proc is not None and serve.proc.wait(timeout=30) == 0
    text = serve.text()
    assert "Traceback" not in text and "Exception in ASGI application" not in text


def test_a_body_still_arriving_when_serve_stops_gets_a_503_not_a_500_and_a_traceback(
    webhooks_only: Serve,
) -> None:
    """The stop's grace for requests (5 s) is shorter than a body may take: the request
    was cancelled into a 500, a broken connection and a traceback in the log."""
    webhooks_only.start()
    assert webhooks_only.proc is not None
    body = json.dumps({"zen": "x" * 600_000, "hook_id": 1}).encode()  # 10 s + 9 s allowed
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    head = (
        f"POST /github/webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: ping\r\n"
        f"X-GitHub-Delivery: slow-1\r\nX-Hub-Signature-256: {sig}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    stopped_with_a_503(webhooks_only, trickle_at_stop(webhooks_only, head, body))
    (line,) = webhooks_only.lines("slow-1")
    assert " 503 " in line and "the server stopped before it could answer" in line


def test_a_signed_sources_body_still_arriving_at_a_stop_gets_a_503_too(tmp_path: Path) -> None:
    """``POST /v1/in/NAME`` reads its body as the webhook route does: at a stop it was
    cancelled into a 500 and a traceback."""
    home = tmp_path / "home"
    shop_secret = "shop-secret-0123456789abcdef"
    init_home(home)
    doc = json.loads((home / "rules.json").read_text())
    doc["sources"] = {"shop": {"adapter": "hmac"}}
    edit_rules(home, doc)
    serve = Serve(home, {"AUTOLOOP_SOURCE_SHOP_SECRET": shop_secret}, tmp_path / "serve.log")
    try:
        serve.start()
        assert serve.proc is not None
        body = json.dumps({"id": "o-1", "type": "order.paid", "summary": "x" * 600_000}).encode()
        sig = "sha256=" + hmac.new(shop_secret.encode(), body, hashlib.sha256).hexdigest()
        head = (
            f"POST /v1/in/shop HTTP/1.1\r\nHost: x\r\nX-Signature-256: {sig}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        stopped_with_a_503(serve, trickle_at_stop(serve, head, body))
        assert len(serve.lines("the server stopped before it could answer")) == 1
    finally:
        serve.stop()


# SIGHUP as a terminal leaves it (whoever runs the tests may ignore it: nohup, a CI
# runner), then the command: an ignored signal would stay ignored in serve, on purpose.
HUP_AS_FROM_A_TERMINAL = (
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])",
)


def test_sighup_stops_serve_as_sigterm_does(webhooks_only: Serve) -> None:
    """A closed terminal (SIGHUP) killed serve at once: no stop line, the log's last
    lines lost."""
    webhooks_only.start(launcher=HUP_AS_FROM_A_TERMINAL)
    assert webhooks_only.proc is not None
    assert post_webhook(webhooks_only.url, SECRET, "before-hup") == 200
    webhooks_only.proc.send_signal(signal.SIGHUP)
    assert webhooks_only.proc.wait(timeout=30) == 0
    assert "Traceback" not in webhooks_only.text()


@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_during_the_stop_is_no_traceback(
    webhooks_only: Serve, first: signal.Signals
) -> None:
    """Ctrl-C twice, or SIGTERM then Ctrl-C: the app's lifespan task was cancelled, and
    its traceback logged."""
    webhooks_only.start()
    assert webhooks_only.proc is not None
    assert post_webhook(webhooks_only.url, SECRET, "before") == 200
    webhooks_only.proc.send_signal(first)
    time.sleep(0.05)
    webhooks_only.proc.send_signal(signal.SIGINT)
    webhooks_only.proc.wait(timeout=30)
    assert "Traceback" not in webhooks_only.text(), webhooks_only.text()[-3000:]


def test_serve_under_nohup_lives_on_after_sighup(webhooks_only: Serve) -> None:
    """SIGHUP became a stop: a serve started with nohup (SIGHUP ignored) ended when its
    terminal closed, with exit 0, which a supervisor restarting on failure takes for done."""
    webhooks_only.start(launcher=("nohup",))
    assert webhooks_only.proc is not None
    webhooks_only.proc.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    assert webhooks_only.proc.poll() is None, webhooks_only.text()
    assert post_webhook(webhooks_only.url, SECRET, "after-hup") == 200
