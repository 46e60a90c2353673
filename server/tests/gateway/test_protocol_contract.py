"""The worker protocol's contract: the committed JSON Schema is generated from the server's
frame definitions, and every golden frame in ``contracts/worker-frames`` decodes."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from orbit_server.gateway import protocol
from orbit_server.gateway.schema import render

CONTRACTS = Path(__file__).resolve().parents[3] / "contracts"
FRAMES = sorted((CONTRACTS / "worker-frames").glob("*.json"))
WORKER_TYPES = {"hello", "credit", "start", "heartbeat", "result", "release"}
server_decoder = msgspec.json.Decoder(protocol.ServerFrame)


def test_the_committed_schema_is_generated_from_the_frames() -> None:
    committed = (CONTRACTS / "worker-protocol.schema.json").read_text()
    assert committed == render(), (
        "regenerate: python -m orbit_server.gateway.schema > contracts/worker-protocol.schema.json"
    )


def test_every_frame_type_has_a_golden_example() -> None:
    names = {f.stem for f in FRAMES}
    schema = json.loads(render())
    tags = {
        d["properties"]["type"]["enum"][0]
        for d in schema["$defs"].values()
        if "type" in d.get("properties", {}) and "enum" in d["properties"]["type"]
    }
    assert names == tags


@pytest.mark.parametrize("path", FRAMES, ids=lambda p: p.stem)
def test_golden_frames_decode_and_round_trip(path: Path) -> None:
    data = path.read_bytes()
    frame = protocol.decode(data) if path.stem in WORKER_TYPES else server_decoder.decode(data)
    assert type(frame).__struct_config__.tag == path.stem
    assert json.loads(protocol.encode(frame)) == json.loads(data)


@pytest.mark.parametrize(
    "bad",
    [
        b"not json",
        b'{"type": "nonsense"}',
        b'{"type": "credit", "n": 0}',
        b'{"type": "start", "id": 1, "items": []}',
        b'{"type": "start", "id": 1, "items": [{"task_id": "t", "attempt": 0, "lease_token": "x"}]'
        b"}",
        b'{"type": "hello", "protocol": [1], "worker_id": "w", "handlers": [], "capacity": 1}',
        b'{"type": "welcome", "protocol": 1}',
    ],
)
def test_invalid_worker_frames_are_refused(bad: bytes) -> None:
    with pytest.raises((msgspec.ValidationError, msgspec.DecodeError)):
        protocol.decode(bad)
