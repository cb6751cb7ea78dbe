"""The API's reads, as fixed statements: building the ORM's query for them cost more than
PostgreSQL's answer, and its model instances more than rendering the rows.

Access as executions/access.py states it: the request's tenant, and its owner unless the caller
reads the whole tenant, in the WHERE clause (`access.request_filter_sql`; a list of executions
uses the copies of the request's scope and owner that each execution carries). Each statement's
columns are its view's, named and ordered as executions/sql/rows.py's named rows (the fragments
`{execution_view_columns}` and `{request_view_columns}`): times as the API writes them, ids as
text and of an execution's result only the two texts its view shows (see there why).
"""

from .fragments import composed

# One execution as its view shows it (executions/api/render.py), if the caller may read it: the
# access test `{access}` written for a row found by its key (`access.request_filter_sql` keyed),
# so that only the primary keys serve it whatever the statistics (docs/adr/0021).
# Locks: nothing.
# Index: execution_pkey, then request_pkey.
EXECUTION_VIEW = composed("""
SELECT {execution_view_columns}
  FROM execution AS e
  JOIN request AS r ON r.id = e.request_id
 WHERE e.id = %(execution_id)s AND {access}
""")

# Said before every list page, in the same message (one implicit transaction, so it ends with
# the page): a page walks its list index in order whatever the statistics. Rows the last ANALYZE
# has not seen (an owner's or tenant's burst) are estimated at a few dozen, and a bitmap scan of
# all of them, sorted, then looked cheaper than the ordered walk: 5 ms a page at 6,000 rows, and
# growing with them (docs/adr/0015). Without bitmap scans the walk needs no sort and wins.
# Locks: nothing.
# Index: none.
PAGE_PLANNING = "SET LOCAL enable_bitmapscan = off;\n"

# One request as its view shows it, its flow by id (executions/flows/cache.py names it), if the
# caller may read it (`{access}` keyed, as EXECUTION_VIEW's).
# Locks: nothing.
# Index: request_pkey.
REQUEST_VIEW = composed("""
SELECT {request_view_columns}
  FROM request AS r
 WHERE r.id = %(request_id)s AND {access}
""")

# The key and version of the published flows `ids` (executions/flows/cache.py keeps them, so that
# a page of requests does not join the flow table).
# Locks: nothing.
# Index: flow_pkey.
FLOW_NAMES = """
SELECT id, key, version FROM flow WHERE id = ANY(%(ids)s)
"""

# The ids of a flow key's published versions: a request list's flowKey, resolved first so that
# the page's own statement is an equality on request_flow_list_idx when there is one version.
# Locks: nothing.
# Index: flow_key_version_uniq.
FLOW_VERSION_IDS = """
SELECT id FROM flow WHERE key = %(flow_key)s
"""

# A page of requests the caller may read, newest first: `{conditions}` is the access filter and
# the page's filters, each one of REQUEST_PAGE_FILTERS, joined by AND (composed once per set of
# filters and access mode by executions/api/selectors.py, from this text only, never from values).
# Locks: nothing.
# Index: the list's own for its filters (request_*_list_idx, ADR 15), walked from the position;
# pinned by tests/integration/api/test_list_plans.py.
REQUEST_PAGE = composed("""
SELECT {request_view_columns}
  FROM request AS r
 WHERE {conditions}
 ORDER BY r.created_at DESC, r.id DESC
 LIMIT %(limit)s
""")
# The same page when it is filtered by a later time (updatedAfter): its ids picked first, from
# request_updated_at_list_idx alone (an index-only scan of the rows the filter keeps, sorted),
# then their rows read by id. Ordered by creation and filtered by the last change, the plain
# page walked the tenant's creation index past every row the filter drops: a tenant's whole
# history on the page after the last recent row, and the planner cannot tell, since it takes
# the two times as independent. Here the walk is only the index's and cheap, so the planner
# takes it whenever the filter is selective, and walks the creation index (as REQUEST_PAGE)
# when it is not.
# Locks: nothing.
# Index: request_updated_at_list_idx (or the list's own for the other filters), then
# request_pkey; pinned by tests/integration/api/test_list_plans.py.
REQUEST_PAGE_BY_TIME = composed("""
SELECT {request_view_columns}
  FROM (SELECT r.id FROM request AS r
         WHERE {conditions}
         ORDER BY r.created_at DESC, r.id DESC
         LIMIT %(limit)s) AS page
  JOIN request AS r ON r.id = page.id
 ORDER BY r.created_at DESC, r.id DESC
""")
REQUEST_PAGE_FILTERS = {
    # One version is an equality, so the index is walked in order; several are an IN list.
    "flowKey=one": "r.flow_id = %(flow_id)s",
    "flowKey=any": "r.flow_id = ANY(%(flow_ids)s)",
    "state": "r.state = %(state)s",
    "blocked=true": "r.blocked_by_id IS NOT NULL",
    "blocked=false": "r.blocked_by_id IS NULL",
    "createdAfter": "r.created_at > %(createdAfter)s",
    "createdBefore": "r.created_at < %(createdBefore)s",
    "updatedAfter": "r.updated_at > %(updatedAfter)s",
    # The keyset: a row comparison, which PostgreSQL walks as one index range (an OR of the two
    # conditions would not be).
    "position": "(r.created_at, r.id) < (%(position_at)s, %(position_id)s)",
}

# A page of executions the caller may read, newest first, composed as REQUEST_PAGE is from
# EXECUTION_PAGE_FILTERS.
# Locks: nothing.
# Index: the list's own for its filters (execution_*_list_idx, ADR 15; execution_request_idx for
# requestId), walked from the position; pinned by tests/integration/api/test_list_plans.py.
EXECUTION_PAGE = composed("""
SELECT {execution_view_columns}
  FROM execution AS e
 WHERE {conditions}
 ORDER BY e.created_at DESC, e.id DESC
 LIMIT %(limit)s
""")
# The same page when it is filtered by a later time (finishedAfter), as REQUEST_PAGE_BY_TIME:
# its ids from execution_finished_at_list_idx alone, then its rows by id.
# Locks: nothing.
# Index: execution_finished_at_list_idx (or the list's own for the other filters), then
# execution_pkey; pinned by tests/integration/api/test_list_plans.py.
EXECUTION_PAGE_BY_TIME = composed("""
SELECT {execution_view_columns}
  FROM (SELECT e.id FROM execution AS e
         WHERE {conditions}
         ORDER BY e.created_at DESC, e.id DESC
         LIMIT %(limit)s) AS page
  JOIN execution AS e ON e.id = page.id
 ORDER BY e.created_at DESC, e.id DESC
""")
EXECUTION_PAGE_FILTERS = {
    "status": "e.status = %(status)s",
    "requestId": "e.request_id = %(requestId)s",
    "transitionId": "e.transition_id = %(transitionId)s",
    "errorCode": "e.error_code = %(errorCode)s",
    "createdAfter": "e.created_at > %(createdAfter)s",
    "createdBefore": "e.created_at < %(createdBefore)s",
    "finishedAfter": "e.finished_at > %(finishedAfter)s",
    "position": "(e.created_at, e.id) < (%(position_at)s, %(position_id)s)",
}
