"""Fixtures of the worker's integration tests: a runtime-role connection and a flow factory.

Every test here commits (transaction=True): the worker's own connections must see its rows.
"""

import pytest

from tests.support.worker import create_flow, flow_definition


@pytest.fixture
def conn(runtime_conn):
    """A runtime-role connection (autocommit), as the worker's own connections are."""
    return runtime_conn


@pytest.fixture
def make_flow(conn):
    """Publish a one-transition flow running these actions; return its id."""
    counter = iter(range(1, 1000))

    def make(actions, **kwargs):
        kwargs.setdefault("version", next(counter))
        return create_flow(conn, flow_definition(actions, **kwargs))

    return make
