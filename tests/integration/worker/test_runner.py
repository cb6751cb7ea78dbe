"""One execution run against real PostgreSQL: actions, checkpoints, outcomes and finalisation."""

import pytest

from orquestador import errors
from tests.support.worker import (
    FAST,
    ScriptedAdapter,
    action,
    audit_events,
    binding,
    checkpoint_rows,
    enqueue,
    execution_row,
    make_due,
    ok,
    permanent,
    registry,
    request_row,
    run_next,
    runtime_for,
    transient,
    unknown,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(conn, runtime_dsn):
    """Claim and run the next due execution with these bindings."""

    def run_with(*bindings, config=FAST):
        with runtime_for(runtime_dsn, registry(*bindings), config=config) as runtime:
            return run_next(conn, runtime)

    return run_with


def _released(conn, accepted, *, version=3):
    request = request_row(conn, accepted.request_id)
    return (
        request["blocked_by_id"],
        request["version"],
        request["revision"],
        request["state"],
    ) == (
        None,
        version,
        2,
        "DRAFT",
    )


def _blocked(conn, accepted):
    request = request_row(conn, accepted.request_id)
    return (request["blocked_by_id"], request["revision"], request["state"]) == (
        accepted.execution_id,
        2,
        "DRAFT",
    )


def _types(conn, accepted):
    return [t for t, _ in audit_events(conn, accepted.request_id)]


# -- the pinned flow version ---------------------------------------------------------------
def test_run__follows_its_pinned_flow_version_while_a_newer_one_is_published(conn, make_flow, run):
    def rules(outcome, target):
        return [{"id": outcome, "when": True, "target": target, "outcome": outcome}]

    pinned = make_flow([action("a", "A")], key="pinned", version=1, rules=rules("V1", "DONE"))
    accepted = enqueue(conn, pinned)
    newer = make_flow([action("b", "B")], key="pinned", version=2, rules=rules("V2", "OTHER"))
    assert newer != pinned
    first, second = ScriptedAdapter(), ScriptedAdapter()

    result = run(binding("A", first), binding("B", second))

    assert (result.status, result.state["outcome"]) == ("completed", "V1")
    assert (len(first.calls), second.calls) == (1, [])
    assert set(checkpoint_rows(conn, accepted.execution_id)) == {"a"}
    assert request_row(conn, accepted.request_id)["state"] == "DONE"
    assert execution_row(conn, accepted.execution_id)["flow_id"] == pinned


# -- success --------------------------------------------------------------------------------
def test_run__one_no_op_action_completes_and_releases_the_request(conn, make_flow, run):
    flow_id = make_flow([action("check", "NO_OP", input={"x": {"from": "/data/x"}})])
    accepted = enqueue(conn, flow_id, data={"x": 1})

    result = run()

    assert result.status == "completed"
    assert result.state["targetState"] == "DONE"
    execution = execution_row(conn, accepted.execution_id)
    assert execution["status"] == "SUCCEEDED"
    assert execution["result"] == {"outcome": "OK", "targetState": "DONE"}
    assert execution["lease_owner"] is None and execution["finished_at"] is not None
    request = request_row(conn, accepted.request_id)
    assert request["state"] == "DONE"
    assert request["data"] == {"x": 1, "done": True}
    assert (request["revision"], request["version"], request["blocked_by_id"]) == (3, 3, None)
    checkpoint = checkpoint_rows(conn, accepted.execution_id)["check"]
    assert checkpoint["status"] == "SUCCEEDED"
    assert checkpoint["external_key"] == f"{accepted.execution_id}:check"
    assert (checkpoint["attempt"], checkpoint["effect"], checkpoint["fencing_token"]) == (
        1,
        "READ_ONLY",
        1,
    )
    assert checkpoint["output"] == {}
    assert audit_events(conn, accepted.request_id)[-1] == (
        "TRANSITION_COMPLETED",
        {
            "transitionId": "go",
            "principal": "alice@acme",
            "actionIds": ["check"],
            "hitPolicy": "FIRST",
            "ruleIds": ["always"],
        },
    )


def test_run__later_actions_and_the_decision_see_earlier_outputs(conn, make_flow, run):
    first = ScriptedAdapter(default=ok({"n": 41}))
    second = ScriptedAdapter(default=ok({"m": 42}))
    flow_id = make_flow(
        [action("a", "A"), action("b", "B", input={"n": {"from": "/actions/a/n"}})],
        hit_policy="UNIQUE",
        rules=[
            {
                "id": "big",
                "when": {"gt": [{"from": "/actions/b/m"}, 41]},
                "target": "DONE",
                "outcome": "BIG",
            },
            {
                "id": "small",
                "when": {"le": [{"from": "/actions/b/m"}, 41]},
                "target": "OTHER",
                "outcome": "SMALL",
            },
        ],
        updates=[{"path": "/result/m", "from": "/actions/b/m"}],
    )
    accepted = enqueue(conn, flow_id, data={"keep": "me"})

    assert run(binding("A", first), binding("B", second)).status == "completed"

    assert second.calls[0].input == {"n": 41}
    request = request_row(conn, accepted.request_id)
    assert request["data"] == {"keep": "me", "result": {"m": 42}}
    assert request["state"] == "DONE"
    assert audit_events(conn, accepted.request_id)[-1][1] == {
        "transitionId": "go",
        "principal": "alice@acme",
        "actionIds": ["a", "b"],
        "hitPolicy": "UNIQUE",
        "ruleIds": ["big"],
    }
    checkpoints = checkpoint_rows(conn, accepted.execution_id)
    assert [(c["sequence"], c["status"]) for c in checkpoints.values()] == [
        (0, "SUCCEEDED"),
        (1, "SUCCEEDED"),
    ]


def test_run__a_transition_without_actions_goes_straight_to_the_decision(conn, make_flow, run):
    accepted = enqueue(conn, make_flow([]))
    assert run().status == "completed"
    assert request_row(conn, accepted.request_id)["state"] == "DONE"


# -- refusals before any call ---------------------------------------------------------------
def test_run__a_modified_request_stops_before_any_adapter_call(conn, make_flow, run):
    adapter = ScriptedAdapter()
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    conn.execute(
        "UPDATE request SET revision = revision + 1, version = version + 1 WHERE id = %s",
        [accepted.request_id],
    )

    result = run(binding("A", adapter))

    assert result.status == "failed"
    assert adapter.calls == []
    assert checkpoint_rows(conn, accepted.execution_id) == {}
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == ("FAILED", errors.REQUEST_MODIFIED)
    request = request_row(conn, accepted.request_id)
    assert (request["blocked_by_id"], request["version"]) == (None, 4)
    assert audit_events(conn, accepted.request_id)[-1] == (
        "EXECUTION_FAILED",
        {
            "transitionId": "go",
            "principal": "alice@acme",
            "actionId": None,
            "errorCode": errors.REQUEST_MODIFIED,
        },
    )


def test_run__an_unconfigured_capability_fails_before_any_call(conn, make_flow, run):
    accepted = enqueue(conn, make_flow([action("a", "payments.charge")]))
    assert run().status == "failed"
    execution = execution_row(conn, accepted.execution_id)
    assert execution["error_code"] == errors.INTEGRATION_UNAVAILABLE
    assert checkpoint_rows(conn, accepted.execution_id) == {}
    assert _released(conn, accepted)


def test_run__input_refused_by_the_contract_fails_before_the_checkpoint(conn, make_flow, run):
    adapter = ScriptedAdapter()
    accepted = enqueue(conn, make_flow([action("a", "A", input={"amount": {"from": "/data/x"}})]))
    strict = binding(
        "A",
        adapter,
        input_schema={"type": "object", "properties": {"amount": {"type": "integer"}}},
    )
    assert run(strict).status == "failed"
    assert adapter.calls == []
    assert checkpoint_rows(conn, accepted.execution_id) == {}
    assert execution_row(conn, accepted.execution_id)["error_code"] == errors.INPUT_INVALID
    assert _released(conn, accepted)


# -- adapter outcomes -----------------------------------------------------------------------
def test_run__an_invalid_output_of_a_read_fails_and_releases(conn, make_flow, run):
    adapter = ScriptedAdapter(default=ok({"score": "high"}))
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    typed = binding(
        "A", adapter, output_schema={"type": "object", "properties": {"score": {"type": "integer"}}}
    )
    assert run(typed).status == "failed"
    checkpoint = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (checkpoint["status"], checkpoint["error_code"]) == ("FAILED", errors.OUTPUT_INVALID)
    assert execution_row(conn, accepted.execution_id)["error_code"] == errors.OUTPUT_INVALID
    assert _released(conn, accepted)


def test_run__an_invalid_output_of_a_write_goes_to_reconciliation(conn, make_flow, run):
    adapter = ScriptedAdapter(default=ok({"unexpected": True}))
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    write = binding(
        "A",
        adapter,
        effect="IDEMPOTENT_WRITE",
        output_schema={"type": "object", "required": ["id"]},
    )
    assert run(write).status == "failed"
    checkpoint = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (checkpoint["status"], checkpoint["output"]) == ("UNKNOWN", {"unexpected": True})
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == (
        "RECONCILIATION_REQUIRED",
        errors.OUTPUT_INVALID,
    )
    assert _blocked(conn, accepted)


def test_run__a_permanent_refusal_with_no_write_fails_and_releases(conn, make_flow, run):
    adapter = ScriptedAdapter(default=permanent("HTTP_422"))
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    assert run(binding("A", adapter, effect="NON_IDEMPOTENT_WRITE")).status == "failed"
    checkpoint = checkpoint_rows(conn, accepted.execution_id)["a"]
    assert (checkpoint["status"], checkpoint["error_code"]) == ("FAILED", "HTTP_422")
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == ("FAILED", errors.PERMANENT_FAILURE)
    assert execution["lease_owner"] is None
    assert _released(conn, accepted)
    assert audit_events(conn, accepted.request_id)[-1] == (
        "EXECUTION_FAILED",
        {
            "transitionId": "go",
            "principal": "alice@acme",
            "actionId": "a",
            "errorCode": errors.PERMANENT_FAILURE,
        },
    )


def test_run__a_failure_after_a_successful_write_goes_to_reconciliation(conn, make_flow, run):
    write = ScriptedAdapter(default=ok({"id": "ch_1"}))
    read = ScriptedAdapter(default=permanent("HTTP_404"))
    accepted = enqueue(conn, make_flow([action("charge", "W"), action("notify", "R")]))

    assert run(binding("W", write, effect="NON_IDEMPOTENT_WRITE"), binding("R", read)).status == (
        "failed"
    )

    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == (
        "RECONCILIATION_REQUIRED",
        errors.PERMANENT_FAILURE,
    )
    assert execution["finished_at"] is None and execution["lease_owner"] is None
    assert _blocked(conn, accepted)
    checkpoints = checkpoint_rows(conn, accepted.execution_id)
    assert checkpoints["charge"]["status"] == "SUCCEEDED"  # kept for the operator
    assert audit_events(conn, accepted.request_id)[-1] == (
        "RECONCILIATION_REQUIRED",
        {
            "transitionId": "go",
            "principal": "alice@acme",
            "actionId": "notify",
            "errorCode": errors.PERMANENT_FAILURE,
        },
    )


def test_run__an_unknown_outcome_of_a_non_idempotent_write_goes_to_reconciliation(
    conn, make_flow, run
):
    adapter = ScriptedAdapter(default=unknown())
    accepted = enqueue(conn, make_flow([action("charge", "W")]))

    assert run(binding("W", adapter, effect="NON_IDEMPOTENT_WRITE")).status == "failed"

    assert len(adapter.calls) == 1
    checkpoint = checkpoint_rows(conn, accepted.execution_id)["charge"]
    assert (checkpoint["status"], checkpoint["error_code"]) == ("UNKNOWN", "TIMEOUT_AFTER_SEND")
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == (
        "RECONCILIATION_REQUIRED",
        errors.UNCERTAIN_WRITE,
    )
    assert _blocked(conn, accepted)
    assert audit_events(conn, accepted.request_id)[-1] == (
        "RECONCILIATION_REQUIRED",
        {
            "transitionId": "go",
            "principal": "alice@acme",
            "actionId": "charge",
            "errorCode": errors.UNCERTAIN_WRITE,
        },
    )


def test_run__an_adapter_that_raises_is_an_unknown_outcome(conn, make_flow, run):
    adapter = ScriptedAdapter(script=[RuntimeError("bug")])
    accepted = enqueue(conn, make_flow([action("charge", "W")]))
    assert run(binding("W", adapter, effect="NON_IDEMPOTENT_WRITE")).status == "failed"
    assert checkpoint_rows(conn, accepted.execution_id)["charge"]["status"] == "UNKNOWN"
    assert execution_row(conn, accepted.execution_id)["error_code"] == errors.UNCERTAIN_WRITE


# -- retries --------------------------------------------------------------------------------
def test_run__a_transient_failure_schedules_a_retry_in_one_transaction(conn, make_flow, run):
    first = ScriptedAdapter(default=ok({"n": 1}))
    flaky = ScriptedAdapter(script=[transient()])
    accepted = enqueue(conn, make_flow([action("a", "A"), action("b", "B")]))
    bindings = (binding("A", first), binding("B", flaky))

    result = run(*bindings)

    # Not a wait: the SPI says failed, and the folded state says when the retry is due.
    assert result.status == "failed" and result.suspended_on is None
    assert result.state["executionStatus"] == "RETRY_WAIT" and result.state["nextAttemptAt"]
    execution = execution_row(conn, accepted.execution_id)
    assert execution["status"] == "RETRY_WAIT"
    assert execution["error_code"] == "HTTP_503"
    assert (execution["lease_owner"], execution["lease_expires_at"]) == (None, None)
    checkpoints = checkpoint_rows(conn, accepted.execution_id)
    assert checkpoints["a"]["status"] == "SUCCEEDED"  # earlier successes are kept
    assert (checkpoints["b"]["status"], checkpoints["b"]["error_code"]) == ("FAILED", "HTTP_503")
    kind, payload = audit_events(conn, accepted.request_id)[-1]
    assert kind == "RETRY_SCHEDULED"
    assert payload["actionId"] == "b" and payload["attempt"] == 1
    assert 0 <= payload["delaySeconds"] <= FAST.retry_base_seconds  # full jitter, first step
    assert _blocked(conn, accepted)

    make_due(conn, [accepted.execution_id])
    assert run(*bindings).status == "completed"
    assert len(first.calls) == 1  # the SUCCEEDED action is not repeated
    assert [c.attempt for c in flaky.calls] == [1, 2]
    assert execution_row(conn, accepted.execution_id)["attempts"] == 2


def test_run__a_retry_honours_retry_after_within_its_cap(conn, make_flow, run):
    adapter = ScriptedAdapter(script=[transient("HTTP_429", retry_after=3600)])
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    run(binding("A", adapter))
    payload = audit_events(conn, accepted.request_id)[-1][1]
    assert payload["delaySeconds"] == FAST.retry_after_max_seconds
    assert payload["retryAfterSeconds"] == 3600  # what the provider asked, kept in the audit
    due = execution_row(conn, accepted.execution_id)["next_attempt_at"]
    now = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    assert (due - now).total_seconds() <= FAST.retry_after_max_seconds


def test_run__a_shorter_retry_after_is_honoured_as_asked(conn, make_flow, run):
    adapter = ScriptedAdapter(script=[transient("HTTP_429", retry_after=0.125)])
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    run(binding("A", adapter))
    payload = audit_events(conn, accepted.request_id)[-1][1]
    assert payload["delaySeconds"] == payload["retryAfterSeconds"] == 0.125


def test_run__a_retry_without_retry_after_records_none(conn, make_flow, run):
    adapter = ScriptedAdapter(script=[transient("HTTP_503")])
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    run(binding("A", adapter))
    kind, payload = audit_events(conn, accepted.request_id)[-1]
    assert kind == "RETRY_SCHEDULED" and "delaySeconds" in payload
    assert "retryAfterSeconds" not in payload  # the jittered backoff, not the provider, chose it


def test_run__the_external_key_is_stable_across_attempts(conn, make_flow, run):
    adapter = ScriptedAdapter(script=[transient(), unknown()], default=ok())
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    write = binding("A", adapter, effect="IDEMPOTENT_WRITE", max_attempts=3)
    for _ in range(3):
        make_due(conn, [accepted.execution_id])
        run(write)
    assert execution_row(conn, accepted.execution_id)["status"] == "SUCCEEDED"
    assert [c.attempt for c in adapter.calls] == [1, 2, 3]
    assert {c.external_key for c in adapter.calls} == {f"{accepted.execution_id}:a"}
    assert checkpoint_rows(conn, accepted.execution_id)["a"]["attempt"] == 3


def test_run__exhausted_safe_retries_fail_and_release(conn, make_flow, run):
    adapter = ScriptedAdapter(default=transient())
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    for _ in range(2):
        make_due(conn, [accepted.execution_id])
        run(binding("A", adapter, max_attempts=2))
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == ("FAILED", errors.RETRIES_EXHAUSTED)
    assert _released(conn, accepted)
    assert _types(conn, accepted) == [
        "TRANSITION_ACCEPTED",
        "RETRY_SCHEDULED",
        "EXECUTION_FAILED",
    ]


def test_run__exhausted_retries_of_an_uncertain_write_keep_the_block(conn, make_flow, run):
    adapter = ScriptedAdapter(default=unknown())
    accepted = enqueue(conn, make_flow([action("a", "A")]))
    for _ in range(2):
        make_due(conn, [accepted.execution_id])
        run(binding("A", adapter, effect="IDEMPOTENT_WRITE", max_attempts=2))
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == (
        "RECONCILIATION_REQUIRED",
        errors.RETRIES_EXHAUSTED,
    )
    assert checkpoint_rows(conn, accepted.execution_id)["a"]["status"] == "UNKNOWN"
    assert _blocked(conn, accepted)


def test_run__a_transient_refusal_of_a_non_idempotent_write_is_retried_with_its_key(
    conn, make_flow, run
):
    adapter = ScriptedAdapter(script=[transient("CONNECT_REFUSED")], default=ok({"id": "ch_1"}))
    accepted = enqueue(conn, make_flow([action("charge", "W")]))
    write = binding("W", adapter, effect="NON_IDEMPOTENT_WRITE")
    run(write)
    assert checkpoint_rows(conn, accepted.execution_id)["charge"]["status"] == "FAILED"
    make_due(conn, [accepted.execution_id])
    assert run(write).status == "completed"
    assert [c.external_key for c in adapter.calls] == [f"{accepted.execution_id}:charge"] * 2


# -- finalisation ---------------------------------------------------------------------------
def test_run__no_matching_rule_fails_with_a_decision_error(conn, make_flow, run):
    accepted = enqueue(
        conn,
        make_flow(
            [action("a", "NO_OP")],
            rules=[{"id": "never", "when": False, "target": "DONE", "outcome": "OK"}],
        ),
    )
    assert run().status == "failed"
    assert execution_row(conn, accepted.execution_id)["error_code"] == errors.DECISION_NO_MATCH
    assert _released(conn, accepted)
    assert checkpoint_rows(conn, accepted.execution_id)["a"]["status"] == "SUCCEEDED"


def test_run__an_ambiguous_decision_fails(conn, make_flow, run):
    rules = [
        {"id": "x", "when": True, "target": "DONE", "outcome": "OK"},
        {"id": "y", "when": True, "target": "OTHER", "outcome": "NO"},
    ]
    accepted = enqueue(conn, make_flow([], rules=rules, hit_policy="UNIQUE"))
    assert run().status == "failed"
    assert execution_row(conn, accepted.execution_id)["error_code"] == errors.DECISION_AMBIGUOUS


def test_run__a_decision_error_after_a_write_goes_to_reconciliation(conn, make_flow, run):
    write = ScriptedAdapter(default=ok({"id": "x"}))
    flow_id = make_flow(
        [action("w", "W")],
        rules=[{"id": "never", "when": False, "target": "DONE", "outcome": "OK"}],
    )
    accepted = enqueue(conn, flow_id)
    run(binding("W", write, effect="IDEMPOTENT_WRITE"))
    execution = execution_row(conn, accepted.execution_id)
    assert (execution["status"], execution["error_code"]) == (
        "RECONCILIATION_REQUIRED",
        errors.DECISION_NO_MATCH,
    )
    assert audit_events(conn, accepted.request_id)[-1][1]["actionId"] == "w"
    assert _blocked(conn, accepted)
    # The last action's output, meant for the final commit, was saved on its own first: the
    # operator sees a write that happened, with what it returned.
    checkpoint = checkpoint_rows(conn, accepted.execution_id)["w"]
    assert (checkpoint["status"], checkpoint["output"]) == ("SUCCEEDED", {"id": "x"})


def test_run__updated_data_refused_by_the_data_schema_fails(conn, make_flow, run):
    flow_id = make_flow(
        [action("a", "NO_OP")],
        data_schema={"type": "object", "properties": {"done": {"type": "string"}}},
    )
    accepted = enqueue(conn, flow_id)
    assert run().status == "failed"
    assert execution_row(conn, accepted.execution_id)["error_code"] == errors.DATA_INVALID
    request = request_row(conn, accepted.request_id)
    assert request["data"] == {} and request["state"] == "DRAFT"


def test_run__updated_data_over_the_size_limit_fails(conn, make_flow, run):
    big = ScriptedAdapter(default=ok({"blob": "x" * (errors.MAX_DATA_BYTES + 1)}))
    flow_id = make_flow([action("a", "A")], updates=[{"path": "/blob", "from": "/actions/a/blob"}])
    accepted = enqueue(conn, flow_id)
    assert run(binding("A", big)).status == "failed"
    assert execution_row(conn, accepted.execution_id)["error_code"] == errors.DATA_TOO_LARGE
    assert request_row(conn, accepted.request_id)["data"] == {}
