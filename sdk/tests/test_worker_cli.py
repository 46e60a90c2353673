"""``orbit-worker``: its options, how it finds the Worker, and a run through ``main``."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest
from test_worker_support import TIMEOUT, FakeServer

from orbit_sdk import ConfigurationError
from orbit_sdk.worker import Worker
from orbit_sdk.worker._cli import build_parser, load_worker, main

WORKER_MODULE = """
from orbit_sdk.worker import Worker

worker = Worker()
other = Worker(concurrency=3)
not_a_worker = 42


@worker.handler(queue="q", type="t")
def handle(ctx):
    return ctx.params
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory, made the current one, with a unique module in it."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "workers.py").write_text(textwrap.dedent(WORKER_MODULE))
    return tmp_path


def test_options_are_parsed() -> None:
    args = build_parser().parse_args(
        [
            "app.workers:worker",
            "--url",
            "http://a",
            "--url",
            "http://b",
            "--api-key",
            "k",
            "--concurrency",
            "8",
            "--worker-id",
            "w-1",
            "--log-level",
            "debug",
        ]
    )
    assert args.target == "app.workers:worker"
    assert args.urls == ["http://a", "http://b"]
    assert (args.api_key, args.concurrency, args.worker_id, args.log_level) == (
        "k",
        8,
        "w-1",
        "debug",
    )
    defaults = build_parser().parse_args(["app.workers"])
    assert (defaults.urls, defaults.api_key, defaults.concurrency) == (None, None, None)
    assert defaults.log_level == "info"


@pytest.mark.parametrize(
    "bad",
    [["t", "--concurrency", "0"], ["t", "--prefetch", "-1"], ["t", "--log-level", "loud"], []],
)
def test_bad_options_exit_with_usage(bad: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(bad)
    assert caught.value.code == 2


@pytest.mark.usefixtures("project")
def test_module_and_attribute_are_loaded() -> None:
    assert load_worker("app.workers:other").concurrency == 3
    default = load_worker("app.workers")
    assert isinstance(default, Worker) and default is load_worker("app.workers:worker")


def test_a_file_path_is_loaded(project: Path) -> None:
    assert load_worker("app/workers.py:other").concurrency == 3
    assert isinstance(load_worker(str(project / "app" / "workers.py")), Worker)


@pytest.mark.usefixtures("project")
@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("app.workers:missing", "no attribute"),
        ("app.workers:not_a_worker", "not an orbit Worker"),
        ("app.nowhere:worker", "cannot import"),
        ("app/nowhere.py", "no such file"),
    ],
)
def test_a_wrong_target_is_a_configuration_error(target: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_worker(target)
    assert main([target]) == 2


@pytest.mark.usefixtures("project")
async def test_main_applies_the_options_and_runs_the_worker() -> None:
    async with FakeServer() as server:
        argv = [
            "app.workers:worker",
            "--url",
            f"http://127.0.0.1:1,{server.url}",  # several URLs in one value: the first refuses
            "--api-key",
            "cli-key",
            "--concurrency",
            "5",
            "--prefetch",
            "2",
            "--worker-id",
            "cli-worker",
        ]
        run = asyncio.create_task(asyncio.to_thread(main, argv))
        conn = await server.accept()
        hello = await conn.welcome()
        assert conn.headers["Authorization"] == "Bearer cli-key"
        assert (hello["worker_id"], hello["capacity"]) == ("cli-worker", 5)  # nothing ran yet
        assert load_worker("app.workers:worker").prefetch == 2
        load_worker("app.workers:worker").stop()  # the same object main runs; any thread
        assert await asyncio.wait_for(run, TIMEOUT) == 0


@pytest.mark.usefixtures("project")
async def test_main_exits_1_when_the_server_refuses_the_worker() -> None:
    async with FakeServer() as server:
        argv = ["app.workers", "--url", server.url, "--api-key", "k"]
        run = asyncio.create_task(asyncio.to_thread(main, argv))
        conn = await server.accept()
        await conn.expect("hello")
        await conn.close(4403, "forbidden queue")
        assert await asyncio.wait_for(run, TIMEOUT) == 1


def test_log_format_comes_from_the_option_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert build_parser().parse_args(["t", "--log-format", "json"]).log_format == "json"
    assert build_parser().parse_args(["t"]).log_format is None  # then ORBIT_LOG_FORMAT, text
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["t", "--log-format", "xml"])
    assert caught.value.code == 2
    monkeypatch.setenv("ORBIT_LOG_FORMAT", "yaml")
    with pytest.raises(SystemExit) as caught:
        main(["app.workers"])
    assert caught.value.code == 2
