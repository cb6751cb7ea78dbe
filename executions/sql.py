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
