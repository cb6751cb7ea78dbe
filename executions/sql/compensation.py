"""Compensation (executions/queue/compensation.py): beginning it, ending an execution COMPENSATED,
and a cancellation that requeues an execution to compensate.

Lock order as everywhere: request (REQUEST_LOCK), then execution, then checkpoints.
"""

from .fence import fenced
from .fragments import composed

# Every checkpoint of one execution, as the holder that begins compensating decides from them
# (read after REQUEST_LOCK, inside the beginning's transaction).
# Locks: nothing (only the holder writes them; EXECUTION_BEGIN_COMPENSATION checks its fence).
# Index: action_execution_action_uniq.
CHECKPOINTS_OF = """
SELECT c.action_id, c.sequence, c.capability, c.capability_version, c.effect, c.status,
       c.input_hash, c.external_key, c.attempt, c.output, c.error_code
  FROM action_execution AS c
 WHERE c.execution_id = %(execution_id)s
 ORDER BY c.sequence
"""


# Begin compensating: the forward path's error becomes the compensation's cause (code and
# detail, kept apart from the execution's error, which a step's retry rewrites) and the
# execution's error; it stays RUNNING under the same holder, which runs the compensations next.
# Locks: the execution row, after its request.
# Index: execution_pkey.
EXECUTION_BEGIN_COMPENSATION = fenced(
    """
UPDATE execution AS e
   SET compensation_cause = %(error_code)s,
       compensation_detail = %(error_detail)s,
       {error_recorded}
 WHERE {fence}
RETURNING e.id
"""
)


# End a compensating execution COMPENSATED, its cause as its error (code and detail), only if
# every compensation step the holder ran (%(step_ids)s) is SUCCEEDED and no write is uncertain;
# REQUEST_RELEASE follows in the same transaction. It leaves execution_claim_idx.
# Locks: the execution row, after its request.
# Index: execution_pkey; action_execution_action_uniq.
EXECUTION_COMPENSATE = fenced(
    """
UPDATE execution AS e
   SET status = 'COMPENSATED',
       {lease_cleared},
       error_code = e.compensation_cause,
       error_detail = e.compensation_detail,
       finished_at = clock_timestamp()
 WHERE {fence}
   AND e.compensation_cause IS NOT NULL
   AND (SELECT count(*) FILTER (WHERE c.action_id = ANY(%(step_ids)s::text[])
                                  AND c.status = 'SUCCEEDED') = cardinality(%(step_ids)s::text[])
               AND count(*) FILTER (WHERE c.status IN ('RUNNING', 'UNKNOWN', 'ACCEPTED')
                                      AND c.effect <> 'READ_ONLY') = 0
          FROM action_execution AS c
         WHERE c.execution_id = e.id)
RETURNING e.compensation_cause
"""
)


# Cancel an opted-in execution whose writes all succeeded: PENDING and due now under token + 1
# (the holder is fenced out), to be claimed by a worker that compensates; its cause
# CANCELLED_AFTER_WRITE unless it was compensating already. Guarded like EXECUTION_CANCEL on
# the status and token read under the lock. The requeued dispatch runs as system.
# Locks: the execution row (already locked).
# Index: execution_pkey; it stays in execution_claim_idx.
EXECUTION_CANCEL_TO_COMPENSATION = composed(
    """
UPDATE execution
   SET status = 'PENDING',
       fencing_token = fencing_token + 1,
       {lease_cleared},
       next_attempt_at = clock_timestamp(),
       compensation_cause = COALESCE(compensation_cause, %(error_code)s),
       compensation_detail = CASE WHEN compensation_cause IS NULL THEN %(error_detail)s
                                  ELSE compensation_detail END,
       {error_recorded},
       dispatch_principal = NULL
 WHERE id = %(execution_id)s AND status = %(status)s AND fencing_token = %(token)s
RETURNING fencing_token
"""
)


# The "compensate" resolution (reconciliation/compensate.py): requeue an execution in
# reconciliation, PENDING and due now under token + 1, lease and error cleared, its compensation
# cause set unless it was compensating already; guarded like RECONCILE_REQUEUE.
# Locks: the execution row (already locked).
# Index: execution_pkey; it moves to execution_claim_idx.
RECONCILE_COMPENSATE = composed(
    """
UPDATE execution
   SET status = 'PENDING',
       fencing_token = fencing_token + 1,
       {lease_cleared},
       next_attempt_at = clock_timestamp(),
       compensation_cause = COALESCE(compensation_cause, %(error_code)s),
       compensation_detail = CASE WHEN compensation_cause IS NULL THEN error_detail
                                  ELSE compensation_detail END,
       {error_cleared},
       finished_at = NULL,
       dispatch_principal = NULL
 WHERE id = %(execution_id)s AND status = 'RECONCILIATION_REQUIRED' AND fencing_token = %(token)s
RETURNING fencing_token
"""
)
