"""The starting world: org ``sandbox``, repo ``sandbox/demo`` on ``main`` with an initial
commit and ``.github/autoloop.toml``, an App installed on it, a CI app, and people:
``maintainer`` (admin), ``reader`` (read)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from fakegithub import git
from fakegithub.keys import KeyPair, make_key
from fakegithub.model import App, Installation, Label, Repo
from fakegithub.state import State

ORG = "sandbox"
REPO = "demo"
APP_SLUG = "autoloop-sandbox"
CI_SLUG = "sandbox-ci"
DEFAULT_POLICY = b"""# Autoloop delivery policy (read from the default branch only).
[deliver]
required_checks = ["ci"]

[deliver.deploy]
environment = "production"
"""
README = b"# demo\n\nA repository of the sandbox GitHub.\n"
APP_PERMISSIONS = {
    "administration": "read",
    "checks": "write",
    "contents": "write",
    "deployments": "write",
    "issues": "write",
    "metadata": "read",
    "pull_requests": "write",
    "statuses": "write",
}
APP_EVENTS = [
    "check_run",
    "check_suite",
    "deployment",
    "deployment_status",
    "issue_comment",
    "issues",
    "pull_request",
    "pull_request_review",
    "push",
    "release",
    "status",
]
STANDARD_LABELS = ("bug", "enhancement", "deliver", "deliver-review")


@dataclass(frozen=True, slots=True)
class Seeded:
    app: App
    private_key_pem: str
    installation: Installation
    repo: Repo
    ci_app: App


def add_app(
    state: State,
    slug: str,
    name: str,
    *,
    webhook_secret: str,
    public_pem: bytes,
    owner: str = ORG,
) -> App:
    bot = state.add_user(f"{slug}[bot]", type_="Bot")
    found = App(
        id=state.new_id(),
        slug=slug,
        name=name,
        owner=owner,
        public_key_pem=public_pem,
        webhook_secret=webhook_secret,
        bot=bot,
        permissions=dict(APP_PERMISSIONS),
        events=list(APP_EVENTS),
        created_at=state.now(),
        hook_id=state.new_id(),
    )
    state.apps[found.id] = found
    return found


def seed(state: State, *, app_url: str | None = None, key: KeyPair | None = None) -> Seeded:
    with state.lock:
        state.add_user(ORG, type_="Organization")
        for login in ("maintainer", "reader", "contributor"):
            state.add_user(login)
        private, public = key or make_key()
        found_app = add_app(
            state,
            APP_SLUG,
            "Autoloop (sandbox)",
            webhook_secret=secrets.token_hex(20),
            public_pem=public,
        )
        found_app.webhook_url = app_url
        ci_app = add_app(
            state, CI_SLUG, "Sandbox CI", webhook_secret=secrets.token_hex(20), public_pem=public
        )
        repo = Repo(state.new_id(), ORG, REPO, state.now())
        initial = git.make_commit(
            repo,
            parents=(),
            files={"README.md": README, ".github/autoloop.toml": DEFAULT_POLICY},
            message="Initial commit",
            author="maintainer",
            time=state.now(),
        )
        repo.branches["main"] = initial.sha
        repo.pushed_at = state.now()
        repo.collaborators.update(
            {
                "maintainer": "admin",
                "reader": "read",
                found_app.bot.login: "write",
                ci_app.bot.login: "write",
            }
        )
        for name in STANDARD_LABELS:
            repo.labels[name] = Label(state.new_id(), name, default=name in {"bug", "enhancement"})
        state.repos[repo.full_name.lower()] = repo
        installation = Installation(
            state.new_id(), found_app.id, ORG, [repo.id], dict(APP_PERMISSIONS), state.now()
        )
        state.installations[installation.id] = installation
        return Seeded(found_app, private, installation, repo, ci_app)
