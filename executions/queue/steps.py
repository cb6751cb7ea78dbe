"""Statements as plans: each protocol write or read is defined once, run on either connection
(docs/adr/0014-one-event-loop-per-worker.md, "One definition of each statement").

A plan is a generator that yields `Query`s (a statement of executions/sql/, its parameters, how
much of its answer it needs), receives each answer and returns the protocol function's result;
the decisions between statements live in the plan only. `run_sync` runs it on a psycopg
connection, `run_async` on the worker's asynchronous ones, so the two never disagree;
`Plan.atomic` says whether it is one transaction of its own (a failure rolls all of it back). A
protocol function is its generator under `@as_plan()`: calling it returns the `Plan`.
"""

import functools
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, Literal, ParamSpec, TypeVar

import psycopg
from psycopg.rows import tuple_row

Result = TypeVar("Result")
Params = ParamSpec("Params")


@dataclass(frozen=True)
class Query:
    """One statement of a plan; the plan receives its rows (`all`), its first row or None
    (`one`), or None (`none`)."""

    statement: str
    params: Any = None
    fetch: Literal["all", "one", "none"] = "all"
    # A psycopg row factory (kwargs_row, scalar_row: both kinds of connection take it); None:
    # tuples.
    row_factory: Any = None


Steps = Generator[Query, Any, Result]


@dataclass
class Plan(Generic[Result]):
    """A protocol function's statements and decisions, not yet run."""

    steps: Steps[Result]
    atomic: bool = False  # the whole plan is one transaction
    # Called inside that transaction after the last statement, before the commit: the crash
    # point "final.uncommitted" (executions/queue/faultpoints.py) dies there.
    before_commit: Callable[[], None] | None = None


def as_plan(
    *, atomic: bool = False
) -> Callable[[Callable[Params, Steps[Result]]], Callable[Params, Plan[Result]]]:
    """Make a generator of steps a protocol function: called with the generator's own
    parameters, it returns the generator as a `Plan` (one transaction of its own when
    `atomic`)."""

    def planned(steps: Callable[Params, Steps[Result]]) -> Callable[Params, Plan[Result]]:
        @functools.wraps(steps)
        def plan(*args: Params.args, **kwargs: Params.kwargs) -> Plan[Result]:
            return Plan(steps(*args, **kwargs), atomic=atomic)

        return plan

    return planned


def run_sync(conn: psycopg.Connection, plan: Plan[Result]) -> Result:
    """Run `plan` on a synchronous connection (in a transaction of its own when atomic)."""
    if not plan.atomic:
        return _drive_sync(conn, plan.steps)
    with conn.transaction():
        result = _drive_sync(conn, plan.steps)
        if plan.before_commit is not None:
            plan.before_commit()
    return result


async def run_async(conn: psycopg.AsyncConnection, plan: Plan[Result]) -> Result:
    """Run `plan` on an asynchronous connection (in a transaction of its own when atomic)."""
    if not plan.atomic:
        return await _drive_async(conn, plan.steps)
    async with conn.transaction():
        result = await _drive_async(conn, plan.steps)
        if plan.before_commit is not None:
            plan.before_commit()
    return result


def _drive_sync(conn: psycopg.Connection, steps: Steps[Result]) -> Result:
    answer: Any = None
    try:
        while True:
            query = steps.send(answer)
            with conn.cursor(row_factory=query.row_factory or tuple_row) as cur:
                cur.execute(query.statement, query.params)
                answer = _fetched(query, cur.fetchall, cur.fetchone)
    except StopIteration as stop:
        return stop.value


async def _drive_async(conn: psycopg.AsyncConnection, steps: Steps[Result]) -> Result:
    answer: Any = None
    try:
        while True:
            query = steps.send(answer)
            async with conn.cursor(row_factory=query.row_factory or tuple_row) as cur:
                await cur.execute(query.statement, query.params)
                if query.fetch == "all":
                    answer = await cur.fetchall()
                elif query.fetch == "one":
                    answer = await cur.fetchone()
                else:
                    answer = None
    except StopIteration as stop:
        return stop.value


def _fetched(query: Query, fetchall: Callable[[], Any], fetchone: Callable[[], Any]) -> Any:
    if query.fetch == "all":
        return fetchall()
    if query.fetch == "one":
        return fetchone()
    return None
