"""Rows for reconciliation tests, inserted directly: a request blocked by an execution that the
worker left in RECONCILIATION_REQUIRED, with its checkpoints and audit trail, as the worker would
have written them. Tests that need the real path (runworker, a provider) build cases that way."""

import uuid
from typing import Any

import factory

from executions.flows.canonical import canonical_json, sha256_hex
from executions.models import (
    ActionExecution,
    AuditEvent,
    AuditType,
    CheckpointStatus,
    Effect,
    Execution,
    ExecutionStatus,
    Flow,
    Request,
)

CHARGE = "payments.charge"
# The flow the cases run: one non-idempotent charge, then a decision on its output.
DEFINITION: dict[str, Any] = {
    "key": "billing",
    "version": 1,
    "initialState": "DRAFT",
    "states": ["DRAFT", "CHARGED", "DECLINED"],
    "dataSchema": {"type": "object"},
    "caseSummary": ["/customer", "/amount"],
    "transitions": [
        {
            "id": "charge",
            "from": ["DRAFT"],
            "actions": [
                {
                    "id": "charge",
                    "capability": CHARGE,
                    "version": 1,
                    "input": {"amount": {"from": "/data/amount"}},
                }
            ],
            "decision": {
                "hitPolicy": "FIRST",
                "rules": [
                    {
                        "id": "paid",
                        "when": {"eq": [{"from": "/actions/charge/status"}, "paid"]},
                        "target": "CHARGED",
                        "outcome": "CHARGED",
                    },
                    {"id": "otherwise", "when": True, "target": "DECLINED", "outcome": "DECLINED"},
                ],
            },
            "updates": [{"path": "/charge", "from": "/actions/charge"}],
        }
    ],
}


class FlowFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Flow
        django_get_or_create = ("key", "version")

    key = DEFINITION["key"]
    version = DEFINITION["version"]
    definition = DEFINITION
    checksum = factory.LazyAttribute(lambda o: sha256_hex(o.definition))


class RequestFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Request

    flow = factory.SubFactory(FlowFactory)
    owner = "alice"
    scope = "acme"
    data = factory.LazyFunction(lambda: {"amount": 42, "customer": "cus_ada"})
    state = "DRAFT"
    revision = 2


class ExecutionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Execution

    request = factory.SubFactory(RequestFactory)
    flow = factory.SelfAttribute("request.flow")
    transition_id = "charge"
    status = ExecutionStatus.RECONCILIATION_REQUIRED
    accepted_revision = factory.SelfAttribute("request.revision")
    attempts = 1
    fencing_token = 1
    error_code = "UNCERTAIN_WRITE"
    error_detail = "the connection dropped after the request was sent"
    actor_snapshot = factory.LazyFunction(lambda: {"subject": "alice", "scope": "acme"})


class CheckpointFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ActionExecution

    execution = factory.SubFactory(ExecutionFactory)
    action_id = "charge"
    sequence = 0
    capability = CHARGE
    capability_version = 1
    effect = Effect.NON_IDEMPOTENT_WRITE
    status = CheckpointStatus.UNKNOWN
    input_hash = factory.LazyFunction(lambda: sha256_hex({"amount": 42}))
    external_key = factory.LazyAttribute(lambda o: f"{o.execution.id}:{o.action_id}")
    attempt = 1
    fencing_token = factory.SelfAttribute("execution.fencing_token")
    error_code = "UNKNOWN_OUTCOME"
    error_detail = "read timed out after the request was sent"


def audit(request: Request, execution: Execution | None, type_: str, **payload: Any) -> AuditEvent:
    return AuditEvent.objects.create(
        request=request, execution=execution, type=type_, actor="system", payload=payload
    )


def lookup(
    execution: Execution,
    *,
    happened: bool | None,
    output: dict[str, Any] | None = None,
    attempt: int = 1,
    operator: str = "olga",
) -> AuditEvent:
    """The provider's answer about one attempt of the charge, recorded as evidence the way
    checkpoint_record_lookup records it."""
    return AuditEvent.objects.create(
        request_id=execution.request_id,
        execution=execution,
        type=AuditType.RECONCILIATION_EVIDENCE,
        actor=operator,
        payload={
            "actionId": "charge",
            "attempt": attempt,
            "happened": happened,
            "output": output,
            "outputValid": None if output is None else True,
            "outputProblems": [],
            "detail": "" if happened is not None else "503 from the lookup",
            "operator": operator,
        },
    )


def reconciliation_case(
    *,
    checkpoint_status: str = CheckpointStatus.UNKNOWN,
    fencing_token: int = 3,
    lease_owner: str | None = None,
    **checkpoint: Any,
) -> Execution:
    """A blocked request and its execution in RECONCILIATION_REQUIRED, with one uncertain write."""
    request = RequestFactory()
    execution = ExecutionFactory(request=request, fencing_token=fencing_token)
    request.blocked_by = execution
    request.save(update_fields=["blocked_by"])
    audit(request, execution, AuditType.TRANSITION_ACCEPTED, transitionId="charge")
    CheckpointFactory(execution=execution, status=checkpoint_status, **checkpoint)
    audit(
        request,
        execution,
        AuditType.RECONCILIATION_REQUIRED,
        actionId="charge",
        errorCode="UNCERTAIN_WRITE",
    )
    if lease_owner is not None:
        # A worker that still believes it holds the lease (its clock, not the database's, ran on).
        Execution.objects.filter(pk=execution.pk).update(lease_owner=lease_owner)
    execution.refresh_from_db()
    return execution


def row(execution_id: uuid.UUID) -> dict[str, Any]:
    """The execution, its request and its checkpoints as plain values, to compare before/after."""
    execution = Execution.objects.get(pk=execution_id)
    request = Request.objects.get(pk=execution.request_id)
    return {
        "execution": {
            f: getattr(execution, f)
            for f in ("status", "fencing_token", "error_code", "lease_owner", "finished_at")
        },
        "request": {
            f: getattr(request, f)
            for f in ("state", "revision", "version", "blocked_by_id", "data", "updated_at")
        },
        "checkpoints": [
            canonical_json(
                {
                    "status": c.status,
                    "output": c.output,
                    "error_code": c.error_code,
                    "token": c.fencing_token,
                }
            )
            for c in ActionExecution.objects.filter(execution_id=execution_id).order_by("sequence")
        ],
        "audit": AuditEvent.objects.filter(request_id=request.pk).count(),
    }
