"""A business process for the acceptance test: ``python -m tests.outbox.business URL QUEUE``.

Transaction after transaction inserts an order and submits its task through the outbox, then
commits, except every third, which rolls back; after a rollback it prints ``R <row id>``.
The test kills it with SIGKILL while it runs.
"""

from __future__ import annotations

import itertools
import sys
import uuid

from orbit_sdk import outbox
from tests.outbox.conftest import connect


def main(url: str, queue: str) -> None:
    conn = connect(url)
    for n in itertools.count():
        order = uuid.uuid4().hex
        cursor = conn.cursor()
        row_id = outbox.submit(conn, queue, "order", {"order": order})
        cursor.execute("INSERT INTO orders (id, outbox_id) VALUES (%s, %s)", (order, row_id))
        cursor.close()
        if n % 3 == 2:
            conn.rollback()
            print("R", row_id, flush=True)
        else:
            conn.commit()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
