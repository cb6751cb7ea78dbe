"""The admin's search of requests by their case-summary fields (customer, reference: any value a
flow's `caseSummary` points at) is JSON containment on the data, `data @> {"customer": "cus_ada"}`
(executions/admin/search.py): request_data_search_idx, a GIN index of `jsonb_path_ops` (one hash
per path to a value), serves it for every flow at once; without a pending list (`fastupdate`
off), so no request write pays for flushing one and no search for reading one. The same search
takes an exact owner of any tenant, which the (scope, owner) list index served only by reading it
whole: request_owner_search_idx. Built CONCURRENTLY, so writes go on (hence not atomic).
"""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("executions", "0032_route_park_peers_by_key"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="request",
            index=models.Index(fields=["owner"], name="request_owner_search_idx"),
        ),
        AddIndexConcurrently(
            model_name="request",
            index=GinIndex(
                fields=["data"],
                opclasses=["jsonb_path_ops"],
                name="request_data_search_idx",
                fastupdate=False,
            ),
        ),
    ]
