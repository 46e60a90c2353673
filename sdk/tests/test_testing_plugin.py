"""The pytest plugin of ``orbit_sdk.testing``, as a user meets it: a small project run by a
pytest of its own (a child process) against a real ``orbit dev --testing``: the testing guide's
tests pass, a handler that fails is reported as a failing test, and a project that uses no
fixture starts no server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from orbit_sdk.testing import ServerNotInstalled
from orbit_sdk.testing._faults import Fault, FaultPlan
from orbit_sdk.testing._server import SERVER_COMMAND_ENV, server_command

EXAMPLE = Path(__file__).parents[1] / "examples" / "testing"
INI = "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"

BROKEN = """
from orbit_sdk import RetryPolicy
from orbit_sdk.testing import OrbitTest
from orbit_sdk.worker import TaskContext, Worker

worker = Worker()


@worker.handler(queue="broken", type="divide")
def divide(ctx: TaskContext) -> float:
    return ctx.params["a"] / ctx.params["b"]


def test_the_division_succeeds(orbit: OrbitTest) -> None:
    with orbit.worker(worker):
        once = RetryPolicy(max_attempts=1)
        task = orbit.run_task("broken", "divide", {"a": 1, "b": 0}, retry=once)
    assert task.state == "succeeded", task.error
"""


def run_pytest(project: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """Run pytest in ``project``; each test's outcome by name: ``passed``, or ``failure``,
    ``error`` or ``skipped`` followed by its message."""
    report = project / "report.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={report}",
         *args],
        cwd=project,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )  # fmt: skip
    assert report.exists(), done.stdout + done.stderr
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314 - pytest's own report
        kinds = [
            f"{child.tag}: {child.attrib.get('message', '')}"
            for child in case
            if child.tag in ("failure", "error", "skipped")
        ]
        outcomes[case.attrib["name"]] = kinds[0] if kinds else "passed"
    return outcomes


def test_the_guide_passes_and_a_failing_handler_fails(tmp_path: Path) -> None:
    for source in EXAMPLE.glob("*.py"):
        shutil.copy(source, tmp_path / source.name)
    (tmp_path / "test_broken.py").write_text(BROKEN)
    (tmp_path / "pytest.ini").write_text(INI)
    outcomes = run_pytest(tmp_path)
    broken = outcomes.pop("test_the_division_succeeds")
    assert len(outcomes) == 10
    assert set(outcomes.values()) == {"passed"}, outcomes
    assert broken.startswith("failure: AssertionError: TaskError(code='ZeroDivisionError'"), broken


def test_no_server_starts_unless_a_fixture_asks(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text(INI)
    (tmp_path / "test_plain.py").write_text("def test_plain() -> None:\n    assert True\n")
    (tmp_path / "test_server.py").write_text("def test_server(orbit) -> None:\n    pass\n")
    # a command that cannot run: only the test that asks for a fixture meets it
    outcomes = run_pytest(tmp_path, env={SERVER_COMMAND_ENV: str(tmp_path / "no-such-orbit")})
    assert outcomes["test_plain"] == "passed"
    assert outcomes["test_server"].startswith("error: failed on setup"), outcomes
    report = (tmp_path / "report.xml").read_text()
    assert "ServerNotInstalled" in report and "install the orbit-server distribution" in report


def test_a_missing_server_command_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    with pytest.raises(ServerNotInstalled, match=r"pip install orbit-server"):
        server_command({})
    assert server_command({SERVER_COMMAND_ENV: "python -m orbit_server"}) == [
        "python", "-m", "orbit_server"
    ]  # fmt: skip


def test_faults_meet_attempts_in_order() -> None:
    plan = FaultPlan()
    boom = RuntimeError("boom")
    plan.add("q", "t", Fault("fail", boom), times=2)
    plan.add("q", "t", Fault("lose"), times=1)
    assert plan.pending("q", "t") == 3
    assert plan.take("q", "other") is None
    taken = [plan.take("q", "t") for _ in range(4)]
    assert taken == [Fault("fail", boom), Fault("fail", boom), Fault("lose"), None]
    with pytest.raises(ValueError, match="times"):
        plan.add("q", "t", Fault("lose"), times=0)


def test_the_plugin_lists_its_fixtures(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text(INI)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--fixtures", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    names = {line.split()[0] for line in done.stdout.splitlines() if line.startswith("orbit")}
    assert {"orbit_server", "orbit", "orbit_client", "orbit_worker"} <= names, done.stdout


def test_every_python_example_of_the_guide_is_a_tested_file() -> None:
    """The guide's Python blocks quote the example project that the first test runs (the
    docs suite checks that each quote is the text of its file)."""
    guide = (Path(__file__).parents[2] / "docs" / "testing.md").read_text()
    blocks = guide.split("```python\n")[1:]
    quoted = guide.count("<!-- quote: sdk/examples/testing/")
    assert len(blocks) == quoted >= 8
