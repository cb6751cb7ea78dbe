"""The order index of webhook deliveries led by the execution, with a predicate of its own, so
that the claim's earlier-delivery probe can use no other index whatever the statistics
(docs/adr/0009, docs/adr/0020).

The probe asked for a PENDING delivery of the same subscription and execution with a smaller
id. Planned on an empty outbox whose column statistics were taken during a backlog (a worker
connection keeps the plan it makes first), it walked the primary key for every smaller id, or
the due index for every due delivery, once per candidate: a claim's cost grew with the outbox.
Now the index's leading column (execution_id) and its predicate (neither DELIVERED nor FAILED:
PENDING, by the status constraint, in words no other index's predicate is proved by) are in no
other index, and the probe names the other columns only inside row comparisons led by
execution_id, which no other index can take. Built before the old one is dropped, CONCURRENTLY,
so writes go on meanwhile (hence not atomic).
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models
from django.db.models import Q


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("executions", "0029_webhook_outbox_without_foreign_keys"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="webhookdelivery",
            index=models.Index(
                fields=["execution_id", "subscription", "id"],
                name="webhook_delivery_exec_idx",
                condition=~Q(status__in=["DELIVERED", "FAILED"]),
            ),
        ),
        RemoveIndexConcurrently(model_name="webhookdelivery", name="webhook_delivery_order_idx"),
    ]
