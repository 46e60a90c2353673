"""The OpenAPI document is snapshotted in contracts/; a drift fails until it is regenerated."""

from __future__ import annotations

import json
from pathlib import Path

from orbit_server.api.app import openapi_document

SNAPSHOT = Path(__file__).resolve().parents[3] / "contracts" / "openapi.json"


def test_openapi_matches_the_snapshot() -> None:
    current = json.loads(json.dumps(openapi_document(), sort_keys=True))
    recorded = json.loads(SNAPSHOT.read_text())
    assert current == recorded, (
        "the HTTP API changed: review it, then run "
        "`.venv/bin/orbit openapi --output contracts/openapi.json`"
    )


def test_every_route_documents_its_summary() -> None:
    for path, operations in openapi_document()["paths"].items():
        for method, operation in operations.items():
            assert operation.get("summary"), f"{method.upper()} {path} has no summary"
