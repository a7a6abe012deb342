"""The demo agent: a small real program that plays the part of a coding agent.

It is what ``autoloop try`` and ``autoloop demo`` run, and it shows what any agent gets
and gives back:

- it reads its batch of events from the file named by ``AUTOLOOP_CONTEXT``; text written
  by other people (an issue's title and body) is read from the events' data files, never
  from the prompt;
- a new session picks its own id and says so in the file named by ``AUTOLOOP_REPORT``;
  a resumed one gets its id back in ``AUTOLOOP_RESUME``;
- its last message ends with a fenced ``autoloop`` block: the receipt.

Story one: it asks which colour to paint with, and when the answer comes back it paints.
Story two: a newly opened issue -- it asks how to triage it, and when answered it asks the
hub to comment on the issue and label it.
Story three: a pull request to review (its data folder holds ``files.json`` and
``diff.patch``, read as data) -- it answers a ``COMMENT`` review listing the files changed,
or ``REQUEST_CHANGES`` when an added line of the diff holds the marker ``TODO``.

What it remembers between turns (the issue it asked about) it keeps in a small file per
session, as a real agent keeps its conversation in its own store: by default in
``demo-sessions`` next to the turn folders, or in ``AUTOLOOP_DEMO_STATE``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

COLOURS = ["red", "green", "blue"]
TRIAGE = ["bug", "feature", "question"]
ISSUE_SUBJECT = re.compile(r"^([\w.-]+/[\w.-]+)#(\d+)$")


def receipt(block: dict[str, Any]) -> str:
    return "```autoloop\n" + json.dumps(block, indent=2) + "\n```"


def load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def data_of(event: dict[str, Any], context_dir: Path) -> dict[str, Any]:
    """The full record of an event, from its data file (untrusted text lives there)."""
    name = event.get("data_file")
    if not isinstance(name, str) or not name:
        return {}
    candidates = [Path(name)]
    if not candidates[0].is_absolute():
        data_dir = os.environ.get("AUTOLOOP_DATA")
        candidates = [context_dir / name] + ([Path(data_dir) / name] if data_dir else [])
    for path in candidates:
        if path.is_file():
            record = load_json(path)
            return record if isinstance(record, dict) else {}
    return {}


def details_of(event: dict[str, Any], context_dir: Path) -> dict[str, Any]:
    return part(data_of(event, context_dir), "details")


def part(record: dict[str, Any], key: str) -> dict[str, Any]:
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def first(events: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    return next((e for e in events if e.get("type") == kind), None)


def one_line(text: object, limit: int = 80) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def chosen(details: dict[str, Any], options: list[str]) -> str | None:
    """The chosen option: by its text, else by its 1-based index."""
    choice = details.get("choice")
    if choice in options:
        return str(choice)
    index = details.get("index")
    if isinstance(index, int) and 1 <= index <= len(options):
        return options[index - 1]
    return None


def review_pull(data_dir: Path) -> str:
    """The review story: findings from the PR's file list and diff (data files)."""
    listed = load_json(data_dir / "files.json")
    files = [f for f in (listed.get("files") or []) if isinstance(f, dict)]
    try:
        diff = (data_dir / "diff.patch").read_text(encoding="utf-8")
    except OSError:
        diff = ""
    changes = ", ".join(
        f"{one_line(f.get('filename'), 60)} (+{f.get('additions', 0)} -{f.get('deletions', 0)})"
        for f in files
    )
    summary = f"Reviewed {len(files)} file{'s' if len(files) != 1 else ''}: {changes or 'none'}."
    marked = [
        line[1:].strip()
        for line in diff.splitlines()
        if line.startswith("+") and not line.startswith("+++") and "TODO" in line
    ]
    if marked:
        body = f"{summary} An added line still says TODO: {one_line(marked[0], 60)!r}."
        event = "REQUEST_CHANGES"
    else:
        body = f"{summary} Nothing blocks the merge."
        event = "COMMENT"
    return body + "\n\n" + receipt({"review": {"event": event, "body": body}})


class Memory:
    """What this session remembers from one turn to the next."""

    def __init__(self, session: str, context_file: Path) -> None:
        folder = os.environ.get("AUTOLOOP_DEMO_STATE") or str(
            context_file.parent.parent / "demo-sessions"
        )
        self.path = Path(folder) / f"{session}.json"
        loaded = load_json(self.path)
        self.data: dict[str, Any] = loaded if isinstance(loaded, dict) else {}

    def save(self, **changes: Any) -> None:
        self.data.update(changes)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data), encoding="utf-8")


def ask_colour(memory: Memory) -> str:
    memory.save(asked="colour")
    ask = {
        "key": "colour",
        "title": "Pick a colour",
        "text": "The demo agent will paint with it.",
        "options": COLOURS,
    }
    return "I can paint, but I need a colour first.\n\n" + receipt({"ask": [ask]})


def paint(details: dict[str, Any], memory: Memory) -> str:
    colour = chosen(details, COLOURS)
    if colour is None:
        return "The answer did not name one of my colours, so I painted nothing."
    memory.save(asked=None, painted=colour)
    notice = {"title": f"Painted it {colour}", "text": f"The demo agent painted with {colour}."}
    return f"Painted it {colour}.\n\n" + receipt({"notice": [notice], "resolve": ["colour"]})


def ask_triage(event: dict[str, Any], context_dir: Path, memory: Memory) -> str:
    details = details_of(event, context_dir)
    # The hub's GitHub source keeps flat fields (repo, number, title, body); a full
    # webhook payload (repository.full_name, issue.number...) is read too.
    issue = part(details, "issue") or details
    repo = details.get("repo") or part(details, "repository").get("full_name")
    number = issue.get("number")
    title = one_line(issue.get("title"))
    memory.save(asked="triage", repo=repo, number=number)
    ask = {
        "key": "triage",
        "title": "How should this issue be triaged?",
        "text": f"Issue {repo}#{number}, opened just now.",
        "options": TRIAGE,
    }
    body_size = len(str(issue.get("body") or ""))
    return (
        f"I read issue {repo}#{number} from its data file: {title!r}"
        f" ({body_size} characters of body).\n"
        "A person should decide how to triage it.\n\n" + receipt({"ask": [ask]})
    )


def triage(details: dict[str, Any], event: dict[str, Any], memory: Memory) -> str:
    label = chosen(details, TRIAGE)
    repo, number = memory.data.get("repo"), memory.data.get("number")
    matched = ISSUE_SUBJECT.match(str(event.get("subject") or ""))
    if (not repo or not isinstance(number, int)) and matched:
        repo, number = matched.group(1), int(matched.group(2))
    if label is None or not repo or not isinstance(number, int):
        return "I could not tell which issue or which triage was meant, so I did nothing."
    memory.save(asked=None, triaged=label)
    actions = [
        {
            "do": "github.comment",
            "repo": repo,
            "number": number,
            "body": f"Triaged as {label} by the demo agent.",
        },
        {"do": "github.label", "repo": repo, "number": number, "labels": [label]},
    ]
    return f"Triaged {repo}#{number} as {label}.\n\n" + receipt(
        {"actions": actions, "resolve": ["triage"]}
    )


def main() -> int:
    context_file = Path(os.environ["AUTOLOOP_CONTEXT"])
    context = load_json(context_file)
    context = context if isinstance(context, dict) else {}
    events = [e for e in context.get("events", []) if isinstance(e, dict)]
    turn = str(context.get("turn") or os.environ.get("AUTOLOOP_TURN", "turn"))

    session = (
        os.environ.get("AUTOLOOP_RESUME")
        or "demo-" + hashlib.sha256(turn.encode()).hexdigest()[:12]
    )
    report = os.environ.get("AUTOLOOP_REPORT")
    if report:
        Path(report).write_text(
            json.dumps({"session": session, "tokens": 0, "cost_usd": 0}), encoding="utf-8"
        )
    memory = Memory(session, context_file)

    data_dir = Path(os.environ.get("AUTOLOOP_DATA") or context_file.parent / "data")
    if (data_dir / "files.json").is_file() and (data_dir / "diff.patch").is_file():
        message = review_pull(data_dir)
    elif context.get("repair"):
        notice = {"title": "Receipt rewritten", "text": "The demo agent rewrote its last message."}
        message = "Here is my last message again, written properly.\n\n" + receipt(
            {"notice": [notice]}
        )
    elif (answer := first(events, "card.answered")) is not None:
        details = details_of(answer, context_file.parent)
        key = (
            details.get("key")
            or memory.data.get("asked")
            or ("triage" if details.get("choice") in TRIAGE else None)
        )
        message = triage(details, answer, memory) if key == "triage" else paint(details, memory)
    elif (issue := first(events, "issues.opened")) is not None:
        message = ask_triage(issue, context_file.parent, memory)
    else:
        message = ask_colour(memory)
    print(message)
    return 0


if __name__ == "__main__":
    sys.exit(main())
