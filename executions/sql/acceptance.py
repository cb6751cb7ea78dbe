"""Acceptance: a transition taken on a request by the API (executions/api/acceptance.py), in two
statements, each its own transaction: the request read as the caller may change it, then one
statement that writes the acceptance only if the request is still as it was read.

The write re-checks under the request's row lock what the read found (state, revision, no block):
whichever of two concurrent acceptances updates the row first wins, and the other matches nothing
and reads the request again, which then says why (blocked, another revision, or the execution its
Idempotency-Key already made).
"""

from .fragments import composed

# The caller's request (its owner and tenant in the WHERE clause) with its flow's identity, and the
# execution an Idempotency-Key already names on it (none when no key is sent: NULL equals nothing),
# as executions/sql/rows.py's AcceptReadRow.
# The owner and tenant are compared with IS NOT DISTINCT FROM, `=` for these NOT NULL columns but
# no index condition: the request is found by its key whatever the statistics (with `=`, a
# generic plan made on stale ones walked a list index, `scope` its first column and `id` its
# last, for the id; docs/adr/0021).
# Locks: nothing (ACCEPT_WRITE re-checks what it decides on).
# Index: request_pkey, flow_pkey; execution_idempotency_uniq for the key.
ACCEPT_READ = """
SELECT r.flow_id, f.key AS flow_key, f.version AS flow_version, f.checksum AS flow_checksum,
       r.state, r.revision, r.blocked_by_id,
       e.id AS earlier_id, e.idempotency_fingerprint AS earlier_fingerprint
  FROM request AS r
  JOIN flow AS f ON f.id = r.flow_id
  LEFT JOIN execution AS e
    ON e.request_id = r.id AND e.idempotency_key = %(idempotency_key)s
 WHERE r.id = %(request_id)s
   AND r.scope IS NOT DISTINCT FROM %(scope)s AND r.owner IS NOT DISTINCT FROM %(owner)s
"""


# Accept: only if the caller's request still has the state and revision ACCEPT_READ found and
# nothing blocks it, its revision and version + 1, blocked by the new PENDING execution;
# TRANSITION_ACCEPTED appended; idle workers notified (delivered at commit). All of it or nothing:
# no row back when the request changed since it was read. Returns the execution as its view shows
# it (executions/sql/rows.py's ExecutionRow). The request is found by its key alone, as
# ACCEPT_READ's. Locks: the request row (FOR NO KEY UPDATE, by the UPDATE), then the new execution;
# KEY SHARE through the foreign keys. Index: request_pkey.
ACCEPT_WRITE = composed("""
WITH accepted AS (
    UPDATE request
       SET revision = revision + 1,
           version = version + 1,
           updated_at = statement_timestamp(),
           blocked_by_id = %(execution_id)s
     WHERE id = %(request_id)s
       AND scope IS NOT DISTINCT FROM %(scope)s AND owner IS NOT DISTINCT FROM %(owner)s
       AND state IS NOT DISTINCT FROM %(state)s AND revision = %(expected_revision)s
       AND blocked_by_id IS NULL
 RETURNING id, flow_id, revision
), created AS (
    INSERT INTO execution (id, request_id, flow_id, transition_id, accepted_revision,
                           actor_snapshot, dispatch_principal, idempotency_key,
                           idempotency_fingerprint, trace_context)
    SELECT %(execution_id)s, a.id, a.flow_id, %(transition_id)s, a.revision, %(actor)s,
           %(actor)s, %(idempotency_key)s, %(fingerprint)s, %(trace_context)s
      FROM accepted AS a
 RETURNING id, request_id, transition_id, status, attempts, next_attempt_at, result, error_code,
           created_at, finished_at
), audited AS (
    INSERT INTO audit_event (request_id, execution_id, type, actor, payload)
    SELECT c.request_id, c.id, 'TRANSITION_ACCEPTED', %(subject)s, %(payload)s
      FROM created AS c
)
SELECT {execution_view_columns}
  FROM created AS e
 CROSS JOIN LATERAL (SELECT pg_notify('orquestador_executions', e.id::text)) AS notified
""")
