"""The SDK's workflow examples run as docs/workflows.md tells users to run them: ``orbit dev``,
the example's worker under ``orbit-worker``, and the example's script under ``python``, each
in a process of its own. The script's printed lines are the assertions."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import OrbitProcess, clean_env

EXAMPLES = Path(__file__).resolve().parents[3] / "sdk" / "examples"
ORBIT_WORKER = Path(sys.executable).parent / "orbit-worker"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One ``orbit dev`` for the examples (each uses its own definition and task types)."""
    data = tmp_path_factory.mktemp("orbit-dev") / "data"
    server = OrbitProcess(["dev", "--data-dir", str(data), "--port", "0"])
    try:
        announced = server.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        yield {"ORBIT_URL": announced["ORBIT_URL"], "ORBIT_API_KEY": announced["ORBIT_API_KEY"]}
    finally:
        assert server.stop() == 0


def run_example(dev: dict[str, str], name: str) -> list[str]:
    """Start the example's worker, run its script, stop the worker; the script's lines."""
    example = EXAMPLES / name
    worker = OrbitProcess.command([str(ORBIT_WORKER), str(example)], env=dev)
    try:
        # Until the worker is connected: stopped before it has set up its signal handlers (a
        # script that answers at once, on a busy machine), it would die of the SIGTERM.
        deadline = time.monotonic() + 30
        while "connected to node" not in worker.stderr:
            assert worker.proc.poll() is None, worker.stderr
            assert time.monotonic() < deadline, worker.stderr
            time.sleep(0.02)
        done = subprocess.run(
            [sys.executable, str(example)],
            capture_output=True,
            text=True,
            timeout=60,
            env=clean_env(dev),
            check=False,
        )
    finally:
        assert worker.stop() == 0, worker.stderr
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def split(line: str, words: int) -> tuple[list[str], Any]:
    """The first ``words`` words of a printed line, and the Python value printed after them."""
    parts = line.split(" ", words)
    return parts[:words], ast.literal_eval(parts[words])


def test_the_order_example_approves_the_large_order_and_ships_both(dev: dict[str, str]) -> None:
    lines = run_example(dev, "workflow_order.py")

    assert len(lines) == 2
    assert split(lines[0], 2) == (
        ["o-17", "succeeded"],
        {
            "receipt": "r-o-17",
            "shipped": {
                "label": "label-o-17.pdf",
                "mail": {"to": "ada@example.com", "template": "order-shipped"},
            },
            "approved_by": "ana",  # the signal sent before "approve" waited
        },
    )
    words, output = split(lines[1], 2)
    assert words == ["o-18", "succeeded"]
    assert (output["receipt"], output["approved_by"]) == ("r-o-18", "nobody")  # no approval
    # Run again, the script's idempotency keys answer the instances it started the first time.
    assert run_example(dev, "workflow_order.py") == lines


def test_the_album_example_maps_the_images_and_polls_until_live(dev: dict[str, str]) -> None:
    lines = run_example(dev, "workflow_album.py")

    images = [f"https://img.example/a-1/{n}.jpg?w=320" for n in range(5)]
    assert split(lines[0], 1) == (["succeeded"], {"thumbnails": images, "rounds": 3})
    assert lines[1].split() == [
        "thumbnails", *(f"thumbnails:i{n}" for n in range(5)),
        "published", "published:r1", "published:r2", "published:r3",
        "done",
    ]  # fmt: skip
    assert len(lines) == 2


def test_the_recovery_example_repairs_three_signups(dev: dict[str, str]) -> None:
    lines = run_example(dev, "workflow_recovery.py")

    assert lines[:3] == [
        "ada: failed mail_unavailable at welcome",
        "ada: running waits for ['confirmed']",
        "ada: paused control_version 2",  # one for the step's retry, one for the pause
    ]
    assert split(lines[3], 2) == (["ada:", "succeeded"], {"account": "acc-ada", "welcomed": True})
    assert lines[4:8] == [
        "bob: failed mailbox_unknown at welcome",
        "bob: running waits for ['confirmed']",
        "bob: cancelled",
        "carol: needs_review ['create']",
    ]
    assert split(lines[8], 2) == (
        ["carol:", "succeeded"],
        {"account": "acc-carol", "welcomed": True},
    )
    assert len(lines) == 9
