"""The acceptance's two statements (executions/api/acceptance.py) when the request changes between
them: the write matches nothing, writes nothing, and the acceptance reads the request again and
answers for what it then finds, exactly as if it had come second."""

from collections.abc import Callable

import pytest

from executions.api import acceptance
from executions.models import AuditEvent, AuditType, Execution, Request
from executions.sql.rows import ExecutionRow
from orquestador.auth import Principal

from .conftest import assert_error

pytestmark = pytest.mark.django_db(transaction=True)  # each statement its own transaction

ALICE = Principal(subject="alice", tenant="acme", permissions=frozenset({"requests:write"}))


def between_read_and_write(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    """Run `change` once, right after the next acceptance's first read."""
    real_read = acceptance._read

    def read_then_change(*args: object) -> object:
        found = real_read(*args)
        monkeypatch.setattr(acceptance, "_read", real_read)
        change()
        return found

    monkeypatch.setattr(acceptance, "_read", read_then_change)


def test_accepted_by_another_in_between__is_request_blocked(alice, flow, monkeypatch):
    created = alice.create()
    won: list[ExecutionRow] = []
    between_read_and_write(
        monkeypatch,
        lambda: won.append(
            acceptance.transition_accept(
                principal=ALICE,
                request_id=created["id"],
                transition_id="submit",
                expected_revision=1,
            )[0]
        ),
    )

    response = alice.accept(created["id"], "submit", 1)

    assert_error(response, 409, "REQUEST_BLOCKED", won[0].id)
    stored = Request.objects.get(id=created["id"])
    assert (stored.revision, stored.version, str(stored.blocked_by_id)) == (2, 2, won[0].id)
    assert [str(e.id) for e in Execution.objects.filter(request_id=created["id"])] == [won[0].id]
    accepted = AuditEvent.objects.filter(type=AuditType.TRANSITION_ACCEPTED)
    assert accepted.count() == 1


def test_the_same_key_accepted_in_between__answers_that_execution(alice, flow, monkeypatch):
    created = alice.create()
    won: list[ExecutionRow] = []
    between_read_and_write(
        monkeypatch,
        lambda: won.append(
            acceptance.transition_accept(
                principal=ALICE,
                request_id=created["id"],
                transition_id="submit",
                expected_revision=1,
                idempotency_key="k-1",
            )[0]
        ),
    )

    response = alice.accept(created["id"], "submit", 1, HTTP_IDEMPOTENCY_KEY="k-1")

    assert response.status_code == 202, response.content
    assert response.json()["id"] == won[0].id
    assert Execution.objects.filter(request_id=created["id"]).count() == 1


def test_moved_on_in_between__is_a_revision_conflict(alice, flow, monkeypatch):
    created = alice.create()

    def finished_elsewhere() -> None:
        # Another acceptance, then its finalisation: unblocked, at a later revision.
        acceptance.transition_accept(
            principal=ALICE, request_id=created["id"], transition_id="submit", expected_revision=1
        )
        Request.objects.filter(id=created["id"]).update(
            state="DRAFT", blocked_by=None, revision=3, version=3
        )

    between_read_and_write(monkeypatch, finished_elsewhere)

    response = alice.accept(created["id"], "submit", 1)

    assert_error(response, 409, "REVISION_CONFLICT", "revision 3")
    assert Execution.objects.filter(request_id=created["id"]).count() == 1


def test_the_write_is_refused_by_the_database_itself_when_the_request_changed(alice, flow):
    created = alice.create()
    written = acceptance._write(
        ALICE,
        request_id=created["id"],
        state="DRAFT",
        transition_id="submit",
        expected_revision=2,  # the request is at revision 1
        idempotency_key=None,
        fingerprint=None,
    )
    assert written is None
    stored = Request.objects.get(id=created["id"])
    assert (stored.revision, stored.blocked_by_id) == (1, None)
    assert not Execution.objects.exists()
    assert not AuditEvent.objects.filter(type=AuditType.TRANSITION_ACCEPTED).exists()
