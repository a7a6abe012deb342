"""What ``autoloop action`` reads: the environment a runner gives (:data:`VARIABLES`,
which ``autoloop action --help`` prints), and the home it prepares from it. Everything
comes from the environment, so a test runs the command exactly as a runner would.

:func:`runner_env` checks it (one line saying what to do, as :class:`ActionError`);
:func:`prepare_home` copies the checkout's rules into the home after checking them under
their own name; :func:`read_only_reason` tells a run whose token can only read.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ghapp.commands.home import CHANNEL_ADAPTERS, home_from_env, init_home
from ghapp.github.names import REPO
from ghapp.runtime.settings import DEFAULT_GITHUB_URL
from kernel.rules import parse_rules
from plugins.sources import github as github_source

__all__ = [
    "MODES",
    "VARIABLES",
    "ActionError",
    "RunnerEnv",
    "prepare_home",
    "read_only_reason",
    "read_payload",
    "runner_env",
]

MODES = ("auto", "triage", "deliver")
# What a run reads, as ``autoloop action --help`` lists it: (the variables, their meaning).
VARIABLES: tuple[tuple[str, str], ...] = (
    ("GITHUB_EVENT_NAME, GITHUB_EVENT_PATH", "the event and its payload (a JSON file)"),
    ("GITHUB_REPOSITORY, GITHUB_ACTOR", "owner/name; who started the run"),
    ("GITHUB_RUN_ID, GITHUB_RUN_ATTEMPT", "the run: a re-run (new attempt) is the same event"),
    ("GITHUB_API_URL, GITHUB_SERVER_URL", "REST and web bases (Enterprise Server, a sandbox)"),
    ("AUTOLOOP_GITHUB_URL", "the REST base when GITHUB_API_URL is not set"),
    ("GITHUB_WORKSPACE", "the checkout: a relative AUTOLOOP_RULES is found in it"),
    ("GITHUB_TOKEN", "token mode: writes as the token's identity (github-actions[bot])"),
    ("AUTOLOOP_GITHUB_APP_ID, AUTOLOOP_GITHUB_PRIVATE_KEY", "App mode (wins over a token)"),
    ("AUTOLOOP_HOME, AUTOLOOP_DB", "the home folder and the ledger"),
    ("AUTOLOOP_RULES", "the rules file in the checkout, copied into the home on every run"),
    ("AUTOLOOP_MODE", "auto (default), triage or deliver"),
    ("AUTOLOOP_WORKER", "the worker name turns run under (default: action)"),
    ("RUNNER_ENVIRONMENT", "github-hosted: the home's disk ends with the job"),
    ("RUNNER_DEBUG", "1: a failure prints its traceback too"),
    ("AUTOLOOP_LOG_LEVEL", "the log level of the run (default: WARNING; DEBUG with RUNNER_DEBUG)"),
    ("GITHUB_OUTPUT, GITHUB_STEP_SUMMARY", "where the outputs and the summary go"),
)
DEFAULT_SERVER_URL = "https://github.com"
# Events whose token is read-only when the pull request comes from a fork.
PULL_EVENTS = frozenset({"pull_request", "pull_request_review", "pull_request_review_comment"})
READ_ONLY_ACTORS = frozenset({"dependabot[bot]"})
#: The events whose runs started by Dependabot get a read-only token and no secrets
#: (GitHub's documentation, "Troubleshooting Dependabot on GitHub Actions"); on
#: pull_request_target too when Dependabot opened the pull request.
READ_ONLY_ACTOR_EVENTS = PULL_EVENTS | {"push", "create", "deployment", "deployment_status"}
_EVENT_NAME = re.compile(r"^[a-z][a-z_]{0,63}$")
_REPO = REPO


class ActionError(Exception):
    """What stops a run: ``str()`` is one line saying what to do; ``code`` the exit code."""

    def __init__(self, message: str, *, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerEnv:
    """What the runner (and the Action's inputs) said, checked."""

    event_name: str
    event_path: Path
    repository: str
    run_id: str
    run_attempt: int
    actor: str
    api_url: str
    server_url: str
    token: str
    app_id: str
    private_key: str
    home: Path
    rules: Path | None
    mode: str
    worker: str
    output: Path | None
    summary: Path | None
    debug: bool
    ledger_outlives_job: bool  # False on a GitHub-hosted runner with the ledger in the home

    @property
    def delivery(self) -> str:
        """The event's delivery id: one per run, whatever the attempt."""
        return f"action-{self.run_id}-{self.event_name}"

    @property
    def uses_app(self) -> bool:
        return bool(self.app_id or self.private_key)

    @property
    def run_url(self) -> str:
        return f"{self.server_url}/{self.repository}/actions/runs/{self.run_id}"


def _need(env: Mapping[str, str], name: str) -> str:
    value = (env.get(name) or "").strip()
    if not value:
        raise ActionError(
            f"{name} is not set: 'autoloop action' runs as a step of a workflow job (the "
            "runner sets it); a test sets it as the runner would"
        )
    return value


def _path(env: Mapping[str, str], name: str) -> Path | None:
    value = (env.get(name) or "").strip()
    return Path(value) if value else None


def runner_env(env: Mapping[str, str]) -> RunnerEnv:
    """Read and check the environment (raises :class:`ActionError`, exit code 2)."""
    event_name = _need(env, "GITHUB_EVENT_NAME")
    if not _EVENT_NAME.match(event_name):
        raise ActionError(f"GITHUB_EVENT_NAME={event_name!r} is not an event name")
    repository = _need(env, "GITHUB_REPOSITORY")
    if not _REPO.match(repository):
        raise ActionError(f"GITHUB_REPOSITORY={repository!r} is not 'owner/name'")
    run_id = _need(env, "GITHUB_RUN_ID")
    if not run_id.isdigit():
        raise ActionError(f"GITHUB_RUN_ID={run_id!r} is not a run id (a number)")
    attempt = (env.get("GITHUB_RUN_ATTEMPT") or "1").strip()
    mode = (env.get("AUTOLOOP_MODE") or "auto").strip().lower()
    if mode not in MODES:
        raise ActionError(
            f"AUTOLOOP_MODE (the 'mode' input) is {mode!r}: give one of {', '.join(MODES)}"
        )
    token = (env.get("GITHUB_TOKEN") or "").strip()
    app_id = (env.get("AUTOLOOP_GITHUB_APP_ID") or "").strip()
    private_key = (env.get("AUTOLOOP_GITHUB_PRIVATE_KEY") or "").strip()
    rules = _path(env, "AUTOLOOP_RULES")
    if rules is not None and not rules.is_absolute():
        rules = Path(env.get("GITHUB_WORKSPACE") or os.getcwd()) / rules
    api_url = (env.get("GITHUB_API_URL") or env.get("AUTOLOOP_GITHUB_URL") or "").strip()
    return RunnerEnv(
        event_name=event_name,
        event_path=Path(_need(env, "GITHUB_EVENT_PATH")),
        repository=repository,
        run_id=run_id,
        run_attempt=int(attempt) if attempt.isdigit() else 1,
        actor=(env.get("GITHUB_ACTOR") or "").strip(),
        api_url=(api_url or DEFAULT_GITHUB_URL).rstrip("/"),
        server_url=(env.get("GITHUB_SERVER_URL") or DEFAULT_SERVER_URL).strip().rstrip("/"),
        token=token,
        app_id=app_id,
        private_key=private_key,
        home=home_from_env(env),
        rules=rules,
        mode=mode,
        worker=(env.get("AUTOLOOP_WORKER") or "action").strip(),
        output=_path(env, "GITHUB_OUTPUT"),
        summary=_path(env, "GITHUB_STEP_SUMMARY"),
        debug=env.get("RUNNER_DEBUG") == "1",
        ledger_outlives_job=bool((env.get("AUTOLOOP_DB") or "").strip())
        or env.get("RUNNER_ENVIRONMENT") != "github-hosted",
    )


# --------------------------------------------------------------------------- the parts


def read_payload(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ActionError(f"GITHUB_EVENT_PATH: cannot read {path} ({exc})") from None
    except ValueError:
        raise ActionError(f"GITHUB_EVENT_PATH: {path} is not JSON") from None
    if not isinstance(data, dict):
        raise ActionError(f"GITHUB_EVENT_PATH: {path} holds no JSON object")
    return data


NO_RULES = '{"agents": {}, "rules": []}\n'  # deliver mode, when the checkout has none


def prepare_home(renv: RunnerEnv) -> None:
    """The home with this checkout's rules (checked under their own name first)."""
    from ghapp.runtime.rules_file import check_adapters  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from plugins.agents.registry import KNOWN_AGENT_ADAPTERS  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    home = renv.home
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # (a FileNotFoundError named the path, not the input)
        raise ActionError(
            f"AUTOLOOP_HOME (the 'home' input): cannot make the folder {home}: "
            f"{exc.strerror or exc}"
        ) from None
    if renv.rules is None:
        if not ((home / "rules.json").exists() or (home / "rules.toml").exists()):
            raise ActionError(
                f"no rules: give the 'rules' input (AUTOLOOP_RULES), the path of a rules.json "
                f"in your repository, or keep one in the home ({home})"
            )
        init_home(home)
        return
    if renv.mode == "deliver" and not renv.rules.exists():
        # The pipeline reads its policy from .github/autoloop.toml: a repository that only
        # delivers keeps no rules (the README's deliver workflow gives none). A policy
        # that names a review agent says, when it is reached, that rules must define it.
        if not ((home / "rules.json").exists() or (home / "rules.toml").exists()):
            init_home(home, rules_text=NO_RULES)
        else:
            init_home(home)
        return
    try:
        text = renv.rules.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ActionError(
            f"AUTOLOOP_RULES (the 'rules' input): cannot read {renv.rules} ({exc}); "
            "check out the repository first (actions/checkout) and give the file's path"
        ) from None
    fmt = "toml" if renv.rules.suffix == ".toml" else "json"
    check_adapters(
        parse_rules(
            text,
            path=str(renv.rules),
            fmt=fmt,
            known_agent_adapters=frozenset(KNOWN_AGENT_ADAPTERS),
            known_channel_adapters=CHANNEL_ADAPTERS,
            known_actions={github_source.SOURCE: github_source.ACTIONS},
            sources=(github_source.SOURCE,),
        ),
        str(renv.rules),
    )
    init_home(home, rules_text=text)
    keep, drop = ("rules.toml", "rules.json") if fmt == "toml" else ("rules.json", "rules.toml")
    (home / drop).unlink(missing_ok=True)
    (home / keep).write_text(text, encoding="utf-8")


def read_only_reason(renv: RunnerEnv, payload: Mapping[str, Any]) -> str:
    """Why this run's token can only read ("" when it can write)."""
    pull = payload.get("pull_request")
    pull = pull if isinstance(pull, Mapping) else {}
    if renv.actor in READ_ONLY_ACTORS:
        author = pull.get("user")
        opened_by = author.get("login") if isinstance(author, Mapping) else None
        if renv.event_name in READ_ONLY_ACTOR_EVENTS or (
            renv.event_name == "pull_request_target" and opened_by == renv.actor
        ):
            return f"runs started by {renv.actor} get a read-only token and no secrets"
    if renv.event_name not in PULL_EVENTS or not pull:
        return ""
    head = pull.get("head") if isinstance(pull.get("head"), Mapping) else {}
    base = pull.get("base") if isinstance(pull.get("base"), Mapping) else {}
    head_repo = head.get("repo") if isinstance(head, Mapping) else None
    base_repo = base.get("repo") if isinstance(base, Mapping) else None
    head_name = head_repo.get("full_name") if isinstance(head_repo, Mapping) else None
    base_name = base_repo.get("full_name") if isinstance(base_repo, Mapping) else None
    if head_name == base_name:
        return ""
    if renv.event_name != "pull_request":  # a review: no *_target event exists for it
        return (
            "an event on a pull request from a fork gets a read-only token and no secrets; "
            "the next scheduled run (or a pull_request_target run) moves its delivery"
        )
    return (
        "a pull request from a fork gets a read-only token and no secrets; run on "
        "pull_request_target to act on it (it runs the default branch's workflow and never "
        "checks out the pull request's code)"
    )
