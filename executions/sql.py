"""Every SQL statement of the execution queue, in one place.

Each statement is a named constant with `%(name)s` parameters; the comment above it says what it
does, which rows it locks and which index it expects to use.
"""

# Channel on which committed work is announced to idle workers. The payload is the execution id;
# listeners treat any notification as "claim now" and never trust the payload for correctness.
NOTIFY_CHANNEL = "orquestador_executions"

# Announce new due work. Sent inside the transaction that creates or requeues the execution, so
# PostgreSQL delivers it only if, and right after, that transaction commits. Locks nothing.
NOTIFY_WORK = "SELECT pg_notify('orquestador_executions', %(execution_id)s::text)"

# Subscribe this session to NOTIFY_WORK (the worker's listening connection). Locks nothing.
LISTEN_WORK = "LISTEN orquestador_executions"

# Run once on every worker connection. The worker's statements are few, fixed and prepared
# (psycopg prepares a statement on its fifth run), and their best plan does not depend on the
# parameter values: key lookups, and the claim's scan of execution_claim_idx. One generic plan per
# connection then spares the planner on every execution. Locks nothing.
WORKER_SESSION = "SET plan_cache_mode = force_generic_plan"

# Run once more on the connection that claims (it runs CLAIM_EXECUTIONS and nothing else). The
# claim must walk execution_claim_idx in claim order and stop after %(limit)s rows. A queue that
# fills in bursts (thousands of acceptances in one transaction) leaves the planner's statistics
# far behind: believing a handful of rows are due, it prefers a bitmap scan of every due row
# and a sort, which at a 17,000-row backlog takes 9 ms per claim instead of 0.2 ms. The claim
# never needs a sort node, so none is allowed on this connection. Locks nothing.
CLAIM_SESSION = "SET enable_sort = off"

# --- Worker: claim, lease, load, checkpoints, retry, failure, finalisation --------------------
# Every statement below that writes after a claim is fenced: it names the execution by id and
# request, and requires the exact fencing token, status RUNNING, the lease owner and a lease that
# has not expired by database time:
#     e.id = %(execution_id)s AND e.request_id = %(request_id)s AND e.fencing_token = %(token)s
#     AND e.status IS NOT DISTINCT FROM 'RUNNING' AND e.lease_owner = %(owner)s
#     AND e.lease_expires_at > clock_timestamp()
# (the grouped statements read the same four coordinates per item from %(items)s). The status is
# tested with IS NOT DISTINCT FROM, which for this NOT NULL column means exactly `=`, but which the
# planner does not take as proof of execution_claim_idx's predicate: a fenced statement therefore
# cannot use that partial index, and always finds its row through execution_pkey. With `=`, once
# finished history makes execution_pkey deep and a VACUUM taken while nothing was in flight has
# left execution_claim_idx counted empty, the generic plan walks execution_claim_idx end to end
# for the id (its third column) on every fenced statement: 0.3-0.6 ms at a 10,000-row backlog
# instead of 0.01 ms. When a holder matches no row the caller raises ExecutionSuperseded
# (executions/leases.py); nothing here is ever a silent no-op. Lock order everywhere: request,
# then execution, then checkpoints; a statement that locks several rows of one table locks them
# in id order.
# A RUNNING execution's next_attempt_at always equals its lease_expires_at (a CHECK), so the one
# partial index execution_claim_idx serves due work and expired leases alike.

# Claim up to %(limit)s due executions for %(owner)s, in one statement and one transaction.
# `due` walks execution_claim_idx (next_attempt_at, created_at, id, partial on the four claimable
# statuses) in claim order and locks each row FOR UPDATE SKIP LOCKED, so concurrent claimers pass
# each other's rows instead of waiting and never take the same one. A PENDING or RETRY_WAIT row
# is due once next_attempt_at has passed; a RUNNING row once its lease has expired (its
# next_attempt_at is the lease expiry); a SUSPENDED row once its wait's deadline has passed (its
# next_attempt_at is the deadline), so that a worker settles the timeout. The UPDATE then takes
# each locked row: attempts + 1, fencing token + 1 (fencing out any earlier holder), owner and
# lease from one reading of the database clock. Committed by itself (autocommit) before any
# evaluation or adapter call.
# It also returns what the new holder needs to run, read under the new token in the same
# statement: the accepted request snapshot (the request row by primary key, not locked: it is
# blocked by this execution) and, for a reclaimed execution (attempts > 1), its checkpoints
# through action_execution_action_uniq. A first attempt has none, so it skips that read.
CLAIM_EXECUTIONS = """
WITH clock AS MATERIALIZED (
    SELECT t.now_at, t.now_at + make_interval(secs => %(lease_seconds)s::double precision)
               AS lease_until
      FROM (SELECT clock_timestamp() AS now_at) AS t
),
due AS (
    SELECT e.id
      FROM execution AS e
     WHERE e.status IN ('PENDING', 'RETRY_WAIT', 'RUNNING', 'SUSPENDED')
       AND e.next_attempt_at <= (SELECT now_at FROM clock)
     ORDER BY e.next_attempt_at, e.created_at, e.id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE execution AS e
   SET status = 'RUNNING',
       attempts = e.attempts + 1,
       fencing_token = e.fencing_token + 1,
       lease_owner = %(owner)s,
       lease_expires_at = clock.lease_until,
       next_attempt_at = clock.lease_until,
       started_at = COALESCE(e.started_at, clock.now_at)
  FROM due, clock, request AS r
 WHERE e.id = due.id AND r.id = e.request_id
RETURNING e.id, e.request_id, e.flow_id, e.transition_id, e.attempts, e.fencing_token,
          e.actor_snapshot, r.data, r.state, r.revision, r.version, r.owner, r.scope,
          e.accepted_revision,
          CASE WHEN e.attempts > 1 THEN
              (SELECT jsonb_agg(jsonb_build_object(
                          'action_id', c.action_id, 'sequence', c.sequence,
                          'capability', c.capability,
                          'capability_version', c.capability_version, 'effect', c.effect,
                          'status', c.status, 'input_hash', c.input_hash,
                          'external_key', c.external_key, 'attempt', c.attempt,
                          'output', c.output, 'error_code', c.error_code)
                          ORDER BY c.sequence)
                 FROM action_execution AS c
                WHERE c.execution_id = e.id)
          END AS checkpoints
"""

# Renew the leases of every execution this process holds, in one statement. Each entry of the
# three arrays is one held execution (id, request id, token); a row is renewed only with its
# exact id, request, token and owner, status RUNNING and a lease that has not expired yet, so an
# expired lease never revives: reclaiming it is the only way back, and that takes a new token.
# The rows it returns are the renewed ones; any held execution missing from them has lost its
# lease. `held` locks the matching execution rows by primary key in id order (the order of every
# multi-row lock on executions here), so it cannot deadlock with a grouped checkpoint or
# finalisation of the same process; it takes no request lock and never waits on a claim.
RENEW_LEASES = """
WITH clock AS MATERIALIZED (
    SELECT t.now_at, t.now_at + make_interval(secs => %(lease_seconds)s::double precision)
               AS lease_until
      FROM (SELECT clock_timestamp() AS now_at) AS t
),
held AS (
    SELECT e.id
      FROM execution AS e,
           unnest(%(execution_ids)s::uuid[], %(request_ids)s::uuid[], %(tokens)s::bigint[])
               AS h(execution_id, request_id, token),
           clock
     WHERE e.id = h.execution_id
       AND e.request_id = h.request_id
       AND e.fencing_token = h.token
       AND e.status IS NOT DISTINCT FROM 'RUNNING'
       AND e.lease_owner = %(owner)s
       AND e.lease_expires_at > clock.now_at
     ORDER BY e.id
       FOR NO KEY UPDATE OF e
)
UPDATE execution AS e
   SET lease_expires_at = clock.lease_until,
       next_attempt_at = clock.lease_until
  FROM held, clock
 WHERE e.id = held.id
RETURNING e.id, e.fencing_token
"""

# Is this holder's lease still valid? A fenced read used to tell "superseded" apart from another
# reason a fenced write matched nothing. Locks nothing; one row by primary key.
LEASE_PROBE = """
SELECT e.lease_expires_at
  FROM execution AS e
 WHERE e.id = %(execution_id)s AND e.request_id = %(request_id)s AND e.fencing_token = %(token)s
   AND e.status IS NOT DISTINCT FROM 'RUNNING' AND e.lease_owner = %(owner)s
   AND e.lease_expires_at > clock_timestamp()
"""

# Load what a holder needs to run its execution: the accepted request snapshot and every
# checkpoint already written. Fenced, so a stale holder loads nothing. Locks nothing (the request
# is blocked by this execution, so nothing else writes it); one execution and one request row by
# primary key, checkpoints through action_execution_action_uniq (execution_id, action_id).
LOAD_EXECUTION = """
SELECT r.data, r.state, r.revision, r.version, r.owner, r.scope, e.accepted_revision,
       COALESCE(
           (SELECT jsonb_agg(jsonb_build_object(
                       'action_id', c.action_id, 'sequence', c.sequence,
                       'capability', c.capability, 'capability_version', c.capability_version,
                       'effect', c.effect, 'status', c.status, 'input_hash', c.input_hash,
                       'external_key', c.external_key, 'attempt', c.attempt,
                       'output', c.output, 'error_code', c.error_code)
                       ORDER BY c.sequence)
              FROM action_execution AS c
             WHERE c.execution_id = e.id),
           '[]'::jsonb) AS checkpoints
  FROM execution AS e
  JOIN request AS r ON r.id = e.request_id
 WHERE e.id = %(execution_id)s AND e.request_id = %(request_id)s AND e.fencing_token = %(token)s
   AND e.status IS NOT DISTINCT FROM 'RUNNING' AND e.lease_owner = %(owner)s
   AND e.lease_expires_at > clock_timestamp()
"""

# The pinned flow's definition (immutable once published, so workers cache it by id). Locks
# nothing; one row by primary key.
FLOW_DEFINITION = "SELECT definition FROM flow WHERE id = %(flow_id)s"

# Start attempts of actions: commit their RUNNING checkpoints before the adapters are called.
# One statement for one or many holders (%(items)s, a JSON array; executions/worker/groupcommit.py
# groups the starts of concurrent execution threads into one commit). `holder` keeps the items
# whose fence holds by the database clock and locks their execution rows (FOR NO KEY UPDATE, in
# id order: the items are sorted by execution id and each row is locked as the nested loop
# reaches it, one execution_pkey lookup per item). A locking subquery is never flattened, so the
# plan cannot turn into a scan of every RUNNING execution (a hash join over
# execution_claim_idx, which the planner picks when its statistics lag a burst of claims: 2.4 ms
# at a 20,000-row backlog instead of 0.08 ms). The insert or update runs under those locks and
# commits with the statement, so no other holder can claim a row in between. A first attempt
# inserts attempt 1; a later one updates the same row (action_execution_action_uniq) to
# attempt + 1, only if it is still what the holder loaded (same attempt, hash, key and effect,
# and not SUCCEEDED). Returns (execution id, attempt) per started item; an item missing from the
# result was superseded or its checkpoint changed.
CHECKPOINT_START = """
WITH durability AS MATERIALIZED (
    SELECT set_config('synchronous_commit', %(synchronous_commit)s, true) AS setting
),
item AS (
    SELECT i.*
      FROM jsonb_to_recordset(%(items)s::jsonb) AS i(
               execution_id uuid, request_id uuid, token bigint, owner text, action_id text,
               sequence integer, capability text, capability_version integer, effect text,
               input_hash text, external_key text, attempt integer),
           durability
),
holder AS (
    SELECT item.*
      FROM (SELECT * FROM item ORDER BY item.execution_id) AS item
     CROSS JOIN LATERAL (
               SELECT e.id
                 FROM execution AS e
                WHERE e.id = item.execution_id AND e.request_id = item.request_id
                  AND e.fencing_token = item.token
                  AND e.status IS NOT DISTINCT FROM 'RUNNING' AND e.lease_owner = item.owner
                  AND e.lease_expires_at > clock_timestamp()
                  FOR NO KEY UPDATE OF e
           ) AS locked
)
INSERT INTO action_execution AS c
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

# Record validated outputs: each holder's RUNNING checkpoint becomes SUCCEEDED. One statement
# for one or many holders (%(items)s, grouped like CHECKPOINT_START), with the same locks, taken
# the same way (items in execution id order, one execution_pkey lookup each), and the same
# fence, checked by database time inside the statement that commits; one checkpoint per item
# (action_execution_action_uniq), only if it is that holder's attempt. Returns the execution id
# of every item saved; an item missing from the result was superseded.
CHECKPOINT_SUCCEED = """
WITH durability AS MATERIALIZED (
    SELECT set_config('synchronous_commit', %(synchronous_commit)s, true) AS setting
),
item AS (
    SELECT i.*
      FROM jsonb_to_recordset(%(items)s::jsonb) AS i(
               execution_id uuid, request_id uuid, token bigint, owner text, action_id text,
               attempt integer, output jsonb),
           durability
),
holder AS (
    SELECT item.*
      FROM (SELECT * FROM item ORDER BY item.execution_id) AS item
     CROSS JOIN LATERAL (
               SELECT e.id
                 FROM execution AS e
                WHERE e.id = item.execution_id AND e.request_id = item.request_id
                  AND e.fencing_token = item.token
                  AND e.status IS NOT DISTINCT FROM 'RUNNING' AND e.lease_owner = item.owner
                  AND e.lease_expires_at > clock_timestamp()
                  FOR NO KEY UPDATE OF e
           ) AS locked
)
UPDATE action_execution AS c
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

# Settle an attempt that did not succeed: FAILED (it certainly had no effect, or the effect is
# safe to repeat) or UNKNOWN (it may have had one), with a safe error code and detail; `output`
# keeps what a write returned when it cannot be trusted (null otherwise). Runs as the first
# statement of the retry and failure transactions: locks the execution row and checks the fence
# at the start of the transaction; the transaction's last write checks it again.
CHECKPOINT_SETTLE = """
WITH holder AS (
    SELECT e.id
      FROM execution AS e
     WHERE e.id = %(execution_id)s AND e.request_id = %(request_id)s
       AND e.fencing_token = %(token)s AND e.status IS NOT DISTINCT FROM 'RUNNING'
       AND e.lease_owner = %(owner)s
       AND e.lease_expires_at > clock_timestamp()
       FOR NO KEY UPDATE
)
UPDATE action_execution AS c
   SET status = %(status)s,
       output = %(output)s,
       error_code = %(error_code)s,
       error_detail = %(error_detail)s,
       finished_at = clock_timestamp()
  FROM holder
 WHERE c.execution_id = holder.id AND c.action_id = %(action_id)s
   AND c.status = 'RUNNING' AND c.fencing_token = %(token)s AND c.attempt = %(attempt)s
RETURNING c.id
"""

# Schedule a retry: RETRY_WAIT, due after %(delay_seconds)s by the database clock, lease cleared,
# the attempt's error kept for the execution view. Fenced; one row by primary key, still locked
# from CHECKPOINT_SETTLE in the same transaction. The row stays in execution_claim_idx, keyed by
# its new next_attempt_at, where a claim finds it once due.
EXECUTION_SCHEDULE_RETRY = """
UPDATE execution AS e
   SET status = 'RETRY_WAIT',
       lease_owner = NULL,
       lease_expires_at = NULL,
       next_attempt_at = clock_timestamp()
                         + make_interval(secs => %(delay_seconds)s::double precision),
       error_code = %(error_code)s,
       error_detail = %(error_detail)s
 WHERE e.id = %(execution_id)s AND e.request_id = %(request_id)s AND e.fencing_token = %(token)s
   AND e.status IS NOT DISTINCT FROM 'RUNNING' AND e.lease_owner = %(owner)s
   AND e.lease_expires_at > clock_timestamp()
RETURNING e.next_attempt_at
"""

# Append one audit event (executions/audit.py), returning its id. Insert only (the table is
# append-only); its foreign keys take KEY SHARE locks on the request and execution rows, which the
# writer already holds.
AUDIT_APPEND = """
INSERT INTO audit_event (request_id, execution_id, type, actor, payload)
VALUES (%(request_id)s, %(execution_id)s, %(type)s, %(actor)s, %(payload)s)
RETURNING id
"""

# Lock a request before its execution, for failure and cancellation (the lock order of
# finalisation). Locks one request row by primary key; returns the execution that blocks it.
REQUEST_LOCK = "SELECT blocked_by_id FROM request WHERE id = %(request_id)s FOR NO KEY UPDATE"

# Which writes of an execution are outstanding: a write effect (IDEMPOTENT_WRITE or
# NON_IDEMPOTENT_WRITE) whose checkpoint is SUCCEEDED (it happened) or RUNNING, UNKNOWN or
# ACCEPTED (it may have, or an asynchronous provider is carrying it out). Either one means the
# request must not be released as FAILED. Locks nothing; reads the execution's checkpoints
# through action_execution_action_uniq.
WRITES_OUTSTANDING = """
SELECT COALESCE(bool_or(c.status IN ('RUNNING', 'UNKNOWN', 'ACCEPTED')), false) AS uncertain,
       COALESCE(bool_or(c.status = 'SUCCEEDED'), false) AS succeeded,
       (array_agg(c.action_id ORDER BY c.sequence DESC))[1] AS last_action_id
  FROM action_execution AS c
 WHERE c.execution_id = %(execution_id)s
   AND c.effect IN ('IDEMPOTENT_WRITE', 'NON_IDEMPOTENT_WRITE')
   AND c.status IN ('SUCCEEDED', 'RUNNING', 'UNKNOWN', 'ACCEPTED')
"""

# End an execution FAILED (nothing outstanding): lease cleared, safe error recorded. Fenced; one
# row by primary key, locked after its request. REQUEST_RELEASE follows in the same transaction.
EXECUTION_FAIL = """
UPDATE execution AS e
   SET status = 'FAILED',
       lease_owner = NULL,
       lease_expires_at = NULL,
       error_code = %(error_code)s,
       error_detail = %(error_detail)s,
       finished_at = clock_timestamp()
 WHERE e.id = %(execution_id)s AND e.request_id = %(request_id)s AND e.fencing_token = %(token)s
   AND e.status IS NOT DISTINCT FROM 'RUNNING' AND e.lease_owner = %(owner)s
   AND e.lease_expires_at > clock_timestamp()
RETURNING e.id
"""

# Hand an execution to an operator: RECONCILIATION_REQUIRED, lease cleared, the request stays
# blocked. Fenced; one row by primary key, locked after its request. The row leaves
# execution_claim_idx and enters execution_reconcile_idx.
EXECUTION_REQUIRE_RECONCILIATION = """
UPDATE execution AS e
   SET status = 'RECONCILIATION_REQUIRED',
       lease_owner = NULL,
       lease_expires_at = NULL,
       error_code = %(error_code)s,
       error_detail = %(error_detail)s
 WHERE e.id = %(execution_id)s AND e.request_id = %(request_id)s AND e.fencing_token = %(token)s
   AND e.status IS NOT DISTINCT FROM 'RUNNING' AND e.lease_owner = %(owner)s
   AND e.lease_expires_at > clock_timestamp()
RETURNING e.id
"""

# Release the request an execution held, leaving its data, state and revision as they were
# (version + 1: the row changed). Runs under the request lock; one row by primary key, only while
# this execution holds it.
REQUEST_RELEASE = """
UPDATE request
   SET blocked_by_id = NULL,
       version = version + 1,
       updated_at = clock_timestamp()
 WHERE id = %(request_id)s
   AND blocked_by_id = %(execution_id)s
RETURNING version
"""

# Finalise successful executions, one or many (%(items)s, grouped like CHECKPOINT_START), in one
# statement, hence one transaction: for each item all of it commits or none of it does, and the
# checkpoints stay as they were.
# - `req` locks each request first (FOR NO KEY UPDATE, in id order), only if it is still the
#   accepted snapshot (blocked by this execution, same state, revision and version as loaded);
# - `held` then locks each execution (in id order) under the fence, only if every expected
#   action (action_ids) has a SUCCEEDED checkpoint and no checkpoint is anything else;
# - `done` marks those executions SUCCEEDED with their business result, lease cleared;
# - `moved` writes each request's new data and state, revision + 1, version + 1, unblocked;
# - `audit` appends TRANSITION_COMPLETED for each.
# Returns (execution id, new request revision) per finalised item. An item missing from the
# result was superseded, or its request or checkpoints changed (LEASE_PROBE, then FINALIZE_PROBE,
# tell which). Rows
# by primary key; checkpoints through action_execution_action_uniq.
EXECUTION_FINALIZE = """
WITH item AS (
    SELECT *
      FROM jsonb_to_recordset(%(items)s::jsonb) AS i(
               execution_id uuid, request_id uuid, token bigint, owner text, from_state text,
               accepted_revision bigint, request_version bigint, action_ids text[],
               data jsonb, target_state text, result jsonb, payload jsonb)
),
req AS (
    SELECT item.*
      FROM request AS r
      JOIN item ON item.request_id = r.id
     WHERE r.blocked_by_id = item.execution_id AND r.state = item.from_state
       AND r.revision = item.accepted_revision AND r.version = item.request_version
     ORDER BY r.id
       FOR NO KEY UPDATE OF r
),
held AS (
    SELECT req.*
      FROM execution AS e
      JOIN req ON req.execution_id = e.id
     WHERE e.request_id = req.request_id AND e.fencing_token = req.token
       AND e.status IS NOT DISTINCT FROM 'RUNNING' AND e.lease_owner = req.owner
       AND e.lease_expires_at > clock_timestamp()
       AND (SELECT count(*) FILTER (WHERE c.status <> 'SUCCEEDED') = 0
                   AND count(*) FILTER (WHERE c.action_id = ANY(req.action_ids))
                       = cardinality(req.action_ids)
              FROM action_execution AS c
             WHERE c.execution_id = e.id)
     ORDER BY e.id
       FOR NO KEY UPDATE OF e
),
done AS (
    UPDATE execution AS e
       SET status = 'SUCCEEDED',
           result = held.result,
           lease_owner = NULL,
           lease_expires_at = NULL,
           error_code = NULL,
           error_detail = NULL,
           finished_at = clock_timestamp()
      FROM held
     WHERE e.id = held.execution_id
    RETURNING e.id
),
moved AS (
    UPDATE request AS r
       SET data = held.data,
           state = held.target_state,
           revision = r.revision + 1,
           version = r.version + 1,
           blocked_by_id = NULL,
           updated_at = clock_timestamp()
      FROM held
     WHERE r.id = held.request_id
    RETURNING r.id, r.revision
),
audit AS (
    INSERT INTO audit_event (request_id, execution_id, type, actor, payload)
    SELECT held.request_id, held.execution_id, 'TRANSITION_COMPLETED', %(actor)s, held.payload
      FROM held
)
SELECT done.id, moved.revision
  FROM done
  JOIN held ON held.execution_id = done.id
  JOIN moved ON moved.id = held.request_id
"""

# Why a final commit matched nothing although the holder's lease still holds (read after the
# refusal, never on the way to a commit): is the request still the accepted snapshot, and which
# expected checkpoints are missing or not SUCCEEDED ("action STATUS", in action order, then any
# other checkpoint not SUCCEEDED). Locks nothing; the request by primary key, the checkpoints
# through action_execution_action_uniq.
FINALIZE_PROBE = """
SELECT r.blocked_by_id IS NOT DISTINCT FROM %(execution_id)s AND r.state = %(from_state)s
       AND r.revision = %(accepted_revision)s AND r.version = %(request_version)s,
       ARRAY(
           SELECT a.action_id || ' ' || coalesce(c.status, 'MISSING')
             FROM unnest(%(action_ids)s::text[]) WITH ORDINALITY AS a(action_id, n)
             LEFT JOIN action_execution AS c
               ON c.execution_id = %(execution_id)s AND c.action_id = a.action_id
            WHERE c.status IS DISTINCT FROM 'SUCCEEDED'
            ORDER BY a.n
       ) || ARRAY(
           SELECT c.action_id || ' ' || c.status
             FROM action_execution AS c
            WHERE c.execution_id = %(execution_id)s AND c.status <> 'SUCCEEDED'
              AND c.action_id <> ALL(%(action_ids)s::text[])
            ORDER BY c.sequence
       )
  FROM request AS r
 WHERE r.id = %(request_id)s
"""

# --- Cancellation (reconciliation/cancel.py) ------------------------------------------------
# One transaction: find the request, lock it, then lock the execution, then write with the token
# read under the lock and bump it, so whoever holds the lease is fenced out of every later write.

# The request an execution belongs to, read before taking any lock. Locks nothing.
EXECUTION_REQUEST_OF = "SELECT request_id FROM execution WHERE id = %(execution_id)s"

# Lock the execution after its request. Locks one execution row by primary key.
EXECUTION_LOCK = """
SELECT request_id, status, fencing_token
  FROM execution
 WHERE id = %(execution_id)s
   FOR NO KEY UPDATE
"""

# Cancel: CANCELLED under a new token, lease cleared. Guards on the status and token read under
# the lock; one row by primary key, which leaves execution_claim_idx.
EXECUTION_CANCEL = """
UPDATE execution
   SET status = 'CANCELLED',
       fencing_token = fencing_token + 1,
       lease_owner = NULL,
       lease_expires_at = NULL,
       error_code = NULL,
       error_detail = %(error_detail)s,
       finished_at = clock_timestamp()
 WHERE id = %(execution_id)s AND status = %(status)s AND fencing_token = %(token)s
RETURNING fencing_token
"""

# Cancel an execution whose writes are outstanding: it cannot simply stop, so it goes to an
# operator (RECONCILIATION_REQUIRED) under a new token, lease cleared, request still blocked.
# Same guard and row as EXECUTION_CANCEL.
EXECUTION_CANCEL_TO_RECONCILIATION = """
UPDATE execution
   SET status = 'RECONCILIATION_REQUIRED',
       fencing_token = fencing_token + 1,
       lease_owner = NULL,
       lease_expires_at = NULL,
       error_code = %(error_code)s,
       error_detail = %(error_detail)s
 WHERE id = %(execution_id)s AND status = %(status)s AND fencing_token = %(token)s
RETURNING fencing_token
"""

# --- Waiting: wait actions, resumes and early events (executions/waits.py) ----------------------
# The worker's writes (reach a wait, settle its timeout) are fenced like every write after a
# claim and lock the request, then the execution. A resume (POST .../events) locks the request,
# then the execution, and requires the state it read under those locks; it bumps the token, so a
# worker that still believes it holds the execution is fenced out. Events are unique per
# (execution, eventId) (execution_event_uniq), which every statement on them uses.

# Lock the holder's execution row for a wait's transaction, fenced. Locks one row by primary key
# (after REQUEST_LOCK). No row: superseded.
WAIT_HOLDER_LOCK = """
SELECT e.id
  FROM execution AS e
 WHERE e.id = %(execution_id)s AND e.request_id = %(request_id)s AND e.fencing_token = %(token)s
   AND e.status IS NOT DISTINCT FROM 'RUNNING' AND e.lease_owner = %(owner)s
   AND e.lease_expires_at > clock_timestamp()
   FOR NO KEY UPDATE
"""

# Take the oldest event kept for this wait (it came before the wait was reached): CONSUMED now.
# Runs under the execution lock; one row through execution_event_uniq's execution prefix.
EVENT_TAKE_KEPT = """
UPDATE execution_event AS v
   SET status = 'CONSUMED', consumed_at = clock_timestamp()
 WHERE v.id = (SELECT k.id FROM execution_event AS k
                WHERE k.execution_id = %(execution_id)s AND k.action_id = %(action_id)s
                  AND k.status = 'KEPT'
                ORDER BY k.id LIMIT 1)
RETURNING v.event_id, v.event, v.payload, v.actor
"""

# Record a wait action's checkpoint under the holder's token: WAITING (the execution suspends) or
# SUCCEEDED with a kept event's payload as output. Runs under the execution lock; inserts one row
# (action_execution_action_uniq: a wait is reached once per execution).
WAIT_CHECKPOINT_INSERT = """
INSERT INTO action_execution
       (execution_id, action_id, sequence, capability, capability_version, effect, status,
        input_hash, external_key, attempt, fencing_token, output, started_at, finished_at)
VALUES (%(execution_id)s, %(action_id)s, %(sequence)s, %(capability)s, 1, 'READ_ONLY',
        %(status)s, %(input_hash)s, %(external_key)s, 1, %(token)s, %(output)s,
        clock_timestamp(), CASE WHEN %(finished)s::boolean THEN clock_timestamp() END)
"""

# Suspend: SUSPENDED until the wait's deadline (next_attempt_at, by the database clock), lease
# cleared, the request still blocked. Fenced; one row by primary key, locked by WAIT_HOLDER_LOCK.
# The row stays in execution_claim_idx keyed by its deadline, where a claim finds it once due.
EXECUTION_SUSPEND = """
UPDATE execution AS e
   SET status = 'SUSPENDED',
       lease_owner = NULL,
       lease_expires_at = NULL,
       next_attempt_at = clock_timestamp()
                         + make_interval(secs => %(timeout_seconds)s::double precision),
       error_code = NULL,
       error_detail = NULL
 WHERE e.id = %(execution_id)s AND e.request_id = %(request_id)s AND e.fencing_token = %(token)s
   AND e.status IS NOT DISTINCT FROM 'RUNNING' AND e.lease_owner = %(owner)s
   AND e.lease_expires_at > clock_timestamp()
RETURNING e.next_attempt_at
"""

# Has this wait's deadline passed by the database clock? The deadline is the WAITING
# checkpoint's start plus the wait's timeout. One row through action_execution_action_uniq.
WAIT_DEADLINE = """
SELECT c.started_at + make_interval(secs => %(timeout_seconds)s::double precision) AS deadline,
       c.started_at + make_interval(secs => %(timeout_seconds)s::double precision)
           <= clock_timestamp() AS passed
  FROM action_execution AS c
 WHERE c.execution_id = %(execution_id)s AND c.action_id = %(action_id)s
"""

# Settle a timed-out wait's checkpoint under the new holder's token: SUCCEEDED with the wait's
# onTimeout payload, or FAILED with EVENT_TIMEOUT. Runs under the execution lock; one row through
# action_execution_action_uniq, only while it is still WAITING.
WAIT_CHECKPOINT_TIME_OUT = """
UPDATE action_execution AS c
   SET status = %(status)s,
       output = %(output)s,
       error_code = %(error_code)s,
       error_detail = %(error_detail)s,
       fencing_token = %(token)s,
       finished_at = clock_timestamp()
 WHERE c.execution_id = %(execution_id)s AND c.action_id = %(action_id)s
   AND c.status = 'WAITING'
RETURNING c.id
"""

# Back to SUSPENDED until a deadline not yet reached (a holder that found the wait early, e.g. a
# lease that expired between claim and suspend). Fenced like EXECUTION_SUSPEND.
EXECUTION_SUSPEND_UNTIL = """
UPDATE execution AS e
   SET status = 'SUSPENDED',
       lease_owner = NULL,
       lease_expires_at = NULL,
       next_attempt_at = %(deadline)s
 WHERE e.id = %(execution_id)s AND e.request_id = %(request_id)s AND e.fencing_token = %(token)s
   AND e.status IS NOT DISTINCT FROM 'RUNNING' AND e.lease_owner = %(owner)s
   AND e.lease_expires_at > clock_timestamp()
RETURNING e.next_attempt_at
"""

# A resume: lock the execution (after its request) and read what the decision needs. One row by
# primary key.
RESUME_LOCK = """
SELECT e.status, e.fencing_token, e.flow_id, e.transition_id, e.next_attempt_at
  FROM execution AS e
 WHERE e.id = %(execution_id)s
   FOR NO KEY UPDATE
"""

# The execution's checkpoints by action id, with their status (under the execution lock).
# Through action_execution_action_uniq.
RESUME_CHECKPOINTS = """
SELECT c.action_id, c.status FROM action_execution AS c WHERE c.execution_id = %(execution_id)s
"""

# An event already received with this eventId (a replay), and how many are kept (early events
# waiting for their wait) for this execution, per action. Through execution_event_uniq.
EVENT_FIND = """
SELECT v.fingerprint FROM execution_event AS v
 WHERE v.execution_id = %(execution_id)s AND v.event_id = %(event_id)s
"""
EVENTS_KEPT = """
SELECT v.action_id FROM execution_event AS v
 WHERE v.execution_id = %(execution_id)s AND v.status = 'KEPT'
"""

# Record a received event (ACCEPTED: it resumed its wait; KEPT: it waits for its wait). One row;
# execution_event_uniq refuses a second row with the same eventId.
EVENT_INSERT = """
INSERT INTO execution_event
       (execution_id, event_id, event, action_id, payload, fingerprint, status, actor,
        consumed_at)
VALUES (%(execution_id)s, %(event_id)s, %(event)s, %(action_id)s, %(payload)s,
        %(fingerprint)s, %(status)s, %(actor)s,
        CASE WHEN %(consumed)s::boolean THEN clock_timestamp() END)
"""

# A resume's checkpoint: WAITING becomes SUCCEEDED with the event's payload, under the new token.
# Under the execution lock; one row through action_execution_action_uniq.
RESUME_CHECKPOINT = """
UPDATE action_execution AS c
   SET status = 'SUCCEEDED',
       output = %(output)s,
       fencing_token = %(new_token)s,
       finished_at = clock_timestamp()
 WHERE c.execution_id = %(execution_id)s AND c.action_id = %(action_id)s
   AND c.status = 'WAITING'
RETURNING c.id
"""

# A resume's execution: SUSPENDED becomes PENDING and due now under a new token. Guards on the
# status and token read under the lock. One row by primary key; it keeps its place in
# execution_claim_idx with the new key.
RESUME_EXECUTION = """
UPDATE execution AS e
   SET status = 'PENDING',
       fencing_token = e.fencing_token + 1,
       next_attempt_at = clock_timestamp()
 WHERE e.id = %(execution_id)s AND e.status = 'SUSPENDED' AND e.fencing_token = %(token)s
RETURNING e.fencing_token
"""

# An asynchronous provider accepted the holder's call: its RUNNING checkpoint becomes ACCEPTED.
# First statement of the acceptance transaction (the execution row is locked by
# WAIT_HOLDER_LOCK before it); one row through action_execution_action_uniq, only if it is this
# holder's attempt. EXECUTION_SUSPEND follows, with the contract's callback_timeout_seconds.
CHECKPOINT_ACCEPT = """
UPDATE action_execution AS c
   SET status = 'ACCEPTED'
 WHERE c.execution_id = %(execution_id)s AND c.action_id = %(action_id)s
   AND c.status = 'RUNNING' AND c.fencing_token = %(token)s AND c.attempt = %(attempt)s
RETURNING c.id
"""

# --- Callbacks of asynchronous providers (executions/callbacks.py) -----------------------------

# The checkpoint a callback names by its external key, with its execution. Through
# action_execution_key_idx; locks nothing (the caller then locks request and execution).
CALLBACK_CHECKPOINT = """
SELECT c.execution_id, c.action_id, c.status, c.output, c.capability, c.capability_version,
       e.request_id
  FROM action_execution AS c
  JOIN execution AS e ON e.id = c.execution_id
 WHERE c.external_key = %(external_key)s
"""

# A callback's checkpoint: ACCEPTED becomes SUCCEEDED with the provider's output, under the new
# token. Under the execution lock; one row through action_execution_action_uniq.
CALLBACK_SETTLE = """
UPDATE action_execution AS c
   SET status = 'SUCCEEDED',
       output = %(output)s,
       error_code = NULL,
       error_detail = NULL,
       fencing_token = %(new_token)s,
       finished_at = clock_timestamp()
 WHERE c.execution_id = %(execution_id)s AND c.action_id = %(action_id)s
   AND c.status = 'ACCEPTED'
RETURNING c.id
"""

# --- Reconciliation: an operator's resolution (reconciliation/services.py) ---------------------
# One transaction per resolution: EXECUTION_REQUEST_OF, then REQUEST_LOCK and EXECUTION_LOCK
# (request before execution, as everywhere), require RECONCILIATION_REQUIRED, then write with the
# token read under the lock and bump it, so a worker still holding an earlier lease is fenced out
# of every later write. Abandoning releases the request with REQUEST_RELEASE in the same
# transaction.

# Settle an uncertain checkpoint (RUNNING or UNKNOWN) as the operator established: SUCCEEDED with
# the output they recorded, or FAILED with REPLAY_AUTHORIZED, written under the new token. Runs
# under the execution lock; one row through action_execution_action_uniq (execution_id, action_id).
RECONCILE_SETTLE_CHECKPOINT = """
UPDATE action_execution
   SET status = %(status)s,
       output = %(output)s,
       error_code = %(error_code)s,
       error_detail = %(error_detail)s,
       fencing_token = %(token)s,
       finished_at = clock_timestamp()
 WHERE execution_id = %(execution_id)s
   AND action_id = %(action_id)s
   AND status IN ('RUNNING', 'UNKNOWN', 'ACCEPTED')
RETURNING id
"""

# Requeue a resolved execution: PENDING and due now under a new token, lease and error cleared.
# Guards on the status and token read under the lock (no row: another resolution won). One row by
# primary key; it leaves execution_reconcile_idx for execution_claim_idx, where the next claim
# finds it.
RECONCILE_REQUEUE = """
UPDATE execution
   SET status = 'PENDING',
       fencing_token = fencing_token + 1,
       lease_owner = NULL,
       lease_expires_at = NULL,
       next_attempt_at = clock_timestamp(),
       error_code = NULL,
       error_detail = NULL,
       finished_at = NULL
 WHERE id = %(execution_id)s AND status = 'RECONCILIATION_REQUIRED' AND fencing_token = %(token)s
RETURNING fencing_token
"""

# Abandon an execution in reconciliation: FAILED under a new token, lease cleared, with the error
# code that says so. Same guard and row as RECONCILE_REQUEUE; it leaves execution_reconcile_idx.
RECONCILE_ABANDON = """
UPDATE execution
   SET status = 'FAILED',
       fencing_token = fencing_token + 1,
       lease_owner = NULL,
       lease_expires_at = NULL,
       error_code = %(error_code)s,
       error_detail = %(error_detail)s,
       finished_at = clock_timestamp()
 WHERE id = %(execution_id)s AND status = 'RECONCILIATION_REQUIRED' AND fencing_token = %(token)s
RETURNING fencing_token
"""

# --- Metrics: the queue as it is now (executions/queuestats.py, for GET /metrics) --------------
# Run by the web process as the runtime role, in one READ ONLY transaction whose statements are
# bounded by METRICS_TIMEOUT. Each statement reads live rows only, through a partial index whose
# predicate it repeats exactly; none reads finished history (SUCCEEDED, FAILED and CANCELLED rows
# are in none of these indexes), so a scrape costs what is in flight, not how old the system is.
# Executions by final status are not counted here for that reason: the workers count the ones
# they finish (executions/worker/metrics.py).

# Make the metrics transaction read-only; its first statement. Locks nothing.
METRICS_READ_ONLY = "SET TRANSACTION READ ONLY"

# Bound every later statement of the metrics transaction, so a slow read fails the scrape instead
# of piling scrapes up behind it. Transaction-local; locks nothing.
METRICS_TIMEOUT = "SELECT set_config('statement_timeout', %(timeout_ms)s, true)"

# Live executions by status (PENDING, RETRY_WAIT, RUNNING, SUSPENDED): how many, how many are due
# now (a RUNNING one once its lease has expired: its next_attempt_at is the lease expiry; a
# SUSPENDED one once its wait's deadline has passed), and how long, in seconds, the oldest due one
# has been due (0 when none is), all against one reading of the database clock. Walks
# execution_claim_idx (partial on exactly these four statuses) and reads
# those rows' heap tuples for their status; no finished row is visited. Locks nothing.
METRICS_QUEUE = """
WITH clock AS MATERIALIZED (
    SELECT clock_timestamp() AS now_at
)
SELECT e.status,
       count(*) AS depth,
       count(*) FILTER (WHERE e.next_attempt_at <= clock.now_at) AS due,
       GREATEST(EXTRACT(EPOCH FROM clock.now_at - min(e.next_attempt_at)), 0)::double precision
           AS oldest_due_age_seconds
  FROM execution AS e, clock
 WHERE e.status IN ('PENDING', 'RETRY_WAIT', 'RUNNING', 'SUSPENDED')
 GROUP BY e.status, clock.now_at
"""

# Executions waiting for an operator, and the age in seconds of the oldest of them (since its
# creation; 0 when none waits). An index-only scan of execution_reconcile_idx (created_at,
# partial on RECONCILIATION_REQUIRED). Locks nothing.
METRICS_RECONCILIATION = """
SELECT count(*) AS backlog,
       COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(e.created_at)), 0)::double precision
           AS oldest_age_seconds
  FROM execution AS e
 WHERE e.status = 'RECONCILIATION_REQUIRED'
"""

# Requests held by an execution (blocked_by set). An index-only scan of request_blocked_idx
# (partial on blocked_by_id IS NOT NULL). Locks nothing.
METRICS_BLOCKED_REQUESTS = """
SELECT count(*) AS blocked
  FROM request AS r
 WHERE r.blocked_by_id IS NOT NULL
"""

# -- purgehistory (executions/history.py) -------------------------------------------------------

# The purge's cutoff, read once from the database clock: finished before this is old enough.
# Locks nothing.
PURGE_CUTOFF = "SELECT now() - make_interval(days => %(days)s)"

# Bound how long one purge batch may wait for a lock (transaction-local). Locks nothing.
PURGE_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %(timeout)s, true)"

# Purge one batch of old history, in one short transaction of its own: up to %(limit)s final
# executions (SUCCEEDED, FAILED, CANCELLED only: never RECONCILIATION_REQUIRED, whose evidence an
# operator needs, nor live work) finished before %(cutoff)s and not purged yet, oldest first,
# through execution_purge_idx. It locks those execution rows (SKIP LOCKED: two purges never wait
# on each other; no worker ever locks a final row, and the claim's rows are all live, so it never
# waits on a claim nor makes one wait), deletes their checkpoints (inputs' hashes, outputs, error
# details: the bulk of history) through action_execution_action_uniq and the events sent to them
# (payloads) through execution_event_uniq, and clears the execution's
# own payloads (error detail, actor snapshot), keeping what the execution view shows (status,
# outcome, target state, error code) and the audit trail, which is append-only. Returns one row
# per purged execution with the numbers of checkpoints and events deleted for it.
PURGE_BATCH = """
WITH batch AS (
    SELECT e.id
      FROM execution AS e
     WHERE e.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
       AND e.purged_at IS NULL
       AND e.finished_at < %(cutoff)s
     ORDER BY e.finished_at, e.id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM action_execution AS c
     USING batch
     WHERE c.execution_id = batch.id
    RETURNING c.execution_id
),
events_gone AS (
    DELETE FROM execution_event AS v
     USING batch
     WHERE v.execution_id = batch.id
    RETURNING v.execution_id
),
purged AS (
    UPDATE execution AS e
       SET purged_at = clock_timestamp(),
           error_detail = NULL,
           actor_snapshot = '{}'
      FROM batch
     WHERE e.id = batch.id
    RETURNING e.id
)
SELECT p.id, COALESCE(g.checkpoints, 0) AS checkpoints, COALESCE(v.events, 0) AS events
  FROM purged AS p
  LEFT JOIN (SELECT execution_id, count(*) AS checkpoints FROM gone GROUP BY execution_id) AS g
         ON g.execution_id = p.id
  LEFT JOIN (SELECT execution_id, count(*) AS events FROM events_gone GROUP BY execution_id) AS v
         ON v.execution_id = p.id
"""
