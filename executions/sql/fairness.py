"""The order in which due work is taken: `WORKER_FAIRNESS` (docs/worker-protocol.md#tenant-fairness,
docs/adr/0019-tenant-fairness-in-the-claim.md). `queue` (the default) takes due executions oldest
first, in one walk of execution_claim_idx; `tenant` by their rank within their tenant, then age.

Each order is a fragment that ends in a CTE named `due` (id, row_ctid, was_status, was_owner,
was_token, was_expires_at: the rows locked FOR UPDATE SKIP LOCKED, row_ctid the version locked),
read from `clock` (now_at) and `%(limit)s`; the claim (executions/sql/claims.py) is composed of
either. A statement that wakes parked executions in the same order composes ORDERS["tenant"] the
same way, with a `clock` of its own.
"""

# The statuses of execution_claim_idx and execution_fair_idx (their partial predicate).
_CLAIMABLE = "e.status IN ('PENDING', 'RETRY_WAIT', 'RUNNING', 'SUSPENDED')"

# A tenant's held executions are counted up to this many (docs/adr/0019, "Held counts capped"):
# a count reads each held row's heap tuple too (its index entry cannot say it is still live), so
# counting all made a claim's cost grow with what one tenant holds. Tenants that hold at least
# this many are ranked as holding this many: turn by turn among themselves, after the others.
HELD_COUNTED = 100

# Tenant f's due rows, from its head (f's key) to now: its entries of execution_fair_idx between
# two row comparisons (a RUNNING row's next_attempt_at is its lease's end: an expired lease is due).
_TENANT_DUE = """e.status IN ('PENDING', 'RETRY_WAIT', 'RUNNING', 'SUSPENDED')
                      AND (e.scope, e.next_attempt_at, e.created_at, e.id)
                          >= (f.scope, f.next_attempt_at, f.created_at, f.id)
                      AND (e.scope, e.next_attempt_at) <= (f.scope, (SELECT now_at FROM clock))"""

# Queue order: one walk of execution_claim_idx, oldest first, stopping after %(limit)s rows.
_QUEUE_ORDER = """due AS (
    SELECT e.id, e.ctid AS row_ctid, e.status AS was_status, e.lease_owner AS was_owner,
           e.fencing_token AS was_token, e.lease_expires_at AS was_expires_at
      FROM execution AS e
     WHERE e.status IN ('PENDING', 'RETRY_WAIT', 'RUNNING', 'SUSPENDED')
       AND e.next_attempt_at <= (SELECT now_at FROM clock)
     ORDER BY e.next_attempt_at, e.created_at, e.id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)"""

# Tenant order, in five steps (cost: docs/adr/0019). Every walk of execution_fair_idx is
# bounded by row comparisons on its columns and ordered by all of them, scope first: no other
# index can give that order (a `scope =` would let execution_claim_idx, filtered, look as good).
# - tenants: each tenant with live work once, with its first entry, skipping from one tenant
#   to the next (one descent per tenant, however deep its backlog);
# - heads: the tenants whose first entry is due (it is then their oldest due execution), with
#   how many executions each holds now, up to HELD_COUNTED (execution_held_idx: only RUNNING
#   rows are in it);
# - firsts: the %(limit)s tenants whose heads come first; no other tenant can have a row in
#   this claim, since %(limit)s heads precede all of its rows;
# - ranked, quotas: their first %(limit)s due rows each, ranked, and how many of the first
#   %(limit)s overall each tenant has (no lock taken yet);
# - due: each tenant's quota of due rows, locked FOR UPDATE SKIP LOCKED in its own order, so a
#   row another claimer holds is passed over for that tenant's next one.
_TENANT_ORDER = """tenants AS (
    (SELECT e.scope, e.next_attempt_at, e.created_at, e.id
       FROM execution AS e
      WHERE {claimable}
      ORDER BY e.scope, e.next_attempt_at, e.created_at, e.id
      LIMIT 1)
    UNION ALL
    SELECT n.scope, n.next_attempt_at, n.created_at, n.id
      FROM tenants AS t
     CROSS JOIN LATERAL (
           SELECT e.scope, e.next_attempt_at, e.created_at, e.id
             FROM execution AS e
            WHERE {claimable} AND e.scope > t.scope
            ORDER BY e.scope, e.next_attempt_at, e.created_at, e.id
            LIMIT 1
           ) AS n
),
heads AS (
    SELECT t.scope, t.next_attempt_at, t.created_at, t.id,
           (SELECT count(*)
              FROM (SELECT 1
                      FROM execution AS r
                     WHERE r.scope = t.scope AND r.status = 'RUNNING'
                       AND r.lease_expires_at > (SELECT now_at FROM clock)
                     LIMIT {held_counted}) AS r) AS held
      FROM tenants AS t
     WHERE t.next_attempt_at <= (SELECT now_at FROM clock)
),
firsts AS (
    SELECT h.scope, h.next_attempt_at, h.created_at, h.id, h.held
      FROM heads AS h
     ORDER BY h.held, h.next_attempt_at, h.created_at, h.id
     LIMIT %(limit)s
),
ranked AS (
    SELECT f.scope, f.held + d.turn AS rank, d.next_attempt_at, d.created_at, d.id
      FROM firsts AS f
     CROSS JOIN LATERAL (
           SELECT o.next_attempt_at, o.created_at, o.id,
                  row_number() OVER (ORDER BY o.scope, o.next_attempt_at, o.created_at, o.id)
                      AS turn
             FROM (SELECT e.scope, e.next_attempt_at, e.created_at, e.id
                     FROM execution AS e
                    WHERE {tenant_due}
                    ORDER BY e.scope, e.next_attempt_at, e.created_at, e.id
                    LIMIT %(limit)s) AS o
           ) AS d
),
quotas AS (
    SELECT f.scope, f.next_attempt_at, f.created_at, f.id, q.quota
      FROM (SELECT r.scope, count(*) AS quota
              FROM (SELECT ranked.scope
                      FROM ranked
                     ORDER BY ranked.rank, ranked.next_attempt_at, ranked.created_at, ranked.id
                     LIMIT %(limit)s) AS r
             GROUP BY r.scope) AS q
      JOIN firsts AS f ON f.scope = q.scope
),
due AS (
    SELECT d.id, d.row_ctid, d.was_status, d.was_owner, d.was_token, d.was_expires_at
      FROM quotas AS f
     CROSS JOIN LATERAL (
           SELECT e.id, e.ctid AS row_ctid, e.status AS was_status, e.lease_owner AS was_owner,
                  e.fencing_token AS was_token, e.lease_expires_at AS was_expires_at
             FROM execution AS e
            WHERE {tenant_due}
            ORDER BY e.scope, e.next_attempt_at, e.created_at, e.id
            LIMIT f.quota
              FOR UPDATE SKIP LOCKED
           ) AS d
)"""
_TENANT_ORDER = (
    _TENANT_ORDER.replace("{tenant_due}", _TENANT_DUE)
    .replace("{claimable}", _CLAIMABLE)
    .replace("{held_counted}", str(HELD_COUNTED))
)

# WORKER_FAIRNESS values, each with the fragment that orders its claim.
ORDERS = {"queue": _QUEUE_ORDER, "tenant": _TENANT_ORDER}
