"""Probes: automatic provider probes of open cases' uncertain writes (reconciliation/probes.py),
claimed like work and fenced by their own token.
"""

# Give every uncertain write (RUNNING or UNKNOWN) of each open case one probe row per attempt,
# due now; a closed probe of a case open again reopens with a fresh window; a row another prober
# added first is left alone.
# Locks: the closed probe rows it reopens.
# Index: execution_reconcile_idx; action_execution_action_uniq; case_probe_pkey.
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


# Claim due probes like work: unfinished probes whose time has come and whose lease (if any) ran
# out each get this worker's lease and token + 1, so an earlier holder's writes (PROBE_LOCK)
# match nothing.
# Locks: those probe rows, FOR UPDATE SKIP LOCKED.
# Index: case_probe_due_idx.
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
# (database time).
# Locks: the probe row, FOR UPDATE.
# Index: case_probe_pkey.
PROBE_LOCK = """
SELECT key FROM case_probe
 WHERE key = %(key)s AND fencing_token = %(probe_token)s AND lease_owner = %(owner)s
   AND lease_expires_at > clock_timestamp() AND finished_at IS NULL
   FOR UPDATE
"""


# Settle a probe locked by PROBE_LOCK: count it, reschedule it or finish it, release its lease.
# Locks: the probe row (already locked).
# Index: case_probe_pkey.
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
