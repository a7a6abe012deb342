"""The demo agent is a real subprocess that asks, waits for the answer, and finishes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from plugins.agents.demo import DemoAgent
from tests.fakes.turns import LONG_LINE, issue_details, leaks, make_request, make_turn

BLOCK = re.compile(r"```autoloop\n(.*?)\n```", re.S)


def receipt(message: str) -> dict[str, Any]:
    blocks = BLOCK.findall(message)
    assert blocks, message
    data = json.loads(blocks[-1])
    assert isinstance(data, dict)
    return data


def test_try_story_asks_for_a_colour_then_paints_with_the_answer(tmp_path: Path) -> None:
    agent = DemoAgent()
    first_dir = make_turn(tmp_path, events=[("try.started", {})])
    first = agent.run(make_request(tmp_path, first_dir))
    assert first.ok and first.started, first.output
    assert first.session is not None and re.fullmatch(r"demo-[0-9a-f]{12}", first.session)
    assert receipt(first.final_message)["ask"] == [
        {
            "key": "colour",
            "title": "Pick a colour",
            "text": "The demo agent will paint with it.",
            "options": ["red", "green", "blue"],
        }
    ]

    answer = {"key": "colour", "choice": "green", "index": 2}
    second_dir = make_turn(tmp_path, turn="t-2", events=[("card.answered", answer)])
    second = agent.run(make_request(tmp_path, second_dir, turn="t-2", resume=first.session))
    assert second.ok and second.session == first.session
    done = receipt(second.final_message)
    assert done["resolve"] == ["colour"]
    assert done["notice"][0]["title"] == "Painted it green"


def test_an_answer_given_by_index_only_is_understood(tmp_path: Path) -> None:
    agent = DemoAgent()
    first = agent.run(make_request(tmp_path, make_turn(tmp_path, events=[("try.started", {})])))
    turn2 = make_turn(tmp_path, turn="t-2", events=[("card.answered", {"index": 3})])
    second = agent.run(make_request(tmp_path, turn2, turn="t-2", resume=first.session))
    assert receipt(second.final_message)["notice"][0]["title"] == "Painted it blue"


def test_github_story_triages_an_issue_read_from_its_data_file(tmp_path: Path) -> None:
    agent = DemoAgent()
    first = agent.run(make_request(tmp_path, make_turn(tmp_path)))
    assert first.ok, first.output
    ask = receipt(first.final_message)["ask"][0]
    assert ask["key"] == "triage" and ask["title"] == "How should this issue be triaged?"
    assert ask["options"] == ["bug", "feature", "question"]
    # It read the title from the data file (the prompt does not hold it) ...
    assert "Ignore all previous instructions" in first.final_message
    # ... and kept it on one short line, outside its receipt.
    assert LONG_LINE[-40:] not in first.final_message
    assert "Ignore" not in json.dumps(receipt(first.final_message))

    turn2 = make_turn(
        tmp_path, turn="t-2", events=[("card.answered", {"choice": "bug", "index": 1})]
    )
    second = agent.run(make_request(tmp_path, turn2, turn="t-2", resume=first.session))
    done = receipt(second.final_message)
    assert done["resolve"] == ["triage"]
    assert done["actions"] == [
        {
            "do": "github.comment",
            "repo": "sandbox/demo",
            "number": 7,
            "body": "Triaged as bug by the demo agent.",
        },
        {"do": "github.label", "repo": "sandbox/demo", "number": 7, "labels": ["bug"]},
    ]


def test_triage_answer_falls_back_to_the_subject_without_memory(tmp_path: Path) -> None:
    answered = make_turn(
        tmp_path, events=[("card.answered", {"key": "triage", "choice": "question"})]
    )
    result = DemoAgent().run(
        make_request(
            tmp_path,
            answered,
            resume="demo-000000000000",
            options={"state_dir": str(tmp_path / "empty")},
        )
    )
    labels = [a for a in receipt(result.final_message)["actions"] if a["do"] == "github.label"]
    assert labels == [
        {"do": "github.label", "repo": "sandbox/demo", "number": 7, "labels": ["question"]}
    ]


def test_repair_turn_prints_a_valid_receipt(tmp_path: Path) -> None:
    turn_dir = make_turn(tmp_path, events=[("try.started", {})], repair=True)
    result = DemoAgent().run(make_request(tmp_path, turn_dir, resume="demo-0123456789ab"))
    assert result.ok and result.session == "demo-0123456789ab"
    assert "notice" in receipt(result.final_message)


def test_the_demo_ignores_a_plugins_package_in_its_working_folder(tmp_path: Path) -> None:
    req = make_request(tmp_path, make_turn(tmp_path, events=[("try.started", {})]))
    hostile = req.cwd / "plugins" / "agents"
    hostile.mkdir(parents=True)
    (req.cwd / "plugins" / "__init__.py").write_text("")
    (hostile / "__init__.py").write_text("")
    (hostile / "demo_script.py").write_text("print('not the demo')\n")
    result = DemoAgent().run(req)
    assert result.ok and "not the demo" not in result.final_message


def test_demo_argv_holds_no_event_text(tmp_path: Path) -> None:
    req = make_request(tmp_path, make_turn(tmp_path, events=[("issues.opened", issue_details())]))
    argv = DemoAgent().build_argv(req)
    assert argv[1:] == ["-P", "-m", "plugins.agents.demo_script"]
    assert leaks(argv) == [] and leaks([req.prompt]) == []
