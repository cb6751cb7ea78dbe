"""Reading PostgreSQL's plans in tests: every node of an EXPLAIN (FORMAT JSON) tree, a
statement's plan without running it, and statistics kept as a test set them."""

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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


@contextmanager
def autovacuum_off(owner: Any, *tables: str) -> Iterator[None]:
    """No autovacuum on `tables` while the block runs, through `owner` (a connection or cursor of
    the tables' owner): its ANALYZE, sampling, would replace the statistics a plan test set on
    purpose, stale or read from every row (CI once planned other indexes so)."""
    for table in tables:
        owner.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
    try:
        yield
    finally:
        for table in tables:
            owner.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
