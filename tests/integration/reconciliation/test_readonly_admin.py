"""Flows, requests, executions, checkpoints and audit events: readable by staff with the view
permission, never added, changed or deleted through the admin, superusers included."""

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from executions.models import ActionExecution, AuditEvent, Execution, Flow, Request

from .factories import reconciliation_case

pytestmark = pytest.mark.django_db

MODELS = {
    "flow": Flow,
    "request": Request,
    "execution": Execution,
    "actionexecution": ActionExecution,
    "auditevent": AuditEvent,
}


def _objects() -> dict:
    case = reconciliation_case()
    return {
        "flow": case.flow,
        "request": case.request,
        "execution": case,
        "actionexecution": ActionExecution.objects.get(execution=case),
        "auditevent": AuditEvent.objects.filter(execution=case).first(),
    }


@pytest.fixture
def superuser() -> User:
    return User.objects.create_superuser("root", password="pw-root")


@pytest.mark.parametrize("name", MODELS)
def test_staff_with_view_permission__read_lists_and_pages(viewer, name):
    obj = _objects()[name]
    client = Client()
    client.force_login(viewer)
    assert client.get(reverse(f"admin:executions_{name}_changelist")).status_code == 200
    page = client.get(reverse(f"admin:executions_{name}_change", args=[obj.pk]))
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()


@pytest.mark.parametrize("name", MODELS)
def test_staff_without_view_permission__get_403(make_user, name):
    client = Client()
    client.force_login(make_user("nina"))
    assert client.get(reverse(f"admin:executions_{name}_changelist")).status_code == 403


@pytest.mark.parametrize("name", MODELS)
def test_nobody_adds_changes_or_deletes__not_even_a_superuser(superuser, name):
    obj = _objects()[name]
    client = Client()
    client.force_login(superuser)
    count = MODELS[name].objects.count()
    assert client.get(reverse(f"admin:executions_{name}_add")).status_code == 403
    assert client.post(reverse(f"admin:executions_{name}_add"), {}).status_code == 403
    assert client.get(reverse(f"admin:executions_{name}_delete", args=[obj.pk])).status_code == 403
    assert (
        client.post(
            reverse(f"admin:executions_{name}_delete", args=[obj.pk]), {"post": "yes"}
        ).status_code
        == 403
    )
    assert (
        client.post(reverse(f"admin:executions_{name}_change", args=[obj.pk]), {}).status_code
        == 403
    )
    changelist = client.get(reverse(f"admin:executions_{name}_changelist")).content.decode()
    if name == "execution":  # its one action is "Cancel execution"; no bulk delete
        assert '<option value="cancel_execution">' in changelist
        assert "delete_selected" not in changelist
    else:
        assert 'name="action"' not in changelist  # no bulk delete either
    assert MODELS[name].objects.count() == count


def test_superuser__cannot_add_change_or_delete_cases(superuser):
    case = reconciliation_case()
    client = Client()
    client.force_login(superuser)
    assert client.get(reverse("admin:reconciliation_reconciliationcase_add")).status_code == 403
    delete = reverse("admin:reconciliation_reconciliationcase_delete", args=[case.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert Execution.objects.filter(pk=case.pk).exists()
