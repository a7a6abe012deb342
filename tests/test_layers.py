"""The layers hold (the core stays pure, the shell points down) and kernel/ names no product."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCTS = re.compile(
    r"claude|codex|github|slack|feishu|lark|telegram|discord|anthropic|openai", re.I
)


def test_import_contracts_hold() -> None:
    exe = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(exe), "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert f"Contracts: {len(contracts['contracts'])} kept, 0 broken" in proc.stdout


def test_kernel_names_no_product() -> None:
    hits = []
    for path in sorted((ROOT / "kernel").rglob("*.py")):
        for no, line in enumerate(path.read_text().splitlines(), 1):
            if PRODUCTS.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert hits == []


def test_the_product_name_check_can_fail(tmp_path: Path) -> None:
    sample = "def f():\n    return 'GitHub'\n"
    assert PRODUCTS.search(sample)
