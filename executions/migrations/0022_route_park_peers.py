"""A full route parks its fresh due executions at once (docs/adr/0022, "Parked together").

When a take finds its route full (or paused) and parks an execution that has run no action yet,
the same statement parks, beside it, the due executions that would park the same way: PENDING,
of the same flow (a pinned version) and transition, no checkpoint and no compensation (so their
next call is the same first action, on the same route), not parked already. They are found in
the first PEERS_AHEAD due rows in claim order (execution_claim_idx, as the claim walks it), so
the work is bounded whatever the backlog, and locked FOR NO KEY UPDATE SKIP LOCKED (a row a claim
is taking is left to it). Until parked, such a backlog is due work older than every other
route's, and the claim took it first, only for each run to park. Functions only.
"""

import importlib

from django.db import migrations

_TENANT = importlib.import_module("executions.migrations.0021_route_park_tenant")

PEERS_AHEAD = 1000  # due rows, in claim order, among which a park looks for its peers

# The peers of a parked execution (its flow p_flow and transition p_transition) among the first
# PEERS_AHEAD due rows in claim order (as the claim reads them, then each by key); a row another transaction locks is passed
# over, and the lock rechecks that a row is still PENDING and due. Each peer's checkpoints and
# park are looked up by key (OFFSET 0 keeps each NOT EXISTS a lookup per row: as an anti-join,
# statistics of empty tables made it scan both tables whole). Read by the plan test as it
# stands here.
PEERS_QUERY = """
SELECT e.id, e.fencing_token, e.scope, e.next_attempt_at, e.created_at
  FROM execution AS e
 WHERE e.id = ANY (ARRAY(
           SELECT d.id FROM execution AS d
            WHERE d.status IN ('PENDING', 'RETRY_WAIT', 'RUNNING', 'SUSPENDED')
              AND d.next_attempt_at <= p_parked_at
            ORDER BY d.next_attempt_at, d.created_at, d.id
            LIMIT %(ahead)s))
   AND e.status = 'PENDING' AND e.next_attempt_at <= p_parked_at
   AND e.flow_id = p_flow AND e.transition_id = p_transition
   AND e.compensation_cause IS NULL
   AND NOT EXISTS (SELECT 1 FROM action_execution AS c WHERE c.execution_id = e.id OFFSET 0)
   AND NOT EXISTS (SELECT 1 FROM route_park AS p WHERE p.execution_id = e.id OFFSET 0)
   FOR NO KEY UPDATE OF e SKIP LOCKED
""".replace("%(ahead)s", str(PEERS_AHEAD))

# Park, beside p_execution_id (just parked on p_route for p_action_id until p_until, NULL: a
# place), its peers: PENDING until then (or p_park_seconds away), each with its park, in claim
# order (parked_at a microsecond apart, after its own). Nothing when p_execution_id has run an
# action or compensates. Returns how many. The caller holds the route's row lock.
PEERS = """
CREATE FUNCTION route_park_peers(
    p_route text, p_execution_id uuid, p_action_id text, p_until timestamptz,
    p_parked_at timestamptz, p_park_seconds double precision)
RETURNS integer
LANGUAGE plpgsql
-- The due rows walk execution_claim_idx in order, as the claim does; the parks' order is a
-- small sort all the same, and its disabled cost must not bring JIT on (docs/adr/0017).
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
    ), moved AS (
        UPDATE execution AS e
           SET next_attempt_at = coalesce(p_until,
                                          p_parked_at + make_interval(secs => p_park_seconds))
          FROM peers WHERE e.id = peers.id
        RETURNING e.id
    ), recorded AS (
        INSERT INTO route_park (execution_id, route, action_id, fencing_token, until, parked_at,
                                scope)
        SELECT peers.id, p_route, p_action_id, peers.fencing_token, p_until,
               p_parked_at + make_interval(secs => 0.000001 * row_number() OVER (
                   ORDER BY peers.next_attempt_at, peers.created_at, peers.id)),
               peers.scope
          FROM peers JOIN moved ON moved.id = peers.id
        RETURNING 1
    )
    SELECT count(*) INTO parked FROM recorded;
    RETURN parked;
END
$$;
""".replace("%(peers)s", PEERS_QUERY)

# The take of migration 0021: a park for a place, or for a pause, parks the peers too.
_PARKED = """    RETURN QUERY SELECT NULL::bigint, wait, true;
END
$$;
"""
_PARKED_WITH_PEERS = """    IF in_flight_wait OR lim.paused_until > now_at THEN
        PERFORM route_park_peers(p_route, p_execution_id, p_action_id, wait, now_at,
                                 p_park_seconds);
    END IF;
    RETURN QUERY SELECT NULL::bigint, wait, true;
END
$$;
"""


def _replaced(text: str, old: str, new: str) -> str:
    if not text.endswith(old):
        raise ValueError(f"not the end of the function replaced: {old}")
    return text[: -len(old)] + new


TAKE = _replaced(_TENANT.TAKE, _PARKED, _PARKED_WITH_PEERS).replace(
    "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"
)

DROP = _TENANT.TAKE.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION") + (
    "DROP FUNCTION route_park_peers(text, uuid, text, timestamptz, timestamptz, double precision);"
)


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0021_route_park_tenant"),
    ]

    operations = [
        migrations.RunSQL(PEERS + TAKE, DROP),
    ]
