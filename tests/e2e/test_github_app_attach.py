"""What ``attach`` wires, and its one setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from ghapp.commands.github_app import sweep_interval
from ghapp.github.answers import AnswerDesk
from ghapp.github.channel import GitHubCommentChannel
from ghapp.github.executor import GitHubExecutor
from ghapp.github.sweeper import Sweeper
from ghapp.runtime.settings import SettingsError
from tests.e2e.test_github_app_sandbox import rig, rules


def test_the_sweep_interval_defaults_to_five_minutes() -> None:
    assert sweep_interval({}) == 300.0
    assert sweep_interval({"AUTOLOOP_GITHUB_SWEEP_S": " 45 "}) == 45.0


@pytest.mark.parametrize("raw", ["soon", "0", "-5", "100000", "nan"])
def test_a_bad_sweep_interval_says_what_to_give(raw: str) -> None:
    with pytest.raises(SettingsError, match="give seconds between 1 and 86400"):
        sweep_interval({"AUTOLOOP_GITHUB_SWEEP_S": raw})


def test_attach_wires_the_github_comment_channels_the_executor_and_the_background_parts(
    tmp_path: Path,
) -> None:
    doc = rules()
    doc["channels"] = {"gh": {"use": "github-comment"}, "desk": {"use": "console"}}
    with rig(tmp_path, doc) as r:
        hub, server = r.live.hub, r.live.running.server
        gh = hub.cards.channel("gh")
        assert isinstance(gh, GitHubCommentChannel)
        assert gh.links is None  # no "links": true on this channel
        assert not isinstance(hub.cards.channel("desk"), GitHubCommentChannel)
        assert isinstance(hub.executors["github"], GitHubExecutor)
        assert hub.executors["github"].bot_login == f"{server.app_slug}[bot]"
        desk = r.part(AnswerDesk)
        assert server.on_comment == desk.submit
        assert r.part(Sweeper).every_s == 300.0


def test_the_channels_and_the_executor_mention_whom_rules_json_allows(
    tmp_path: Path,
) -> None:
    doc = rules()
    doc["channels"] = {"gh": {"use": "github-comment"}}
    doc["mentions"] = ["Mona"]
    with rig(tmp_path, doc) as r:
        hub = r.live.hub
        gh, ex = hub.cards.channel("gh"), hub.executors["github"]
        assert isinstance(gh, GitHubCommentChannel) and isinstance(ex, GitHubExecutor)
        assert tuple(gh.mentions()) == ("mona",) == tuple(ex.mentions())
        assert tuple(ex.delivery.mentions()) == ("mona",)
