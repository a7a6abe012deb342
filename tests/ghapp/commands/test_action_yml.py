"""``action.yml`` run step by step, as the Actions runner runs a composite action.

A small runner in this module parses ``action.yml`` and, for each step:

- ``run:``: writes the script to a file and runs ``bash --noprofile --norc -eo pipefail``
  on it (what ``shell: bash`` means), with the step's ``env:`` evaluated as Actions would
  (``${{ inputs.x }}``, ``${{ github.action_path }}``, ``${{ runner.temp }}``,
  ``${{ steps.id.outputs.x }}``...) and a ``GITHUB_OUTPUT`` file of its own, read back as
  the step's outputs. Expressions are evaluated in ``env:`` values only: a script holding
  ``${{`` fails the test.
- ``uses:``: gives the effect of the pinned action. ``actions/setup-python`` answers the
  Python running these tests as ``python-path``; ``actions/cache`` restores the path from
  this runner's cache store when the key was saved before, and saves it after the job
  (its post step).

The action's files are copied to a folder of their own, as the runner downloads an action.
The package index is not used: pip takes the dependencies from this test's environment
(``PIP_NO_INDEX``, ``PIP_NO_DEPS``, no build isolation, and ``PYTHONPATH`` naming this
environment's site-packages); the install step itself is the action's, unchanged.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.action_runner import Runner, sandbox_runner, spent_nothing
from tests.paths import ROOT

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
PINNED = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}$")
PACKAGE = ("pyproject.toml", "README.md", "kernel", "pipeline", "plugins", "ghapp", "fakegithub")


def action() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "action.yml").read_text())
    return data


def copy_action(to: Path) -> Path:
    """The action as the runner fetches it: its own files, in a folder of their own."""
    to.mkdir(parents=True)
    shutil.copy(ROOT / "action.yml", to / "action.yml")
    for name in PACKAGE:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, to / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, to / name)
    return to


@dataclass
class Composite:
    """One job's run of the composite action (see the module docstring)."""

    action_path: Path
    runner_temp: Path
    workspace: Path
    base_env: dict[str, str]
    token: str  # what ${{ github.token }} stands for
    inputs: dict[str, str]
    cache: dict[str, Path]  # key -> saved copy: the runner's cache store, across jobs
    steps: dict[str, dict[str, str]] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)
    saves: list[tuple[str, Path]] = field(default_factory=list)

    def value(self, expression: str) -> str:
        head, _, rest = expression.partition(".")
        if head == "inputs":
            spec = action()["inputs"][rest]
            given = self.inputs.get(rest)
            return self.evaluate(str(spec.get("default", ""))) if given is None else given
        if head == "steps":
            step, _, output = rest.partition(".outputs.")
            return self.steps.get(step, {}).get(output, "")
        known = {
            "github.action_path": str(self.action_path),
            "github.token": self.token,
            "github.workspace": str(self.workspace),
            "runner.temp": str(self.runner_temp),
            "runner.os": "Linux",
            "runner.arch": "X64",
        }
        if expression not in known:
            raise AssertionError(f"this test's runner does not know ${{{{ {expression} }}}}")
        return known[expression]

    def evaluate(self, text: object) -> str:
        if isinstance(text, bool):  # YAML's booleans reach an action as "true" and "false"
            return "true" if text else "false"
        return EXPRESSION.sub(lambda m: self.value(m.group(1)), str(text))

    def run(self) -> dict[str, str]:
        for step in action()["runs"]["steps"]:
            outputs = self.use(step) if "uses" in step else self.shell(step)
            if "id" in step:
                self.steps[step["id"]] = outputs
        for key, path in self.saves:  # the post steps: actions/cache saves on a miss
            if key not in self.cache and path.exists():
                saved = self.runner_temp.parent / "cache-store" / key
                shutil.copytree(path, saved, symlinks=True)
                self.cache[key] = saved
        return {name: self.evaluate(o["value"]) for name, o in action()["outputs"].items()}

    def use(self, step: Mapping[str, Any]) -> dict[str, str]:
        uses = str(step["uses"])
        assert PINNED.match(uses), f"{uses} is not pinned by a full commit SHA"
        given = {k: self.evaluate(v) for k, v in (step.get("with") or {}).items()}
        name = uses.split("@", maxsplit=1)[0]
        if name == "actions/setup-python":
            assert given["update-environment"] == "false"  # the caller's Python is untouched
            assert given["python-version"] == "3.11"
            return {"python-path": sys.executable, "python-version": platform.python_version()}
        if name == "actions/cache":
            key, path = given["key"], Path(given["path"])
            assert key.startswith("autoloop-venv-Linux-X64-py")
            hit = key in self.cache
            if hit:
                shutil.copytree(self.cache[key], path, symlinks=True)
            self.saves.append((key, path))
            return {"cache-hit": "true" if hit else "false"}
        raise AssertionError(f"this test's runner cannot stand in for {uses}")

    def shell(self, step: Mapping[str, Any]) -> dict[str, str]:
        assert step["shell"] == "bash"
        script = str(step["run"])
        assert "${{" not in script, "inputs reach run: through env: only"
        folder = self.runner_temp / f"step-{len(self.logs)}"
        folder.mkdir()
        (folder / "script.sh").write_text(script)
        output = folder / "output"
        output.touch()
        env = {
            **self.base_env,
            **{k: self.evaluate(v) for k, v in (step.get("env") or {}).items()},
            "GITHUB_OUTPUT": str(output),
        }
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(folder / "script.sh")],
            cwd=self.workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        self.logs.append(done.stdout + done.stderr)
        assert done.returncode == 0, f"step {step.get('name')!r} failed:\n{self.logs[-1]}"
        outputs: dict[str, str] = {}
        for line in output.read_text().splitlines():
            name, _, value = line.partition("=")
            outputs[name] = value
        return outputs


def offline_pip(env: dict[str, str]) -> dict[str, str]:
    site = sysconfig.get_paths()["purelib"]
    return {
        **env,
        "PIP_NO_INDEX": "1",
        "PIP_NO_DEPS": "1",
        "PIP_NO_BUILD_ISOLATION": "0",  # pip reads this "no" option inverted: 0 turns it off
        "PYTHONPATH": site,
    }


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    with sandbox_runner(tmp_path) as made:
        yield made


def job(
    r: Runner,
    *,
    action_path: Path,
    cache: dict[str, Path],
    event: str,
    payload: dict[str, Any],
    run_id: int,
) -> tuple[Composite, dict[str, str]]:
    """One job on a fresh runner: ``runner.temp`` starts empty, the cache store stays."""
    runner_env = r.env(event, payload, run_id, 1)
    temp = Path(runner_env["RUNNER_TEMP"])
    shutil.rmtree(temp)
    temp.mkdir()
    (temp / "summary.md").touch()
    base = {
        k: v
        for k, v in runner_env.items()
        if not k.startswith("AUTOLOOP_") and k not in ("GITHUB_TOKEN", "GITHUB_OUTPUT")
    }
    (temp / "event.json").write_text(json.dumps(payload))
    base["GITHUB_EVENT_PATH"] = str(temp / "event.json")
    base["GITHUB_STEP_SUMMARY"] = str(temp / "summary.md")
    composite = Composite(
        token=r.token,
        action_path=action_path,
        runner_temp=temp,
        workspace=r.workspace,
        base_env=offline_pip(base),
        inputs={"home": str(r.home), "mode": "triage"},
        cache=cache,
    )
    return composite, composite.run()


def test_the_composite_steps_install_run_and_answer_on_the_next_event(
    runner: Runner, tmp_path: Path
) -> None:
    r = runner
    action_path = copy_action(tmp_path / "actions" / "autoloop")
    cache: dict[str, Path] = {}
    number = r.gh.world.open_issue("reader", "Crash on start", body="It crashes.")

    first, outputs = job(
        r,
        action_path=action_path,
        cache=cache,
        event="issues",
        payload=r.issue_opened(number),
        run_id=8001,
    )
    assert outputs == spent_nothing(1, 1)
    venv = first.runner_temp / "autoloop-venv"
    assert (venv / "bin" / "autoloop").exists()
    assert "autoloop 0.1.0" in first.logs[1]  # installed, then asked for its version
    assert "autoloop: turn t1 (rule triage) starts" in first.logs[2]
    assert len(r.card_comments(number)) == 1
    assert len(cache) == 1  # saved by the post step, keyed by Python and the package's files

    # The next event is a new job on a fresh runner: the venv comes back from the cache.
    comment = r.gh.world.comment("maintainer", number, "/answer c1 1")
    second, outputs = job(
        r,
        action_path=action_path,
        cache=cache,
        event="issue_comment",
        payload=r.comment_created(number, comment),
        run_id=8002,
    )
    assert outputs == spent_nothing(1, 0)
    assert "(cached)" in second.logs[1]
    assert "bug" in r.labels(number)
    summary = Path(second.base_env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "| `/answer c1 1` | maintainer | taken |" in summary


def test_every_input_reaches_the_scripts_through_env_and_every_step_is_pinned_or_bash() -> None:
    data = action()
    for step in data["runs"]["steps"]:
        if "uses" in step:
            assert PINNED.match(step["uses"]), step["uses"]
            continue
        assert step["shell"] == "bash"
        assert "${{" not in step["run"]
    run_env = next(s for s in data["runs"]["steps"] if s.get("id") == "run")["env"]
    named = {m.group(1) for v in run_env.values() for m in EXPRESSION.finditer(str(v))}
    assert {f"inputs.{name}" for name in data["inputs"]} <= named
    assert set(data["outputs"]) == {"turns", "cards", "stage", "cost-usd", "tokens"}
    assert {
        "github-token",
        "app-id",
        "private-key",
        "rules",
        "home",
        "database-url",
        "mode",
    } == set(data["inputs"])


def test_the_cache_key_changes_with_the_package(tmp_path: Path) -> None:
    action_path = copy_action(tmp_path / "action")
    step = next(s for s in action()["runs"]["steps"] if s.get("id") == "key")

    def key() -> str:
        output = tmp_path / "output"
        output.write_text("")
        env = {
            "PATH": os.environ.get("PATH", ""),
            "ACTION_PATH": str(action_path),
            "PYTHON_VERSION": "3.11.9",
            "RUNNER_KIND": "Linux-X64",
            "GITHUB_OUTPUT": str(output),
        }
        subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], env=env, check=True)
        return output.read_text().strip().removeprefix("key=")

    first = key()
    assert first.startswith("autoloop-venv-Linux-X64-py3.11.9-")
    assert key() == first
    (action_path / "ghapp" / "commands" / "action.py").write_text("# changed\n")
    assert key() != first


def test_the_example_workflows_give_the_action_only_inputs_it_has() -> None:
    inputs = set(action()["inputs"])
    seen = 0
    for path in sorted((ROOT / "examples" / "workflows").glob("*.yml")):
        workflow = yaml.safe_load(path.read_text())
        assert workflow["permissions"] == {}, path.name
        for job in workflow["jobs"].values():
            for step in job["steps"]:
                uses = str(step.get("uses", ""))
                if uses.startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False, path.name
                if uses.startswith("OWNER/autoloop@"):
                    assert set(step["with"]) <= inputs, path.name
                    assert step["with"]["mode"] in ("triage", "deliver"), path.name
                    seen += 1
    assert seen == 4
