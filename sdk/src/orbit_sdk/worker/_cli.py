"""``orbit-worker myapp.workers:worker``: run a :class:`Worker` defined in an application.

The target is ``module:attribute`` (the attribute defaults to ``worker``) or a file path,
``path/to/workers.py:worker``. The current directory is put on ``sys.path`` first, so modules
of the project it is started from are found. Options override the worker's own settings;
``ORBIT_URL`` and ``ORBIT_API_KEY`` apply when neither sets the URL or key. Logs go to stderr as
text lines or, with ``--log-format json`` (or ``ORBIT_LOG_FORMAT=json``), one JSON object per
line; API keys and ``Authorization`` values are masked in both.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Final

from orbit_sdk._config import API_KEY_ENV, URL_ENV, ConfigurationError
from orbit_sdk._redact import RedactSecrets
from orbit_sdk.worker._errors import WorkerError
from orbit_sdk.worker._logs import JsonLogFormatter
from orbit_sdk.worker._worker import Worker

__all__ = ["build_parser", "configure_logging", "load_worker", "main"]

DEFAULT_ATTRIBUTE: Final = "worker"
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
LOG_FORMATS: Final = ("text", "json")
LOG_FORMAT_ENV: Final = "ORBIT_LOG_FORMAT"
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orbit-worker",
        description="Run an Orbit worker defined in your application.",
    )
    parser.add_argument(
        "target",
        help="where the Worker is: module:attribute or path/to/file.py:attribute "
        f"(attribute defaults to '{DEFAULT_ATTRIBUTE}')",
    )
    parser.add_argument(
        "--url",
        action="append",
        dest="urls",
        metavar="URL",
        help=f"an Orbit server URL; repeat it or separate URLs by commas for several nodes "
        f"(default: ${URL_ENV})",
    )
    parser.add_argument("--api-key", help=f"the worker's API key (default: ${API_KEY_ENV})")
    parser.add_argument("--concurrency", type=_positive_int, help="tasks running at once")
    parser.add_argument(
        "--prefetch",
        type=_non_negative_int,
        help="tasks held beyond --concurrency, ready for a slot that frees "
        "(default: as many as --concurrency when that is 32 or less, else 0)",
    )
    parser.add_argument("--worker-id", help="this process's name in Orbit (default: host:pid)")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help=f"text lines, or one JSON object per line (default: ${LOG_FORMAT_ENV}, else text)",
    )
    return parser


def configure_logging(level: str, log_format: str, secrets: Sequence[str] = ()) -> None:
    """Log to stderr at ``level`` in ``log_format`` (``text`` or ``json``), every record of
    every logger passing through :class:`RedactSecrets` first. Handlers the root logger has
    already (set up before, by ``sitecustomize`` say) are kept, and get the filter too."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonLogFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    logging.basicConfig(level=level.upper(), handlers=[handler])
    for each in logging.getLogger().handlers:  # whatever logs, no key reaches the output
        if not any(isinstance(f, RedactSecrets) for f in each.filters):
            each.addFilter(RedactSecrets(secrets))


def load_worker(target: str) -> Worker:
    """Import the target's module and return its :class:`Worker` attribute."""
    location, _, attribute = target.rpartition(":")
    if not location or not attribute.isidentifier():
        location, attribute = target, DEFAULT_ATTRIBUTE
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    module = _import(location)
    try:
        worker = getattr(module, attribute)
    except AttributeError:
        raise ConfigurationError(f"{module.__name__} has no attribute {attribute!r}") from None
    if not isinstance(worker, Worker):
        raise ConfigurationError(
            f"{module.__name__}.{attribute} is a {type(worker).__name__}, not an orbit Worker"
        )
    return worker


def main(argv: Sequence[str] | None = None) -> int:
    """The ``orbit-worker`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    log_format = args.log_format or os.environ.get(LOG_FORMAT_ENV, "").strip().lower() or "text"
    if log_format not in LOG_FORMATS:
        parser.error(f"{LOG_FORMAT_ENV} must be one of {', '.join(LOG_FORMATS)}: {log_format!r}")
    key = args.api_key or os.environ.get(API_KEY_ENV, "").strip()
    configure_logging(args.log_level, log_format, [key] if key else [])
    log = logging.getLogger("orbit_sdk.worker")
    try:
        worker = load_worker(args.target)
        worker.configure(
            urls=args.urls,
            api_key=args.api_key,
            concurrency=args.concurrency,
            prefetch=args.prefetch,
            worker_id=args.worker_id,
        )
        worker.run()
    except ConfigurationError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    except WorkerError as exc:
        log.error("%s", exc)
        return EXIT_FAILED
    return 0


def _import(location: str) -> ModuleType:
    if location.endswith(".py") or os.sep in location or "/" in location:
        return _import_path(Path(location))
    try:
        return importlib.import_module(location)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (location + ".").startswith(exc.name + "."):
            raise ConfigurationError(f"cannot import {location!r}: {exc}") from exc
        raise  # the module exists but imports something missing: show the real error


def _import_path(path: Path) -> ModuleType:
    path = path.resolve()
    if not path.is_file():
        raise ConfigurationError(f"no such file: {path}")
    directory = str(path.parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)  # sibling modules import as when run as a script
    name = path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0: {text}")
    return value


if __name__ == "__main__":
    sys.exit(main())
