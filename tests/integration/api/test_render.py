"""The hot endpoints' plain builders (executions/api/render.py, acceptbody.py) against the
serializers that describe them: the same JSON, key for key and in the same order, for rows as the
database holds them; and an acceptance body taken as it is only when the serializer would take it
unchanged."""

import datetime
import json
import zoneinfo

import pytest
from django.utils import timezone
from rest_framework import serializers

from executions.api import selectors
from executions.api.acceptbody import plain_check, plainly_valid
from executions.api.render import action_view, execution_view, request_view
from executions.api.serializers import (
    MAX_REVISION,
    ExecutionActionSerializer,
    ExecutionCancelSerializer,
    ExecutionEventSerializer,
    ExecutionViewSerializer,
    RequestCreateSerializer,
    RequestViewSerializer,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    TransitionAcceptSerializer,
)
from executions.flows.problems import MAX_NAME_LENGTH
from executions.models import (
    TERMINAL_STATUSES,
    ActionExecution,
    Execution,
    ExecutionStatus,
    Request,
)
from executions.queue.waits import waiting_for, waiting_for_each
from orquestador.auth import REQUESTS_READ, Principal

pytestmark = pytest.mark.django_db

ALICE = Principal(subject="alice", tenant="acme", permissions=frozenset({REQUESTS_READ}))
MOMENT = datetime.datetime(2026, 12, 1, 23, 59, 58, 123456, tzinfo=datetime.UTC)


def same(built: dict, serialized: dict) -> None:
    assert json.dumps(built) == json.dumps(serialized)  # values, keys and their order


@pytest.fixture
def request_row(alice, flow) -> Request:
    created = alice.create({"applicant": "Ada", "amount": 12.5, "notes": "é ☃ \u2028"})
    return Request.objects.select_related("flow").get(id=created["id"])


@pytest.mark.parametrize("status", ExecutionStatus.values)
def test_execution_view__is_the_serializers_for_every_status(alice, request_row, status):
    execution = Execution.objects.create(
        request=request_row,
        flow=request_row.flow,
        transition_id="submit",
        accepted_revision=2,
        status=status,
        result={"outcome": "DONE", "targetState": "SUBMITTED"} if status == "SUCCEEDED" else None,
        error_code="PERMANENT_FAILURE" if status == "FAILED" else None,
        attempts=3,
        finished_at=MOMENT if status in TERMINAL_STATUSES else None,
        lease_owner="w" if status == "RUNNING" else None,
        lease_expires_at=MOMENT if status == "RUNNING" else None,
        next_attempt_at=MOMENT,
    )
    if status == "SUSPENDED":
        ActionExecution.objects.create(
            execution=execution,
            action_id="approval",
            sequence=0,
            capability="wait:approved",
            capability_version=1,
            effect="READ_ONLY",
            status="WAITING",
            input_hash="0" * 64,
            external_key=f"{execution.id}:approval",
            fencing_token=1,
        )
    # The dict from the row the API reads, the serializer's answer from the model instance.
    stored = Execution.objects.get(id=execution.id)
    row = selectors.execution_get(principal=ALICE, execution_id=str(execution.id))
    waiting = waiting_for(row)
    assert (waiting is not None) == (status == "SUSPENDED")
    same(execution_view(row, waiting), ExecutionViewSerializer(stored).data)
    # A page's statement for what its executions wait for gives the same.
    page = waiting_for_each([stored])
    same(
        execution_view(row, waiting_for_each([row]).get(row.id)),
        ExecutionViewSerializer(stored, context={"waiting": page}).data,
    )


def test_execution_view__shows_what_a_route_limit_holds_back_as_the_serializer_does(request_row):
    execution = Execution.objects.create(
        request=request_row,
        flow=request_row.flow,
        transition_id="submit",
        accepted_revision=2,
        status="PENDING",
        attempts=1,
        next_attempt_at=MOMENT,
    )
    stored = Execution.objects.get(id=execution.id)
    row = selectors.execution_get(principal=ALICE, execution_id=str(execution.id))
    for until in (MOMENT, None):  # None: it waits for a call in flight to end
        throttled = {"actionId": "charge", "capability": "payments.charge@1", "until": until}
        built = execution_view(row, None, throttled=throttled)
        context = {"waiting": {str(stored.id): None}, "throttled": {str(stored.id): throttled}}
        same(built, ExecutionViewSerializer(stored, context=context).data)
        assert built["throttled"]["capability"] == "payments.charge@1"


def test_execution_view__of_a_fresh_acceptance_is_what_a_read_answers(alice, flow):
    created = alice.create()
    accepted = alice.accept(created["id"], "submit", 1)
    assert accepted.status_code == 202, accepted.content
    read = alice.get(f"/api/v1/executions/{accepted.json()['id']}")
    assert read.json() == accepted.json()
    stored = Execution.objects.get(id=accepted.json()["id"])
    same(accepted.json(), ExecutionViewSerializer(stored).data)


@pytest.mark.parametrize("blocked", [False, True])
def test_request_view__is_the_serializers(alice, request_row, blocked):
    if blocked:
        alice.accept(str(request_row.id), "submit", 1)
    stored = Request.objects.select_related("flow").get(id=request_row.id)
    assert (stored.blocked_by_id is not None) == blocked
    read = selectors.request_get(principal=ALICE, request_id=str(request_row.id))
    same(request_view(read), RequestViewSerializer(stored).data)


@pytest.mark.parametrize("zone", ["UTC", "America/Caracas", "Asia/Kathmandu"])
def test_fixed_reads__render_as_the_serializers_in_any_current_zone(alice, request_row, zone):
    # The fixed reads give naive UTC times (executions/sql/rows.py); a page of each too.
    execution = Execution.objects.create(
        request=request_row,
        flow=request_row.flow,
        transition_id="submit",
        accepted_revision=2,
        status="SUCCEEDED",
        result={"outcome": "DONE", "targetState": "SUBMITTED"},
        finished_at=MOMENT,
    )
    assert alice.accept(str(request_row.id), "submit", 1).status_code == 202
    with timezone.override(zone):
        stored = Execution.objects.get(id=execution.id)
        read = selectors.execution_get(principal=ALICE, execution_id=str(execution.id))
        same(execution_view(read), ExecutionViewSerializer(stored).data)
        assert execution_view(read)["finishedAt"].endswith("Z") == (zone == "UTC")
        page = selectors.execution_list(principal=ALICE, filters={}, limit=5, position=None)
        for row in page.rows:  # the SUCCEEDED one and the acceptance with no result yet
            model = Execution.objects.get(id=row.id)
            same(execution_view(row), ExecutionViewSerializer(model).data)
        assert len(page.rows) == 2
        stored_request = Request.objects.select_related("flow").get(id=request_row.id)
        listed = selectors.request_list(principal=ALICE, filters={}, limit=5, position=None)
        same(request_view(listed.rows[0]), RequestViewSerializer(stored_request).data)


@pytest.mark.parametrize(
    "moment",
    [
        MOMENT,
        MOMENT.replace(microsecond=0),  # no fraction at all
        MOMENT.replace(microsecond=100_000),  # the fraction's trailing zeros kept
        MOMENT.replace(microsecond=1),
        datetime.datetime(1, 1, 1, tzinfo=datetime.UTC),  # a year of one digit, padded
        datetime.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=datetime.UTC),
        datetime.datetime(2026, 3, 29, 1, 30, 7, 5, tzinfo=zoneinfo.ZoneInfo("Europe/Lisbon")),
    ],
)
def test_fixed_reads__write_their_times_as_drf_does(alice, request_row, moment):
    # The statements write a row's times themselves (executions/sql/rows.py): the same text as DRF's
    # DateTimeField writes for the time in UTC, the zone the API answers in.
    execution = Execution.objects.create(
        request=request_row,
        flow=request_row.flow,
        transition_id="submit",
        accepted_revision=2,
        status="SUSPENDED",  # whose deadline (next_attempt_at) its view shows
        finished_at=moment,  # not a SUSPENDED one's, but written all the same
        next_attempt_at=moment,
    )
    Execution.objects.filter(id=execution.id).update(created_at=moment)
    Request.objects.filter(id=request_row.id).update(created_at=moment, updated_at=moment)
    with timezone.override("UTC"):
        expected = serializers.DateTimeField().to_representation(moment)
        read = selectors.execution_get(principal=ALICE, execution_id=str(execution.id))
        (listed,) = selectors.execution_list(
            principal=ALICE, filters={}, limit=5, position=None
        ).rows
        request = selectors.request_get(principal=ALICE, request_id=str(request_row.id))
        (listed_request,) = selectors.request_list(
            principal=ALICE, filters={}, limit=5, position=None
        ).rows
    for row in (read, listed):
        assert (row.created_at, row.finished_at, row.next_attempt_at) == (expected,) * 3
    for row in (request, listed_request):
        assert (row.created_at, row.updated_at) == (expected,) * 2


@pytest.mark.parametrize("action_id", ["reserve", "reserve:compensate"])
def test_action_view__is_the_serializers(alice, request_row, action_id):
    execution = Execution.objects.create(
        request=request_row, flow=request_row.flow, transition_id="submit", accepted_revision=2
    )
    ActionExecution.objects.create(
        execution=execution,
        action_id=action_id,
        sequence=0,
        capability="shop.reserve",
        capability_version=2,
        effect="IDEMPOTENT_WRITE",
        status="FAILED",
        input_hash="0" * 64,
        external_key=f"{execution.id}:{action_id}",
        fencing_token=1,
        error_code="PROVIDER_REJECTED",
        finished_at=MOMENT,
    )
    stored = ActionExecution.objects.get(execution=execution)
    same(action_view(stored), ExecutionActionSerializer(stored).data)


# -- the acceptance's body -----------------------------------------------------------------------

TAKEN_AS_THEY_ARE = [
    {"transitionId": "submit", "expectedRevision": 1},
    {"expectedRevision": MAX_REVISION, "transitionId": "x" * MAX_NAME_LENGTH},
    {"transitionId": " spaced ", "expectedRevision": 7},
    {"transitionId": "é☃😀", "expectedRevision": 2},
]
LEFT_TO_THE_SERIALIZER = [
    None,
    [],
    "submit",
    {},
    {"transitionId": "submit"},
    {"expectedRevision": 1},
    {"transitionId": "submit", "expectedRevision": 1, "extra": 1},
    {"transitionId": "", "expectedRevision": 1},
    {"transitionId": "x" * (MAX_NAME_LENGTH + 1), "expectedRevision": 1},
    {"transitionId": "a\x00b", "expectedRevision": 1},
    {"transitionId": "a\ud800", "expectedRevision": 1},
    {"transitionId": 5, "expectedRevision": 1},
    {"transitionId": None, "expectedRevision": 1},
    {"transitionId": "submit", "expectedRevision": True},
    {"transitionId": "submit", "expectedRevision": "1"},
    {"transitionId": "submit", "expectedRevision": 1.0},
    {"transitionId": "submit", "expectedRevision": 0},
    {"transitionId": "submit", "expectedRevision": -1},
    {"transitionId": "submit", "expectedRevision": MAX_REVISION + 1},
    {"transitionId": "submit", "expectedRevision": None},
]


@pytest.mark.parametrize("body", TAKEN_AS_THEY_ARE, ids=repr)
def test_accept_body__taken_as_it_is_only_what_the_serializer_takes_unchanged(body):
    assert plainly_valid(body)
    serializer = TransitionAcceptSerializer(data=body)
    assert serializer.is_valid(), serializer.errors
    assert dict(serializer.validated_data) == body


@pytest.mark.parametrize("body", LEFT_TO_THE_SERIALIZER, ids=repr)
def test_accept_body__anything_else_goes_to_the_serializer(body):
    assert not plainly_valid(body)


def test_accept_body__a_refused_one_still_names_its_field(alice, flow):
    created = alice.create()
    response = alice.post(
        f"/api/v1/requests/{created['id']}/transitions",
        {"transitionId": "submit", "expectedRevision": True},
    )
    assert response.status_code == 400
    assert response.json() == {
        "code": "INVALID_BODY",
        "detail": "expectedRevision: must be an integer",
    }


class _Untrimmed(StrictSerializer):
    name = StrictCharField(min_length=1, max_length=5, trim_whitespace=True)


class _Unbounded(StrictSerializer):
    count = StrictIntegerField(min_value=1)


class _Optional(StrictSerializer):
    count = StrictIntegerField(min_value=1, max_value=5, required=False)


@pytest.mark.parametrize(
    "serializer_class",
    [
        # A pattern, a method of their own, an object, an optional field: rules it does not check.
        ExecutionCancelSerializer,
        ExecutionEventSerializer,
        RequestCreateSerializer,
        _Untrimmed,
        _Unbounded,
        _Optional,
    ],
)
def test_plain_check__will_not_vouch_for_rules_it_does_not_check(serializer_class):
    with pytest.raises(ValueError, match="cannot vouch"):
        plain_check(serializer_class)
