"""The ``claude`` adapter: Claude Code in print mode with JSON output.

argv: ``claude -p <prompt> --output-format json`` then the session (``--resume <id>`` to
continue one, else ``--session-id <new uuid>`` so the session is known even if the run
is killed), the permission flags for ``access``, ``--max-budget-usd`` when the rule sets
a budget, ``--model`` from the agent's options. The prompt stays right after ``-p``:
``--allowedTools`` takes several values, so nothing positional may follow it.

access  -> flags
read    -> --permission-mode plan, --allowedTools Read,Grep,Glob,LS (read-only tools),
           --disallowedTools for the tools that write or run commands
edit    -> --permission-mode acceptEdits, --allowedTools with the edit tools added
full    -> --permission-mode bypassPermissions

stdout is one JSON object: ``type: "result"``, ``subtype`` ("success",
"error_max_turns", "error_during_execution", "error_max_budget_usd"...), ``is_error``,
``result`` (the final message), ``session_id``, ``total_cost_usd``, ``usage``,
``num_turns``, ``duration_ms``. When the session to resume is gone, the CLI exits 1 with
an error object whose ``errors`` holds "No conversation found with session ID: <id>"
(also on stderr); the turn is then reported as not started, so it is retried fresh.

Options: ``binary`` (default ``claude``), ``model``, ``pass_env``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from plugins.agents.common import as_positional, build_env, one_line, turn_log, valid_session
from plugins.agents.process import run_process
from plugins.protocols import AgentRequest, AgentResult

READ_TOOLS = ("Read", "Grep", "Glob", "LS")
EDIT_TOOLS = ("Edit", "MultiEdit", "Write", "NotebookEdit")
WRITE_OR_RUN_TOOLS = ("Bash", *EDIT_TOOLS)
# Variables Claude Code itself needs (its key, endpoint, config folder); nothing of the hub.
CLAUDE_ENV_NAMES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "NODE_EXTRA_CA_CERTS",
)
MISSING_SESSION_MARKERS = ("no conversation found",)


def permission_flags(access: str) -> list[str]:
    if access == "read":
        return [
            "--permission-mode",
            "plan",
            "--allowedTools",
            ",".join(READ_TOOLS),
            "--disallowedTools",
            ",".join(WRITE_OR_RUN_TOOLS),
        ]
    if access == "edit":
        return [
            "--permission-mode",
            "acceptEdits",
            "--allowedTools",
            ",".join(READ_TOOLS + EDIT_TOOLS),
        ]
    if access == "full":
        return ["--permission-mode", "bypassPermissions"]
    raise ValueError(f"unknown access {access!r}: use read, edit or full")


def parse_result(stdout: str) -> dict[str, Any] | None:
    """The result object on stdout, or None when stdout is not one JSON object."""
    text = stdout.strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        # Some versions print a line before the object; take the last line that parses.
        data = None
        for line in reversed(text.splitlines()):
            try:
                data = json.loads(line)
                break
            except ValueError:
                continue
    return data if isinstance(data, dict) else None


def _tokens(usage: object) -> int | None:
    if not isinstance(usage, dict):
        return None
    keys = (
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    )
    counts = [usage.get(k) for k in keys]
    numbers = [c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c >= 0]
    return sum(numbers) if numbers else None


def _cost(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def _missing_session(data: dict[str, Any] | None, stderr: str) -> bool:
    texts = [stderr.lower()]
    if data is not None:
        errors = data.get("errors")
        if isinstance(errors, list):
            texts.extend(str(e).lower() for e in errors)
        texts.append(str(data.get("result", "")).lower())
    return any(m in t for t in texts for m in MISSING_SESSION_MARKERS)


class ClaudeAgent:
    name = "claude"

    @staticmethod
    def _session_for(req: AgentRequest) -> tuple[str, str]:
        """``("--resume", id)`` to continue, or ``("--session-id", new id)`` for a fresh one."""
        if req.resume is not None:
            return "--resume", req.resume
        return "--session-id", str(uuid.uuid4())

    def build_argv(self, req: AgentRequest) -> list[str]:
        binary = str(req.options.get("binary") or "claude")
        flag, session = self._session_for(req)
        argv = [binary, "-p", as_positional(req.prompt), "--output-format", "json", flag, session]
        argv += permission_flags(req.access)
        if req.budget_usd is not None:
            argv += ["--max-budget-usd", f"{req.budget_usd:g}"]
        model = req.options.get("model")
        if isinstance(model, str) and model:
            argv += ["--model", model]
        return argv

    def run(self, req: AgentRequest) -> AgentResult:
        if req.resume is not None and valid_session(req.resume) is None:
            return AgentResult(
                started=False,
                ok=False,
                error=f"the session to resume is not a usable id: {req.resume[:80]!r}",
                backoff=False,  # the retry starts a fresh session
            )
        try:
            argv = self.build_argv(req)
        except ValueError as exc:
            return AgentResult(started=False, ok=False, error=str(exc))
        intended = argv[argv.index("--resume" if req.resume is not None else "--session-id") + 1]
        env = build_env(req, extra_names=CLAUDE_ENV_NAMES)
        proc = run_process(argv, cwd=req.cwd, env=env, timeout_s=req.timeout_s)
        log = turn_log(proc.stdout, proc.stderr)
        if proc.spawn_error is not None:
            return AgentResult(
                started=False,
                ok=False,
                error=f"could not start Claude Code: {proc.spawn_error}",
                retry=False,  # the same program would be missing again
            )
        data = parse_result(proc.stdout)
        common: dict[str, Any] = {"exit_code": proc.exit_code, "output": log, "pid": proc.pid}
        failed = proc.exit_code != 0 or (data is not None and bool(data.get("is_error")))
        if failed and _missing_session(data, proc.stderr):
            return AgentResult(
                started=False,
                ok=False,
                error=f"Claude Code has no session {intended}; the turn will start a fresh one",
                backoff=False,  # the retry starts that fresh one: nothing to wait for
                **common,
            )
        if proc.timed_out:
            # Killed mid-run: nothing was printed, but the session we named may hold its work.
            return AgentResult(
                started=True,
                ok=False,
                session=intended,
                timed_out=True,
                error=f"killed after {req.timeout_s:g} s (the rule's timeout_s)",
                **common,
            )
        if data is None or data.get("type") != "result":
            detail = one_line(proc.stderr) or one_line(proc.stdout)
            return AgentResult(
                started=True,
                ok=False,
                session=intended,
                error="Claude Code did not print its JSON result"
                + (
                    f" (exit code {proc.exit_code}): {detail}"
                    if detail
                    else f" (exit code {proc.exit_code})"
                ),
                **common,
            )
        session = valid_session(data.get("session_id")) or intended
        result_text = data.get("result")
        final = result_text if isinstance(result_text, str) else ""
        is_error = bool(data.get("is_error")) or data.get("subtype") not in (None, "success")
        ok = proc.exit_code == 0 and not is_error and bool(final.strip())
        error: str | None = None
        if not ok:
            error = self._error_text(data, proc.exit_code, req.budget_usd, final)
        return AgentResult(
            started=True,
            ok=ok,
            final_message=final,
            session=session,
            cost_usd=_cost(data.get("total_cost_usd")),
            tokens=_tokens(data.get("usage")),
            error=error,
            **common,
        )

    @staticmethod
    def _error_text(
        data: dict[str, Any], exit_code: int | None, budget: float | None, final: str
    ) -> str:
        subtype = str(data.get("subtype") or "error")
        if subtype == "error_max_budget_usd":
            return f"Claude Code stopped at the rule's budget (${budget:g})" if budget else subtype
        if subtype == "error_max_turns":
            return "Claude Code stopped at its maximum number of turns"
        errors = data.get("errors")
        detail = "; ".join(str(e) for e in errors) if isinstance(errors, list) and errors else final
        if not data.get("is_error") and exit_code == 0 and not final.strip():
            return "Claude Code finished without a final message"
        return one_line(f"Claude Code failed ({subtype}, exit code {exit_code}): {detail}")
