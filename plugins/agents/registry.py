"""Agent adapters by the name a rules.json agent entry gives in ``"use"``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plugins.protocols import Agent

# name -> "module:class"; a module is imported when its adapter is first made, so that
# reading the rules (``autoloop status``) loads no adapter.
_FACTORIES: dict[str, str] = {
    "command": "plugins.agents.command:CommandAgent",
    "claude": "plugins.agents.claude:ClaudeAgent",
    "codex": "plugins.agents.codex:CodexAgent",
    "demo": "plugins.agents.demo:DemoAgent",
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
    where = _FACTORIES.get(spec_use)
    if where is None:
        raise UnknownAgentAdapter(spec_use)
    module, name = where.split(":")
    factory: Callable[[], Agent] = getattr(importlib.import_module(module), name)
    return factory()
