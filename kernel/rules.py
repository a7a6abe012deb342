"""Loading ``rules.json`` (or ``rules.toml``): strict validation into :class:`~kernel.model.Rules`.

Nothing starts with a bad file: every problem is a :class:`~kernel.errors.ConfigError`
whose one line names the file, the rule and the field, e.g.::

    rules.json: rule "triage": field "agent": unknown agent "coderx" (known: coder, script)

The kernel cannot see the time zone database or the installed adapters: it checks the
*shape* of ``timezone`` and, when the shell passes ``known_agent_adapters`` /
``known_channel_adapters``, the adapter names. Agents, channels and sources are
adapter-specific, so their extra keys are kept in ``options`` for the adapter to read.

``Rules.version`` is the first 16 hex digits of the SHA-256 of a canonical JSON dump of
the parsed content (defaults filled in, keys sorted): layout, comments of a TOML file,
key order and the file's path do not change it.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any, NoReturn

from kernel.cron import parse_cron
from kernel.errors import ConfigError
from kernel.model import (
    DEFAULT_MAX_HOPS,
    Access,
    AgentSpec,
    ChannelSpec,
    Event,
    Rule,
    Rules,
    SourceSpec,
    Trigger,
)
from kernel.receipt import ACTION_NAME, EVENT_TYPE
from kernel.routing import matter_of, trigger_matches

__all__ = ["matches", "matter_id", "parse_rules", "rules_version", "starter_rules_text"]

_TOP = (
    "timezone",
    "max_hops",
    "ask_first",
    "owner_notify",
    "max_parallel",
    "max_usd_per_day",
    "max_tokens_per_day",
    "secret_env",
    "sources",
    "agents",
    "channels",
    "rules",
)
_RULE = (
    "name",
    "on",
    "every",
    "agent",
    "cwd",
    "skill",
    "instructions",
    "access",
    "parallel",
    "emits",
    "allow",
    "approve",
    "notify",
    "timeout_s",
    "budget_usd",
    "max_retries",
)
_ON = ("source", "type", "subject")
_ACCESS: tuple[Access, ...] = ("read", "edit", "full")

#: names of rules, agents, channels and sources (a rule name becomes part of matter ids)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_TYPE_PATTERN = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9_-]*(?:\.[A-Za-z0-9][A-Za-z0-9_-]*)*\.?)?\*?")
_OPTION_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TIMEZONE = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9][A-Za-z0-9_+-]*){0,3}")


# --------------------------------------------------------------------------- public helpers


def matches(rule: Rule, event: Event) -> bool:
    """Whether ``rule``'s ``on`` takes ``event`` (a rule with only ``every`` takes none).

    Each of source, type and subject is a list of exact values or prefixes ending in
    ``*``; a missing one matches anything.
    """
    return rule.on is not None and trigger_matches(rule.on, event)


def matter_id(rule: Rule, subject: str) -> str:
    """The matter an event of ``subject`` joins: the rule's name, or ``rule/subject``
    when the rule is ``parallel``."""
    return matter_of(rule, subject)


def rules_version(rules: Rules) -> str:
    """The content hash of ``rules`` (its ``version`` and ``path`` left out)."""
    data = asdict(rules)
    data.pop("version")
    data.pop("path")
    canonical = json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def starter_rules_text() -> str:
    """The ``rules.json`` that ``autoloop init`` writes: a demo rule and two agent examples."""
    return _STARTER


_STARTER = """\
{
  "timezone": "UTC",
  "max_hops": 8,
  "ask_first": ["delete data", "restart a service", "spend money", "message outsiders"],
  "agents": {
    "demo": {"use": "demo"},
    "script": {"use": "command", "command": ["python3", "agent.py", "{prompt}"]}
  },
  "channels": {
    "console": {"use": "console"}
  },
  "rules": [
    {
      "name": "hello",
      "on": {"source": "local", "type": "hello.*"},
      "agent": "demo",
      "cwd": ".",
      "access": "read",
      "notify": ["console"],
      "timeout_s": 600
    }
  ]
}
"""


# --------------------------------------------------------------------------- parsing


def parse_rules(
    text: str,
    *,
    path: str = "rules.json",
    fmt: str = "json",
    known_agent_adapters: frozenset[str] | None = None,
    known_channel_adapters: frozenset[str] | None = None,
) -> Rules:
    """Parse and validate rules text (``fmt`` ``"json"`` or ``"toml"``).

    ``path`` is only used in messages. Raises :class:`ConfigError` on the first problem.
    """
    if fmt not in ("json", "toml"):
        raise ValueError(f"fmt must be 'json' or 'toml', got {fmt!r}")
    data = _load(text, path, fmt)
    reader = _Reader(path, known_agent_adapters, known_channel_adapters)
    rules = reader.rules(data)
    return replace(rules, version=rules_version(rules))


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


def _load(text: str, path: str, fmt: str) -> object:
    if fmt == "toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"not valid TOML: {exc}", file=path) from None
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


def _kind(value: object) -> str:
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


def _unknown(key: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f'did you mean "{close[0]}"? ' if close else ""
    return f'unknown field "{key}" ({hint}known: {", ".join(known)})'


class _Reader:
    """Validates one parsed file; every failure raises a located :class:`ConfigError`."""

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
            self.fail(f"must be a string, got {_kind(value)}", field=field, rule=rule)
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
            self.fail(f"must be true or false, got {_kind(value)}", field=field, rule=rule)
        return value

    def integer(
        self, value: object, field: str, rule: str | int | None = None, *, minimum: int
    ) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"must be a whole number, got {_kind(value)}", field=field, rule=rule)
        if value < minimum:
            need = "a positive whole number" if minimum == 1 else f"at least {minimum}"
            self.fail(f"must be {need}, got {value}", field=field, rule=rule)
        return value

    def positive(self, value: object, field: str, rule: str | int | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(f"must be a number, got {_kind(value)}", field=field, rule=rule)
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
            self.fail(f"must be {shape}, got {_kind(value)}", field=field, rule=rule)
        return tuple(self.text(item, f"{field}[{i}]", rule) for i, item in enumerate(value))

    def obj(
        self, value: object, field: str | None, rule: str | int | None = None
    ) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            self.fail(f"must be an object, got {_kind(value)}", field=field, rule=rule)
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
                self.fail(_unknown(key, known), field=f"{prefix}{key}", rule=rule)

    # ------------------------------------------------------------------ the file

    def rules(self, data: object) -> Rules:
        if not isinstance(data, dict):
            self.fail(f"must hold one object with the rules, got {_kind(data)}")
        self.only(data, _TOP)
        sources = self.sources(data.get("sources", {}))
        agents = self.agents(data.get("agents", {}))
        channels = self.channels(data.get("channels", {}))
        rules = self.rule_list(data.get("rules", []), agents, channels)
        return Rules(
            version="",
            path=self.path,
            timezone=self.timezone(data.get("timezone", "UTC")),
            max_hops=self.integer(data.get("max_hops", DEFAULT_MAX_HOPS), "max_hops", minimum=1),
            ask_first=self.strings(data.get("ask_first", []), "ask_first"),
            owner_notify=self.channel_refs(data.get("owner_notify", []), "owner_notify", channels),
            max_parallel=self.integer(data.get("max_parallel", 2), "max_parallel", minimum=1),
            max_usd_per_day=self.optional_positive(data, "max_usd_per_day"),
            max_tokens_per_day=(
                None
                if data.get("max_tokens_per_day") is None
                else self.integer(data["max_tokens_per_day"], "max_tokens_per_day", minimum=1)
            ),
            secret_env=self.env_names(data.get("secret_env", [])),
            sources=sources,
            agents=agents,
            channels=channels,
            rules=rules,
        )

    def optional_positive(self, data: Mapping[str, Any], key: str) -> float | None:
        value = data.get(key)
        return None if value is None else self.positive(value, key)

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

    # ------------------------------------------------------------------ rules

    def rule_list(
        self,
        value: object,
        agents: Mapping[str, AgentSpec],
        channels: Mapping[str, ChannelSpec],
    ) -> tuple[Rule, ...]:
        if not isinstance(value, list):
            self.fail(f"must be a list of rules, got {_kind(value)}", field="rules")
        seen: dict[str, int] = {}
        out = []
        for index, item in enumerate(value):
            spec = self.obj(item, None, index)
            if "name" not in spec:
                self.fail('every rule needs a "name"', field="name", rule=index)
            name = self.name(spec["name"], "name", "rule", index)
            if name in seen:
                self.fail(
                    f"rule #{seen[name] + 1} has the same name: rule names must be unique",
                    field="name",
                    rule=name,
                )
            seen[name] = index
            out.append(self.rule(name, spec, agents, channels))
        return tuple(out)

    def rule(
        self,
        name: str,
        spec: Mapping[str, Any],
        agents: Mapping[str, AgentSpec],
        channels: Mapping[str, ChannelSpec],
    ) -> Rule:
        self.only(spec, _RULE, rule=name)
        on = None if spec.get("on") is None else self.trigger(spec["on"], name)
        every = None
        if spec.get("every") is not None:
            every = self.text(spec["every"], "every", name)
            try:
                parse_cron(every)
            except ValueError as exc:
                self.fail(str(exc), field="every", rule=name)
        if on is None and every is None:
            self.fail(
                'needs "on" (which events) or "every" (a cron line like "0 9 * * 1-5")',
                field="on",
                rule=name,
            )
        if "agent" not in spec:
            self.fail(
                'needs "agent": one of the agents defined under "agents"', field="agent", rule=name
            )
        agent = self.text(spec["agent"], "agent", name)
        if agent not in agents:
            known = ", ".join(agents) if agents else 'none: add one under "agents"'
            self.fail(f'unknown agent "{agent}" (known: {known})', field="agent", rule=name)
        access = spec.get("access", "read")
        if access not in _ACCESS:
            self.fail(
                f"must be read, edit or full, got {json.dumps(access, default=str)}",
                field="access",
                rule=name,
            )
        allow = self.actions(spec.get("allow", []), "allow", name)
        approve = self.actions(spec.get("approve", []), "approve", name)
        for index, action in enumerate(approve):
            if action in allow:
                self.fail(
                    f'"{action}" is also in "allow": keep it in one of the two',
                    field=f"approve[{index}]",
                    rule=name,
                )
        skill = spec.get("skill")
        instructions = spec.get("instructions")
        budget = spec.get("budget_usd")
        return Rule(
            name=name,
            agent=agent,
            on=on,
            every=every,
            cwd=self.text(spec.get("cwd", "."), "cwd", name),
            skill=None if skill is None else self.text(skill, "skill", name),
            instructions=None
            if instructions is None
            else self.text(instructions, "instructions", name),
            access=access,
            parallel=self.boolean(spec.get("parallel", False), "parallel", name),
            emits=self.event_types(spec.get("emits", []), name),
            allow=allow,
            approve=approve,
            notify=self.channel_refs(spec.get("notify", []), "notify", channels, name),
            timeout_s=self.positive(spec.get("timeout_s", 1800), "timeout_s", name),
            budget_usd=None if budget is None else self.positive(budget, "budget_usd", name),
            max_retries=self.integer(spec.get("max_retries", 2), "max_retries", name, minimum=0),
        )

    def trigger(self, value: object, rule: str) -> Trigger:
        spec = self.obj(value, "on", rule)
        self.only(spec, _ON, "on.", rule)
        parts: dict[str, tuple[str, ...]] = {}
        for key in _ON:
            if spec.get(key) is None:
                parts[key] = ()
                continue
            field = f"on.{key}"
            values = self.strings(spec[key], field, rule, single=True)
            if not values:
                self.fail(
                    f"is an empty list: leave {field} out to match any {key}",
                    field=field,
                    rule=rule,
                )
            for index, item in enumerate(values):
                at = field if isinstance(spec[key], str) else f"{field}[{index}]"
                if key == "type" and not _TYPE_PATTERN.fullmatch(item):
                    self.fail(
                        f'"{item}" is not an event type like "issues.opened" or a prefix '
                        'like "issues.*"',
                        field=at,
                        rule=rule,
                    )
                if key == "source" and (len(item) > 64 or any(c.isspace() for c in item)):
                    self.fail(f'"{item}" is not a source name', field=at, rule=rule)
            parts[key] = values
        return Trigger(source=parts["source"], type=parts["type"], subject=parts["subject"])

    def event_types(self, value: object, rule: str) -> tuple[str, ...]:
        types = self.strings(value, "emits", rule)
        for index, kind in enumerate(types):
            if len(kind) > 100 or not EVENT_TYPE.fullmatch(kind):
                self.fail(
                    f'"{kind}" is not an event type: dot-separated words like "triage.done"',
                    field=f"emits[{index}]",
                    rule=rule,
                )
        return types

    def actions(self, value: object, field: str, rule: str) -> tuple[str, ...]:
        names = self.strings(value, field, rule)
        for index, name in enumerate(names):
            if not ACTION_NAME.fullmatch(name):
                self.fail(
                    f'"{name}" is not an action of the form <namespace>.<verb>, '
                    'e.g. "notes.append"',
                    field=f"{field}[{index}]",
                    rule=rule,
                )
        return names
