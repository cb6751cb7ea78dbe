"""Checkpoints: the RUNNING, SUCCEEDED and settled records of each attempt of an action
(executions/queue/checkpoints.py), each holder's item fenced on its own in grouped statements.
"""

from .fence import fenced

# The opening of a grouped write: the transaction's durability as the group asks (MATERIALIZED
# and read by the items, so it is set before anything is written); the items, each a holder's
# coordinates then the write's own {columns}; and their holders in execution id order, each
# execution locked under its own fence in a LATERAL subquery that is never flattened (one lookup
# by primary key per item; an item whose fence no longer holds drops out).
_GROUPED = """
WITH durability AS MATERIALIZED (
    SELECT set_config('synchronous_commit', %(synchronous_commit)s, true) AS setting
),
item AS (
    SELECT i.*
      FROM jsonb_to_recordset(%(items)s::jsonb) AS i(
               execution_id uuid, request_id uuid, token bigint, owner text,
               {columns}),
           durability
),
holder AS (
    SELECT item.*
      FROM (SELECT * FROM item ORDER BY item.execution_id) AS item
     CROSS JOIN LATERAL (
               SELECT e.id
                 FROM execution AS e
                WHERE {fence_of_item}
                  FOR NO KEY UPDATE OF e
           ) AS locked
)"""


def _grouped(columns: str) -> str:
    """The opening of a grouped write whose items carry `columns` (static text)."""
    return _GROUPED.replace("{columns}", columns)


# Commit the RUNNING checkpoints of one or many holders (%(items)s, grouped by
# executions/worker/groupcommit.py) before their adapters are called: a first attempt inserts
# attempt 1, a later one moves the same row to attempt + 1 only if it is still what the holder
# loaded (same attempt, hash, key and effect, not SUCCEEDED). Returns (execution id, attempt)
# per started item; a missing item was superseded or its checkpoint changed.
# Locks: each holder's execution row, FOR NO KEY UPDATE, items in execution id order,
# inside a LATERAL subquery that is never flattened (one lookup per item).
# Index: execution_pkey per item; action_execution_action_uniq.
CHECKPOINT_START = fenced(
    _grouped(
        """action_id text, sequence integer, capability text, capability_version integer,
               effect text, input_hash text, external_key text, attempt integer"""
    )
    + """
INSERT INTO action_execution AS c
       (execution_id, action_id, sequence, capability, capability_version, effect, status,
        input_hash, external_key, attempt, fencing_token, started_at)
SELECT h.execution_id, h.action_id, h.sequence, h.capability, h.capability_version, h.effect,
       'RUNNING', h.input_hash, h.external_key, h.attempt, h.token, clock_timestamp()
  FROM holder AS h
    ON CONFLICT (execution_id, action_id) DO UPDATE
   SET status = 'RUNNING',
       attempt = EXCLUDED.attempt,
       fencing_token = EXCLUDED.fencing_token,
       started_at = EXCLUDED.started_at,
       finished_at = NULL,
       output = NULL,
       {error_cleared}
 WHERE c.status <> 'SUCCEEDED'
   AND c.attempt = EXCLUDED.attempt - 1
   AND c.input_hash = EXCLUDED.input_hash
   AND c.external_key = EXCLUDED.external_key
   AND c.effect = EXCLUDED.effect
RETURNING c.execution_id, c.attempt
"""
)


# Record the validated outputs of one or many holders (%(items)s, grouped like
# CHECKPOINT_START): each holder's RUNNING checkpoint of its attempt becomes SUCCEEDED. Returns
# the execution id of every item saved; a missing item was superseded.
# Locks: as CHECKPOINT_START.
# Index: execution_pkey per item; action_execution_action_uniq.
CHECKPOINT_SUCCEED = fenced(
    _grouped("action_id text, attempt integer, output jsonb")
    + """
UPDATE action_execution AS c
   SET status = 'SUCCEEDED',
       output = h.output,
       {error_cleared},
       finished_at = clock_timestamp()
  FROM holder AS h
 WHERE c.execution_id = h.execution_id AND c.action_id = h.action_id
   AND c.status = 'RUNNING' AND c.fencing_token = h.token AND c.attempt = h.attempt
RETURNING c.execution_id
"""
)


# Settle an attempt that did not succeed, FAILED or UNKNOWN (`output` keeps what a write
# returned when it cannot be trusted), and keep the attempt in action_attempt, since the
# checkpoint will hold only the next one; the first statement of the retry and failure
# transactions, whose last write checks the fence again.
# Locks: the execution row, FOR NO KEY UPDATE, until the transaction ends.
# Index: execution_pkey; action_execution_action_uniq; action_attempt_uniq.
CHECKPOINT_SETTLE = fenced(
    """
WITH {holder},
settled AS (
    UPDATE action_execution AS c
       SET {outcome_given},
           finished_at = clock_timestamp()
      FROM holder
     WHERE c.execution_id = holder.id AND c.action_id = %(action_id)s
       AND c.status = 'RUNNING' AND c.fencing_token = %(token)s AND c.attempt = %(attempt)s
    RETURNING c.id, c.execution_id, c.action_id, c.attempt, c.status, c.error_code,
              c.fencing_token, c.started_at, c.finished_at
),
kept AS (
    INSERT INTO action_attempt AS a
           (execution_id, action_id, attempt, status, error_code, fencing_token, started_at,
            finished_at)
    SELECT s.execution_id, s.action_id, s.attempt, s.status, s.error_code, s.fencing_token,
           s.started_at, s.finished_at
      FROM settled AS s
        ON CONFLICT (execution_id, action_id, attempt) DO NOTHING
)
SELECT settled.id FROM settled
"""
)
