"""Agent adapters by the name a rules.json agent entry gives in ``"use"``."""

from __future__ import annotations

from collections.abc import Callable

from plugins.agents.claude import ClaudeAgent
from plugins.agents.codex import CodexAgent
from plugins.agents.command import CommandAgent
from plugins.agents.demo import DemoAgent
from plugins.protocols import Agent

_FACTORIES: dict[str, Callable[[], Agent]] = {
    "command": CommandAgent,
    "claude": ClaudeAgent,
    "codex": CodexAgent,
    "demo": DemoAgent,
}
KNOWN_AGENT_ADAPTERS: frozenset[str] = frozenset(_FACTORIES)


class UnknownAgentAdapter(KeyError):
    """A rules.json agent names an adapter that does not exist."""

    def __init__(self, use: str) -> None:
        self.use = use
        known = ", ".join(sorted(KNOWN_AGENT_ADAPTERS))
        self.message = f'unknown agent adapter "use": {use!r}; use one of: {known}'
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return self.message


def make_agent(spec_use: str) -> Agent:
    """A fresh adapter for ``spec_use``; :class:`UnknownAgentAdapter` names the known ones."""
    factory = _FACTORIES.get(spec_use)
    if factory is None:
        raise UnknownAgentAdapter(spec_use)
    return factory()
