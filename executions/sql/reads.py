"""The API's hottest read by id (executions/selectors.py), as a fixed statement: building the
ORM's query for it cost more than PostgreSQL's answer.

Access as executions/access.py states it: the request's tenant, and its owner unless the caller
reads the whole tenant, in the WHERE clause (`access.request_filter_sql`).
"""

# One execution as its view shows it (executions/api/render.py), if the caller may read it; the
# columns in the model's field order (Model.from_db).
# Locks: nothing.
# Index: execution_pkey, then request_pkey.
EXECUTION_VIEW = """
SELECT e.id, e.request_id, e.transition_id, e.status, e.attempts, e.next_attempt_at, e.result,
       e.error_code, e.created_at, e.finished_at
  FROM execution AS e
  JOIN request AS r ON r.id = e.request_id
 WHERE e.id = %(execution_id)s AND {access}
"""
EXECUTION_VIEW_COLUMNS = (
    "id",
    "request_id",
    "transition_id",
    "status",
    "attempts",
    "next_attempt_at",
    "result",
    "error_code",
    "created_at",
    "finished_at",
)
