"""Every public store method is covered by a conformance test (run on every dialect)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import tests.store as store_tests
from orbit_server.store import governance

# Aggregate modules whose public async functions form the store's method set.
STORE_MODULES = [governance]


def store_methods() -> set[str]:
    names = set()
    for module in STORE_MODULES:
        for name, fn in inspect.getmembers(module, inspect.iscoroutinefunction):
            if not name.startswith("_") and fn.__module__ == module.__name__:
                names.add(name)
    return names


def covered_methods() -> set[str]:
    covered: set[str] = set()
    for info in pkgutil.iter_modules(store_tests.__path__):
        module = importlib.import_module(f"tests.store.{info.name}")
        for _, fn in inspect.getmembers(module, inspect.isfunction):
            for mark in getattr(fn, "pytestmark", []):
                if mark.name == "covers":
                    covered.update(mark.args)
    return covered


def test_every_store_method_has_a_conformance_test() -> None:
    methods = store_methods()
    assert methods, "no store methods found"
    assert methods - covered_methods() == set()


def test_conformance_tests_name_only_real_methods() -> None:
    assert covered_methods() - store_methods() == set()
