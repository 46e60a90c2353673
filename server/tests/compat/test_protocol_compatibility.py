"""The worker protocol across releases (docs/operations/compatibility.md).

Each older release's golden frames and JSON Schema are kept under ``contracts/worker-frames/``
(``compat/releases.toml`` says where). A rolling upgrade mixes releases on one database, so in
both directions:

- every frame an older release sends decodes in the current server (older SDK → this server)
  and in the current SDK (older server → this SDK);
- every frame the current server and SDK send validates under the older release's schema, and
  the schema only grew optional fields: nothing an older peer needs is gone or renamed, and
  nothing it never sends became required.

The matrix in the compatibility guide is checked against the same schemas.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from jsonschema import Draft202012Validator

import orbit_sdk
import orbit_server
from orbit_sdk.worker import _protocol as sdk_protocol
from orbit_server.gateway import protocol
from orbit_server.store.migrate import load_migrations
from tests.compat.releases import ROOT, Release, current, releases

WORKER_TYPES = {"hello", "credit", "start", "heartbeat", "result", "release"}
MATRIX_DOC = ROOT / "docs" / "operations" / "compatibility.md"
# A feature of the matrix ↔ the frame field that carries it (frame definition, path inside it;
# "[]" is an array's items). Both ends must know the field for the feature to work.
FEATURES = {
    "progress reports": ("Heartbeat", ("items", "[]", "progress")),
    "ctx.workflow": ("Tasks", ("items", "[]", "workflow")),
}
OLDER = [r for r in releases() if not r.current]
server_decoder = msgspec.json.Decoder(protocol.ServerFrame)


def schema_of(release: Release) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(release.schema.read_text())
    return loaded


def definition_for(schema: dict[str, Any], tag: str) -> str:
    for name, definition in schema["$defs"].items():
        if definition.get("properties", {}).get("type", {}).get("enum") == [tag]:
            return str(name)
    raise AssertionError(f"no frame {tag!r} in the schema")


def has_field(schema: dict[str, Any], node: dict[str, Any], path: tuple[str, ...]) -> bool:
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    if "anyOf" in node:
        return any(has_field(schema, option, path) for option in node["anyOf"])
    if not path:
        return True
    head, rest = path[0], path[1:]
    if head == "[]":
        return "items" in node and has_field(schema, node["items"], rest)
    properties = node.get("properties", {})
    return head in properties and has_field(schema, properties[head], rest)


def frames_of(release: Release) -> list[tuple[Release, Path]]:
    return [(release, path) for path in release.frame_files()]


def frame_id(value: object) -> str:
    if isinstance(value, Release):
        return value.version
    if isinstance(value, Path):
        return value.stem
    return str(value)


def test_the_releases_file_describes_the_current_tree() -> None:
    this = current()
    assert this.version == orbit_server.__version__ == orbit_sdk.__version__
    assert set(this.protocols) == set(protocol.SUPPORTED_VERSIONS)
    assert this.migrations == len(load_migrations("mysql")) == len(load_migrations("sqlite"))
    versions = [tuple(map(int, r.version.split("."))) for r in releases()]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    for older in OLDER:
        assert re.fullmatch(r"[0-9a-f]{40}", older.commit), older.version
        assert older.migrations <= this.migrations
        # a server speaks with a worker only on a version both know
        assert set(older.protocols) & set(this.protocols), older.version


@pytest.mark.parametrize("release", OLDER, ids=frame_id)
def test_an_older_release_keeps_a_golden_frame_of_each_of_its_frame_types(
    release: Release,
) -> None:
    schema = schema_of(release)
    tags = {
        d["properties"]["type"]["enum"][0]
        for d in schema["$defs"].values()
        if "enum" in d.get("properties", {}).get("type", {})
    }
    assert {p.stem for p in release.frame_files()} == tags


@pytest.mark.parametrize(
    ("release", "path"), [f for r in OLDER for f in frames_of(r)], ids=frame_id
)
def test_the_current_release_decodes_every_frame_of_an_older_one(
    release: Release, path: Path
) -> None:
    data = path.read_bytes()
    if path.stem in WORKER_TYPES:  # an older SDK's worker talking to this server
        frame: Any = protocol.decode(data)
        assert type(frame).__struct_config__.tag == path.stem
        assert sdk_protocol.decode_worker_frame(data) is not None  # and this SDK agrees
    else:  # an older server talking to this SDK's worker
        decoded = sdk_protocol.decode_server_frame(data)
        assert type(decoded).__struct_config__.tag == path.stem
        assert type(server_decoder.decode(data)).__struct_config__.tag == path.stem


@pytest.mark.parametrize(
    ("release", "path"),
    [(older, path) for older in OLDER for path in current().frame_files()],
    ids=frame_id,
)
def test_what_the_current_release_sends_validates_under_an_older_schema(
    release: Release, path: Path
) -> None:
    """This server's frames reach an older SDK's worker, this SDK's frames an older server."""
    schema = schema_of(release)
    frame = json.loads(path.read_bytes())
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(
        {"$defs": schema["$defs"], "$ref": f"#/$defs/{definition_for(schema, path.stem)}"}
    )
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(frame)]
    assert not errors, errors


@pytest.mark.parametrize("release", OLDER, ids=frame_id)
def test_the_current_schema_only_adds_optional_fields(release: Release) -> None:
    old, new = schema_of(release)["$defs"], schema_of(current())["$defs"]
    renamed = {"Ref": {"HeartbeatItem", "Ref"}}  # heartbeat items grew into their own struct
    for name, definition in old.items():
        successors = renamed.get(name, {name}) & set(new)
        assert successors, f"{name} is gone from the current schema"
        for successor in successors:
            mine = new[successor]
            lost = set(definition.get("properties", {})) - set(mine.get("properties", {}))
            assert not lost, f"{successor} lost {lost}"
            added = set(mine.get("required", [])) - set(definition.get("required", []))
            assert not added, f"{successor} now requires {added}"
            for field, spec in definition.get("properties", {}).items():
                if "enum" in spec and field != "type":  # an older peer's values stay valid
                    assert set(spec["enum"]) <= set(mine["properties"][field]["enum"])


def matrix_rows() -> dict[tuple[str, str], dict[str, str]]:
    """The compatibility guide's matrix: (server, SDK) → column → cell."""
    lines = [line for line in MATRIX_DOC.read_text().splitlines() if line.startswith("|")]
    header = next(line for line in lines if line.startswith("| server | SDK |"))
    columns = [c.strip().strip("`") for c in header.strip("|").split("|")]
    rows = {}
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == len(columns) and re.fullmatch(r"\d+\.\d+\.\d+", cells[0]):
            row = dict(zip(columns, cells, strict=True))
            rows[(row["server"], row["SDK"])] = row
    return rows


def test_the_matrix_in_the_docs_matches_the_releases_and_their_schemas() -> None:
    rows = matrix_rows()
    everyone = releases()
    assert set(rows) == {(s.version, k.version) for s in everyone for k in everyone}
    for server in everyone:
        for sdk in everyone:
            row = rows[(server.version, sdk.version)]
            shared = set(server.protocols) & set(sdk.protocols)
            assert row["protocol"] == str(max(shared)), row
            for feature, (frame, path) in FEATURES.items():
                both = all(
                    has_field(schema, schema["$defs"][frame], path)
                    for schema in (schema_of(server), schema_of(sdk))
                )
                cell = re.findall(r"\w+", row[feature])[0].lower()
                assert cell == ("yes" if both else "no"), (server.version, sdk.version, feature)
