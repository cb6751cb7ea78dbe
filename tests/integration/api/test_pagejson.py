"""A page written as JSON text (executions/api/pagejson.py) against what JSONRenderer writes for
render.py's dicts: the same bytes, for every kind of value a row can hold, in UTC and in another
zone, with and without the optional objects and the next cursor."""

import itertools
import json

import pytest
from django.utils import timezone
from rest_framework.renderers import JSONRenderer

from executions.api.pagejson import (
    PageRenderer,
    encoded,
    execution_item,
    execution_items,
    page_body,
    request_item,
    request_items,
)
from executions.api.render import execution_view, request_view
from executions.sql.rows import ExecutionRow, RequestRow

# As the fixed reads give their times: the API's text in UTC (test_render.py holds the statements'
# text to DRF's).
PRECISE = "2026-12-01T23:59:58.123456Z"
WHOLE = "2026-12-01T00:00:00Z"  # isoformat writes no fraction
# Texts JSON escapes, texts it must not, and the two JavaScript line terminators.
AWKWARD = ['q"uote', "back\\slash", "ctl\x01\n\t", "é☃😀", "line\u2028sep\u2029", "", "plain"]
DATA = [
    {},
    {"a": [1, 2.5, -0.0, 10**30, True, None], "é": {"x": "y\u2028"}, "": 'q"\\'},
    [1, "two"],
    "text",
    7,
    None,
]


def executions() -> list[ExecutionRow]:
    rows = []
    for n, (text, when) in enumerate(itertools.product(AWKWARD, (PRECISE, WHOLE, None))):
        rows.append(
            ExecutionRow(
                id=f"00000000-0000-4000-8000-{n:012d}",
                request_id=f"00000000-0000-4000-9000-{n:012d}",
                transition_id=text or "t",
                status=text or "PENDING",
                attempts=n,
                next_attempt_at=when,
                outcome=text if n % 2 else None,
                target_state=None if n % 2 else text,
                error_code=text if n % 3 else None,
                created_at=when or PRECISE,
                finished_at=when,
            )
        )
    return rows


def requests() -> list[RequestRow]:
    rows = []
    for n, (text, data) in enumerate(itertools.product(AWKWARD, DATA)):
        rows.append(
            RequestRow(
                id=f"00000000-0000-4000-8000-{n:012d}",
                flow_key=text or "k",
                flow_version=n + 1,
                state=text or "DRAFT",
                revision=2**63 - 1 - n,
                data=json.dumps(data, ensure_ascii=False),  # as PostgreSQL writes it: spaced
                blocked=bool(n % 2),
                created_at=PRECISE,
                updated_at=WHOLE,
            )
        )
    return rows


def rendered(results: list, after: str | None) -> bytes:
    return JSONRenderer().render({"results": results, "next": after}, "application/json")


@pytest.mark.parametrize("zone", ["UTC", "America/Sao_Paulo"])
@pytest.mark.parametrize("after", [None, "AQAF-_x"])
@pytest.mark.parametrize("extras", [True, False], ids=["some-wait-or-are-throttled", "plain"])
def test_an_execution_page__is_the_bytes_the_renderer_writes(zone, after, extras):
    rows = executions()
    wait = {"actionId": "approve", "event": "approval\u2028", "deadline": PRECISE}
    throttle = {"actionId": "charge", "capability": "payments.charge@1", "until": None}
    # Every fourth row waits, every fifth is throttled: those are encoded from their dicts.
    waiting = {row.id: wait for n, row in enumerate(rows) if extras and n % 4 == 0}
    throttled = {row.id: throttle for n, row in enumerate(rows) if extras and n % 5 == 0}
    with timezone.override(zone):
        tz = timezone.get_current_timezone()
        written = page_body(execution_items(rows, tz, waiting, throttled), after)
        expected = rendered(
            [execution_view(r, waiting.get(r.id), tz, throttled.get(r.id)) for r in rows], after
        )
    assert written == expected
    assert b"\\u2028" in written and "\u2028".encode() not in written


@pytest.mark.parametrize("zone", ["UTC", "America/Sao_Paulo"])
@pytest.mark.parametrize("after", [None, "AQAF-_x"])
def test_a_request_page__is_the_bytes_the_renderer_writes(zone, after):
    rows = requests()
    with timezone.override(zone):
        tz = timezone.get_current_timezone()
        written = page_body(request_items(rows, tz), after)
        expected = rendered([request_view(row, tz) for row in rows], after)
    assert written == expected


@pytest.mark.parametrize("zone", ["UTC", "America/Sao_Paulo"])
def test_one_item__is_the_bytes_the_renderer_writes_for_its_dict(zone):
    # What an acceptance and the reads by id answer.
    with timezone.override(zone):
        tz = timezone.get_current_timezone()
        for row in executions():
            expected = JSONRenderer().render(execution_view(row, None, tz), "application/json")
            assert encoded(execution_item(row, None, tz, None)) == expected
        for row in requests():
            expected = JSONRenderer().render(request_view(row, tz), "application/json")
            assert encoded(request_item(row, tz)) == expected


def test_an_empty_page__is_the_bytes_the_renderer_writes():
    assert page_body([], None) == rendered([], None) == b'{"results":[],"next":null}'


def test_the_page_renderer__writes_anything_else_as_json_renderer_does():
    body = {"code": "INVALID_QUERY", "detail": "é\u2028"}
    assert PageRenderer().render(body, "application/json") == JSONRenderer().render(
        body, "application/json"
    )
    assert PageRenderer().render(page_body([], None)) == b'{"results":[],"next":null}'
