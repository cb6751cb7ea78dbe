"""Publishing flows on real PostgreSQL: immutability, concurrency, and `manage.py loadflow`."""

import copy
import io
import json
import subprocess
import threading
import time
from pathlib import Path

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections

from actions.base import ActionContext, Outcome
from actions.blocking import run_blocking
from actions.registry import NO_OP, Registry
from executions.flows.canonical import canonical_json, sha256_hex
from executions.flows.evaluator import apply_updates, build_context, decide, resolve_input
from executions.flows.publication import (
    FlowConflict,
    FlowInvalid,
    find_transition,
    flow_latest,
    flow_publish,
    validate_data,
)
from executions.models import Flow
from tests.conftest import manage

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEADLINE = 10  # seconds to wait for a condition before failing


def example(name: str) -> dict:
    return json.loads((EXAMPLES / f"{name}.json").read_text())


def changed(definition: dict) -> dict:
    other = copy.deepcopy(definition)
    other["states"].append("ARCHIVED")
    return other


# -- flow_publish --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_flow_publish__stores_the_definition_with_its_checksum():
    definition = example("onboarding")
    flow, created = flow_publish(definition=definition)
    assert created is True
    stored = Flow.objects.get(pk=flow.pk)
    assert (stored.key, stored.version) == ("onboarding", 1)
    assert stored.definition == definition
    assert stored.checksum == sha256_hex(definition)
    assert stored.published_at is not None
    assert str(stored) == "onboarding@1"


@pytest.mark.django_db
def test_flow_publish__identical_content_is_a_no_op_whatever_the_key_order():
    definition = example("onboarding")
    first, _ = flow_publish(definition=definition)
    reordered = json.loads(json.dumps(definition, sort_keys=True))
    assert list(reordered) != list(definition)
    again, created = flow_publish(definition=reordered)
    assert created is False
    assert again.pk == first.pk
    assert Flow.objects.count() == 1


@pytest.mark.django_db
def test_flow_publish__different_content_for_a_published_version_is_refused():
    definition = example("onboarding")
    first, _ = flow_publish(definition=definition)
    with pytest.raises(FlowConflict, match="onboarding@1 is already published"):
        flow_publish(definition=changed(definition))
    stored = Flow.objects.get()
    assert stored.pk == first.pk
    assert stored.definition == definition


@pytest.mark.django_db
def test_flow_publish__a_new_version_is_a_new_row():
    definition = example("onboarding")
    flow_publish(definition=definition)
    second = changed(definition)
    second["version"] = 2
    _, created = flow_publish(definition=second)
    assert created is True
    assert sorted(Flow.objects.values_list("version", flat=True)) == [1, 2]


@pytest.mark.django_db
def test_flow_publish__invalid_definition_stores_nothing():
    definition = example("onboarding")
    definition["initialState"] = "NOWHERE"
    definition["transitions"][0]["decision"]["hitPolicy"] = "SOME"
    with pytest.raises(FlowInvalid) as exc:
        flow_publish(definition=definition)
    assert [p.path for p in exc.value.problems] == [
        "$.initialState",
        "$.transitions[0].decision.hitPolicy",
    ]
    assert not Flow.objects.exists()


@pytest.mark.django_db
def test_flow_latest__is_the_highest_version():
    definition = example("onboarding")
    for version in (2, 10, 9):
        flow_publish(definition={**definition, "version": version})
    flow_publish(definition={**example("documents"), "version": 30})
    assert flow_latest(key="onboarding").version == 10
    assert flow_latest(key="nothing") is None


# -- concurrent publishers -----------------------------------------------------------------------


def _publish_in_threads(definitions: list[dict]) -> list:
    """Run flow_publish once per definition, all released at the same moment by a barrier."""
    barrier = threading.Barrier(len(definitions))
    results: list = [None] * len(definitions)

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=DEADLINE)
            results[index] = flow_publish(definition=definitions[index])
        except Exception as exc:  # the test inspects what each thread got
            results[index] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(definitions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=DEADLINE)
        assert not thread.is_alive()
    return results


@pytest.mark.django_db(transaction=True)
def test_flow_publish__concurrent_identical_publishes_leave_one_row():
    results = _publish_in_threads([example("onboarding") for _ in range(8)])
    assert all(isinstance(result, tuple) for result in results), results
    assert sorted(created for _, created in results) == [False] * 7 + [True]
    assert len({flow.pk for flow, _ in results}) == 1
    assert Flow.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_flow_publish__concurrent_different_publishes_keep_one_content():
    first, second = example("onboarding"), changed(example("onboarding"))
    results = _publish_in_threads([first, second] * 4)
    stored = Flow.objects.get()
    winner = [first, second][[first, second].index(stored.definition)]
    for definition, result in zip([first, second] * 4, results, strict=True):
        if definition == winner:
            assert isinstance(result, tuple) and result[0].pk == stored.pk
        else:
            assert isinstance(result, FlowConflict)
    assert sum(1 for r in results if isinstance(r, tuple) and r[1]) == 1


def _wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("holder_content", "holder_commits", "expected"),
    [
        ("same", True, "unchanged"),
        ("different", True, "conflict"),
        ("same", False, "created"),
    ],
)
@pytest.mark.django_db(transaction=True)
def test_flow_publish__insert_race_is_settled_by_the_unique_constraint(
    migration_dsn, holder_content, holder_commits, expected
):
    """Another publisher's uncommitted row makes our INSERT wait, then decide on its outcome."""
    definition = example("onboarding")
    theirs = definition if holder_content == "same" else changed(definition)
    outcome: dict = {}
    started = threading.Event()

    def publish() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                outcome["pid"] = cursor.fetchone()[0]
            started.set()
            outcome["result"] = flow_publish(definition=definition)
        except Exception as exc:  # the test inspects what the thread got
            outcome["result"] = exc
        finally:
            started.set()
            connections.close_all()

    with (
        psycopg.connect(migration_dsn) as holder,
        psycopg.connect(migration_dsn, autocommit=True) as observer,
    ):
        holder.execute(
            "INSERT INTO flow (key, version, definition, checksum) VALUES (%s, %s, %s, %s)",
            ("onboarding", 1, canonical_json(theirs), sha256_hex(theirs)),
        )
        holder_pid = holder.info.backend_pid
        thread = threading.Thread(target=publish)
        thread.start()
        assert started.wait(DEADLINE)

        def blocked() -> bool:
            row = observer.execute(
                "SELECT %s = ANY(pg_blocking_pids(%s))", (holder_pid, outcome["pid"])
            ).fetchone()
            return bool(row[0])

        _wait_until(blocked, "the publisher waits on the other publisher's row")
        if holder_commits:
            holder.commit()
        else:
            holder.rollback()
        thread.join(DEADLINE)
        assert not thread.is_alive()

    result = outcome["result"]
    stored = Flow.objects.get()
    if expected == "conflict":
        assert isinstance(result, FlowConflict)
        assert stored.definition == theirs
    else:
        assert isinstance(result, tuple), result
        assert result[1] is (expected == "created")
        assert result[0].pk == stored.pk
        assert stored.definition == definition


# -- manage.py loadflow --------------------------------------------------------------------------


def loadflow(path) -> str:
    out = io.StringIO()
    call_command("loadflow", str(path), stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_loadflow__publishes_then_reports_unchanged():
    assert loadflow(EXAMPLES / "onboarding.json") == "published onboarding@1\n"
    assert loadflow(EXAMPLES / "onboarding.json") == "unchanged onboarding@1\n"
    assert loadflow(EXAMPLES / "documents.json") == "published documents@1\n"
    assert sorted(Flow.objects.values_list("key", flat=True)) == ["documents", "onboarding"]


@pytest.mark.django_db
def test_loadflow__publishes_several_files_in_order_in_one_call():
    out = io.StringIO()
    call_command(
        "loadflow", str(EXAMPLES / "onboarding.json"), str(EXAMPLES / "documents.json"), stdout=out
    )
    assert out.getvalue() == "published onboarding@1\npublished documents@1\n"


@pytest.mark.django_db
def test_loadflow__invalid_json_is_a_command_error(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"key": "x",\n  "version": }')
    with pytest.raises(CommandError) as exc:
        loadflow(path)
    assert "is not valid JSON: Expecting value at line 2 column 14" in str(exc.value)
    assert not Flow.objects.exists()


@pytest.mark.django_db
def test_loadflow__lists_every_problem_with_its_path(tmp_path):
    definition = example("onboarding")
    definition["states"].append("DRAFT")
    definition["transitions"][1]["actions"][0]["input"]["x"] = {"from": "/actions/later/x"}
    definition["transitions"][2]["updates"][0] = {"path": "/a/-", "value": 1}
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(definition))
    with pytest.raises(CommandError) as exc:
        loadflow(path)
    lines = str(exc.value).splitlines()
    assert lines[0].endswith("flow.json: invalid flow definition:")
    assert lines[1:] == [
        "  $.states[4]: duplicate state 'DRAFT'",
        "  $.transitions[1].actions[0].input.x.from: action 'later' is not one of the earlier "
        "actions of this transition",
        '  $.transitions[2].updates[0].path: the append token "-" is not supported',
    ]
    assert not Flow.objects.exists()


@pytest.mark.django_db
def test_loadflow__a_changed_published_version_is_refused(tmp_path):
    loadflow(EXAMPLES / "onboarding.json")
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(changed(example("onboarding"))))
    with pytest.raises(CommandError, match="onboarding@1 is already published with different"):
        loadflow(path)
    assert Flow.objects.get().definition == example("onboarding")


@pytest.mark.django_db
def test_loadflow__missing_file_is_a_command_error(tmp_path):
    with pytest.raises(CommandError, match=r"cannot read .*absent\.json: No such file"):
        loadflow(tmp_path / "absent.json")


# -- the demo flow -------------------------------------------------------------------------------


def _run(definition: dict, transition_id: str, data: dict, registry: Registry):
    """Drive one transition the way the worker does, with the simulation adapters."""
    transition = find_transition(definition, transition_id)
    outputs: dict = {}
    for action in transition["actions"]:
        binding = registry.resolve(action["capability"], action["version"])
        context = build_context(data, outputs)
        ctx = ActionContext(
            input=resolve_input(action, context),
            request_id="r",
            execution_id="e",
            action_id=action["id"],
            owner="o",
            scope="s",
            external_key=f"e:{action['id']}",
            attempt=1,
        )
        result = run_blocking(binding.adapter.call(ctx, binding))
        assert result.outcome is Outcome.SUCCEEDED
        outputs[action["id"]] = result.output
    context = build_context(data, outputs)
    decision = decide(transition, context)
    new_data = apply_updates(transition, data, context)
    validate_data(definition, new_data)
    return decision, new_data


def test_onboarding_example__moves_a_request_under_simulation():
    definition = example("onboarding")
    registry = Registry(simulation={"NO_OP@1": NO_OP}, simulation_mode=True)
    data = {"applicant": "Ada", "amount": 500}
    validate_data(definition, data)

    decision, data = _run(definition, "submit", data, registry)
    assert (decision.target, decision.outcome, decision.rule_ids) == (
        "SUBMITTED",
        "SUBMITTED",
        ("complete",),
    )
    assert data["submission"] == {"check": {}, "submitted": True}

    decision, approved = _run(definition, "approve", data, registry)
    assert (decision.target, decision.outcome, decision.hit_policy) == (
        "APPROVED",
        "APPROVED",
        "UNIQUE",
    )
    assert approved["review"] == {"record": {}, "approved": True}

    decision, _ = _run(definition, "approve", {**data, "amount": 20000}, registry)
    assert (decision.target, decision.outcome) == ("SUBMITTED", "NEEDS_SENIOR_APPROVAL")

    decision, rejected = _run(definition, "reject", data, registry)
    assert decision.target == "REJECTED"
    assert rejected["review"] == {"approved": False}

    decision, _ = _run(definition, "submit", {}, registry)
    assert (decision.target, decision.outcome) == ("DRAFT", "INCOMPLETE")


def test_onboarding_example__uses_only_the_simulation_capability():
    capabilities = {
        (action["capability"], action["version"])
        for transition in example("onboarding")["transitions"]
        for action in transition["actions"]
    }
    assert capabilities == {("NO_OP", 1)}


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_loadflow__as_a_real_process_on_the_runtime_role(process_env, tmp_path):
    def run(path) -> subprocess.CompletedProcess:
        return subprocess.run(
            manage("loadflow", str(path)),
            env=process_env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    first = run(EXAMPLES / "onboarding.json")
    assert (first.returncode, first.stdout) == (0, "published onboarding@1\n"), first.stderr
    again = run(EXAMPLES / "onboarding.json")
    assert (again.returncode, again.stdout) == (0, "unchanged onboarding@1\n"), again.stderr

    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({**example("onboarding"), "version": 2, "initialState": "X"}))
    refused = run(broken)
    assert refused.returncode != 0
    assert "$.initialState: 'X' is not one of the states" in refused.stderr
    assert list(Flow.objects.values_list("key", "version")) == [("onboarding", 1)]


@pytest.mark.django_db
def test_loadflow__refuses_a_pattern_the_linear_engine_cannot_compile(tmp_path):
    definition = example("onboarding")
    definition["dataSchema"].setdefault("properties", {})["ref"] = {
        "type": "string",
        "pattern": "^(?!admin).*$",
    }
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(definition))
    with pytest.raises(CommandError) as exc:
        loadflow(path)
    assert (
        "  $.dataSchema.properties.ref.pattern: pattern '^(?!admin).*$' is not a pattern the "
        "linear-time engine (RE2) accepts" in str(exc.value)
    )
    assert not Flow.objects.exists()
