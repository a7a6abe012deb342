"""``autoloop action``: the composite Action's entry (``action.yml`` runs it).

A workflow job runs it once per event, from the environment a runner gives
(:data:`ghapp.commands.action_env.VARIABLES` lists it; ``--help`` prints :data:`HELP`).

One run:

1. the event is translated as the App translates a webhook
   (:func:`plugins.sources.github.translate`, ``pull_request_target`` read as
   ``pull_request``) under the delivery id ``action-<run id>-<event name>``, and recorded
   once: a re-run of the run adds nothing;
2. an ``issue_comment`` holding ``/answer CARD N`` answers the card when its author may
   write to the repository (asked of GitHub, :mod:`ghapp.github.answers`);
3. what is runnable now runs (``hub.drain``): turns, cards as comments on the issue or
   pull request, write-backs, each once;
4. in modes ``deliver`` and ``auto``, the deliveries the event concerns are moved on
   (:class:`~ghapp.github.level.LevelDeliveries`) until each waits on the world;
5. the outputs ``turns``, ``cards`` (raised by this run), ``stage`` (the delivery's of
   the event's pull request, or of the one this run moved), ``cost-usd`` and ``tokens``
   (what the agents this run started reported spending) and a Markdown summary are
   written.

Nothing waits in the job: a question is a card on the issue and a row in the ledger, the
job ends, and the event that carries the answer resumes the agent. So for the rules'
turns the ledger must outlive the job: a persistent ``AUTOLOOP_HOME`` (a self-hosted
runner) or ``AUTOLOOP_DB``.

Modes: ``triage`` runs the rules' turns; ``deliver`` carries labelled pull requests
along the delivery pipeline (:mod:`ghapp.github.level`: level-triggered, each delivery's
state kept on its own pull request, so it needs no ledger that outlives the job, and a
wait ends the job); ``auto`` is both. A pull request from a fork (or Dependabot's) gets a
read-only token: the event is recorded, nothing is run or written, and the summary says
why.

Exit codes: 0, also when a turn failed or a delivery raised a card (that is recorded and
shown); 1 when GitHub or the ledger failed (for a delivery: after the others were moved
and the summary written), also when GitHub refused a card or a write-back (a token
without write access; an outage too, unless the ledger outlives the job and the next run
tries again); 2 for bad configuration. The reason is one ``::error::`` line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ghapp.commands import action_env
from ghapp.commands.action_env import (
    ActionError,
    RunnerEnv,
    prepare_home,
    read_only_reason,
    read_payload,
    runner_env,
)
from ghapp.commands.action_report import (
    ActionRun,
    Answered,
    Recorded,
    annotation,
    write_outputs,
    write_summary,
)
from ghapp.commands.home import Home, configure_logs, reset_logs
from ghapp.github.answers import AnswerDesk, parse_answer
from ghapp.github.channel import GitHubCommentChannel
from ghapp.github.client import GitHubClient
from ghapp.github.errors import REFUSED_PERMISSION, GitHubError, Unauthorized, Unreachable
from ghapp.github.executor import GitHubExecutor
from ghapp.github.level import LevelDeliveries, Moved
from ghapp.runtime.hub import Hub
from ghapp.runtime.settings import Settings, SettingsError
from ghapp.store.base import Store, StoreError, ledger_name
from kernel import inputs as k
from kernel.errors import ConfigError
from kernel.model import Event
from kernel.records import Action, Card, Matter, Turn
from kernel.text import one_line
from plugins.sources.github import translate

__all__ = ["ActionError", "RunnerEnv", "deliver", "main", "run"]

CHANNEL_ADAPTER = "github-comment"
# A failed turn's retry within this long is waited for in the job (the ledger usually
# ends with the job, and nothing else would run it); the rules' defaults (two retries,
# 30 s then 60 s) fit.
RETRY_WAIT_S = 300.0


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


def wire(hub: Hub, who: Identity, run_id: str) -> None:
    """Cards as comments (the rules' ``github-comment`` channels) and GitHub write-backs.
    Their markers name the ledger: a ledger made by this run is named after the run, so
    that a re-run on a home made afresh (a hosted runner without a database) finds the
    comments of the run's first attempt, and a later run's never takes them for its own."""

    def mentions() -> tuple[str, ...]:  # rules.json's (see ghapp.github.writes.defuse)
        return hub.rules().mentions

    ledger = ledger_name(hub.store, f"run{run_id}")
    for name, spec in hub.rules().channels.items():
        if spec.use == CHANNEL_ADAPTER:
            hub.channels[name] = GitHubCommentChannel(
                who.client, who.bot_login, mentions=mentions, ledger=ledger
            )
    hub.executors["github"] = GitHubExecutor(
        who.client, who.bot_login, mentions=mentions, ledger=ledger
    )


def _versions(store: Store) -> dict[str, int]:
    with store.read() as tx:
        return {c.id: c.version for c in tx.query("card") if isinstance(c, Card)}


def _stage(moved: list[Moved], subjects: set[str]) -> str:
    """The delivery stage of the event's pull request; for an event about none, of the
    delivery this run moved (the last, if several); "" when there is none."""
    for m in moved:
        if f"{m.repo}#{m.number}" in subjects and m.after:
            return m.after
    changed = [m for m in moved if m.after and (m.started or m.before != m.after)]
    return changed[-1].after if changed else ""


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
    if read_only:
        report.warnings.append(f"nothing was run or written: {read_only}")
    with contextlib.ExitStack() as stack:
        who: Identity | None = None
        if not read_only:
            who = connect(renv)
            stack.callback(who.client.close)
        before = _versions(ctx.store)
        hub = ctx.hub(on_turn=lambda phase, turn: _say_turn(say, phase, turn))
        hub.cards.say_unshown = False  # the run's report names each card not posted, once
        if who is not None:
            wire(hub, who, renv.run_id)
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
            report.answers = answer(
                hub,
                who,
                report.events,
                say,
                ledger_outlives_job=renv.ledger_outlives_job,
                # d<n> cards are the deliveries', which a deliver run reads (this one, or
                # the deliver workflow's run on the same comment): left to it
                delivery_cards=True,
            )
            drained = hub.drain(
                worker=renv.worker,
                wait_retries_s=RETRY_WAIT_S,
                waiting=lambda at: say(
                    f"a failed turn is retried at {at:%H:%M:%S} UTC (its rule's retry_backoff_s)"
                ),
            )
            if drained.retry_at is not None:
                report.warnings.append(
                    f"a failed turn's retry is due at {drained.retry_at:%H:%M:%S} UTC, past "
                    f"what a job waits ({RETRY_WAIT_S:.0f} s): it runs on the next run "
                    "whose ledger holds it (lower the rule's retry_backoff_s or max_retries)"
                )
            with hub.store.read() as tx:
                report.turns = [
                    t for t in (tx.get("turn", tid) for tid in drained.turns) if isinstance(t, Turn)
                ]
            report.unshown, report.unwritten, later = unwritten(
                hub, report.turns, retried=renv.ledger_outlives_job
            )
            report.warnings += later
        if who is not None and renv.mode != "triage" and report.events:
            report.deliveries = deliver(hub, who, renv, report.events, payload=payload, say=say)
        merging = [m for m in report.deliveries if m.mode == "deliver" and not m.error]
        if merging and not renv.uses_app:
            # Only where a delivery that merges moved: on every run (an issue, a comment,
            # the clock, no delivery at all) it could not be silenced.
            report.warnings.append(
                "a merge made with GITHUB_TOKEN does not start 'push' workflows, so a deploy "
                "on push would never run: give 'app-id' and 'private-key' for the delivery "
                "pipeline (or set mode: triage)"
            )
        timed = [r.name for r in hub.rules().rules if r.every]
        if renv.event_name == "schedule" and timed and not renv.ledger_outlives_job:
            report.warnings.append(
                f"rule(s) {', '.join(timed)} with 'every' never fire here: a schedule fires "
                "from the last tick its ledger remembers, and the ledger is in "
                f"{renv.home} on a GitHub-hosted runner, gone when the job ends. Give "
                "'database-url' (PostgreSQL), or run on a self-hosted runner with a "
                "persistent 'home'"
            )
        report.cards = _changed_cards(hub, before)
        report.new_cards = [c for c in report.cards if c.id not in before]
        report.subjects = _subjects(hub, report)
        asks = [c.id for c in report.new_cards if c.kind_ == "ask"]
        nowhere = [
            c.id
            for c in report.new_cards
            if c.kind_ == "ask"
            and c.id not in report.unshown
            and not any(str((d or {}).get("ref") or "") for d in c.delivered.values())
        ]
        if nowhere:
            # The summary said they waited for an answer; no one could see them.
            why = (
                'shown nowhere: its rule has no "notify" channel of "use": '
                '"github-comment", or its subject is no issue or pull request'
            )
            report.unshown.update(dict.fromkeys(nowhere, why))
            report.warnings.append(
                f'card(s) {", ".join(nowhere)} {why}: give the rule "notify" with a '
                "github-comment channel, and events about an issue or a pull request"
            )
        if asks and not renv.ledger_outlives_job:
            report.warnings.append(
                f"card(s) {', '.join(asks)} cannot be answered: the ledger is in {renv.home} on "
                "a GitHub-hosted runner, and that disk is gone when the job ends. Give "
                "'database-url' (PostgreSQL), or run on a self-hosted runner with a "
                "persistent 'home'"
            )
        report.stage = _stage(report.deliveries, {r.event.subject for r in report.events})
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
    content = content_key(renv.event_name, payload)
    for event in events:
        key = content + event.id[len(renv.delivery) :] if content else ""
        code = hub.emit(event, content_key=key).reply.code
        out.append(Recorded(event, code))
        what = (
            "recorded"
            if code == "recorded"
            else "already recorded (an earlier attempt, or another workflow's run)"
        )
        say(f"event {event.type} {event.subject}: {what} as {event.id}")
    return out


# Events whose payload is the same for different occurrences: each run is its own event.
_NO_CONTENT_KEY = frozenset({"schedule", "workflow_dispatch", "repository_dispatch"})


def content_key(event_name: str, payload: Mapping[str, Any]) -> str:
    """What a GitHub event is made of, hashed: two workflows of one repository that share
    a ledger get the same event under two run ids (it ran the rules' turns twice), and
    record it once, as the App records a body sent again under a new delivery id. ""
    for the events whose payload does not tell one occurrence from the next."""
    if event_name in _NO_CONTENT_KEY:
        return ""
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(f"{event_name}\n{body}".encode("utf-8", "surrogatepass"))
    return "action:" + digest.hexdigest()


def deliver(
    hub: Hub,
    who: Identity,
    renv: RunnerEnv,
    recorded: list[Recorded],
    *,
    payload: Mapping[str, Any],
    say: Callable[[str], None],
) -> list[Moved]:
    """Move on the deliveries this run's event concerns, each until it waits on the world."""
    relabeled: dict[int, str] = {}
    pull = payload.get("pull_request")
    updated = pull.get("updated_at") if isinstance(pull, Mapping) else None
    for item in recorded:
        subject = item.event.subject
        # A re-run finds its label event recorded already (by the attempt that failed):
        # it counts as well, by its time (a label older than the delivery's end starts
        # nothing; see trigger.added_after).
        known = item.code == "recorded" or bool(updated)
        if known and item.event.type == "pull_request.labeled":
            number = subject.rpartition("#")[2]
            if number.isdigit():
                relabeled[int(number)] = updated if isinstance(updated, str) else ""
    runner = LevelDeliveries(hub, who.client, who.bot_login, app_id=who.app_id)
    try:
        moved = runner.run(renv.repository, [r.event for r in recorded], relabeled=relabeled)
    finally:
        runner.close()
    for m in moved:
        where = f"{m.repo}#{m.number}"
        if m.error:
            say(f"delivery {where}: {m.error}")
            continue
        how = (
            "started at"
            if m.started
            else "still"
            if m.before == m.after
            else f"{m.before} ->"  # (not "x -> x")
        )
        source = f" (state read from its {m.rebuilt_from})" if m.rebuilt_from else ""
        wait = f"; waiting for {m.waiting}" if m.waiting else ""
        if m.answered:
            say(f"delivery {where}: card answered: {m.answered}")
        say(f"delivery {where}: {how} {m.after}{source}{wait}")
    return moved


def answer(
    hub: Hub,
    who: Identity,
    recorded: list[Recorded],
    say: Callable[[str], None],
    *,
    ledger_outlives_job: bool = True,
    delivery_cards: bool = False,
) -> list[Answered]:
    """``/answer CARD N`` comments of this run, each handled once."""
    desk = AnswerDesk(hub, who.client, who.bot_login)
    desk.delivery_cards = delivery_cards
    if not ledger_outlives_job:
        desk.missing_hint = (
            "A card asked in another run of this workflow is in that run's ledger, which "
            "ended with its job on a GitHub-hosted runner: to answer cards in later runs, "
            "the workflow needs 'database-url' (or a self-hosted runner with a persistent "
            "'home')."
        )
    out: list[Answered] = []
    for item in recorded:
        request = parse_answer(item.event, delivery_cards=delivery_cards)
        if request is None:
            continue
        outcome = desk.handle_event(item.event, sweeping=item.code != "recorded")
        out.append(Answered(request.card, request.choice, request.login, outcome))
        say(f"/answer {request.card} {request.choice} by {request.login}: {outcome}")
    return out


def unwritten(
    hub: Hub, turns: list[Turn], *, retried: bool
) -> tuple[dict[str, str], list[str], list[str]]:
    """The cards GitHub did not show and the write-backs of ``turns`` it did not make:
    (card id -> why, errors, warnings).

    ``serve`` tries them again at its next sweep, and so does the next run when the ledger
    outlives the job (``retried``): then what may pass (GitHub's outage) is a warning.
    What GitHub refused the token (403), or anything when the ledger goes with the job,
    is an error of the run: a token without write access used to end it with exit 0, the
    summary saying that a card no one could see waited for an answer."""
    unshown: dict[str, str] = {}
    for (card, _channel), why in sorted(hub.cards.unshown.items()):
        unshown.setdefault(card, why)
    ids = {t.id for t in turns}
    with hub.store.read() as tx:
        actions = [a for a in tx.query("action") if isinstance(a, Action) and a.turn in ids]
    missed = [
        (f"write-back {a.do} ({a.id}) not made", a.error, a.status == "failed")
        for a in sorted(actions, key=lambda a: a.id)
        if a.status == "failed" or (a.status == "allowed" and a.error)
    ]
    missed += [(f"card {card} not posted", why, False) for card, why in unshown.items()]
    errors, warnings = [], []
    for what, why, final in missed:
        said, refused, hint = why.partition(REFUSED_PERMISSION)  # GitHub refused the token
        if refused:  # which permission it lacks, after the rest cut to its length
            errors.append(f"{what}: {_one_line(said)}{refused}{_one_line(hint)}")
        elif final or not retried:
            errors.append(f"{what}: {_one_line(why)}")
        else:
            warnings.append(f"{what} yet: {_one_line(why)}; the next run tries again")
    return {c: _one_line(w) for c, w in unshown.items()}, errors, warnings


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
    return one_line(text)[:200]


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
        return 1, f"GitHub: {exc}"  # (a 403 names the permission)
    return 1, f"failed: {type(exc).__name__}: {exc}"


def _say(text: str) -> None:
    # Every line starts with our name, so nothing read from outside can start a workflow
    # command ("::...") in the job's log.
    print(f"autoloop: {_one_line(text)}", flush=True)


HELP = """usage: autoloop action

The entry of Autoloop's composite GitHub Action (action.yml runs it): one run per
workflow event, configured by the environment the runner gives. It takes no arguments.

One run:
  1. records the event once, as the GitHub App would (a re-run of the workflow run
     adds nothing);
  2. takes '/answer CARD N' in an issue comment when its author may write to the
     repository;
  3. runs what is runnable now: turns, cards as comments, write-backs, each once;
  4. in modes deliver and auto, moves the pull requests labelled 'deliver' (or
     'deliver-review') that the event concerns along the pipeline, until each waits;
  5. writes the outputs turns, cards, stage, cost-usd and tokens (what the agents it
     started reported spending), and a summary for the job's page.

Nothing waits in the job: a question becomes a card on the issue or pull request, the
job ends, and the event that carries the answer resumes the agent. For the rules'
turns the ledger must outlive the job: a persistent AUTOLOOP_HOME (a self-hosted
runner) or AUTOLOOP_DB. The delivery pipeline keeps its state on each pull request and
needs neither.

Modes (AUTOLOOP_MODE): auto (the default) is both of the others; triage runs the
rules' turns; deliver carries labelled pull requests along the pipeline. A pull request
from a fork, or Dependabot's, gets a read-only token: the event is recorded, nothing is
run or written, and the summary says why.

Environment:
{variables}

Exit codes: 0, also when a turn failed or a delivery raised a card (recorded and
shown); 1 when GitHub or the ledger failed, or refused a card or a write-back (a token
without issues: write and pull-requests: write); 2 for bad configuration. The reason is
one '::error::' line."""


def help_text() -> str:
    """What ``autoloop action --help`` prints: :data:`HELP` with the variables read."""
    rows = "\n".join(f"  {names}\n      {meaning}" for names, meaning in action_env.VARIABLES)
    return HELP.format(variables=rows)


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(help_text())
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
    try:
        write_outputs(renv.output, report)
        write_summary(renv.summary, report)
    except OSError as exc:  # the work is done and recorded: say so, in one line
        where = exc.filename or f"{renv.output} or {renv.summary}"
        print(
            annotation(
                "error",
                f"autoloop action: cannot write {where} ({exc.strerror or exc}): the run's "
                "work is done and recorded; GITHUB_OUTPUT and GITHUB_STEP_SUMMARY must be "
                "files the job may write",
            ),
            flush=True,
        )
        return 1
    spent = report.spent
    agents = f", agents spent {spent.text()}" if spent.runs else ""
    _say(f"done: {len(report.turns)} turn(s), {report.cards_raised} card(s) raised{agents}")
    failed = [m for m in report.deliveries if m.error]
    for m in failed:
        print(annotation("error", f"delivery {m.repo}#{m.number}: {m.error}"), flush=True)
    for line in report.unwritten:
        print(annotation("error", line), flush=True)
    return 1 if failed or report.unwritten else 0
