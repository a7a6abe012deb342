"""The docs' commands, run as a reader would run them (see :mod:`tests.docs.runner`):
``docs/github-app.md`` and ``docs/rules.md`` against the sandbox GitHub,
``docs/deploy.md`` against a home folder of its own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakegithub.server import SandboxHandle, running_sandbox
from ghapp.github.manifest import EVENTS, PERMISSIONS, markdown_table
from ghapp.runtime.segments import SegmentLog, segments_path
from tests.docs.runner import COMMAND_INFOS, DocSession, read_blocks, session_env

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = ROOT / "docs"
ALL_DOCS = sorted(DOCS.glob("*.md"))


@pytest.fixture
def gh() -> Iterator[SandboxHandle]:
    with running_sandbox() as handle:
        yield handle


def walk(session: DocSession, doc: Path) -> dict[str, str]:
    """Every marked step of ``doc``, in order; answers the background jobs' logs."""
    try:
        for block in read_blocks(doc):
            if block.marker is not None:
                session.do(block)
    finally:
        logs = session.close()
    return logs


def test_the_docs_are_there() -> None:
    assert {d.name for d in ALL_DOCS} >= {"github-app.md", "rules.md", "deploy.md"}


@pytest.mark.parametrize("doc", ALL_DOCS, ids=lambda d: d.name)
def test_every_command_block_is_run_or_says_why_not(doc: Path) -> None:
    unmarked = [b.where for b in read_blocks(doc) if b.info in COMMAND_INFOS and b.marker is None]
    assert unmarked == []


def test_the_permissions_table_is_the_one_the_code_uses() -> None:
    text = (DOCS / "github-app.md").read_text()
    start = text.index("<!-- needs-table:start -->\n") + len("<!-- needs-table:start -->\n")
    end = text.index("<!-- needs-table:end -->")
    assert text[start:end] == markdown_table()


def test_github_app_md_registers_installs_and_checks_the_app(
    gh: SandboxHandle, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "me"
    env = session_env(home, AUTOLOOP_GITHUB_URL=gh.api_url)
    walk(DocSession(work, env, sandbox_url=gh.api_url), DOCS / "github-app.md")
    app = next(a for a in gh.sandbox.state.apps.values() if a.slug == "autoloop-acme")
    assert app.owner == "acme"
    assert app.permissions == {p.name: p.level for p in PERMISSIONS}
    assert app.events == [e.name for e in EVENTS]
    assert app.webhook_url == "https://autoloop.example.com/github/webhook"
    settings = (home / ".autoloop" / "settings.toml").read_text()
    assert f"github_app_id = {app.id}\n" in settings


def test_rules_md_triages_an_issue_on_the_sandbox(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    logs = walk(DocSession(work, session_env(tmp_path / "me")), DOCS / "rules.md")
    assert "Traceback" not in logs["serve"]


def test_deploy_md_backs_up_restores_and_checks_a_home_folder(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    me = tmp_path / "me"
    home = me / "service-home"
    env = session_env(me, AUTOLOOP_HOME=str(home))
    # a home folder with a history, as a running service has one
    for args in (
        ["init"],
        ["emit", "local", "hello.world", "demo", "--id", "1"],
        ["drain"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "ghapp.commands.cli", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    # and a webhook acknowledged and not decided yet, as a killed server leaves one
    inbox = SegmentLog(segments_path(home / "ledger.db"))
    inbox.open()
    _, segment = inbox.append([("issues", "d-1", "digest-1", False, b'{"action": "opened"}')], 1.0)
    inbox.sync(segment)
    inbox.close()
    walk(DocSession(work, env), DOCS / "deploy.md")
    backups = list((me / "autoloop-backup").iterdir())
    assert len(backups) == 1
    assert sorted(p.name for p in backups[0].iterdir()) == [
        "ledger.db",
        "ledger.inbox",
        "master.key",
        "rules.json",
    ]
    restored = SegmentLog(me / "autoloop-restored" / "ledger.inbox")
    assert [r.delivery for r in restored.open()] == ["d-1"]
    restored.close()
    assert (backups[0] / "master.key").read_bytes() == (home / "master.key").read_bytes()
    assert (me / "autoloop-restored" / "ledger.db").stat().st_size > 0
