"""Typed tasks end to end, as docs/typed-tasks.md tells users to run them: ``orbit dev``, the
example worker under ``orbit-worker``, and the example submitter under ``python``, each in a
process of its own; then a reference declared by its handler, submitted from this process."""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import orbit_sdk
from tests.support.processes import OrbitProcess, clean_env

EXAMPLES = Path(__file__).resolve().parents[3] / "sdk" / "examples"
ORBIT_WORKER = Path(sys.executable).parent / "orbit-worker"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    data = tmp_path_factory.mktemp("orbit-dev") / "data"
    server = OrbitProcess(["dev", "--data-dir", str(data), "--port", "0"])
    try:
        announced = server.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        yield {"ORBIT_URL": announced["ORBIT_URL"], "ORBIT_API_KEY": announced["ORBIT_API_KEY"]}
    finally:
        assert server.stop() == 0


@pytest.fixture(scope="module")
def worker(dev: dict[str, str]) -> Iterator[OrbitProcess]:
    """``orbit-worker sdk/examples/typed_worker.py``, connected."""
    process = OrbitProcess.command([str(ORBIT_WORKER), str(EXAMPLES / "typed_worker.py")], env=dev)
    try:
        deadline = time.monotonic() + 30
        while "connected to node" not in process.stderr:
            assert process.proc.poll() is None, process.stderr
            assert time.monotonic() < deadline, process.stderr
            time.sleep(0.02)
        yield process
    finally:
        assert process.stop() == 0, process.stderr


def test_the_submitter_gets_typed_results_and_the_worker_refuses_bad_params(
    dev: dict[str, str], worker: OrbitProcess
) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "typed_submit.py")],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(dev),
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "add 5 5",  # the sum, and the declared retry policy's max_attempts
        "urgent 42 10",  # the submit's own priority over the default
        "greet Hello, Ada!",
        "batch [0, 2, 4]",
        "refused invalid_params 1",  # failed at its first attempt, no retry
        "async 7",
    ]
    assert "adding 2 and 3" in worker.stderr


def test_a_reference_declared_by_its_handler_submits_and_waits(
    dev: dict[str, str], worker: OrbitProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    typed_worker = importlib.import_module("typed_worker")  # as a web app sharing the code would
    try:
        with orbit_sdk.Client(dev["ORBIT_URL"], dev["ORBIT_API_KEY"]) as client:
            handle = typed_worker.double.submit(client, typed_worker.DoubleParams(n=21))
            assert handle.task.priority == 5  # declared with @worker.task
            assert handle.wait(client, timeout=60) == 42
            task = client.get_task(handle.id)
            assert (task.state, task.params, task.result) == ("succeeded", {"n": 21}, 42)
    finally:
        for name in ("typed_worker", "typed_defs"):
            sys.modules.pop(name, None)
