"""An operator's tools, on a signup workflow: retry the step that failed an instance, skip a
step that cannot succeed, decide a step whose outcome is unknown (``needs_review``), pause,
resume and cancel.

As in ``workflow_order.py``: the worker, the definition, and a script. Three signups go wrong
in three ways, and the script repairs each::

    orbit-worker sdk/examples/workflow_recovery.py    # the worker, in one terminal
    python sdk/examples/workflow_recovery.py          # the script, in another
"""

from __future__ import annotations

import itertools
import time
from datetime import timedelta

from orbit_sdk import Client, RetryPolicy, Workflow, WorkflowInstance
from orbit_sdk.worker import NonRetryableError, TaskContext, Worker

worker = Worker()
_mails = itertools.count()


class MailProviderDown(Exception):
    code = "mail_unavailable"


@worker.handler(queue="examples", type="create-account", side_effect="unsafe")
def create_account(ctx: TaskContext) -> dict[str, str]:
    """Stands for an account service that does not answer for carol: whether her account
    was made is unknown, so the (unsafe) task goes to ``needs_review``."""
    email = ctx.params["email"]
    if email.startswith("carol@"):
        raise TimeoutError("the account service did not answer")
    return {"account": "acc-" + email.split("@")[0]}


@worker.handler(queue="examples", type="send-welcome")
def send_welcome(ctx: TaskContext) -> dict[str, object]:
    """Stands for a mail provider: it has no mailbox at example.invalid, and it is down for
    the first mail this worker sends."""
    to = ctx.params["to"]
    if to.endswith("@example.invalid"):
        raise NonRetryableError(f"no mailbox {to}", code="mailbox_unknown")
    if next(_mails) == 0:
        raise MailProviderDown("the mail provider is down")
    return {"sent": True, "to": to}


signup = Workflow("signup", version="1", description="create an account, welcome, confirm")
signup.task(
    "create",
    queue="examples",
    type="create-account",
    params="{'email': input.email}",
    output="result.account",
    side_effect="unsafe",
)
signup.task(
    "welcome",
    queue="examples",
    type="send-welcome",
    params="{'to': input.email}",
    retry=RetryPolicy(max_attempts=1),  # the step fails at the first failure
)
signup.signal("confirm", name="confirmed", timeout=timedelta(days=7), on_timeout="unconfirmed")
signup.succeed(
    "done", output="{'account': steps.create.output, 'welcomed': steps.welcome.output.sent}"
)
signup.fail("unconfirmed", code="unconfirmed", message="the address was not confirmed in time")


def wait_until_stuck(client: Client, workflow_id: str) -> WorkflowInstance:
    """Read the instance until it needs someone: it ended, a step needs review, or it waits
    for a signal. (``wait_for_workflow`` waits for the end only.)"""
    deadline = time.monotonic() + 60
    while True:
        run = client.get_workflow(workflow_id)
        if run.is_terminal or run.state == "needs_review" or any(w.signal for w in run.waits):
            return run
        if time.monotonic() > deadline:
            raise TimeoutError(f"workflow {workflow_id} is still {run.state}")
        time.sleep(0.05)


def main() -> None:
    with Client() as client:
        client.publish_workflow(signup)

        # Ada: the mail provider was down. Once it is back, run the failed step again.
        ada = client.start_workflow("signup", {"email": "ada@example.com"})
        run = wait_until_stuck(client, ada.id)
        if run.state == "failed" and run.error is not None and run.error.step is not None:
            print("ada:", run.state, run.error.code, "at", run.error.step)
            client.retry_workflow_step(ada.id, run.error.step)
            run = wait_until_stuck(client, ada.id)
        print("ada:", run.state, "waits for", [wait.signal for wait in run.waits])
        # A pause holds the instance: what happens meanwhile is recorded, not followed.
        paused = client.pause_workflow(ada.id, reason="support is checking her account")
        client.signal_workflow(ada.id, "confirmed", {"via": "link"})
        print("ada:", client.get_workflow(ada.id).state, "control_version", paused.control_version)
        resumed = client.resume_workflow(ada.id)  # follows the signal at once
        print("ada:", resumed.state, resumed.output)

        # Bob: no mail can reach him. Go on without the welcome mail, then give up on him.
        bob = client.start_workflow("signup", {"email": "bob@example.invalid"})
        run = wait_until_stuck(client, bob.id)
        if run.error is not None:
            print("bob:", run.state, run.error.code, "at", run.error.step)
        run = client.skip_workflow_step(bob.id, "welcome", {"sent": False})
        print("bob:", run.state, "waits for", [wait.signal for wait in run.waits])
        run = client.cancel_workflow(bob.id, reason="bob cannot confirm without a mailbox")
        print("bob:", run.state)

        # Carol: the account service did not answer. Its records show that the account was
        # made: the step succeeded, with the result the task would have had.
        carol = client.start_workflow("signup", {"email": "carol@example.com"})
        run = wait_until_stuck(client, carol.id)
        print("carol:", run.state, [s.key for s in run.steps if s.state == "needs_review"])
        client.resolve_workflow_step(
            carol.id, "create", outcome="succeeded", output={"account": "acc-carol"}
        )
        client.signal_workflow(carol.id, "confirmed", {"via": "link"})  # kept until it waits
        done = client.wait_for_workflow(carol.id, timeout=timedelta(seconds=60))
        print("carol:", done.state, done.output)


if __name__ == "__main__":
    main()
