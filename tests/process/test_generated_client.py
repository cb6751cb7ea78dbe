"""A real client proves the schema: openapi-python-client generates one from /api/schema/ (into
the test's temporary folder, at test time), and it pages through a list, reads an execution's
steps, creates a webhook subscription and verifies a delivery's signature, against gunicorn and a
real runworker on 127.0.0.1.

The generated package is imported by operation id (a module per operation), whatever folders the
generator groups them in.
"""

import contextlib
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import requests

from executions.webhooks.signing import signature_verify
from tests.support import tokens
from tests.support.receiver import Receiver
from tests.support.web import gunicorn_process
from tests.support.worker import (
    WorkerProcess,
    action,
    create_flow,
    flow_definition,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

WEBHOOKS = {"WEBHOOK_ALLOW_HTTP": "true", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true"}
SCOPE = "requests:write requests:read webhooks:admin"
GENERATE_TIMEOUT = 180  # seconds for the generator


def generated(base: str, folder: Path) -> ModuleType:
    schema = folder / "schema.json"
    schema.write_bytes(requests.get(f"{base}/api/schema/?format=json", timeout=30).content)
    generator = str(Path(sys.executable).parent / "openapi-python-client")
    result = subprocess.run(
        [
            generator,
            "generate",
            "--path",
            str(schema),
            "--output-path",
            str(folder / "client"),
            "--meta",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=GENERATE_TIMEOUT,
        cwd=folder,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "Warning" not in result.stdout, result.stdout[-4000:]
    sys.path.insert(0, str(folder))
    return importlib.import_module("client")


def operations(package: ModuleType) -> dict[str, ModuleType]:
    found = {}
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
        if ".api." in info.name and not info.ispkg:
            found[info.name.rsplit(".", 1)[1]] = importlib.import_module(info.name)
    return found


def body_of(package: ModuleType, model: str, **fields: Any) -> Any:
    return getattr(importlib.import_module(f"{package.__name__}.models"), model).from_dict(fields)


def test_generated_client__lists_steps_webhooks_and_a_verified_signature(
    process_env, runtime_conn, tmp_path
):
    flow = flow_definition([action("n", "NO_OP")], key="client-flow")
    create_flow(runtime_conn, flow)
    env = {**process_env, **WEBHOOKS}
    with (
        Receiver() as receiver,
        gunicorn_process(env, tmp_path / "web.log") as base,
        WorkerProcess(env, tmp_path / "worker.log"),
        contextlib.ExitStack() as stack,
    ):
        package = generated(base, tmp_path)
        ops = operations(package)
        # Entered, so its connections (kept alive by the server) are closed when the test ends.
        client = stack.enter_context(
            package.AuthenticatedClient(
                base_url=base, token=tokens.token(sub="ada", tenant="acme", scope=SCOPE)
            )
        )
        # Three requests, each placed: the worker runs them.
        executions = []
        for n in range(3):
            created = ops["requests_create"].sync(
                client=client,
                body=body_of(package, "RequestCreate", flowKey="client-flow", data={"n": n}),
            )
            accepted = ops["requests_transitions_create"].sync_detailed(
                request_id=created.id,
                client=client,
                body=body_of(package, "TransitionAccept", transitionId="go", expectedRevision=1),
            )
            assert accepted.status_code == 202, accepted.content
            executions.append(accepted.parsed.id)
        # Pages of two, by the cursor the server gave.
        seen, cursor = [], None
        while True:
            page = ops["requests_list"].sync(
                client=client, limit=2, **({"cursor": cursor} if cursor else {})
            )
            seen += [r.id for r in page.results]
            cursor = page.next_
            if not cursor:
                break
        assert len(seen) == 3 and len(set(seen)) == 3
        wait_until(
            lambda: all(
                ops["executions_retrieve"].sync(execution_id=e, client=client).status.value
                == "SUCCEEDED"
                for e in executions
            ),
            what="the executions to succeed",
        )
        steps = ops["executions_actions_list"].sync(execution_id=executions[0], client=client)
        assert [(s.action_id, s.status.value) for s in steps.results] == [("n", "SUCCEEDED")]
        # A subscription, and a ping delivered and verified with the secret the client got.
        hook = ops["webhooks_create"].sync(
            client=client,
            body=body_of(
                package, "WebhookCreate", url=receiver.url, events=["execution.succeeded"]
            ),
        )
        assert hook.secret.startswith("whsec_")
        pinged = ops["webhooks_ping"].sync(webhook_id=hook.id, client=client)
        wait_until(lambda: receiver.received, what="the ping's delivery", timeout=30)
    got = receiver.received[0]
    assert got.body["type"] == "webhook.ping" and got.body["id"] == str(pinged.event_id)
    assert signature_verify(
        header=got.headers["Orquestador-Signature"], body=got.raw, secret=hook.secret
    )
