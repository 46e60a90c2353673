"""Expand and contract migrations (docs/operations/upgrades.md#expand-and-contract).

During a rolling upgrade the previous release's servers run on a schema migrated by the new
release, so a migration may only *add* (expand). One that drops or renames a table, a column
or an index that an older server may still use (its queries name indexes in ``FORCE INDEX``)
is a contract migration: it ships in the release after the one that stopped using the thing,
and is listed under ``contract`` of that release in ``compat/releases.toml``. This test finds
destructive statements in every migration and fails on any that is not listed there.
"""

from __future__ import annotations

import re

import pytest

from orbit_server.store.migrate import Migration, load_migrations
from tests.compat.releases import releases

DROP_TABLE = re.compile(r"\bDROP\s+TABLE\b", re.IGNORECASE)
RENAME = re.compile(r"\bRENAME\b", re.IGNORECASE)
CHANGE_COLUMN = re.compile(r"\bCHANGE\s+(?:COLUMN\s+)?\w+", re.IGNORECASE)
# In ALTER TABLE, MariaDB reads "DROP name" as dropping the column "name".
ALTER_DROP = re.compile(r"\bDROP\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?(\w+)", re.IGNORECASE)
NOT_COLUMNS = {"index", "key", "primary", "foreign", "constraint", "check", "table"}
DROP_INDEX = re.compile(
    r"\bDROP\s+(?:INDEX|KEY)\s+(?:IF\s+EXISTS\s+)?(\w+)", re.IGNORECASE
)  # an index dropped …
ADD_INDEX = re.compile(
    r"\b(?:ADD\s+(?:UNIQUE\s+)?(?:INDEX|KEY)|CREATE\s+(?:UNIQUE\s+)?INDEX)\s+"
    r"(?:IF\s+NOT\s+EXISTS\s+)?(\w+)",
    re.IGNORECASE,
)  # … and made again under its name (a rebuild) is not a removal


def without_comments(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


def destructive(statements: tuple[str, ...]) -> list[str]:
    """What the statements of one migration remove or rename, as short descriptions."""
    text = "\n".join(without_comments(s) for s in statements)
    found: list[str] = []
    if DROP_TABLE.search(text):
        found.append("drops a table")
    if RENAME.search(text):
        found.append("renames something")
    if CHANGE_COLUMN.search(text):
        found.append("changes a column (CHANGE can rename it)")
    for statement in statements:
        if re.match(r"\s*ALTER\s+TABLE\b", without_comments(statement), re.IGNORECASE):
            for name in ALTER_DROP.findall(without_comments(statement)):
                if name.lower() not in NOT_COLUMNS:
                    found.append(f"drops column {name}")
    remade = {name.lower() for name in ADD_INDEX.findall(text)}
    found += [
        f"drops index {name}" for name in DROP_INDEX.findall(text) if name.lower() not in remade
    ]
    return found


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("ALTER TABLE tasks ADD COLUMN progress TEXT NULL", []),
        ("CREATE TABLE IF NOT EXISTS t (id INT)", []),
        ("ALTER TABLE tasks DROP INDEX tasks_finished, ADD KEY tasks_finished (finished_at)", []),
        ("DROP INDEX IF EXISTS tasks_key;\nCREATE INDEX IF NOT EXISTS tasks_key ON tasks (a)", []),
        ("ALTER TABLE tasks DROP COLUMN owner_step", ["drops column owner_step"]),
        ("ALTER TABLE tasks DROP owner_step", ["drops column owner_step"]),
        ("ALTER TABLE tasks DROP COLUMN IF EXISTS labels", ["drops column labels"]),
        ("DROP TABLE IF EXISTS task_events", ["drops a table"]),
        ("ALTER TABLE tasks RENAME COLUMN labels TO tags", ["renames something"]),
        ("RENAME TABLE tasks TO jobs", ["renames something"]),
        ("ALTER TABLE tasks CHANGE labels tags TEXT", ["changes a column (CHANGE can rename it)"]),
        ("ALTER TABLE tasks DROP INDEX tasks_due", ["drops index tasks_due"]),
        ("-- DROP TABLE tasks: not this time\nALTER TABLE tasks ADD COLUMN x INT", []),
    ],
)
def test_destructive_statements_are_recognised(sql: str, expected: list[str]) -> None:
    assert destructive(tuple(s for s in sql.split(";\n"))) == expected


def every_migration() -> list[tuple[str, Migration]]:
    return [(d, m) for d in ("mysql", "sqlite") for m in load_migrations(d)]


@pytest.mark.parametrize(
    ("dialect", "migration"), every_migration(), ids=lambda v: getattr(v, "name", v)
)
def test_a_migration_that_removes_or_renames_is_a_listed_contract_migration(
    dialect: str, migration: Migration
) -> None:
    contract = {version for release in releases() for version in release.contract}
    found = destructive(migration.statements)
    if found and migration.version not in contract:
        pytest.fail(
            f"{dialect} migration {migration.version:04d}_{migration.name} {', '.join(found)}: "
            "old servers may still use it during a rolling upgrade. Ship it as a contract "
            "migration (list it under `contract` of its release in compat/releases.toml) in "
            "the release after the one that stopped using it; see docs/operations/upgrades.md"
        )


def test_contract_migrations_are_new_in_the_release_that_lists_them() -> None:
    known = 0
    for release in releases():
        for version in release.contract:
            assert known < version <= release.migrations, (release.version, version)
        known = release.migrations
