"""Every SQL statement of the execution queue, in one place (one idea, hence past 400 lines).

Each statement is a named constant with `%(name)s` parameters, never built from input. Only the
fence is composed; statements otherwise repeat
their SET lists and guards on purpose, so each can be read whole when its locks and plan are
checked. Above it: what it does, which rows it locks (`Locks:`) and which index it expects
(`Index:`). Why the plans look the way they do, with the figures that decided it:
docs/adr/0009.

Invariants:
- every statement that runs as a holder after a claim carries the fence, written once (`FENCE`,
  composed into the statements below when this module is imported): the execution by id and
  request, the exact fencing token, status RUNNING, the lease owner, and a lease that has not
  expired by database time. A holder that matches no row gets `ExecutionSuperseded` from its
  caller; nothing here is ever a silent no-op. tests/integration/worker/test_plans.py finds every
  statement carrying the fence and checks it plans through execution_pkey; a statement that
  compares a holder's token without the fence fails it too (operator writes, which guard on the
  token read under their own lock, are listed in `OPERATOR_GUARDED`);
- lock order everywhere: request, then execution, then checkpoints; a statement that locks several
  rows of one table locks them in id order;
- a RUNNING execution's next_attempt_at equals its lease_expires_at (a CHECK), so the one partial
  index execution_claim_idx serves due work and expired leases alike.
"""

# `IS NOT DISTINCT FROM` (never NULL here: the columns are NOT NULL or compared to a constant)
# is not indexable, so no statistics can lead the planner to execution_request_idx or a status
# index instead of the primary key: the fenced row is always found by `e.id`.
_FENCE = (
    "e.id = {execution_id} AND e.request_id IS NOT DISTINCT FROM {request_id}\n"
    "   AND e.fencing_token = {token}\n"
    "   AND e.status IS NOT DISTINCT FROM 'RUNNING' AND e.lease_owner = {owner}\n"
    "   AND e.lease_expires_at > {now}"
)


def _fence(execution_id: str, request_id: str, token: str, owner: str, now: str) -> str:
    """The fence over the execution row `e`, from where a statement reads the holder's four
    coordinates (its parameters, or the columns of one item of a grouped write)."""
    return _FENCE.format(
        execution_id=execution_id, request_id=request_id, token=token, owner=owner, now=now
    )


# The fence, as each kind of statement reads the holder: one holder's parameters; one item of a
# grouped write (`item`, `req`); one entry of the lease renewal's arrays (`h`, clock read once).
FENCE = _fence("%(execution_id)s", "%(request_id)s", "%(token)s", "%(owner)s", "clock_timestamp()")
FENCES = {
    "{fence}": FENCE,
    "{fence_of_item}": _fence(
        "item.execution_id", "item.request_id", "item.token", "item.owner", "clock_timestamp()"
    ),
    "{fence_of_request_item}": _fence(
        "req.execution_id", "req.request_id", "req.token", "req.owner", "clock_timestamp()"
    ),
    "{fence_of_renewal}": _fence(
        "h.execution_id", "h.request_id", "h.token", "%(owner)s", "clock.now_at"
    ),
}
# Statements that compare a token without the fence: operator writes, guarded on the status and
# token they read under their own request-then-execution lock (reconciliation/).
OPERATOR_GUARDED = frozenset(
    {
        "EXECUTION_CANCEL",
        "EXECUTION_CANCEL_TO_RECONCILIATION",
        "RECONCILE_REQUEUE",
        "RECONCILE_ABANDON",
        # A resume (an event, or a provider's callback) of a SUSPENDED execution, which no
        # holder has: guarded on the status and token read under its request-then-execution lock.
        "RESUME_EXECUTION",
    }
)


def _fenced(template: str) -> str:
    """`template` with its fence placeholders replaced (at import time, from FENCES)."""
    for placeholder, predicate in FENCES.items():
        template = template.replace(placeholder, predicate)
    return template


# Channel on which committed work is announced to idle workers; listeners treat any
# notification as "claim now" and never trust its payload for correctness.
NOTIFY_CHANNEL = "orquestador_executions"

# Announce new due work, from inside the transaction that creates or requeues it (delivered
# only if, and right after, it commits).
# Locks: nothing.
# Index: none.
NOTIFY_WORK = "SELECT pg_notify('orquestador_executions', %(execution_id)s::text)"

# Subscribe the worker's listening connection to NOTIFY_WORK.
# Locks: nothing.
# Index: none.
LISTEN_WORK = "LISTEN orquestador_executions"

# Channel on which a cancellation that fenced out a RUNNING execution tells its holder, so the
# worker holding it stops it at once rather than at its next renewal. The payload is
# "<execution id>:<new token>"; a worker acts only on a holder whose token is older, and the
# fence, not this message, is what keeps a stale holder from writing.
CANCEL_CHANNEL = "orquestador_cancels"

# Announce a cancellation, from inside the cancelling transaction (delivered only if it
# commits, and then after the token moved).
# Locks: nothing.
# Index: none.
NOTIFY_CANCEL = (
    "SELECT pg_notify('orquestador_cancels', %(execution_id)s::text || ':' || %(token)s::text)"
)

# Subscribe the worker's listening connection to NOTIFY_CANCEL (the same connection as
# LISTEN_WORK: no connection of its own).
# Locks: nothing.
# Index: none.
LISTEN_CANCELS = "LISTEN orquestador_cancels"

# Once per worker connection: one generic plan per statement (their best plans do not
# depend on parameter values; docs/adr/0009).
# Locks: nothing.
# Index: none.
WORKER_SESSION = "SET plan_cache_mode = force_generic_plan"

# Once per worker connection too: no sequential scan where an index can serve. Every worker
# statement finds its rows by key or walks an index; a generic plan is made once per connection
# from the statistics of that moment, and statistics taken on an empty queue (an ANALYZE while
# nothing was due, common) priced a scan of the whole table at nothing, so the claim joined its
# rows by scanning every execution and request, for the life of the process (docs/adr/0009).
# Locks: nothing.
# Index: none.
WORKER_SCANS = "SET enable_seqscan = off"

# Once more on the claiming connection: no sort node, so the claim always walks its index
# in claim order (docs/adr/0009).
# Locks: nothing.
# Index: none.
CLAIM_SESSION = "SET enable_sort = off"

# --- Worker: claim, lease, load, checkpoints, retry, failure, finalisation --------------------

# Claim up to %(limit)s due executions for %(owner)s (PENDING, due RETRY_WAIT, RUNNING with
# an expired lease), in claim order: attempts + 1, token + 1, owner and lease from one reading
# of the database clock; returns what the new holder runs with (the accepted request snapshot
# and, for a reclaim, its checkpoints), read under the new token. Committed before any
# evaluation or adapter call.
# Locks: each claimed execution row, FOR UPDATE SKIP LOCKED (claimers pass each
# other's rows, never take the same one); the request row is read, not locked (blocked by this
# execution).
# Index: execution_claim_idx (next_attempt_at, created_at, id; partial on the claimable statuses),
# walked in order; the claimed rows by execution_pkey (`id = ANY` of the ids `due` locked) and
# their requests by request_pkey (a subquery never flattened, one lookup per row); checkpoints by
# action_execution_action_uniq. No step joins tables: with statistics taken on an empty queue
# (every join then looks free) the generic plan joined the claimed rows by scanning every
# execution and request, once per row (docs/adr/0009).
# Takeovers: a claim of a RUNNING row whose lease expired appends LEASE_TAKEN_OVER (previous
# owner, token and lease expiry, from the row as `due` locked it; new owner and token) in the same
# statement, hence the same transaction; an ordinary claim inserts nothing (the insert reads only
# the claimed rows, no index). Locks: KEY SHARE on those request and execution rows (foreign keys).
# Poison cap (WORKER_MAX_RECLAIMS): a takeover of a RUNNING row whose lease expired adds one to
# `reclaims`, unless a checkpoint became SUCCEEDED since the claim before it (progress: back to 0;
# one action_execution_action_uniq lookup, for takeovers only) or the lease may have lapsed
# because the database itself was away (%(outage)s, the claimer's own view, or a lease that ended
# within one lease of the server's start). Any other claim (PENDING, RETRY_WAIT, SUSPENDED)
# starts the count again; the caller settles a row returned past the cap instead of running it.
# The dispatch's principal (SPEC §8): a claim of PENDING or RETRY_WAIT work runs for whoever
# caused it (`dispatch_principal`, written with the acceptance or the resume); a takeover of an
# expired lease (recovery) or of a wait past its deadline (a timeout) runs as system, so it is
# cleared here, in the claim itself, and a retry that dispatch schedules stays system.
# Durability: the claim commits with synchronous_commit = off (this statement only), so pickup
# does not wait for a WAL flush. Nothing outside the database acts on a claim before a later
# synchronous commit of the same holder (a write's RUNNING checkpoint, a failure, a final
# transaction), and WAL is flushed in order, so that commit makes the claim durable first. A claim
# lost with a database crash (its takeover audit with it) leaves the execution as it was, to be
# claimed again; a stale holder is then fenced by owner, and within one process it is stopped
# when its very fence is claimed again (worker/holdings.py), the checkpoint's attempt guarding
# any write it races (docs/adr/0004).
CLAIM_EXECUTIONS = """
WITH clock AS MATERIALIZED (
    SELECT t.now_at, t.now_at + make_interval(secs => %(lease_seconds)s::double precision)
               AS lease_until,
           set_config('synchronous_commit', 'off', true) AS durability
      FROM (SELECT clock_timestamp() AS now_at) AS t
),
due AS (
    SELECT e.id, e.status AS was_status, e.lease_owner AS was_owner,
           e.fencing_token AS was_token, e.lease_expires_at AS was_expires_at
      FROM execution AS e
     WHERE e.status IN ('PENDING', 'RETRY_WAIT', 'RUNNING', 'SUSPENDED')
       AND e.next_attempt_at <= (SELECT now_at FROM clock)
     ORDER BY e.next_attempt_at, e.created_at, e.id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
),
claimed AS (
UPDATE execution AS e
   SET status = 'RUNNING',
       attempts = e.attempts + 1,
       fencing_token = e.fencing_token + 1,
       lease_owner = %(owner)s,
       lease_expires_at = (SELECT lease_until FROM clock),
       next_attempt_at = (SELECT lease_until FROM clock),
       started_at = COALESCE(e.started_at, (SELECT now_at FROM clock)),
       claimed_at = (SELECT now_at FROM clock),
       dispatch_principal = CASE
           WHEN e.status IN ('RUNNING', 'SUSPENDED') THEN NULL
           ELSE e.dispatch_principal
       END,
       reclaims = CASE
           WHEN e.status <> 'RUNNING' THEN 0
           WHEN EXISTS (SELECT 1
                          FROM action_execution AS c
                         WHERE c.execution_id = e.id AND c.status = 'SUCCEEDED'
                           AND c.finished_at >= COALESCE(e.claimed_at, '-infinity'))
               THEN 0
           WHEN %(outage)s
             OR e.lease_expires_at <= pg_postmaster_start_time()
                    + make_interval(secs => %(lease_seconds)s::double precision)
               THEN e.reclaims
           ELSE e.reclaims + 1
       END
 WHERE e.id = ANY (ARRAY(SELECT due.id FROM due))
RETURNING e.id, e.request_id, e.flow_id, e.transition_id, e.attempts, e.fencing_token,
          e.dispatch_principal, e.accepted_revision,
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
          END AS checkpoints,
          e.reclaims
),
takeover AS (
INSERT INTO audit_event (request_id, execution_id, type, actor, payload)
SELECT c.request_id, c.id, 'LEASE_TAKEN_OVER', 'system:worker',
       jsonb_build_object('previousOwner', due.was_owner, 'previousToken', due.was_token,
                          'leaseExpiredAt', due.was_expires_at, 'newOwner', %(owner)s::text,
                          'newToken', c.fencing_token, 'attempt', c.attempts)
  FROM claimed AS c
  JOIN due ON due.id = c.id
 WHERE due.was_status = 'RUNNING'
)
SELECT c.id, c.request_id, c.flow_id, c.transition_id, c.attempts, c.fencing_token,
       c.dispatch_principal, r.data, r.state, r.revision, r.version, r.owner, r.scope,
       c.accepted_revision, c.checkpoints, c.reclaims, due.was_status = 'RUNNING' AS taken_over
  FROM claimed AS c
  JOIN due ON due.id = c.id
 CROSS JOIN LATERAL (
           SELECT r.data, r.state, r.revision, r.version, r.owner, r.scope
             FROM request AS r
            WHERE r.id = c.request_id
           OFFSET 0
       ) AS r
"""

# Renew every lease this process holds (three arrays, one entry per holder), only under
# the exact fence: an expired lease never revives. Returns (id, token) of each renewed row; a
# holder missing from it has lost its lease.
# Locks: the held execution rows, FOR NO KEY UPDATE in id order (as every
# multi-row lock on executions); no request lock, never waits on a claim.
# Index: execution_pkey.
RENEW_LEASES = _fenced(
    """
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
     WHERE {fence_of_renewal}
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
)

# Is this holder's lease still valid? Tells "superseded" apart from another reason a fenced
# write matched nothing.
# Locks: nothing.
# Index: execution_pkey.
LEASE_PROBE = _fenced(
    """
SELECT e.lease_expires_at
  FROM execution AS e
 WHERE {fence}
"""
)

# What a holder runs with: the accepted request snapshot and every checkpoint so far.
# Fenced, so a stale holder loads nothing.
# Locks: nothing (the request is blocked by this execution).
# Index: execution_pkey, request by primary key, checkpoints by
# action_execution_action_uniq.
LOAD_EXECUTION = _fenced(
    """
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
 WHERE {fence}
"""
)

# The pinned flow's definition (immutable once published; workers cache it by id).
# Locks: nothing.
# Index: flow primary key.
FLOW_DEFINITION = "SELECT definition FROM flow WHERE id = %(flow_id)s"

# Commit the RUNNING checkpoints of one or many holders (%(items)s, grouped by
# executions/worker/groupcommit.py) before their adapters are called: a first attempt inserts
# attempt 1, a later one moves the same row to attempt + 1 only if it is still what the holder
# loaded (same attempt, hash, key and effect, not SUCCEEDED). Returns (execution id, attempt)
# per started item; a missing item was superseded or its checkpoint changed.
# Locks: each holder's execution row, FOR NO KEY UPDATE, items in execution id order,
# inside a LATERAL subquery that is never flattened (one lookup per item).
# Index: execution_pkey per item; action_execution_action_uniq.
CHECKPOINT_START = _fenced(
    """
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
                WHERE {fence_of_item}
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
)

# Record the validated outputs of one or many holders (%(items)s, grouped like
# CHECKPOINT_START): each holder's RUNNING checkpoint of its attempt becomes SUCCEEDED. Returns
# the execution id of every item saved; a missing item was superseded.
# Locks: as CHECKPOINT_START.
# Index: execution_pkey per item; action_execution_action_uniq.
CHECKPOINT_SUCCEED = _fenced(
    """
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
                WHERE {fence_of_item}
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
)

# Settle an attempt that did not succeed, FAILED or UNKNOWN (`output` keeps what a write
# returned when it cannot be trusted); the first statement of the retry and failure
# transactions, whose last write checks the fence again.
# Locks: the execution row, FOR NO KEY UPDATE, until the transaction ends.
# Index: execution_pkey; action_execution_action_uniq.
CHECKPOINT_SETTLE = _fenced(
    """
WITH holder AS (
    SELECT e.id
      FROM execution AS e
     WHERE {fence}
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
)

# Schedule a retry: RETRY_WAIT, due after %(delay_seconds)s by the database clock, lease
# cleared, the attempt's error kept; the row stays in execution_claim_idx under its new due time.
# Locks: the execution row (already locked by CHECKPOINT_SETTLE).
# Index: execution_pkey.
EXECUTION_SCHEDULE_RETRY = _fenced(
    """
UPDATE execution AS e
   SET status = 'RETRY_WAIT',
       lease_owner = NULL,
       lease_expires_at = NULL,
       next_attempt_at = clock_timestamp()
                         + make_interval(secs => %(delay_seconds)s::double precision),
       error_code = %(error_code)s,
       error_detail = %(error_detail)s
 WHERE {fence}
RETURNING e.next_attempt_at
"""
)

# Refresh this worker's registry row (reconciliation.WorkerProcess, the Workers page): the
# heartbeat's one statement; the first inserts the row, every later one refreshes last_seen_at
# and running.
# Locks: that one row.
# Index: worker_process_pkey (owner).
WORKER_SEEN = """
INSERT INTO worker_process (owner, host, pid, started_at, last_seen_at, concurrency, running,
                            renew_seconds, lease_seconds, version)
VALUES (%(owner)s, %(host)s, %(pid)s, clock_timestamp(), clock_timestamp(), %(concurrency)s,
        %(running)s, %(renew_seconds)s, %(lease_seconds)s, %(version)s)
ON CONFLICT (owner) DO UPDATE
   SET last_seen_at = clock_timestamp(), running = EXCLUDED.running
"""

# Append one audit event (the table is append-only) for executions/audit.py; returns its id.
# Locks: KEY SHARE on the request and execution rows, through the foreign keys (the
# writer already holds stronger locks).
# Index: none.
AUDIT_APPEND = """
INSERT INTO audit_event (request_id, execution_id, type, actor, payload)
VALUES (%(request_id)s, %(execution_id)s, %(type)s, %(actor)s, %(payload)s)
RETURNING id
"""

# Lock a request before its execution (the one lock order); returns who blocks it.
# Locks: the request row, FOR NO KEY UPDATE.
# Index: request primary key.
REQUEST_LOCK = "SELECT blocked_by_id FROM request WHERE id = %(request_id)s FOR NO KEY UPDATE"

# Which writes of an execution are outstanding: a write effect SUCCEEDED (it happened) or
# RUNNING/UNKNOWN/ACCEPTED (it may have, or an asynchronous provider is carrying it out); either
# keeps the request from being released as FAILED.
# Locks: nothing.
# Index: action_execution_action_uniq.
WRITES_OUTSTANDING = """
SELECT COALESCE(bool_or(c.status IN ('RUNNING', 'UNKNOWN', 'ACCEPTED')), false) AS uncertain,
       COALESCE(bool_or(c.status = 'SUCCEEDED'), false) AS succeeded,
       (array_agg(c.action_id ORDER BY c.sequence DESC))[1] AS last_action_id
  FROM action_execution AS c
 WHERE c.execution_id = %(execution_id)s
   AND c.effect IN ('IDEMPOTENT_WRITE', 'NON_IDEMPOTENT_WRITE')
   AND c.status IN ('SUCCEEDED', 'RUNNING', 'UNKNOWN', 'ACCEPTED')
"""

# End an execution FAILED (nothing outstanding): lease cleared, safe error recorded;
# REQUEST_RELEASE follows in the same transaction.
# Locks: the execution row, after its request.
# Index: execution_pkey.
EXECUTION_FAIL = _fenced(
    """
UPDATE execution AS e
   SET status = 'FAILED',
       lease_owner = NULL,
       lease_expires_at = NULL,
       error_code = %(error_code)s,
       error_detail = %(error_detail)s,
       finished_at = clock_timestamp()
 WHERE {fence}
RETURNING e.id
"""
)

# Hand an execution to an operator: RECONCILIATION_REQUIRED, lease cleared, the request
# stays blocked; it moves from execution_claim_idx to execution_reconcile_idx.
# Locks: the execution row, after its request.
# Index: execution_pkey.
EXECUTION_REQUIRE_RECONCILIATION = _fenced(
    """
UPDATE execution AS e
   SET status = 'RECONCILIATION_REQUIRED',
       lease_owner = NULL,
       lease_expires_at = NULL,
       error_code = %(error_code)s,
       error_detail = %(error_detail)s
 WHERE {fence}
RETURNING e.id
"""
)

# Release the request an execution held, data, state and revision unchanged (version + 1),
# only while this execution holds it.
# Locks: the request row (already locked by the caller).
# Index: request primary key (`IS NOT DISTINCT FROM`, never NULL here, lets no statistics lead
# the planner to request_blocked_idx, whose predicate `=` would prove: as the fence does).
REQUEST_RELEASE = """
UPDATE request
   SET blocked_by_id = NULL,
       version = version + 1,
       updated_at = clock_timestamp()
 WHERE id = %(request_id)s
   AND blocked_by_id IS NOT DISTINCT FROM %(execution_id)s
RETURNING version
"""

# Finalise one or many successful executions (%(items)s, grouped like CHECKPOINT_START) in
# one statement: for each item, only if the request is still the accepted snapshot and every
# expected checkpoint is SUCCEEDED (and none is anything else), mark the execution SUCCEEDED
# with its result, write the request's data and state (revision + 1, version + 1, unblocked)
# and append TRANSITION_COMPLETED; all of an item or none of it. Returns (execution id, new
# revision) per finalised item; LEASE_PROBE then FINALIZE_PROBE say why an item is missing.
# Locks: requests first (FOR NO KEY UPDATE, id order, inside a LATERAL subquery that is never
# flattened: one request_pkey lookup per item, never a hash join over every request, which stale
# statistics on a growing table used to choose; the holder's block is tested with `IS NOT
# DISTINCT FROM`, as the fence tests the status, so that request_blocked_idx counted empty is
# never walked whole for the id), then executions (fenced, id order).
# Index: request and execution primary keys; action_execution_action_uniq.
EXECUTION_FINALIZE = _fenced(
    """
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
               SELECT r.id
                 FROM request AS r
                WHERE r.id = item.request_id
                  AND r.blocked_by_id IS NOT DISTINCT FROM item.execution_id
                  AND r.state = item.from_state AND r.revision = item.accepted_revision
                  AND r.version = item.request_version
                  FOR NO KEY UPDATE OF r
           ) AS locked
),
fenced AS (
    SELECT req.*
      FROM execution AS e
      JOIN req ON req.execution_id = e.id
     WHERE {fence_of_request_item}
     ORDER BY e.id
       FOR NO KEY UPDATE OF e
),
held AS (
    SELECT f.*
      FROM fenced AS f
     WHERE (SELECT count(*) FILTER (WHERE c.status <> 'SUCCEEDED') = 0
                   AND count(*) FILTER (WHERE c.action_id = ANY(f.action_ids))
                       = cardinality(f.action_ids)
              FROM action_execution AS c
             WHERE c.execution_id = f.execution_id)
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
)

# Why a final commit matched nothing although the lease holds (read after the refusal only):
# is the request still the accepted snapshot, and which expected checkpoints are missing or not
# SUCCEEDED ("action STATUS", in action order, then any other checkpoint not SUCCEEDED).
# Locks: nothing.
# Index: request primary key; action_execution_action_uniq.
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

# The request an execution belongs to, read before taking any lock (operator writes).
# Locks: nothing.
# Index: execution_pkey.
EXECUTION_REQUEST_OF = "SELECT request_id FROM execution WHERE id = %(execution_id)s"

# Lock the execution after its request (operator writes); returns its status and token.
# Locks: the execution row, FOR NO KEY UPDATE.
# Index: execution_pkey.
EXECUTION_LOCK = """
SELECT request_id, status, fencing_token
  FROM execution
 WHERE id = %(execution_id)s
   FOR NO KEY UPDATE
"""

# Cancel: CANCELLED under token + 1, lease cleared; guarded on the status and token read
# under the lock (an operator guard, not a holder's fence).
# Locks: the execution row (already locked).
# Index: execution_pkey.
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

# Cancel an execution whose writes are outstanding: RECONCILIATION_REQUIRED under token + 1,
# lease cleared, request still blocked; same guard as EXECUTION_CANCEL.
# Locks: the execution row (already locked).
# Index: execution_pkey.
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

# --- Waiting: wait actions, resumes and early events (executions/waits.py, resumes.py) ---------
# The worker's writes (reach a wait, settle its timeout) are fenced like every write after a
# claim and lock the request, then the execution. A resume (POST .../events) locks the request,
# then the execution, and requires the state it read under those locks; it bumps the token, so a
# worker that still believes it holds the execution is fenced out. Events are unique per
# (execution, eventId) (execution_event_uniq), which every statement on them uses.

# Lock the holder's execution row for a wait's transaction, fenced. Locks one row by primary key
# (after REQUEST_LOCK). No row: superseded.
WAIT_HOLDER_LOCK = _fenced(
    """
SELECT e.id
  FROM execution AS e
 WHERE {fence}
   FOR NO KEY UPDATE
"""
)

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
EXECUTION_SUSPEND = _fenced(
    """
UPDATE execution AS e
   SET status = 'SUSPENDED',
       lease_owner = NULL,
       lease_expires_at = NULL,
       next_attempt_at = clock_timestamp()
                         + make_interval(secs => %(timeout_seconds)s::double precision),
       error_code = NULL,
       error_detail = NULL
 WHERE {fence}
RETURNING e.next_attempt_at
"""
)

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
EXECUTION_SUSPEND_UNTIL = _fenced(
    """
UPDATE execution AS e
   SET status = 'SUSPENDED',
       lease_owner = NULL,
       lease_expires_at = NULL,
       next_attempt_at = %(deadline)s::timestamptz
 WHERE {fence}
RETURNING e.next_attempt_at
"""
)

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
# status and token read under the lock. The next dispatch runs for %(principal)s, the resuming
# caller; NULL (a provider's callback: not a principal) keeps the principal of the dispatch
# that made the accepted call. One row by primary key; it keeps its place in
# execution_claim_idx with the new key.
# Locks: the execution row (already locked by RESUME_LOCK).
# Index: execution_pkey.
RESUME_EXECUTION = """
UPDATE execution AS e
   SET status = 'PENDING',
       fencing_token = e.fencing_token + 1,
       next_attempt_at = clock_timestamp(),
       dispatch_principal = COALESCE(%(principal)s::jsonb, e.dispatch_principal)
 WHERE e.id = %(execution_id)s AND e.status = 'SUSPENDED' AND e.fencing_token = %(token)s
RETURNING e.fencing_token
"""

# An asynchronous provider accepted the holder's call: its RUNNING checkpoint becomes ACCEPTED.
# First statement of the acceptance transaction (the execution row is locked by
# WAIT_HOLDER_LOCK before it); one row through action_execution_action_uniq, only if it is this
# holder's attempt. EXECUTION_SUSPEND follows, with the contract's callback_timeout_seconds.
CHECKPOINT_ACCEPT = _fenced(
    """
WITH holder AS (
    SELECT e.id
      FROM execution AS e
     WHERE {fence}
       FOR NO KEY UPDATE
)
UPDATE action_execution AS c
   SET status = 'ACCEPTED'
  FROM holder
 WHERE c.execution_id = holder.id AND c.action_id = %(action_id)s
   AND c.status = 'RUNNING' AND c.fencing_token = %(token)s AND c.attempt = %(attempt)s
RETURNING c.id
"""
)

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

# Settle an uncertain checkpoint (RUNNING or UNKNOWN) as the operator established:
# SUCCEEDED with the output they recorded, or FAILED with REPLAY_AUTHORIZED, under the new token.
# Locks: the checkpoint row, under the execution lock.
# Index: action_execution_action_uniq.
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

# Requeue a resolved execution: PENDING and due now under token + 1, lease and error
# cleared; guarded on the status and token read under the lock (no row: another resolution won).
# The requeued dispatch runs as system: the operator who caused it is in the audit trail, and is
# not a principal of the request's tenant.
# Locks: the execution row (already locked).
# Index: execution_pkey; it moves to execution_claim_idx.
RECONCILE_REQUEUE = """
UPDATE execution
   SET status = 'PENDING',
       fencing_token = fencing_token + 1,
       lease_owner = NULL,
       lease_expires_at = NULL,
       next_attempt_at = clock_timestamp(),
       error_code = NULL,
       error_detail = NULL,
       finished_at = NULL,
       dispatch_principal = NULL
 WHERE id = %(execution_id)s AND status = 'RECONCILIATION_REQUIRED' AND fencing_token = %(token)s
RETURNING fencing_token
"""

# Abandon an execution in reconciliation: FAILED under token + 1, lease cleared, with the
# code that says so; same guard as RECONCILE_REQUEUE.
# Locks: the execution row (already locked).
# Index: execution_pkey.
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

# Make the metrics transaction read-only (its first statement).
# Locks: nothing.
# Index: none.
METRICS_READ_ONLY = "SET TRANSACTION READ ONLY"

# Bound every later statement of the metrics transaction, so a slow read fails the scrape
# instead of piling scrapes up.
# Locks: nothing.
# Index: none.
METRICS_TIMEOUT = "SELECT set_config('statement_timeout', %(timeout_ms)s, true)"

# Live executions by status (PENDING, RETRY_WAIT, RUNNING): how many, how many are due, and
# the age in seconds of the oldest due one, against one reading of the clock.
# Locks: nothing.
# Index: execution_claim_idx (partial on exactly these statuses); no finished row.
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

# Executions waiting for an operator, and the age in seconds of the oldest.
# Locks: nothing.
# Index: execution_reconcile_idx, index only.
METRICS_RECONCILIATION = """
SELECT count(*) AS backlog,
       COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(e.created_at)), 0)::double precision
           AS oldest_age_seconds
  FROM execution AS e
 WHERE e.status = 'RECONCILIATION_REQUIRED'
"""

# Requests held by an execution (blocked_by set).
# Locks: nothing.
# Index: request_blocked_idx, index only.
METRICS_BLOCKED_REQUESTS = """
SELECT count(*) AS blocked
  FROM request AS r
 WHERE r.blocked_by_id IS NOT NULL
"""

# -- purgehistory (executions/history.py) -------------------------------------------------------

# The purge's cutoff, read once from the database clock.
# Locks: nothing.
# Index: none.
PURGE_CUTOFF = "SELECT now() - make_interval(days => %(days)s)"

# Bound how long one purge batch may wait for a lock (transaction-local).
# Locks: nothing.
# Index: none.
PURGE_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %(timeout)s, true)"

# Purge one batch of old history in its own short transaction: up to %(limit)s final
# executions (never RECONCILIATION_REQUIRED nor live work) finished before %(cutoff)s, oldest
# first; deletes their checkpoints and events, clears the execution's own payloads, keeps what
# the execution view shows and the append-only audit trail. Returns one row per purged
# execution with the checkpoints and events deleted.
# Locks: those execution rows, FOR UPDATE SKIP LOCKED (two purges never wait on each other;
# no worker locks a final row).
# Index: execution_purge_idx; action_execution_action_uniq; execution_event_uniq.
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
           actor_snapshot = '{}',
           dispatch_principal = NULL
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

# -- Automatic provider probes (reconciliation/probes.py) --------------------------------------

# Give every uncertain write (RUNNING or UNKNOWN) of each open case one probe row per attempt,
# due now; a probe that was closed because its case was not open at that moment (a resolution of
# another of its writes requeued the execution, which came back to the desk on this one) opens
# again, with a fresh window. Reads the open cases through execution_reconcile_idx and their
# checkpoints by action_execution_action_uniq; updates only closed probes of open cases (by
# primary key), otherwise inserts only (a row another prober added first is left alone).
PROBES_ENLIST = """
WITH uncertain AS (
    SELECT e.id::text || ':' || c.action_id || ':' || c.attempt AS key, e.id AS execution_id,
           c.action_id
      FROM execution e
      JOIN action_execution c
        ON c.execution_id = e.id AND c.status IN ('RUNNING', 'UNKNOWN')
     WHERE e.status = 'RECONCILIATION_REQUIRED'
),
reopened AS (
    UPDATE case_probe p
       SET opened_at = clock_timestamp(), next_probe_at = clock_timestamp(), probes = 0,
           all_absent = true, finished_at = NULL, outcome = ''
      FROM uncertain u
     WHERE p.key = u.key AND p.finished_at IS NOT NULL AND p.outcome = 'closed'
)
INSERT INTO case_probe (key, execution_id, action_id, opened_at, next_probe_at)
SELECT u.key, u.execution_id, u.action_id, clock_timestamp(), clock_timestamp()
  FROM uncertain u
ON CONFLICT (key) DO NOTHING
"""

# Claim due probes like work: FOR UPDATE SKIP LOCKED over unfinished probes whose time has come
# and whose lease (if any) ran out, through case_probe_due_idx; each gets this worker's lease
# and token + 1, so an earlier holder's writes (PROBE_LOCK) match nothing. Locks those rows only.
PROBES_CLAIM = """
WITH due AS (
    SELECT key FROM case_probe
     WHERE finished_at IS NULL AND next_probe_at <= clock_timestamp()
       AND (lease_expires_at IS NULL OR lease_expires_at <= clock_timestamp())
     ORDER BY next_probe_at, key
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE case_probe p
   SET lease_owner = %(owner)s,
       lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_seconds)s),
       fencing_token = p.fencing_token + 1
  FROM due
 WHERE p.key = due.key
RETURNING p.key, p.execution_id, p.action_id, p.probes, p.opened_at, p.all_absent,
          p.fencing_token
"""

# Lock one claimed probe for its settlement, fenced: this owner, this token, lease not run out
# (database time). One row by primary key.
PROBE_LOCK = """
SELECT key FROM case_probe
 WHERE key = %(key)s AND fencing_token = %(probe_token)s AND lease_owner = %(owner)s
   AND lease_expires_at > clock_timestamp() AND finished_at IS NULL
   FOR UPDATE
"""

# Settle a probe locked by PROBE_LOCK: count it, reschedule it or finish it, release its lease.
# One row by primary key.
PROBE_SETTLE = """
UPDATE case_probe
   SET probes = probes + 1,
       all_absent = %(all_absent)s,
       next_probe_at = COALESCE(%(next_probe_at)s, next_probe_at),
       finished_at = CASE WHEN %(finished)s THEN clock_timestamp() END,
       outcome = %(outcome)s,
       lease_owner = NULL,
       lease_expires_at = NULL
 WHERE key = %(key)s
"""
