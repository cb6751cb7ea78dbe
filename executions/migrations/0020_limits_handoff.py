"""A place passed on at a call's end, and places leased in batches (docs/adr/0022).

`route_call_handoff`: the ending worker ends its call and, in the same statement, its claim
takes the oldest execution parked for a place with that place already granted (sql.CLAIM_PASSED):
the place never becomes free for anyone else, and the woken execution's run needs no take.

Leases: on a route whose limits are far above what a worker can use, the worker leases as many
places as it has slots, and a share of the rate, in one `route_call` of kind `lease` (`places`,
`share`) held while the worker renews it, and takes its calls from it with no statement.
Every count of places sums `places` (1 for a call), and a rate's window counts the live shares
beside its buckets. New columns with constant defaults and a new partial index only.
"""

import importlib

from django.db import migrations

_EARLIER = importlib.import_module("executions.migrations.0018_limits_routes")

COLUMNS = """
ALTER TABLE route_call ADD COLUMN places integer NOT NULL DEFAULT 1;
ALTER TABLE route_call ADD COLUMN share integer NOT NULL DEFAULT 0;
ALTER TABLE route_call ADD COLUMN owner varchar(200);
ALTER TABLE route_call ADD COLUMN in_use integer NOT NULL DEFAULT 0;
ALTER TABLE route_call ADD COLUMN window_starts integer NOT NULL DEFAULT 0;
CREATE INDEX route_call_lease_idx ON route_call (route) WHERE kind = 'lease';
"""

# The starts a route's leases may make in the window ending now: each live share, and each
# share ended less than a window ago (its starts are still inside the window).
SHARES = """
CREATE FUNCTION route_shares(p_route text, p_window integer, now_at timestamptz)
RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT coalesce(sum(rc.share), 0)::integer
      FROM route_call AS rc
     WHERE rc.route = p_route AND rc.kind = 'lease' AND rc.share > 0
       AND least(coalesce(rc.ended_at, rc.held_until), rc.held_until)
           > now_at - make_interval(secs => p_window::double precision)
$$;
"""

# Lease p_places places (0: the route has no max_in_flight) and a share of p_share starts per
# window (0: no rate) for p_owner, held for p_hold_seconds and renewed by route_lease_renew;
# granted only when the route has room for all of it now, and never while it is paused. Returns
# the lease's id and end, or no row.
LEASE = """
CREATE FUNCTION route_lease_take(
    p_route text, p_owner text, p_places integer, p_share integer, p_max_in_flight integer,
    p_rate_count integer, p_rate_window integer, p_hold_seconds double precision)
RETURNS TABLE (call_id bigint, held_until timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    lim record;
    now_at timestamptz;
    buckets constant integer := 20;
    width double precision;
    bucket bigint;
    used integer := 0;
    new_id bigint;
    new_until timestamptz;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);  -- as route_call_take
    INSERT INTO route_limit (route, max_in_flight, rate_count, rate_window_seconds)
    VALUES (p_route, p_max_in_flight, p_rate_count, p_rate_window)
    ON CONFLICT (route) DO NOTHING;
    SELECT * INTO lim FROM route_limit AS l WHERE l.route = p_route FOR UPDATE;
    now_at := clock_timestamp();
    IF lim.paused_until > now_at THEN
        RETURN;
    END IF;
    IF p_max_in_flight IS NOT NULL AND lim.in_flight + p_places > p_max_in_flight THEN
        -- No room by the counter: close the calls and leases whose holder is gone, count again.
        UPDATE route_call AS rc SET ended_at = now_at
         WHERE rc.route = p_route AND rc.ended_at IS NULL AND NOT route_call_live(rc, now_at);
        SELECT coalesce(sum(rc.places), 0)::integer INTO lim.in_flight
          FROM route_call AS rc WHERE rc.route = p_route AND rc.ended_at IS NULL;
        UPDATE route_limit AS l SET in_flight = lim.in_flight WHERE l.route = p_route;
        IF lim.in_flight + p_places > p_max_in_flight THEN
            RETURN;
        END IF;
    END IF;
    IF p_rate_count IS NOT NULL THEN
        width := p_rate_window::double precision / buckets;
        bucket := floor(extract(epoch FROM now_at) / width)::bigint;
        IF lim.rate_bucket IS NOT NULL AND lim.rate_counts IS NOT NULL
           AND bucket - lim.rate_bucket <= buckets THEN
            SELECT coalesce(sum(c), 0) INTO used
              FROM unnest(lim.rate_counts[(bucket - lim.rate_bucket + 1)::integer : buckets + 1])
                   AS u(c);
        END IF;
        IF used + route_shares(p_route, p_rate_window, now_at) + p_share > p_rate_count THEN
            RETURN;
        END IF;
    END IF;
    new_until := now_at + make_interval(secs => p_hold_seconds);
    INSERT INTO route_call AS rc (route, kind, owner, places, share, held_until, started_at)
    VALUES (p_route, 'lease', p_owner, p_places, p_share, new_until, now_at)
    RETURNING rc.id INTO new_id;
    UPDATE route_limit AS l SET in_flight = l.in_flight + p_places WHERE l.route = p_route;
    RETURN QUERY SELECT new_id, new_until;
END
$$;
"""

# Renew this worker's leases (one statement for all of them, every sweep) with what each has in
# use and started in its window now, for /metrics; a lease that lapsed stays lapsed (its places
# were counted out). Returns the leases renewed and their new end.
RENEW = """
CREATE FUNCTION route_lease_renew(
    p_ids bigint[], p_in_use integer[], p_starts integer[], p_hold_seconds double precision)
RETURNS TABLE (call_id bigint, held_until timestamptz)
LANGUAGE sql AS $$
    UPDATE route_call AS rc
       SET held_until = clock_timestamp() + make_interval(secs => p_hold_seconds),
           in_use = u.in_use, window_starts = u.starts
      FROM unnest(p_ids, p_in_use, p_starts) AS u(id, in_use, starts)
     WHERE rc.id = u.id AND rc.kind = 'lease' AND rc.ended_at IS NULL
       AND rc.held_until > clock_timestamp()
    RETURNING rc.id, rc.held_until
$$;
"""

# Give a lease back (a worker stopping): its places count out at once; its share still counts
# for a window (its starts are in it).
RELEASE = """
CREATE FUNCTION route_lease_release(p_route text, p_call_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    released integer;
BEGIN
    PERFORM 1 FROM route_limit AS l WHERE l.route = p_route FOR UPDATE;
    UPDATE route_call AS rc
       SET ended_at = clock_timestamp(), held_until = least(rc.held_until, clock_timestamp())
     WHERE rc.id = p_call_id AND rc.kind = 'lease' AND rc.ended_at IS NULL
    RETURNING rc.places INTO released;
    IF FOUND THEN
        UPDATE route_limit AS l SET in_flight = greatest(l.in_flight - released, 0)
         WHERE l.route = p_route;
    END IF;
END
$$;
"""

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

# The take and the sweep of migration 0018, counting places (a lease holds many) and, for a
# rate, the leases' shares beside the buckets.
_COUNT = "SELECT count(*) INTO live FROM route_call AS rc"
_SUM = "SELECT coalesce(sum(rc.places), 0)::integer INTO live FROM route_call AS rc"
_USED = """          FROM unnest(counts) WITH ORDINALITY AS u(c, i);
"""
_USED_WITH_SHARES = """          FROM unnest(counts) WITH ORDINALITY AS u(c, i);
        -- The leases' shares: a window full by them alone frees up at the current bucket's end.
        used := used + route_shares(p_route, p_rate_window, now_at);
        first_used := coalesce(first_used, 1);
"""


def _replaced(text: str) -> str:
    return text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")


TAKE = _replaced(_EARLIER.TAKE).replace(_COUNT, _SUM).replace(_USED, _USED_WITH_SHARES)
SWEEP = _replaced(_EARLIER.SWEEP).replace(_COUNT, _SUM)

DROP = (
    "DROP FUNCTION route_call_handoff(text, bigint);"
    "DROP FUNCTION route_lease_release(text, bigint);"
    "DROP FUNCTION route_lease_renew(bigint[], integer[], integer[], double precision);"
    "DROP FUNCTION route_lease_take(text, text, integer, integer, integer, integer, integer,"
    " double precision);"
    + _replaced(_EARLIER.TAKE)
    + _replaced(_EARLIER.SWEEP)
    + "DROP FUNCTION route_shares(text, integer, timestamptz);"
    "DROP INDEX route_call_lease_idx;"
    "ALTER TABLE route_call DROP COLUMN places, DROP COLUMN share, DROP COLUMN owner,"
    " DROP COLUMN in_use, DROP COLUMN window_starts;"
)


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0019_webhook_outbox_cheaper"),
    ]

    operations = [
        migrations.RunSQL(
            COLUMNS + SHARES + HANDOFF + LEASE + RENEW + RELEASE + TAKE + SWEEP, DROP
        ),
    ]
