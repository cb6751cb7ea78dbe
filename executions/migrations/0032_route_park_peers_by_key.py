"""The peers a park reads in claim order are then looked up by key (docs/adr/0009, 0022).

route_park_peers (migrations 0022, 0028, 0031) reads PEERS_AHEAD due ids from
execution_claim_idx, then finds those rows. Tested `e.status = 'PENDING'`, they were found by
an index whose predicate that proves, walked over every due row for the ids, as the statistics
had it: execution_fair_idx if analysed with finished history and nothing due (39 ms for 1,000
peers among the plan test's 5,000 due rows), execution_claim_idx if counted empty (85 ms), not
execution_pkey (4 ms). The status is now tested as the fence tests it, `IS NOT DISTINCT FROM`,
which proves no partial index. The function only.
"""

import importlib

from django.db import migrations

_PEERS = importlib.import_module("executions.migrations.0022_route_park_peers")
_DEALT = importlib.import_module("executions.migrations.0031_route_turns_dealt_by_tenant")

_PROVES = "AND e.status = 'PENDING' AND e.next_attempt_at <= p_parked_at"
_PROVES_NONE = "AND e.status IS NOT DISTINCT FROM 'PENDING' AND e.next_attempt_at <= p_parked_at"


def _replaced(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise ValueError(f"not found once in the text replaced: {old}")
    return text.replace(old, new)


# Read by the plan test as it stands here.
PEERS_QUERY = _replaced(_PEERS.PEERS_QUERY, _PROVES, _PROVES_NONE)
PEERS = _replaced(_DEALT.PEERS, _PEERS.PEERS_QUERY, PEERS_QUERY)


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0031_route_turns_dealt_by_tenant"),
    ]

    operations = [
        migrations.RunSQL(PEERS, _DEALT.PEERS),
    ]
