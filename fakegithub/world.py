"""The scripted world: people, CI and deploys acting on the sandbox, as a Python API.

Every method here is also a control route ``POST /_sandbox/<method>`` taking the same
keyword arguments as JSON (see :mod:`fakegithub.routes.control`). People need no
token: they act as the named user (created on first use). ``repo`` defaults to
``sandbox/demo``.

* CI (:meth:`World.set_ci`): on every push, the CI app creates one check run per scripted
  check on the new head sha, and completes each after ``delay`` seconds with its scripted
  conclusion (and optionally commit statuses).
* Deploy (:meth:`World.set_deploy`): on every push to the default branch (a merge, say),
  creates a deployment for that sha, an ``in_progress`` status, then after ``delay`` a
  ``success`` (or the scripted result) status, and updates the live version served at
  ``GET /_sandbox/live/{owner}/{repo}``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from fakegithub.audit import AuditLog
from fakegithub.auth import Auth
from fakegithub.errors import ApiError, SandboxError
from fakegithub.faults import Faults
from fakegithub.model import App, Protection, Repo, Ruleset
from fakegithub.ops import apps as ops_apps
from fakegithub.ops import checks as ops_checks
from fakegithub.ops import git as ops_git
from fakegithub.ops import issues as ops_issues
from fakegithub.ops import pulls as ops_pulls
from fakegithub.scheduler import Scheduler
from fakegithub.seed import add_app
from fakegithub.state import Actor, Event, State
from fakegithub.webhooks import Delivery, WebhookSender

DEFAULT_REPO = "sandbox/demo"
ACTIONS_SLUG = "github-actions"
# What a workflow's GITHUB_TOKEN may do when the workflow says nothing (GitHub's
# "permissive" default); a workflow's ``permissions:`` narrows it.
ACTIONS_DEFAULT_PERMISSIONS = {
    "actions": "write",
    "checks": "write",
    "contents": "write",
    "deployments": "write",
    "issues": "write",
    "metadata": "read",
    "pull_requests": "write",
    "statuses": "write",
}


@dataclass(slots=True)
class CiScript:
    checks: dict[str, str]
    statuses: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    branches: list[str] | None = None


@dataclass(slots=True)
class DeployScript:
    environment: str = "production"
    delay: float = 0.0
    result: str = "success"
    version: str | None = None
    on_push: bool = True


class Parts(Protocol):
    """What the world acts through: the parts of a :class:`~fakegithub.sandbox.Sandbox`.

    A Protocol, so that the sandbox may own its world without the world importing it."""

    @property
    def state(self) -> State: ...
    @property
    def app(self) -> App: ...
    @property
    def ci_app(self) -> App: ...
    @property
    def auth(self) -> Auth: ...
    @property
    def audit(self) -> AuditLog: ...
    @property
    def faults(self) -> Faults: ...
    @property
    def hooks(self) -> WebhookSender: ...
    @property
    def scheduler(self) -> Scheduler: ...


class World:
    """Scripted people, CI and deploys (see the module docstring)."""

    def __init__(self, sandbox: Parts) -> None:
        self.sandbox = sandbox
        self.state = sandbox.state
        self.ci: dict[str, CiScript] = {}
        self.deploy: dict[str, DeployScript] = {}
        self.live_versions: dict[str, dict[str, str]] = {}
        self.state.listeners.append(self._on_event)

    # -- helpers -------------------------------------------------------------------------

    def _repo(self, repo: str | None) -> Repo:
        name = (repo or DEFAULT_REPO).lower()
        found = self.state.repos.get(name)
        if found is None:
            raise SandboxError(
                f"no repository {name!r}; the sandbox has {sorted(self.state.repos)}"
            )
        return found

    def _person(self, user: str) -> Actor:
        if not user:
            raise SandboxError("name the user who acts, e.g. user='maintainer'")
        self.state.add_user(user)
        return Actor(user)

    def _audit(self, op: str, user: str, repo: Repo, args: dict[str, Any]) -> None:
        self.sandbox.audit.record(
            method="SCRIPT",
            path=f"/_sandbox/{op}",
            actor=user,
            resource=repo.full_name,
            status=200,
            body=args,
        )

    def _ci_actor(self) -> Actor:
        ci_app = self.sandbox.ci_app
        return Actor(ci_app.bot.login, ci_app.id)

    # -- people --------------------------------------------------------------------------

    def open_issue(
        self,
        user: str,
        title: str,
        body: str | None = None,
        labels: list[str] | None = None,
        repo: str | None = None,
    ) -> int:
        found = self._repo(repo)
        with self.state.lock:
            issue = ops_issues.open_issue(
                self.state, found, self._person(user), title=title, body=body, labels=labels
            )
        self._audit("open_issue", user, found, {"title": title, "body": body, "labels": labels})
        return issue.number

    def comment(self, user: str, number: int, body: str, repo: str | None = None) -> int:
        found = self._repo(repo)
        with self.state.lock:
            made = ops_issues.create_comment(self.state, found, self._person(user), number, body)
        self._audit("comment", user, found, {"number": number, "body": body})
        return made.id

    def add_label(self, user: str, number: int, label: str, repo: str | None = None) -> None:
        found = self._repo(repo)
        with self.state.lock:
            ops_issues.add_labels(self.state, found, self._person(user), number, [label])
        self._audit("add_label", user, found, {"number": number, "label": label})

    def remove_label(self, user: str, number: int, label: str, repo: str | None = None) -> None:
        found = self._repo(repo)
        with self.state.lock:
            ops_issues.remove_label(self.state, found, self._person(user), number, label)
        self._audit("remove_label", user, found, {"number": number, "label": label})

    def close_issue(self, user: str, number: int, repo: str | None = None) -> None:
        found = self._repo(repo)
        with self.state.lock:
            ops_issues.update_issue(
                self.state, found, self._person(user), number, {"state": "closed"}
            )
        self._audit("close_issue", user, found, {"number": number})

    def push(
        self,
        user: str,
        branch: str,
        files: dict[str, str | None],
        message: str = "Update files",
        *,
        repo: str | None = None,
        base: str | None = None,
    ) -> str:
        """A new commit on ``branch`` (created from ``base`` or the default branch)."""
        found = self._repo(repo)
        commit = ops_git.push(
            self.state,
            found,
            self._person(user),
            branch,
            dict(files),
            message=message,
            from_ref=base,
        )
        self._audit("push", user, found, {"branch": branch, "files": files, "message": message})
        return commit.sha

    def force_push(
        self,
        user: str,
        branch: str,
        files: dict[str, str | None],
        message: str = "Rewrite",
        repo: str | None = None,
    ) -> str:
        """Replaces the branch's last commit (the old head is no longer on the branch)."""
        found = self._repo(repo)
        if branch not in found.branches:
            raise SandboxError(f"branch {branch!r} does not exist; push it first")
        commit = ops_git.push(
            self.state, found, self._person(user), branch, dict(files), message=message, force=True
        )
        self._audit("force_push", user, found, {"branch": branch, "files": files})
        return commit.sha

    def open_pr(
        self,
        user: str,
        head: str,
        title: str,
        files: dict[str, str | None] | None = None,
        *,
        base: str | None = None,
        body: str | None = None,
        draft: bool = False,
        labels: list[str] | None = None,
        repo: str | None = None,
    ) -> int:
        """Opens a pull request from ``head``; with ``files``, pushes them to ``head`` first."""
        found = self._repo(repo)
        if files:
            self.push(user, head, files, title, repo=repo, base=base)
        with self.state.lock:
            pull = ops_pulls.open_pull(
                self.state,
                found,
                self._person(user),
                head=head,
                base=base,
                title=title,
                body=body,
                draft=draft,
                labels=labels,
            )
        self._audit("open_pr", user, found, {"head": head, "title": title})
        return pull.number

    def ready_for_review(self, user: str, number: int, repo: str | None = None) -> None:
        found = self._repo(repo)
        ops_pulls.ready_for_review(self.state, found, self._person(user), number)
        self._audit("ready_for_review", user, found, {"number": number})

    def review(
        self,
        user: str,
        number: int,
        event: str = "APPROVE",
        body: str = "",
        repo: str | None = None,
    ) -> int:
        found = self._repo(repo)
        made = ops_pulls.create_review(
            self.state, found, self._person(user), number, event=event, body=body or None
        )
        self._audit("review", user, found, {"number": number, "event": event, "body": body})
        return made.id

    def approve(self, user: str, number: int, body: str = "", repo: str | None = None) -> int:
        return self.review(user, number, "APPROVE", body, repo)

    def merge(self, user: str, number: int, method: str = "merge", repo: str | None = None) -> str:
        found = self._repo(repo)
        sha = ops_pulls.merge(self.state, found, self._person(user), number, merge_method=method)
        self._audit("merge", user, found, {"number": number, "method": method})
        return sha

    def release(
        self,
        user: str,
        tag: str,
        name: str | None = None,
        *,
        body: str | None = None,
        target: str | None = None,
        repo: str | None = None,
    ) -> int:
        found = self._repo(repo)
        made = ops_checks.create_release(
            self.state,
            found,
            self._person(user),
            {"tag_name": tag, "name": name, "body": body, "target_commitish": target},
        )
        self._audit("release", user, found, {"tag": tag})
        return made.id

    # -- repository settings -------------------------------------------------------------

    def set_protection(
        self,
        branch: str = "main",
        contexts: list[str] | None = None,
        strict: bool = False,
        approvals: int = 0,
        repo: str | None = None,
        *,
        checks: list[dict[str, Any]] | None = None,
    ) -> None:
        """Branch protection: required ``contexts`` (any app), and ``checks`` as GitHub
        writes them, ``{"context": name, "app_id": id}`` (only that app's report counts)."""
        found = self._repo(repo)
        names = list(contexts or [])
        apps: dict[str, int] = {}
        for check in checks or []:
            name = str(check["context"])
            names.append(name)
            if isinstance(check.get("app_id"), int):
                apps[name] = check["app_id"]
        with self.state.lock:
            found.protections[branch] = Protection(
                branch, list(dict.fromkeys(names)), strict, approvals, apps
            )

    def add_ruleset(
        self,
        name: str,
        branches: list[str],
        required_checks: list[str | dict[str, Any]] | None = None,
        *,
        approvals: int = 0,
        strict: bool = False,
        repo: str | None = None,
    ) -> int:
        """A ruleset on ``branches``; a required check is a name, or as GitHub writes it,
        ``{"context": name, "integration_id": app id}`` (only that app's report counts)."""
        found = self._repo(repo)
        rules: list[dict[str, object]] = []
        if required_checks:
            configured = [
                {"context": c} if isinstance(c, str) else dict(c) for c in required_checks
            ]
            rules.append(
                {
                    "type": "required_status_checks",
                    "parameters": {
                        "required_status_checks": configured,
                        "strict_required_status_checks_policy": strict,
                    },
                }
            )
        if approvals:
            rules.append(
                {
                    "type": "pull_request",
                    "parameters": {
                        "dismiss_stale_reviews_on_push": False,
                        "require_code_owner_review": False,
                        "require_last_push_approval": False,
                        "required_approving_review_count": approvals,
                        "required_review_thread_resolution": False,
                    },
                }
            )
        with self.state.lock:
            ruleset = Ruleset(self.state.new_id(), name, list(branches), rules)
            found.rulesets.append(ruleset)
        return ruleset.id

    def set_mergeability_lag(self, seconds: float, repo: str | None = None) -> None:
        """After a push, pull requests report ``mergeable: null`` for ``seconds``, as GitHub
        does while it recomputes mergeability in the background."""
        found = self._repo(repo)
        with self.state.lock:
            found.mergeability_lag = max(0.0, float(seconds))

    def install_app(self, app: str, account: str = "sandbox") -> int:
        """Installs the App ``app`` (its slug) on every repository of ``account``, with the
        permissions the App asks for; answers the installation's id."""
        try:
            found = ops_apps.app_by_slug(self.state, app)
        except ApiError:
            slugs = sorted(a.slug for a in self.state.apps.values())
            raise SandboxError(f"no App {app!r}; the sandbox has {slugs}") from None
        return ops_apps.install(self.state, found, account).id

    def set_collaborator(self, user: str, permission: str, repo: str | None = None) -> None:
        found = self._repo(repo)
        self._person(user)
        with self.state.lock:
            found.collaborators[user] = permission

    # -- CI and deploys ------------------------------------------------------------------

    def set_ci(
        self,
        checks: dict[str, str] | None = None,
        delay: float = 0.0,
        statuses: dict[str, str] | None = None,
        branches: list[str] | None = None,
        repo: str | None = None,
    ) -> None:
        """Scripts CI: check name -> conclusion for every new push; ``checks=None`` stops it."""
        found = self._repo(repo)
        if checks is None and statuses is None:
            self.ci.pop(found.full_name, None)
            return
        self.ci[found.full_name] = CiScript(
            dict(checks or {}), dict(statuses or {}), delay, branches
        )

    def run_ci(self, sha: str, repo: str | None = None) -> None:
        """Runs the scripted CI on ``sha`` now (as a push would)."""
        found = self._repo(repo)
        script = self.ci.get(found.full_name)
        if script is None:
            raise SandboxError("no CI is scripted; call set_ci first")
        self._start_ci(found, sha, script)

    def set_deploy(
        self,
        environment: str = "production",
        delay: float = 0.0,
        *,
        result: str = "success",
        version: str | None = None,
        repo: str | None = None,
        enabled: bool = True,
        on_push: bool = True,
    ) -> None:
        """Scripts deploys of the default branch; ``result`` is the final status state.

        ``on_push=False``: a push to the default branch deploys nothing until
        :meth:`run_deploy` (a deploy that starts when a test says so, as a person would)."""
        found = self._repo(repo)
        if not enabled:
            self.deploy.pop(found.full_name, None)
            return
        self.deploy[found.full_name] = DeployScript(environment, delay, result, version, on_push)

    def run_deploy(self, sha: str, repo: str | None = None) -> None:
        """Runs the scripted deploy of ``sha`` now (as a push to the default branch would)."""
        found = self._repo(repo)
        script = self.deploy.get(found.full_name)
        if script is None:
            raise SandboxError("no deploy is scripted; call set_deploy first")
        if sha not in found.commits:
            raise SandboxError(f"no commit {sha} in {found.full_name}")
        self.sandbox.scheduler.later(0, lambda: self._start_deploy(found, sha, script))

    def live(self, repo: str | None = None) -> dict[str, str]:
        found = self._repo(repo)
        return dict(self.live_versions.get(found.full_name, {}))

    def _on_event(self, event: Event) -> None:
        if event.name != "push" or event.repository_id is None or event.payload.get("deleted"):
            return
        repo = self.state.repo_by_id(event.repository_id)
        sha = str(event.payload["after"])
        branch = str(event.payload["ref"]).removeprefix("refs/heads/")
        script = self.ci.get(repo.full_name)
        if script is not None and (script.branches is None or branch in script.branches):
            self._start_ci(repo, sha, script)
        deploy = self.deploy.get(repo.full_name)
        if deploy is not None and deploy.on_push and branch == repo.default_branch:
            self.sandbox.scheduler.later(0, lambda: self._start_deploy(repo, sha, deploy))

    def _start_ci(self, repo: Repo, sha: str, script: CiScript) -> None:
        actor = self._ci_actor()

        def create() -> None:
            runs = [
                ops_checks.create_check_run(
                    self.state,
                    repo,
                    actor,
                    {"name": name, "head_sha": sha, "status": "in_progress"},
                ).id
                for name in script.checks
            ]
            for context in script.statuses:
                ops_checks.create_status(
                    self.state, repo, actor, sha, {"state": "pending", "context": context}
                )

            def complete() -> None:
                for run_id, conclusion in zip(runs, script.checks.values(), strict=True):
                    ops_checks.update_check_run(
                        self.state,
                        repo,
                        actor,
                        run_id,
                        {"status": "completed", "conclusion": conclusion},
                    )
                for context, final in script.statuses.items():
                    ops_checks.create_status(
                        self.state, repo, actor, sha, {"state": final, "context": context}
                    )

            self.sandbox.scheduler.later(script.delay, complete)

        self.sandbox.scheduler.later(0, create)

    def _start_deploy(self, repo: Repo, sha: str, script: DeployScript) -> None:
        actor = self._ci_actor()
        made = ops_checks.create_deployment(
            self.state,
            repo,
            actor,
            {
                "ref": sha,
                "environment": script.environment,
                "required_contexts": [],
                "description": f"Deploy {sha[:7]}",
            },
        )
        ops_checks.create_deployment_status(
            self.state, repo, actor, made.id, {"state": "in_progress"}
        )

        def finish() -> None:
            url = f"{self.state.base_url}/_sandbox/live/{repo.full_name}"
            ops_checks.create_deployment_status(
                self.state,
                repo,
                actor,
                made.id,
                {"state": script.result, "environment_url": url, "log_url": url},
            )
            if script.result == "success":
                self.live_versions[repo.full_name] = {
                    "sha": sha,
                    "version": script.version or f"v-{sha[:7]}",
                }

        self.sandbox.scheduler.later(script.delay, finish)

    # -- waiting -------------------------------------------------------------------------

    def settle(self, timeout: float = 10.0) -> bool:
        """Waits until scripted CI/deploys and webhook sending have nothing left to do."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sandbox.scheduler.idle() and self.sandbox.hooks.wait_idle(0):
                return True
            time.sleep(0.01)
        return False

    # -- the sandbox's own controls ------------------------------------------------------

    @property
    def faults(self) -> Faults:
        return self.sandbox.faults

    @property
    def audit(self) -> AuditLog:
        return self.sandbox.audit

    @property
    def deliveries(self) -> list[Delivery]:
        return self.sandbox.hooks.deliveries()

    @property
    def events(self) -> list[Event]:
        with self.state.lock:
            return list(self.state.events)

    def set_app_url(self, url: str | None) -> None:
        """Where the App's webhooks go (None: nowhere)."""
        self.sandbox.app.webhook_url = url or None

    def actions_token(
        self,
        repo: str | None = None,
        permissions: dict[str, str] | None = None,
        lifetime_s: float = 6 * 3600,
    ) -> str:
        """A workflow run's ``GITHUB_TOKEN`` for ``repo``: acts as ``github-actions[bot]``,
        with ``permissions`` (default: GitHub's permissive default). ``GET /user`` refuses
        it, as GitHub does."""
        found = self._repo(repo)
        granted = dict(ACTIONS_DEFAULT_PERMISSIONS if permissions is None else permissions)
        with self.state.lock:
            app = next((a for a in self.state.apps.values() if a.slug == ACTIONS_SLUG), None)
            if app is None:
                app = add_app(
                    self.state,
                    ACTIONS_SLUG,
                    "GitHub Actions",
                    webhook_secret="",
                    public_pem=self.sandbox.app.public_key_pem,
                )
            token = self.sandbox.auth.mint_actions_token(
                app,
                found,
                permissions=granted,
                lifetime=timedelta(seconds=lifetime_s),
            )
        return token.value

    def user_token(self, login: str, lifetime_s: float | None = None) -> str:
        """A personal token (``ghp_...``) acting as ``login``."""
        self._person(login)
        lifetime = timedelta(seconds=lifetime_s) if lifetime_s is not None else None
        return self.sandbox.auth.mint_user_token(login, lifetime=lifetime).value
