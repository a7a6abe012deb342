"""The opened home: where things live for one process, and the hub made from them.

``Home.open()`` reads ``AUTOLOOP_HOME`` (the folder: rules, master key, turn folders),
``AUTOLOOP_DB`` (the ledger, opened by :mod:`ghapp.commands.home_ledger`) and
``AUTOLOOP_CLOCK``; ``home.rules()`` re-reads the rules when their file changes;
``home.hub()`` builds the hub with the agents, channels and redaction the rules ask for.
Opening a home loads neither the rules parser nor the hub: the commands that use them
load them.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ghapp.commands.home_ledger import (
    KNOWN_LEDGERS,
    db_url,
    home_from_env,
    not_a_folder,
    open_ledger,
    require_home,
    start_new_ledger,
)
from ghapp.runtime.rules_file import clock_from_env, load_rules, rules_path
from ghapp.store.base import Store
from kernel.errors import ConfigError

if TYPE_CHECKING:
    from ghapp.runtime.hub import Hub
    from ghapp.runtime.redact import Redactor
    from kernel.model import Rules

__all__ = [
    "CHANNEL_ADAPTERS",
    "Home",
    "configure_logs",
    "db_url",
    "home_from_env",
    "init_home",
    "read_master_key",
    "read_rules",
    "require_home",
    "reset_logs",
    "start_new_ledger",
]

log = logging.getLogger("autoloop.home")

CHANNEL_ADAPTERS = frozenset({"console", "desktop", "webhook", "github-comment"})
#: What to do when a channel of the rules cannot be made in this process.
ACTION_HINTS = {
    "github": (
        "'autoloop serve' with the GitHub App (AUTOLOOP_GITHUB_APP_ID and "
        "AUTOLOOP_GITHUB_PRIVATE_KEY set) makes the GitHub write-backs"
    ),
}
CHANNEL_HINTS = {
    "github-comment": (
        "no GitHub App is connected here; 'autoloop serve' with AUTOLOOP_GITHUB_APP_ID and "
        "AUTOLOOP_GITHUB_PRIVATE_KEY set posts them"
    ),
}


def init_home(home: Path, *, rules_text: str | None = None) -> list[str]:
    """Create the home folder, a starter rules.json and master.key; keep what exists."""
    import secrets  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    from kernel.rules import starter_rules_text  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    made: list[str] = []
    not_a_folder(home)
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    rules = home / "rules.json"
    if not rules.exists() and not (home / "rules.toml").exists():
        rules.write_text(rules_text if rules_text is not None else starter_rules_text())
        made.append(str(rules))
    key = home / "master.key"
    if not key.exists():
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
        made.append(str(key))
        # a new home: its list of ledgers starts empty (the guess made for a home from
        # before the list, by its turn folders, is not needed)
        (home / KNOWN_LEDGERS).touch()
    return made


def lease_margin_from_env(env: Mapping[str, str]) -> float:
    """AUTOLOOP_LEASE_MARGIN_S: seconds a claim outlives the rule's timeout_s (default 120)."""
    raw = env.get("AUTOLOOP_LEASE_MARGIN_S")
    if not raw:
        from ghapp.runtime.hub import LEASE_MARGIN_S  # noqa: PLC0415  # the hub loads only where it is used

        return LEASE_MARGIN_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ConfigError(
            f"{raw!r} is not a number of seconds >= 0 (e.g. 120)", file="AUTOLOOP_LEASE_MARGIN_S"
        )
    return value


def _stamp(path: Path) -> tuple[str, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return str(path), st.st_mtime_ns, st.st_size


def _id_key(home: Path) -> bytes:
    """The key of the digest stored with an id that held a secret (see
    :func:`ghapp.runtime.hub.masked_key`), derived from ``master.key``; none without one
    (a home whose key cannot be read refuses what needs it, elsewhere)."""
    import hmac  # noqa: PLC0415  # only where a hub is made

    from ghapp.runtime.settings import SettingsError  # noqa: PLC0415  # (as above)

    try:
        master = read_master_key(home)
    except SettingsError:
        return b""
    return hmac.digest(master, b"autoloop: digests of masked ids", "sha256")


def read_master_key(home: Path) -> bytes:
    """The bytes of ``master.key`` (surrounding white space dropped), checked for strength.

    Raises :class:`~ghapp.runtime.settings.SettingsError` (one line, with what to do) when the file
    cannot be read or the key is weak: card links signed with a weak key can be forged.
    """
    from ghapp.runtime.links import WeakKeyError, check_master_key  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
    from ghapp.runtime.settings import SettingsError  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    path = home / "master.key"
    try:
        raw = path.read_bytes().strip()
    except FileNotFoundError:
        raise SettingsError(f"{path} is missing: run 'autoloop init' first") from None
    except OSError as exc:
        raise SettingsError(f"{path} cannot be read ({exc.strerror})") from None
    try:
        return check_master_key(raw)
    except WeakKeyError as exc:
        raise SettingsError(
            f"{path} is refused: {exc}. Move it away and run 'autoloop init' to write a new "
            "one (links already sent stop working)"
        ) from None


def read_rules(home: Path) -> Rules:
    """The rules of ``home``, checked against the agent and channel adapters there are
    (ConfigError, one line, when the file is missing or wrong)."""
    from plugins.agents.registry import KNOWN_AGENT_ADAPTERS  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    return load_rules(home, agents=KNOWN_AGENT_ADAPTERS, channels=CHANNEL_ADAPTERS)


@dataclass
class Home:
    """The opened home of one process: its folder, environment, ledger and clock."""

    home: Path
    env: Mapping[str, str]
    store: Store
    clock: Callable[[], datetime]
    _rules: Rules | None = None
    _rules_stamp: tuple[str, int, int] | None = None

    @classmethod
    def open(cls, env: Mapping[str, str] | None = None, home: Path | None = None) -> Home:
        env = dict(os.environ if env is None else env)
        home = home or home_from_env(env)
        clock = clock_from_env(env)
        store = open_ledger(env, home)
        return cls(home=home, env=env, store=store, clock=clock)

    def rules(self) -> Rules:
        """The rules, re-read when the file changed (a long-running worker sees edits).

        A file that became invalid is reported once on stderr and the last good rules stay
        in force; the first load raises, so nothing starts with a bad file.
        """
        stamp = _stamp(rules_path(self.home))
        if self._rules is not None and stamp == self._rules_stamp:
            return self._rules
        try:
            rules = read_rules(self.home)
        except ConfigError as exc:
            if self._rules is None:
                raise
            log.error("rules not reloaded, the previous ones stay in force: %s", exc)
            self._rules_stamp = stamp
            return self._rules
        if self._rules is not None:  # an edit taken while running: say so (a bad one is)
            log.info("%s changed: the new rules are in force (%d rules)", stamp and stamp[0],
                     len(rules.rules))  # fmt: skip
            self._note_rules(rules.version)
        self._rules, self._rules_stamp = rules, stamp
        return rules

    def _note_rules(self, version: str) -> None:
        """On a shared ledger, the rules now in force are the ones this process read last
        (``serve`` and ``work`` compare theirs with it at start): an edit taken while
        running left the version read at start there, and a replica started after the
        same edit everywhere was told its rules differed."""
        from ghapp.runtime.links import RULES_INFO  # noqa: PLC0415  # only on a reload
        from ghapp.store.sqlite import SqliteStore  # noqa: PLC0415  # (as above)

        if isinstance(self.store, SqliteStore):
            return
        try:
            with self.store.write() as tx:
                tx.swap_info(RULES_INFO, version)
        except Exception as exc:  # the ledger away: said at the next start, nothing lost
            log.warning("the rules' version could not be noted in the ledger: %s", exc)

    def hub(self, *, console: TextIO | None = None, **kw: object) -> Hub:
        """The hub of this home; ``console`` is where console channels print (stderr)."""
        from ghapp.runtime.hub import Hub  # noqa: PLC0415  # the hub loads only where it is used
        from ghapp.runtime.turns import keep_private  # noqa: PLC0415  # (as above)
        from plugins.agents.registry import make_agent  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast
        from plugins.channels.local import channel_makers  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

        keep_private()  # before any agent runs: it cannot read this process's secrets
        from ghapp.runtime.redact import MIN_VALUE_LENGTH  # noqa: PLC0415  # (as above)

        rules = self.rules()
        redact = make_redact(self.home, rules, self.env)
        for name in short_secrets(rules, self.env):
            log.warning(
                "%s (secret_env) is too short to be masked: values under %d characters are "
                "stored and shown as they are; use a longer secret",
                name, MIN_VALUE_LENGTH,
            )  # fmt: skip
        hub = Hub(
            home=self.home,
            store=self.store,
            rules=self.rules,
            clock=self.clock,
            agent_for=make_agent,
            channel_makers=channel_makers(self.env, console=console),
            redact=redact,
            lease_margin_s=lease_margin_from_env(self.env),
            id_key=_id_key(self.home),
            **kw,  # type: ignore[arg-type]  # callers pass Hub keyword arguments through
        )
        hub.cards.hints.update(CHANNEL_HINTS)
        hub.outbox.waiting.update(ACTION_HINTS)  # (serve and the Action wire an executor)
        return hub


def secret_values(home: Path, rules: Rules, env: Mapping[str, str]) -> list[str]:
    """Values this process must never store or print: marked env vars, hub secrets."""
    from ghapp.runtime.settings import source_secret_var  # noqa: PLC0415  # (as below)
    from ghapp.store.urls import passwords_in  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    names = list(rules.secret_env)
    names += ["AUTOLOOP_GITHUB_WEBHOOK_SECRET", "GITHUB_TOKEN"]
    for name, spec in rules.sources.items():  # each signed source's own secret
        if spec.adapter == "hmac":
            var = spec.options.get("secret_env")
            names += [str(var)] if var else [source_secret_var(name)]
            names.append(f"AUTOLOOP_SOURCE_{name.upper()}_SECRET")  # (the earlier default)
    values = [env[name] for name in names if env.get(name)]
    values += passwords_in(env.get("AUTOLOOP_DB", ""))
    try:
        key = (home / "master.key").read_bytes().strip()
    except OSError:
        key = b""
    with contextlib.suppress(UnicodeDecodeError):  # a binary key never shows up as text
        if key:
            values.append(key.decode())
    return values


def short_secrets(rules: Rules, env: Mapping[str, str]) -> list[str]:
    """The ``secret_env`` names whose value is set but too short to be masked (it would
    mask ordinary words): they were left in clear without a word."""
    from ghapp.runtime.redact import MIN_VALUE_LENGTH  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    return [
        name
        for name in rules.secret_env
        if (value := env.get(name, "").strip()) and len(value) < MIN_VALUE_LENGTH
    ]


def make_redactor(home: Path, rules: Rules, env: Mapping[str, str]) -> Redactor:
    """The :class:`~ghapp.runtime.redact.Redactor` of this process: patterns, plus the
    secret values of :func:`secret_values`."""
    from ghapp.runtime.redact import Redactor  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    return Redactor(extra_values=secret_values(home, rules, env))


def make_redact(home: Path, rules: Rules, env: Mapping[str, str]) -> Callable[[str], str]:
    """The redactor for everything this process stores: patterns plus marked secret values."""
    redact: Callable[[str], str] = make_redactor(home, rules, env).redact
    return redact


def configure_logs(ctx: Home) -> None:
    """Log to stderr, every record redacted (level from AUTOLOOP_LOG_LEVEL, default INFO;
    AUTOLOOP_LOG_FORMAT=json writes one JSON object a line)."""
    level = ctx.env.get("AUTOLOOP_LOG_LEVEL") or "INFO"
    fmt = (ctx.env.get("AUTOLOOP_LOG_FORMAT") or "text").strip().lower()
    if fmt not in ("text", "json"):
        raise ConfigError(
            f"{fmt!r} is not a log format: use text (the default) or json (one object a line)",
            file="AUTOLOOP_LOG_FORMAT",
        )
    from ghapp.runtime import logs  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    redactor = make_redactor(ctx.home, ctx.rules(), ctx.env)
    try:
        logs.configure_logging(level, redactor, json=fmt == "json")
    except ValueError as exc:  # its text names the levels to use
        raise ConfigError(str(exc), file="AUTOLOOP_LOG_LEVEL") from None


def reset_logs() -> None:
    """Undo :func:`configure_logs` (a command's ``main`` may run inside another program)."""
    from ghapp.runtime import logs  # noqa: PLC0415  # imported late: only this path needs it, and start-up stays fast

    logs.reset_logging()
