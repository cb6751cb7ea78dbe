"""bench/pgfloor.py's variants: the DDL that makes each from the migrated schema, and the drivers
that send each one's statements (today's from executions/sql/, the prototype's from
bench/pgreshaped.py, and today's with the last checkpoint saved by the final commit).
"""

import hashlib
import uuid
from collections.abc import Iterable

import psycopg
from psycopg.types.json import Jsonb

from bench import pgreshaped
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
    "reshaped": "",  # its own schema (bench/pgreshaped.py)
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


class Reshaped(Schema):
    """The same items, on the prototype of bench/pgreshaped.py."""

    ENQUEUE, BLOCK, CLAIM = pgreshaped.ENQUEUE, pgreshaped.BLOCK, pgreshaped.CLAIM
    START, SUCCEED = pgreshaped.CHECKPOINT_START, pgreshaped.CHECKPOINT_SUCCEED
    FINALIZE = pgreshaped.FINALIZE


# Not a reshape: today's schema, with the last action's SUCCEEDED checkpoint written by the
# final commit itself (one statement and one commit fewer per execution). Whenever the fence
# holds, the checkpoint is saved; the final writes apply only where the request is still the
# accepted snapshot and every other expected checkpoint is SUCCEEDED, as EXECUTION_FINALIZE's.
SUCCEED_AND_FINALIZE = """
WITH item AS (
    SELECT *
      FROM jsonb_to_recordset(%(items)s::jsonb) AS i(
               execution_id uuid, request_id uuid, token bigint, owner text, from_state text,
               accepted_revision bigint, request_version bigint, action_ids text[],
               data jsonb, target_state text, result jsonb, payload jsonb,
               action_id text, attempt integer, output jsonb)
),
req AS (
    SELECT item.*, locked.id IS NOT NULL AS snapshot_holds
      FROM (SELECT * FROM item ORDER BY item.request_id) AS item
      LEFT JOIN LATERAL (
               SELECT r.id
                 FROM request AS r
                WHERE r.id = item.request_id
                  AND r.blocked_by_id IS NOT DISTINCT FROM item.execution_id
                  AND r.state = item.from_state AND r.revision = item.accepted_revision
                  AND r.version = item.request_version
                  FOR NO KEY UPDATE OF r
           ) AS locked ON true
),
fenced AS (
    SELECT req.*
      FROM execution AS e
      JOIN req ON req.execution_id = e.id
     WHERE {fence}
     ORDER BY e.id
       FOR NO KEY UPDATE OF e
),
saved AS (
    UPDATE action_execution AS c
       SET status = 'SUCCEEDED',
           output = f.output,
           error_code = NULL,
           error_detail = NULL,
           finished_at = clock_timestamp()
      FROM fenced AS f
     WHERE c.execution_id = f.execution_id AND c.action_id = f.action_id
       AND c.status = 'RUNNING' AND c.fencing_token = f.token AND c.attempt = f.attempt
    RETURNING c.execution_id
),
held AS (
    SELECT f.*
      FROM fenced AS f
     WHERE f.snapshot_holds
       AND f.execution_id IN (SELECT saved.execution_id FROM saved)
       AND (SELECT count(*) FILTER (WHERE c.status <> 'SUCCEEDED' AND c.action_id <> f.action_id)
                   = 0
                   AND count(*) FILTER (WHERE c.action_id = ANY(f.action_ids))
                       = cardinality(f.action_ids)
              FROM action_execution AS c
             WHERE c.execution_id = f.execution_id)
),
done AS (
    UPDATE execution AS e
       SET status = 'SUCCEEDED',
           result = held.result,
           lease_owner = NULL,
           lease_expires_at = NULL,
           error_code = NULL,
           error_detail = NULL,
           finished_at = clock_timestamp()
      FROM held
     WHERE e.id = held.execution_id
    RETURNING e.id
),
moved AS (
    UPDATE request AS r
       SET data = held.data,
           state = held.target_state,
           revision = r.revision + 1,
           version = r.version + 1,
           blocked_by_id = NULL,
           updated_at = clock_timestamp()
      FROM held
     WHERE r.id = held.request_id
    RETURNING r.id, r.revision
),
audit AS (
    INSERT INTO audit_event (request_id, execution_id, type, actor, payload)
    SELECT held.request_id, held.execution_id, 'TRANSITION_COMPLETED', %(actor)s, held.payload
      FROM held
)
SELECT saved.execution_id, moved.revision
  FROM saved
  LEFT JOIN held ON held.execution_id = saved.execution_id
  LEFT JOIN done ON done.id = held.execution_id
  LEFT JOIN moved ON moved.id = held.request_id
""".replace(
    "{fence}",
    pgreshaped.FENCE.replace("s.execution_id", "e.id")
    .replace("s.request_id", "e.request_id")
    .replace("s.", "e.")
    .format(i="req"),
)


class Merged(Schema):
    """Today's schema; the SUCCEEDED checkpoint written by the final commit's statement."""

    FINALIZE = SUCCEED_AND_FINALIZE
    WRITES = 2

    def succeed(self, conn: psycopg.Connection, rows: list[dict]) -> int:
        return len(rows)  # in finalize

    def _final_item(self, row: dict) -> dict:
        return {**super()._final_item(row), "action_id": "noop", "attempt": 1, "output": {}}

    def finalize(self, conn: psycopg.Connection, rows: list[dict]) -> int:
        items = [self._final_item(row) for row in rows]
        params = {"items": Jsonb(items), "actor": "system:worker"}
        answer = conn.execute(self.FINALIZE, params, prepare=True).fetchall()
        return sum(1 for row in answer if row["revision"] is not None)  # finalised, not only saved


def driver(variant: str) -> Schema:
    """The statements `variant` is drained with."""
    return {"reshaped": Reshaped, "merged": Merged}.get(variant, Schema)()
