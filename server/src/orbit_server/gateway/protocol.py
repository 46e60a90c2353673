"""The worker protocol's frames (docs/protocol.md): JSON text frames tagged by ``type``.

Frames a worker sends are validated strictly (types, lengths, ranges); fields this version
does not know are ignored so that a newer SDK may add optional ones. The JSON Schema in
``contracts/worker-protocol.schema.json`` is generated from these structs.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS = frozenset({PROTOCOL_VERSION})

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
TaskId = Annotated[str, msgspec.Meta(min_length=1, max_length=40)]
Attempt = Annotated[int, msgspec.Meta(ge=1)]
Token = Annotated[str, msgspec.Meta(min_length=1, max_length=40)]
RequestId = Annotated[int, msgspec.Meta(ge=0)]
MAX_ITEMS = 1000
MAX_PROGRESS_BYTES = 4096  # a heartbeat item's progress, as JSON


class Frame(msgspec.Struct, tag_field="type", kw_only=True, omit_defaults=True):
    """Base of every frame; ``type`` is the tag."""


class Ref(msgspec.Struct, kw_only=True):
    """One attempt a worker holds: fenced by the attempt number and its lease token."""

    task_id: TaskId
    attempt: Attempt
    lease_token: Token


# -- worker → server --------------------------------------------------------------------------


Version = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class Handler(msgspec.Struct, kw_only=True):
    queue: Name
    type: Name
    versions: Annotated[list[Version], msgspec.Meta(max_length=50)] = []


class Hello(Frame, tag="hello"):
    protocol: Annotated[list[int], msgspec.Meta(min_length=1, max_length=16)]
    worker_id: Name
    handlers: Annotated[list[Handler], msgspec.Meta(min_length=1, max_length=200)]
    capacity: Annotated[int, msgspec.Meta(ge=0)]
    held: Annotated[list[Ref], msgspec.Meta(max_length=10_000)] = []
    sdk: Annotated[str, msgspec.Meta(max_length=100)] | None = None


class Credit(Frame, tag="credit"):
    n: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]


class Start(Frame, tag="start"):
    id: RequestId
    items: Annotated[list[Ref], msgspec.Meta(min_length=1, max_length=MAX_ITEMS)]


class HeartbeatItem(Ref, kw_only=True, omit_defaults=True):
    """A held attempt, and what its handler last reported about its progress when that
    changed since the previous heartbeat (at most ``MAX_PROGRESS_BYTES`` as JSON)."""

    progress: dict[str, Any] | None = None


class Heartbeat(Frame, tag="heartbeat"):
    id: RequestId
    items: Annotated[list[HeartbeatItem], msgspec.Meta(max_length=10_000)]


class ErrorInfo(msgspec.Struct, kw_only=True, omit_defaults=True):
    code: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    message: Annotated[str, msgspec.Meta(max_length=10_000)]
    retryable: bool
    safe_to_retry: bool = False  # the handler vouches that no side effect happened
    details: dict[str, Any] | None = None


class ResultItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    task_id: TaskId
    attempt: Attempt
    lease_token: Token
    outcome: Literal["succeeded", "failed", "cancelled"]
    result: Any = None
    error: ErrorInfo | None = None


class Result(Frame, tag="result"):
    id: RequestId
    items: Annotated[list[ResultItem], msgspec.Meta(min_length=1, max_length=MAX_ITEMS)]


class Release(Frame, tag="release"):
    id: RequestId
    items: Annotated[list[Ref], msgspec.Meta(min_length=1, max_length=MAX_ITEMS)]


WorkerFrame = Hello | Credit | Start | Heartbeat | Result | Release


# -- server → worker --------------------------------------------------------------------------


class HeldVerdict(msgspec.Struct, kw_only=True):
    task_id: str
    attempt: int
    verdict: Literal["continue", "stop"]


class Welcome(Frame, tag="welcome"):
    protocol: int
    session_id: str
    node: str
    lease_ms: int
    heartbeat_ms: int
    max_frame_bytes: int
    held: list[HeldVerdict]


class WorkflowStep(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The workflow step a delivered task runs for."""

    id: str  # the instance
    definition: str
    version: str
    step: str  # the step's id in the definition
    key: str  # the execution's key within the instance
    round: int | None = None  # a poll's round, from 1
    item: int | None = None  # a map's item, from 0


class Delivery(msgspec.Struct, kw_only=True):
    task_id: str
    attempt: int
    lease_token: str
    lease_expires_at: str
    queue: str
    type: str
    params: Any
    handler_version: str | None
    side_effect: Literal["idempotent", "unsafe"]
    timeout_ms: int
    attempts: int
    max_attempts: int
    labels: dict[str, str]
    traceparent: str | None
    # The handler may run once the start request is sent, before its answer: an idempotent
    # task without a gate (nothing for the start check to refuse but a lost lease).
    eager_start: bool = False
    workflow: WorkflowStep | None = None  # for the task of a workflow step, absent otherwise


class Tasks(Frame, tag="tasks"):
    items: list[Delivery]


class StartAnswer(msgspec.Struct, kw_only=True, omit_defaults=True):
    task_id: str
    attempt: int
    verdict: Literal["started", "denied", "stale"]
    lease_expires_at: str | None = None
    deadline_at: str | None = None


class Started(Frame, tag="started"):
    re: int
    items: list[StartAnswer]


class RenewAnswer(msgspec.Struct, kw_only=True, omit_defaults=True):
    task_id: str
    attempt: int
    verdict: Literal["renewed", "cancel_requested", "stale"]
    lease_expires_at: str | None = None


class Renewed(Frame, tag="renewed"):
    re: int
    items: list[RenewAnswer]


class AckItem(msgspec.Struct, kw_only=True):
    task_id: str
    attempt: int
    verdict: Literal["accepted", "already", "stale"]


class Acked(Frame, tag="acked"):
    re: int
    items: list[AckItem]


class ReleasedItem(msgspec.Struct, kw_only=True):
    task_id: str
    attempt: int
    released: bool


class Released(Frame, tag="released"):
    re: int
    items: list[ReleasedItem]


class CancelItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    task_id: str
    attempt: int
    reason: str | None = None


class Cancel(Frame, tag="cancel"):
    items: list[CancelItem]


class Drain(Frame, tag="drain"):
    grace_ms: int


class Error(Frame, tag="error"):
    code: str
    message: str
    re: int | None = None
    retry_after_ms: int | None = None


ServerFrame = Welcome | Tasks | Started | Renewed | Acked | Released | Cancel | Drain | Error

# Close codes (docs/protocol.md); 1000/1001/1009/1011 are the standard ones.
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL = 1011
CLOSE_PROTOCOL = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_HANDSHAKE_TIMEOUT = 4408
CLOSE_VERSION = 4409
CLOSE_TOO_SLOW = 4429

_decoder = msgspec.json.Decoder(WorkerFrame)
_encoder = msgspec.json.Encoder()


def decode(data: str | bytes) -> WorkerFrame:
    """One worker frame; raises ``msgspec.ValidationError`` / ``DecodeError`` when invalid."""
    return _decoder.decode(data)


def encode(frame: Frame) -> bytes:
    return _encoder.encode(frame)


def encode_value(value: Any) -> bytes:
    """The JSON of a value a frame carries (a progress report, to store and to measure)."""
    return _encoder.encode(value)


def schema() -> dict[str, Any]:
    """The JSON Schema of every frame in both directions."""
    _, components = msgspec.json.schema_components(
        [WorkerFrame, ServerFrame], ref_template="#/$defs/{name}"
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"Orbit worker protocol, version {PROTOCOL_VERSION}",
        "description": "Frames on /v1/worker; see docs/protocol.md.",
        "oneOf": [{"$ref": f"#/$defs/{name}"} for name in _frame_names()],
        "$defs": components,
    }


def _frame_names() -> list[str]:
    worker = [c.__name__ for c in (Hello, Credit, Start, Heartbeat, Result, Release)]
    server = [
        c.__name__
        for c in (Welcome, Tasks, Started, Renewed, Acked, Released, Cancel, Drain, Error)
    ]
    return worker + server
