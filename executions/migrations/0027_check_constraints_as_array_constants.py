"""The CHECK constraints that test a vocabulary (statuses, effects, audit types) written with one
array constant, `status::text = ANY ('{...}'::text[])`, where `status IN (...)` stored a list of
constants: the same test, about a third of the stored text, which PostgreSQL parses again in
every statement that writes the table (docs/adr/0024-check-constraints-parsed-per-statement.md).

Each constraint is replaced under its own name, added NOT VALID (a moment's lock, no scan) and
then validated (a scan that takes no lock against writes), so the queue's large tables keep
taking writes meanwhile (hence not atomic). Backwards, the lists come back the same way.
"""

from django.db import migrations, models
from django.db.migrations.operations.base import Operation
from django.db.models import Q

# The vocabularies as they are at this migration (executions/choices.py).
EXECUTION_STATUSES = [
    "PENDING",
    "RUNNING",
    "RETRY_WAIT",
    "SUSPENDED",
    "SUCCEEDED",
    "FAILED",
    "RECONCILIATION_REQUIRED",
    "CANCELLED",
    "COMPENSATED",
]
TERMINAL_STATUSES = ["SUCCEEDED", "FAILED", "CANCELLED", "COMPENSATED"]
AUDIT_TYPES = [
    "REQUEST_CREATED",
    "TRANSITION_ACCEPTED",
    "RETRY_SCHEDULED",
    "TRANSITION_COMPLETED",
    "EXECUTION_FAILED",
    "EXECUTION_SUSPENDED",
    "EXECUTION_RESUMED",
    "EXECUTION_CANCELLED",
    "RECONCILIATION_REQUIRED",
    "RECONCILIATION_EVIDENCE",
    "RECONCILIATION_RESOLVED",
    "RECONCILIATION_PROPOSED",
    "RECONCILIATION_REJECTED",
    "LEASE_TAKEN_OVER",
    "COMPENSATION_STARTED",
    "EXECUTION_COMPENSATED",
]
CHECKPOINT_STATUSES = ["RUNNING", "SUCCEEDED", "FAILED", "UNKNOWN", "WAITING", "ACCEPTED"]
EFFECTS = ["READ_ONLY", "IDEMPOTENT_WRITE", "NON_IDEMPOTENT_WRITE"]
EVENT_STATUSES = ["ACCEPTED", "KEPT", "CONSUMED"]


class ReplaceCheck(Operation):
    """Replace a model's CHECK constraint by `constraint`, of the same name, with no lock held
    against writes while the table is scanned."""

    reversible = True

    def __init__(self, model_name, constraint):
        self.model_name = model_name
        self.constraint = constraint

    def deconstruct(self):
        return (
            self.__class__.__name__,
            [],
            {
                "model_name": self.model_name,
                "constraint": self.constraint,
            },
        )

    def state_forwards(self, app_label, state):
        state.remove_constraint(app_label, self.model_name.lower(), self.constraint.name)
        state.add_constraint(app_label, self.model_name.lower(), self.constraint)

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        self._replace(app_label, schema_editor, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        self._replace(app_label, schema_editor, to_state)

    def _replace(self, app_label, schema_editor, state):
        """Whatever the table has under the name becomes the constraint `state` declares."""
        model = state.apps.get_model(app_label, self.model_name)
        constraint = next(
            c
            for c in state.models[app_label, self.model_name.lower()].options["constraints"]
            if c.name == self.constraint.name
        )
        table = schema_editor.quote_name(model._meta.db_table)
        name = schema_editor.quote_name(constraint.name)
        schema_editor.execute(
            f"ALTER TABLE {table} DROP CONSTRAINT {name}, "
            f"ADD {constraint.constraint_sql(model, schema_editor)} NOT VALID"
        )
        schema_editor.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}")

    def describe(self):
        return f"Replace constraint {self.constraint.name} on model {self.model_name}"

    @property
    def migration_name_fragment(self):
        return f"replace_{self.constraint.name}"


def _one_of(field, values):
    return Q(**{f"{field}__one_of": values})


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("executions", "0026_webhook_delivery_held_until"),
    ]

    operations = [
        ReplaceCheck(
            "execution",
            models.CheckConstraint(
                condition=_one_of("status", EXECUTION_STATUSES),
                name="execution_status_valid",
            ),
        ),
        ReplaceCheck(
            "execution",
            models.CheckConstraint(
                condition=~_one_of("status", TERMINAL_STATUSES) | Q(finished_at__isnull=False),
                name="execution_terminal_has_finished_at",
            ),
        ),
        ReplaceCheck(
            "auditevent",
            models.CheckConstraint(condition=_one_of("type", AUDIT_TYPES), name="audit_type_valid"),
        ),
        ReplaceCheck(
            "actionexecution",
            models.CheckConstraint(
                condition=_one_of("status", CHECKPOINT_STATUSES),
                name="action_execution_status_valid",
            ),
        ),
        ReplaceCheck(
            "actionexecution",
            models.CheckConstraint(
                condition=_one_of("effect", EFFECTS), name="action_execution_effect_valid"
            ),
        ),
        ReplaceCheck(
            "executionevent",
            models.CheckConstraint(
                condition=_one_of("status", EVENT_STATUSES),
                name="execution_event_status_valid",
            ),
        ),
        ReplaceCheck(
            "actionattempt",
            models.CheckConstraint(
                condition=_one_of("status", CHECKPOINT_STATUSES),
                name="action_attempt_status_valid",
            ),
        ),
    ]
