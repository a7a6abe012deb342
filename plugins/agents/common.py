"""What every agent adapter shares: the agent's environment, session ids, the report file.

The environment an agent process gets is built from an explicit allowlist: a few
harmless variables copied from the parent (``PATH``, ``HOME``, locale, temp folder...),
the names an adapter needs for its own CLI (e.g. its API key), the names the rule lists
under ``"pass_env"``, and then ``req.env`` (the ``AUTOLOOP_*`` variables of the turn).
Nothing else of the parent reaches the agent, so hub credentials such as
``AUTOLOOP_GITHUB_PRIVATE_KEY`` or ``GITHUB_TOKEN`` never do. ``AUTOLOOP_*`` names are
never copied from the parent at all: only the turn sets them.

A plain script reports its own session id (and, if it knows them, tokens and cost) by
writing a JSON object to the file named by ``AUTOLOOP_REPORT``; as a last resort a line
``AUTOLOOP_SESSION_ID=<id>`` on stderr is accepted too.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plugins.protocols import AgentRequest

BASE_ENV_NAMES: frozenset[str] = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "LC_CTYPE",
        "LC_MESSAGES",
        "TZ",
        "TERM",
        "TMPDIR",
        "TEMP",
        "TMP",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "NO_PROXY",
        "https_proxy",
        "http_proxy",
        "no_proxy",
    }
)
# Names that never come from the parent, whatever a rule lists: the turn sets its own
# AUTOLOOP_* variables, and the hub's credentials stay with the hub.
NEVER_PASSED = re.compile(r"^(AUTOLOOP_.*|GITHUB_TOKEN|GH_TOKEN|GH_ENTERPRISE_TOKEN)$")

REPORT_NAME = "report.json"
MAX_REPORT_BYTES = 64 * 1024
#: A turn reporting more is not believed (1e308 dollars made every day's total infinite,
#: and `status --json` printed Infinity, which is no JSON).
MAX_TURN_TOKENS = 10**10
MAX_TURN_COST_USD = 100_000.0
# Session ids go back into argv on the next turn, so they must never look like an option.
SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
STDERR_SESSION = re.compile(r"^AUTOLOOP_SESSION_ID=(\S+)\s*$", re.M)


def valid_session(value: object) -> str | None:
    """``value`` if it is a usable session id, else None."""
    if isinstance(value, str) and SESSION_ID.match(value):
        return value
    return None


def pass_env_names(options: Mapping[str, Any]) -> tuple[str, ...]:
    """The extra parent variables a rule lets through (``"pass_env": ["NAME", ...]``)."""
    names = options.get("pass_env", ())
    if isinstance(names, str) or not isinstance(names, Iterable):
        return ()
    return tuple(n for n in names if isinstance(n, str))


def build_env(
    req: AgentRequest,
    *,
    extra_names: Iterable[str] = (),
    parent: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of one agent process (see the module docstring)."""
    source = os.environ if parent is None else parent
    allowed = set(BASE_ENV_NAMES) | set(extra_names) | set(pass_env_names(req.options))
    env = {
        name: source[name]
        for name in sorted(allowed)
        if name in source and not NEVER_PASSED.match(name)
    }
    env.setdefault("PATH", os.defpath)
    env.update(req.env)
    env["AUTOLOOP_REPORT"] = str(report_path(req))
    return env


def report_path(req: AgentRequest) -> Path:
    """Where the agent may write its report: ``AUTOLOOP_REPORT`` if the turn set it."""
    named = req.env.get("AUTOLOOP_REPORT")
    return Path(named) if named else req.turn_dir / REPORT_NAME


def context_path(req: AgentRequest) -> str:
    return req.env.get("AUTOLOOP_CONTEXT") or str(req.turn_dir / "context.json")


@dataclass(frozen=True, slots=True)
class Report:
    session: str | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    refused_session: str = ""  # a session the agent reported that is no session id


def clear_report(path: Path) -> None:
    """Remove a report left by an earlier attempt, so only this run's report counts."""
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


def read_report(path: Path, stderr: str = "") -> Report:
    """What the agent reported about itself; fields that are missing or malformed are None."""
    data: Any = None
    try:
        raw = _read_regular(path, MAX_REPORT_BYTES + 1)
        if raw is not None and len(raw) <= MAX_REPORT_BYTES:
            data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        data = {}
    reported = data.get("session")
    session = valid_session(reported)
    refused = "" if session is not None or reported in (None, "") else repr(reported)[:80]
    if session is None:
        found = STDERR_SESSION.findall(stderr)
        session = valid_session(found[-1]) if found else None
    tokens = data.get("tokens")
    cost = data.get("cost_usd")
    return Report(
        refused_session=refused if session is None else "",
        session=session,
        tokens=tokens
        if isinstance(tokens, int)
        and not isinstance(tokens, bool)
        and 0 <= tokens <= MAX_TURN_TOKENS
        else None,
        cost_usd=float(cost)
        if isinstance(cost, int | float)
        and not isinstance(cost, bool)
        and math.isfinite(cost)
        and 0 <= cost <= MAX_TURN_COST_USD
        else None,
    )


def _read_regular(path: Path, limit: int) -> bytes | None:
    """At most ``limit`` bytes of ``path`` when it is a regular file (not through a
    symbolic link); None otherwise. The agent made the file: a FIFO there blocked the
    worker for ever, after the agent had exited and its timeout no longer applied."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def as_positional(text: str) -> str:
    """A prompt placed as a positional argument must not be read as an option."""
    return " " + text if text.startswith("-") else text


def turn_log(stdout: str, stderr: str) -> str:
    """The raw output kept for the turn log (redacted by the shell before it is stored)."""
    if not stderr:
        return stdout
    return f"{stdout}\n--- stderr ---\n{stderr}"


def one_line(text: str, limit: int = 300) -> str:
    """The last non-empty line of ``text``, shortened: for error messages people read."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."
