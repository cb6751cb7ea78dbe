"""Pieces of SQL that several statements share, each written once under a name that says what it
does. Statements name them as placeholders (`{holder}`, `{lease_cleared}`, ...) and are composed
when their modules are imported (`composed`; `fenced` composes first, then writes the fence), from
this static text only, never from values. The pieces are private: only whole statements are
public, each with its purpose, `Locks:` and `Index:` comment.
"""

# The holder's execution row, found by its fence and locked for the rest of the holder's
# transaction (so a resume or an operator write waits for it).
_HOLDER_ROW = """SELECT e.id
  FROM execution AS e
 WHERE {fence}
   FOR NO KEY UPDATE"""

# SET items, as the statements' comments name them.
_LEASE_CLEARED = """lease_owner = NULL,
       lease_expires_at = NULL"""
_ERROR_RECORDED = """error_code = %(error_code)s,
       error_detail = %(error_detail)s"""
_ERROR_CLEARED = """error_code = NULL,
       error_detail = NULL"""
# A checkpoint's outcome as its settler gives it: status, output and error.
_OUTCOME_GIVEN = (
    """status = %(status)s,
       output = %(output)s,
       """
    + _ERROR_RECORDED
)


def _api_time(column: str) -> str:
    """`column` (a timestamptz) as the API writes a time: ISO 8601 in UTC with a Z, and its
    microseconds only when it has any, as DRF writes Python's isoformat(); NULL stays NULL
    (executions/sql/rows.py says why the statement writes it)."""
    return (
        f"replace(to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US'), "
        "'.000000', '') || 'Z'"
    )


# An execution's columns as the API's view shows them (executions/sql/rows.py's ExecutionRow, each
# named as its field), of `e`.
_EXECUTION_VIEW_COLUMNS = (
    "e.id::text AS id, e.request_id::text AS request_id, e.transition_id, e.status, e.attempts,"
    "\n       "
    # A SUSPENDED execution's deadline; the others' next attempt the view never shows.
    + "CASE WHEN e.status = 'SUSPENDED' THEN "
    + _api_time("e.next_attempt_at")
    + " END AS next_attempt_at,\n       "
    + "e.result->>'outcome' AS outcome, e.result->>'targetState' AS target_state, e.error_code,"
    + "\n       "
    + _api_time("e.created_at")
    + " AS created_at,\n       "
    + _api_time("e.finished_at")
    + " AS finished_at"
)
# A request's columns as the API's view shows them (RequestRow's, each named as its field), of
# `r`, except its flow's id in place of the flow's key and version (named by
# executions/flows/cache.py).
_REQUEST_VIEW_COLUMNS = (
    "r.id::text AS id, r.flow_id, r.state, r.revision, r.data,\n"
    "       r.blocked_by_id IS NOT NULL AS blocked,\n"
    "       " + _api_time("r.created_at") + " AS created_at,\n"
    "       " + _api_time("r.updated_at") + " AS updated_at"
)

FRAGMENTS = {
    "{holder_row}": _HOLDER_ROW,
    "{holder}": "holder AS (\n" + _HOLDER_ROW + "\n)",
    "{lease_cleared}": _LEASE_CLEARED,
    "{error_recorded}": _ERROR_RECORDED,
    "{error_cleared}": _ERROR_CLEARED,
    "{outcome_given}": _OUTCOME_GIVEN,
    "{execution_view_columns}": _EXECUTION_VIEW_COLUMNS,
    "{request_view_columns}": _REQUEST_VIEW_COLUMNS,
}


def composed(template: str) -> str:
    """`template` with its fragment placeholders replaced (at import time, from FRAGMENTS)."""
    for placeholder, fragment in FRAGMENTS.items():
        template = template.replace(placeholder, fragment)
    return template
