"""The rules file and the clock of one process, read without loading the hub.

``autoloop status`` and ``--help`` start fast because they need no more than this: the
hub, the ledger loop and the HTTP server are imported only by the commands that use them,
and the rules parser (the kernel's configuration classes, the GitHub source's list of
actions) only when a rules file is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kernel.errors import ConfigError

if TYPE_CHECKING:
    from kernel.model import Rules

__all__ = ["clock_from_env", "load_rules", "real_clock", "rules_path"]


def real_clock() -> datetime:
    return datetime.now(UTC)


def clock_from_env(env: Mapping[str, str]) -> Callable[[], datetime]:
    """AUTOLOOP_CLOCK pins "now" for one process (ISO 8601 with offset)."""
    pinned = env.get("AUTOLOOP_CLOCK")
    if not pinned:
        return real_clock
    try:
        at = datetime.fromisoformat(pinned)
    except ValueError:
        raise ConfigError(
            f"{pinned!r} is not ISO 8601 (e.g. 2026-11-30T09:00:00+00:00)", file="AUTOLOOP_CLOCK"
        ) from None
    if at.tzinfo is None:
        raise ConfigError(f"{pinned!r} needs an offset, e.g. +00:00", file="AUTOLOOP_CLOCK")
    return lambda: at


def rules_path(home: Path) -> Path:
    for name in ("rules.json", "rules.toml"):
        if (home / name).exists():
            return home / name
    return home / "rules.json"


def load_rules(home: Path, *, agents: Iterable[str], channels: Iterable[str]) -> Rules:
    path = rules_path(home)
    if path.name == "rules.json" and (home / "rules.toml").exists() and path.exists():
        # ('autoloop init' writes rules.json: a rules.toml written after it, as the docs
        # allow, was ignored in silence, its rules never run)
        raise ConfigError(
            "rules.toml is here too, and only one rules file is read: keep one (delete "
            "rules.json, which 'autoloop init' wrote, to use rules.toml)",
            file=str(path),
        )
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("not found; run 'autoloop init'", file=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot be read ({exc.strerror})", file=str(path)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 text (byte {exc.start} is {raw[exc.start]:#04x}): the file is damaged "
            "or not a rules file; restore it or run 'autoloop init' in an empty folder",
            file=str(path),
        ) from None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # noqa: PLC0415  # imported late: only a rules file read needs it

    from kernel.rules import parse_rules  # noqa: PLC0415  # imported late: only a rules file read needs it
    from plugins.sources import github as github_source  # noqa: PLC0415  # imported late: only a rules file read needs it

    rules = parse_rules(
        text,
        path=str(path),
        fmt="toml" if path.suffix == ".toml" else "json",
        known_agent_adapters=frozenset(agents),
        known_channel_adapters=frozenset(channels),
        known_actions={github_source.SOURCE: github_source.ACTIONS},
        sources=(github_source.SOURCE,),
    )
    check_adapters(rules, str(path))
    try:
        ZoneInfo(rules.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"unknown time zone {rules.timezone!r} (e.g. UTC, Europe/Berlin)",
            file=str(path),
            field="timezone",
        ) from None
    return rules


SOURCE_ADAPTERS: dict[str, tuple[str, ...]] = {  # adapter -> the options it reads
    "github": (),
    "hmac": ("header", "secret_env"),
}
AGENT_OPTIONS: dict[str, tuple[str, ...]] = {  # adapter -> the fields it reads, "use" aside
    "claude": ("worker", "binary", "model", "pass_env"),
    "codex": ("worker", "binary", "model", "pass_env"),
    "command": ("worker", "command", "pass_env"),
    "demo": ("worker", "state_dir", "pass_env"),
}
CHANNEL_OPTIONS: dict[str, tuple[str, ...]] = {  # adapter -> the fields it reads, "use" aside
    "console": ("links",),
    "desktop": ("links",),
    "webhook": ("links", "url", "url_env", "format"),
    "github-comment": ("links",),
}


def check_adapters(rules: Rules, file: str) -> None:
    """Sources, agents and channels name adapters there are, and give them only fields
    they read: a typo (``"modle"``, ``"urll"``, ``"headr"``) passed the check, and the
    agent ran on the default model, or every card failed later with a message about a
    variable the user never set. A webhook channel needs its URL (``url`` or
    ``url_env``)."""
    from kernel.config import unknown  # noqa: PLC0415  # (with the parser, above)

    _check_sources(rules, file)
    specs = [
        *(("agents", name, a.use, a.options, AGENT_OPTIONS) for name, a in rules.agents.items()),
        *(("channels", n, c.use, c.options, CHANNEL_OPTIONS) for n, c in rules.channels.items()),
    ]
    for part, name, use, options, table in specs:
        reads = table.get(use, ())
        for key in options:
            if key not in reads:
                raise ConfigError(
                    unknown(key, ("use", *reads)), file=file, field=f"{part}.{name}.{key}"
                )
    for name, channel in rules.channels.items():
        if channel.use == "webhook" and not (
            channel.options.get("url") or channel.options.get("url_env")
        ):
            raise ConfigError(
                'a "webhook" channel needs "url_env": the environment variable holding the '
                'URL to POST cards to (or "url": the URL itself)',
                file=file,
                field=f"channels.{name}",
            )


def _check_sources(rules: Rules, file: str) -> None:
    """Each source's adapter is one there is, and its options ones it reads: a typo
    (``"hmak"``, ``"headr"``) passed the check and the source never worked."""
    import difflib  # noqa: PLC0415  # (with the parser, above)

    from kernel.config import unknown  # noqa: PLC0415  # (with the parser, above)

    for name, spec in rules.sources.items():
        at = f"sources.{name}"
        if spec.adapter not in SOURCE_ADAPTERS:
            known = tuple(SOURCE_ADAPTERS)
            close = difflib.get_close_matches(spec.adapter, known, n=1)
            hint = f'did you mean "{close[0]}"? ' if close else ""
            raise ConfigError(
                f'unknown source adapter "{spec.adapter}" ({hint}known: {", ".join(known)})',
                file=file,
                field=f"{at}.adapter",
            )
        for key in spec.options:
            if key not in SOURCE_ADAPTERS[spec.adapter]:
                raise ConfigError(
                    unknown(key, SOURCE_ADAPTERS[spec.adapter] or ("adapter",)),
                    file=file,
                    field=f"{at}.{key}",
                )
