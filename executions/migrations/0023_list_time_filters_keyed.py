"""The lists' time filters (requests `updatedAfter`, executions `finishedAfter`) with the keyset's
columns and the owner in their indexes: a page ordered by creation and filtered by a later time
picks its ids from (scope, time, created_at, id) INCLUDE (owner) alone, an index-only scan of the
rows the filter keeps, where walking the scope's creation index past the rows it drops read the
whole scope ten pages deep (docs/adr/0015-lists-by-keyset-on-their-own-indexes.md). Each new index is built before the one
it replaces is dropped, CONCURRENTLY, so writes go on meanwhile (hence not atomic).
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models
from django.db.models import Q


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("executions", "0022_route_park_peers"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="request",
            index=models.Index(
                fields=["scope", "updated_at", "created_at", "id"],
                name="request_updated_at_list_idx",
                include=["owner"],
            ),
        ),
        RemoveIndexConcurrently(model_name="request", name="request_updated_list_idx"),
        AddIndexConcurrently(
            model_name="execution",
            index=models.Index(
                fields=["scope", "finished_at", "created_at", "id"],
                name="execution_finished_at_list_idx",
                include=["owner"],
                condition=Q(finished_at__isnull=False),
            ),
        ),
        RemoveIndexConcurrently(model_name="execution", name="execution_finished_list_idx"),
    ]
