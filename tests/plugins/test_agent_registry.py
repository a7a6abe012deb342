"""Agent adapters are found by the name rules.json gives in "use"."""

from __future__ import annotations

import pytest

from plugins.agents.registry import KNOWN_AGENT_ADAPTERS, UnknownAgentAdapter, make_agent


def test_registry_knows_the_four_adapters() -> None:
    assert {"command", "claude", "codex", "demo"} == KNOWN_AGENT_ADAPTERS
    for use in KNOWN_AGENT_ADAPTERS:
        assert make_agent(use).name == use


def test_an_unknown_adapter_names_the_known_ones() -> None:
    with pytest.raises(UnknownAgentAdapter) as caught:
        make_agent("gemini")
    assert isinstance(caught.value, KeyError)
    assert str(caught.value) == (
        "unknown agent adapter \"use\": 'gemini'; use one of: claude, codex, command, demo"
    )
