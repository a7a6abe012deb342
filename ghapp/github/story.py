"""The story of one delivery, told from the ledger: ``autoloop why owner/repo#12``.

It is built from the facts alone, without a call to GitHub, in the order they were
recorded:

- each ``PipelineAdvanced`` of the pipeline: the stages it moved through (its stage
  history: when, on what outcome, why), what it waited for at rest, the stage's
  deadline, the heads and the merge commit, and its reads of the live version;
- each ``PipelineWoken``: something it waits on happened (a webhook, an answer, the end
  of one of its writes);
- the outbox actions it requested (``ActionRequested``, ``ActionAttempted``,
  ``ActionCompleted``): its writes to GitHub (the merge with its sha, the review, the
  branch update, the check run and the sticky comment), each placed at the stage that
  asked for it, with its attempts and its answer;
- its cards (``CardOpened``, ``CardAnswered``, ``CardResolved``): raised when it
  blocked, and who answered what.

A pipeline that ended and was labelled again has one run after another. :func:`tell`
is the fold (plain data in, plain data out); :func:`read_story` reads a ledger;
:func:`story_lines` says it in words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ghapp.github.names import REPO_NAME
from kernel import facts as f
from kernel.records import Pipeline

__all__ = ["FACT_TYPES", "find_pipeline", "parse_ref", "read_story", "story_lines", "tell"]

FACT_TYPES = (
    "PipelineAdvanced",
    "PipelineWoken",
    "ActionRequested",
    "ActionAttempted",
    "ActionCompleted",
    "CardOpened",
    "CardAnswered",
    "CardResolved",
)
_PAGE = 2000  # facts read at a time

_NAME = REPO_NAME
_REFS = (
    re.compile(rf"^deliver/(?P<repo>{_NAME})#(?P<number>[0-9]+)$"),
    re.compile(rf"^(?P<repo>{_NAME})#(?P<number>[0-9]+)$"),
    re.compile(rf"^https?://[^/]+/(?P<repo>{_NAME})/pull/(?P<number>[0-9]+)(?:[/?#].*)?$"),
)

# The stage whose decision asks for each write (a decision may pass several stages);
# the progress (check run and sticky comment) belongs to where the decision rests.
_WRITE_STAGE = {
    "github.review": "review",
    "github.ready": "ready",
    "github.update_branch": "update_branch",
    "github.merge": "merge",
    "github.delete_branch": "deployment",
}
_BULKY = ("comment_body", "check_summary", "body")  # params left out of the story

_STAGE_NAMES = {
    "review": "review",
    "ready": "ready",
    "checks": "checks",
    "update_branch": "update branch",
    "merge": "merge",
    "deployment": "deployment",
    "live_version": "live version",
    "delivered": "delivered",
    "reviewed": "reviewed",
    "blocked": "blocked",
    "cancelled": "cancelled",
}
_HOW = {
    "started": "started",
    "new_head": "restarted: a new push",
    "updated": "the branch was brought up to date",
}


# ---------------------------------------------------------------------------- finding


def parse_ref(text: str) -> str | None:
    """The pipeline id a user's reference names: ``owner/repo#12``, the pipeline id
    ``deliver/owner/repo#12`` or the pull request's URL; None for anything else."""
    for pattern in _REFS:
        found = pattern.match(text.strip())
        if found is not None:
            return f"deliver/{found.group('repo')}#{int(found.group('number'))}"
    return None


def find_pipeline(tx: Any, text: str) -> str | None:
    """The id of the stored pipeline ``text`` refers to (names compared without case,
    as GitHub's are), or None."""
    pid = parse_ref(text)
    if pid is None:
        return None
    if isinstance(tx.get("pipeline", pid), Pipeline):
        return pid
    wanted = pid.casefold()
    for rec in tx.query("pipeline"):
        if isinstance(rec, Pipeline) and rec.id.casefold() == wanted:
            return rec.id
    return None


def read_story(store: Any, text: str) -> dict[str, Any] | None:
    """The story of the delivery ``text`` names, read from ``store``; None if none."""
    with store.read() as tx:
        pid = find_pipeline(tx, text)
        if pid is None:
            return None
        found: list[f.Fact] = []
        after = 0
        while True:
            page = tx.facts(after, _PAGE, types=FACT_TYPES)
            found.extend(fact for _, _, fact in page)
            if len(page) < _PAGE:
                break
            after = page[-1][0]
    return tell(found, pid)


# ------------------------------------------------------------------------------- fold


def tell(facts: Iterable[f.Fact], pipeline: str) -> dict[str, Any]:
    """The story of ``pipeline`` from ``facts`` in the order they were recorded."""
    teller = _Teller(pipeline)
    for fact in facts:
        teller.take(fact)
    return teller.story()


class _Teller:
    def __init__(self, pipeline: str) -> None:
        self.pid = pipeline
        self.runs: list[dict[str, Any]] = []
        self.actions: dict[str, dict[str, Any]] = {}
        self.cards: dict[str, dict[str, Any]] = {}
        self.subject = ""
        self.stage = ""
        self.ended = False
        self.decisions = 0
        # Since the last decision: what it asked for (written in the same transaction).
        self._asked: list[str] = []
        self._raised: list[str] = []
        self._resolved: list[str] = []
        self._keys: list[tuple[str, str, str, str]] = []  # history rows of this run
        self._probes: set[int] = set()  # probe attempts of this run already told

    # -- facts ---------------------------------------------------------------------------

    def take(self, fact: f.Fact) -> None:
        if isinstance(fact, f.PipelineAdvanced):
            if fact.pipeline == self.pid:
                self._advanced(fact)
        elif isinstance(fact, f.PipelineWoken):
            if fact.pipeline == self.pid and self.runs and self.runs[-1]["stages"]:
                self.runs[-1]["stages"][-1]["woken"].append(fact.at)
        elif isinstance(fact, f.ActionRequested):
            if fact.matter == self.pid:
                self._requested(fact)
        elif isinstance(fact, f.ActionAttempted):
            action = self.actions.get(fact.action)
            if action is not None:  # an attempt begins (claimed), or one ended in error
                if fact.error:
                    action["errors"].append(fact.error)
                else:
                    action["attempts"] += 1
        elif isinstance(fact, f.ActionCompleted):
            action = self.actions.get(fact.action)
            if action is not None:
                action["status"] = "done" if fact.ok else "failed"
                action["result"] = dict(fact.result)
                action["error"] = fact.error
                action["ended_at"] = fact.at
        elif isinstance(fact, f.CardOpened):
            if fact.matter == self.pid:
                self._opened(fact)
        elif isinstance(fact, f.CardAnswered):
            card = self.cards.get(fact.card)
            if card is not None:
                options = card["options"]
                card.update(
                    choice=fact.choice,
                    answer=options[fact.choice - 1] if 1 <= fact.choice <= len(options) else "",
                    answered_by=fact.by,
                    via=fact.via,
                    answered_at=fact.at,
                )
        elif isinstance(fact, f.CardResolved) and fact.card in self.cards:
            self._resolved.append(fact.card)

    def _requested(self, fact: f.ActionRequested) -> None:
        params = {k: v for k, v in fact.params.items() if k not in _BULKY}
        self.actions[fact.action] = {
            "id": fact.action,
            "do": fact.do,
            "what": _what(fact.do, fact.params),
            "params": params,
            "stage": "",
            "requested_at": "",
            "status": fact.status,
            "attempts": 0,
            "errors": [],
            "result": {},
            "error": fact.error,
            "ended_at": "",
        }
        self._asked.append(fact.action)

    def _opened(self, fact: f.CardOpened) -> None:
        self.cards[fact.card] = {
            "id": fact.card,
            "key": fact.key,
            "kind": fact.key.rsplit("/", 1)[-1],
            "title": fact.title,
            "text": fact.text,
            "options": list(fact.options),
            "stage": "",
            "blocked_at": "",
            "raised_at": fact.at,
            "choice": None,
            "answer": "",
            "answered_by": "",
            "via": "",
            "answered_at": "",
            "resolved": False,
            "resolved_at": "",
        }
        self._raised.append(fact.card)

    def _advanced(self, fact: f.PipelineAdvanced) -> None:
        if self.ended and fact.ended and not fact.restarted and fact.stage == self.stage:
            return  # a note on the ended record (a review agent's spend): no decision
        data = fact.data
        self.decisions += 1
        self.subject = fact.subject or self.subject
        self.stage, self.ended = fact.stage, fact.ended
        run_no = _int(data.get("run")) or 1
        run = self.runs[-1] if self.runs else None
        if run is None or fact.restarted or run["run"] != run_no:
            run = {
                "run": run_no,
                "mode": str(data.get("mode") or ""),
                "started_at": fact.at,
                "ended_at": "",
                "stage": fact.stage,
                "heads": [],
                "merge_sha": "",
                "decisions": 0,
                "stages": [],
            }
            self.runs.append(run)
            self._keys, self._probes = [], set()
        run["decisions"] += 1
        run["stage"] = fact.stage
        if fact.ended:
            run["ended_at"] = fact.at
        head = str(data.get("head_sha") or "")
        if head and head not in run["heads"]:
            run["heads"].append(head)
        run["merge_sha"] = str(data.get("merge_sha") or "") or run["merge_sha"]
        touched = self._visits(run, data, head)
        if not touched:
            return
        here = touched[-1]
        here["decisions"] += 1
        here["deadline"] = str(data.get("deadline") or "")
        waiting = str(data.get("waiting_for") or "")
        told = here["waited"]
        if waiting and (not told or told[-1]["for"] != waiting):
            told.append({"at": fact.at, "on": str(data.get("waiting_on") or ""), "for": waiting})
        self._place_probes(run, data)
        for aid in self._asked:
            action = self.actions[aid]
            visit = _last(touched, _WRITE_STAGE.get(action["do"], "")) or here
            action.update(stage=visit["stage"], requested_at=fact.at)
            visit["writes"].append(aid)
        card = data.get("card") if isinstance(data.get("card"), Mapping) else None
        for cid in self._raised:
            got = self.cards[cid]
            visit = _last(touched, "blocked") or here
            blocked_at = str(card.get("blocked_at") or "") if card is not None else ""
            got.update(stage=visit["stage"], blocked_at=blocked_at)
            got["raised_at"] = got["raised_at"] or fact.at
            visit["cards"].append(cid)
        for cid in self._resolved:
            self.cards[cid].update(resolved=True, resolved_at=fact.at)
        self._asked, self._raised, self._resolved = [], [], []

    def _visits(self, run: dict[str, Any], data: Mapping[str, Any], head: str) -> list[Any]:
        """The stages this decision was at: where it began, then each it moved to."""
        rows = [h for h in data.get("history") or () if isinstance(h, Mapping)]
        keys = [
            (str(h.get("stage")), str(h.get("at")), str(h.get("outcome")), str(h.get("note")))
            for h in rows
        ]
        start = 0
        if self._keys:
            last = self._keys[-1]
            found = [i for i, key in enumerate(keys) if key == last]
            start = found[-1] + 1 if found else 0
        stages: list[dict[str, Any]] = run["stages"]
        touched = stages[-1:]
        for key in keys[start:]:
            stage, at, how, note = key
            visit = {
                "stage": stage,
                "at": at,
                "until": "",
                "how": how,
                "note": note,
                "head_sha": head,
                "deadline": "",
                "waited": [],
                "woken": [],
                "decisions": 0,
                "writes": [],
                "cards": [],
                "probes": [],
            }
            if stages:
                stages[-1]["until"] = at
            stages.append(visit)
            touched.append(visit)
            self._keys.append(key)
        return touched

    def _place_probes(self, run: dict[str, Any], data: Mapping[str, Any]) -> None:
        watch = _last(run["stages"], "live_version")
        for seen in data.get("versions") or ():
            if not isinstance(seen, Mapping):
                continue
            attempt = _int(seen.get("attempt"))
            if watch is None or attempt in self._probes:
                continue
            self._probes.add(attempt)
            watch["probes"].append(
                {
                    "attempt": attempt,
                    "at": str(seen.get("at") or ""),
                    "sha": seen.get("sha"),
                    "matches": bool(seen.get("matches")),
                    "error": str(seen.get("error") or ""),
                }
            )

    # -- the story -----------------------------------------------------------------------

    def story(self) -> dict[str, Any]:
        runs = []
        for run in self.runs:
            stages = []
            for visit in run["stages"]:
                stages.append(
                    {
                        **visit,
                        "writes": [self.actions[a] for a in visit["writes"]],
                        "cards": [self.cards[c] for c in visit["cards"]],
                    }
                )
            runs.append({**run, "stages": stages})
        counts: dict[str, int] = {}
        for action in self.actions.values():
            counts[action["do"]] = counts.get(action["do"], 0) + 1
        return {
            "pipeline": self.pid,
            "subject": self.subject,
            "stage": self.stage,
            "ended": self.ended,
            "decisions": self.decisions,
            "runs": runs,
            "writes": counts,
            "cards": len(self.cards),
        }


def _last(visits: list[dict[str, Any]], stage: str) -> dict[str, Any] | None:
    return next((v for v in reversed(visits) if v["stage"] == stage), None)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _short(sha: object) -> str:
    return sha[:7] if isinstance(sha, str) else "?"


def _what(do: str, p: Mapping[str, Any]) -> str:
    if do == "github.merge":
        return f"merge {_short(p.get('sha'))} ({p.get('method')}, guarded by that head)"
    if do == "github.review":
        return f"review {p.get('event')} on {_short(p.get('sha'))}"
    if do == "github.update_branch":
        return f"update the branch (expected head {_short(p.get('expected_head_sha'))})"
    if do == "github.ready":
        return f"mark ready for review ({_short(p.get('head_sha'))})"
    if do == "github.delete_branch":
        return f"delete the branch {p.get('ref')}"
    if do == "github.progress":
        state = str(p.get("check_status"))
        if p.get("check_conclusion"):
            state += f" {p.get('check_conclusion')}"
        return (
            f"progress {p.get('seq')}: check run autoloop/deliver {state} on "
            f"{_short(p.get('head_sha'))}, and the sticky comment"
        )
    return do


# ------------------------------------------------------------------------------ words


def _time(at: str) -> str:
    """``2026-03-02 09:30:00``."""
    return at[:19].replace("T", " ") if at else "-"


def _clock(at: str) -> str:
    """``09:30:00.123``."""
    return at[11:23] if len(at) >= 23 else _time(at)


def _answer(action: Mapping[str, Any]) -> str:
    status, result = action["status"], action["result"]
    if status == "done":
        back = " (read back)" if result.get("read_back") else ""
        if action["do"] == "github.merge":
            return f"merged, merge commit {_short(result.get('sha'))}{back}"
        if action["do"] == "github.review":
            return f"review {result.get('review')} posted{back}"
        if action["do"] == "github.progress":
            if result.get("applied") is False:
                return "not shown: a newer progress was shown already"
            return f"check run {result.get('check_run')}, comment {result.get('comment')}{back}"
        return f"done{back}"
    if status == "failed":
        return f"failed: {action['error']}"
    if status == "allowed":
        errors = action["errors"]
        tried = f" after {action['attempts']} attempt(s): {errors[-1]}" if errors else ""
        return "not answered yet" + tried
    return f"{status}{': ' + action['error'] if action['error'] else ''}"


def _probe(p: Mapping[str, Any]) -> str:
    if p["sha"] is None:
        return f"probe {p['attempt']} at {_clock(p['at'])}: no answer ({p['error']})"
    said = "the merge commit or later" if p["matches"] else "not the merge commit"
    return f"probe {p['attempt']} at {_clock(p['at'])}: {_short(p['sha'])}, {said}"


def _card(card: Mapping[str, Any]) -> list[str]:
    options = "; ".join(f"{n}) {o}" for n, o in enumerate(card["options"], 1))
    where = f" at {card['blocked_at'].replace('_', ' ')}" if card["blocked_at"] else ""
    out = [
        f"card {card['id']} ({card['kind']}) raised{where} at {_clock(card['raised_at'])}: "
        f"{card['title']}",
        f"  {card['text']}",
    ]
    if options:
        out.append(f"  options: {options}")
    if card["choice"] is not None:
        via = f" via {card['via']}" if card["via"] and card["via"] != card["answered_by"] else ""
        out.append(
            f"  answered {card['choice']} ({card['answer']}) by {card['answered_by']}"
            f"{via} at {_clock(card['answered_at'])}"
        )
    elif card["resolved"]:
        out.append(f"  resolved at {_clock(card['resolved_at'])} without an answer")
    else:
        out.append("  waiting for an answer")
    return out


def story_lines(story: Mapping[str, Any]) -> list[str]:
    """The story in words, one stage after another."""
    state = "ended" if story["ended"] else "active"
    out = [
        f"delivery {story['subject']} (pipeline {story['pipeline']}): "
        f"{_STAGE_NAMES.get(story['stage'], story['stage'])}, {state}"
    ]
    for run in story["runs"]:
        until = f" to {_time(run['ended_at'])}" if run["ended_at"] else ", still going"
        out.append(
            f"run {run['run']} ({run['mode']}) from {_time(run['started_at'])}{until}: "
            f"{_STAGE_NAMES.get(run['stage'], run['stage'])}"
        )
        heads = ", ".join(_short(h) for h in run["heads"])
        merge = f"; merge commit {_short(run['merge_sha'])}" if run["merge_sha"] else ""
        out.append(f"  heads {heads}{merge}")
        for visit in run["stages"]:
            out.extend(_visit_lines(visit))
    writes = ", ".join(f"{do} {n}" for do, n in sorted(story["writes"].items())) or "none"
    out.append(f"writes: {writes}; cards: {story['cards']}; decisions: {story['decisions']}")
    return out


def _visit_lines(visit: Mapping[str, Any]) -> list[str]:
    how = _HOW.get(visit["how"], visit["how"])
    note = f": {visit['note']}" if visit["note"] else ""
    name = _STAGE_NAMES.get(visit["stage"], visit["stage"])
    out = [f"  {_clock(visit['at'])}  {name:<14} {how}{note}"]
    pad = " " * 16
    if visit["how"] == "new_head":
        out.append(f"{pad}from the review again, on the new head {_short(visit['head_sha'])}")
    for wait in visit["waited"]:
        out.append(f"{pad}waited for {wait['for']} ({wait['on']}, from {_clock(wait['at'])})")
    if visit["deadline"]:
        out.append(f"{pad}deadline {_time(visit['deadline'])}")
    woken = len(visit["woken"])
    if woken or visit["decisions"] > 1:
        out.append(f"{pad}woken {woken} time(s); {visit['decisions']} decision(s) here")
    for action in visit["writes"]:
        out.append(f"{pad}write {action['what']}: {_answer(action)}")
    for probe in visit["probes"]:
        out.append(f"{pad}{_probe(probe)}")
    for card in visit["cards"]:
        out.extend(pad + line for line in _card(card))
    return out
