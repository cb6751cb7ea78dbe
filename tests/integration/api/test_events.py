"""POST /api/v1/executions/{id}/events: resume a SUSPENDED execution, keep early events, replays,
and exactly one of concurrent resumes accepted; `waitingFor` in the execution view."""

import threading
from datetime import timedelta

import psycopg
import pytest
from django.test import Client

from executions.api.resumes import MAX_KEPT_EVENTS
from executions.queue.steps import run_sync
from executions.queue.waits import wait_reach
from tests.support import tokens
from tests.support.worker import (
    audit_events,
    checkpoint_rows,
    claim,
    create_flow,
    enqueue,
    execution_row,
    flow_definition,
    request_row,
)

from .conftest import Caller, api_enabled, assert_error, caller

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {
    "type": "object",
    "required": ["approved"],
    "properties": {"approved": {"type": "boolean"}, "comment": {"type": "string"}},
    "additionalProperties": False,
}
APPROVAL = {
    "id": "approval",
    "wait": {"event": "manager.approval", "payloadSchema": SCHEMA, "timeoutSeconds": 3600},
}
SIGNATURE = {
    "id": "signature",
    "wait": {"event": "customer.signed", "payloadSchema": {"type": "object"}, "timeoutSeconds": 60},
}


@pytest.fixture
def api():
    with api_enabled():
        yield


@pytest.fixture
def approver(api) -> Caller:
    """Same tenant as the request's owner (alice@acme), another subject, may resume."""
    return caller(sub="maria", tenant="acme", scope="executions:resume requests:read:tenant")


@pytest.fixture
def flow_id(runtime_conn):
    return create_flow(runtime_conn, flow_definition([APPROVAL, SIGNATURE], key="approvals"))


def suspend(conn: psycopg.Connection, flow_id: int):
    """An accepted execution a worker ran up to its first wait, where it suspended."""
    accepted = enqueue(conn, flow_id)
    (found,) = claim(conn, "worker-a", lease_seconds=30)
    reached = run_sync(
        conn, wait_reach(fence=found.fence, action=APPROVAL, sequence=0, payload={}, tenant="acme")
    )
    assert reached.output is None and reached.deadline is not None
    return accepted


def send(who: Caller, execution_id, event_id="ev-1", event="manager.approval", payload=None):
    body = {"eventId": event_id, "event": event, "payload": payload or {"approved": True}}
    return who.post(f"/api/v1/executions/{execution_id}/events", body)


def test_reach__suspends_until_the_deadline_with_the_lease_released(runtime_conn, flow_id):
    accepted = suspend(runtime_conn, flow_id)

    execution = execution_row(runtime_conn, accepted.execution_id)
    assert execution["status"] == "SUSPENDED"
    assert (execution["lease_owner"], execution["lease_expires_at"]) == (None, None)
    waited = execution["next_attempt_at"] - execution["started_at"]
    assert timedelta(seconds=3590) < waited < timedelta(seconds=3610)
    approval = checkpoint_rows(runtime_conn, accepted.execution_id)["approval"]
    assert (approval["status"], approval["capability"], approval["effect"]) == (
        "WAITING",
        "wait:manager.approval",
        "READ_ONLY",
    )
    assert request_row(runtime_conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id
    kind, payload = audit_events(runtime_conn, accepted.request_id)[-1]
    assert kind == "EXECUTION_SUSPENDED"
    assert (payload["actionId"], payload["event"]) == ("approval", "manager.approval")
    assert claim(runtime_conn, "worker-b") == []  # not due before its deadline


def test_view__shows_waiting_for_only_while_suspended(runtime_conn, flow_id, approver):
    accepted = suspend(runtime_conn, flow_id)
    owner = caller(sub="alice", tenant="acme")

    view = owner.get(f"/api/v1/executions/{accepted.execution_id}").json()

    deadline = execution_row(runtime_conn, accepted.execution_id)["next_attempt_at"]
    assert view["status"] == "SUSPENDED"
    assert view["waitingFor"]["actionId"] == "approval"
    assert view["waitingFor"]["event"] == "manager.approval"
    assert view["waitingFor"]["deadline"].replace("Z", "+00:00") == deadline.isoformat()
    assert send(approver, accepted.execution_id).status_code == 202
    assert "waitingFor" not in owner.get(f"/api/v1/executions/{accepted.execution_id}").json()


def test_resume__records_the_payload_requeues_and_audits_the_caller(
    runtime_conn, flow_id, approver
):
    accepted = suspend(runtime_conn, flow_id)
    token = execution_row(runtime_conn, accepted.execution_id)["fencing_token"]

    response = send(approver, accepted.execution_id, payload={"approved": True, "comment": "ok"})

    assert response.status_code == 202, response.content
    view = response.json()
    assert (view["id"], view["status"]) == (str(accepted.execution_id), "PENDING")
    assert "waitingFor" not in view
    execution = execution_row(runtime_conn, accepted.execution_id)
    assert execution["fencing_token"] == token + 1
    approval = checkpoint_rows(runtime_conn, accepted.execution_id)["approval"]
    assert (approval["status"], approval["output"]) == (
        "SUCCEEDED",
        {"approved": True, "comment": "ok"},
    )
    kind, payload = audit_events(runtime_conn, accepted.request_id)[-1]
    assert kind == "EXECUTION_RESUMED"
    assert payload == {
        "transitionId": "go",
        "actionId": "approval",
        "event": "manager.approval",
        "eventId": "ev-1",
        "principal": "maria@acme",
    }
    actor = runtime_conn.execute(
        "SELECT actor FROM audit_event WHERE type = 'EXECUTION_RESUMED'"
    ).fetchone()[0]
    assert actor == "maria"
    assert request_row(runtime_conn, accepted.request_id)["blocked_by_id"] == accepted.execution_id
    (found,) = claim(runtime_conn, "worker-b")  # due at once
    assert found.execution_id == accepted.execution_id


def test_resume__the_same_event_id_and_body_is_a_replay_even_after_the_run_moved_on(
    runtime_conn, flow_id, approver
):
    accepted = suspend(runtime_conn, flow_id)
    assert send(approver, accepted.execution_id).status_code == 202
    claim(runtime_conn, "worker-b", lease_seconds=30)  # the run moved on

    again = send(approver, accepted.execution_id)

    assert again.status_code == 200, again.content
    assert again.json()["status"] == "RUNNING"
    count = runtime_conn.execute(
        "SELECT count(*) FROM audit_event WHERE type = 'EXECUTION_RESUMED'"
    ).fetchone()[0]
    assert count == 1


def test_resume__the_same_event_id_with_another_body_is_refused(runtime_conn, flow_id, approver):
    accepted = suspend(runtime_conn, flow_id)
    assert send(approver, accepted.execution_id).status_code == 202

    reused = send(approver, accepted.execution_id, payload={"approved": False})

    assert_error(reused, 422, "IDEMPOTENCY_KEY_REUSED", "eventId")


def test_resume__a_payload_the_schema_refuses_is_event_invalid_and_changes_nothing(
    runtime_conn, flow_id, approver
):
    accepted = suspend(runtime_conn, flow_id)
    before = execution_row(runtime_conn, accepted.execution_id)

    response = send(approver, accepted.execution_id, payload={"approved": "yes", "x": 1})

    body = assert_error(response, 422, "EVENT_INVALID", "payloadSchema")
    assert body["problems"] == [
        {"path": "$", "message": "additional properties are not allowed ('x' unexpected)"},
        {"path": "$.approved", "message": "'yes' is not of type 'boolean'"},
    ]
    assert execution_row(runtime_conn, accepted.execution_id) == before
    assert checkpoint_rows(runtime_conn, accepted.execution_id)["approval"]["status"] == "WAITING"
    # The refused eventId was not spent: the corrected event is accepted under it.
    assert send(approver, accepted.execution_id).status_code == 202


@pytest.mark.parametrize(
    ("event", "fragment"),
    [("customer.signed", "waits for event 'manager.approval'"), ("other", "manager.approval")],
)
def test_resume__another_event_is_not_waiting(runtime_conn, flow_id, approver, event, fragment):
    accepted = suspend(runtime_conn, flow_id)
    assert_error(
        send(approver, accepted.execution_id, event=event, payload={"approved": True}),
        409,
        "NOT_WAITING",
        fragment,
    )
    assert execution_row(runtime_conn, accepted.execution_id)["status"] == "SUSPENDED"


def test_resume__a_finished_execution_is_not_waiting(runtime_conn, flow_id, approver):
    accepted = enqueue(runtime_conn, flow_id)
    runtime_conn.execute(
        "UPDATE execution SET status = 'FAILED', finished_at = now() WHERE id = %s",
        [accepted.execution_id],
    )
    assert_error(send(approver, accepted.execution_id), 409, "NOT_WAITING", "FAILED")


def test_resume__another_tenant_sees_not_found_and_a_caller_without_the_scope_forbidden(
    runtime_conn, flow_id, api
):
    accepted = suspend(runtime_conn, flow_id)
    elsewhere = caller(sub="maria", tenant="globex", scope="executions:resume")
    assert_error(send(elsewhere, accepted.execution_id), 404, "NOT_FOUND")
    owner_without_scope = caller(sub="alice", tenant="acme")  # requests:read requests:write
    assert_error(send(owner_without_scope, accepted.execution_id), 403, "FORBIDDEN", "resume")
    assert execution_row(runtime_conn, accepted.execution_id)["status"] == "SUSPENDED"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"event": "manager.approval", "payload": {}}, "eventId"),
        ({"eventId": "", "event": "manager.approval", "payload": {}}, "eventId"),
        ({"eventId": "a\nb", "event": "manager.approval", "payload": {}}, "eventId"),
        ({"eventId": "x" * 256, "event": "manager.approval", "payload": {}}, "eventId"),
        ({"eventId": "e", "event": "bad name", "payload": {}}, "event"),
        ({"eventId": "e", "event": "manager.approval", "payload": []}, "payload"),
        ({"eventId": "e", "event": "manager.approval"}, "payload"),
        ({"eventId": "e", "event": "manager.approval", "payload": {}, "extra": 1}, "extra"),
        (
            {"eventId": "e", "event": "manager.approval", "payload": {"x": "y" * 270_000}},
            "payload",
        ),
    ],
)
def test_resume__a_malformed_body_is_refused_naming_the_field(
    runtime_conn, flow_id, approver, body, field
):
    accepted = suspend(runtime_conn, flow_id)
    response = approver.post(f"/api/v1/executions/{accepted.execution_id}/events", body)
    assert_error(response, 400, "INVALID_BODY", field)


def test_early_event__is_kept_and_consumed_when_the_wait_is_reached(
    runtime_conn, flow_id, approver
):
    accepted = enqueue(runtime_conn, flow_id)  # PENDING: the wait lies ahead

    response = send(approver, accepted.execution_id, payload={"approved": False})

    assert response.status_code == 202, response.content
    assert response.json()["status"] == "PENDING"
    assert send(approver, accepted.execution_id, payload={"approved": False}).status_code == 200
    (found,) = claim(runtime_conn, "worker-a", lease_seconds=30)
    reached = run_sync(
        runtime_conn,
        wait_reach(
            fence=found.fence,
            action=APPROVAL,
            sequence=0,
            payload={},
            tenant="acme",
        ),
    )
    assert reached.output == {"approved": False}
    assert reached.deadline is None
    execution = execution_row(runtime_conn, accepted.execution_id)
    assert execution["status"] == "RUNNING"  # it goes on without suspending
    approval = checkpoint_rows(runtime_conn, accepted.execution_id)["approval"]
    assert (approval["status"], approval["output"]) == ("SUCCEEDED", {"approved": False})
    kind, payload = audit_events(runtime_conn, accepted.request_id)[-1]
    assert (kind, payload["eventId"]) == ("EXECUTION_RESUMED", "ev-1")
    assert payload["principal"] == "maria@acme"  # its sender caused this resume
    status = runtime_conn.execute("SELECT status FROM execution_event").fetchone()[0]
    assert status == "CONSUMED"


def test_early_event__a_second_one_for_the_same_wait_or_one_for_no_wait_is_not_waiting(
    runtime_conn, flow_id, approver
):
    accepted = enqueue(runtime_conn, flow_id)
    assert send(approver, accepted.execution_id, "a").status_code == 202
    assert_error(send(approver, accepted.execution_id, "b"), 409, "NOT_WAITING", "lies ahead")
    assert_error(
        send(approver, accepted.execution_id, "c", event="nobody.waits"), 409, "NOT_WAITING"
    )
    assert send(approver, accepted.execution_id, "d", event="customer.signed").status_code == 202


def test_early_event__the_payload_is_checked_when_it_is_kept(runtime_conn, flow_id, approver):
    accepted = enqueue(runtime_conn, flow_id)
    response = send(approver, accepted.execution_id, payload={"approved": 1})
    assert_error(response, 422, "EVENT_INVALID")
    assert runtime_conn.execute("SELECT count(*) FROM execution_event").fetchone()[0] == 0


def test_early_event__at_most_sixteen_are_kept(runtime_conn, approver):
    waits = [
        {
            "id": f"w{i}",
            "wait": {
                "event": f"step.{i}",
                "payloadSchema": {"type": "object"},
                "timeoutSeconds": 9,
            },
        }
        for i in range(MAX_KEPT_EVENTS + 1)
    ]
    flow_id = create_flow(runtime_conn, flow_definition(waits, key="many-waits"))
    accepted = enqueue(runtime_conn, flow_id)
    for i in range(MAX_KEPT_EVENTS):
        assert send(approver, accepted.execution_id, f"e{i}", f"step.{i}", {}).status_code == 202
    last = send(approver, accepted.execution_id, "e16", "step.16", {})
    assert_error(last, 409, "NOT_WAITING", f"already keeps {MAX_KEPT_EVENTS}")


def test_resume__eight_concurrent_resumes_accept_exactly_one(runtime_conn, flow_id, api):
    accepted = suspend(runtime_conn, flow_id)
    senders = 8
    barrier = threading.Barrier(senders)
    answers: list[int] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def resume(index: int) -> None:
        try:
            who = Caller(
                tokens.token(sub=f"m{index}", tenant="acme", scope="executions:resume"), Client()
            )
            barrier.wait(timeout=10)
            status = send(who, accepted.execution_id, f"ev-{index}").status_code
            with lock:
                answers.append(status)
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)
        finally:
            from django.db import connection

            connection.close()

    threads = [threading.Thread(target=resume, args=(i,)) for i in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures
    assert sorted(answers) == [202] + [409] * 7
    assert runtime_conn.execute("SELECT count(*) FROM execution_event").fetchone()[0] == 1
    resumed = runtime_conn.execute(
        "SELECT count(*) FROM audit_event WHERE type = 'EXECUTION_RESUMED'"
    ).fetchone()[0]
    assert resumed == 1
    assert execution_row(runtime_conn, accepted.execution_id)["status"] == "PENDING"
