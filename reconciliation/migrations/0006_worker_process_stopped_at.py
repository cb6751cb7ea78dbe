"""The worker registry's `stopped_at`: set by a worker that stopped cleanly, its work drained
(executions.sql.LIMITS_WITHDRAW), so its route limits no longer hold back a worker started with
others, and the Workers page reads it as stopped. Nullable with no default: nothing is rewritten."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("reconciliation", "0005_limits_pause_route_permission"),
    ]

    operations = [
        migrations.AddField(
            model_name="workerprocess",
            name="stopped_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
