"""Typed handlers on a real worker runtime against a fake node: ``@worker.task`` and
``@worker.implement`` register them, params arrive decoded as the model, results leave
encoded, and params or results that do not fit fail the attempt without retry."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, TypedDict

import msgspec
import pytest
from test_worker_support import FakeServer, delivery, running

from orbit_sdk import RetryPolicy, TaskRef, task_ref
from orbit_sdk.worker import TaskContext, Worker


class AddParams(msgspec.Struct, frozen=True):
    a: int
    b: int


class AddResult(msgspec.Struct, frozen=True):
    sum: int


@dataclass(frozen=True)
class GreetParams:
    name: str


class Greeting(TypedDict):
    greeting: str


ADD = task_ref(queue="q", type="add", params=AddParams, result=AddResult, side_effect="unsafe")
GREET = task_ref(queue="q", type="greet", params=GreetParams, result=Greeting, version="2")

UNSAFE: dict[str, Any] = {"side_effect": "unsafe"}


def make_worker(server: FakeServer) -> Worker:
    return Worker(server.url, "test-key", worker_id="w-test")


async def run_tasks(worker: Worker, server: FakeServer, items: list[Any]) -> dict[str, Any]:
    async with running(worker):
        conn = await server.accept()
        await conn.welcome()
        await conn.send({"type": "tasks", "items": items})
        await conn.start_all()
        return await conn.results(len(items))


async def test_implemented_handlers_get_the_model_and_their_results_are_encoded() -> None:
    seen: list[tuple[Any, str]] = []
    async with FakeServer() as server:
        worker = make_worker(server)

        @worker.implement(ADD)
        def add(params: AddParams, ctx: TaskContext) -> AddResult:  # sync, with the context
            seen.append((params, ctx.task_id))
            return AddResult(sum=params.a + params.b)

        @worker.implement(GREET)
        async def greet(params: GreetParams) -> Greeting:  # async, params only
            await asyncio.sleep(0)
            seen.append((params, "greet"))
            return {"greeting": f"Hello, {params.name}"}

        results = await run_tasks(
            worker,
            server,
            [
                delivery("tsk_add", type="add", params={"a": 2, "b": 3}, side_effect="unsafe"),
                delivery("tsk_greet", type="greet", params={"name": "Ada"}, handler_version="2"),
            ],
        )

    assert results["tsk_add"]["outcome"] == "succeeded"
    assert results["tsk_add"]["result"] == {"sum": 5}
    assert results["tsk_greet"]["result"] == {"greeting": "Hello, Ada"}
    assert sorted(seen, key=str) == sorted(
        [(AddParams(a=2, b=3), "tsk_add"), (GreetParams(name="Ada"), "greet")], key=str
    )
    # implement returns the handler itself: a unit test can still call it
    assert await greet(GreetParams(name="Bo")) == {"greeting": "Hello, Bo"}


async def test_params_or_results_that_do_not_fit_fail_without_retry() -> None:
    calls: list[AddParams] = []
    async with FakeServer() as server:
        worker = make_worker(server)

        @worker.implement(ADD)
        def add(params: AddParams) -> AddResult:
            calls.append(params)
            return {"sum": "many"}  # type: ignore[return-value]

        results = await run_tasks(
            worker,
            server,
            [
                delivery("tsk_bad", type="add", params={"a": "two", "b": 3}, **UNSAFE),
                delivery("tsk_none", type="add", params=None, **UNSAFE),
                delivery("tsk_result", type="add", params={"a": 1, "b": 2}, **UNSAFE),
            ],
        )

    assert calls == [AddParams(a=1, b=2)]  # the handler never saw the bad params
    bad = results["tsk_bad"]["error"]
    assert (results["tsk_bad"]["outcome"], bad["code"], bad["retryable"]) == (
        "failed",
        "invalid_params",
        False,
    )
    assert "Expected `int`, got `str` - at `$.a`" in bad["message"]
    assert "q/add" in bad["message"]
    assert results["tsk_none"]["error"]["code"] == "invalid_params"
    wrong = results["tsk_result"]["error"]
    assert (wrong["code"], wrong["retryable"]) == ("invalid_result", False)


async def test_worker_task_registers_the_handler_and_returns_its_typed_reference() -> None:
    async with FakeServer() as server:
        worker = make_worker(server)

        @worker.task(queue="q", type="double", version="3", retry=RetryPolicy(max_attempts=2))
        def double(params: AddParams) -> int:
            return params.a * 2

        assert isinstance(double, TaskRef)
        assert (double.queue, double.type, double.version) == ("q", "double", "3")
        assert (double.params_model, double.result_model) == (AddParams, int)
        assert repr(double) == "TaskRef('q', 'double', params=AddParams, result=int, version='3')"
        assert double.defaults == {"retry": RetryPolicy(max_attempts=2)}
        assert double.request(AddParams(a=1, b=0)).handler_version == "3"

        async with running(worker):
            conn = await server.accept()
            hello = await conn.welcome()
            assert hello["handlers"] == [{"queue": "q", "type": "double", "versions": ["3"]}]
            item = delivery("tsk_1", type="double", params={"a": 21, "b": 0}, handler_version="3")
            await conn.send({"type": "tasks", "items": [item]})
            await conn.start_all()
            results = await conn.results(1)

    assert results["tsk_1"]["result"] == 42


def test_a_declared_side_effect_registers_the_handler_as_unsafe() -> None:
    worker = Worker("http://orbit.test", "k")

    @worker.implement(ADD)
    def add(params: AddParams) -> AddResult:
        return AddResult(sum=0)

    spec = worker._registry.pick("q", "add", None)
    assert spec is not None and spec.side_effect == "unsafe" and not spec.is_async


def test_typed_handlers_need_annotations_and_one_or_two_parameters() -> None:
    worker = Worker("http://orbit.test", "k")

    def untyped(params):  # type: ignore[no-untyped-def]
        return None

    def no_return(params: AddParams):  # type: ignore[no-untyped-def]
        return None

    def three(params: AddParams, ctx: TaskContext, extra: int) -> None: ...

    with pytest.raises(TypeError, match="annotate the params parameter 'params'"):
        worker.task(queue="q", type="a")(untyped)
    with pytest.raises(TypeError, match="annotate the return type"):
        worker.task(queue="q", type="b")(no_return)
    with pytest.raises(TypeError, match="not 3 positional parameters"):
        worker.task(queue="q", type="c")(three)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="params must be a msgspec Struct"):

        @worker.task(queue="q", type="d")
        def takes_int(params: int) -> int:
            return params

    assert len(worker._registry) == 0
