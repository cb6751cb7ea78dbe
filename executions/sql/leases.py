"""Leases: renewing what a process holds, telling a lost lease apart, and the worker registry
row the heartbeat refreshes (executions/queue/leases.py, executions/worker/heartbeat.py).
"""

from .fence import fenced

# Renew every lease this process holds (three arrays, one entry per holder), only under
# the exact fence: an expired lease never revives. Returns (id, token) of each renewed row; a
# holder missing from it has lost its lease.
# Locks: the held execution rows, FOR NO KEY UPDATE in id order (as every
# multi-row lock on executions); no request lock, never waits on a claim.
# Index: execution_pkey.
RENEW_LEASES = fenced(
    """
WITH clock AS MATERIALIZED (
    SELECT t.now_at, t.now_at + make_interval(secs => %(lease_seconds)s::double precision)
               AS lease_until
      FROM (SELECT clock_timestamp() AS now_at) AS t
),
held AS (
    SELECT e.id
      FROM execution AS e,
           unnest(%(execution_ids)s::uuid[], %(request_ids)s::uuid[], %(tokens)s::bigint[])
               AS h(execution_id, request_id, token),
           clock
     WHERE {fence_of_renewal}
     ORDER BY e.id
       FOR NO KEY UPDATE OF e
)
UPDATE execution AS e
   SET lease_expires_at = clock.lease_until,
       next_attempt_at = clock.lease_until
  FROM held, clock
 WHERE e.id = held.id
RETURNING e.id, e.fencing_token
"""
)


# Is this holder's lease still valid? Tells "superseded" apart from another reason a fenced
# write matched nothing, and whether a call may go after a lease with no confirmed renewal.
# Locks: nothing.
# Index: execution_pkey.
LEASE_PROBE = fenced(
    """
SELECT e.lease_expires_at
  FROM execution AS e
 WHERE {fence}
"""
)


# Refresh this worker's registry row (reconciliation.WorkerProcess, the Workers page): the
# heartbeat's one statement; the first inserts the row, every later one refreshes last_seen_at
# and running.
# Locks: that one row.
# Index: worker_process_pkey (owner).
WORKER_SEEN = """
INSERT INTO worker_process (owner, host, pid, started_at, last_seen_at, concurrency, running,
                            renew_seconds, lease_seconds, version)
VALUES (%(owner)s, %(host)s, %(pid)s, clock_timestamp(), clock_timestamp(), %(concurrency)s,
        %(running)s, %(renew_seconds)s, %(lease_seconds)s, %(version)s)
ON CONFLICT (owner) DO UPDATE
   SET last_seen_at = clock_timestamp(), running = EXCLUDED.running
"""
