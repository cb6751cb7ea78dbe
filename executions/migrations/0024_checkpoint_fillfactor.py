"""Checkpoints stored with room for their next version (docs/adr/0004, "Consequences").

A checkpoint row is inserted RUNNING before its adapter call and rewritten a few milliseconds
later as SUCCEEDED (or settled): status, output and finished_at, none of them in an index, so
the rewrite can be a HOT update, with no new entry in any of the table's three indexes, but only
if the row's page has room for the new version. Filled to 100 %, the pages had none: 10-18 % of
those updates were HOT in a no-op `bench/pgcost.py` run; with 30 % of each page kept free by
inserts, about 70 %. Only pages written from now on are filled to 70 %; existing ones are left as
they are (no rewrite of the table).
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0023_list_time_filters_keyed"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE action_execution SET (fillfactor = 70)",
            "ALTER TABLE action_execution RESET (fillfactor)",
        ),
    ]
