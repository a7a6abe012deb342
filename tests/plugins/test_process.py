"""Starting an agent's program: what it says when it cannot be started."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from plugins.agents.process import run_process


def test_a_missing_folder_is_named_not_the_program(tmp_path: Path) -> None:
    """A rule's cwd that does not exist was reported as the program (which was there)."""
    missing = tmp_path / "no-such-folder"
    result = run_process([sys.executable, "-c", "pass"], cwd=missing, env=dict(os.environ),
                         timeout_s=10)  # fmt: skip
    assert result.spawn_error == (
        f"the folder it runs in, {missing} (the rule's cwd): No such file or directory"
    )


def test_a_missing_program_is_named(tmp_path: Path) -> None:
    result = run_process(["no-such-program-here"], cwd=tmp_path, env=dict(os.environ),
                         timeout_s=10)  # fmt: skip
    assert result.spawn_error == "no-such-program-here: No such file or directory"
