"""Write each ``run:`` script of action.yml to a file in the folder given; print the paths.

scripts/check hands them to shellcheck: actionlint checks the scripts of workflows, not
those of a composite action.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def main(folder: str) -> int:
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    out = Path(folder)
    for n, step in enumerate(action["runs"]["steps"]):
        if "run" in step:
            path = out / f"step-{n}.sh"
            path.write_text(step["run"], encoding="utf-8")
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
