"""``POST /orders`` writes the order and its confirmation task in one transaction;
``GET /orders/<id>`` shows the order and the state of its task in Orbit."""

from __future__ import annotations

import json
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from orbit_sdk import outbox
from orders.models import Order
from orders.orbit import orbit_client
from orders.tasks import ConfirmOrder, confirm_order


@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    try:
        data = json.loads(request.body)
        params = ConfirmOrder(str(data["id"]), str(data["email"]), int(data["total_cents"]))
    except (ValueError, KeyError, TypeError):
        return JsonResponse({"detail": "give id, email and total_cents as JSON"}, status=400)
    try:
        with transaction.atomic():  # the row commits with the order, or not at all
            outbox_id = outbox.submit_request(
                connection,
                confirm_order.request(params),  # checked against ConfirmOrder, with its defaults
                aggregate_key=f"order:{params.order_id}",
            )
            Order.objects.create(
                id=params.order_id,
                email=params.email,
                total_cents=params.total_cents,
                outbox_id=outbox_id,
            )
    except IntegrityError:
        return JsonResponse({"detail": "an order with this id exists"}, status=409)
    return JsonResponse(
        {"id": params.order_id, "confirmation": {"delivery": "pending"}}, status=201
    )


@require_GET
def show_order(request: HttpRequest, order_id: str) -> JsonResponse:
    order = Order.objects.filter(id=order_id).first()
    if order is None:
        return JsonResponse({"detail": f"no order {order_id}"}, status=404)
    confirmation: dict[str, Any] = {"delivery": "pending"}
    if order.task_id is None:
        # Orbit's task id is the outbox row's result once the relay delivered it; keep it
        # with the order, as delivered rows are deleted after the relay's retention.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT result, parked_at, last_error FROM orbit_outbox WHERE id = %s",
                [order.outbox_id],
            )
            found = cursor.fetchone()
        if found is not None and found[1] is not None:
            confirmation = {"delivery": "parked", "error": found[2]}
        elif found is not None and found[0] is not None:
            order.task_id = found[0]
            order.save(update_fields=["task_id"])
    if order.task_id is not None:
        task = orbit_client().get_task(order.task_id)
        confirmation = {
            "delivery": "delivered",
            "task_id": task.id,
            "state": task.state,
            "result": task.result,
            "error": None if task.error is None else task.error.message,
        }
    return JsonResponse(
        {
            "id": order.id,
            "email": order.email,
            "total_cents": order.total_cents,
            "confirmation": confirmation,
        }
    )
