"""The ``codex`` adapter: the Codex CLI's non-interactive ``exec`` with JSON Lines events.

argv: ``codex exec --json --sandbox <mode> --skip-git-repo-check [--model M] -- <prompt>``
for a fresh session, and ``codex exec <same options> resume <thread_id> -- <prompt>`` to
continue one. The options go before ``resume`` (they belong to ``exec``, and a resumed
session keeps only its conversation, not its flags); ``--`` keeps the prompt from ever
being read as an option or a subcommand.

access  -> --sandbox read-only | workspace-write | danger-full-access

stdout holds one JSON object per line. The session is ``thread_id`` of
``{"type": "thread.started"}`` (sent for new and resumed threads); the final message is
the ``text`` of the last ``item.completed`` whose item has ``type: "agent_message"``;
tokens come from ``turn.completed`` ``usage`` (``input_tokens`` -- which include the
``cached_input_tokens`` -- plus ``output_tokens``); failures come as ``turn.failed``
(``error.message``) and ``error`` (``message``) events. Codex reports tokens, not dollars,
so ``cost_usd`` stays None and the hub enforces budgets itself.

When the thread to resume is gone the CLI exits 1 saying "no rollout found for thread id"
on stderr; the turn is then reported as not started, so it is retried fresh.

Options: ``binary`` (default ``codex``), ``model``, ``pass_env``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from plugins.agents.common import as_positional, build_env, one_line, turn_log, valid_session
from plugins.agents.process import ProcessResult, run_process
from plugins.protocols import AgentRequest, AgentResult

SANDBOX = {"read": "read-only", "edit": "workspace-write", "full": "danger-full-access"}
CODEX_ENV_NAMES = ("CODEX_HOME", "CODEX_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")
MISSING_SESSION_MARKERS = ("no rollout found", "session not found", "thread not found")


@dataclass(slots=True)
class Events:
    thread_id: str | None = None
    final: str | None = None
    tokens: int | None = None
    errors: list[str] = field(default_factory=list)
    turn_failed: bool = False
    turn_completed: bool = False


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def read_events(stdout: str) -> Events:
    """Fold the JSON Lines on stdout into what the turn needs; other lines are ignored."""
    seen = Events()
    for line in stdout.splitlines():
        try:
            event: Any = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        if kind == "thread.started":
            seen.thread_id = valid_session(event.get("thread_id")) or seen.thread_id
        elif kind == "item.completed":
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "agent_message":
                text = item.get("text")
                if isinstance(text, str):
                    seen.final = text
        elif kind == "turn.completed":
            seen.turn_completed = True
            usage = event.get("usage")
            if isinstance(usage, dict):
                used = _count(usage.get("input_tokens")) + _count(usage.get("output_tokens"))
                seen.tokens = (seen.tokens or 0) + used
        elif kind == "turn.failed":
            seen.turn_failed = True
            error = event.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            seen.errors.append(str(message or "turn failed"))
        elif kind == "error":
            seen.errors.append(str(event.get("message") or "error"))
    return seen


class CodexAgent:
    name = "codex"

    def build_argv(self, req: AgentRequest) -> list[str]:
        if req.access not in SANDBOX:
            raise ValueError(f"unknown access {req.access!r}: use read, edit or full")
        binary = str(req.options.get("binary") or "codex")
        argv = [binary, "exec", "--json", "--sandbox", SANDBOX[req.access], "--skip-git-repo-check"]
        model = req.options.get("model")
        if isinstance(model, str) and model:
            argv += ["--model", model]
        if req.resume is not None:
            argv += ["resume", req.resume]
        return [*argv, "--", as_positional(req.prompt)]

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
        env = build_env(req, extra_names=CODEX_ENV_NAMES)
        proc = run_process(argv, cwd=req.cwd, env=env, timeout_s=req.timeout_s)
        if proc.spawn_error is not None:
            return AgentResult(
                started=False,
                ok=False,
                error=f"could not start Codex: {proc.spawn_error}",
                retry=False,  # the same program would be missing again
            )
        seen = read_events(proc.stdout)
        common: dict[str, Any] = {
            "exit_code": proc.exit_code,
            "output": turn_log(proc.stdout, proc.stderr),
            "pid": proc.pid,
            "timed_out": proc.timed_out,
            "tokens": seen.tokens,
        }
        if seen.thread_id is None:
            return AgentResult(
                started=False,
                ok=False,
                error=self._not_started(req, proc, seen),
                backoff=not _lost_thread(req, proc, seen),  # a fresh one needs no wait
                **common,
            )
        final = seen.final or ""
        ok = (
            not proc.timed_out
            and proc.exit_code == 0
            and not seen.turn_failed
            and bool(final.strip())
        )
        error = None if ok else self._failure(req, proc, seen)
        return AgentResult(
            started=True,
            ok=ok,
            final_message=final,
            session=seen.thread_id,
            cost_usd=None,
            error=error,
            **common,
        )

    @staticmethod
    def _not_started(req: AgentRequest, proc: ProcessResult, seen: Events) -> str:
        if _lost_thread(req, proc, seen):
            return f"Codex has no thread {req.resume}; the turn will start a fresh one"
        if proc.timed_out:
            return f"killed after {req.timeout_s:g} s (the rule's timeout_s), before Codex started"
        detail = one_line(proc.stderr) or one_line("\n".join(seen.errors)) or one_line(proc.stdout)
        return f"Codex did not start a thread (exit code {proc.exit_code})" + (
            f": {detail}" if detail else ""
        )

    @staticmethod
    def _failure(req: AgentRequest, proc: ProcessResult, seen: Events) -> str:
        if proc.timed_out:
            return f"killed after {req.timeout_s:g} s (the rule's timeout_s)"
        if seen.errors:
            return one_line(f"Codex failed (exit code {proc.exit_code}): {seen.errors[-1]}")
        if proc.exit_code != 0:
            detail = one_line(proc.stderr)
            return f"Codex exited with code {proc.exit_code}" + (f": {detail}" if detail else "")
        return "Codex finished without a final agent message"


def _lost_thread(req: AgentRequest, proc: ProcessResult, seen: Events) -> bool:
    """Whether Codex did not start because the thread to resume is gone."""
    lowered = (proc.stderr + "\n" + "\n".join(seen.errors)).lower()
    return req.resume is not None and any(m in lowered for m in MISSING_SESSION_MARKERS)
