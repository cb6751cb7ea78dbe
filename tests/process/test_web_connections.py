"""The web server's database connections, with gunicorn as scripts/start runs it: each one is
kept from request to request whatever the requests answer (created, refused, not found, invalid),
none is opened per request, and one PostgreSQL cuts is replaced without a refusal: by the health
check before the next request's first statement, or by that statement itself when it is a read
(orquestador/postgresql)."""

import copy
import uuid
from collections.abc import Iterator

import psycopg
import pytest
import requests

from executions.flows.publication import flow_publish
from orquestador import gunicorn as config
from tests.conftest import runtime_settings
from tests.integration.api.conftest import FLOW
from tests.support import tokens
from tests.support.web import gunicorn_process

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

TIMEOUT = 10  # seconds per HTTP call
ROUNDS = 40  # rounds of the mixed calls below
READS_FIRST = 20  # pairs of reads after a cut, before anything else


@pytest.fixture
def web(process_env, tmp_path) -> Iterator[str]:
    flow_publish(definition=copy.deepcopy(FLOW))
    with gunicorn_process(process_env, tmp_path / "web.log") as base:
        yield base


def backends(conn: psycopg.Connection) -> set[int]:
    """The runtime role's other sessions on the test database: the web server's (nothing else of
    the test connects as that role; `conn` is one, and may signal them: they are its role's)."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE usename = %s AND datname = %s AND pid <> "
        "pg_backend_pid()",
        [runtime_settings()["USER"], runtime_settings()["NAME"]],
    ).fetchall()
    return {pid for (pid,) in rows}


def mixed_calls(base: str, session: requests.Session) -> list[int]:
    """One of each kind of answer the API gives: what each returned."""
    created = session.post(
        f"{base}/api/v1/requests", json={"flowKey": "claims", "data": {"applicant": "Ada"}}
    )
    request_id = created.json()["id"]
    transitions = f"{base}/api/v1/requests/{request_id}/transitions"
    answers = [
        created,
        session.post(transitions, json={"transitionId": "submit", "expectedRevision": 1}),
        session.post(transitions, json={"transitionId": "submit", "expectedRevision": 1}),  # 409
        session.post(transitions, json={"transitionId": "nope", "expectedRevision": 2}),  # 422
        session.post(transitions, json={"transitionId": 5, "expectedRevision": 2}),  # 400
        session.get(f"{base}/api/v1/requests/{uuid.uuid4()}"),  # 404
        session.get(f"{base}/api/v1/executions?limit=5"),
        session.get(f"{base}/api/v1/requests?cursor=forged"),  # 400 INVALID_CURSOR
        session.get(f"{base}/api/v1/executions", headers={"Authorization": "Bearer x"}),  # 401
    ]
    return [answer.status_code for answer in answers]


EXPECTED = [201, 202, 409, 422, 400, 404, 200, 400, 401]


def test_connections__are_kept_across_requests_whatever_they_answer(web, runtime_dsn):
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {tokens.token(exp_in=3600)}"
    with psycopg.connect(runtime_dsn, autocommit=True) as watcher:
        seen: set[int] = set()
        gone: set[int] = set()
        for _ in range(ROUNDS):
            assert mixed_calls(web, session) == EXPECTED
            now = backends(watcher)
            gone |= seen - now
            seen |= now
    assert not gone, f"connections closed between requests: {gone}"
    # One per server thread at most, opened once: not one per request (ROUNDS x 9 here).
    assert 1 <= len(seen) <= config.workers * max(1, getattr(config, "threads", 1))


def test_a_connection_cut_by_postgresql__is_replaced_without_a_refusal(web, runtime_dsn):
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {tokens.token(exp_in=3600)}"
    for _ in range(5):
        assert mixed_calls(web, session) == EXPECTED
    with psycopg.connect(runtime_dsn, autocommit=True) as watcher:
        cut = backends(watcher)
        assert cut
        for pid in cut:
            watcher.execute("SELECT pg_terminate_backend(%s)", [pid])
        # Reads first, so that for some server threads a read is the first statement after the
        # cut: with no health check before it, it replaces the connection itself.
        for _ in range(READS_FIRST):
            assert session.get(f"{web}/api/v1/executions?limit=2").status_code == 200
            assert session.get(f"{web}/api/v1/requests/{uuid.uuid4()}").status_code == 404
        for _ in range(10):
            assert mixed_calls(web, session) == EXPECTED
        assert not (backends(watcher) & cut)
