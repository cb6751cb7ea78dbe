"""Webhooks: the delivery loop's claim and results (executions/webhooks/delivery.py), the
operator's redelivery, and the purge of settled events. The outbox itself is written by the
trigger `webhook_outbox_write` (migration 0014), never by these.

Lock order: deliveries (id order), then subscriptions.
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
# attempt, a new claim token, and due again after %(hold_seconds)s (if this process dies while
# sending, another claims it then: at least once). Returns what the attempt needs to send.
# Locks: the claimed delivery rows, FOR UPDATE SKIP LOCKED.
# Index: webhook_delivery_due_idx; webhook_delivery_order_idx; webhook_event and
# webhook_subscription primary keys.
WEBHOOK_DELIVERIES_CLAIM = """
WITH due AS (
    SELECT d.id
      FROM webhook_delivery AS d
     WHERE d.status = 'PENDING'
       AND d.next_attempt_at <= clock_timestamp()
       AND NOT EXISTS (
               SELECT 1
                 FROM webhook_delivery AS p
                WHERE p.subscription_id = d.subscription_id
                  AND p.execution_id = d.execution_id
                  AND p.status = 'PENDING'
                  AND p.id < d.id
           )
     ORDER BY d.next_attempt_at, d.id
     LIMIT %(limit)s
       FOR UPDATE OF d SKIP LOCKED
)
UPDATE webhook_delivery AS d
   SET attempts = d.attempts + 1,
       claim_token = d.claim_token + 1,
       last_attempt_at = clock_timestamp(),
       next_attempt_at = clock_timestamp()
                         + make_interval(secs => %(hold_seconds)s::double precision)
  FROM due, webhook_event AS ev, webhook_subscription AS s
 WHERE d.id = due.id AND ev.id = d.event_id AND s.id = d.subscription_id
RETURNING d.id, d.claim_token, d.attempts, d.event_id, ev.type, ev.created_at, ev.data, s.url,
          s.secret,
          CASE WHEN s.previous_secret_expires_at > clock_timestamp() THEN s.previous_secret END
              AS previous_secret
"""


# Write the results of attempts (%(items)s: id, token, delivered, code, error, body, delay):
# delivered, or due again after its delay, or FAILED once its retries have run
# %(max_age_seconds)s since it started; each only by the claim that made it (its token), and only
# while PENDING. Then each subscription's run of failed attempts: back to 0 on a delivery, one
# more per failed attempt. Returns (id, status) per written delivery.
# Locks: the delivery rows (id order), then their subscriptions' rows.
# Index: webhook_delivery primary key; webhook_subscription primary key.
WEBHOOK_DELIVERIES_RECORD = """
WITH i AS (
    SELECT *
      FROM jsonb_to_recordset(%(items)s::jsonb) AS i(
               id bigint, token bigint, delivered boolean, code integer, error text, body text,
               delay double precision)
),
locked AS (
    SELECT d.id
      FROM webhook_delivery AS d
      JOIN i ON i.id = d.id
     WHERE d.claim_token = i.token AND d.status = 'PENDING'
     ORDER BY d.id
       FOR NO KEY UPDATE OF d
),
done AS (
    UPDATE webhook_delivery AS d
       SET status = CASE
                        WHEN i.delivered THEN 'DELIVERED'
                        WHEN d.retry_from + make_interval(
                                 secs => %(max_age_seconds)s::double precision)
                             <= clock_timestamp() + make_interval(secs => i.delay)
                        THEN 'FAILED'
                        ELSE 'PENDING'
                    END,
           next_attempt_at = CASE
                                 WHEN i.delivered THEN d.next_attempt_at
                                 ELSE clock_timestamp() + make_interval(secs => i.delay)
                             END,
           delivered_at = CASE WHEN i.delivered THEN clock_timestamp() END,
           last_response_code = i.code,
           last_error = left(i.error, 500),
           last_response_body = left(i.body, 1024)
      FROM i, locked
     WHERE d.id = i.id AND locked.id = i.id
    RETURNING d.id, d.subscription_id, d.status, i.delivered
),
runs AS (
    SELECT done.subscription_id, bool_or(done.delivered) AS delivered,
           count(*) FILTER (WHERE NOT done.delivered) AS failed
      FROM done
     GROUP BY done.subscription_id
),
counted AS (
    UPDATE webhook_subscription AS s
       SET consecutive_failures = CASE WHEN runs.delivered THEN 0
                                       ELSE s.consecutive_failures + runs.failed END
      FROM runs
     WHERE s.id = runs.subscription_id
       AND (NOT runs.delivered OR s.consecutive_failures > 0)
)
SELECT done.id, done.status FROM done
"""


# An operator's redelivery (the admin): the delivery is PENDING and due now, its retries run
# WEBHOOK_MAX_AGE_HOURS from now; its attempts count on. Returns the ids redelivered.
# Locks: those delivery rows.
# Index: webhook_delivery primary key.
WEBHOOK_DELIVERY_REDELIVER = """
UPDATE webhook_delivery AS d
   SET status = 'PENDING',
       next_attempt_at = clock_timestamp(),
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
