"""The store is grouped by aggregate: ``store/<aggregate>.py`` runs exactly the queries of
``<aggregate>.sql`` (in ``common/`` and the dialects' folders), so a statement sits with the
module of the table it writes, or mainly reads."""

from __future__ import annotations

import ast
from importlib import resources

from orbit_server.store.sql import parse_queries

FOLDERS = ("common", "mysql", "sqlite")
# Query files of no aggregate: the modules that run them (tests run some of them too).
OTHERS = {
    "migrations": ("migrate.py",),
    "server": ("mysql_backend.py", "sqlite_backend.py", "probe.py"),
}


def query_names() -> dict[str, set[str]]:
    """Every query name, by the stem of the file that defines it."""
    root = resources.files("orbit_server.store")
    names: dict[str, set[str]] = {}
    for folder in FOLDERS:
        for entry in root.joinpath(folder).iterdir():
            if entry.name.endswith(".sql"):
                stem = entry.name.removesuffix(".sql")
                found = {q.name for q in parse_queries(entry.read_text("utf-8"), "sqlite")}
                names.setdefault(stem, set()).update(found)
    return names


def strings_of(module: str) -> set[str]:
    source = resources.files("orbit_server.store").joinpath(module).read_text("utf-8")
    return {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_each_aggregate_module_runs_exactly_the_queries_of_its_own_file() -> None:
    by_file = query_names()
    every = set().union(*by_file.values())
    root = resources.files("orbit_server.store")
    wrong: dict[str, dict[str, set[str]]] = {}
    for stem, defined in sorted(by_file.items()):
        if stem in OTHERS:
            continue
        assert root.joinpath(f"{stem}.py").is_file(), f"{stem}.sql has no module"
        used = strings_of(f"{stem}.py") & every
        if used != defined:
            wrong[stem] = {"runs others'": used - defined, "unused": defined - used}
    assert wrong == {}


def test_other_modules_run_no_aggregate_query() -> None:
    by_file = query_names()
    aggregate = set().union(*(names for stem, names in by_file.items() if stem not in OTHERS))
    owned = {f"{stem}.py" for stem in by_file if stem not in OTHERS}
    root = resources.files("orbit_server.store")
    rest = [e.name for e in root.iterdir() if e.name.endswith(".py") and e.name not in owned]
    assert "base.py" in rest
    assert {m: strings_of(m) & aggregate for m in rest if strings_of(m) & aggregate} == {}
