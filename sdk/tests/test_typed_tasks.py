"""Typed task references on the submit side: each kind of params model encoded, validated and
decoded; what a submit through a reference sends (declared defaults, overrides); what a wait
reads back (typed result, failures, results that do not fit)."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import httpx2
import msgspec
import pydantic
import pytest
from fake_orbit import CONFIG, FakeOrbit, ok
from test_sdk_tasks import task_json

import orbit_sdk
from orbit_sdk import (
    AsyncClient,
    Client,
    PayloadError,
    RetryPolicy,
    TaskFailedError,
    TaskHandle,
    TaskRef,
    task_ref,
)

WHEN = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def on_client(mode: str, fake: FakeOrbit, use: Callable[[Any], Any]) -> Any:
    """``use(client)`` on a Client (``mode`` "sync") or an AsyncClient (awaited) over ``fake``."""
    if mode == "sync":
        with Client.from_config(CONFIG, transport=httpx2.MockTransport(fake)) as client:
            return use(client)

    async def go() -> Any:
        transport = httpx2.MockTransport(fake)
        async with AsyncClient.from_config(CONFIG, transport=transport) as client:
            answer = use(client)
            return await answer if inspect.isawaitable(answer) else answer

    return asyncio.run(go())


class StructParams(msgspec.Struct, frozen=True):
    user: int
    at: datetime
    tags: list[str] = []


@dataclass(frozen=True)
class DataclassParams:
    user: int
    at: datetime
    tags: tuple[str, ...] = ()


class TypedDictParams(TypedDict):
    user: int
    at: datetime
    tags: list[str]


class Sent(msgspec.Struct, frozen=True):
    sent: bool
    to: str


class PydanticParams(pydantic.BaseModel):
    user: int
    at: datetime
    tags: list[str] = []


def make(kind: str) -> tuple[type[Any], Any]:
    """A params model of ``kind`` and a valid value of it (user 7, at WHEN, tags ["a"])."""
    if kind == "struct":
        return StructParams, StructParams(user=7, at=WHEN, tags=["a"])
    if kind == "dataclass":
        return DataclassParams, DataclassParams(user=7, at=WHEN, tags=("a",))
    if kind == "typeddict":
        return TypedDictParams, TypedDictParams(user=7, at=WHEN, tags=["a"])
    return PydanticParams, PydanticParams(user=7, at=WHEN, tags=["a"])


KINDS = ["struct", "dataclass", "typeddict", "pydantic"]
WIRE = {"user": 7, "at": "2026-12-01T09:30:00Z", "tags": ["a"]}


@pytest.mark.parametrize("kind", KINDS)
def test_params_encode_to_json_and_decode_back_as_the_model(kind: str) -> None:
    model, value = make(kind)
    ref = task_ref(queue="emails", type="send", params=model, result=Sent)

    encoded = ref.encode_params(value)
    decoded = ref.decode_params(msgspec.json.decode(msgspec.json.encode(encoded)))

    assert msgspec.json.decode(msgspec.json.encode(encoded)) == {
        **WIRE,
        "at": encoded["at"],
    }
    assert datetime.fromisoformat(encoded["at"]) == WHEN
    assert decoded == value
    if kind != "typeddict":
        assert type(decoded) is model


@pytest.mark.parametrize("kind", KINDS)
def test_params_that_do_not_fit_raise_invalid_params_naming_the_field(kind: str) -> None:
    model, _ = make(kind)
    ref = task_ref(queue="emails", type="send", params=model, result=Sent)

    with pytest.raises(PayloadError) as caught:
        ref.decode_params({"user": "seven", "at": "2026-12-01T09:30:00Z", "tags": []})

    assert caught.value.code == "invalid_params"
    assert isinstance(caught.value, ValueError)
    assert "user" in caught.value.message and "emails/send" in caught.value.message
    assert caught.value.details == {"task": "emails/send", "model": model.__qualname__}
    with pytest.raises(PayloadError, match="at"):
        ref.decode_params({"user": 7})


@pytest.mark.parametrize("kind", ["dataclass", "typeddict", "struct"])
def test_a_value_built_with_wrong_field_types_is_refused_before_sending(kind: str) -> None:
    """Dataclasses, TypedDicts and Structs do not check their fields when built: encode does."""
    model, _ = make(kind)
    ref = task_ref(queue="emails", type="send", params=model, result=Sent)
    if kind == "typeddict":
        bad: Any = {"user": "seven", "at": WHEN, "tags": []}
    else:
        bad = model(user="seven", at=WHEN)
    fake = FakeOrbit(ok(task_json(), 201))

    with pytest.raises(PayloadError, match=r"Expected `int`, got `str` - at `\$.user`"):
        on_client("sync", fake, lambda client: ref.submit(client, bad))
    assert fake.requests == []


def test_a_pydantic_instance_is_revalidated_when_encoded() -> None:
    ref = task_ref(queue="emails", type="send", params=PydanticParams, result=Sent)
    unchecked = PydanticParams.model_construct(user="seven", at=WHEN, tags=[])

    with pytest.raises(PayloadError, match="user") as caught:
        ref.encode_params(unchecked)
    assert caught.value.code == "invalid_params"


def test_results_of_plain_types_and_models_decode_and_check() -> None:
    ref = task_ref(queue="q", type="t", params=StructParams, result=list[int])
    assert ref.decode_result([1, 2]) == [1, 2]
    assert ref.encode_result([3]) == [3]
    with pytest.raises(PayloadError) as caught:
        ref.decode_result(["x"])
    assert caught.value.code == "invalid_result"
    none_ref = task_ref(queue="q", type="t", params=StructParams, result=type(None))
    assert none_ref.decode_result(None) is None


class Plain:
    """Not a type msgspec can decode."""


def test_a_params_model_must_be_an_object_model_and_a_result_a_known_type() -> None:
    with pytest.raises(TypeError, match="params must be a msgspec Struct"):
        task_ref(queue="q", type="t", params=int, result=int)
    with pytest.raises(TypeError, match="cannot be a task's model"):
        task_ref(queue="q", type="t", params=StructParams, result=Plain)
    with pytest.raises(TypeError, match="unknown task defaults: idempotency_key"):
        task_ref(queue="q", type="t", params=StructParams, result=int, idempotency_key="k")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="side_effect"):
        task_ref(queue="q", type="t", params=StructParams, result=int, side_effect="maybe")  # type: ignore[typeddict-item]


# --- submit and wait -----------------------------------------------------------------------


SEND: TaskRef[StructParams, Sent] = task_ref(
    queue="emails",
    type="send",
    params=StructParams,
    result=Sent,
    version="2",
    priority=3,
    side_effect="unsafe",
    retry=RetryPolicy(max_attempts=5),
    timeout_ms=10_000,
    labels={"team": "growth", "tier": "free"},
)
PARAMS = StructParams(user=7, at=WHEN, tags=["a"])
WIRE_PARAMS = {"user": 7, "at": "2026-12-01T09:30:00Z", "tags": ["a"]}


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def submit(mode: str, fake: FakeOrbit, params: Any, **options: Any) -> TaskHandle[Sent]:
    if mode == "sync":
        return on_client(mode, fake, lambda c: SEND.submit(c, params, **options))  # type: ignore[no-any-return]
    return on_client(mode, fake, lambda c: SEND.submit_async(c, params, **options))  # type: ignore[no-any-return]


def test_a_submit_sends_the_encoded_params_and_the_declared_defaults(mode: str) -> None:
    fake = FakeOrbit(ok(task_json(id="tsk_1"), 201))

    handle = submit(mode, fake, PARAMS)

    assert (fake.last.method, fake.last.url.path) == ("POST", "/v1/tasks")
    assert fake.body() == {
        "queue": "emails",
        "type": "send",
        "params": WIRE_PARAMS,
        "priority": 3,
        "side_effect": "unsafe",
        "handler_version": "2",
        "retry": {"max_attempts": 5},
        "timeout_ms": 10_000,
        "labels": {"team": "growth", "tier": "free"},
    }
    assert isinstance(handle, TaskHandle) and handle.id == "tsk_1" and handle.ref is SEND


def test_a_submit_overrides_declared_defaults_and_merges_labels(mode: str) -> None:
    fake = FakeOrbit(ok(task_json(), 201))
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    submit(
        mode,
        fake,
        PARAMS,
        priority=9,
        side_effect="idempotent",
        handler_version="3",
        idempotency_key="send-7",
        labels={"tier": "paid"},
        traceparent=traceparent,
    )

    body = fake.body()
    assert (body["priority"], body["side_effect"], body["handler_version"]) == (
        9,
        "idempotent",
        "3",
    )
    assert body["idempotency_key"] == "send-7"
    assert body["labels"] == {"team": "growth", "tier": "paid"}
    assert body["retry"] == {"max_attempts": 5}
    assert fake.last.headers["traceparent"] == traceparent


def test_a_submit_refuses_unknown_options_and_bad_params_before_sending(mode: str) -> None:
    fake = FakeOrbit(ok(task_json(), 201))
    with pytest.raises(TypeError, match="unknown submit options: priorty"):
        submit(mode, fake, PARAMS, priorty=9)
    with pytest.raises(PayloadError) as caught:
        submit(mode, fake, StructParams(user="7", at=WHEN))  # type: ignore[arg-type]
    assert caught.value.code == "invalid_params"
    assert fake.requests == []


def test_a_declared_delay_gives_way_to_a_submits_run_at() -> None:
    ref = task_ref(queue="q", type="t", params=StructParams, result=Sent, delay_ms=5000)
    assert ref.request(PARAMS).delay_ms == 5000
    request = ref.request(PARAMS, run_at=WHEN)
    assert (request.run_at, request.delay_ms) == (WHEN, None)


def test_submit_many_sends_one_batch_in_order(mode: str) -> None:
    fake = FakeOrbit(ok({"tasks": [task_json(id="tsk_1"), task_json(id="tsk_2")]}, 201))
    second = StructParams(user=8, at=WHEN)

    if mode == "sync":
        handles = on_client(mode, fake, lambda c: SEND.submit_many(c, [PARAMS, second]))
    else:
        handles = on_client(mode, fake, lambda c: SEND.submit_many_async(c, [PARAMS, second]))

    assert fake.last.url.path == "/v1/tasks:batch"
    items = fake.body()["tasks"]
    assert [item["params"]["user"] for item in items] == [7, 8]
    assert all(item["priority"] == 3 for item in items)
    assert [handle.id for handle in handles] == ["tsk_1", "tsk_2"]
    with pytest.raises(TypeError, match="idempotency_key"):
        on_client("sync", fake, lambda c: SEND.submit_many(c, [PARAMS], idempotency_key="k"))


def wait(mode: str, fake: FakeOrbit, task: Any) -> Any:
    if mode == "sync":
        return on_client(mode, fake, lambda c: SEND.wait(c, task, timeout=5))
    return on_client(mode, fake, lambda c: SEND.wait_async(c, task, timeout=5))


def test_wait_returns_a_succeeded_tasks_result_as_the_result_model(mode: str) -> None:
    done = task_json(id="tsk_1", state="succeeded", result={"sent": True, "to": "ada"})
    fake = FakeOrbit(ok(done))

    result = wait(mode, fake, "tsk_1")

    assert result == Sent(sent=True, to="ada")
    assert fake.last.url.path == "/v1/tasks/tsk_1"
    handle = TaskHandle(msgspec.convert(task_json(id="tsk_1"), type=orbit_sdk.Task), SEND)
    assert wait(mode, fake, handle) == Sent(sent=True, to="ada")


@pytest.mark.parametrize(
    ("state", "error", "code"),
    [
        ("failed", {"code": "smtp_down", "message": "no route", "retryable": True}, "smtp_down"),
        ("cancelled", None, "task_cancelled"),
        ("needs_review", None, "task_needs_review"),
    ],
)
def test_wait_raises_task_failed_for_a_task_that_did_not_succeed(
    mode: str, state: str, error: Any, code: str
) -> None:
    fake = FakeOrbit(ok(task_json(id="tsk_1", state=state, error=error)))

    with pytest.raises(TaskFailedError) as caught:
        wait(mode, fake, "tsk_1")

    assert (caught.value.code, caught.value.state) == (code, state)
    assert caught.value.task.id == "tsk_1"
    assert f"ended {state}" in caught.value.message


def test_wait_raises_invalid_result_for_a_result_that_does_not_fit(mode: str) -> None:
    fake = FakeOrbit(ok(task_json(id="tsk_1", state="succeeded", result={"sent": "yes"})))

    with pytest.raises(PayloadError) as caught:
        wait(mode, fake, "tsk_1")

    assert caught.value.code == "invalid_result"


def test_the_model_kinds_example_prints_the_same_params_and_refuses_bad_ones() -> None:
    """``sdk/examples/typed_models.py``, run as docs/typed-tasks.md says (no server)."""
    example = Path(__file__).resolve().parents[1] / "examples" / "typed_models.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:4] == ["{'url': 'a.png', 'width': 64}"] * 4
    assert lines[4] == (
        "invalid_params images/resize: the params do not fit ResizeDataclass: "
        "Expected `int`, got `str` - at `$.width`"
    )
    assert lines[5] == "invalid_params {'task': 'images/resize', 'model': 'ResizeModel'}"
    assert len(lines) == 6
