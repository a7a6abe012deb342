"""``autoloop doctor``: check an installation, one row per thing that can be wrong.

Rows, in order: the settings; the home folder, ``master.key`` and the ledger (a SQLite
file, or a PostgreSQL database looked at in a read-only transaction); the rules
file; each agent's program on PATH; each rule's ``cwd``; each signed source's secret
(set, and not weak); then, with a GitHub App
configured: the key file's mode, the App id and key against ``GET /app``, the App's
registered permissions and events, each installation's granted permissions and events,
and the App's recent webhook deliveries (``GET /app/hook/deliveries``: a newest delivery
that failed is a problem, and its row says why GitHub could not deliver).

What the App needs comes from :mod:`ghapp.github.manifest`, as for ``autoloop app
create``. Nothing is created or changed: a missing ledger is reported, not made.

Each row has a status: ``ok``, ``warn`` (works, but look), ``FAIL`` (a problem) or
``skip`` (not checked, the row says why). The rows are a table (``rich`` on a terminal,
plain aligned columns otherwise: see :mod:`ghapp.commands.show`). Exit 0 without a
problem, 1 with one, 2 on bad usage. ``--json`` prints
``{"ok": bool, "checks": [{"check", "status", "detail"}]}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ghapp.commands.home import CHANNEL_ADAPTERS, read_master_key, short_secrets
from ghapp.commands.show import Out
from ghapp.github.client import GitHubClient
from ghapp.github.errors import GitHubError, NotFound, Unauthorized, Unreachable
from ghapp.github.manifest import WEBHOOK_PATH, events_missing, permissions_missing
from ghapp.github.retry import Policy
from ghapp.runtime.links import RULES_INFO
from ghapp.runtime.rules_file import load_rules, rules_path
from ghapp.runtime.settings import GitHubSettings, Settings, SettingsError, hmac_source
from kernel.errors import ConfigError
from kernel.model import AgentSpec, Rules

__all__ = ["Check", "main", "run_checks"]

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"
DELIVERIES_SINCE_S = 24 * 3600.0  # deliveries looked at: those of the last day
DOCTOR_POLICY = Policy(attempts=2, max_wait_s=5.0, backoff_s=0.5, max_backoff_s=1.0)
BUILT_IN_AGENTS = frozenset({"demo"})  # adapters that run no program of their own


@dataclass(frozen=True, slots=True)
class Check:
    check: str
    status: str
    detail: str


# ------------------------------------------------------------------------------ local


def _unwritable(home: Path) -> str:
    """Why a file cannot be made in ``home`` (a read-only mount, an immutable folder, no
    permission), or "". The test file has no name (``O_TMPFILE``) where the system
    allows: nothing appears in the folder, and it is gone when closed."""
    import tempfile  # noqa: PLC0415  # only this check needs it

    try:
        with tempfile.TemporaryFile(dir=home):
            return ""
    except OSError as exc:
        return exc.strerror or str(exc)


def home_checks(home: Path, db: str) -> list[Check]:
    if not home.is_dir():
        why = "is not a folder" if home.exists() else "does not exist"
        return [
            Check(
                "home folder",
                FAIL,
                f"{home} {why}: run 'autoloop init' (or set AUTOLOOP_HOME to the right folder)",
            )
        ]
    mode = stat.S_IMODE(home.stat().st_mode)
    unwritable = _unwritable(home)
    rows = [
        Check(
            "home folder",
            FAIL,
            f"{home} cannot be written ({unwritable}): every command that records needs "
            "it, and the ledger and turn folders live there; give this user write access "
            "(or mount it writable)",
        )
        if unwritable
        else Check("home folder", OK, f"{home}")
        if not mode & 0o077
        else Check(
            "home folder",
            WARN,
            f"{home} is open to other users (mode {mode:o}): chmod 700 {home}",
        )
    ]
    try:
        read_master_key(home)
        key = home / "master.key"
        key_mode = stat.S_IMODE(key.stat().st_mode)
        rows.append(
            Check("master.key", OK, f"{key}")
            if not key_mode & 0o077
            else Check(
                "master.key",
                WARN,
                f"{key} can be read by other users (mode {key_mode:o}), and whoever reads it "
                f"can sign card links: chmod 600 {key}",
            )
        )
    except SettingsError as exc:
        rows.append(Check("master.key", FAIL, str(exc)))
    rows.append(ledger_check(db, home))
    return rows


def ledger_check(db: str, home: Path | None = None) -> Check:
    if db.startswith(("postgresql:", "postgres:")):
        return postgres_check(db, home)
    if not db.startswith("sqlite:"):
        from ghapp.store.urls import shown  # noqa: PLC0415  # only for this row

        return Check(
            "ledger",
            FAIL,
            f"AUTOLOOP_DB {shown(db)!r} is no ledger URL: use sqlite:///PATH or "
            "postgresql://USER@HOST/DB",
        )
    # as the SQLite store reads its URL: sqlite:///PATH, PATH absolute or relative
    raw = db.removeprefix("sqlite:///") if db.startswith("sqlite:///") else db
    path = Path(raw.removeprefix("sqlite:").partition("?")[0])
    if home is not None:
        from ghapp.commands.home_ledger import check_ledger_kept  # noqa: PLC0415  # only here
        from ghapp.store.base import StoreError  # noqa: PLC0415  # only here

        try:  # as every command that opens the ledger refuses it
            check_ledger_kept(home, path)
        except StoreError as exc:
            return Check("ledger", FAIL, str(exc))
    if not path.exists():
        return Check("ledger", WARN, f"{path} does not exist yet: the first event creates it")
    if not os.access(path, os.R_OK | os.W_OK):
        return Check("ledger", FAIL, f"{path} is not readable and writable by this user")
    from ghapp.store.sqlite import file_damage  # noqa: PLC0415  # only here

    damage = file_damage(path)
    if damage is not None:
        return Check("ledger", FAIL, f"{path} is damaged ({damage}): restore it from a backup")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        return Check(
            "ledger",
            WARN,
            f"{path} can be read by other users (mode {mode:o}), and it holds the events' "
            f"text: chmod 600 {path}*",
        )
    return Check("ledger", OK, f"{path} ({path.stat().st_size} bytes, intact)")


def postgres_check(db: str, home: Path | None = None) -> Check:
    """The PostgreSQL ledger, read only: reachable, and its schema one this autoloop
    knows. Nothing is created: an empty database is a warning, as a missing file is."""
    from ghapp.store.base import SCHEMA_VERSION, StoreError  # noqa: PLC0415  # only here
    from ghapp.store.postgres import look  # noqa: PLC0415  # loads psycopg: only here

    try:
        found = look(db)
    except StoreError as exc:
        return Check("ledger", FAIL, str(exc))
    if found.schema is None and not found.can_create:
        return Check(
            "ledger",
            FAIL,
            f"{found.where} holds no ledger yet, and its role may not create tables there: "
            "the first start would fail; give the role CREATE on the schema, or start once "
            "with the role that owns it",
        )
    if found.schema is None:
        return Check(
            "ledger",
            WARN,
            f"{found.where} holds no ledger yet: 'autoloop serve' or the first event creates it",
        )
    if found.schema > SCHEMA_VERSION:
        return Check(
            "ledger",
            FAIL,
            f"{found.where} has schema {found.schema}, newer than this autoloop knows "
            f"({SCHEMA_VERSION}): upgrade autoloop",
        )
    if found.schema < SCHEMA_VERSION:
        return Check(
            "ledger",
            WARN,
            f"{found.where} has schema {found.schema}: the next start brings it to "
            f"{SCHEMA_VERSION}, rebuilding the projections from the facts",
        )
    last = f"last fact #{found.facts}" if found.facts else "no facts yet"
    shown = f"{found.where} (PostgreSQL, schema {found.schema}, {last})"
    mine = _key_fingerprint(home) if home is not None else None
    if found.links_key is not None and mine is not None and mine != found.links_key:
        return Check("ledger", WARN, f"{shown}; {OTHER_KEY}")
    version = _rules_version(home) if home is not None else None
    if found.rules_version is not None and version is not None and version != found.rules_version:
        said = OTHER_RULES.format(mine=version, theirs=found.rules_version)
        return Check("ledger", WARN, f"{shown}; {said}")
    return Check("ledger", OK, shown)


def _rules_version(home: Path) -> str | None:
    from plugins.agents.registry import KNOWN_AGENT_ADAPTERS  # noqa: PLC0415  # only here

    try:
        return load_rules(home, agents=KNOWN_AGENT_ADAPTERS, channels=CHANNEL_ADAPTERS).version
    except (ConfigError, OSError):
        return None  # the rules row says why


#: said (doctor, serve) when the ledger's servers sign card links with another key
OTHER_KEY = (
    "this home's master.key is not the one the server of this ledger started last signs "
    "card links with: a link one of them sent is refused by the others; give every "
    "server the same master.key (copy it from the first home)"
)


#: said (doctor, serve, work) when the ledger's processes read other rules
OTHER_RULES = (
    "this home's rules are not the ones the process of this ledger started last read "
    "(version {mine} here, {theirs} there): each replica decides by its own rules.json; "
    "give every replica the same file"
)


def other_rules(store: object, version: str) -> str:
    """Record ``version`` as the rules the last process started on a shared ledger read;
    what to say when the one before read others ("" when the same, or none yet)."""
    with store.write() as tx:  # type: ignore[attr-defined]  # a Store
        before = tx.swap_info(RULES_INFO, version)
    if before in (None, version):
        return ""
    return OTHER_RULES.format(mine=version, theirs=before)


def _key_fingerprint(home: Path) -> str | None:
    from ghapp.runtime.links import key_fingerprint  # noqa: PLC0415  # only here

    try:
        return key_fingerprint(read_master_key(home))
    except SettingsError:
        return None  # the master.key row says why


def rules_check(home: Path) -> tuple[Check, Rules | None]:
    from plugins.agents.registry import KNOWN_AGENT_ADAPTERS  # noqa: PLC0415  # only here

    path = rules_path(home)
    try:
        rules = load_rules(home, agents=KNOWN_AGENT_ADAPTERS, channels=CHANNEL_ADAPTERS)
    except ConfigError as exc:
        return Check("rules", FAIL, str(exc)), None
    except OSError as exc:
        return Check("rules", FAIL, f"{path}: cannot read it ({exc.strerror})"), None
    detail = (
        f"{path}: {len(rules.rules)} rules, {len(rules.agents)} agents, "
        f"{len(rules.channels)} channels (version {rules.version})"
    )
    return Check("rules", OK, detail), rules


def _program(spec: AgentSpec) -> str | None:
    if spec.use in BUILT_IN_AGENTS:
        return None
    if spec.use == "command":
        argv = spec.command or tuple(spec.options.get("command", ()))
        return str(argv[0]) if argv else ""
    return str(spec.options.get("binary") or spec.use)


def agent_checks(home: Path, rules: Rules, env: Mapping[str, str]) -> list[Check]:
    rows = []
    path_var = env.get("PATH", os.defpath)
    for name, spec in sorted(rules.agents.items()):
        users = [r for r in rules.rules if r.agent == name]
        used_by = ", ".join(r.name for r in users) or (
            # a delivery policy's review = "agent:NAME" lives in each repository's
            # .github/autoloop.toml, which doctor does not read
            'no rule (a delivery policy\'s review = "agent:NAME" may use it)'
        )
        where = "" if spec.worker in {"any", "local"} else f" (runs on worker {spec.worker!r})"
        program = _program(spec)
        label = f"agent {name}"
        if program is None:
            rows.append(Check(label, OK, f"built in ({spec.use}); used by {used_by}"))
            continue
        if not program:
            rows.append(Check(label, FAIL, 'the command agent needs "command": a list'))
            continue
        if os.sep in program:
            bases = [_cwd(home, r.cwd) for r in users] or [home]
            found = [b / program for b in bases if os.access(b / program, os.X_OK)]
            missing = not found and not os.access(program, os.X_OK)
            resolved = str(found[0]) if found else program
        else:
            which = shutil.which(program, path=path_var)
            missing = which is None
            resolved = which or ""
        if missing:
            fix = (
                "fix its path in rules.json"
                if os.sep in program
                else 'install it, or give its full path as the agent\'s "binary" option'
                if spec.use != "command"
                else 'install it, or give its full path in "command"'
            )
            rows.append(
                Check(
                    label,
                    WARN if where else FAIL,
                    f"{program!r} is not found on PATH{where}; used by {used_by}: {fix}",
                )
            )
        elif script := _missing_script(spec, [_cwd(home, r.cwd) for r in users] or [home]):
            if not users:  # the starter rules' example: warned about right after init
                detail = (
                    f"used by no rule; its script {script!r} is not there yet: write it (or "
                    "fix its path in rules.json) before a rule, or a delivery policy's "
                    'review = "agent:NAME", uses this agent'
                )
                rows.append(Check(label, SKIP, detail))
                continue
            rows.append(
                Check(
                    label,
                    WARN,
                    f"{resolved} is there, but the script {script!r} its command runs is "
                    f"not found in the rules' cwd; used by {used_by}: fix its path in rules.json",
                )
            )
        else:
            rows.append(Check(label, OK, f"{resolved}; used by {used_by}{where}"))
    return rows


_SCRIPT_SUFFIXES = (".py", ".sh", ".js", ".mjs", ".ts", ".rb", ".pl")


def _missing_script(spec: AgentSpec, bases: list[Path]) -> str:
    """The script a command agent's interpreter is given (``["python3", "agent.py",
    "{prompt}"]``) when it exists in none of the folders its turns run in; "" otherwise
    (the interpreter being found said nothing about it)."""
    if spec.use != "command":
        return ""
    argv = spec.command or tuple(spec.options.get("command", ()))
    for arg in (str(a) for a in argv[1:]):
        if arg.endswith(_SCRIPT_SUFFIXES) and "{" not in arg and not arg.startswith("-"):
            path = Path(arg).expanduser()
            places = [path] if path.is_absolute() else [b / path for b in bases]
            return "" if any(p.is_file() for p in places) else arg
    return ""


def _cwd(home: Path, cwd: str) -> Path:
    path = Path(cwd).expanduser()
    return path if path.is_absolute() else home / path


def source_checks(rules: Rules, env: Mapping[str, str]) -> list[Check]:
    """Each signed source of rules.json: its secret set and not weak, as 'autoloop serve'
    requires before it starts."""
    rows = []
    for name, spec in rules.sources.items():
        if spec.adapter != "hmac":
            continue
        try:
            header, _ = hmac_source(name, spec.options, env)
        except SettingsError as exc:
            rows.append(Check(f"source {name}", FAIL, str(exc)))
            continue
        rows.append(Check(f"source {name}", OK, f"POST /v1/in/{name}, signed in {header}"))
    return rows


def channel_checks(rules: Rules, env: Mapping[str, str]) -> list[Check]:
    """Each webhook channel that takes its URL from a variable (``url_env``): that
    variable set. Unset, every card for the channel failed to send, a line each in the
    log, while doctor said "no problems found"."""
    used = {n for r in rules.rules for n in r.notify} | set(rules.owner_notify)
    rows = []
    for name, spec in rules.channels.items():
        var = str(spec.options.get("url_env", "")) if spec.use == "webhook" else ""
        if not var:
            continue
        if env.get(var):
            rows.append(Check(f"channel {name}", OK, f"posts to the URL in {var}"))
            continue
        status = FAIL if name in used else WARN
        users = "cards for it are not sent" if name in used else "no rule notifies it"
        rows.append(Check(f"channel {name}", status, f"set {var} (its url_env): {users}"))
    return rows


def cwd_checks(home: Path, rules: Rules) -> list[Check]:
    rows = []
    for rule in rules.rules:
        path = _cwd(home, rule.cwd)
        label = f"cwd of {rule.name}"
        if not path.is_dir():
            why = "is not a folder" if path.exists() else "does not exist"
            rows.append(Check(label, FAIL, f'{path} {why}: create it, or fix the rule\'s "cwd"'))
        elif rule.access != "read" and not os.access(path, os.W_OK):
            rows.append(
                Check(
                    label, FAIL, f"{path} is not writable, but the rule's access is {rule.access}"
                )
            )
        else:
            rows.append(Check(label, OK, str(path.resolve())))
    return rows


# ------------------------------------------------------------------------------ GitHub


def key_mode_check(settings: Settings) -> Check | None:
    raw = (settings.github_private_key or "").strip()
    if not raw or raw.startswith("-----BEGIN"):
        return None
    path = Path(raw).expanduser()
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        return Check(
            "private key file",
            WARN,
            f"{path} can be read by other users (mode {mode:o}): chmod 600 {path}",
        )
    return Check("private key file", OK, f"{path} (mode {mode:o})")


def _app_error(exc: GitHubError, gh: GitHubSettings) -> str:
    answer = f"GET /app: {exc.status} {exc.message}" if exc.status else str(exc)
    if isinstance(exc, NotFound):  # (a wrong id or key is a 401: the URL is wrong)
        from ghapp.commands.github_app import app_refused  # noqa: PLC0415  # imported late: only this path needs it, and it imports the whole App

        return app_refused(gh, exc)
    if isinstance(exc, Unauthorized):
        return (
            f"GitHub refuses the App id {gh.app_id} with this private key ({answer}): the id "
            "and the key are not the same App's; check AUTOLOOP_GITHUB_APP_ID against the "
            "App ID on the App's settings page, and generate a new private key there if the "
            "key file is another App's"
        )
    if isinstance(exc, Unreachable):
        cause = f" ({exc.cause})" if exc.cause else ""
        return (
            f"cannot reach GitHub at {gh.api_url}{cause}: check AUTOLOOP_GITHUB_URL and the "
            "network (proxy, firewall)"
        )
    return f"{answer}: check AUTOLOOP_GITHUB_URL and the App's settings"


def _granted_row(label: str, granted: object, events: object, fix: str) -> Check:
    lacks = permissions_missing(granted if isinstance(granted, dict) else {})
    missing_events = events_missing(events if isinstance(events, list) else [])
    if not lacks and not missing_events:
        return Check(label, OK, "every permission and event Autoloop needs")
    parts = []
    if lacks:
        parts.append(f"lacks {', '.join(lacks)}")
    if missing_events:
        parts.append(f"does not subscribe to {', '.join(missing_events)}")
    return Check(label, FAIL, f"{'; '.join(parts)}: {fix} (docs/github-app.md lists why)")


def _failure_hint(status: str, code: int) -> str:
    if code == 401:
        return (
            "the server refused the signature: the webhook secret in the App's settings "
            "differs from AUTOLOOP_GITHUB_WEBHOOK_SECRET"
        )
    if code == 404:
        return f"wrong path: the App's webhook URL must end in {WEBHOOK_PATH}"
    if code >= 500:
        return "the server failed: see the log of 'autoloop serve'"
    if code:
        return "see the log of 'autoloop serve'"
    return (
        f"GitHub could not reach the webhook URL ({status}): is 'autoloop serve' running, "
        "and reachable from the internet at the App's webhook URL (DNS, TLS, proxy, firewall)?"
    )


def deliveries_check(deliveries: list[Any]) -> Check:
    items = [d for d in deliveries if isinstance(d, dict)]
    if not items:
        return Check(
            "webhook deliveries",
            WARN,
            "none in the last day: GitHub sends one at the next event; if events happened, "
            "check that the App's webhook is active and its URL is right",
        )
    failed = [d for d in items if d.get("status") != "OK"]
    newest = max(items, key=lambda d: (str(d.get("delivered_at") or ""), d.get("id") or 0))
    if newest.get("status") == "OK":
        earlier = f" ({len(failed)} failed before it)" if failed else ""
        return Check(
            "webhook deliveries",
            OK,
            f"the newest of {len(items)} in the last day was delivered{earlier}",
        )
    status = str(newest.get("status") or "failed")
    code = newest.get("status_code") if isinstance(newest.get("status_code"), int) else 0
    event = str(newest.get("event") or "?")
    action = f".{newest['action']}" if newest.get("action") else ""
    return Check(
        "webhook deliveries",
        FAIL,
        f"{len(failed)} of the last {len(items)} failed; the newest ({event}{action} at "
        f"{newest.get('delivered_at')}): {status}: {_failure_hint(status, code or 0)}; "
        "then redeliver the failed ones from the App's Advanced settings",
    )


ClientFactory = Callable[[GitHubSettings], GitHubClient]


def _client(gh: GitHubSettings) -> GitHubClient:
    return GitHubClient.from_settings(gh, timeout_s=10.0, policy=DOCTOR_POLICY)


def github_checks(
    settings: Settings, *, now: float, client_for: ClientFactory = _client
) -> list[Check]:
    given = [settings.github_app_id, settings.github_private_key, settings.github_webhook_secret]
    if not any((v or "").strip() for v in given):
        return [
            Check(
                "GitHub App",
                SKIP,
                "not configured (local events only): 'autoloop app create --org ORG --url URL' "
                "registers one (docs/github-app.md)",
            )
        ]
    if not (settings.github_app_id or settings.github_private_key):
        try:
            settings.webhook_secret()
        except SettingsError as exc:
            return [Check("GitHub settings", FAIL, str(exc))]
        return [
            Check(
                "GitHub App",
                WARN,
                "only a webhook secret is set: webhooks are recorded, nothing is written back; "
                "set AUTOLOOP_GITHUB_APP_ID and AUTOLOOP_GITHUB_PRIVATE_KEY to turn that on",
            )
        ]
    try:
        gh = settings.require_github()
    except SettingsError as exc:
        return [Check("GitHub settings", FAIL, str(exc))]
    # (each value may come from the file or the environment: the settings row says both;
    # "from settings.toml" here named the file for a URL the environment gave)
    rows = [Check("GitHub settings", OK, f"App id {gh.app_id}, {gh.api_url}")]
    key_row = key_mode_check(settings)
    if key_row is not None:
        rows.append(key_row)
    client = client_for(gh)
    try:
        try:
            app = client.get_app()
        except GitHubError as exc:
            rows.append(Check("App id and key", FAIL, _app_error(exc, gh)))
            return rows
        slug = app.get("slug")
        owner = app.get("owner")
        login = owner.get("login") if isinstance(owner, dict) else "?"
        rows.append(
            Check("App id and key", OK, f"GET /app: {slug} (id {app.get('id')}) of {login}")
        )
        html_url = str(app.get("html_url") or "")
        rows.append(
            _granted_row(
                "App permissions",
                app.get("permissions"),
                app.get("events"),
                f"add them on the App's settings page ({html_url}), Permissions & events",
            )
        )
        rows.extend(_installation_rows(client, html_url))
        try:
            recent = client.list_webhook_deliveries(since=now - DELIVERIES_SINCE_S)
        except GitHubError as exc:
            rows.append(Check("webhook deliveries", FAIL, f"cannot list them: {exc}"))
        else:
            rows.append(deliveries_check(recent))
    finally:
        client.close()
    return rows


def _installation_rows(client: GitHubClient, html_url: str) -> list[Check]:
    try:
        found = client.list_installations()
    except GitHubError as exc:
        return [Check("installations", FAIL, f"cannot list them: {exc}")]
    if not found:
        return [
            Check(
                "installations",
                FAIL,
                f"the App is installed nowhere: install it on your organization at "
                f"{html_url}/installations/new",
            )
        ]
    rows = []
    for inst in found:
        account = inst.get("account")
        login = account.get("login") if isinstance(account, dict) else "?"
        settings_url = inst.get("html_url") or "the account's settings, GitHub Apps"
        rows.append(
            _granted_row(
                f"installation on {login}",
                inst.get("permissions"),
                inst.get("events"),
                f"accept the App's new permissions at {settings_url}",
            )
        )
    return rows


# ------------------------------------------------------------------------------ all


def run_checks(
    env: Mapping[str, str],
    config: Path | None = None,
    *,
    now: Callable[[], float] = time.time,
    client_for: ClientFactory = _client,
) -> list[Check]:
    try:
        settings = Settings.from_env(env, config)
    except SettingsError as exc:
        return [Check("settings", FAIL, str(exc))]
    source = f"{settings.file} and the environment" if settings.file else "the environment"
    rows = [Check("settings", OK, f"from {source}")]
    rows += home_checks(settings.home, settings.db)
    rules_row, rules = rules_check(settings.home) if settings.home.is_dir() else (None, None)
    if rules_row is not None:
        rows.append(rules_row)
    if rules is not None:
        rows += agent_checks(settings.home, rules, env)
        rows += cwd_checks(settings.home, rules)
        rows += source_checks(rules, env)
        rows += channel_checks(rules, env)
        rows += [
            Check(
                f"secret {name}",
                WARN,
                "too short to be masked (under 8 characters): it is stored and shown as it "
                "is; use a longer secret",
            )
            for name in short_secrets(rules, env)
        ]
    rows += github_checks(settings, now=now(), client_for=client_for)
    return rows


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="autoloop doctor",
        description="Check the settings, the home folder, the rules, the agents and the "
        "GitHub App (id, key, permissions, installations, webhook deliveries).",
    )
    p.add_argument("--config", type=Path, help="a TOML settings file (default HOME/settings.toml)")
    p.add_argument("--json", action="store_true", help="print the checks as one JSON object")
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    rows = run_checks(dict(os.environ), args.config)
    problems = [r for r in rows if r.status == FAIL]
    if args.json:
        print(json.dumps({"ok": not problems, "checks": [asdict(r) for r in rows]}))
    else:
        out = Out()
        out.table(
            "autoloop doctor",
            ["check", "status", "detail"],
            [[r.check, r.status, r.detail] for r in rows],
        )
        warned = [r for r in rows if r.status == WARN]
        if problems:
            out.line(
                f"{len(problems)} problem(s): fix the FAIL rows, then run 'autoloop doctor' again"
            )
        elif warned:  # (a script not found fails every turn: "no problems" misled)
            names = ", ".join(r.check for r in warned)
            out.line(f"no failures; {len(warned)} warning(s) to read: {names}")
        else:
            out.line("no problems found")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
