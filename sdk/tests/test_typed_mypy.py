"""The type checker holds typed tasks to their models: ``mypy --strict`` passes the typed-task
examples as they are, and reports a copy that submits the wrong params, or implements a
reference with a handler of the wrong params, at the line that does it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api", reason="mypy is a development dependency")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FILES = ("typed_defs.py", "typed_worker.py", "typed_submit.py")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for the module: the second run checks only the changed file."""
    return tmp_path_factory.mktemp("mypy-cache")


def copy_examples(into: Path, **edits: tuple[str, str]) -> None:
    """The typed examples in a folder of their own (no package around them, as a user's
    modules), with ``edits``: file stem -> (text, replacement), each found exactly once."""
    for name in FILES:
        text = (EXAMPLES / name).read_text()
        edit = edits.get(name.removesuffix(".py"))
        if edit is not None:
            old, new = edit
            assert text.count(old) == 1, f"{name} no longer holds {old!r}"
            text = text.replace(old, new)
        (into / name).write_text(text)


def mypy_strict(folder: Path, cache_dir: Path) -> tuple[int, list[str]]:
    """Run ``mypy --strict`` on the three files; the exit status and the error lines."""
    config = folder / "mypy.ini"
    config.write_text("[mypy]\n")  # not the workspace's configuration
    stdout, stderr, status = mypy_api.run(
        [
            "--strict",
            "--config-file",
            str(config),
            "--cache-dir",
            str(cache_dir),
            "--no-error-summary",
            "--hide-error-context",
            *(str(folder / name) for name in FILES),
        ]
    )
    assert stderr == ""
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    return status, errors


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_the_typed_examples_pass_mypy_strict(tmp_path: Path, cache_dir: Path) -> None:
    copy_examples(tmp_path)
    assert mypy_strict(tmp_path, cache_dir) == (0, [])


def test_submitting_the_wrong_params_is_a_mypy_error(tmp_path: Path, cache_dir: Path) -> None:
    wrong = 'add.submit(client, GreetParams("Ada"))'
    copy_examples(tmp_path, typed_submit=("add.submit(client, AddParams(a=2, b=3))", wrong))

    status, errors = mypy_strict(tmp_path, cache_dir)

    line = line_of(tmp_path / "typed_submit.py", wrong)
    assert status == 1
    assert errors == [
        f'{tmp_path / "typed_submit.py"}:{line}: error: Argument 2 to "submit" of "TaskRef" '
        'has incompatible type "GreetParams"; expected "AddParams"  [arg-type]'
    ]


def test_implementing_a_reference_with_the_wrong_params_is_a_mypy_error(
    tmp_path: Path, cache_dir: Path
) -> None:
    copy_examples(
        tmp_path,
        typed_worker=(
            "def run_add(params: AddParams, ctx: TaskContext) -> AddResult:",
            "def run_add(params: GreetParams, ctx: TaskContext) -> AddResult:",
        ),
    )

    status, errors = mypy_strict(tmp_path, cache_dir)

    assert status == 1
    # The decorator refuses the handler; its body then misuses the params it declared.
    decorator = line_of(tmp_path / "typed_worker.py", "@worker.implement(add)")
    assert any(
        re.search(
            rf'typed_worker\.py:{decorator}: error: Argument 1 to "__call__" of "Implementer" '
            r'has incompatible type "Callable\[\[GreetParams, TaskContext\], AddResult\]"',
            error,
        )
        for error in errors
    ), errors
