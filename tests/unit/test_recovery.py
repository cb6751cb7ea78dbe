"""The recovery table (docs/worker-protocol.md#recovery, executions/worker/recovery.py), row by row,
as pure decisions."""

import hashlib
from pathlib import Path

import pytest

from actions.base import ActionResult, Outcome
from executions.queue.claims import CheckpointRecord
from executions.queue.finalize import AttemptSettlement
from executions.worker import recovery
from executions.worker.recovery import (
    MAX_DETAIL_CHARS,
    Decision,
    Verb,
    after_call,
    before_call,
    before_run,
    finalize_refused,
    input_hash,
)
from orquestador import errors
from tests.support.purity import imported_modules

HASH = "a" * 64
KEY = "3f1c1f5e-4b4e-4f57-9b0e-0d3c7b1a2c9d:charge"
READ, IDEMPOTENT, WRITE = "READ_ONLY", "IDEMPOTENT_WRITE", "NON_IDEMPOTENT_WRITE"


def checkpoint(status, *, attempt=1, effect=WRITE, input_hash=HASH, key=KEY, **more):
    return CheckpointRecord(
        action_id="charge",
        sequence=0,
        capability="payments.charge",
        capability_version=1,
        effect=effect,
        status=status,
        input_hash=input_hash,
        external_key=key,
        attempt=attempt,
        output=more.get("output"),
        error_code=more.get("error_code"),
    )


def before(found, *, effect=WRITE, max_attempts=3, input_problem=None, **now):
    return before_call(
        found,
        action_id="charge",
        input_hash=now.get("input_hash", HASH),
        external_key=now.get("external_key", KEY),
        effect=effect,
        max_attempts=max_attempts,
        input_problem=input_problem,
    )


def after(result, *, effect=WRITE, attempt=1, max_attempts=3, problem=None, cancelled=False):
    return after_call(
        result,
        action_id="charge",
        attempt=attempt,
        effect=effect,
        max_attempts=max_attempts,
        output_problem=problem,
        cancelled=cancelled,
    )


def test_module_is_pure():
    """Decisions only: nothing in recovery.py can reach a connection, the ORM or the clock."""
    imported = imported_modules(recovery)
    assert imported <= {
        "enum",
        "dataclasses",
        "typing",
        "actions.base",
        "orquestador",
        "..queue.claims",  # CheckpointRecord, a value
        "..queue.finalize",  # AttemptSettlement, a value
        "..flows.canonical",
        "..models",  # the status and effect enums
    }
    assert "conn" not in Path(recovery.__file__).read_text()


# ------------------------------------------------------------------------------
# The input hash
# ------------------------------------------------------------------------------
def test_input_hash__is_sha256_of_the_canonical_json_in_hex():
    expected = hashlib.sha256('{"a":[1,"é"],"b":1}'.encode()).hexdigest()
    assert expected == "8717ac25ea6b88548fae92fcf938c6f0764f85913ba025812e1859bf0166f5d8"
    assert input_hash({"b": 1, "a": [1, "é"]}) == expected
    assert input_hash({"a": [1, "é"], "b": 1}) == expected  # key order does not matter
    assert input_hash({"a": [1, "é"], "b": 2}) != expected


# ------------------------------------------------------------------------------
# Before the actions
# ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("found", "revision", "expected"),
    [
        (True, 2, (Verb.PROCEED, None)),
        (False, 2, (Verb.FAIL, errors.CONTRACT_MISMATCH)),
        (True, 3, (Verb.FAIL, errors.REQUEST_MODIFIED)),
    ],
    ids=["proceed", "transition-not-in-pinned-flow", "revision-moved"],
)
def test_before_run(found, revision, expected):
    decision = before_run(
        transition_found=found,
        transition_id="go",
        flow_id=4,
        revision=revision,
        accepted_revision=2,
    )
    assert (decision.verb, decision.code) == expected


# ------------------------------------------------------------------------------
# Before an adapter call: the recovery table
# ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("found", "effect", "max_attempts", "expected"),
    [
        # no checkpoint: the first call
        (None, WRITE, 3, (Verb.PROCEED, None, 0)),
        # SUCCEEDED is reused, whatever the effect and the attempts used
        (checkpoint("SUCCEEDED", attempt=3, output={"id": 1}), WRITE, 3, (Verb.REUSE, None, 0)),
        (checkpoint("SUCCEEDED", effect=READ), READ, 1, (Verb.REUSE, None, 0)),
        # RUNNING/UNKNOWN of a safe effect: again, same key, within max_attempts
        (checkpoint("RUNNING", effect=READ), READ, 3, (Verb.PROCEED, None, 1)),
        (
            checkpoint("RUNNING", effect=READ, attempt=3),
            READ,
            3,
            (Verb.FAIL, errors.RETRIES_EXHAUSTED, 0),
        ),
        (
            checkpoint("UNKNOWN", effect=IDEMPOTENT, attempt=2),
            IDEMPOTENT,
            3,
            (Verb.PROCEED, None, 2),
        ),
        (
            checkpoint("RUNNING", effect=IDEMPOTENT, attempt=3),
            IDEMPOTENT,
            3,
            (Verb.FAIL, errors.RETRIES_EXHAUSTED, 0),
        ),
        # RUNNING/UNKNOWN of a non-idempotent write: never repeated
        (checkpoint("RUNNING"), WRITE, 3, (Verb.RECONCILE, errors.UNCERTAIN_WRITE, 0)),
        (checkpoint("UNKNOWN"), WRITE, 3, (Verb.RECONCILE, errors.UNCERTAIN_WRITE, 0)),
        # FAILED had no effect: retried while attempts remain
        (checkpoint("FAILED", attempt=2), WRITE, 3, (Verb.PROCEED, None, 2)),
        (checkpoint("FAILED", attempt=3), WRITE, 3, (Verb.FAIL, errors.RETRIES_EXHAUSTED, 0)),
        # an operator's replay grants exactly one more attempt past max_attempts
        (
            checkpoint("FAILED", attempt=3, error_code=errors.REPLAY_AUTHORIZED),
            WRITE,
            3,
            (Verb.PROCEED, None, 3),
        ),
    ],
    ids=[
        "first-call",
        "succeeded-reused",
        "succeeded-read-reused",
        "running-read-again",
        "running-read-exhausted",
        "unknown-idempotent-again",
        "running-idempotent-exhausted",
        "running-write-reconciled",
        "unknown-write-reconciled",
        "failed-again",
        "failed-exhausted",
        "replay-authorized",
    ],
)
def test_before_call__table(found, effect, max_attempts, expected):
    decision = before(found, effect=effect, max_attempts=max_attempts)
    assert (decision.verb, decision.code, decision.previous_attempt) == expected


def test_before_call__reuse_returns_the_checkpoints_output():
    assert before(checkpoint("SUCCEEDED", output={"id": 1})).output == {"id": 1}
    assert before(checkpoint("SUCCEEDED", output=None)).output == {}


@pytest.mark.parametrize(
    ("found", "now", "named"),
    [
        (checkpoint("SUCCEEDED", input_hash="b" * 64), {}, "input hash"),
        (checkpoint("SUCCEEDED", key="other:charge"), {}, "external key"),
        (checkpoint("SUCCEEDED", effect=IDEMPOTENT), {}, "effect"),
        (checkpoint("RUNNING", effect=READ), {"input_hash": "c" * 64}, "input hash"),
        (checkpoint("FAILED"), {"external_key": "x:charge"}, "external key"),
    ],
    ids=["input-hash", "external-key", "effect", "running-input-hash", "failed-external-key"],
)
def test_before_call__any_mismatch_is_contract_mismatch_to_reconciliation(found, now, named):
    decision = before(found, effect=found.effect if named != "effect" else WRITE, **now)
    assert (decision.verb, decision.code) == (Verb.RECONCILE, errors.CONTRACT_MISMATCH)
    assert named in decision.detail
    assert decision.output is None  # a foreign result is never used


def test_before_call__input_problem_fails_only_after_the_checkpoint_checks():
    invalid = before(None, input_problem="$.amount: -1 is less than 0")
    assert (invalid.verb, invalid.code) == (Verb.FAIL, errors.INPUT_INVALID)
    assert "$.amount" in invalid.detail
    mismatch = before(checkpoint("FAILED", input_hash="b" * 64), input_problem="bad")
    assert mismatch.code == errors.CONTRACT_MISMATCH


# ------------------------------------------------------------------------------
# After an adapter call
# ------------------------------------------------------------------------------
OK = ActionResult(Outcome.SUCCEEDED, output={"id": 7})
TRANSIENT = ActionResult(Outcome.TRANSIENT, error_code="HTTP_503", retry_after=2.0)
UNKNOWN = ActionResult(Outcome.UNKNOWN, error_code="TIMEOUT_AFTER_SEND")


@pytest.mark.parametrize(
    ("result", "kwargs", "expected"),
    [
        (OK, {}, (Verb.PROCEED, None, None)),
        (
            OK,
            {"problem": "$.id: bad", "effect": READ},
            (Verb.FAIL, errors.OUTPUT_INVALID, "FAILED"),
        ),
        (OK, {"problem": "$.id: bad"}, (Verb.RECONCILE, errors.OUTPUT_INVALID, "UNKNOWN")),
        (
            ActionResult(Outcome.PERMANENT, error_code="HTTP_422"),
            {},
            (Verb.FAIL, errors.PERMANENT_FAILURE, "FAILED"),
        ),
        (
            ActionResult(Outcome.PERMANENT, error_code=errors.INPUT_INVALID),
            {},
            (Verb.FAIL, errors.INPUT_INVALID, "FAILED"),
        ),
        (UNKNOWN, {}, (Verb.RECONCILE, errors.UNCERTAIN_WRITE, "UNKNOWN")),
        (UNKNOWN, {"effect": IDEMPOTENT}, (Verb.RETRY, "TIMEOUT_AFTER_SEND", "UNKNOWN")),
        (TRANSIENT, {}, (Verb.RETRY, "HTTP_503", "FAILED")),
        (TRANSIENT, {"attempt": 3}, (Verb.FAIL, errors.RETRIES_EXHAUSTED, "FAILED")),
        (TRANSIENT, {"cancelled": True}, (Verb.INTERRUPT, None, None)),
        (
            ActionResult(Outcome.PERMANENT, error_code="HTTP_422"),
            {"cancelled": True},
            (Verb.FAIL, errors.PERMANENT_FAILURE, "FAILED"),
        ),
    ],
    ids=[
        "succeeded",
        "bad-output-of-a-read",
        "bad-output-of-a-write",
        "permanent",
        "permanent-with-an-execution-code",
        "unknown-write",
        "unknown-idempotent-retried",
        "transient-retried",
        "transient-exhausted",
        "transient-while-stopping",
        "permanent-while-stopping",
    ],
)
def test_after_call__table(result, kwargs, expected):
    decision = after(result, **kwargs)
    settled = decision.settlement.status if decision.settlement else None
    assert (decision.verb, decision.code, settled) == expected


def test_after_call__retry_carries_the_providers_wait_and_the_attempt():
    decision = after(TRANSIENT, attempt=2)
    assert decision.retry_after == 2.0
    assert decision.settlement == AttemptSettlement("charge", 2, "FAILED", "HTTP_503", None)


def test_after_call__a_bad_write_output_is_kept_for_the_operator_a_bad_read_output_is_not():
    write = after(OK, problem="$.id: bad")
    read = after(OK, problem="$.id: bad", effect=READ)
    assert (write.settlement.output, read.settlement.output) == ({"id": 7}, None)


def test_after_call__the_checkpoint_keeps_the_adapters_own_code():
    decision = after(ActionResult(Outcome.PERMANENT, error_code="HTTP_422", error_detail="no"))
    assert decision.code == errors.PERMANENT_FAILURE
    assert decision.settlement.error_code == "HTTP_422"


def test_decisions__shorten_long_details():
    decision = after(ActionResult(Outcome.PERMANENT, error_detail="x" * 10_000))
    assert len(decision.detail) <= MAX_DETAIL_CHARS
    assert len(decision.settlement.error_detail) == MAX_DETAIL_CHARS


# ------------------------------------------------------------------------------
# At the final commit
# ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("unchanged", "unsettled", "expected"),
    [
        (False, [], (Verb.FAIL, errors.REQUEST_MODIFIED)),
        (False, ["a UNKNOWN"], (Verb.FAIL, errors.REQUEST_MODIFIED)),
        (True, ["a UNKNOWN"], (Verb.RECONCILE, errors.CONTRACT_MISMATCH)),
        (True, ["b MISSING"], (Verb.RECONCILE, errors.CONTRACT_MISMATCH)),
    ],
    ids=["state-or-revision-changed", "both-changed", "checkpoint-not-succeeded", "missing"],
)
def test_finalize_refused(unchanged, unsettled, expected):
    decision = finalize_refused(request_unchanged=unchanged, unsettled=unsettled)
    assert (decision.verb, decision.code) == expected
    if decision.code == errors.CONTRACT_MISMATCH:
        assert unsettled[0] in decision.detail


def test_decision__only_reuse_and_proceed_let_the_run_go_on():
    going_on = {verb for verb in Verb if not Decision(verb).ends_run}
    assert going_on == {Verb.REUSE, Verb.PROCEED}
