"""GET /metrics through Django: the text format, the queue it reflects, what it never shows, and
the optional bearer token."""

import pytest
from django.db import OperationalError
from django.test import Client

from orquestador.exposition import CONTENT_TYPE
from tests.support.prometheus import assert_no_identifiers, scrape
from tests.support.worker import claim

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "m" * 40


def get(client: Client, **headers: str):
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == CONTENT_TYPE
    assert response["Cache-Control"] == "no-store"
    return scrape(response.content.decode())


def test_metrics__reflect_queue_depth_and_the_oldest_due_age(client, conn, shaped_queue):
    found = get(client)

    assert found.value("orquestador_database_up") == 1
    assert [
        found.value("orquestador_queue_depth", status=s)
        for s in ("PENDING", "RETRY_WAIT", "RUNNING")
    ] == [1, 2, 2]
    assert [
        found.value("orquestador_queue_due", status=s) for s in ("PENDING", "RETRY_WAIT", "RUNNING")
    ] == [1, 1, 1]
    assert 90 <= found.value("orquestador_queue_oldest_due_age_seconds") < 120
    assert found.value("orquestador_reconciliation_backlog") == 1
    assert found.value("orquestador_reconciliation_oldest_age_seconds") >= 3600
    assert found.value("orquestador_requests_blocked") == 6

    claim(conn, "metrics-test", limit=3, lease_seconds=60)  # every due execution
    found = get(client)
    assert found.value("orquestador_queue_depth", status="PENDING") == 0
    assert found.value("orquestador_queue_depth", status="RUNNING") == 4
    assert found.value("orquestador_queue_depth", status="RETRY_WAIT") == 1
    assert found.value("orquestador_queue_due", status="RUNNING") == 0
    assert found.value("orquestador_queue_oldest_due_age_seconds") == 0


def test_metrics__show_no_ids_owners_tenants_or_lease_owners(client, shaped_queue):
    text = get(client).text
    ids = [str(a.execution_id) for a in shaped_queue.values()]
    ids += [str(a.request_id) for a in shaped_queue.values()]
    assert_no_identifiers(text, *ids, "alice", "acme", "host-x", "4242", "abcd1234")
    assert get(client).label_values() == {"PENDING", "RETRY_WAIT", "RUNNING", "SUSPENDED"}


def test_metrics__executions_by_final_status_are_left_to_the_workers(client, shaped_queue):
    # Counting finished executions would scan history: the web side lists none of them.
    found = get(client)
    assert not [name for name in found.types if "finished" in name or "succeeded" in name]


def test_metrics__an_unreadable_database_is_reported_not_hidden(client, monkeypatch):
    def down(**kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr("executions.metrics.views.queue_stats", down)
    found = get(client)
    assert found.value("orquestador_database_up") == 0
    assert "orquestador_queue_depth" not in found.types


def test_metrics__need_the_bearer_token_when_one_is_set(client, settings):
    settings.METRICS_TOKEN = TOKEN
    for headers in ({}, {"Authorization": "Bearer " + "x" * 40}, {"Authorization": TOKEN}):
        response = client.get("/metrics", headers=headers)
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
        assert response.json()["code"] == "UNAUTHENTICATED"
    assert get(client, Authorization=f"Bearer {TOKEN}").value("orquestador_database_up") == 1


def test_metrics__answer_get_only(client):
    assert client.post("/metrics").status_code == 405
