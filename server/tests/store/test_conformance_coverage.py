"""Every public store method is tested directly by a conformance test run on every dialect:
a test of ``tests/store/test_<aggregate>_store.py`` names it in ``@pytest.mark.covers(...)``
and its module calls it. Service tests drive the store too, but through the services, so
they do not count."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from types import ModuleType

import orbit_server.store as store_package
import tests.store as store_tests


def store_methods() -> dict[str, str]:
    """Every public async function of the store package whose first parameter is ``tx``, by
    name, with the module that defines it: the per-aggregate store methods, found wherever
    they are added."""
    found: dict[str, str] = {}
    for info in pkgutil.iter_modules(store_package.__path__):
        module = importlib.import_module(f"orbit_server.store.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.iscoroutinefunction):
            if name.startswith("_") or fn.__module__ != module.__name__:
                continue
            params = list(inspect.signature(fn).parameters)
            if params and params[0] == "tx":
                found[name] = info.name
    return found


def store_test_modules() -> Iterator[ModuleType]:
    for info in pkgutil.iter_modules(store_tests.__path__):
        yield importlib.import_module(f"tests.store.{info.name}")


def covers(module: ModuleType) -> set[str]:
    """The methods the tests of ``module`` say they cover."""
    named: set[str] = set()
    for _, fn in inspect.getmembers(module, inspect.isfunction):
        for mark in getattr(fn, "pytestmark", []):
            if mark.name == "covers":
                named.update(mark.args)
    return named


def covered_methods() -> set[str]:
    return set().union(*(covers(m) for m in store_test_modules()))


def test_every_store_method_has_a_conformance_test() -> None:
    methods = set(store_methods())
    assert methods, "no store methods found"
    assert methods - covered_methods() == set()


def test_conformance_tests_name_only_real_methods() -> None:
    assert covered_methods() - set(store_methods()) == set()


def test_each_method_is_covered_in_the_test_module_of_its_aggregate() -> None:
    """``store/<aggregate>.py``'s methods are covered in ``test_<aggregate>_store.py``."""
    owners = store_methods()
    misplaced = {
        name: module.__name__
        for module in store_test_modules()
        for name in covers(module)
        if name in owners and module.__name__ != f"tests.store.test_{owners[name]}_store"
    }
    assert misplaced == {}


def test_conformance_tests_call_the_methods_they_cover() -> None:
    """Named is not enough: the test module calls the method itself (or hands it to the
    database as the unit to run)."""
    uncalled = {
        module.__name__: sorted(
            name
            for name in covers(module)
            if not re.search(rf"\.{name}\b", inspect.getsource(module))
        )
        for module in store_test_modules()
    }
    assert {name: found for name, found in uncalled.items() if found} == {}
