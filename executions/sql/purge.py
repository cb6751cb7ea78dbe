"""Purge: `manage.py purgehistory` removes old finished history in short batches
(executions/queue/history.py).
"""

# The purge's cutoff, read once from the database clock.
# Locks: nothing.
# Index: none.
PURGE_CUTOFF = "SELECT now() - make_interval(days => %(days)s)"


# Bound how long one purge batch may wait for a lock (transaction-local).
# Locks: nothing.
# Index: none.
PURGE_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %(timeout)s, true)"


# Purge one batch of old history in its own short transaction: up to %(limit)s final
# executions (never RECONCILIATION_REQUIRED nor live work, nor one with a webhook delivery still
# PENDING) finished before %(cutoff)s, oldest first; deletes their checkpoints, attempt history,
# events and webhook events with their deliveries, clears the execution's own
# payloads, keeps what the execution view shows and the append-only audit trail. Returns one row
# per purged execution with the checkpoints, events and attempts deleted.
# Locks: those execution rows, FOR UPDATE SKIP LOCKED (two purges never wait on each other;
# no worker locks a final row).
# Index: execution_purge_idx; action_execution_action_uniq; action_attempt_uniq;
# execution_event_uniq; webhook_event_exec_idx; webhook_delivery_event_idx.
PURGE_BATCH = """
WITH batch AS (
    SELECT e.id
      FROM execution AS e
     WHERE e.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
       AND e.purged_at IS NULL
       AND e.finished_at < %(cutoff)s
       AND NOT EXISTS (
               SELECT 1
                 FROM webhook_event AS w
                 JOIN webhook_delivery AS d ON d.event_id = w.id
                WHERE w.execution_id = e.id AND d.status = 'PENDING'
           )
     ORDER BY e.finished_at, e.id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM action_execution AS c
     USING batch
     WHERE c.execution_id = batch.id
    RETURNING c.execution_id
),
attempts_gone AS (
    DELETE FROM action_attempt AS a
     USING batch
     WHERE a.execution_id = batch.id
    RETURNING a.execution_id
),
events_gone AS (
    DELETE FROM execution_event AS v
     USING batch
     WHERE v.execution_id = batch.id
    RETURNING v.execution_id
),
deliveries_gone AS (
    DELETE FROM webhook_delivery AS d
     USING webhook_event AS w, batch
     WHERE w.execution_id = batch.id AND d.event_id = w.id
),
webhook_events_gone AS (
    DELETE FROM webhook_event AS w
     USING batch
     WHERE w.execution_id = batch.id
),
purged AS (
    UPDATE execution AS e
       SET purged_at = clock_timestamp(),
           error_detail = NULL,
           compensation_detail = NULL,
           actor_snapshot = '{}',
           dispatch_principal = NULL
      FROM batch
     WHERE e.id = batch.id
    RETURNING e.id
)
SELECT p.id, COALESCE(g.checkpoints, 0) AS checkpoints, COALESCE(v.events, 0) AS events,
       COALESCE(t.attempts, 0) AS attempts
  FROM purged AS p
  LEFT JOIN (SELECT execution_id, count(*) AS checkpoints FROM gone GROUP BY execution_id) AS g
         ON g.execution_id = p.id
  LEFT JOIN (SELECT execution_id, count(*) AS events FROM events_gone GROUP BY execution_id) AS v
         ON v.execution_id = p.id
  LEFT JOIN (SELECT execution_id, count(*) AS attempts FROM attempts_gone GROUP BY execution_id)
         AS t ON t.execution_id = p.id
"""
