"""GET /api/v1/requests and GET /api/v1/executions: newest first, filtered, paged by a cursor
that opens only the next page of the list, caller and filters it came from."""

import base64
import datetime
import json
import uuid
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.utils.crypto import salted_hmac

from executions.api import cursors
from executions.flows.publication import flow_publish
from executions.models import ActionExecution, Execution, ExecutionStatus, Request

from .conftest import FLOW, assert_error, flow_definition

pytestmark = pytest.mark.django_db

BASE = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)


def at(minutes: int) -> datetime.datetime:
    return BASE + datetime.timedelta(minutes=minutes)


def stamp(moment: datetime.datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def page(caller, path: str, **query) -> dict:
    response = caller.get(f"{path}?{urlencode(query)}" if query else path)
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"results", "next"}
    return body


def every(caller, path: str, **query) -> list[dict]:
    """Every row of a list, page by page, following `next` with the same filters."""
    rows, cursor = [], None
    for _ in range(100):
        body = page(caller, path, **query, **({"cursor": cursor} if cursor else {}))
        rows += body["results"]
        cursor = body["next"]
        if cursor is None:
            return rows
    raise AssertionError("the list did not end")


@pytest.fixture
def requests_made(alice, bob, flow) -> dict[str, list[str]]:
    """Alice's six requests and Bob's two, created a minute apart (alice's first the oldest)."""
    ids = {
        "alice": [alice.create()["id"] for _ in range(6)],
        "bob": [bob.create()["id"] for _ in range(2)],
    }
    order = ids["alice"] + ids["bob"]
    for minute, request_id in enumerate(order):
        Request.objects.filter(id=request_id).update(created_at=at(minute), updated_at=at(minute))
    return ids


def test_requests__newest_first_only_the_callers_own(alice, bob, requests_made):
    body = page(alice, "/api/v1/requests")
    assert [r["id"] for r in body["results"]] == requests_made["alice"][::-1]
    assert body["next"] is None
    assert set(body["results"][0]) == {
        "id",
        "flowKey",
        "flowVersion",
        "state",
        "revision",
        "data",
        "blocked",
        "createdAt",
        "updatedAt",
    }
    assert [r["id"] for r in page(bob, "/api/v1/requests")["results"]] == requests_made["bob"][::-1]


def test_requests__the_tenant_with_read_tenant_and_nothing_elsewhere(
    auditor, alice_elsewhere, requests_made
):
    everyone = requests_made["alice"] + requests_made["bob"]
    assert [r["id"] for r in every(auditor, "/api/v1/requests", limit=3)] == everyone[::-1]
    assert page(alice_elsewhere, "/api/v1/requests") == {"results": [], "next": None}


def test_requests__pages_follow_each_other_and_the_limit_may_change(alice, requests_made):
    first = page(alice, "/api/v1/requests", limit=2)
    assert len(first["results"]) == 2 and first["next"]
    second = page(alice, "/api/v1/requests", limit=3, cursor=first["next"])
    third = page(alice, "/api/v1/requests", limit=5, cursor=second["next"])
    seen = [r["id"] for r in first["results"] + second["results"] + third["results"]]
    assert seen == requests_made["alice"][::-1]
    assert third["next"] is None
    exact = page(alice, "/api/v1/requests", limit=6)
    assert exact["next"] is None  # no empty page after a full one


def test_requests__rows_at_the_same_instant_are_paged_by_id(alice, requests_made):
    Request.objects.filter(id__in=requests_made["alice"]).update(created_at=at(0))
    rows = every(alice, "/api/v1/requests", limit=1)
    assert [r["id"] for r in rows] == sorted(requests_made["alice"], reverse=True)


def test_requests__filters(alice, flow, requests_made):
    mine = requests_made["alice"]
    Request.objects.filter(id=mine[1]).update(state="SUBMITTED", updated_at=at(100))
    other_flow, _ = flow_publish(definition=flow_definition(key="other"))
    Request.objects.filter(id=mine[2]).update(flow=other_flow)
    assert alice.accept(mine[3], "submit", 1).status_code == 202  # blocks it until it runs
    Request.objects.filter(id=mine[3]).update(updated_at=at(3))

    def ids(**query) -> list[str]:
        return [r["id"] for r in every(alice, "/api/v1/requests", **query)]

    assert ids(state="SUBMITTED") == [mine[1]]
    assert ids(state="DRAFT", flowKey=FLOW["key"]) == [m for m in mine[::-1] if m not in mine[1:3]]
    assert ids(flowKey="other") == [mine[2]]
    assert ids(flowKey="nope") == []
    assert ids(blocked="true") == [mine[3]]
    assert mine[3] not in ids(blocked="false") and len(ids(blocked="false")) == 5
    # strict bounds: the row at exactly that instant is not included
    assert ids(createdAfter=stamp(at(3))) == [mine[5], mine[4]]
    assert ids(createdBefore=stamp(at(2))) == [mine[1], mine[0]]
    assert ids(createdAfter=stamp(at(1)), createdBefore=stamp(at(3))) == [mine[2]]
    assert ids(updatedAfter=stamp(at(99))) == [mine[1]]
    # the same instant in another offset
    assert ids(createdAfter="2026-03-01T13:03:00+01:00") == [mine[5], mine[4]]


def test_requests__finer_than_microseconds_rounds_so_bounds_stay_strict(alice, requests_made):
    mine = requests_made["alice"]
    Request.objects.filter(id=mine[0]).update(created_at=at(0) + datetime.timedelta(microseconds=5))
    just_after = "2026-03-01T12:00:00.0000051Z"  # 5.1 µs: after the row
    just_before = "2026-03-01T12:00:00.0000049Z"  # 4.9 µs: before the row

    def ids(**query) -> list[str]:
        return [r["id"] for r in every(alice, "/api/v1/requests", **query)]

    assert mine[0] in ids(createdBefore=just_after)
    assert mine[0] not in ids(createdAfter=just_after)
    assert mine[0] in ids(createdAfter=just_before)
    assert mine[0] not in ids(createdBefore=just_before)


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("nope=1", "nope"),
        ("state=A&state=B", "state"),
        ("state=", "state"),
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("limit=ten", "limit"),
        ("limit=%EF%BC%95", "limit"),  # a full-width digit
        ("blocked=yes", "blocked"),
        ("createdAfter=2026-03-01T12:00:00", "createdAfter"),  # no offset
        ("createdAfter=2026-03-01T12:00:00+01:00", "%2B"),  # a '+' sent unencoded
        ("createdBefore=2026-02-30T12:00:00Z", "createdBefore"),
        ("updatedAfter=yesterday", "updatedAfter"),
        ("flowKey=" + "k" * 101, "flowKey"),
        ("state=a%00b", "state"),
        ("cursor=", "cursor"),
    ],
)
def test_requests__a_bad_query_is_400_naming_the_parameter(alice, flow, query, names):
    assert_error(alice.get(f"/api/v1/requests?{query}"), 400, "INVALID_QUERY", names)


@pytest.mark.parametrize(
    "query",
    [
        "status=NOPE",
        "requestId=not-a-uuid",
        "errorCode=" + "E" * 65,
        "finishedAfter=2026-13-01T00:00:00Z",
        "flowKey=claims",  # a request filter, not an execution one
    ],
)
def test_executions__a_bad_query_is_400_naming_the_parameter(alice, flow, query):
    name = query.split("=", 1)[0]
    assert_error(alice.get(f"/api/v1/executions?{query}"), 400, "INVALID_QUERY", name)


def test_times_at_the_edges_of_the_calendar_are_taken(alice, requests_made):
    mine = requests_made["alice"]
    assert len(every(alice, "/api/v1/requests", createdAfter="0001-01-01T00:00:00+05:00")) == 6
    assert every(alice, "/api/v1/requests", createdAfter="9999-12-31T23:59:59-05:00") == []
    assert len(every(alice, "/api/v1/requests", createdAfter="2016-12-31T23:59:60Z")) == 6
    assert every(alice, "/api/v1/requests", createdBefore="0001-01-01T00:00:00Z") == []
    assert mine


def _tampered(cursor: str) -> list[str]:
    swap = {c: ("B" if c == "A" else "A") for c in set(cursor)}
    return [cursor[:i] + swap[cursor[i]] + cursor[i + 1 :] for i in range(len(cursor))]


def test_cursor__any_changed_character_is_refused(alice, requests_made):
    cursor = page(alice, "/api/v1/requests", limit=2)["next"]
    for changed in [*_tampered(cursor), cursor[:-1], cursor + "A", "x" * len(cursor)]:
        response = alice.get(f"/api/v1/requests?{urlencode({'limit': 2, 'cursor': changed})}")
        assert_error(response, 400, "INVALID_CURSOR")


def test_cursor__only_with_its_filters_and_its_caller(alice, bob, auditor, requests_made):
    cursor = page(alice, "/api/v1/requests", limit=2, state="DRAFT")["next"]
    assert page(alice, "/api/v1/requests", limit=2, state="DRAFT", cursor=cursor)["results"]
    for who, query in [
        (alice, {"cursor": cursor}),  # without its filter
        (alice, {"state": "SUBMITTED", "cursor": cursor}),  # another value
        (alice, {"state": "DRAFT", "blocked": "false", "cursor": cursor}),  # one more filter
        (bob, {"state": "DRAFT", "cursor": cursor}),  # another owner
        (auditor, {"state": "DRAFT", "cursor": cursor}),  # the tenant's reader
    ]:
        response = who.get(f"/api/v1/requests?{urlencode(query)}")
        assert_error(response, 400, "INVALID_CURSOR")
    # nor on the other list
    response = alice.get(f"/api/v1/executions?{urlencode({'cursor': cursor})}")
    assert_error(response, 400, "INVALID_CURSOR")


def test_cursor__made_with_another_secret_key_is_refused(alice, requests_made, settings):
    cursor = page(alice, "/api/v1/requests", limit=2)["next"]
    settings.SECRET_KEY = "another-" + settings.SECRET_KEY
    assert_error(alice.get(f"/api/v1/requests?limit=2&cursor={cursor}"), 400, "INVALID_CURSOR")


def test_cursor__is_signed_as_django_s_salted_hmac_signs_it(alice, requests_made, settings):
    """The HMAC is salted_hmac's byte for byte (executions/api/cursors.py computes it faster), so
    the cursors a server gave before an upgrade still open after it."""
    cursor = page(alice, "/api/v1/requests", limit=2, state="DRAFT")["next"]
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    body, mac = raw[: -cursors.MAC_BYTES], raw[-cursors.MAC_BYTES :]
    message = json.dumps(
        ["requests", ["acme", "alice", False], {"state": "DRAFT"}],
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    ).encode()
    expected = salted_hmac("orquestador.lists.cursor", message + body, algorithm="sha256")
    assert mac == expected.digest()[: cursors.MAC_BYTES]


# -- executions -------------------------------------------------------------------------------


@pytest.fixture
def executions_made(alice, bob, flow) -> dict[str, list[str]]:
    """Alice's four executions (on two requests) and Bob's one, a minute apart."""
    made: dict[str, list[str]] = {"alice": [], "bob": []}
    for who, name, count in ((alice, "alice", 2), (bob, "bob", 1)):
        for _ in range(count):
            created = who.create()
            first = who.accept(created["id"], "submit", 1).json()
            Execution.objects.filter(id=first["id"]).update(
                status=ExecutionStatus.SUCCEEDED, finished_at=at(50)
            )
            Request.objects.filter(id=created["id"]).update(
                blocked_by=None, state="SUBMITTED", revision=2
            )
            made[name].append(first["id"])
            if name == "alice":
                made[name].append(who.accept(created["id"], "close", 2).json()["id"])
    for minute, execution_id in enumerate(made["alice"] + made["bob"]):
        Execution.objects.filter(id=execution_id).update(created_at=at(minute))
    return made


def test_executions__newest_first_only_the_callers_and_the_tenants(
    alice, bob, auditor, alice_elsewhere, executions_made
):
    mine = executions_made["alice"]
    body = page(alice, "/api/v1/executions")
    assert [e["id"] for e in body["results"]] == mine[::-1]
    assert body["results"][0] == alice.get(f"/api/v1/executions/{mine[-1]}").json()
    assert [e["id"] for e in every(bob, "/api/v1/executions")] == executions_made["bob"]
    everyone = mine + executions_made["bob"]
    assert [e["id"] for e in every(auditor, "/api/v1/executions", limit=2)] == everyone[::-1]
    assert every(alice_elsewhere, "/api/v1/executions") == []


def test_executions__filters(alice, executions_made):
    mine = executions_made["alice"]
    Execution.objects.filter(id=mine[0]).update(
        status=ExecutionStatus.FAILED, error_code="PERMANENT_FAILURE", finished_at=at(60)
    )
    request_id = str(Execution.objects.get(id=mine[2]).request_id)

    def ids(**query) -> list[str]:
        return [e["id"] for e in every(alice, "/api/v1/executions", **query)]

    assert ids(status="FAILED") == [mine[0]]
    assert ids(status="PENDING") == [mine[3], mine[1]]
    assert ids(status="PENDING", createdAfter=stamp(at(1))) == [mine[3]]
    assert ids(requestId=request_id) == [mine[3], mine[2]]
    assert ids(requestId=str(uuid.uuid4())) == []
    assert ids(transitionId="close") == [mine[3], mine[1]]
    assert ids(errorCode="PERMANENT_FAILURE") == [mine[0]]
    assert ids(createdBefore=stamp(at(1))) == [mine[0]]
    assert ids(finishedAfter=stamp(at(50))) == [mine[0]]
    assert ids(finishedAfter=stamp(at(49))) == [mine[2], mine[0]]


def test_executions__a_compensated_one_is_listed_and_viewed_with_its_error_code(
    alice, executions_made
):
    mine = executions_made["alice"]
    Execution.objects.filter(id=mine[2]).update(
        status=ExecutionStatus.COMPENSATED,
        error_code="PERMANENT_FAILURE",
        compensation_cause="PERMANENT_FAILURE",
    )
    listed = every(alice, "/api/v1/executions", status="COMPENSATED")
    assert [(e["id"], e["status"], e["errorCode"]) for e in listed] == [
        (mine[2], "COMPENSATED", "PERMANENT_FAILURE")
    ]
    view = alice.get(f"/api/v1/executions/{mine[2]}").json()
    assert (view["status"], view["errorCode"]) == ("COMPENSATED", "PERMANENT_FAILURE")
    assert "compensationCause" not in view and "compensation_cause" not in view


def suspend(execution_id: str) -> None:
    """The execution SUSPENDED on a wait for event `approved`."""
    Execution.objects.filter(id=execution_id).update(status=ExecutionStatus.SUSPENDED)
    ActionExecution.objects.create(
        execution_id=execution_id,
        action_id="approval",
        sequence=0,
        capability="wait:approved",
        capability_version=1,
        effect="READ_ONLY",
        status="WAITING",
        input_hash="0" * 64,
        external_key=f"{execution_id}:approval",
        fencing_token=1,
    )


def test_executions__a_suspended_one_shows_what_it_waits_for(alice, executions_made):
    mine = executions_made["alice"]
    suspend(mine[1])
    listed = {e["id"]: e for e in page(alice, "/api/v1/executions")["results"]}
    assert listed[mine[1]] == alice.get(f"/api/v1/executions/{mine[1]}").json()
    assert listed[mine[1]]["waitingFor"]["event"] == "approved"
    assert "waitingFor" not in listed[mine[0]]


def test_executions__copy_their_requests_scope_and_owner_whatever_the_insert_says(
    alice, executions_made
):
    execution = Execution.objects.get(id=executions_made["alice"][0])
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO execution (id, request_id, flow_id, transition_id, accepted_revision, "
            "actor_snapshot, scope, owner) VALUES (%s, %s, %s, 'close', 3, '{}', 'evil', 'mallory')"
            " RETURNING scope, owner",
            [uuid.uuid4(), execution.request_id, execution.flow_id],
        )
        assert cursor.fetchone() == ("acme", "alice")
