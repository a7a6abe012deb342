"""Starting an agent's program: what it says when it cannot be started."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from plugins.agents.process import MAX_CAPTURE, run_process


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


def test_output_past_the_limit_keeps_its_end_where_the_receipt_is(tmp_path: Path) -> None:
    """Only the first 8 MiB were kept: an agent that wrote more lost the receipt at its
    end, and its turn ended 'no_receipt' without a word."""
    script = (
        "import sys\n"
        "sys.stdout.write(('x' * 999 + '\\n') * 20000)\n"
        "print('```autoloop')\n"
        'print(\'{"notice": [{"title": "done"}]}\')\n'
        "print('```')\n"
    )
    result = run_process([sys.executable, "-c", script], cwd=tmp_path, env=dict(os.environ),
                         timeout_s=60)  # fmt: skip
    assert result.exit_code == 0
    text = result.stdout
    assert len(text.encode()) < MAX_CAPTURE + 200
    assert text.startswith("x" * 999 + "\n")
    assert text.endswith('```autoloop\n{"notice": [{"title": "done"}]}\n```\n')
    left_out = (
        20000 * 1000 + len('```autoloop\n{"notice": [{"title": "done"}]}\n```\n') - (MAX_CAPTURE)
    )
    assert f"\n[autoloop: {left_out} bytes of this output are left out here]\n" in text


def test_output_under_the_limit_is_kept_whole(tmp_path: Path) -> None:
    script = "import sys; sys.stdout.write('y' * 5_000_000)"
    result = run_process([sys.executable, "-c", script], cwd=tmp_path, env=dict(os.environ),
                         timeout_s=60)  # fmt: skip
    assert result.stdout == "y" * 5_000_000
