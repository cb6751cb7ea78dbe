"""A rate's starts granted for moments spaced W/N apart (docs/adr/0022, "The window").

A rate used to grant a start "now", counted in a window of buckets and spaced with one start of
tolerance; the provider sees each call after its RUNNING checkpoint commits, a delay that varies
from call to call, so two grants a moment apart could reach it bunched with the next ones and a
sliding second there held a few more than the rate. Now `route_call_take` grants each start for
a moment (`start_at`): the route's next free one (`rate_tat`), at least a lead ahead of now, and
the next free moment moves W/N on, with no tolerance; the worker commits its checkpoint, then
sends the call at that moment, never before, and never more than a fraction of W/N after it
(`route_call_retime` gives a call that would be later a new moment). No window of W then holds
more than N moments, and the provider, which sees each call within that fraction of its moment,
never more than N + 1. A take whose moment is further than a horizon away parks its execution
until its turn, a little before the moment it may expect then; turns are handed out in order
(`rate_next_at`), so fresh work waits behind parked work. The leases' shares (migration 0020)
take their part of the rate: per-call moments are spaced W/(N - shares). The window's buckets
are gone (`rate_bucket`, `rate_counts`); a lease counts the per-call starts of the window from
route_call itself. The functions are written whole here, not patched from their earlier texts.
"""

import importlib

from django.db import migrations

_HANDOFF = importlib.import_module("executions.migrations.0020_limits_handoff")
_PEERS = importlib.import_module("executions.migrations.0022_route_park_peers")

# Take a call of p_route for a holder, or park the holder: granted (the call's id, and for a
# rate the moment it may start, `start_at`), or the execution is PENDING until `wait_until`
# (NULL: until a call in flight ends) and the park is recorded, with `peers_parked` of its
# peers at the turns after it, `turn_seconds` apart (a rate's: the worker wakes its claim at
# each); `fenced` false when the fence no longer holds (nothing written). Without an execution (p_execution_id NULL) it is a lookup
# by the prober: held for p_park_seconds at most, never parked. A rate's moment is at least
# p_lead ahead of now (the holder's checkpoint commits meanwhile) and at most p_horizon.
TAKE = """
CREATE FUNCTION route_call_take(
    p_route text, p_execution_id uuid, p_request_id uuid, p_token bigint, p_owner text,
    p_action_id text, p_attempt integer, p_max_in_flight integer, p_rate_count integer,
    p_rate_window integer, p_park_seconds double precision, p_lead double precision,
    p_horizon double precision)
RETURNS TABLE (call_id bigint, wait_until timestamptz, fenced boolean, start_at timestamptz,
               peers_parked integer, turn_seconds double precision)
LANGUAGE plpgsql AS $$
DECLARE
    lim record;
    now_at timestamptz;
    wait timestamptz;
    in_flight_wait boolean := false;
    free integer;
    spacing interval;
    moment timestamptz;
    turn_came boolean;
    next_turn timestamptz;
    peers integer;
    live integer;
    new_id bigint;
BEGIN
    -- The route's row lock is held to the commit: not through a WAL flush (docs/adr/0022).
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
            RETURN QUERY SELECT NULL::bigint, NULL::timestamptz, false, NULL::timestamptz, 0,
                                NULL::double precision;
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
        SELECT coalesce(sum(rc.places), 0)::integer INTO live FROM route_call AS rc
         WHERE rc.route = p_route AND rc.ended_at IS NULL;
        IF live >= p_max_in_flight THEN
            in_flight_wait := true;
        END IF;
    END IF;
    IF wait IS NULL AND NOT in_flight_wait AND p_rate_count IS NOT NULL THEN
        -- What the leases' shares leave of the rate, each start at its own moment W/free after
        -- the one before (no tolerance): no window of W holds more than `free` of them.
        free := p_rate_count - route_shares(p_route, p_rate_window, now_at);
        IF free <= 0 THEN  -- the shares fill the window: ask again a twentieth of it later
            wait := now_at + make_interval(secs => p_rate_window / 20.0);
        ELSE
            spacing := make_interval(secs => p_rate_window::double precision / free);
            moment := greatest(coalesce(lim.rate_tat, now_at),
                               now_at + make_interval(secs => p_lead));
            -- An execution parked for its turn and now back (or woken) is not queued again.
            turn_came := EXISTS (SELECT 1 FROM route_park AS p
                                  WHERE p.execution_id = p_execution_id AND p.until <= now_at);
            IF moment > now_at + make_interval(secs => p_horizon)
               OR (NOT turn_came AND lim.rate_next_at - spacing > now_at) THEN
                -- Too far to wait with a slot held, or turns handed out ahead of it: parked
                -- until the next turn, W/free after the last one, and not before it would be
                -- taken a little ahead of the moment free now (halfway between lead and
                -- horizon). One back too early (moments went to calls that missed theirs) is
                -- not a fresh take's rival at its turn: it takes the next one too.
                wait := greatest(moment - make_interval(secs => (p_lead + p_horizon) / 2),
                                 lim.rate_next_at);
                IF p_execution_id IS NOT NULL THEN  -- a lookup held back asks later
                    next_turn := wait + spacing;
                END IF;
            END IF;
        END IF;
    END IF;
    IF wait IS NULL AND NOT in_flight_wait THEN
        INSERT INTO route_call (route, kind, execution_id, action_id, attempt, fencing_token,
                                held_until, started_at, ended_at)
        VALUES (p_route, CASE WHEN p_execution_id IS NULL THEN 'lookup' ELSE 'action' END,
                p_execution_id, p_action_id, p_attempt, p_token,
                CASE WHEN p_execution_id IS NULL
                     THEN now_at + make_interval(secs => p_park_seconds) END,
                coalesce(moment, now_at), CASE WHEN p_max_in_flight IS NULL THEN now_at END)
        RETURNING id INTO new_id;
        UPDATE route_limit
           SET in_flight = live + (p_max_in_flight IS NOT NULL)::integer,
               rate_tat = coalesce(moment + spacing, rate_tat),
               calls = calls + 1
         WHERE route = p_route;
        DELETE FROM route_park WHERE execution_id = p_execution_id;
        RETURN QUERY SELECT new_id, NULL::timestamptz, true, moment, 0, NULL::double precision;
        RETURN;
    END IF;
    IF in_flight_wait OR next_turn IS NOT NULL THEN
        UPDATE route_limit
           SET in_flight = live, rate_next_at = coalesce(next_turn, rate_next_at)
         WHERE route = p_route;
    END IF;
    IF p_execution_id IS NULL THEN  -- a lookup held back: nothing to park, it asks later
        RETURN QUERY SELECT NULL::bigint, wait, true, NULL::timestamptz, 0, NULL::double precision;
        RETURN;
    END IF;
    UPDATE execution AS e
       SET status = 'PENDING', lease_owner = NULL, lease_expires_at = NULL,
           next_attempt_at = coalesce(wait, now_at + make_interval(secs => p_park_seconds))
     WHERE e.id = p_execution_id;
    INSERT INTO route_park (execution_id, route, action_id, fencing_token, until, parked_at,
                            scope)
    VALUES (p_execution_id, p_route, p_action_id, p_token, wait, now_at,
            (SELECT e.scope FROM execution AS e WHERE e.id = p_execution_id))
    ON CONFLICT (execution_id) DO UPDATE
       SET route = EXCLUDED.route, action_id = EXCLUDED.action_id, scope = EXCLUDED.scope,
           fencing_token = EXCLUDED.fencing_token, until = EXCLUDED.until,
           parked_at = EXCLUDED.parked_at;
    IF in_flight_wait OR lim.paused_until > now_at THEN
        PERFORM route_park_peers(p_route, p_execution_id, p_action_id, wait, now_at,
                                 p_park_seconds, NULL);
    ELSIF next_turn IS NOT NULL THEN  -- a rate's: the peers take the turns after its own
        peers := route_park_peers(p_route, p_execution_id, p_action_id, wait, now_at,
                                  p_park_seconds, spacing);
        IF peers > 0 THEN
            UPDATE route_limit SET rate_next_at = next_turn + spacing * peers
             WHERE route = p_route;
        END IF;
    END IF;
    RETURN QUERY SELECT NULL::bigint, wait, true, NULL::timestamptz, coalesce(peers, 0),
                        extract(epoch FROM spacing)::double precision;
END
$$;
"""

# route_park_peers of migration 0022 with the peers' turns spaced: parked until p_until plus
# p_spacing for the first, twice for the second, in claim order (p_spacing NULL: all until
# p_until, as before). Returns how many.
PEERS = """
CREATE FUNCTION route_park_peers(
    p_route text, p_execution_id uuid, p_action_id text, p_until timestamptz,
    p_parked_at timestamptz, p_park_seconds double precision, p_spacing interval)
RETURNS integer
LANGUAGE plpgsql
-- The due rows walk execution_claim_idx in order, as the claim does; the parks' order is a
-- small sort all the same, and its disabled cost must not bring JIT on (docs/adr/0022).
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    p_flow bigint;
    p_transition text;
    parked integer;
BEGIN
    SELECT x.flow_id, x.transition_id INTO p_flow, p_transition
      FROM execution AS x
     WHERE x.id = p_execution_id AND x.compensation_cause IS NULL
       AND NOT EXISTS (SELECT 1 FROM action_execution AS c WHERE c.execution_id = x.id);
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    WITH peers AS (%(peers)s
    ), ordered AS (
        SELECT peers.*, row_number() OVER (
                   ORDER BY peers.next_attempt_at, peers.created_at, peers.id) AS turn
          FROM peers
    ), moved AS (
        UPDATE execution AS e
           SET next_attempt_at = coalesce(p_until + p_spacing * o.turn, p_until,
                                          p_parked_at + make_interval(secs => p_park_seconds))
          FROM ordered AS o WHERE e.id = o.id
        RETURNING e.id
    ), recorded AS (
        INSERT INTO route_park (execution_id, route, action_id, fencing_token, until, parked_at,
                                scope)
        SELECT o.id, p_route, p_action_id, o.fencing_token,
               coalesce(p_until + p_spacing * o.turn, p_until),
               p_parked_at + make_interval(secs => 0.000001 * o.turn), o.scope
          FROM ordered AS o JOIN moved ON moved.id = o.id
        RETURNING 1
    )
    SELECT count(*) INTO parked FROM recorded;
    RETURN parked;
END
$$;
""".replace("%(peers)s", _PEERS.PEERS_QUERY)

# A call granted a moment it would now miss by more than its worker allows (its checkpoint or
# its process was slow): the route's next free moment instead, at least p_lead ahead, never
# parked (its RUNNING checkpoint is written). Returns the new moment; the call's record moves to
# it (the moment missed was never used).
RETIME = """
CREATE FUNCTION route_call_retime(
    p_route text, p_call_id bigint, p_rate_count integer, p_rate_window integer,
    p_lead double precision)
RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    lim record;
    now_at timestamptz;
    moment timestamptz;
    free integer;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);  -- as route_call_take
    SELECT * INTO lim FROM route_limit AS l WHERE l.route = p_route FOR UPDATE;
    now_at := clock_timestamp();
    free := greatest(p_rate_count - route_shares(p_route, p_rate_window, now_at), 1);
    moment := greatest(coalesce(lim.rate_tat, now_at), now_at + make_interval(secs => p_lead));
    UPDATE route_limit AS l
       SET rate_tat = moment + make_interval(secs => p_rate_window::double precision / free)
     WHERE l.route = p_route;
    UPDATE route_call AS rc SET started_at = moment WHERE rc.id = p_call_id;
    RETURN moment;
END
$$;
"""

# route_lease_take of migration 0020, counting the per-call starts of the window from route_call
# (the moments granted in it, and those granted ahead), the buckets being gone.
_USED_BY_BUCKETS = """        width := p_rate_window::double precision / buckets;
        bucket := floor(extract(epoch FROM now_at) / width)::bigint;
        IF lim.rate_bucket IS NOT NULL AND lim.rate_counts IS NOT NULL
           AND bucket - lim.rate_bucket <= buckets THEN
            SELECT coalesce(sum(c), 0) INTO used
              FROM unnest(lim.rate_counts[(bucket - lim.rate_bucket + 1)::integer : buckets + 1])
                   AS u(c);
        END IF;
"""
_USED_BY_CALLS = """        SELECT count(*)::integer INTO used FROM route_call AS rc
         WHERE rc.route = p_route AND rc.kind <> 'lease'
           AND rc.started_at > now_at - make_interval(secs => p_rate_window::double precision);
"""
_BUCKET_VARIABLES = """    buckets constant integer := 20;
    width double precision;
    bucket bigint;
"""


def _replaced(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise ValueError(f"not found once in the text replaced: {old}")
    return text.replace(old, new)


LEASE = _replaced(
    _replaced(_HANDOFF.LEASE, _USED_BY_BUCKETS, _USED_BY_CALLS), _BUCKET_VARIABLES, ""
).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")

_PEERS_BEFORE = "route_park_peers(text, uuid, text, timestamptz, timestamptz, double precision)"
_PEERS_NOW = (
    "route_park_peers(text, uuid, text, timestamptz, timestamptz, double precision, interval)"
)

FORWARD = (
    "DROP FUNCTION route_call_take(text, uuid, uuid, bigint, text, text, integer, integer,"
    " integer, integer, double precision);"
    + f"DROP FUNCTION {_PEERS_BEFORE};"
    + PEERS
    + TAKE
    + RETIME
    + LEASE
    + "ALTER TABLE route_limit DROP COLUMN rate_bucket, DROP COLUMN rate_counts;"
)

BACKWARD = (
    "ALTER TABLE route_limit ADD COLUMN rate_bucket bigint, ADD COLUMN rate_counts integer[];"
    + _HANDOFF.LEASE.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    + "DROP FUNCTION route_call_retime(text, bigint, integer, integer, double precision);"
    "DROP FUNCTION route_call_take(text, uuid, uuid, bigint, text, text, integer, integer,"
    " integer, integer, double precision, double precision, double precision);"
    + f"DROP FUNCTION {_PEERS_NOW};"
    + _PEERS.PEERS
    + _PEERS.TAKE.replace("CREATE OR REPLACE FUNCTION", "CREATE FUNCTION")
)


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0027_check_constraints_as_array_constants"),
    ]

    operations = [
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
