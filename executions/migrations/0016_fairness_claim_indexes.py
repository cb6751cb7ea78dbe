from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models
from django.db.models import Q

CLAIMABLE = ("PENDING", "RETRY_WAIT", "RUNNING", "SUSPENDED")


class Migration(migrations.Migration):
    """WORKER_FAIRNESS=tenant's access paths (docs/adr/0017): live work by tenant in claim order,
    and the executions each tenant holds. Built CONCURRENTLY, so writes go on while they build
    (hence not atomic); both hold live rows only."""

    atomic = False

    dependencies = [
        ("executions", "0015_execution_trace_context"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="execution",
            index=models.Index(
                fields=["scope", "next_attempt_at", "created_at", "id"],
                name="execution_fair_idx",
                condition=Q(status__in=CLAIMABLE),
            ),
        ),
        AddIndexConcurrently(
            model_name="execution",
            index=models.Index(
                fields=["scope", "lease_expires_at"],
                name="execution_held_idx",
                condition=Q(status="RUNNING"),
            ),
        ),
    ]
