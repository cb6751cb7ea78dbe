"""http.json against a real loopback provider: what is sent, and how each fate is classified."""

import asyncio
import dataclasses
import json
import socket
import threading
import time

import pytest

from actions import http_json, pools
from actions.base import Outcome
from actions.blocking import BlockingRunner
from orquestador import errors
from tests.support.providers import (
    Reply,
    drip_headers,
    drop,
    non_json,
    non_object,
    ok,
    oversized,
    raw,
    retry_after_date,
    slow,
    slow_body,
    status,
)

from .conftest import binding, context, run

WRITES = ("IDEMPOTENT_WRITE", "NON_IDEMPOTENT_WRITE")
SECRET_MARK = "provider-secret-detail"


def call(b, ctx=None):
    return run(b.adapter.call(ctx or context(), b))


def _no_leak(result) -> None:
    assert SECRET_MARK not in repr(result)


# ------------------------------------------------------------------------------
# What is sent
# ------------------------------------------------------------------------------
def test_call__sends_input_as_json_with_the_external_key(provider):
    b = binding(url=provider.url("/charges"))

    result = call(b, context({"amount": 12, "note": "ñ"}, key="e-7:charge"))

    assert result.outcome is Outcome.SUCCEEDED
    assert result.output == {"id": "op-1", "status": "done"}
    (seen,) = provider.requests("/charges")
    assert seen.method == "POST"
    assert seen.json() == {"amount": 12, "note": "ñ"}
    assert seen.headers["idempotency-key"] == "e-7:charge"
    assert seen.headers["content-type"] == "application/json"


def test_call__same_key_twice__provider_applies_once(provider):
    b = binding(url=provider.url("/charges"), effect="IDEMPOTENT_WRITE")

    first, second = call(b), call(b)

    assert first.output == second.output
    assert provider.calls("/charges") == 2
    assert len(provider.effects("/charges")) == 1


def test_call__uses_the_configured_method(provider):
    b = binding(url=provider.url("/items/1"), method="PUT", effect="IDEMPOTENT_WRITE")

    assert call(b).outcome is Outcome.SUCCEEDED
    assert provider.requests()[0].method == "PUT"


async def _client():
    return pools.client()


def test_client__pooled_per_event_loop(provider):
    b = binding(url=provider.url("/charges"), effect="IDEMPOTENT_WRITE")
    call(b, context(key="e:1"))
    call(b, context(key="e:2"))
    with BlockingRunner() as elsewhere:
        theirs = elsewhere.run(_client())

    first, second = provider.requests("/charges")
    assert first.client == second.client  # the second call reused the pooled connection
    assert theirs is not run(_client())  # another loop (another thread's) has its own


# ------------------------------------------------------------------------------
# Time
# ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("effect", "outcome"),
    [
        ("NON_IDEMPOTENT_WRITE", Outcome.UNKNOWN),
        ("IDEMPOTENT_WRITE", Outcome.UNKNOWN),
        ("READ_ONLY", Outcome.TRANSIENT),
    ],
)
def test_call__slow_response__read_timeout(provider, effect, outcome):
    provider.plan("/charges", slow(30))
    b = binding(url=provider.url("/charges"), effect=effect, timeout=0.5)

    started = time.monotonic()
    result = call(b)

    assert time.monotonic() - started < 3
    assert result.outcome is outcome
    if outcome is Outcome.UNKNOWN:
        assert result.error_code == errors.UNCERTAIN_WRITE


def test_call__body_dripping_past_the_budget__stopped_at_the_deadline(provider):
    provider.plan("/charges", slow_body(30))
    b = binding(url=provider.url("/charges"), timeout=1.0)

    started = time.monotonic()
    result = call(b)

    assert time.monotonic() - started < 2.5
    assert result.outcome is Outcome.UNKNOWN  # the provider answered 200: the write happened
    assert "budget" in result.error_detail


def test_call__body_dripping_byte_by_byte__stopped_at_the_deadline(provider):
    # Every byte arrives well within the read timeout: only the total budget can stop this.
    provider.plan("/charges", dataclasses.replace(oversized(200), drip=0.05))  # 10 s of bytes
    b = binding(url=provider.url("/charges"), effect="READ_ONLY", timeout=1.0)

    started = time.monotonic()
    result = call(b)

    assert time.monotonic() - started < 2
    assert result.outcome is Outcome.TRANSIENT
    assert "budget" in result.error_detail


@pytest.mark.parametrize(
    ("effect", "outcome"),
    [("NON_IDEMPOTENT_WRITE", Outcome.UNKNOWN), ("READ_ONLY", Outcome.TRANSIENT)],
)
def test_call__headers_dripping_byte_by_byte__stopped_at_the_deadline(provider, effect, outcome):
    provider.plan("/charges", drip_headers(0.05))  # about 15 s of status line and headers
    b = binding(url=provider.url("/charges"), effect=effect, timeout=1.0)

    started = time.monotonic()
    result = call(b)

    assert time.monotonic() - started < 2
    assert result.outcome is outcome
    assert "budget" in result.error_detail


@pytest.mark.parametrize(
    ("effect", "outcome"),
    [("NON_IDEMPOTENT_WRITE", Outcome.UNKNOWN), ("READ_ONLY", Outcome.TRANSIENT)],
)
def test_call__stopped_while_waiting_from_another_thread__abandoned_at_once(
    provider, effect, outcome
):
    provider.plan("/charges", slow(30))
    b = binding(url=provider.url("/charges"), effect=effect, timeout=20)
    ctx = context()

    def stop_once_the_provider_has_it() -> None:
        provider.wait_for_calls(1, "/charges")
        ctx.cancelled.set()  # as the heartbeat or a cancellation does, from its own thread

    stopper = threading.Thread(target=stop_once_the_provider_has_it)
    stopper.start()
    started = time.monotonic()
    result = call(b, ctx)
    stopper.join()

    assert time.monotonic() - started < 5  # not the provider's 30 s, nor the 20 s budget
    assert result.outcome is outcome
    assert "stopped" in result.error_detail


def test_call__task_cancelled_from_outside__the_cancellation_goes_through(provider):
    provider.plan("/charges", slow(30))
    b = binding(url=provider.url("/charges"), timeout=20)

    async def cancel_midway() -> bool:
        task = asyncio.ensure_future(b.adapter.call(context(), b))
        await asyncio.to_thread(provider.wait_for_calls, 1, "/charges")
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    started = time.monotonic()
    assert run(cancel_midway()) is True  # not turned into an outcome: the caller cancelled it
    assert time.monotonic() - started < 5


def test_call__cancelled_before_sending__nothing_sent(provider):
    b = binding(url=provider.url("/charges"))
    ctx = context()
    ctx.cancelled.set()

    result = call(b, ctx)

    assert result.outcome is Outcome.TRANSIENT
    assert provider.calls() == 0


# ------------------------------------------------------------------------------
# Connections
# ------------------------------------------------------------------------------
def test_call__connection_refused__transient_even_for_a_non_idempotent_write():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    b = binding(url=f"http://127.0.0.1:{port}/charges")

    result = call(b)

    assert result.outcome is Outcome.TRANSIENT
    assert result.error_code == errors.TRANSIENT_FAILURE
    assert "nothing was sent" in result.error_detail


def test_call__dropped_after_body__non_idempotent_write_is_unknown(provider):
    provider.plan("/charges", drop())
    b = binding(url=provider.url("/charges"))

    result = call(b)

    assert result.outcome is Outcome.UNKNOWN
    assert result.error_code == errors.UNCERTAIN_WRITE
    assert len(provider.effects("/charges")) == 1  # the provider did act


def test_call__dropped_after_body__idempotent_retry_with_same_key_applies_once(provider):
    provider.plan("/charges", drop())
    b = binding(url=provider.url("/charges"), effect="IDEMPOTENT_WRITE")

    first = call(b, context(attempt=1))
    second = call(b, context(attempt=2))

    assert first.outcome is Outcome.UNKNOWN
    assert second.outcome is Outcome.SUCCEEDED
    keys = {r.headers["idempotency-key"] for r in provider.requests("/charges")}
    assert keys == {"exec-1:charge"}
    assert provider.calls("/charges") == 2
    assert len(provider.effects("/charges")) == 1


@pytest.mark.parametrize("method", ["PUT", "POST"])
def test_call__dropped_on_a_reused_connection__never_sent_again(provider, method):
    # An idempotent method on a pooled connection that turns out dropped is what HTTP clients
    # resend on their own; for a write that is a second effect. The worker decides, not the client.
    provider.plan("/items/1", ok(), drop())
    b = binding(url=provider.url("/items/1"), method=method, effect="NON_IDEMPOTENT_WRITE")

    first, second = call(b, context(key="e:1")), call(b, context(key="e:2"))

    assert (first.outcome, second.outcome) == (Outcome.SUCCEEDED, Outcome.UNKNOWN)
    seen = provider.requests("/items/1")
    assert len(seen) == 2  # never resent
    assert seen[0].client == seen[1].client  # the second went on the pooled connection
    assert len(provider.effects("/items/1")) == 2


def test_call__dropped__read_is_transient(provider):
    provider.plan("/search", drop(apply=False))
    b = binding(url=provider.url("/search"), effect="READ_ONLY")

    assert call(b).outcome is Outcome.TRANSIENT


# ------------------------------------------------------------------------------
# Status codes
# ------------------------------------------------------------------------------
@pytest.mark.parametrize("effect", ["READ_ONLY", *WRITES])
def test_call__429_with_retry_after_seconds__transient(provider, effect):
    provider.plan("/charges", status(429, retry_after=7))
    b = binding(url=provider.url("/charges"), effect=effect)

    result = call(b)

    assert result.outcome is Outcome.TRANSIENT
    assert result.retry_after == 7
    _no_leak(result)


def test_call__503_with_retry_after_date__transient_for_idempotent_write(provider):
    provider.plan("/charges", status(503, retry_after=retry_after_date(120)))
    b = binding(url=provider.url("/charges"), effect="IDEMPOTENT_WRITE")

    result = call(b)

    assert result.outcome is Outcome.TRANSIENT
    assert 115 <= result.retry_after <= 121


@pytest.mark.parametrize("code", [500, 502, 503, 504])
def test_call__5xx__unknown_for_non_idempotent_write(provider, code):
    provider.plan("/charges", status(code, retry_after=3))
    b = binding(url=provider.url("/charges"))

    result = call(b)

    assert result.outcome is Outcome.UNKNOWN
    assert result.error_code == errors.UNCERTAIN_WRITE
    _no_leak(result)


@pytest.mark.parametrize("effect", ["READ_ONLY", "IDEMPOTENT_WRITE"])
def test_call__5xx__transient_for_reads_and_idempotent_writes(provider, effect):
    provider.plan("/charges", status(500))
    b = binding(url=provider.url("/charges"), effect=effect)

    result = call(b)

    assert result.outcome is Outcome.TRANSIENT
    assert result.retry_after is None


def test_call__408__transient(provider):
    provider.plan("/charges", status(408))

    assert call(binding(url=provider.url("/charges"))).outcome is Outcome.TRANSIENT


@pytest.mark.parametrize("code", [400, 401, 404, 409, 422])
def test_call__4xx__permanent(provider, code):
    provider.plan("/charges", status(code))
    b = binding(url=provider.url("/charges"))

    result = call(b)

    assert result.outcome is Outcome.PERMANENT
    assert result.error_code == errors.PERMANENT_FAILURE
    assert str(code) in result.error_detail
    _no_leak(result)


@pytest.mark.parametrize(
    ("effect", "outcome"),
    [("READ_ONLY", Outcome.PERMANENT), ("NON_IDEMPOTENT_WRITE", Outcome.UNKNOWN)],
)
def test_call__redirect__not_followed(provider, effect, outcome):
    target = provider.url("/elsewhere")
    provider.plan(
        "/charges", Reply(kind="status", status=303, body=b"", headers=(("Location", target),))
    )
    b = binding(url=provider.url("/charges"), effect=effect)

    result = call(b)

    assert result.outcome is outcome
    assert provider.calls("/elsewhere") == 0


# ------------------------------------------------------------------------------
# Bodies
# ------------------------------------------------------------------------------
@pytest.mark.parametrize("declared", [True, False])
@pytest.mark.parametrize(
    ("effect", "outcome"),
    [
        ("READ_ONLY", Outcome.PERMANENT),
        ("IDEMPOTENT_WRITE", Outcome.UNKNOWN),
        ("NON_IDEMPOTENT_WRITE", Outcome.UNKNOWN),
    ],
)
def test_call__oversized_body__output_invalid(provider, effect, outcome, declared):
    provider.plan("/charges", oversized(4096, declare_length=declared))
    b = binding(url=provider.url("/charges"), effect=effect, max_response_bytes=1024)

    result = call(b)

    assert result.outcome is outcome
    assert result.error_code == errors.OUTPUT_INVALID
    assert "1024 bytes" in result.error_detail
    assert result.output is None


def test_call__large_answer__parsed_in_a_thread_not_on_the_loop(provider, monkeypatch):
    provider.plan("/charges", oversized(http_json.OFF_LOOP_JSON_BYTES + 1024))
    parse, threads = http_json.parse_json_object, []

    def parse_and_note_the_thread(body):
        threads.append(threading.get_ident())
        return parse(body)

    monkeypatch.setattr(http_json, "parse_json_object", parse_and_note_the_thread)
    b = binding(url=provider.url("/charges"), max_response_bytes=1024 * 1024)

    result = call(b)

    assert result.outcome is Outcome.SUCCEEDED
    assert len(result.output["pad"]) > http_json.OFF_LOOP_JSON_BYTES
    assert len(threads) == 1 and threads[0] != threading.get_ident()


def test_call__body_just_under_the_limit__accepted(provider):
    provider.plan("/charges", oversized(1024))
    b = binding(url=provider.url("/charges"), max_response_bytes=1024)

    assert call(b).outcome is Outcome.SUCCEEDED


@pytest.mark.parametrize("reply", [non_json, non_object])
@pytest.mark.parametrize(
    ("effect", "outcome"),
    [("READ_ONLY", Outcome.PERMANENT), ("NON_IDEMPOTENT_WRITE", Outcome.UNKNOWN)],
)
def test_call__2xx_without_a_json_object__output_invalid(provider, reply, effect, outcome):
    provider.plan("/charges", reply())
    b = binding(url=provider.url("/charges"), effect=effect)

    result = call(b)

    assert result.outcome is outcome
    assert result.error_code == errors.OUTPUT_INVALID
    _no_leak(result)


@pytest.mark.parametrize("body", [b'{"a": NaN}', b'{"a": 1', '{"a": "\xff"}'.encode("latin-1")])
def test_call__2xx_with_invalid_json__output_invalid(provider, body):
    provider.plan("/charges", raw(body))

    result = call(binding(url=provider.url("/charges"), effect="READ_ONLY"))

    assert result.error_code == errors.OUTPUT_INVALID


def test_call__204__empty_output(provider):
    provider.plan("/charges", raw(b"", code=204))

    result = call(binding(url=provider.url("/charges")))

    assert result.outcome is Outcome.SUCCEEDED
    assert result.output == {}


# ------------------------------------------------------------------------------
# Credentials
# ------------------------------------------------------------------------------
SECRET = "Bearer s3cr3t-token-value"


def test_credentials__sent_from_env_and_never_logged_or_returned(provider, monkeypatch, caplog):
    monkeypatch.setenv("PAYMENTS_AUTH", SECRET)
    provider.plan("/charges", ok(), status(500), drop())
    b = binding(
        url=provider.url("/charges"),
        headers_from_env={"Authorization": "PAYMENTS_AUTH"},
        environ={"PAYMENTS_AUTH": SECRET},
    )
    caplog.set_level("DEBUG")

    results = [call(b, context(key=f"e:{n}")) for n in range(3)]

    assert [r.outcome for r in results] == [Outcome.SUCCEEDED, Outcome.UNKNOWN, Outcome.UNKNOWN]
    assert {r.headers["authorization"] for r in provider.requests()} == {SECRET}
    assert SECRET not in caplog.text
    assert "s3cr3t" not in repr(results) + repr(b)
    assert any(r.message == "integration call" for r in caplog.records)


def test_call__its_own_log_line_only_at_debug(provider, caplog):
    provider.plan("/charges", ok())
    b = binding(url=provider.url("/charges"))

    caplog.set_level("INFO")
    call(b, context(key="e:info"))
    at_info = [r for r in caplog.records if r.message == "integration call"]
    caplog.set_level("DEBUG")
    provider.plan("/charges", ok())
    call(b, context(key="e:debug"))
    at_debug = [r for r in caplog.records if r.message == "integration call"]

    assert at_info == []  # the runner's lines say what a person needs at INFO
    assert [(r.levelname, r.outcome, r.attempt) for r in at_debug] == [("DEBUG", "SUCCEEDED", 1)]


def test_credentials__variable_unset_at_call_time__nothing_sent(provider, monkeypatch):
    monkeypatch.delenv("PAYMENTS_AUTH", raising=False)
    b = binding(
        url=provider.url("/charges"),
        headers_from_env={"Authorization": "PAYMENTS_AUTH"},
        environ={"PAYMENTS_AUTH": SECRET},
    )

    result = call(b)

    assert result.outcome is Outcome.PERMANENT
    assert result.error_code == errors.INTEGRATION_UNAVAILABLE
    assert "PAYMENTS_AUTH" in result.error_detail
    assert provider.calls() == 0


def test_log_line__carries_no_body(provider, caplog):
    provider.plan("/charges", status(422))
    caplog.set_level("DEBUG")

    call(binding(url=provider.url("/charges")), context({"iban": "ES00-private"}))

    lines = [json.dumps(vars(r), default=str) for r in caplog.records]
    assert not any("ES00-private" in line or SECRET_MARK in line for line in lines)


# ------------------------------------------------------------------------------
# Asynchronous routes and the principal header
# ------------------------------------------------------------------------------
ASYNC_ENV = {"CALLBACK_SECRET": "c" * 40}


def test_async_route__a_202_is_accepted_whatever_its_body(provider):
    provider.plan("/verify", status(202, body=b'{"ticket": "t-1"}'))
    b = binding(
        url=provider.url("/verify"),
        environ=ASYNC_ENV,
        **{"async": True, "callback_secret_from_env": "CALLBACK_SECRET"},
    )

    result = call(b)

    assert (result.outcome, result.output, result.error_code) == (Outcome.ACCEPTED, None, None)
    assert provider.requests("/verify")[0].headers["idempotency-key"] == "exec-1:charge"


def test_sync_route__a_202_with_a_json_object_is_a_plain_success(provider):
    provider.plan("/verify", status(202, body=b'{"ticket": "t-1"}'))
    assert call(binding(url=provider.url("/verify"))).outcome is Outcome.SUCCEEDED


def test_principal_header__carries_who_caused_the_dispatch(provider):
    b = binding(url=provider.url("/charges"), principal_header="X-On-Behalf-Of")
    ctx = dataclasses.replace(context(), principal="maria@acme")

    assert call(b, ctx).outcome is Outcome.SUCCEEDED

    assert provider.requests("/charges")[0].headers["x-on-behalf-of"] == "maria@acme"


def test_principal_header__is_not_sent_without_a_principal_or_a_route_asking(provider):
    call(binding(url=provider.url("/a"), principal_header="X-On-Behalf-Of"))
    call(binding(url=provider.url("/b")), dataclasses.replace(context(), principal="m@acme"))
    assert all("x-on-behalf-of" not in r.headers for r in provider.requests())
