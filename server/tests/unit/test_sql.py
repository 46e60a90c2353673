"""Named queries: parsing, binding, list expansion, dialect placeholders."""

from __future__ import annotations

import pytest

from orbit_server.store.sql import QueryBook, parse_queries, split_statements

SOURCE = """
-- name: one
SELECT a FROM t WHERE id = :id AND b = :b;

-- name: many
-- a comment line inside is dropped
SELECT a FROM t WHERE id IN (:ids) AND b = :b AND c LIKE 'x%'
"""


def test_queries_are_split_and_bound_positionally() -> None:
    mysql = {q.name: q for q in parse_queries(SOURCE, "mysql")}
    sqlite = {q.name: q for q in parse_queries(SOURCE, "sqlite")}
    assert mysql["one"].bind({"id": 1, "b": "x"}) == (
        "SELECT a FROM t WHERE id = %s AND b = %s",
        (1, "x"),
    )
    assert sqlite["one"].bind({"b": "x", "id": 1})[1] == (1, "x")
    assert "comment" not in sqlite["many"].text


def test_list_parameters_expand_to_one_placeholder_each() -> None:
    sqlite = {q.name: q for q in parse_queries(SOURCE, "sqlite")}
    text, args = sqlite["many"].bind({"ids": [1, 2, 3], "b": 7})
    assert "IN (?, ?, ?)" in text and args == (1, 2, 3, 7)
    with pytest.raises(ValueError, match="empty"):
        sqlite["many"].bind({"ids": [], "b": 7})


def test_percent_signs_are_escaped_for_the_mysql_driver() -> None:
    mysql = {q.name: q for q in parse_queries(SOURCE, "mysql")}
    assert "'x%%'" in mysql["many"].bind({"ids": (1,), "b": 2})[0]


def test_a_missing_parameter_names_the_query() -> None:
    book = QueryBook("sqlite", {q.name: q for q in parse_queries(SOURCE, "sqlite")})
    with pytest.raises(KeyError, match="one needs parameter b"):
        book.bind("one", {"id": 1})
    with pytest.raises(KeyError, match="no query named"):
        book["nope"]


def test_a_parameter_inside_a_string_literal_is_rejected() -> None:
    with pytest.raises(ValueError, match="string literal"):
        parse_queries("-- name: bad\nSELECT ':x'", "sqlite")


def test_scripts_split_on_statement_ends() -> None:
    script = "-- header\n\nCREATE TABLE a (\n  x INT\n);\n\nCREATE INDEX i ON a (x);\n"
    assert split_statements(script) == ["CREATE TABLE a (\n  x INT\n)", "CREATE INDEX i ON a (x)"]


@pytest.mark.parametrize("dialect", ["mysql", "sqlite"])
def test_the_shipped_query_books_load(dialect: str) -> None:
    book = QueryBook.load(dialect)  # type: ignore[arg-type]
    assert {"ping", "key_get", "audit_insert", "migrations_applied"} <= book.names()


def test_an_insert_splits_into_head_row_and_tail_for_many_rows() -> None:
    [q] = parse_queries(
        "-- name: ins\nINSERT INTO t (a, b, c) VALUES (:a, 'x', COALESCE(:b, NULL))\n"
        "ON DUPLICATE KEY UPDATE c = VALUES(c)",
        "mysql",
    )
    head, row, tail = q.rows_form or ("", "", "")
    assert head == "INSERT INTO t (a, b, c) VALUES "
    assert row == "(%s, 'x', COALESCE(%s, NULL))"
    assert tail == "\nON DUPLICATE KEY UPDATE c = VALUES(c)"
    upsert = "INSERT INTO t (a) SELECT a FROM u ON DUPLICATE KEY UPDATE a = VALUES(a)"
    [select] = parse_queries(f"-- name: sel\n{upsert}", "mysql")
    assert select.rows_form is None
    [update] = parse_queries("-- name: upd\nUPDATE t SET a = :a", "mysql")
    assert update.rows_form is None


def test_a_union_runs_the_query_once_per_set_of_values() -> None:
    [q] = parse_queries(
        "-- name: heads\nSELECT id FROM t WHERE k = :k AND s IN (:s) ORDER BY id LIMIT :n", "sqlite"
    )
    many = [{"k": "a", "s": [1, 2], "n": 1}, {"k": "b", "s": [3], "n": 2}]
    sql, args = q.bind_union(many)
    assert sql == (
        "SELECT * FROM (SELECT id FROM t WHERE k = ? AND s IN (?, ?) ORDER BY id LIMIT ?)"
        " UNION ALL "
        "SELECT * FROM (SELECT id FROM t WHERE k = ? AND s IN (?) ORDER BY id LIMIT ?)"
    )
    assert args == ("a", 1, 2, 1, "b", 3, 2)
    [mysql] = parse_queries("-- name: heads\nSELECT id FROM t WHERE k = :k LIMIT :n", "mysql")
    assert mysql.bind_union(many)[0] == (
        "(SELECT id FROM t WHERE k = %s LIMIT %s) UNION ALL "
        "(SELECT id FROM t WHERE k = %s LIMIT %s)"
    )
    with pytest.raises(ValueError, match="union of nothing"):
        q.bind_union([])
