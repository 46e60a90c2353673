"""An album as a workflow: make a thumbnail of every image (a ``map``), then ask the CDN until
it serves the album (a ``poll``), and give up when that takes too long.

As in ``workflow_order.py``: the worker, the definition, and a script. The intervals are short
so that the example ends within a second; in real life a poll waits seconds or minutes::

    orbit-worker sdk/examples/workflow_album.py    # the worker, in one terminal
    python sdk/examples/workflow_album.py          # the script, in another

The script prints the instance's end and the keys of its step executions.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from orbit_sdk import Client, TaskStep, Workflow
from orbit_sdk.worker import TaskContext, Worker

worker = Worker()


@worker.handler(queue="examples", type="resize")
def resize(ctx: TaskContext) -> dict[str, Any]:
    """Stands for an image service."""
    return {"url": f"{ctx.params['url']}?w={ctx.params['width']}", "index": ctx.params["index"]}


@worker.handler(queue="examples", type="cdn-status")
def cdn_status(ctx: TaskContext) -> dict[str, Any]:
    """Stands for a CDN's API: the album is live from the third look on."""
    return {"live": ctx.params["round"] >= 3, "round": ctx.params["round"]}


album = Workflow("album", version="1", description="thumbnails, then wait for the CDN")
album.map(
    "thumbnails",
    items="input.images",
    max_concurrency=4,
    task=TaskStep(
        queue="examples",
        type="resize",
        params="{'url': item, 'width': 320, 'index': index}",
        output="result.url",
    ),
)
album.poll(
    "published",
    task=TaskStep(
        queue="examples",
        type="cdn-status",
        params="{'album': input.album_id, 'round': round}",
    ),
    until="result.live",
    interval=timedelta(milliseconds=200),
    max_rounds=10,
    max_duration=timedelta(minutes=1),
    on_exhausted="not_live",
)
album.succeed(
    "done",
    output="{'thumbnails': steps.thumbnails.output, 'rounds': steps.published.output.round}",
)
album.fail("not_live", code="cdn_timeout", message="the album was not live in time")


def main() -> None:
    images = [f"https://img.example/a-1/{n}.jpg" for n in range(5)]
    with Client() as client:
        client.publish_workflow(album)
        run = client.start_workflow(
            "album",
            {"album_id": "a-1", "images": images},
            version=album.version,
            idempotency_key="album-a-1",
        )
        done = client.wait_for_workflow(run.id, timeout=timedelta(seconds=60))
        print(done.state, done.output)
        # Every step execution, map items and poll rounds too, in the order they began.
        print(" ".join(step.key for step in client.iter_workflow_steps(run.id)))


if __name__ == "__main__":
    main()
