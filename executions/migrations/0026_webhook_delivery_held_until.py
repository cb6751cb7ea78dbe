"""A claimed webhook delivery held by a column in no index (docs/adr/0020).

The claim used to push `next_attempt_at`, a column of webhook_delivery_due_idx, past the timeout:
every claim was an update outside HOT, a new entry in each of the table's five indexes for every
attempt. The hold is now `held_until`, in no index and no index's predicate, so the claim can be
a HOT update; for that the row's page needs room for its new version, so pages written from now
on are filled to half (a claim of many rows of one page, and their results soon after).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("executions", "0025_route_park_held_counted"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhookdelivery",
            name="held_until",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.RunSQL(
            "ALTER TABLE webhook_delivery SET (fillfactor = 50)",
            "ALTER TABLE webhook_delivery RESET (fillfactor)",
        ),
    ]
