"""A place passed on at a call's end (docs/adr/0022): `route_call_handoff`.

The ending worker ends its call and, in the same statement, its claim takes the oldest
execution parked for a place with that place already granted (sql.CLAIM_PASSED): the place never
becomes free for anyone else, and the woken execution's run needs no take.
"""

from django.db import migrations

# End a call taken on a route with max_in_flight and pick the oldest execution parked for a
# place to pass it to: that execution's row is locked (FOR UPDATE SKIP LOCKED, left unchanged
# for the claim that composes this to update), its park removed, and its call granted under
# the token that claim gives it (the current one + 1) for the attempt it will start; returns it
# with the call's id. None picked (nothing parked, a pause or a rate on the route, no room):
# no row, and then as route_call_end (the oldest parked is woken and announced).
HANDOFF = """
CREATE FUNCTION route_call_handoff(p_route text, p_call_id bigint)
RETURNS TABLE (execution_id uuid, call_id bigint, action_id text, attempt integer)
LANGUAGE plpgsql AS $$
DECLARE
    lim record;
    now_at timestamptz;
    chosen record;
    new_id bigint;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);  -- as route_call_take
    SELECT * INTO lim FROM route_limit AS l WHERE l.route = p_route FOR UPDATE;
    now_at := clock_timestamp();
    UPDATE route_call AS rc SET ended_at = now_at WHERE rc.id = p_call_id AND rc.ended_at IS NULL;
    IF FOUND THEN
        lim.in_flight := greatest(lim.in_flight - 1, 0);
    END IF;
    IF coalesce(lim.paused_until <= now_at, true) AND lim.rate_count IS NULL
       AND lim.max_in_flight IS NOT NULL
       AND lim.max_in_flight - lim.in_flight - route_parked_due(p_route) >= 1 THEN
        SELECT p.execution_id AS id, p.action_id, e.fencing_token
          INTO chosen
          FROM route_park AS p
          JOIN execution AS e ON e.id = p.execution_id
         WHERE p.route = p_route AND p.until IS NULL
           AND e.status = 'PENDING' AND e.fencing_token = p.fencing_token
         ORDER BY p.parked_at
         LIMIT 1
           FOR UPDATE OF e SKIP LOCKED;
        IF FOUND THEN
            DELETE FROM route_park AS p WHERE p.execution_id = chosen.id;
            INSERT INTO route_call AS rc (route, kind, execution_id, action_id, attempt,
                                          fencing_token, started_at)
            SELECT p_route, 'passed', chosen.id, chosen.action_id,
                   coalesce((SELECT c.attempt FROM action_execution AS c
                              WHERE c.execution_id = chosen.id
                                AND c.action_id = chosen.action_id), 0) + 1,
                   chosen.fencing_token + 1, now_at
            RETURNING rc.id INTO new_id;
            UPDATE route_limit AS l SET in_flight = lim.in_flight + 1, calls = l.calls + 1
             WHERE l.route = p_route;
            RETURN QUERY SELECT rc.execution_id, rc.id, rc.action_id::text, rc.attempt
                           FROM route_call AS rc WHERE rc.id = new_id;
            RETURN;
        END IF;
    END IF;
    UPDATE route_limit AS l SET in_flight = lim.in_flight WHERE l.route = p_route;
    IF EXISTS (SELECT 1 FROM route_park AS p WHERE p.route = p_route AND p.until IS NULL) THEN
        PERFORM route_wake(
            p_route,
            least(1, coalesce(lim.max_in_flight, lim.in_flight + 1) - lim.in_flight
                     - route_parked_due(p_route)));
    END IF;
END
$$;
"""

DROP = "DROP FUNCTION route_call_handoff(text, bigint);"


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0018_limits_routes"),
    ]

    operations = [
        migrations.RunSQL(HANDOFF, DROP),
    ]
