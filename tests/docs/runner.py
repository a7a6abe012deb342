"""Running the commands of the Markdown docs, the way a reader would type them.

A fenced block is run when an HTML comment (invisible on GitHub) right before it says
so; every ``sh`` block must carry one, so no command of the docs escapes the test:

- ``<!-- doc-test: run -->``: run it with bash (``set -euo pipefail``) in the doc's
  session: one working folder and one environment, carried from block to block as one
  shell would carry its variables; ``run, exit 1`` expects that exit code;
  ``expect "TEXT"`` also wants TEXT in its output;
- ``<!-- doc-test: background NAME, wait "TEXT" -->``: start it and leave it running
  until the doc ends (``wait``: until TEXT shows in its output, or ``wait "TEXT" in
  PATH``: in that file); with ``register``, do
  what a browser does with the page ``autoloop app create`` prints, then wait for it to
  end well;
- ``<!-- doc-test: file PATH -->``: write the block to PATH (``~`` is the session's
  home; ``$VAR`` from the session's environment);
- ``<!-- doc-test: same-as PATH -->``: the block is a copy of the repository's file
  PATH (a unit file, say), and must stay one;
- ``<!-- doc-test: rules -->``: a ``rules.json`` example that is not run: it must load
  as the server loads its rules (every field checked);
- ``<!-- doc-test: skip REASON -->``: not run, and the reason says why (real GitHub,
  root, Docker...).

A comment that stands alone (no block after it) is a step a person does in a browser:
``<!-- doc-test: browser install SLUG ACCOUNT -->`` installs an App on the sandbox.
Port numbers of the docs (8080, 8765) are replaced by free ones, since other programs
may hold them on a test machine.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ghapp.commands.home import CHANNEL_ADAPTERS
from kernel.rules import parse_rules
from plugins.agents.registry import KNOWN_AGENT_ADAPTERS
from tests.browser import register_app

REPO = Path(__file__).resolve().parent.parent.parent
MARK = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,})(.*)$")
COMMAND_INFOS = frozenset({"sh", "bash", "shell", "console"})
DOC_PORTS = ("8080", "8765")
DROP_ENV = ("_", "SHLVL", "PWD", "OLDPWD", "DOC_TEST_ENV")


@dataclass
class Block:
    doc: Path
    line: int
    info: str  # the fence's language ("" for a step without a block)
    body: str
    marker: str | None

    @property
    def where(self) -> str:
        return f"{self.doc.name}:{self.line}"


def read_blocks(doc: Path) -> list[Block]:
    """The fenced blocks of ``doc`` with their markers, and the standalone steps."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    pending: tuple[int, str] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        mark = MARK.match(line)
        fence = FENCE.match(line)
        if mark:
            if pending is not None:
                out.append(Block(doc, pending[0], "", "", pending[1]))
            pending = (i + 1, mark.group(1))
        elif fence:
            ticks, info = fence.group(2), fence.group(3).strip().split(" ")[0]
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(ticks):
                body.append(lines[i])
                i += 1
            marker = pending[1] if pending is not None else None
            out.append(Block(doc, i - len(body), info, "\n".join(body) + "\n", marker))
            pending = None
        elif line.strip() and pending is not None:
            out.append(Block(doc, pending[0], "", "", pending[1]))
            pending = None
        i += 1
    if pending is not None:
        out.append(Block(doc, pending[0], "", "", pending[1]))
    return out


@dataclass
class Directives:
    kind: str  # run, background, file, skip, browser
    args: list[str]
    exit: int = 0
    wait: str | None = None
    wait_in: str | None = None
    expect: list[str] = field(default_factory=list)
    register: bool = False


def _split_outside_quotes(text: str) -> list[str]:
    parts, current, quote = [], "", ""
    for index, char in enumerate(text):
        escaped = index > 0 and text[index - 1] == "\\"
        if char == '"' and not escaped:
            quote = "" if quote else char
        if char == "," and not quote:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()]


def parse_marker(marker: str) -> Directives:
    kind, _, rest = marker.strip().partition(" ")
    if kind == "skip":  # the reason is free text
        return Directives(kind=kind, args=[rest.strip()] if rest.strip() else [])
    parts = _split_outside_quotes(marker)
    head = shlex.split(parts[0])
    found = Directives(kind=head[0], args=head[1:])
    for part in parts[1:]:
        words = shlex.split(part)
        if words[0] == "exit":
            found.exit = int(words[1])
        elif words[0] == "wait":
            found.wait = words[1]
            if len(words) == 4 and words[2] == "in":
                found.wait_in = words[3]
        elif words[0] == "expect":
            found.expect.append(words[1])
        elif words[0] == "register":
            found.register = True
        else:
            raise ValueError(f"unknown doc-test directive {part!r}")
    return found


class DocSession:
    """One reader going through one doc: a folder, an environment, background jobs."""

    def __init__(self, work: Path, env: dict[str, str], *, sandbox_url: str = "") -> None:
        self.work = work
        self.env = dict(env)
        self.sandbox_url = sandbox_url
        self.ports = {port: str(_free_port()) for port in DOC_PORTS}
        self.jobs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}

    # -- text ----------------------------------------------------------------------------

    def localize(self, text: str) -> str:
        for port, free in self.ports.items():
            text = re.sub(rf"\b{port}\b", free, text)
        return text

    def expand(self, path: str) -> Path:
        text = path
        if text.startswith("~"):
            text = self.env["HOME"] + text[1:]
        text = re.sub(
            r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: self.env.get(m.group(1), ""), text
        )
        found = Path(text)
        return found if found.is_absolute() else self.work / found

    # -- steps ---------------------------------------------------------------------------

    def do(self, block: Block) -> None:
        assert block.marker is not None
        how = parse_marker(block.marker)
        if how.kind == "skip":
            assert how.args, f"{block.where}: say why the block is not run"
        elif how.kind == "file":
            target = self.expand(how.args[0])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.body, encoding="utf-8")
        elif how.kind == "rules":
            check_rules(block)
        elif how.kind == "same-as":
            original = (REPO / how.args[0]).read_text(encoding="utf-8")
            assert block.body == original, f"{block.where} differs from {how.args[0]}"
        elif how.kind == "run":
            self.run(block, how)
        elif how.kind == "background":
            self.background(block, how)
        elif how.kind == "browser":
            self.browser(block, how)
        else:
            raise AssertionError(f"{block.where}: unknown doc-test step {how.kind!r}")

    def run(self, block: Block, how: Directives) -> None:
        dump = self.work / ".doc-test-env"
        script = self.work / ".doc-test.sh"
        script.write_text(
            # set -a: variables set by one block are there for the next ones, as in a shell
            "set -aeuo pipefail\n" + self.localize(block.body) + '\nenv -0 > "$DOC_TEST_ENV"\n'
        )
        proc = subprocess.run(
            ["bash", str(script)],
            cwd=self.work,
            env={**self.env, "DOC_TEST_ENV": str(dump)},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        said = (
            f"{block.where}: exit {proc.returncode}\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
        assert proc.returncode == how.exit, said
        for text in how.expect:
            assert text in proc.stdout + proc.stderr, said
        assert "Traceback" not in proc.stderr, said
        if proc.returncode == 0:
            pairs = (item.partition("=") for item in dump.read_text().split("\0") if item)
            self.env = {k: v for k, _, v in pairs if k not in DROP_ENV}

    def background(self, block: Block, how: Directives) -> None:
        name = how.args[0]
        log = self.work / f".doc-test-{name}.log"
        with log.open("wb") as out:  # the job writes to its own copy of the handle
            proc = subprocess.Popen(
                ["bash", "-c", "exec " + self.localize(block.body).strip()],
                cwd=self.work,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.jobs[name] = (proc, log)
        if how.register:
            page = self._wait_for(name, re.compile(r"open (http://\S+/) in a browser"))
            register_app(page.group(1))
            code = proc.wait(timeout=60)
            assert code == 0, f"{block.where}: exit {code}\n{log.read_text()}"
        elif how.wait:
            where = self.expand(how.wait_in) if how.wait_in else None
            self._wait_for(name, re.compile(re.escape(how.wait)), where)

    def _wait_for(
        self, name: str, pattern: re.Pattern[str], where: Path | None = None
    ) -> re.Match[str]:
        proc, log = self.jobs[name]
        watched = where or log
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = watched.read_text(errors="replace") if watched.exists() else ""
            found = pattern.search(text)
            if found:
                return found
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{name}: no {pattern.pattern!r} in its output:\n{log.read_text()}")

    def browser(self, block: Block, how: Directives) -> None:
        assert how.args[0] == "install", f"{block.where}: unknown browser step"
        slug, account = how.args[1], how.args[2]
        assert self.sandbox_url, f"{block.where}: no sandbox for a browser step"
        page = httpx.post(
            f"{self.sandbox_url}/apps/{slug}/installations/new", data={"account": account}
        )
        assert page.status_code == 200, page.text

    def close(self) -> dict[str, str]:
        """Stop the background jobs (SIGTERM, as a service manager does); their logs."""
        logs = {}
        for name, (proc, log) in self.jobs.items():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            logs[name] = log.read_text(errors="replace")
        return logs


def check_rules(block: Block) -> None:
    """Load ``block`` as the server loads rules.json, with the adapters it knows."""
    parse_rules(
        block.body,
        path=block.where,
        known_agent_adapters=KNOWN_AGENT_ADAPTERS,
        known_channel_adapters=CHANNEL_ADAPTERS,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def session_env(home: Path, **extra: str) -> dict[str, str]:
    """A reader's environment: their own HOME, the installed ``autoloop`` first on PATH,
    nothing of Autoloop set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOLOOP_", "FAKE_"))}
    env["HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', os.defpath)}"
    env.update(extra)
    return env
