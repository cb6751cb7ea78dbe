"""Fixtures of the worker's integration tests: a runtime-role connection and a flow factory.

Every test here commits (transaction=True): the worker's own connections must see its rows.
"""

import importlib

import pytest
from django.test import override_settings
from django.urls import clear_url_caches

from executions.worker import endpoint as workerendpoint
from tests.support.worker import create_flow, flow_definition, runtime_for


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


ENDPOINT_TOKEN = "w" * 40  # WORKER_ENDPOINT_TOKEN of the test endpoint


class Endpoint:
    """The worker endpoint served by live_server; `serve(reg)` runs packages through `reg`."""

    def __init__(self, url, dsn):
        self.url = url  # the base URL, as WORKER_REMOTE_URL names it
        self.token = ENDPOINT_TOKEN
        self._dsn = dsn
        self._runtimes = []

    def serve(self, reg):
        runtime = runtime_for(self._dsn, reg)
        self._runtimes.append(runtime)
        workerendpoint.endpoint_runtime_set(runtime.target, runtime.loop)
        return runtime

    def close(self):
        workerendpoint.endpoint_runtime_set(None)
        for runtime in self._runtimes:
            runtime.close()


def _reload_urls():
    import executions.urls
    import orquestador.urls

    importlib.reload(executions.urls)
    importlib.reload(orquestador.urls)
    clear_url_caches()


@pytest.fixture
def worker_endpoint(live_server, runtime_dsn):
    """The worker endpoint enabled with its token (URLs mounted as settings say), on live_server."""
    endpoint = Endpoint(f"{live_server.url}/internal/worker/", runtime_dsn)
    with override_settings(WORKER_ENDPOINT_ENABLED=True, WORKER_ENDPOINT_TOKEN=ENDPOINT_TOKEN):
        _reload_urls()
        try:
            yield endpoint
        finally:
            endpoint.close()
    _reload_urls()
