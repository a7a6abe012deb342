"""``autoloop app create`` end to end: the real command as a process, the sandbox GitHub
as GitHub, and an HTTP client as the person's browser."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakegithub.server import SandboxHandle, running_sandbox
from ghapp.commands.app_create import web_url
from ghapp.commands.home import init_home
from ghapp.github.client import GitHubClient
from ghapp.github.manifest import EVENTS, PERMISSIONS
from ghapp.runtime.settings import Settings
from tests.browser import ROOT, first_form, register_app, start_app_create

URL = "https://autoloop.example.com"


@pytest.fixture(scope="module")
def gh() -> Iterator[SandboxHandle]:
    with running_sandbox() as handle:
        yield handle


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    init_home(folder)
    return folder


def env_for(home: Path, gh: SandboxHandle, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env.update(AUTOLOOP_HOME=str(home), AUTOLOOP_GITHUB_URL=gh.api_url, **extra)
    return env


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", *args],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_app_create_registers_the_app_and_writes_its_settings(
    gh: SandboxHandle, home: Path
) -> None:
    env = env_for(home, gh)
    proc, page = start_app_create(["--org", "acme", "--url", URL, "--name", "al-acme"], env)
    assert page is not None, finish(proc)
    sent, back = register_app(page)
    assert sent.headers["location"].startswith(page + "callback?code=")
    assert back.status_code == 200
    assert "al-acme" in back.text
    code, out, err = finish(proc)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("registered the GitHub App al-acme (id ")
    assert lines[0].endswith(" on acme")
    assert any(f"{gh.api_url}/apps/al-acme/installations/new" in line for line in lines)

    settings_file = home / "settings.toml"
    key_file = home / "github-app.private-key.pem"
    assert stat.S_IMODE(settings_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    # the settings as the server reads them: no variable but the home folder
    settings = Settings.from_env({"AUTOLOOP_HOME": str(home)})
    assert settings.file == settings_file
    checked = settings.require_github()
    assert checked.api_url == gh.api_url
    assert settings.github_private_key == str(key_file)
    # the key is named beside the settings, so the home folder can move
    assert 'github_private_key = "github-app.private-key.pem"\n' in settings_file.read_text()
    app = gh.sandbox.state.apps[checked.app_id]
    assert app.slug == "al-acme"
    assert app.owner == "acme"
    assert checked.webhook_secret == app.webhook_secret.encode()
    assert app.webhook_url == URL + "/github/webhook"
    with GitHubClient.from_settings(checked) as client:
        me = client.get_app()
    assert me["slug"] == "al-acme"
    assert me["permissions"] == {p.name: p.level for p in PERMISSIONS}
    assert me["events"] == [e.name for e in EVENTS]


def test_the_page_posts_the_manifest_to_the_organizations_page(
    gh: SandboxHandle, home: Path
) -> None:
    proc, page = start_app_create(
        ["--org", "acme", "--url", URL + "/", "--timeout", "30"], env_for(home, gh)
    )
    assert page is not None
    try:
        form = first_form(httpx.get(page).text, page)
    finally:
        proc.kill()
        proc.communicate()
    assert form.action.startswith(f"{gh.api_url}/organizations/acme/settings/apps/new?state=")
    manifest = json.loads(form.fields["manifest"])
    assert manifest["name"] == "autoloop-acme"
    assert manifest["url"] == URL + "/"
    assert manifest["hook_attributes"]["url"] == URL + "/github/webhook"
    assert manifest["redirect_url"] == page + "callback"
    assert manifest["default_permissions"] == {p.name: p.level for p in PERMISSIONS}


def test_a_users_app_and_json_output(gh: SandboxHandle, home: Path) -> None:
    proc, page = start_app_create(
        ["--user", "--url", URL, "--name", "al-mine", "--json"], env_for(home, gh)
    )
    assert page is not None
    sent, _ = register_app(page)
    assert "/settings/apps/new?state=" in str(sent.request.url)
    assert "/organizations/" not in str(sent.request.url)
    code, out, _ = finish(proc)
    assert code == 0
    result: dict[str, Any] = json.loads(out)
    assert result["slug"] == "al-mine"
    assert result["owner"] == "maintainer"
    assert result["settings"] == str(home / "settings.toml")
    assert result["install_url"] == f"{gh.api_url}/apps/al-mine/installations/new"


def test_an_answer_with_another_state_is_refused_and_nothing_is_written(
    gh: SandboxHandle, home: Path
) -> None:
    proc, page = start_app_create(
        ["--org", "acme", "--url", URL, "--name", "al-state", "--timeout", "3"], env_for(home, gh)
    )
    assert page is not None
    for state in ("forged", "%C3%A9t%C3%A9", ""):
        forged = httpx.get(page + f"callback?code=0123456789abcdef0123&state={state}")
        assert forged.status_code == 400
        assert "does not belong to this run" in forged.text
    code, _, err = finish(proc)
    assert code == 1
    assert "no answer from GitHub within 3 s; nothing was written" in err
    assert "Traceback" not in err
    assert not (home / "settings.toml").exists()
    assert not (home / "github-app.private-key.pem").exists()


def test_a_code_github_refuses_fails_with_one_line(gh: SandboxHandle, home: Path) -> None:
    proc, page = start_app_create(
        ["--org", "acme", "--url", URL, "--name", "al-used"], env_for(home, gh)
    )
    assert page is not None
    with httpx.Client() as browser:
        form = first_form(browser.get(page).text, page)
        sent = browser.post(form.action, data=form.fields)
        code = sent.headers["location"].split("code=")[1].split("&")[0]
        # someone else exchanged the code first
        assert httpx.post(f"{gh.api_url}/app-manifests/{code}/conversions").status_code == 201
        back = browser.get(sent.headers["location"])
    assert back.status_code == 502
    exit_code, _, err = finish(proc)
    assert exit_code == 1
    assert err.count("\n") == 1
    assert "GitHub refused the code" in err
    assert "404 Not Found" in err
    assert not (home / "settings.toml").exists()


def test_an_app_already_in_the_settings_is_kept_without_force(
    gh: SandboxHandle, home: Path
) -> None:
    (home / "settings.toml").write_text('github_app_id = 77\ngithub_webhook_secret = "s"\n')
    proc = run_cli("app", "create", "--org", "acme", "--url", URL, env=env_for(home, gh))
    assert proc.returncode == 2
    assert "already holds the App 77: add --force" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_force_replaces_the_app_and_keeps_other_settings(gh: SandboxHandle, home: Path) -> None:
    (home / "settings.toml").write_text('github_app_id = 77\ndb = "sqlite:////srv/other.db"\n')
    (home / "github-app.private-key.pem").write_text("old")
    env = env_for(home, gh)
    proc, page = start_app_create(
        ["--org", "acme", "--url", URL, "--name", "al-force", "--force"], env
    )
    assert page is not None
    register_app(page)
    assert finish(proc)[0] == 0
    settings = Settings.from_env({"AUTOLOOP_HOME": str(home)})
    assert settings.github_app_id != "77"
    assert settings.db == "sqlite:////srv/other.db"
    assert "BEGIN RSA PRIVATE KEY" in (home / "github-app.private-key.pem").read_text()


def test_a_home_that_does_not_exist_is_refused(gh: SandboxHandle, tmp_path: Path) -> None:
    proc = run_cli(
        "app", "create", "--org", "acme", "--url", URL, env=env_for(tmp_path / "typo", gh)
    )
    assert proc.returncode == 2
    assert "does not exist: run 'autoloop init' first" in proc.stderr
    assert not (tmp_path / "typo").exists()
    afile = tmp_path / "afile"  # a --config under a file: not "does not exist"
    afile.write_text("")
    home = tmp_path / "home"
    init_home(home)
    proc = run_cli(
        "app", "create", "--org", "acme", "--url", URL, "--config", str(afile / "s.toml"),
        env=env_for(home, gh),
    )  # fmt: skip
    assert proc.returncode == 2
    assert f"{afile} is not a folder" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--org", "acme"], "the following arguments are required: --url"),
        (["--url", URL], "one of the arguments --org --user is required"),
        (["--org", "acme", "--url", "autoloop.example.com"], "--url 'autoloop.example.com'"),
        (["--org", "bad_org!", "--url", URL], "is not an organization's login"),
        (  # the manifest's hook became URL/github/webhook/github/webhook
            ["--org", "acme", "--url", "https://autoloop.example.com/github/webhook/"],
            "is the webhook's address: give the server's own (https://autoloop.example.com)",
        ),
        (["--org", "acme", "--url", URL, "--name", "x" * 35], "must have 1 to 34 characters"),
    ],
)
def test_bad_usage_says_what_to_do(
    gh: SandboxHandle, home: Path, args: list[str], says: str
) -> None:
    proc = run_cli("app", "create", *args, env=env_for(home, gh))
    assert proc.returncode == 2
    assert says in proc.stderr
    assert "Traceback" not in proc.stderr


def test_app_without_create_prints_its_usage(gh: SandboxHandle, home: Path) -> None:
    proc = run_cli("app", env=env_for(home, gh))
    assert proc.returncode == 2
    assert "usage: autoloop app create" in proc.stderr


@pytest.mark.parametrize(
    ("api", "web"),
    [
        ("https://api.github.com", "https://github.com"),
        ("https://api.github.com/", "https://github.com"),
        ("https://ghe.example.com/api/v3", "https://ghe.example.com"),
        ("http://127.0.0.1:8765", "http://127.0.0.1:8765"),
    ],
)
def test_githubs_web_address_follows_the_api_address(api: str, web: str) -> None:
    assert web_url(api) == web
