"""The relay's stats as Prometheus metrics, read from :meth:`OutboxRelay.stats` at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orbit_sdk.outbox._relay import OutboxRelay

__all__ = ["register"]


def register(relay: OutboxRelay, registry: Any = None) -> None:
    from prometheus_client import REGISTRY
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class _Collector:
        def collect(self) -> Iterator[Any]:
            stats = relay.stats()
            yield GaugeMetricFamily(
                "orbit_outbox_backlog", "Outbox rows due for delivery now.", value=stats.backlog
            )
            yield GaugeMetricFamily(
                "orbit_outbox_undelivered",
                "Outbox rows neither delivered nor parked.",
                value=stats.undelivered,
            )
            yield GaugeMetricFamily(
                "orbit_outbox_parked_rows",
                "Outbox rows parked, waiting for an operator.",
                value=stats.parked_rows,
            )
            yield GaugeMetricFamily(
                "orbit_outbox_oldest_undelivered_age_seconds",
                "Age of the oldest undelivered, unparked outbox row (0: none).",
                value=stats.oldest_undelivered_age_s or 0.0,
            )
            for name, value, text in (
                ("delivered", stats.delivered, "Outbox rows this relay delivered."),
                ("parked", stats.parked, "Outbox rows this relay parked."),
                ("retried", stats.retried, "Outbox deliveries this relay scheduled again."),
            ):
                yield CounterMetricFamily(f"orbit_outbox_{name}", text, value=value)

        def describe(self) -> Iterator[Any]:
            return iter(())

    (REGISTRY if registry is None else registry).register(_Collector())
