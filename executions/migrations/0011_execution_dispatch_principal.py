from django.db import migrations, models


class Migration(migrations.Migration):
    """The principal of whoever caused an execution's next (or current) dispatch: the accepting
    caller, then the resuming caller; NULL for `system` (claim.py sets it on a takeover or a
    timed-out wait). Nullable, so adding it rewrites no row; the live executions of older code
    are given their accepting caller, which is who those dispatches carried before."""

    dependencies = [
        ("executions", "0010_audit_lease_taken_over"),
    ]

    operations = [
        migrations.AddField(
            model_name="execution",
            name="dispatch_principal",
            field=models.JSONField(
                blank=True,
                null=True,
                help_text="Who caused the current or next dispatch ({subject, scope, roles}); "
                "null: system (a timeout, recovery, or an operator's requeue).",
            ),
        ),
        migrations.RunSQL(
            "UPDATE execution SET dispatch_principal = actor_snapshot "
            "WHERE status IN ('PENDING', 'RETRY_WAIT', 'RUNNING', 'SUSPENDED') "
            "AND actor_snapshot <> '{}'::jsonb",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
