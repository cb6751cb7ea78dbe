"""Parked executions woken in the claim's tenant order (WORKER_FAIRNESS=tenant, docs/adr/0022).

`route_park.scope`, the execution's tenant, set at park time (and filled for the parks there
are), with an index on (route, scope, parked_at) of the parks waiting for a place; a route's
`wake_order`, declared by its workers at start. On a route declared `tenant`, the wake-up of an
ending, the sweep and the handoff take the parked execution with the lowest rank within its
tenant (one plus the tenant's executions held under a live lease now plus its parks ahead of
it), then the oldest, as executions/sql/fairness.py orders the claim; `queue` keeps the oldest
first. New columns with constant defaults, a new partial index, and the functions replaced.
"""

import importlib

from django.db import migrations

_EARLIER = importlib.import_module("executions.migrations.0018_limits_routes")
_HANDOFF = importlib.import_module("executions.migrations.0020_limits_handoff")

COLUMNS = """
ALTER TABLE route_park ADD COLUMN scope varchar(255) NOT NULL DEFAULT '';
UPDATE route_park AS p SET scope = e.scope FROM execution AS e WHERE e.id = p.execution_id;
CREATE INDEX route_park_tenant_idx ON route_park (route, scope, parked_at) WHERE until IS NULL;
ALTER TABLE route_limit ADD COLUMN wake_order varchar(10) NOT NULL DEFAULT 'queue'
    CHECK (wake_order IN ('queue', 'tenant'));
"""

# The live parks of p_route waiting for a place, in tenant order, at most p_count of them (a
# few more: the caller locks them SKIP LOCKED): each tenant with parks once, skipping from one
# to the next on route_park_tenant_idx; its executions held now (execution_held_idx); its first
# p_count live parks, ranked. Read by the plan test as it stands here.
ORDER_QUERY = """
WITH RECURSIVE tenants AS (
    (SELECT p.scope FROM route_park AS p
      WHERE p.route = p_route AND p.until IS NULL
      ORDER BY p.route, p.scope
      LIMIT 1)
    UNION ALL
    SELECT n.scope
      FROM tenants AS t
     CROSS JOIN LATERAL (
           SELECT p.scope FROM route_park AS p
            WHERE p.route = p_route AND p.until IS NULL AND p.scope > t.scope
            ORDER BY p.route, p.scope
            LIMIT 1
           ) AS n
),
held AS (
    SELECT t.scope,
           (SELECT count(*) FROM execution AS r
             WHERE r.scope = t.scope AND r.status = 'RUNNING'
               AND r.lease_expires_at > clock_timestamp()) AS held
      FROM tenants AS t
),
ranked AS (
    SELECT w.execution_id, w.parked_at,
           h.held + row_number() OVER (PARTITION BY h.scope ORDER BY w.parked_at) AS rank
      FROM held AS h
     CROSS JOIN LATERAL (
           SELECT p.execution_id, p.parked_at
             FROM route_park AS p
             JOIN execution AS e ON e.id = p.execution_id
            WHERE p.route = p_route AND p.until IS NULL AND p.scope = h.scope
              AND e.status = 'PENDING' AND e.fencing_token = p.fencing_token
            ORDER BY p.route, p.scope, p.parked_at
            LIMIT p_count
           ) AS w
)
SELECT r.execution_id, row_number() OVER (ORDER BY r.rank, r.parked_at, r.execution_id)
  FROM ranked AS r
 ORDER BY r.rank, r.parked_at, r.execution_id
 LIMIT p_count + 4
"""

ORDER = f"""
CREATE FUNCTION route_park_tenant_order(p_route text, p_count integer)
RETURNS TABLE (execution_id uuid, turn bigint)
LANGUAGE sql STABLE AS $$
{ORDER_QUERY}
$$;
"""

# route_wake of migration 0018, in tenant order on a route declared so.
WAKE = """
CREATE OR REPLACE FUNCTION route_wake(p_route text, p_count integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    woken integer;
    by_tenant boolean;
BEGIN
    IF p_count <= 0 THEN
        RETURN 0;
    END IF;
    SELECT l.wake_order = 'tenant' INTO by_tenant FROM route_limit AS l WHERE l.route = p_route;
    WITH chosen AS (
        SELECT e.id
          FROM route_park AS p
          JOIN execution AS e ON e.id = p.execution_id
         WHERE NOT coalesce(by_tenant, false) AND p.route = p_route AND p.until IS NULL
           AND e.status = 'PENDING' AND e.fencing_token = p.fencing_token
         ORDER BY p.parked_at
         LIMIT p_count
           FOR UPDATE OF e SKIP LOCKED
    ), chosen_by_tenant AS (
        SELECT e.id
          FROM route_park_tenant_order(p_route, p_count) AS o
          JOIN execution AS e ON e.id = o.execution_id
         WHERE coalesce(by_tenant, false) AND e.status = 'PENDING'
         ORDER BY o.turn
         LIMIT p_count
           FOR UPDATE OF e SKIP LOCKED
    ), moved AS (
        UPDATE execution AS e SET next_attempt_at = clock_timestamp()
          FROM (SELECT id FROM chosen UNION ALL SELECT id FROM chosen_by_tenant) AS c
         WHERE e.id = c.id
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

_PICK = """        SELECT p.execution_id AS id, p.action_id, e.fencing_token
          INTO chosen
          FROM route_park AS p
          JOIN execution AS e ON e.id = p.execution_id
         WHERE p.route = p_route AND p.until IS NULL
           AND e.status = 'PENDING' AND e.fencing_token = p.fencing_token
         ORDER BY p.parked_at
         LIMIT 1
           FOR UPDATE OF e SKIP LOCKED;
"""
_PICK_BY_TENANT = """        IF lim.wake_order = 'tenant' THEN
            SELECT p.execution_id AS id, p.action_id, e.fencing_token
              INTO chosen
              FROM route_park_tenant_order(p_route, 1) AS o
              JOIN route_park AS p ON p.execution_id = o.execution_id
              JOIN execution AS e ON e.id = p.execution_id
             WHERE e.status = 'PENDING' AND e.fencing_token = p.fencing_token
             ORDER BY o.turn
             LIMIT 1
               FOR UPDATE OF e SKIP LOCKED;
        ELSE
            SELECT p.execution_id AS id, p.action_id, e.fencing_token
              INTO chosen
              FROM route_park AS p
              JOIN execution AS e ON e.id = p.execution_id
             WHERE p.route = p_route AND p.until IS NULL
               AND e.status = 'PENDING' AND e.fencing_token = p.fencing_token
             ORDER BY p.parked_at
             LIMIT 1
               FOR UPDATE OF e SKIP LOCKED;
        END IF;
"""

# The park records its execution's tenant.
_PARK = """    INSERT INTO route_park (execution_id, route, action_id, fencing_token, until, parked_at)
    VALUES (p_execution_id, p_route, p_action_id, p_token, wait, now_at)
    ON CONFLICT (execution_id) DO UPDATE
       SET route = EXCLUDED.route, action_id = EXCLUDED.action_id,
"""
_PARK_WITH_SCOPE = """    INSERT INTO route_park (execution_id, route, action_id, fencing_token, until, parked_at,
                            scope)
    VALUES (p_execution_id, p_route, p_action_id, p_token, wait, now_at,
            (SELECT e.scope FROM execution AS e WHERE e.id = p_execution_id))
    ON CONFLICT (execution_id) DO UPDATE
       SET route = EXCLUDED.route, action_id = EXCLUDED.action_id, scope = EXCLUDED.scope,
"""


def _replaced(text: str, old: str, new: str) -> str:
    if old not in text:
        raise ValueError(f"not in the function replaced: {old}")
    return text.replace(old, new)


HANDOFF = _replaced(_HANDOFF.HANDOFF, _PICK, _PICK_BY_TENANT).replace(
    "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"
)
TAKE = _replaced(_HANDOFF.TAKE, _PARK, _PARK_WITH_SCOPE)

DROP = (
    _HANDOFF.TAKE
    + _HANDOFF.HANDOFF.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    + _EARLIER.WAKE.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    + "DROP FUNCTION route_park_tenant_order(text, integer);"
    "ALTER TABLE route_limit DROP COLUMN wake_order;"
    "DROP INDEX route_park_tenant_idx;"
    "ALTER TABLE route_park DROP COLUMN scope;"
)


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0020_limits_handoff"),
    ]

    operations = [
        migrations.RunSQL(COLUMNS + ORDER + WAKE + HANDOFF + TAKE, DROP),
    ]
