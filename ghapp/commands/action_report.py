"""What one ``autoloop action`` run tells the workflow: outputs, a summary, annotations.

- outputs (``GITHUB_OUTPUT``): ``turns`` (turns run), ``cards`` (cards raised, the
  deliveries' included), ``stage`` (the delivery stage of the run's pull request, or of
  the delivery it moved; empty when there is none), and ``cost-usd`` and ``tokens``: what
  the agents this run started (its turns and the deliveries' review agents) reported
  spending;
- the job summary (``GITHUB_STEP_SUMMARY``): Markdown tables of the event, the turns
  (with what each spent), the cards with links to their comments, and the deliveries
  (stage before and after, what each waits for, the writes made, the review agents' runs
  and spend, with links to their sticky comments); text that others wrote (card titles
  come from agents, which read issues) is escaped, so it stays text;
- annotations: ``::error::`` and ``::warning::`` lines, escaped as the runner reads them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ghapp.github.level import Moved
from ghapp.github.names import REPO_NAME
from kernel.model import Event
from kernel.records import Card, Turn

__all__ = [
    "ActionRun",
    "Answered",
    "Recorded",
    "Spent",
    "annotation",
    "outputs",
    "summary",
    "write_outputs",
    "write_summary",
]

_SUBJECT = re.compile(r"^(" + REPO_NAME + r")#([0-9]+)$")
_STAGE = re.compile(r"[^A-Za-z0-9_.:-]")
_MARKDOWN = re.compile(r"([\\`*_\[\]|])")
_CODE = re.compile(r"[^A-Za-z0-9_.:/#@-]")
CELL_MAX = 120
NOTE_MAX = 1000  # a note says what to do: it is not cut short like a cell


@dataclass(frozen=True, slots=True)
class Recorded:
    event: Event
    code: str  # "recorded" or "duplicate"


@dataclass(frozen=True, slots=True)
class Answered:
    card: str
    choice: int
    by: str
    outcome: str  # answered, replied (refused, with a reply comment), handled, ignored


@dataclass(slots=True, kw_only=True)
class ActionRun:
    """What one run did, for the outputs and the summary."""

    event_name: str
    repository: str
    mode: str
    attempt: int
    delivery: str
    run_url: str
    server_url: str
    events: list[Recorded] = field(default_factory=list)
    answers: list[Answered] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    cards: list[Card] = field(default_factory=list)  # raised or changed by this run
    new_cards: list[Card] = field(default_factory=list)  # raised by this run
    subjects: dict[str, str] = field(default_factory=dict)  # matter id -> subject
    deliveries: list[Moved] = field(default_factory=list)
    stage: str = ""
    warnings: list[str] = field(default_factory=list)
    #: card id -> why GitHub did not show it (the job has no later sweep to try again)
    unshown: dict[str, str] = field(default_factory=dict)
    #: what this run's turns asked to write and GitHub refused, a line each
    unwritten: list[str] = field(default_factory=list)

    @property
    def cards_raised(self) -> int:
        """Cards this run raised: the rules' and the deliveries'."""
        return len(self.new_cards) + sum(len(m.cards) for m in self.deliveries)

    @property
    def spent(self) -> Spent:
        """What the agents this run started reported: its turns and the review agents'
        runs of its deliveries."""
        runs = [(t.tokens, t.cost_usd) for t in self.turns]
        runs += [(f.tokens, f.cost_usd) for m in self.deliveries for f in m.reviews]
        return Spent.of(runs)


@dataclass(frozen=True, slots=True)
class Spent:
    """What agents reported spending: ``runs`` of them; ``costed`` and ``counted``: how
    many gave a cost, a token count (an agent may report either, both or neither)."""

    runs: int = 0
    costed: int = 0
    counted: int = 0
    tokens: int = 0
    cost_usd: float = 0.0

    @classmethod
    def of(cls, runs: list[tuple[int | None, float | None]]) -> Spent:
        return cls(
            runs=len(runs),
            costed=sum(1 for _, usd in runs if usd is not None),
            counted=sum(1 for tokens, _ in runs if tokens is not None),
            tokens=sum(tokens or 0 for tokens, _ in runs),
            cost_usd=sum(usd or 0.0 for _, usd in runs),
        )

    def text(self) -> str:
        """``$0.42, 1,234 tokens``; ``-`` when no agent ran; what none of them reported
        is said so (``cost not reported, 20 tokens``), never shown as nothing spent."""
        if not self.runs:
            return "-"
        if not (self.costed or self.counted):
            return "not reported"
        usd = self.cost_usd
        cost = f"${usd:.2f}" if usd == 0 or usd >= 0.01 else f"${usd:.4f}"
        return ", ".join(
            (
                cost if self.costed else "cost not reported",
                f"{self.tokens:,} tokens" if self.counted else "tokens not reported",
            )
        )


# --------------------------------------------------------------------------- annotations


def annotation(kind: str, message: str) -> str:
    """A workflow command line (``error``, ``warning``, ``notice``), escaped."""
    text = message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return f"::{kind}::{text}"


# --------------------------------------------------------------------------- outputs


def outputs(report: ActionRun) -> dict[str, str]:
    spent = report.spent
    return {
        "turns": str(len(report.turns)),
        "cards": str(report.cards_raised),
        "stage": _STAGE.sub("", report.stage),
        "cost-usd": f"{spent.cost_usd:.4f}",
        "tokens": str(spent.tokens),
    }


def write_outputs(path: Path | None, report: ActionRun) -> None:
    if path is None:
        return
    with path.open("a", encoding="utf-8") as out:
        for name, value in outputs(report).items():
            out.write(f"{name}={value}\n")


# --------------------------------------------------------------------------- the summary


def cell(text: str, limit: int = CELL_MAX) -> str:
    """Text written by others as one table cell: one line, no markup, no HTML."""
    flat = " ".join(str(text).split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN.sub(r"\\\1", flat)


def code(text: str) -> str:
    """A name (an event type, a card id) as a code span: only the characters names have."""
    return f"`{_CODE.sub('', str(text))[:CELL_MAX]}`"


def subject_link(server_url: str, subject: str, anchor: str = "") -> str:
    """``owner/repo#N`` as a link to the issue or pull request (GitHub redirects
    ``/issues/N`` to ``/pull/N``); other subjects as text."""
    found = _SUBJECT.match(subject)
    if found is None:
        return cell(subject) or "-"
    url = f"{server_url}/{found.group(1)}/issues/{found.group(2)}{anchor}"
    return f"[{cell(subject)}]({url})"


def _card_state(card: Card, unshown: str | None = None) -> str:
    if unshown is not None:
        return f"not posted: {cell(unshown)}"
    if card.kind_ == "ask" and card.state == "open":
        return f"waiting for `/answer {_CODE.sub('', card.id)} N`"
    if card.choice is not None and 1 <= card.choice <= len(card.options):
        by = f" by {cell(card.answered_by)}" if card.answered_by else ""
        return f"{card.state}: {cell(card.options[card.choice - 1])}{by}"
    return card.state


def _comment_link(server_url: str, card: Card, subject: str) -> str:
    for sent in card.delivered.values():
        ref = str((sent or {}).get("ref", "")) if isinstance(sent, Mapping) else ""
        if ref.isdigit():
            return subject_link(server_url, subject, f"#issuecomment-{ref}")
    return subject_link(server_url, subject)


def summary(report: ActionRun) -> str:
    server = report.server_url
    subjects = sorted({r.event.subject for r in report.events})
    about = ", ".join(subject_link(server, s) for s in subjects) or cell(report.repository)
    types = sorted({r.event.type for r in report.events}) or [report.event_name]
    lines = [
        f"### Autoloop: {', '.join(code(t) for t in types)} on {about}",
        "",
        "| mode | turns run | cards raised | delivery stage | agents spent | run |",
        "|---|---|---|---|---|---|",
        f"| {report.mode} | {len(report.turns)} | {report.cards_raised} | "
        f"{cell(report.stage) or '-'} | {report.spent.text()} | "
        f"[attempt {report.attempt}]({report.run_url}) |",
        "",
    ]
    if report.events:
        lines += ["| event | subject | recorded |", "|---|---|---|"]
        for r in report.events:
            how = "now" if r.code == "recorded" else "by an earlier attempt (the same event)"
            lines.append(
                f"| {code(r.event.type)} | {subject_link(server, r.event.subject)} | {how} |"
            )
        lines.append("")
    if report.answers:
        lines += ["| answer | by | outcome |", "|---|---|---|"]
        for a in report.answers:
            outcome = {
                "answered": "taken",
                "replied": "refused (the reply comment says why)",
                "handled": "taken before",
            }.get(a.outcome, a.outcome)
            lines.append(
                f"| `/answer {_CODE.sub('', a.card)} {a.choice}` | {cell(a.by)} | {outcome} |"
            )
        lines.append("")
    if report.turns:
        lines += ["| turn | rule | about | outcome | spent |", "|---|---|---|---|---|"]
        for t in report.turns:
            about_turn = subject_link(server, report.subjects.get(t.matter, ""))
            outcome = cell(t.outcome or t.state)
            if t.error:
                outcome += f": {cell(t.error)}"
            spent = Spent.of([(t.tokens, t.cost_usd)]).text()
            lines.append(f"| {t.id} | {cell(t.rule)} | {about_turn} | {outcome} | {spent} |")
        lines.append("")
    if report.cards:
        lines += ["| card | title | state | where |", "|---|---|---|---|"]
        for c in report.cards:
            where = _comment_link(server, c, report.subjects.get(c.matter, ""))
            state = _card_state(c, report.unshown.get(c.id))
            lines.append(f"| {c.id} | {cell(c.title)} | {state} | {where} |")
        lines.append("")
    if report.deliveries:
        lines += _deliveries(report)
    for line in report.unwritten:
        lines += [f"> **Not written:** {cell(line, NOTE_MAX)}", ""]
    for warning in report.warnings:
        lines += [f"> **Note:** {cell(warning, NOTE_MAX)}", ""]
    return "\n".join(lines) + "\n"


def _deliveries(report: ActionRun) -> list[str]:
    server = report.server_url
    lines = [
        "| delivery | stage | waiting for | writes | cards | review agents |",
        "|---|---|---|---|---|---|",
    ]
    waits = False
    for m in report.deliveries:
        subject = f"{m.repo}#{m.number}"
        anchor = f"#issuecomment-{m.comment}" if m.comment else ""
        where = subject_link(server, subject, anchor)
        before = "started" if m.started else (code(m.before) if m.before else "-")
        stage = f"{before} → {code(m.after)}" if m.after else before
        if m.error:
            waiting = f"failed: {cell(m.error)}"
        else:
            waiting = cell(m.waiting) or ("-" if m.after in ("delivered", "cancelled") else "")
            waits = waits or bool(m.waiting)
        writes = "<br>".join(code(w.replace(": ", ":")) for w in m.writes) or "-"
        cards = ", ".join(
            f"{code(name)} (`/answer {name} N` on the pull request)" for name in m.cards
        )
        spent = Spent.of([(f.tokens, f.cost_usd) for f in m.reviews])
        reviews = f"{spent.runs} run(s): {spent.text()}" if spent.runs else "-"
        lines.append(f"| {where} | {stage} | {waiting} | {writes} | {cards or '-'} | {reviews} |")
    lines.append("")
    if waits:
        lines += [
            "Nothing waits in this job: the next event (a check, a deployment, an answer) "
            "or a scheduled run goes on from where each delivery rests, as its pull request "
            "shows.",
            "",
        ]
    if any(m.shown == "newer shown" for m in report.deliveries):
        lines += [
            "> **Note:** another run showed a newer state of a delivery first; the next "
            "run goes on from that one.",
            "",
        ]
    return lines


def write_summary(path: Path | None, report: ActionRun) -> None:
    if path is None:
        return
    with path.open("a", encoding="utf-8") as out:
        out.write(summary(report))
