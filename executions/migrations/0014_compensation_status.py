from django.db import migrations, models


class Migration(migrations.Migration):
    """Compensation (docs/flow-format.md#compensation): the final status COMPENSATED (valid,
    finished, purgeable), the execution's compensation cause, room for a compensation step's
    action id "<id>:compensate", and the two audit types. Widening a varchar and adding a
    nullable column rewrite nothing; the checks are validated once over the existing rows."""

    dependencies = [
        ("executions", "0013_list_access_paths"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="auditevent",
            name="audit_type_valid",
        ),
        migrations.RemoveConstraint(
            model_name="execution",
            name="execution_status_valid",
        ),
        migrations.RemoveConstraint(
            model_name="execution",
            name="execution_terminal_has_finished_at",
        ),
        migrations.RemoveIndex(
            model_name="execution",
            name="execution_purge_idx",
        ),
        migrations.AddField(
            model_name="execution",
            name="compensation_cause",
            field=models.CharField(
                blank=True,
                help_text="The errorCode its forward path failed with, once it compensates.",
                max_length=64,
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="actionattempt",
            name="action_id",
            field=models.CharField(max_length=120),
        ),
        migrations.AlterField(
            model_name="actionexecution",
            name="action_id",
            field=models.CharField(max_length=120),
        ),
        migrations.AlterField(
            model_name="actionexecution",
            name="external_key",
            field=models.CharField(
                help_text="executionId:actionId, or executionId:actionId:compensate",
                max_length=200,
            ),
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
                    ("COMPENSATION_STARTED", "Compensation Started"),
                    ("EXECUTION_COMPENSATED", "Execution Compensated"),
                ],
                max_length=40,
            ),
        ),
        migrations.AlterField(
            model_name="execution",
            name="status",
            field=models.CharField(
                choices=[
                    ("PENDING", "Pending"),
                    ("RUNNING", "Running"),
                    ("RETRY_WAIT", "Retry Wait"),
                    ("SUSPENDED", "Suspended"),
                    ("SUCCEEDED", "Succeeded"),
                    ("FAILED", "Failed"),
                    ("RECONCILIATION_REQUIRED", "Reconciliation Required"),
                    ("CANCELLED", "Cancelled"),
                    ("COMPENSATED", "Compensated"),
                ],
                db_default="PENDING",
                max_length=32,
            ),
        ),
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(
                condition=models.Q(
                    ("purged_at__isnull", True),
                    ("status__in", ("SUCCEEDED", "FAILED", "CANCELLED", "COMPENSATED")),
                ),
                fields=["finished_at", "id"],
                name="execution_purge_idx",
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
                            "COMPENSATION_STARTED",
                            "EXECUTION_COMPENSATED",
                        ],
                    )
                ),
                name="audit_type_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="execution",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "PENDING",
                            "RUNNING",
                            "RETRY_WAIT",
                            "SUSPENDED",
                            "SUCCEEDED",
                            "FAILED",
                            "RECONCILIATION_REQUIRED",
                            "CANCELLED",
                            "COMPENSATED",
                        ],
                    )
                ),
                name="execution_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="execution",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("status__in", ("SUCCEEDED", "FAILED", "CANCELLED", "COMPENSATED")),
                        _negated=True,
                    ),
                    ("finished_at__isnull", False),
                    _connector="OR",
                ),
                name="execution_terminal_has_finished_at",
            ),
        ),
    ]
