"""Queue statistics: the queue as it is now, for GET /metrics (executions/metrics/queuestats.py).

Every statement reads live rows only, through a partial index, in a read-only transaction with
a statement timeout of its own.
"""

# Make the metrics transaction read-only (its first statement).
# Locks: nothing.
# Index: none.
METRICS_READ_ONLY = "SET TRANSACTION READ ONLY"


# Bound every later statement of the metrics transaction, so a slow read fails the scrape
# instead of piling scrapes up.
# Locks: nothing.
# Index: none.
METRICS_TIMEOUT = "SELECT set_config('statement_timeout', %(timeout_ms)s, true)"


# Live executions by status (PENDING, RETRY_WAIT, RUNNING): how many, how many are due, and
# the age in seconds of the oldest due one, against one reading of the clock.
# Locks: nothing.
# Index: execution_claim_idx (partial on exactly these statuses); no finished row.
METRICS_QUEUE = """
WITH clock AS MATERIALIZED (
    SELECT clock_timestamp() AS now_at
)
SELECT e.status,
       count(*) AS depth,
       count(*) FILTER (WHERE e.next_attempt_at <= clock.now_at) AS due,
       GREATEST(EXTRACT(EPOCH FROM clock.now_at - min(e.next_attempt_at)), 0)::double precision
           AS oldest_due_age_seconds
  FROM execution AS e, clock
 WHERE e.status IN ('PENDING', 'RETRY_WAIT', 'RUNNING', 'SUSPENDED')
 GROUP BY e.status, clock.now_at
"""


# Executions waiting for an operator, and the age in seconds of the oldest.
# Locks: nothing.
# Index: execution_reconcile_idx, index only.
METRICS_RECONCILIATION = """
SELECT count(*) AS backlog,
       COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(e.created_at)), 0)::double precision
           AS oldest_age_seconds
  FROM execution AS e
 WHERE e.status = 'RECONCILIATION_REQUIRED'
"""


# Requests held by an execution (blocked_by set).
# Locks: nothing.
# Index: request_blocked_idx, index only.
METRICS_BLOCKED_REQUESTS = """
SELECT count(*) AS blocked
  FROM request AS r
 WHERE r.blocked_by_id IS NOT NULL
"""


# Webhook deliveries still on their way (a first attempt or a retry) with the age in seconds of
# the oldest, and the subscriptions whose last %(failing_after)s attempts or more failed.
# Locks: nothing.
# Index: webhook_delivery_due_idx (partial on PENDING); webhook_subscription read whole (at most
# 100 rows per tenant).
METRICS_WEBHOOKS = """
SELECT count(*) AS pending,
       COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(d.created_at)), 0)::double precision
           AS oldest_pending_age_seconds,
       (SELECT count(*)
          FROM webhook_subscription AS s
         WHERE s.consecutive_failures >= %(failing_after)s) AS failing
  FROM webhook_delivery AS d
 WHERE d.status = 'PENDING'
"""
