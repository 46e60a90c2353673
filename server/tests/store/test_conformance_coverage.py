"""Every public store method is covered by a conformance test run on every dialect (store
tests call it directly; service tests for the worker side drive it through the service)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import orbit_server.store as store_package
import tests.service as service_tests
import tests.store as store_tests


def store_methods() -> set[str]:
    """Every public async function of the store package whose first parameter is ``tx``: the
    per-aggregate store methods, found wherever they are added."""
    names = set()
    for info in pkgutil.iter_modules(store_package.__path__):
        module = importlib.import_module(f"orbit_server.store.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.iscoroutinefunction):
            if name.startswith("_") or fn.__module__ != module.__name__:
                continue
            params = list(inspect.signature(fn).parameters)
            if params and params[0] == "tx":
                names.add(name)
    return names


def covered_methods() -> set[str]:
    covered: set[str] = set()
    packages = [(store_tests, "tests.store"), (service_tests, "tests.service")]
    modules = [
        f"{name}.{info.name}"
        for pkg, name in packages
        for info in pkgutil.iter_modules(pkg.__path__)
    ]
    for module_name in modules:
        module = importlib.import_module(module_name)
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
