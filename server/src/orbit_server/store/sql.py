"""Named SQL queries, one ``.sql`` file per aggregate per dialect (STYLE rule 4); queries whose
text is the same on every dialect live once in ``common/``.

A file holds blocks headed by ``-- name: query_name``. Parameters are written ``:name`` and are
always bound, never formatted into the text. A parameter bound to a list or tuple expands to one
placeholder per element, so ``WHERE id IN (:ids)`` takes a list.

No query spells a state as a literal. A parameter written ``:kind.value`` (``:task.pending``,
``:step.succeeded``, ``:fire.queued``) names a persisted state value of :mod:`.states`; the query
binds it itself, so callers never pass it, and a name that is no persisted state fails when the
queries are loaded, not when one runs.

Row-lock and index hints are written once, as ``{{hint}}`` or ``{{hint:index_name}}``, and each
dialect fills them in when it loads its queries; a query that differs between dialects only in
its hints lives once in ``common/``. SQLite runs every write unit under ``BEGIN IMMEDIATE``, so
it takes no row locks, and of index hints it takes only ``INDEXED BY``:

=============================  ============================  ===================
hint                           MySQL/MariaDB                 SQLite
=============================  ============================  ===================
``{{for_update}}``             ``FOR UPDATE``                (nothing)
``{{for_update_skip_locked}}`` ``FOR UPDATE SKIP LOCKED``    (nothing)
``{{lock_in_share_mode}}``     ``LOCK IN SHARE MODE``        (nothing)
``{{force_index:ix}}``         ``FORCE INDEX (ix)``          (nothing)
``{{indexed_by:ix}}``          ``FORCE INDEX (ix)``          ``INDEXED BY ix``
=============================  ============================  ===================

An unknown hint, or one given an index name it does not take or lacking one it needs, fails
when the queries are loaded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

from orbit_server.store.states import state_value

Dialect = Literal["mysql", "sqlite"]

_PLACEHOLDER: Mapping[Dialect, str] = {"mysql": "%s", "sqlite": "?"}
# Each hint's text per dialect; ``{index}`` stands for the index the hint names.
_HINTS: Mapping[str, Mapping[Dialect, str]] = {
    "for_update": {"mysql": "FOR UPDATE", "sqlite": ""},
    "for_update_skip_locked": {"mysql": "FOR UPDATE SKIP LOCKED", "sqlite": ""},
    "lock_in_share_mode": {"mysql": "LOCK IN SHARE MODE", "sqlite": ""},
    "force_index": {"mysql": "FORCE INDEX ({index})", "sqlite": ""},
    "indexed_by": {"mysql": "FORCE INDEX ({index})", "sqlite": "INDEXED BY {index}"},
}
# The blanks before a hint go with it, so that a hint a dialect leaves out leaves no trace.
_HINT = re.compile(r"[ \t]*\{\{\s*([a-z_]+)\s*(?::\s*([A-Za-z_][A-Za-z0-9_]*)\s*)?\}\}")

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
# ``:name`` or ``:kind.value`` but not ``::`` casts or ``:=``; a quote-aware scan is not needed
# because Orbit's queries never put a colon inside a string literal (the loader rejects such
# queries).
_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?)")


@dataclass(frozen=True, slots=True)
class Query:
    name: str
    text: str
    params: tuple[str, ...]
    placeholder: str
    positional: str
    # For ``INSERT … VALUES (…) [tail]``: (head, the row tuple, tail) of the positional text, so
    # that many rows go in one statement (``head`` + ``row, row, …`` + ``tail``); None for any
    # other statement. Found once when the query is loaded, not at every bulk insert.
    rows_form: tuple[str, str, str] | None = field(init=False)
    # The ``:kind.value`` parameters and the state values they are bound to: the query's own,
    # filled in by :meth:`args`, never passed by a caller.
    states: Mapping[str, str] = field(init=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows_form", _rows_form(self.positional))
        try:
            states = {p: state_value(p) for p in self.params if "." in p}
        except ValueError as exc:
            raise ValueError(f"query {self.name}: {exc}") from None
        object.__setattr__(self, "states", states)

    def args(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The positional arguments for ``values``, in the order of :attr:`params`, with the
        query's state parameters filled in."""
        states = self.states
        try:
            if not states:
                return tuple(values[p] for p in self.params)
            return tuple(states[p] if p in states else values[p] for p in self.params)
        except KeyError as exc:
            raise KeyError(f"query {self.name} needs parameter {exc.args[0]}") from None

    def bind_union(self, many: Sequence[Mapping[str, Any]]) -> tuple[str, tuple[Any, ...]]:
        """One statement that runs this query once per set of ``many`` values and answers
        all their rows, each part keeping its own ORDER BY and LIMIT: ``(query) UNION ALL
        (query) …`` on MySQL/MariaDB (no derived table to build per part), ``SELECT * FROM
        (query) UNION ALL SELECT * FROM (query) …`` on SQLite (which cannot parenthesise the
        parts of a compound select)."""
        if not many:
            raise ValueError(f"query {self.name}: a union of nothing")
        parts: list[str] = []
        args: list[Any] = []
        for values in many:
            text, bound = self.bind(values)
            parts.append(f"({text})" if self.placeholder == "%s" else f"SELECT * FROM ({text})")
            args.extend(bound)
        return " UNION ALL ".join(parts), tuple(args)

    def bind(self, values: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]]:
        """The dialect's text and positional arguments for ``values``."""
        args = self.args(values)
        if not any(isinstance(a, list | tuple) for a in args):
            return self.positional, args
        flat: list[Any] = []

        def expand(match: re.Match[str]) -> str:
            name = match.group(1)
            value = self.states[name] if name in self.states else values[name]
            if not isinstance(value, list | tuple):
                flat.append(value)
                return self.placeholder
            if not value:
                raise ValueError(f"query {self.name}: list parameter {match.group(1)} is empty")
            flat.extend(value)
            return ", ".join([self.placeholder] * len(value))

        return _PARAM.sub(expand, self.text), tuple(flat)


_VALUES = re.compile(r"\bVALUES\s*\(", re.IGNORECASE)


def _rows_form(text: str) -> tuple[str, str, str] | None:
    if not re.match(r"\s*(INSERT|REPLACE)\b", text, re.IGNORECASE):
        return None
    found = _VALUES.search(text)  # the first: VALUES(col) of an upsert's tail comes later
    if found is None or re.search(r"\bSELECT\b", text[: found.start()], re.IGNORECASE):
        return None
    start = found.end() - 1
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[:start], text[start : i + 1], text[i + 1 :]
    return None


class QueryBook:
    """All named queries of one dialect, loaded once at start."""

    def __init__(self, dialect: Dialect, queries: Mapping[str, Query]) -> None:
        self.dialect = dialect
        self._queries = dict(queries)

    def __getitem__(self, name: str) -> Query:
        try:
            return self._queries[name]
        except KeyError:
            raise KeyError(f"no query named {name!r} for {self.dialect}") from None

    def bind(self, name: str, values: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]]:
        return self[name].bind(values)

    def names(self) -> frozenset[str]:
        return frozenset(self._queries)

    @classmethod
    def load(cls, dialect: Dialect) -> QueryBook:
        """The dialect's queries: ``common/`` (text that reads the same on every dialect) plus
        the dialect's own folder. A name defined twice is an error, never an override."""
        root = resources.files("orbit_server.store")
        queries: dict[str, Query] = {}
        for folder in (root.joinpath("common"), root.joinpath(dialect)):
            for entry in sorted(folder.iterdir(), key=lambda e: e.name):
                if not entry.name.endswith(".sql"):
                    continue
                for query in parse_queries(entry.read_text("utf-8"), dialect):
                    if query.name in queries:
                        raise ValueError(f"query {query.name} is defined twice ({dialect})")
                    queries[query.name] = query
        return cls(dialect, queries)


def parse_queries(source: str, dialect: Dialect) -> list[Query]:
    """Split a file into its named queries, in ``dialect``'s text."""
    placeholder = _PLACEHOLDER[dialect]
    matches = list(_NAME.finditer(source))
    out: list[Query] = []
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(source)
        body = (
            "\n".join(
                line
                for line in source[match.end() : end].strip().splitlines()
                if not line.lstrip().startswith("--")
            )
            .strip()
            .rstrip(";")
            .strip()
        )
        body = _fill_hints(match.group(1), body, dialect).strip()
        if "'" in body and _PARAM.search(" ".join(re.findall(r"'[^']*'", body))):
            raise ValueError(f"query {match.group(1)}: a ':' parameter inside a string literal")
        if placeholder == "%s" and "%" in body:
            body = body.replace("%", "%%")
        params = tuple(_PARAM.findall(body))
        positional = _PARAM.sub(placeholder, body)
        out.append(Query(match.group(1), body, params, placeholder, positional))
    return out


def _fill_hints(name: str, body: str, dialect: Dialect) -> str:
    def fill(match: re.Match[str]) -> str:
        hint, index = match.group(1), match.group(2)
        forms = _HINTS.get(hint)
        if forms is None:
            raise ValueError(f"query {name}: no hint named {hint!r}")
        takes_index = "{index}" in forms["mysql"]
        if takes_index != (index is not None):
            needs = "an index name" if takes_index else "no index name"
            raise ValueError(f"query {name}: hint {hint} takes {needs}")
        text = forms[dialect].format(index=index)
        return f" {text}" if text else ""

    filled = _HINT.sub(fill, body)
    if "{{" in filled or "}}" in filled:
        raise ValueError(f"query {name}: a malformed {{{{hint}}}}")
    return filled


def split_statements(script: str) -> Sequence[str]:
    """Split a migration or schema script into statements (each ends with ``;`` at line end)."""
    statements: list[str] = []
    current: list[str] = []
    for line in script.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("--")):
            continue
        current.append(line)
        if stripped.endswith(";"):
            statements.append("\n".join(current).strip().rstrip(";"))
            current = []
    if "".join(current).strip():
        statements.append("\n".join(current).strip())
    return statements
