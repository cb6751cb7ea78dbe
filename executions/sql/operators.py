"""Operator writes: cancellation (executions/queue/cancel.py) and an operator's resolution
(reconciliation/services.py).

Each is one transaction: EXECUTION_REQUEST_OF, then REQUEST_LOCK and EXECUTION_LOCK (request
before execution, as everywhere), then a write guarded on the status and token read under the
lock, which bumps the token so whoever holds the lease is fenced out of every later write
(`OPERATOR_GUARDED`). Abandoning releases the request with REQUEST_RELEASE in the same
transaction.
"""

from .fragments import composed

# Channel on which a cancellation that fenced out a RUNNING execution tells its holder, so the
# worker holding it stops it at once rather than at its next renewal. The payload is
# "<execution id>:<new token>"; a worker acts only on a holder whose token is older, and the
# fence, not this message, is what keeps a stale holder from writing.
CANCEL_CHANNEL = "orquestador_cancels"


# Announce a cancellation, from inside the cancelling transaction (delivered only if it
# commits, and then after the token moved).
# Locks: nothing.
# Index: none.
NOTIFY_CANCEL = (
    "SELECT pg_notify('orquestador_cancels', %(execution_id)s::text || ':' || %(token)s::text)"
)


# Subscribe the worker's listening connection to NOTIFY_CANCEL (the same connection as
# LISTEN_WORK: no connection of its own).
# Locks: nothing.
# Index: none.
LISTEN_CANCELS = "LISTEN orquestador_cancels"


# The request an execution belongs to, read before taking any lock (operator writes).
# Locks: nothing.
# Index: execution_pkey.
EXECUTION_REQUEST_OF = "SELECT request_id FROM execution WHERE id = %(execution_id)s"


# Lock the execution after its request (operator writes); returns its status and token.
# Locks: the execution row, FOR NO KEY UPDATE.
# Index: execution_pkey.
EXECUTION_LOCK = """
SELECT request_id, status, fencing_token
  FROM execution
 WHERE id = %(execution_id)s
   FOR NO KEY UPDATE
"""


# Cancel: CANCELLED under token + 1, lease cleared; guarded on the status and token read
# under the lock (an operator guard, not a holder's fence).
# Locks: the execution row (already locked).
# Index: execution_pkey.
EXECUTION_CANCEL = composed(
    """
UPDATE execution
   SET status = 'CANCELLED',
       fencing_token = fencing_token + 1,
       {lease_cleared},
       error_code = NULL,
       error_detail = %(error_detail)s,
       finished_at = clock_timestamp()
 WHERE id = %(execution_id)s AND status = %(status)s AND fencing_token = %(token)s
RETURNING fencing_token
"""
)


# Cancel an execution whose writes are outstanding: RECONCILIATION_REQUIRED under token + 1,
# lease cleared, request still blocked; same guard as EXECUTION_CANCEL.
# Locks: the execution row (already locked).
# Index: execution_pkey.
EXECUTION_CANCEL_TO_RECONCILIATION = composed(
    """
UPDATE execution
   SET status = 'RECONCILIATION_REQUIRED',
       fencing_token = fencing_token + 1,
       {lease_cleared},
       {error_recorded}
 WHERE id = %(execution_id)s AND status = %(status)s AND fencing_token = %(token)s
RETURNING fencing_token
"""
)


# Settle an uncertain checkpoint (RUNNING or UNKNOWN) as the operator established:
# SUCCEEDED with the output they recorded, or FAILED with REPLAY_AUTHORIZED, under the new token.
# Locks: the checkpoint row, under the execution lock.
# Index: action_execution_action_uniq.
RECONCILE_SETTLE_CHECKPOINT = composed(
    """
UPDATE action_execution
   SET {outcome_given},
       fencing_token = %(token)s,
       finished_at = clock_timestamp()
 WHERE execution_id = %(execution_id)s
   AND action_id = %(action_id)s
   AND status IN ('RUNNING', 'UNKNOWN', 'ACCEPTED')
RETURNING id
"""
)


# Requeue a resolved execution: PENDING and due now under token + 1, lease and error
# cleared; guarded on the status and token read under the lock (no row: another resolution won).
# The requeued dispatch runs as system: the operator who caused it is in the audit trail, and is
# not a principal of the request's tenant.
# Locks: the execution row (already locked).
# Index: execution_pkey; it moves to execution_claim_idx.
RECONCILE_REQUEUE = composed(
    """
UPDATE execution
   SET status = 'PENDING',
       fencing_token = fencing_token + 1,
       {lease_cleared},
       next_attempt_at = clock_timestamp(),
       {error_cleared},
       finished_at = NULL,
       dispatch_principal = NULL
 WHERE id = %(execution_id)s AND status = 'RECONCILIATION_REQUIRED' AND fencing_token = %(token)s
RETURNING fencing_token
"""
)


# Abandon an execution in reconciliation: FAILED under token + 1, lease cleared, with the
# code that says so; same guard as RECONCILE_REQUEUE.
# Locks: the execution row (already locked).
# Index: execution_pkey.
RECONCILE_ABANDON = composed(
    """
UPDATE execution
   SET status = 'FAILED',
       fencing_token = fencing_token + 1,
       {lease_cleared},
       {error_recorded},
       finished_at = clock_timestamp()
 WHERE id = %(execution_id)s AND status = 'RECONCILIATION_REQUIRED' AND fencing_token = %(token)s
RETURNING fencing_token
"""
)
