"""Claims: how work is announced, claimed and loaded by its new holder (executions/queue/claims.py,
the scheduler's listening connection).

Invariants: the claim is one statement committed before any evaluation or adapter call; a
RUNNING execution's next_attempt_at equals its lease_expires_at (a CHECK), so the one partial
index execution_claim_idx serves due work and expired leases alike.
"""

from .fairness import ORDERS
from .fence import fenced

# Channel on which committed work is announced to idle workers; listeners treat any
# notification as "claim now" and never trust its payload for correctness.
NOTIFY_CHANNEL = "orquestador_executions"


# Announce new due work, from inside the transaction that creates or requeues it (delivered
# only if, and right after, it commits).
# Locks: nothing.
# Index: none.
NOTIFY_WORK = "SELECT pg_notify('orquestador_executions', %(execution_id)s::text)"


# Subscribe the worker's listening connection to NOTIFY_WORK.
# Locks: nothing.
# Index: none.
LISTEN_WORK = "LISTEN orquestador_executions"


# Claim up to %(limit)s due executions for %(owner)s (PENDING, due RETRY_WAIT, RUNNING with
# an expired lease, SUSPENDED past its deadline), in claim order: attempts + 1, token + 1, owner
# and lease from one reading of the database clock; returns what the new holder runs with.
# Committed before any evaluation or adapter call. How it does it (takeover audit, poison cap,
# dispatch principal, durability, the plan): docs/adr/0001, "How the statement does it".
# Locks: each claimed execution row, FOR UPDATE SKIP LOCKED; KEY SHARE on a takeover's request
# and execution rows (the audit's foreign keys).
# Index: execution_claim_idx, walked in order; none for the claimed rows (a TID scan of the
# versions `due` locked); request_pkey, one ordered descent per row; action_execution_action_uniq.
_CLAIM = """
WITH RECURSIVE clock AS MATERIALIZED (
    SELECT t.now_at, t.now_at + make_interval(secs => %(lease_seconds)s::double precision)
               AS lease_until,
           set_config('synchronous_commit', 'off', true) AS durability
      FROM (SELECT clock_timestamp() AS now_at) AS t
),
{due},
claimed AS (
UPDATE execution AS e
   SET status = 'RUNNING',
       attempts = e.attempts + 1,
       fencing_token = e.fencing_token + 1,
       lease_owner = %(owner)s,
       lease_expires_at = (SELECT lease_until FROM clock),
       next_attempt_at = (SELECT lease_until FROM clock),
       started_at = COALESCE(e.started_at, (SELECT now_at FROM clock)),
       claimed_at = (SELECT now_at FROM clock),
       dispatch_principal = CASE
           WHEN e.status IN ('RUNNING', 'SUSPENDED') THEN NULL
           ELSE e.dispatch_principal
       END,
       reclaims = CASE
           WHEN e.status <> 'RUNNING' THEN 0
           WHEN EXISTS (SELECT 1
                          FROM action_execution AS c
                         WHERE c.execution_id = e.id AND c.status = 'SUCCEEDED'
                           AND c.finished_at >= COALESCE(e.claimed_at, '-infinity'))
               THEN 0
           WHEN %(outage)s
             OR e.lease_expires_at <= pg_postmaster_start_time()
                    + make_interval(secs => %(lease_seconds)s::double precision)
               THEN e.reclaims
           ELSE e.reclaims + 1
       END
 -- By the versions due locked, a TID scan whatever the statistics (docs/adr/0009).
 WHERE e.ctid = ANY (ARRAY(SELECT due.row_ctid FROM due))
RETURNING e.id, e.request_id, e.flow_id, e.transition_id, e.attempts, e.fencing_token,
          e.dispatch_principal, e.accepted_revision,
          e.trace_context,
          CASE WHEN e.attempts > 1 THEN
              (SELECT jsonb_agg(jsonb_build_object(
                          'action_id', c.action_id, 'sequence', c.sequence,
                          'capability', c.capability,
                          'capability_version', c.capability_version, 'effect', c.effect,
                          'status', c.status, 'input_hash', c.input_hash,
                          'external_key', c.external_key, 'attempt', c.attempt,
                          'output', c.output, 'error_code', c.error_code)
                          ORDER BY c.sequence)
                 FROM action_execution AS c
                WHERE c.execution_id = e.id)
          END AS checkpoints,
          e.reclaims,
          e.compensation_cause
),
takeover AS (
INSERT INTO audit_event (request_id, execution_id, type, actor, payload)
SELECT c.request_id, c.id, 'LEASE_TAKEN_OVER', 'system:worker',
       jsonb_build_object('previousOwner', due.was_owner, 'previousToken', due.was_token,
                          'leaseExpiredAt', due.was_expires_at, 'newOwner', %(owner)s::text,
                          'newToken', c.fencing_token, 'attempt', c.attempts)
  FROM claimed AS c
  JOIN due ON due.id = c.id
 WHERE due.was_status = 'RUNNING'
)
SELECT c.id, c.request_id, c.flow_id, c.transition_id, c.attempts, c.fencing_token,
       c.dispatch_principal, r.data, r.state, r.revision, r.version, r.owner, r.scope,
       c.trace_context,
       c.accepted_revision, c.checkpoints, c.reclaims, due.was_status = 'RUNNING' AS taken_over,
       c.compensation_cause
  FROM claimed AS c
  JOIN due ON due.id = c.id
 -- The first request_pkey entry at or after the id: with sorts off, no other index can give
 -- that order whatever the statistics (docs/adr/0009); an equality alone let one planned on
 -- empty tables walk a list index whole per row.
 CROSS JOIN LATERAL (
           SELECT r.id, r.data, r.state, r.revision, r.version, r.owner, r.scope
             FROM request AS r
            WHERE r.id >= c.request_id
            ORDER BY r.id
            LIMIT 1
       ) AS r
 WHERE r.id = c.request_id
"""
CLAIM_EXECUTIONS = _CLAIM.replace("{due}", ORDERS["queue"])  # WORKER_FAIRNESS=queue, the default

# The claim under WORKER_FAIRNESS=tenant: the same statement, its due rows taken by their rank
# within their tenant, then by age (executions/sql/fairness.py; docs/adr/0019).
# Locks: as CLAIM_EXECUTIONS; rows are locked only in its last step, each tenant's quota.
# Index: execution_fair_idx (the tenants, and each one's due rows in order), execution_held_idx
# (each one's held executions); then as CLAIM_EXECUTIONS.
CLAIM_EXECUTIONS_BY_TENANT = _CLAIM.replace("{due}", ORDERS["tenant"])


# End a call of a route with max_in_flight and claim the oldest execution parked for a place
# with that place granted (route_call_handoff, migration 0020): one statement, so the place is
# never free for another take and the woken run needs none; its place's call, action and attempt
# are the last columns. Nothing parked (or a pause, a rate, no room): the call ends, nothing is
# claimed, and the oldest parked is woken and announced as route_call_end does.
# `due` reads the chosen row by id with no other condition, and the update finds it by id too,
# not by the version `due` locked: the function locked it after this statement's snapshot was
# taken, so a version committed in between (an execution parked while this waited for the
# route's row lock) is invisible to that snapshot. By id, the update reaches the version the
# snapshot sees and follows it to that newer one, which it claims; by the newer version's ctid
# it found nothing, and the execution, its park removed, was stranded until its hour was up.
# Locks: the route's route_limit row; the ended route_call row; then as CLAIM_EXECUTIONS, the
# one chosen execution row (locked first by the function).
# Index: route_limit_pkey; route_call_pkey; route_park_wait_idx; execution_pkey; then as
# CLAIM_EXECUTIONS.
CLAIM_PASSED = (
    _CLAIM.replace(
        "{due}",
        """passed AS MATERIALIZED (
    SELECT * FROM route_call_handoff(%(route)s, %(call_id)s)
),
due AS (
    SELECT e.id, e.ctid AS row_ctid, e.status AS was_status, e.lease_owner AS was_owner,
           e.fencing_token AS was_token, e.lease_expires_at AS was_expires_at
      FROM execution AS e
     WHERE e.id = (SELECT passed.execution_id FROM passed)
       FOR UPDATE
)""",
    )
    .replace(
        "       c.compensation_cause\n  FROM claimed AS c",
        "       c.compensation_cause, passed.call_id AS place_call_id,\n"
        "       passed.action_id AS place_action_id, passed.attempt AS place_attempt\n"
        "  FROM claimed AS c\n  JOIN passed ON passed.execution_id = c.id",
    )
    .replace(
        " WHERE e.ctid = ANY (ARRAY(SELECT due.row_ctid FROM due))",
        " WHERE e.id = (SELECT due.id FROM due)",
    )
)


# What a holder runs with: the accepted request snapshot and every checkpoint so far.
# Fenced, so a stale holder loads nothing.
# Locks: nothing (the request is blocked by this execution).
# Index: execution_pkey, request by primary key, checkpoints by
# action_execution_action_uniq.
LOAD_EXECUTION = fenced(
    """
SELECT r.data, r.state, r.revision, r.version, r.owner, r.scope, e.accepted_revision,
       e.compensation_cause,
       COALESCE(
           (SELECT jsonb_agg(jsonb_build_object(
                       'action_id', c.action_id, 'sequence', c.sequence,
                       'capability', c.capability, 'capability_version', c.capability_version,
                       'effect', c.effect, 'status', c.status, 'input_hash', c.input_hash,
                       'external_key', c.external_key, 'attempt', c.attempt,
                       'output', c.output, 'error_code', c.error_code)
                       ORDER BY c.sequence)
              FROM action_execution AS c
             WHERE c.execution_id = e.id),
           '[]'::jsonb) AS checkpoints
  FROM execution AS e
  JOIN request AS r ON r.id = e.request_id
 WHERE {fence}
"""
)


# The pinned flow's definition (immutable once published; workers cache it by id).
# Locks: nothing.
# Index: flow primary key.
FLOW_DEFINITION = "SELECT definition FROM flow WHERE id = %(flow_id)s"
