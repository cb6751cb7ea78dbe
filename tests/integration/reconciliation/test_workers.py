"""Workers and leases in sight: a real runworker registers itself and refreshes its row on every
heartbeat; the Workers page reads each worker as live, silent, gone or stopped with what it
holds; the Execution page says who holds its lease and how fresh it is, or when it runs next and
why; the Request and Execution pages show the request's numbered timeline."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from executions.models import AuditType, Execution, ExecutionStatus
from orquestador import display
from reconciliation import insight
from reconciliation.models import WorkerProcess
from tests.support.worker import wait_until

from .factories import ExecutionFactory, audit, reconciliation_case
from .worker import runworker, write_catalog

WORKERS = "admin:reconciliation_workerprocess_changelist"


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _worker(owner: str, *, seen_seconds_ago: float, **fields) -> WorkerProcess:
    worker = WorkerProcess.objects.create(
        owner=owner,
        host="h1",
        pid=100,
        concurrency=4,
        running=0,
        renew_seconds=5,
        lease_seconds=30,
        version="0.1.0",
        **fields,
    )
    WorkerProcess.objects.filter(pk=owner).update(
        last_seen_at=timezone.now() - timedelta(seconds=seen_seconds_ago)
    )
    worker.refresh_from_db()
    return worker


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_runworker__registers_and_refreshes_its_row_on_every_heartbeat(process_env, tmp_path):
    from tests.support.providers import JsonProvider

    with JsonProvider() as provider:
        catalog = write_catalog(tmp_path, provider)
        env = {**process_env, "WORKER_LEASE_SECONDS": "10", "WORKER_RENEW_SECONDS": "1"}
        log = tmp_path / "worker.log"
        with runworker(env, catalog, log) as worker:
            try:
                row = wait_until(
                    lambda: WorkerProcess.objects.filter(pid=worker.pid).first(),
                    timeout=30,
                    what="the worker's registry row",
                )
            except AssertionError as exc:
                raise AssertionError(log.read_text()) from exc
            assert (row.concurrency, row.running, row.lease_seconds) == (2, 0, 10.0)
            assert row.owner.split(":")[1] == str(worker.pid)
            first = row.last_seen_at
            wait_until(
                lambda: WorkerProcess.objects.get(pk=row.pk).last_seen_at > first,
                timeout=30,
                what="a heartbeat to refresh the row",
            )
            assert insight.state_of(WorkerProcess.objects.get(pk=row.pk), timezone.now()) == "live"


@pytest.mark.django_db
def test_state_of__live_silent_gone_stopped():
    now = timezone.now()
    assert insight.state_of(_worker("a", seen_seconds_ago=3), now) == insight.LIVE
    assert insight.state_of(_worker("b", seen_seconds_ago=20), now) == insight.SILENT
    assert insight.state_of(_worker("c", seen_seconds_ago=60), now) == insight.GONE
    # Stopped cleanly, its work drained (executions.sql.LIMITS_WITHDRAW): not live, however fresh.
    stopped = _worker("d", seen_seconds_ago=1, stopped_at=now)
    assert insight.state_of(stopped, now) == insight.STOPPED


@pytest.mark.django_db
def test_workers_page__lists_each_worker_with_what_it_holds(operator):
    _worker("w-live:1:aa", seen_seconds_ago=1)
    _worker("w-gone:2:bb", seen_seconds_ago=600)
    held = ExecutionFactory(
        status=ExecutionStatus.RUNNING,
        lease_owner="w-live:1:aa",
        lease_expires_at=(until := timezone.now() + timedelta(seconds=20)),
        next_attempt_at=until,
        error_code=None,
        error_detail=None,
    )
    page = _client(operator).get(reverse(WORKERS)).content.decode()
    live = page[page.index("w-live:1:aa") : page.index("</tr>", page.index("w-live:1:aa"))]
    gone = page[page.index("w-gone:2:bb") : page.index("</tr>", page.index("w-gone:2:bb"))]
    assert ">live<" in live and str(held.pk)[:8] in live
    assert ">gone<" in gone and "10 min ago" in gone


@pytest.mark.django_db
def test_execution_page__says_who_holds_the_lease_and_how_fresh(operator):
    _worker("w1:7:cc", seen_seconds_ago=1)
    execution = ExecutionFactory(
        status=ExecutionStatus.RUNNING,
        lease_owner="w1:7:cc",
        lease_expires_at=(until := timezone.now() + timedelta(seconds=27)),
        next_attempt_at=until,
        error_code=None,
        error_detail=None,
    )
    page = (
        _client(operator)
        .get(reverse("admin:executions_execution_change", args=[execution.pk]))
        .content.decode()
    )
    assert "Lease held by w1:7:cc, renewed 3 s ago" in page or "renewed 2 s ago" in page
    expired = timezone.now() - timedelta(seconds=40)
    Execution.objects.filter(pk=execution.pk).update(
        lease_expires_at=expired, next_attempt_at=expired
    )
    page = (
        _client(operator)
        .get(reverse("admin:executions_execution_change", args=[execution.pk]))
        .content.decode()
    )
    assert "expired 40 s ago; any worker will reclaim it" in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("scheduled", "said"),
    [
        (
            {"errorCode": "TRANSIENT_FAILURE", "delaySeconds": 90.0},
            "(a delay of 90.0 s after TRANSIENT_FAILURE)",
        ),
        (  # the provider's Retry-After behind the delay, and the cap that shortened it
            {"errorCode": "HTTP_429", "delaySeconds": 300.0, "retryAfterSeconds": 3600.0},
            "(a delay of 300.0 s after HTTP_429, the provider&#x27;s Retry-After: 3600.0 s, "
            "capped at WORKER_RETRY_AFTER_MAX_SECONDS)",
        ),
    ],
    ids=["backoff", "retry-after"],
)
def test_execution_page__says_when_a_retry_runs_and_why(operator, scheduled, said):
    execution = ExecutionFactory(
        status=ExecutionStatus.RETRY_WAIT,
        next_attempt_at=timezone.now() + timedelta(seconds=scheduled["delaySeconds"]),
        error_code=None,
        error_detail=None,
    )
    audit(execution.request, execution, AuditType.RETRY_SCHEDULED, **scheduled)
    page = (
        _client(operator)
        .get(reverse("admin:executions_execution_change", args=[execution.pk]))
        .content.decode()
    )
    assert "RETRY_WAIT: next attempt at" in page
    assert said in page


@pytest.mark.django_db
def test_request_and_execution_pages__show_the_numbered_timeline(operator):
    case = reconciliation_case()
    client = _client(operator)
    for url in (
        reverse("admin:executions_request_change", args=[case.request_id]),
        reverse("admin:executions_execution_change", args=[case.pk]),
    ):
        page = client.get(url).content.decode()
        assert "<td>1</td>" in page and "<td>2</td>" in page
        assert "TRANSITION_ACCEPTED" in page and "RECONCILIATION_REQUIRED" in page
        assert " UTC</td>" in page


@pytest.mark.django_db
def test_execution_and_workers_pages__show_a_takeover(operator):
    _worker("w-old:1:aa", seen_seconds_ago=600)
    _worker("w-new:2:bb", seen_seconds_ago=1)
    execution = ExecutionFactory(error_code=None, error_detail=None)
    expired = timezone.now() - timedelta(seconds=5)
    audit(
        execution.request,
        execution,
        AuditType.LEASE_TAKEN_OVER,
        previousOwner="w-old:1:aa",
        previousToken=1,
        leaseExpiredAt=expired.isoformat(),
        newOwner="w-new:2:bb",
        newToken=2,
        attempt=2,
    )
    sentence = (
        f"w-old:1:aa lost its lease (token 1) at {display.utc(expired)}; w-new:2:bb took the "
        "execution over at"
    )
    client = _client(operator)
    page = client.get(
        reverse("admin:executions_execution_change", args=[execution.pk])
    ).content.decode()
    assert sentence in page and "as token 2." in page
    page = client.get(reverse(WORKERS)).content.decode()
    old = page[page.index(">w-old:1:aa<") : page.index("</tr>", page.index(">w-old:1:aa<"))]
    new = page[page.index(">w-new:2:bb<") : page.index("</tr>", page.index(">w-new:2:bb<"))]
    assert "lost 1 · took over 0. Latest: " + sentence in old
    assert "lost 0 · took over 1." in new


@pytest.mark.django_db
def test_detail_pages__show_every_moment_in_utc_to_the_second_with_its_age(operator):
    case = reconciliation_case()
    checkpoint = case.checkpoints.first()
    event = case.audit_events.first()
    client = _client(operator)
    pages = {
        "request": (case.request_id, "created at (UTC)"),
        "execution": (case.pk, "next attempt at (UTC)"),
        "actionexecution": (checkpoint.pk, "started at (UTC)"),
        "auditevent": (event.pk, "created at (UTC)"),
        "flow": (case.flow_id, "published at (UTC)"),
    }
    for model, (pk, label) in pages.items():
        page = client.get(reverse(f"admin:executions_{model}_change", args=[pk])).content.decode()
        assert label.lower() in page.lower(), model
        assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \((\d+ \w+ ago|in \d+ \w+)\)", page)
        assert " a.m." not in page and " p.m." not in page, model
