"""Queue labels stay bounded: the first names seen get their own, the rest are ``other``."""

from __future__ import annotations

from orbit_server.observability.metrics import Metrics, QueueLabels


def test_the_first_names_keep_their_label_and_later_ones_are_folded() -> None:
    label = QueueLabels(2)
    assert [label(q) for q in ("a", "b", "a", "c", "b", "d")] == [
        "a",
        "b",
        "a",
        "other",
        "b",
        "other",
    ]


def test_counters_fold_queues_past_the_cap_into_other() -> None:
    metrics = Metrics(max_queues=1)
    metrics.count_tasks("emails", "submitted", 2)
    metrics.count_tasks("reports", "submitted", 3)
    metrics.count_tasks("exports", "submitted", 4)

    def value(queue: str) -> float | None:
        return metrics.registry.get_sample_value(
            "orbit_queue_task_events_total", {"queue": queue, "event": "submitted"}
        )

    assert (value("emails"), value("other"), value("reports")) == (2, 7, None)
