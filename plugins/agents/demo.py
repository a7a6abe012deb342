"""The built-in ``demo`` agent: a real subprocess running :mod:`plugins.agents.demo_script`.

It is started like any command agent (same environment rules, same report file, stdout
as the final message), with ``python -P -m plugins.agents.demo_script``: ``-P`` keeps the
rule's working folder off ``sys.path``, and ``PYTHONPATH`` names the folder this package
was loaded from, so the demo finds its own script whatever folder it runs in.

Options: ``state_dir`` (where the demo keeps what it remembers between turns).
"""

from __future__ import annotations

import sys
from pathlib import Path

from plugins.agents.command import failed, run_reporting_program
from plugins.agents.common import build_env, valid_session
from plugins.protocols import AgentRequest, AgentResult

PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent


class DemoAgent:
    name = "demo"

    def build_argv(self, req: AgentRequest) -> list[str]:
        return [sys.executable, "-P", "-m", "plugins.agents.demo_script"]

    def run(self, req: AgentRequest) -> AgentResult:
        if req.resume is not None and valid_session(req.resume) is None:
            return failed(f"the session to resume is not a usable id: {req.resume[:80]!r}")
        env = build_env(req)
        env["PYTHONPATH"] = str(PACKAGE_ROOT)
        env["AUTOLOOP_RESUME"] = req.resume or ""
        state_dir = req.options.get("state_dir")
        if isinstance(state_dir, str) and state_dir:
            env["AUTOLOOP_DEMO_STATE"] = state_dir
        return run_reporting_program(self.build_argv(req), req, env)
