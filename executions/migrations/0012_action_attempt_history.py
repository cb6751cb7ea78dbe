"""The attempt history: one row per ended attempt of an action that did not succeed, written by
the statement that settles it (a checkpoint keeps only its latest attempt). A new table, so it
rewrites nothing; reversing drops it with what it holds."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0011_execution_dispatch_principal"),
    ]

    operations = [
        migrations.CreateModel(
            name="ActionAttempt",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("action_id", models.CharField(max_length=100)),
                ("attempt", models.IntegerField()),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("RUNNING", "Running"),
                            ("SUCCEEDED", "Succeeded"),
                            ("FAILED", "Failed"),
                            ("UNKNOWN", "Unknown"),
                            ("WAITING", "Waiting"),
                            ("ACCEPTED", "Accepted"),
                        ],
                        max_length=16,
                    ),
                ),
                ("error_code", models.CharField(blank=True, max_length=64, null=True)),
                ("fencing_token", models.BigIntegerField(help_text="The token of the writer.")),
                ("started_at", models.DateTimeField()),
                ("finished_at", models.DateTimeField()),
                (
                    "execution",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="attempt_history",
                        to="executions.execution",
                    ),
                ),
            ],
            options={
                "db_table": "action_attempt",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("execution", "action_id", "attempt"), name="action_attempt_uniq"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            (
                                "status__in",
                                [
                                    "RUNNING",
                                    "SUCCEEDED",
                                    "FAILED",
                                    "UNKNOWN",
                                    "WAITING",
                                    "ACCEPTED",
                                ],
                            )
                        ),
                        name="action_attempt_status_valid",
                    ),
                ],
            },
        ),
    ]
