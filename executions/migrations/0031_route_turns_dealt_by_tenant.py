"""A rate's turns dealt in the wake order (docs/adr/0022, "Turns dealt in tenant order").

A take parked for a rate used to be handed its turn then, the next one after every turn handed
before it: a tenant's backlog parked behind a rate held every turn of its drain, and another
tenant's first execution waited for all of them, whatever WORKER_FAIRNESS said. On a route
declared `tenant` (migration 0021) a park for a rate now waits undealt (`until` 'infinity', its
execution an hour away as a park for a place is), and turns are dealt at most a little ahead
(`p_deal_ahead`) to the undealt parks in tenant order: by the takes on the route (granted or
parked) that find the dealt turns reaching less than half of that ahead, and by the sweep,
which deals what no take did (after a lull), and deals the undealt parks a route has left when
its workers now declare it `queue` (or no rate: all at once). A route declared `queue` keeps its
turns handed at park time. A new partial index for the undealt parks, the functions replaced.
"""

import importlib

from django.db import migrations

_EARLIER = importlib.import_module("executions.migrations.0018_limits_routes")
_HELD = importlib.import_module("executions.migrations.0025_route_park_held_counted")
_MOMENTS = importlib.import_module("executions.migrations.0028_route_rate_moments")

INDEX = """
CREATE INDEX route_park_turn_idx ON route_park (route, scope, parked_at)
 WHERE until = 'infinity';
"""


def _replaced(text: str, old: str, new: str, count: int = 1) -> str:
    if text.count(old) != count:
        raise ValueError(f"not found {count} times in the text replaced: {old}")
    return text.replace(old, new)


# route_park_tenant_order's query (migrations 0021, 0025) over the parks waiting for a turn to
# be dealt, on route_park_turn_idx. Read by the plan test as it stands here.
TURN_ORDER_QUERY = _replaced(_HELD.ORDER_QUERY, "p.until IS NULL", "p.until = 'infinity'", count=3)
TURN_ORDER = f"""
CREATE FUNCTION route_park_turn_order(p_route text, p_count integer)
RETURNS TABLE (execution_id uuid, turn bigint)
LANGUAGE sql STABLE AS $$
{TURN_ORDER_QUERY}
$$;
"""

# Deal up to p_count turns of p_route, p_first then each p_spacing after the one before, to the
# undealt parks in tenant order: each execution due at its turn, its park's `until` the turn.
# The route's next turn moves past the last dealt. Returns how many. The caller holds the
# route's row lock.
DEAL = """
CREATE FUNCTION route_turns_deal(
    p_route text, p_first timestamptz, p_spacing interval, p_count integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    dealt integer;
BEGIN
    IF p_count <= 0 THEN
        RETURN 0;
    END IF;
    WITH chosen AS (
        SELECT e.id, o.turn
          FROM route_park_turn_order(p_route, p_count) AS o
          JOIN execution AS e ON e.id = o.execution_id
         WHERE e.status = 'PENDING'
         ORDER BY o.turn
         LIMIT p_count
           FOR UPDATE OF e SKIP LOCKED
    ), numbered AS (
        SELECT c.id, row_number() OVER (ORDER BY c.turn) - 1 AS k FROM chosen AS c
    ), moved AS (
        UPDATE execution AS e SET next_attempt_at = p_first + p_spacing * n.k
          FROM numbered AS n WHERE e.id = n.id
        RETURNING e.id, e.next_attempt_at
    ), marked AS (
        UPDATE route_park AS p SET until = moved.next_attempt_at
          FROM moved WHERE p.execution_id = moved.id
        RETURNING 1
    )
    SELECT count(*) INTO dealt FROM marked;
    IF dealt > 0 THEN
        UPDATE route_limit SET rate_next_at = p_first + p_spacing * dealt WHERE route = p_route;
    END IF;
    RETURN dealt;
END
$$;
"""

# On a route with undealt parks, once the turns dealt reach less than half of p_ahead seconds
# ahead: deal the turns that come before p_ahead seconds from now, the first
# where a park's turn would be handed (a little ahead of the route's next free moment, after
# the last turn dealt), p_spacing apart. In halves, not a turn per take: each deal ranks the
# tenants (counting what each holds), and a take per turn that did so made the takes, one at
# a time under the route's row lock, the route's limit. Returns the first turn dealt and how
# many (NULL, 0: none). The caller holds the route's row lock.
DEAL_AHEAD = """
CREATE FUNCTION route_turns_deal_ahead(
    p_route text, p_spacing interval, p_lead double precision, p_horizon double precision,
    p_ahead double precision, OUT dealt_from timestamptz, OUT dealt integer)
LANGUAGE plpgsql AS $$
DECLARE
    lim record;
    now_at timestamptz := clock_timestamp();
    due_by timestamptz;
BEGIN
    dealt := 0;
    SELECT * INTO lim FROM route_limit AS l WHERE l.route = p_route;
    IF lim.rate_next_at > now_at + make_interval(secs => p_ahead / 2)
       OR NOT EXISTS (SELECT 1 FROM route_park AS p
                       WHERE p.route = p_route AND p.until = 'infinity') THEN
        RETURN;
    END IF;
    dealt_from := greatest(
        coalesce(lim.rate_tat, now_at) - make_interval(secs => (p_lead + p_horizon) / 2),
        coalesce(lim.rate_next_at, now_at), now_at);
    due_by := now_at + make_interval(secs => p_ahead);
    IF dealt_from <= due_by THEN
        dealt := route_turns_deal(
            p_route, dealt_from, p_spacing,
            1 + floor(extract(epoch FROM due_by - dealt_from)
                      / extract(epoch FROM p_spacing))::integer);
    END IF;
    IF dealt = 0 THEN
        dealt_from := NULL;
    END IF;
END
$$;
"""

# route_park_peers of migration 0028: peers parked undealt ('infinity') are due an hour away,
# as peers parked for a place are, never at 'infinity'.
PEERS = _replaced(
    _MOMENTS.PEERS,
    "coalesce(p_until + p_spacing * o.turn, p_until,",
    "coalesce(p_until + p_spacing * o.turn, nullif(p_until, 'infinity'),",
).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")

# The take of migration 0028, on a route declared `tenant`: a park for a rate waits undealt, and
# a take of an execution on the route deals the turns ahead (its own included) when the dealt
# ones reach less than half of p_deal_ahead ahead. One
# back at its turn and parked again (its moment went to calls that missed theirs) keeps its age
# within its tenant: it is dealt again before the parks younger than it.
_TAKE_SIGNATURE = (
    """    p_horizon double precision)
RETURNS TABLE (call_id bigint, wait_until timestamptz, fenced boolean, start_at timestamptz,
               peers_parked integer, turn_seconds double precision)
""",
    """    p_horizon double precision, p_deal_ahead double precision)
RETURNS TABLE (call_id bigint, wait_until timestamptz, fenced boolean, start_at timestamptz,
               peers_parked integer, turn_seconds double precision, dealt_from timestamptz,
               dealt integer)
""",
)
_TAKE_VARIABLES = (
    """    new_id bigint;
BEGIN
""",
    """    new_id bigint;
    dealt_first timestamptz;
    dealt_count integer := 0;
BEGIN
""",
)
_TAKE_TURN = (
    """                wait := greatest(moment - make_interval(secs => (p_lead + p_horizon) / 2),
                                 lim.rate_next_at);
                IF p_execution_id IS NOT NULL THEN  -- a lookup held back asks later
                    next_turn := wait + spacing;
                END IF;
""",
    """                wait := greatest(moment - make_interval(secs => (p_lead + p_horizon) / 2),
                                 lim.rate_next_at);
                IF p_execution_id IS NOT NULL AND lim.wake_order = 'tenant' THEN
                    wait := 'infinity';  -- undealt: its turn is dealt in tenant order
                ELSIF p_execution_id IS NOT NULL THEN  -- a lookup held back asks later
                    next_turn := wait + spacing;
                END IF;
""",
)
_TAKE_GRANTED = (
    """        DELETE FROM route_park WHERE execution_id = p_execution_id;
        RETURN QUERY SELECT new_id, NULL::timestamptz, true, moment, 0, NULL::double precision;
        RETURN;
""",
    """        DELETE FROM route_park WHERE execution_id = p_execution_id;
        IF spacing IS NOT NULL AND p_execution_id IS NOT NULL AND lim.wake_order = 'tenant' THEN
            SELECT d.dealt_from, d.dealt INTO dealt_first, dealt_count
              FROM route_turns_deal_ahead(p_route, spacing, p_lead, p_horizon, p_deal_ahead)
                   AS d;
        END IF;
        RETURN QUERY SELECT new_id, NULL::timestamptz, true, moment, 0,
                            extract(epoch FROM spacing)::double precision, dealt_first,
                            dealt_count;
        RETURN;
""",
)
_TAKE_FENCED = (
    """            RETURN QUERY SELECT NULL::bigint, NULL::timestamptz, false, NULL::timestamptz, 0,
                                NULL::double precision;
""",
    """            RETURN QUERY SELECT NULL::bigint, NULL::timestamptz, false, NULL::timestamptz, 0,
                                NULL::double precision, NULL::timestamptz, 0;
""",
)
_TAKE_LOOKUP = (
    """        RETURN QUERY SELECT NULL::bigint, wait, true, NULL::timestamptz, 0, NULL::double precision;
""",
    """        RETURN QUERY SELECT NULL::bigint, wait, true, NULL::timestamptz, 0, NULL::double precision,
                            NULL::timestamptz, 0;
""",
)
_TAKE_PARK = (
    """           next_attempt_at = coalesce(wait, now_at + make_interval(secs => p_park_seconds))
""",
    """           next_attempt_at = coalesce(nullif(wait, 'infinity'),
                                      now_at + make_interval(secs => p_park_seconds))
""",
)
_TAKE_REPARK = (
    """           parked_at = EXCLUDED.parked_at;
""",
    """           parked_at = CASE WHEN EXCLUDED.until = 'infinity' AND route_park.until <> 'infinity'
                            THEN route_park.parked_at ELSE EXCLUDED.parked_at END;
""",
)
_TAKE_PARKED = (
    """    RETURN QUERY SELECT NULL::bigint, wait, true, NULL::timestamptz, coalesce(peers, 0),
                        extract(epoch FROM spacing)::double precision;
""",
    """    IF wait = 'infinity' THEN  -- undealt, with its peers: deal the turns ahead
        PERFORM route_park_peers(p_route, p_execution_id, p_action_id, wait, now_at,
                                 p_park_seconds, NULL);
        SELECT d.dealt_from, d.dealt INTO dealt_first, dealt_count
          FROM route_turns_deal_ahead(p_route, spacing, p_lead, p_horizon, p_deal_ahead) AS d;
        SELECT nullif(p.until, 'infinity') INTO wait
          FROM route_park AS p WHERE p.execution_id = p_execution_id;
    END IF;
    RETURN QUERY SELECT NULL::bigint, wait, true, NULL::timestamptz, coalesce(peers, 0),
                        extract(epoch FROM spacing)::double precision, dealt_first,
                        dealt_count;
""",
)
TAKE = _MOMENTS.TAKE
for _old, _new in (
    _TAKE_SIGNATURE,
    _TAKE_VARIABLES,
    _TAKE_TURN,
    _TAKE_GRANTED,
    _TAKE_FENCED,
    _TAKE_LOOKUP,
    _TAKE_PARK,
    _TAKE_REPARK,
    _TAKE_PARKED,
):
    TAKE = _replaced(TAKE, _old, _new)

# The sweep of migration 0018, also on every route with undealt parks (and not paused): it deals
# the turns ahead that no take dealt, whatever the route's order now (parks left undealt by
# workers that declared it `tenant` before), and all of them at once on a route without a rate
# any more. One loop in route order, as before, so two sweeps lock routes in the same order.
SWEEP = """
CREATE FUNCTION route_sweep(
    p_lead double precision, p_horizon double precision, p_deal_ahead double precision)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    live integer;
    free integer;
    woken integer := 0;
    now_at timestamptz := clock_timestamp();
BEGIN
    FOR r IN SELECT *
               FROM (SELECT l.route, l.max_in_flight, l.rate_count, l.rate_window_seconds,
                            coalesce(l.paused_until > now_at, false) AS paused,
                            EXISTS (SELECT 1 FROM route_park AS p
                                     WHERE p.route = l.route AND p.until IS NULL) AS waiting,
                            EXISTS (SELECT 1 FROM route_park AS p
                                     WHERE p.route = l.route AND p.until = 'infinity') AS undealt
                       FROM route_limit AS l) AS l
              WHERE l.waiting OR l.undealt
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
        IF r.undealt AND NOT r.paused AND r.rate_count IS NULL THEN  -- no rate: all due now
            woken := woken + route_turns_deal(r.route, now_at, interval '0', 1000);
        ELSIF r.undealt AND NOT r.paused THEN
            free := r.rate_count - route_shares(r.route, r.rate_window_seconds, now_at);
            IF free > 0 THEN
                woken := woken + (route_turns_deal_ahead(
                    r.route, make_interval(secs => r.rate_window_seconds::double precision / free),
                    p_lead, p_horizon, p_deal_ahead)).dealt;
            END IF;
        END IF;
    END LOOP;
    RETURN woken;
END
$$;
"""

_TAKE_NOW = (
    "route_call_take(text, uuid, uuid, bigint, text, text, integer, integer, integer, integer,"
    " double precision, double precision, double precision)"
)
_TAKE_DEALING = _TAKE_NOW[:-1] + ", double precision)"

FORWARD = (
    INDEX
    + TURN_ORDER
    + DEAL
    + DEAL_AHEAD
    + PEERS
    + f"DROP FUNCTION {_TAKE_NOW};"
    + TAKE
    + "DROP FUNCTION route_sweep();"
    + SWEEP
)

BACKWARD = (
    "DROP FUNCTION route_sweep(double precision, double precision, double precision);"
    + _EARLIER.SWEEP
    + f"DROP FUNCTION {_TAKE_DEALING};"
    + _MOMENTS.TAKE
    + _MOMENTS.PEERS.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    + "DROP FUNCTION route_turns_deal_ahead(text, interval, double precision, double precision,"
    " double precision);"
    "DROP FUNCTION route_turns_deal(text, timestamptz, interval, integer);"
    "DROP FUNCTION route_park_turn_order(text, integer);"
    "DROP INDEX route_park_turn_idx;"
)


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0030_webhook_delivery_order_by_execution"),
    ]

    operations = [
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
