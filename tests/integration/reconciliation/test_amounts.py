"""Money reads as money: the demo's charge (examples/order.json, 2500 EUR cents) shows as €25.00
on the case page, in the case list and on the request's page, its raw value on hover; and the
requests and the cases are found by what the case summary shows (a customer, an amount)."""

import json
import re
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from executions.flows.publication import flow_publish
from executions.models import Execution, Request

from .factories import RequestFactory, reconciliation_case

pytestmark = pytest.mark.django_db

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
# The README's order, as the demo places it.
ORDER = {"customer": "cus_ada", "sku": "book-42", "quantity": 1, "amount": 2500, "currency": "EUR"}
EUR_25 = '<span class="amount" title="2500">€25.00</span>'
QUEUE = "admin:reconciliation_reconciliationcase_changelist"
REQUESTS = "admin:executions_request_changelist"


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def demo_case(data: dict) -> Execution:
    """A case of the demo's order flow: its charge's outcome unknown, the request's data `data`."""
    flow, _ = flow_publish(definition=json.loads((EXAMPLES / "order.json").read_text()))
    case = reconciliation_case()
    Request.objects.filter(pk=case.request_id).update(flow=flow, data=data)
    Execution.objects.filter(pk=case.pk).update(flow=flow, transition_id="place")
    return case


def _summary(page: str) -> str:
    start = page.index('id="case-summary-fields"')
    return page[start : page.index("</ul>", start)]


def test_case_page__the_demo_charge_reads_as_money(operator, charge_registry):
    case = demo_case(ORDER)
    page = _client(operator).get(reverse(f"{QUEUE[:-10]}change", args=[case.pk])).content.decode()
    summary = _summary(page)
    assert f"<b>amount</b> {EUR_25}" in summary, summary
    assert "<b>customer</b> cus_ada" in summary and "<b>sku</b> book-42" in summary
    assert "2500</li>" not in summary  # the raw number only on hover


def test_case_list__the_demo_charge_reads_as_money(operator, charge_registry):
    demo_case(ORDER)
    page = _client(operator).get(reverse(QUEUE)).content.decode()
    assert f"customer cus_ada · amount {EUR_25} · sku book-42" in page


def test_case_list__an_amount_that_is_not_one_is_shown_as_it_is(operator, charge_registry):
    demo_case(ORDER | {"amount": "pending", "currency": "EUR"})
    demo_case(ORDER | {"customer": "cus_bo", "currency": "XYZ"})
    page = _client(operator).get(reverse(QUEUE)).content.decode()
    assert "customer cus_ada · amount pending · sku" in page
    assert "customer cus_bo · amount 2500 · sku" in page


def test_request_page__lists_every_amount_of_its_data(operator, charge_registry):
    paid = ORDER | {"payment": {"chargeId": "ch_1", "amount": 2500, "currency": "EUR"}}
    case = demo_case(paid)
    url = reverse("admin:executions_request_change", args=[case.request_id])
    page = _client(operator).get(url).content.decode()
    shown = re.search(r'<div class="readonly">(amount .*?)</div>', page)
    assert shown is not None, page
    assert shown.group(1) == f"amount {EUR_25}, payment / amount {EUR_25}"


def _found(client: Client, name: str, term: str) -> str:
    return client.get(reverse(name), {"q": term}).content.decode()


def test_search__finds_requests_and_cases_by_their_summary_fields(operator, charge_registry):
    ada = demo_case(ORDER)
    bo = demo_case(ORDER | {"customer": "cus_bo", "amount": 900})
    plain = RequestFactory(owner="cus_ada")  # found by its owner, as before
    client = _client(operator)
    for term, requests in (("cus_ada", {ada.request_id, plain.pk}), ("900", {bo.request_id})):
        page = _found(client, REQUESTS, term)
        listed = {r.pk for r in Request.objects.all() if str(r.pk)[:8] in page}
        assert listed == requests, (term, page)
    cases = _found(client, QUEUE, "cus_bo")
    assert str(bo.pk)[:8] in cases and str(ada.pk)[:8] not in cases
    assert str(ada.pk)[:8] in _found(client, QUEUE, "2500")
    assert str(ada.pk)[:8] not in _found(client, QUEUE, "cus_nobody")
