"""The SDK's frame definitions against the protocol's contract: every golden frame in
``contracts/worker-frames`` decodes and round-trips, and the fields match the JSON Schema."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from orbit_sdk.worker import _protocol as protocol

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"
FRAMES = sorted((CONTRACTS / "worker-frames").glob("*.json"))
WORKER_FRAMES = {"hello", "credit", "start", "heartbeat", "result", "release"}
SDK_STRUCTS: dict[str, type[protocol.Frame]] = {
    str(cls.__struct_config__.tag): cls
    for cls in (
        *protocol.WorkerFrame.__args__,
        *protocol.ServerFrame.__args__,
    )
}


def decode(path: Path) -> protocol.Frame:
    data = path.read_bytes()
    if path.stem in WORKER_FRAMES:
        return protocol.decode_worker_frame(data)
    return protocol.decode_server_frame(data)


def normalized(value: Any) -> Any:
    """JSON with timestamps as datetimes, since ``.000Z`` and ``Z`` are the same instant."""
    if isinstance(value, dict):
        return {k: normalized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalized(v) for v in value]
    if isinstance(value, str) and value[:4].isdigit() and value.endswith("Z"):
        return datetime.fromisoformat(value)
    return value


def test_the_golden_frames_cover_every_frame_type() -> None:
    assert {path.stem for path in FRAMES} == set(SDK_STRUCTS)


@pytest.mark.parametrize("path", FRAMES, ids=lambda p: p.stem)
def test_golden_frames_decode_and_round_trip(path: Path) -> None:
    frame = decode(path)
    assert type(frame) is SDK_STRUCTS[path.stem]
    encoded = protocol.encode_frame(frame)
    assert decode_again(path.stem, encoded) == frame
    assert normalized(json.loads(encoded)) == normalized(json.loads(path.read_bytes()))


def decode_again(stem: str, data: bytes) -> protocol.Frame:
    if stem in WORKER_FRAMES:
        return protocol.decode_worker_frame(data)
    return protocol.decode_server_frame(data)


def test_every_struct_has_the_fields_and_values_of_the_json_schema() -> None:
    """Frames and their items: same field names, same allowed values for enumerations."""
    contract = json.loads((CONTRACTS / "worker-protocol.schema.json").read_text())["$defs"]
    _, ours = msgspec.json.schema_components(
        [protocol.WorkerFrame, protocol.ServerFrame], ref_template="#/$defs/{name}"
    )
    renamed = {"Handler": "HandlerInfo"}
    assert {renamed.get(name, name) for name in contract} == set(ours)
    for name, definition in contract.items():
        mine = ours[renamed.get(name, name)]["properties"]
        assert set(mine) == set(definition["properties"]), name
        for field, spec in definition["properties"].items():
            if "enum" in spec:
                assert set(mine[field]["enum"]) == set(spec["enum"]), (name, field)


def test_fields_the_sdk_does_not_know_are_ignored() -> None:
    golden = json.loads((CONTRACTS / "worker-frames" / "tasks.json").read_bytes())
    golden["priority"] = 5
    golden["items"][0]["tenant"] = "acme"
    frame = protocol.decode_server_frame(json.dumps(golden))
    assert isinstance(frame, protocol.Tasks)
    assert frame.items[0].params == {"user": 42}
    assert frame.items[0].lease_expires_at.tzinfo is not None


@pytest.mark.parametrize("data", [b"not json", b'{"type": "later-version"}', b"{}"])
def test_frames_the_sdk_cannot_read_are_refused(data: bytes) -> None:
    with pytest.raises(msgspec.DecodeError):
        protocol.decode_server_frame(data)


def test_a_succeeded_result_without_a_value_still_says_so() -> None:
    item = protocol.ResultItem(task_id="t", attempt=1, lease_token="l", outcome="succeeded")
    frame = protocol.Result(id=1, items=[item])
    assert json.loads(protocol.encode_frame(frame))["items"][0]["outcome"] == "succeeded"


def test_hello_always_sends_held() -> None:
    hello = protocol.Hello(protocol=[1], worker_id="w", handlers=[], capacity=1)
    assert json.loads(protocol.encode_frame(hello))["held"] == []
