"""``autoloop doctor`` as a person runs it: the real command against the sandbox GitHub;
each problem shows up as one FAIL row that says what to do, and the exit code is 1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from fakegithub.server import SandboxHandle, free_port, running_sandbox
from ghapp.commands.doctor import deliveries_check
from ghapp.commands.home import Home, init_home
from ghapp.commands.serve import build
from ghapp.runtime.settings import Settings
from ghapp.store.base import SCHEMA_VERSION
from ghapp.store.postgres import PostgresStore
from tests.hub_cli import FAKES_BIN, ROOT
from tests.servers import live_server
from tests.stores import pg_schema

RULES: dict[str, Any] = {
    "sources": {"github": {"adapter": "github"}},
    "agents": {"coder": {"use": "claude"}, "demo": {"use": "demo"}},
    "channels": {"gh": {"use": "github-comment"}},
    "rules": [
        {
            "name": "triage",
            "on": {"source": "github", "type": "issues.opened"},
            "agent": "coder",
            "allow": ["github.comment"],
            "notify": ["gh"],
        }
    ],
}


@pytest.fixture
def gh() -> Iterator[SandboxHandle]:
    with running_sandbox() as handle:
        yield handle


def github_env(gh: SandboxHandle, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env.update(
        AUTOLOOP_HOME=str(home),
        AUTOLOOP_GITHUB_URL=gh.api_url,
        AUTOLOOP_GITHUB_APP_ID=str(gh.app_id),
        AUTOLOOP_GITHUB_PRIVATE_KEY=str(gh.private_key_path),
        AUTOLOOP_GITHUB_WEBHOOK_SECRET=gh.webhook_secret,
        PATH=f"{FAKES_BIN}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
    )
    env.update(extra)
    return env


def make_home(tmp_path: Path, rules: dict[str, Any] | None = None) -> Path:
    home = tmp_path / "home"
    init_home(home, rules_text=json.dumps(rules or RULES))
    return home


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``autoloop ARGS`` as a new process with ``env``."""
    return subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", *args],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def doctor(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any], str]:
    proc = cli(env, "doctor", "--json", *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def fails(report: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["check"], c["detail"]) for c in report["checks"] if c["status"] == "FAIL"]


def status_of(report: dict[str, Any], check: str) -> str:
    found: str = next(c["status"] for c in report["checks"] if c["check"] == check)
    return found


def deliver_one_webhook(gh: SandboxHandle, url: str) -> None:
    gh.world.set_app_url(url)
    gh.world.open_issue("reader", "Crash on start")
    assert gh.world.settle()


def test_a_healthy_install_has_no_problem(gh: SandboxHandle, tmp_path: Path) -> None:
    home = make_home(tmp_path)
    secret = {"AUTOLOOP_GITHUB_WEBHOOK_SECRET": gh.webhook_secret}
    with live_server(home, RULES, env=secret, start_worker=False) as live:
        deliver_one_webhook(gh, live.url + "/github/webhook")
    code, report, _ = doctor(github_env(gh, home))
    assert (code, fails(report)) == (0, [])
    assert report["ok"] is True
    statuses = {c["check"]: c["status"] for c in report["checks"]}
    assert statuses == {
        "settings": "ok",
        "home folder": "ok",
        "master.key": "ok",
        "ledger": "ok",
        "rules": "ok",
        "agent coder": "ok",
        "agent demo": "ok",
        "cwd of triage": "ok",
        "GitHub settings": "ok",
        "private key file": "ok",
        "App id and key": "ok",
        "App permissions": "ok",
        "installation on sandbox": "ok",
        "webhook deliveries": "ok",
    }


def test_a_wrong_app_id_is_one_row(gh: SandboxHandle, tmp_path: Path) -> None:
    wrong = str(gh.app_id + 999)
    env = github_env(gh, make_home(tmp_path), AUTOLOOP_GITHUB_APP_ID=wrong)
    code, report, _ = doctor(env)
    assert code == 1
    [(check, detail)] = fails(report)
    assert check == "App id and key"
    assert f"GitHub refuses the App id {wrong} with this private key" in detail
    assert "401" in detail
    assert "check AUTOLOOP_GITHUB_APP_ID" in detail


def test_a_wrong_api_url_is_named_not_the_key(gh: SandboxHandle, tmp_path: Path) -> None:
    """A GitHub Enterprise URL with a path too many (or one missing): the row said the id
    and the key were not the same App's, and to generate a new private key."""
    env = github_env(gh, make_home(tmp_path))
    env["AUTOLOOP_GITHUB_URL"] = env["AUTOLOOP_GITHUB_URL"].rstrip("/") + "/api/v3"
    code, report, _ = doctor(env)
    assert code == 1
    [(check, detail)] = fails(report)
    assert check == "App id and key"
    assert "has no GitHub App API (GET /app: 404" in detail, detail
    assert "check AUTOLOOP_GITHUB_URL" in detail and "private key" not in detail


def test_a_wrong_key_is_one_row(gh: SandboxHandle, tmp_path: Path) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key = tmp_path / "other.pem"
    key.write_bytes(
        other.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    key.chmod(0o600)
    env = github_env(gh, make_home(tmp_path), AUTOLOOP_GITHUB_PRIVATE_KEY=str(key))
    code, report, _ = doctor(env)
    assert code == 1
    [(check, detail)] = fails(report)
    assert check == "App id and key"
    assert "generate a new private key" in detail


def test_a_key_that_is_no_key_is_one_row(gh: SandboxHandle, tmp_path: Path) -> None:
    key = tmp_path / "not-a-key.pem"
    key.write_text("hello\n")
    env = github_env(gh, make_home(tmp_path), AUTOLOOP_GITHUB_PRIVATE_KEY=str(key))
    code, report, _ = doctor(env)
    assert code == 1
    [(check, detail)] = fails(report)
    assert check == "GitHub settings"
    assert "is not an unencrypted PEM private key" in detail


def test_a_missing_agent_binary_is_one_row(gh: SandboxHandle, tmp_path: Path) -> None:
    rules = json.loads(json.dumps(RULES))
    rules["agents"]["coder"] = {"use": "claude", "binary": "claude-not-installed"}
    code, report, _ = doctor(github_env(gh, make_home(tmp_path, rules)))
    assert code == 1
    [(check, detail)] = fails(report)
    assert check == "agent coder"
    assert "'claude-not-installed' is not found on PATH; used by triage" in detail
    assert '"binary" option' in detail


def test_a_command_agents_missing_script_is_a_warning(tmp_path: Path) -> None:
    """``["python3", "agent.py", "{prompt}"]`` was reported ok when agent.py did not exist
    (python3 did); every turn then failed."""
    agent = {"use": "command", "command": ["python3", "agent.py", "{prompt}"]}
    rules = {
        "agents": {"script": agent},
        "rules": [{"name": "r", "on": {"type": "x"}, "agent": "script"}],
    }
    home = make_home(tmp_path, rules)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env["AUTOLOOP_HOME"] = str(home)
    _, report, _ = doctor(env)
    (row,) = [c for c in report["checks"] if c["check"] == "agent script"]
    assert row["status"] == "warn"
    assert "the script 'agent.py' its command runs is not found" in row["detail"]
    said = cli(env, "doctor")  # the table's last line: not "no problems found"
    last = said.stdout.rstrip().splitlines()[-1]
    assert last.startswith("no failures; 2 warning(s) to read: "), said.stdout
    assert last.endswith("ledger, agent script")  # (no event yet: no ledger either)
    (home / "agent.py").write_text("print('done')\n")
    _, report, _ = doctor(env)
    assert status_of(report, "agent script") == "ok"


def test_a_webhook_channel_whose_url_variable_is_unset_fails_and_names_it(tmp_path: Path) -> None:
    """doctor said "no problems found"; every card for the channel then failed to send,
    the log saying only "set the variable named by url_env"."""
    chat = {"use": "webhook", "format": "slack", "url_env": "CHAT_URL_FOR_TEST"}
    rules = {
        "agents": {"demo": {"use": "demo"}},
        "channels": {"chat": chat, "spare": {**chat, "url_env": "SPARE_URL_FOR_TEST"}},
        "rules": [{"name": "r", "on": {"type": "x"}, "agent": "demo", "notify": ["chat"]}],
        "owner_notify": ["chat"],
    }
    home = make_home(tmp_path, rules)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env["AUTOLOOP_HOME"] = str(home)
    code, report, _ = doctor(env)
    assert code == 1
    assert fails(report) == [
        ("channel chat", "set CHAT_URL_FOR_TEST (its url_env): cards for it are not sent")
    ]
    assert status_of(report, "channel spare") == "warn"
    code, report, _ = doctor({**env, "CHAT_URL_FOR_TEST": "http://127.0.0.1:9/hook"})
    assert code == 0 and status_of(report, "channel chat") == "ok"


def test_right_after_init_the_starter_rules_example_agent_is_no_warning(tmp_path: Path) -> None:
    """The starter rules hold an example command agent, ``script`` (``agent.py``), that no
    rule uses: doctor warned about its missing script right after ``autoloop init``."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env["AUTOLOOP_HOME"] = str(home)
    assert cli(env, "init").returncode == 0
    _, report, _ = doctor(env)
    (row,) = [c for c in report["checks"] if c["check"] == "agent script"]
    assert row["status"] == "skip"
    assert "used by no rule; its script 'agent.py' is not there yet" in row["detail"]
    assert [c["check"] for c in report["checks"] if c["status"] == "warn"] == ["ledger"]


def test_an_unreachable_webhook_is_one_row(gh: SandboxHandle, tmp_path: Path) -> None:
    deliver_one_webhook(gh, f"http://127.0.0.1:{free_port()}/github/webhook")
    code, report, _ = doctor(github_env(gh, make_home(tmp_path)))
    assert code == 1
    [(check, detail)] = fails(report)
    assert check == "webhook deliveries"
    assert "1 of the last 1 failed" in detail
    assert "issues.opened" in detail
    assert "failed to connect to host" in detail
    assert "GitHub could not reach the webhook URL" in detail


def test_a_webhook_refused_for_its_secret_is_one_row(gh: SandboxHandle, tmp_path: Path) -> None:
    home = make_home(tmp_path)
    wrong = {"AUTOLOOP_GITHUB_WEBHOOK_SECRET": "not-the-apps-secret"}
    with live_server(home, RULES, env=wrong, start_worker=False) as live:
        deliver_one_webhook(gh, live.url + "/github/webhook")
    code, report, _ = doctor(github_env(gh, home))
    assert code == 1
    [(check, detail)] = fails(report)
    assert check == "webhook deliveries"
    assert "Invalid HTTP Response: 401" in detail
    assert "differs from AUTOLOOP_GITHUB_WEBHOOK_SECRET" in detail


def test_a_fixed_webhook_is_no_longer_a_problem(gh: SandboxHandle, tmp_path: Path) -> None:
    home = make_home(tmp_path)
    deliver_one_webhook(gh, f"http://127.0.0.1:{free_port()}/github/webhook")
    secret = {"AUTOLOOP_GITHUB_WEBHOOK_SECRET": gh.webhook_secret}
    with live_server(home, RULES, env=secret, start_worker=False) as live:
        deliver_one_webhook(gh, live.url + "/github/webhook")
    code, report, _ = doctor(github_env(gh, home))
    assert (code, fails(report)) == (0, [])
    row = next(c for c in report["checks"] if c["check"] == "webhook deliveries")
    assert row["detail"] == "the newest of 2 in the last day was delivered (1 failed before it)"


def test_an_installation_without_a_needed_permission_is_one_row(
    gh: SandboxHandle, tmp_path: Path
) -> None:
    gh.sandbox.state.installations[gh.installation_id].permissions["issues"] = "read"
    code, report, _ = doctor(github_env(gh, make_home(tmp_path)))
    assert code == 1
    [(check, detail)] = fails(report)
    assert check == "installation on sandbox"
    assert "lacks issues:write (has read)" in detail
    assert "accept the App's new permissions" in detail


def test_an_app_installed_nowhere_is_one_row(gh: SandboxHandle, tmp_path: Path) -> None:
    gh.sandbox.state.installations.clear()
    code, report, _ = doctor(github_env(gh, make_home(tmp_path)))
    assert code == 1
    [(check, detail)] = fails(report)
    assert check == "installations"
    assert f"{gh.api_url}/apps/autoloop-sandbox/installations/new" in detail


def test_unreachable_github_is_one_row(gh: SandboxHandle, tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    env = github_env(gh, make_home(tmp_path), AUTOLOOP_GITHUB_URL=closed)
    code, report, _ = doctor(env)
    assert code == 1
    [(check, detail)] = fails(report)
    assert check == "App id and key"
    assert f"cannot reach GitHub at {closed}" in detail


def test_a_missing_cwd_is_one_row(gh: SandboxHandle, tmp_path: Path) -> None:
    rules = json.loads(json.dumps(RULES))
    rules["rules"][0]["cwd"] = str(tmp_path / "srv" / "web")
    code, report, _ = doctor(github_env(gh, make_home(tmp_path, rules)))
    assert code == 1
    [(check, detail)] = fails(report)
    assert check == "cwd of triage"
    assert f"{tmp_path / 'srv' / 'web'} does not exist" in detail


def test_a_missing_home_is_reported_and_not_created(gh: SandboxHandle, tmp_path: Path) -> None:
    typo = tmp_path / "hoem"
    code, report, _ = doctor(github_env(gh, typo))
    assert code == 1
    assert fails(report)[0][0] == "home folder"
    assert "run 'autoloop init'" in fails(report)[0][1]
    assert not typo.exists()


def test_a_master_key_other_users_can_read_is_a_warning(tmp_path: Path) -> None:
    """Whoever reads master.key can sign card links: mode 0644 was reported ok."""
    home = make_home(tmp_path, {"agents": {"demo": {"use": "demo"}}, "rules": []})
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env["AUTOLOOP_HOME"] = str(home)
    (home / "master.key").chmod(0o644)
    _, report, _ = doctor(env)
    (row,) = [c for c in report["checks"] if c["check"] == "master.key"]
    assert row["status"] == "warn"
    assert "mode 644" in row["detail"] and f"chmod 600 {home / 'master.key'}" in row["detail"]
    (home / "master.key").chmod(0o600)
    _, report, _ = doctor(env)
    assert status_of(report, "master.key") == "ok"


def test_a_new_ledger_is_private_and_one_others_can_read_is_a_warning(tmp_path: Path) -> None:
    """The ledger holds the events' text (issue bodies, names): it was created with the
    umask's mode (0644), its log and shared-memory files too."""
    home = make_home(tmp_path, {"agents": {"demo": {"use": "demo"}}, "rules": []})
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env["AUTOLOOP_HOME"] = str(home)
    proc = cli(env, "emit", "local", "ping", "x", "--id", "e1")
    assert proc.returncode == 0, proc.stderr
    ledger = home / "ledger.db"
    made = sorted(p.name for p in home.iterdir() if p.name.startswith("ledger.db"))
    assert made and made[0] == "ledger.db"
    for name in made:
        assert (home / name).stat().st_mode & 0o777 == 0o600, name
    _, report, _ = doctor(env)
    assert status_of(report, "ledger") == "ok"
    ledger.chmod(0o644)
    _, report, _ = doctor(env)
    (row,) = [c for c in report["checks"] if c["check"] == "ledger"]
    assert row["status"] == "warn"
    assert "mode 644" in row["detail"] and f"chmod 600 {ledger}*" in row["detail"]


def test_a_secret_too_short_to_be_masked_is_a_warning_in_doctor_and_drain(
    tmp_path: Path,
) -> None:
    """A marked value under 8 characters is left in clear (it would mask ordinary words):
    nothing said so."""
    doc = {"secret_env": ["SHOP_KEY", "LONG_KEY"], "agents": {"demo": {"use": "demo"}}}
    home = make_home(tmp_path, {**doc, "rules": []})
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env.update(AUTOLOOP_HOME=str(home), SHOP_KEY="abc123", LONG_KEY="a-long-enough-value")
    _, report, _ = doctor(env)
    (row,) = [c for c in report["checks"] if c["check"].startswith("secret ")]
    assert (row["check"], row["status"]) == ("secret SHOP_KEY", "warn")
    assert "too short to be masked (under 8 characters)" in row["detail"]
    drained = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "drain"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert drained.returncode == 0, drained.stderr
    assert "SHOP_KEY (secret_env) is too short to be masked" in drained.stderr
    assert "LONG_KEY" not in drained.stderr


def test_local_only_is_no_problem(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"agents": {"demo": {"use": "demo"}}, "rules": []})
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env["AUTOLOOP_HOME"] = str(home)
    code, report, _ = doctor(env)
    assert code == 0
    assert status_of(report, "GitHub App") == "skip"
    assert status_of(report, "ledger") == "warn"  # nothing recorded yet, and none created
    assert not (home / "ledger.db").exists()


def test_a_rules_toml_beside_rules_json_fails_and_a_review_agent_is_explained(
    tmp_path: Path,
) -> None:
    """rules.toml was ignored in silence while rules.json existed (a warning here, since a
    failure everywhere); an agent only a delivery
    policy names was listed as used by no rule."""
    home = make_home(tmp_path, {"agents": {"reviewer": {"use": "demo"}}, "rules": []})
    (home / "rules.toml").write_text('[agents.other]\nuse = "demo"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env["AUTOLOOP_HOME"] = str(home)
    code, report, _ = doctor(env)
    assert code == 1  # every command refuses the pair (see test_cli_input)
    (rules,) = [c for c in report["checks"] if c["check"] == "rules"]
    assert rules["status"] == "FAIL"
    assert "rules.toml is here too, and only one rules file is read" in rules["detail"]
    (home / "rules.toml").unlink()
    code, report, _ = doctor(env)
    (agent,) = [c for c in report["checks"] if c["check"] == "agent reviewer"]
    assert 'a delivery policy\'s review = "agent:NAME" may use it' in agent["detail"]


def test_a_key_other_users_can_read_is_a_warning(gh: SandboxHandle, tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    key.write_text(gh.private_key_pem)
    key.chmod(0o644)
    env = github_env(gh, make_home(tmp_path), AUTOLOOP_GITHUB_PRIVATE_KEY=str(key))
    code, report, _ = doctor(env)
    assert code == 0
    assert status_of(report, "private key file") == "warn"
    row = next(c for c in report["checks"] if c["check"] == "private key file")
    assert f"chmod 600 {key}" in row["detail"]


def test_the_table_lines_up_and_ends_with_the_verdict(gh: SandboxHandle, tmp_path: Path) -> None:
    env = github_env(gh, make_home(tmp_path), AUTOLOOP_GITHUB_APP_ID="12345")
    proc = subprocess.run(
        [sys.executable, "-m", "ghapp.commands.cli", "doctor"],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()  # not a terminal: plain columns
    assert lines[0] == "autoloop doctor:"
    assert lines[1].split() == ["check", "status", "detail"]
    column = lines[1].index("status")
    assert all(line[column - 2 : column] == "  " for line in lines[2:-1])
    assert any(line.startswith("  App id and key") and " FAIL " in line for line in lines)
    assert lines[-1] == "1 problem(s): fix the FAIL rows, then run 'autoloop doctor' again"


def test_no_deliveries_is_a_warning_and_a_404_says_the_path_is_wrong() -> None:
    assert deliveries_check([]).status == "warn"
    failed = {
        "id": 2,
        "delivered_at": "2024-05-01T10:00:00Z",
        "status": "Invalid HTTP Response: 404",
        "status_code": 404,
        "event": "push",
        "action": None,
    }
    row = deliveries_check([failed])
    assert row.status == "FAIL"
    assert "push at 2024-05-01T10:00:00Z" in row.detail
    assert "must end in /github/webhook" in row.detail


# ------------------------------------------------------------------- a PostgreSQL ledger


def local_env(home: Path, db: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    env.update(AUTOLOOP_HOME=str(home), AUTOLOOP_DB=db)
    return env


def ledger_row(report: dict[str, Any]) -> tuple[str, str]:
    row = next(c for c in report["checks"] if c["check"] == "ledger")
    return row["status"], row["detail"]


def ledger_tables(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def pg() -> Iterator[str]:
    with pg_schema() as url:
        yield url


def start(home: Path, pg: str) -> list[str]:
    """What ``autoloop serve`` would say at start on ``home``, replica of the ledger ``pg``."""
    env = local_env(home, pg)
    ctx = Home.open(env=env, home=home)
    try:
        return build(ctx, Settings.from_env(env), connect_github=False).notes
    finally:
        ctx.store.close()


@pytest.mark.pg
def test_replicas_with_different_master_keys_are_told_at_start_and_by_doctor(
    pg: str, tmp_path: Path
) -> None:
    """Each replica's home made by its own 'autoloop init' has its own master.key: a card
    link one sent was refused by the others, behind a load balancer most links."""
    rules = {"agents": {"demo": {"use": "demo"}}, "rules": []}
    first, second = (make_home(tmp_path / name, rules) for name in ("a", "b"))

    assert not [n for n in start(first, pg) if "master.key" in n]
    (said,) = [n for n in start(second, pg) if "master.key" in n]
    assert said.startswith("this home's master.key is not the one the server of this ledger")
    status, detail = ledger_row(doctor(local_env(first, pg))[1])
    assert status == "warn" and "give every server the same master.key" in detail
    shutil.copyfile(first / "master.key", second / "master.key")
    assert [n for n in start(second, pg) if "master.key" in n]  # said once, for the last key
    assert not [n for n in start(second, pg) if "master.key" in n]
    assert ledger_row(doctor(local_env(first, pg))[1])[0] == "ok"


@pytest.mark.pg
def test_a_worker_with_another_master_key_says_so_at_start(pg: str, tmp_path: Path) -> None:
    """The deploy guide said serve and work tell a master.key that differs; work told
    only the rules (ids that held a secret are recorded keyed with it)."""
    rules = {"agents": {"demo": {"use": "demo"}}, "rules": []}
    first, second = (make_home(tmp_path / name, rules) for name in ("a", "b"))
    assert not [n for n in start(first, pg) if "master.key" in n]
    first_line = _work_says(second, pg)
    assert first_line.startswith("autoloop work: this home's master.key is not the one"), first_line
    (second / "master.key").unlink()  # a worker without one ran before: it still does
    assert _work_says(second, pg) == "autoloop work: worker 'local' started\n"


def _work_says(home: Path, pg: str) -> str:
    """The first line ``autoloop work`` prints on ``home`` (then it is stopped)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ghapp.commands.cli", "work", "--poll", "0.2"],
        cwd=ROOT,
        env=local_env(home, pg),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        return proc.stdout.readline()
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.pg
def test_rules_edited_alike_everywhere_while_running_are_not_told_as_different(
    pg: str, tmp_path: Path
) -> None:
    """The same edit of rules.json in every home, taken while running: a replica started
    afterwards was told its rules differed from the ones at the last start (the ledger
    kept the version read at start)."""
    rules: dict[str, Any] = {"agents": {"demo": {"use": "demo"}}, "rules": []}
    first, second = (make_home(tmp_path / name, rules) for name in ("a", "b"))
    running = Home.open(env=local_env(first, pg), home=first)
    try:
        assert not [n for n in start(first, pg) if "rules" in n]
        running.rules()  # read at start
        edited = json.dumps({**rules, "max_hops": 5})
        for home in (first, second):
            (home / "rules.json").write_text(edited)
        assert running.rules().max_hops == 5  # the edit, taken while running
    finally:
        running.store.close()
    assert not [n for n in start(second, pg) if "rules" in n]
    (second / "rules.json").write_text(json.dumps({**rules, "max_hops": 6}))
    (said,) = [n for n in start(second, pg) if "rules" in n]  # a real difference is told
    assert said.startswith("this home's rules are not the ones")


@pytest.mark.pg
def test_an_empty_database_whose_role_may_not_create_is_a_fail_row(pg: str, tmp_path: Path) -> None:
    """doctor said "holds no ledger yet: 'autoloop serve' ... creates it" and "no problems
    found"; serve then failed with "permission denied for schema"."""
    import uuid

    import psycopg

    role = "autoloop_nc_" + uuid.uuid4().hex[:8]
    schema = pg.rsplit("search_path%3D", 1)[-1]
    home = make_home(tmp_path, {"agents": {"demo": {"use": "demo"}}, "rules": []})
    with psycopg.connect(pg, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        try:
            admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
            code, report, _ = doctor(local_env(home, pg.replace("postgres@", f"{role}@", 1)))
        finally:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")
    status, detail = ledger_row(report)
    assert (code, status) == (1, "FAIL"), detail
    assert "may not create tables there" in detail and "give the role CREATE" in detail
    code, report, _ = doctor(local_env(home, pg))  # the owner may: a warning, as before
    assert (code, ledger_row(report)[0]) == (0, "warn")


@pytest.mark.pg
def test_a_postgresql_ledger_is_looked_at_and_not_created(pg: str, tmp_path: Path) -> None:
    """An empty database is a warning and stays empty; a ledger there is ok with its schema
    and last fact; one from a newer autoloop is a FAIL that says to upgrade."""
    env = local_env(make_home(tmp_path, {"agents": {"demo": {"use": "demo"}}, "rules": []}), pg)
    code, report, _ = doctor(env)
    status, detail = ledger_row(report)
    assert (code, status) == (0, "warn"), detail
    assert "holds no ledger yet" in detail and "@127.0.0.1:" in detail
    assert ledger_tables(pg) == 0

    store = PostgresStore(pg)  # as 'autoloop serve' would make it
    store.close()
    code, report, _ = doctor(env)
    status, detail = ledger_row(report)
    assert (code, status) == (0, "ok"), detail
    assert f"schema {SCHEMA_VERSION}, no facts yet" in detail

    import psycopg

    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute("UPDATE ledger_info SET v = %s WHERE k = 'schema'", (str(SCHEMA_VERSION + 1),))
    code, report, _ = doctor(env)
    status, detail = ledger_row(report)
    assert (code, status) == (1, "FAIL"), detail
    assert detail.endswith(
        f"has schema {SCHEMA_VERSION + 1}, newer than this autoloop knows ({SCHEMA_VERSION}): "
        "upgrade autoloop"
    )


@pytest.mark.parametrize(
    ("db", "words"),
    [
        (
            "postgresql://autoloop:hunter2-not-shown@127.0.0.1:1/ledger",
            ["cannot reach the PostgreSQL ledger", "Connection refused", "check AUTOLOOP_DB"],
        ),
        (
            "postgresq://autoloop:hunter2-not-shown@db/ledger",
            ["'postgresq://autoloop:***@db/ledger' is no ledger URL", "sqlite:///PATH"],
        ),
    ],
)
def test_a_ledger_doctor_cannot_reach_is_one_fail_row_without_its_password(
    tmp_path: Path, db: str, words: list[str]
) -> None:
    env = local_env(make_home(tmp_path, {"agents": {"demo": {"use": "demo"}}, "rules": []}), db)
    code, report, stderr = doctor(env)
    assert code == 1
    ((check, detail),) = fails(report)
    assert check == "ledger" and "\n" not in detail
    for word in words:
        assert word in detail, detail
    assert "hunter2" not in json.dumps(report) + stderr


def test_a_weak_webhook_secret_alone_is_a_fail_row(tmp_path: Path) -> None:
    """Ingest only (a webhook secret, no App): the secret is checked as 'serve' checks it."""
    home = make_home(tmp_path, {"agents": {"demo": {"use": "demo"}}, "rules": []})
    env = local_env(home, f"sqlite:///{home / 'ledger.db'}")
    env["AUTOLOOP_GITHUB_WEBHOOK_SECRET"] = "changeme"
    code, report, _ = doctor(env)
    assert code == 1
    ((check, detail),) = fails(report)
    assert check == "GitHub settings"
    assert detail.startswith("AUTOLOOP_GITHUB_WEBHOOK_SECRET is too weak (8 characters"), detail
    assert "changeme" not in json.dumps(report)


@pytest.mark.parametrize(
    ("secret", "status", "detail"),
    [
        (None, "FAIL", "source 'shop': set SHOP_HMAC to its HMAC secret"),
        ("shop", "FAIL", "source 'shop': SHOP_HMAC is too weak (4 characters"),
        ("a-long-enough-shop-secret", "ok", "POST /v1/in/shop, signed in x-shop-signature"),
    ],
)
def test_each_signed_source_is_a_row_as_serve_would_take_it(
    tmp_path: Path, secret: str | None, status: str, detail: str
) -> None:
    """Before these rows, doctor said "no problems found" for a source whose secret was
    not set, and 'autoloop serve' then refused to start."""
    source = {"adapter": "hmac", "header": "x-shop-signature", "secret_env": "SHOP_HMAC"}
    rules = {"sources": {"shop": source}, "agents": {"demo": {"use": "demo"}}, "rules": []}
    env = local_env(make_home(tmp_path, rules), f"sqlite:///{tmp_path / 'ledger.db'}")
    if secret is not None:
        env["SHOP_HMAC"] = secret
    code, report, _ = doctor(env)
    row = next(c for c in report["checks"] if c["check"] == "source shop")
    assert (row["status"], code) == (status, 0 if status == "ok" else 1), row
    assert row["detail"].startswith(detail), row
    assert "a-long-enough" not in json.dumps(report)


@pytest.mark.pg
def test_replicas_with_different_rules_are_told_at_start_and_by_doctor(
    pg: str, tmp_path: Path
) -> None:
    """Each replica decides by its own rules.json: two that differed (one edited, the
    other not) ran different rules on one ledger, and nothing said so."""
    rules = {"agents": {"demo": {"use": "demo"}}, "rules": []}
    first = make_home(tmp_path / "a", rules)
    second = make_home(tmp_path / "b", {**rules, "max_hops": 3})
    shutil.copyfile(first / "master.key", second / "master.key")  # (only the rules differ)

    assert not [n for n in start(first, pg) if "rules" in n]
    (said,) = [n for n in start(second, pg) if "this home's rules" in n]
    assert "each replica decides by its own rules.json" in said
    status, detail = ledger_row(doctor(local_env(first, pg))[1])
    assert status == "warn" and "give every replica the same file" in detail
    shutil.copyfile(first / "rules.json", second / "rules.json")
    assert [n for n in start(second, pg) if "this home's rules" in n]  # said once, for the last
    assert not [n for n in start(second, pg) if "this home's rules" in n]
    assert ledger_row(doctor(local_env(first, pg))[1])[0] == "ok"
    # a worker of the ledger says it too
    (second / "rules.json").write_text(json.dumps({**rules, "max_hops": 4}))
    worker = subprocess.Popen(
        [sys.executable, "-m", "ghapp.commands.cli", "work", "--poll", "0.1"],
        cwd=ROOT, env=local_env(second, pg), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        assert worker.stdout is not None
        first_line = worker.stdout.readline()
        assert first_line.startswith("autoloop work: this home's rules are not the ones"), (
            first_line
        )
    finally:
        worker.terminate()
        worker.communicate(timeout=20)  # (reads the rest, and closes the pipe)


def _immutable(folder: Path, on: bool) -> bool:
    """``chattr +i`` (or ``-i``) on ``folder``; False where the system refuses it."""
    chattr = shutil.which("chattr")
    if chattr is None:
        return False
    flag = "+i" if on else "-i"
    proc = subprocess.run([chattr, flag, str(folder)], capture_output=True, check=False)
    return proc.returncode == 0


def test_a_home_that_cannot_be_written_is_a_fail_row(tmp_path: Path) -> None:
    """A home no file can be made in (immutable here; a read-only mount alike): doctor
    said "no problems found" while emit, status, drain and serve all failed."""
    home = make_home(tmp_path, {"agents": {}, "rules": []})
    env = {**os.environ, "AUTOLOOP_HOME": str(home)}
    env = {k: v for k, v in env.items() if not k.startswith("AUTOLOOP_GITHUB")}
    code, report, _ = doctor(env)
    assert status_of(report, "home folder") == "ok", report
    if not _immutable(home, True):
        pytest.skip("chattr +i is not allowed here (not root, or the file system has no flags)")
    try:
        code, report, _ = doctor(env)
        emit = cli(env, "emit", "local", "x", "s", "--id", "1")
    finally:
        assert _immutable(home, False)
    (row,) = [d for c, d in fails(report) if c == "home folder"]
    assert code == 1 and "cannot be written (Operation not permitted)" in row, row
    assert emit.returncode == 2 and "Traceback" not in emit.stderr, emit.stderr
    assert not [p for p in home.iterdir() if p.name.startswith("tmp")]  # nothing left
