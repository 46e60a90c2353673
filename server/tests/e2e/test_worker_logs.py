"""A real ``orbit-worker`` at ``--log-level debug`` against a real ``orbit dev`` server: its
whole log never holds the API key (websockets logs the upgrade request's headers at DEBUG),
and a failing handler is logged once with the task's identity and its traceback."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import orbit_sdk
from orbit_sdk import RetryPolicy
from tests.support.processes import OrbitProcess

APP = """
from orbit_sdk.worker import NonRetryableError, TaskContext, Worker

worker = Worker()


@worker.handler(queue="logs", type="ok")
def ok(ctx: TaskContext) -> dict:
    ctx.logger.debug("running with params %s", ctx.params)
    return {"ok": True}


@worker.handler(queue="logs", type="boom")
def boom(ctx: TaskContext) -> None:
    raise NonRetryableError("the input is wrong", code="bad_input")
"""


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[tuple[str, str]]:
    server = OrbitProcess(["dev", "--data-dir", str(tmp_path / "data"), "--port", "0"])
    try:
        announced = server.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        yield announced["ORBIT_URL"], announced["ORBIT_API_KEY"]
    finally:
        server.stop()


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_debug_log_never_holds_the_key_and_shows_each_failure(
    dev: tuple[str, str], tmp_path: Path, log_format: str
) -> None:
    url, key = dev
    (tmp_path / "logs_app.py").write_text(APP)
    orbit_worker = str(Path(sys.executable).parent / "orbit-worker")
    worker = OrbitProcess.command(
        [orbit_worker, "logs_app:worker", "--url", url, "--log-level", "debug"],
        env={"ORBIT_API_KEY": key, "ORBIT_LOG_FORMAT": log_format, "PYTHONPATH": str(tmp_path)},
    )
    try:
        with orbit_sdk.Client(url, key) as client:
            ok = client.submit("logs", "ok", {"n": 1})
            boom = client.submit("logs", "boom", {}, retry=RetryPolicy(max_attempts=1))
            assert client.wait_for_task(ok.id, timeout=30).state == "succeeded"
            assert client.wait_for_task(boom.id, timeout=30).state == "failed"
    finally:
        assert worker.stop() == 0
    log = worker.stderr
    assert key not in log
    assert key.rsplit("_", 1)[-1] not in log  # not even the key's secret part
    # The handshake's headers were logged, masked: the test looked where the key would be.
    assert "Authorization: Bearer ***" in log
    failures = [line for line in log.splitlines() if "handler failed" in line]
    assert len(failures) == 1
    if log_format == "json":
        lines = [json.loads(line) for line in log.splitlines()]
        [failure] = [line for line in lines if line["message"].startswith("handler failed")]
        assert failure["level"] == "ERROR"
        assert (failure["task_id"], failure["attempt"], failure["queue"]) == (boom.id, 1, "logs")
        assert failure["task_type"] == "boom"
        assert "NonRetryableError: the input is wrong" in failure["exception"]
        assert 'raise NonRetryableError("the input is wrong"' in failure["exception"]
    else:
        assert f"ERROR orbit_sdk.worker.task: handler failed on task {boom.id} attempt 1" in log
        assert "Traceback (most recent call last)" in log
