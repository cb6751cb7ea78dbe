"""The demo's provider (actions/sandbox.py) on loopback, called by the real `http.json` and
`documents.verify` adapters through examples/integrations.toml itself: reservations deduplicate
by key, charges do not (a replay charges twice), the lookup tells whether a write happened, a
fault after applying leaves the write uncertain and applied, a seed repeats a run, and every
refusal is JSON that applies nothing."""

import hashlib
import http.client
import json
import re
import socket
import tomllib
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from actions.base import Outcome
from actions.lookup import lookup_by_key
from actions.registry import Registry
from actions.sandbox import MAX_BODY_BYTES, MAX_CONNECTIONS, Faults, SandboxProvider
from actions.sandboxshop import document_bytes
from tests.support.worker import wait_until

from .conftest import catalog_registry, context, run

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "integrations.toml"
AUTH = {"PAYMENTS_AUTH": "Bearer sandbox-test"}
NEVER = Faults(after_apply=0, before_apply=0)
AFTER = Faults(after_apply=1, before_apply=0)
BEFORE = Faults(after_apply=0, before_apply=1)


@pytest.fixture
def sandbox() -> Iterator[SandboxProvider]:
    with SandboxProvider(port=0, faults=NEVER) as provider:
        yield provider


@pytest.fixture
def registry(sandbox, monkeypatch) -> Registry:
    """examples/integrations.toml, its port moved to the sandbox's (as scripts/start does)."""
    monkeypatch.setenv("PAYMENTS_AUTH", AUTH["PAYMENTS_AUTH"])
    text = EXAMPLE.read_text().replace("127.0.0.1:9000/", f"127.0.0.1:{sandbox.port}/")
    return catalog_registry(tomllib.loads(text), AUTH)


def call(registry: Registry, capability: str, data: dict, *, key: str, attempt: int = 1):
    binding = registry.resolve(capability, 1)
    return run(binding.adapter.call(context(data, key=key, attempt=attempt), binding))


def raw(
    sandbox: SandboxProvider, method: str, path: str, body: bytes = b"", **headers: str
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", sandbox.port, timeout=5)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name.replace("_", "-"), value)
        if body and "Content_Length" not in headers and "Transfer_Encoding" not in headers:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body or None)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


CHARGE = {"amount": 2500, "currency": "EUR", "customer": "cus_ada"}
RESERVE = {"sku": "book-42", "quantity": 1}


# ------------------------------------------------------------------------------
# Deduplication, or not
# ------------------------------------------------------------------------------
def test_reserve__lost_after_applying__the_retry_gets_the_same_reservation(sandbox, registry):
    sandbox.faults = AFTER
    first = call(registry, "stock.reserve", RESERVE, key="e1:reserve")
    sandbox.faults = NEVER
    second = call(registry, "stock.reserve", RESERVE, key="e1:reserve", attempt=2)

    assert first.outcome is Outcome.UNKNOWN  # an idempotent write the worker retries
    assert second.outcome is Outcome.SUCCEEDED
    assert second.output == {
        "reservationId": "res_000001",
        "sku": "book-42",
        "quantity": 1,
        "status": "reserved",
    }
    found = run(lookup_by_key("stock.reserve", 1, "e1:reserve", registry=registry))
    assert (found.happened, found.output) == (True, second.output)  # one reservation only
    other = call(registry, "stock.reserve", RESERVE, key="e2:reserve")
    assert other.output["reservationId"] == "res_000002"


def test_charge__not_deduplicated__a_replay_charges_twice(sandbox, registry):
    first = call(registry, "payments.charge", CHARGE, key="e1:charge")
    again = call(registry, "payments.charge", CHARGE, key="e1:charge", attempt=2)

    assert first.outcome is again.outcome is Outcome.SUCCEEDED
    assert (first.output["chargeId"], again.output["chargeId"]) == ("ch_000001", "ch_000002")
    found = run(lookup_by_key("payments.charge", 1, "e1:charge", registry=registry))
    assert found.happened is True
    assert found.output == {**first.output, "chargesWithKey": 2}


def test_charge__lost_after_applying__uncertain_and_found_by_the_lookup(sandbox, registry):
    sandbox.faults = AFTER

    result = call(registry, "payments.charge", CHARGE, key="e1:charge")

    assert (result.outcome, result.error_code) == (Outcome.UNKNOWN, "UNCERTAIN_WRITE")
    found = run(lookup_by_key("payments.charge", 1, "e1:charge", registry=registry))
    assert found.happened is True
    assert found.output == {
        "chargeId": "ch_000001",
        "amount": 2500,
        "currency": "EUR",
        "customer": "cus_ada",
        "status": "paid",
        "chargesWithKey": 1,
    }
    # What the prober checks before it settles a case: the record passes the output schema.
    schema = registry.resolve("payments.charge", 1).contract.output_schema
    jsonschema.Draft202012Validator(schema).validate(found.output)


def test_charge__lost_before_applying__uncertain_and_not_found(sandbox, registry):
    sandbox.faults = BEFORE

    result = call(registry, "payments.charge", CHARGE, key="e1:charge")

    assert (result.outcome, result.error_code) == (Outcome.UNKNOWN, "UNCERTAIN_WRITE")
    assert (
        run(lookup_by_key("payments.charge", 1, "e1:charge", registry=registry)).happened is False
    )


def test_refund_and_release__deduplicated_and_checked(sandbox, registry):
    charge = call(registry, "payments.charge", CHARGE, key="e1:charge").output
    reservation = call(registry, "stock.reserve", RESERVE, key="e1:reserve").output

    refund = call(registry, "payments.refund", {"chargeId": charge["chargeId"]}, key="e2:refund")
    again = call(registry, "payments.refund", {"chargeId": charge["chargeId"]}, key="e2:refund")
    other_key = call(registry, "payments.refund", {"chargeId": charge["chargeId"]}, key="e3:refund")
    release = call(
        registry, "stock.release", {"reservationId": reservation["reservationId"]}, key="e2:rel"
    )
    unknown = call(registry, "stock.release", {"reservationId": "res_999999"}, key="e4:rel")

    assert (
        refund.output
        == again.output
        == {
            "refundId": "re_000001",
            "chargeId": "ch_000001",
            "amount": 2500,
            "status": "refunded",
        }
    )
    assert other_key.outcome is Outcome.PERMANENT  # 409: refunded already, under another key
    assert release.output["status"] == "released"
    assert unknown.outcome is Outcome.PERMANENT
    assert run(lookup_by_key("payments.charge", 1, "e1:charge", registry=registry)).output[
        "status"
    ] == ("refunded")


def test_documents__verified_by_documents_verify(sandbox, registry):
    digest = hashlib.sha256(document_bytes("contract-7")).hexdigest()

    good = call(
        registry, "documents.verify", {"documentId": "contract-7", "sha256": digest}, key="e:v"
    )
    bad = call(
        registry, "documents.verify", {"documentId": "contract-8", "sha256": digest}, key="e:w"
    )

    assert good.outcome is Outcome.SUCCEEDED
    assert good.output["verified"] is True and good.output["mediaType"] == "application/pdf"
    assert bad.output["verified"] is False


# ------------------------------------------------------------------------------
# Faults, repeatable
# ------------------------------------------------------------------------------
def _outcomes(seed: int, writes: int = 40) -> list[str]:
    with SandboxProvider(port=0, faults=Faults(0.2, 0.3), seed=seed) as sandbox:
        seen = []
        for number in range(writes):
            try:
                status, _, _ = raw(
                    sandbox,
                    "POST",
                    "/reservations",
                    json.dumps(RESERVE).encode(),
                    Idempotency_Key=f"k{number}",
                    Content_Type="application/json",
                )
                seen.append(str(status))
            except (http.client.HTTPException, OSError):
                applied = raw(sandbox, "GET", f"/reservations/by-key/k{number}")[0] == 200
                seen.append("applied-then-dropped" if applied else "dropped")
        return seen


def test_faults__a_seed_repeats_the_run_and_both_kinds_happen():
    first, again, other = _outcomes(8), _outcomes(8), _outcomes(9)

    assert first == again
    assert first != other
    assert {"201", "applied-then-dropped", "dropped"} == set(first)


@pytest.mark.parametrize(
    ("after", "before", "problem"),
    [(1.5, 0, "--fail-after-apply"), (0, -0.1, "--fail-before-apply"), (0.6, 0.6, "together")],
)
def test_faults__fractions_are_checked(after, before, problem):
    with pytest.raises(ValueError, match=problem):
        SandboxProvider(port=0, faults=Faults(after, before))


# ------------------------------------------------------------------------------
# Refusals: JSON, bounded, nothing applied
# ------------------------------------------------------------------------------
JSON_BODY = json.dumps(CHARGE).encode()
AUTHORIZED = {"Authorization": "Bearer x", "Content_Type": "application/json"}


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "code"),
    [
        (
            "POST",
            "/charges",
            JSON_BODY,
            {"Content_Type": "application/json"},
            401,
            "UNAUTHENTICATED",
        ),
        ("POST", "/charges", JSON_BODY, AUTHORIZED, 400, "IDEMPOTENCY_KEY_REQUIRED"),
        (
            "POST",
            "/charges",
            b"{not json",
            {**AUTHORIZED, "Idempotency_Key": "k"},
            400,
            "INVALID_JSON",
        ),
        ("POST", "/charges", b"[1]", {**AUTHORIZED, "Idempotency_Key": "k"}, 400, "INVALID_JSON"),
        (
            "POST",
            "/charges",
            json.dumps({**CHARGE, "currency": "euro"}).encode(),
            {**AUTHORIZED, "Idempotency_Key": "k"},
            422,
            "INVALID_FIELD",
        ),
        (
            "POST",
            "/charges",
            b"",
            {**AUTHORIZED, "Idempotency_Key": "k", "Content_Length": str(MAX_BODY_BYTES + 1)},
            413,
            "BODY_TOO_LARGE",
        ),
        (
            "POST",
            "/charges",
            b"5\r\n{}   \r\n0\r\n\r\n",
            {**AUTHORIZED, "Idempotency_Key": "k", "Transfer_Encoding": "chunked"},
            411,
            "LENGTH_REQUIRED",
        ),
        ("POST", "/nowhere", JSON_BODY, {"Idempotency_Key": "k"}, 404, "NOT_FOUND"),
        ("GET", "/charges/by-key/k", b"", {}, 401, "UNAUTHENTICATED"),
        ("GET", "/documents/..%2Fsecrets", b"", {}, 404, "NOT_FOUND"),
        ("PUT", "/charges", JSON_BODY, AUTHORIZED, 405, "METHOD_NOT_ALLOWED"),
        ("BREW", "/charges", b"", {}, 501, "BAD_REQUEST"),
    ],
)
def test_refusals__json_with_a_code_and_nothing_applied(
    sandbox, method, path, body, headers, status, code
):
    answered, received, text = raw(sandbox, method, path, body, **headers)

    assert answered == status, text
    assert received["Content-Type"] == "application/json"
    assert json.loads(text)["code"] == code
    assert raw(sandbox, "GET", "/charges/by-key/k", Authorization="x")[0] == 404


def test_refusals__a_field_is_named(sandbox):
    _, _, text = raw(
        sandbox,
        "POST",
        "/charges",
        json.dumps({**CHARGE, "amount": 0}).encode(),
        Idempotency_Key="k",
        **AUTHORIZED,
    )

    assert json.loads(text)["detail"].startswith("amount:")


def test_listens_on_loopback_only(sandbox):
    assert sandbox._server.server_address[0] == "127.0.0.1"
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", sandbox.url())


def test_connections_beyond_the_bound_are_closed_at_once(sandbox):
    held = [socket.create_connection(("127.0.0.1", sandbox.port)) for _ in range(MAX_CONNECTIONS)]
    try:
        with socket.create_connection(("127.0.0.1", sandbox.port), timeout=5) as extra:
            extra.sendall(b"GET /documents/a HTTP/1.1\r\nHost: x\r\n\r\n")
            assert extra.recv(100) == b""  # closed unanswered: every slot is taken
    finally:
        for connection in held:
            connection.close()

    def served() -> bool:  # the slots come back as the idle connections close
        try:
            return raw(sandbox, "GET", "/documents/a")[0] == 200
        except OSError:
            return False

    assert wait_until(served, timeout=10, what="a slot to come back")
