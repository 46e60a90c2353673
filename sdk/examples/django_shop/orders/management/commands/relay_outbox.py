"""``python manage.py relay_outbox``: deliver the default database's outbox rows to Orbit until
SIGTERM or SIGINT (``--once``: what is due now, then exit)."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from orbit_sdk import AsyncClient, outbox


class Command(BaseCommand):
    help = "Deliver the orbit_outbox rows of the default database to Orbit."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="deliver what is due, then exit")

    def handle(self, *args: Any, once: bool = False, **options: Any) -> None:
        claimed = asyncio.run(relay(once=once))
        if once:
            self.stdout.write(f"{claimed} row(s) claimed")


async def relay(*, once: bool) -> int:
    client = AsyncClient(urls=settings.ORBIT_URL, api_key=settings.ORBIT_API_KEY)
    relay = outbox.OutboxRelay(settings.DATABASE_URL, client)
    try:
        if once:
            return await relay.drain()
        loop = asyncio.get_running_loop()
        for stop in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(stop, relay.stop)
        await relay.run()
        return 0
    finally:
        await relay.aclose()
        await client.aclose()
