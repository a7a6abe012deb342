"""Reading a configuration file: its text (JSON or TOML), typed values with located errors,
and the specs of sources, agents and channels.

Every problem is a :class:`~kernel.errors.ConfigError` whose one line names the file,
the rule and the field. :mod:`kernel.rules` reads the rules on top of this.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Mapping
from typing import Any, NoReturn

from kernel.errors import ConfigError
from kernel.model import AgentSpec, ChannelSpec, SourceSpec

__all__ = ["NAME", "Reader", "kind_of", "load", "unknown"]

#: names of rules, agents, channels and sources (a rule name becomes part of matter ids)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_OPTION_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MENTION = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,38}(?:/[A-Za-z0-9][A-Za-z0-9_.-]*)?")
_TIMEZONE = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9][A-Za-z0-9_+-]*){0,3}")


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def load(text: str, path: str, fmt: str) -> object:
    if fmt == "toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"not valid TOML: {exc}", file=path) from None
        except RecursionError:
            raise ConfigError("not valid TOML: nested too deeply", file=path) from None
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", file=path
        ) from None
    except _Duplicate as exc:
        raise ConfigError(
            f'the key "{exc.key}" appears twice in one object: keep one', file=path
        ) from None
    except ValueError as exc:
        raise ConfigError(f"not valid JSON: {exc}", file=path) from None
    except RecursionError:
        raise ConfigError("not valid JSON: nested too deeply", file=path) from None


def kind_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def unknown(key: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f'did you mean "{close[0]}"? ' if close else ""
    return f'unknown field "{key}" ({hint}known: {", ".join(known)})'


class Reader:
    """Validates one parsed file; every failure raises a located :class:`ConfigError`.

    The typed values and the specs of sources, agents and channels; the rules
    themselves are read by the subclass in :mod:`kernel.rules`."""

    def __init__(
        self,
        path: str,
        agent_adapters: frozenset[str] | None,
        channel_adapters: frozenset[str] | None,
    ) -> None:
        self.path = path
        self.agent_adapters = agent_adapters
        self.channel_adapters = channel_adapters

    def fail(
        self, message: str, *, field: str | None = None, rule: str | int | None = None
    ) -> NoReturn:
        raise ConfigError(message, file=self.path, rule=rule, field=field)

    # ------------------------------------------------------------------ typed values

    def text(self, value: object, field: str, rule: str | int | None = None) -> str:
        if not isinstance(value, str):
            self.fail(f"must be a string, got {kind_of(value)}", field=field, rule=rule)
        if not value.strip():
            self.fail("must not be empty", field=field, rule=rule)
        return value

    def name(self, value: object, field: str, what: str, rule: str | int | None = None) -> str:
        name = self.text(value, field, rule)
        if not NAME.fullmatch(name):
            self.fail(
                f'"{name}" is not a usable {what} name: use letters, digits, _ . and -, '
                "at most 64 characters, starting with a letter or digit",
                field=field,
                rule=rule,
            )
        return name

    def boolean(self, value: object, field: str, rule: str | int | None = None) -> bool:
        if not isinstance(value, bool):
            self.fail(f"must be true or false, got {kind_of(value)}", field=field, rule=rule)
        return value

    def integer(
        self, value: object, field: str, rule: str | int | None = None, *, minimum: int
    ) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"must be a whole number, got {kind_of(value)}", field=field, rule=rule)
        if value < minimum:
            need = "a positive whole number" if minimum == 1 else f"at least {minimum}"
            self.fail(f"must be {need}, got {value}", field=field, rule=rule)
        return value

    def positive(self, value: object, field: str, rule: str | int | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(f"must be a number, got {kind_of(value)}", field=field, rule=rule)
        if not value > 0 or value == float("inf"):
            self.fail(f"must be a number above 0, got {value}", field=field, rule=rule)
        return float(value)

    def strings(
        self,
        value: object,
        field: str,
        rule: str | int | None = None,
        *,
        single: bool = False,
    ) -> tuple[str, ...]:
        """A list of non-empty strings (or, with ``single``, one string standing for a list)."""
        if single and isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            shape = "a string or a list of strings" if single else "a list of strings"
            self.fail(f"must be {shape}, got {kind_of(value)}", field=field, rule=rule)
        return tuple(self.text(item, f"{field}[{i}]", rule) for i, item in enumerate(value))

    def obj(
        self, value: object, field: str | None, rule: str | int | None = None
    ) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            self.fail(f"must be an object, got {kind_of(value)}", field=field, rule=rule)
        return value

    def only(
        self,
        data: Mapping[str, Any],
        known: tuple[str, ...],
        prefix: str = "",
        rule: str | int | None = None,
    ) -> None:
        for key in data:
            if key not in known:
                self.fail(unknown(key, known), field=f"{prefix}{key}", rule=rule)

    def timezone(self, value: object) -> str:
        zone = self.text(value, "timezone")
        if len(zone) > 64 or not _TIMEZONE.fullmatch(zone):
            self.fail(
                f'"{zone}" is not a time zone name like "UTC" or "Asia/Shanghai"',
                field="timezone",
            )
        return zone

    def env_names(self, value: object) -> tuple[str, ...]:
        names = self.strings(value, "secret_env")
        for index, name in enumerate(names):
            if not _ENV_NAME.fullmatch(name):
                self.fail(
                    f'"{name}" is not an environment variable name (letters, digits, _)',
                    field=f"secret_env[{index}]",
                )
        return names

    def mentions(self, value: object) -> tuple[str, ...]:
        """Logins and ``org/team`` names (without the ``@``), or ``"*"``; lower case."""
        names = self.strings(value, "mentions")
        for index, name in enumerate(names):
            if name != "*" and not _MENTION.fullmatch(name):
                self.fail(
                    f'"{name}" is not a login or org/team name (write it without the @; '
                    '"*" allows any)',
                    field=f"mentions[{index}]",
                )
        return tuple(n.lower() for n in names)

    def channel_refs(
        self,
        value: object,
        field: str,
        channels: Mapping[str, ChannelSpec],
        rule: str | None = None,
    ) -> tuple[str, ...]:
        names = self.strings(value, field, rule)
        for index, name in enumerate(names):
            if name not in channels:
                known = ", ".join(channels) if channels else 'none: add one under "channels"'
                self.fail(
                    f'unknown channel "{name}" (known: {known})',
                    field=f"{field}[{index}]",
                    rule=rule,
                )
        return names

    def options(self, data: Mapping[str, Any], own: tuple[str, ...], field: str) -> dict[str, Any]:
        options: dict[str, Any] = {}
        for key, value in data.items():
            if key in own:
                continue
            if not _OPTION_KEY.fullmatch(key):
                self.fail(
                    f'"{key}" is not a usable option name (letters, digits, _ and -)',
                    field=f"{field}.{key}",
                )
            options[key] = value
        return options

    def named(self, value: object, field: str, what: str) -> dict[str, Mapping[str, Any]]:
        table = self.obj(value, field)
        out: dict[str, Mapping[str, Any]] = {}
        for name, spec in table.items():
            self.name(name, f"{field}.{name}", what)
            out[name] = self.obj(spec, f"{field}.{name}")
        return out

    def sources(self, value: object) -> dict[str, SourceSpec]:
        out: dict[str, SourceSpec] = {}
        for name, spec in self.named(value, "sources", "source").items():
            at = f"sources.{name}"
            if "adapter" not in spec:
                self.fail('needs "adapter": the source adapter, e.g. "hmac"', field=at)
            out[name] = SourceSpec(
                name=name,
                adapter=self.text(spec["adapter"], f"{at}.adapter"),
                options=self.options(spec, ("adapter",), at),
            )
        return out

    def agents(self, value: object) -> dict[str, AgentSpec]:
        out: dict[str, AgentSpec] = {}
        for name, spec in self.named(value, "agents", "agent").items():
            at = f"agents.{name}"
            if "use" not in spec:
                self.fail('needs "use": the agent adapter, e.g. "command"', field=at)
            use = self.text(spec["use"], f"{at}.use")
            if self.agent_adapters is not None and use not in self.agent_adapters:
                known = ", ".join(sorted(self.agent_adapters))
                self.fail(f'unknown agent adapter "{use}" (known: {known})', field=f"{at}.use")
            command: tuple[str, ...] = ()
            if "command" in spec:
                command = self.strings(spec["command"], f"{at}.command")
            if use != "command" and "command" in spec:  # it was ignored without a word
                self.fail(
                    f'"command" is read only by agents with "use": "command"; a "{use}" '
                    'agent runs its own program (name it with "binary")',
                    field=f"{at}.command",
                )
            if use == "command" and not command:
                self.fail(
                    'a "command" agent needs "command": a non-empty list of strings, '
                    'e.g. ["python3", "agent.py", "{prompt}"]',
                    field=f"{at}.command",
                )
            out[name] = AgentSpec(
                name=name,
                use=use,
                worker=self.text(spec.get("worker", "any"), f"{at}.worker"),
                command=command,
                options=self.options(spec, ("use", "worker", "command"), at),
            )
        return out

    def channels(self, value: object) -> dict[str, ChannelSpec]:
        out: dict[str, ChannelSpec] = {}
        for name, spec in self.named(value, "channels", "channel").items():
            at = f"channels.{name}"
            if "use" not in spec:
                self.fail('needs "use": the channel adapter, e.g. "console"', field=at)
            use = self.text(spec["use"], f"{at}.use")
            if self.channel_adapters is not None and use not in self.channel_adapters:
                known = ", ".join(sorted(self.channel_adapters))
                self.fail(f'unknown channel adapter "{use}" (known: {known})', field=f"{at}.use")
            out[name] = ChannelSpec(
                name=name,
                use=use,
                links=self.boolean(spec.get("links", False), f"{at}.links"),
                options=self.options(spec, ("use", "links"), at),
            )
        return out
