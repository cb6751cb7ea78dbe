from django.db import migrations, models


class Migration(migrations.Migration):
    """The poison cap's bookkeeping: the time of an execution's latest claim and its consecutive
    takeovers without progress (WORKER_MAX_RECLAIMS). Both are nullable or defaulted in the
    database, so adding them rewrites no row and the old code keeps working."""

    dependencies = [
        ("executions", "0007_execution_purged_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="execution",
            name="claimed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="execution",
            name="reclaims",
            field=models.IntegerField(db_default=0),
        ),
    ]
