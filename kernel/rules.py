"""Loading ``rules.json`` (or ``rules.toml``): strict validation into :class:`~kernel.model.Rules`.

Nothing starts with a bad file: every problem is a :class:`~kernel.errors.ConfigError`
whose one line names the file, the rule and the field, e.g.::

    rules.json: rule "triage": field "agent": unknown agent "coderx" (known: coder, script)

The kernel cannot see the time zone database or the installed adapters: it checks the
*shape* of ``timezone`` and, when the shell passes ``known_agent_adapters`` /
``known_channel_adapters``, the adapter names. Agents, channels and sources are
adapter-specific, so their extra keys are kept in ``options`` for the adapter to read
(the shell checks them against what each adapter reads:
:func:`ghapp.runtime.rules_file.check_adapters`).

``Rules.version`` is the first 16 hex digits of the SHA-256 of a canonical JSON dump of
the parsed content (defaults filled in, keys sorted): layout, comments of a TOML file,
key order and the file's path do not change it.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import typing
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any

from kernel.config import Reader, kind_of, load
from kernel.cron import parse_cron
from kernel.model import (
    DEFAULT_MAX_CHAIN_EVENTS,
    DEFAULT_MAX_HOPS,
    Access,
    AgentSpec,
    ChannelSpec,
    Rule,
    Rules,
    Trigger,
)
from kernel.receipt import ACTION_NAME, EVENT_TYPE

__all__ = [
    "BUILTIN_SOURCES",
    "parse_rules",
    "rules_version",
    "starter_rules_text",
]

_TOP = (
    "timezone",
    "max_hops",
    "max_chain_events",
    "ask_first",
    "owner_notify",
    "max_parallel",
    "max_usd_per_day",
    "max_tokens_per_day",
    "secret_env",
    "mentions",
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
    "retry_backoff_s",
)
_ON = ("source", "type", "subject")
_ACCESS: tuple[Access, ...] = typing.get_args(Access)

#: Sources whose events the hub itself records (besides those declared under "sources",
#: and those the shell's plugins add: ``parse_rules(..., sources=...)``).
BUILTIN_SOURCES = ("local", "agent", "timer", "schedule", "card")

_TYPE_PATTERN = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9_-]*(?:\.[A-Za-z0-9][A-Za-z0-9_-]*)*\.?)?\*?")


# --------------------------------------------------------------------------- public helpers


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
    known_actions: Mapping[str, tuple[str, ...]] | None = None,
    sources: tuple[str, ...] = (),
) -> Rules:
    """Parse and validate rules text (``fmt`` ``"json"`` or ``"toml"``).

    ``path`` is only used in messages. Raises :class:`ConfigError` on the first problem.
    ``known_actions``: the verbs of each action namespace the shell's executors have
    (an action of such a namespace naming another verb is refused); ``sources``: the
    sources the shell's plugins record, besides :data:`BUILTIN_SOURCES`.
    """
    if fmt not in ("json", "toml"):
        raise ValueError(f"fmt must be 'json' or 'toml', got {fmt!r}")
    data = load(text, path, fmt)
    reader = _RulesReader(path, known_agent_adapters, known_channel_adapters)
    reader.known_actions = dict(known_actions or {})
    reader.builtin_sources = (*BUILTIN_SOURCES, *sources)
    rules = reader.rules(data)
    return replace(rules, version=rules_version(rules))


class _RulesReader(Reader):
    """The whole file: its top-level fields and its rules."""

    known_sources: tuple[str, ...] = BUILTIN_SOURCES  # and those the file declares
    builtin_sources: tuple[str, ...] = BUILTIN_SOURCES
    known_actions: Mapping[str, tuple[str, ...]] = {}  # replaced per reader

    def rules(self, data: object) -> Rules:
        if not isinstance(data, dict):
            self.fail(f"must hold one object with the rules, got {kind_of(data)}")
        self.only(data, _TOP)
        sources = self.sources(data.get("sources", {}))
        agents = self.agents(data.get("agents", {}))
        channels = self.channels(data.get("channels", {}))
        builtin = self.builtin_sources
        self.known_sources = (*builtin, *(n for n in sources if n not in builtin))
        rules = self.rule_list(data.get("rules", []), agents, channels)
        return Rules(
            version="",
            path=self.path,
            timezone=self.timezone(data.get("timezone", "UTC")),
            max_hops=self.integer(data.get("max_hops", DEFAULT_MAX_HOPS), "max_hops", minimum=1),
            max_chain_events=self.integer(
                data.get("max_chain_events", DEFAULT_MAX_CHAIN_EVENTS),
                "max_chain_events",
                minimum=1,
            ),
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
            mentions=self.mentions(data.get("mentions", [])),
            sources=sources,
            agents=agents,
            channels=channels,
            rules=rules,
        )

    def optional_positive(self, data: Mapping[str, Any], key: str) -> float | None:
        value = data.get(key)
        return None if value is None else self.positive(value, key)

    # ------------------------------------------------------------------ rules

    def rule_list(
        self,
        value: object,
        agents: Mapping[str, AgentSpec],
        channels: Mapping[str, ChannelSpec],
    ) -> tuple[Rule, ...]:
        if not isinstance(value, list):
            self.fail(f"must be a list of rules, got {kind_of(value)}", field="rules")
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
            retry_backoff_s=self.integer(
                spec.get("retry_backoff_s", 30), "retry_backoff_s", name, minimum=0
            ),
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
                if key == "source":
                    self.source_typo(item, at, rule)
            parts[key] = values
        return Trigger(source=parts["source"], type=parts["type"], subject=parts["subject"])

    def source_typo(self, name: str, field: str, rule: str) -> None:
        """A source close to a known one but not it is a typo (``gihub``): one line.

        Others pass: ``autoloop emit`` records events of any source name."""
        known = self.known_sources
        if name in known:
            return
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        if close:
            self.fail(
                f'unknown source "{name}" (did you mean "{close[0]}"? known: '
                f'{", ".join(known)}; declare a source of your own under "sources")',
                field=field,
                rule=rule,
            )

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
            space, _, verb = name.partition(".")
            verbs = self.known_actions.get(space)
            if verbs is not None and verb not in verbs:
                close = difflib.get_close_matches(verb, verbs, n=1)
                hint = f'did you mean "{space}.{close[0]}"? ' if close else ""
                self.fail(
                    f'unknown action "{name}" ({hint}known: '
                    f"{', '.join(space + '.' + v for v in verbs)})",
                    field=f"{field}[{index}]",
                    rule=rule,
                )
        return names
