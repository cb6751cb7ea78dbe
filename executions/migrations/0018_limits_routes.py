"""Flow control per route (docs/adr/0017): the limiter's tables and its three functions.

New tables only, so nothing is rewritten. The functions are the limiter's statements: each is
called as one statement by the worker and runs its steps under the route's row lock, each step
with a fresh snapshot (READ COMMITTED), which one plain statement could not do: a statement that
waited for the lock would still count with the snapshot it took before waiting.
"""

from django.db import migrations

TABLES = """
CREATE TABLE route_limit (
    route varchar(220) PRIMARY KEY,
    max_in_flight integer CHECK (max_in_flight > 0),
    rate_count integer CHECK (rate_count > 0),
    rate_window_seconds integer CHECK (rate_window_seconds IN (1, 60, 3600)),
    declared_by varchar(200),
    declared_at timestamptz,
    in_flight integer NOT NULL DEFAULT 0 CHECK (in_flight >= 0),
    rate_bucket bigint,
    rate_counts integer[],
    rate_next_at timestamptz,
    rate_tat timestamptz,
    calls bigint NOT NULL DEFAULT 0,
    paused_until timestamptz,
    paused_by varchar(255),
    pause_reason text
);
CREATE TABLE route_call (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    route varchar(220) NOT NULL,
    kind varchar(20) NOT NULL DEFAULT 'action',
    execution_id uuid,
    action_id varchar(200),
    attempt integer,
    fencing_token bigint,
    held_until timestamptz,
    started_at timestamptz NOT NULL,
    ended_at timestamptz
);
CREATE INDEX route_call_open_idx ON route_call (route) WHERE ended_at IS NULL;
CREATE INDEX route_call_started_idx ON route_call (route, started_at);
CREATE INDEX route_call_ended_idx ON route_call (ended_at) WHERE ended_at IS NOT NULL;
CREATE TABLE route_park (
    execution_id uuid PRIMARY KEY,
    route varchar(220) NOT NULL,
    action_id varchar(200) NOT NULL,
    fencing_token bigint NOT NULL,
    until timestamptz,
    parked_at timestamptz NOT NULL
);
CREATE INDEX route_park_wait_idx ON route_park (route, parked_at) WHERE until IS NULL;
CREATE INDEX route_park_due_idx ON route_park (route, until) WHERE until IS NOT NULL;
CREATE TABLE route_event (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    route varchar(220) NOT NULL,
    type varchar(20) NOT NULL CHECK (type IN ('PAUSED', 'RESUMED')),
    actor varchar(255) NOT NULL,
    reason text NOT NULL DEFAULT '',
    until timestamptz,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX route_event_route_idx ON route_event (route, id);
"""

# Whether a call's holder still holds it: a lookup until its own bound; an action while its
# execution is RUNNING under the same token with a live lease and its checkpoint has not moved
# past that attempt. A SIGKILLed holder's call stops being live when its lease expires.
LIVE = """
CREATE FUNCTION route_call_live(rc route_call, now_at timestamptz) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN rc.execution_id IS NULL OR rc.held_until IS NOT NULL
                THEN coalesce(rc.held_until > now_at, false)
           ELSE EXISTS (SELECT 1 FROM execution AS x
                         WHERE x.id = rc.execution_id AND x.fencing_token = rc.fencing_token
                           AND x.status = 'RUNNING' AND x.lease_expires_at > now_at)
            AND NOT EXISTS (SELECT 1 FROM action_execution AS c
                             WHERE c.execution_id = rc.execution_id
                               AND c.action_id = rc.action_id
                               AND (c.attempt > rc.attempt
                                    OR (c.attempt = rc.attempt AND c.status <> 'RUNNING')))
           END
$$;
"""

# How many executions parked on p_route are due now (woken, or their time has come) and not
# claimed yet: the room they will take is not free for another wake-up.
DUE = """
CREATE FUNCTION route_parked_due(p_route text) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT count(*)::integer
      FROM route_park AS p
      JOIN execution AS e ON e.id = p.execution_id
     WHERE p.route = p_route AND p.until IS NOT NULL AND p.until <= clock_timestamp()
       AND e.status = 'PENDING' AND e.fencing_token = p.fencing_token
$$;
"""

# Wake up to p_count executions parked on p_route for a call in flight to end, oldest first:
# due now, announced; returns how many. The caller holds the route's row lock.
WAKE = """
CREATE FUNCTION route_wake(p_route text, p_count integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    woken integer;
BEGIN
    IF p_count <= 0 THEN
        RETURN 0;
    END IF;
    WITH chosen AS (
        SELECT e.id
          FROM route_park AS p
          JOIN execution AS e ON e.id = p.execution_id
         WHERE p.route = p_route AND p.until IS NULL
           AND e.status = 'PENDING' AND e.fencing_token = p.fencing_token
         ORDER BY p.parked_at
         LIMIT p_count
           FOR UPDATE OF e SKIP LOCKED
    ), moved AS (
        UPDATE execution AS e SET next_attempt_at = clock_timestamp()
          FROM chosen WHERE e.id = chosen.id
        RETURNING e.id
    ), marked AS (
        UPDATE route_park AS p SET until = clock_timestamp()
          FROM moved WHERE p.execution_id = moved.id
        RETURNING p.execution_id
    )
    SELECT count(*) INTO woken FROM marked;
    IF woken > 0 THEN
        PERFORM pg_notify('orquestador_executions', p_route);
    END IF;
    RETURN woken;
END
$$;
"""

# Take a call of p_route for a holder, or park the holder: granted (the call's id), or the
# execution is PENDING until `wait_until` (NULL: until a call in flight ends) and the park is
# recorded; `fenced` false when the fence no longer holds (nothing written). Without an
# execution (p_execution_id NULL) it is a lookup by the prober: held for p_park_seconds at most,
# never parked.
TAKE = """
CREATE FUNCTION route_call_take(
    p_route text, p_execution_id uuid, p_request_id uuid, p_token bigint, p_owner text,
    p_action_id text, p_attempt integer, p_max_in_flight integer, p_rate_count integer,
    p_rate_window integer, p_park_seconds double precision)
RETURNS TABLE (call_id bigint, wait_until timestamptz, fenced boolean)
LANGUAGE plpgsql AS $$
DECLARE
    lim record;
    now_at timestamptz;
    buckets constant integer := 20;
    width double precision;
    bucket bigint;
    counts integer[];
    used integer;
    first_used integer;
    wait timestamptz;
    in_flight_wait boolean := false;
    spacing interval;
    soonest timestamptz;
    tat timestamptz;
    live integer;
    new_id bigint;
BEGIN
    -- The route's row lock is held to the commit: not through a WAL flush (docs/adr/0017).
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT * INTO lim FROM route_limit AS l WHERE l.route = p_route FOR UPDATE;
    IF NOT FOUND THEN  -- a route no worker declared at start (a test's, a pause's first take)
        INSERT INTO route_limit (route, max_in_flight, rate_count, rate_window_seconds)
        VALUES (p_route, p_max_in_flight, p_rate_count, p_rate_window)
        ON CONFLICT (route) DO NOTHING;
        SELECT * INTO lim FROM route_limit AS l WHERE l.route = p_route FOR UPDATE;
    END IF;
    now_at := clock_timestamp();
    IF p_execution_id IS NOT NULL THEN
        PERFORM 1 FROM execution AS e
         WHERE e.id = p_execution_id AND e.request_id = p_request_id
           AND e.fencing_token = p_token AND e.status = 'RUNNING' AND e.lease_owner = p_owner
           AND e.lease_expires_at > now_at
           FOR NO KEY UPDATE;
        IF NOT FOUND THEN
            RETURN QUERY SELECT NULL::bigint, NULL::timestamptz, false;
            RETURN;
        END IF;
    END IF;
    live := lim.in_flight;
    IF lim.paused_until > now_at THEN
        wait := lim.paused_until;
    ELSIF p_max_in_flight IS NOT NULL AND live >= p_max_in_flight THEN
        -- Full by the counter: close the calls whose holder is gone, count again.
        UPDATE route_call AS rc SET ended_at = now_at
         WHERE rc.route = p_route AND rc.ended_at IS NULL AND NOT route_call_live(rc, now_at);
        SELECT count(*) INTO live FROM route_call AS rc
         WHERE rc.route = p_route AND rc.ended_at IS NULL;
        IF live >= p_max_in_flight THEN
            in_flight_wait := true;
        END IF;
    END IF;
    IF wait IS NULL AND NOT in_flight_wait AND p_rate_count IS NOT NULL THEN
        -- The window in `buckets` buckets, each counted whole while any part of it is inside
        -- the window: never more than p_rate_count starts in any sliding window.
        width := p_rate_window::double precision / buckets;
        bucket := floor(extract(epoch FROM now_at) / width)::bigint;
        IF lim.rate_bucket IS NULL OR lim.rate_counts IS NULL
           OR bucket - lim.rate_bucket > buckets THEN
            counts := array_fill(0, ARRAY[buckets + 1]);
        ELSIF bucket > lim.rate_bucket THEN
            counts := lim.rate_counts[(bucket - lim.rate_bucket + 1)::integer : buckets + 1]
                      || array_fill(0, ARRAY[(bucket - lim.rate_bucket)::integer]);
        ELSE
            counts := lim.rate_counts;
        END IF;
        -- counts[i] holds bucket (bucket - buckets - 1 + i), which leaves the window at the
        -- end of bucket (bucket + i - 1).
        SELECT coalesce(sum(c), 0), min(i) FILTER (WHERE c > 0) INTO used, first_used
          FROM unnest(counts) WITH ORDINALITY AS u(c, i);
        -- Beside the window, the starts are spaced (a theoretical arrival time, rate_tat, with
        -- one start of tolerance): the window is never filled in one burst, so the provider,
        -- which sees each call a little after its grant, sees about the rate too.
        spacing := make_interval(secs => p_rate_window::double precision / p_rate_count);
        -- A parked execution whose reserved turn has come was spaced when it was parked.
        IF used < p_rate_count AND lim.rate_tat IS NOT NULL AND now_at < lim.rate_tat - spacing
           AND NOT EXISTS (SELECT 1 FROM route_park AS p
                            WHERE p.execution_id = p_execution_id AND p.until <= now_at)
        THEN
            used := p_rate_count;  -- held back like a full window, until its spaced turn
            soonest := lim.rate_tat - spacing;
        ELSE
            soonest := NULL;
        END IF;
        IF used >= p_rate_count THEN
            wait := coalesce(soonest, to_timestamp((bucket + first_used) * width));
            IF p_execution_id IS NOT NULL THEN  -- a parked execution reserves its turn
                wait := greatest(wait, lim.rate_next_at);
                UPDATE route_limit
                   SET rate_next_at = wait + make_interval(
                           secs => p_rate_window::double precision / p_rate_count),
                       rate_bucket = bucket, rate_counts = counts
                 WHERE route = p_route;
            END IF;
        ELSE
            counts[buckets + 1] := counts[buckets + 1] + 1;
            tat := greatest(coalesce(lim.rate_tat, now_at), now_at) + spacing;
        END IF;
    END IF;
    IF wait IS NULL AND NOT in_flight_wait THEN
        INSERT INTO route_call (route, kind, execution_id, action_id, attempt, fencing_token,
                                held_until, started_at, ended_at)
        VALUES (p_route, CASE WHEN p_execution_id IS NULL THEN 'lookup' ELSE 'action' END,
                p_execution_id, p_action_id, p_attempt, p_token,
                CASE WHEN p_execution_id IS NULL
                     THEN now_at + make_interval(secs => p_park_seconds) END,
                now_at, CASE WHEN p_max_in_flight IS NULL THEN now_at END)
        RETURNING id INTO new_id;
        UPDATE route_limit
           SET in_flight = live + (p_max_in_flight IS NOT NULL)::integer,
               rate_bucket = coalesce(bucket, rate_bucket),
               rate_counts = coalesce(counts, rate_counts),
               rate_tat = coalesce(tat, rate_tat),
               calls = calls + 1
         WHERE route = p_route;
        DELETE FROM route_park WHERE execution_id = p_execution_id;
        RETURN QUERY SELECT new_id, NULL::timestamptz, true;
        RETURN;
    END IF;
    IF in_flight_wait THEN
        UPDATE route_limit SET in_flight = live WHERE route = p_route;
    END IF;
    IF p_execution_id IS NULL THEN  -- a lookup held back: nothing to park, it asks later
        RETURN QUERY SELECT NULL::bigint, wait, true;
        RETURN;
    END IF;
    UPDATE execution AS e
       SET status = 'PENDING', lease_owner = NULL, lease_expires_at = NULL,
           next_attempt_at = coalesce(wait, now_at + make_interval(secs => p_park_seconds))
     WHERE e.id = p_execution_id;
    INSERT INTO route_park (execution_id, route, action_id, fencing_token, until, parked_at)
    VALUES (p_execution_id, p_route, p_action_id, p_token, wait, now_at)
    ON CONFLICT (execution_id) DO UPDATE
       SET route = EXCLUDED.route, action_id = EXCLUDED.action_id,
           fencing_token = EXCLUDED.fencing_token, until = EXCLUDED.until,
           parked_at = EXCLUDED.parked_at;
    RETURN QUERY SELECT NULL::bigint, wait, true;
END
$$;
"""

# End a call taken with route_call_take on a route with max_in_flight; wake the oldest
# execution parked for a call in flight. Returns how many were woken (0 or 1).
END = """
CREATE FUNCTION route_call_end(p_route text, p_call_id bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    lim record;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);  -- as route_call_take
    SELECT * INTO lim FROM route_limit AS l WHERE l.route = p_route FOR UPDATE;
    UPDATE route_call SET ended_at = clock_timestamp()
     WHERE id = p_call_id AND ended_at IS NULL;
    IF FOUND THEN
        lim.in_flight := greatest(lim.in_flight - 1, 0);
        UPDATE route_limit SET in_flight = lim.in_flight WHERE route = p_route;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM route_park AS p WHERE p.route = p_route AND p.until IS NULL) THEN
        RETURN 0;
    END IF;
    RETURN route_wake(
        p_route,
        least(1, coalesce(lim.max_in_flight, lim.in_flight + 1) - lim.in_flight
                 - route_parked_due(p_route)));
END
$$;
"""

# Every route with executions parked for a call in flight: close the calls whose holder is
# gone (a SIGKILLed worker's, once its lease expired), wake as many parked executions as there
# is room for. Returns how many were woken. (Parks of executions that moved on, cancelled while
# parked, are skipped by the wake and removed by purgehistory.)
SWEEP = """
CREATE FUNCTION route_sweep() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    live integer;
    woken integer := 0;
    now_at timestamptz := clock_timestamp();
BEGIN
    FOR r IN SELECT l.route, l.max_in_flight
               FROM route_limit AS l
              WHERE EXISTS (SELECT 1 FROM route_park AS p
                             WHERE p.route = l.route AND p.until IS NULL)
              ORDER BY l.route
    LOOP
        PERFORM 1 FROM route_limit AS l WHERE l.route = r.route FOR UPDATE;
        UPDATE route_call AS rc SET ended_at = now_at
         WHERE rc.route = r.route AND rc.ended_at IS NULL AND NOT route_call_live(rc, now_at);
        SELECT count(*) INTO live FROM route_call AS rc
         WHERE rc.route = r.route AND rc.ended_at IS NULL;
        UPDATE route_limit SET in_flight = live WHERE route = r.route;
        woken := woken + route_wake(
            r.route, coalesce(r.max_in_flight - live, 1) - route_parked_due(r.route));
    END LOOP;
    RETURN woken;
END
$$;
"""

DROP = """
DROP FUNCTION route_sweep();
DROP FUNCTION route_call_end(text, bigint);
DROP FUNCTION route_call_take(text, uuid, uuid, bigint, text, text, integer, integer, integer,
                              integer, double precision);
DROP FUNCTION route_wake(text, integer);
DROP FUNCTION route_parked_due(text);
DROP FUNCTION route_call_live(route_call, timestamptz);
DROP TABLE route_event;
DROP TABLE route_park;
DROP TABLE route_call;
DROP TABLE route_limit;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0017_webhooks_outbox"),
    ]

    operations = [
        migrations.RunSQL(TABLES + LIVE + DUE + WAKE + TAKE + END + SWEEP, DROP),
    ]
