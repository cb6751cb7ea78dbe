from django.db import migrations, models

# The audit types after this migration, as the audit_type_valid constraint lists them.
TYPES = [
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
]


class Migration(migrations.Migration):
    """The two-person rule's audit events: a replay proposed (RECONCILIATION_PROPOSED) and a
    proposal rejected (RECONCILIATION_REJECTED). Only the field's choices and the check constraint change; reversing it
    fails while such events exist, as an append-only table must."""

    dependencies = [
        ("executions", "0008_execution_reclaims"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="type",
            field=models.CharField(
                choices=[(name, name.replace("_", " ").title()) for name in TYPES], max_length=40
            ),
        ),
        migrations.RemoveConstraint(model_name="auditevent", name="audit_type_valid"),
        migrations.AddConstraint(
            model_name="auditevent",
            constraint=models.CheckConstraint(
                condition=models.Q(("type__in", TYPES)), name="audit_type_valid"
            ),
        ),
    ]
