"""Autoloop: plugins/agents -- one adapter per kind of CLI agent (``plugins.protocols.Agent``).

- ``registry``: ``make_agent(use)``, ``KNOWN_AGENT_ADAPTERS`` (command, claude, codex, demo)
- ``command``, ``claude``, ``codex``, ``demo``: the adapters; ``demo_script``: the demo agent
- ``common``: the agent's environment (an allowlist), session ids, the report file
- ``process``: ``run_process`` (argv only, own process group, killed at the timeout)

Nothing is imported here, so the demo agent's subprocess starts without loading the rest.
"""
