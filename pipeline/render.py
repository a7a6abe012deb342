"""The words people see: the ``autoloop/deliver`` check run and the sticky comment.

Both are rendered from the delivery alone (its stage, history and open card), plus
what it waits for and any policy problem, so that the same state always reads the same.
Text that came from outside (check names, GitHub's messages) is escaped for Markdown
tables and HTML.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.delivery import Delivery, OpenCard
from pipeline.effects import CARD_SLOT
from pipeline.policy import OWN_CHECK, POLICY_PATH, PolicyProblem
from pipeline.stages import CARDS, Stage

__all__ = ["STAGE_NAMES", "Rendered", "marker", "render"]

STAGE_NAMES: dict[Stage, str] = {
    "review": "Review",
    "ready": "Ready for review",
    "checks": "Checks",
    "update_branch": "Update branch",
    "merge": "Merge",
    "deployment": "Deployment",
    "live_version": "Live version",
    "delivered": "Delivered",
    "reviewed": "Reviewed",
    "blocked": "Blocked",
    "cancelled": "Cancelled",
}
_TITLE_MAX = 120
_CELL_MAX = 300
_ROWS = 30


@dataclass(frozen=True, slots=True, kw_only=True)
class Rendered:
    check_title: str
    check_status: Literal["in_progress", "completed"]
    check_conclusion: Literal["success", "failure", "neutral"] | None
    check_summary: str
    comment_body: str


def marker(delivery: Delivery) -> str:
    """The hidden first line by which the shell finds the sticky comment."""
    return f"<!-- {OWN_CHECK} {delivery.id} -->"


def render(d: Delivery, *, waiting: str, problem: PolicyProblem | None = None) -> Rendered:
    title = _title(d, waiting, problem)
    lines = [f"**Autoloop delivery** ({'deliver-review' if d.mode == 'review' else 'deliver'})"]
    lines.append(f"Head {d.head_sha}" + (f" · merge commit {d.merge_sha}" if d.merge_sha else ""))
    lines.append("")
    lines.append(f"**{_escape(title)}**")
    if problem is not None:
        lines += [
            "",
            f"The policy `{POLICY_PATH}` on the default branch is not accepted: "
            f"{_escape(problem.detail())}",
            "",
            "Nothing else happens until it is fixed there.",
        ]
    elif d.stage == "blocked" and d.card is not None:
        lines += ["", *_card(d.card)]
    elif waiting:
        lines += ["", f"Waiting for {_escape(waiting)}."]
    if d.stage == "cancelled" and d.merge_sha:  # after the merge: only the watch stopped
        lines += [
            "",
            f"The merge ({d.merge_sha}) stays; only the following of its deployment stopped.",
        ]
    elif d.stage == "cancelled":  # a reopened PR, or a change of mind: how to go on
        lines += [
            "",
            "To start a new delivery, add its label again (remove it first if the pull "
            "request still has it).",
        ]
    lines += ["", *_history(d)]
    summary = "\n".join(lines)
    return Rendered(
        check_title=title,
        check_status="completed"
        if d.stage in ("delivered", "cancelled", "reviewed")
        else "in_progress",
        check_conclusion=_conclusion(d),
        check_summary=summary,
        comment_body=f"{marker(d)}\n{summary}\n",
    )


def _title(d: Delivery, waiting: str, problem: PolicyProblem | None) -> str:
    last = d.history[-1] if d.history else None
    note = last.note if last else ""
    if problem is not None:
        text = f"Policy problem: {problem.key or f'line {problem.line}'}"
    elif d.stage == "blocked" and d.card is not None:
        text = f"Blocked at {STAGE_NAMES[d.card.blocked_at].lower()}: {d.card.title}"
    elif d.stage in ("delivered", "cancelled"):
        text = f"{STAGE_NAMES[d.stage]}: {note}" if note else STAGE_NAMES[d.stage]
    elif d.stage == "reviewed":
        text = f"Reviewed {d.head_sha[:7]}" + (f": {note}" if note else "")
    else:
        text = f"{STAGE_NAMES[d.stage]}: waiting for {waiting}" if waiting else STAGE_NAMES[d.stage]
    text = " ".join(text.split())
    return text if len(text) <= _TITLE_MAX else text[: _TITLE_MAX - 1] + "…"


def _conclusion(d: Delivery) -> Literal["success", "failure", "neutral"] | None:
    last = d.history[-1].outcome if d.history else ""
    if d.stage == "delivered":
        return "success"
    if d.stage == "cancelled":
        return "failure" if last == "stop" else "neutral"
    if d.stage == "reviewed":
        if last == "skipped":
            return "neutral"
        events = {r.event for r in d.reviewed if r.sha in d.heads}
        return "failure" if "REQUEST_CHANGES" in events else "success"
    return None


def _card(card: OpenCard) -> list[str]:
    out = [
        f"> **Blocked at {STAGE_NAMES[card.blocked_at].lower()}:** {_escape(card.title)}",
        f"> {_escape(card.text)}",
    ]
    options = CARDS[card.kind]
    if options:
        choices = "; ".join(
            f"`/answer {CARD_SLOT} {n}` to {label}" for n, (label, _) in enumerate(options, 1)
        )
        out.append(f"> Answer with {choices}.")
    else:
        out.append("> Push to the branch to go on.")
    return out


def _history(d: Delivery) -> list[str]:
    rows = ["| stage | since (UTC) | how | note |", "|---|---|---|---|"]
    shown = d.history[-_ROWS:]
    if len(d.history) > len(shown):
        rows.append(f"| … | | | {len(d.history) - len(shown)} earlier rows |")
    for entry in shown:
        when = entry.at[:16].replace("T", " ")
        how, note = _cell(entry.outcome), _cell(entry.note)
        rows.append(f"| {STAGE_NAMES[entry.stage]} | {when} | {how} | {note} |")
    return rows


def _escape(text: str) -> str:
    """One line, no HTML: outside text cannot open tags or comments."""
    flat = " ".join(text.split())
    return flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cell(text: str) -> str:
    cell = _escape(text).replace("|", "\\|")
    return cell if len(cell) <= _CELL_MAX else cell[: _CELL_MAX - 1] + "…"
