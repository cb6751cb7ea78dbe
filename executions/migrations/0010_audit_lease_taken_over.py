from django.db import migrations, models


class Migration(migrations.Migration):
    """LEASE_TAKEN_OVER: the claim records a takeover of an expired lease (previous owner and
    token, when that lease expired, new owner and token) in the audit trail; a partial index holds
    the takeovers alone, for the Workers page."""

    dependencies = [
        ("executions", "0009_audit_two_person"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="auditevent",
            name="audit_type_valid",
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="type",
            field=models.CharField(
                choices=[
                    ("REQUEST_CREATED", "Request Created"),
                    ("TRANSITION_ACCEPTED", "Transition Accepted"),
                    ("RETRY_SCHEDULED", "Retry Scheduled"),
                    ("TRANSITION_COMPLETED", "Transition Completed"),
                    ("EXECUTION_FAILED", "Execution Failed"),
                    ("EXECUTION_SUSPENDED", "Execution Suspended"),
                    ("EXECUTION_RESUMED", "Execution Resumed"),
                    ("EXECUTION_CANCELLED", "Execution Cancelled"),
                    ("RECONCILIATION_REQUIRED", "Reconciliation Required"),
                    ("RECONCILIATION_EVIDENCE", "Reconciliation Evidence"),
                    ("RECONCILIATION_RESOLVED", "Reconciliation Resolved"),
                    ("RECONCILIATION_PROPOSED", "Reconciliation Proposed"),
                    ("RECONCILIATION_REJECTED", "Reconciliation Rejected"),
                    ("LEASE_TAKEN_OVER", "Lease Taken Over"),
                ],
                max_length=40,
            ),
        ),
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(
                condition=models.Q(("type", "LEASE_TAKEN_OVER")),
                fields=["id"],
                name="audit_takeover_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="auditevent",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "type__in",
                        [
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
                        ],
                    )
                ),
                name="audit_type_valid",
            ),
        ),
    ]
