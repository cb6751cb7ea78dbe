"""Finalisation: how a run ends (executions/queue/finalize.py): completed, retry scheduled, failed
or handed to an operator; with the request lock, release and audit append that operator writes and
waits share.

Lock order everywhere: request, then execution, then checkpoints; a statement that locks several
rows of one table locks them in id order.
"""

from .fence import fenced

# Schedule a retry: RETRY_WAIT, due after %(delay_seconds)s by the database clock, lease
# cleared, the attempt's error kept; the row stays in execution_claim_idx under its new due time.
# Locks: the execution row (already locked by CHECKPOINT_SETTLE).
# Index: execution_pkey.
EXECUTION_SCHEDULE_RETRY = fenced(
    """
UPDATE execution AS e
   SET status = 'RETRY_WAIT',
       {lease_cleared},
       next_attempt_at = clock_timestamp()
                         + make_interval(secs => %(delay_seconds)s::double precision),
       {error_recorded}
 WHERE {fence}
RETURNING e.next_attempt_at
"""
)


# Append one audit event (the table is append-only) for executions/queue/audit.py; returns its id.
# Locks: KEY SHARE on the request and execution rows, through the foreign keys (the
# writer already holds stronger locks).
# Index: none.
AUDIT_APPEND = """
INSERT INTO audit_event (request_id, execution_id, type, actor, payload)
VALUES (%(request_id)s, %(execution_id)s, %(type)s, %(actor)s, %(payload)s)
RETURNING id
"""


# Lock a request before its execution (the one lock order); returns who blocks it.
# Locks: the request row, FOR NO KEY UPDATE.
# Index: request primary key.
REQUEST_LOCK = "SELECT blocked_by_id FROM request WHERE id = %(request_id)s FOR NO KEY UPDATE"


# Which writes of an execution are outstanding: a write effect SUCCEEDED (it happened) or
# RUNNING/UNKNOWN/ACCEPTED (it may have, or an asynchronous provider is carrying it out); either
# keeps the request from being released as FAILED.
# Locks: nothing.
# Index: action_execution_action_uniq.
WRITES_OUTSTANDING = """
SELECT COALESCE(bool_or(c.status IN ('RUNNING', 'UNKNOWN', 'ACCEPTED')), false) AS uncertain,
       COALESCE(bool_or(c.status = 'SUCCEEDED'), false) AS succeeded,
       (array_agg(c.action_id ORDER BY c.sequence DESC))[1] AS last_action_id
  FROM action_execution AS c
 WHERE c.execution_id = %(execution_id)s
   AND c.effect IN ('IDEMPOTENT_WRITE', 'NON_IDEMPOTENT_WRITE')
   AND c.status IN ('SUCCEEDED', 'RUNNING', 'UNKNOWN', 'ACCEPTED')
"""


# End an execution FAILED (nothing outstanding): lease cleared, safe error recorded;
# REQUEST_RELEASE follows in the same transaction.
# Locks: the execution row, after its request.
# Index: execution_pkey.
EXECUTION_FAIL = fenced(
    """
UPDATE execution AS e
   SET status = 'FAILED',
       {lease_cleared},
       {error_recorded},
       finished_at = clock_timestamp()
 WHERE {fence}
RETURNING e.id
"""
)


# Hand an execution to an operator: RECONCILIATION_REQUIRED, lease cleared, the request
# stays blocked; it moves from execution_claim_idx to execution_reconcile_idx.
# Locks: the execution row, after its request.
# Index: execution_pkey.
EXECUTION_REQUIRE_RECONCILIATION = fenced(
    """
UPDATE execution AS e
   SET status = 'RECONCILIATION_REQUIRED',
       {lease_cleared},
       {error_recorded}
 WHERE {fence}
RETURNING e.id
"""
)


# Release the request an execution held, data, state and revision unchanged (version + 1),
# only while this execution holds it.
# Locks: the request row (already locked by the caller).
# Index: request primary key (`IS NOT DISTINCT FROM`, never NULL here, lets no statistics lead
# the planner to request_blocked_idx, whose predicate `=` would prove: as the fence does).
REQUEST_RELEASE = """
UPDATE request
   SET blocked_by_id = NULL,
       version = version + 1,
       updated_at = clock_timestamp()
 WHERE id = %(request_id)s
   AND blocked_by_id IS NOT DISTINCT FROM %(execution_id)s
RETURNING version
"""


# Finalise one or many successful executions (%(items)s, grouped like CHECKPOINT_START) in
# one statement: for each item, only if the request is still the accepted snapshot and every
# expected checkpoint is SUCCEEDED (and none is anything else), mark the execution SUCCEEDED
# with its result, write the request's data and state (revision + 1, version + 1, unblocked)
# and append TRANSITION_COMPLETED; all of an item or none of it. Returns (execution id, new
# revision) per finalised item; LEASE_PROBE then FINALIZE_PROBE say why an item is missing.
# Why the requests are locked as they are: docs/adr/0009, "How the statements do it".
# Locks: requests first (FOR NO KEY UPDATE, id order, one lookup per item), then executions
# (fenced, id order).
# Index: request and execution primary keys; action_execution_action_uniq.
EXECUTION_FINALIZE = fenced(
    """
WITH item AS (
    SELECT *
      FROM jsonb_to_recordset(%(items)s::jsonb) AS i(
               execution_id uuid, request_id uuid, token bigint, owner text, from_state text,
               accepted_revision bigint, request_version bigint, action_ids text[],
               data jsonb, target_state text, result jsonb, payload jsonb)
),
req AS (
    SELECT item.*
      FROM (SELECT * FROM item ORDER BY item.request_id) AS item
     CROSS JOIN LATERAL (
               SELECT r.id
                 FROM request AS r
                WHERE r.id = item.request_id
                  AND r.blocked_by_id IS NOT DISTINCT FROM item.execution_id
                  AND r.state = item.from_state AND r.revision = item.accepted_revision
                  AND r.version = item.request_version
                  FOR NO KEY UPDATE OF r
           ) AS locked
),
fenced AS (
    SELECT req.*
      FROM execution AS e
      JOIN req ON req.execution_id = e.id
     WHERE {fence_of_request_item}
     ORDER BY e.id
       FOR NO KEY UPDATE OF e
),
held AS (
    SELECT f.*
      FROM fenced AS f
     WHERE (SELECT count(*) FILTER (WHERE c.status <> 'SUCCEEDED') = 0
                   AND count(*) FILTER (WHERE c.action_id = ANY(f.action_ids))
                       = cardinality(f.action_ids)
              FROM action_execution AS c
             WHERE c.execution_id = f.execution_id)
),
done AS (
    UPDATE execution AS e
       SET status = 'SUCCEEDED',
           result = held.result,
           {lease_cleared},
           {error_cleared},
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
SELECT done.id, moved.revision
  FROM done
  JOIN held ON held.execution_id = done.id
  JOIN moved ON moved.id = held.request_id
"""
)


# Why a final commit matched nothing although the lease holds (read after the refusal only):
# is the request still the accepted snapshot, and which expected checkpoints are missing or not
# SUCCEEDED ("action STATUS", in action order, then any other checkpoint not SUCCEEDED).
# Locks: nothing.
# Index: request primary key; action_execution_action_uniq.
FINALIZE_PROBE = """
SELECT r.blocked_by_id IS NOT DISTINCT FROM %(execution_id)s AND r.state = %(from_state)s
       AND r.revision = %(accepted_revision)s AND r.version = %(request_version)s,
       ARRAY(
           SELECT a.action_id || ' ' || coalesce(c.status, 'MISSING')
             FROM unnest(%(action_ids)s::text[]) WITH ORDINALITY AS a(action_id, n)
             LEFT JOIN action_execution AS c
               ON c.execution_id = %(execution_id)s AND c.action_id = a.action_id
            WHERE c.status IS DISTINCT FROM 'SUCCEEDED'
            ORDER BY a.n
       ) || ARRAY(
           SELECT c.action_id || ' ' || c.status
             FROM action_execution AS c
            WHERE c.execution_id = %(execution_id)s AND c.status <> 'SUCCEEDED'
              AND c.action_id <> ALL(%(action_ids)s::text[])
            ORDER BY c.sequence
       )
  FROM request AS r
 WHERE r.id = %(request_id)s
"""
