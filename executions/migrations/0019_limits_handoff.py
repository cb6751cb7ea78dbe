"""A place passed on at a call's end (docs/adr/0022): `route_call_handoff`, and a take that uses
the place its execution was passed.

The ending worker passes its place to the oldest execution parked for one and claims that
execution itself: the place is held for it meanwhile (a `route_call` with `held_until` and no
token, counted while the hold lasts), so no other take can use it, and the take of the run that
claimed it turns the reservation into its call without counting again.
"""

import importlib

from django.db import migrations

# Functions as migration 0018 created them, for the way back.
_EARLIER = importlib.import_module("executions.migrations.0018_limits_routes")

# End a call taken on a route with max_in_flight and pass its place to the oldest execution
# parked for one (due now, not announced: the caller claims it): its id, or NULL when none was
# passed (nothing parked, a pause or a rate on the route, no room), and then what route_call_end
# does (the oldest parked is woken and announced). The caller holds nothing; this takes the
# route's row lock first.
HANDOFF = """
CREATE FUNCTION route_call_handoff(p_route text, p_call_id bigint, p_hold_seconds double precision)
RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    lim record;
    now_at timestamptz;
    chosen record;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);  -- as route_call_take
    SELECT * INTO lim FROM route_limit AS l WHERE l.route = p_route FOR UPDATE;
    now_at := clock_timestamp();
    UPDATE route_call SET ended_at = now_at WHERE id = p_call_id AND ended_at IS NULL;
    IF FOUND THEN
        lim.in_flight := greatest(lim.in_flight - 1, 0);
    END IF;
    IF coalesce(lim.paused_until <= now_at, true) AND lim.rate_count IS NULL
       AND lim.max_in_flight IS NOT NULL
       AND lim.max_in_flight - lim.in_flight - route_parked_due(p_route) >= 1 THEN
        SELECT p.execution_id, p.action_id INTO chosen
          FROM route_park AS p
          JOIN execution AS e ON e.id = p.execution_id
         WHERE p.route = p_route AND p.until IS NULL
           AND e.status = 'PENDING' AND e.fencing_token = p.fencing_token
         ORDER BY p.parked_at
         LIMIT 1
           FOR UPDATE OF e SKIP LOCKED;
        IF FOUND THEN
            UPDATE execution SET next_attempt_at = now_at WHERE id = chosen.execution_id;
            DELETE FROM route_park WHERE execution_id = chosen.execution_id;
            INSERT INTO route_call (route, kind, execution_id, action_id, held_until, started_at)
            VALUES (p_route, 'passed', chosen.execution_id, chosen.action_id,
                    now_at + make_interval(secs => p_hold_seconds), now_at);
            UPDATE route_limit SET in_flight = lim.in_flight + 1 WHERE route = p_route;
            RETURN chosen.execution_id;
        END IF;
    END IF;
    UPDATE route_limit SET in_flight = lim.in_flight WHERE route = p_route;
    IF EXISTS (SELECT 1 FROM route_park AS p WHERE p.route = p_route AND p.until IS NULL) THEN
        PERFORM route_wake(
            p_route,
            least(1, coalesce(lim.max_in_flight, lim.in_flight + 1) - lim.in_flight
                     - route_parked_due(p_route)));
    END IF;
    RETURN NULL;
END
$$;
"""

# The take, first using a place passed to this execution (route_call_handoff) while its hold
# lasts: the reservation becomes the call, under the holder's token, counted once already.
_RESERVED = """    IF p_execution_id IS NOT NULL THEN
        UPDATE route_call AS rc
           SET fencing_token = p_token, action_id = p_action_id, attempt = p_attempt,
               held_until = NULL, started_at = now_at
         WHERE rc.route = p_route AND rc.execution_id = p_execution_id AND rc.ended_at IS NULL
           AND rc.fencing_token IS NULL AND rc.held_until > now_at
        RETURNING rc.id INTO new_id;
        IF FOUND THEN
            UPDATE route_limit SET calls = calls + 1 WHERE route = p_route;
            RETURN QUERY SELECT new_id, NULL::timestamptz, true;
            RETURN;
        END IF;
    END IF;
"""
_ANCHOR = "    live := lim.in_flight;\n"
TAKE = _EARLIER.TAKE.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION").replace(
    _ANCHOR, _RESERVED + _ANCHOR
)
TAKE_BEFORE = _EARLIER.TAKE.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")

DROP = "DROP FUNCTION route_call_handoff(text, bigint, double precision);"


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0018_limits_routes"),
    ]

    operations = [
        migrations.RunSQL(HANDOFF + TAKE, DROP + TAKE_BEFORE),
    ]
