"""``sdk/examples/worker_basic.py`` run as users run it: ``orbit-worker`` in a process of its own,
against a fake node, stopped by SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest
from test_worker_support import TIMEOUT, FakeServer, delivery

SDK = Path(__file__).resolve().parents[1]
ORBIT_WORKER = Path(sys.executable).with_name("orbit-worker")


@pytest.mark.parametrize("target", ["examples.worker_basic:worker", "examples/worker_basic.py"])
async def test_the_basic_example_runs_both_handlers_and_stops_on_sigterm(target: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")}
    async with FakeServer() as server:
        process = await asyncio.create_subprocess_exec(
            str(ORBIT_WORKER),
            target,
            "--url",
            server.url,
            "--api-key",
            "example-key",
            cwd=SDK,
            env=env,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            conn = await asyncio.wait_for(server.accept(), TIMEOUT * 2)
            hello = await conn.welcome()
            assert hello["handlers"] == [
                {"queue": "examples", "type": "add", "versions": []},
                {"queue": "examples", "type": "greet", "versions": []},
            ]
            items = [
                delivery("tsk_add", queue="examples", type="add", params={"a": 2, "b": 3}),
                delivery("tsk_greet", queue="examples", type="greet", params={"name": "Ada"}),
                delivery("tsk_bad", queue="examples", type="add", params={"a": "x"}),
            ]
            await conn.send({"type": "tasks", "items": items})
            await conn.start_all()
            results = await conn.results(3)
            assert results["tsk_add"]["result"] == {"sum": 5}
            assert results["tsk_greet"]["result"] == {"greeting": "Hello, Ada!"}
            error = results["tsk_bad"]["error"]
            assert (error["code"], error["retryable"]) == ("bad_params", False)

            process.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(process.communicate(), TIMEOUT)
            assert process.returncode == 0, stderr.decode()
            await asyncio.wait_for(conn.closed.wait(), TIMEOUT)
            assert conn.ws.close_code == 1000
            assert b"stopping gracefully" in stderr
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
