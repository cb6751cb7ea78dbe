"""The web process while PostgreSQL is away: stopped, crash-restarted, its connections cut.

A real web process runs on a cluster of the test's own, which the test stops and starts under it.
While the database cannot be reached, the API answers `503 {"code": "DATABASE_UNAVAILABLE"}` with
a Retry-After and changes nothing, the admin its outage page (HTML, 503), `/readyz` says why, and
`/healthz` stays 200; once the database is back, the same calls succeed without restarting the
web process.
"""

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
import requests

from tests.support import tokens
from tests.support.cluster import Cluster, own_cluster
from tests.support.web import web_process
from tests.support.worker import create_flow, flow_definition, wait_until

pytestmark = pytest.mark.process

TIMEOUT = 10  # seconds per HTTP call
RECOVERY = 30.0  # seconds for the web process to serve again once the database is back


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with own_cluster("pg-outage") as made:
        yield made


@pytest.fixture
def web(cluster, tmp_path) -> Iterator[str]:
    with web_process(cluster.env, tmp_path / "web.log") as base:
        yield base


def _draft(cluster: Cluster) -> uuid.UUID:
    request_id = uuid.uuid4()
    with psycopg.connect(cluster.env["DATABASE_URL"], autocommit=True) as conn:
        flow_id = conn.execute("SELECT id FROM flow WHERE key = 'outage'").fetchone()
        if flow_id is None:
            flow_id = (create_flow(conn, flow_definition([], key="outage")),)
        conn.execute(
            "INSERT INTO request (id, flow_id, owner, scope, data, state, revision, version) "
            "VALUES (%s, %s, 'alice', 'acme', '{}', 'DRAFT', 1, 1)",
            [request_id, flow_id[0]],
        )
    return request_id


def _calls(base: str, request_id: uuid.UUID) -> dict[str, requests.Response]:
    auth = {"Authorization": f"Bearer {tokens.token()}"}
    return {
        "read": requests.get(f"{base}/api/v1/requests/{request_id}", headers=auth, timeout=TIMEOUT),
        "accept": requests.post(
            f"{base}/api/v1/requests/{request_id}/transitions",
            json={"transitionId": "go", "expectedRevision": 1},
            headers={**auth, "Idempotency-Key": f"outage-{request_id}"},
            timeout=TIMEOUT,
        ),
    }


def _assert_unavailable(response: requests.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Retry-After"] == "5"
    body = response.json()
    assert body["code"] == "DATABASE_UNAVAILABLE"
    assert set(body) == {"code", "detail"}
    assert "Traceback" not in response.text and "127.0.0.1" not in response.text


def _get(url: str) -> requests.Response:
    return requests.get(url, timeout=TIMEOUT)


def test_web__answers_503_database_unavailable_while_the_database_is_stopped(
    cluster, web, tmp_path
):
    request_id = _draft(cluster)
    assert _calls(web, uuid.uuid4())["read"].status_code == 404  # served, with the database
    assert _get(f"{web}/readyz").status_code == 200

    cluster.stop()
    try:
        during = _calls(web, request_id)
        ready, health = _get(f"{web}/readyz"), _get(f"{web}/healthz")
        # An admin page with a session to look up: the session store is the database.
        admin = requests.get(
            f"{web}/admin/", cookies={"sessionid": "s" * 32}, timeout=TIMEOUT, allow_redirects=False
        )
    finally:
        cluster.start()

    for response in during.values():
        _assert_unavailable(response)
    assert ready.status_code == 503
    assert ready.json()["code"] == "DATABASE_UNAVAILABLE"
    assert ready.json()["reason"].startswith("database unreachable: cannot connect")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    # The admin answers its outage page, in HTML, with the same Retry-After.
    assert admin.status_code == 503 and admin.headers["Content-Type"].startswith("text/html")
    assert admin.headers["Retry-After"] == "5"
    assert "<h1>The database cannot be reached</h1>" in admin.text

    # Back: the same process serves again, and the refused acceptance changed nothing.
    wait_until(lambda: _get(f"{web}/readyz").status_code == 200, timeout=RECOVERY, what="ready")
    with psycopg.connect(cluster.admin_url) as conn:
        assert conn.execute(
            "SELECT revision, blocked_by_id FROM request WHERE id = %s", [request_id]
        ).fetchone() == (1, None)
    after = _calls(web, request_id)
    assert after["read"].status_code == 200
    assert after["accept"].status_code == 202, after["accept"].text
    log = (tmp_path / "web.log").read_text()
    outage_logs = [line for line in log.splitlines() if "database unavailable" in line]
    assert len(outage_logs) == 1, outage_logs  # once per outage, not once per request
    assert json.loads(outage_logs[0])["level"] == "WARNING"


def test_web__serves_again_after_a_crash_restart_and_cut_connections(cluster, web):
    request_id = _draft(cluster)
    assert _calls(web, uuid.uuid4())["read"].status_code == 404  # holds a connection now

    cluster.crash_restart()  # pg_ctl -m immediate: every backend killed, WAL replayed
    first = _calls(web, request_id)["read"]
    # The dead connection is noticed by the health check and replaced, or answered as a 503.
    assert first.status_code in (200, 503), first.text
    if first.status_code == 503:
        _assert_unavailable(first)
    wait_until(
        lambda: _calls(web, request_id)["read"].status_code == 200,
        timeout=RECOVERY,
        what="the API to serve after the restart",
    )

    assert cluster.terminate_runtime_backends() >= 1
    read = _calls(web, request_id)["read"]
    assert read.status_code in (200, 503), read.text
    assert _get(f"{web}/healthz").status_code == 200
    wait_until(lambda: _get(f"{web}/readyz").status_code == 200, timeout=RECOVERY, what="ready")
