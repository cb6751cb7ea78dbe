"""The wake order's held counts capped as the claim's are (docs/adr/0019, "Held counts capped").

route_park_tenant_order (migration 0021) ranks a tenant's parks after the executions it holds
now, and counted every one: each count reads every held row's heap tuple too, so a wake-up's
cost grew with what one tenant holds. It now counts up to HELD_COUNTED, as the claim does
(executions/sql/fairness.py): tenants holding at least that many rank as holding that many.
The function only.
"""

import importlib

from django.db import migrations

_TENANT = importlib.import_module("executions.migrations.0021_route_park_tenant")

HELD_COUNTED = 100  # executions/sql/fairness.HELD_COUNTED when this was written

_FULL_COUNT = """(SELECT count(*) FROM execution AS r
             WHERE r.scope = t.scope AND r.status = 'RUNNING'
               AND r.lease_expires_at > clock_timestamp()) AS held"""
_CAPPED_COUNT = """(SELECT count(*)
              FROM (SELECT 1 FROM execution AS r
                     WHERE r.scope = t.scope AND r.status = 'RUNNING'
                       AND r.lease_expires_at > clock_timestamp()
                     LIMIT %(held)s) AS r) AS held""".replace("%(held)s", str(HELD_COUNTED))


def _replaced(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise ValueError(f"not found once in the text replaced: {old}")
    return text.replace(old, new)


# Read by the plan test as it stands here.
ORDER_QUERY = _replaced(_TENANT.ORDER_QUERY, _FULL_COUNT, _CAPPED_COUNT)
ORDER = _replaced(_TENANT.ORDER, _TENANT.ORDER_QUERY, ORDER_QUERY).replace(
    "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"
)
UNDO = _TENANT.ORDER.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0024_checkpoint_fillfactor"),
    ]

    operations = [
        migrations.RunSQL(ORDER, UNDO),
    ]
