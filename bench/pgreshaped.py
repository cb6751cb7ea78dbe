"""A prototype of a reshaped schema for bench/pgfloor.py: no product code uses it.

Every list index of `request` and `execution` today holds a column that the hot path changes
(status, next attempt, lease, state, block, last change), so no update of either row is HOT
and each of their three versions per execution adds an entry to every index of its table. Here
each entity is split in two:
- a wide row of what never changes once written, listed by those columns only: `r_request`
  (owner, tenant, flow version; its data, rewritten HOT at the final commit) and `r_execution`
  (request, tenant, owner, snapshot; written once, at acceptance);
- a narrow row of what changes, with the indexes that must follow it: `r_request_state` (state,
  revision, version, block, last change: the lists by state, blocked and updatedAfter) and
  `r_execution_state` (the queue: status, token, lease, next attempt, result, error, finish: the
  claim's, fairness's, the lists by status, error and finish, purge's; with copies of the few
  unchanging columns the claim returns, so it reads no wide execution row).
Checkpoints and the audit are as today (their foreign keys point at the narrow rows the
holder locks). The statements are today's (executions/sql/), the same fence, locks, checks,
durability and answers, rewritten over these tables: the claim, the RUNNING and SUCCEEDED
checkpoints and the final commit, plus the bench's bulk acceptance (bench/pgfloor.py drives
them with the same items as today's). The prototype's DDL and its statements are kept together.
"""

TABLES = (
    "r_request",
    "r_request_state",
    "r_execution",
    "r_execution_state",
    "r_action_execution",
    "r_audit_event",
)
_CLAIMABLE = "('PENDING', 'RETRY_WAIT', 'RUNNING', 'SUSPENDED')"

SCHEMA = f"""
CREATE TABLE r_request (
    id uuid PRIMARY KEY,
    flow_id integer NOT NULL REFERENCES flow (id),
    owner varchar(255) NOT NULL,
    scope varchar(255) NOT NULL,
    data jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 70);
CREATE INDEX r_request_owner_list_idx ON r_request (scope, owner, created_at, id);
CREATE INDEX r_request_tenant_list_idx ON r_request (scope, created_at, id);
CREATE INDEX r_request_flow_list_idx ON r_request (scope, flow_id, created_at, id);

CREATE TABLE r_execution (
    id uuid PRIMARY KEY,
    request_id uuid NOT NULL REFERENCES r_request (id),
    flow_id integer NOT NULL REFERENCES flow (id),
    transition_id varchar(100) NOT NULL,
    scope varchar(255) NOT NULL,
    owner varchar(255) NOT NULL,
    accepted_revision bigint NOT NULL,
    actor_snapshot jsonb NOT NULL,
    idempotency_key varchar(255),
    idempotency_fingerprint varchar(64),
    trace_context jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX r_execution_request_idx ON r_execution (request_id, created_at);
CREATE INDEX r_execution_owner_list_idx ON r_execution (scope, owner, created_at, id);
CREATE INDEX r_execution_tenant_list_idx ON r_execution (scope, created_at, id);
CREATE UNIQUE INDEX r_execution_idempotency_uniq ON r_execution (request_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE r_request_state (
    request_id uuid PRIMARY KEY REFERENCES r_request (id),
    scope varchar(255) NOT NULL,
    owner varchar(255) NOT NULL,
    created_at timestamptz NOT NULL,
    state varchar(100) NOT NULL,
    revision bigint NOT NULL DEFAULT 1,
    version bigint NOT NULL DEFAULT 1,
    blocked_by_id uuid REFERENCES r_execution (id),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX r_request_state_list_idx ON r_request_state (scope, state, created_at, request_id);
CREATE INDEX r_request_blocked_list_idx ON r_request_state (scope, created_at, request_id)
    WHERE blocked_by_id IS NOT NULL;
CREATE INDEX r_request_updated_at_list_idx
    ON r_request_state (scope, updated_at, created_at, request_id) INCLUDE (owner);
CREATE INDEX r_request_blocked_idx ON r_request_state (updated_at)
    WHERE blocked_by_id IS NOT NULL;

CREATE TABLE r_execution_state (
    execution_id uuid PRIMARY KEY REFERENCES r_execution (id),
    -- copies of what never changes that the fence, the claim and the lists read here
    request_id uuid NOT NULL,
    flow_id integer NOT NULL,
    transition_id varchar(100) NOT NULL,
    accepted_revision bigint NOT NULL,
    trace_context jsonb,
    scope varchar(255) NOT NULL,
    owner varchar(255) NOT NULL,
    created_at timestamptz NOT NULL,
    status varchar(32) NOT NULL DEFAULT 'PENDING',
    attempts integer NOT NULL DEFAULT 0,
    fencing_token bigint NOT NULL DEFAULT 0,
    lease_owner varchar(200),
    lease_expires_at timestamptz,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    dispatch_principal jsonb,
    started_at timestamptz,
    claimed_at timestamptz,
    reclaims integer NOT NULL DEFAULT 0,
    compensation_cause varchar(64),
    result jsonb,
    error_code varchar(64),
    error_detail text,
    finished_at timestamptz,
    purged_at timestamptz
);
CREATE INDEX r_execution_claim_idx ON r_execution_state (next_attempt_at, created_at, execution_id)
    WHERE status IN {_CLAIMABLE};
CREATE INDEX r_execution_fair_idx
    ON r_execution_state (scope, next_attempt_at, created_at, execution_id)
    WHERE status IN {_CLAIMABLE};
CREATE INDEX r_execution_held_idx ON r_execution_state (scope, lease_expires_at)
    WHERE status = 'RUNNING';
CREATE INDEX r_execution_status_list_idx
    ON r_execution_state (scope, status, created_at, execution_id);
CREATE INDEX r_execution_error_list_idx
    ON r_execution_state (scope, error_code, created_at, execution_id)
    WHERE error_code IS NOT NULL;
CREATE INDEX r_execution_finished_at_list_idx
    ON r_execution_state (scope, finished_at, created_at, execution_id) INCLUDE (owner)
    WHERE finished_at IS NOT NULL;
CREATE INDEX r_execution_reconcile_idx ON r_execution_state (created_at)
    WHERE status = 'RECONCILIATION_REQUIRED';
CREATE INDEX r_execution_purge_idx ON r_execution_state (finished_at, execution_id)
    WHERE purged_at IS NULL AND status IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'COMPENSATED');

CREATE TABLE r_action_execution (LIKE action_execution INCLUDING DEFAULTS INCLUDING IDENTITY)
    WITH (fillfactor = 70);
ALTER TABLE r_action_execution ADD PRIMARY KEY (id),
    ADD FOREIGN KEY (execution_id) REFERENCES r_execution_state (execution_id),
    ADD CONSTRAINT r_action_execution_action_uniq UNIQUE (execution_id, action_id);
CREATE INDEX r_action_execution_key_idx ON r_action_execution (external_key);

CREATE TABLE r_audit_event (LIKE audit_event INCLUDING DEFAULTS INCLUDING IDENTITY);
ALTER TABLE r_audit_event ADD PRIMARY KEY (id),
    ADD FOREIGN KEY (request_id) REFERENCES r_request (id),
    ADD FOREIGN KEY (execution_id) REFERENCES r_execution_state (execution_id);
CREATE INDEX r_audit_request_idx ON r_audit_event (request_id, id);
CREATE INDEX r_audit_execution_idx ON r_audit_event (execution_id);
CREATE INDEX r_audit_takeover_idx ON r_audit_event (id) WHERE type = 'LEASE_TAKEN_OVER';

CREATE FUNCTION r_outbox_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind text := 'execution.' || lower(NEW.status);
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM webhook_subscription AS s WHERE s.tenant = NEW.scope AND s.events ? kind
    ) THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'the prototype writes no webhook events';
END
$$;
CREATE TRIGGER r_outbox_write AFTER UPDATE OF status ON r_execution_state
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status NOT IN ('PENDING', 'RUNNING', 'RETRY_WAIT'))
    EXECUTE FUNCTION r_outbox_write();
"""

# The bench's bulk acceptance (bench/worker.py), on both halves of each entity.
ENQUEUE = """
WITH r AS (
    INSERT INTO r_request (id, flow_id, owner, scope, data)
    SELECT gen_random_uuid(), %(flow_id)s, 'bench', %(tag)s, '{}'
      FROM generate_series(1, %(n)s)
    RETURNING id, owner, scope, created_at
), s AS (
    INSERT INTO r_request_state (request_id, scope, owner, created_at, state, revision, version)
    SELECT r.id, r.scope, r.owner, r.created_at, 'DRAFT', 2, 2 FROM r
), e AS (
    INSERT INTO r_execution (id, request_id, flow_id, transition_id, scope, owner,
                             accepted_revision, actor_snapshot)
    SELECT gen_random_uuid(), r.id, %(flow_id)s, 'go', r.scope, r.owner, 2, '{}' FROM r
    RETURNING id, request_id, flow_id, transition_id, accepted_revision, trace_context, scope,
              owner, created_at
)
INSERT INTO r_execution_state (execution_id, request_id, flow_id, transition_id,
                               accepted_revision, trace_context, scope, owner, created_at,
                               next_attempt_at)
SELECT e.id, e.request_id, e.flow_id, e.transition_id, e.accepted_revision, e.trace_context,
       e.scope, e.owner, e.created_at, e.created_at
  FROM e
"""
BLOCK = """
UPDATE r_request_state AS r SET blocked_by_id = e.id
  FROM r_execution AS e
 WHERE e.request_id = r.request_id AND r.scope = %(tag)s
"""

FENCE = """s.execution_id = {i}.execution_id AND s.request_id IS NOT DISTINCT FROM {i}.request_id
   AND s.fencing_token = {i}.token
   AND s.status IS NOT DISTINCT FROM 'RUNNING' AND s.lease_owner = {i}.owner
   AND s.lease_expires_at > clock_timestamp()"""

CLAIM = """
WITH RECURSIVE clock AS MATERIALIZED (
    SELECT t.now_at, t.now_at + make_interval(secs => %(lease_seconds)s::double precision)
               AS lease_until,
           set_config('synchronous_commit', 'off', true) AS durability
      FROM (SELECT clock_timestamp() AS now_at) AS t
),
due AS (
    SELECT s.execution_id AS id, s.ctid AS row_ctid, s.status AS was_status,
           s.lease_owner AS was_owner, s.fencing_token AS was_token,
           s.lease_expires_at AS was_expires_at
      FROM r_execution_state AS s
     WHERE s.status IN ('PENDING', 'RETRY_WAIT', 'RUNNING', 'SUSPENDED')
       AND s.next_attempt_at <= (SELECT now_at FROM clock)
     ORDER BY s.next_attempt_at, s.created_at, s.execution_id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
),
claimed AS (
UPDATE r_execution_state AS s
   SET status = 'RUNNING',
       attempts = s.attempts + 1,
       fencing_token = s.fencing_token + 1,
       lease_owner = %(owner)s,
       lease_expires_at = (SELECT lease_until FROM clock),
       next_attempt_at = (SELECT lease_until FROM clock),
       started_at = COALESCE(s.started_at, (SELECT now_at FROM clock)),
       claimed_at = (SELECT now_at FROM clock),
       dispatch_principal = CASE
           WHEN s.status IN ('RUNNING', 'SUSPENDED') THEN NULL
           ELSE s.dispatch_principal
       END,
       reclaims = CASE
           WHEN s.status <> 'RUNNING' THEN 0
           WHEN EXISTS (SELECT 1
                          FROM r_action_execution AS c
                         WHERE c.execution_id = s.execution_id AND c.status = 'SUCCEEDED'
                           AND c.finished_at >= COALESCE(s.claimed_at, '-infinity'))
               THEN 0
           WHEN %(outage)s THEN s.reclaims
           ELSE s.reclaims + 1
       END
 WHERE s.ctid = ANY (ARRAY(SELECT due.row_ctid FROM due))
RETURNING s.execution_id AS id, s.request_id, s.flow_id, s.transition_id, s.attempts,
          s.fencing_token, s.dispatch_principal, s.accepted_revision, s.trace_context,
          CASE WHEN s.attempts > 1 THEN
              (SELECT jsonb_agg(to_jsonb(c) ORDER BY c.sequence)
                 FROM r_action_execution AS c
                WHERE c.execution_id = s.execution_id)
          END AS checkpoints,
          s.reclaims, s.compensation_cause
),
takeover AS (
INSERT INTO r_audit_event (request_id, execution_id, type, actor, payload)
SELECT c.request_id, c.id, 'LEASE_TAKEN_OVER', 'system:worker',
       jsonb_build_object('previousOwner', due.was_owner, 'newOwner', %(owner)s::text)
  FROM claimed AS c
  JOIN due ON due.id = c.id
 WHERE due.was_status = 'RUNNING'
)
SELECT c.id, c.request_id, c.flow_id, c.transition_id, c.attempts, c.fencing_token,
       c.dispatch_principal, r.data, rs.state, rs.revision, rs.version, r.owner, r.scope,
       c.trace_context, c.accepted_revision, c.checkpoints, c.reclaims,
       due.was_status = 'RUNNING' AS taken_over, c.compensation_cause
  FROM claimed AS c
  JOIN due ON due.id = c.id
 CROSS JOIN LATERAL (SELECT r.* FROM r_request AS r WHERE r.id >= c.request_id
                      ORDER BY r.id LIMIT 1) AS r
 CROSS JOIN LATERAL (SELECT rs.* FROM r_request_state AS rs
                      WHERE rs.request_id >= c.request_id
                      ORDER BY rs.request_id LIMIT 1) AS rs
 WHERE r.id = c.request_id AND rs.request_id = c.request_id
"""

_GROUPED = """
WITH durability AS MATERIALIZED (
    SELECT set_config('synchronous_commit', %(synchronous_commit)s, true) AS setting
),
item AS (
    SELECT i.*
      FROM jsonb_to_recordset(%(items)s::jsonb) AS i(
               execution_id uuid, request_id uuid, token bigint, owner text,
               {columns}),
           durability
),
holder AS (
    SELECT item.*
      FROM (SELECT * FROM item ORDER BY item.execution_id) AS item
     CROSS JOIN LATERAL (
               SELECT s.execution_id
                 FROM r_execution_state AS s
                WHERE {fence}
                  FOR NO KEY UPDATE OF s
           ) AS locked
)""".replace("{fence}", FENCE.format(i="item"))

CHECKPOINT_START = (
    _GROUPED.replace(
        "{columns}",
        """action_id text, sequence integer, capability text, capability_version integer,
               effect text, input_hash text, external_key text, attempt integer""",
    )
    + """
INSERT INTO r_action_execution AS c
       (execution_id, action_id, sequence, capability, capability_version, effect, status,
        input_hash, external_key, attempt, fencing_token, started_at)
SELECT h.execution_id, h.action_id, h.sequence, h.capability, h.capability_version, h.effect,
       'RUNNING', h.input_hash, h.external_key, h.attempt, h.token, clock_timestamp()
  FROM holder AS h
    ON CONFLICT (execution_id, action_id) DO UPDATE
   SET status = 'RUNNING',
       attempt = EXCLUDED.attempt,
       fencing_token = EXCLUDED.fencing_token,
       started_at = EXCLUDED.started_at,
       finished_at = NULL,
       output = NULL,
       error_code = NULL,
       error_detail = NULL
 WHERE c.status <> 'SUCCEEDED'
   AND c.attempt = EXCLUDED.attempt - 1
   AND c.input_hash = EXCLUDED.input_hash
   AND c.external_key = EXCLUDED.external_key
   AND c.effect = EXCLUDED.effect
RETURNING c.execution_id, c.attempt
"""
)

CHECKPOINT_SUCCEED = (
    _GROUPED.replace("{columns}", "action_id text, attempt integer, output jsonb")
    + """
UPDATE r_action_execution AS c
   SET status = 'SUCCEEDED',
       output = h.output,
       error_code = NULL,
       error_detail = NULL,
       finished_at = clock_timestamp()
  FROM holder AS h
 WHERE c.execution_id = h.execution_id AND c.action_id = h.action_id
   AND c.status = 'RUNNING' AND c.fencing_token = h.token AND c.attempt = h.attempt
RETURNING c.execution_id
"""
)

FINALIZE = """
WITH item AS (
    SELECT *
      FROM jsonb_to_recordset(%(items)s::jsonb) AS i(
               execution_id uuid, request_id uuid, token bigint, owner text, from_state text,
               accepted_revision bigint, request_version bigint, action_ids text[],
               data jsonb, target_state text, result jsonb, payload jsonb)
),
req AS (
    SELECT item.*
      FROM (SELECT * FROM item ORDER BY item.request_id) AS item
     CROSS JOIN LATERAL (
               SELECT r.request_id
                 FROM r_request_state AS r
                WHERE r.request_id = item.request_id
                  AND r.blocked_by_id IS NOT DISTINCT FROM item.execution_id
                  AND r.state = item.from_state AND r.revision = item.accepted_revision
                  AND r.version = item.request_version
                  FOR NO KEY UPDATE OF r
           ) AS locked
),
fenced AS (
    SELECT req.*
      FROM r_execution_state AS s
      JOIN req ON req.execution_id = s.execution_id
     WHERE {fence}
     ORDER BY s.execution_id
       FOR NO KEY UPDATE OF s
),
held AS (
    SELECT f.*
      FROM fenced AS f
     WHERE (SELECT count(*) FILTER (WHERE c.status <> 'SUCCEEDED') = 0
                   AND count(*) FILTER (WHERE c.action_id = ANY(f.action_ids))
                       = cardinality(f.action_ids)
              FROM r_action_execution AS c
             WHERE c.execution_id = f.execution_id)
),
done AS (
    UPDATE r_execution_state AS s
       SET status = 'SUCCEEDED',
           result = held.result,
           lease_owner = NULL,
           lease_expires_at = NULL,
           error_code = NULL,
           error_detail = NULL,
           finished_at = clock_timestamp()
      FROM held
     WHERE s.execution_id = held.execution_id
    RETURNING s.execution_id
),
moved AS (
    UPDATE r_request_state AS r
       SET state = held.target_state,
           revision = r.revision + 1,
           version = r.version + 1,
           blocked_by_id = NULL,
           updated_at = clock_timestamp()
      FROM held
     WHERE r.request_id = held.request_id
    RETURNING r.request_id, r.revision
),
rewritten AS (
    UPDATE r_request AS r
       SET data = held.data
      FROM held
     WHERE r.id = held.request_id
),
audit AS (
    INSERT INTO r_audit_event (request_id, execution_id, type, actor, payload)
    SELECT held.request_id, held.execution_id, 'TRANSITION_COMPLETED', %(actor)s, held.payload
      FROM held
)
SELECT done.execution_id, moved.revision
  FROM done
  JOIN held ON held.execution_id = done.execution_id
  JOIN moved ON moved.request_id = held.request_id
""".replace("{fence}", FENCE.format(i="req"))
