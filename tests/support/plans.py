"""Reading PostgreSQL's plans in tests: every node of an EXPLAIN (FORMAT JSON) tree, and a
statement's plan without running it."""

import json
from collections.abc import Iterator

import psycopg


def plan_nodes(plan: dict) -> Iterator[dict]:
    """A plan node and every node below it, depth first."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from plan_nodes(child)


def planned(conn: psycopg.Connection, statement: str, params: dict) -> list[dict]:
    """The plan's nodes, without running the statement (EXPLAIN only plans it)."""
    (row,) = conn.execute("EXPLAIN (FORMAT JSON) " + statement, params).fetchone()
    document = row if isinstance(row, list) else json.loads(row)
    return list(plan_nodes(document[0]["Plan"]))
