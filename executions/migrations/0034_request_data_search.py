"""The admin's search of requests by their case-summary fields (customer, reference: any value a
flow's `caseSummary` points at) is JSON containment on the data, `data @> {"customer": "cus_ada"}`
(executions/admin/search.py): request_data_search_idx, a GIN index of `jsonb_path_ops` (one hash
per path to a value), serves it for every flow at once. Its pending list (`fastupdate`) is kept
but small (256 kB): measured server-side, a request's insert and update cost 18 µs without the
index, 39 µs with the list, 85 µs without it; a write that fills the list flushes 256 kB, not the
default 4 MB. The same search
takes an exact owner of any tenant, which the (scope, owner) list index served only by reading it
whole: request_owner_search_idx. Built CONCURRENTLY, so writes go on (hence not atomic).
"""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("executions", "0033_execution_compensation_detail"),
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
                fastupdate=True,
                gin_pending_list_limit=256,
            ),
        ),
    ]
