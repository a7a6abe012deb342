"""The PR snapshot: answers to our writes by key, forks, frozen values."""

from __future__ import annotations

import dataclasses

import pytest

from pipeline.snapshot import GITHUB_ACTIONS_APP_ID, WriteResult
from tests.pipeline.builders import ACTIONS, H1, snap


def test_a_write_answer_is_found_by_its_effect_key() -> None:
    merged = WriteResult(key="deliver/acme/web#12/r1/merge/x/1", outcome="done")
    moved = WriteResult(key="deliver/acme/web#12/r1/update/x/2", outcome="head_moved")
    pr = snap(results=(merged, moved))
    assert pr.result(merged.key) == merged
    assert pr.result(moved.key) == moved
    assert pr.result("deliver/acme/web#12/r1/merge/x/9") is None


def test_a_head_branch_in_another_repository_is_a_fork() -> None:
    assert not snap().fork
    assert not snap(head_repo="acme/web").fork
    assert snap(head_repo="mona/web").fork


def test_a_snapshot_is_frozen() -> None:
    pr = snap()
    with pytest.raises(dataclasses.FrozenInstanceError):
        pr.head_sha = H1  # type: ignore[misc]  # the point: assignment must fail


def test_the_github_actions_app_id_is_the_real_one() -> None:
    assert GITHUB_ACTIONS_APP_ID == ACTIONS == 15368
