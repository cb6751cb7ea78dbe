"""documents.verify against a real loopback document store."""

import hashlib
import threading
import time

import pytest

from actions import documents
from actions.base import Outcome
from orquestador import errors
from tests.support.providers import drip, drop, slow, slow_body, status

from .conftest import binding, context, run

PDF = b"%PDF-1.7 example document\n" * 40
PDF_SHA = hashlib.sha256(PDF).hexdigest()


def verify(store, data, **route):
    route.setdefault("url", store.url("/documents/{documentId}"))
    b = binding(
        "documents.verify", effect="READ_ONLY", adapter="documents.verify", timeout=2.0, **route
    )
    return run(b.adapter.call(context(data, key="e:verify"), b))


def test_verify__matching_hash__verified(store):
    store.put("doc-1", PDF, "application/pdf")

    result = verify(store, {"documentId": "doc-1", "sha256": PDF_SHA.upper()})

    assert result.outcome is Outcome.SUCCEEDED
    assert result.output == {
        "verified": True,
        "sha256": PDF_SHA,
        "size": len(PDF),
        "mediaType": "application/pdf",
    }


def test_verify__other_hash__not_verified(store):
    store.put("doc-1", PDF)

    result = verify(store, {"documentId": "doc-1", "sha256": "0" * 64})

    assert result.outcome is Outcome.SUCCEEDED
    assert result.output["verified"] is False
    assert result.output["sha256"] == PDF_SHA


@pytest.mark.parametrize(("media_type", "verified"), [("image/png", True), ("text/html", False)])
def test_verify__media_type_allow_list(store, media_type, verified):
    store.put("doc-1", PDF, media_type)

    result = verify(
        store,
        {"documentId": "doc-1", "sha256": PDF_SHA},
        allowed_media_types=["application/pdf", "image/png"],
    )

    assert result.output["verified"] is verified
    assert result.output["mediaType"] == media_type


def test_verify__id_is_quoted_into_the_path(store):
    store.put("a:b~c.d", PDF)

    result = verify(store, {"documentId": "a:b~c.d", "sha256": PDF_SHA})

    assert result.output["verified"] is True
    assert store.requests()[0].path == "/documents/a%3Ab~c.d"


@pytest.mark.parametrize("document_id", ["../admin", "..", "a/b", "a?x=1", "", "x" * 201])
def test_verify__unsafe_id__refused_before_any_call(store, document_id):
    result = verify(store, {"documentId": document_id, "sha256": PDF_SHA})

    assert result.outcome is Outcome.PERMANENT
    assert result.error_code == errors.INPUT_INVALID
    assert store.calls() == 0


def test_verify__input_schema_is_the_adapters():
    b = binding(
        "documents.verify",
        effect="READ_ONLY",
        adapter="documents.verify",
        url="http://127.0.0.1:9/documents/{documentId}",
    )

    assert b.contract.input_schema["required"] == ["documentId", "sha256"]
    assert b.contract.output_schema["required"] == ["verified", "sha256", "size", "mediaType"]
    assert b.effect == "READ_ONLY"


def test_verify__missing_document__permanent(store):
    result = verify(store, {"documentId": "nope", "sha256": PDF_SHA})

    assert result.outcome is Outcome.PERMANENT
    assert result.error_code == errors.PERMANENT_FAILURE
    assert "not found" in result.error_detail


@pytest.mark.parametrize("declared", [True, False])
def test_verify__over_max_bytes__permanent(store, declared):
    store.put("big", PDF)
    if not declared:
        from tests.support.providers import raw

        store.plan("/documents/big", raw(PDF, content_type="application/pdf", declare_length=False))

    result = verify(store, {"documentId": "big", "sha256": PDF_SHA}, max_bytes=100)

    assert result.outcome is Outcome.PERMANENT
    assert "max_bytes" in result.error_detail


@pytest.mark.parametrize(
    "reply", [status(503, retry_after=4), status(429, retry_after=4), drop(), slow(30)]
)
def test_verify__store_trouble__transient(store, reply):
    store.put("doc-1", PDF)
    store.plan("/documents/doc-1", reply)

    started = time.monotonic()
    result = verify(store, {"documentId": "doc-1", "sha256": PDF_SHA})

    assert time.monotonic() - started < 4
    assert result.outcome is Outcome.TRANSIENT
    if reply.kind == "status":
        assert result.retry_after == 4


def test_verify__body_dripping_past_the_budget__transient(store):
    store.put("doc-1", PDF)
    store.plan("/documents/doc-1", slow_body(30))

    started = time.monotonic()
    result = verify(store, {"documentId": "doc-1", "sha256": PDF_SHA})

    assert time.monotonic() - started < 3.5
    assert result.outcome is Outcome.TRANSIENT


def test_verify__document_dripping_byte_by_byte__transient_at_the_deadline(store):
    store.put("doc-1", PDF)
    store.plan("/documents/doc-1", drip(0.02))

    started = time.monotonic()
    result = verify(store, {"documentId": "doc-1", "sha256": PDF_SHA})

    assert time.monotonic() - started < 3.5
    assert result.outcome is Outcome.TRANSIENT
    assert "budget" in result.error_detail


def test_verify__large_document__hashed_in_a_thread_batch_by_batch(store, monkeypatch):
    big = bytes(range(256)) * (3 * documents.OFF_LOOP_BYTES // 256 + 7)  # about three batches
    store.put("big", big)
    hash_all, threads = documents.StreamedDigest._hash_all, []

    def hash_and_note_the_thread(self, chunks):
        threads.append(threading.get_ident())
        hash_all(self, chunks)

    monkeypatch.setattr(documents.StreamedDigest, "_hash_all", hash_and_note_the_thread)
    data = {"documentId": "big", "sha256": hashlib.sha256(big).hexdigest()}

    result = verify(store, data, max_bytes=4 * documents.OFF_LOOP_BYTES)

    assert result.output["verified"] is True and result.output["size"] == len(big)
    *batches, remainder = threads
    assert len(batches) >= 2 and threading.get_ident() not in batches  # in a thread
    assert remainder == threading.get_ident()  # what was left under a batch, on the loop


def test_verify__forbidden__permanent(store):
    store.plan("/documents/doc-1", status(403))

    result = verify(store, {"documentId": "doc-1", "sha256": PDF_SHA})

    assert result.outcome is Outcome.PERMANENT
    assert "403" in result.error_detail


ASYNC = {"async": True, "callback_secret_from_env": "STORE_CALLBACK_SECRET"}


def verify_async(store, data):
    b = binding(
        "documents.verify",
        effect="READ_ONLY",
        adapter="documents.verify",
        timeout=2.0,
        environ={"STORE_CALLBACK_SECRET": "k" * 32},
        url=store.url("/documents/{documentId}"),
        **ASYNC,
    )
    return run(b.adapter.call(context(data, key="e:verify"), b))


def test_verify__async_store__a_202_is_accepted_for_a_later_callback(store):
    store.plan("/documents/doc-1", status(202, body=b""))

    result = verify_async(store, {"documentId": "doc-1", "sha256": PDF_SHA})

    assert (result.outcome, result.output) == (Outcome.ACCEPTED, None)


def test_verify__async_store__a_document_now_is_verified_at_once(store):
    store.put("doc-1", PDF)

    result = verify_async(store, {"documentId": "doc-1", "sha256": PDF_SHA})

    assert result.outcome is Outcome.SUCCEEDED and result.output["verified"] is True
