"""The deployment files, run as they would run but outside Docker and systemd (no Docker
daemon on a test machine): the image's entry command (``ENTRYPOINT`` + ``CMD``), the
command ``compose.yaml`` gives it, and the systemd unit's ``ExecStart``, each with the
environment its file sets, serving a home folder that holds the GitHub App's settings.

What differs from a real run, and why: the program is this environment's ``autoloop``
(the image installs the same package); the home folder is a temporary one (the volume);
the port is a free one and ``--host 0.0.0.0`` becomes ``127.0.0.1``, since tests listen
on loopback only.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fakegithub.server import SandboxHandle, free_port, running_sandbox

ROOT = Path(__file__).resolve().parent.parent.parent
AUTOLOOP = str(Path(sys.executable).parent / "autoloop")


def instructions(path: Path) -> list[tuple[str, str]]:
    """The Dockerfile's instructions of its last stage, continuation lines joined."""
    joined: list[str] = []
    pending = ""
    for line in path.read_text().splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    stages: list[list[tuple[str, str]]] = []
    for line in joined:
        word, _, rest = line.strip().partition(" ")
        if word.upper() == "FROM":
            stages.append([])
        stages[-1].append((word.upper(), rest.strip()))
    return stages[-1]


class Image:
    """What the Dockerfile's final stage says about running it."""

    def __init__(self) -> None:
        self.steps = instructions(ROOT / "Dockerfile")

    def one(self, word: str) -> str:
        found = [rest for w, rest in self.steps if w == word]
        assert len(found) == 1, f"{word}: {found}"
        return found[0]

    @property
    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for word, rest in self.steps:
            if word == "ENV":
                out.update(dict(pair.split("=", 1) for pair in shlex.split(rest)))
        return out

    @property
    def command(self) -> list[str]:
        entry: list[str] = json.loads(self.one("ENTRYPOINT"))
        cmd: list[str] = json.loads(self.one("CMD"))
        return entry + cmd

    @property
    def entrypoint(self) -> list[str]:
        entry: list[str] = json.loads(self.one("ENTRYPOINT"))
        return entry

    @property
    def healthcheck(self) -> list[str]:
        rest = self.one("HEALTHCHECK")
        check: list[str] = json.loads(rest[rest.index("CMD") + 3 :])
        return check


def compose() -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return data


def unit() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in (ROOT / "deploy" / "autoloop.service").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def localize(argv: list[str], port: int) -> list[str]:
    """This machine's program, a free port, loopback (see the module docstring)."""
    out = [AUTOLOOP if Path(argv[0]).name == "autoloop" else argv[0]]
    for arg in argv[1:]:
        out.append({"8080": str(port), "0.0.0.0": "127.0.0.1"}.get(arg, arg))  # noqa: S104  # replaced, not bound
    return out


def runs_as(source: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment ``source`` gives the server."""
    image = Image()
    if source == "image":
        return image.command, image.env
    if source == "compose":
        service = compose()["services"]["autoloop"]  # type: ignore[index]
        env = {**image.env, **{k: str(v) for k, v in service["environment"].items()}}
        return image.entrypoint + [str(a) for a in service["command"]], env
    found = unit()
    env = dict(pair.split("=", 1) for pair in found["Environment"])
    return shlex.split(found["ExecStart"][0]), env


@pytest.fixture
def gh() -> Iterator[SandboxHandle]:
    with running_sandbox() as handle:
        yield handle


def app_home(tmp_path: Path, gh: SandboxHandle, env: dict[str, str]) -> Path:
    """The volume: ``autoloop init`` as the docs run it, then the App's settings with the
    key beside them, as ``autoloop app create`` leaves them."""
    home = tmp_path / "volume"
    home.mkdir()
    init = subprocess.run(
        [AUTOLOOP, "init"],
        cwd=home,
        env={**env, "AUTOLOOP_HOME": str(home)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert init.returncode == 0, init.stderr
    key = home / "github-app.private-key.pem"
    key.write_text(gh.private_key_pem)
    key.chmod(0o600)
    (home / "settings.toml").write_text(
        f"github_app_id = {gh.app_id}\n"
        'github_private_key = "github-app.private-key.pem"\n'
        f'github_webhook_secret = "{gh.webhook_secret}"\n'
        f'github_url = "{gh.api_url}"\n'
    )
    return home


@pytest.mark.parametrize("source", ["image", "compose", "unit"])
def test_the_deployed_command_serves_the_app(
    source: str, gh: SandboxHandle, tmp_path: Path
) -> None:
    argv, declared = runs_as(source)
    assert declared["AUTOLOOP_HOME"] == "/var/lib/autoloop"
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env = {**base, **declared}
    home = app_home(tmp_path, gh, env)
    env["AUTOLOOP_HOME"] = str(home)  # the volume, here
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            localize(argv, port), cwd=home, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        health = localize(Image().healthcheck, port)
        health = [sys.executable if a == "python" else a.replace("8080", str(port)) for a in health]
        deadline = time.monotonic() + 30
        while subprocess.run(health, check=False, capture_output=True).returncode != 0:
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        # GitHub's webhooks reach it and it answers as the App
        gh.world.set_app_url(f"http://127.0.0.1:{port}/github/webhook")
        gh.world.open_issue("reader", "Crash on start")
        assert gh.world.settle()
        assert [d.status for d in gh.world.deliveries] == ["OK"]
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=30)
    text = log.read_text()
    assert code == 0, text
    assert "Traceback" not in text
    assert f"listening on http://127.0.0.1:{port}" in text


def test_compose_runs_the_image_with_the_home_folder_as_its_volume() -> None:
    image = Image()
    service = compose()["services"]["autoloop"]  # type: ignore[index]
    assert service["build"] == "."
    [volume] = service["volumes"]
    assert volume.split(":")[1] == image.env["AUTOLOOP_HOME"] == json.loads(image.one("VOLUME"))[0]
    [published] = service["ports"]
    assert published == f"127.0.0.1:{image.one('EXPOSE')}:{image.one('EXPOSE')}"
    command = [str(a) for a in service["command"]]
    assert command[0] == "serve"
    assert command[command.index("--port") + 1] == image.one("EXPOSE")


def test_the_image_holds_every_package_and_the_files_its_build_needs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = {
        source
        for word, rest in instructions_of_build()
        if word == "COPY"
        for source in rest.split()[:-1]  # the last word is where they go
    }
    assert packages | {"pyproject.toml", "README.md"} <= copied
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert not packages & set(ignored)


def instructions_of_build() -> list[tuple[str, str]]:
    lines = (ROOT / "Dockerfile").read_text().split("FROM ")[1].splitlines()
    return [(line.split()[0], line.partition(" ")[2]) for line in lines[1:] if line.strip()]


def test_the_systemd_unit_is_one_systemd_accepts(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    text = (ROOT / "deploy" / "autoloop.service").read_text()
    copy = tmp_path / "autoloop.service"
    copy.write_text(text.replace("/opt/autoloop/bin/autoloop", AUTOLOOP))
    checked = subprocess.run(
        [analyze, "verify", str(copy)], capture_output=True, text=True, check=False
    )
    assert (checked.returncode, checked.stderr) == (0, "")
