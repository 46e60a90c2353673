"""Lock and index hints are written once as ``{{hint}}`` and filled in by each dialect, so that a
query differing between dialects only in its hints lives once in ``common/``."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from orbit_server.store.sql import parse_queries

SOURCE = """
-- name: claim
SELECT id FROM ready {{force_index:ready_claim}}
 WHERE queue = :queue ORDER BY id LIMIT :limit {{for_update_skip_locked}}

-- name: heads
SELECT t.id FROM tasks t {{indexed_by:tasks_key}} WHERE t.key = :key

-- name: lock
SELECT * FROM gates WHERE id IN (:ids) {{lock_in_share_mode}}

-- name: one
SELECT * FROM tasks WHERE id = :id
   {{for_update}}
"""


def test_mysql_fills_in_every_hint() -> None:
    q = {q.name: q.text for q in parse_queries(SOURCE, "mysql")}
    assert q["claim"] == (
        "SELECT id FROM ready FORCE INDEX (ready_claim)\n"
        " WHERE queue = :queue ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED"
    )
    assert q["heads"] == "SELECT t.id FROM tasks t FORCE INDEX (tasks_key) WHERE t.key = :key"
    assert q["lock"] == "SELECT * FROM gates WHERE id IN (:ids) LOCK IN SHARE MODE"
    assert q["one"] == "SELECT * FROM tasks WHERE id = :id\n FOR UPDATE"


def test_sqlite_leaves_out_all_but_indexed_by() -> None:
    q = {q.name: q.text for q in parse_queries(SOURCE, "sqlite")}
    assert q["claim"] == "SELECT id FROM ready\n WHERE queue = :queue ORDER BY id LIMIT :limit"
    assert q["heads"] == "SELECT t.id FROM tasks t INDEXED BY tasks_key WHERE t.key = :key"
    assert q["lock"] == "SELECT * FROM gates WHERE id IN (:ids)"
    assert q["one"] == "SELECT * FROM tasks WHERE id = :id"


@pytest.mark.parametrize(
    ("hint", "message"),
    [
        ("{{for_updates}}", "no hint named 'for_updates'"),
        ("{{force_index}}", "force_index takes an index name"),
        ("{{for_update:ix}}", "for_update takes no index name"),
        ("{{force_index:}}", "malformed"),
        ("{{for_update}", "malformed"),
    ],
)
def test_a_wrong_hint_fails_at_load(hint: str, message: str) -> None:
    for dialect in ("mysql", "sqlite"):
        with pytest.raises(ValueError, match=f"query q: .*{re.escape(message)}"):
            parse_queries(f"-- name: q\nSELECT * FROM t {hint}", dialect)


# What a dialect's hints read like in its own files: to compare two dialects' texts without them.
_MYSQL_HINTS = re.compile(
    r"\s(FOR UPDATE SKIP LOCKED|FOR UPDATE|LOCK IN SHARE MODE|(FORCE|USE) INDEX \(\w+\))"
)
_SQLITE_HINTS = re.compile(r"\sINDEXED BY \w+")


def _dialect_texts(dialect: str) -> dict[str, str]:
    root = resources.files("orbit_server.store").joinpath(dialect)
    return {
        q.name: q.text
        for entry in root.iterdir()
        if entry.name.endswith(".sql")
        for q in parse_queries(entry.read_text("utf-8"), dialect)  # type: ignore[arg-type]
    }


def test_no_dialect_writes_a_query_that_differs_only_in_hints() -> None:
    mysql, sqlite = _dialect_texts("mysql"), _dialect_texts("sqlite")
    assert mysql and sqlite

    def bare(text: str, hints: re.Pattern[str]) -> str:
        return " ".join(hints.sub("", text).split())

    same = sorted(
        name
        for name in mysql.keys() & sqlite.keys()
        if bare(mysql[name], _MYSQL_HINTS) == bare(sqlite[name], _SQLITE_HINTS)
    )
    assert same == [], "write these once in common/, with {{hints}}"
