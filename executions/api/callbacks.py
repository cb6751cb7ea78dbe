"""Callbacks of asynchronous providers: `POST /api/v1/callbacks/{capability}@{version}`
(INTEGRATIONS.md#asynchronous-providers, docs/worker-protocol.md#asynchronous-callbacks).

Invariants; `callback_receive` owns one transaction: nothing is read from the database before
the signature is verified against the raw body in constant time; the external key must name a
checkpoint of this capability@version and the output pass the contract's schema; under the locks
of the request, then the execution, ACCEPTED becomes SUCCEEDED, the SUSPENDED execution PENDING
and due under token + 1, and EXECUTION_RESUMED and NOTIFY commit together; a replay (SUCCEEDED
with this very output) changes nothing and is answered alike; any other state is NOT_WAITING.
"""

import hashlib
import hmac
import json
import os
from dataclasses import dataclass

from django.db import connection, transaction
from psycopg.types.json import Jsonb

from actions.registry import IntegrationUnavailable, resolve
from orquestador import errors, strictjson
from orquestador.errors import CodedError

from .. import sql
from ..models import AuditType, CheckpointStatus, ExecutionStatus
from ..queue.audit import audit_append
from ..queue.outputs import output_errors
from ..queue.waits import CALLBACK_EVENT
from ..sql.rows import CallbackCheckpointRow, ResumeLockRow
from .tracelinks import resume_traced

MAX_CALLBACK_BYTES = 1024 * 1024  # bytes of a callback body
SIGNATURE_PREFIX = "sha256="
UNAUTHENTICATED = "a valid X-Signature (sha256=<hex HMAC-SHA256 of the body>) is required"


@dataclass(frozen=True)
class CallbackReceived:
    execution_id: str
    action_id: str
    replay: bool


def _secret_of(capability: str, version: int) -> bytes | None:
    try:
        binding = resolve(capability, version)
    except IntegrationUnavailable:
        return None
    variable = binding.route.options.get("callback_secret_from_env")
    if not binding.route.is_async or not variable:
        return None
    secret = os.environ.get(variable, "")
    return secret.encode("utf-8") if secret else None


def signature_valid(*, secret: bytes, body: bytes, header: str | None) -> bool:
    if not header or not header.startswith(SIGNATURE_PREFIX):
        return False
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header[len(SIGNATURE_PREFIX) :].strip().lower())


def callback_receive(
    *, capability: str, version: int, body: bytes, signature: str | None
) -> CallbackReceived:
    """Verify, validate and apply one callback; raise CodedError (nothing changed) otherwise."""
    secret = _secret_of(capability, version)
    # An unknown capability, a synchronous route and a bad signature look the same from outside.
    if secret is None or not signature_valid(secret=secret, body=body, header=signature):
        raise CodedError(errors.UNAUTHENTICATED, UNAUTHENTICATED)
    try:
        document = strictjson.loads(body, max_bytes=MAX_CALLBACK_BYTES)
    except strictjson.JSONRefused as exc:
        raise CodedError(errors.INVALID_BODY, f"the body {exc.reason}") from None
    if not isinstance(document, dict) or set(document) != {"externalKey", "output"}:
        raise CodedError(
            errors.INVALID_BODY, "the body must be a JSON object with externalKey and output only"
        )
    key, output = document["externalKey"], document["output"]
    if not isinstance(key, str) or not 1 <= len(key) <= 200:
        raise CodedError(
            errors.INVALID_BODY, "externalKey: must be a string of 1 to 200 characters"
        )
    binding = resolve(capability, version)
    problems = output_errors(output, binding.contract.output_schema)
    if problems:
        raise CodedError(
            errors.OUTPUT_INVALID,
            "output: " + "; ".join(problems),
            extra={"problems": problems},
        )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql.CALLBACK_CHECKPOINT, {"external_key": key})
        row = cursor.fetchone()
        found = None if row is None else CallbackCheckpointRow._make(row)
        if found is None or (found.capability, found.capability_version) != (capability, version):
            raise CodedError(errors.NOT_FOUND, "no call of this capability has this externalKey")
        execution_id, action_id, request_id = found.execution_id, found.action_id, found.request_id
        cursor.execute(sql.REQUEST_LOCK, {"request_id": request_id})
        cursor.execute(sql.RESUME_LOCK, {"execution_id": execution_id})
        locked = ResumeLockRow._make(cursor.fetchone())
        # Read again under the locks: the checkpoint as it is now.
        cursor.execute(sql.CALLBACK_CHECKPOINT, {"external_key": key})
        checkpoint = CallbackCheckpointRow._make(cursor.fetchone())
        recorded = checkpoint.output
        if isinstance(recorded, str):  # Django's cursors hand jsonb over as text
            recorded = json.loads(recorded)
        if checkpoint.status == CheckpointStatus.SUCCEEDED and recorded == output:
            return CallbackReceived(str(execution_id), action_id, replay=True)
        if (
            checkpoint.status != CheckpointStatus.ACCEPTED
            or locked.status != ExecutionStatus.SUSPENDED
        ):
            raise CodedError(
                errors.NOT_WAITING,
                f"the call is {checkpoint.status} and its execution {locked.status}: it does "
                "not wait for this callback (a callback that comes before the acceptance is "
                "recorded may be sent again)",
            )
        # The provider is not a principal: the continuation runs for the principal of the
        # dispatch that made the accepted call (RESUME_EXECUTION keeps it).
        cursor.execute(
            sql.RESUME_EXECUTION,
            {"execution_id": execution_id, "token": locked.fencing_token, "principal": None},
        )
        (new_token,) = cursor.fetchone()
        cursor.execute(
            sql.CALLBACK_SETTLE,
            {
                "execution_id": execution_id,
                "action_id": action_id,
                # psycopg adapts Jsonb; the stubs' parameter types know only plain values.
                "output": Jsonb(output),  # type: ignore[dict-item]
                "new_token": new_token,
            },
        )
        audit_append(
            cursor,
            request_id=request_id,
            execution_id=execution_id,
            type=AuditType.EXECUTION_RESUMED,
            actor=f"callback:{capability}@{version}",
            payload={"actionId": action_id, "event": CALLBACK_EVENT},
        )
        cursor.execute(sql.NOTIFY_WORK, {"execution_id": str(execution_id)})
    resume_traced(
        execution_id=execution_id, by="callback", attributes={"orquestador.action.id": action_id}
    )
    return CallbackReceived(str(execution_id), action_id, replay=False)
