"""Prints the worker protocol's JSON Schema (``contracts/worker-protocol.schema.json``):
``python -m orbit_server.gateway.schema > contracts/worker-protocol.schema.json``."""

from __future__ import annotations

import json
import sys

from orbit_server.gateway.protocol import schema


def render() -> str:
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
