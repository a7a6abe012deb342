"""``autoloop action``: the composite Action's entry (DESIGN.md section 9a).

A workflow job runs it once per event. Everything comes from the environment a runner
gives, so a test runs it exactly as a runner would:

| variable | meaning |
|---|---|
| ``GITHUB_EVENT_NAME``, ``GITHUB_EVENT_PATH`` | the event and its payload (a JSON file) |
| ``GITHUB_REPOSITORY``, ``GITHUB_ACTOR`` | ``owner/name``; who started the run |
| ``GITHUB_RUN_ID``, ``GITHUB_RUN_ATTEMPT`` | the run: a re-run (new attempt) is the same event |
| ``GITHUB_API_URL``, ``GITHUB_SERVER_URL`` | REST and web bases (Enterprise Server, a sandbox) |
| ``GITHUB_TOKEN`` | token mode: writes as the token's identity (``github-actions[bot]``) |
| ``AUTOLOOP_GITHUB_APP_ID``, ``AUTOLOOP_GITHUB_PRIVATE_KEY`` | App mode (wins over a token) |
| ``AUTOLOOP_HOME``, ``AUTOLOOP_DB`` | the home folder and the ledger |
| ``AUTOLOOP_RULES`` | the rules file in the checkout, copied into the home on every run |
| ``AUTOLOOP_MODE`` | ``auto`` (default), ``triage`` or ``deliver`` |
| ``GITHUB_OUTPUT``, ``GITHUB_STEP_SUMMARY`` | where the outputs and the summary go |

One run:

1. the event is translated as the App translates a webhook
   (:func:`plugins.sources.github.translate`, ``pull_request_target`` read as
   ``pull_request``) under the delivery id ``action-<run id>-<event name>``, and recorded
   once: a re-run of the run adds nothing;
2. an ``issue_comment`` holding ``/answer CARD N`` answers the card when its author may
   write to the repository (asked of GitHub, :mod:`ghapp.github.answers`);
3. what is runnable now runs (``hub.drain``): turns, cards as comments on the issue or
   pull request, write-backs, each once;
4. the outputs ``turns``, ``cards`` (raised by this run) and ``stage`` (the delivery's, if
   this run's pull request has one) and a Markdown summary are written.

Nothing waits in the job: a question is a card on the issue and a row in the ledger, the
job ends, and the event that carries the answer resumes the agent. So the ledger must
outlive the job: a persistent ``AUTOLOOP_HOME`` (a self-hosted runner) or ``AUTOLOOP_DB``.

Modes: ``triage`` runs the rules' turns; ``deliver`` is the delivery pipeline's, which is
not wired into the Action yet (such a run records the event and says so); ``auto`` is
both. A pull request from a fork (or Dependabot's) gets a read-only token: the event is
recorded, nothing is run or written, and the summary says why.

Exit codes: 0, also when a turn failed (that is recorded and shown); 1 when GitHub or the
ledger failed; 2 for bad configuration. The reason is one ``::error::`` line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ghapp.commands.action_report import (
    ActionRun,
    Answered,
    Recorded,
    annotation,
    write_outputs,
    write_summary,
)
from ghapp.commands.home import (
    CHANNEL_ADAPTERS,
    Home,
    configure_logs,
    home_from_env,
    init_home,
    reset_logs,
)
from ghapp.github.answers import AnswerDesk, parse_answer
from ghapp.github.channel import GitHubCommentChannel
from ghapp.github.client import GitHubClient
from ghapp.github.errors import GitHubError, Unauthorized, Unreachable
from ghapp.github.executor import GitHubExecutor
from ghapp.runtime.hub import Hub
from ghapp.runtime.settings import DEFAULT_GITHUB_URL, Settings, SettingsError
from ghapp.store.base import Store, StoreError
from kernel import inputs as k
from kernel.errors import ConfigError
from kernel.model import Event
from kernel.records import Card, Matter, Pipeline, Turn
from kernel.rules import parse_rules
from plugins.sources.github import translate

__all__ = ["MODES", "ActionError", "RunnerEnv", "main", "run", "runner_env"]

MODES = ("auto", "triage", "deliver")
DEFAULT_SERVER_URL = "https://github.com"
CHANNEL_ADAPTER = "github-comment"
# Events whose token is read-only when the pull request comes from a fork.
PULL_EVENTS = frozenset({"pull_request", "pull_request_review", "pull_request_review_comment"})
READ_ONLY_ACTORS = frozenset({"dependabot[bot]"})
_EVENT_NAME = re.compile(r"^[a-z][a-z_]{0,63}$")
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


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


def prepare_home(renv: RunnerEnv) -> None:
    """The home with this checkout's rules (checked under their own name first)."""
    from plugins.agents.registry import KNOWN_AGENT_ADAPTERS  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    home = renv.home
    if renv.rules is None:
        if not ((home / "rules.json").exists() or (home / "rules.toml").exists()):
            raise ActionError(
                f"no rules: give the 'rules' input (AUTOLOOP_RULES), the path of a rules.json "
                f"in your repository, or keep one in the home ({home})"
            )
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
    parse_rules(
        text,
        path=str(renv.rules),
        fmt=fmt,
        known_agent_adapters=frozenset(KNOWN_AGENT_ADAPTERS),
        known_channel_adapters=CHANNEL_ADAPTERS,
    )
    init_home(home, rules_text=text)
    keep, drop = ("rules.toml", "rules.json") if fmt == "toml" else ("rules.json", "rules.toml")
    (home / drop).unlink(missing_ok=True)
    (home / keep).write_text(text, encoding="utf-8")


def read_only_reason(renv: RunnerEnv, payload: Mapping[str, Any]) -> str:
    """Why this run's token can only read ("" when it can write)."""
    if renv.event_name not in PULL_EVENTS and renv.event_name != "push":
        return ""
    if renv.actor in READ_ONLY_ACTORS:
        return f"runs started by {renv.actor} get a read-only token and no secrets"
    if renv.event_name not in PULL_EVENTS:
        return ""
    pull = payload.get("pull_request")
    if not isinstance(pull, Mapping):
        return ""
    head = pull.get("head") if isinstance(pull.get("head"), Mapping) else {}
    base = pull.get("base") if isinstance(pull.get("base"), Mapping) else {}
    head_repo = head.get("repo") if isinstance(head, Mapping) else None
    base_repo = base.get("repo") if isinstance(base, Mapping) else None
    head_name = head_repo.get("full_name") if isinstance(head_repo, Mapping) else None
    base_name = base_repo.get("full_name") if isinstance(base_repo, Mapping) else None
    if head_name == base_name:
        return ""
    return (
        "a pull request from a fork gets a read-only token and no secrets; run on "
        "pull_request_target to act on it (it runs the default branch's workflow and never "
        "checks out the pull request's code)"
    )


@dataclass(slots=True)
class Identity:
    """Who this run writes as, so its own doings are not fed back to it."""

    client: GitHubClient
    bot_login: str
    app_slug: str | None
    app_id: int | None


def connect(renv: RunnerEnv) -> Identity:
    """A client with the run's credentials, and who they write as."""
    if renv.uses_app:
        try:
            app_id, key = Settings.from_env(
                {
                    "AUTOLOOP_GITHUB_APP_ID": renv.app_id,
                    "AUTOLOOP_GITHUB_PRIVATE_KEY": renv.private_key,
                }
            ).require_app_key()
        except SettingsError as exc:
            raise ActionError(f"{exc} (the 'app-id' and 'private-key' inputs)") from None
        client = GitHubClient(app_id=app_id, private_key=key, base_url=renv.api_url)
        try:
            app = client.get_app()
        except Exception:
            client.close()
            raise
        slug = app.get("slug")
        if not isinstance(slug, str) or not slug:
            client.close()
            raise ActionError(f"GET {renv.api_url}/app answered without a slug", code=1)
        found_id = app.get("id")
        return Identity(
            client, f"{slug}[bot]", slug, found_id if isinstance(found_id, int) else app_id
        )
    if not renv.token:
        raise ActionError(
            "no GitHub credentials: give the 'github-token' input (GITHUB_TOKEN), or "
            "'app-id' and 'private-key' (AUTOLOOP_GITHUB_APP_ID, AUTOLOOP_GITHUB_PRIVATE_KEY)"
        )
    client = GitHubClient(token=renv.token, base_url=renv.api_url)
    try:
        login = client.token_login()
    except Exception:
        client.close()
        raise
    slug = login.removesuffix("[bot]") if login.endswith("[bot]") else None
    return Identity(client, login, slug, None)


def wire(hub: Hub, who: Identity) -> None:
    """Cards as comments (the rules' ``github-comment`` channels) and GitHub write-backs."""
    for name, spec in hub.rules().channels.items():
        if spec.use == CHANNEL_ADAPTER:
            hub.channels[name] = GitHubCommentChannel(who.client, who.bot_login)
    hub.executors["github"] = GitHubExecutor(who.client, who.bot_login)


def _versions(store: Store) -> dict[str, int]:
    with store.read() as tx:
        return {c.id: c.version for c in tx.query("card") if isinstance(c, Card)}


def _stage(hub: Hub, subjects: set[str]) -> str:
    """The stage of the delivery about one of ``subjects`` (the newest), or ""."""
    with hub.store.read() as tx:
        found = [p for p in tx.query("pipeline") if isinstance(p, Pipeline)]
    mine = [p for p in found if p.subject in subjects]
    if not mine:
        return ""
    newest = max(mine, key=lambda p: (p.updated_at, p.version))
    return newest.stage


# --------------------------------------------------------------------------- one run


def run(renv: RunnerEnv, env: Mapping[str, str], say: Callable[[str], None]) -> ActionRun:
    """One event, start to end (see the module docstring); raises on a failure."""
    payload = read_payload(renv.event_path)
    prepare_home(renv)
    level = "DEBUG" if renv.debug else (env.get("AUTOLOOP_LOG_LEVEL") or "WARNING")
    home_env = {**env, "AUTOLOOP_HOME": str(renv.home), "AUTOLOOP_LOG_LEVEL": level}
    ctx = Home.open(env=home_env, home=renv.home)
    configure_logs(ctx)  # every log record redacted, until this run ends
    try:
        return _run(renv, ctx, payload, say)
    finally:
        reset_logs()


def _run(
    renv: RunnerEnv, ctx: Home, payload: dict[str, Any], say: Callable[[str], None]
) -> ActionRun:
    report = ActionRun(
        event_name=renv.event_name,
        repository=renv.repository,
        mode=renv.mode,
        attempt=renv.run_attempt,
        delivery=renv.delivery,
        run_url=renv.run_url,
        server_url=renv.server_url,
    )
    read_only = read_only_reason(renv, payload)
    if renv.mode in ("auto", "deliver") and not renv.uses_app and not read_only:
        report.warnings.append(
            "a merge made with GITHUB_TOKEN does not start 'push' workflows, so a deploy on "
            "push would never run: give 'app-id' and 'private-key' for the delivery pipeline "
            "(or set mode: triage)"
        )
    if renv.mode == "deliver":
        report.warnings.append(
            "mode 'deliver': the delivery pipeline is not wired into the Action yet; this run "
            "recorded the event and ran nothing"
        )
    if read_only:
        report.warnings.append(f"nothing was run or written: {read_only}")
    with contextlib.ExitStack() as stack:
        who: Identity | None = None
        if not read_only:
            who = connect(renv)
            stack.callback(who.client.close)
        before = _versions(ctx.store)
        hub = ctx.hub(on_turn=lambda phase, turn: _say_turn(say, phase, turn))
        if who is not None:
            wire(hub, who)
        name = "pull_request" if renv.event_name == "pull_request_target" else renv.event_name
        events = translate(
            name,
            renv.delivery,
            payload,
            app_slug=who.app_slug if who else None,
            app_id=who.app_id if who else None,
        )
        report.events = ingest(hub, renv, events, payload, say)
        if who is not None and renv.mode != "deliver":
            report.answers = answer(hub, who, report.events, say)
            drained = hub.drain(worker=renv.worker)
            with hub.store.read() as tx:
                report.turns = [
                    t for t in (tx.get("turn", tid) for tid in drained.turns) if isinstance(t, Turn)
                ]
        report.cards = _changed_cards(hub, before)
        report.new_cards = [c for c in report.cards if c.id not in before]
        report.subjects = _subjects(hub, report)
        asks = [c.id for c in report.new_cards if c.kind_ == "ask"]
        if asks and not renv.ledger_outlives_job:
            report.warnings.append(
                f"card(s) {', '.join(asks)} cannot be answered: the ledger is in {renv.home} on "
                "a GitHub-hosted runner, and that disk is gone when the job ends. Give "
                "'database-url' (PostgreSQL), or run on a self-hosted runner with a "
                "persistent 'home'"
            )
        report.stage = _stage(hub, {r.event.subject for r in report.events})
    return report


def ingest(
    hub: Hub,
    renv: RunnerEnv,
    events: list[Event],
    payload: Mapping[str, Any],
    say: Callable[[str], None],
) -> list[Recorded]:
    """Record the run's events (once per run, whatever the attempt)."""
    out: list[Recorded] = []
    if not events:
        action = payload.get("action")
        etype = f"{renv.event_name}.{action}" if isinstance(action, str) else renv.event_name
        own = Event(source="github", id=renv.delivery, type=etype, subject="github")
        hub.ledger.decide(k.Ingest(event=own, ignore="caused by this app"))
        say(f"event {etype}: caused by this run's own identity, recorded and not dispatched")
        return out
    for event in events:
        code = hub.emit(event).reply.code
        out.append(Recorded(event, code))
        what = "recorded" if code == "recorded" else "already recorded (an earlier attempt)"
        say(f"event {event.type} {event.subject}: {what} as {event.id}")
    return out


def answer(
    hub: Hub, who: Identity, recorded: list[Recorded], say: Callable[[str], None]
) -> list[Answered]:
    """``/answer CARD N`` comments of this run, each handled once."""
    desk = AnswerDesk(hub, who.client, who.bot_login)
    out: list[Answered] = []
    for item in recorded:
        request = parse_answer(item.event)
        if request is None:
            continue
        outcome = desk.handle_event(item.event, sweeping=item.code != "recorded")
        out.append(Answered(request.card, request.choice, request.login, outcome))
        say(f"/answer {request.card} {request.choice} by {request.login}: {outcome}")
    return out


def _changed_cards(hub: Hub, before: Mapping[str, int]) -> list[Card]:
    with hub.store.read() as tx:
        cards = [c for c in tx.query("card") if isinstance(c, Card)]
    changed = [c for c in cards if before.get(c.id, 0) < c.version]
    return sorted(changed, key=lambda c: int(c.id.lstrip("c") or 0))


def _subjects(hub: Hub, report: ActionRun) -> dict[str, str]:
    wanted = {t.matter for t in report.turns} | {c.matter for c in report.cards}
    out: dict[str, str] = {}
    with hub.store.read() as tx:
        for matter_id in sorted(wanted):
            found = tx.get("matter", matter_id)
            if isinstance(found, Matter):
                out[matter_id] = found.subject
    return out


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]


def _say_turn(say: Callable[[str], None], phase: str, turn: Turn) -> None:
    if phase == "start":
        resume = f", resuming {turn.resume}" if turn.resume else ""
        say(f"turn {turn.id} (rule {turn.rule}) starts: {len(turn.events)} event(s){resume}")
    else:
        error = f": {_one_line(turn.error)}" if turn.error else ""
        say(f"turn {turn.id} {turn.state}: {turn.outcome}{error}")


# --------------------------------------------------------------------------- the command


def _reason(exc: BaseException) -> tuple[int, str]:
    """Exit code and one line for what stopped the run."""
    if isinstance(exc, ActionError):
        return exc.code, str(exc)
    if isinstance(exc, ConfigError | SettingsError | StoreError):
        return 2, str(exc)
    if isinstance(exc, Unauthorized):
        return 1, (
            f"GitHub refused the credentials ({exc.status} {exc.message}): check "
            "'github-token', or 'app-id' and 'private-key'"
        )
    if isinstance(exc, Unreachable):
        return 1, f"GitHub did not answer ({exc}): check GITHUB_API_URL and the network"
    if isinstance(exc, GitHubError):
        return 1, f"GitHub: {exc}"
    return 1, f"failed: {type(exc).__name__}: {exc}"


def _say(text: str) -> None:
    # Every line starts with our name, so nothing read from outside can start a workflow
    # command ("::...") in the job's log.
    print(f"autoloop: {_one_line(text)}", flush=True)


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv:
        print(annotation("error", f"autoloop action takes no arguments, not {argv[0]!r}"))
        return 2
    env = dict(os.environ)
    try:
        renv = runner_env(env)
    except ActionError as exc:
        print(annotation("error", str(exc)), flush=True)
        return exc.code
    try:
        report = run(renv, env, _say)
    except Exception as exc:
        code, reason = _reason(exc)
        if renv.debug:
            traceback.print_exc(file=sys.stderr)
        print(annotation("error", f"autoloop action: {reason}"), flush=True)
        return code
    for warning in report.warnings:
        print(annotation("warning", warning), flush=True)
    for turn in report.turns:
        if turn.state == "failed":
            print(annotation("warning", f"turn {turn.id} failed: {turn.outcome}"), flush=True)
    write_outputs(renv.output, report)
    write_summary(renv.summary, report)
    _say(f"done: {len(report.turns)} turn(s), {len(report.new_cards)} card(s) raised")
    return 0
