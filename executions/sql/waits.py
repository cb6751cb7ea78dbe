"""Waiting: wait actions, resumes and early events, and asynchronous providers' callbacks
(executions/queue/waits.py, resumes.py, callbacks.py).

The worker's writes (reach a wait, settle its timeout, accept an asynchronous call) are fenced
like every write after a claim and lock the request, then the execution. A resume (an event, a
callback) locks the request, then the execution, requires the state it read under those locks
and bumps the token, so a worker that still believes it holds the execution is fenced out.
Events are unique per (execution, eventId) (execution_event_uniq), which every statement on them
uses.
"""

from .fence import fenced
from .fragments import composed

# Lock the holder's execution row for a wait's transaction, fenced (after REQUEST_LOCK). No
# row: superseded.
# Locks: the execution row, FOR NO KEY UPDATE.
# Index: execution_pkey.
WAIT_HOLDER_LOCK = fenced("{holder_row}")


# Take the oldest event kept for this wait (it came before the wait was reached): CONSUMED now.
# Locks: that event row (under the execution lock).
# Index: execution_event_uniq's execution prefix.
EVENT_TAKE_KEPT = """
UPDATE execution_event AS v
   SET status = 'CONSUMED', consumed_at = clock_timestamp()
 WHERE v.id = (SELECT k.id FROM execution_event AS k
                WHERE k.execution_id = %(execution_id)s AND k.action_id = %(action_id)s
                  AND k.status = 'KEPT'
                ORDER BY k.id LIMIT 1)
RETURNING v.event_id, v.event, v.payload, v.actor
"""


# Record a wait action's checkpoint under the holder's token: WAITING (the execution suspends) or
# SUCCEEDED with a kept event's payload as output; a wait is reached once per execution.
# Locks: the new row (under the execution lock).
# Index: action_execution_action_uniq.
WAIT_CHECKPOINT_INSERT = """
INSERT INTO action_execution
       (execution_id, action_id, sequence, capability, capability_version, effect, status,
        input_hash, external_key, attempt, fencing_token, output, started_at, finished_at)
VALUES (%(execution_id)s, %(action_id)s, %(sequence)s, %(capability)s, 1, 'READ_ONLY',
        %(status)s, %(input_hash)s, %(external_key)s, 1, %(token)s, %(output)s,
        clock_timestamp(), CASE WHEN %(finished)s::boolean THEN clock_timestamp() END)
"""


# Suspend: SUSPENDED until the wait's deadline (next_attempt_at, by the database clock), lease
# cleared, the request still blocked; the row stays in execution_claim_idx keyed by its deadline.
# Locks: the execution row (already locked by WAIT_HOLDER_LOCK).
# Index: execution_pkey.
EXECUTION_SUSPEND = fenced(
    """
UPDATE execution AS e
   SET status = 'SUSPENDED',
       {lease_cleared},
       next_attempt_at = clock_timestamp()
                         + make_interval(secs => %(timeout_seconds)s::double precision),
       {error_cleared}
 WHERE {fence}
RETURNING e.next_attempt_at
"""
)


# Has this wait's deadline passed by the database clock? The deadline is the WAITING
# checkpoint's start plus the wait's timeout.
# Locks: nothing.
# Index: action_execution_action_uniq.
WAIT_DEADLINE = """
SELECT c.started_at + make_interval(secs => %(timeout_seconds)s::double precision) AS deadline,
       c.started_at + make_interval(secs => %(timeout_seconds)s::double precision)
           <= clock_timestamp() AS passed
  FROM action_execution AS c
 WHERE c.execution_id = %(execution_id)s AND c.action_id = %(action_id)s
"""


# Settle a timed-out wait's checkpoint under the new holder's token, only while it is still
# WAITING: SUCCEEDED with the wait's onTimeout payload, or FAILED with EVENT_TIMEOUT.
# Locks: the checkpoint row (under the execution lock).
# Index: action_execution_action_uniq.
WAIT_CHECKPOINT_TIME_OUT = composed(
    """
UPDATE action_execution AS c
   SET {outcome_given},
       fencing_token = %(token)s,
       finished_at = clock_timestamp()
 WHERE c.execution_id = %(execution_id)s AND c.action_id = %(action_id)s
   AND c.status = 'WAITING'
RETURNING c.id
"""
)


# Back to SUSPENDED until a deadline not yet reached (a holder that found the wait early, e.g. a
# lease that expired between claim and suspend). Fenced like EXECUTION_SUSPEND.
# Locks: the execution row (already locked by WAIT_HOLDER_LOCK).
# Index: execution_pkey.
EXECUTION_SUSPEND_UNTIL = fenced(
    """
UPDATE execution AS e
   SET status = 'SUSPENDED',
       {lease_cleared},
       next_attempt_at = %(deadline)s::timestamptz
 WHERE {fence}
RETURNING e.next_attempt_at
"""
)


# A resume: lock the execution (after its request) and read what the decision needs.
# Locks: the execution row, FOR NO KEY UPDATE.
# Index: execution_pkey.
RESUME_LOCK = """
SELECT e.status, e.fencing_token, e.flow_id, e.transition_id, e.next_attempt_at
  FROM execution AS e
 WHERE e.id = %(execution_id)s
   FOR NO KEY UPDATE
"""


# The execution's checkpoints by action id, with their status (under the execution lock).
# Locks: nothing.
# Index: action_execution_action_uniq.
RESUME_CHECKPOINTS = """
SELECT c.action_id, c.status FROM action_execution AS c WHERE c.execution_id = %(execution_id)s
"""


# An event already received with this eventId (a replay).
# Locks: nothing.
# Index: execution_event_uniq.
EVENT_FIND = """
SELECT v.fingerprint FROM execution_event AS v
 WHERE v.execution_id = %(execution_id)s AND v.event_id = %(event_id)s
"""


# The actions this execution keeps early events for (events waiting for their wait).
# Locks: nothing.
# Index: execution_event_uniq's execution prefix.
EVENTS_KEPT = """
SELECT v.action_id FROM execution_event AS v
 WHERE v.execution_id = %(execution_id)s AND v.status = 'KEPT'
"""


# Record a received event (ACCEPTED: it resumed its wait; KEPT: it waits for its wait);
# execution_event_uniq refuses a second row with the same eventId.
# Locks: the new row.
# Index: execution_event_uniq.
EVENT_INSERT = """
INSERT INTO execution_event
       (execution_id, event_id, event, action_id, payload, fingerprint, status, actor,
        consumed_at)
VALUES (%(execution_id)s, %(event_id)s, %(event)s, %(action_id)s, %(payload)s,
        %(fingerprint)s, %(status)s, %(actor)s,
        CASE WHEN %(consumed)s::boolean THEN clock_timestamp() END)
"""


# A checkpoint settled from outside the worker, under the new token: WAITING (a resume's event)
# or ACCEPTED (an asynchronous provider's callback) becomes SUCCEEDED with the payload as output.
# One fragment; each statement names the status it settles from.
_SETTLE_FROM = composed(
    """
UPDATE action_execution AS c
   SET status = 'SUCCEEDED',
       output = %(output)s,
       {error_cleared},
       fencing_token = %(new_token)s,
       finished_at = clock_timestamp()
 WHERE c.execution_id = %(execution_id)s AND c.action_id = %(action_id)s
   AND c.status = '{settled_from}'
RETURNING c.id
"""
)

# A resume's checkpoint: WAITING becomes SUCCEEDED with the event's payload.
# Locks: the checkpoint row (under the execution lock).
# Index: action_execution_action_uniq.
RESUME_CHECKPOINT = _SETTLE_FROM.replace("{settled_from}", "WAITING")

# A callback's checkpoint: ACCEPTED becomes SUCCEEDED with the provider's output.
# Locks: the checkpoint row (under the execution lock).
# Index: action_execution_action_uniq.
CALLBACK_SETTLE = _SETTLE_FROM.replace("{settled_from}", "ACCEPTED")


# A resume's execution: SUSPENDED becomes PENDING and due now under a new token. Guards on the
# status and token read under the lock. The next dispatch runs for %(principal)s, the resuming
# caller; NULL (a provider's callback: not a principal) keeps the principal of the dispatch
# that made the accepted call. One row by primary key; it keeps its place in
# execution_claim_idx with the new key.
# Locks: the execution row (already locked by RESUME_LOCK).
# Index: execution_pkey.
RESUME_EXECUTION = """
UPDATE execution AS e
   SET status = 'PENDING',
       fencing_token = e.fencing_token + 1,
       next_attempt_at = clock_timestamp(),
       dispatch_principal = COALESCE(%(principal)s::jsonb, e.dispatch_principal)
 WHERE e.id = %(execution_id)s AND e.status = 'SUSPENDED' AND e.fencing_token = %(token)s
RETURNING e.fencing_token
"""


# An asynchronous provider accepted the holder's call: its RUNNING checkpoint of this attempt
# becomes ACCEPTED; EXECUTION_SUSPEND follows, with the contract's callback_timeout_seconds.
# Locks: the execution row, FOR NO KEY UPDATE (after REQUEST_LOCK); the checkpoint row.
# Index: execution_pkey; action_execution_action_uniq.
CHECKPOINT_ACCEPT = fenced(
    """
WITH {holder}
UPDATE action_execution AS c
   SET status = 'ACCEPTED'
  FROM holder
 WHERE c.execution_id = holder.id AND c.action_id = %(action_id)s
   AND c.status = 'RUNNING' AND c.fencing_token = %(token)s AND c.attempt = %(attempt)s
RETURNING c.id
"""
)


# The checkpoint a callback names by its external key, with its execution (the caller then locks
# request and execution).
# Locks: nothing.
# Index: action_execution_key_idx; execution_pkey.
CALLBACK_CHECKPOINT = """
SELECT c.execution_id, c.action_id, c.status, c.output, c.capability, c.capability_version,
       e.request_id
  FROM action_execution AS c
  JOIN execution AS e ON e.id = c.execution_id
 WHERE c.external_key = %(external_key)s
"""
