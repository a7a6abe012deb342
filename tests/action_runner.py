"""A workflow runner's view, for the Action's tests: a checkout holding the rules, a home
that outlives the job, a token the fake GitHub issued, and event files built from GitHub's
own example payloads (``tests/fixtures/github``) with the fake's repository, issue and
comment put in.

``Runner.run`` starts ``autoloop action`` as a step does: a subprocess with the runner's
environment, reading outputs and the summary back from their files.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakegithub.server import SandboxHandle, running_sandbox
from ghapp.github.client import GitHubClient
from tests.paths import FIXTURES

WEBHOOKS = FIXTURES / "github" / "webhooks"
AUTOLOOP = Path(sys.executable).parent / "autoloop"
CARD_MARK = "<!-- autoloop:card="
BOT = "github-actions[bot]"
RULES: dict[str, Any] = {
    "sources": {"github": {"adapter": "github"}},
    "agents": {"demo": {"use": "demo"}},
    "channels": {"gh": {"use": "github-comment"}},
    "rules": [
        {
            "name": "triage",
            "on": {"source": "github", "type": ["issues.opened"]},
            "agent": "demo",
            "parallel": True,
            "allow": ["github.comment", "github.label"],
            "notify": ["gh"],
        }
    ],
}


def spent_nothing(turns: int, cards: int, stage: str = "") -> dict[str, str]:
    """A job's outputs when its agents reported spending nothing (the demo agent's $0)."""
    return {
        "turns": str(turns),
        "cards": str(cards),
        "stage": stage,
        "cost-usd": "0.0000",
        "tokens": "0",
    }


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str
    outputs: dict[str, str]
    summary: str


@dataclass
class Runner:
    """A runner's view: a checkout with the rules, a persistent home, a token."""

    gh: SandboxHandle
    tmp: Path
    token: str
    reader: GitHubClient  # the test's own eyes on the fake

    @property
    def workspace(self) -> Path:
        return self.tmp / "workspace"

    @property
    def home(self) -> Path:
        return self.tmp / "home"

    def env(
        self, event_name: str, payload: dict[str, Any], run_id: int, attempt: int
    ) -> dict[str, str]:
        runner_temp = self.tmp / f"run-{run_id}-{attempt}"
        runner_temp.mkdir(parents=True, exist_ok=True)
        event_path = runner_temp / "event.json"
        event_path.write_text(json.dumps(payload))
        (runner_temp / "output").touch()
        (runner_temp / "summary.md").touch()
        return {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.tmp / "user"),
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_EVENT_NAME": event_name,
            "GITHUB_EVENT_PATH": str(event_path),
            "GITHUB_REPOSITORY": self.gh.repo,
            "GITHUB_RUN_ID": str(run_id),
            "GITHUB_RUN_ATTEMPT": str(attempt),
            "GITHUB_ACTOR": str(payload.get("sender", {}).get("login", "maintainer")),
            "GITHUB_API_URL": self.gh.api_url,
            "GITHUB_SERVER_URL": self.gh.api_url,
            "GITHUB_WORKSPACE": str(self.workspace),
            "GITHUB_OUTPUT": str(runner_temp / "output"),
            "GITHUB_STEP_SUMMARY": str(runner_temp / "summary.md"),
            "RUNNER_TEMP": str(runner_temp),
            "GITHUB_TOKEN": self.token,
            "AUTOLOOP_HOME": str(self.home),
            "AUTOLOOP_RULES": ".github/autoloop/rules.json",
            "AUTOLOOP_MODE": "triage",
        }

    def run(
        self,
        event_name: str,
        payload: dict[str, Any],
        *,
        run_id: int,
        attempt: int = 1,
        **extra: str,
    ) -> Ran:
        env = {**self.env(event_name, payload, run_id, attempt), **extra}
        env = {name: value for name, value in env.items() if value != ""}
        done = subprocess.run(
            [str(AUTOLOOP), "action"],
            cwd=self.workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        outputs: dict[str, str] = {}
        output_file = Path(env["GITHUB_OUTPUT"]) if "GITHUB_OUTPUT" in env else None
        if output_file is not None and output_file.exists():
            for line in output_file.read_text().splitlines():
                name, _, value = line.partition("=")
                outputs[name] = value
        summary_file = (
            Path(env.get("GITHUB_STEP_SUMMARY", "")) if "GITHUB_STEP_SUMMARY" in env else None
        )
        summary = summary_file.read_text() if summary_file and summary_file.exists() else ""
        return Ran(done.returncode, done.stdout, done.stderr, outputs, summary)

    # -- payloads ---------------------------------------------------------------------

    def repository(self) -> dict[str, Any]:
        return self.reader.get_repo(self.gh.repo)

    def person(self, login: str) -> dict[str, Any]:
        return {"login": login, "id": zlib.crc32(login.encode()) % 10**6, "type": "User"}

    def issue_opened(self, number: int) -> dict[str, Any]:
        payload: dict[str, Any] = json.loads((WEBHOOKS / "issues" / "opened.json").read_text())
        issue = self.reader.get_issue(self.gh.repo, number)
        payload["issue"].update(
            number=number,
            title=issue["title"],
            body=issue["body"],
            html_url=issue["html_url"],
            user=self.person(issue["user"]["login"]),
        )
        payload["repository"] = self.repository()
        payload["sender"] = self.person(issue["user"]["login"])
        return payload

    def comment_created(self, number: int, comment_id: int) -> dict[str, Any]:
        path = WEBHOOKS / "issue_comment" / "created.json"
        payload: dict[str, Any] = json.loads(path.read_text())
        comment = next(
            c
            for c in self.reader.list_issue_comments(self.gh.repo, number)
            if c["id"] == comment_id
        )
        login = comment["user"]["login"]
        payload["issue"].update(number=number, user=self.person("reader"))
        payload["issue"].pop("pull_request", None)
        payload["comment"].update(
            id=comment_id,
            body=comment["body"],
            html_url=comment["html_url"],
            user=comment["user"],
            performed_via_github_app=comment.get("performed_via_github_app"),
        )
        payload["repository"] = self.repository()
        payload["sender"] = comment["user"] if login == BOT else self.person(login)
        return payload

    def pull_labeled(
        self, number: int, label: str, sender: str, action: str = "labeled"
    ) -> dict[str, Any]:
        """``pull_request.labeled`` (or ``unlabeled``) as GitHub sends it for ``number`` as
        it is now."""
        path = WEBHOOKS / "pull_request" / f"{action}.json"
        payload: dict[str, Any] = json.loads(path.read_text())
        pull = self.reader.get_pull(self.gh.repo, number)
        keep = ("number", "state", "title", "body", "user", "labels", "head", "base", "draft")
        payload["pull_request"].update({k: pull[k] for k in keep if k in pull})
        payload["pull_request"].update(
            merged=pull.get("merged", False),
            html_url=pull["html_url"],
            updated_at=pull["updated_at"],
        )
        payload["number"] = number
        payload["label"] = {**payload["label"], "name": label}
        payload["repository"] = self.repository()
        payload["sender"] = self.person(sender)
        payload.pop("installation", None)
        return payload

    def check_suite_completed(self, number: int) -> dict[str, Any]:
        """``check_suite.completed`` for the head of ``number``, listing it (as GitHub does
        for a pull request of the same repository)."""
        path = WEBHOOKS / "check_suite" / "completed.json"
        payload: dict[str, Any] = json.loads(path.read_text())
        pull = self.reader.get_pull(self.gh.repo, number)
        repo = self.repository()
        ref = {"id": repo["id"], "name": repo["name"], "url": repo["url"]}
        suite = payload["check_suite"]
        suite.update(
            head_sha=pull["head"]["sha"],
            head_branch=pull["head"]["ref"],
            status="completed",
            conclusion="success",
            app={**suite["app"], "id": self.gh.sandbox.ci_app.id, "slug": "sandbox-ci"},
            pull_requests=[
                {
                    "number": number,
                    "head": {"ref": pull["head"]["ref"], "sha": pull["head"]["sha"], "repo": ref},
                    "base": {"ref": pull["base"]["ref"], "sha": pull["base"]["sha"], "repo": ref},
                }
            ],
        )
        payload["repository"] = repo
        payload["sender"] = self.person("sandbox-ci[bot]")
        return payload

    def deployment_status(self, environment: str = "production") -> dict[str, Any]:
        """``deployment_status`` for the newest deployment to ``environment``, with its
        newest status."""
        path = WEBHOOKS / "deployment_status" / "payload.json"
        payload: dict[str, Any] = json.loads(path.read_text())
        (deployment,) = self.reader.list_deployments(self.gh.repo, environment=environment, limit=1)
        (status,) = self.reader.list_deployment_statuses(self.gh.repo, deployment["id"], limit=1)
        payload["deployment"].update(
            {k: deployment[k] for k in ("id", "sha", "ref", "environment", "task")}
        )
        payload["deployment_status"].update(
            id=status["id"],
            state=status["state"],
            environment=environment,
            target_url=status.get("target_url") or "",
        )
        payload["action"] = "created"
        payload["repository"] = self.repository()
        payload["sender"] = self.person("sandbox-ci[bot]")
        return payload

    def schedule(self) -> dict[str, Any]:
        """What a ``schedule`` run's event file holds."""
        return {
            "schedule": "*/15 * * * *",
            "workflow": ".github/workflows/autoloop-clock.yml",
            "repository": self.repository(),
            "sender": self.person("maintainer"),
        }

    # -- what GitHub shows ------------------------------------------------------------

    def comments(self, number: int) -> list[dict[str, Any]]:
        return self.reader.list_issue_comments(self.gh.repo, number)

    def card_comments(self, number: int) -> list[dict[str, Any]]:
        return [c for c in self.comments(number) if CARD_MARK in c["body"]]

    def labels(self, number: int) -> list[str]:
        return [lb["name"] for lb in self.reader.get_issue(self.gh.repo, number)["labels"]]

    def writes(self) -> list[Any]:
        return [e for e in self.gh.world.audit.entries() if e.actor == BOT]


@contextlib.contextmanager
def sandbox_runner(tmp_path: Path) -> Iterator[Runner]:
    """The fake GitHub (``maintainer`` may maintain), a checkout with :data:`RULES` at
    ``.github/autoloop/rules.json``, and a GITHUB_TOKEN the fake issued."""
    with running_sandbox() as gh:
        gh.world.set_collaborator("maintainer", "maintain")
        rules = tmp_path / "workspace" / ".github" / "autoloop" / "rules.json"
        rules.parent.mkdir(parents=True)
        rules.write_text(json.dumps(RULES, indent=2))
        with GitHubClient(token=gh.world.user_token("maintainer"), base_url=gh.api_url) as reader:
            yield Runner(gh, tmp_path, gh.world.actions_token(), reader)


def annotations(text: str, kind: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(f"::{kind}::")]


def open_and_triage(r: Runner, *, run_id: int = 1001) -> tuple[int, Ran]:
    number = r.gh.world.open_issue("reader", "Crash on start", body="It crashes.")
    return number, r.run("issues", r.issue_opened(number), run_id=run_id)
