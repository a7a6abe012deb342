"""The ``command`` adapter: any program, given as an argv list in rules.json.

``"command": ["python3", "agent.py", "{prompt}"]`` -- the placeholders ``{prompt}``,
``{session}`` (AUTOLOOP_SESSION), ``{resume}`` (the agent session to continue, or an
empty string) and ``{context}`` (path of context.json) are replaced in one pass, as whole
arguments or inside one; the replaced text is never looked at again, so a prompt that
contains ``{resume}`` stays as it is. Nothing is given to a shell.

The final message is the program's stdout. The program reports its own session id in
the file named by ``AUTOLOOP_REPORT`` (``{"session": "...", "tokens": 1, "cost_usd": 0.1}``,
every key optional) or, as a last resort, with a line ``AUTOLOOP_SESSION_ID=<id>`` on
stderr. A resumed program that reports nothing keeps the session it was resumed in.

When did the turn *start* (so that a retry continues the same session)? When the program
was spawned and then either reported a session or wrote anything on stdout. A program
that could not be spawned (e.g. not found), or that ended or was killed without a word
on stdout and without a session, did not start: the retry gets a fresh session.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence

from plugins.agents.common import (
    build_env,
    clear_report,
    context_path,
    one_line,
    read_report,
    report_path,
    turn_log,
    valid_session,
)
from plugins.agents.process import run_process
from plugins.protocols import AgentRequest, AgentResult

PLACEHOLDER = re.compile(r"\{(prompt|session|resume|context)\}")


log = logging.getLogger("autoloop.agents")


def substitute(argv: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """Replace the placeholders of each argument in one pass (replacements are final)."""
    return [PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in argv]


def placeholder_values(req: AgentRequest) -> dict[str, str]:
    return {
        "prompt": req.prompt,
        "session": req.env.get("AUTOLOOP_SESSION", ""),
        "resume": req.resume or "",
        "context": context_path(req),
    }


def failed(
    error: str, *, started: bool = False, session: str | None = None, retry: bool = True
) -> AgentResult:
    return AgentResult(started=started, ok=False, error=error, session=session, retry=retry)


def last_line(text: str, limit: int = 300) -> str:
    """The last line of ``text`` that holds anything, at most ``limit`` characters."""
    for raw in reversed(text.splitlines()):
        if raw.strip():
            line = one_line(raw)
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def run_reporting_program(argv: list[str], req: AgentRequest, env: dict[str, str]) -> AgentResult:
    """Run a program whose stdout is the final message and which reports via AUTOLOOP_REPORT."""
    report_file = report_path(req)
    clear_report(report_file)
    proc = run_process(argv, cwd=req.cwd, env=env, timeout_s=req.timeout_s)
    if proc.spawn_error is not None:
        return failed(f"could not start the agent: {proc.spawn_error}", retry=False)
    report = read_report(report_file, proc.stderr)
    if report.refused_session:  # its session is lost: say why, once, where people look
        log.warning(
            "turn %s: the agent reported the session %s, which is no session id (letters, "
            "digits, . _ : -, at most 128, starting with a letter or digit): not kept",
            req.turn, report.refused_session,
        )  # fmt: skip
    started = report.session is not None or bool(proc.stdout.strip())
    # A resumed program that did not name its session again went on in the same one.
    session = report.session or (req.resume if started else None)
    ok = not proc.timed_out and proc.exit_code == 0 and bool(proc.stdout.strip())
    error: str | None = None
    if proc.timed_out:
        error = f"killed after {req.timeout_s:g} s (the rule's timeout_s)"
    elif proc.exit_code != 0:
        # What it said last on stderr; its stdout is its message (a receipt's closing
        # fence made a useless reason), kept whole in the turn's output.log.
        said = last_line(proc.stderr)
        detail = said or f"nothing on stderr (its output: {req.turn_dir / 'output.log'})"
        error = f"the agent exited with code {proc.exit_code}: {detail}"
    elif not ok:
        error = "the agent wrote nothing on stdout (its last message is read from there)"
    return AgentResult(
        started=started,
        ok=ok,
        final_message=proc.stdout,
        session=session,
        cost_usd=report.cost_usd,
        tokens=report.tokens,
        error=error,
        exit_code=proc.exit_code,
        timed_out=proc.timed_out,
        output=turn_log(proc.stdout, proc.stderr),
        pid=proc.pid,
    )


class CommandAgent:
    """Runs ``req.command`` (or ``options["command"]``) with its placeholders filled in."""

    name = "command"

    def build_argv(self, req: AgentRequest) -> list[str]:
        template: Sequence[object] = req.command or tuple(req.options.get("command", ()))
        if not template or not all(isinstance(a, str) for a in template):
            raise ValueError(
                'the command agent needs "command": a list of strings in rules.json, '
                'e.g. ["python3", "agent.py", "{prompt}"]'
            )
        return substitute([str(a) for a in template], placeholder_values(req))

    def run(self, req: AgentRequest) -> AgentResult:
        if req.resume is not None and valid_session(req.resume) is None:
            return failed(f"the session to resume is not a usable id: {req.resume[:80]!r}")
        try:
            argv = self.build_argv(req)
        except ValueError as exc:
            return failed(str(exc))
        return run_reporting_program(argv, req, build_env(req))
