"""A real execution with everything a timeline draws, run by the worker's own code on PostgreSQL:
a read that fails twice before it succeeds (two backoffs waited out), an idempotent write whose
worker dies mid-call (its lease is taken over), a non-idempotent write whose outcome is unknown
(to reconciliation), a probe's evidence, an operator's resolution, a wait that times out, and the
run to its end."""

import dataclasses
import uuid
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from actions.registry import use_registry
from executions.models import Execution
from tests.support.worker import (
    FAST,
    Accepted,
    ScriptedAdapter,
    SimulatedCrash,
    action,
    binding,
    claim,
    create_flow,
    enqueue,
    expire_lease,
    flow_definition,
    ok,
    registry,
    run_claim,
    run_next,
    runtime_for,
    status_of,
    transient,
    unknown,
    wait_until,
)

# Backoffs long enough to see on the axis, short enough for a test; waited out, not skipped.
CONFIG = dataclasses.replace(FAST, retry_base_seconds=0.3, retry_max_seconds=0.6)
CHARGE_OUTPUT = {"chargeId": "ch_1", "status": "paid"}
WAIT = {
    "id": "approval",
    "wait": {
        "event": "manager.approval",
        "payloadSchema": {"type": "object"},
        "timeoutSeconds": 1,
        "onTimeout": {"payload": {"approved": True}},
    },
}


class Eventful:
    """The execution, stage by stage: `to_reconciliation()`, then `resolve_and_finish(user)`."""

    def __init__(self, conn: psycopg.Connection, dsn: str) -> None:
        self.conn, self.dsn = conn, dsn
        self.adapters = {
            "customer": ScriptedAdapter(script=[transient(), transient("HTTP_429")]),
            "reserve": ScriptedAdapter(script=[SimulatedCrash()]),
            "charge": ScriptedAdapter(script=[unknown()], default=ok(CHARGE_OUTPUT)),
            "receipt": ScriptedAdapter(),
        }
        self.registry = registry(
            binding("crm.lookup", self.adapters["customer"], max_attempts=3),
            binding("stock.reserve", self.adapters["reserve"], effect="IDEMPOTENT_WRITE"),
            binding("payments.charge", self.adapters["charge"], effect="NON_IDEMPOTENT_WRITE"),
            binding("mail.send", self.adapters["receipt"], effect="IDEMPOTENT_WRITE"),
        )
        definition = flow_definition(
            [
                action("customer", "crm.lookup"),
                action("reserve", "stock.reserve"),
                action("charge", "payments.charge"),
                WAIT,
                action("receipt", "mail.send"),
            ],
            key=f"eventful-{uuid.uuid4().hex[:8]}",
        )
        self.accepted: Accepted = enqueue(conn, create_flow(conn, definition))

    @property
    def execution(self) -> Execution:
        return Execution.objects.select_related("flow", "request").get(
            pk=self.accepted.execution_id
        )

    def _due(self) -> None:
        wait_until(
            lambda: self.conn.execute(
                "SELECT next_attempt_at <= clock_timestamp() FROM execution WHERE id = %s",
                [self.accepted.execution_id],
            ).fetchone()[0],
            what="the execution to be due",
        )

    def _run(self, owner: str = "worker-a") -> None:
        with runtime_for(self.dsn, self.registry, config=CONFIG) as runtime:
            run_next(self.conn, runtime, owner=owner)

    def to_reconciliation(self) -> Execution:
        """Retries of the read, the crash and takeover of the reserve, the charge uncertain, and
        an automatic probe that found it."""
        self._run()  # customer: HTTP_503
        self._due()
        self._run()  # customer: HTTP_429
        self._due()
        with runtime_for(self.dsn, self.registry, config=CONFIG) as runtime:
            (found,) = claim(self.conn, "worker-doomed", lease_seconds=2.0)
            try:
                run_claim(runtime, found)  # customer succeeds, reserve "dies" mid-call
            except SimulatedCrash:
                pass
        expire_lease(self.conn, self.accepted.execution_id)
        self._run(owner="worker-rescuer")  # takeover: reserve again, charge unknown
        assert status_of(self.conn, self.accepted.execution_id) == "RECONCILIATION_REQUIRED"
        self._probe()
        return self.execution

    def _probe(self) -> None:
        """What an automatic probe records when the provider's lookup finds the charge."""
        payload: dict[str, Any] = {
            "actionId": "charge",
            "happened": True,
            "output": CHARGE_OUTPUT,
            "outputValid": True,
            "operator": "system:prober",
            "probe": 1,
        }
        self.conn.execute(
            "INSERT INTO audit_event (request_id, execution_id, type, actor, payload) "
            "VALUES (%s, %s, 'RECONCILIATION_EVIDENCE', 'system:prober', %s)",
            [self.accepted.request_id, self.accepted.execution_id, Jsonb(payload)],
        )

    def resolve_and_finish(self, operator: Any) -> Execution:
        """The operator records that the charge happened; the run goes on, waits for an
        approval that never comes (its deadline passes) and ends SUCCEEDED."""
        from reconciliation.services import execution_resolve_write_happened

        with use_registry(self.registry):
            execution_resolve_write_happened(
                execution_id=self.accepted.execution_id,
                action_id="charge",
                output=CHARGE_OUTPUT,
                reason="The provider's lookup found the charge.",
                operator=operator,
            )
        self._run()  # the charge is not repeated; the approval wait suspends it
        assert status_of(self.conn, self.accepted.execution_id) == "SUSPENDED"
        self._due()
        self._run()  # the wait timed out with its default; the receipt; SUCCEEDED
        assert status_of(self.conn, self.accepted.execution_id) == "SUCCEEDED"
        return self.execution
