"""``orbit-outbox-relay``: deliver a business database's outbox rows to Orbit.

``--database-url`` (or ``ORBIT_OUTBOX_DATABASE_URL``) names the business database;
``ORBIT_URL`` and ``ORBIT_API_KEY`` (or ``--url``/``--api-key``) name Orbit. ``SIGTERM`` or
``SIGINT`` end it after the pass under way. ``--print-ddl DIALECT`` prints the table's DDL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Final

from orbit_sdk._client import AsyncClient
from orbit_sdk._config import API_KEY_ENV, URL_ENV, ConfigurationError
from orbit_sdk._models import MAX_BATCH
from orbit_sdk._redact import RedactSecrets
from orbit_sdk.outbox._dialects import DIALECTS, ddl
from orbit_sdk.outbox._errors import OutboxError
from orbit_sdk.outbox._relay import OutboxRelay
from orbit_sdk.outbox._store import redact_url

__all__ = ["build_parser", "main"]

DATABASE_URL_ENV: Final = "ORBIT_OUTBOX_DATABASE_URL"
EXIT_USAGE: Final = 2
log = logging.getLogger("orbit_sdk.outbox")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orbit-outbox-relay",
        description="Deliver the rows of an orbit_outbox table to Orbit.",
    )
    parser.add_argument(
        "--database-url",
        help="the business database: postgresql://, mysql:// (MariaDB too) or sqlite:///path "
        f"(default: ${DATABASE_URL_ENV})",
    )
    parser.add_argument("--url", help=f"the Orbit server URL (default: ${URL_ENV})")
    parser.add_argument("--api-key", help=f"a submitter API key (default: ${API_KEY_ENV})")
    parser.add_argument(
        "--batch-size", type=_batch_size, default=100, help=f"rows per pass (1 to {MAX_BATCH})"
    )
    parser.add_argument(
        "--poll-interval", type=_positive_float, default=1.0, help="seconds between empty passes"
    )
    parser.add_argument(
        "--lease", type=_positive_float, default=120.0, help="seconds a claimed row stays ours"
    )
    parser.add_argument(
        "--retention-hours",
        type=_positive_float,
        default=168.0,
        help="delete delivered rows after this many hours (default: 168, a week)",
    )
    parser.add_argument(
        "--max-attempts", type=_positive_int, help="park a row after this many failed deliveries"
    )
    parser.add_argument("--once", action="store_true", help="deliver what is due now, then exit")
    parser.add_argument(
        "--create-table", action="store_true", help="create orbit_outbox if it is missing"
    )
    parser.add_argument(
        "--metrics-port", type=_positive_int, help="serve Prometheus metrics on this port"
    )
    parser.add_argument(
        "--print-ddl", choices=DIALECTS, metavar="DIALECT", help="print the table's DDL and exit"
    )
    parser.add_argument("--relay-id", help="this relay's name in claimed rows (default: host:pid)")
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default="info"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``orbit-outbox-relay`` command; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.print_ddl:
        sys.stdout.write(ddl(args.print_ddl))
        return 0
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactSecrets())
    database_url = args.database_url or os.environ.get(DATABASE_URL_ENV, "").strip()
    if not database_url:
        log.error("no database: pass --database-url or set %s", DATABASE_URL_ENV)
        return EXIT_USAGE
    try:
        return asyncio.run(_relay(args, database_url))
    except (ConfigurationError, OutboxError) as exc:
        log.error("%s", exc)
        return EXIT_USAGE


async def _relay(args: argparse.Namespace, database_url: str) -> int:
    client = AsyncClient(args.url, args.api_key)
    relay = OutboxRelay(
        database_url,
        client,
        batch_size=args.batch_size,
        poll_interval=args.poll_interval,
        lease=timedelta(seconds=args.lease),
        retention=timedelta(hours=args.retention_hours),
        max_attempts=args.max_attempts,
        relay_id=args.relay_id,
    )
    try:
        if args.create_table:
            await relay.create_table()
        if args.metrics_port:
            from prometheus_client import start_http_server

            relay.register_metrics()
            start_http_server(args.metrics_port)
        if args.once:
            delivered = await relay.drain()
            log.info("outbox relay delivered what was due: %d row(s) claimed", delivered)
            return 0
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(signum, relay.stop)
        log.info("outbox relay %s delivering from %s", relay.relay_id, redact_url(database_url))
        await relay.run()
        return 0
    finally:
        await relay.aclose()
        await client.aclose()


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def _batch_size(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_BATCH:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BATCH}: {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


if __name__ == "__main__":
    sys.exit(main())
