"""Webhooks: the delivery loop's claim and results (executions/webhooks/delivery.py), the
operator's redelivery, and the purge of settled events. The outbox itself is written by the
trigger `webhook_outbox_write` (migrations 0017 and 0019), never by these.

Lock order: deliveries (id order), then subscriptions (id order).
"""

# Channel on which a writer other than a runworker's own runs announces deliveries due now (the
# outbox trigger, an operator's redelivery, a ping), so an idle worker's delivery loop claims at
# once instead of at its poll. The payload is empty, so the notifications of one transaction
# fold into one; a listener only wakes its delivery loop and never trusts the message.
WEBHOOK_CHANNEL = "orquestador_webhooks"


# Announce deliveries due now, from inside the transaction that makes them due (delivered only
# if, and right after, it commits).
# Locks: nothing.
# Index: none.
NOTIFY_WEBHOOKS = "SELECT pg_notify('orquestador_webhooks', '')"


# Subscribe the worker's listening connection to NOTIFY_WEBHOOKS (the same connection as
# LISTEN_WORK: no connection of its own).
# Locks: nothing.
# Index: none.
LISTEN_WEBHOOKS = "LISTEN orquestador_webhooks"

# Claim up to %(limit)s due deliveries, oldest due first, skipping any whose execution has an
# earlier delivery to the same subscription still PENDING (in order per execution and
# subscription; a claimed one stays PENDING while in flight, so it holds back the next): one more
# attempt, a new claim token, and held for %(hold_seconds)s (if this process dies while sending,
# another claims it once the hold passes: at least once). The hold is `held_until`, in no index
# and in no index's predicate, so the claim can be a HOT update (no new index entry; the table
# keeps room for it, migration 0026); the rows in flight stay in webhook_delivery_due_idx and
# are read, and skipped, at the head of each claim's walk (at most CONCURRENCY of them). Returns
# what the attempt needs to send, the event's body already as JSON text ({id, type, createdAt,
# data}: the same for every attempt).
# The shapes hold whatever the statistics (docs/adr/0009): the due time is compared with the
# statement's start, stable, so it bounds the walk of webhook_delivery_due_idx (deliveries
# retried later are not read); the earlier-delivery probe is a subquery never pulled up
# into a join (OFFSET 0), one webhook_delivery_exec_idx lookup per candidate: the same
# subscription and a smaller id are said only in row comparisons led by execution_id, and
# PENDING as neither settled status, so that no other index (none leads with execution_id, none
# has that predicate) can serve it; said plainly, planned on an empty outbox with a backlog's
# column statistics, it walked the primary key for every smaller id per candidate (migration
# 0030); the rows `due` locked are updated by
# `id = ANY` of their ids, and each one's event and subscription are read in LATERAL subqueries
# that are never flattened (OFFSET 0), one primary-key lookup each; joined directly, statistics
# of an empty outbox made the planner hash or merge every delivery and event on every claim
# (17.8 ms a claim, 0.78 ms of PostgreSQL CPU per event, at 3,000 events).
# Locks: the claimed delivery rows, FOR UPDATE SKIP LOCKED.
# Index: webhook_delivery_due_idx; webhook_delivery_exec_idx; the webhook_delivery,
# webhook_event and webhook_subscription primary keys.
WEBHOOK_DELIVERIES_CLAIM = """
WITH due AS (
    SELECT d.id
      FROM webhook_delivery AS d
     WHERE d.status = 'PENDING'
       AND d.next_attempt_at <= statement_timestamp()
       AND (d.held_until IS NULL OR d.held_until <= statement_timestamp())
       AND NOT EXISTS (
               SELECT 1
                 FROM webhook_delivery AS p
                WHERE p.execution_id = d.execution_id
                  AND (p.execution_id, p.subscription_id) >= (d.execution_id, d.subscription_id)
                  AND (p.execution_id, p.subscription_id, p.id)
                      < (d.execution_id, d.subscription_id, d.id)
                  AND p.status NOT IN ('DELIVERED', 'FAILED')
               OFFSET 0
           )
     ORDER BY d.next_attempt_at, d.id
     LIMIT %(limit)s
       FOR UPDATE OF d SKIP LOCKED
),
claimed AS (
    UPDATE webhook_delivery AS d
       SET attempts = d.attempts + 1,
           claim_token = d.claim_token + 1,
           last_attempt_at = clock_timestamp(),
           held_until = clock_timestamp()
                        + make_interval(secs => %(hold_seconds)s::double precision)
     WHERE d.id = ANY(ARRAY(SELECT due.id FROM due))
    RETURNING d.id, d.claim_token, d.attempts, d.event_id, d.subscription_id
)
SELECT c.id, c.claim_token, c.attempts, c.event_id::text, ev.body, s.url, s.secret,
       s.previous_secret
  FROM claimed AS c
 CROSS JOIN LATERAL (
           SELECT '{"id":"' || e.id || '","type":"' || e.type || '","createdAt":"'
                  || webhook_time(e.created_at) || '","data":' || e.data::text || '}' AS body
             FROM webhook_event AS e
            WHERE e.id = c.event_id
           OFFSET 0
       ) AS ev
 CROSS JOIN LATERAL (
           SELECT w.url, w.secret,
                  CASE WHEN w.previous_secret_expires_at > clock_timestamp()
                       THEN w.previous_secret END AS previous_secret
             FROM webhook_subscription AS w
            WHERE w.id = c.subscription_id
           OFFSET 0
       ) AS s
 ORDER BY c.id
"""


# Write the results of attempts (%(items)s: id, token, delivered, code, error, body, delay, in id
# order), each one's hold ended: delivered, or due again after its delay, or FAILED once its
# retries have run %(max_age_seconds)s since it started; each only by the claim that made it (its
# token), only while PENDING and held (a result written once is not written again). Then each
# subscription's run of failed attempts: back to 0 on a delivery, one more per failed attempt (a
# subscription's row is written only when that changes it). Returns (id, status, successor) per
# written delivery, `successor` true when it settled and a later delivery of the same execution
# to the same subscription is PENDING (it was held back by this one: the loop claims it now).
# Committed asynchronously: a result lost with a crash only means the event is sent
# again (at least once), and the delivery loop's next claim, synchronous, flushes it before a
# later event of the same execution is sent (docs/adr/0020).
# Each item's delivery is locked in a LATERAL subquery, never flattened, and updated by
# `id = ANY` (docs/adr/0009): one primary-key lookup per item whatever the statistics; the
# successor probe is a subquery per settled delivery, never pulled up (OFFSET 0), said as the
# claim's earlier-delivery probe is, so that only webhook_delivery_exec_idx can serve it.
# The subscriptions whose count changes are locked first by `counting`, in id order (its
# locking sits above its sort), and only then updated: two loops' results for the same
# subscriptions meet in that one order. Updated straight away, they were locked in the order
# a scan met their row versions, and a version moved by an update committed between two
# statements' snapshots is met first by one and last by the other: each held a row the other
# waited for ("deadlock detected": tests/integration/webhooks/test_record_lock_order.py).
# Locks: the delivery rows (id order), then their subscriptions' rows (id order).
# Index: webhook_delivery primary key; webhook_delivery_exec_idx; webhook_subscription primary
# key.
WEBHOOK_DELIVERIES_RECORD = """
WITH durability AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
),
i AS (
    SELECT i.*
      FROM jsonb_to_recordset(%(items)s::jsonb) AS i(
               id bigint, token bigint, delivered boolean, code integer, error text, body text,
               delay double precision),
           durability
),
locked AS (
    SELECT i.*, l.failed
      FROM i
     CROSS JOIN LATERAL (
               SELECT NOT i.delivered
                      AND d.retry_from + make_interval(
                              secs => %(max_age_seconds)s::double precision)
                          <= clock_timestamp() + make_interval(secs => i.delay) AS failed
                 FROM webhook_delivery AS d
                WHERE d.id = i.id AND d.claim_token = i.token
                  AND d.status IS NOT DISTINCT FROM 'PENDING' AND d.held_until IS NOT NULL
                  FOR NO KEY UPDATE OF d
           ) AS l
),
done AS (
    UPDATE webhook_delivery AS d
       SET status = CASE
                        WHEN locked.delivered THEN 'DELIVERED'
                        WHEN locked.failed THEN 'FAILED'
                        ELSE 'PENDING'
                    END,
           next_attempt_at = CASE
                                 WHEN locked.delivered THEN d.next_attempt_at
                                 ELSE clock_timestamp() + make_interval(secs => locked.delay)
                             END,
           held_until = NULL,
           delivered_at = CASE WHEN locked.delivered THEN clock_timestamp() END,
           last_response_code = locked.code,
           last_error = left(locked.error, 500),
           last_response_body = left(locked.body, 1024)
      FROM locked
     WHERE d.id = ANY(ARRAY(SELECT locked.id FROM locked)) AND d.id = locked.id
    RETURNING d.id, d.subscription_id, d.execution_id, d.status, locked.delivered
),
runs AS (
    SELECT done.subscription_id, bool_or(done.delivered) AS delivered,
           count(*) FILTER (WHERE NOT done.delivered) AS failed
      FROM done
     GROUP BY done.subscription_id
),
counting AS (
    SELECT s.id
      FROM webhook_subscription AS s
      JOIN runs ON runs.subscription_id = s.id
     WHERE s.id = ANY(ARRAY(SELECT runs.subscription_id FROM runs))
       AND (NOT runs.delivered OR s.consecutive_failures > 0)
     ORDER BY s.id
       FOR NO KEY UPDATE OF s
),
counted AS (
    UPDATE webhook_subscription AS s
       SET consecutive_failures = CASE WHEN runs.delivered THEN 0
                                       ELSE s.consecutive_failures + runs.failed END
      FROM runs
     WHERE s.id = ANY(ARRAY(SELECT counting.id FROM counting))
       AND s.id = runs.subscription_id
)
SELECT done.id, done.status,
       done.status <> 'PENDING' AND EXISTS (
           SELECT 1
             FROM webhook_delivery AS p
            WHERE p.execution_id = done.execution_id
              AND (p.execution_id, p.subscription_id)
                  <= (done.execution_id, done.subscription_id)
              AND (p.execution_id, p.subscription_id, p.id)
                  > (done.execution_id, done.subscription_id, done.id)
              AND p.status NOT IN ('DELIVERED', 'FAILED')
           OFFSET 0
       ) AS successor
  FROM done
"""


# An operator's redelivery (the admin): the delivery is PENDING, due now and held by no claim,
# its retries run WEBHOOK_MAX_AGE_HOURS from now; its attempts count on. Returns the ids
# redelivered.
# Locks: those delivery rows.
# Index: webhook_delivery primary key.
WEBHOOK_DELIVERY_REDELIVER = """
UPDATE webhook_delivery AS d
   SET status = 'PENDING',
       next_attempt_at = clock_timestamp(),
       held_until = NULL,
       retry_from = clock_timestamp(),
       delivered_at = NULL,
       claim_token = d.claim_token + 1
 WHERE d.id = ANY(%(ids)s::bigint[])
RETURNING d.id
"""


# A ping: one event of type webhook.ping for one subscription, with its one delivery, due now.
# Returns the event's id.
# Locks: nothing (two new rows).
# Index: none.
WEBHOOK_PING = """
WITH ev AS (
    INSERT INTO webhook_event (id, tenant, execution_id, type, data, created_at)
    SELECT gen_random_uuid(), s.tenant, NULL, 'webhook.ping',
           jsonb_build_object('webhookId', s.id), clock_timestamp()
      FROM webhook_subscription AS s
     WHERE s.id = %(subscription_id)s AND s.tenant = %(tenant)s
    RETURNING id
),
delivery AS (
    INSERT INTO webhook_delivery (event_id, subscription_id, execution_id, status, attempts,
                                  claim_token, next_attempt_at, retry_from, created_at)
    SELECT ev.id, %(subscription_id)s, NULL, 'PENDING', 0, 0, clock_timestamp(),
           clock_timestamp(), clock_timestamp()
      FROM ev
)
SELECT ev.id FROM ev
"""


# Whether any subscription exists (the delivery loop asks once per poll: without one there is
# nothing to deliver, and an execution that ends need not wake it).
# Locks: nothing.
# Index: webhook_subscription primary key (any row).
WEBHOOK_SUBSCRIBED = "SELECT EXISTS (SELECT 1 FROM webhook_subscription)"
