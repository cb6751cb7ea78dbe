"""The migration history (docs/worker-protocol.md#data-model), run forwards and backwards against
real PostgreSQL."""

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from executions.models import Execution
from orquestador.dbroles import grant_runtime

pytestmark = pytest.mark.django_db(transaction=True)

CHECKPOINTS = ("executions", "0002_checkpoints")
EFFECT = ("executions", "0003_action_execution_effect")


def _migrate(target: tuple[str, str]) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([target])


def _migrate_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    # As after any deployment's migrate: tables the rollback dropped and this run created again
    # are new to the runtime role until grantruntime runs.
    grant_runtime(connection=connection, role=settings.RUNTIME_DATABASE_USER)


def _columns(table: str) -> set[str]:
    with connection.cursor() as cursor:
        return {c.name for c in connection.introspection.get_table_description(cursor, table)}


def _insert_checkpoints(n: int, *, effect: str | None = "READ_ONLY") -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO flow (key, version, definition, checksum) VALUES ('m', 1, '{}', 'c') "
            "RETURNING id"
        )
        flow_id = cursor.fetchone()[0]
        cursor.execute(
            "INSERT INTO request (id, flow_id, owner, scope, data, state) "
            "VALUES (gen_random_uuid(), %s, 'o', 't', '{}', 'S') RETURNING id",
            [flow_id],
        )
        request_id = cursor.fetchone()[0]
        cursor.execute(
            "INSERT INTO execution (id, request_id, flow_id, transition_id, accepted_revision, "
            "actor_snapshot) VALUES (gen_random_uuid(), %s, %s, 't', 2, '{}') RETURNING id",
            [request_id, flow_id],
        )
        execution_id = cursor.fetchone()[0]
        # Before migration 0003 there is no effect column to fill.
        columns = "" if effect is None else ", effect"
        values = "" if effect is None else f", '{effect}'"
        for i in range(n):
            cursor.execute(
                "INSERT INTO action_execution (execution_id, action_id, sequence, capability, "
                f"capability_version, status, input_hash, external_key, attempt, fencing_token"
                f"{columns}) VALUES (%s, %s, %s, 'payments.charge', 1, 'SUCCEEDED', 'h', %s, 1, 1"
                f"{values})",
                [execution_id, f"a{i}", i, f"{execution_id}:a{i}"],
            )


def test_migrations__round_trip_classifies_old_checkpoints_as_non_idempotent():
    try:
        _migrate(CHECKPOINTS)
        assert "effect" not in _columns("action_execution")
        _insert_checkpoints(3, effect=None)

        _migrate(EFFECT)
        with connection.cursor() as cursor:
            cursor.execute("SELECT DISTINCT effect FROM action_execution")
            assert cursor.fetchall() == [("NON_IDEMPOTENT_WRITE",)]
            # No default survives the migration: a new checkpoint must state its effect.
            cursor.execute(
                "SELECT column_default FROM information_schema.columns "
                "WHERE table_name = 'action_execution' AND column_name = 'effect'"
            )
            assert cursor.fetchone() == (None,)

        _migrate(CHECKPOINTS)
        assert "effect" not in _columns("action_execution")
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM action_execution")
            assert cursor.fetchone() == (3,)

        _migrate(EFFECT)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*), min(effect) FROM action_execution")
            assert cursor.fetchone() == (3, "NON_IDEMPOTENT_WRITE")
    finally:
        _migrate_latest()


def test_migrations__effect_and_status_are_check_constraints():
    _insert_checkpoints(1)
    with pytest.raises(Exception, match="action_execution_effect_valid"):
        with connection.cursor() as cursor:
            cursor.execute("UPDATE action_execution SET effect = 'MAYBE_SAFE'")


def test_migrations__execution_status_is_a_check_constraint():
    _insert_checkpoints(1)
    with pytest.raises(Exception, match="execution_status_valid"):
        with connection.cursor() as cursor:
            cursor.execute("UPDATE execution SET status = 'DONE'")


def test_migrations__checkpoint_is_unique_per_execution_and_action():
    _insert_checkpoints(1)
    with pytest.raises(Exception, match="action_execution_action_uniq"):
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO action_execution (execution_id, action_id, sequence, capability, "
                "capability_version, effect, status, input_hash, external_key, attempt, "
                "fencing_token) SELECT execution_id, action_id, 9, capability, 1, 'READ_ONLY', "
                "'RUNNING', 'h', 'k', 1, 1 FROM action_execution"
            )


def test_readyz__reports_unapplied_migrations_then_recovers():
    client = Client()
    assert client.get("/readyz").status_code == 200
    try:
        _migrate(CHECKPOINTS)
        response = client.get("/readyz")
        assert response.status_code == 503
        body = response.json()
        assert body["reason"] == "unapplied migrations"
        assert "executions.0003_action_execution_effect" in body["migrations"]
    finally:
        _migrate_latest()
    assert client.get("/readyz").status_code == 200


def test_claim_index__is_partial_over_live_statuses():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'execution_claim_idx'")
        (definition,) = cursor.fetchone()
    assert "next_attempt_at, created_at, id" in definition
    assert "WHERE" in definition and "PENDING" in definition and "SUCCEEDED" not in definition


VOCABULARY_CHECKS = (
    "execution_status_valid",
    "execution_terminal_has_finished_at",
    "audit_type_valid",
    "action_execution_status_valid",
    "action_execution_effect_valid",
    "execution_event_status_valid",
    "action_attempt_status_valid",
)


def test_vocabulary_checks__are_one_array_constant_each():
    # PostgreSQL parses a table's CHECK constraints again in every statement that writes it: a
    # vocabulary stored as a list of constants is three times the text (docs/adr/0024).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname, pg_get_constraintdef(oid), convalidated FROM pg_constraint "
            "WHERE conname = ANY(%s)",
            [list(VOCABULARY_CHECKS)],
        )
        found = {name: (definition, valid) for name, definition, valid in cursor.fetchall()}
    assert set(found) == set(VOCABULARY_CHECKS)
    for name, (definition, valid) in found.items():
        assert "= ANY ('{" in definition and "ARRAY[" not in definition, (name, definition)
        assert valid, name


def test_vocabulary_checks__still_refuse_a_value_outside_it():
    _insert_checkpoints(1)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE execution SET status = 'SUCCEEDED', finished_at = now()")
        for statement, constraint in (
            ("UPDATE execution SET status = 'RUNNING_LATE'", "execution_status_valid"),
            ("UPDATE execution SET finished_at = NULL", "execution_terminal_has_finished_at"),
            ("UPDATE action_execution SET status = 'DONE'", "action_execution_status_valid"),
        ):
            with pytest.raises(Exception, match=constraint), transaction.atomic():
                cursor.execute(statement)


def test_vocabulary_checks__validate_in_python_as_in_postgresql():
    # Django validates model constraints in forms (the admin) by asking PostgreSQL the
    # condition: `one_of` must say there what the table says.
    (check,) = [c for c in Execution._meta.constraints if c.name == "execution_status_valid"]
    check.validate(Execution, Execution(status="RUNNING"))
    with pytest.raises(ValidationError, match="execution_status_valid"):
        check.validate(Execution, Execution(status="RUNNING_LATE"))


def test_models_and_migrations_agree():
    """Every model change has its migration, and the history has one leaf per app (branches
    merged side by side are renumbered, not left as two heads)."""
    from django.core.management import call_command

    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    assert len(leaves) == len({app for app, _ in leaves}), leaves
