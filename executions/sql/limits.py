"""Route limits: the limiter's statements (executions/queue/limits.py, docs/adr/0022).

Invariants: every grant, park and end of a limited call happens under its route's row lock
(route_limit), taken first, before any execution row; the steps that count run after the lock,
each with a fresh snapshot, inside the functions of migrations 0018 to 0028 (route_call_take,
route_call_end, route_sweep and the rest), so two workers never both see the last free place. A
call's place is held under its holder's lease: a call whose execution moved on, or whose lease
expired, is not counted (route_call_live). A rate's start is granted for a moment, spaced from
the others (route_call_take), which the worker keeps (executions/worker/limiter.py).
"""

# Take a call of a limited route for a holder, or park the holder (PENDING until `wait_until`;
# NULL: until a call in flight ends, or its turn is dealt): one statement per limited call,
# fenced inside. On a route with a rate a grant comes with the moment the call may start
# (`start_at`, migration 0028). A park of a holder that has run no action parks its peers too
# (route_park_peers, migrations 0022 and 0028): the due executions of its flow and transition
# that have run none either, until the same time (a place, a pause) or, for a rate, `peers_parked`
# of them at the turns after its own, `turn_seconds` apart. On a route declared `tenant` a park
# for a rate waits for its turn to be dealt, and every take deals the turns of the next
# %(deal_ahead)s seconds in tenant order (migration 0031): `dealt` of them from `dealt_from`,
# `turn_seconds` apart.
# Locks: the route's route_limit row, then the holder's execution row (FOR NO KEY UPDATE); the
# peers' execution rows (FOR NO KEY UPDATE SKIP LOCKED); the dealt executions' rows (FOR UPDATE
# SKIP LOCKED).
# Index: route_limit_pkey; execution_pkey; route_call_open_idx (only when full by the counter);
# route_call_lease_idx (the shares, for a rate); route_park_pkey; for the peers,
# execution_claim_idx (the first due rows in claim order) and action_execution_action_uniq; for
# the deal, route_park_turn_idx and execution_held_idx.
ROUTE_CALL_TAKE = """
SELECT call_id, wait_until, fenced, start_at, peers_parked, turn_seconds, dealt_from, dealt
  FROM route_call_take(%(route)s, %(execution_id)s, %(request_id)s, %(token)s, %(owner)s,
                       %(action_id)s, %(attempt)s, %(max_in_flight)s, %(rate_count)s,
                       %(rate_window)s, %(park_seconds)s, %(lead)s, %(horizon)s,
                       %(deal_ahead)s)
"""


# A call granted a moment it would now miss by too much (its checkpoint, or its process, was
# slow): the route's next free moment instead, never a park (its RUNNING checkpoint is written).
# Locks: the route's route_limit row; the call's route_call row.
# Index: route_limit_pkey; route_call_lease_idx (the shares); route_call_pkey.
ROUTE_CALL_RETIME = """
SELECT route_call_retime(%(route)s, %(call_id)s, %(rate_count)s, %(rate_window)s, %(lead)s)
"""


# Take a place for a lookup by the prober (no holder, nothing parked): the call's id and, on a
# route with a rate, its moment; or NULL when a limit holds it back (`wait_until` says until
# when, NULL: a call in flight must end).
# Locks: the route's route_limit row.
# Index: route_limit_pkey; route_call_open_idx (only when full by the counter);
# route_call_lease_idx (the shares, for a rate).
ROUTE_LOOKUP_TAKE = """
SELECT call_id, wait_until, start_at
  FROM route_call_take(%(route)s, NULL, NULL, NULL, NULL, NULL, NULL, %(max_in_flight)s,
                       %(rate_count)s, %(rate_window)s, %(hold_seconds)s, %(lead)s,
                       %(horizon)s, NULL)
"""


# End a call taken on a route with max_in_flight, and wake the oldest execution parked for one.
# Locks: the route's route_limit row; the ended route_call row; the woken execution row
# (FOR UPDATE SKIP LOCKED).
# Index: route_limit_pkey; route_call_pkey; route_park_wait_idx; execution_pkey.
ROUTE_CALL_END = "SELECT route_call_end(%(route)s, %(call_id)s)"


# Lease places (as many as the worker's slots) and a share of the rate on a route far above
# what the worker can use: one row, or none when the route has not room for all of it now or is
# paused (the worker then takes per call).
# Locks: the route's route_limit row.
# Index: route_limit_pkey; route_call_lease_idx (the live shares, for a rate);
# route_call_started_idx (the per-call starts of the window, for a rate).
ROUTE_LEASE_TAKE = """
SELECT call_id, held_until
  FROM route_lease_take(%(route)s, %(owner)s, %(places)s, %(share)s, %(max_in_flight)s,
                        %(rate_count)s, %(rate_window)s, %(hold_seconds)s)
"""


# Renew every lease of this worker (each sweep) with what it has in use and started in its
# window now; a lapsed lease is not renewed (its places were counted out). Returns the renewed.
# Locks: the renewed route_call rows.
# Index: route_call_pkey.
ROUTE_LEASE_RENEW = """
SELECT call_id, held_until
  FROM route_lease_renew(%(ids)s::bigint[], %(in_use)s::integer[], %(starts)s::integer[],
                         %(hold_seconds)s)
"""


# Give a lease back (the worker stops): its places count out at once.
# Locks: the route's route_limit row; the lease's route_call row.
# Index: route_limit_pkey; route_call_pkey.
ROUTE_LEASE_RELEASE = "SELECT route_lease_release(%(route)s, %(call_id)s)"


# Every second or so, per worker: calls whose holder is gone stop counting, and parked
# executions are woken into the room that leaves; on a route declared `tenant` with a rate, the
# turns of the next %(deal_ahead)s seconds no take dealt are dealt (migration 0031).
# Locks: each route_limit row with parked executions, in route order; the woken and dealt
# execution rows (FOR UPDATE SKIP LOCKED).
# Index: route_park_wait_idx; route_call_open_idx; route_park_turn_idx.
ROUTE_SWEEP = "SELECT route_sweep(%(lead)s, %(horizon)s, %(deal_ahead)s)"


# The routes paused now and until when (an unlimited route's calls take the limited path while
# the worker knows it is paused).
# Locks: nothing.
# Index: none (route_limit holds one row per limited or paused route).
ROUTE_PAUSES = """
SELECT route, paused_until FROM route_limit WHERE paused_until > clock_timestamp()
"""


# A provider answered 429 with Retry-After: pause the route for every worker until then (never
# shortening a pause already set). Returns the pause's end.
# Locks: the route's route_limit row.
# Index: route_limit_pkey.
ROUTE_PAUSE_BY_PROVIDER = """
INSERT INTO route_limit AS l (route, paused_until, paused_by, pause_reason)
VALUES (%(route)s, clock_timestamp() + make_interval(secs => %(seconds)s::double precision),
        'provider', 'HTTP 429 with Retry-After')
ON CONFLICT (route) DO UPDATE
   SET paused_until = greatest(l.paused_until, EXCLUDED.paused_until),
       paused_by = CASE WHEN l.paused_until >= EXCLUDED.paused_until THEN l.paused_by
                        ELSE EXCLUDED.paused_by END,
       pause_reason = CASE WHEN l.paused_until >= EXCLUDED.paused_until THEN l.pause_reason
                           ELSE EXCLUDED.pause_reason END
RETURNING l.paused_until
"""


# An operator pauses a route until %(until)s, or resumes it (%(until)s NULL); the audit row is
# route_event's, in the same statement. A resume makes the executions parked by the pause due.
# Locks: the route's route_limit row; the parked execution rows it makes due.
# Index: route_limit_pkey; route_park by route (route_park_wait_idx covers the in-flight waits
# only, so this walks route_park_pkey: a resume is rare).
ROUTE_OPERATOR_PAUSE = """
WITH paused AS (
    INSERT INTO route_limit AS l (route, paused_until, paused_by, pause_reason)
    VALUES (%(route)s, %(until)s, %(actor)s, %(reason)s)
    ON CONFLICT (route) DO UPDATE
       SET paused_until = EXCLUDED.paused_until, paused_by = EXCLUDED.paused_by,
           pause_reason = EXCLUDED.pause_reason
    RETURNING l.route, l.paused_until
),
due AS (
    UPDATE execution AS e SET next_attempt_at = clock_timestamp()
      FROM route_park AS p, paused
     WHERE %(until)s::timestamptz IS NULL AND p.route = paused.route AND p.until IS NOT NULL
       AND p.until <> 'infinity'
       AND e.id = p.execution_id AND e.status = 'PENDING' AND e.fencing_token = p.fencing_token
       AND e.next_attempt_at > clock_timestamp()
    RETURNING e.id
),
recorded AS (
    INSERT INTO route_event (route, type, actor, reason, until)
    SELECT paused.route, CASE WHEN %(until)s::timestamptz IS NULL THEN 'RESUMED' ELSE 'PAUSED' END,
           %(actor)s, %(reason)s, %(until)s
      FROM paused
)
SELECT (SELECT count(*) FROM due) AS due, pg_notify('orquestador_executions', %(route)s)
"""


# Declare this worker's limits at start. Returns, first, every route whose limits another live
# worker declared differently (the caller refuses to start, naming both); declares nothing then.
# A worker that stopped cleanly is not live (LIMITS_WITHDRAW); a killed one is until its row ages.
# Locks: nothing (the declaration is DECLARE_LIMITS, run only when this finds no conflict).
# Index: route_limit_pkey; worker_process_pkey.
LIMITS_CONFLICTS = """
SELECT l.route, l.declared_by, l.max_in_flight, l.rate_count, l.rate_window_seconds
  FROM route_limit AS l
  JOIN worker_process AS w ON w.owner = l.declared_by
  LEFT JOIN jsonb_to_recordset(%(limits)s::jsonb)
         AS mine(route text, max_in_flight integer, rate_count integer,
                 rate_window_seconds integer) ON mine.route = l.route
 WHERE l.declared_by <> %(owner)s
   AND w.last_seen_at > clock_timestamp() - make_interval(secs => 2 * w.lease_seconds)
   AND w.stopped_at IS NULL
   AND (l.max_in_flight, l.rate_count, l.rate_window_seconds)
       IS DISTINCT FROM (mine.max_in_flight, mine.rate_count, mine.rate_window_seconds)
   AND (mine.route IS NOT NULL OR l.max_in_flight IS NOT NULL OR l.rate_count IS NOT NULL)
 ORDER BY l.route
"""


# Record this worker's limits: its routes with limits get them and the order their parked
# executions wake in (%(wake_order)s, its WORKER_FAIRNESS: migration 0021), every other route's
# limits are cleared (a pause stays).
# Locks: the route_limit rows written.
# Index: route_limit_pkey.
DECLARE_LIMITS = """
WITH mine AS (
    SELECT * FROM jsonb_to_recordset(%(limits)s::jsonb)
           AS m(route text, max_in_flight integer, rate_count integer,
                rate_window_seconds integer)
),
cleared AS (
    UPDATE route_limit AS l
       SET max_in_flight = NULL, rate_count = NULL, rate_window_seconds = NULL,
           declared_by = %(owner)s, declared_at = clock_timestamp()
     WHERE NOT EXISTS (SELECT 1 FROM mine WHERE mine.route = l.route)
       AND (l.max_in_flight IS NOT NULL OR l.rate_count IS NOT NULL)
)
INSERT INTO route_limit AS l (route, max_in_flight, rate_count, rate_window_seconds,
                              declared_by, declared_at, wake_order)
SELECT route, max_in_flight, rate_count, rate_window_seconds, %(owner)s, clock_timestamp(),
       %(wake_order)s
  FROM mine
ON CONFLICT (route) DO UPDATE
   SET max_in_flight = EXCLUDED.max_in_flight, rate_count = EXCLUDED.rate_count,
       rate_window_seconds = EXCLUDED.rate_window_seconds,
       declared_by = EXCLUDED.declared_by, declared_at = EXCLUDED.declared_at,
       wake_order = EXCLUDED.wake_order
"""


# A worker stopped cleanly (its work drained) withdraws what it declared at start: its registry
# row is marked stopped, so no start counts it live any more, and the routes it declared last
# pass to another live worker (the one seen last), or to none. Any other live worker started
# before it declared (a later one would have declared since, or been refused), and each start is
# checked against the declarer then: it enforces the same limits, and a start with other limits
# is still refused, naming it.
# Locks: this worker's worker_process row; the route_limit rows it declared.
# Index: worker_process_pkey; route_limit (a scan: one row per limited or paused route);
# worker_process (a scan: one row per worker, as the Workers page reads it).
LIMITS_WITHDRAW = """
WITH stopped AS (
    UPDATE worker_process SET stopped_at = clock_timestamp() WHERE owner = %(owner)s
),
heir AS (
    SELECT w.owner FROM worker_process AS w
     WHERE w.owner <> %(owner)s AND w.stopped_at IS NULL
       AND w.last_seen_at > clock_timestamp() - make_interval(secs => 2 * w.lease_seconds)
     ORDER BY w.last_seen_at DESC
     LIMIT 1
)
UPDATE route_limit AS l SET declared_by = (SELECT heir.owner FROM heir)
 WHERE l.declared_by = %(owner)s
"""


# What /metrics and the Workers page show per limited or paused route: its limits, calls in
# flight (held under live leases; a worker's leased places count what it last reported in use),
# calls started in its current window (with what the leases last reported), executions parked
# on it and the pause's end.
# Locks: nothing.
# Index: route_call_open_idx; route_call_started_idx; route_call_lease_idx; route_park_pkey (by
# route, a scan of the parked only).
ROUTE_STATS = """
SELECT l.route, l.max_in_flight, l.rate_count, l.rate_window_seconds,
       CASE WHEN l.paused_until > clock_timestamp() THEN l.paused_until END AS paused_until,
       l.paused_by,
       CASE WHEN l.paused_until > clock_timestamp() THEN l.pause_reason END AS pause_reason,
       (SELECT count(*) FROM route_call AS rc
         WHERE rc.route = l.route AND rc.ended_at IS NULL AND rc.kind <> 'lease'
           AND route_call_live(rc, clock_timestamp()))
       + (SELECT coalesce(sum(rc.in_use), 0) FROM route_call AS rc
           WHERE rc.route = l.route AND rc.kind = 'lease' AND rc.ended_at IS NULL
             AND rc.held_until > clock_timestamp()) AS in_flight,
       (SELECT count(*) FROM route_call AS rc
         WHERE rc.route = l.route AND rc.kind <> 'lease'
           AND rc.started_at > clock_timestamp()
                               - make_interval(secs => coalesce(l.rate_window_seconds, 1))
       )
       + (SELECT coalesce(sum(rc.window_starts), 0) FROM route_call AS rc
           WHERE rc.route = l.route AND rc.kind = 'lease'
             AND least(coalesce(rc.ended_at, rc.held_until), rc.held_until)
                 > clock_timestamp() - make_interval(secs => coalesce(l.rate_window_seconds, 1))
       ) AS window_calls,
       (SELECT count(*) FROM route_park AS p
          JOIN execution AS e ON e.id = p.execution_id
         WHERE p.route = l.route AND e.status = 'PENDING'
           AND e.fencing_token = p.fencing_token) AS parked
  FROM route_limit AS l
 WHERE l.max_in_flight IS NOT NULL OR l.rate_count IS NOT NULL
    OR l.paused_until > clock_timestamp()
 ORDER BY l.route
"""


# What an execution a limit holds back shows (`throttled`): its action, route and until. Parked
# (PENDING, its route_park): until its turn or the pause's end, NULL while it waits for a place
# or for its turn to be dealt. Held by its worker for a rate's moment granted below the horizon
# (RUNNING, its call's start still ahead): until that moment, read from the route_call the take
# wrote (started_at, moved by a retime), so the worker writes nothing more for it.
# Locks: nothing.
# Index: route_park_pkey; execution_pkey; route_call_started_idx (per limited route, only the
# moments still ahead: a horizon's worth of the rate).
THROTTLED_OF = """
SELECT p.execution_id::text, p.action_id, p.route, nullif(p.until, 'infinity')
  FROM route_park AS p
  JOIN execution AS e ON e.id = p.execution_id
 WHERE p.execution_id = ANY (%(parked)s::uuid[])
   AND e.status = 'PENDING' AND e.fencing_token = p.fencing_token
UNION ALL
SELECT rc.execution_id::text, rc.action_id, rc.route, rc.started_at
  FROM route_limit AS l
  JOIN route_call AS rc ON rc.route = l.route AND rc.started_at > statement_timestamp()
  JOIN execution AS e ON e.id = rc.execution_id
 WHERE rc.execution_id = ANY (%(held)s::uuid[])
   AND e.status = 'RUNNING' AND e.fencing_token = rc.fencing_token
"""


# purgehistory: one batch of the limiter's records of calls that ended before %(cutoff)s (at
# most %(limit)s, oldest first), and the parks of executions that moved on; returns how many
# call records it removed.
# Locks: the deleted rows.
# Index: route_call_ended_idx; route_park_pkey.
PURGE_ROUTE_CALLS = """
WITH batch AS (
    SELECT rc.id FROM route_call AS rc
     WHERE rc.ended_at < %(cutoff)s
     ORDER BY rc.ended_at
     LIMIT %(limit)s
),
calls AS (
    DELETE FROM route_call AS rc USING batch WHERE rc.id = batch.id RETURNING 1
),
parks AS (
    DELETE FROM route_park AS p
     WHERE NOT EXISTS (SELECT 1 FROM execution AS e
                        WHERE e.id = p.execution_id AND e.status = 'PENDING'
                          AND e.fencing_token = p.fencing_token)
)
SELECT count(*) FROM calls
"""
