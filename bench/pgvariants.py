"""bench/pgfloor.py's variants: the DDL that makes each from the migrated schema, and the drivers
that send each one's statements: executions/sql/'s own, or (`merged`) its final commit and
SUCCEEDED checkpoint made into one statement.
"""

import hashlib
import uuid
from collections.abc import Iterable

import psycopg
from psycopg.types.json import Jsonb

from bench.worker import BLOCK_REQUESTS, ENQUEUE_REQUESTS_AND_EXECUTIONS
from executions import sql

OWNER = "pgfloor:1"
LEASE_SECONDS = 60.0
NOOP_HASH = hashlib.sha256(b"{}").hexdigest()
LIST_INDEXES = (
    "request_owner_list_idx",
    "request_tenant_list_idx",
    "request_state_list_idx",
    "request_flow_list_idx",
    "request_blocked_list_idx",
    "request_updated_at_list_idx",
    "execution_owner_list_idx",
    "execution_tenant_list_idx",
    "execution_status_list_idx",
    "execution_error_list_idx",
    "execution_finished_at_list_idx",
)
# Every index but the primary keys and what the four statements themselves walk.
OTHER_INDEXES = (
    "request_blocked_idx",
    "execution_fair_idx",
    "execution_held_idx",
    "execution_request_idx",
    "execution_reconcile_idx",
    "execution_purge_idx",
    "execution_idempotency_uniq",
    "action_execution_key_idx",
    "audit_request_idx",
    "audit_takeover_idx",
)
FOREIGN_KEYS = """
DO $$
DECLARE c record;
BEGIN
    FOR c IN SELECT conrelid::regclass AS t, conname FROM pg_constraint
              WHERE contype = 'f' AND conrelid::regclass::text IN
                    ('request', 'execution', 'action_execution', 'audit_event')
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', c.t, c.conname);
    END LOOP;
END $$;
"""
WEBHOOK_TRIGGER = "DROP TRIGGER webhook_outbox_write ON execution;"


def _drop(*names: str) -> str:
    return "".join(f"DROP INDEX {name};" for name in names)


def _audit_execution_index() -> str:
    """Django's index on audit_event.execution_id, whatever its generated name."""
    return """
DO $$
BEGIN
    EXECUTE (SELECT format('DROP INDEX %I', indexrelid::regclass::text) FROM pg_index
              WHERE indrelid = 'audit_event'::regclass
                AND indkey::text = (SELECT attnum::text FROM pg_attribute
                                     WHERE attrelid = 'audit_event'::regclass
                                       AND attname = 'execution_id'));
END $$;
"""


def _checks(as_list: bool) -> str:
    """The CHECK constraints that test a column against a vocabulary, replaced: `as_list`, as
    `column IN (...)` (a list of constants: how migrations before 0027 wrote them); otherwise as
    one array constant (how executions/lookups.py's `one_of` writes them since)."""
    from executions.choices import (
        TERMINAL_STATUSES,
        AuditType,
        CheckpointStatus,
        Effect,
        ExecutionStatus,
    )

    def test(column: str, values: Iterable[object]) -> str:
        words = [str(v) for v in values]
        if as_list:
            return f"{column} IN (" + ", ".join(f"'{w}'" for w in words) + ")"
        return f"{column}::text = ANY ('{{" + ",".join(words) + "}'::text[])"

    checks = {
        ("execution", "execution_status_valid"): test("status", ExecutionStatus.values),
        ("execution", "execution_terminal_has_finished_at"): (
            f"NOT {test('status', TERMINAL_STATUSES)} OR finished_at IS NOT NULL"
        ),
        ("audit_event", "audit_type_valid"): test("type", AuditType.values),
        ("action_execution", "action_execution_status_valid"): test(
            "status", CheckpointStatus.values
        ),
        ("action_execution", "action_execution_effect_valid"): test("effect", Effect.values),
    }
    return "".join(
        f"ALTER TABLE {table} DROP CONSTRAINT {name}, ADD CONSTRAINT {name} CHECK ({check});"
        for (table, name), check in checks.items()
    )


AUDIT_FOREIGN_KEYS = FOREIGN_KEYS.replace(
    "('request', 'execution', 'action_execution', 'audit_event')", "('audit_event')"
)
# Each variant's DDL from the migrated schema: `no-lists` drops the 11 list indexes, `no-fk` every
# foreign key of the four hot tables, `bare-indexes` every index but the primary keys, the
# claim's index and the checkpoint key, `bare` that with no foreign key and no trigger;
# `list-checks` and `compact-checks` rewrite the vocabulary CHECK constraints (docs/adr/0024).
VARIANTS: dict[str, str] = {
    "schema": "",
    "no-trigger": WEBHOOK_TRIGGER,
    "no-key-idx": _drop("action_execution_key_idx"),
    "no-audit-idx": _audit_execution_index(),
    "no-audit-fk": AUDIT_FOREIGN_KEYS,
    "no-fairness": _drop("execution_fair_idx", "execution_held_idx"),
    "no-lists": _drop(*LIST_INDEXES),
    "no-fk": FOREIGN_KEYS,
    "bare-indexes": _drop(*LIST_INDEXES, *OTHER_INDEXES) + _audit_execution_index(),
    "bare": _drop(*LIST_INDEXES, *OTHER_INDEXES)
    + _audit_execution_index()
    + FOREIGN_KEYS
    + WEBHOOK_TRIGGER,
    "list-checks": _checks(as_list=True),
    "compact-checks": _checks(as_list=False),
    "merged": "",  # today's schema, the last checkpoint saved by the final commit
}


class Schema:
    """The four statements of executions/sql/ on the migrated schema, as the worker sends them."""

    ENQUEUE, BLOCK = ENQUEUE_REQUESTS_AND_EXECUTIONS, BLOCK_REQUESTS
    CLAIM = sql.CLAIM_EXECUTIONS
    START, SUCCEED, FINALIZE = sql.CHECKPOINT_START, sql.CHECKPOINT_SUCCEED, sql.EXECUTION_FINALIZE
    WRITES = 3  # statements after the claims, each its own transaction

    def enqueue(self, conn: psycopg.Connection, flow_id: int, n: int) -> None:
        tag = "floor-" + uuid.uuid4().hex[:8]
        with conn.transaction():
            conn.execute(self.ENQUEUE, {"flow_id": flow_id, "tag": tag, "n": n})
            conn.execute(self.BLOCK, {"tag": tag})

    def claim(self, conn: psycopg.Connection, limit: int) -> list[dict]:
        params = {"owner": OWNER, "limit": limit, "lease_seconds": LEASE_SECONDS, "outage": False}
        return conn.execute(self.CLAIM, params, prepare=True).fetchall()

    @staticmethod
    def _fence(row: dict) -> dict:
        return {
            "execution_id": str(row["id"]),
            "request_id": str(row["request_id"]),
            "token": row["fencing_token"],
            "owner": OWNER,
        }

    def start(self, conn: psycopg.Connection, rows: list[dict]) -> int:
        items = [
            {
                **self._fence(row),
                "action_id": "noop",
                "sequence": 0,
                "capability": "NO_OP",
                "capability_version": 1,
                "effect": "READ_ONLY",
                "input_hash": NOOP_HASH,
                "external_key": f"{row['id']}:noop",
                "attempt": 1,
            }
            for row in rows
        ]
        params = {"items": Jsonb(items), "synchronous_commit": "off"}
        return len(conn.execute(self.START, params, prepare=True).fetchall())

    def succeed(self, conn: psycopg.Connection, rows: list[dict]) -> int:
        items = [
            {**self._fence(row), "action_id": "noop", "attempt": 1, "output": {}} for row in rows
        ]
        params = {"items": Jsonb(items), "synchronous_commit": "off"}
        return len(conn.execute(self.SUCCEED, params, prepare=True).fetchall())

    def finalize(self, conn: psycopg.Connection, rows: list[dict]) -> int:
        items = [self._final_item(row) for row in rows]
        params = {"items": Jsonb(items), "actor": "system:worker"}
        return len(conn.execute(self.FINALIZE, params, prepare=True).fetchall())

    def _final_item(self, row: dict) -> dict:
        return {
            **self._fence(row),
            "from_state": row["state"],
            "accepted_revision": row["accepted_revision"],
            "request_version": row["version"],
            "action_ids": ["noop"],
            "data": {**row["data"], "done": True},
            "target_state": "DONE",
            "result": {"outcome": "DONE", "targetState": "DONE"},
            "payload": {
                "transitionId": "go",
                "actionIds": ["noop"],
                "hitPolicy": "FIRST",
                "ruleIds": ["done"],
            },
        }


def _edited(statement: str, *edits: tuple[str, str]) -> str:
    """`statement` with each (old, new) replaced, each `old` found exactly once: a statement of
    executions/sql/ that no longer reads so stops the variant rather than skews it."""
    for old, new in edits:
        if statement.count(old) != 1:
            raise RuntimeError(f"pgvariants: {old!r} is not in the statement exactly once")
        statement = statement.replace(old, new)
    return statement


# CHECKPOINT_SUCCEED's write, for the items `fenced` holds rather than its own `holder`.
_SAVED = _edited(
    sql.CHECKPOINT_SUCCEED[sql.CHECKPOINT_SUCCEED.index("UPDATE action_execution") :],
    ("FROM holder AS h", "FROM fenced AS h"),
)
# `merged`: today's schema, the last action's SUCCEEDED checkpoint written by the final commit
# itself (one statement and one commit fewer per execution), made of EXECUTION_FINALIZE and
# CHECKPOINT_SUCCEED's write. The items carry both; the request's lock is a LEFT JOIN, so the
# checkpoint is saved whenever the fence holds; the final writes apply only where the request is
# still the accepted snapshot and every other expected checkpoint is SUCCEEDED (the one saved
# here still reads RUNNING in this statement's snapshot). It answers as EXECUTION_FINALIZE does.
SUCCEED_AND_FINALIZE = _edited(
    sql.EXECUTION_FINALIZE,
    (
        "result jsonb, payload jsonb)",
        "result jsonb, payload jsonb,\n"
        "               action_id text, attempt integer, output jsonb)",
    ),
    ("SELECT item.*\n", "SELECT item.*, locked.id IS NOT NULL AS snapshot_holds\n"),
    ("CROSS JOIN LATERAL (", " LEFT JOIN LATERAL ("),
    (") AS locked\n", ") AS locked ON true\n"),
    ("\nheld AS (", "\nsaved AS (\n" + _SAVED + "),\nheld AS ("),
    (
        "WHERE (SELECT count(*) FILTER (WHERE c.status <> 'SUCCEEDED') = 0",
        "WHERE f.snapshot_holds\n"
        "       AND f.execution_id IN (SELECT saved.execution_id FROM saved)\n"
        "       AND (SELECT count(*) FILTER (WHERE c.status <> 'SUCCEEDED'\n"
        "                                      AND c.action_id <> f.action_id) = 0",
    ),
)


class Merged(Schema):
    """Today's schema; the SUCCEEDED checkpoint written by the final commit's statement."""

    FINALIZE = SUCCEED_AND_FINALIZE
    WRITES = 2

    def succeed(self, conn: psycopg.Connection, rows: list[dict]) -> int:
        return len(rows)  # in finalize

    def _final_item(self, row: dict) -> dict:
        return {**super()._final_item(row), "action_id": "noop", "attempt": 1, "output": {}}


def driver(variant: str) -> Schema:
    """The statements `variant` is drained with."""
    return Merged() if variant == "merged" else Schema()
