"""The frozen vocabulary of the core: configuration, receipts and events.

Everything here is a value. The facts the ledger stores are in :mod:`kernel.facts`;
the inputs the shell hands to :func:`kernel.step.step`, and the effects and replies it
gets back, are in :mod:`kernel.inputs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Access = Literal["read", "edit", "full"]
# The states of turns, cards, actions, timers and matters: the tables of kernel/lifecycle.py.

DEFAULT_MAX_HOPS = 8
DEFAULT_MAX_CHAIN_EVENTS = 100  # events agents may emit, in all, from one outside event
OWNER_MATTER = "_owner"  # the matter of the owner's own cards (budget caps, lost deliveries)
HOP_LIMIT_KEY = "hop-limit"  # the key of the card that says a chain of turns was cut


# --------------------------------------------------------------------------- config


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceSpec:
    name: str
    adapter: str  # a source adapter name: "hmac", "local", ...
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSpec:
    name: str
    use: str  # adapter name, e.g. "command" or "demo"
    worker: str = "any"
    command: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelSpec:
    name: str
    use: str  # a channel adapter name, e.g. "console" or "webhook"
    links: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Trigger:
    """The ``on`` part of a rule. Empty tuples match anything."""

    source: tuple[str, ...] = ()
    type: tuple[str, ...] = ()  # exact types, or prefixes ending in "*" ("issues.*")
    subject: tuple[str, ...] = ()  # exact subjects or prefixes ending in "*"


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    name: str
    agent: str
    on: Trigger | None = None
    every: str | None = None  # cron line, in the rules' timezone
    cwd: str = "."
    skill: str | None = None
    instructions: str | None = None  # the owner's own words for the agent
    access: Access = "read"
    parallel: bool = False
    emits: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    approve: tuple[str, ...] = ()
    notify: tuple[str, ...] = ()
    timeout_s: float = 1800.0
    budget_usd: float | None = None
    max_retries: int = 2
    retry_backoff_s: int = 30  # the first retry waits this long, each next one twice as long


@dataclass(frozen=True, slots=True, kw_only=True)
class Rules:
    version: str  # content hash of the canonical file
    path: str = "rules.json"
    timezone: str = "UTC"
    max_hops: int = DEFAULT_MAX_HOPS
    max_chain_events: int = DEFAULT_MAX_CHAIN_EVENTS
    ask_first: tuple[str, ...] = ()
    owner_notify: tuple[str, ...] = ()  # channels for owner cards; default: all rules' notify
    max_parallel: int = 2
    max_usd_per_day: float | None = None
    max_tokens_per_day: int | None = None
    secret_env: tuple[str, ...] = ()  # env var names whose values are redacted
    # logins and org/team names that text from agents and people may @mention where the
    # hub posts it (lower case; "*": any); every other @mention notifies nobody
    mentions: tuple[str, ...] = ()
    sources: Mapping[str, SourceSpec] = field(default_factory=dict)
    agents: Mapping[str, AgentSpec] = field(default_factory=dict)
    channels: Mapping[str, ChannelSpec] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()

    def chain(self, chain: int | None) -> int:
        """A chain as a number (None: an outside event's, or one from before chains)."""
        return self.max_chain_events if chain is None else chain

    def rule(self, name: str) -> Rule | None:
        for r in self.rules:
            if r.name == name:
                return r
        return None


# --------------------------------------------------------------------------- receipt


@dataclass(frozen=True, slots=True, kw_only=True)
class AskSpec:
    key: str
    title: str
    text: str = ""
    options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class NoticeSpec:
    title: str
    text: str = ""
    key: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LaterSpec:
    in_seconds: int | None = None
    at: str | None = None  # ISO 8601 with offset
    why: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class EmitSpec:
    type: str
    subject: str | None = None
    summary: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionSpec:
    do: str  # a write-back name from the rule's allow/approve lists
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Receipt:
    ask: tuple[AskSpec, ...] = ()
    notice: tuple[NoticeSpec, ...] = ()
    later: tuple[LaterSpec, ...] = ()
    resolve: tuple[str, ...] = ()
    events: tuple[EmitSpec, ...] = ()
    actions: tuple[ActionSpec, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceiptError:
    """A receipt block that could not be read; ``where`` points at the bad part."""

    message: str
    where: str = ""


# --------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    source: str
    id: str
    type: str
    subject: str
    summary: str = ""
    link: str = ""
    hops: int = 0
    # How many events the turns this event starts may emit, and those their events start,
    # in all (None: an outside event, the rules' max_chain_events; see kernel.turns).
    chain: int | None = None
    details: Mapping[str, Any] = field(default_factory=dict)  # untrusted data, never a prompt
    matter: str | None = None  # set for answers and timers: goes straight to that matter
